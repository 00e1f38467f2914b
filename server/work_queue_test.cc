// The bounded executor queue: FIFO order on one thread, refusal when full, drain on Stop.
#include "server/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <vector>

namespace spattn {
namespace {

TEST(WorkQueueTest, RunsInOrderAndRefusesWhenFull) {
  WorkQueueOptions o;
  o.threads = 1;
  o.capacity = 2;
  o.name = "test";
  WorkQueue q(o);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::promise<void> started;
  std::vector<int> order;
  ASSERT_TRUE(q.TrySubmit([&] {
                 started.set_value();
                 gate.wait();
                 order.push_back(0);
               }).ok());
  started.get_future().wait();
  EXPECT_EQ(q.running(), 1);
  ASSERT_TRUE(q.TrySubmit([&] { order.push_back(1); }).ok());
  ASSERT_TRUE(q.TrySubmit([&] { order.push_back(2); }).ok());
  EXPECT_EQ(q.waiting(), 2);
  const absl::Status full = q.TrySubmit([] {});
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("test: queue full"), std::string::npos) << full;
  release.set_value();
  q.WaitIdle();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(q.waiting(), 0);
  EXPECT_EQ(q.running(), 0);
}

TEST(WorkQueueTest, StopRunsQueuedTasksThenRefuses) {
  WorkQueueOptions o;
  o.threads = 2;
  o.capacity = 100;
  WorkQueue q(o);
  std::atomic<int> done{0};
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(q.TrySubmit([&] { ++done; }).ok());
  q.Stop();
  EXPECT_EQ(done.load(), 50);
  EXPECT_EQ(q.TrySubmit([] {}).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace spattn
