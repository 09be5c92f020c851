// Reading a run: its files' lines parsed into a visitor, serially, or in parallel by worker threads whose rows
// reach the visitor on the calling thread in the files' order. Which files: run_files.cc; a line parsed:
// run_parsing.h.
#include "run_reader.h"

#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "common/dcheck.h"
#include "run_parsing.h"

namespace lens_tools {

namespace {

void say_not_opened(ReadStats& stats, const std::string& path) {
  stats.problems.push_back({path, 0, "cannot be opened"});
}

// What kept a file from being read to its end, after its `lines` lines.
void say_not_read_past(ReadStats& stats, const std::string& path, std::uint64_t lines, const std::string& error) {
  if (!error.empty()) stats.problems.push_back({path, lines + 1, "cannot be read past here: " + error});
}

}  // namespace

void merge_read_stats(ReadStats& into, ReadStats&& part) {
  into.files += part.files;
  into.lines += part.lines;
  into.bytes += part.bytes;
  into.spans += part.spans;
  into.points += part.points;
  into.spans_of_other_runs += part.spans_of_other_runs;
  for (auto& problem : part.problems) into.problems.push_back(std::move(problem));
  for (const auto& run : part.run_ids)
    if (into.run_ids.size() < kMaxRunIds) into.run_ids.insert(run);
}

namespace {

// What the visitor threw, carried past parse_block's catch (a line's problem is the parser's, not the visitor's).
struct VisitorFailed {
  std::exception_ptr error;
};

// Hands rows on to the serial read's visitor.
class VisitorOnTheParsersThread final : public RunVisitor {
 public:
  explicit VisitorOnTheParsersThread(RunVisitor& to) : to_(to) {}
  void span(const SpanRow& row) override {
    try {
      to_.span(row);
    } catch (...) {
      throw VisitorFailed{std::current_exception()};
    }
  }
  void metric(const MetricPoint& point) override {
    try {
      to_.metric(point);
    } catch (...) {
      throw VisitorFailed{std::current_exception()};
    }
  }

 private:
  RunVisitor& to_;
};

ReadStats read_serially(const std::vector<std::string>& files, RunVisitor& visitor, const ReadOptions& options) {
  const auto& progress = options.progress;
  ReadStats stats;
  VisitorOnTheParsersThread passing(visitor);
  LineParser parser(passing, stats, options);
  std::uint64_t done = 0;
  LineBlock block;
  try {
    for (const std::string& path : files) {
      BlockReader reader(path, options.first_byte, options.end_byte);
      if (!reader.ok()) {
        say_not_opened(stats, path);
        continue;
      }
      ++stats.files;
      std::uint64_t lines = 0;
      while (reader.next(block)) {
        lines += parse_block(parser, stats, path, block, lines + 1);
        if (progress) progress(done + reader.bytes());
      }
      say_not_read_past(stats, path, lines, reader.error());
      done += reader.bytes();
    }
  } catch (const VisitorFailed& failed) {
    std::rethrow_exception(failed.error);
  }
  stats.bytes = done;
  if (progress) progress(done);
  return stats;
}

// ---- reading in parallel -----------------------------------------------------------------------------------

// What a parser found in a block of lines, owned (its rows' text outlives the parser's buffers), to be handed to
// the visitor on the calling thread in the files' order. A span is plain numbers and offsets into `text`, so a
// block's rows are a few flat vectors that keep their capacity when the block is reused.
struct ParsedRows {
  struct Text {
    std::uint32_t offset = 0, length = 0;
  };
  struct Span {
    std::uint64_t start_ns = 0, end_ns = 0;
    std::int64_t iteration = -1, num_microbatches = -1;
    double loss = 0;
    bool has_loss = false, truncated = false;
    std::int32_t group_change = -1;  // into group_changes (a rare event on a step span)
    std::uint32_t origin = 0;
    Text name, span_id, parent_span_id, args_json;
    std::uint32_t links_begin = 0, links_end = 0;
  };
  struct Point {
    MetricPoint point;
    std::uint32_t origin = 0;
    Text name, reason;
  };
  std::vector<Origin> origins;  // as the worker's parser read them
  std::vector<Span> spans;
  std::vector<Point> points;
  std::vector<bool> order;  // true: the next span, false: the next point
  std::vector<Text> links;
  std::vector<SpanRow::GroupChange> group_changes;
  std::string text;

