// `loom run --save DIR`: the trained weights as a Hugging Face model folder
// that transformers' `from_pretrained` loads. Every worker writes its share
// (its stages, its TP slices, ZeRO-3's weights gathered) as a part file under
// DIR/.loom-save-parts (StepExecutor::SaveHfPart); once every worker has
// finished, the launcher joins the parts (weights/checkpoint_parts.h) into
// model.safetensors (or shards and an index past 50 GB, save_pretrained's
// default), with the tensors of the model's checkpoint that no worker holds
// (a LLaVA's vision layers past its feature layer) carried over unchanged,
// then copies config.json and the tokenizer's and processor's files from the
// model's folder. Torch-free: the launcher calls it.
#pragma once

#include <string>

#include "loom/runtime/run.h"
#include "loom/spec/model.h"

namespace loom::runtime {

// The part folder's name inside DIR (removed once the parts are joined).
inline constexpr const char* kSavePartsDir = ".loom-save-parts";
std::string SavePartPath(const std::string& save_dir, int rank);

// Before any worker starts: checks that `model` was read from a Hugging Face
// config.json whose modules the runtime names as transformers does, that DIR
// is not the model's own folder and holds nothing but a model folder's files
// (so nothing of the user's is overwritten), that the run is on one machine;
// then makes an empty part folder. Returns the dtype the weights are saved
// in: config.json's `dtype` (`torch_dtype` before transformers 5), float32
// when it names none. Throws loom::Error naming --save and what is wrong.
std::string PrepareSave(const Model& model, const RunOptions& options);

// After every worker finished: joins the parts into DIR, copies config.json
// and the tokenizer's files beside it, removes the part folder. Throws
// loom::Error naming the part and tensor that could not be joined.
void FinishSave(const Model& model, const RunOptions& options);

// When the run failed or was interrupted: removes the part folder, so DIR
// holds what it held before (PrepareSave refused anything a save would not
// write). Never throws.
void AbandonSave(const RunOptions& options);

}  // namespace loom::runtime
