#include "hang.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/files.h"
#include "common/process_identity.h"
#include "common/text.h"
#include "hang_verdict.h"
#include "run_reader.h"  // kMaxRanks

namespace lens_tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kBadInput = 2;
constexpr const char* kSnapshotSuffix = ".snapshot.json";
constexpr const char* kProcessSuffix = ".process.json";

// The files rank<R><suffix> in RUN_DIR, or in the directory below it that has the newest one.
std::vector<fs::path> find_rank_files(const fs::path& run_dir, const std::string& suffix) {
  auto is_rank_file = [&](const fs::path& p) {
    const std::string name = p.filename().string();
    return name.starts_with("rank") && name.ends_with(suffix);
  };
  std::error_code error;
  std::map<fs::path, std::vector<fs::path>> by_dir;
  std::map<fs::path, fs::file_time_type> newest;
  auto add = [&](const fs::path& file) {
    by_dir[file.parent_path()].push_back(file);
    newest[file.parent_path()] = std::max(newest[file.parent_path()], fs::last_write_time(file, error));
  };
  for (const auto& entry : fs::directory_iterator(run_dir, error)) {
    if (entry.is_regular_file(error) && is_rank_file(entry.path())) add(entry.path());
    if (entry.is_directory(error))
      for (const auto& inner : fs::directory_iterator(entry.path(), error))
        if (inner.is_regular_file(error) && is_rank_file(inner.path())) add(inner.path());
  }
  if (by_dir.empty()) return {};
  auto latest =
      std::max_element(newest.begin(), newest.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  return by_dir[latest->first];
}

std::string scalar_text(const json& v) {
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    return s.size() > 40 ? s.substr(0, 40) + "..." : s;
  }
  if (v.is_boolean() || v.is_number()) return v.dump();
  return "";
}

// Appends printf-formatted text to `page`, whatever its length.
void append(std::string& page, const char* format, ...) __attribute__((format(printf, 2, 3)));
void append(std::string& page, const char* format, ...) {
  va_list args, copy;
  va_start(args, format);
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  if (n > 0) {
    const std::size_t at = page.size();
    page.resize(at + static_cast<std::size_t>(n) + 1);
    std::vsnprintf(page.data() + at, static_cast<std::size_t>(n) + 1, format, args);
    page.resize(at + static_cast<std::size_t>(n));
  }
  va_end(args);
}

// A rank or world size a snapshot claims, within [lowest, kMaxRanks]: memory and output follow the snapshots that
// are there, never the number one of them claims.
int rank_in_range(std::int64_t value, std::int64_t lowest, const char* what) {
  if (value < lowest || value > lens_tools::kMaxRanks)
    throw std::out_of_range(std::string(what) + " " + std::to_string(value) + " is outside [" + std::to_string(lowest) +
                            ", " + std::to_string(lens_tools::kMaxRanks) + "]");
  return static_cast<int>(value);
}

// The missing ranks one by one for --json, the first kListedMissing of them (missing_count says how many).
constexpr std::int64_t kListedMissing = 10000;
nlohmann::json missing_listed(const std::vector<RankRange>& ranges) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [first, last] : ranges)
    for (std::int64_t r = first; r <= last && static_cast<std::int64_t>(out.size()) < kListedMissing; ++r)
      out.push_back(r);
  return out;
}

std::string ranges_text(const std::vector<RankRange>& ranges) {
  std::string out;
  for (const auto& [first, last] : ranges) {
    out += (out.empty() ? "" : ", ") + std::to_string(first);
    if (last > first) out += (last == first + 1 ? ", " : "-") + std::to_string(last);
  }
  return out;
}

// An integer field of a file: a float (1.8e21) or a number past int64 is refused with an exception (the caller
// says the file is not one), never converted: that conversion is undefined behaviour.
std::int64_t integer_field(const json& v) {
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX))
    throw std::invalid_argument("an integer field holds " + v.dump());
  return v.get<std::int64_t>();
}

