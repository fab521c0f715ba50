#include "loom/spec/zoo.h"

#include <algorithm>
#include <string_view>

#include "loom/spec/zoo_data.h"

namespace loom {

namespace {

std::string StemOf(std::string_view file) {
  std::string_view suffix = ".yaml";
  if (file.size() > suffix.size() && file.substr(file.size() - suffix.size()) == suffix) {
    file.remove_suffix(suffix.size());
  }
  return std::string(file);
}

}  // namespace

std::vector<std::string> ZooModelNames() {
  std::vector<std::string> names;
  for (const auto& f : zoo_data::Files()) {
    names.push_back(StemOf(f.name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

const char* FindZooModelText(const std::string& name) {
  for (const auto& f : zoo_data::Files()) {
    if (StemOf(f.name) == name) {
      return f.text;
    }
  }
  return nullptr;
}

}  // namespace loom
