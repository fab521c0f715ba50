// What a worker process tells its launcher, as typed messages: the worker
// writes them with Encode and the launchers (run.cpp's, through
// run_reports.cpp, and fault_tolerant_run.cpp's) read them with Decode, so
// neither side formats or parses a line by hand. On the pipe each message is
// one text line ("loss 3 2.5"), which a person can read; numbers are written
// with 17 significant digits, so a double comes back exactly, and nan and inf
// come back as themselves (issue 45: a diverged loss once read back as 0).
// Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace loom::runtime {

namespace report {

struct Loss {  // this process's share of the global batch's mean loss
  int step = 0;
  double value = 0;
};
struct LossScale {  // fp16: the loss scale a step ran with, and whether it was skipped (process 0)
  int step = 0;
  double scale = 0;
  bool skipped = false;
};
struct Metrics {  // the step as the whole run saw it (the first process of each node)
  int step = 0;
  double loss = 0;       // the global batch's mean loss
  double grad_norm = 0;  // the global L2 norm of the gradients, before clipping
  double lr = 0;         // the learning rate the step trained with
  bool skipped = false;  // its loss or gradient norm was not finite and the step changed no weight
  double seconds = 0;    // the step's wall time on this process (the norm's all-reduce aligns every process's end)
  // Its batch on this process's data path (runtime/batch_loader.h): the time
  // the step waited for it, and the loader's time on it (off the critical path).
  double data_wait_s = 0, data_load_s = 0;
};
struct StepTime {  // the step's wall time on this process
  int step = 0;
  double seconds = 0;
};
struct Param {  // one parameter tensor's statistics (replica 0, TP shards summed)
  double sum = 0, sum_sq = 0, abs_sum = 0;
};
struct PeakMemory {  // the process's peak resident (CPU) or CUDA-allocated bytes
  double bytes = 0;
};
struct PeakTensorMemory {  // weights plus the peak of live tensors the steps allocated
  double bytes = 0;
};
struct Interval {  // an action of the last step, on the simulator's rank of its copy
  int instance = 0, stream = 0, action = 0;
  double start_s = 0, end_s = 0;
};
struct Note {  // a remark the launcher prints with the process's number
  std::string text;
};
struct Failure {  // why the worker stops (its last message)
  std::string text;
};
// A fault-tolerant run's worker (runtime/fault_tolerance.h):
struct Heartbeat {};
struct Ready {  // its generation's state is restored
  int generation = 0;
  double seconds = 0;          // since the command
  int64_t received_bytes = 0;  // copied from surviving holders
};
struct Done {  // it finished a step and waits for the release
  int generation = 0, step = 0;
};
struct Saved {  // its part of a periodic checkpoint is written
  int generation = 0, step = 0;
  // fp16: its dynamic loss scale then (every process holds the same), for the manifest.
  bool has_loss_scale = false;
  double loss_scale = 0;
  int growth_tracker = 0, hysteresis_tracker = 0;
};
struct Stopped {  // it wrote its layers of a stop checkpoint
  int step = 0;
};
struct WeightsRead {  // the Hugging Face checkpoint's tensors its stages read (`loom run --model DIR`)
  std::vector<std::string> names;
};
struct Dying {  // an injected fault: it is about to be killed or hang
  int step = 0;
  double clock_s = 0;  // steady clock
};

}  // namespace report

using WorkerMessage =
    std::variant<report::Loss, report::LossScale, report::Metrics, report::StepTime, report::Param, report::PeakMemory,
                 report::PeakTensorMemory, report::Interval, report::Note, report::Failure, report::Heartbeat,
                 report::Ready, report::Done, report::Saved, report::Stopped, report::Dying, report::WeightsRead>;

// The message as its line, without the line break (a text's line breaks become spaces).
std::string Encode(const WorkerMessage& message);
// A line back as its message; throws loom::Error naming the line when it is
// not one (an unknown kind, a field missing or not a number).
WorkerMessage Decode(const std::string& line);

}  // namespace loom::runtime