Position position_of(const json& s) {
  Position p;
  p.rank = rank_in_range(integer_field(s.at("rank")), 0, "rank");
  p.reason = s.at("reason").get<std::string>();
  // As a double: a value past 2^64 or written as a float (the readers fuzzer's 1.8e21) must not reach an integer.
  p.written_seconds = s.at("written_unix_nano").get<double>() / 1e9;
  const json& last = s.at("last_iteration_completed");
  p.iteration = last.is_null() ? -1 : std::min(integer_field(last), INT64_MAX - 1) + 1;
  const json* training = nullptr;
  for (const json& t : s.at("threads")) {
    const std::size_t open = t.at("open_spans").size();
    if (training == nullptr || open > training->at("open_spans").size()) training = &t;
  }
  if (training == nullptr || training->at("open_spans").empty()) return p;
  for (const json& span : training->at("open_spans")) p.chain.push_back(span.at("name").get<std::string>());
  const json& inner = training->at("open_spans").back();
  p.group = inner.at("group").get<std::string>();
  p.since_seconds = inner.at("open_seconds").get<double>();
  int shown = 0;
  for (const auto& [key, value] : inner.at("attributes").items()) {
    const std::string text = scalar_text(value);
    if (text.empty() || shown == 4) continue;
    p.detail.append(shown++ ? ", " : "").append(key).append(" ").append(text);
  }
  return p;
}

// "0-2, 5"
std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string ranks_word(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, s < 10 ? "%.1f s" : "%.0f s", s);
  return text;
}

std::string describe(const Group& g) {
  const Position& p = g.first;
  const bool one = g.ranks.size() == 1;
  std::string out = ranks_word(g.ranks) + (p.chain.empty() ? (one ? " has " : " have ")
                                           : p.waits()     ? (one ? " waits in " : " wait in ")
                                                           : (one ? " is in " : " are in "));
  out += p.where();
  if (one && !p.detail.empty()) out += " (" + p.detail + ")";
  out += p.iteration >= 0 ? " at iteration " + std::to_string(p.iteration) : " before the first iteration";
  if (!p.chain.empty()) out += " since " + seconds_text(g.since_seconds);
  return out;
}

// The positions of the snapshots in `files`, one per rank (the newest where two directories hold one of the same
// rank), and the run ids they name; throws std::runtime_error naming a file that is not a snapshot.
std::vector<Position> read_positions(const std::vector<fs::path>& files, int& world_size,
                                     std::set<std::string>& run_ids) {
  std::map<int, Position> by_rank;
  world_size = 0;
  for (const fs::path& file : files) {
    try {
      std::ifstream in(file);
      const json s = json::parse(in);
      world_size = std::max(world_size, rank_in_range(integer_field(s.at("world_size")), 1, "world_size"));
      run_ids.insert(s.at("run_id").get<std::string>());
      Position p = position_of(s);
      auto [it, added] = by_rank.emplace(p.rank, p);
      if (!added && p.written_seconds > it->second.written_seconds) it->second = std::move(p);
    } catch (const std::exception& e) {
      throw std::runtime_error(file.string() + " is not a hang snapshot: " + e.what());
    }
  }
  std::vector<Position> positions;
  positions.reserve(by_rank.size());
  for (auto& [rank, p] : by_rank) positions.push_back(std::move(p));
  return positions;
}

json verdict_json(const Verdict& v, const std::vector<std::string>& dirs) {
  json behind = json::array(), groups = json::array();
  for (std::size_t i : v.behind)
    for (int r : v.groups[i].ranks) behind.push_back(r);
  for (const Group& g : v.groups)
    groups.push_back({{"ranks", g.ranks},
                      {"iteration", g.first.iteration},
                      {"span", g.first.chain.empty() ? json(nullptr) : json(g.first.where())},
                      {"waits", g.first.waits()},
                      {"since_seconds", g.since_seconds},
                      {"detail", g.first.detail},
                      {"open_spans", g.first.chain}});
  json stale = json::array();
  for (const StaleSnapshot& s : v.stale) stale.push_back(s.rank);
  return {{"run_dir", dirs.front()},
          {"run_dirs", dirs},
          {"world_size", v.world_size},
          {"missing", missing_listed(v.missing)},
          {"missing_count", v.missing_count},
          {"stale", stale},
          {"behind", behind},
          {"groups", groups}};
}

