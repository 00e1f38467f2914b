#include "kernels/cuda/common/lower_bound.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace spattn {
namespace cuda {
namespace {

TEST(LowerBoundByTest, FindsTheFirstPositionNotBelow) {
  const std::vector<int> a = {1, 3, 3, 5, 8};
  auto below = [&](int key) { return [&a, key](int i) { return a[i] < key; }; };
  EXPECT_EQ(LowerBoundBy(0, 5, below(0)), 0);
  EXPECT_EQ(LowerBoundBy(0, 5, below(3)), 1);
  EXPECT_EQ(LowerBoundBy(0, 5, below(4)), 3);
  EXPECT_EQ(LowerBoundBy(0, 5, below(9)), 5);
  EXPECT_EQ(LowerBoundBy(2, 4, below(9)), 4);  // a sub-range, as one index row's columns
  EXPECT_EQ(LowerBoundBy(3, 3, below(9)), 3);  // an empty row
}

// A row whose column offsets lie past 2^30, up to the largest offset an index holds: every
// position the search looks at stays inside the row (with (lo + hi) / 2 it went negative).
TEST(LowerBoundByTest, OffsetsPastTwoToTheThirtyStayInTheRow) {
  const int hi = std::numeric_limits<int32_t>::max();
  for (const int lo : {(1 << 30) + 5, hi - 1000, hi - 1}) {
    for (const int64_t answer : {int64_t{lo}, int64_t{lo} + 1, (int64_t{lo} + hi) / 2,
                                 int64_t{hi} - 1, int64_t{hi}}) {
      bool outside = false;
      const int found = LowerBoundBy(lo, hi, [&](int i) {
        if (i < lo || i >= hi) outside = true;
        return i < answer;
      });
      EXPECT_FALSE(outside) << lo << " " << answer;
      EXPECT_EQ(found, answer) << lo;
    }
  }
}

}  // namespace
}  // namespace cuda
}  // namespace spattn
