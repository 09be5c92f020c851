// Reading a run in parallel: whatever the number of threads, the visitor sees the rows a serial read
// shows it, in the same order, and the same counts and problems; blocks of lines cut a large file between threads.
#include "run_reader.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace lens_tools {
namespace {

namespace fs = std::filesystem;

// Set: the next array asked of `new (std::nothrow)` is refused, as a full address space refuses it. simdjson's On
// Demand parser asks for its buffers so (the replacement below, for this test program only).
std::atomic<bool> refuse_next_nothrow_array{false};

// Every row as text: its process, name, times, iteration and ids.
class Transcript final : public RunVisitor {
 public:
  void span(const SpanRow& s) override {
    std::string line = process_key(*s.origin) + "|" + std::string(s.name) + "|" + std::to_string(s.start_ns) + "|" +
                       std::to_string(s.end_ns) + "|" + std::to_string(s.iteration) + "|" + std::string(s.span_id);
    for (std::string_view link : s.linked_span_ids) line += "|" + std::string(link);
    rows.push_back(line);
  }
  void metric(const MetricPoint& p) override {
    rows.push_back(process_key(*p.origin) + "|metric|" + std::string(p.name) + "|" + std::to_string(p.value));
  }
  std::vector<std::string> rows;
};

std::string span_json(int rank, int i) {
  const std::string start = std::to_string(1'700'000'000'000'000'000ULL + 1000ULL * static_cast<unsigned>(i));
  char id[17];
  std::snprintf(id, sizeof id, "%016x", i + 1);
  std::string attributes = i % 30 == 29 ? R"(,"attributes":[{"key":"megatron.iteration","value":{"intValue":")" +
                                              std::to_string(i / 30) + R"("}}])"
                                        : "";
  return R"({"traceId":"0000000000000000000000000000000a","spanId":")" + std::string(id) + R"(","name":")" +
         (i % 30 == 29 ? "megatron.train_step" : "megatron.layer.forward") + R"(","startTimeUnixNano":")" + start +
         R"(","endTimeUnixNano":")" + start + R"(")" + attributes +
         (rank == 1 && i % 7 == 0 ? R"(,"links":[{"spanId":"00000000000000ff"}])" : "") + "}";
}

// A run of `ranks` files of `lines` lines of `spans` spans each, and a line that is not OTLP in rank 0's.
fs::path write_run(const std::string& name, int ranks, int lines, int spans) {
  fs::path dir = fs::temp_directory_path() / (name + "." + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (int rank = 0; rank < ranks; ++rank) {
    std::ofstream out(dir / ("rank" + std::to_string(rank) + ".traces.jsonl"));
    const std::string resource =
        R"({"resourceSpans":[{"resource":{"attributes":[{"key":"nemo.run.id","value":{"stringValue":"r"}},{"key":"dl.rank","value":{"intValue":")" +
        std::to_string(rank) + R"("}}]},"scopeSpans":[{"spans":[)";
    int i = 0;
    for (int line = 0; line < lines; ++line) {
      out << resource;
      for (int s = 0; s < spans; ++s) out << (s ? "," : "") << span_json(rank, i++);
      out << "]}]}]}\n";
      if (rank == 0 && line == lines / 2) out << "{\"notOtlp\":1}\n";
    }
  }
  return dir;
}

struct Read {
  Transcript transcript;
  ReadStats stats;
};

Read read(const fs::path& dir, int threads, bool links) {
  Read r;
  ReadOptions options;
  options.threads = threads;
  options.links = links;
  r.stats = read_run(telemetry_files({dir.string()}), r.transcript, options);
  return r;
}

void expect_same(const Read& a, const Read& b) {
  EXPECT_EQ(a.transcript.rows, b.transcript.rows);
  EXPECT_EQ(a.stats.files, b.stats.files);
  EXPECT_EQ(a.stats.lines, b.stats.lines);
  EXPECT_EQ(a.stats.bytes, b.stats.bytes);
  EXPECT_EQ(a.stats.spans, b.stats.spans);
  EXPECT_EQ(a.stats.run_ids, b.stats.run_ids);
  ASSERT_EQ(a.stats.problems.size(), b.stats.problems.size());
  for (std::size_t i = 0; i < a.stats.problems.size(); ++i) {
    EXPECT_EQ(a.stats.problems[i].file, b.stats.problems[i].file);
    EXPECT_EQ(a.stats.problems[i].line, b.stats.problems[i].line);
    EXPECT_EQ(a.stats.problems[i].what, b.stats.problems[i].what);
  }
}

