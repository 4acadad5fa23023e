// Environment overrides that force a backend (VT_FP8_GEMM=simple|mma) are checked at start-up:
// a value that names no backend, or a backend that cannot serve one of the model's GEMM shapes,
// is an error before any work runs, never a warning that lets the engine take another path.
// Launchers read the checked value through backend_override() instead of getenv.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace vt::profile {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  std::string op;  // for the message: "gdn.in_proj"
};

// A backend an override may select, and which shapes it can serve (its supports()).
struct BackendChoice {
  std::string name;
  std::function<bool(const GemmShape&)> serves;
  std::string requirement;  // what serves() demands, for the message: "m == 1, k % 16 == 0"
};

struct BackendOverride {
  std::string variable;
  std::vector<BackendChoice> choices;
};

// vt's backend overrides, with the preconditions of backends/cuda (kernels/fp8_gemm.cu,
// fp8_gemm_registry.cpp): VT_FP8_GEMM=gemv|simple|mma, VT_GEMM_BACKEND=gemv|gemv_splitk|gemv_tma|warp_rows|mma|wgmma|cublaslt.
const std::vector<BackendOverride>& backend_overrides();

using EnvLookup = std::function<const char*(const char*)>;

// For every override in `overrides` set in the environment (`lookup`, getenv by default): throws
// unless the value names one of its choices and that choice serves every shape in `shapes` (the
// message names the variable, the value, the shape, the op and the requirement). A backend
// registry can pass its own table, built from its supports(), for the shapes it will run. Returns
// variable -> chosen backend for the overrides that are set.
std::map<std::string, std::string> check_backend_overrides(
    const std::vector<GemmShape>& shapes, const EnvLookup& lookup = {},
    const std::vector<BackendOverride>& overrides = backend_overrides());
// The checked value of `variable` ("" when unset); throws like check_backend_overrides for a
// value that names no choice. For launchers, in place of getenv.
std::string backend_override(const char* variable, const EnvLookup& lookup = {},
                             const std::vector<BackendOverride>& overrides = backend_overrides());

}  // namespace vt::profile
