// A measured profile of one GPU and the cost model it drives
// (docs/cost-model.md, "Measured profiles"). A profile holds
//   - ops: measured kernels (op class, FLOPs, bytes, seconds), the same points
//     a calibration file holds; the roofline's efficiency factors are fitted
//     to them (cost/calibration.h), so every layer kind gets measured kernel
//     efficiencies;
//   - layers: whole transformer layers measured at some token counts
//     (forward and backward seconds of one GPU's shard at a TP degree,
//     trainable or frozen).
//
// ProfiledCostModel prices a layer as the fitted roofline times a measured
// correction per phase: at each measured point, correction = measured /
// fitted-roofline time; between points of the same layer shape it is
// interpolated linearly in log(tokens per GPU) and held constant beyond them.
// Choice (why not Entrain's T(x) = a x^2 + b x + c per shape): the profile has
// one to eight points per shape, too few for three coefficients on most, and
// the roofline already carries how work scales with tokens, sequence length
// (attention's sum of squares), TP and GQA; the measured ratio carries what it
// misses (launch-bound small kernels, fused or unfused elementwise work). At a
// measured point the prediction is the measurement. Shapes the profile never
// measured get the fitted roofline times the median correction over the
// profile's layers; non-transformer layers get the fitted roofline alone.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "loom/cost/calibration.h"
#include "loom/cost/cost_model.h"
#include "loom/cost/sm_sharing.h"
#include "loom/spec/cluster.h"

namespace loom {

// A transformer layer shape as the profile keys it: one GPU's shard at `tp`.
struct ProfileShape {
  int64_t hidden = 0, ffn_hidden = 0, heads = 0, kv_heads = 0;
  bool gated = false, causal = false;
  auto key() const { return std::tie(hidden, ffn_hidden, heads, kv_heads, gated, causal); }
  bool operator<(const ProfileShape& o) const { return key() < o.key(); }
  bool operator==(const ProfileShape& o) const { return key() == o.key(); }
};

// The shape of a transformer layer, and the layer of a shape (the fields the
// roofline reads); what a profile point measured, as token statistics.
ProfileShape ShapeOf(const Layer& layer);
Layer LayerOf(const ProfileShape& shape);
TokenStats TokensOf(int64_t batch, int64_t seq);

struct ProfileLayerPoint {
  std::string label;  // "llama3-8b"
  ProfileShape shape;
  int tp = 1;           // TP shard measured
  bool frozen = false;  // no weight gradients
  int64_t batch = 1, seq = 0;
  double forward_s = 0;
  double backward_s = 0;  // backward-data + backward-weight (frozen: data only)
};

struct Profile {
  std::string file;
  std::string gpu;                         // built-in GPU it was measured on
  std::vector<std::string> applies_to;     // GPUs that get it by default (gpu and those with the same SMs and HBM)
  std::string source;                      // what measured it
  Precision precision = Precision::kBf16;  // what its ops and layers ran in (`loom profile` on a CPU: fp32)
  std::vector<CalibrationPoint> ops;
  std::vector<ProfileLayerPoint> layers;
  // `loom profile`: the link between two processes of the measured machine
  // (Gloo over loopback TCP on a CPU), fitted as latency + bytes / bandwidth to
  // point-to-point messages; bytes_per_s 0: none measured. A cluster priced by
  // the profile sends every message over it (ApplyCostModel).
  Link link;
  // `loom profile`: one step of a ring collective between its two processes
  // (all-reduces of the link's message sizes, fitted as 2 steps). Gloo's
  // all-reduce on loopback costs far more than two one-way messages (0.63 ms
  // against 0.13 ms at 4 KiB on the development VM). Zero bandwidth: none.
  Link collective;
  // `loom fit-sm`: SM scaling, launch floor and interference (Mosaic §3.3).
  SmSharing sm_sharing;
};

// Throws loom::Error naming file, line and field on bad input (unknown GPU,
// zero or negative sizes and times, unknown keys).
Profile ParseProfile(const std::string& yaml_text, const std::string& file);
// A profile file, or a calibration file (its `points`, no layers) read as one.
Profile LoadProfile(const std::string& path);
// The profile as YAML that ParseProfile reads back (what `loom profile` writes).
std::string ProfileToYaml(const Profile& profile);

// `model`'s name, and, for a profile measured in another precision than
// `precision` (bf16 and fp16 stand for each other), that its layer
// measurements do not apply: a CPU profile (fp32) pricing a bf16 run prices it
// at the fitted roofline's bf16 peak, an order of magnitude off.
std::string CostModelNameFor(const CostModel& model, Precision precision);

class ProfiledCostModel final : public CostModel {
 public:
  // Fits the efficiencies to the profile's ops and the corrections to its
  // layers on `profile.gpu`'s datasheet.
  explicit ProfiledCostModel(Profile profile);

  std::string name() const override;
  // The layer corrections apply in the profile's precision (bf16 and fp16
  // stand for each other: both are 16-bit mixed precision); other precisions
  // get the fitted roofline at their own peak.
  ComputeTimes LayerCompute(const Layer& layer, const TokenStats& tokens, int tp, const LayerWork& work,
                            const GpuSpec& gpu, Precision precision) const override;
  SmSharing sm_sharing() const override { return profile_.sm_sharing; }

  // The fitted roofline's elementwise bandwidth (the profile's elementwise ops).
  double ElementwiseTime_s(double bytes, const GpuSpec& gpu) const override {
    return roofline_.ElementwiseTime_s(bytes, gpu);
  }
  const Profile& profile() const { return profile_; }
  const Efficiency& fitted_efficiency() const { return roofline_.efficiency(); }
  // Measured / fitted-roofline of the forward and the backward at `tokens`
  // for a layer of `shape` (frozen or not) on a `tp` shard: what LayerCompute
  // multiplies the roofline by.
  std::pair<double, double> Correction(const ProfileShape& shape, int tp, bool frozen, const TokenStats& tokens) const;

 private:
  struct Anchor {
    double log_tokens = 0, log_seq = 0, forward = 1, backward = 1;
  };
  Profile profile_;
  RooflineCostModel roofline_;
  // (shape, tp, frozen) -> anchors sorted by (tokens, seq)
  std::map<std::tuple<ProfileShape, int, bool>, std::vector<Anchor>> anchors_;
  double median_forward_ = 1, median_backward_ = 1;
};

}  // namespace loom
