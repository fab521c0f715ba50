#include "loom/weights/run_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "loom/atomic_file.h"
#include "loom/error.h"
#include "loom/input_file.h"
#include "loom/regular_file.h"
#include "loom/weights/checkpoint_parts.h"

namespace loom::weights {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifest = "checkpoint.json";
constexpr const char* kLatest = "latest";

const nlohmann::json& ManifestField(const nlohmann::json& j, const char* key, const std::string& path) {
  if (!j.contains(key)) {
    throw Error(
        fmt::format("{}: field {} is missing (a {} manifest has format, steps_done, model, seed, "
                    "global_batch, parts)",
                    path, key, kRunCheckpointFormat));
  }
  return j.at(key);
}

int64_t WholeManifestField(const nlohmann::json& j, const char* key, const std::string& path, int64_t lo, int64_t hi) {
  const nlohmann::json& v = ManifestField(j, key, path);
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
    throw Error(fmt::format("{}: field {} is {}; valid: a whole number from {} to {}", path, key, v.dump(), lo, hi));
  }
  return v.get<int64_t>();
}

std::string StringManifestField(const nlohmann::json& j, const char* key, const std::string& path) {
  const nlohmann::json& v = ManifestField(j, key, path);
  if (!v.is_string()) throw Error(fmt::format("{}: field {} is {}; expected a string", path, key, v.dump()));
  return v.get<std::string>();
}

// A manifest or `latest`, read bounded as every input file is.
std::string ReadCheckpointText(const fs::path& path) {
  if (const std::string what = NotARegularFile(path.string()); !what.empty() && what != "no such file") {
    throw Error(path.string() + ": " + what + "; expected a checkpoint file");
  }
  return ReadInputFile(path.string(), "checkpoint file", kMaxSpecBytes);
}

bool IsStepFolder(const std::string& name) { return std::regex_match(name, std::regex("step-[0-9]{8}")); }
bool IsStagingFolder(const std::string& name) { return std::regex_match(name, std::regex("\\.staging-step-[0-9]{8}")); }

// A checkpoint folder's manifest, with every part it lists present.
RunCheckpointManifest CheckComplete(const fs::path& folder) {
  const fs::path manifest = folder / kManifest;
  if (!fs::exists(manifest)) {
    throw Error(
        fmt::format("{}: a partial checkpoint: it has no {} (a save that did not finish)", folder.string(), kManifest));
  }
  RunCheckpointManifest m = ParseRunCheckpointManifest(ReadCheckpointText(manifest), manifest.string());
  for (const auto& p : m.parts) {
    if (!fs::exists(folder / p)) {
      throw Error(
          fmt::format("{}: a partial checkpoint: part {} that its manifest lists is missing", folder.string(), p));
    }
  }
  return m;
}

std::vector<int64_t> ParseShapeText(const std::string& text, const std::string& where) {
  std::vector<int64_t> shape;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0) throw Error(fmt::format("{}: shape '{}' is not D0,D1,...", where, text));
    shape.push_back(v);
  }
  return shape;
}