  void clear() {
    origins.clear();
    spans.clear();
    points.clear();
    order.clear();
    links.clear();
    group_changes.clear();
    text.clear();
  }
  Text keep(std::string_view v) {
    Text t{static_cast<std::uint32_t>(text.size()), static_cast<std::uint32_t>(v.size())};
    text.append(v);
    return t;
  }
  std::string_view view(Text t) const { return std::string_view(text).substr(t.offset, t.length); }
};

// A visitor on a worker: copies what its parser hands it into the block's rows.
class RowRecorder final : public RunVisitor {
 public:
  void start(ParsedRows& rows) {
    rows_ = &rows;
    last_origin_ = nullptr;
  }
  void span(const SpanRow& row) override {
    ParsedRows::Span& s = rows_->spans.emplace_back();
    s.start_ns = row.start_ns;
    s.end_ns = row.end_ns;
    s.iteration = row.iteration;
    s.num_microbatches = row.num_microbatches;
    s.has_loss = row.loss.has_value();
    s.loss = row.loss.value_or(0);
    s.truncated = row.truncated;
    if (row.group_change) {
      s.group_change = static_cast<std::int32_t>(rows_->group_changes.size());
      rows_->group_changes.push_back(*row.group_change);
    }
    s.origin = origin_index(row.origin);
    s.name = rows_->keep(row.name);
    s.span_id = rows_->keep(row.span_id);
    s.parent_span_id = rows_->keep(row.parent_span_id);
    s.args_json = rows_->keep(row.args_json);
    s.links_begin = static_cast<std::uint32_t>(rows_->links.size());
    for (std::string_view link : row.linked_span_ids) rows_->links.push_back(rows_->keep(link));
    s.links_end = static_cast<std::uint32_t>(rows_->links.size());
    rows_->order.push_back(true);
  }
  void metric(const MetricPoint& point) override {
    ParsedRows::Point& p = rows_->points.emplace_back();
    p.point = point;
    p.point.name = p.point.reason = {};
    p.origin = origin_index(point.origin);
    p.name = rows_->keep(point.name);
    p.reason = rows_->keep(point.reason);
    rows_->order.push_back(false);
  }

 private:
  std::uint32_t origin_index(const Origin* origin) {
    if (origin != last_origin_) {  // a batch of lens's is one process: one copy a line at most
      rows_->origins.push_back(*origin);
      last_origin_ = origin;
    }
    return static_cast<std::uint32_t>(rows_->origins.size() - 1);
  }
  ParsedRows* rows_ = nullptr;
  const Origin* last_origin_ = nullptr;
};

constexpr std::size_t kBlocksPerWorker = 4;

// A run of lines of one file (about kBlockBytes), parsed by one worker. Blocks are numbered in the order they
// were read; the visitor takes them in that order. A file's last block holds no lines: it says whether the file
// could be opened and read to its end.
struct Block {
  std::size_t file = 0;
  LineBlock lines;
  std::uint64_t line_count = 0;  // the worker's: its problems are numbered from 1, and the file's lines before
                                 // them added on the calling thread (ParallelRead::number_problems)
  std::string read_error;        // on a file's last block: what kept the file from being read to its end
  ReadStats stats;               // the worker's counts, and the reader's: a file opened or not
  std::uint64_t done_bytes = 0;  // of the whole read, once this block is visited
  ParsedRows rows;
  bool parsed = false;
};

// One thread reads the files' lines in order into blocks; `workers` threads parse blocks, each its own; the calling
// thread hands the rows to the visitor block by block in the order they were read, so the visitor sees exactly
// what a serial read would show it, whatever the timing. Memory is bounded: at most kBlocksPerWorker blocks per
// worker are read ahead of the one being visited.
class ParallelRead {
 public:
  ParallelRead(const std::vector<std::string>& files, RunVisitor& visitor, const ReadOptions& options,
               std::size_t workers)
      : files_(files), visitor_(visitor), options_(options), workers_(workers) {}

  ReadStats run() {
    if (!start_threads()) return read_serially(files_, visitor_, options_);
    ReadStats stats;
    std::uint64_t done = 0;
    try {
      while (std::unique_ptr<Block> block = next_parsed()) {
        visit(*block);
        number_problems(*block);
        done = block->done_bytes;
        merge_read_stats(stats, std::move(block->stats));
        give_back(std::move(block));
        if (options_.progress) options_.progress(done);
      }
    } catch (...) {  // the visitor's: no thread may outlive the read
      stop_and_join();
      throw;
    }
    stop_and_join();
    if (error_) std::rethrow_exception(error_);
    stats.bytes = done;
    return stats;
  }

 private:
  // Thrown on the reader thread when the read was stopped: it unwinds the file being read.
  struct Stopped {};

  // The workers the process lets start (workers_ becomes their number: it bounds the blocks read ahead), then the
  // reader; false, with none left running, without the reader and one worker.
  bool start_threads() {
    threads_.reserve(workers_ + 1);
    const std::size_t wanted = workers_;
    workers_ = 0;
    while (workers_ < wanted && try_start_thread(threads_, [this] { parse(); })) ++workers_;
    if (workers_ > 0 && try_start_thread(threads_, [this] { read(); })) return true;
    stop_and_join();
    return false;
  }

