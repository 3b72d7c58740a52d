// perf/collective_model.cpp: see collective_model.hpp.
#include "perf/collective_model.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace trident {

double bus_factor(CommOp op, int n) {
  if (n < 1) throw Error("bus_factor: n = " + std::to_string(n) + " ranks");
  const double d = static_cast<double>(n);
  switch (op) {
    case CommOp::all_reduce: return 2.0 * (d - 1.0) / d;
    case CommOp::reduce_scatter:
    case CommOp::all_gather: return (d - 1.0) / d;
    case CommOp::broadcast: return n == 1 ? 0.0 : 1.0;
    case CommOp::send:
    case CommOp::recv: return 1.0;
    default: break;
  }
  throw Error(std::string("bus_factor: no bus bandwidth for ") + comm_op_name(op));
}

AlphaBeta fit_alpha_beta(const std::vector<double>& x, const std::vector<double>& t) {
  if (x.size() != t.size()) throw Error("fit_alpha_beta: x and t differ in length");
  if (x.size() < 2) throw Error("fit_alpha_beta: needs at least 2 points");
  // Weighted normal equations with w = 1/t^2: [sw swx; swx swxx] [a b]' = [swt swxt]'.
  double sw = 0, swx = 0, swxx = 0, swt = 0, swxt = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(t[i] > 0.0)) throw Error("fit_alpha_beta: time " + std::to_string(t[i]) + " <= 0");
    const double w = 1.0 / (t[i] * t[i]);
    sw += w;
    swx += w * x[i];
    swxx += w * x[i] * x[i];
    swt += w * t[i];
    swxt += w * x[i] * t[i];
  }
  AlphaBeta f;
  const double det = sw * swxx - swx * swx;
  if (std::abs(det) <= 1e-12 * sw * swxx) {  // all x equal: latency only
    f.alpha_s = swt / sw;
  } else {
    f.alpha_s = (swt * swxx - swx * swxt) / det;
    f.beta_s_per_byte = (sw * swxt - swx * swt) / det;
  }
  if (f.alpha_s < 0.0) {  // refit t = beta x alone
    f.alpha_s = 0.0;
    f.beta_s_per_byte = swxx > 0 ? swxt / swxx : 0.0;
  }
  if (f.beta_s_per_byte < 0.0) {  // refit t = alpha alone
    f.beta_s_per_byte = 0.0;
    f.alpha_s = swt / sw;
  }
  for (size_t i = 0; i < x.size(); ++i)
    f.max_rel_error = std::max(f.max_rel_error, std::abs(f.seconds(x[i]) - t[i]) / t[i]);
  return f;
}

double collective_seconds(CommOp op, int n, double bytes, double alpha_s, double beta_bus) {
  if (n <= 1 && op != CommOp::send && op != CommOp::recv) return 0.0;
  return alpha_s + beta_bus * bus_factor(op, n) * bytes;
}

}  // namespace trident
