// What makes two models the same model to train: a training checkpoint
// (weights/run_checkpoint.h) records it, and `loom run --resume` compares it
// with the model it is given. Its name, description and the file it came from
// are not part of it (the same model in a renamed folder resumes), nor where a
// Hugging Face checkpoint keeps its tensors or the longest sequence it takes;
// every field the runtime computes with is (an eps, a rope theta, an
// activation, a width, a module's token rule). Plain functions of a Model;
// thread-safe.
#pragma once

#include <string>
#include <vector>

#include "loom/spec/model.h"

namespace loom {

// A line for the model ("model: image_token_id 32000"), one per module
// ("module llm: role backbone, modality text, layers 18, ...") and one per run
// of equal consecutive layers, numbered from 1 ("module llm layers 2-17: kind
// transformer, hidden 2048, ..."). Each field is "name value", separated by
// ", ", and written only where it differs from its default: a field a later
// Loom adds at a default that keeps today's behaviour leaves today's
// checkpoints resumable. Deterministic: the same model gives the same lines
// on every machine.
std::vector<std::string> ModelIdentity(const Model& model);

// The first difference between two identities in words, layer by layer
// ("module llm layer 3: norm_eps is 1e-05 there, 1e-06 here"; `there` is
// `was`, `here` is `now`; a field a line leaves out is its default), or ""
// where they are equal.
std::string FirstIdentityDifference(const std::vector<std::string>& was, const std::vector<std::string>& now);

}  // namespace loom
