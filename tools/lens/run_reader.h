// Reading a run's files: lens's OTLP/JSON Lines (rank<R>.traces.jsonl, .metrics.jsonl) and an OpenTelemetry
// Collector's file exporter output (the same format), plain or gzip. In blocks of about 1 MiB of whole lines, each
// parsed where it was read with simdjson's On-Demand parser: memory holds a few blocks, never the run. What the report
// needs of each span and metric point is handed to a visitor; what cannot be read (a truncated line, a file of another
// kind) is reported with file and line, and the rest is still read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace lens_tools {

// The most ranks a job has, and so the bound of every rank number and parallel size read from a file (each one
// outside [0, kMaxRanks] is read as unknown): the products of sizes the tools compute stay far inside int64.
inline constexpr std::int64_t kMaxRanks = std::int64_t{1} << 20;

// The longest line read: a batch of lens's is 512 spans (about 150 KB), a Collector's file exporter writes a batch
// of its batch processor (8,192 spans by default, a few MB). A longer line is a problem, read past, never held.
inline constexpr std::size_t kMaxLineBytes = std::size_t{64} << 20;

// The resource of a batch: who wrote it. Every number is within [0, kMaxRanks] (sizes at least 1 where known).
struct Origin {
  std::string run_id, service;
  int rank = -1, world_size = 0, pipeline_size = 0, data_parallel_size = 0, tensor_size = 1;
  std::int64_t pid = 0;       // a rank and its checkpoint worker share the rank: the process tells them apart
  std::string host;           // host.name: whose clock its times are in
  std::string resource_args;  // every resource attribute as JSON members ("key":value,...), with ReadOptions::detail
};

// One process of one run: the same in every read of the same files.
inline std::string process_key(const Origin& o) {
  return o.run_id + '\x1f' + o.service + '\x1f' + std::to_string(o.rank) + '\x1f' + std::to_string(o.pid);
}

// A `lens.span_groups.changed` event (lens ctl): the set by name, for how many iterations, a restore. (Outside
// SpanRow: clang 14 cannot default-construct a nested struct with member initializers inside its class.)
struct SpanGroupChangeEvent {
  std::string span_groups;
  std::int64_t iterations = 0;
  bool restored = false;
};

struct SpanRow {
  const Origin* origin = nullptr;
  std::string_view name;
  std::uint64_t start_ns = 0, end_ns = 0;
  std::int64_t iteration = -1;         // megatron.iteration, when the span has it
  std::int64_t num_microbatches = -1;  // the forward-backward span's megatron.num_microbatches (num_microbatches)
  std::optional<double> loss;          // megatron.loss (the step span's)
  bool truncated = false;              // nemo.span.truncated: ended at shutdown, not by its code
  bool backward_pass = false;          // megatron.tp.pass is "backward": a tensor-parallel all-reduce of backward
  using GroupChange = SpanGroupChangeEvent;
  std::optional<GroupChange> group_change;
  // Read only with ReadOptions::detail (what a timeline draws): ids as hex text, the linked span ids (also with
  // ReadOptions::links), and every attribute as a JSON object's members ("key":value,...).
  std::string_view span_id, parent_span_id;
  std::vector<std::string_view> linked_span_ids;
  std::string args_json;
  std::uint64_t duration_ns() const noexcept { return end_ns > start_ns ? end_ns - start_ns : 0; }
};

// A point of one of lens's own counters or of a training metric (the last value of a cumulative sum or a gauge).
struct MetricPoint {
  const Origin* origin = nullptr;
  std::string_view name;
  std::string_view reason;  // lens.spans.dropped's `reason` attribute
  double value = 0;
  std::uint64_t time_ns = 0;
};

struct ReadProblem {
  std::string file;
  std::uint64_t line = 0;
  std::string what;
};

struct ReadStats {
  std::uint64_t files = 0, lines = 0, bytes = 0, spans = 0, points = 0;
  std::vector<ReadProblem> problems;
  std::set<std::string> run_ids;          // every nemo.run.id seen (at most kMaxRunIds), read or left out
  std::uint64_t spans_of_other_runs = 0;  // left out by ReadOptions::run_id
};
inline constexpr std::size_t kMaxRunIds = 1000;

