// PieceList against std::vector<SamplePiece>, the container it stands in for:
// the same elements in the same order through growth past its in-place
// capacity, copies, moves (both directions of in place and on the heap) and
// views; and SplitEvenPart against SplitEven.
#include "loom/plan/piece_list.h"

#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "loom/plan/compile_plan.h"

namespace loom {
namespace {

void ExpectSame(const PieceList& got, const std::vector<SamplePiece>& want) {
  ASSERT_EQ(got.size(), want.size());
  const std::span<const SamplePiece> view = got;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << i;
    EXPECT_EQ(view[i], want[i]) << i;
  }
}

TEST(PieceList, BehavesLikeAVectorInPlaceAndOnTheHeap) {
  for (int n : {0, 1, 3, 4, 5, 9, 33}) {
    std::vector<SamplePiece> want;
    PieceList got;
    for (int i = 0; i < n; ++i) {
      want.push_back({i, i % 3 - 1});
      got.push_back({i, i % 3 - 1});
    }
    ExpectSame(got, want);
    EXPECT_EQ(got.empty(), n == 0);
    const PieceList copy = got;
    ExpectSame(copy, want);
    EXPECT_TRUE(copy == got);
    PieceList moved = std::move(got);
    ExpectSame(moved, want);
    EXPECT_EQ(got.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
    got.push_back({7, 1});      // and usable
    EXPECT_EQ(got[0], (SamplePiece{7, 1}));
    PieceList assigned{{1, -1}, {2, -1}, {3, -1}, {4, -1}, {5, -1}, {6, -1}};
    assigned = copy;  // heap over heap or in place
    ExpectSame(assigned, want);
    assigned = PieceList(std::span<const SamplePiece>(want));
    ExpectSame(assigned, want);
    if (n > 0) {
      PieceList other = copy;
      other[n - 1].item = 42;
      EXPECT_FALSE(other == copy);
    }
  }
}

TEST(SplitEven, EachPartAloneIsThatPartOfTheWhole) {
  for (int n : {0, 1, 7, 16, 31}) {
    std::vector<int> items(n);
    for (int i = 0; i < n; ++i) items[i] = 100 + i;
    for (int parts : {1, 2, 3, 5, 8}) {
      const auto all = SplitEven(items, parts);
      size_t total = 0;
      for (int d = 0; d < parts; ++d) {
        EXPECT_EQ(SplitEvenPart(items, parts, d), all[d]) << n << " " << parts << " " << d;
        total += all[d].size();
      }
      EXPECT_EQ(total, items.size());
    }
  }
}

}  // namespace
}  // namespace loom
