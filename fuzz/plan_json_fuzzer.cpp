// Plan JSON (docs/plan-format.md) as `loom simulate --plan` and `loom run
// --plan` take it: parsed, checked against the model, cluster and workload it
// claims to be for, and, when it passes, simulated on its first batch. The
// model is fixed (tests/data/runtime/tiny-vlm.yaml on h100:1x4, 8 samples a
// batch) so that mutations of the seed plans scripts/run-fuzzers.sh makes for
// it reach the compiler and the simulator, not only the reader.
#include "fuzz_input.h"
#include "loom/data/sample_source.h"
#include "loom/plan/plan_json.h"
#include "loom/plan/validate_plan.h"
#include "loom/session/training_session.h"
#include "loom/sim/plan_run.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace {

struct Setting {
  loom::Model model = loom::LoadModel(LOOM_SOURCE_DIR "/tests/data/runtime/tiny-vlm.yaml");
  loom::Cluster cluster = loom::LoadCluster("h100:1x4");
  loom::Workload workload = [this] {
    loom::Workload w = loom::DefaultWorkload(model);
    w.global_batch = 8;
    return w;
  }();
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Setting s;
  loom::fuzz::ExpectOnlyLoomErrors([&] {
    const loom::PlanFile file = loom::ParsePlanFile(loom::fuzz::Text(data, size), "fuzz-plan.json");
    loom::ValidatePlan(file.plan, s.model, s.cluster, s.workload, "fuzz-plan.json");
    const int64_t iteration = file.batches.empty() ? 0 : file.batches[0].iteration;
    const loom::Batch batch = loom::DrawBatch(s.workload, iteration);
    const loom::IterationSchedule* schedule =
        !file.batches.empty() && file.batches[0].schedule ? &*file.batches[0].schedule : nullptr;
    const loom::PlanRun run = loom::ReplayBatch(s.model, s.cluster, s.workload, file.plan, batch, schedule);
    loom::CheckFits(run, "fuzz-plan.json");
  });
  return 0;
}
