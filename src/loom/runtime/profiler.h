// `loom profile`: measures the runtime's own layers and kernels on this
// machine and returns them as a cost/profile.h Profile, so that the simulator,
// given that profile, predicts what `loom run` measures here (Entrain's
// macroscopic profiling: whole layers at a few token counts, not every kernel).
//
// Measured, with `threads` intra-op threads (the runtime gives each rank the
// same), median of `repeats` runs after one warm-up:
//   layers  every distinct transformer shape of the model, one packed
//           sequence of each token count: forward, and backward (input and
//           weight gradients; frozen layers input only), as the runtime's
//           LayerStack runs them;
//   ops     the matrix products of every linear layer of the model, the
//           attention core per head shape, and elementwise work, at the same
//           token counts: the points the roofline's efficiencies are fitted to;
//   sm_sharing  (CUDA) each distinct transformer shape, forward + backward
//           at each token count, on green contexts of 8, 16, 32, 64 and every
//           partitionable SM and on the whole GPU, fitted as a serial share and
//           a launch floor per layer (FitSmScaling): Mosaic's scaling surface
//           for this engine, whose launches come from C++, not Python;
//   link    messages of 4 KiB to 8 MiB bouncing between two processes of this
//           machine (Gloo over loopback TCP, as `loom run` sends them), fitted
//           as latency + bytes / bandwidth: every link of a cluster priced by
//           the profile (cost/cost_model.h ApplyCostModel).
// The profile is fitted against `gpu`'s datasheet at the precision it ran in
// (fp32 unless asked): the efficiencies then stand for this device, whatever it is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/cost/profile.h"
#include "loom/runtime/run.h"  // Device
#include "loom/spec/model.h"
#include "loom/spec/precision.h"

namespace loom::runtime {

struct ProfilerOptions {
  Device device = Device::kCpu;
  std::string gpu = "h100";  // the datasheet the profile is fitted against (the cluster's GPU)
  // What the layers and kernels compute in, as `loom run` under a workload of
  // this precision (bf16 and fp16: 16-bit activations and weight copies; tf32:
  // fp32 with TF32 matmuls on a GPU). The profile is fitted against the
  // datasheet's peak at it, and a run prices its layers with a profile of its
  // own precision (bf16 and fp16 standing for each other).
  Precision precision = Precision::kFp32;
  int threads = 1;
  std::vector<int64_t> tokens = {64, 256, 1024};
  int repeats = 5;
  // Processes measuring side by side: the plan's ranks per machine share its
  // cores (on the 2-vCPU VM two single-thread processes run a layer 1.4-2.3x
  // slower than one alone), so profile with as many as the plan will run.
  int concurrent = 1;
  // CUDA: also measure how this engine's layers scale on part of the GPU's
  // SMs (green contexts) and fit the profile's sm_sharing law from it (what
  // SM quotas are priced with; cost/sm_sharing.h).
  bool sm_scaling = true;
};

// Throws loom::Error for a device this build cannot use or empty token counts,
// and naming the line when a measuring process reports one that is not a measurement.
Profile MeasureProfile(const Model& model, const ProfilerOptions& options);

}  // namespace loom::runtime
