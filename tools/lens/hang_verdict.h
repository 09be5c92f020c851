// The verdict of `lens hang`: from where each rank is (its snapshot, read by hang.cc), which ranks are behind, which
// wrote no snapshot, whose snapshot is stale, and the ranks grouped by where they are. A pure function of the
// positions, printed by hang.cc as text or JSON.
//
//   std::vector<Position> positions = ...;  // one a snapshot
//   const Verdict v = judge(std::move(positions), /*world_size=*/8);
//   for (const Group& g : v.behind()) ...
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace lens_tools {

// Where one rank is: the innermost open span of its training thread (the thread with the most open spans).
struct Position {
  int rank = 0;
  std::int64_t iteration = -1;     // the iteration it is in (last completed + 1; -1: before the first)
  std::vector<std::string> chain;  // open span names, outermost first
  std::string group;               // the innermost span's span group
  std::string detail;              // its attributes, "microbatch 2, stage first"
  double since_seconds = 0;        // how long the innermost span has been open
  std::string reason;              // what made the rank write it: "signal", "watchdog"
  double written_seconds = 0;      // when it was written, in seconds since the Unix epoch

  const std::string& where() const;
  bool waits() const { return group == "communication"; }
};

// Ranks at the same place: the same iteration and innermost span name.
struct Group {
  Position first;            // the lowest rank's position
  std::vector<int> ranks;    // in rank order
  double since_seconds = 0;  // the longest any of them has been there
};

// Ranks [first, last].
using RankRange = std::pair<int, int>;

// A snapshot written long (kStaleSeconds) before the newest: likely from an earlier signal or stall.
struct StaleSnapshot {
  int rank = 0;
  double older_seconds = 0;  // than the newest snapshot
};
inline constexpr double kStaleSeconds = 60;

// How much longer than every other rank's position a rank's compute position must be open to be behind when all
// ranks are in one iteration and none waits where most do: both 1.5 times and 1 s longer (a stopped rank ages while
// the others go on; the positions of a running job caught by a signal are all about as old).
inline constexpr struct { double ratio = 1.5, seconds = 1.0; } kStuckMargin{};

struct Verdict {
  int world_size = 0;
  std::vector<Position> positions;  // by rank
  std::vector<Group> groups;        // the largest first
  // Indices into `groups`: the groups at the lowest iteration when the ranks' iterations differ; else those not
  // waiting where most ranks wait; else the one computing for decisively longer than any other rank has been where
  // it is (kStuckMargin): the others moved on to a later phase or a wait; else the one computing inside spans that
  // every other rank sits in or waits (for at least kStuckMargin.seconds). Where none is, the positions do not tell:
  // what holds the ranks is inside them, where lens keeps no span.
  std::vector<std::size_t> behind;
  // The ranks below the world size without a snapshot, as ranges (as many as there are gaps between snapshots).
  std::vector<RankRange> missing;
  std::int64_t missing_count = 0;
  std::vector<StaleSnapshot> stale;
  double first_written_seconds = 0, last_written_seconds = 0;
  std::map<std::string, int> reasons;  // how many snapshots each reason wrote

  const Group& most() const { return groups.front(); }
  // The span most ranks wait in that a behind group never entered, or empty: what the others wait for it to reach.
  std::string never_entered(const Group& group) const;
};

// The verdict on the snapshots of a job of `world_size` ranks. `positions` is not empty; each rank at most once.
Verdict judge(std::vector<Position> positions, int world_size);

}  // namespace lens_tools
