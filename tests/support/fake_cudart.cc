// A simulator of the CUDA runtime's event and stream API, built as libcudart.so.12, so lens's device
// timing runs here where no GPU is: the same entry points, with the behaviour NVIDIA documents.
//
// - Each stream runs its work in order on a thread of its own: "kernels" of a duration the test sets
//   (fake_cuda_launch_kernel) and recorded events. The device clock is the host's steady clock, moved on by exactly
//   each kernel's duration, so elapsed times are exact; an event completes when the host clock reaches its time.
// - cudaEventQuery: cudaSuccess once complete (or never recorded), cudaErrorNotReady before; an unknown or destroyed
//   event is cudaErrorInvalidResourceHandle. cudaEventElapsedTime answers from the device clock, cudaErrorNotReady
//   while either event is pending, cudaErrorInvalidResourceHandle when one was never recorded.
// - Capture: fake_cuda_begin_capture makes cudaStreamIsCapturing say so; an event recorded there is counted
//   (fake_cuda_records_while_capturing), since a real capture would take it into the graph.
// - Global capture mode: while any stream captures, a thread that has not made its mode relaxed
//   (cudaThreadExchangeStreamCaptureMode) is refused cudaEventQuery and cudaEventElapsedTime
//   (cudaErrorStreamCaptureUnsupported), as the runtime refuses potentially unsafe calls.
// - A wedged driver: after fake_cuda_wedge_event_query(true), cudaEventQuery does not return until
//   fake_cuda_wedge_event_query(false).
// - Every entry point is counted per calling thread (fake_cuda_calls_on_this_thread) and in all, so a test proves
//   what a thread never called (a sync on the training thread).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSuccess = 0, kInvalidValue = 1, kInvalidResourceHandle = 400, kNotReady = 600,
              kStreamCaptureUnsupported = 900, kCaptureModeGlobal = 0;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

struct Event {
  bool recorded = false, complete = false;
  std::uint64_t generation = 0;  // a record again makes the earlier one's completion moot
  std::int64_t device_ns = 0;
};

struct Work {
  std::int64_t kernel_ns = 0;  // a kernel when > 0
  Event* event = nullptr;      // else an event to complete
  std::uint64_t generation = 0;
  std::int64_t submitted_ns = now_ns();  // the device cannot start it before it was given
};

// The simulator's state, never destroyed: stream threads wait on it until the process is gone.
struct State {
  std::mutex mutex;  // guards everything here and every Stream's and Event's fields
  std::condition_variable work;
  std::set<Event*> events;
};
State& state = *new State;
std::mutex& g_mutex = state.mutex;
std::condition_variable& g_work = state.work;
std::set<Event*>& g_events = state.events;

// Calls counted per entry point, in all and per thread: cheap (no lock), so that a benchmark on the simulator times
// lens and the simulator's work, not its bookkeeping.
constexpr const char* kEntryPoints[] = {"cudaEventCreateWithFlags",
                                        "cudaEventDestroy",
                                        "cudaEventRecord",
                                        "cudaEventQuery",
                                        "cudaEventElapsedTime",
                                        "cudaEventSynchronize",
                                        "cudaStreamSynchronize",
                                        "cudaDeviceSynchronize",
                                        "cudaStreamIsCapturing",
                                        "cudaGetDevice",
                                        "cudaSetDevice",
                                        "cudaStreamCreateWithFlags",
                                        "cudaThreadExchangeStreamCaptureMode"};
constexpr int kEntryPointCount = sizeof kEntryPoints / sizeof kEntryPoints[0];
std::atomic<long> g_calls[kEntryPointCount];
thread_local long t_calls[kEntryPointCount];

int index_of(const char* function) {
  for (int i = 0; i < kEntryPointCount; ++i)
    if (std::strcmp(kEntryPoints[i], function) == 0) return i;
  return -1;
}
thread_local int t_capture_mode = kCaptureModeGlobal;
int g_capturing_streams = 0;  // guarded by g_mutex

