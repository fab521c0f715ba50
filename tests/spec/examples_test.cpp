// The files in examples/ (referenced by README.md and docs/) must keep loading.
#include <gtest/gtest.h>

#include "loom/cost/module_summary.h"
#include "loom/data/sample_source.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom {
namespace {

const std::string kDir = LOOM_EXAMPLES;

TEST(Examples, ModelClusterAndWorkloadLoad) {
  Model m = LoadModel(kDir + "/my-vlm.yaml");
  EXPECT_EQ(m.modules.size(), 3u);
  EXPECT_TRUE(m.modules[0].frozen);
  // SigLIP (427.9M) + projector + the Llama-3.2-3B-shaped LLM (3.21B).
  EXPECT_NEAR(static_cast<double>(ModelParams(m)) / 1e9, 0.428 + 0.0130 + 3.2128, 0.01);
  Cluster c = LoadCluster(kDir + "/lab-cluster.yaml");
  EXPECT_EQ(c.num_gpus(), 8);
  Workload w = LoadWorkload(kDir + "/my-data.yaml");
  Batch b = DrawBatch(w, 0);
  EXPECT_EQ(b.samples.size(), 4u);
}

}  // namespace
}  // namespace loom
