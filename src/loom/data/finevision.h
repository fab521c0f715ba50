// FineVision-shaped image-text samples (Entrain §4.7 draws four FineVision
// subsets): one image at native resolution and its text per sample, each
// subset with its own independent distributions of image size and text
// length (the thesis' Fig. 4.3: vision and text tokens vary independently).
//
// Two sets of shapes:
//  - `synthchartnet`, `chartqa`, `cocoqa`, `llava-150k`: derived from the public
//    descriptions of the datasets (the FineVision subset table, the subsets'
//    own cards), each number cited beside it in finevision.cpp; a spread no
//    source publishes takes one stated default for every subset, not tuned.
//  - `synthchartnet-fitted`, ...: FITTED. Their means and spreads were chosen so
//    that Loom's cost model reproduces the thesis' stated ratios (LLaVA-150k's
//    2.43 on Qwen2.5Vision + Llama3-1b, Fig. 4.5; SynthChartNet's 1.27:1 on
//    Llama3-3b, Table 4.2) and Tables C.2-C.8's converged GPU splits
//    (docs/workloads.md, "FineVision subsets"; tests/data/finevision_test.cpp).
//    They are kept to reproduce docs/results/entrain.md's earlier tables, not as
//    a description of the data.
#pragma once

#include <string>
#include <vector>

#include "loom/data/rng.h"
#include "loom/data/sample.h"

namespace loom {

struct FineVisionShape {
  std::string name;
  double image_mpx = 0.3;    // mean image area, megapixels (log-normal)
  double image_sigma = 0.1;  // log-space spread of the area
  double aspect = 1.33;      // median width / height (log-normal)
  double aspect_sigma = 0.1;
  double text_tokens = 50;  // mean text tokens (log-normal)
  double text_sigma = 0.5;
  int64_t max_text_tokens = 4096;
  bool fitted = false;  // true: tuned to the thesis' ratios, not taken from the data's description
};

// synthchartnet, chartqa, cocoqa, llava-150k (derived), then the same four
// with the suffix -fitted (fitted).
const std::vector<FineVisionShape>& FineVisionShapes();
// The shape called `name`, or null.
const FineVisionShape* FindFineVisionShape(const std::string& name);

// One sample. Images are clamped to Qwen2.5-VL's pixel range
// [4 x 28^2, 1280 x 28^2] keeping their aspect (its processor's smart_resize).
Sample DrawFineVisionSample(const FineVisionShape& shape, Rng& rng);

}  // namespace loom
