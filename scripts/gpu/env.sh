# Sourced by the scripts/gpu/*.sh: where the carried Debian dependencies (.gpu-deps, made here by
# scripts/gpu/pack_deps.sh) are found at build and run time on the GPU machine.
VT_DEPS="$PWD/.gpu-deps/usr"
export PKG_CONFIG_PATH="$VT_DEPS/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$VT_DEPS/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
OUT=${OUT:-/tmp/vt-out}
mkdir -p "$OUT"
VT=build-gpu/apps/vt
# The round scripts need the build scripts/gpu/cuda_tests.sh makes.
require_build() { [ -x "$VT" ] || { echo "build first: scripts/gpu/cuda_tests.sh" >&2; exit 1; }; }