int64_t ElementCount(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

std::string RunCheckpointManifestText(const RunCheckpointManifest& m) {
  nlohmann::json j = {{"format", kRunCheckpointFormat},
                      {"steps_done", m.steps_done},
                      {"model", m.model},
                      {"seed", m.seed},
                      {"global_batch", m.global_batch},
                      {"plan", m.plan},
                      {"parts", m.parts}};
  if (!m.model_identity.empty()) j["model_identity"] = m.model_identity;
  if (!m.data_stream.empty()) j["data_stream"] = m.data_stream;
  if (m.has_loss_scale) {
    j["loss_scale"] = {
        {"scale", m.loss_scale}, {"growth_tracker", m.growth_tracker}, {"hysteresis_tracker", m.hysteresis_tracker}};
  }
  return j.dump(2) + "\n";
}

RunCheckpointManifest ParseRunCheckpointManifest(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  if (!j.is_object()) throw Error(fmt::format("{}: expected a JSON object (a checkpoint manifest)", path));
  if (const std::string format = StringManifestField(j, "format", path); format != kRunCheckpointFormat) {
    // loom-checkpoint-1 (one .pt file per layer) was the fault-tolerant
    // runs' own format before they wrote this one.
    throw Error(fmt::format("{}: field format is '{}'; valid: {}{}", path, format, kRunCheckpointFormat,
                            format == "loom-checkpoint-1"
                                ? " (loom-checkpoint-1 is an earlier Loom's fault-tolerant checkpoint, which this "
                                  "version no longer reads)"
                                : ""));
  }
  RunCheckpointManifest m;
  m.steps_done = static_cast<int>(WholeManifestField(j, "steps_done", path, 0, int64_t{1} << 30));
  m.model = StringManifestField(j, "model", path);
  // A workload's seed is any 64-bit unsigned number.
  if (const nlohmann::json& seed = ManifestField(j, "seed", path); seed.is_number_unsigned()) {
    m.seed = seed.get<uint64_t>();
  } else {
    throw Error(fmt::format("{}: field seed is {}; valid: a whole number from 0 to {}", path, seed.dump(), UINT64_MAX));
  }
  m.global_batch = WholeManifestField(j, "global_batch", path, 1, INT64_MAX);
  if (j.contains("plan")) m.plan = StringManifestField(j, "plan", path);
  if (j.contains("model_identity")) {
    const nlohmann::json& lines = j.at("model_identity");
    if (!lines.is_array() || lines.empty() ||
        !std::all_of(lines.begin(), lines.end(), [](const nlohmann::json& l) { return l.is_string(); })) {
      throw Error(fmt::format("{}: field model_identity is {}; expected a list of strings (the model's lines)", path,
                              lines.dump().substr(0, 80)));
    }
    for (const auto& l : lines) m.model_identity.push_back(l.get<std::string>());
  }
  if (j.contains("data_stream")) m.data_stream = StringManifestField(j, "data_stream", path);
  const nlohmann::json& parts = ManifestField(j, "parts", path);
  if (!parts.is_array() || parts.empty())  // every run writes one part a process, at least
    throw Error(fmt::format("{}: field parts is {}; expected a list of file names", path, parts.dump()));
  std::set<std::string> seen;
  for (size_t i = 0; i < parts.size(); ++i) {
    const nlohmann::json& p = parts[i];
    // A part names a file beside the manifest: never a path.
    if (!p.is_string() || p.get<std::string>().empty() || p.get<std::string>().find('/') != std::string::npos ||
        p.get<std::string>().find('\0') != std::string::npos || p == "." || p == "..") {
      throw Error(fmt::format("{}: parts[{}] is {}; valid: a file name beside the manifest", path, i, p.dump()));
    }
    if (!seen.insert(p.get<std::string>()).second)
      throw Error(fmt::format("{}: parts[{}] {} is listed twice", path, i, p.dump()));
    m.parts.push_back(p.get<std::string>());
  }
  if (j.contains("loss_scale")) {
    const nlohmann::json& s = j.at("loss_scale");
    if (!s.is_object() || !s.contains("scale") || !s.at("scale").is_number() || !(s.at("scale").get<double>() > 0)) {
      throw Error(
          fmt::format("{}: field loss_scale is {}; expected {{\"scale\": > 0, \"growth_tracker\", "
                      "\"hysteresis_tracker\"}}",
                      path, s.dump()));
    }
    m.has_loss_scale = true;
    m.loss_scale = s.at("scale").get<double>();
    m.growth_tracker = static_cast<int>(WholeManifestField(s, "growth_tracker", path, 0, INT32_MAX));
    m.hysteresis_tracker = static_cast<int>(WholeManifestField(s, "hysteresis_tracker", path, 0, INT32_MAX));
  }
  return m;
}

std::string StepFolderName(int steps_done) { return fmt::format("step-{:08d}", steps_done); }

std::string FindCheckpoint(const std::string& dir) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) {
    const std::string what = NotARegularFile(dir);
    const std::string is = what.empty() ? "a file, not a folder" : what == "no such file" ? "no such folder" : what;
    throw Error(
        fmt::format("--resume {}: {}; valid: a checkpoint folder (a --checkpoint-dir folder, or one step-N "
                    "folder in it{})",
                    dir, is, root.filename() == kManifest ? fmt::format(": {}", root.parent_path().string()) : ""));
  }
  if (fs::exists(root / kManifest)) {
    CheckComplete(root);
    return root.string();
  }
  if (fs::exists(root / kLatest)) {
    std::string name = ReadCheckpointText(root / kLatest);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (!IsStepFolder(name)) {
      throw Error(fmt::format("{}/{}: names '{}'; valid: a step-NNNNNNNN folder beside it", dir, kLatest, name));
    }
    CheckComplete(root / name);
    return (root / name).string();
  }
  std::vector<std::string> partial;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (IsStepFolder(name) || IsStagingFolder(name)) partial.push_back(name);
  }
  if (!partial.empty()) {
    std::sort(partial.begin(), partial.end());
    throw Error(fmt::format("--resume {}: holds no complete checkpoint ({} without `{}`: a save that did not finish)",
                            dir, partial.back(), kLatest));
  }
  throw Error(
      fmt::format("--resume {}: holds no checkpoint (neither {} nor `{}`; `loom run --checkpoint-dir` writes one)", dir,
                  kManifest, kLatest));
}

