// The floor under the bound on a kept span (within 1.5x of two span-clock reads): what the cheapest record
// that still makes an OpenTelemetry span costs on this machine, beside the baseline of the same run. Not lens's
// span path: a stand-in for the design the bound implies (Tracy's zones), written here only to be measured.
//
// The training thread appends a begin event (a word of tag, group and name length, the name's pointer, the tick)
// and an end event (tag, tick) to a ring of its own that it publishes with a release store, and keeps the open
// scopes (name, tick) for a hang snapshot. No ids, parent or sampling decision: those are the export thread's, which
// pairs the events by nesting and derives each span's ids from the thread's seed and the span's sequence number
// (BM_Floor_PairEventsIntoRecords: its cost a span, to set beside the export side's 20 ns bound).
//
// Command:  build/bench/lens_benchmarks --benchmark_filter='Floor|TwoSpanClock|BM_Span_NoAttributes/kept:1'
//           --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// Results and their reading: docs/PERFORMANCE.md, "The floor under the kept-span bound".
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "bench_support.h"
#include "common/clock.h"
#include "trace/record.h"

namespace {

constexpr std::uint64_t kBeginTag = 1, kEndTag = 2;

// One thread's events and open scopes. The consumer is assumed to keep up: the ring wraps without a check, which
// only flatters the floor.
struct FloorThread {
  static constexpr std::uint32_t kWords = 1u << 16;
  static constexpr int kMaxOpen = 64;
  struct Open {
    const char* name;
    std::uint64_t tick;
  };
  std::uint64_t ring[kWords];
  std::atomic<std::uint32_t> published{0};
  std::uint32_t write = 0;
  Open open[kMaxOpen];
  std::atomic<int> depth{0};
};

std::atomic<std::uint64_t> g_floor_groups{~std::uint64_t{0}};
thread_local FloorThread* t_floor = nullptr;  // set by the benchmark for its thread, as lens's thread state is

__attribute__((noinline)) bool floor_begin(std::uint64_t group_bit, std::uint16_t group, const char* name,
                                           std::uint32_t length) noexcept {
  if ((g_floor_groups.load(std::memory_order_relaxed) & group_bit) == 0) return false;
  FloorThread& t = *t_floor;
  const int depth = t.depth.load(std::memory_order_relaxed);
  if (depth == FloorThread::kMaxOpen) return false;
  const std::uint64_t tick = lens::internal::now_ticks();
  std::uint32_t w = t.write;
  if (w + 3 > FloorThread::kWords) w = 0;
  t.ring[w] = kBeginTag | std::uint64_t{group} << 8 | std::uint64_t{length} << 32;
  t.ring[w + 1] = reinterpret_cast<std::uintptr_t>(name);
  t.ring[w + 2] = tick;
  t.write = w + 3;
  t.published.store(w + 3, std::memory_order_release);
  t.open[depth] = {name, tick};
  t.depth.store(depth + 1, std::memory_order_release);
  return true;
}

__attribute__((noinline)) void floor_end() noexcept {
  const std::uint64_t tick = lens::internal::now_ticks();
  FloorThread& t = *t_floor;
  std::uint32_t w = t.write;
  if (w + 2 > FloorThread::kWords) w = 0;
  t.ring[w] = kEndTag;
  t.ring[w + 1] = tick;
  t.write = w + 2;
  t.published.store(w + 2, std::memory_order_release);
  t.depth.store(t.depth.load(std::memory_order_relaxed) - 1, std::memory_order_release);
}

struct FloorScope {
  FloorScope(std::uint64_t group_bit, std::uint16_t group, const char* name, std::uint32_t length) noexcept
      : open(floor_begin(group_bit, group, name, length)) {}
  ~FloorScope() {
    if (open) floor_end();
  }
  bool open;
};

// The same call site as BM_Span_NoAttributes: a literal name, the group's bit, a scope.
void BM_Floor_TracyStyleScope(benchmark::State& state) {
  lens::bench::set_up();  // decides the tick source, as a setup does
  static constexpr char kName[] = "megatron.train_step";
  const auto thread = std::make_unique<FloorThread>();
  t_floor = thread.get();
  for (auto _ : state) {
    FloorScope scope(std::uint64_t{1} << 3, 3, kName, sizeof(kName) - 1);
    benchmark::DoNotOptimize(scope.open);
  }
  t_floor = nullptr;
}
BENCHMARK(BM_Floor_TracyStyleScope);

// splitmix64's finalizer: distinct, well-spread ids from a seed and a sequence number.
inline std::uint64_t mix(std::uint64_t x) noexcept {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The export thread's side: a batch of events (spans two deep: a parent and three children, as a step and its
// micro-batches) read back into RecordHeaders, the record lens's exporters encode, with ids derived from the seed
// and each span's sequence number (a root's trace id too) and the parent's span id from the nesting.
void BM_Floor_PairEventsIntoRecords(benchmark::State& state) {
  static constexpr char kParent[] = "megatron.train_step";
  static constexpr char kChild[] = "megatron.microbatch.forward";
  constexpr int kSpans = 512;  // a batch
  std::vector<std::uint64_t> events;
  auto begin = [&](const char* name, std::uint32_t length, std::uint64_t tick) {
    events.insert(events.end(), {kBeginTag | std::uint64_t{3} << 8 | std::uint64_t{length} << 32,
                                 static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(name)), tick});
  };
  auto end = [&](std::uint64_t tick) { events.insert(events.end(), {kEndTag, tick}); };
  std::uint64_t tick = 1000;
  for (int n = 0; n < kSpans; n += 4) {
    begin(kParent, sizeof(kParent) - 1, tick++);
    for (int c = 0; c < 3; ++c) begin(kChild, sizeof(kChild) - 1, tick++), end(tick++);
    end(tick++);
  }
  struct Open {
    std::uint64_t first_word, name, tick, sequence;
  };
  std::vector<lens::internal::RecordHeader> batch(kSpans);
  const std::uint64_t seed = 0x9e3779b97f4a7c15ULL;
  std::uint64_t sequence = 0;
  for (auto _ : state) {
    Open open[8];
    lens::TraceId trace{};
    int depth = 0, out = 0;
    for (std::size_t i = 0; i < events.size();) {
      if ((events[i] & 0xff) == kBeginTag) {
        open[depth++] = {events[i], events[i + 1], events[i + 2], ++sequence};
        if (depth == 1) {
          const std::uint64_t hi = mix(seed ^ sequence), lo = mix(~seed ^ sequence);
          std::memcpy(trace.bytes.data(), &hi, 8);
          std::memcpy(trace.bytes.data() + 8, &lo, 8);
        }
        i += 3;
        continue;
      }
      const Open& o = open[--depth];
      lens::internal::RecordHeader& r = batch[static_cast<std::size_t>(out++)];
      r = {};
      r.size = sizeof(r);
      r.trace_id = trace;
      const std::uint64_t id = mix(seed + o.sequence);
      std::memcpy(r.span_id.bytes.data(), &id, 8);
      if (depth > 0) {
        const std::uint64_t parent = mix(seed + open[depth - 1].sequence);
        std::memcpy(r.parent_span_id.bytes.data(), &parent, 8);
        r.bits = lens::internal::RecordHeader::kHasParent;
      }
      r.start_tick = o.tick;
      r.end_tick = events[i + 1];
      r.name = {reinterpret_cast<const char*>(static_cast<std::uintptr_t>(o.name)), 0,
                static_cast<std::uint32_t>(o.first_word >> 32)};
      r.group = static_cast<std::uint16_t>(o.first_word >> 8);
      r.trace_flags = 1;
      i += 2;
    }
    benchmark::DoNotOptimize(batch.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kSpans);
  state.counters["ns_per_span"] = benchmark::Counter(static_cast<double>(state.iterations()) * kSpans,
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Floor_PairEventsIntoRecords);

}  // namespace
