#include "loom/session/strategy_list.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "loom/did_you_mean.h"
#include "loom/error.h"
#include "loom/strategies/strategy.h"

namespace loom {

std::vector<std::string> ParseStrategyList(const std::string& list, const std::string& flag) {
  if (list == "all") return StrategyNames();
  if (list.empty()) {
    throw Error(
        fmt::format("{}: empty; valid: NAME[,NAME...] of {}, or all", flag, fmt::join(StrategyNames(true), ", ")));
  }
  std::vector<std::string> names;
  size_t begin = 0;
  while (true) {
    const size_t comma = list.find(',', begin);
    const std::string name = list.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (StrategyDescription(name).empty()) {
      throw Error(fmt::format("{}: unknown strategy '{}'; valid: {}, or all{}", flag, name,
                              fmt::join(StrategyNames(true), ", "), DidYouMean(name, StrategyNames(true))));
    }
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      throw Error(fmt::format("{}: {} is named twice; name each strategy once", flag, name));
    }
    names.push_back(name);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return names;
}

}  // namespace loom
