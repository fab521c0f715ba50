#include "loom/cost/sm_sharing.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "loom/error.h"

namespace loom {

int QuotaSms(double fraction, const SmPartitionRules& rules) {
  if (fraction <= 0) return 0;
  if (fraction >= 1) return rules.sm_count;
  const double sms = fraction * rules.sm_count;
  const int align = std::max(1, rules.alignment_sms);
  const int rounded = static_cast<int>(std::floor(sms / align + 0.5)) * align;
  return std::max(rules.min_sms, rounded);
}

double SmSharing::ScaledTime_s(double full_gpu_s, double fraction) const {
  if (fraction >= 1) return full_gpu_s;
  return full_gpu_s * (serial_fraction + (1 - serial_fraction) / fraction);
}

double SmSharing::PhaseTime_s(double full_gpu_s, double fraction) const {
  return full_gpu_s > 0 ? std::max(PhaseFloor_s(), ScaledTime_s(full_gpu_s, fraction)) : 0.0;
}

double SmSharing::Slowdown(const std::vector<double>& bandwidth) const {
  if (bandwidth.size() < 2) return 0;
  double sum = 0, prod = 1;
  for (double b : bandwidth) {
    sum += b;
    prod *= b;
  }
  // Eq. 8; a fitted e1 < 0 could make a lightly loaded pair "faster" together:
  // never below no slowdown.
  return std::max(0.0, e1 + e2 * sum + e3 * prod);
}

namespace {

// Predicted time of one point (Mosaic §3.3 scaling along the SM axis, with the floor).
double Predict(const SmSharing& law, double compute_s, int layers, int sms, int sm_count) {
  const double fraction = static_cast<double>(sms) / sm_count;
  return std::max(law.launch_floor_s_per_layer * layers, law.ScaledTime_s(compute_s, fraction));
}

struct ModulePoints {
  std::vector<const SmScalingPoint*> points;
};

// Squared log error of one module at compute time c.
double ModuleLoss(const SmSharing& law, const ModulePoints& g, double c, int sm_count) {
  double loss = 0;
  for (const auto* p : g.points) {
    const double e = std::log(Predict(law, c, p->layers, p->sms, sm_count) / p->time_s);
    loss += e * e;
  }
  return loss;
}

// Best compute time of one module: golden-section search on log c between
// 1/50 and 2x its fastest measured time (the loss is unimodal in log c).
double BestCompute(const SmSharing& law, const ModulePoints& g, int sm_count, double* loss) {
  double fastest = g.points.front()->time_s;
  for (const auto* p : g.points) fastest = std::min(fastest, p->time_s);
  double lo = std::log(fastest / 50), hi = std::log(fastest * 2);
  const double phi = (std::sqrt(5.0) - 1) / 2;
  for (int it = 0; it < 60; ++it) {
    const double a = hi - phi * (hi - lo), b = lo + phi * (hi - lo);
    if (ModuleLoss(law, g, std::exp(a), sm_count) < ModuleLoss(law, g, std::exp(b), sm_count)) {
      hi = b;
    } else {
      lo = a;
    }
  }
  const double c = std::exp((lo + hi) / 2);
  *loss = ModuleLoss(law, g, c, sm_count);
  return c;
}

}  // namespace

SmScalingFit FitSmScaling(const std::vector<SmScalingPoint>& points, int sm_count) {
  if (points.empty()) throw Error("SM scaling fit: no measured points");
  std::map<std::string, ModulePoints> groups;
  std::vector<std::string> order;
  for (const auto& p : points) {
    if (p.sms <= 0 || p.time_s <= 0 || p.layers <= 0) {
      throw Error(fmt::format("SM scaling fit: point of '{}' has sms {}, time {} s, layers {}; all must be > 0",
                              p.module, p.sms, p.time_s, p.layers));
    }
    if (!groups.count(p.module)) order.push_back(p.module);
    groups[p.module].points.push_back(&p);
  }
  auto total_loss = [&](const SmSharing& law) {
    double loss = 0, l = 0;
    for (const auto& [name, g] : groups) {
      BestCompute(law, g, sm_count, &l);
      loss += l;
    }
    return loss;
  };
  // Grid, then two finer grids around the best (the loss is piecewise smooth
  // in the floor, so a gradient method would stall at its kinks).
  double best_serial = 0, best_floor = 0, best = total_loss({});
  double serial_lo = 0, serial_hi = 0.8, floor_lo = 0, floor_hi = 5e-3;
  for (int round = 0; round < 3; ++round) {
    const int n = 20;
    for (int i = 0; i <= n; ++i) {
      for (int j = 0; j <= n; ++j) {
        SmSharing law;
        law.serial_fraction = serial_lo + (serial_hi - serial_lo) * i / n;
        law.launch_floor_s_per_layer = floor_lo + (floor_hi - floor_lo) * j / n;
        if (law.serial_fraction < 0 || law.launch_floor_s_per_layer < 0) continue;
        const double loss = total_loss(law);
        if (loss < best) {
          best = loss;
          best_serial = law.serial_fraction;
          best_floor = law.launch_floor_s_per_layer;
        }
      }
    }
    const double ds = (serial_hi - serial_lo) / n * 2, df = (floor_hi - floor_lo) / n * 2;
    serial_lo = std::max(0.0, best_serial - ds);
    serial_hi = best_serial + ds;
    floor_lo = std::max(0.0, best_floor - df);
    floor_hi = best_floor + df;
  }
  SmScalingFit fit;
  fit.law.serial_fraction = best_serial;
  fit.law.launch_floor_s_per_layer = best_floor;
  double err_sum = 0;
  int err_n = 0;
  for (const auto& name : order) {
    const ModulePoints& g = groups[name];
    double l = 0;
    SmScalingFit::Module m;
    m.module = name;
    m.compute_s = BestCompute(fit.law, g, sm_count, &l);
    for (const auto* p : g.points) {
      const double e = std::abs(Predict(fit.law, m.compute_s, p->layers, p->sms, sm_count) / p->time_s - 1);
      m.mean_abs_error += e;
      m.max_abs_error = std::max(m.max_abs_error, e);
      err_sum += e;
      ++err_n;
    }
    m.points = static_cast<int>(g.points.size());
    m.mean_abs_error /= m.points;
    fit.modules.push_back(m);
  }
  fit.mean_abs_error = err_sum / err_n;
  return fit;
}

namespace {

// Solves the k x k normal equations of least squares by Gaussian elimination
// with partial pivoting; features[i] is row i's regressors.
std::vector<double> LeastSquares(const std::vector<std::vector<double>>& features, const std::vector<double>& y) {
  const size_t k = features.front().size();
  std::vector<std::vector<double>> a(k, std::vector<double>(k + 1, 0.0));
  for (size_t i = 0; i < y.size(); ++i) {
    for (size_t r = 0; r < k; ++r) {
      for (size_t c = 0; c < k; ++c) a[r][c] += features[i][r] * features[i][c];
      a[r][k] += features[i][r] * y[i];
    }
  }
  for (size_t c = 0; c < k; ++c) {
    size_t piv = c;
    for (size_t r = c + 1; r < k; ++r) {
      if (std::abs(a[r][c]) > std::abs(a[piv][c])) piv = r;
    }
    std::swap(a[c], a[piv]);
    if (std::abs(a[c][c]) < 1e-300) throw Error("interference fit: the points do not determine the coefficients");
    for (size_t r = 0; r < k; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (size_t j = c; j <= k; ++j) a[r][j] -= f * a[c][j];
    }
  }
  std::vector<double> x(k);
  for (size_t c = 0; c < k; ++c) x[c] = a[c][k] / a[c][c];
  return x;
}

double RSquared(const std::vector<double>& y, const std::vector<double>& predicted) {
  double mean = 0;
  for (double v : y) mean += v;
  mean /= static_cast<double>(y.size());
  double ss_res = 0, ss_tot = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    ss_res += (y[i] - predicted[i]) * (y[i] - predicted[i]);
    ss_tot += (y[i] - mean) * (y[i] - mean);
  }
  return ss_tot > 0 ? 1 - ss_res / ss_tot : 0;
}

}  // namespace

