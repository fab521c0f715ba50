// LoadWorkloadWithOverrides (session/problem_loading.h), the one path from a
// workload name and overrides to a Workload that `loom`'s flags and the Python
// module share: an empty name is the model's default workload, overrides
// apply to either, and a bad override is the same error as from the flags.
#include <gtest/gtest.h>

#include <string>

#include "loom/session/problem_loading.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "test_util.h"

namespace loom {
namespace {

TEST(WorkloadWithOverrides, AnEmptyNameIsTheModelsDefault) {
  const Model model = LoadModel(std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm.yaml");
  const Workload base = DefaultWorkload(model);
  EXPECT_EQ(LoadWorkloadWithOverrides(model, "", {}).name, base.name);
  WorkloadOverrides o;
  o.global_batch = 8;
  const Workload w = LoadWorkloadWithOverrides(model, "", o);
  EXPECT_EQ(w.name, base.name);
  EXPECT_EQ(w.global_batch, 8);
}

TEST(WorkloadWithOverrides, ANameIsLoadedThenOverridden) {
  const Model model = LoadModel(std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm.yaml");
  WorkloadOverrides o;
  o.seq_len = 128;
  const Workload w = LoadWorkloadWithOverrides(model, "text", o);
  EXPECT_EQ(w.name, LoadWorkload("text").name);
  EXPECT_EQ(w.source.seq_len, 128);
  WorkloadOverrides too_large;
  too_large.global_batch = kMaxGlobalBatch + 1;
  test::ExpectError([&] { LoadWorkloadWithOverrides(model, "text", too_large); }, {"--global-batch: at most"});
}

}  // namespace
}  // namespace loom
