#include "loom/data/dynamic_images.h"

#include <algorithm>
#include <cmath>

#include "loom/data/rng.h"

namespace loom {

std::pair<int, int> DynamicImageBounds(int64_t iteration) {
  const int c = static_cast<int>(iteration % 20);
  if (c < 5) return {4 * c, 32};                           // rising: 0, 4, 8, 12, 16
  const double left = static_cast<double>(19 - c) / 15.0;  // falling to 0 at the cycle's end
  return {static_cast<int>(std::lround(16 * left)), static_cast<int>(std::lround(32 * left))};
}

Batch DynamicImagesSource::Draw(int64_t count, uint64_t seed, int64_t iteration) const {
  Rng rng(Rng::Mix(seed, static_cast<uint64_t>(iteration)));
  const auto [lo, hi] = DynamicImageBounds(iteration);
  const int64_t most = spec_.pack_tokens / spec_.image_tokens;
  Batch batch;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t images = std::min<int64_t>(rng.UniformInt(lo, hi), most);
    Sample s;
    const int doc = s.AddDoc(std::max<int64_t>(1, spec_.pack_tokens - images * spec_.image_tokens));
    for (int64_t k = 0; k < images; ++k) s.images.push_back({spec_.image_px, spec_.image_px, doc});
    batch.samples.push_back(std::move(s));
  }
  return batch;
}

}  // namespace loom
