// A model reads some input of every sample that carries inputs
// (data/sample_modalities.h): vlm-s on video clips alone, or a text model on
// images, is refused naming the sample; Mosaic's fixed inputs (an image, a
// clip and audio each) still feed a model reading only images.
#include "loom/data/sample_modalities.h"

#include <gtest/gtest.h>

#include "loom/data/sample_source.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "test_util.h"

namespace loom {
namespace {

Batch Of(const Sample& s) {
  Batch b;
  b.samples = {s, s};
  b.samples[0].images.clear();  // sample 0: text alone, readable by any model
  b.samples[0].videos.clear();
  b.samples[0].audios.clear();
  return b;
}

TEST(SampleModalities, ASampleNoneOfWhoseInputsTheModelReadsIsRefused) {
  const Model vlm = LoadModel("vlm-s"), llm = LoadModel("llama3-1b");
  Sample clip;
  clip.AddDoc(16);
  clip.videos.push_back({16, 512, 512, 0});
  test::ExpectError([&] { CheckModelReadsSamples(vlm, Of(clip), "workload video"); },
                    {"workload video: sample 1 carries video clips, which no module of model vlm-s reads (it reads "
                     "text, images); valid: samples of what the model reads"});
  Sample picture;
  picture.AddDoc(16);
  picture.images.push_back({224, 224, 0});
  test::ExpectError([&] { CheckModelReadsSamples(llm, Of(picture), "metadata"); },
                    {"metadata: sample 1 carries images, which no module of model llama3-1b reads (it reads text)"});
  EXPECT_NO_THROW(CheckModelReadsSamples(vlm, Of(picture), "metadata"));
  // Mosaic's fixed inputs: more than clip-vit-l reads, but its images.
  EXPECT_NO_THROW(CheckModelReadsSamples(LoadModel("clip-vit-l"), DrawBatch(LoadWorkload("mosaic-fixed"), 0), "w"));
}

}  // namespace
}  // namespace loom
