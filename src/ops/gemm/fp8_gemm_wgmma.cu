// Host side of the TMA + wgmma stream-K FP8 GEMM (fp8_gemm_wgmma.cuh): the configuration per
// call, tensor maps (cached per thread), the per-device partials workspace, and the launch with
// its intent. Configuration: the smallest of 8 / 16 / 32 / 64 tokens per instruction that holds M
// (larger M in chunks of 64 rows, each re-reading the weights), 4 stages of 128 x 128 weight
// blocks, shared memory padded so that one such CTA holds an SM, one CTA per SM, or one per
// 128-row tile where the tiles nearly fill the SMs (no shared tiles then); the receivers split
// where the tiles fill at most half the SMs. The cluster split (Fp8GemmBackend::kWgmmaCluster) is
// its own entry: its cluster size per device and width, its launch in clusters.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "ops/gemm/fp8_gemm_wgmma.cuh"
#include "ops/gemm/fp8_gemm_wgmma.h"

#include "cuda/check.h"
#include "cuda/launch.cuh"
#include "ops/gemm/gemm.h"
#include "ops/gemm/partials.h"

namespace vt::cuda {
namespace {

namespace wg = wgmma_gemm;

constexpr int kStages = 4;
constexpr int kHalves = 2;  // 128-row tiles
constexpr int kTileRows = 64 * kHalves;
constexpr int kMaxTokens = 64;
constexpr size_t kExclusiveSharedBytes = 120 * 1024;  // two such CTAs never share an SM
constexpr int64_t kReceiverSlack = 2;

template <int kTokens>
constexpr size_t packed_shared_bytes() {
  return wg::shared_bytes<kTokens, kStages, kHalves>() + wg::prefetch_bytes<kTokens, kHalves>();
}
template <int kTokens>
constexpr size_t shared_bytes() {
  return std::max(packed_shared_bytes<kTokens>(), kExclusiveSharedBytes);
}

// Per (device, stream): the SM count and the partials (one slot per CTA, filled with
// wg::kUnwritten once: the CTA that reads a word puts it back). Per stream, because GEMMs of two
// streams (two models on one GPU) may run at once and must not share slots.
struct Workspace {
  int sms = 0;
  uint32_t* partials = nullptr;
  float* deferred = nullptr;  // fp8_gemm_wgmma_partials' output: kDeferredSlots x 64 x 128 words per SM
};
// The deferred sum's workspace in [64][128]-word slots per SM: the 27B shapes that feed a norm
// need tiles x max_tile_owners = 40 x 5 of 132 x 3.
constexpr int64_t kDeferredSlots = 3;
std::mutex g_workspace_mutex;
std::map<std::pair<int, cudaStream_t>, Workspace> g_workspaces;

const Workspace& workspace(cudaStream_t stream) {
  int device = 0;
  VT_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(g_workspace_mutex);
  Workspace& slot = g_workspaces[{device, stream}];
  if (!slot.partials) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    VT_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
    VT_CHECK(capturing == cudaStreamCaptureStatusNone,
             "fp8 wgmma GEMM: first call on a stream inside a graph capture; call fp8_gemm_prepare(stream) before");
    VT_CUDA_CHECK(cudaDeviceGetAttribute(&slot.sms, cudaDevAttrMultiProcessorCount, device));
    const size_t bytes =
        size_t(slot.sms) * kHalves * (kMaxTokens / 2) * wg::kConsumerThreads * sizeof(uint32_t);
    void* memory = nullptr;
    VT_CUDA_CHECK(cudaMalloc(&memory, bytes));
    static_assert(wg::kUnwritten == 0xFFFFFFFFu, "the workspace is filled bytewise");
    VT_CUDA_CHECK(cudaMemset(memory, 0xFF, bytes));
    VT_CUDA_CHECK(cudaDeviceSynchronize());
    slot.partials = static_cast<uint32_t*>(memory);
    VT_CUDA_CHECK(cudaMalloc(&memory, size_t(slot.sms) * kDeferredSlots * kMaxTokens * kTileRows * sizeof(float)));
    slot.deferred = static_cast<float*>(memory);
  }
  return slot;
}

// Tensor maps are host-encoded descriptors of (address, shape, box): cached per thread, since a
// decode step launches hundreds of GEMMs outside graphs too (prefill, verify steps).
struct MapKey {
  const void* base;
  int64_t rows, cols;
  int box_rows;
  bool operator==(const MapKey& other) const {
    return base == other.base && rows == other.rows && cols == other.cols && box_rows == other.box_rows;
  }
};
struct MapKeyHash {
  size_t operator()(const MapKey& key) const {
    return std::hash<const void*>()(key.base) ^ (size_t(key.rows) * 0x9E3779B97F4A7C15ull) ^
           (size_t(key.cols) << 20) ^ size_t(key.box_rows);
  }
};

const CUtensorMap& tensor_map(const void* base, int64_t rows, int64_t cols, int box_rows) {
  thread_local std::unordered_map<MapKey, CUtensorMap, MapKeyHash> cache;
  const MapKey key{base, rows, cols, box_rows};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() > 65536) cache.clear();  // bounded: a model has a few thousand
  CUtensorMap map;
  std::memset(&map, 0, sizeof map);
  VT_CHECK(wg::make_fp8_tensor_map(&map, base, rows, cols, box_rows), "fp8 wgmma GEMM: the driver refused a tensor map of [",
           rows, ", ", cols, "] at ", base, " (boxes of ", box_rows, " x 128 bytes)");
  return cache.emplace(key, map).first->second;
}

