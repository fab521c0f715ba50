// Whether a model reads every input its samples carry: a video clip for a
// model without a video encoder was dropped in silence (audit A5-13: vlm-s on
// the `video` workload priced its samples as text alone). Torch-free.
#pragma once

#include <string>

#include "loom/data/sample.h"
#include "loom/spec/model.h"

namespace loom {

// Throws loom::Error naming `where` (a workload, "metadata"), the first sample
// that carries inputs (images, video clips, audio) none of which a module of
// `model` reads (TokenRule::source), and what the model's modules read. A
// sample carrying more than the model reads is not refused: Mosaic's fixed
// inputs feed each of its models' encoders what it reads.
void CheckModelReadsSamples(const Model& model, const Batch& batch, const std::string& where);

}  // namespace loom