// A potentially unsafe call from this thread while a stream captures in global mode (caller holds g_mutex).
bool refused_while_capturing() { return g_capturing_streams > 0 && t_capture_mode == kCaptureModeGlobal; }

void count_at(int index) {
  ++t_calls[index];
  g_calls[index].fetch_add(1, std::memory_order_relaxed);
}

// Counts a call of the entry point `name` (one of kEntryPoints), looked up once per call site.
#define COUNT(name)                                \
  do {                                             \
    static const int entry_point = index_of(name); \
    count_at(entry_point);                         \
  } while (false)

struct Stream {
  std::deque<Work> queue;
  bool capturing = false;
  std::int64_t device_ns = 0;  // when the device is done with what it was given
  std::thread runner;

  Stream() : runner([this] { run(); }) { runner.detach(); }

  void run() {
    std::unique_lock lock(g_mutex);
    for (;;) {
      g_work.wait(lock, [&] { return !queue.empty(); });
      const Work w = queue.front();
      queue.pop_front();
      // The device's clock is exact: work starts when the work before it ended, or when it was given if the device was
      // idle, whenever this thread gets to it (its wake-ups are late by the host's scheduling, the device is not).
      if (w.kernel_ns > 0) {
        device_ns = std::max(device_ns, w.submitted_ns) + w.kernel_ns;
        const std::int64_t until = device_ns;
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::nanoseconds(until - now_ns()));
        lock.lock();
      } else if (g_events.count(w.event) != 0 && w.event->generation == w.generation) {
        w.event->device_ns = std::max(device_ns, w.submitted_ns);
        device_ns = w.event->device_ns;
        w.event->complete = true;
      }
    }
  }
};

// Streams live for the process (their threads are detached): the legacy default stream is handle 0.
Stream& stream_of(void* handle) {
  static Stream* legacy = new Stream;
  return handle == nullptr ? *legacy : *static_cast<Stream*>(handle);
}

}  // namespace