// How many units before its range's end a summer requests its partners' partials into shared
// memory: the read's round trip (~1 us) is otherwise paid after the summer's last unit even where
// the partials were written long before.
constexpr int kPrefetchLead = 2;

template <typename T, int kTokens>
void launch_tokens(void* y, int64_t ldy, const uint8_t* q, const float* a_scales, const uint8_t* w,
                   const float* w_scales, int64_t m, int64_t n, int64_t k, int ctas, int64_t receive_units,
                   const Workspace& space, cudaStream_t stream, const ::vt::trace::LaunchCost& cost) {
  auto kernel = wg::sm90_fp8_gemm_wgmma<T, kTokens, kStages, kHalves>;
  static std::atomic<uint64_t> devices{0};
  allow_dynamic_shared(kernel, shared_bytes<kTokens>(), devices, "sm90_fp8_gemm_wgmma");
  const size_t shared = shared_bytes<kTokens>();
  const CUtensorMap& weights = tensor_map(w, n, k, kTileRows);
  const CUtensorMap& activations = tensor_map(q, m, k, kTokens);
  launch("sm90_fp8_gemm_wgmma", cost, kernel, dim3(unsigned(ctas)), dim3(wg::kThreads), shared, stream,
         weights, activations, static_cast<T*>(y), ldy, a_scales, w_scales, space.partials, int(m), int(n), int(k),
         int(receive_units), kPrefetchLead);
}

// The cluster split (sm90_fp8_gemm_wgmma_cluster): at most 8 CTAs per cluster (the portable
// size), within the shared memory a CTA may have, all of a matrix's clusters resident at once.
constexpr int64_t kMostCluster = 8;

template <int kTokens, int kStagesC>
size_t cluster_shared_bytes(int64_t cluster) {
  return std::max(wg::shared_bytes<kTokens, kStagesC, kHalves>() +
                      size_t(cluster - 1) * wg::cluster_partial_bytes<kTokens, kHalves>(),
                  kExclusiveSharedBytes);
}

