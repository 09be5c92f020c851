#include "hang_verdict.h"

#include <algorithm>
#include <optional>

#include "common/dcheck.h"

namespace lens_tools {
namespace {

std::vector<Group> groups_of(const std::vector<Position>& positions) {
  std::vector<Group> groups;
  for (const Position& p : positions) {
    auto same = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return g.first.iteration == p.iteration && g.first.where() == p.where();
    });
    if (same == groups.end()) {
      same = groups.emplace(groups.end());
      same->first = p;
    }
    same->ranks.push_back(p.rank);
    same->since_seconds = std::max(same->since_seconds, p.since_seconds);
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const Group& a, const Group& b) { return a.ranks.size() > b.ranks.size(); });
  return groups;
}

// The group that computes while every other rank has moved on (a later phase, or a wait): its innermost span is not
// a wait and has been open decisively longer than any other rank's (kStuckMargin), so the others' positions are newer
// than its own. A healthy job caught by a signal has every position a fraction of a second to a few seconds old, all
// of about the same age; a stopped rank's ages while the others go on. None when no group stands out so.
std::optional<std::size_t> stuck_in_compute(const std::vector<Group>& groups) {
  std::optional<std::size_t> oldest;
  for (std::size_t i = 0; i < groups.size(); ++i)
    if (!oldest || groups[i].since_seconds > groups[*oldest].since_seconds) oldest = i;
  if (!oldest || groups.size() < 2 || groups[*oldest].first.waits()) return std::nullopt;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    if (i == *oldest) continue;
    const double other = groups[i].since_seconds, stuck = groups[*oldest].since_seconds;
    if (stuck < other * kStuckMargin.ratio || stuck < other + kStuckMargin.seconds) return std::nullopt;
  }
  return oldest;
}

// True when `outer`'s open spans are the first of `inner`'s and fewer: a rank there sits in a span `inner`'s rank is
// deeper inside, between that span's children.
bool encloses(const Position& outer, const Position& inner) {
  return outer.chain.size() < inner.chain.size() &&
         std::equal(outer.chain.begin(), outer.chain.end(), inner.chain.begin());
}

// The group computing inside spans every other rank sits in (or waits): the others' positions enclose its own, so
// they sit between those spans' children, in code lens keeps no span of (evaluation's receives and its all-reduce, a
// step's last collectives), waiting for what it computes. The hang that the ages cannot show: a rank stopped at the
// start of an evaluation step, the others in that step or its evaluation from the same moment. Its position must be
// at least kStuckMargin.seconds old: a running job's compute positions are younger.
std::optional<std::size_t> deepest_in_compute(const std::vector<Group>& groups) {
  std::optional<std::size_t> deepest;
  for (std::size_t i = 0; i < groups.size(); ++i)
    if (!groups[i].first.waits() && (!deepest || groups[i].first.chain.size() > groups[*deepest].first.chain.size()))
      deepest = i;
  if (!deepest || groups.size() < 2 || groups[*deepest].since_seconds < kStuckMargin.seconds) return std::nullopt;
  for (std::size_t i = 0; i < groups.size(); ++i)
    if (i != *deepest && !groups[i].first.waits() && !encloses(groups[i].first, groups[*deepest].first))
      return std::nullopt;
  return deepest;
}

std::vector<std::size_t> behind_of(const std::vector<Position>& positions, const std::vector<Group>& groups) {
  std::int64_t lowest = INT64_MAX, highest = INT64_MIN;
  for (const Position& p : positions) {
    lowest = std::min(lowest, p.iteration);
    highest = std::max(highest, p.iteration);
  }
  const Group& most = groups.front();
  std::vector<std::size_t> behind;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const Position& p = groups[i].first;
    if (lowest != highest ? p.iteration == lowest : (i != 0 && most.first.waits() && !p.waits())) behind.push_back(i);
  }
  if (behind.empty() && lowest == highest) {
    std::optional<std::size_t> stuck = stuck_in_compute(groups);
    if (!stuck) stuck = deepest_in_compute(groups);
    if (stuck) behind.push_back(*stuck);
  }
  return behind;
}

std::vector<RankRange> missing_of(const std::vector<Position>& positions, int world_size) {
  std::vector<RankRange> missing;
  int next = 0;
  for (const Position& p : positions) {
    if (p.rank > next) missing.emplace_back(next, std::min(p.rank, world_size) - 1);
    next = std::max(next, p.rank + 1);
  }
  if (next < world_size) missing.emplace_back(next, world_size - 1);
  std::erase_if(missing, [](const RankRange& r) { return r.second < r.first; });
  return missing;
}

}  // namespace

const std::string& Position::where() const {
  static const std::string kNowhere = "no open span";
  return chain.empty() ? kNowhere : chain.back();
}

std::string Verdict::never_entered(const Group& group) const {
  const Position& waited_in = most().first;
  const std::vector<std::string>& chain = group.first.chain;
  if (!waited_in.waits() || std::find(chain.begin(), chain.end(), waited_in.where()) != chain.end()) return {};
  return waited_in.where();
}

Verdict judge(std::vector<Position> positions, int world_size) {
  LENS_DCHECK(!positions.empty());
  std::sort(positions.begin(), positions.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  Verdict v;
  v.world_size = world_size;
  v.groups = groups_of(positions);
  v.behind = behind_of(positions, v.groups);
  v.missing = missing_of(positions, world_size);
  for (const auto& [first, last] : v.missing) v.missing_count += last - first + 1;
  v.first_written_seconds = 1e300;
  for (const Position& p : positions) {
    v.first_written_seconds = std::min(v.first_written_seconds, p.written_seconds);
    v.last_written_seconds = std::max(v.last_written_seconds, p.written_seconds);
    ++v.reasons[p.reason];
  }
  for (const Position& p : positions)
    if (p.written_seconds < v.last_written_seconds - kStaleSeconds)
      v.stale.push_back({p.rank, v.last_written_seconds - p.written_seconds});
  v.positions = std::move(positions);
  return v;
}

}  // namespace lens_tools
