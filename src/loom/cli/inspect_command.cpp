// `loom inspect`: a model's per-module parameters, FLOPs and intensity.
#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include <iostream>
#include <string>

#include "loom/cli/command.h"
#include "loom/cli/common_flags.h"
#include "loom/error.h"
#include "loom/report/inspect.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"

namespace loom::cli {

namespace {

// "640x480" -> {640, 480}; each side 1 to 65536 px.
std::pair<int64_t, int64_t> ParseImageSize(const std::string& text) {
  const size_t x = text.find('x');
  int64_t w = 0, h = 0;
  size_t used_w = 0, used_h = 0;
  try {
    if (x != std::string::npos) {
      w = std::stoll(text.substr(0, x), &used_w);
      h = std::stoll(text.substr(x + 1), &used_h);
    }
  } catch (const std::exception&) {
    w = h = 0;
  }
  if (x == std::string::npos || used_w != x || used_h != text.size() - x - 1 || w < 1 || h < 1 || w > 65536 ||
      h > 65536) {
    throw Error(
        fmt::format("--image: '{}': expected WIDTHxHEIGHT in pixels, each from 1 to 65536 (e.g. 640x480)", text));
  }
  return {w, h};
}

class InspectCommand : public Command {
 public:
  explicit InspectCommand(CLI::App& app)
      : Command(app.add_subcommand("inspect", "per-module parameters, FLOPs and intensity")) {
    CLI::App* sub = subcommand();
    sub->add_option("model", model_, "built-in model name or YAML file")->required();
    sub->add_option("--cluster", cluster_, "adds forward time per sample on its GPU");
    sub->add_flag("--json", json_, "print JSON");
    sub->add_option("--image", image_,
                    "WIDTHxHEIGHT: each module's tokens and sequences for one image of that size (tilings included) "
                    "instead of the workload's samples");
    workload_.Add(sub);
  }

  void Run() override {
    InspectOptions options;
    options.workload = workload_.Resolve();  // no model yet: overrides need --workload
    if (!cluster_.empty()) options.cluster = LoadCluster(cluster_);
    if (!image_.empty()) options.image_px = ParseImageSize(image_);
    const nlohmann::json result = InspectModel(LoadModel(model_), options);
    std::cout << (json_ ? result.dump(2) + "\n" : FormatInspect(result));
  }

 private:
  std::string model_;
  std::string cluster_;
  std::string image_;
  bool json_ = false;
  WorkloadFlags workload_;
};

}  // namespace

std::unique_ptr<Command> AddInspectCommand(CLI::App& app) { return std::make_unique<InspectCommand>(app); }

}  // namespace loom::cli
