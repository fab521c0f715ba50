// `loom profile`: the runtime's layers and kernels measured on this machine,
// written as a profile the simulator reads (--profile FILE).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "loom/cli/command.h"
#include "loom/cli/flag_checks.h"
#include "loom/cli/output_file.h"
#include "loom/cost/profile.h"
#include "loom/error.h"
#include "loom/runtime/profiler.h"
#include "loom/spec/model.h"
#include "loom/spec/precision.h"

namespace loom::cli {

namespace {

constexpr int64_t kMaxProfileTokens = 65536;

// --tokens' comma-separated integers.
std::vector<int64_t> ParseTokenCounts(const std::string& list) {
  std::vector<int64_t> tokens;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      size_t used = 0;
      tokens.push_back(std::stoll(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw loom::Error(fmt::format("--tokens: '{}' is not an integer; valid: e.g. 64,256,1024", item));
    }
    // A layer measured at more tokens than any sequence Loom plans (spec/limits)
    // would only exhaust memory.
    if (tokens.back() < 1 || tokens.back() > kMaxProfileTokens) {
      throw loom::Error(
          fmt::format("--tokens: {} is out of range; valid: token counts in 1..{}", tokens.back(), kMaxProfileTokens));
    }
  }
  return tokens;
}

class ProfileCommand : public Command {
 public:
  explicit ProfileCommand(CLI::App& app)
      : Command(app.add_subcommand("profile",
                                   "measure the runtime's layers and kernels on this machine and "
                                   "write a profile the simulator reads (--profile FILE)")) {
    CLI::App* sub = subcommand();
    sub->add_option("--model", model_, "built-in model name or YAML file: its layer shapes are measured")->required();
    sub->add_option("--device", device_, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}));
    sub->add_option("--gpu", options_.gpu, "the datasheet the profile is fitted against: the cluster's GPU");
    sub->add_option("--precision", precision_,
                    "what the layers and kernels compute in, as `loom run` under that precision (a run prices its "
                    "layers with a profile of its own precision; bf16 and fp16 stand for each other)")
        ->check(CLI::IsMember({"fp32", "tf32", "bf16", "fp16"}));
    const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    sub->add_option("--threads", options_.threads, "intra-op threads (the runtime's per rank)")->check(IntIn(1, cores));
    sub->add_option("--tokens", tokens_, "token counts to measure, comma-separated");
    sub->add_option("--repeats", options_.repeats, "timed runs per point (median)")->check(kPositiveInt);
    sub->add_option("--concurrent", options_.concurrent,
                    "measure beside N-1 copies of the same measurement (the plan's ranks per machine sharing its "
                    "cores)")
        ->check(IntIn(1, std::max(cores, 8)));
    sub->add_option("--sm-scaling", sm_scaling_,
                    "cuda: on measures the layers on green contexts of part of the SMs and fits the profile's "
                    "sm_sharing law (default); off leaves it out")
        ->check(CLI::IsMember({"on", "off"}));
    sub->add_option("--out", out_, "write the profile here (default: standard output)")->check(kOutputFile);
  }

  void Run() override {
    // Green contexts are a GPU's: asked for on a CPU, said (the default "on" is the GPU's default).
    if (device_ == "cpu" && subcommand()->count("--sm-scaling") > 0 && sm_scaling_ == "on") {
      throw loom::Error(
          "--sm-scaling on: green contexts partition a GPU's SMs; valid with --device cuda (a CPU "
          "profile has no sm_sharing law)");
    }
    const Model model = LoadModel(model_);
    options_.sm_scaling = sm_scaling_ == "on";
    options_.precision = *FindPrecision(precision_);  // one of the names the flag's check allows
    options_.tokens = ParseTokenCounts(tokens_);
#ifdef LOOM_HAVE_RUNTIME
    options_.device = ParseDevice(device_);
    const Profile profile = loom::runtime::MeasureProfile(model, options_);
    const std::string yaml = ProfileToYaml(profile);
    if (out_.empty()) {
      std::cout << yaml;
      return;
    }
    WriteText(
        out_,
        fmt::format("# Written by `loom profile --model {} --device {} --precision {} --threads {} --tokens {}`\n",
                    model_, DeviceName(options_.device), precision_, options_.threads, tokens_) +
            yaml,
        "--out");
    std::cerr << fmt::format("wrote {}: {} layer points, {} kernel points\n", out_, profile.layers.size(),
                             profile.ops.size());
#else
    throw loom::Error(
        "loom profile: this build has no runtime (a fuzz build); `make` builds one with "
        "the PyTorch that scripts/install-deps.sh installs");
#endif
  }

 private:
  std::string model_;
  std::string device_ = "cpu";  // parsed in Run(): ParseDevice lives in the runtime, which a fuzz build lacks
  std::string tokens_ = "64,256,1024";
  std::string sm_scaling_ = "on";
  std::string precision_ = "fp32";
  std::string out_;
  loom::runtime::ProfilerOptions options_;
};

}  // namespace

std::unique_ptr<Command> AddProfileCommand(CLI::App& app) { return std::make_unique<ProfileCommand>(app); }

}  // namespace loom::cli
