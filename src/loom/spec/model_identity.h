// What makes two models the same model to train: a training checkpoint
// (weights/run_checkpoint.h) records it, and `loom run --resume` compares it
// with the model it is given. Its name, description and the file it came from
// are not part of it (the same model in a renamed folder resumes); every field
// the runtime computes with is (an eps, a rope theta, an activation, a width,
// a module's token rule). Plain functions of a Model; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "loom/spec/model.h"

namespace loom {

// One line per module ("module llm: role backbone, ...") and one per run of
// equal consecutive layers ("module llm layers 1-16: kind transformer, hidden
// 2048, ..."), each field "name value" and separated by ", ". Deterministic:
// the same model gives the same lines on every machine.
std::vector<std::string> ModelIdentity(const Model& model);

// The first difference between two identities in words ("module llm layers
// 1-16: norm_eps is 1e-05 there, 1e-06 here"; `there` is `was`, `here` is
// `now`), or "" where they are equal.
std::string FirstIdentityDifference(const std::vector<std::string>& was, const std::vector<std::string>& now);

}  // namespace loom
