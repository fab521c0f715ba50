// How a module's time changes when it runs on part of a GPU's SMs, beside
// other modules (Mosaic §3.3, the performance model behind spatial
// multiplexing). Three effects, each a few fitted numbers of a profile
// (docs/cost-model.md, "SM sharing"):
//   - SM scaling: a kernel's time on a fraction a of the SMs is
//     t_full * (serial + (1 - serial) / a). The serial share does not shrink
//     with more SMs (latency-bound kernels, the last wave, memory-bound
//     tails); `1 / a` alone, Loom's old model, predicts a vit-huge layer
//     16.5x slower on 8 of 132 SMs where the H100 measured 11.3x.
//   - Launch floor: an eager engine launches every kernel from the host, so a
//     layer's forward + backward takes at least `launch_floor_s_per_layer`
//     however many SMs it has. Small modules sit on this floor (a 768x12
//     stack at batch 4: ~17 ms on 8 SMs and on 132 alike), which is why they
//     lose nothing on a few SMs.
//   - Interference (Eq. 7-8): green contexts isolate SMs but not memory
//     bandwidth; a module co-located with others on a GPU slows by
//     e1 + e2 * sum(B) + e3 * prod(B) of the co-located modules' bandwidth
//     utilisations B in [0, 1] (itself included). Loom fits the relative
//     slowdown, not seconds: one set of "universal" coefficients cannot add
//     the same seconds to a 15 ms and a 1.2 s module (docs/cost-model.md).
// Plain values; SM partitions follow the hardware's rules (SmPartitionRules).
#pragma once

#include <string>
#include <vector>

namespace loom {

// What SM partitions a GPU can make: at least `min_sms`, in multiples of
// `alignment_sms` (compute capability 9.0: 8 and 8; the runtime reads the
// device's own values from the driver).
struct SmPartitionRules {
  int sm_count = 132;
  int min_sms = 8;
  int alignment_sms = 8;
  // SMs that green contexts can hold at once: the driver splits the device
  // into groups of the alignment and partitions combine groups. An H100
  // (driver 580) splits into 15 groups of 8: 120 of its 132 SMs. A module on
  // the whole GPU needs no partition.
  int partitionable_sms = 132;
};

// The SMs a green context for `fraction` of the GPU gets: the nearest multiple
// of the alignment (ties up), at least the minimum; the whole GPU for
// fraction >= 1; 0 for fraction <= 0. Rounding may pass the SM count (0.99 of
// 132 SMs: 128, but 0.1 + 0.9 round to 16 + 120 = 136): callers check sums
// against sm_count, so such quotas are infeasible, never clamped.
int QuotaSms(double fraction, const SmPartitionRules& rules);

struct SmSharing {
  double serial_fraction = 0;           // of the full-GPU time; 0: time / fraction
  double launch_floor_s_per_layer = 0;  // host launch time of one layer's forward + backward (eager)
  // Eq. 8 on relative slowdown; all 0: no interference modelled.
  double e1 = 0, e2 = 0, e3 = 0;

  // Time of work that takes `full_gpu_s` on the whole GPU, on `fraction` of its SMs.
  double ScaledTime_s(double full_gpu_s, double fraction) const;
  // One phase of one layer (forward, backward-data or backward-weight):
  // scaled, and never under a third of the launch floor; 0 stays 0 (a phase
  // the layer does not run). What the simulator and Mosaic's surfaces price.
  double PhaseTime_s(double full_gpu_s, double fraction) const;
  double PhaseFloor_s() const { return launch_floor_s_per_layer / 3; }
  // Relative slowdown (0: none) of a module co-located with others; `bandwidth`
  // holds B of every module on the GPU, the slowed one included. Alone: 0.
  double Slowdown(const std::vector<double>& bandwidth) const;
  bool has_interference() const { return e1 != 0 || e2 != 0 || e3 != 0; }
  bool operator==(const SmSharing&) const = default;
};

// Fitting (what `loom fit-sm` runs on ../shared/measurements/h100):
// one measured time of a module stack on `sms` SMs.
struct SmScalingPoint {
  std::string module;  // points of one module (shape and batch) share its full-GPU compute time
  int layers = 1;      // layers launched per forward + backward (the launch floor counts them)
  int sms = 0;
  double time_s = 0;
};

struct SmScalingFit {
  SmSharing law;  // serial_fraction and launch_floor_s_per_layer
  struct Module {
    std::string module;
    double compute_s = 0;       // fitted full-GPU compute time (without the floor)
    double mean_abs_error = 0;  // |predicted - measured| / measured over its points
    double max_abs_error = 0;
    int points = 0;
  };
  std::vector<Module> modules;
  double mean_abs_error = 0;  // over all points
};

// Least squares on log time over serial_fraction in [0, 0.8],
// launch_floor_s_per_layer in [0, 5 ms] (a grid refined twice) and one
// compute time per module (1-D search). Throws loom::Error with no points.
SmScalingFit FitSmScaling(const std::vector<SmScalingPoint>& points, int sm_count);

// One co-located module's measured slowdown and the bandwidth utilisations of
// every module on its GPU (itself first).
struct InterferencePoint {
  std::string label;
  std::vector<double> bandwidth;
  double slowdown = 0;  // together / alone - 1
  // The shared host's floor: with one thread launching every co-located module
  // (how the measurements and Loom's engine launch), none finishes before all
  // their launch floors are spent: sum of floors / alone - 1. -1: not known.
  double host_slowdown = -1;
};

struct InterferenceFit {
  // Eq. 8 alone, fitted on every point (the paper's model).
  SmSharing additive;  // e1, e2 (e3 = 0)
  SmSharing full;      // e1, e2, e3
  double r2_none = 0;  // predicting no slowdown at all
  double r2_additive = 0;
  double r2_full = 0;
  // max(host floor, Eq. 8), Eq. 8 fitted on the points the host floor does
  // not explain (within 5%): Loom's model when host_slowdown is known.
  SmSharing host_additive, host_full;
  double r2_host_only = 0;
  double r2_host_additive = 0;
  double r2_host_full = 0;
  int host_bound_points = 0;
};

// Ordinary least squares of Eq. 8, additive-only and full, without and with
// the host floor. Throws loom::Error with fewer points than coefficients.
InterferenceFit FitInterference(const std::vector<InterferencePoint>& points);

}  // namespace loom
