// A checkpoint's folder, and how a save becomes one (docs/runtime.md,
// "Checkpoints"). Several workers write a save's layer files; the launcher
// then commits it with its manifest, checkpoint.json.
//
// Why staging: the manifest used to list every *.pt found in the folder, so a
// reused --checkpoint DIR mixed two runs: a run that had lost every copy of
// some layers found an earlier run's files for them, claimed them as saved,
// and --resume trained on the mix (issue 45). Workers now write into a fresh
// staging folder inside the checkpoint's folder; the manifest lists exactly
// what that save wrote, and the commit removes the old manifest before it
// moves anything in. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/weights/checkpoint_manifest.h"

namespace loom::runtime {

using loom::CheckpointManifest;  // checkpoint.json (weights/checkpoint_manifest.h)

// Creates `dir` and its parents; throws loom::Error naming the part that fails.
void Mkdirs(const std::string& dir);

// Creates `dir` and in it a new, empty staging folder for one save
// (`.staging-XXXXXX`, mkdtemp); returns the staging folder's path.
std::string StageCheckpoint(const std::string& dir);

// The layers a folder holds ("{module}_{layer}" of each .pt file), sorted.
std::vector<std::string> LayerFiles(const std::string& folder);

// Makes the save staged in `staging` the checkpoint of `dir`: removes dir's
// manifest first (a crash from then on leaves no manifest, never a mixed one),
// moves the staged layer files in, writes `m` with m.layers = what was staged
// (a temporary file, then a rename), and removes the staging folder. Returns
// m.layers. Throws loom::Error naming the file it cannot move or write.
std::vector<std::string> CommitCheckpoint(const std::string& staging, const std::string& dir, CheckpointManifest m);

// Removes a staging folder and its files (a save that is not committed).
void DiscardStaging(const std::string& staging);

}  // namespace loom::runtime