extern "C" {

long fake_cuda_records_while_capturing = 0;

std::atomic<bool> g_event_query_wedged{false};
void fake_cuda_wedge_event_query(bool wedged) { g_event_query_wedged.store(wedged); }

// ---- the test's controls ----

void* fake_cuda_stream_create() { return new Stream; }

void fake_cuda_launch_kernel(void* stream, double microseconds) {
  std::lock_guard lock(g_mutex);
  stream_of(stream).queue.push_back({static_cast<std::int64_t>(microseconds * 1000), nullptr, 0, now_ns()});
  g_work.notify_all();
}

void fake_cuda_begin_capture(void* stream) {
  std::lock_guard lock(g_mutex);
  if (!stream_of(stream).capturing) ++g_capturing_streams;
  stream_of(stream).capturing = true;
}

void fake_cuda_end_capture(void* stream) {
  std::lock_guard lock(g_mutex);
  if (stream_of(stream).capturing) --g_capturing_streams;
  stream_of(stream).capturing = false;
}

long fake_cuda_calls_on_this_thread(const char* function) {
  const int i = index_of(function);
  return i < 0 ? 0 : t_calls[i];
}

long fake_cuda_calls(const char* function) {
  const int i = index_of(function);
  return i < 0 ? 0 : g_calls[i].load(std::memory_order_relaxed);
}

// ---- the runtime's entry points ----

int cudaEventCreateWithFlags(void** event, unsigned /*flags*/) {
  COUNT("cudaEventCreateWithFlags");
  if (event == nullptr) return kInvalidValue;
  auto* e = new Event;
  std::lock_guard lock(g_mutex);
  g_events.insert(e);
  *event = e;
  return kSuccess;
}

int cudaEventDestroy(void* event) {
  COUNT("cudaEventDestroy");
  std::lock_guard lock(g_mutex);
  auto* e = static_cast<Event*>(event);
  if (g_events.erase(e) == 0) return kInvalidResourceHandle;
  delete e;  // queued work for it finds it gone
  return kSuccess;
}

int cudaEventRecord(void* event, void* stream) {
  COUNT("cudaEventRecord");
  std::lock_guard lock(g_mutex);
  auto* e = static_cast<Event*>(event);
  if (g_events.count(e) == 0) return kInvalidResourceHandle;
  Stream& s = stream_of(stream);
  if (s.capturing) ++fake_cuda_records_while_capturing;
  e->recorded = true;
  ++e->generation;
  const std::int64_t now = now_ns();
  if (s.queue.empty() && s.device_ns <= now) {  // an idle device takes it at once: no wake-up of the stream's thread
    e->device_ns = s.device_ns = now;
    e->complete = true;
    return kSuccess;
  }
  e->complete = false;
  s.queue.push_back({0, e, e->generation, now});
  g_work.notify_all();
  return kSuccess;
}

int cudaEventQuery(void* event) {
  COUNT("cudaEventQuery");
  while (g_event_query_wedged.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::lock_guard lock(g_mutex);
  auto* e = static_cast<Event*>(event);
  if (g_events.count(e) == 0) return kInvalidResourceHandle;
  if (refused_while_capturing()) return kStreamCaptureUnsupported;
  return !e->recorded || e->complete ? kSuccess : kNotReady;
}

int cudaEventElapsedTime(float* ms, void* start, void* end) {
  COUNT("cudaEventElapsedTime");
  std::lock_guard lock(g_mutex);
  auto *a = static_cast<Event*>(start), *b = static_cast<Event*>(end);
  if (ms == nullptr) return kInvalidValue;
  if (refused_while_capturing()) return kStreamCaptureUnsupported;
  if (g_events.count(a) == 0 || g_events.count(b) == 0 || !a->recorded || !b->recorded) return kInvalidResourceHandle;
  if (!a->complete || !b->complete) return kNotReady;
  *ms = static_cast<float>(static_cast<double>(b->device_ns - a->device_ns) / 1e6);
  return kSuccess;
}

int cudaEventSynchronize(void* event) {
  COUNT("cudaEventSynchronize");
  for (;;) {
    const int state = cudaEventQuery(event);
    if (state != kNotReady) return state;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

int cudaStreamSynchronize(void* /*stream*/) {
  COUNT("cudaStreamSynchronize");
  return kSuccess;
}

int cudaDeviceSynchronize() {
  COUNT("cudaDeviceSynchronize");
  return kSuccess;
}

int cudaStreamIsCapturing(void* stream, int* status) {
  COUNT("cudaStreamIsCapturing");
  if (status == nullptr) return kInvalidValue;
  std::lock_guard lock(g_mutex);
  *status = stream_of(stream).capturing ? 1 : 0;
  return kSuccess;
}

int cudaGetDevice(int* device) {
  COUNT("cudaGetDevice");
  if (device == nullptr) return kInvalidValue;
  const char* index = std::getenv("FAKE_CUDA_DEVICE");
  *device = index != nullptr ? std::atoi(index) : 0;
  return kSuccess;
}

int cudaSetDevice(int device) {
  COUNT("cudaSetDevice");
  return device < 0 ? kInvalidValue : kSuccess;
}

int cudaStreamCreateWithFlags(void** stream, unsigned /*flags*/) {
  COUNT("cudaStreamCreateWithFlags");
  if (stream == nullptr) return kInvalidValue;
  *stream = new Stream;
  return kSuccess;
}

int cudaThreadExchangeStreamCaptureMode(int* mode) {
  COUNT("cudaThreadExchangeStreamCaptureMode");
  if (mode == nullptr) return kInvalidValue;
  const int previous = t_capture_mode;
  t_capture_mode = *mode;
  *mode = previous;
  return kSuccess;
}

}  // extern "C"
