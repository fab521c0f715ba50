// What a run's workers reported (runtime/worker.h's lines), gathered into a
// RunResult: shared by the plain launcher (run.cpp) and the fault-tolerant
// one (fault_tolerant_run.cpp). Torch-free.
#pragma once

#include <string>
#include <vector>

#include "loom/runtime/process_layout.h"
#include "loom/runtime/run.h"

namespace loom::runtime {

// How a worker process ended, from waitpid's status: "was killed by signal 9
// (Killed)" or "exited with code 3".
std::string DescribeExit(int status);

// `lines[p]`: process p's report lines, p numbered as `layout`'s processes.
// Fills out's losses (NaN for a step nobody reported), step_s, params,
// peak_rss_bytes, measured and notes for `steps` steps.
// Throws loom::Error when the run diverged (Divergence below), or a line is
// not what runtime/report_line.h reads.
void ReadReports(const std::vector<std::vector<std::string>>& lines, const ProcessLayout& layout, int steps,
                 RunResult& out);

// Why a run's result is not a trained model, or "": the first step whose
// reported loss is NaN or infinite (`reports_per_step[s]` > 0: somebody
// reported step s), else the first parameter sum that is. A diverged run
// fails; it never reports its losses as numbers and exits 0.
std::string Divergence(const std::vector<double>& losses, const std::vector<int>& reports_per_step,
                       const std::vector<std::vector<double>>& params);

}  // namespace loom::runtime
