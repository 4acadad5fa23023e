#include "ops/attention/rope.h"

#include <algorithm>
#include <numbers>

#include "core/error.h"

namespace vt {
namespace {

// The YaRN paper's attention scale for a context `scale` times the original.
double yarn_mscale(double scale, double mscale = 1.0) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// The dimension (in rotary dims, not pairs) whose pair turns `rotations` times over `positions`.
double correction_dim(double rotations, int64_t rotary_dim, double theta, double positions) {
  return double(rotary_dim) * std::log(positions / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(theta));
}

}  // namespace

Rope yarn_rope(double theta, int64_t rotary_dim, const YarnConfig& yarn) {
  VT_CHECK(yarn.factor >= 1.0, "YaRN factor ", yarn.factor, " must be at least 1");
  VT_CHECK(yarn.original_max_position_embeddings > 0, "YaRN needs original_max_position_embeddings");
  Rope rope;
  rope.theta = float(theta);
  rope.factor = float(yarn.factor);
  if (yarn.attention_factor) {
    rope.attention_factor = float(*yarn.attention_factor);
  } else if (yarn.mscale && yarn.mscale_all_dim && *yarn.mscale != 0 && *yarn.mscale_all_dim != 0) {
    rope.attention_factor = float(yarn_mscale(yarn.factor, *yarn.mscale) / yarn_mscale(yarn.factor, *yarn.mscale_all_dim));
  } else {
    rope.attention_factor = float(yarn_mscale(yarn.factor));
  }
  const double positions = double(yarn.original_max_position_embeddings);
  double low = correction_dim(yarn.beta_fast, rotary_dim, theta, positions);
  double high = correction_dim(yarn.beta_slow, rotary_dim, theta, positions);
  if (yarn.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(rotary_dim - 1));
  if (low == high) high += 0.001;  // as HF: no division by zero
  rope.ramp_low = float(low);
  rope.ramp_span = float(high - low);
  return rope;
}

}  // namespace vt
