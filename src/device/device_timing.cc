#include "device/device_timing.h"

#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "lens/device.h"

namespace lens::internal {

std::atomic<std::uint64_t> g_device_group_bits{0};

namespace {

std::atomic<const CudaRuntime*> g_cuda{nullptr};
// NVTX: the library once loaded (never cleared, so a range pushed before a shutdown is still popped after it), and
// whether spans push ranges now.
std::atomic<const Nvtx*> g_nvtx{nullptr};
std::atomic<bool> g_nvtx_ranges{false};

// A pair's life: taken by a span's start (open), handed over at its end (ended), claimed by a poller (polled: one
// export thread at a time, should a pipeline that gave up at shutdown still poll beside the next one), then given
// back once emitted or dropped (free), or handed back (ended) while the GPU is not done. Only the owning thread takes a
// free pair.
enum PairState : std::uint8_t { kFree = 0, kOpen = 1, kEnded = 2, kPolled = 3 };

struct Counters {
  std::atomic<std::uint64_t> skipped_pool_exhausted{0}, skipped_capturing{0}, skipped_error{0};
  std::atomic<std::uint64_t> dropped_incomplete{0}, dropped_error{0}, emitted{0};
};
Counters& g_counts = *new Counters;  // never destroyed: a thread may count during exit

void bump(std::atomic<std::uint64_t>& c) noexcept { c.fetch_add(1, std::memory_order_relaxed); }

thread_local cudaStream_t t_stream = nullptr;
// Set on the export thread: the device spans it records through the span path are not timed again.
thread_local bool t_emits_device_spans = false;

}  // namespace

struct DevicePair {
  std::atomic<std::uint8_t> state{kFree};
  cudaEvent_t start = nullptr, end = nullptr;  // created on the pair's first use, kept for the process
  cudaStream_t stream = nullptr;               // where both were recorded
  int device = 0;
  // The host span, written at its end (before the state says ended).
  SpanContext host;
  std::uint16_t group = 0;
  const char* static_name = nullptr;  // a literal, else the copy in `name`
  std::uint32_t name_length = 0;
  char name[kNameBytes];
};

namespace {

// One recording thread's pairs. Never freed: a thread that ends leaves it (orphaned) for a later thread to adopt.
struct PairPool {
  std::unique_ptr<DevicePair[]> pairs{new DevicePair[kPairsPerThread]};
  std::uint32_t cursor = 0;  // the owner's next place to look
  int device = 0;            // the owner's current device when it adopted the pool
  std::atomic<bool> orphaned{false};