void CheckCheckpointRoot(const std::string& dir, const std::string& resumed_from) {
  const fs::path root(dir);
  if (!fs::exists(root)) return;
  if (!fs::is_directory(root)) throw Error(fmt::format("--checkpoint-dir {}: is a file, not a folder", dir));
  const bool own = !resumed_from.empty() && fs::equivalent(fs::path(resumed_from).parent_path(), root);
  std::string other;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (name == "metrics.jsonl") {  // the run's step record (`loom run` writes it beside its checkpoints)
      if (const std::string what = NotARegularFile(e.path().string()); !what.empty()) {
        // Found at the end of the run, after its checkpoints, before (runtime audit R4-16).
        throw Error(fmt::format("--checkpoint-dir {}: metrics.jsonl is {}; the run's per-step record is written there",
                                dir, what));
      }
      continue;
    }
    if (name == kLatest || IsStepFolder(name)) {
      other = name;
      continue;
    }
    if (IsStagingFolder(name)) continue;  // a crashed save's leftover: replaced when that step saves again
    throw Error(
        fmt::format("--checkpoint-dir {}: holds {}, which is not a checkpoint's; choose an empty folder", dir, name));
  }
  if (!other.empty() && !own) {
    throw Error(
        fmt::format("--checkpoint-dir {}: holds another run's checkpoints ({}); --resume {} to continue "
                    "that run, or choose an empty folder",
                    dir, other, dir));
  }
}

std::string StagingPath(const std::string& dir, int steps_done) {
  return (fs::path(dir) / (".staging-" + StepFolderName(steps_done))).string();
}

std::string PartFileName(int process) { return fmt::format("part-{:05d}.safetensors", process); }

std::string StageRunCheckpoint(const std::string& dir, int steps_done) {
  const fs::path named = StagingPath(dir, steps_done);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("--checkpoint-dir {}: cannot be created: {}", dir, ec.message()));
  fs::remove_all(named, ec);
  if (!fs::create_directory(named, ec) || ec) {
    throw Error(fmt::format("--checkpoint-dir {}: cannot create {}: {}", dir, named.string(), ec.message()));
  }
  return named.string();
}

