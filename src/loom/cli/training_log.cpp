#ifdef LOOM_HAVE_RUNTIME

#include "loom/cli/training_log.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <iostream>

#include "loom/atomic_file.h"
#include "loom/error.h"
#include "loom/regular_file.h"

namespace loom::cli {

std::vector<StepRecord> ReadHistory(const std::string& dir, int first_step) {
  std::vector<StepRecord> out;
  const std::string path = dir + "/metrics.jsonl";
  // No record (a checkpoint folder of an older Loom) is an empty history; a
  // record that cannot be read would silently shorten the resumed run's.
  if (const std::string what = NotARegularFile(path); what == "no such file") {
    return out;
  } else if (!what.empty()) {
    throw Error(fmt::format("{}: {}; expected the run's per-step record (a JSONL file)", path, what));
  }
  std::ifstream in(path);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    StepRecord r = StepRecordFromJson(line, fmt::format("{}:{}", path, n));
    if (r.step < first_step) out.push_back(r);
  }
  return out;
}

TrainingLog::TrainingLog(StepMeter meter, int steps, bool mfu, std::string metrics_path, std::string report_path,
                         std::string title, bool progress, std::vector<StepRecord> history, std::string history_path)
    : meter_(std::move(meter)),
      steps_(steps),
      mfu_(mfu),
      metrics_path_(std::move(metrics_path)),
      report_path_(std::move(report_path)),
      title_(std::move(title)),
      history_path_(std::move(history_path)),
      progress_(progress),
      records_(std::move(history)) {}

void TrainingLog::OnStep(const StepProgress& p) {
  StepRecord r;
  r.step = p.step;
  r.loss = p.loss;
  r.grad_norm = p.grad_norm;
  r.lr = p.lr;
  r.skipped = p.skipped;
  r.step_s = p.seconds;
  r.data_wait_s = p.data_wait_s;
  r.data_load_s = p.data_load_s;
  const StepWork work = meter_.At(p.step);
  r.tokens = work.tokens;
  r.model_flops = work.model_flops;
  r.mfu = mfu_ && p.seconds > 0 ? work.model_flops / (p.seconds * meter_.PeakFlopsPerSecond()) : NAN;
  const auto now = std::chrono::steady_clock::now();
  r.elapsed_s = std::chrono::duration<double>(now - start_).count();
  // A fault-tolerant run replays the steps a failure interrupted: the replay's record replaces theirs.
  while (!records_.empty() && records_.back().step >= r.step) records_.pop_back();
  records_.push_back(r);
  ran_ = true;
  if (progress_) std::cerr << FormatStepLine(r, steps_, records_) << std::endl;
  if ((!metrics_path_.empty() || !history_path_.empty()) && now - written_ > std::chrono::seconds(10)) {
    WriteMetrics();
    written_ = now;
  }
}

void TrainingLog::WriteMetrics() {
  std::string text;
  for (const auto& r : records_) text += StepRecordJson(r).dump() + "\n";
  if (!metrics_path_.empty()) WriteFileAtomically(metrics_path_, text);
  if (!history_path_.empty()) WriteFileAtomically(history_path_, text);
}

bool TrainingLog::ran() const { return ran_; }

void TrainingLog::Finish() {
  if (!metrics_path_.empty() || !history_path_.empty()) WriteMetrics();
  if (!report_path_.empty()) WriteFileAtomically(report_path_, TrainingReportHtml(title_, records_));
}

}  // namespace loom::cli

#endif  // LOOM_HAVE_RUNTIME
