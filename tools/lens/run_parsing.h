// Parsing a run's lines: a file read as blocks of whole lines (plain or gzip), and the OTLP/JSON parser that turns
// each line into the rows a RunVisitor takes, what it cannot read said as a problem at its line. The serial and the
// parallel read (run_reader.cc) share them; the parser itself (simdjson On Demand) is private to run_parsing.cc.
//
//   LineParser parser(visitor, stats, options);
//   BlockReader reader(path);
//   LineBlock block;
//   for (std::uint64_t lines = 0; reader.next(block);) lines += parse_block(parser, stats, path, block, lines + 1);
#pragma once

#include <simdjson.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "run_reader.h"

namespace lens_tools {

constexpr std::size_t kBlockBytes = 1 << 20;

// Whole lines of one file as they were read, in one buffer followed by simdjson's padding: each line is parsed where
// it lies, never copied (a copy would be one more pass over every byte). A line
// longer than kMaxLineBytes is not kept: `overlong_at` holds where it stood, before the line that starts there.
struct LineBlock {
  std::unique_ptr<char[]> data;
  std::size_t capacity = 0;  // without the padding
  std::size_t size = 0;
  std::vector<std::size_t> overlong_at;
  bool last_line_complete = true;  // false when the file's last line, the block's, has no newline

  // Room for `wanted` bytes, keeping what is held: doubles, so that a long line is copied a few times, not once a
  // read.
  void reserve(std::size_t wanted) {
    if (wanted <= capacity) return;
    const std::size_t grown_capacity = std::max(wanted, 2 * capacity);
    auto grown = std::make_unique_for_overwrite<char[]>(grown_capacity + simdjson::SIMDJSON_PADDING);
    if (size > 0) std::memcpy(grown.get(), data.get(), size);
    std::memset(grown.get() + grown_capacity, 0, simdjson::SIMDJSON_PADDING);  // read past a line's end, never used
    data = std::move(grown);
    capacity = grown_capacity;
  }
  // Empty; the memory a rare long line took is given back.
  void clear() {
    size = 0;
    overlong_at.clear();
    last_line_complete = true;
    if (capacity > 4 * kBlockBytes) {
      data.reset();
      capacity = 0;
    }
  }
};

// A plain or gzip file (zlib reads a plain file as it is) as blocks of about kBlockBytes of whole lines. zlib reads a
// plain file, or inflates a gzip one, straight into the block for what is left of a read past twice its own buffer;
// only the start of a line that a block does not end is copied, to begin the next block.
class BlockReader {
 public:
  // With `first_byte` and `end_byte`: those bytes of a plain file (the lines of a part of it: line_starts_for_parts).
  explicit BlockReader(const std::string& path, std::uint64_t first_byte = 0, std::uint64_t end_byte = UINT64_MAX)
      : file_(gzopen(path.c_str(), "rb")), left_(end_byte - first_byte) {
    if (file_ == nullptr) return;
    gzbuffer(file_, kZlibBufferBytes);
    if (first_byte > 0 && (gzdirect(file_) == 0 || gzseek(file_, static_cast<z_off_t>(first_byte), SEEK_SET) < 0)) {
      gzclose(file_);  // only a plain file is read from its middle (a gzip stream is not cut)
      file_ = nullptr;
    }
  }
  ~BlockReader() {
    if (file_ != nullptr) gzclose(file_);
  }
  BlockReader(const BlockReader&) = delete;
  BlockReader& operator=(const BlockReader&) = delete;

  bool ok() const { return file_ != nullptr; }
  std::uint64_t bytes() const { return bytes_; }
  // Why reading stopped before the end (a truncated or corrupt gzip stream); empty when it reached the end.
  const std::string& error() const { return error_; }

  // The next lines into `out` (its buffer is kept to read into next time); false, with `out` empty, at the end.
  bool next(LineBlock& out) {
    while (!at_end_ && !(held_.size >= kBlockBytes && line_start_ > 0)) read_more();
    std::swap(out, held_);
    held_.clear();
    out.last_line_complete = true;
    if (!at_end_) {  // the start of the line `out` does not end begins the next block
      const std::size_t tail = out.size - line_start_;
      held_.reserve(std::max(kBlockBytes, tail));
      std::memcpy(held_.data.get(), out.data.get() + line_start_, tail);
      held_.size = tail;
      out.size = line_start_;
      line_start_ = 0;
    } else {
      out.last_line_complete = out.size == 0 || out.data[out.size - 1] == '\n';
      line_start_ = 0;
    }
    return out.size > 0 || !out.overlong_at.empty();
  }