int current_device() {
  int device = 0;
  VT_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// Per device: the SM count and the shared memory a CTA may opt into.
struct DeviceLimits {
  int sms = 0, shared = 0;
};
const DeviceLimits& device_limits(int device) {
  static std::mutex mutex;
  static std::map<int, DeviceLimits> limits;
  std::lock_guard<std::mutex> lock(mutex);
  DeviceLimits& slot = limits[device];
  if (!slot.sms) {
    VT_CUDA_CHECK(cudaDeviceGetAttribute(&slot.sms, cudaDevAttrMultiProcessorCount, device));
    VT_CUDA_CHECK(cudaDeviceGetAttribute(&slot.shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  }
  return slot;
}

// The cluster size for `tiles` x `k_blocks` units of kTokens-row launches on this device (0: the
// split does not apply): the largest that fits the shared memory, with every cluster resident at
// once (the driver's occupancy answer, per device and size).
template <typename T, int kTokens, int kStagesC>
int64_t cluster_for(int64_t tiles, int64_t k_blocks) {
  const int device = current_device();
  const DeviceLimits& limits = device_limits(device);
  int64_t most = kMostCluster;
  while (most >= 2 && cluster_shared_bytes<kTokens, kStagesC>(most) > size_t(limits.shared)) --most;
  int64_t cluster = wg::cluster_size_for(tiles, k_blocks, limits.sms, most);
  if (cluster < 2) return 0;
  static std::mutex mutex;
  static std::map<std::pair<int, int64_t>, int> resident;  // (device, cluster) -> clusters at once
  auto kernel = wg::sm90_fp8_gemm_wgmma_cluster<T, kTokens, kStagesC, kHalves>;
  static std::atomic<uint64_t> devices{0};
  allow_dynamic_shared(kernel, cluster_shared_bytes<kTokens, kStagesC>(most), devices, "sm90_fp8_gemm_wgmma_cluster");
  while (cluster >= 2) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = resident.find({device, cluster});
    if (it == resident.end()) {
      LaunchConfig launch(dim3(unsigned(cluster)), dim3(wg::kThreads), cluster_shared_bytes<kTokens, kStagesC>(cluster),
                          nullptr, unsigned(cluster));
      int count = 0;
      VT_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&count, kernel, &launch.config));
      it = resident.emplace(std::pair{device, cluster}, count).first;
    }
    if (it->second >= tiles) return cluster;
    cluster = wg::cluster_size_for(tiles, k_blocks, limits.sms, cluster - 1);
  }
  return 0;
}

template <typename T, int kTokens, int kStagesC>
void launch_cluster_tokens(void* y, int64_t ldy, const uint8_t* q, const float* a_scales, const uint8_t* w,
                           const float* w_scales, int64_t m, int64_t n, int64_t k, cudaStream_t stream,
                           const ::vt::trace::LaunchCost& cost) {
  const int64_t k_blocks = (k + wg::kBlockK - 1) / wg::kBlockK, tiles = (n + kTileRows - 1) / kTileRows;
  const int64_t cluster = cluster_for<T, kTokens, kStagesC>(tiles, k_blocks);
  VT_CHECK(cluster >= 2, "fp8 wgmma cluster GEMM: the cluster split does not serve ", m, " x ", n, " x ", k,
           " here (see fp8_gemm_wgmma_cluster_serves)");
  const CUtensorMap& weights = tensor_map(w, n, k, kTileRows);
  const CUtensorMap& activations = tensor_map(q, m, k, kTokens);
  launch_clusters("sm90_fp8_gemm_wgmma_cluster", cost, wg::sm90_fp8_gemm_wgmma_cluster<T, kTokens, kStagesC, kHalves>,
                  dim3(unsigned(tiles * cluster)), unsigned(cluster), dim3(wg::kThreads),
                  cluster_shared_bytes<kTokens, kStagesC>(cluster), stream, weights, activations, static_cast<T*>(y), ldy,
                  a_scales, w_scales, int(m), int(n), int(k));
}

// Calls run(kTokens, kStagesC) (integral constants) for the cluster kernel of `rows` rows: 8
// stages at M <= 16 (its 120 CTAs on a 40-tile matrix each need more bytes in flight than the
// persistent split's 132), 4 above, where the stages are larger.
template <typename Run>
void by_cluster_config(int64_t rows, Run&& run) {
  if (rows <= 8) run(std::integral_constant<int, 8>{}, std::integral_constant<int, 8>{});
  else if (rows <= 16) run(std::integral_constant<int, 16>{}, std::integral_constant<int, 8>{});
  else if (rows <= 32) run(std::integral_constant<int, 32>{}, std::integral_constant<int, 4>{});
  else run(std::integral_constant<int, 64>{}, std::integral_constant<int, 4>{});
}

