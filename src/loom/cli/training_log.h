// `loom run`'s record of the training steps as they end (runtime's
// RunOptions::on_step): the progress line on a terminal's standard error,
// `--metrics FILE.jsonl` (rewritten atomically at most every 10 s while the
// run goes on, and at its end, failed or not), and `--report FILE.html`, the
// charts of report/training_report.h. In cli/ because it joins the runtime's
// reports with the simulator's FLOPs (session/step_meter.h).
#pragma once

#ifdef LOOM_HAVE_RUNTIME

#include <chrono>
#include <string>
#include <vector>

#include "loom/report/training_report.h"
#include "loom/runtime/run.h"
#include "loom/session/step_meter.h"

namespace loom::cli {

// The steps before `first_step` recorded in `dir`/metrics.jsonl (a
// --checkpoint-dir folder), none where it has none. Throws loom::Error naming
// a line that is not a metrics line.
std::vector<StepRecord> ReadHistory(const std::string& dir, int first_step);

class TrainingLog {
 public:
  // `mfu`: whether MFU means anything (a GPU run); `metrics_path`,
  // `report_path`: "" for none; `progress`: print a line per step on stderr.
  // `history`: the steps before this run's first (a resumed run's, from its
  // checkpoint folder); `history_path`: where the whole record goes beside
  // the checkpoints (--checkpoint-dir's metrics.jsonl; "" for none), so that
  // a resume's report shows the whole run.
  TrainingLog(StepMeter meter, int steps, bool mfu, std::string metrics_path, std::string report_path,
              std::string title, bool progress, std::vector<StepRecord> history = {}, std::string history_path = "");
  void OnStep(const StepProgress& p);
  // Writes the files with every step recorded (after a failure too).
  void Finish();
  // Whether this run recorded a step (a run that failed before its first
  // writes nothing: its folders may not even be valid outputs).
  bool ran() const;
  const std::vector<StepRecord>& records() const { return records_; }

 private:
  void WriteMetrics();

  StepMeter meter_;
  const int steps_;
  const bool mfu_;
  const std::string metrics_path_, report_path_, title_, history_path_;
  const bool progress_;
  std::vector<StepRecord> records_;
  bool ran_ = false;  // a step of this run was recorded
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), written_ = start_;
};

}  // namespace loom::cli

#endif  // LOOM_HAVE_RUNTIME
