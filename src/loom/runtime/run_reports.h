// What a run's workers reported (runtime/worker.h's lines), gathered into a
// RunResult: shared by the plain launcher (run.cpp) and the fault-tolerant
// one (fault_tolerant_run.cpp). Torch-free.
#pragma once

#include <string>
#include <vector>

#include "loom/runtime/process_layout.h"
#include "loom/runtime/run.h"

namespace loom::runtime {

// `lines[p]`: process p's report lines, p numbered as `layout`'s processes.
// Fills out's losses (NaN for a step nobody reported), step_s, params,
// peak_rss_bytes, measured and notes for `steps` steps.
// How a worker process ended, from waitpid's status: "was killed by signal 9
// (Killed)" or "exited with code 3".
std::string DescribeExit(int status);

void ReadReports(const std::vector<std::vector<std::string>>& lines, const ProcessLayout& layout, int steps,
                 RunResult& out);

}  // namespace loom::runtime
