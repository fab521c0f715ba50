#include "loom/runtime/worker_message.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <sstream>

#include "loom/error.h"
#include "loom/runtime/report_line.h"

namespace loom::runtime {

namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

std::string OneLine(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

}  // namespace

std::string Encode(const WorkerMessage& message) {
  using namespace report;
  return std::visit(
      Overloaded{
          [](const Loss& m) { return fmt::format("loss {} {:.17g}", m.step, m.value); },
          [](const LossScale& m) { return fmt::format("scale {} {:.17g} {}", m.step, m.scale, m.skipped ? 1 : 0); },
          [](const Metrics& m) {
            return fmt::format("metrics {} {:.17g} {:.17g} {:.17g} {} {:.17g} {:.17g} {:.17g}", m.step, m.loss,
                               m.grad_norm, m.lr, m.skipped ? 1 : 0, m.seconds, m.data_wait_s, m.data_load_s);
          },
          [](const StepTime& m) { return fmt::format("time {} {:.17g}", m.step, m.seconds); },
          [](const Param& m) { return fmt::format("param {:.17g} {:.17g} {:.17g}", m.sum, m.sum_sq, m.abs_sum); },
          [](const PeakMemory& m) { return fmt::format("mem {:.17g}", m.bytes); },
          [](const PeakTensorMemory& m) { return fmt::format("tmem {:.17g}", m.bytes); },
          [](const Interval& m) {
            return fmt::format("iv {} {} {} {:.17g} {:.17g}", m.instance, m.stream, m.action, m.start_s, m.end_s);
          },
          [](const Note& m) { return "note " + OneLine(m.text); },
          [](const Failure& m) { return "error " + OneLine(m.text); },
          [](const Heartbeat&) { return std::string("hb"); },
          [](const Ready& m) { return fmt::format("ready {} {:.17g} {}", m.generation, m.seconds, m.received_bytes); },
          [](const Done& m) { return fmt::format("done {} {}", m.generation, m.step); },
          [](const Saved& m) {
            if (!m.has_loss_scale) return fmt::format("saved {} {}", m.generation, m.step);
            return fmt::format("saved {} {} {:.17g} {} {}", m.generation, m.step, m.loss_scale, m.growth_tracker,
                               m.hysteresis_tracker);
          },
          [](const Stopped& m) { return fmt::format("stopped {}", m.step); },
          [](const Dying& m) { return fmt::format("dying {} {:.17g}", m.step, m.clock_s); },
          // Tensor names hold no space (safetensors keys are dotted identifiers).
          [](const WeightsRead& m) { return OneLine("read " + fmt::format("{}", fmt::join(m.names, " "))); },
      },
      message);
}

WorkerMessage Decode(const std::string& line) {
  using namespace report;
  ReportLine in(line);
  const std::string& kind = in.kind();
  if (kind == "loss") {
    Loss m;
    m.step = in.Int();
    m.value = in.Number();
    return m;
  }
  if (kind == "scale") {
    LossScale m;
    m.step = in.Int();
    m.scale = in.Number();
    m.skipped = in.Int() != 0;
    return m;
  }
  if (kind == "metrics") {
    Metrics m;
    m.step = in.Int();
    m.loss = in.Number();
    m.grad_norm = in.Number();
    m.lr = in.Number();
    m.skipped = in.Int() != 0;
    m.seconds = in.Number();
    m.data_wait_s = in.Number();
    m.data_load_s = in.Number();
    return m;
  }
  if (kind == "time") {
    StepTime m;
    m.step = in.Int();
    m.seconds = in.Number();
    return m;
  }
  if (kind == "param") {
    Param m;
    m.sum = in.Number();
    m.sum_sq = in.Number();
    m.abs_sum = in.Number();
    return m;
  }
  if (kind == "mem") return PeakMemory{in.Number()};
  if (kind == "tmem") return PeakTensorMemory{in.Number()};
  if (kind == "iv") {
    Interval m;
    m.instance = in.Int();
    m.stream = in.Int();
    m.action = in.Int();
    m.start_s = in.Number();
    m.end_s = in.Number();
    return m;
  }
  if (kind == "note") return Note{in.Rest()};
  if (kind == "error") return Failure{in.Rest()};
  if (kind == "hb") return Heartbeat{};
  if (kind == "ready") {
    Ready m;
    m.generation = in.Int();
    m.seconds = in.Number();
    m.received_bytes = in.Integer();
    return m;
  }
  if (kind == "done" || kind == "saved") {
    const int generation = in.Int(), step = in.Int();
    if (kind == "done") return Done{generation, step};
    Saved m{generation, step};
    if (!in.Rest().empty()) {
      m.has_loss_scale = true;
      m.loss_scale = in.Number();
      m.growth_tracker = in.Int();
      m.hysteresis_tracker = in.Int();
    }
    return m;
  }
  if (kind == "stopped") return Stopped{in.Int()};
  if (kind == "read") {
    WeightsRead m;
    std::istringstream names(in.Rest());
    for (std::string name; names >> name;) m.names.push_back(name);
    return m;
  }
  if (kind == "dying") {
    Dying m;
    m.step = in.Int();
    m.clock_s = in.Number();
    return m;
  }
  throw Error(fmt::format("runtime: a worker reported '{}', which is no message of runtime/worker_message.h", line));
}

}  // namespace loom::runtime