void CommitRunCheckpoint(const std::string& staging, const std::string& dir, const RunCheckpointManifest& m, int keep) {
  WriteFileAtomically((fs::path(staging) / kManifest).string(), RunCheckpointManifestText(m));
  CheckComplete(staging);
  const fs::path target = fs::path(dir) / StepFolderName(m.steps_done);
  const fs::path old = fs::path(dir) / (".old-" + StepFolderName(m.steps_done));
  std::error_code ec;
  if (fs::exists(target)) {  // a resumed run saving a step again: the new one replaces it
    fs::remove_all(old, ec);
    fs::rename(target, old, ec);
    if (ec) throw Error(fmt::format("checkpoint {}: cannot move aside {}: {}", dir, target.string(), ec.message()));
  }
  fs::rename(staging, target, ec);
  if (ec)
    throw Error(fmt::format("checkpoint {}: cannot rename {} to {}: {}", dir, staging, target.string(), ec.message()));
  WriteFileAtomically((fs::path(dir) / kLatest).string(), StepFolderName(m.steps_done) + "\n");
  fs::remove_all(old, ec);
  if (keep <= 0) return;
  std::vector<std::string> steps;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (IsStepFolder(name)) steps.push_back(name);
  }
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; i + keep < steps.size(); ++i) {
    if (steps[i] != StepFolderName(m.steps_done)) fs::remove_all(fs::path(dir) / steps[i], ec);
  }
}

std::string SliceKey(const std::string& stored) { return "loom.slice." + stored; }
std::string RangeKey(const std::string& stored) { return "loom.range." + stored; }
std::string ShapeKey(const std::string& stored) { return "loom.shape." + stored; }
std::string StepKey(const std::string& param) { return "loom.step." + param; }

RunCheckpointReader::RunCheckpointReader(const std::string& folder) : folder_(folder) {
  manifest_ = CheckComplete(folder);
  for (const auto& part : manifest_.parts) {
    files_.push_back(std::make_unique<SafetensorsFile>((fs::path(folder) / part).string()));
    const SafetensorsFile& file = *files_.back();
    const auto& meta = file.layout().metadata;
    for (const auto& [key, value] : meta) {
      if (key.rfind("loom.step.", 0) != 0) continue;
      char* end = nullptr;
      const long long step = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || step < 0) {
        throw Error(fmt::format("{}: {} is '{}'; valid: a step count >= 0", file.path(), key, value));
      }
      const std::string param = key.substr(std::string("loom.step.").size());
      steps_[param] = std::max<int64_t>(steps_[param], step);
    }
    for (const TensorInfo& t : file.layout().tensors) {
      const std::string where = fmt::format("{}: tensor '{}'", file.path(), t.name);
      if (t.dtype != DType::kF32)
        throw Error(where + fmt::format(": is {}; a checkpoint holds F32", DTypeName(t.dtype)));
      Piece p;
      p.file = &file;
      p.info = &t;
      p.shape = t.shape;
      if (auto s = meta.find(SliceKey(t.name)); s != meta.end()) {
        char tail = 0;
        if (std::sscanf(s->second.c_str(), "%d/%d/%d%c", &p.dim, &p.index, &p.count, &tail) != 3 || p.count < 1 ||
            p.index < 0 || p.index >= p.count || p.dim < 0) {
          throw Error(where + fmt::format(": slice '{}' is not DIM/INDEX/COUNT with 0 <= INDEX < COUNT", s->second));
        }
      }
      if (auto r = meta.find(RangeKey(t.name)); r != meta.end()) {
        long long offset = 0, length = 0, numel = 0;
        char tail = 0;
        if (std::sscanf(r->second.c_str(), "%lld/%lld/%lld%c", &offset, &length, &numel, &tail) != 3 || offset < 0 ||
            length < 0 || offset + length > numel || t.elements() != length) {
          throw Error(where + fmt::format(": range '{}' is not OFFSET/LENGTH/NUMEL of its {} elements", r->second,
                                          t.elements()));
        }
        p.ranged = true;
        p.offset = offset;
        p.length = length;
        p.numel = numel;
        const auto shape = meta.find(ShapeKey(t.name));
        if (shape == meta.end()) throw Error(where + ": a range without its tensor's shape (" + ShapeKey(t.name) + ")");
        p.shape = ParseShapeText(shape->second, where);
        if (ElementCount(p.shape) != numel)
          throw Error(where + fmt::format(": shape {} does not hold {} elements", shape->second, numel));
      }
      if (p.dim >= static_cast<int>(p.shape.size()) && p.count > 1) {
        throw Error(where +
                    fmt::format(": sliced along dimension {} of a {}-dimensional tensor", p.dim, p.shape.size()));
      }
      // A whole tensor written by several processes (a fault-tolerant run's
      // survivors holding the same layer write identical copies): the first.
      std::vector<Piece>& pieces = pieces_[t.name];
      const auto whole =
          std::find_if(pieces.begin(), pieces.end(), [](const Piece& q) { return !q.ranged && q.count == 1; });
      if (!p.ranged && p.count == 1 && whole != pieces.end()) {
        if (whole->shape != p.shape) {
          throw Error(where + fmt::format(": a whole copy of shape [{}], where {} holds one of shape [{}]",
                                          fmt::join(p.shape, ", "), whole->file->path(),
                                          fmt::join(whole->shape, ", ")));
        }
        continue;
      }
      pieces.push_back(p);
    }
  }
  CheckStepCounts();
}