// Span names, details and reasons come from the snapshots: the page is escaped as a whole before it is printed.
std::string verdict_text(const Verdict& v, const std::string& dir) {
  std::string page;
  std::string why;
  for (const auto& [reason, n] : v.reasons) why += (why.empty() ? "" : ", ") + reason;
  append(page, "lens hang: %zu of %d ranks wrote a snapshot (%s), within %s, in %s\n", v.positions.size(), v.world_size,
         why.c_str(), seconds_text(v.last_written_seconds - v.first_written_seconds).c_str(), dir.c_str());
  for (std::size_t i : v.behind) {
    std::string line = "behind: " + describe(v.groups[i]);
    if (const std::string span = v.never_entered(v.groups[i]); !span.empty()) line += ", and never entered " + span;
    append(page, "%s\n", line.c_str());
  }
  if (!v.missing.empty())
    append(page, "%s %s: no snapshot (stopped, dead, or never got the signal)%s\n",
           v.missing_count == 1 ? "rank" : "ranks", ranges_text(v.missing).c_str(),
           v.behind.empty() ? ": the likeliest to be behind" : "");
  for (const StaleSnapshot& s : v.stale)
    append(page, "rank %d's snapshot is %s older than the newest: from an earlier signal or stall?\n", s.rank,
           seconds_text(s.older_seconds).c_str());
  if (v.behind.empty() && v.missing.empty())
    append(page,
           "no rank is behind by where it is: what holds the ranks is inside the spans below (a collective they all "
           "wait in, or a wait or a stall where lens keeps no span); their stacks tell (py-spy dump --pid PID, gdb "
           "-p PID)\n");
  for (const Group& g : v.groups) append(page, "  %s\n", describe(g).c_str());
  for (std::size_t i : v.behind) {
    std::string chain;
    for (const std::string& name : v.groups[i].first.chain) chain += (chain.empty() ? "" : " > ") + name;
    append(page, "  open spans of rank %d, outermost first: %s\n", v.groups[i].first.rank, chain.c_str());
  }
  return page;
}

}  // namespace

int hang(const std::vector<std::string>& run_dirs, bool as_json) {
  // One directory a node: a node whose directory is gone (or was never copied) leaves its ranks without a snapshot,
  // and the verdict names them so, from the world size the others wrote.
  std::vector<fs::path> files;
  std::vector<std::string> read_dirs;
  for (const std::string& dir : run_dirs) {
    const std::vector<fs::path> found = find_rank_files(dir, kSnapshotSuffix);
    if (found.empty()) {
      std::error_code error;
      std::fprintf(stderr, "lens hang: %s: %s\n", dir.c_str(),
                   fs::is_directory(dir, error) ? "no rank<R>.snapshot.json there" : "no such directory");
      continue;
    }
    files.insert(files.end(), found.begin(), found.end());
    read_dirs.push_back(found.front().parent_path().string());
  }
  const std::string inputs = inputs_text(run_dirs);
  if (files.empty()) {
    std::fprintf(stderr,
                 "lens hang: no rank<R>.snapshot.json under %s: run `lens hang RUN_DIR --signal` on each host of the "
                 "job (it sends the ranks MEGATRON_OTEL_HANG_SIGNAL, SIGUSR1 by default), or set "
                 "MEGATRON_OTEL_HANG_TIMEOUT, then look in <FILE_DIR>/<run id>\n",
                 inputs.c_str());
    return kBadInput;
  }
  int world_size = 0;
  std::set<std::string> run_ids;
  std::vector<Position> positions;
  try {
    positions = read_positions(files, world_size, run_ids);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lens hang: %s\n", e.what());
    return kBadInput;
  }
  if (run_ids.size() > 1) {  // two jobs' snapshots judged together would name a rank of neither
    std::string ids;
    for (const std::string& id : run_ids) ids += (ids.empty() ? "" : ", ") + id;
    std::fprintf(stderr, "lens hang: snapshots of %zu runs (%s) under %s: give the directories of one run\n",
                 run_ids.size(), ids.c_str(), inputs.c_str());
    return kBadInput;
  }
  const Verdict verdict = judge(std::move(positions), world_size);
  if (as_json)
    std::cout << verdict_json(verdict, read_dirs).dump(2) << "\n";
  else
    std::fputs(lens::internal::terminal_text(verdict_text(verdict, inputs_text(read_dirs))).c_str(), stdout);
  return 0;
}

