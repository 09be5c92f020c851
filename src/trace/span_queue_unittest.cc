// The span queue alone, producer and consumer on one thread, so each step is deterministic: when it asks for
// the export thread, what memory it holds, and that records come out as they went in across chunk boundaries.
#include "trace/span_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

namespace lens::internal {
namespace {

using Push = SpanQueue::Push;

// A record whose arena is `arena_bytes` long, its first byte `mark`.
struct TestRecord {
  RecordHeader header{};
  std::uint8_t arena[kArenaBytes] = {};
  explicit TestRecord(std::uint32_t arena_bytes, std::uint8_t mark = 0) {
    header.arena_used = arena_bytes;
    header.size = static_cast<std::uint32_t>((sizeof(RecordHeader) + arena_bytes + 7) & ~std::size_t{7});
    std::memset(arena, mark, arena_bytes);
  }
};

// Pushes `r` as a slot span's end does and says whether the export thread is to be woken: a push that says a full batch
// may be waiting is followed by batch_waiting() (on_queue_push).
bool push_wakes(SpanQueue& q, const TestRecord& r) {
  const Push p = q.push(r.header, r.arena);
  EXPECT_NE(p, Push::kDropped);
  return p == Push::kBatchMayWait && q.batch_waiting();
}

class Consumer {
 public:
  explicit Consumer(SpanQueue& q) : q_(q) {}
  ~Consumer() { release(); }
  // Pops up to `max`, keeps the records' first arena bytes, frees retired chunks (the batch is "exported").
  std::size_t pop(std::size_t max = SIZE_MAX) {
    std::size_t n = q_.pop(
        max,
        [&](const std::uint8_t* r) {
          RecordHeader h;
          std::memcpy(&h, r, sizeof h);
          marks.push_back(h.arena_used ? r[sizeof h] : 0);
        },
        [&](SpanChunk* c) { retired_.push_back(c); });
    release();
    return n;
  }
  std::vector<std::uint8_t> marks;

