// Cornstarch's bitfield attention masks (data/attention_mask.h): the rule on
// the thesis' Fig. 3.4 example, the three layouts, and block-sparse work
// against brute force over every (query, key) pair of random masks.
#include <gtest/gtest.h>

#include <random>

#include "data/random_masks.h"
#include "loom/data/attention_mask.h"
#include "loom/error.h"

namespace loom {
namespace {

TEST(BitfieldMask, FigureThreeFourTokens) {
  // t0, t1 text; t2, t3 encoder A (bit 1); t4, t5 text with the causal bit
  // and every modality bit: they read all earlier tokens, text and image; the
  // image tokens read each other only, both ways.
  const BitfieldMask m = BuildMask({{2, -1, 0}, {2, 0, 0}, {2, -1, 0}}, MaskLayout::kEmbedded);
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[2].bits, uint64_t{1} << 1);
  EXPECT_EQ(m[4].bits, (uint64_t{1} << kCausalBit) | 0b11);
  const bool want[6][6] = {{1, 0, 0, 0, 0, 0}, {1, 1, 0, 0, 0, 0}, {0, 0, 1, 1, 0, 0},
                           {0, 0, 1, 1, 0, 0}, {1, 1, 1, 1, 1, 0}, {1, 1, 1, 1, 1, 1}};
  for (int q = 0; q < 6; ++q) {
    for (int k = 0; k < 6; ++k) EXPECT_EQ(MayAttend(m, q, k), want[q][k]) << "query " << q << " key " << k;
  }
}

TEST(BitfieldMask, LayoutsPlaceModalityTokensAndKeepDocumentsApart) {
  const std::vector<MaskSegment> segments = {{3, -1, 0}, {2, 0, 0}, {1, -1, 0}, {2, 1, 1}, {2, -1, 1}};
  // Prefix: each document's modality tokens first.
  const BitfieldMask prefix = BuildMask(segments, MaskLayout::kCausalPrefix);
  EXPECT_EQ(prefix[0].bits, uint64_t{1} << 1);
  EXPECT_EQ(prefix[1].bits, uint64_t{1} << 1);
  EXPECT_TRUE(MayAttend(prefix, 2, 0));  // the first text token reads the image before it
  // Packed: document 1's text never reads document 0.
  const BitfieldMask packed = BuildMask(segments, MaskLayout::kPacked);
  for (int64_t q = 6; q < 10; ++q) {
    for (int64_t k = 0; k < 6; ++k) EXPECT_FALSE(MayAttend(packed, q, k)) << q << " " << k;
  }
  EXPECT_TRUE(MayAttend(packed, 9, 6));  // its own audio tokens (modality 1)
  EXPECT_THROW(BuildMask({{-1, -1, 0}}, MaskLayout::kEmbedded), Error);
  EXPECT_THROW(BuildMask({{1, 62, 0}}, MaskLayout::kEmbedded), Error);
}

TEST(BitfieldMask, BlockWorkEqualsBruteForce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const auto segments = test::RandomSegments(rng, 5, 40);
    for (MaskLayout layout : {MaskLayout::kCausalPrefix, MaskLayout::kEmbedded, MaskLayout::kPacked}) {
      const BitfieldMask m = BuildMask(segments, layout);
      const int64_t n = static_cast<int64_t>(m.size());
      for (int64_t block : {1, 7, 16}) {
        const auto work = BlockWork(m, block);
        ASSERT_EQ(static_cast<int64_t>(work.size()), (n + block - 1) / block);
        for (int64_t qb = 0; qb * block < n; ++qb) {
          int64_t want = 0;
          for (int64_t kb = 0; kb * block < n; ++kb) {
            bool any = false;
            for (int64_t q = qb * block; q < std::min(n, (qb + 1) * block) && !any; ++q) {
              for (int64_t k = kb * block; k < std::min(n, (kb + 1) * block) && !any; ++k) any = MayAttend(m, q, k);
            }
            want += any ? 1 : 0;
          }
          ASSERT_EQ(work[qb], want) << "trial " << trial << " block " << block << " query block " << qb;
        }
      }
    }
  }
}