TEST(ParallelRead, ManySmallFilesReadAsASerialReadDoes) {
  const fs::path dir = write_run("lens_read_small", 40, 3, 20);
  const Read serial = read(dir, 1, true);
  ASSERT_EQ(serial.stats.spans, 40u * 3 * 20);
  ASSERT_EQ(serial.stats.problems.size(), 1u) << "rank 0's line that is not OTLP";
  for (int threads : {2, 3, 8}) expect_same(serial, read(dir, threads, true));
  fs::remove_all(dir);
}

TEST(ParallelRead, ALargeFileIsCutIntoBlocksAndReadInOrder) {
  const fs::path dir = write_run("lens_read_large", 2, 60, 512);  // about 8 MB a file: several blocks each
  const Read serial = read(dir, 1, true);
  ASSERT_EQ(serial.stats.spans, 2u * 60 * 512);
  expect_same(serial, read(dir, 2, true));
  expect_same(read(dir, 1, false), read(dir, 4, false));
  fs::remove_all(dir);
}

// Lines are parsed where they were read, in blocks of about 1 MiB: a problem is still said at its line of the file,
// whichever block held it and whatever the threads. Bad lines fall in different blocks; a line longer than
// kMaxLineBytes spans several blocks' worth of reads and is skipped; the last line has no newline.
TEST(ParallelRead, AProblemIsSaidAtItsLineOfTheFileWhicheverBlockHeldIt) {
  const fs::path dir = fs::temp_directory_path() / ("lens_read_numbered." + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string batch =
      R"({"resourceSpans":[{"resource":{"attributes":[{"key":"nemo.run.id","value":{"stringValue":"r"}}]},)"
      R"("scopeSpans":[{"spans":[)";
  for (int i = 0; i < 300; ++i) batch += (i ? "," : "") + span_json(0, i);
  batch += "]}]}]}";
  {
    std::ofstream out(dir / "rank0.traces.jsonl");
    for (int line = 1; line <= 120; ++line) {  // about 30 KB a line: 3.6 MB
      if (line == 2 || line == 37 || line == 90)
        out << "{\"notOtlp\":" << line << "}\n";
      else if (line == 60)
        out << std::string(kMaxLineBytes + 1, ' ') << "\n";
      else
        out << batch << "\n";
    }
    out << batch.substr(0, batch.size() / 2);  // line 121, cut short
  }
  const Read serial = read(dir, 1, false);
  EXPECT_EQ(serial.stats.lines, 121u);
  EXPECT_EQ(serial.stats.spans, 116u * 300);
  ASSERT_EQ(serial.stats.problems.size(), 5u);
  const std::uint64_t expected_lines[] = {2, 37, 60, 90, 121};
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(serial.stats.problems[i].line, expected_lines[i]) << i;
  EXPECT_NE(serial.stats.problems[2].what.find("a line longer than 64 MiB"), std::string::npos);
  EXPECT_NE(serial.stats.problems[4].what.find("a truncated last line"), std::string::npos);
  expect_same(serial, read(dir, 3, false));
  fs::remove_all(dir);
}

// A Collector killed and restarted wrote two documents on one line: both are read (and a third that is not OTLP is
// a problem at that line).
TEST(ParallelRead, EveryDocumentOfALineIsRead) {
  const fs::path dir = fs::temp_directory_path() / ("lens_read_two_documents." + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto batch = [](int first) {
    std::string b =
        R"({"resourceSpans":[{"resource":{"attributes":[{"key":"nemo.run.id","value":{"stringValue":"r"}}]},)"
        R"("scopeSpans":[{"spans":[)";
    for (int i = first; i < first + 3; ++i) b += (i > first ? "," : "") + span_json(0, i);
    return b + "]}]}]}";
  };
  {
    std::ofstream out(dir / "rank0.traces.jsonl");
    out << batch(0) << batch(3) << "\n" << batch(6) << " " << batch(9) << "\n" << batch(12) << "{\"notOtlp\":1}\n";
  }
  const Read r = read(dir, 1, false);
  EXPECT_EQ(r.stats.lines, 3u);
  EXPECT_EQ(r.stats.spans, 15u);
  ASSERT_EQ(r.stats.problems.size(), 1u);
  EXPECT_EQ(r.stats.problems[0].line, 3u);
  expect_same(r, read(dir, 3, false));
  fs::remove_all(dir);
}

TEST(ParallelRead, AFileThatCannotBeOpenedIsAProblemInItsPlace) {
  const fs::path dir = write_run("lens_read_missing", 3, 2, 5);
  std::vector<std::string> files = telemetry_files({dir.string()});
  files.insert(files.begin() + 1, (dir / "rank9.traces.jsonl").string());  // named, never written
  for (int threads : {1, 2}) {
    Transcript t;
    ReadOptions options;
    options.threads = threads;
    const ReadStats stats = read_run(files, t, options);
    ASSERT_EQ(stats.problems.size(), 2u);
    EXPECT_EQ(stats.problems[0].line, 2u + 1) << "rank 0's line that is not OTLP (after its second line) first";
    EXPECT_EQ(stats.problems[1].what, "cannot be opened");
    EXPECT_EQ(stats.files, 3u);
    EXPECT_EQ(t.rows.size(), 3u * 2 * 5);
  }
  fs::remove_all(dir);
}

// A visitor that fails on its first row (out of memory in a report, say): the read stops, its threads end, and the
// exception reaches the caller, as a serial read's does.
class Failing final : public RunVisitor {
 public:
  void span(const SpanRow&) override { throw std::runtime_error("visitor failed"); }
  void metric(const MetricPoint&) override { throw std::runtime_error("visitor failed"); }
};

TEST(ParallelRead, AVisitorsExceptionStopsTheReadAndReachesTheCaller) {
  const fs::path dir = write_run("lens_read_throw", 2, 60, 512);  // more blocks than are read ahead
  for (int threads : {1, 2, 8}) {
    Failing visitor;
    ReadOptions options;
    options.threads = threads;
    EXPECT_THROW(read_run(telemetry_files({dir.string()}), visitor, options), std::runtime_error) << threads;
  }
  fs::remove_all(dir);
}

// A line whose parser got no buffer for its strings (out of memory) is a problem in its place, and the next lines,
// for which the parser asks again, are read: simdjson 3.0.1 went on with a null buffer and wrote through it.
TEST(ParallelRead, ALineWithoutMemoryForItsParserIsAProblemAndTheNextLinesAreRead) {
  const fs::path dir = write_run("lens_read_no_memory", 1, 3, 5);
  std::vector<std::string> files = telemetry_files({dir.string()});
  Transcript t;
  ReadOptions options;
  options.threads = 1;
  refuse_next_nothrow_array = true;
  const ReadStats stats = read_run(files, t, options);
  EXPECT_FALSE(refuse_next_nothrow_array) << "the parser asked for no buffer";
  ASSERT_EQ(stats.problems.size(), 2u);
  EXPECT_EQ(stats.problems[0].line, 1u);
  EXPECT_NE(stats.problems[0].what.find("out of memory"), std::string::npos) << stats.problems[0].what;
  EXPECT_EQ(stats.problems[1].what, "not OTLP/JSON: a line with \"notOtlp\"");
  EXPECT_EQ(t.rows.size(), 2u * 5) << "the two lines of spans after it";
  fs::remove_all(dir);
}

// A thread the system refuses (here: an address space with no room for another stack) is said, not left joinable for
// std::terminate; the caller reads on with the threads it has. glibc reuses the stacks of ended threads, so threads
// are started until one is refused.
TEST(ParallelRead, AThreadTheSystemRefusesIsSaidNotStarted) {
  EXPECT_EXIT(
      {
        std::ifstream statm("/proc/self/statm");
        std::size_t pages = 0;
        statm >> pages;
        rlimit limit{};
        limit.rlim_cur = limit.rlim_max = pages * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)) + (1 << 20);
        ::setrlimit(RLIMIT_AS, &limit);
        std::atomic<bool> end{false};
        std::vector<std::thread> threads;
        std::size_t started = 0;
        while (started < 100 && try_start_thread(threads, [&end] {
                 while (!end) std::this_thread::sleep_for(std::chrono::milliseconds(1));
               }))
          ++started;
        end = true;
        for (std::thread& t : threads) t.join();
        std::_Exit(started < 100 && threads.size() == started ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace lens_tools

// Refuses what refuse_next_nothrow_array says, once; otherwise the allocation the standard library makes.
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  if (lens_tools::refuse_next_nothrow_array.exchange(false)) return nullptr;
  try {
    return ::operator new[](size);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
