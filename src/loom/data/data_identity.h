// What a run's data stream is, for a training checkpoint to record and
// `loom run --resume` to compare (weights/run_checkpoint.h): with the
// workload's seed and global batch it fixes which samples each step draws
// (SampleSource::Draw is a function of them), so two runs of equal identity
// draw the same steps. A JSONL file is identified by its bytes, not its path
// (a moved file resumes; an edited or extended one does not); the pixel files
// its lines name are not read. A synthetic source by its kind and parameters.
#pragma once

#include <string>

#include "loom/spec/workload.h"

namespace loom {

// "jsonl: bytes 5123, fnv1a64 0x9c1f..." or "text: seq_len 2048, ...": one
// line of "name value" fields, as spec/model_identity.h writes them (its
// FirstIdentityDifference says which differ).
// Throws loom::Error naming a JSONL file that cannot be read.
std::string DataStreamIdentity(const Workload& workload);

}  // namespace loom
