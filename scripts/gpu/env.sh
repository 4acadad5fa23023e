# Sourced by the scripts/gpu/*.sh: where the carried Debian dependencies (.gpu-deps, made here by
# scripts/gpu/pack_deps.sh) are found at build and run time on the GPU machine.
VT_DEPS="$PWD/.gpu-deps/usr"
export PKG_CONFIG_PATH="$VT_DEPS/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$VT_DEPS/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
OUT=${OUT:-/tmp/vt-out}
mkdir -p "$OUT"
VT=${VT:-build-gpu/apps/vt}
# The round scripts need the build scripts/gpu/cuda_tests.sh makes.
require_build() { [ -x "$VT" ] || { echo "build first: scripts/gpu/cuda_tests.sh" >&2; exit 1; }; }

# compute-sanitizer memcheck of vt_cuda_tests --gtest_filter=$1, log in $2, bounded by
# MEMCHECK_TIMEOUT seconds (default 300): sets sanitizer_result; returns 1 unless clean.
run_memcheck() {
  local filter=$1 log=$2 sanitizer code summary
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -z "$sanitizer" ]; then sanitizer_result="not run (no compute-sanitizer)"; return 1; fi
  timeout "${MEMCHECK_TIMEOUT:-300}" "$sanitizer" --tool memcheck --error-exitcode 3 build-gpu/tests/vt_cuda_tests \
    --gtest_filter="$filter" >"$log" 2>&1
  code=$?
  summary=$(grep -E "ERROR SUMMARY" "$log" | tail -1)
  case $code in
    0) sanitizer_result="clean: ${summary:-no summary}"; return 0 ;;
    124) sanitizer_result="TIMEOUT after ${MEMCHECK_TIMEOUT:-300} s" ;;
    3) sanitizer_result="ERRORS: $summary" ;;
    *) sanitizer_result="tests failed (exit $code): ${summary:-no summary}" ;;
  esac
  return 1
}
