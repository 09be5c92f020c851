// The span path: start, add to, and end a span on the training thread; a span's kinds and who reads them:
// docs/TRACING.md, "A span's life, by kind". No lock, no read-modify-write atomic unless a span ends on another
// thread than it started; an allocation only when the thread's queue chunk is full (every 30-600 spans, see
// span_queue.h), so queue memory follows what is queued.
#include <cxxabi.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <span>
#include <string_view>
#include <type_traits>
#include <typeinfo>

#include "common/clock.h"
#include "common/dcheck.h"
#include "device/device_timing.h"
#include "groups/switch.h"
#include "lens/span.h"
#include "trace/record.h"
#include "trace/span_drain.h"
#include "trace/thread_state.h"

namespace lens {
namespace internal {

namespace {

// ---- the calling thread's state ----------------------------------------------------------------------------

__attribute__((tls_model("initial-exec"))) thread_local ThreadState* t_state = nullptr;

// A thread's end marks its state, for the export thread to free once drained (a pthread key runs for every
// thread, however it was made, and after the thread's C++ thread_local destructors, which may still end spans).
pthread_key_t g_thread_exit_key;
pthread_once_t g_thread_exit_once = PTHREAD_ONCE_INIT;

void on_thread_exit(void* state) noexcept {
  auto* t = static_cast<ThreadState*>(state);
  if (t_state == t) t_state = nullptr;  // a span from a later destructor gets a fresh state
  SpanDrain* p = t->drain;              // read first: once `exited` is set, the export thread may free the state
  t->exited.store(true, std::memory_order_release);
  // Freed at the export thread's next pass: now, not after the schedule delay, or a program that starts many
  // short-lived threads would hold their states (about 190 KiB each) for seconds. (A drain is never freed.)
  if (!p->stopped()) p->wake_exporter();
}

void make_thread_exit_key() noexcept { pthread_key_create(&g_thread_exit_key, on_thread_exit); }

__attribute__((noinline)) ThreadState* attach_state(SpanDrain* p) noexcept {
  ThreadState* t = p->thread_state();
  if (t != nullptr) {
    pthread_once(&g_thread_exit_once, make_thread_exit_key);
    pthread_setspecific(g_thread_exit_key, t);
  }
  t_state = t;
  return t;
}

LENS_ALWAYS_INLINE ThreadState* state_for(SpanDrain* p) noexcept {
  ThreadState* t = t_state;
  if (__builtin_expect(t != nullptr && t->drain == p, 1)) return t;
  return attach_state(p);
}

// The current drain's state for this thread, or null.
LENS_ALWAYS_INLINE ThreadState* current_state() noexcept {
  SpanDrain* p = g_span_drain.load(std::memory_order_acquire);
  return p ? state_for(p) : nullptr;
}

// ---- slots -------------------------------------------------------------------------------------------------

OpenSpan* take_slot(ThreadState& t) noexcept {
  if (__builtin_expect(t.free_slots == 0, 0)) {
    t.free_slots = t.remote_free.exchange(0, std::memory_order_acquire);  // slots freed by other threads
    if (t.free_slots == 0) return nullptr;
  }
  int index = __builtin_ctzll(t.free_slots);
  t.free_slots &= t.free_slots - 1;
  LENS_DCHECK((t.slots[index].generation.load(std::memory_order_relaxed) & 1) == 0);  // a free slot holds no span
  return &t.slots[index];
}

LENS_ALWAYS_INLINE void release_slot(OpenSpan& s, ThreadState* releasing) noexcept {
  LENS_DCHECK((s.generation.load(std::memory_order_relaxed) & 1) == 1);  // odd: it held an open span
  s.generation.store(s.generation.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  std::uint64_t bit = std::uint64_t{1} << s.owner_slot_index;
  LENS_DCHECK(releasing != s.owner || (s.owner->free_slots & bit) == 0);  // never released twice
  if (releasing == s.owner)
    s.owner->free_slots |= bit;
  else
    s.owner->remote_free.fetch_or(bit, std::memory_order_release);
}

bool owns(const SpanHandle& h) noexcept {
  return h.slot != nullptr && h.slot->generation.load(std::memory_order_relaxed) == h.generation;
}

}  // namespace

// What a light scope's handle holds in place of a slot (its generation: the index of its context entry). Never open
// (generation 0), so owns() is false for it: code that does not know light scopes leaves them alone.
OpenSpan g_light_scope_marker;

namespace {

// The context entry of light scope `h` on the calling thread while it is open or promoted (null once it ended, or
// from a copy of its handle that outlived it: the entry is another span's then).
ContextEntry* live_light_entry(const SpanHandle& h) noexcept {
  ThreadState* t = t_state;
  if (t == nullptr || h.generation >= static_cast<std::uint32_t>(ThreadState::kMaxContextDepth)) return nullptr;
  ContextEntry& e = t->contexts[h.generation];
  const bool live = e.light == LightScopeState::kOpen || e.light == LightScopeState::kPromoted;
  return live && e.context.span_id == h.context.span_id ? &e : nullptr;
}

// Packed attributes (lens/internal/scope_attributes.h) unpacked, for the slot path.
class UnpackedAttributes {
 public:
  UnpackedAttributes(const PackedAttribute* packed, std::uint32_t count) noexcept : count_(count) {
    LENS_DCHECK(count <= kMaxScopeAttributes);
    for (std::uint32_t i = 0; i < count; ++i) new (&storage_.attributes[i]) Attribute(unpack(packed[i]));
  }
  std::span<const Attribute> view() const noexcept { return {storage_.attributes, count_}; }

 private:
  static_assert(std::is_trivially_destructible_v<Attribute>);
  union Storage {  // an Attribute has no default: the first count_ are constructed
    Storage() noexcept {}
    Attribute attributes[kMaxScopeAttributes];
  } storage_;
  std::uint32_t count_;
};

// ---- arena writing -----------------------------------------------------------------------------------------

// Writes entries at the end of a span's arena through a local cursor (so the compiler keeps it in a register
// despite the byte stores), published by commit().
class ArenaWriter {
 public:
  explicit ArenaWriter(OpenSpan& s) noexcept : s_(s), begin_(s.arena), at_(s.arena + s.header.arena_used) {}
  bool fits(std::size_t bytes) const noexcept { return static_cast<std::size_t>(at_ - begin_) + bytes <= kArenaBytes; }
  template <typename T>
  void put(const T& v) noexcept {
    std::memcpy(at_, &v, sizeof v);
    at_ += sizeof v;
  }
  void bytes(const void* p, std::size_t n) noexcept {
    std::memcpy(at_, p, n);
    at_ += n;
  }
  std::uint32_t position() const noexcept { return static_cast<std::uint32_t>(at_ - begin_); }
  std::uint8_t* cursor() const noexcept { return at_; }
  const std::uint8_t* limit() const noexcept { return begin_ + kArenaBytes; }
  void set_cursor(std::uint8_t* at) noexcept { at_ = at; }
  // Publishes what was written: a truncation that interrupts a write, or a hang snapshot read on another thread,
  // sees only complete entries (a release store: a plain store on x86 and ARM's stlr).
  void commit() noexcept {
    LENS_DCHECK(position() <= kArenaBytes);  // every entry was checked with fits() before it was written
    __atomic_store_n(&s_.header.arena_used, position(), __ATOMIC_RELEASE);
  }

