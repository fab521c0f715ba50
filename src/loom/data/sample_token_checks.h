// What a tokenized sample (data/sample.h SampleTokens) must be for the model
// that trains on it, as transformers would take it: every input id within the
// vocabulary of the loss module's embedding, every label within its head's,
// and its images standing as the model's image token where the model names
// one (Model::image_token_id). The launcher checks a JSONL file's every line
// before any worker starts (so a bad line 90,000 lines in is not found hours
// into the run, nor missed because no step drew it); each worker checks the
// samples it loads again. Torch-free.
#pragma once

#include <string>

#include "loom/data/sample.h"
#include "loom/spec/model.h"

namespace loom {

// Throws loom::Error naming the sample's file and line, the field, the
// position and what would be valid.
void CheckSampleTokens(const Model& model, const SampleTokens& tokens);

// Every line of the JSONL file `path` that has token ids (a shape-only line
// has nothing to check). Throws loom::Error as CheckSampleTokens, or naming a
// line that does not parse.
void CheckJsonlTokens(const Model& model, const std::string& path);

}  // namespace loom