  // A free pair near the cursor (pairs go back roughly in the order they were taken; an outer span's stays out
  // longer), or null after kProbes busy ones: the pool is as good as exhausted.
  DevicePair* take() noexcept {
    constexpr std::uint32_t kProbes = 64;
    for (std::uint32_t i = 0; i < kProbes; ++i) {
      DevicePair& p = pairs[(cursor + i) % kPairsPerThread];
      if (p.state.load(std::memory_order_acquire) == kFree) {
        cursor = (cursor + i + 1) % kPairsPerThread;
        p.state.store(kOpen, std::memory_order_relaxed);
        return &p;
      }
    }
    return nullptr;
  }
};

struct Pools {
  std::mutex mutex;  // guards list (never on the span path after a thread's first device span)
  std::vector<PairPool*> list;
};
Pools& g_pools = *new Pools;

// Marks the thread's pool orphaned when the thread ends.
struct PoolOwnership {
  PairPool* pool = nullptr;
  ~PoolOwnership() {
    if (pool != nullptr) pool->orphaned.store(true, std::memory_order_release);
  }
};
thread_local PoolOwnership t_pool;

// The pool of a thread that ended, once it holds nothing in flight, else a new one; null when out of memory.
__attribute__((noinline)) PairPool* attach_pool(const CudaRuntime& cuda) noexcept {
  try {
    PairPool* pool = nullptr;
    {
      std::lock_guard lock(g_pools.mutex);
      for (PairPool* p : g_pools.list) {
        if (!p->orphaned.load(std::memory_order_acquire)) continue;
        const bool idle = std::all_of(p->pairs.get(), p->pairs.get() + kPairsPerThread, [](const DevicePair& pair) {
          return pair.state.load(std::memory_order_acquire) == kFree;
        });
        if (idle) {
          p->orphaned.store(false, std::memory_order_relaxed);
          pool = p;
          break;
        }
      }
      if (pool == nullptr) {
        pool = new PairPool;
        g_pools.list.push_back(pool);
      }
    }
    int device = 0;
    if (cuda.get_device(&device) == kCudaSuccess) pool->device = device;
    t_pool.pool = pool;
    return pool;
  } catch (...) {
    return nullptr;
  }
}

std::vector<PairPool*> all_pools() {
  std::lock_guard lock(g_pools.mutex);
  return g_pools.list;
}

// True when recording on `stream` now would be wrong: it captures a graph (or capture was invalidated), or the
// runtime cannot say.
bool capturing(const CudaRuntime& cuda, cudaStream_t stream) noexcept {
  int status = kCudaStreamCaptureStatusNone;
  return cuda.stream_is_capturing(stream, &status) != kCudaSuccess || status != kCudaStreamCaptureStatusNone;
}

bool has_events(const CudaRuntime& cuda, DevicePair& p) noexcept {
  if (p.start == nullptr && cuda.event_create_with_flags(&p.start, kCudaEventDefault) != kCudaSuccess)
    p.start = nullptr;
  if (p.end == nullptr && cuda.event_create_with_flags(&p.end, kCudaEventDefault) != kCudaSuccess) p.end = nullptr;
  return p.start != nullptr && p.end != nullptr;
}

void give_back(DevicePair& p) noexcept { p.state.store(kFree, std::memory_order_release); }

// Claims an ended pair for the calling poller.
bool claim(DevicePair& p) noexcept {
  std::uint8_t ended = kEnded;
  return p.state.compare_exchange_strong(ended, kPolled, std::memory_order_acquire, std::memory_order_relaxed);
}

}  // namespace

// ---- setup -----------------------------------------------------------------------------------------------------

void start_device_timing(const CudaRuntime* cuda, std::uint64_t group_bits, const Nvtx* nvtx) noexcept {
  if (nvtx != nullptr) g_nvtx.store(nvtx, std::memory_order_release);
  g_nvtx_ranges.store(cuda != nullptr && group_bits != 0 && nvtx != nullptr, std::memory_order_relaxed);
  g_cuda.store(group_bits != 0 ? cuda : nullptr, std::memory_order_release);
  g_device_group_bits.store(cuda != nullptr ? group_bits : 0, std::memory_order_relaxed);
}

void stop_device_timing() noexcept {
  g_device_group_bits.store(0, std::memory_order_relaxed);
  g_nvtx_ranges.store(false, std::memory_order_relaxed);
  g_cuda.store(nullptr, std::memory_order_release);
}

const CudaRuntime* device_timing_runtime() noexcept { return g_cuda.load(std::memory_order_acquire); }

void set_thread_device_stream(void* stream) noexcept {
  t_stream = static_cast<cudaStream_t>(stream);
  // A thread that moved to another device says so by setting its stream: its pairs' events are made there.
  const CudaRuntime* cuda = g_cuda.load(std::memory_order_acquire);
  int device = 0;
  if (cuda != nullptr && t_pool.pool != nullptr && cuda->get_device(&device) == kCudaSuccess)
    t_pool.pool->device = device;
}
void* thread_device_stream() noexcept { return t_stream; }

// ---- the span path ---------------------------------------------------------------------------------------------

DevicePair* device_span_start() noexcept {
  const CudaRuntime* cuda = g_cuda.load(std::memory_order_acquire);
  if (cuda == nullptr || t_emits_device_spans) return nullptr;
  PairPool* pool = t_pool.pool != nullptr ? t_pool.pool : attach_pool(*cuda);
  if (pool == nullptr) return nullptr;
  const cudaStream_t stream = t_stream;
  if (capturing(*cuda, stream)) {
    bump(g_counts.skipped_capturing);
    return nullptr;
  }
  DevicePair* pair = pool->take();
  if (pair == nullptr) {
    bump(g_counts.skipped_pool_exhausted);
    return nullptr;
  }
  if (!has_events(*cuda, *pair) || cuda->event_record(pair->start, stream) != kCudaSuccess) {
    give_back(*pair);
    bump(g_counts.skipped_error);
    return nullptr;
  }
  pair->stream = stream;
  pair->device = pool->device;
  return pair;
}

void device_span_end(DevicePair* pair, const HostSpanIdentity& host) noexcept {
  const CudaRuntime* cuda = g_cuda.load(std::memory_order_acquire);
  if (cuda == nullptr) {  // device timing was turned off while the span was open
    give_back(*pair);
    return;
  }
  if (capturing(*cuda, pair->stream)) {  // capture began inside the span: its end must not enter the graph
    give_back(*pair);
    bump(g_counts.skipped_capturing);
    return;
  }
  if (cuda->event_record(pair->end, pair->stream) != kCudaSuccess) {
    give_back(*pair);
    bump(g_counts.skipped_error);
    return;
  }
  pair->host = host.context;
  pair->group = host.group;
  if (host.name_is_static) {
    pair->static_name = host.name.data();
    pair->name_length = static_cast<std::uint32_t>(host.name.size());
  } else {
    pair->static_name = nullptr;
    pair->name_length = static_cast<std::uint32_t>(std::min(host.name.size(), kNameBytes));
    std::memcpy(pair->name, host.name.data(), pair->name_length);
  }
  pair->state.store(kEnded, std::memory_order_release);
}

void device_span_abandon(DevicePair* pair) noexcept { give_back(*pair); }

bool device_nvtx_push(std::string_view name, bool nul_terminated) noexcept {
  const Nvtx* n = g_nvtx.load(std::memory_order_acquire);
  if (n == nullptr || !g_nvtx_ranges.load(std::memory_order_relaxed)) return false;
  n->push(name, nul_terminated);
  return true;
}

void device_nvtx_pop() noexcept {
  if (const Nvtx* n = g_nvtx.load(std::memory_order_acquire)) n->pop();
}

// ---- the device's clock ----------------------------------------------------------------------------------------

DeviceClock::DeviceClock(const CudaRuntime& cuda, int device) noexcept : cuda_(cuda), device_(device) {
  // The export thread's current device becomes this one: the stream and the events are made on it.
  failed_ = cuda_.set_device(device) != kCudaSuccess ||
            cuda_.stream_create_with_flags(&stream_, kCudaStreamNonBlocking) != kCudaSuccess ||
            cuda_.event_create_with_flags(&events_[0], kCudaEventDefault) != kCudaSuccess ||
            cuda_.event_create_with_flags(&events_[1], kCudaEventDefault) != kCudaSuccess;
  if (!failed_) record(0, std::chrono::steady_clock::now());
}

void DeviceClock::record(int which, std::chrono::steady_clock::time_point now) noexcept {
  if (cuda_.event_record(events_[which], stream_) != kCudaSuccess) {
    failed_ = true;
    return;
  }
  // After the call: the idle stream takes the event a launch latency (a few microseconds on a GPU) after the call
  // returns, so device times read up to that much early, never late.
  time_.refresh();
  host_unix_nanos_[which] = time_.to_unix_nanos(now_ticks());
  pending_ = which;
  last_record_ = now;
}

bool DeviceClock::ready(std::chrono::steady_clock::time_point now) noexcept {
  if (failed_) return false;
  if (pending_ >= 0) {
    const cudaError_t state = cuda_.event_query(events_[pending_]);
    if (state == kCudaSuccess) {
      current_ = pending_;
      pending_ = -1;
    } else if (state != kCudaErrorNotReady && state != kCudaErrorStreamCaptureUnsupported) {
      failed_ = true;
      return false;
    }
  }
  if (current_ >= 0 && pending_ < 0 && now - last_record_ >= kRecalibrateEvery) record(1 - current_, now);
  return current_ >= 0;
}

bool DeviceClock::unix_nanos_of(cudaEvent_t event, std::uint64_t* out) const noexcept {
  float ms = 0;
  if (cuda_.event_elapsed_time(&ms, events_[current_], event) != kCudaSuccess) return false;
  *out = host_unix_nanos_[current_] + static_cast<std::uint64_t>(std::llround(static_cast<double>(ms) * 1e6));
  return true;
}

// ---- the export thread -----------------------------------------------------------------------------------------

DevicePoller::DevicePoller(const CudaRuntime& cuda) : cuda_(cuda) {
  t_emits_device_spans = true;
  // Queries from this thread stay allowed while a training thread captures a graph in global mode.
  int mode = kCudaStreamCaptureModeRelaxed;
  cuda_.thread_exchange_stream_capture_mode(&mode);
}

DeviceClock* DevicePoller::clock_of(int device) {
  for (auto& c : clocks_)
    if (c->device() == device) return c.get();
  clocks_.push_back(std::make_unique<DeviceClock>(cuda_, device));
  return clocks_.back().get();
}

bool DevicePoller::try_emit(DevicePair& pair, std::chrono::steady_clock::time_point now, const Emit& emit) {
  const cudaError_t state = cuda_.event_query(pair.end);
  if (state == kCudaErrorNotReady || state == kCudaErrorStreamCaptureUnsupported) return false;
  DeviceClock* clock = clock_of(pair.device);
  if (state == kCudaSuccess && !clock->failed() && !clock->ready(now)) return false;  // calibrating
  DeviceSpan d;
  float duration_ms = 0;
  if (state != kCudaSuccess || clock->failed() || !clock->unix_nanos_of(pair.start, &d.start_unix_nanos) ||
      cuda_.event_elapsed_time(&duration_ms, pair.start, pair.end) != kCudaSuccess) {
    bump(g_counts.dropped_error);
    give_back(pair);
    return true;
  }
  // The duration from the pair itself (exact to the event's resolution), not from two readings of the clock.
  d.end_unix_nanos = d.start_unix_nanos +
                     static_cast<std::uint64_t>(std::llround(std::max(0.0, static_cast<double>(duration_ms)) * 1e6));
  d.host = pair.host;
  d.group = pair.group;
  d.device = pair.device;
  d.name = pair.static_name != nullptr ? std::string_view(pair.static_name, pair.name_length)
                                       : std::string_view(pair.name, pair.name_length);
  try {
    emit(d);
    bump(g_counts.emitted);
  } catch (...) {
    bump(g_counts.dropped_error);
  }
  give_back(pair);
  return true;
}

bool DevicePoller::poll(const Emit& emit) {
  const auto now = std::chrono::steady_clock::now();
  for (auto& c : clocks_) c->ready(now);  // recalibrates when due, even with nothing to emit
  bool outstanding = false;
  for (PairPool* pool : all_pools()) {
    for (std::uint32_t i = 0; i < kPairsPerThread; ++i) {
      DevicePair& pair = pool->pairs[i];
      const std::uint8_t state = pair.state.load(std::memory_order_relaxed);
      if (state == kOpen || state == kPolled) {
        outstanding = true;
      } else if (state == kEnded && claim(pair) && !try_emit(pair, now, emit)) {
        pair.state.store(kEnded, std::memory_order_release);  // the GPU is not done: next time
        outstanding = true;
      }
    }
  }
  return outstanding;
}

void DevicePoller::finish(std::chrono::steady_clock::time_point until, const Emit& emit) {
  auto pending = [&] {
    std::uint64_t n = 0;
    for (PairPool* pool : all_pools())
      for (std::uint32_t i = 0; i < kPairsPerThread; ++i)
        n += pool->pairs[i].state.load(std::memory_order_acquire) == kEnded;
    return n;
  };
  for (;;) {
    poll(emit);
    if (pending() == 0) return;
    if (std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::uint64_t dropped = 0;
  for (PairPool* pool : all_pools()) {
    for (std::uint32_t i = 0; i < kPairsPerThread; ++i) {
      DevicePair& pair = pool->pairs[i];
      if (!claim(pair)) continue;
      give_back(pair);  // a later record of its events starts them afresh
      ++dropped;
    }
  }
  g_counts.dropped_incomplete.fetch_add(dropped, std::memory_order_relaxed);
}

DeviceCounts device_counts() noexcept {
  auto get = [](const std::atomic<std::uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  return {get(g_counts.skipped_pool_exhausted), get(g_counts.skipped_capturing), get(g_counts.skipped_error),
          get(g_counts.dropped_incomplete),     get(g_counts.dropped_error),     get(g_counts.emitted)};
}

}  // namespace lens::internal

namespace lens {
void set_device_stream(void* stream) noexcept { internal::set_thread_device_stream(stream); }
void* device_stream() noexcept { return internal::thread_device_stream(); }
}  // namespace lens
