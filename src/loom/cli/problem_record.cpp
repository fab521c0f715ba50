#include "loom/cli/problem_record.h"

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <limits>

#include "loom/error.h"
#include "loom/input_file.h"
#include "loom/path_kind.h"
#include "loom/spec/workload.h"

namespace loom::cli {

namespace {

// A name as given, or an existing file's absolute path (the replay may run elsewhere).
std::string Source(const std::string& arg) {
  if (arg.empty() || KindOfPath(arg) == PathKind::kNone) return arg;
  return std::filesystem::absolute(arg).lexically_normal().string();
}

// The recorded value where the flag was not given, checked as the flag is
// (a file edited by hand is input too).
template <class T>
void Take(std::optional<T>& flag, const nlohmann::json& record, const char* key, int64_t lo, int64_t hi,
          const std::string& path) {
  if (flag || !record.contains(key) || record.at(key).is_null()) return;
  const T v = record.at(key).get<T>();
  if (static_cast<int64_t>(v) < lo || static_cast<int64_t>(v) > hi) {
    throw Error(fmt::format("--plan {}: problem.{}: {}; valid: {}..{}", path, key, record.at(key).dump(), lo, hi));
  }
  flag = v;
}

}  // namespace

nlohmann::json ProblemRecord(const ProblemFlags& p) {
  const WorkloadFlags& w = p.workload;
  nlohmann::json j = {{"model", Source(p.model)},
                      {"cluster", Source(p.cluster)},
                      {"profile", Source(p.profile)},
                      {"workload", Source(w.name)}};
  if (w.global_batch) j["global_batch"] = *w.global_batch;
  if (w.seed) j["seed"] = *w.seed;
  if (w.seq_len) j["seq_len"] = *w.seq_len;
  if (!w.precision.empty()) j["precision"] = w.precision;
  if (w.zero_stage) j["zero_stage"] = *w.zero_stage;
  return j;
}

namespace {

// The file's "problem" object, or null when it records none.
nlohmann::json ReadRecord(const std::string& path) {
  nlohmann::json file;
  try {
    file = nlohmann::json::parse(ReadInputFile(path, "plan JSON", kMaxPlanBytes));
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("--plan {}: not JSON: {}", path, e.what()));
  }
  if (!file.is_object() || !file.contains("problem") || !file.at("problem").is_object()) return nullptr;
  return file.at("problem");
}

void FillWorkload(WorkloadFlags& w, const nlohmann::json& r, const std::string& path, bool take_name) {
  if (take_name && w.name.empty() && r.contains("workload")) w.name = r.at("workload").get<std::string>();
  Take(w.global_batch, r, "global_batch", 1, kMaxGlobalBatch, path);
  Take(w.seed, r, "seed", 0, std::numeric_limits<int64_t>::max(), path);
  Take(w.seq_len, r, "seq_len", 1, std::numeric_limits<int32_t>::max(), path);
  Take(w.zero_stage, r, "zero_stage", 0, 3, path);
  if (w.precision.empty() && r.contains("precision")) w.precision = r.at("precision").get<std::string>();
}

}  // namespace

void FillFromRecord(ProblemFlags& p, const std::string& path) {
  const nlohmann::json r = ReadRecord(path);
  if (r.is_null()) {
    if (!p.model.empty() && !p.cluster.empty()) return;  // a bare plan: checked against the flags
    throw Error(fmt::format(
        "--plan {}: records no problem (a bare plan, or a `loom plan --json` file of an earlier loom); give "
        "--model and --cluster",
        path));
  }
  try {
    if (p.model.empty()) p.model = r.at("model").get<std::string>();
    if (p.cluster.empty()) p.cluster = r.at("cluster").get<std::string>();
    if (p.profile == "default" && r.contains("profile")) p.profile = r.at("profile").get<std::string>();
    FillWorkload(p.workload, r, path, /*take_name=*/true);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("--plan {}: field problem is malformed: {}", path, e.what()));
  }
}

void FillWorkloadFromRecord(WorkloadFlags& w, const std::string& path, bool take_name) {
  const nlohmann::json r = ReadRecord(path);
  if (r.is_null()) return;
  try {
    FillWorkload(w, r, path, take_name);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("--plan {}: field problem is malformed: {}", path, e.what()));
  }
}

}  // namespace loom::cli
