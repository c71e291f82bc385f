// BoundedQueue: order, capacity, timed pops, Close and CloseInput.
#include "wds/internal/base/bounded_queue.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wds {
namespace {

using ::testing::ElementsAre;

TEST(BoundedQueueTest, ItemsComeOutInOrder) {
  BoundedQueue<int> q(3);
  EXPECT_TRUE(q.Push(1));
  EXPECT_TRUE(q.Push(2));
  EXPECT_TRUE(q.Push(3));
  EXPECT_EQ(q.Pop(), 1);
  EXPECT_EQ(q.Pop(), 2);
  EXPECT_EQ(q.Pop(), 3);
}

TEST(BoundedQueueTest, PushWaitsForRoom) {
  BoundedQueue<int> q(1);
  ASSERT_TRUE(q.Push(1));
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    q.Push(2);
    pushed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(pushed);  // the queue is full
  EXPECT_EQ(q.Pop(), 1);
  producer.join();
  EXPECT_TRUE(pushed);
  EXPECT_EQ(q.Pop(), 2);
}

TEST(BoundedQueueTest, PopForTimesOutOrTakes) {
  BoundedQueue<int> q(2);
  bool timed_out = false;
  EXPECT_EQ(q.PopFor(std::chrono::milliseconds(20), &timed_out), std::nullopt);
  EXPECT_TRUE(timed_out);
  ASSERT_TRUE(q.Push(7));
  EXPECT_EQ(q.PopFor(std::chrono::milliseconds(20), &timed_out), 7);
  EXPECT_FALSE(timed_out);
  q.CloseInput();  // ended, not timed out
  EXPECT_EQ(q.PopFor(std::chrono::milliseconds(20), &timed_out), std::nullopt);
  EXPECT_FALSE(timed_out);
}

TEST(BoundedQueueTest, CloseReleasesWaitersAndDropsItems) {
  BoundedQueue<int> q(1);
  ASSERT_TRUE(q.Push(1));
  bool push_result = true;
  std::thread producer([&] { push_result = q.Push(2); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  q.Close();
  producer.join();
  EXPECT_FALSE(push_result);
  EXPECT_EQ(q.Pop(), std::nullopt);  // the queued 1 is dropped
  EXPECT_TRUE(q.closed());
}

TEST(BoundedQueueTest, CloseInputLetsConsumersDrainThenEnds) {
  BoundedQueue<int> q(4);
  ASSERT_TRUE(q.Push(1));
  ASSERT_TRUE(q.Push(2));
  q.CloseInput();
  EXPECT_FALSE(q.Push(3));
  std::vector<int> got;
  while (std::optional<int> item = q.Pop()) got.push_back(*item);
  EXPECT_THAT(got, ElementsAre(1, 2));
  EXPECT_EQ(q.Pop(), std::nullopt);
}

TEST(BoundedQueueTest, CloseInputWakesAWaitingConsumer) {
  BoundedQueue<int> q(1);
  std::optional<int> popped = 7;
  std::thread consumer([&] { popped = q.Pop(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  q.CloseInput();
  consumer.join();
  EXPECT_EQ(popped, std::nullopt);
}

}  // namespace
}  // namespace wds