 private:
  OpenSpan& s_;
  std::uint8_t* const begin_;
  std::uint8_t* at_;
};

std::size_t text_bytes(bool is_static, std::size_t length) noexcept { return is_static ? sizeof(const char*) : length; }

void put_text(ArenaWriter& w, std::string_view text, bool is_static) noexcept {
  if (is_static) {
    w.put(text.data());
  } else {
    w.bytes(text.data(), text.size());
  }
}

// Bytes a value takes, with strings cut to `max_length`.
std::size_t value_bytes(const AttributeValue& v, std::size_t max_length) noexcept {
  switch (v.type()) {
    case ValueType::kBool: return 1;
    case ValueType::kInt:
    case ValueType::kDouble: return 8;
    case ValueType::kString: return std::min(v.as_string().size(), max_length);
    case ValueType::kBoolArray: return v.as_bools().size();
    case ValueType::kIntArray: return 8 * v.as_ints().size();
    case ValueType::kDoubleArray: return 8 * v.as_doubles().size();
    case ValueType::kStringArray: {
      std::size_t n = 4;
      for (std::string_view s : v.as_strings()) n += 4 + std::min(s.size(), max_length);
      return n;
    }
  }
  return 0;
}

struct ArenaCursor {
  std::uint8_t* at;
  void u8(std::uint8_t v) noexcept { *at++ = v; }
  void u32(std::uint32_t v) noexcept {
    std::memcpy(at, &v, 4);
    at += 4;
  }
  void bytes(const void* p, std::size_t n) noexcept {
    std::memcpy(at, p, n);
    at += n;
  }
};

// Array values (the rare case).
void put_array(ArenaCursor& c, const AttributeValue& v, std::size_t max_length) noexcept {
  switch (v.type()) {
    case ValueType::kBoolArray:
      for (bool b : v.as_bools()) c.u8(b ? 1 : 0);
      break;
    case ValueType::kIntArray: c.bytes(v.as_ints().data(), 8 * v.as_ints().size()); break;
    case ValueType::kDoubleArray: c.bytes(v.as_doubles().data(), 8 * v.as_doubles().size()); break;
    case ValueType::kStringArray:
      c.u32(static_cast<std::uint32_t>(v.as_strings().size()));
      for (std::string_view s : v.as_strings()) {
        auto n = static_cast<std::uint32_t>(std::min(s.size(), max_length));
        c.u32(n);
        c.bytes(s.data(), n);
      }
      break;
    default: break;
  }
}

// Appends one attribute entry at `at`; returns the end of the entry, or null when it does not fit before
// `end`. Works on a local pointer (not through the writer) so that the byte stores, which may alias anything,
// do not force the cursor back to memory after each one.
std::uint8_t* put_attribute(std::uint8_t* at, const std::uint8_t* end, const Attribute& a,
                            std::size_t max_length) noexcept {
  const bool key_static = a.key.is_static();
  const ValueType type = a.value.type();
  if (key_static && (type == ValueType::kInt || type == ValueType::kDouble)) {
    // The common case, a literal key and an 8-byte number: one fixed 28-byte entry.
    constexpr std::size_t kSize = kStaticNumberAttributeBytes;
    if (static_cast<std::size_t>(end - at) < kSize) return nullptr;
    AttributeHead head{static_cast<std::uint8_t>(EntryTag::kAttribute), static_cast<std::uint8_t>(type), 1, 0,
                       static_cast<std::uint32_t>(a.key.text().size())};
    const char* key = a.key.text().data();
    const std::uint32_t eight = 8;
    std::uint64_t bits;
    if (type == ValueType::kInt) {
      std::int64_t v = a.value.as_int();
      std::memcpy(&bits, &v, 8);
    } else {
      double v = a.value.as_double();
      std::memcpy(&bits, &v, 8);
    }
    std::memcpy(at, &head, sizeof head);
    std::memcpy(at + sizeof head, &key, sizeof key);
    std::memcpy(at + sizeof head + sizeof key, &eight, sizeof eight);
    std::memcpy(at + sizeof head + sizeof key + sizeof eight, &bits, sizeof bits);
    return at + kSize;
  }
  const std::string_view key = a.key.text();
  const std::size_t n = value_bytes(a.value, max_length);
  if (static_cast<std::size_t>(end - at) < sizeof(AttributeHead) + text_bytes(key_static, key.size()) + 4 + n)
    return nullptr;
  AttributeHead head{static_cast<std::uint8_t>(EntryTag::kAttribute), static_cast<std::uint8_t>(a.value.type()),
                     static_cast<std::uint8_t>(key_static ? 1 : 0), 0, static_cast<std::uint32_t>(key.size())};
  std::memcpy(at, &head, sizeof head);
  at += sizeof head;
  if (key_static) {
    const char* pointer = key.data();
    std::memcpy(at, &pointer, sizeof pointer);
    at += sizeof pointer;
  } else {
    std::memcpy(at, key.data(), key.size());
    at += key.size();
  }
  const auto n32 = static_cast<std::uint32_t>(n);
  std::memcpy(at, &n32, 4);
  at += 4;
  switch (a.value.type()) {
    case ValueType::kInt: {
      std::int64_t v = a.value.as_int();
      std::memcpy(at, &v, 8);
      return at + 8;
    }
    case ValueType::kDouble: {
      double v = a.value.as_double();
      std::memcpy(at, &v, 8);
      return at + 8;
    }
    case ValueType::kBool: *at = a.value.as_bool() ? 1 : 0; return at + 1;
    case ValueType::kString: std::memcpy(at, a.value.as_string().data(), n); return at + n;
    default: {
      ArenaCursor c{at};
      put_array(c, a.value, max_length);
      return c.at;
    }
  }
}

bool put_attribute(ArenaWriter& w, const Attribute& a, std::size_t max_length) noexcept {
  std::uint8_t* next = put_attribute(w.cursor(), w.limit(), a, max_length);
  if (next == nullptr) return false;
  w.set_cursor(next);
  return true;
}

std::size_t max_value_length(const Limits& l) noexcept {
  return l.span_attribute_value_length ? static_cast<std::size_t>(*l.span_attribute_value_length) : SIZE_MAX;
}

// The attributes of an event or a link: a u32 count written and a u32 count dropped, then the entries.
// The attribute entries of an event or a link, whose AttributeCounts are at `counts` (already reserved).
void put_counted_attributes(ArenaWriter& w, std::uint8_t* counts, std::span<const Attribute> attributes,
                            std::int64_t limit, std::size_t max_length) noexcept {
  AttributeCounts c{0, 0};
  for (const Attribute& a : attributes) {
    if (c.written >= limit || !put_attribute(w, a, max_length)) {
      ++c.dropped;
      continue;
    }
    ++c.written;
  }
  std::memcpy(counts, &c, sizeof c);
}

void append_attributes(OpenSpan& s, const Limits& limits, std::span<const Attribute> attributes) noexcept {
  ArenaWriter w(s);
  std::uint8_t* at = w.cursor();
  const std::uint8_t* end = w.limit();
  const std::size_t max_length = max_value_length(limits);
  std::uint32_t count = s.header.attribute_count, dropped = 0;
  for (const Attribute& a : attributes) {
    std::uint8_t* next = count < limits.span_attribute_count ? put_attribute(at, end, a, max_length) : nullptr;
    if (next == nullptr) {
      ++dropped;
      continue;
    }
    at = next;
    ++count;
  }
  w.set_cursor(at);
  s.header.attribute_count = static_cast<std::uint16_t>(count);
  s.header.dropped_attributes += dropped;
  w.commit();
}

void append_event(OpenSpan& s, const Limits& limits, SpanName name, std::uint64_t tick,
                  std::span<const Attribute> attributes) noexcept {
  ArenaWriter w(s);
  const std::size_t fixed = sizeof(TextHead) + text_bytes(name.is_static(), name.text().size()) + sizeof(EventTail);
  if (s.header.event_count >= limits.span_event_count || !w.fits(fixed)) {
    ++s.header.dropped_events;
    return;
  }
  w.put(TextHead{static_cast<std::uint8_t>(EntryTag::kEvent),
                 static_cast<std::uint8_t>(name.is_static() ? 1 : 0),
                 {0, 0},
                 static_cast<std::uint32_t>(name.text().size())});
  put_text(w, name.text(), name.is_static());
  std::uint8_t* tail = w.cursor();
  w.put(EventTail{tick, {0, 0}});
  put_counted_attributes(w, tail + offsetof(EventTail, counts), attributes, limits.event_attribute_count,
                         max_value_length(limits));
  ++s.header.event_count;
  w.commit();
}

void append_text_entry(OpenSpan& s, EntryTag tag, std::string_view text, std::uint32_t* entry_offset) noexcept {
  ArenaWriter w(s);
  if (!w.fits(sizeof(TextHead) + text.size())) return;
  *entry_offset = w.position();
  w.put(TextHead{static_cast<std::uint8_t>(tag), 0, {0, 0}, static_cast<std::uint32_t>(text.size())});
  w.bytes(text.data(), text.size());
  w.commit();
}

// Copies `name` into the arena, cut to a quarter of it (a runaway name must not fill it), and points the header at
// the copy; false, the name left as it was, when the arena has no room (only a span renamed late: a new one's is
// empty).
bool set_copied_name(OpenSpan& s, std::string_view name) noexcept {
  constexpr std::uint32_t kNoRoom = ~std::uint32_t{0};
  std::uint32_t entry = kNoRoom;
  const std::string_view text = name.substr(0, kArenaBytes / 4);
  append_text_entry(s, EntryTag::kName, text, &entry);
  if (entry == kNoRoom) return false;
  s.header.name =
      TextRef{nullptr, static_cast<std::uint32_t>(entry + sizeof(TextHead)), static_cast<std::uint32_t>(text.size())};
  return true;
}

// Sets (or, when there is no room, leaves unset) the status description.
void set_status_message(OpenSpan& s, std::string_view message) noexcept {
  std::uint32_t entry = 0;
  std::uint32_t before = s.header.arena_used;
  append_text_entry(s, EntryTag::kStatusMessage, message, &entry);
  s.header.status_message_entry = s.header.arena_used > before ? entry + 1 : 0;
}

// ---- ending ------------------------------------------------------------------------------------------------

// What a push into `t`'s queue other than kQueued asks: a drop counted, the export thread woken.
__attribute__((noinline)) void on_queue_push(ThreadState& t, SpanQueue::Push pushed) noexcept {
  if (pushed == SpanQueue::Push::kBatchMayWait && !t.queue.batch_waiting()) return;
  if (pushed == SpanQueue::Push::kDropped) ThreadCounters::bump(t.counters.dropped_queue_full);
  if (pushed == SpanQueue::Push::kQueuedPastHalf)
    t.drain->wake_exporter_now();  // at most once a chunk, and only while the queues back up
  else
    t.drain->wake_exporter();  // a full batch waits, or a span was dropped
}

// Queues a finished record from `t`'s thread (its drain live) and counts the outcome.
LENS_ALWAYS_INLINE void queue_record(ThreadState& t, OpenSpan& s) noexcept {
  ThreadCounters::bump(t.counters.produced);
  LENS_DCHECK(s.header.arena_used <= kArenaBytes);
  s.header.size = static_cast<std::uint32_t>((sizeof(RecordHeader) + s.header.arena_used + 7) & ~std::size_t{7});
  const SpanQueue::Push pushed = t.queue.push(s.header, s.arena);
  if (__builtin_expect(pushed != SpanQueue::Push::kQueued, 0)) on_queue_push(t, pushed);
}

void record_exception_entry(OpenSpan& s, const Limits& limits, std::string_view type, std::string_view message,
                            bool escaped) noexcept {
  const Attribute attributes[] = {
      {"exception.type", type}, {"exception.message", message}, {"exception.escaped", escaped}};
  append_event(s, limits, "exception", now_ticks(), attributes);
  s.header.bits |= RecordHeader::kHasException;
}

// The rank's count of communication spans so far, on this one (CONTRACT §1, lens.collective.seq). An atomic
// increment, on communication spans only: they come from any thread that talks to other ranks.
void append_collective_sequence(OpenSpan& s, SpanDrain& p) noexcept {
  const std::int64_t sequence = p.collective_sequence.fetch_add(1, std::memory_order_relaxed) + 1;
  const Attribute attribute[] = {{"lens.collective.seq", sequence}};
  append_attributes(s, p.limits, attribute);
}

// What both kinds of start share once the header's ids are set: the name, the attributes (and a communication
// span's sequence number), the start time, and the slot published as open.
LENS_ALWAYS_INLINE void set_name_attributes_and_open(SpanHandle& h, OpenSpan& s, SpanDrain& p, SpanGroup group,
                                                     SpanName name, std::span<const Attribute> attributes,
                                                     std::uint64_t start_unix_nanos = 0) noexcept {
  RecordHeader& r = s.header;
  if (name.is_static()) {
    r.name = TextRef{name.text().data(), 0, static_cast<std::uint32_t>(name.text().size())};
  } else {
    set_copied_name(s, name.text());  // the arena is empty: it fits
  }
  if (attributes.size() != 0) append_attributes(s, p.limits, attributes);
  if (group.id() == p.collective_group) append_collective_sequence(s, p);
  h.slot = &s;
  r.start_tick = start_unix_nanos != 0 ? start_unix_nanos : now_ticks();  // kStartIsUnixNanos says which
  // Published last (odd: open), so a hang snapshot never reads a header half written.
  h.generation = s.generation.load(std::memory_order_relaxed) + 1;
  LENS_DCHECK((h.generation & 1) == 1);  // odd: open (the seqlock a hang snapshot reads)
  s.generation.store(h.generation, std::memory_order_release);
}

// A span of a group kept only as a position (hang snapshots on, its group not enabled; CONTRACT §10): in its
// thread's slot while open, for a snapshot to see where the thread is. No ids, no sampling, no context (children
// keep the parent they would have had), never queued or counted: cheaper than an exported span.
void start_position(SpanHandle& h, ThreadState& t, SpanDrain& p, SpanGroup group, SpanName name,
                    std::span<const Attribute> attributes) noexcept {
  OpenSpan* s = take_slot(t);
  if (s == nullptr) return;  // a thread 64 spans deep: its position is its outer spans
  s->header = RecordHeader{};
  s->header.bits = RecordHeader::kPositionOnly;
  s->header.group = group.id();
  h.context = {};
  h.uncaught_at_start = *t.uncaught_exceptions;
  set_name_attributes_and_open(h, *s, p, group, name, attributes);
}

// ---- light scopes (trace/scope_record.h) ------------------------------------------------------------------------

// Starts light scope `h` under `parent` (null: a root, whose trace id comes from its span id) with `trace_flags`, the
// thread's current span: its identity in its context entry, what its record needs beside it (LightScope and its
// attributes). Its handle's context is filled from the entry when first read (fill_light_context).
LENS_ALWAYS_INLINE void open_light_scope(SpanHandle& h, ThreadState& t, SpanGroup group, const char* name,
                                         std::size_t length, const ScopeAttributes& attributes,
                                         const SpanContext* parent, std::uint8_t trace_flags) noexcept {
  const int index = t.context_depth;
  ContextEntry& e = t.contexts[index];
  LightScope& scope = t.light_scopes[index];
  const SpanId span_id = t.scope_ids.next_span_id();
  std::uint8_t bits = 0;
  if (parent != nullptr) {
    e.context.trace_id = parent->trace_id;
    scope.parent_span_id = parent->span_id;
    bits = static_cast<std::uint8_t>(RecordHeader::kHasParent | (parent->is_remote ? RecordHeader::kParentRemote : 0));
  } else {
    e.context.trace_id = t.scope_ids.trace_id_of_root(span_id);
    scope.parent_span_id = SpanId{};
  }
  e.context.span_id = span_id;
  e.context.trace_flags = trace_flags;
  e.context.is_remote = false;
  e.span = &h;
  e.attached = false;
  e.light = LightScopeState::kOpen;
  scope.first_word =
      scope_record_first_word(attributes.count, static_cast<std::uint16_t>(length), bits, trace_flags, group.id());
  copy_packed_attributes(t.light_attributes[index], attributes.packed, attributes.count);
  scope.name = name;
  scope.start_tick = now_ticks();
  scope.generation.store(scope.generation.load(std::memory_order_relaxed) + 1, std::memory_order_release);  // open
  h.slot = &g_light_scope_marker;
  h.generation = static_cast<std::uint32_t>(index);
  h.uncaught_at_start = *t.uncaught_exceptions;
  h.context.span_id = span_id;  // its trace id when first read (fill_light_context)
  h.context.trace_flags = trace_flags;
  t.context_depth = index + 1;
}

// Starts `h`, a child of `parent` (not sampled), as the thread's current span with a context its children follow; it
// records nothing. Out of line: the light scope's start keeps no aligned frame for its entry built here. Returns `t`.
__attribute__((noinline)) ThreadState* start_sampled_out_scope(SpanHandle& h, ThreadState& t,
                                                               const SpanContext& parent) noexcept {
  const auto trace_flags = static_cast<std::uint8_t>(parent.trace_flags & SpanContext::kRandomFlag);
  h.context = SpanContext{parent.trace_id, t.scope_ids.next_span_id(), trace_flags, false};
  ThreadCounters::bump(t.counters.sampled_out);
  set_entry(t.contexts[t.context_depth++], h.context, &h, false);
  return &t;
}

// Starts `h` (its group enabled and admitted by its drain's LightScopePolicy, its thread's state `t`, whose context
// stack has room) as a light
// scope, the thread's current span; returns `t`. Sampled out (its parent was), it records nothing and is made current
// all the same, with a context its children follow. Calls nothing on its usual path, and nothing but in tail position
// on any (a sampled-out child is started out of line).
LENS_ALWAYS_INLINE ThreadState* start_light_scope(SpanHandle& h, ThreadState& t, SpanGroup group, const char* name,
                                                  std::size_t length, const ScopeAttributes& attributes) noexcept {
  const int index = t.context_depth;
  LENS_DCHECK(index < ThreadState::kMaxContextDepth);
  const SpanContext* parent = nullptr;
  std::uint8_t trace_flags = SpanContext::kRandomFlag | SpanContext::kSampledFlag;  // a root's
  if (index > 0 && t.contexts[index - 1].context.is_valid()) {
    parent = &t.contexts[index - 1].context;
    trace_flags =
        static_cast<std::uint8_t>((parent->trace_flags & SpanContext::kRandomFlag) | SpanContext::kSampledFlag);
    if (__builtin_expect(!parent->is_sampled(), 0)) return start_sampled_out_scope(h, t, *parent);
  }
  open_light_scope(h, t, group, name, length, attributes, parent, trace_flags);
  return &t;
}

// A light scope no longer open for a hang snapshot (its seqlock even).
LENS_ALWAYS_INLINE void close_light_scope(LightScope& scope) noexcept {
  scope.generation.store(scope.generation.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

// Drops light scope `e` (of the calling thread's state `t`), counted as a span refused a slot is (dropped_no_slot):
// a Span method or an exception needed a slot, and the thread has 64 spans open. Its scope's end then does nothing;
// what its scope started keeps it as their parent.
void drop_light_scope_without_slot(ThreadState& t, ContextEntry& e) noexcept {
  e.light = LightScopeState::kEnded;
  close_light_scope(t.light_scopes[&e - t.contexts]);
  if (t.drain->stopped()) return t.drain->count_late_drop();
  ThreadCounters::bump(t.counters.produced);
  ThreadCounters::bump(t.counters.dropped_no_slot);
}

// Writes light scope `e`'s packed attributes (of the calling thread's state `t`) into slot `s` as a span's.
void unpack_light_attributes(const ThreadState& t, const ContextEntry& e, OpenSpan& s) noexcept {
  const std::size_t index = &e - t.contexts;
  const std::uint32_t count = t.light_scopes[index].attribute_count();
  if (count != 0) append_attributes(s, t.drain->limits, UnpackedAttributes(t.light_attributes[index], count).view());
}

// Moves light scope `e` (of the calling thread's state `t`) into a slot, so a Span method can write to it; its record
// will come from the slot. Null when no slot is free.
OpenSpan* promote_light_scope(ThreadState& t, ContextEntry& e) noexcept {
  LightScope& scope = t.light_scopes[&e - t.contexts];
  if (e.light == LightScopeState::kPromoted) return scope.slot;
  OpenSpan* s = take_slot(t);
  if (s == nullptr) return nullptr;
  RecordHeader& r = s->header;
  r = RecordHeader{};
  r.trace_id = e.context.trace_id;
  r.span_id = e.context.span_id;
  r.parent_span_id = scope.parent_span_id;
  r.bits = scope.bits();
  r.kind = static_cast<std::uint8_t>(SpanKind::kInternal);
  r.trace_flags = e.context.trace_flags;
  r.group = scope.group();
  r.name = TextRef{scope.name, 0, scope.name_length()};
  r.start_tick = scope.start_tick;
  unpack_light_attributes(t, e, *s);
  scope.slot = s;
  scope.slot_generation = s->generation.load(std::memory_order_relaxed) + 1;
  s->generation.store(scope.slot_generation, std::memory_order_release);  // open: a hang snapshot reads the slot
  scope.generation.store(scope.generation.load(std::memory_order_relaxed) + 1, std::memory_order_release);  // not here
  e.light = LightScopeState::kPromoted;
  return s;
}

// The slot a Span method writes to: the handle's own while it owns it, or a light scope's (promoted now if need be).
OpenSpan* writable_slot(const SpanHandle& h) noexcept {
  if (__builtin_expect(is_light_scope(h), 0)) {
    ContextEntry* e = live_light_entry(h);
    if (e == nullptr) return nullptr;
    OpenSpan* s = promote_light_scope(*t_state, *e);
    if (__builtin_expect(s == nullptr, 0)) drop_light_scope_without_slot(*t_state, *e);
    return s;
  }
  return owns(h) ? h.slot : nullptr;
}

// The step layout (StepTraces, trace/span_drain.h): the trace of the rank's next step span.
__attribute__((noinline)) TraceId next_step_trace(SpanDrain& p) noexcept {
  return step_trace_id(p.step_traces.run_id, p.steps_started.fetch_add(1, std::memory_order_relaxed));
}

// The sampler's decision (`parent`: null or valid); the default sampler's made inline, without its virtual calls.
LENS_ALWAYS_INLINE bool sampler_keeps(const SpanDrain& p, const SpanContext* parent, const TraceId& trace_id,
                                      SpanName name) noexcept {
  if (p.sampler_keeps_roots_and_follows_parents) return parent == nullptr || parent->is_sampled();
  return p.sampler->should_sample(SamplingParameters{parent, trace_id, name.text()}) ==
         SamplingDecision::kRecordAndSample;
}

// A span of a device-timed group: an NVTX range where NVTX is loaded, and its start event, after its host start.
__attribute__((noinline)) void start_device_span(OpenSpan& s, SpanName name) noexcept {
  s.device_timed = true;
  s.nvtx_pushed = device_nvtx_push(name.text(), name.is_static());  // a literal ends with its NUL
  s.device = device_span_start();
}

// Records the device end of a span timed on the device, as close to its host end as the span path allows, and pops
// its NVTX range on the thread that pushed it (a span ended on another thread leaves it: NVTX's stack is per thread).
__attribute__((noinline)) void end_device_span(OpenSpan& s) noexcept {
  s.device_timed = false;
  if (s.nvtx_pushed && s.owner == t_state) device_nvtx_pop();
  s.nvtx_pushed = false;
  if (s.device == nullptr) return;
  const RecordHeader& r = s.header;
  const bool name_is_static = r.name.pointer != nullptr;
  const std::string_view name =
      name_is_static ? std::string_view(r.name.pointer, r.name.length)
                     : std::string_view(reinterpret_cast<const char*>(s.arena + r.name.offset), r.name.length);
  device_span_end(s.device, {SpanContext{r.trace_id, r.span_id, r.trace_flags, false}, r.group, name, name_is_static});
  s.device = nullptr;
}

}  // namespace

// ---- device spans (the export thread) -----------------------------------------------------------------------

void record_device_span(SpanDrain& p, const DeviceSpan& d, SpanName name,
                        std::span<const Attribute> attributes) noexcept {
  ThreadState* t = state_for(&p);  // the drain itself, not g_span_drain: a setup that detached still has its last ones
  if (t == nullptr) return;        // stopped: the pipeline emits before it stops the drain
  OpenSpan* s = take_slot(*t);
  if (s == nullptr) {
    ThreadCounters::bump(t->counters.produced);
    ThreadCounters::bump(t->counters.dropped_no_slot);
    return;
  }
  // Its host span's child, sampled as it was (it had a slot), its times given in Unix nanoseconds; not a span the
  // application opened, so no group gate, no sampler and no lens.collective.seq of its own.
  RecordHeader& r = s->header;
  r = RecordHeader{};
  r.trace_id = d.host.trace_id;
  r.span_id = t->ids.span_id();
  r.parent_span_id = d.host.span_id;
  r.kind = static_cast<std::uint8_t>(SpanKind::kInternal);
  r.trace_flags = d.host.trace_flags;
  r.bits = RecordHeader::kHasParent | RecordHeader::kStartIsUnixNanos | RecordHeader::kEndIsUnixNanos;
  r.group = d.group;
  set_copied_name(*s, name.text());  // the arena is empty: it fits
  append_attributes(*s, p.limits, attributes);
  r.start_tick = d.start_unix_nanos;
  r.end_tick = d.end_unix_nanos;
  s->generation.store(s->generation.load(std::memory_order_relaxed) + 1, std::memory_order_release);  // open
  queue_record(*t, *s);
  release_slot(*s, t);
}

// ---- the public entry points -------------------------------------------------------------------------------

namespace {

// start_span's work; returns the thread's state (null: no pipeline), where start_current_span pushes the context.
LENS_ALWAYS_INLINE ThreadState* start_span_on_thread(SpanHandle& h, SpanGroup group, SpanName name,
                                                     std::span<const Attribute> attributes,
                                                     const StartOptions& options) noexcept {
  SpanDrain* p = g_span_drain.load(std::memory_order_acquire);
  if (p == nullptr) return nullptr;
  ThreadState* t = state_for(p);
  if (t == nullptr) return nullptr;
  const bool enabled = options.ungated ? records_ungated_spans() : is_enabled(group);
  if (!enabled) {
    start_position(h, *t, *p, group, name, attributes);
    return t;
  }

  const SpanContext* parent = nullptr;
  const bool given_trace = options.trace_id != nullptr && options.trace_id->is_valid();
  if (!options.root && !given_trace) {
    if (options.parent != nullptr)
      parent = options.parent->is_valid() ? options.parent : nullptr;
    else if (t->context_depth > 0 && t->contexts[t->context_depth - 1].context.is_valid())
      parent = &t->contexts[t->context_depth - 1].context;
  }
  TraceId trace_id = parent ? parent->trace_id : given_trace ? *options.trace_id : t->ids.trace_id();
  // The step layout: a step given no trace id roots the next step trace, linked to where it would have been.
  // (`step_link` points where `parent` did: the caller's options or this thread's context stack, unchanged until the
  // span is open.)
  const SpanContext* step_link = nullptr;
  const bool step_root = __builtin_expect(group.id() == p->step_traces.step_group, 0) && !given_trace;
  if (step_root) {
    step_link = parent;
    parent = nullptr;
    trace_id = next_step_trace(*p);
  }
  const bool sampled = sampler_keeps(*p, parent, trace_id, name);
  // A derived trace id is not random (W3C's random flag): the same run and iteration give the same id.
  std::uint8_t random = parent                     ? (parent->trace_flags & SpanContext::kRandomFlag)
                        : given_trace || step_root ? std::uint8_t{0}
                                                   : SpanContext::kRandomFlag;
  h.context = SpanContext{trace_id, t->ids.span_id(),
                          static_cast<std::uint8_t>(random | (sampled ? SpanContext::kSampledFlag : 0)), false};
  if (!sampled) {
    ThreadCounters::bump(t->counters.sampled_out);
    return t;
  }
  OpenSpan* s = take_slot(*t);
  if (s == nullptr) {
    ThreadCounters::bump(t->counters.produced);
    ThreadCounters::bump(t->counters.dropped_no_slot);
    h.context = {};  // its children attach to its parent instead of to a span that will not exist
    return t;
  }
  h.uncaught_at_start = *t->uncaught_exceptions;
  RecordHeader& r = s->header;
  r.arena_used = 0;
  r.trace_id = h.context.trace_id;
  r.span_id = h.context.span_id;
  r.parent_span_id = parent ? parent->span_id : SpanId{};
  r.kind = static_cast<std::uint8_t>(options.kind);
  r.status_code = 0;
  r.trace_flags = h.context.trace_flags;
  r.bits =
      parent
          ? static_cast<std::uint8_t>(RecordHeader::kHasParent | (parent->is_remote ? RecordHeader::kParentRemote : 0))
          : 0;
  r.attribute_count = r.event_count = r.link_count = 0;
  r.group = group.id();
  r.dropped_attributes = r.dropped_events = r.dropped_links = 0;
  r.status_message_entry = 0;
  if (options.start_unix_nanos != 0) r.bits |= RecordHeader::kStartIsUnixNanos;
  set_name_attributes_and_open(h, *s, *p, group, name, attributes, options.start_unix_nanos);
  if (step_link != nullptr) add_link(h, *step_link, {});
  if (__builtin_expect(device_timed(group.bit()), 0)) start_device_span(*s, name);
  return t;
}

LENS_ALWAYS_INLINE ThreadState* push_context_to(ThreadState* t, const SpanContext& context, const SpanHandle* span,
                                                bool attached) noexcept {
  if (t == nullptr || t->context_depth >= ThreadState::kMaxContextDepth) return nullptr;
  set_entry(t->contexts[t->context_depth++], context, span, attached);
  return t;
}

// The state the push went to, even if telemetry was shut down or set up again since.
LENS_ALWAYS_INLINE void pop_context_from(ThreadState* pushed_to) noexcept {
  if (pushed_to != nullptr && pushed_to->context_depth > 0) --pushed_to->context_depth;
}

}  // namespace

void start_span(SpanHandle& h, SpanGroup group, SpanName name, std::span<const Attribute> attributes,
                const StartOptions& options) noexcept {
  start_span_on_thread(h, group, name, attributes, options);
}

ThreadState* start_current_span(SpanHandle& h, SpanGroup group, SpanName name, std::span<const Attribute> attributes,
                                const StartOptions& options) noexcept {
  ThreadState* t = start_span_on_thread(h, group, name, attributes, options);
  // A span with no context (no pipeline, a position, refused a slot) is not current: its children keep its parent.
  return h.context.is_valid() ? push_context_to(t, h.context, &h, false) : nullptr;
}

ThreadState* start_current_span(SpanHandle& h, SpanGroup group, SpanName name,
                                std::span<const Attribute> attributes) noexcept {
  static constexpr StartOptions kDefaults{};  // a constant: the inlined start drops every check of the options
  ThreadState* t = start_span_on_thread(h, group, name, attributes, kDefaults);
  return h.context.is_valid() ? push_context_to(t, h.context, &h, false) : nullptr;
}

namespace {
// start_current_scope's span when it cannot be a light scope: out of line, so the light scope's start keeps no frame
// for the call (its name is passed in memory).
__attribute__((noinline)) ThreadState* start_scope_as_span(SpanHandle& h, SpanGroup group, const char* name,
                                                           std::size_t length, ScopeAttributes packed) noexcept {
  return start_current_span(h, group, SpanName(LiteralText{}, std::string_view(name, length)),
                            UnpackedAttributes(packed.packed, packed.count).view());
}

// start_current_scope for a light scope that the usual path cannot take (start_scope): the thread's state to attach,
// a full context stack, or a clock that is a call. Out of line, so that the usual path makes no call.
__attribute__((noinline)) ThreadState* start_scope_out_of_line(SpanHandle& h, SpanGroup group, const char* name,
                                                               std::size_t length,
                                                               ScopeAttributes attributes) noexcept {
  // The drain read again, and so everything that depends on it: telemetry may have been set up again or shut down
  // since start_scope read it.
  SpanDrain* p = g_span_drain.load(std::memory_order_acquire);
  if (p != nullptr && p->light_scopes.admits(group, length, attributes) && is_enabled(group)) {
    ThreadState* t = state_for(p);
    if (t != nullptr && t->context_depth < ThreadState::kMaxContextDepth)
      return start_light_scope(h, *t, group, name, length, attributes);
  }
  return start_scope_as_span(h, group, name, length, attributes);
}

// A LENS_SPAN's start. Its usual path, a light scope whose thread's state is already attached to the drain, with room
// on its context stack and a clock that is an instruction, calls nothing but in tail position, so it keeps no value
// across a call and spills none.
LENS_ALWAYS_INLINE ThreadState* start_scope(SpanHandle& h, SpanGroup group, const char* name, std::size_t length,
                                            const ScopeAttributes& attributes) noexcept {
  SpanDrain* p = g_span_drain.load(std::memory_order_acquire);
  if (__builtin_expect(p == nullptr || !p->light_scopes.admits(group, length, attributes) || !is_enabled(group), 0))
    return start_scope_as_span(h, group, name, length, attributes);
  ThreadState* t = t_state;
  if (__builtin_expect(
          t != nullptr && t->drain == p && t->context_depth < ThreadState::kMaxContextDepth && now_ticks_is_inline(),
          1))
    return start_light_scope(h, *t, group, name, length, attributes);
  return start_scope_out_of_line(h, group, name, length, attributes);
}

}  // namespace

ThreadState* start_current_scope(SpanHandle& h, SpanGroup group, const char* name, std::size_t length) noexcept {
  return start_scope(h, group, name, length, ScopeAttributes{nullptr, 0, 0});
}

ThreadState* start_current_scope(SpanHandle& h, SpanGroup group, const char* name, std::size_t length,
                                 ScopeAttributes attributes) noexcept {
  LENS_DCHECK(attributes.count <= kMaxScopeAttributes);
  return start_scope(h, group, name, length, attributes);
}

namespace {

// Where the record of a span ending on this thread goes: this thread's state in the span's drain, null once it stopped.
LENS_ALWAYS_INLINE ThreadState* ending_state(const OpenSpan& s) noexcept {
  SpanDrain* p = s.owner->drain;
  return p->stopped() ? nullptr : state_for(p);
}

// Ends an owned span on the calling thread (`t`: ending_state's), at `end` (ticks, or Unix nanoseconds when
// end_unix_nanos says so).
LENS_ALWAYS_INLINE void end_owned(SpanHandle& h, ThreadState* t, std::uint64_t end, bool by_exception,
                                  std::uint64_t end_unix_nanos) noexcept {
  OpenSpan& s = *h.slot;
  if (__builtin_expect(s.device_timed, 0)) end_device_span(s);
  SpanDrain* p = s.owner->drain;
  if (__builtin_expect(by_exception, 0)) {
    if (s.header.status_code != static_cast<std::uint8_t>(StatusCode::kOk)) {
      s.header.status_code = static_cast<std::uint8_t>(StatusCode::kError);
      set_status_message(s, "exception");
    }
    // Without a catch the exception object cannot be seen: its type and message come from record_exception()
    // (lens::traced() does it); otherwise the event says only that an exception left the scope.
    if (!(s.header.bits & RecordHeader::kHasException))
      record_exception_entry(s, p->limits, "unknown", "the scope was left by a C++ exception", true);
  }
  s.header.end_tick = end;
  if (end_unix_nanos != 0) s.header.bits |= RecordHeader::kEndIsUnixNanos;
  // The record goes to the ending thread's queue (a Span may end on another thread than it started).
  if (s.header.bits & RecordHeader::kPositionOnly) {
    // Kept only while open, for a hang snapshot (on a rank that exports nothing, every span is one).
  } else if (t == nullptr) {
    p->count_late_drop();
  } else {
    queue_record(*t, s);
  }
  release_slot(s, t);
  h.slot = nullptr;
}

// Pushes the scope record of light scope `index` (its context entry and LightScope in `t`, with `attribute_count`
// packed attributes) ending at `end` with `more_bits`, counted as queue_record counts a span record. kFits: the caller
// saw the record fit the queue's chunk (SpanQueue::fits), so no chunk is linked and nothing is called.
template <bool kFits>
LENS_ALWAYS_INLINE SpanQueue::Push push_scope_record(ThreadState& t, std::size_t index, std::uint64_t end,
                                                     std::uint8_t more_bits, std::uint32_t attribute_count) noexcept {
  const ContextEntry& e = t.contexts[index];
  LightScope& scope = t.light_scopes[index];
  close_light_scope(scope);
  ThreadCounters::bump(t.counters.produced);
  const std::uint64_t first_word = scope.first_word | std::uint64_t{more_bits} << 32;
  auto write = [&](std::uint8_t* at) LENS_ALWAYS_INLINE_LAMBDA {
    write_scope_record(at, first_word, scope.name, scope.start_tick, end, e.context.span_id, scope.parent_span_id,
                       e.context.trace_id, t.light_attributes[index], attribute_count);
  };
  const std::uint32_t size = scope_record_bytes(attribute_count);
  return kFits ? t.queue.push_fitting(size, write) : t.queue.push_written(size, write);
}

// Queues the scope record of light scope `index` of `t` (push_scope_record) and acts on the outcome. Its thread's (or,
// while the thread is parked, the export thread's).
LENS_ALWAYS_INLINE void put_scope_record(ThreadState& t, std::size_t index, std::uint64_t end,
                                         std::uint8_t more_bits) noexcept {
  const std::uint32_t attribute_count = t.light_scopes[index].attribute_count();
  const SpanQueue::Push pushed = push_scope_record<false>(t, index, end, more_bits, attribute_count);
  if (__builtin_expect(pushed != SpanQueue::Push::kQueued, 0)) on_queue_push(t, pushed);
}

// put_scope_record out of line, for a record that needs a new chunk: the usual end then calls nothing.
__attribute__((noinline)) void put_scope_record_in_new_chunk(ThreadState& t, std::size_t index,
                                                             std::uint64_t end) noexcept {
  put_scope_record(t, index, end, 0);
}

// Ends light scope `h` in a slot: promoted before, or now for an exception or an explicit end time.
__attribute__((noinline)) void end_light_scope_in_slot(SpanHandle& h, ThreadState& t, ContextEntry& e,
                                                       std::uint64_t end, bool by_exception,
                                                       std::uint64_t end_unix_nanos) noexcept {
  OpenSpan* s = promote_light_scope(t, e);
  if (s == nullptr) return drop_light_scope_without_slot(t, e);  // not exported without what made it need a slot
  e.light = LightScopeState::kEnded;
  SpanHandle slot_handle{s, t.light_scopes[&e - t.contexts].slot_generation, h.uncaught_at_start, e.context};
  end_owned(slot_handle, ending_state(*s), end, by_exception, end_unix_nanos);
}

// Ends light scope `h`, whose context entry is `e` in the calling thread's state `t`, at `end` (ticks, or Unix
// nanoseconds when end_unix_nanos says so): its scope record queued, or a slot's end (above).
LENS_ALWAYS_INLINE void end_light_scope_at(SpanHandle& h, ThreadState& t, ContextEntry& e, std::uint64_t end,
                                           bool by_exception, std::uint64_t end_unix_nanos) noexcept {
  if (__builtin_expect(by_exception || end_unix_nanos != 0 || e.light != LightScopeState::kOpen, 0))
    return end_light_scope_in_slot(h, t, e, end, by_exception, end_unix_nanos);
  e.light = LightScopeState::kEnded;
  SpanDrain* p = t.drain;
  if (__builtin_expect(p->stopped(), 0)) {  // nothing will read the queue any more
    close_light_scope(t.light_scopes[h.generation]);
    return p->count_late_drop();
  }
  put_scope_record(t, h.generation, end, 0);
}

// The end of light scope `h` at its scope's exit when it is not simply queued (end_light_scope below).
__attribute__((noinline)) void end_light_scope_at_exit_out_of_line(SpanHandle& h, ThreadState& t,
                                                                   ContextEntry& e) noexcept {
  if (e.light == LightScopeState::kEnded) return;  // ended early (Span::end), or cut at shutdown
  end_light_scope_at(h, t, e, now_ticks(), *t.uncaught_exceptions > h.uncaught_at_start, 0);
}

}  // namespace

void end_span(SpanHandle& h, bool by_exception, std::uint64_t end_unix_nanos) noexcept {
  std::uint64_t end = end_unix_nanos != 0 ? end_unix_nanos : now_ticks();
  if (is_light_scope(h)) {  // Span::end() on a LENS_SPAN_NAMED: its context stays current until the scope ends
    if (ContextEntry* e = live_light_entry(h)) end_light_scope_at(h, *t_state, *e, end, by_exception, end_unix_nanos);
    return;
  }
  if (!owns(h)) return;  // truncated at shutdown: already exported
  end_owned(h, ending_state(*h.slot), end, by_exception, end_unix_nanos);
}

void end_scope(SpanHandle& h, ThreadState* pushed_to) noexcept {
  if (__builtin_expect(is_light_scope(h), 0)) return end_light_scope(h, pushed_to);
  pop_context_from(pushed_to);
  if (!owns(h)) return;  // sampled out (no clock read for it), or truncated at shutdown: already exported
  std::uint64_t end = now_ticks();
  ThreadState* t = ending_state(*h.slot);
  // The ending thread's count against the starting thread's, as std::uncaught_exceptions() compares them.
  const unsigned int uncaught = t != nullptr ? *t->uncaught_exceptions : std::uncaught_exceptions();
  end_owned(h, t, end, uncaught > h.uncaught_at_start, 0);
}

void end_light_scope(SpanHandle& h, ThreadState* pushed_to) noexcept {
  // A light scope is always pushed (to the state it ends in, even if telemetry was set up again since).
  LENS_DCHECK(is_light_scope(h) && pushed_to != nullptr);
  if (__builtin_expect(pushed_to == nullptr, 0)) return;
  LENS_DCHECK(pushed_to->is_calling_thread());  // a light scope ends on the thread it started on
  // Its entry is the top one (unless another API's contexts were pushed and not popped, or popped twice, inside
  // it): popped, and still as it was until the next push.
  pop_context_from(pushed_to);
  ThreadState& t = *pushed_to;
  const std::uint32_t index = h.generation;
  ContextEntry& e = t.contexts[index];
  if (e.span != &h) return;
  // Promoted, ended early, left by an exception, after shutdown, or a clock that is a call: out of line, so that the
  // usual end calls nothing but in tail position, and keeps no value across a call.
  if (__builtin_expect(e.light != LightScopeState::kOpen || *t.uncaught_exceptions > h.uncaught_at_start ||
                           t.drain->stopped() || !now_ticks_is_inline(),
                       0))
    return end_light_scope_at_exit_out_of_line(h, t, e);
  const std::uint64_t end = now_ticks();  // before any store, which could alias the clock's flag: no second look
  e.light = LightScopeState::kEnded;
  const std::uint32_t attribute_count = t.light_scopes[index].attribute_count();
  if (__builtin_expect(!t.queue.fits(scope_record_bytes(attribute_count)), 0))
    return put_scope_record_in_new_chunk(t, index, end);
  // A scope without attributes takes its own copy of the push, with no size to compute.
  const SpanQueue::Push pushed = attribute_count == 0 ? push_scope_record</*kFits=*/true>(t, index, end, 0, 0)
                                                      : push_scope_record<true>(t, index, end, 0, attribute_count);
  if (__builtin_expect(pushed != SpanQueue::Push::kQueued, 0)) on_queue_push(t, pushed);
}

void update_name(SpanHandle& h, SpanName name) noexcept {
  OpenSpan* slot = writable_slot(h);
  if (slot == nullptr || (slot->header.bits & RecordHeader::kPositionOnly)) return;
  OpenSpan& s = *slot;
  // A light scope's slot generation is kept beside its context entry, not in its handle.
  std::uint32_t& generation = is_light_scope(h) ? t_state->light_scopes[h.generation].slot_generation : h.generation;
  // The name is read by hang snapshots as a seqlock: move the generation on before and after, so a snapshot
  // that overlaps the change sees it move and leaves the span out rather than read half a name.
  s.generation.exchange(generation + 2, std::memory_order_acq_rel);  // later writes stay after it (no fence: TSan)
  set_copied_name(s, name.text());                                   // no room: the old name stays
  generation += 4;
  LENS_DCHECK((generation & 1) == 1);  // still open, moved on twice so a snapshot that overlapped sees it
  s.generation.store(generation, std::memory_order_release);
}

void set_attributes(SpanHandle& h, std::span<const Attribute> attributes) noexcept {
  if (OpenSpan* s = writable_slot(h)) append_attributes(*s, s->owner->drain->limits, attributes);
}

void add_event(SpanHandle& h, SpanName name, std::span<const Attribute> attributes) noexcept {
  if (OpenSpan* s = writable_slot(h)) append_event(*s, s->owner->drain->limits, name, now_ticks(), attributes);
}

void add_link(SpanHandle& h, const SpanContext& link, std::span<const Attribute> attributes) noexcept {
  OpenSpan* slot = writable_slot(h);
  if (slot == nullptr) return;
  OpenSpan& s = *slot;
  const Limits& limits = s.owner->drain->limits;
  ArenaWriter w(s);
  if (s.header.link_count >= limits.span_link_count || !w.fits(sizeof(LinkHead))) {
    ++s.header.dropped_links;
    return;
  }
  LinkHead head{};
  head.tag = static_cast<std::uint8_t>(EntryTag::kLink);
  std::memcpy(head.trace_id, link.trace_id.bytes.data(), sizeof head.trace_id);
  std::memcpy(head.span_id, link.span_id.bytes.data(), sizeof head.span_id);
  head.trace_flags = link.trace_flags;
  head.is_remote = link.is_remote ? 1 : 0;
  std::uint8_t* at = w.cursor();
  w.put(head);
  put_counted_attributes(w, at + offsetof(LinkHead, counts), attributes, limits.link_attribute_count,
                         max_value_length(limits));
  ++s.header.link_count;
  w.commit();
}

void set_status(SpanHandle& h, StatusCode code, std::string_view message) noexcept {
  OpenSpan* s = writable_slot(h);
  if (s == nullptr) return;
  RecordHeader& r = s->header;
  // OpenTelemetry: Ok is final; Unset never overrides; a description only goes with Error.
  if (code == StatusCode::kUnset || r.status_code == static_cast<std::uint8_t>(StatusCode::kOk)) return;
  r.status_code = static_cast<std::uint8_t>(code);
  r.status_message_entry = 0;
  if (code == StatusCode::kError && !message.empty()) set_status_message(*s, message);
}

void record_exception(SpanHandle& h, std::string_view type, std::string_view message, bool escaped) noexcept {
  if (OpenSpan* s = writable_slot(h)) record_exception_entry(*s, s->owner->drain->limits, type, message, escaped);
}

std::string_view exception_type_name(const std::exception& e) noexcept {
  // Demangled once per type and kept: the names of exception types are few.
  const char* mangled = typeid(e).name();
  thread_local const char* last_mangled = nullptr;
  thread_local char* last_demangled = nullptr;
  if (mangled != last_mangled) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    std::free(last_demangled);
    last_demangled = status == 0 ? demangled : nullptr;
    last_mangled = mangled;
  }
  return last_demangled ? last_demangled : mangled;
}

ThreadState* push_context(const SpanContext& context, const SpanHandle* span, bool attached) noexcept {
  return push_context_to(current_state(), context, span, attached);
}

CurrentKind current_kind(SpanHandle* span) noexcept {
  ThreadState* t = current_state();
  if (t == nullptr || t->context_depth == 0) return CurrentKind::kNone;
  const ContextEntry& top = t->contexts[t->context_depth - 1];
  if (top.attached) return CurrentKind::kAttached;
  if (top.span == nullptr)
    return top.context.is_valid() ? CurrentKind::kContext : CurrentKind::kNone;  // not a light scope's
  *span = *top.span;
  if (top.light != LightScopeState::kNone) span->context = top.context;  // a light scope's, filled in the copy
  return CurrentKind::kSpan;
}

void pop_context(ThreadState* pushed_to) noexcept { pop_context_from(pushed_to); }

std::uint32_t context_depth(const ThreadState* pushed_to) noexcept {
  return pushed_to != nullptr ? static_cast<std::uint32_t>(pushed_to->context_depth) : 0;
}

DetachResult pop_attached_context(ThreadState* pushed_to, std::uint32_t depth) noexcept {
  if (pushed_to == nullptr || depth == 0) return DetachResult::kGone;
  if (pushed_to != current_state()) return DetachResult::kOtherThread;
  const std::uint32_t now = context_depth(pushed_to);
  if (depth > now) return DetachResult::kGone;
  for (std::uint32_t i = depth - 1; i < now; ++i)
    if (!pushed_to->contexts[i].attached) return DetachResult::kUnderOpenSpans;
  pushed_to->context_depth = static_cast<int>(depth - 1);
  return DetachResult::kPopped;
}

void truncate_open_light_scopes(ThreadState& t) noexcept {
  const std::uint64_t now = now_ticks();
  for (int i = t.context_depth - 1; i >= 0; --i) {  // innermost first
    ContextEntry& e = t.contexts[i];
    if (e.light == LightScopeState::kOpen) put_scope_record(t, i, now, RecordHeader::kTruncated);
    // A promoted one's slot is cut with the other slots.
    if (e.light == LightScopeState::kOpen || e.light == LightScopeState::kPromoted) e.light = LightScopeState::kEnded;
  }
}

void fill_light_context(SpanHandle& h) noexcept {
  ContextEntry* e = live_light_entry(h);
  if (e == nullptr) {  // ended: its entry still holds it while its scope lasts (ended early, or cut at shutdown)
    ThreadState* t = t_state;
    if (t == nullptr || h.generation >= static_cast<std::uint32_t>(ThreadState::kMaxContextDepth)) return;
    e = &t->contexts[h.generation];
    if (e->span != &h || e->context.span_id != h.context.span_id) return;
  }
  h.context = e->context;
}

ThreadState* current_thread_state_if_any() noexcept { return t_state; }
void forget_thread_state() noexcept { t_state = nullptr; }

}  // namespace internal

SpanContext current_context() noexcept {
  internal::ThreadState* t = internal::current_state();
  if (t == nullptr || t->context_depth == 0) return {};
  return t->contexts[t->context_depth - 1].context;
}

}  // namespace lens
