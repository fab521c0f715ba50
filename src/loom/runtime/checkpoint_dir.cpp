#include "loom/runtime/checkpoint_dir.h"

#include <dirent.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "loom/atomic_file.h"
#include "loom/error.h"

namespace loom::runtime {

namespace {

constexpr const char* kManifest = "checkpoint.json";

std::vector<std::string> Entries(const std::string& folder) {
  std::vector<std::string> out;
  if (DIR* d = opendir(folder.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") out.push_back(name);
    }
    closedir(d);
  }
  return out;
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

void Mkdirs(const std::string& dir) {
  std::string sofar;
  std::istringstream in(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/') sofar = "/";
  while (std::getline(in, part, '/')) {
    if (part.empty()) continue;
    sofar += part + "/";
    if (mkdir(sofar.c_str(), 0755) != 0 && errno != EEXIST) {
      throw Error(fmt::format("checkpoint {}: cannot create directory {}: {}", dir, sofar, std::strerror(errno)));
    }
  }
}

std::string StageCheckpoint(const std::string& dir) {
  Mkdirs(dir);
  std::string name = dir + "/.staging-XXXXXX";  // mkdtemp: a new folder, never an existing one
  if (mkdtemp(name.data()) == nullptr) {
    throw Error(fmt::format("checkpoint {}: cannot create a staging folder in it: {}", dir, std::strerror(errno)));
  }
  return name;
}

std::vector<std::string> LayerFiles(const std::string& folder) {
  std::vector<std::string> out;
  for (const auto& name : Entries(folder)) {
    if (EndsWith(name, ".pt")) out.push_back(name.substr(0, name.size() - 3));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> CommitCheckpoint(const std::string& staging, const std::string& dir, CheckpointManifest m) {
  m.layers = LayerFiles(staging);
  const std::string manifest = dir + "/" + kManifest;
  if (std::remove(manifest.c_str()) != 0 && errno != ENOENT) {
    throw Error(fmt::format("checkpoint {}: cannot remove the old {}: {}", dir, manifest, std::strerror(errno)));
  }
  for (const auto& layer : m.layers) {
    const std::string from = fmt::format("{}/{}.pt", staging, layer), to = fmt::format("{}/{}.pt", dir, layer);
    if (std::rename(from.c_str(), to.c_str()) != 0) {
      throw Error(fmt::format("checkpoint {}: cannot move {} to {}: {}", dir, from, to, std::strerror(errno)));
    }
  }
  WriteFileAtomically(manifest, CheckpointManifestText(m));
  DiscardStaging(staging);
  return m.layers;
}

void DiscardStaging(const std::string& staging) {
  for (const auto& name : Entries(staging)) std::remove((staging + "/" + name).c_str());
  rmdir(staging.c_str());
}

}  // namespace loom::runtime
