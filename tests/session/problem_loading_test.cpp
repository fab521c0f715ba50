// Loading what a command plans for (session/problem_loading.h): a cluster
// takes the cost model --profile selects; workload overrides apply field by
// field and name the `loom` flag that does not apply; FindPrecision reads
// what PrecisionName writes.
#include <gtest/gtest.h>

#include "loom/cost/cost_model.h"
#include "loom/session/problem_loading.h"
#include "loom/spec/model.h"
#include "test_util.h"

namespace loom {
namespace {

TEST(ProblemLoading, ClusterTakesTheProfilesCostModel) {
  const Cluster c = LoadClusterWithProfile("h100:1x4", "roofline");
  Cluster by_hand = LoadCluster("h100:1x4");
  ApplyCostModel(by_hand, "roofline");
  ASSERT_TRUE(c.cost_model);
  EXPECT_EQ(c.cost_model->name(), by_hand.cost_model->name());
  EXPECT_EQ(c.num_gpus(), 4);
  test::ExpectError([] { LoadClusterWithProfile("h100:1x4", "/no/such/profile.yaml"); }, {"/no/such/profile.yaml"});
}

TEST(ProblemLoading, OverridesApplyFieldByField) {
  const Model model = LoadModel(std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm.yaml");
  const Workload base = DefaultWorkload(model);
  EXPECT_EQ(ApplyWorkloadOverrides(base, {}).global_batch, base.global_batch);  // nothing given: unchanged
  WorkloadOverrides o;
  o.global_batch = 8;
  o.seed = 3;
  o.precision = Precision::kFp32;
  EXPECT_TRUE(o.any());
  const Workload w = ApplyWorkloadOverrides(base, o);
  EXPECT_EQ(w.global_batch, 8);
  EXPECT_EQ(w.seed, 3u);
  EXPECT_EQ(w.precision, Precision::kFp32);
  EXPECT_EQ(w.name, base.name);
}

TEST(ProblemLoading, OverridesThatDoNotApplyNameTheirFlag) {
  WorkloadOverrides too_large;
  too_large.global_batch = kMaxGlobalBatch + 1;
  test::ExpectError([&] { ApplyWorkloadOverrides(LoadWorkload("text"), too_large); }, {"--global-batch: at most"});
  WorkloadOverrides seq_len;
  seq_len.seq_len = 128;
  EXPECT_EQ(ApplyWorkloadOverrides(LoadWorkload("text"), seq_len).source.seq_len, 128);
  test::ExpectError([&] { ApplyWorkloadOverrides(LoadWorkload("obelics"), seq_len); },
                    {"--seq-len applies to the `text` workload"});
}

TEST(ProblemLoading, FindPrecisionReadsPrecisionName) {
  for (Precision p : {Precision::kBf16, Precision::kFp16, Precision::kTf32, Precision::kFp32}) {
    EXPECT_EQ(FindPrecision(PrecisionName(p)), p);
  }
  EXPECT_FALSE(FindPrecision(""));
  EXPECT_FALSE(FindPrecision("BF16"));
}

}  // namespace
}  // namespace loom