// Calls run(integral_constant<kTokens>) for the smallest instruction width holding `rows`.
template <typename Run>
void by_tokens(int64_t rows, Run&& run) {
  if (rows <= 8) run(std::integral_constant<int, 8>{});
  else if (rows <= 16) run(std::integral_constant<int, 16>{});
  else if (rows <= 32) run(std::integral_constant<int, 32>{});
  else run(std::integral_constant<int, 64>{});
}

}  // namespace

void fp8_gemm_wgmma_prepare(cudaStream_t stream) { workspace(stream); }

void fp8_gemm_wgmma_release(cudaStream_t stream) {
  // By stream alone: a destructor may run with another device current (tensor-parallel ranks).
  std::lock_guard<std::mutex> lock(g_workspace_mutex);
  for (auto it = g_workspaces.begin(); it != g_workspaces.end();) {
    if (it->first.second != stream) {
      ++it;
      continue;
    }
    cudaFree(it->second.partials);  // a destructor's path: no throw
    cudaFree(it->second.deferred);
    it = g_workspaces.erase(it);
  }
}

int64_t fp8_gemm_wgmma_launches(int64_t m) { return (m + kMaxTokens - 1) / kMaxTokens; }

void fp8_gemm_wgmma(void* y, int64_t ldy, const uint8_t* q, const float* a_scales, const uint8_t* w,
                    const float* w_scales, int64_t m, int64_t n, int64_t k, DType act, cudaStream_t stream,
                    const std::function<::vt::trace::LaunchCost(int64_t rows)>& cost) {
  VT_CHECK(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX, "fp8 wgmma GEMM: ", m, " x ", n, " x ", k);
  const Workspace& space = workspace(stream);
  const int64_t k_blocks = (k + wg::kBlockK - 1) / wg::kBlockK, tiles = (n + kTileRows - 1) / kTileRows;
  const wg::Split split = wg::plan_split(tiles, k_blocks, space.sms, kReceiverSlack);
  const int64_t receive_units = split.receive_units;
  const int64_t ctas = receive_units == 0 && split.ctas == space.sms
                           ? std::min<int64_t>(tiles * k_blocks, int64_t(space.sms))
                           : split.ctas;
  const size_t element = dtype_size(act);
  for (int64_t m0 = 0; m0 < m; m0 += kMaxTokens) {
    const int64_t rows = std::min<int64_t>(kMaxTokens, m - m0);
    void* y_rows = static_cast<char*>(y) + size_t(m0 * ldy) * element;
    const uint8_t* q_rows = q + m0 * k;
    const float* scale_rows = a_scales + m0 * k_blocks;
    const auto run = [&](auto tokens) {
      constexpr int kTokens = decltype(tokens)::value;
      VT_DISPATCH_ACT(act, T,
                      launch_tokens<T, kTokens>(y_rows, ldy, q_rows, scale_rows, w, w_scales, rows, n, k, int(ctas),
                                                receive_units, space, stream, cost(rows)));
    };
    by_tokens(rows, run);
  }
}

namespace {

// The deferred sum's launch geometry for a call (no launch): CTAs and slots per tile; none where
// the slots would not fit the workspace or the consumer's 32-bit owner arithmetic would overflow.
struct PartialsPlan {
  int64_t ctas = 0, max_owners = 0;
};
PartialsPlan partials_plan(int64_t m, int64_t n, int64_t k, int sms) {
  if (m < 1 || m > kMaxTokens || n < 1 || k < 1 || k % 16 != 0 || n > INT32_MAX || k > INT32_MAX) return {};
  const int64_t k_blocks = (k + wg::kBlockK - 1) / wg::kBlockK, tiles = (n + kTileRows - 1) / kTileRows;
  const int64_t ctas = std::min<int64_t>(tiles * k_blocks, sms);
  const int64_t max_owners = wg::max_tile_owners(tiles, k_blocks, ctas);
  if (tiles * max_owners > int64_t(sms) * kDeferredSlots || tiles * k_blocks * ctas >= (int64_t(1) << 32)) return {};
  return {ctas, max_owners};
}

}  // namespace

bool fp8_gemm_wgmma_partials_serves(int64_t m, int64_t n, int64_t k) {
  return n % kTileRows == 0 && partials_plan(m, n, k, device_limits(current_device()).sms).ctas > 0;
}

