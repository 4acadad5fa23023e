// Standalone (nvcc only) sweep of vt's TMA + wgmma stream-K FP8 GEMM
// (src/backends/cuda/kernels/fp8_gemm_wgmma.cuh) on the 27B decode shapes: every configuration
// (tokens per instruction, stages, CTAs per SM) is checked against an f32 reference and for
// bit-identical reruns, then timed as 30 back-to-back PDL launches in a CUDA graph cycling over
// enough weight copies that every call reads HBM; "% bw" is against this binary's 4 GB read.
// Build: nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -O3 -I src scripts/gpu/wgmma_explore.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/kernels/fp8_gemm_wgmma.cuh"
// The kernel as an earlier commit had it (wgmma_explore.sh writes it from git as wgmma_base.cuh),
// for A/B rows in the same run: "ab" mode.
#define wgmma_gemm wgmma_gemm_base
#include "wgmma_base.cuh"
#undef wgmma_gemm

namespace wg = vt::cuda::wgmma_gemm;
namespace wb = vt::cuda::wgmma_gemm_base;

#define CHECK(x)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

__device__ uint32_t mix(uint64_t x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
  return uint32_t(x);
}
__global__ void fill_codes(uint8_t* p, int64_t count, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    uint8_t byte = uint8_t(mix(seed * 0x9E3779B97F4A7C15ull + i));
    if ((byte & 0x7F) == 0x7F) byte = 0;  // e4m3 NaN
    p[i] = byte;
  }
}
__global__ void fill_scales(float* p, int64_t count, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = 0.5e-2f + 1e-2f * float(mix(seed * 0x9E3779B97F4A7C15ull + i) & 0xFFFF) / 65535.0f;
}
__global__ void reference(float* y, const uint8_t* a, const float* as, const uint8_t* w, const float* ws, int m,
                          int n, int k) {
  const int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= int64_t(m) * n) return;
  const int row = int(index / n), column = int(index % n), kb = (k + 127) / 128;
  float total = 0.0f;
  for (int b = 0; b < kb; ++b) {
    float block = 0.0f;
    for (int e = b * 128; e < min(k, b * 128 + 128); ++e) {
      __nv_fp8_e4m3 x, y;
      x.__x = a[int64_t(row) * k + e];
      y.__x = w[int64_t(column) * k + e];
      block += float(x) * float(y);
    }
    total += block * as[int64_t(row) * kb + b] * ws[int64_t(column / 128) * kb + b];
  }
  y[index] = total;
}
__global__ void read_ceiling(const uint4* p, int64_t count, unsigned* sink) {
  uint32_t acc = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

struct Config {
  int tokens, stages, halves;
  bool tile_grid = false;  // one CTA per tile where the tiles fit on the SMs (no shared tiles), else all SMs
  int mode = 0;
  int slack = -1;     // the receivers split with this slack (wg::receive_units_for), -1: stream-K
  bool base = false;  // the earlier commit's kernel
  int waves = 1;      // stream-K over waves x SMs CTAs
  bool pack = false;  // shared memory not padded: two CTAs may share an SM
};
constexpr size_t kExclusiveBytes = 120 * 1024;  // no second such CTA fits on an SM
bool g_pdl = true;
uint64_t* g_base_partials = nullptr;  // the base kernel's (64-bit flagged words, zeroed); this one's are 0xFF-filled

template <int kTokens, int kStages, int kHalves, int kMode>
constexpr size_t smem_of() {
  return std::max(wg::shared_bytes<kTokens, kStages, kHalves>() + wg::prefetch_bytes<kTokens, kHalves>(),
                  kExclusiveBytes);
}
// The summer's prefetch lead in units (WGMMA_PREFETCH_LEAD, default vt's 2; 0: none).
int g_prefetch_lead = 2;

template <int kTokens, int kStages, int kHalves, int kMode, bool kBase = false, bool kPack = false>
void launch(const CUtensorMap& wmap, const CUtensorMap& amap, float* y, const float* as, const float* ws,
            uint64_t* partials, int m, int n, int k, int ctas, int receive_units, cudaStream_t stream) {
  auto kernel = [] {
    if constexpr (kBase) return wb::sm90_fp8_gemm_wgmma<float, kTokens, kStages, kHalves, kMode>;
    else return wg::sm90_fp8_gemm_wgmma<float, kTokens, kStages, kHalves, kMode>;
  }();
  constexpr size_t smem = kPack ? wg::shared_bytes<kTokens, kStages, kHalves>() + wg::prefetch_bytes<kTokens, kHalves>()
                                : smem_of<kTokens, kStages, kHalves, kMode>();
  static bool set = false;
  if (!set) {
    // The padded size, the larger: the packed and padded launches of one kernel share the attribute.
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(smem_of<kTokens, kStages, kHalves, kMode>())));
    set = true;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(ctas);
  config.blockDim = dim3(wg::kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = g_pdl ? 1 : 0;
  if constexpr (kBase)
    CHECK(cudaLaunchKernelEx(&config, kernel, wmap, amap, y, int64_t(n), as, ws, g_base_partials, m, n, k));
  else
    CHECK(cudaLaunchKernelEx(&config, kernel, wmap, amap, y, int64_t(n), as, ws, reinterpret_cast<uint32_t*>(partials),
                             m, n, k, receive_units, g_prefetch_lead));
}

using Launcher = void (*)(const CUtensorMap&, const CUtensorMap&, float*, const float*, const float*, uint64_t*, int,
                          int, int, int, int, cudaStream_t);
struct Variant {
  Config config;
  Launcher launcher;
};
#define V(t, s, h, g) Variant{{t, s, h, g, 0}, launch<t, s, h, 0>}
#define VM(t, s, h, g, mode) Variant{{t, s, h, g, mode}, launch<t, s, h, mode>}
#define VR(t, s, slack) Variant{{t, s, 2, false, 0, slack}, launch<t, s, 2, 0>}
#define VRH(t, s, h, slack) Variant{{t, s, h, false, 0, slack}, launch<t, s, h, 0>}
#define VW(t, s, waves, pack) Variant{{t, s, 2, false, 0, -1, false, waves, pack}, launch<t, s, 2, 0, false, pack>}
#define VRM(t, s, slack, mode) Variant{{t, s, 2, false, mode, slack}, launch<t, s, 2, mode>}
#define VB(t, s, mode) Variant{{t, s, 2, false, mode, -1, true}, launch<t, s, 2, mode, true>}

// The stamps of the last kStamps launch as one table row: per CTA and per partials slot
// (fp8_gemm_wgmma.cuh's Stamp), the summers and their partners found with the kernel's own split
// arithmetic (fp8_gemm_split.h).
std::string stamp_summary(const char* shape, const Config& config, int ctas, int64_t tiles, int64_t kb, int receive) {
  std::vector<uint64_t> raw(wg::kStampCtas * wg::kStampsPerCta + wg::kStampSlots);
  CHECK(cudaMemcpyFromSymbol(raw.data(), wg::g_stamps, raw.size() * sizeof(uint64_t)));
  const auto at = [&](int cta, int point) { return raw[size_t(cta) * wg::kStampsPerCta + point]; };
  uint64_t t0 = ~0ull, start_max = 0;
  for (int c = 0; c < ctas; ++c) t0 = std::min(t0, at(c, wg::kStampStart)), start_max = std::max(start_max, at(c, wg::kStampStart));
  const auto rel = [&](uint64_t t) { return double(int64_t(t - t0)); };
  double streamed_sum = 0, streamed_max = 0, exit_sum = 0, exit_max = 0;
  double own_sum = 0, partner_sum = 0, partner_max = 0, summed_sum = 0, summed_max = 0, wait_sum = 0;
  int summers = 0, late = 0;
  for (int c = 0; c < ctas; ++c) {
    const double streamed = rel(at(c, wg::kStampStreamed)), exit = rel(at(c, wg::kStampExit));
    streamed_sum += streamed, streamed_max = std::max(streamed_max, streamed);
    exit_sum += exit, exit_max = std::max(exit_max, exit);
    const wg::Walk walk = wg::walk_of(c, ctas, tiles, kb, receive);
    if (walk.end <= walk.begin) continue;
    const wg::Cursor last(walk, walk.end - 1);
    const wg::TileShares shares = wg::tile_shares(last.tile, tiles, kb, ctas, receive, walk);
    if (shares.alone() || !shares.sums(c)) continue;
    double partners = 0;
    for (int64_t owner = shares.summed_from(); owner <= shares.last; ++owner)
      partners = std::max(partners, rel(raw[size_t(wg::kStampCtas) * wg::kStampsPerCta + size_t(shares.slot(owner))]));
    const double summed = rel(at(c, wg::kStampSummed));
    ++summers;
    own_sum += streamed, partner_sum += partners, partner_max = std::max(partner_max, partners);
    summed_sum += summed, summed_max = std::max(summed_max, summed);
    wait_sum += summed - std::max(streamed, partners);
    late += partners > streamed;
  }
  // WGMMA_STAMPS_CSV=path: every CTA's row too (which SM, its units, when it started, streamed, exited).
  if (const char* path = std::getenv("WGMMA_STAMPS_CSV")) {
    static int launch = 0;
    ++launch;
    if (FILE* csv = std::fopen(path, "a")) {
      for (int c = 0; c < ctas; ++c) {
        const wg::Walk walk = wg::walk_of(c, ctas, tiles, kb, receive);
        std::fprintf(csv, "%s,%s,%d,%d,%d,%lld,%.0f,%.0f,%.0f\n", shape, receive ? "receivers" : "stream-K", launch, c,
                     int(at(c, wg::kStampSm)), (long long)(walk.end - walk.begin), rel(at(c, wg::kStampStart)),
                     rel(at(c, wg::kStampStreamed)), rel(at(c, wg::kStampExit)));
      }
      std::fclose(csv);
    }
  }
  char line[512];
  const double n = std::max(summers, 1);
  std::snprintf(line, sizeof line, "| %s | %s | %d / %d | %.0f | %.0f / %.0f | %.0f | %.0f / %.0f | %d | %.0f / %.0f | %.0f | %.0f / %.0f |",
                shape, receive ? ("receivers slack " + std::to_string(config.slack)).c_str() : "stream-K", ctas, summers,
                double(start_max - t0), streamed_sum / ctas, streamed_max, own_sum / n, partner_sum / n, partner_max, late,
                summed_sum / n, summed_max, wait_sum / n, exit_sum / ctas, exit_max);
  return line;
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows reach the log as they are measured
  if (const char* lead = std::getenv("WGMMA_PREFETCH_LEAD")) g_prefetch_lead = std::atoi(lead);
  int device = 0, sms = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, device));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  unsigned* sink;
  CHECK(cudaMalloc(&sink, 4));
  // The bandwidth every % is against: a 4 GB streaming read.
  const int64_t big = int64_t(4) << 30;
  uint8_t* big_buffer;
  CHECK(cudaMalloc(&big_buffer, big));
  CHECK(cudaMemset(big_buffer, 1, big));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  float best_read = 1e30f;
  for (int rep = 0; rep < 3; ++rep) {
    CHECK(cudaEventRecord(e0, stream));
    read_ceiling<<<sms * 8, 256, 0, stream>>>(reinterpret_cast<uint4*>(big_buffer), big / 16, sink);
    CHECK(cudaEventRecord(e1, stream));
    CHECK(cudaEventSynchronize(e1));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    best_read = std::min(best_read, ms);
  }
  CHECK(cudaFree(big_buffer));
  const double bandwidth = double(big) / (best_read * 1e-3) / 1e9;
  std::printf("# wgmma stream-K FP8 GEMM sweep on %s (%d SMs): 4 GB read %.0f GB/s\n\n", prop.name, sms, bandwidth);

  struct Shape {
    const char* name;
    int n, k;
  };
  std::vector<Shape> shapes = {{"gate_up", 34816, 5120}, {"gdn in_proj", 16384, 5120}, {"attn qkv", 14336, 5120},
                               {"down", 5120, 17408},    {"o_proj", 5120, 6144},      {"lm_head", 248320, 5120},
                               {"awkward", 1000, 4112}};
  std::vector<int> ms = {1, 7, 8, 16, 32, 64};
  const bool diag = argc > 1 && std::string(argv[1]) == "diag";
  const bool no_pdl_rows = std::getenv("WGMMA_NO_PDL_ROWS") != nullptr;  // each row once more without PDL
  const bool ab = argc > 1 && std::string(argv[1]) == "ab";
  const bool grid = argc > 1 && std::string(argv[1]) == "grid";
  const bool stamps = argc > 1 && std::string(argv[1]) == "stamps";
  const bool halves = argc > 1 && std::string(argv[1]) == "halves";
  const bool waves = argc > 1 && std::string(argv[1]) == "waves";
  std::vector<std::string> stamp_lines;
  if (ab) {
    ms = {1, 8, 16, 32, 64};
  } else if (diag) {
    shapes = {{"o_proj", 5120, 6144}, {"attn qkv", 14336, 5120}, {"gate_up", 34816, 5120}, {"down", 5120, 17408}};
    ms = {16};
  } else if (waves) {
    shapes = {{"gate_up", 34816, 5120}, {"attn qkv", 14336, 5120}, {"gdn in_proj", 16384, 5120},
              {"down", 5120, 17408},    {"o_proj", 5120, 6144},      {"lm_head", 248320, 5120}};
    ms = {8, 16};
  } else if (halves) {
    shapes = {{"o_proj", 5120, 6144}, {"down", 5120, 17408}, {"attn qkv", 14336, 5120}, {"gate_up", 34816, 5120},
              {"gdn in_proj", 16384, 5120}};
    ms = {8, 16};
  } else if (stamps) {
    shapes = {{"o_proj", 5120, 6144}, {"down", 5120, 17408}, {"attn qkv", 14336, 5120}, {"gate_up", 34816, 5120},
              {"lm_head", 248320, 5120}};
    ms = {16};
  } else if (grid) {
    shapes = {{"o_proj", 5120, 6144}, {"down", 5120, 17408}, {"attn qkv", 14336, 5120}, {"gdn in_proj", 16384, 5120}};
    ms = {8, 16};
  } else if (argc > 1) {
    ms = {std::atoi(argv[1])};
  }
  // (tokens, stages, 64-row halves per tile, one CTA per tile)
  std::vector<Variant> variants = {
      V(8, 4, 2, false),  V(8, 6, 2, false),  V(8, 8, 2, false),  V(8, 12, 2, false), V(8, 8, 2, true),
      V(8, 8, 1, false),  V(16, 4, 2, false), V(16, 6, 2, false), V(16, 8, 2, false), V(16, 8, 2, true),
      V(32, 4, 2, false), V(32, 6, 2, false), V(32, 8, 2, false), V(32, 6, 2, true),  V(64, 4, 2, false),
      V(64, 6, 2, false), V(64, 8, 2, false), V(64, 6, 2, true)};
  // The registry's configuration (4 stages, 128-row tiles, the smallest fitting tokens): the
  // earlier commit's kernel, this one's stream-K split, its receivers split at slacks 1 / 2 / 4
  // (where the shape allows it), one CTA per tile, and 6 stages.
  if (ab)
    variants = {VB(8, 4, 0),  V(8, 4, 2, false),  VR(8, 4, 1),  VR(8, 4, 2),  VR(8, 4, 4),  V(8, 4, 2, true),
                VR(8, 6, 2),
                VB(16, 4, 0), V(16, 4, 2, false), VR(16, 4, 1), VR(16, 4, 2), VR(16, 4, 4), V(16, 4, 2, true),
                VR(16, 6, 2),
                VB(32, 4, 0), V(32, 4, 2, false), VR(32, 4, 2), VB(64, 4, 0), V(64, 4, 2, false), VR(64, 4, 2)};
  else if (diag)  // the shared-tile sum's parts at M = 16 (modes: fp8_gemm_wgmma.cuh's Mode); the
                  // other parts of a unit's work: VM(t, 4, 2, false, 4 or 2), and ms = {8} for 16 tokens at M = 8
    variants = {V(16, 4, 2, false),     VM(16, 4, 2, false, 8), VM(16, 4, 2, false, 16), VM(16, 4, 2, false, 24),
                VM(16, 4, 2, false, 32), VM(16, 4, 2, false, 1), VRM(16, 4, 2, 0),       VRM(16, 4, 2, 8),
                VRM(16, 4, 2, 16),      VRM(16, 4, 2, 24),      VRM(16, 4, 2, 32),       VRM(16, 4, 2, 1)};
  else if (waves)  // the stream-K split over more CTAs than SMs: two resident per SM (pack), the
                  // hardware giving the later waves' CTAs to whichever SM frees first
    variants = {V(8, 4, 2, false),   VW(8, 4, 2, true),   VW(8, 4, 3, true),   VW(8, 4, 4, true),
                VW(8, 4, 8, true),   VW(8, 4, 2, false),
                V(16, 4, 2, false),  VW(16, 4, 2, true),  VW(16, 4, 3, true),  VW(16, 4, 4, true),
                VW(16, 4, 8, true),  VW(16, 4, 2, false)};
  else if (halves)  // 64-row tiles (half the partial's bytes, twice the tiles to share them) against 128
    variants = {V(8, 4, 2, false),   VR(8, 4, 2),           V(8, 4, 1, false),  V(8, 6, 1, false),
                V(8, 8, 1, false),   VRH(8, 4, 1, 2),       VRH(8, 6, 1, 2),    VM(8, 4, 1, false, 1),
                V(16, 4, 2, false),  VR(16, 4, 2),          V(16, 4, 1, false), V(16, 6, 1, false),
                V(16, 8, 1, false),  VRH(16, 4, 1, 2),      VRH(16, 6, 1, 2),   VM(16, 4, 1, false, 1),
                VM(16, 4, 1, false, 64), VM(16, 6, 1, false, 64)};
  else if (stamps)  // when each CTA passes the shared-tile sum's points (fp8_gemm_wgmma.cuh's Stamp)
    variants = {VM(16, 4, 2, false, 64), VRM(16, 4, 2, 64), VRM(16, 4, 4, 64)};
  else if (grid)  // one CTA per tile with deep rings (a lone SM's stream is bound by its bytes in
                  // flight), against the registry's stream-K / receivers; copies-only rows: the ceiling
    variants = {V(8, 4, 2, false),   VR(8, 4, 2),          V(8, 8, 1, true),     V(8, 12, 1, true),
                V(8, 16, 1, true),   V(8, 20, 1, true),    V(8, 8, 2, true),     V(8, 12, 2, true),
                VM(8, 16, 1, true, 2), VM(8, 12, 2, true, 2),
                V(16, 4, 2, false),  VR(16, 4, 2),         V(16, 8, 1, true),    V(16, 12, 1, true),
                V(16, 16, 1, true),  V(16, 20, 1, true),   V(16, 8, 2, true),    V(16, 12, 2, true),
                VM(16, 16, 1, true, 2), VM(16, 12, 2, true, 2)};
  std::printf("| shape | M | tokens | stages | tile rows | CTAs | mode | max err | rerun | us | GB/s | %% bw | one call us |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<std::string> best_lines;
  const size_t flush_bytes = size_t(256) << 20;
  uint8_t* big_flush;
  CHECK(cudaMalloc(&big_flush, flush_bytes));
  uint64_t* partials;  // a slot per CTA: 2 halves x 32 registers x 128 threads
  const size_t partial_bytes = size_t(sms) * 2 * 32 * 128 * sizeof(uint64_t);
  CHECK(cudaMalloc(&partials, partial_bytes));
  CHECK(cudaMemset(partials, 0xFF, partial_bytes));
  CHECK(cudaMalloc(&g_base_partials, partial_bytes));
  CHECK(cudaMemset(g_base_partials, 0, partial_bytes));
  for (const Shape& shape : shapes) {
    const int n = shape.n, k = shape.k, kb = (k + 127) / 128, nb = (n + 127) / 128;
    const int64_t weight_bytes = int64_t(n) * k;
    const int copies = int(std::max<int64_t>(1, std::min<int64_t>(30, (int64_t(600) << 20) / weight_bytes + 1)));
    std::vector<uint8_t*> w(copies);
    std::vector<float*> ws(copies);
    for (int c = 0; c < copies; ++c) {
      CHECK(cudaMalloc(&w[c], weight_bytes));
      CHECK(cudaMalloc(&ws[c], size_t(nb) * kb * sizeof(float)));
      fill_codes<<<1024, 256, 0, stream>>>(w[c], weight_bytes, 11 + c);
      fill_scales<<<64, 256, 0, stream>>>(ws[c], int64_t(nb) * kb, 101 + c);
    }
    std::vector<CUtensorMap> wmaps_by_halves[2] = {std::vector<CUtensorMap>(copies), std::vector<CUtensorMap>(copies)};
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < copies; ++c)
        if (!wg::make_fp8_tensor_map(&wmaps_by_halves[h][c], w[c], n, k, 64 * (h + 1))) {
          std::fprintf(stderr, "tensor map refused\n");
          return 1;
        }
    for (int m : ms) {
      uint8_t* a;
      float *as, *y, *ref, *y2;
      CHECK(cudaMalloc(&a, int64_t(m) * k));
      CHECK(cudaMalloc(&as, size_t(m) * kb * sizeof(float)));
      CHECK(cudaMalloc(&y, size_t(m) * n * sizeof(float)));
      CHECK(cudaMalloc(&y2, size_t(m) * n * sizeof(float)));
      CHECK(cudaMalloc(&ref, size_t(m) * n * sizeof(float)));
      fill_codes<<<256, 256, 0, stream>>>(a, int64_t(m) * k, 7 + m);
      fill_scales<<<16, 256, 0, stream>>>(as, int64_t(m) * kb, 77 + m);
      reference<<<unsigned((int64_t(m) * n + 255) / 256), 256, 0, stream>>>(ref, a, as, w[0], ws[0], m, n, k);
      std::vector<float> h_ref(size_t(m) * n), h_y(size_t(m) * n), h_y2(size_t(m) * n);
      CHECK(cudaMemcpy(h_ref.data(), ref, h_ref.size() * 4, cudaMemcpyDeviceToHost));
      double ref_max = 0;
      for (float v : h_ref) ref_max = std::max(ref_max, double(std::fabs(v)));
      double best_us = 1e30;
      std::string best;
      for (const Variant& variant : variants) {
        const Config& config = variant.config;
        const std::vector<CUtensorMap>& wmaps = wmaps_by_halves[config.halves - 1];
        // The smallest fitting width (diag: 16 at M = 8 too).
        if (config.tokens < m || (!diag && config.tokens > 8 && config.tokens / 2 >= m)) continue;
        for (int pdl = 1; pdl >= (no_pdl_rows ? 0 : 1); --pdl) {
        g_pdl = pdl;
        CUtensorMap amap;
        if (!wg::make_fp8_tensor_map(&amap, a, m, k, config.tokens)) {
          std::fprintf(stderr, "activation tensor map refused\n");
          return 1;
        }
        const int64_t tiles = (n + 64 * config.halves - 1) / (64 * config.halves), units = tiles * kb;
        if (config.tile_grid && tiles > sms) continue;
        const int receive = config.base ? 0 : int(wg::receive_units_for(tiles, kb, sms, config.slack));
        if (config.slack >= 0 && receive == 0) continue;  // the receivers split does not apply
        const int ctas = receive ? sms : int(std::min<int64_t>(units, config.tile_grid ? tiles : int64_t(sms) * config.waves));
        CHECK(cudaMemset(y, 0, h_y.size() * 4));
        // Every word unwritten again: the diagnostic modes that skip the sum's wait or reset leave
        // words behind that the next variant would take for its own partners' (wrong results,
        // no waits: the first sweep of those modes timed later rows that way).
        CHECK(cudaMemset(partials, 0xFF, partial_bytes));
        CHECK(cudaMemset(g_base_partials, 0, partial_bytes));
        variant.launcher(wmaps[0], amap, y, as, ws[0], partials, m, n, k, ctas, receive, stream);
        variant.launcher(wmaps[0], amap, y2, as, ws[0], partials, m, n, k, ctas, receive, stream);
        CHECK(cudaStreamSynchronize(stream));
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(h_y.data(), y, h_y.size() * 4, cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(h_y2.data(), y2, h_y2.size() * 4, cudaMemcpyDeviceToHost));
        double err = 0;
        for (size_t i = 0; i < h_y.size(); ++i) err = std::max(err, double(std::fabs(h_y[i] - h_ref[i])));
        const bool same = std::memcmp(h_y.data(), h_y2.data(), h_y.size() * 4) == 0;
        // 30 calls over the copies, one graph.
        // The min over `reps` launches of a graph of `calls` GEMMs (flush: the weights leave L2 first).
        const auto time_graph_ms = [&](int calls, int first, int reps, bool flush) {
          cudaGraph_t graph;
          cudaGraphExec_t exec;
          CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
          for (int call = first; call < first + calls; ++call)
            variant.launcher(wmaps[call % copies], amap, y, as, ws[call % copies], partials, m, n, k, ctas, receive,
                             stream);
          CHECK(cudaStreamEndCapture(stream, &graph));
          CHECK(cudaGraphInstantiate(&exec, graph, 0));
          if (!flush) CHECK(cudaGraphLaunch(exec, stream));  // warm
          float best = 1e30f;
          for (int rep = 0; rep < reps; ++rep) {
            if (flush) CHECK(cudaMemsetAsync(big_flush, rep, flush_bytes, stream));
            CHECK(cudaEventRecord(e0, stream));
            CHECK(cudaGraphLaunch(exec, stream));
            CHECK(cudaEventRecord(e1, stream));
            CHECK(cudaEventSynchronize(e1));
            float elapsed;
            CHECK(cudaEventElapsedTime(&elapsed, e0, e1));
            best = std::min(best, elapsed);
          }
          CHECK(cudaGraphExecDestroy(exec));
          CHECK(cudaGraphDestroy(graph));
          return best;
        };
        const float best_ms = time_graph_ms(30, 0, 3, false);  // 30 calls over the copies
        const float single_ms = time_graph_ms(1, 1, 5, true);  // one call alone, nothing to overlap with
        if (config.mode & wg::kStamps) {  // the 30th of 30 back-to-back calls, three times
          for (int rep = 0; rep < 3; ++rep) {
            time_graph_ms(30, 0, 1, false);
            stamp_lines.push_back(stamp_summary(shape.name, config, ctas, tiles, kb, receive));
          }
        }
        const double us = best_ms * 1e3 / 30;
        const double bytes = double(weight_bytes) + double(m) * k + double(m) * n * 2;
        const double gbs = bytes / (us * 1e-6) / 1e9;
        char line[256];
        std::string what = config.mode == 0    ? (pdl ? "full" : "full, no PDL")
                           : config.mode == 1  ? "no fixup"
                           : config.mode == 2  ? "copies only"
                           : config.mode == 4  ? "no fixup, no wgmma"
                           : config.mode == 8  ? "sum, no poll"
                           : config.mode == 16 ? "sum, no reset"
                           : config.mode == 24 ? "sum, no poll, no reset"
                           : config.mode == 64 ? "full, stamped"
                                               : "sum, no read (partners store)";
        if (config.base) what = "BASE " + what;
        if (receive) what += ", receivers R=" + std::to_string(receive) + " slack " + std::to_string(config.slack);
        if (config.tile_grid) what += ", CTA per tile";
        if (config.waves > 1 || config.pack)
          what += ", " + std::to_string(config.waves) + " x SMs CTAs" + (config.pack ? ", 2 per SM" : ", 1 per SM");
        std::snprintf(line, sizeof line, "| %s %dx%d | %d | %d | %d | %d x 64 | %d | %s | %.2e | %s | %.2f | %.0f | %.1f | %.2f |",
                      shape.name, n, k, m, config.tokens, config.stages, config.halves, ctas, what.c_str(),
                      err / ref_max, same ? "same" : "DIFFERS", us, gbs, 100 * gbs / bandwidth, single_ms * 1e3);
        std::printf("%s\n", line);
        if ((config.mode == 0 || config.mode == wg::kStamps) && (err / ref_max > 1e-3 || !same)) std::printf("FAILED above\n");
        if (config.mode == 0 && pdl && us < best_us) best_us = us, best = line;
        if (ab && config.mode == 0) best_lines.push_back(line);  // every full row of the A/B in the summary
        }
      }
      best_lines.push_back(best);
      cudaFree(a), cudaFree(as), cudaFree(y), cudaFree(y2), cudaFree(ref);
    }
    for (int c = 0; c < copies; ++c) cudaFree(w[c]), cudaFree(ws[c]);
  }
  if (!stamp_lines.empty()) {
    std::printf("\n## when the CTAs pass the sum's points (ns after the first consumer starts; the 30th of 30 calls)\n"
                "| shape | split | CTAs / summers | start spread | streamed mean / max | summers streamed mean | "
                "partners stored mean / max | summers waiting on a partner | summed mean / max | summed - ready mean | "
                "exit mean / max |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& line : stamp_lines) std::printf("%s\n", line.c_str());
  }
  std::printf("\n## best variant per shape and M\n| shape | M | tokens | stages | tile rows | CTAs | mode | max err | rerun | us | GB/s | %% bw | one call us |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& line : best_lines) std::printf("%s\n", line.c_str());
  return 0;
}