 private:
  void release() {
    for (SpanChunk* c : retired_) SpanChunk::free(c);
    retired_.clear();
  }
  SpanQueue& q_;
  std::vector<SpanChunk*> retired_;
};

TEST(SpanQueue, AFullBatchWakesTheExporterEvenAfterItWentIdle) {
  QueueBudget budget(1 << 20);
  SpanQueue q(4, budget);
  Consumer consumer(q);
  TestRecord r(32);
  EXPECT_FALSE(push_wakes(q, r));
  EXPECT_FALSE(push_wakes(q, r));
  EXPECT_FALSE(push_wakes(q, r));
  EXPECT_TRUE(push_wakes(q, r));  // 4 waiting
  EXPECT_FALSE(push_wakes(q, r));
  EXPECT_FALSE(push_wakes(q, r));
  EXPECT_EQ(consumer.pop(), 6u);  // the export thread drains everything and goes idle
  // The case that used to be lost: the producer's count had passed the batch size, so it never equalled it again.
  EXPECT_FALSE(push_wakes(q, r));
  EXPECT_FALSE(push_wakes(q, r));
  EXPECT_FALSE(push_wakes(q, r));
  EXPECT_TRUE(push_wakes(q, r));
  // The export thread drains up to what it saw when it woke, which may be more than the batch.
  EXPECT_FALSE(push_wakes(q, r));
  EXPECT_EQ(consumer.pop(), 5u);
  EXPECT_FALSE(push_wakes(q, r));
  EXPECT_FALSE(push_wakes(q, r));
  EXPECT_FALSE(push_wakes(q, r));
  EXPECT_TRUE(push_wakes(q, r));
  // One that left spans behind (it was woken and owes them) is asked again a batch after the last wake.
  EXPECT_EQ(consumer.pop(3), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(push_wakes(q, r));
  EXPECT_TRUE(push_wakes(q, r));
}

TEST(SpanQueue, AtMostOneWakePerBatch) {
  QueueBudget budget(1 << 20);
  SpanQueue q(8, budget);
  TestRecord r(16);
  int wakes = 0;
  for (int i = 0; i < 800; ++i) wakes += push_wakes(q, r);
  EXPECT_EQ(wakes, 100);  // a consumer that never comes: one wake per batch, not one per span
}

TEST(SpanQueue, RecordsComeOutInOrderAcrossChunks) {
  QueueBudget budget(8 << 20);
  SpanQueue q(512, budget);
  Consumer consumer(q);
  std::vector<std::uint8_t> expected;
  for (int i = 0; i < 5000; ++i) {
    const std::uint32_t arena = static_cast<std::uint32_t>((i * 97) % kArenaBytes) + 1;  // up to the largest
    TestRecord r(arena, static_cast<std::uint8_t>(i));
    ASSERT_NE(q.push(r.header, r.arena), Push::kDropped) << i;
    expected.push_back(static_cast<std::uint8_t>(i));
    if (i % 700 == 0) consumer.pop(300);
  }
  consumer.pop();
  EXPECT_EQ(consumer.marks, expected);
  EXPECT_EQ(q.size(), 0u);
}

TEST(SpanQueue, MemoryIsWhatIsQueuedNotWhatCouldBe) {
  QueueBudget budget(64 << 20);
  SpanQueue q(512, budget);  // OTEL_BSP_MAX_QUEUE_SIZE=65536 used to mean 16 MiB at each thread's first span
  Consumer consumer(q);
  TestRecord r(200);
  for (int i = 0; i < 10; ++i) q.push(r.header, r.arena);
  EXPECT_EQ(budget.in_use(), 0u) << "ten spans fit the thread's first chunk";
  for (int i = 0; i < 4000; ++i) q.push(r.header, r.arena);
  const std::size_t queued_bytes = 4010 * r.header.size;
  EXPECT_GE(budget.in_use() + SpanChunk::kSmallest, queued_bytes);
  EXPECT_LE(budget.in_use(), queued_bytes + 2 * SpanChunk::kLargest);
  consumer.pop();
  TestRecord small(8);
  q.push(small.header, small.arena);  // the producer moves on from its last full chunk
  consumer.pop();
  EXPECT_LE(budget.in_use(), std::size_t{SpanChunk::kLargest + sizeof(SpanChunk)}) << "drained: one chunk is held";
}

TEST(SpanQueue, TheProcessBudgetBoundsEveryQueueTogether) {
  QueueBudget budget(256 << 10);
  SpanQueue a(1 << 20, budget), b(1 << 20, budget);  // no batch-size wake here
  TestRecord r(500);
  int dropped = 0, wakes = 0;
  for (int i = 0; i < 4000; ++i) {
    for (SpanQueue* q : {&a, &b}) {
      Push p = q->push(r.header, r.arena);
      dropped += p == Push::kDropped;
      wakes += p == Push::kQueuedPastHalf;
    }
  }
  EXPECT_LE(budget.in_use(), budget.limit());
  EXPECT_GT(dropped, 0);
  EXPECT_EQ(a.size() + b.size() + static_cast<std::uint64_t>(dropped), 8000u) << "every span queued or dropped";
  EXPECT_GT(wakes, 0) << "past half the budget, each new chunk asks for the export thread";
}

// An exported chunk goes back to its producer and is linked again, not freed on the export thread and
// allocated anew on the training thread; what is recycled stays within the budget.
TEST(SpanQueue, AnExportedChunkIsRecycledToItsProducer) {
  QueueBudget budget(1 << 20);
  SpanQueue q(1 << 20, budget);
  TestRecord r(1000);
  std::vector<SpanChunk*> retired;
  auto drain = [&](std::vector<const std::uint8_t*>* records) {
    q.pop(
        SIZE_MAX,
        [&](const std::uint8_t* record) {
          if (records) records->push_back(record);
        },
        [&](SpanChunk* c) { retired.push_back(c); });
  };
  for (int i = 0; i < 40; ++i) ASSERT_NE(q.push(r.header, r.arena), Push::kDropped);
  drain(nullptr);
  ASSERT_GE(retired.size(), 2u) << "40 records of about 1 KiB fill several chunks";
  const std::size_t in_use = budget.in_use();
  // Their ranges, kept before they are handed back: a chunk beyond the producer's spares is freed.
  std::vector<std::pair<const std::uint8_t*, const std::uint8_t*>> recycled;
  for (SpanChunk* c : retired) recycled.emplace_back(c->data(), c->data() + c->capacity);
  for (SpanChunk* c : retired) {
    EXPECT_EQ(c->home, &q);
    q.recycle(c);
  }
  retired.clear();
  for (int i = 0; i < 8; ++i) ASSERT_NE(q.push(r.header, r.arena), Push::kDropped);
  std::vector<const std::uint8_t*> records;
  drain(&records);
  const auto inside_a_recycled_chunk = [&](const std::uint8_t* record) {
    for (const auto& [begin, end] : recycled)
      if (record >= begin && record < end) return true;
    return false;
  };
  EXPECT_TRUE(std::any_of(records.begin(), records.end(), inside_a_recycled_chunk));
  EXPECT_LE(budget.in_use(), in_use) << "a recycled chunk was taken from the budget once";
  for (SpanChunk* c : retired) SpanChunk::free(c);
}

TEST(SpanQueue, ABudgetFreedByTheConsumerIsUsableAgain) {
  QueueBudget budget(64 << 10);
  SpanQueue q(1 << 20, budget);
  Consumer consumer(q);
  TestRecord r(1000);
  auto fill = [&] {
    int queued = 0;
    for (int i = 0; i < 1000; ++i) queued += q.push(r.header, r.arena) != Push::kDropped;
    return queued;
  };
  const int first = fill();
  EXPECT_GT(first, 30);
  EXPECT_LT(first, 1000);
  EXPECT_EQ(consumer.pop(), static_cast<std::size_t>(first));
  const int second = fill();
  EXPECT_GE(second, first - 8) << "the chunks came back to the budget";
}

}  // namespace
}  // namespace lens::internal
