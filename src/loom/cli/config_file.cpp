#include "loom/cli/config_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "loom/did_you_mean.h"
#include "loom/error.h"
#include "loom/spec/yaml_reader.h"

namespace loom::cli {

namespace {

// Whether the command line gives flag `name` ("--model", or "--model=...").
bool Gives(const std::vector<std::string>& args, const std::string& name) {
  return std::any_of(args.begin(), args.end(),
                     [&](const std::string& a) { return a == name || a.rfind(name + "=", 0) == 0; });
}

std::vector<std::string> FlagNames(const CLI::App& sub) {
  std::vector<std::string> names;
  for (const CLI::Option* o : sub.get_options()) {
    for (const std::string& n : o->get_lnames()) names.push_back(n);
  }
  return names;
}

}  // namespace

void AddConfigFlag(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    sub->add_option("--config",
                    "a YAML file of this command's flags, KEY: VALUE (a list repeats the flag); flags "
                    "given here take precedence")
        ->type_name("FILE");
  }
}

ExpandedArgs ExpandConfig(const CLI::App& app, const std::vector<std::string>& args) {
  // The subcommand: the first argument (`loom plan ...`); --config belongs to it.
  if (args.empty()) return {args, {}};
  const CLI::App* sub = nullptr;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (s->get_name() == args[0]) sub = s;
  }
  std::vector<std::string> rest;
  std::string file;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size()) {
      file = args[++i];
    } else if (args[i].rfind("--config=", 0) == 0) {
      file = args[i].substr(9);
    } else {
      rest.push_back(args[i]);
    }
  }
  if (file.empty() || sub == nullptr) return {args, {}};
  const YAML::Node doc = ParseYaml(ReadTextFile(file, "config YAML"), file);
  if (!doc.IsMap()) throw Error(fmt::format("{}: expected a mapping of flags (KEY: VALUE per line)", file));
  ExpandedArgs expanded;
  std::vector<std::string>& out = expanded.args;
  out.push_back(args[0]);
  const std::vector<std::string> names = FlagNames(*sub);
  for (const auto& kv : doc) {
    const std::string key = kv.first.as<std::string>();
    const std::string where = fmt::format("{}: {}", Where(kv.first, file), key);
    // YAML readers keep a repeated key (yaml-cpp yields both); CLI11 would say "At Most 1 required".
    const auto [first, fresh] = expanded.origin.try_emplace("--" + key, Where(kv.first, file));
    if (!fresh) {
      throw Error(fmt::format("{}: given twice (first at {}); give it once, or a list to repeat the flag", where,
                              first->second));
    }
    const CLI::Option* option = sub->get_option_no_throw("--" + key);
    if (key == "config") throw Error(where + ": config files do not nest; give its flags here instead");
    if (option == nullptr || key == "help") {
      throw Error(fmt::format("{}: not a flag of `loom {}`{}", where, sub->get_name(), DidYouMean(key, names)));
    }
    if (Gives(rest, "--" + key)) continue;  // the command line's value wins
    const YAML::Node& value = kv.second;
    if (value.IsMap()) throw Error(where + ": a mapping; valid: a value, or a list of values to repeat the flag");
    const bool flag = option->get_expected_max() == 0;  // a flag: takes no value
    std::vector<YAML::Node> items;
    if (value.IsSequence()) {
      for (const auto& item : value) items.push_back(item);
    } else {
      items.push_back(value);
    }
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string text = ScalarText(items[i], file, fmt::format("{}[{}]", key, i));
      if (flag) {
        if (text == "true") {
          out.push_back("--" + key);
        } else if (text != "false") {
          throw Error(fmt::format("{}: '{}'; valid: true or false (a flag)", where, text));
        }
      } else {
        out.push_back("--" + key);
        out.push_back(text);
      }
    }
  }
  out.insert(out.end(), rest.begin(), rest.end());
  // Kept, so the command sees the file as one of its inputs (output_file.h).
  out.push_back("--config");
  out.push_back(file);
  return expanded;
}

std::string ConfigOrigin(const ExpandedArgs& expanded, const std::string& message) {
  for (const auto& [flag, where] : expanded.origin) {
    // The flag as a whole word: --seed is not --seed-s.
    for (size_t at = message.find(flag); at != std::string::npos; at = message.find(flag, at + 1)) {
      const size_t end = at + flag.size();
      const bool whole = end == message.size() || !(std::isalnum(static_cast<unsigned char>(message[end])) ||
                                                    message[end] == '-' || message[end] == '_');
      if (whole) return where;
    }
  }
  return "";
}

}  // namespace loom::cli
