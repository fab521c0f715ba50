// What `loom run` records of each training step (issue 42): the metrics file
// (`--metrics FILE.jsonl`, a JSON object a line: docs/runtime.md, "The
// training loop"), the progress line, and the run report (`--report
// FILE.html`): loss, gradient norm, learning rate and throughput plotted over
// the steps. Torch-free.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace loom {

struct StepRecord {
  int step = 0;
  double loss = 0, grad_norm = 0, lr = 0;  // NaN where not known (an fp16 overflow's norm)
  bool skipped = false;                    // a non-finite step skipped (--skip-nonfinite)
  double step_s = 0;                       // wall time
  double tokens = 0, model_flops = 0;      // of the step's batch (session/step_meter.h)
  double mfu = 0;                          // NaN where not measured (a CPU run has no GPU peak)
  double elapsed_s = 0;                    // since the run started, at the step's end
  double data_wait_s = 0, data_load_s = 0;  // its batch: the step waited for it; the loader's time on it
};

// One line of the metrics file: non-finite numbers as null.
nlohmann::json StepRecordJson(const StepRecord& r);
// A line back (null as NaN); throws loom::Error naming `where` for a line that is not one.
StepRecord StepRecordFromJson(const std::string& line, const std::string& where);

// "step 12/100  loss 2.3104  grad 0.84  lr 1.00e-03  0.42 s  1,234 tok/s  MFU 31.2%  ETA 38 s"
// (MFU where measured; the ETA from the mean time of the steps after the
// first, which includes start-up, once there is one).
std::string FormatStepLine(const StepRecord& r, int steps, const std::vector<StepRecord>& done);

// A self-contained HTML page: a summary table and one SVG chart each of the
// loss, the gradient norm, the learning rate and tokens/s over the steps
// (skipped steps marked).
std::string TrainingReportHtml(const std::string& title, const std::vector<StepRecord>& records);

}  // namespace loom