namespace {

// A rank process as its record says, and what became of the signal.
struct RankProcess {
  fs::path dir;  // where its record is, and so its snapshot
  int rank = 0;
  pid_t pid = 0;
  std::string host;
  lens::internal::ProcessIdentity identity;
  std::optional<std::int64_t> uid;            // who the rank ran as, as its record says
  std::optional<std::int64_t> pid_namespace;  // where its pid means it (0 or absent: unknown)
  int signal = 0;                             // 0: the run has none
  std::string outcome;                        // "sent", or why not
};

std::optional<RankProcess> read_process_record(const fs::path& file) {
  const std::optional<std::string> text = lens::internal::read_regular_file(file.string(), 4096);
  if (!text) return std::nullopt;
  try {
    const json r = json::parse(*text);
    if (integer_field(r.at("lens_rank_process")) != 1) return std::nullopt;
    RankProcess p;
    p.rank = rank_in_range(integer_field(r.at("rank")), 0, "rank");
    const std::int64_t pid = integer_field(r.at("pid"));
    if (pid < INT32_MIN || pid > INT32_MAX) return std::nullopt;
    p.pid = static_cast<pid_t>(pid);
    p.host = r.at("host").get<std::string>();
    if (!r.at("start_ticks").is_number_unsigned()) return std::nullopt;  // a float or a negative: not a record
    p.identity = {r.at("boot_id").get<std::string>(), r.at("start_ticks").get<std::uint64_t>(),
                  r.at("comm").get<std::string>()};
    if (r.contains("uid")) p.uid = integer_field(r.at("uid"));
    if (r.contains("pid_namespace")) p.pid_namespace = integer_field(r.at("pid_namespace"));
    const std::string signal = r.at("hang_signal").get<std::string>();
    p.signal = signal == "SIGUSR1" ? SIGUSR1 : signal == "SIGUSR2" ? SIGUSR2 : 0;
    return p;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Why the record `file` of `p` is not trusted to name a process to signal, or "" when it is: it and its directory
// are writable by nobody but their owner (a sticky directory aside: there nobody replaces another's file), it says
// the uid it belongs to, the process runs as that uid, and that is the user running lens hang (root: any user,
// provided the process's owner wrote the record). So a record planted by another user never makes lens signal a
// process of someone else.
std::string untrusted_because(const fs::path& file, const RankProcess& p) {
  struct stat record {};
  struct stat dir {};
  if (::lstat(file.c_str(), &record) != 0 || ::lstat(file.parent_path().c_str(), &dir) != 0)
    return "its record can no longer be examined";
  if ((record.st_mode & (S_IWGRP | S_IWOTH)) != 0) return "its record is writable by other users";
  if ((dir.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (dir.st_mode & S_ISVTX) == 0)
    return "its record's directory is writable by other users";
  if (!p.uid) return "its record says no uid (an older lens wrote it)";
  if (*p.uid != static_cast<std::int64_t>(record.st_uid))
    return "its record says uid " + std::to_string(*p.uid) + " but belongs to uid " + std::to_string(record.st_uid);
  const std::optional<uid_t> owner = lens::internal::process_owner(p.pid);
  if (!owner) return "has ended (pid " + std::to_string(p.pid) + " is gone)";
  if (*owner != record.st_uid)
    return "its process runs as uid " + std::to_string(*owner) + ", not as its record's owner (uid " +
           std::to_string(record.st_uid) + ")";
  if (::getuid() != 0 && *owner != ::getuid())
    return "its process runs as uid " + std::to_string(*owner) + ", not as you (uid " + std::to_string(::getuid()) +
           ")";
  return "";
}

// Signals `p` only when it is the process the record names: on this host's boot, with the same start time and
// name (a pid is reused), never pid 0, 1 or -1 (a process group, init, everything), never this process, and only
// when its record is trusted (untrusted_because).
void signal_if_same_process(RankProcess& p, const fs::path& file, const std::string& boot_id) {
  if (p.identity.boot_id != boot_id) {
    p.outcome = "on another host (" + p.host + ")";
  } else if (p.signal == 0) {
    p.outcome = "runs with no hang signal (MEGATRON_OTEL_HANG_SIGNAL=none)";
  } else if (p.pid_namespace.value_or(0) != 0 && lens::internal::this_pid_namespace() &&
             static_cast<std::uint64_t>(*p.pid_namespace) != *lens::internal::this_pid_namespace()) {
    p.outcome = "runs in another PID namespace (a container?): run `lens hang --signal` there";
  } else if (p.pid <= 1 || p.pid == ::getpid()) {
    p.outcome = "has a record naming pid " + std::to_string(p.pid) + ": not signalled";
  } else if (lens::internal::process_identity(p.pid) != p.identity) {
    p.outcome = "has ended (pid " + std::to_string(p.pid) + " is gone or is another process now)";
  } else if (const std::string why = untrusted_because(file, p); !why.empty()) {
    p.outcome = "is not signalled: " + why;
  } else if (::kill(p.pid, p.signal) != 0) {
    p.outcome = std::string("could not be signalled: ") + std::strerror(errno);
  } else {
    p.outcome = "sent";
  }
}

// When the snapshot of every signalled rank is newer than `since` (or `limit` passed).
void wait_for_snapshots(const std::vector<RankProcess>& sent, std::uint64_t since_unix_nano,
                        std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  auto fresh = [&](const RankProcess& p) {
    const std::optional<std::string> text = lens::internal::read_regular_file(
        (p.dir / ("rank" + std::to_string(p.rank) + kSnapshotSuffix)).string(), std::size_t{64} << 20);
    if (!text) return false;
    const json s = json::parse(*text, nullptr, false);
    return s.is_object() && s.value("written_unix_nano", 0.0) >= static_cast<double>(since_unix_nano);
  };
  while (std::chrono::steady_clock::now() < until &&
         !std::all_of(sent.begin(), sent.end(), [&](const RankProcess& p) { return fresh(p); }))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

}  // namespace

int hang_signal(const std::vector<std::string>& run_dirs, bool as_json) {
  std::vector<fs::path> files;
  for (const std::string& dir : run_dirs) {
    const std::vector<fs::path> found = find_rank_files(dir, kProcessSuffix);
    files.insert(files.end(), found.begin(), found.end());
  }
  if (files.empty()) {
    std::fprintf(stderr,
                 "lens hang --signal: no rank<R>.process.json under %s: the job's ranks write one at setup when "
                 "hang snapshots are on (MEGATRON_OTEL_HANG_SIGNAL not none, or MEGATRON_OTEL_HANG_TIMEOUT set); "
                 "is this <FILE_DIR>/<run id> of a running job?\n",
                 inputs_text(run_dirs).c_str());
    return kBadInput;
  }
  const std::string boot_id =
      lens::internal::process_identity(::getpid()).value_or(lens::internal::ProcessIdentity{}).boot_id;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto since = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
  std::vector<RankProcess> processes, sent;
  std::vector<std::string> dirs;
  for (const fs::path& file : files) {
    std::optional<RankProcess> p = read_process_record(file);
    if (!p) {
      std::fprintf(stderr, "lens hang --signal: %s is not a rank process record: not used\n", file.c_str());
      continue;
    }
    p->dir = file.parent_path();
    if (std::find(dirs.begin(), dirs.end(), p->dir.string()) == dirs.end()) dirs.push_back(p->dir.string());
    signal_if_same_process(*p, file, boot_id);
    (p->outcome == "sent" ? sent : processes).push_back(*p);
  }
  std::string page;
  for (const RankProcess& p : sent)
    append(page, "lens hang --signal: rank %d (pid %d): %s sent\n", p.rank, static_cast<int>(p.pid),
           p.signal == SIGUSR1 ? "SIGUSR1" : "SIGUSR2");
  for (const RankProcess& p : processes) append(page, "lens hang --signal: rank %d %s\n", p.rank, p.outcome.c_str());
  std::fputs(lens::internal::terminal_text(page).c_str(), stderr);
  if (sent.empty()) {
    std::fprintf(stderr, "lens hang --signal: no rank process of this run on this host was signalled\n");
    return kBadInput;
  }
  wait_for_snapshots(sent, since, std::chrono::seconds(10));
  return hang(dirs, as_json);
}

}  // namespace lens_tools