InterferenceFit FitInterference(const std::vector<InterferencePoint>& points) {
  if (points.size() < 3) {
    throw Error(fmt::format("interference fit: {} measured co-locations; Eq. 8 has 3 coefficients", points.size()));
  }
  auto features = [](const InterferencePoint& p, bool full) {
    double sum = 0, prod = 1;
    for (double b : p.bandwidth) {
      sum += b;
      prod *= b;
    }
    return full ? std::vector<double>{1.0, sum, prod} : std::vector<double>{1.0, sum};
  };
  auto fit_on = [&](const std::vector<const InterferencePoint*>& pts, bool full) {
    std::vector<std::vector<double>> x;
    std::vector<double> y;
    for (const auto* p : pts) {
      x.push_back(features(*p, full));
      y.push_back(p->slowdown);
    }
    const auto c = LeastSquares(x, y);
    SmSharing s;
    s.e1 = c[0];
    s.e2 = c[1];
    s.e3 = full ? c[2] : 0;
    return s;
  };
  // Linear Eq. 8 (no clamp: R^2 of the regression itself), optionally under the host floor.
  auto predict = [&](const SmSharing& s, const InterferencePoint& p, bool host) {
    const auto f = features(p, true);
    const double eq8 = s.e1 + s.e2 * f[1] + s.e3 * f[2];
    return host && p.host_slowdown > -1 ? std::max(p.host_slowdown, eq8) : eq8;
  };
  auto r2 = [&](const SmSharing& s, bool host) {
    std::vector<double> y, pred;
    for (const auto& p : points) {
      y.push_back(p.slowdown);
      pred.push_back(predict(s, p, host));
    }
    return RSquared(y, pred);
  };
  std::vector<const InterferencePoint*> all, free_of_host;
  InterferenceFit fit;
  for (const auto& p : points) {
    all.push_back(&p);
    const bool host_bound = p.host_slowdown > -1 && p.host_slowdown >= p.slowdown - 0.05;
    if (host_bound) {
      ++fit.host_bound_points;
    } else {
      free_of_host.push_back(&p);
    }
  }
  fit.additive = fit_on(all, false);
  fit.full = fit_on(all, true);
  fit.r2_none = r2(SmSharing{}, false);
  fit.r2_additive = r2(fit.additive, false);
  fit.r2_full = r2(fit.full, false);
  if (fit.host_bound_points > 0 && free_of_host.size() >= 3) {
    fit.host_additive = fit_on(free_of_host, false);
    fit.host_full = fit_on(free_of_host, true);
    // Host floor alone: Eq. 8 predicting nothing (e = 0 gives 0 under the max).
    fit.r2_host_only = r2(SmSharing{}, true);
    fit.r2_host_additive = r2(fit.host_additive, true);
    fit.r2_host_full = r2(fit.host_full, true);
  }
  return fit;
}

}  // namespace loom
