// Pearson's chi-square of observed counts against expected probabilities, and its bound: the
// statistical checks of sampled outputs (speculative sampling, device sampling) share them.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

namespace vt::testing {

// Chi-square of observed counts against expected probabilities; cells expected below 5 counts
// are pooled into one.
inline double chi_square(const std::map<std::vector<int32_t>, int64_t>& observed,
                         const std::map<std::vector<int32_t>, double>& expected, int64_t samples, int64_t* cells) {
  double statistic = 0, pooled_expected = 0;
  int64_t pooled_observed = 0;
  *cells = 0;
  for (const auto& [key, probability] : expected) {
    const double want = probability * double(samples);
    const auto found = observed.find(key);
    const int64_t got = found == observed.end() ? 0 : found->second;
    if (want < 5) {
      pooled_expected += want, pooled_observed += got;
      continue;
    }
    statistic += (got - want) * (got - want) / want;
    ++*cells;
  }
  if (pooled_expected > 0) {
    statistic += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++*cells;
  }
  return statistic;
}

// The quantile of the chi-square distribution with `cells - 1` degrees of freedom at the normal
// quantile z (Wilson-Hilferty): 3.0902 is the 0.999 quantile, kChiSquareZManyChecks 1 - 1e-5, for
// tests that make dozens of checks (each a deterministic draw that a fair sampler fails at that rate).
constexpr double kChiSquareZManyChecks = 4.2649;
inline double chi_square_bound(int64_t cells, double z = 3.0902) {
  const double dof = double(cells - 1);
  return dof * std::pow(1 - 2 / (9 * dof) + z * std::sqrt(2 / (9 * dof)), 3);
}

}  // namespace vt::testing
