// A training run's checkpoint (`loom run --checkpoint-dir D`, issue 42;
// docs/runtime.md, "Checkpoints"): plan-independent, so that a run resumes
// under another plan. Each process writes the parameters it is the first
// holder of, and their AdamW moments, by name, to a part file of its own
// (safetensors, fp32): a TP slice marked with which slice it is, a ZeRO
// shard with which flat range of its tensor it holds. Reading joins slices
// and ranges into whole tensors, one at a time, which each process of the
// next run cuts to its own plan's share.
//
// The folder D holds step-NNNNNNNN/ folders, each complete (parts and
// checkpoint.json), and `latest` naming the newest. A save is written into
// D/.staging-step-NNNNNNNN/ and renamed into place once every part and the
// manifest are on disk, then `latest` is replaced (atomically): a crash during
// a save leaves the previous checkpoint and `latest` as they were. Torch-free.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/weights/safetensors.h"

namespace loom::weights {

inline constexpr const char* kRunCheckpointFormat = "loom-checkpoint-2";

struct RunCheckpointManifest {
  int steps_done = 0;  // the state is the one after this many steps
  std::string model;   // Model::name
  uint64_t seed = 0;   // the workload's: the data order resumes from it
  int64_t global_batch = 0;
  std::string plan;                // what wrote it ("tp 2 pp 1 ...", a plan file): for people
  // What it trained, compared by `loom run --resume` (spec/model_identity.h,
  // data/data_identity.h). Empty where a manifest does not record them
  // (written by hand, or before they were): then the model's name is compared.
  std::vector<std::string> model_identity;
  std::string data_stream;
  std::vector<std::string> parts;  // part file names beside the manifest
  // fp16's dynamic loss scale (runtime/loss_scaler.h); absent otherwise.
  bool has_loss_scale = false;
  double loss_scale = 0;
  int growth_tracker = 0, hysteresis_tracker = 0;
};

std::string RunCheckpointManifestText(const RunCheckpointManifest& m);
// Throws loom::Error naming `path` and the field that is missing or invalid.
RunCheckpointManifest ParseRunCheckpointManifest(const std::string& text, const std::string& path);

// "step-00000012".
std::string StepFolderName(int steps_done);

// The newest complete checkpoint under `dir` (the folder `latest` names), or
// `dir` itself where it is one checkpoint's folder. Throws loom::Error naming
// `dir` where it holds no checkpoint (or only a partial one: a staging folder,
// a step folder without its manifest or a part it lists).
std::string FindCheckpoint(const std::string& dir);

// Before a run saves into `dir`: it is missing or empty, or it holds this
// run's own checkpoints (`resumed_from` is one of them). Throws loom::Error
// where it holds anything else: another run's checkpoints (resume it, or
// choose another folder), or files that are not a checkpoint's.
void CheckCheckpointRoot(const std::string& dir, const std::string& resumed_from);

// The staging folder of the save after `steps_done` steps: StagingPath, created
// empty (a leftover of a crashed save removed first).
std::string StagingPath(const std::string& dir, int steps_done);
std::string StageRunCheckpoint(const std::string& dir, int steps_done);
// "part-00003.safetensors": process 3's part.
std::string PartFileName(int process);
// Writes the manifest into `staging`, checks every part it lists is there,
// renames the folder to dir/step-N, points `latest` at it, and removes the
// oldest step folders past `keep` (0: keep all).
void CommitRunCheckpoint(const std::string& staging, const std::string& dir, const RunCheckpointManifest& m, int keep);

// Part files' metadata (what each stored tensor is a piece of).
std::string SliceKey(const std::string& stored);  // "loom.slice.NAME": "DIM/INDEX/COUNT"
std::string RangeKey(
    const std::string& stored);  // "loom.range.NAME": "OFFSET/LENGTH/NUMEL" of the flattened (slice) tensor
std::string ShapeKey(const std::string& stored);  // "loom.shape.NAME": "D0,D1,..." of the (slice) tensor a range is of
std::string StepKey(const std::string& param);    // "loom.step.PARAM": AdamW's step count

// One checkpoint folder open for reading: the manifest and every part's header.
class RunCheckpointReader {
 public:
  // Throws loom::Error naming the file: a missing or malformed manifest or part.
  explicit RunCheckpointReader(const std::string& folder);

  const RunCheckpointManifest& manifest() const { return manifest_; }
  const std::string& folder() const { return folder_; }
  bool Has(const std::string& name) const { return pieces_.count(name) > 0; }
  // The whole tensor: TP slices joined along their dimension, each slice
  // assembled from its ZeRO ranges (a whole tensor in several parts, as a
  // fault-tolerant run's survivors write it: the first). Throws loom::Error
  // naming the part files where a slice or a range is missing, given twice or
  // inconsistent, or where a value is not finite.
  std::vector<float> Read(const std::string& name, std::vector<int64_t>* shape) const;
  // AdamW's step count of parameter `name` (0: no optimizer state saved).
  int64_t Step(const std::string& name) const;

 private:
  // Throws loom::Error for step counts that disagree with each other, with
  // their moments, with the manifest or with the folder's name.
  void CheckStepCounts() const;
  struct Piece {
    const SafetensorsFile* file = nullptr;
    const TensorInfo* info = nullptr;
    int dim = 0, index = 0, count = 1;  // its TP slice (count 1: whole)
    bool ranged = false;
    int64_t offset = 0, length = 0, numel = 0;  // its ZeRO range
    std::vector<int64_t> shape;                 // the (slice) tensor's
  };
  std::string folder_;
  RunCheckpointManifest manifest_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::vector<Piece>> pieces_;
  std::map<std::string, int64_t> steps_;
};

}  // namespace loom::weights