class RunVisitor {
 public:
  virtual ~RunVisitor() = default;
  virtual void span(const SpanRow& span) = 0;
  virtual void metric(const MetricPoint& point) = 0;
};

// The telemetry files under `inputs`, each a run directory (rank*.jsonl[.gz]), a directory of run directories, or a
// single file: one node's directory each, or a Collector's rotated files. A file named twice (or under two of the
// inputs) is read once. Sorted, so that output does not depend on the file system's order or the inputs' order.
std::vector<std::string> telemetry_files(const std::vector<std::string>& inputs);

// The inputs as a person reads them in a message: "a", "a and b", "a, b and c".
std::string inputs_text(const std::vector<std::string>& inputs);

struct ReadOptions {
  bool detail = false;  // ids, links and attributes of every span (slower: a timeline's second pass)
  bool links = false;   // span ids and linked span ids (what clock offsets are estimated from), without detail
  std::function<void(std::uint64_t bytes)> progress;  // may be empty; called now and then with the bytes read
  std::string run_id;  // when set, only what the resource says is of this run (nemo.run.id) reaches the visitor
  // Threads that parse the lines (blocks of about 1 MiB each), beside one that reads them and the calling thread,
  // which hands the rows to the visitor in the files' order: the result is the same at any number. 0: one a core;
  // 1: no other thread (the calling thread reads, parses and visits). At most kMaxReadingThreads, and fewer under a
  // limit on the address space (each thread reserves about 84 MiB of it).
  int threads = 0;
  // With one plain file and one thread: only its lines that start in [first_byte, end_byte) (a part of the file
  // another thread does not read; see line_starts_for_parts).
  std::uint64_t first_byte = 0, end_byte = UINT64_MAX;
};

inline constexpr std::size_t kMaxReadingThreads = 64;

// Where to cut one plain (not gzip) file into at most `parts` parts of about equal bytes, each at least
// kMinPartBytes: the offsets of the lines that begin the parts, then the file's size (so part i is [cuts[i],
// cuts[i + 1])). Empty when the file is not to be cut (gzip, which cannot be read from the middle; too small; not
// readable). What a report reads of one large file (a Collector's) in parallel, a part a thread.
inline constexpr std::uint64_t kMinPartBytes = 1 << 20;
std::vector<std::uint64_t> line_starts_for_parts(const std::string& path, std::size_t parts);

// Starts `body` on a thread added to `threads`; false when the process may start no more (its limit on threads or on
// address space: each thread's stack is reserved there), with `threads` as it was. A read asks for a thread a core
// and goes on with those it got, rather than leave the started ones joinable for std::terminate.
template <typename Body>
bool try_start_thread(std::vector<std::thread>& threads, Body&& body) {
  try {
    threads.emplace_back(std::forward<Body>(body));
    return true;
  } catch (const std::exception&) {  // std::system_error (EAGAIN) or std::bad_alloc
    return false;
  }
}

// A span id of 16 hex digits as a number; 0 (no span) for anything else.
inline std::uint64_t parse_span_id(std::string_view hex) {
  std::uint64_t id = 0;
  for (char c : hex) {
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
    if (digit < 0) return 0;
    id = id << 4 | static_cast<std::uint64_t>(digit);
  }
  return id;
}

// `"key":raw_value` added to a list of JSON members (nothing when raw_value is empty).
void append_json_member(std::string& members, std::string_view key, std::string_view raw_value);

// Adds a read's counts and problems to another's (a read of the files after its own).
void merge_read_stats(ReadStats& into, ReadStats&& part);

// The threads a read with these options uses (ReadOptions::threads; 0: one a core), at most kMaxReadingThreads and
// as many as take half of a limit on the address space.
std::size_t reading_threads(const ReadOptions& options);

// Reads every file: in parallel with more than one reading thread, blocks of lines parsed by each; the visitor is
// called on the calling thread only, in the order of `files`. An exception from the visitor (or from `progress`)
// stops the read, whose threads are joined, and reaches the caller.
ReadStats read_run(const std::vector<std::string>& files, RunVisitor& visitor, const ReadOptions& options = {});

}  // namespace lens_tools
