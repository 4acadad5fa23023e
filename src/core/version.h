// vt's version: reported by `vt --version` and part of every on-disk cache key (a new version
// re-measures what an older one measured).
#pragma once

namespace vt {

inline constexpr const char kVersion[] = "0.2.4";

}  // namespace vt
