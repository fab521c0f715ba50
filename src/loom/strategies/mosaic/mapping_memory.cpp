#include "loom/strategies/mosaic/mapping_memory.h"

#include <algorithm>

#include "loom/error.h"

namespace loom::mosaic {

namespace {

const SurfacePoint& PointOf(const std::vector<ModuleSurface>& surfaces, const Placement& p) {
  return surfaces[p.module].At(p.dp, p.pp, p.sms);
}

// What stage `skip`'s placements are not: every other stage's bytes per slot.
std::vector<double> PeakWithout(const Mapping& mapping, const std::vector<ModuleSurface>& surfaces, int slots,
                                int skip) {
  std::vector<double> bytes(slots, 0.0);
  const int last = static_cast<int>(mapping.stages.size()) - 1;
  for (int s = 0; s <= last; ++s) {
    if (s == skip) continue;
    for (const auto& p : mapping.stages[s].result.placements) {
      const SurfacePoint& sp = PointOf(surfaces, p);
      const double b = s == last ? sp.mem_bytes : sp.held_mem_bytes;
      for (int g = p.first_gpu; g < p.first_gpu + p.dp; ++g) bytes.at(g) += b;
    }
  }
  return bytes;
}

}  // namespace

std::vector<double> MappingPeakBytes(const Mapping& mapping, const std::vector<ModuleSurface>& surfaces, int slots) {
  return PeakWithout(mapping, surfaces, slots, -1);
}

bool MappingFits(const Mapping& mapping, const std::vector<ModuleSurface>& surfaces, int slots, double mem_bytes) {
  if (!mapping.feasible()) return false;
  for (double b : MappingPeakBytes(mapping, surfaces, slots)) {
    if (b > mem_bytes) return false;
  }
  return true;
}

bool FitMappingMemory(Mapping* mapping, StageEvaluator& eval, const std::vector<ModuleSurface>& surfaces, int slots,
                      double mem_bytes, int passes) {
  if (!mapping->feasible()) return false;
  const int last = static_cast<int>(mapping->stages.size()) - 1;
  bool fits = MappingFits(*mapping, surfaces, slots, mem_bytes);
  for (int pass = 0; pass < passes && !fits; ++pass) {
    for (int s = 0; s <= last && !fits; ++s) {
      eval.SetResident(PeakWithout(*mapping, surfaces, slots, s), s != last);
      StageResult r = eval.Evaluate(mapping->stages[s].modules);
      if (r.feasible()) mapping->stages[s].result = std::move(r);
      fits = MappingFits(*mapping, surfaces, slots, mem_bytes);
    }
  }
  eval.SetResident({}, false);
  mapping->time_s = 0;
  for (const auto& s : mapping->stages) mapping->time_s += s.result.time_s;
  return fits;
}

}  // namespace loom::mosaic