  void stop_and_join() {
    {
      std::lock_guard lock(mutex_);
      stopped_ = true;
    }
    read_wait_.notify_all();
    parse_wait_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // A visited block, kept for the reader to fill again: its rows' vectors keep their capacity (no allocation and
  // page faults a block once the read is under way). There are never more than the blocks in flight.
  void give_back(std::unique_ptr<Block> block) {
    std::lock_guard lock(mutex_);
    spare_.push_back(std::move(block));
  }

  std::unique_ptr<Block> empty_block(std::size_t file) {
    std::unique_ptr<Block> block;
    {
      std::lock_guard lock(mutex_);
      if (!spare_.empty()) {
        block = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    if (block == nullptr) block = std::make_unique<Block>();
    block->file = file;
    block->lines.clear();  // its buffer is kept to be read into, unless a rare long line made it large
    block->line_count = 0;
    block->read_error.clear();
    block->stats = {};
    block->done_bytes = 0;
    block->rows.clear();
    block->parsed = false;
    return block;
  }

  // The reader thread: what it could not read (out of memory) ends the read, and reaches the caller.
  void read() {
    try {
      read_files();
    } catch (const Stopped&) {
    } catch (...) {
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
    }
    std::lock_guard lock(mutex_);
    read_all_ = true;
    parse_wait_.notify_all();
    visit_wait_.notify_all();
  }

  void read_files() {
    std::uint64_t done = 0;
    for (std::size_t f = 0; f < files_.size(); ++f) {
      BlockReader reader(files_[f]);
      std::unique_ptr<Block> block = empty_block(f);
      if (!reader.ok()) {
        say_not_opened(block->stats, files_[f]);
      } else {
        ++block->stats.files;
        while (reader.next(block->lines)) {
          block->done_bytes = done + reader.bytes();
          hand_out(std::move(block));
          block = empty_block(f);
        }
        block->read_error = reader.error();
      }
      done += reader.bytes();
      block->done_bytes = done;
      hand_out(std::move(block));
    }
  }

  void hand_out(std::unique_ptr<Block> block) {
    std::unique_lock lock(mutex_);
    read_wait_.wait(lock, [&] { return blocks_.size() < kBlocksPerWorker * workers_ || stopped_; });
    if (stopped_) throw Stopped{};
    blocks_.push_back(std::move(block));
    to_parse_.push_back(blocks_.back().get());
    parse_wait_.notify_one();
  }

  // A worker thread. What it cannot do outside a block's lines (out of memory) stops the read and reaches the caller.
  void parse() {
    try {
      parse_blocks();
    } catch (...) {
      {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
        stopped_ = true;
      }
      read_wait_.notify_all();
      parse_wait_.notify_all();
      visit_wait_.notify_all();
    }
  }

  void parse_blocks() {
    RowRecorder recorder;
    ReadStats unused;
    LineParser parser(recorder, unused, options_);
    for (;;) {
      Block* block;
      {
        std::unique_lock lock(mutex_);
        parse_wait_.wait(lock, [&] { return !to_parse_.empty() || read_all_ || stopped_; });
        if (to_parse_.empty() || stopped_) return;
        block = to_parse_.front();
        to_parse_.pop_front();
      }
      recorder.start(block->rows);
      parser.count_into(block->stats);
      const std::string& path = files_[block->file];
      try {
        block->line_count = parse_block(parser, block->stats, path, block->lines, 1);
      } catch (const std::exception& e) {  // out of memory: this block's problem, the rest is still read
        block->line_count = lines_in(block->lines);
        block->stats.problems.push_back({path, 0, std::string("could not be read: ") + e.what()});
      }
      LENS_DCHECK(block->line_count == lines_in(block->lines));
      say_not_read_past(block->stats, path, block->line_count, block->read_error);
      {
        std::lock_guard lock(mutex_);
        block->parsed = true;
      }
      visit_wait_.notify_all();
    }
  }

  // The calling thread: the oldest block, once parsed; null when every block was visited.
  std::unique_ptr<Block> next_parsed() {
    std::unique_lock lock(mutex_);
    visit_wait_.wait(lock, [&] {
      return (!blocks_.empty() && blocks_.front()->parsed) || (blocks_.empty() && read_all_) || stopped_;
    });
    if (blocks_.empty() || stopped_) return nullptr;
    std::unique_ptr<Block> block = std::move(blocks_.front());
    blocks_.pop_front();
    read_wait_.notify_one();
    return block;
  }

  // A worker numbers a block's lines from 1: the lines of its file in the blocks before it are added here, in order.
  void number_problems(Block& block) {
    if (block.file != numbered_file_) {
      numbered_file_ = block.file;
      lines_before_ = 0;
    }
    for (ReadProblem& p : block.stats.problems)
      if (p.line > 0) p.line += lines_before_;  // 0: no line (a file that cannot be opened)
    lines_before_ += block.line_count;
  }

  // Hands a block's rows to the visitor, each with the read's own Origin of its process. Out of line: inlined into
  // read_run, where the read is constructed, it sets off GCC 12's maybe-uninitialized warning about row_'s optional.
  [[gnu::noinline]] void visit(const Block& block) {
    const ParsedRows& b = block.rows;
    std::vector<const Origin*> origins;
    origins.reserve(b.origins.size());
    for (const Origin& o : b.origins) origins.push_back(origins_.intern(o));
    std::size_t span = 0, point = 0;
    for (bool is_span : b.order) {
      if (is_span) {
        const ParsedRows::Span& s = b.spans[span++];
        row_.origin = origins[s.origin];
        row_.name = b.view(s.name);
        row_.start_ns = s.start_ns;
        row_.end_ns = s.end_ns;
        row_.iteration = s.iteration;
        row_.num_microbatches = s.num_microbatches;
        row_.loss = s.has_loss ? std::optional<double>(s.loss) : std::nullopt;
        row_.truncated = s.truncated;
        row_.group_change.reset();
        if (s.group_change >= 0) row_.group_change = b.group_changes[static_cast<std::size_t>(s.group_change)];
        row_.args_json.assign(b.view(s.args_json));
        row_.span_id = b.view(s.span_id);
        row_.parent_span_id = b.view(s.parent_span_id);
        row_.linked_span_ids.clear();
        for (std::uint32_t i = s.links_begin; i < s.links_end; ++i) row_.linked_span_ids.push_back(b.view(b.links[i]));
        visitor_.span(row_);
      } else {
        const ParsedRows::Point& p = b.points[point++];
        MetricPoint out = p.point;
        out.origin = origins[p.origin];
        out.name = b.view(p.name);
        out.reason = b.view(p.reason);
        visitor_.metric(out);
      }
    }
  }

  const std::vector<std::string>& files_;
  RunVisitor& visitor_;
  const ReadOptions& options_;
  std::size_t workers_;  // set before the reader starts
  OriginTable origins_;  // the calling thread's
  SpanRow row_;
  std::size_t numbered_file_ = std::numeric_limits<std::size_t>::max();  // number_problems's, on the calling thread
  std::uint64_t lines_before_ = 0;

  std::mutex mutex_;  // guards everything below, and each block's `parsed`
  std::condition_variable read_wait_, parse_wait_, visit_wait_;
  std::deque<std::unique_ptr<Block>> blocks_;  // read, in order, until visited
  std::deque<Block*> to_parse_;
  bool read_all_ = false;
  bool stopped_ = false;                       // the calling thread is done: every other thread ends
  std::exception_ptr error_;                   // what ended the reader or a worker early
  std::vector<std::thread> threads_;           // the reader's and the workers', joined before run() returns
  std::vector<std::unique_ptr<Block>> spare_;  // visited, to be filled again
};

// A limit on the address space (`ulimit -v`, as some login nodes set) counts what each thread reserves: its whole
// stack (8 MiB by default), the heap glibc's malloc gives it (64 MiB on 64-bit) and the blocks it holds (each about
// 2 MiB of text read ahead and 1 MiB of rows). The reading
// threads are as many as take half of it: without the bound, the threads' reservations alone filled a 160 MiB limit.
std::size_t threads_the_address_space_holds() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return kMaxReadingThreads;
  std::size_t stack = 0;
  pthread_attr_t attributes;
  if (pthread_getattr_default_np(&attributes) == 0) {
    pthread_attr_getstacksize(&attributes, &stack);
    pthread_attr_destroy(&attributes);
  }
  if (stack == 0) stack = std::size_t{8} << 20;
  constexpr std::size_t kMallocArenaBytes = std::size_t{64} << 20;
  const std::size_t per_thread = stack + kMallocArenaBytes + 3 * kBlocksPerWorker * kBlockBytes;
  return std::max<std::size_t>(limit.rlim_cur / 2 / per_thread, 1);
}

}  // namespace

std::size_t reading_threads(const ReadOptions& options) {
  const std::size_t threads = options.threads > 0 ? static_cast<std::size_t>(options.threads)
                                                  : std::max<std::size_t>(std::thread::hardware_concurrency(), 1);
  return std::min({threads, kMaxReadingThreads, threads_the_address_space_holds()});
}

ReadStats read_run(const std::vector<std::string>& files, RunVisitor& visitor, const ReadOptions& options) {
  const std::size_t threads = reading_threads(options);
  if (threads <= 1 || files.empty()) return read_serially(files, visitor, options);
  return ParallelRead(files, visitor, options, threads).run();
}

}  // namespace lens_tools
