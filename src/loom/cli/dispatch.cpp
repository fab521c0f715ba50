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

namespace {

// CLI11's message, with its bare "Could not convert: --iterations = abc" said
// as the other flag checks say it: the flag, the value and what is valid.
std::string FlagMessage(const CLI::App& app, const CLI::ParseError& e) {
  const std::string message = e.what();
  const std::string prefix = "Could not convert: ";
  const size_t eq = message.find(" = ");
  if (message.rfind(prefix, 0) != 0 || eq == std::string::npos) return message;
  const std::string flag = message.substr(prefix.size(), eq - prefix.size());
  const std::string value = message.substr(eq + 3);
  std::string type = "a value of its type";
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (!sub->parsed()) continue;
    if (const CLI::Option* o = sub->get_option_no_throw(flag)) {
      const std::string name = o->get_type_name();
      if (name.find("INT") != std::string::npos) type = "an integer (see --help)";
      if (name.find("FLOAT") != std::string::npos) type = "a number (see --help)";
    }
  }
  return fmt::format("{}: '{}' is not {}", flag, value, type);
}

}  // namespace

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
  const ExpandedArgs expanded_args = ExpandConfig(app, std::vector<std::string>(argv + 1, argv + argc));
  std::vector<const char*> expanded = {argv[0]};
  for (const std::string& a : expanded_args.args) expanded.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(expanded.size()), expanded.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string message = FlagMessage(app, e);
    const std::string origin = ConfigOrigin(expanded_args, message);
    if (!origin.empty()) throw loom::Error(fmt::format("{}: {}", origin, message));
    if (message != e.what()) throw loom::Error(message);
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
