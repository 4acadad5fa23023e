#include "profile/backend_override.h"

#include <cstdlib>

#include "core/error.h"

namespace vt::profile {
namespace {

const char* lookup_variable(const EnvLookup& lookup, const char* variable) {
  return lookup ? lookup(variable) : std::getenv(variable);
}

const BackendOverride& find_override(const std::vector<BackendOverride>& overrides,
                                     const char* variable) {
  for (const BackendOverride& entry : overrides)
    if (entry.variable == variable) return entry;
  VT_FAIL("backend_override: ", variable, " is not a registered backend override");
}

const BackendChoice& find_choice(const BackendOverride& entry, const std::string& value) {
  std::string names;
  for (const BackendChoice& choice : entry.choices) {
    if (choice.name == value) return choice;
    if (!names.empty()) names += ", ";
    names += "'" + choice.name + "'";
  }
  VT_FAIL(entry.variable, "='", value, "' names no backend: expected one of ", names,
          " (or leave it unset)");
}

}  // namespace

const std::vector<BackendOverride>& backend_overrides() {
  // Every FP8 kernel loads 16-byte pieces of a weight row, so K is a multiple of 16 throughout.
  const auto k_ok = [](const GemmShape& s) { return s.m >= 1 && s.k % 16 == 0; };
  static const std::vector<BackendOverride> overrides = {
      {"VT_FP8_GEMM",
       {{"gemv", [=](const GemmShape& s) { return k_ok(s) && s.m == 1; },
         "m == 1 and k % 16 == 0 (the gemv kernel)"},
        {"simple", [=](const GemmShape& s) { return k_ok(s) && s.m <= 16; },
         "m <= 16 and k % 16 == 0 (the warp_rows kernel)"},
        {"mma", k_ok, "k % 16 == 0"}}},
      {"VT_GEMM_BACKEND",
       {{"gemv", [=](const GemmShape& s) { return k_ok(s) && s.m == 1; }, "m == 1 and k % 16 == 0"},
        {"gemv_splitk", [=](const GemmShape& s) { return k_ok(s) && s.m == 1; }, "m == 1 and k % 16 == 0"},
        {"gemv_tma", [=](const GemmShape& s) { return k_ok(s) && s.m == 1; }, "m == 1 and k % 16 == 0"},
        {"warp_rows", [=](const GemmShape& s) { return k_ok(s) && s.m <= 16; },
         "m <= 16 and k % 16 == 0"},
        {"mma", k_ok, "k % 16 == 0"},
        {"wgmma", k_ok, "k % 16 == 0"},
        {"wgmma_cluster", k_ok, "k % 16 == 0 (and, checked on the device, at most half as many 128-row tiles as SMs)"},
        {"cublaslt", k_ok, "k % 16 == 0 (and the registry's cuBLASLt limits)"}}},
  };
  return overrides;
}

std::string backend_override(const char* variable, const EnvLookup& lookup,
                             const std::vector<BackendOverride>& overrides) {
  const BackendOverride& entry = find_override(overrides, variable);
  const char* value = lookup_variable(lookup, variable);
  if (!value) return "";
  return find_choice(entry, value).name;
}

std::map<std::string, std::string> check_backend_overrides(
    const std::vector<GemmShape>& shapes, const EnvLookup& lookup,
    const std::vector<BackendOverride>& overrides) {
  std::map<std::string, std::string> chosen;
  for (const BackendOverride& entry : overrides) {
    const char* value = lookup_variable(lookup, entry.variable.c_str());
    if (!value) continue;
    const BackendChoice& choice = find_choice(entry, value);
    for (const GemmShape& shape : shapes)
      VT_CHECK(choice.serves(shape), entry.variable, "=", choice.name, " cannot serve ",
               shape.op.empty() ? "a GEMM" : shape.op, " (m=", shape.m, " n=", shape.n,
               " k=", shape.k, "): it needs ", choice.requirement,
               ". Refusing to start rather than run another backend.");
    chosen[entry.variable] = choice.name;
  }
  return chosen;
}

}  // namespace vt::profile
