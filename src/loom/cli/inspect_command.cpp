// `loom inspect`: a model's per-module parameters, FLOPs and intensity.
#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include <algorithm>
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
    // An empty --cluster was read as none (D58): it is a name that loads nothing.
    if (subcommand()->count("--cluster") > 0) options.cluster = LoadCluster(cluster_);
    const Model model = LoadModel(model_);
    if (subcommand()->count("--image") > 0) {
      options.image_px = ParseImageSize(image_);
      // One image replaces the workload's samples: a workload beside it would be ignored (D57).
      if (options.workload) {
        throw Error(fmt::format("--image {} counts one image's tokens instead of a workload's samples: give "
                                "--image or the workload flags, not both",
                                image_));
      }
      // A model no module of which reads images would print a table of zeros (D56).
      const bool reads_images = std::any_of(model.modules.begin(), model.modules.end(), [](const Module& m) {
        return m.tokens.source == TokenSource::kImage;
      });
      if (!reads_images) {
        throw Error(fmt::format("--image {}: model {} has no module that reads images; valid: a model with an "
                                "image encoder (e.g. vlm-s, clip-vit-l)",
                                image_, model.name));
      }
    }
    const nlohmann::json result = InspectModel(model, options);
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
