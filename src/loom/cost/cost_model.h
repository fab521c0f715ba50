// A CostModel says how long one layer's own kernels take on one GPU, phase by
// phase (communication is priced by collectives.h, on top). Two exist:
//   - RooflineCostModel: FLOPs and bytes over datasheet peaks scaled by
//     per-op-class efficiencies (device_time.h); the default for a GPU with
//     no shipped profile;
//   - ProfiledCostModel (cost/profile.h): a measured profile of one GPU, which
//     fits the efficiencies to measured ops and corrects whole layers by
//     measured layer times; the default for a GPU that ships one (H100).
// A Cluster carries the model its predictions use (Cluster::cost_model; unset:
// DefaultCostModel of its GPU). Implementations are immutable after
// construction and safe to share between threads.
#pragma once

#include <memory>
#include <string>

#include "loom/cost/device_time.h"
#include "loom/cost/layer_work.h"
#include "loom/cost/sm_sharing.h"
#include "loom/cost/token_stats.h"
#include "loom/spec/cluster.h"
#include "loom/spec/layer.h"

namespace loom {

// Seconds of each phase of one layer on one GPU, kernels only.
struct ComputeTimes {
  double forward_s = 0;
  double backward_data_s = 0;
  double backward_weight_s = 0;
  double forward_elementwise_s = 0;  // the forward's elementwise part (what selective recomputation re-runs)
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  // "roofline", or "profile h100 (FILE)".
  virtual std::string name() const = 0;
  // `work` is EstimateLayerWork(layer, tokens, tp, ElementBytes(precision)):
  // the layer's FLOPs and bytes on one GPU for the per-GPU tokens `tokens`
  // (after the TP / CP split), run in `precision` on `gpu`.
  virtual ComputeTimes LayerCompute(const Layer& layer, const TokenStats& tokens, int tp, const LayerWork& work,
                                    const GpuSpec& gpu, Precision precision) const = 0;
  // A streaming elementwise kernel moving `bytes` through HBM (the optimizer step).
  virtual double ElementwiseTime_s(double bytes, const GpuSpec& gpu) const = 0;
  // How time changes on part of the SMs and beside other modules (Mosaic
  // §3.3, cost/sm_sharing.h); the roofline: time / fraction, no floor, no
  // interference.
  virtual SmSharing sm_sharing() const { return {}; }
};

class RooflineCostModel final : public CostModel {
 public:
  explicit RooflineCostModel(Efficiency efficiency = Efficiency(), std::string name = "roofline");
  std::string name() const override { return name_; }
  ComputeTimes LayerCompute(const Layer& layer, const TokenStats& tokens, int tp, const LayerWork& work,
                            const GpuSpec& gpu, Precision precision) const override;
  double ElementwiseTime_s(double bytes, const GpuSpec& gpu) const override;
  const Efficiency& efficiency() const { return efficiency_; }

 private:
  Efficiency efficiency_;
  std::string name_;
};

// The cost model a cluster's predictions use: its own, or the default for its GPU.
const CostModel& CostModelOf(const Cluster& cluster);
// What `--profile VALUE` selects for a cluster of `gpu`s: "roofline" (default
// efficiencies), "default" (the GPU's default), or a profile YAML file
// (cost/profile.h). Throws loom::Error naming the file for a bad file, or when
// the profile was measured on another GPU (and does not list `gpu` in applies_to).
std::shared_ptr<const CostModel> SelectCostModel(const std::string& value, const GpuSpec& gpu);
// Sets `cluster`'s cost model to what `value` selects; a profile that measured
// a link (`loom profile`: two processes of one machine) also becomes every
// link of the cluster, so messages are priced as that machine sends them.
void ApplyCostModel(Cluster& cluster, const std::string& value);

// The shipped profile of `gpu` (see cost/shipped_profiles.h), else the roofline
// with default efficiencies. The same object for the same GPU name.
std::shared_ptr<const CostModel> DefaultCostModel(const GpuSpec& gpu);

}  // namespace loom
