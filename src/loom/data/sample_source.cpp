#include "loom/data/sample_source.h"

#include <fmt/format.h>

#include "loom/data/dynamic_images.h"
#include "loom/data/finevision.h"
#include "loom/data/jsonl_source.h"
#include "loom/data/synthetic_sources.h"
#include "loom/error.h"

namespace loom {

std::unique_ptr<SampleSource> MakeSampleSource(const SourceSpec& spec) {
  using Draw = Sample (*)(const SourceSpec&, Rng&);
  Draw draw = nullptr;
  if (spec.kind == "text") {
    draw = DrawTextSample;
  } else if (spec.kind == "laion") {
    draw = DrawLaionSample;
  } else if (spec.kind == "obelics") {
    draw = DrawObelicsSample;
  } else if (spec.kind == "video") {
    draw = DrawVideoSample;
  } else if (spec.kind == "mosaic-fixed") {
    draw = DrawMosaicFixedSample;
  } else if (spec.kind == "cornstarch-synthetic") {
    draw = DrawCornstarchSample;
  } else if (spec.kind == "dynamic-images") {
    return std::make_unique<DynamicImagesSource>(spec);
  } else if (const FineVisionShape* shape = FindFineVisionShape(spec.kind)) {
    const FineVisionShape fv = *shape;
    return std::make_unique<SyntheticSource>([fv](Rng& rng) { return DrawFineVisionSample(fv, rng); });
  } else if (spec.kind == "jsonl") {
    return std::make_unique<JsonlSource>(spec.path);
  } else {
    throw Error("unknown sample source kind '" + spec.kind + "'");
  }
  return std::make_unique<SyntheticSource>([spec, draw](Rng& rng) { return draw(spec, rng); });
}

std::unique_ptr<SampleSource> WorkloadSource(const Workload& workload) {
  try {
    return MakeSampleSource(workload.source);
  } catch (const Error& e) {
    // A JSONL file given as the workload itself (--data) is named by the error already.
    if (workload.source.kind != "jsonl" || workload.source_file == workload.source.path) throw;
    // Name the workload file that points at the samples, not only the samples' path.
    throw Error(fmt::format("{}: source.path: {}", workload.source_file, e.what()));
  }
}

Batch DrawBatch(const Workload& workload, int64_t iteration) {
  return WorkloadSource(workload)->Draw(workload.global_batch, workload.seed, iteration);
}

}  // namespace loom