GemmPartials fp8_gemm_wgmma_partials(const uint8_t* q, const float* a_scales, const uint8_t* w,
                                     const float* w_scales, int64_t m, int64_t n, int64_t k, cudaStream_t stream,
                                     const ::vt::trace::LaunchCost& cost) {
  const Workspace& space = workspace(stream);
  const PartialsPlan plan = partials_plan(m, n, k, space.sms);
  VT_CHECK(plan.ctas > 0 && n % kTileRows == 0, "fp8 wgmma GEMM: the deferred sum does not serve ", m, " x ", n,
           " x ", k, " (see fp8_gemm_wgmma_partials_serves)");
  const int64_t k_blocks = (k + wg::kBlockK - 1) / wg::kBlockK;
  by_tokens(m, [&](auto tokens) {
    constexpr int kTokens = decltype(tokens)::value;
    auto kernel = wg::sm90_fp8_gemm_wgmma_partials<kTokens, kStages, kHalves>;
    static std::atomic<uint64_t> devices{0};
    allow_dynamic_shared(kernel, shared_bytes<kTokens>(), devices, "sm90_fp8_gemm_wgmma_partials");
    launch("sm90_fp8_gemm_wgmma_partials", cost, kernel, dim3(unsigned(plan.ctas)), dim3(wg::kThreads),
           shared_bytes<kTokens>(), stream, tensor_map(w, n, k, kTileRows), tensor_map(q, m, k, kTokens), a_scales,
           w_scales, space.deferred, int(m), int(n), int(k), int(plan.max_owners));
  });
  GemmPartials out;
  out.words = space.deferred;
  out.rows = int32_t(m), out.n = int32_t(n), out.k_blocks = int32_t(k_blocks);
  out.ctas = int32_t(plan.ctas), out.max_owners = int32_t(plan.max_owners);
  return out;
}

bool fp8_gemm_wgmma_cluster_serves(int64_t m, int64_t n, int64_t k, DType act) {
  if (m < 1 || n < 1 || k < 1 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return false;
  const int64_t k_blocks = (k + wg::kBlockK - 1) / wg::kBlockK, tiles = (n + kTileRows - 1) / kTileRows;
  bool serves = true;
  // Every 64-row launch of the call must have a cluster size.
  for (int64_t m0 = 0; m0 < m && serves; m0 += kMaxTokens) {
    by_cluster_config(std::min<int64_t>(kMaxTokens, m - m0), [&](auto tokens, auto stages) {
      constexpr int kTokens = decltype(tokens)::value, kStagesC = decltype(stages)::value;
      VT_DISPATCH_ACT(act, T, serves = cluster_for<T, kTokens, kStagesC>(tiles, k_blocks) >= 2);
    });
  }
  return serves;
}

void fp8_gemm_wgmma_cluster(void* y, int64_t ldy, const uint8_t* q, const float* a_scales, const uint8_t* w,
                            const float* w_scales, int64_t m, int64_t n, int64_t k, DType act, cudaStream_t stream,
                            const std::function<::vt::trace::LaunchCost(int64_t rows)>& cost) {
  VT_CHECK(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX, "fp8 wgmma cluster GEMM: ", m, " x ", n, " x ", k);
  const int64_t k_blocks = (k + wg::kBlockK - 1) / wg::kBlockK;
  const size_t element = dtype_size(act);
  for (int64_t m0 = 0; m0 < m; m0 += kMaxTokens) {
    const int64_t rows = std::min<int64_t>(kMaxTokens, m - m0);
    void* y_rows = static_cast<char*>(y) + size_t(m0 * ldy) * element;
    by_cluster_config(rows, [&](auto tokens, auto stages) {
      constexpr int kTokens = decltype(tokens)::value, kStagesC = decltype(stages)::value;
      VT_DISPATCH_ACT(act, T,
                      (launch_cluster_tokens<T, kTokens, kStagesC>(y_rows, ldy, q + m0 * k, a_scales + m0 * k_blocks, w,
                                                                   w_scales, rows, n, k, stream, cost(rows))));
    });
  }
}

}  // namespace vt::cuda