void RunCheckpointReader::CheckStepCounts() const {
  // Every tensor with AdamW moments has its step count, none more than the
  // manifest's steps_done, the count the folder is named for. (Counts may
  // differ between tensors: AdamW skips a tensor without a gradient, as a
  // vision tower is on a step without images.) A lost count silently
  // restarted AdamW; a manifest behind its parts replayed a step.
  for (const auto& [name, pieces] : pieces_) {
    const size_t hash = name.find('#');
    if (hash == std::string::npos) continue;
    const std::string base = name.substr(0, hash);
    if (Step(base) == 0) {
      throw Error(
          fmt::format("checkpoint {}: '{}' has AdamW moments ('{}') but no step count {} in {}'s metadata; "
                      "the optimizer would restart: the part lost its metadata",
                      folder_, base, name, StepKey(base), pieces[0].file->path()));
    }
  }
  for (const auto& [param, step] : steps_) {
    if (step > manifest_.steps_done) {
      throw Error(fmt::format("checkpoint {}: checkpoint.json says {} steps done, but '{}' took {} AdamW steps",
                              folder_, manifest_.steps_done, param, step));
    }
  }
  fs::path folder = fs::path(folder_).lexically_normal();
  if (folder.filename().empty()) folder = folder.parent_path();  // "step-00000004/"
  const std::string folder_name = folder.filename().string();
  if (IsStepFolder(folder_name) && folder_name != StepFolderName(manifest_.steps_done)) {
    throw Error(fmt::format("checkpoint {}: checkpoint.json says {} steps done, but the folder is named for {}",
                            folder_, manifest_.steps_done, std::stoi(folder_name.substr(5))));
  }
}

int64_t RunCheckpointReader::Step(const std::string& name) const {
  const auto it = steps_.find(name);
  return it == steps_.end() ? 0 : it->second;
}