// What the simulator prices a bitfield module's attention by (AllowedPairs,
// from the segments) and what zigzag's per-rank work sums (KeysPerQuery),
// against MayAttend over every (query, key) pair.
TEST(BitfieldMask, AllowedPairsAndKeysPerQueryEqualBruteForce) {
  std::mt19937 rng(13);
  for (int trial = 0; trial < 60; ++trial) {
    const auto segments = test::RandomSegments(rng, 5, 40);
    for (MaskLayout layout : {MaskLayout::kCausalPrefix, MaskLayout::kEmbedded, MaskLayout::kPacked}) {
      const BitfieldMask m = BuildMask(segments, layout);
      const int64_t n = static_cast<int64_t>(m.size());
      const auto keys = KeysPerQuery(m);
      ASSERT_EQ(static_cast<int64_t>(keys.size()), n);
      int64_t pairs = 0;
      for (int64_t q = 0; q < n; ++q) {
        int64_t want = 0;
        for (int64_t k = 0; k < n; ++k) want += MayAttend(m, q, k) ? 1 : 0;
        ASSERT_EQ(keys[q], want) << "trial " << trial << " query " << q;
        pairs += want;
      }
      EXPECT_EQ(AllowedPairs(segments, layout), static_cast<double>(pairs)) << "trial " << trial;
    }
  }
  // A causal document of s tokens: s (s + 1) / 2. An image of 4 tokens amid 6
  // text tokens: the first 3 read 1, 2, 3 keys, the image 4 x 4, the last 3
  // text tokens (positions 7-9) 8, 9, 10.
  EXPECT_EQ(AllowedPairs({{100, -1, 0}}, MaskLayout::kEmbedded), 100.0 * 101 / 2);
  EXPECT_EQ(AllowedPairs({{3, -1, 0}, {4, 0, 0}, {3, -1, 0}}, MaskLayout::kEmbedded), (1 + 2 + 3) + 16 + (8 + 9 + 10));
  EXPECT_THROW(AllowedPairs({{-1, -1, 0}}, MaskLayout::kEmbedded), Error);
}

// The simulator's reading of the rule off the segments equals the mask's.
TEST(BitfieldMask, SegmentsGiveTheMasksBlockWorkAndKeys) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 80; ++trial) {
    const auto segments = test::RandomSegments(rng, 5, 40);
    for (MaskLayout layout : {MaskLayout::kCausalPrefix, MaskLayout::kEmbedded, MaskLayout::kPacked}) {
      const BitfieldMask m = BuildMask(segments, layout);
      const int64_t n = static_cast<int64_t>(m.size());
      for (int64_t block : {1, 7, 16, 128}) {
        ASSERT_EQ(BlockWorkOfSegments(segments, layout, block), BlockWork(m, block))
            << "trial " << trial << " layout " << static_cast<int>(layout) << " block " << block;
      }
      const auto keys = KeysPerQuery(m);
      for (int r = 0; r < 5; ++r) {
        const int64_t a = static_cast<int64_t>(rng() % (n + 1)), b = a + static_cast<int64_t>(rng() % (n - a + 1));
        double want = 0;
        for (int64_t q = a; q < b; ++q) want += static_cast<double>(keys[q]);
        ASSERT_EQ(KeysInRanges(segments, layout, {a, b}).front(), want)
            << "trial " << trial << " range " << a << ".." << b;
      }
    }
  }
  EXPECT_THROW(BlockWorkOfSegments({{4, -1, 0}}, MaskLayout::kEmbedded, 0), Error);
}

TEST(BitfieldMask, CausalTextIsTriangular) {
  const auto work = BlockWork(BuildMask({{64, -1, 0}}, MaskLayout::kEmbedded), 8);
  for (size_t b = 0; b < work.size(); ++b) EXPECT_EQ(work[b], static_cast<int64_t>(b) + 1);
}

}  // namespace
}  // namespace loom
