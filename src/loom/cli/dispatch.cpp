// Dispatch: the `loom` app, its subcommands in `loom --help`'s order, the
// parse, and the chosen subcommand's run.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "loom/cli/command.h"
#include "loom/cli/config_file.h"
#include "loom/cli/output_file.h"
#include "loom/did_you_mean.h"
#include "loom/error.h"
#include "loom/runtime/build_info.h"

namespace loom::cli {

int Dispatch(int argc, char** argv) {
  CLI::App app{"Loom: plan, schedule and simulate multimodal model training on GPU clusters"};
#ifdef LOOM_HAVE_RUNTIME
  const std::string runtime = fmt::format("runtime: {}", loom::runtime::RuntimeBuild());
#else
  const std::string runtime = "no runtime in this build";
#endif
  app.set_version_flag("--version", fmt::format("loom {} ({})", LOOM_VERSION, runtime));
  app.require_subcommand(1);

  // The order `loom --help` lists them in.
  std::vector<std::unique_ptr<Command>> commands;
  for (auto add :
       {AddModelsCommand, AddPrepareCommand, AddRunCommand, AddClustersCommand, AddProfileCommand, AddProbeSmCommand,
        AddFitSmCommand, AddInspectCommand, AddSimulateCommand, AddReplayCommand, AddPlanCommand}) {
    commands.push_back(add(app));
  }

  AddConfigFlag(app);
  // An unknown command is named, with the valid ones (CLI11 says only that one is required).
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(s->get_name());
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      throw loom::Error(fmt::format("unknown command '{}'; valid: {}{}", argv[1], fmt::join(names, ", "),
                                    DidYouMean(argv[1], names)));
    }
  }
  // --config FILE's flags join the command line's (which take precedence).
  const std::vector<std::string> args = ExpandConfig(app, std::vector<std::string>(argv + 1, argv + argc));
  std::vector<const char*> expanded = {argv[0]};
  for (const std::string& a : args) expanded.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(expanded.size()), expanded.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }

  for (const auto& command : commands) {
    if (!command->subcommand()->parsed()) continue;  // exactly one runs: require_subcommand(1)
    CheckOutputs(*command->subcommand());
    command->Run();
  }
  return 0;
}

}  // namespace loom::cli