std::vector<float> RunCheckpointReader::Read(const std::string& name, std::vector<int64_t>* shape) const {
  const auto found = pieces_.find(name);
  if (found == pieces_.end()) throw Error(fmt::format("checkpoint {}: holds no tensor '{}'", folder_, name));
  const std::vector<Piece>& pieces = found->second;
  const int count = pieces[0].count, dim = pieces[0].dim;
  // The metadata first: every slice's ZeRO ranges must tile it, checked
  // before anything is allocated (a part claiming a shape of 2^60 elements
  // was std::bad_alloc, naming no file).
  if (static_cast<size_t>(count) > pieces.size()) {
    throw Error(
        fmt::format("checkpoint {}: tensor '{}' is {} slices in {}'s metadata, but {} part(s) hold it (a "
                    "partial checkpoint)",
                    folder_, name, count, pieces[0].file->path(), pieces.size()));
  }
  // Per slice, its shape: slices agree beside `dim`, where they are
  // SliceSpanOf's split (checkpoint_parts.h) of the whole.
  std::vector<std::vector<int64_t>> slice_shapes(count);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> covered(count);  // per slice: the ranges [offset, end)
  for (const Piece& p : pieces) {
    std::vector<int64_t> beside = p.shape, first = pieces[0].shape;
    if (count > 1 && dim < static_cast<int>(beside.size()) && beside.size() == first.size()) beside[dim] = first[dim];
    if (p.count != count || p.dim != dim || beside != first ||
        (!slice_shapes[p.index].empty() && slice_shapes[p.index] != p.shape)) {
      throw Error(fmt::format("{}: tensor '{}': its slice {}/{} along {} of shape [{}] disagrees with {}'s",
                              p.file->path(), name, p.index, p.count, p.dim, fmt::join(p.shape, ", "),
                              pieces[0].file->path()));
    }
    slice_shapes[p.index] = p.shape;
    const int64_t offset = p.ranged ? p.offset : 0, length = p.ranged ? p.length : ElementCount(p.shape);
    covered[p.index].push_back({offset, offset + length});
  }
  int64_t whole_rows = 0;  // along `dim`
  for (int i = 0; i < count; ++i) whole_rows += slice_shapes[i].empty() ? 0 : slice_shapes[i][dim];
  for (int i = 0; i < count; ++i) {
    std::vector<std::pair<int64_t, int64_t>>& ranges = covered[i];
    std::sort(ranges.begin(), ranges.end());
    int64_t at = 0;
    for (const auto& [b, e] : ranges) {
      if (b != at) {
        throw Error(fmt::format("checkpoint {}: tensor '{}' slice {} of {}: elements {}..{} are {}", folder_, name, i,
                                count, std::min(b, at), std::max(b, at), b > at ? "in no part" : "in two parts"));
      }
      at = e;
    }
    if (ranges.empty() || at != ElementCount(slice_shapes[i])) {
      throw Error(fmt::format("checkpoint {}: tensor '{}' slice {} of {} is {} (a partial checkpoint)", folder_, name,
                              i, count, ranges.empty() ? "missing from every part" : "incomplete"));
    }
  }
  for (int i = 0; i < count; ++i) {
    if (count > 1 && slice_shapes[i][dim] != SliceSpanOf(whole_rows, i, count).length) {
      throw Error(fmt::format(
          "checkpoint {}: tensor '{}' slice {} of {} has {} entries along dimension {}; a split "
          "of {} gives it {}",
          folder_, name, i, count, slice_shapes[i][dim], dim, whole_rows, SliceSpanOf(whole_rows, i, count).length));
    }
  }
  // Each TP slice, its ZeRO ranges placed: the parts' bytes, which tile it.
  std::vector<std::vector<float>> slices(count);
  for (const Piece& p : pieces) {
    const std::string where = fmt::format("{}: tensor '{}'", p.file->path(), name);
    std::vector<float>& s = slices[p.index];
    const int64_t numel = ElementCount(p.shape);
    if (s.empty()) s.assign(numel, 0.0F);
    const int64_t offset = p.ranged ? p.offset : 0, length = p.ranged ? p.length : numel;
    p.file->Read(*p.info,
                 std::span<std::byte>(reinterpret_cast<std::byte*>(s.data() + offset), length * sizeof(float)));
    // A diverged run's state must not be trained on (issue 45).
    if (!std::all_of(s.begin() + offset, s.begin() + offset + length, [](float x) { return std::isfinite(x); })) {
      throw Error(where +
                  ": holds values that are not finite (nan or inf): the run that wrote it diverged; resume "
                  "from an earlier checkpoint");
    }
  }
  std::vector<int64_t> whole = slice_shapes[0];
  if (count == 1) {
    if (shape) *shape = whole;
    return std::move(slices[0]);
  }
  whole[dim] = whole_rows;
  // Joined along `dim`: for each index over the dimensions before it, every slice's contiguous run in turn.
  int64_t outer = 1, inner = 1;  // inner: elements of one entry along `dim`
  for (int d = 0; d < dim; ++d) outer *= whole[d];
  for (size_t d = dim + 1; d < whole.size(); ++d) inner *= whole[d];
  std::vector<float> out(static_cast<size_t>(outer * whole_rows * inner));
  for (int64_t o = 0; o < outer; ++o) {
    for (int i = 0; i < count; ++i) {
      const SliceSpan span = SliceSpanOf(whole_rows, i, count);
      std::copy_n(slices[i].begin() + o * span.length * inner, span.length * inner,
                  out.begin() + (o * whole_rows + span.begin) * inner);
    }
  }
  if (shape) *shape = whole;
  return out;
}

}  // namespace loom::weights