 private:
  void read_more() {
    // Up to a block's bytes; past them, a megabyte more at a time while one line fills the block.
    const std::size_t wanted =
        std::min<std::uint64_t>(held_.size < kBlockBytes ? kBlockBytes - held_.size : kReadBytes, left_);
    if (wanted == 0) {  // the end of the part
      at_end_ = true;
      return;
    }
    held_.reserve(held_.size + wanted);
    char* fresh = held_.data.get() + held_.size;
    const int n = gzread(file_, fresh, static_cast<unsigned>(wanted));
    int code = Z_OK;
    const char* message = gzerror(file_, &code);
    if (code != Z_OK && code != Z_STREAM_END && error_.empty()) error_ = message != nullptr ? message : "read error";
    if (n <= 0) {
      at_end_ = true;
      return;
    }
    bytes_ += static_cast<std::uint64_t>(n);
    left_ -= static_cast<std::uint64_t>(n);
    auto fresh_bytes = static_cast<std::size_t>(n);
    if (!skipping_ && held_.size - line_start_ + fresh_bytes > kMaxLineBytes && line_is_overlong(fresh, fresh_bytes)) {
      held_.overlong_at.push_back(line_start_);
      skipping_ = true;
    }
    if (skipping_) {  // the overlong line is dropped, and the rest of it skipped: memory stays bounded
      const void* newline = std::memchr(fresh, '\n', fresh_bytes);
      held_.size = line_start_;
      if (newline == nullptr) return;
      skipping_ = false;
      const std::size_t past = static_cast<std::size_t>(static_cast<const char*>(newline) - fresh) + 1;
      std::memmove(held_.data.get() + line_start_, fresh + past, fresh_bytes - past);
      fresh = held_.data.get() + line_start_;
      fresh_bytes -= past;
    }
    held_.size += fresh_bytes;
    if (const void* last = memrchr(fresh, '\n', fresh_bytes); last != nullptr)
      line_start_ = static_cast<std::size_t>(static_cast<const char*>(last) - held_.data.get()) + 1;
  }

  // Whether the line being read, with the `n` bytes just read at `fresh`, is longer than kMaxLineBytes.
  bool line_is_overlong(const char* fresh, std::size_t n) const {
    const void* newline = std::memchr(fresh, '\n', n);
    const std::size_t end =
        held_.size + (newline != nullptr ? static_cast<std::size_t>(static_cast<const char*>(newline) - fresh) : n);
    return end - line_start_ > kMaxLineBytes;
  }

  static constexpr unsigned kZlibBufferBytes = 1 << 16;
  static constexpr std::size_t kReadBytes = 1 << 20;

  gzFile file_;
  std::uint64_t left_;          // bytes still to read (of a part of the file: its end)
  LineBlock held_;              // read, past the lines handed out: the start of a line, and what follows
  std::size_t line_start_ = 0;  // in held_: where the line that no newline has ended yet begins
  bool skipping_ = false;       // inside an overlong line: what is read is dropped up to its newline
  bool at_end_ = false;
  std::uint64_t bytes_ = 0;
  std::string error_;
};

// The processes of a read, one Origin each: the pointers handed out stay valid while the table lives (node-based).
class OriginTable {
 public:
  const Origin* intern(const Origin& o) {
    auto [it, inserted] = origins_.try_emplace(process_key(o), o);
    if (!inserted && it->second.pipeline_size == 0) it->second = o;  // a later resource that says more wins
    return &it->second;
  }

 private:
  std::map<std::string, Origin> origins_;
};

class FileParser;

// Parses OTLP/JSON lines into a visitor, counting into ReadStats: one a thread (it holds simdjson's parser and its
// buffers).
class LineParser {
 public:
  LineParser(RunVisitor& visitor, ReadStats& stats, const ReadOptions& options);
  ~LineParser();
  LineParser(const LineParser&) = delete;
  LineParser& operator=(const LineParser&) = delete;

  // Counts into `stats` from now on (a worker's parser counts each block of lines apart).
  void count_into(ReadStats& stats);

 private:
  friend std::uint64_t parse_block(LineParser& parser, ReadStats& stats, const std::string& path,
                                   const LineBlock& block, std::uint64_t first_line);
  std::unique_ptr<FileParser> parser_;
};

// Parses the lines of `block` (or says why one is not read) into `stats`, numbering them from `first_line`; returns
// how many lines the block held.
std::uint64_t parse_block(LineParser& parser, ReadStats& stats, const std::string& path, const LineBlock& block,
                          std::uint64_t first_line);

// The lines parse_block numbers in `block`, counted without parsing: a block whose parsing failed (out of memory)
// still takes its place in the file's numbering, so that the problems of its later blocks are said at their lines.
std::uint64_t lines_in(const LineBlock& block);

}  // namespace lens_tools
