#include "ops/gemm/registry.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "core/version.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/partials.h"
#include "ops/norm/norm.h"

namespace vt::cuda {
namespace {

// cuBLASLt's padded path runs m rows as this many.
int64_t padded_rows(int64_t m) { return (m + 15) / 16 * 16; }

constexpr int64_t kTuneCalls = 24;     // GEMMs per timed graph
constexpr int64_t kTuneInstances = 16;  // weight instances cycled (cold reads)


std::string cache_path() {
  if (const char* dir = std::getenv("VT_CACHE_DIR")) return std::string(dir) + "/gemm_plan.json";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME")) return std::string(xdg) + "/vt/gemm_plan.json";
  if (const char* home = std::getenv("HOME")) return std::string(home) + "/.cache/vt/gemm_plan.json";
  return "";
}

std::string device_name() {
  int device = 0;
  cudaDeviceProp properties{};
  VT_CUDA_CHECK(cudaGetDevice(&device));
  VT_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return properties.name;
}

}  // namespace

Fp8GemmBackend kernel_backend(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::kGemv: return Fp8GemmBackend::kGemv;
    case GemmBackend::kGemvSplitK: return Fp8GemmBackend::kGemvSplitK;
    case GemmBackend::kMma: return Fp8GemmBackend::kMma;
    case GemmBackend::kWgmma: return Fp8GemmBackend::kWgmma;
    case GemmBackend::kWgmmaCluster: return Fp8GemmBackend::kWgmmaCluster;
    default: VT_FAIL("not a vt kernel backend writing y: ", gemm_backend_name(backend));
  }
}

const char* gemm_backend_kernel(GemmBackend backend) {
  if (backend == GemmBackend::kCublasLt) return "sm90_transpose_scales";
  if (backend == GemmBackend::kWgmmaPartials) return "sm90_fp8_gemm_wgmma_partials";
  return fp8_gemm_kernel_name(kernel_backend(backend));
}

const char* gemm_backend_name(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::kGemv: return "gemv";
    case GemmBackend::kGemvSplitK: return "gemv_splitk";
    case GemmBackend::kMma: return "mma";
    case GemmBackend::kWgmma: return "wgmma";
    case GemmBackend::kWgmmaCluster: return "wgmma_cluster";
    case GemmBackend::kCublasLt: return "cublaslt";
    case GemmBackend::kWgmmaPartials: return "wgmma_partials";
  }
  return "?";
}

std::optional<GemmBackend> parse_gemm_backend(const std::string& name) {
  for (GemmBackend backend : kAllGemmBackends)
    if (name == gemm_backend_name(backend)) return backend;
  return std::nullopt;
}

namespace {

// "gemv, gemv_splitk, ... or cublaslt": what the environment's backend names may be.
std::string gemm_backend_names() {
  std::string names;
  for (size_t i = 0; i < std::size(kAllGemmBackends); ++i)
    names += std::string(i == 0 ? "" : i + 1 == std::size(kAllGemmBackends) ? " or " : ", ") +
             gemm_backend_name(kAllGemmBackends[i]);
  return names;
}

}  // namespace

double time_in_graph(cudaStream_t stream, int64_t calls, const std::function<void(int64_t)>& call,
                     cudaGraphExec_t* exec_out) {
  cudaGraph_t graph;
  VT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int64_t i = 0; i < calls; ++i) call(i);
  VT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  VT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaGraphDestroy(graph);
  cudaEvent_t start, stop;
  VT_CUDA_CHECK(cudaEventCreate(&start));
  VT_CUDA_CHECK(cudaEventCreate(&stop));
  VT_CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm
  VT_CUDA_CHECK(cudaEventRecord(start, stream));
  VT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  VT_CUDA_CHECK(cudaEventRecord(stop, stream));
  VT_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  VT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (exec_out) *exec_out = exec;
  else cudaGraphExecDestroy(exec);
  return 1000.0 * ms / double(calls);
}

NormConsumer::NormConsumer(int64_t max_m, int64_t n, DType act, cudaStream_t stream)
    : n_(n),
      act_(act),
      residual_(act, {max_m, n}),
      out_(act, {max_m, n}),
      weight_(DType::kF32, {n}),
      codes_(DType::kU8, {max_m, n}),
      scales_(DType::kF32, {max_m, (n + 127) / 128}) {
  fill_random(residual_.data(), act, max_m * n, 91, 1.0f, 0.0f, stream);
  fill_random(weight_.data(), DType::kF32, n, 92, 0.1f, 1.0f, stream);
}

void NormConsumer::run(Branch branch, int64_t m, cudaStream_t stream) {
  const bool q = n_ % 128 == 0;
  add_rms_norm(out_.data(), residual_.data(), branch, weight_.as<float>(), m, n_, 1e-6f, 0.0f, act_, stream,
               q ? codes_.as<uint8_t>() : nullptr, q ? scales_.as<float>() : nullptr);
}

void step_producer(uint8_t* codes, float* scales, const void* input, int64_t m, int64_t k, DType act, float* sink,
                   cudaStream_t stream) {
  fp8_quantize_rows(codes, scales, input, m, k, act, stream);
  stand_in_kernel(kStandInMicroseconds, sink, stream);
}

int64_t gemm_bucket(int64_t m) {
  for (int64_t bound : kGemmBuckets)
    if (m <= bound) return bound;
  return kGemmBuckets[std::size(kGemmBuckets) - 1];
}

Fp8GemmRegistry::Fp8GemmRegistry(int64_t max_m, int64_t max_k, const std::vector<std::string>& excluded,
                                 int64_t max_n)
    : scales_t_(DType::kF32, {std::max<int64_t>(1, (max_k + 127) / 128 * padded_rows(max_m))}),
      max_m_(max_m),
      max_k_(max_k),
      max_n_(max_n) {
  if (max_n_ > 0) {
    // Zeroed once: the pad rows then only ever hold finite codes and scales (a pad row's output
    // is not read, and no row's output depends on another's).
    padded_a_ = DeviceBuffer(DType::kU8, {padded_rows(max_m) * max_k}, "cuBLASLt padded rows");
    padded_y_ = DeviceBuffer(DType::kF32, {padded_rows(max_m) * max_n}, "cuBLASLt padded output");
    VT_CUDA_CHECK(cudaMemset(padded_a_.data(), 0, padded_a_.bytes()));
    VT_CUDA_CHECK(cudaMemset(scales_t_.data(), 0, scales_t_.bytes()));
  }
  if (const char* name = std::getenv("VT_GEMM_BACKEND")) {
    forced_ = parse_gemm_backend(name);
    VT_CHECK(forced_, "VT_GEMM_BACKEND='", name, "': expected ", gemm_backend_names());
  }
  for (const std::string& item : excluded) {
    const auto backend = parse_gemm_backend(item);
    VT_CHECK(backend, "excluded GEMM backend '", item, "': expected ", gemm_backend_names());
    VT_CHECK(!forced_ || *forced_ != *backend, "the tuning leaves out ", item, ", which VT_GEMM_BACKEND forces");
    excluded_.push_back(*backend);
    excluded_key_ += (excluded_key_.empty() ? "|without " : ",") + item;
  }
}

bool Fp8GemmRegistry::excluded(GemmBackend backend) const {
  return std::find(excluded_.begin(), excluded_.end(), backend) != excluded_.end();
}

bool Fp8GemmRegistry::supports(GemmBackend backend, int64_t m, int64_t n, int64_t k, int64_t ldy, DType act) {
  if (m < 1 || k % 16 != 0) return false;
  switch (backend) {
    case GemmBackend::kGemv:
    case GemmBackend::kGemvSplitK: return m == 1;
    case GemmBackend::kMma:
    case GemmBackend::kWgmma: return true;
    case GemmBackend::kWgmmaCluster: return fp8_gemm_wgmma_cluster_serves(m, n, k, act);
    case GemmBackend::kCublasLt: return cublaslt_rows(m, n, k, ldy, act) > 0;
    case GemmBackend::kWgmmaPartials: return false;  // no y: run_partials
  }
  return false;
}

bool Fp8GemmRegistry::supports_partials(int64_t m, int64_t n, int64_t k, DType act) {
  return !excluded(GemmBackend::kWgmmaPartials) && (act == DType::kBF16 || act == DType::kF16 || act == DType::kF32) &&
         k % 16 == 0 && fp8_gemm_wgmma_partials_serves(m, n, k);
}

GemmPartials Fp8GemmRegistry::run_partials(const uint8_t* q, const float* a_scales, const uint8_t* w,
                                           const float* w_scales, int64_t m, int64_t n, int64_t k,
                                           cudaStream_t stream) {
  return fp8_block_gemm_partials(q, a_scales, w, w_scales, m, n, k, stream);
}

void Fp8GemmRegistry::run(GemmBackend backend, void* y, int64_t ldy, const uint8_t* q, const float* a_scales,
                          const uint8_t* w, const float* w_scales, int64_t m, int64_t n, int64_t k, DType act,
                          cudaStream_t stream) {
  if (backend != GemmBackend::kCublasLt) {
    fp8_block_gemm(y, ldy, q, a_scales, w, w_scales, m, n, k, act, stream, kernel_backend(backend));
    return;
  }
  VT_CHECK(m <= max_m_ && k <= max_k_, "cuBLASLt FP8 GEMM of ", m, " x ", k, " beyond the registry's scratch");
  const int64_t padded = padded_rows(m);
  if (!cublas_.supports_fp8_block(m, n, k, ldy, act) && n <= max_n_ &&
      cublas_.supports_fp8_block(padded, n, k, n, act)) {
    const size_t out_row = size_t(n) * dtype_size(act);
    VT_CUDA_CHECK(cudaMemcpyAsync(padded_a_.data(), q, size_t(m * k), cudaMemcpyDeviceToDevice, stream));
    transpose_scales(scales_t_.as<float>(), a_scales, m, k / 128, n, stream, padded);
    cublas_.matmul_fp8_block(padded_y_.data(), n, padded_a_.as<uint8_t>(), scales_t_.as<float>(), w, w_scales, padded,
                             n, k, act, stream);
    VT_CUDA_CHECK(cudaMemcpy2DAsync(y, size_t(ldy) * dtype_size(act), padded_y_.data(), out_row, out_row, size_t(m),
                                    cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const int64_t head = cublaslt_rows(m, n, k, ldy, act);
  VT_CHECK(head > 0, "cuBLASLt has no FP8 block-scaled algorithm for ", m, " x ", n, " x ", k);
  transpose_scales(scales_t_.as<float>(), a_scales, head, k / 128, n, stream);
  cublas_.matmul_fp8_block(y, ldy, q, scales_t_.as<float>(), w, w_scales, head, n, k, act, stream);
  if (head == m) return;
  const int64_t tail = m - head;
  run(choose(tail, n, k, ldy, act), static_cast<char*>(y) + size_t(head * ldy) * dtype_size(act), ldy, q + head * k,
      a_scales + head * (k / 128), w, w_scales, tail, n, k, act, stream);
}

int64_t Fp8GemmRegistry::cublaslt_rows(int64_t m, int64_t n, int64_t k, int64_t ldy, DType act) {
  if (m < 1 || m > max_m_ || k > max_k_) return 0;
  if (cublas_.supports_fp8_block(m, n, k, ldy, act)) return m;
  if (n <= max_n_ && cublas_.supports_fp8_block(padded_rows(m), n, k, n, act)) return m;
  const int64_t head = m / 16 * 16;
  return head > 0 && cublas_.supports_fp8_block(head, n, k, ldy, act) ? head : 0;
}

GemmBackend Fp8GemmRegistry::choose(int64_t m, int64_t n, int64_t k, int64_t ldy, DType act) {
  // Refused at start-up where it cannot serve; wgmma_partials forced: the same kernel writing y
  // where the output is not for a norm.
  if (forced_) return *forced_ == GemmBackend::kWgmmaPartials ? GemmBackend::kWgmma : *forced_;
  // The bucket's measured choice serves its largest M; a smaller m it cannot serve (cuBLASLt at
  // M = 1, say) takes the built-in rule.
  auto it = table_.find({n, k, gemm_bucket(m)});
  if (it != table_.end() && supports(it->second, m, n, k, ldy, act)) return it->second;
  return m == 1 ? GemmBackend::kGemv : GemmBackend::kMma;
}

GemmBackend Fp8GemmRegistry::choose_for_norm(int64_t m, int64_t n, int64_t k, DType act) {
  if (forced_ == GemmBackend::kWgmmaPartials && supports_partials(m, n, k, act)) return GemmBackend::kWgmmaPartials;
  if (!forced_) {
    auto it = norm_table_.find({n, k, gemm_bucket(m)});
    if (it != norm_table_.end() &&
        (it->second == GemmBackend::kWgmmaPartials ? supports_partials(m, n, k, act)
                                                   : supports(it->second, m, n, k, n, act)))
      return it->second;
  }
  return choose(m, n, k, n, act);
}

std::string Fp8GemmRegistry::tune(const std::vector<GemmTuneShape>& shapes, int64_t max_m, DType act,
                                  cudaStream_t stream) {
  std::ostringstream log;
  const std::string path = cache_path(), device = device_name();
  nlohmann::json cache = nlohmann::json::object();
  if (!path.empty() && std::filesystem::exists(path)) {
    try {
      std::ifstream in(path);
      cache = nlohmann::json::parse(in);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "vt: ignoring the unreadable GEMM plan cache %s (%s)\n", path.c_str(), error.what());
      cache = nlohmann::json::object();
    }
  }
  bool cache_changed = false;
  int64_t widest_n = 0, widest_k = 0;
  for (const auto& shape : shapes) widest_n = std::max(widest_n, shape.n), widest_k = std::max(widest_k, shape.k);
  DeviceBuffer input, codes, scales, y, sink;  // made on the first measurement
  log << "FP8 GEMM backends (" << device << ", " << dtype_name(act) << "; us per GEMM, weights cycled over layers):\n";
  for (const auto& shape : shapes) {
    if (shape.weights.empty()) continue;
    const std::string key = device + "|" + kVersion + "|" + std::string(dtype_name(act)) + "|" +
                            std::to_string(shape.n) + "x" + std::to_string(shape.k) + "|after quantize+stand-in" +
                            (shape.feeds_norm ? "|before its norm" : "") + excluded_key_;
    log << "  " << shape.n << " x " << shape.k << (shape.feeds_norm ? " (with its norm)" : "") << ":";
    for (int64_t bucket : kGemmBuckets) {
      if (bucket > max_m && bucket != gemm_bucket(max_m)) break;
      const int64_t m = std::min(bucket, std::max<int64_t>(max_m, 1));
      const std::string bucket_key = std::to_string(bucket);
      GemmBackend best = GemmBackend::kMma, norm_best = GemmBackend::kMma;
      double best_us = -1, norm_best_us = -1;
      if (cache.contains(key) && cache[key].contains(bucket_key)) {
        const auto& entry = cache[key][bucket_key];
        const auto parsed = parse_gemm_backend(entry.value("backend", ""));
        const auto norm_parsed = parse_gemm_backend(entry.value("norm_backend", ""));
        const bool norm_ok = !shape.feeds_norm ||
                             (norm_parsed && (*norm_parsed == GemmBackend::kWgmmaPartials
                                                  ? supports_partials(m, shape.n, shape.k, act)
                                                  : supports(*norm_parsed, m, shape.n, shape.k, shape.n, act)));
        if (parsed && supports(*parsed, m, shape.n, shape.k, shape.n, act) && norm_ok) {
          best = *parsed, best_us = entry.value("us", 0.0);
          if (shape.feeds_norm) norm_best = *norm_parsed, norm_best_us = entry.value("norm_us", 0.0);
        }
      }
      if (best_us < 0) {
        if (!codes.data()) {
          input = DeviceBuffer(act, {max_m, widest_k});
          codes = DeviceBuffer(DType::kU8, {max_m, widest_k});
          scales = DeviceBuffer(DType::kF32, {max_m, (widest_k + 127) / 128});
          y = DeviceBuffer(act, {max_m, widest_n});
          sink = DeviceBuffer(DType::kF32, {1});
          fill_random(input.data(), act, input.shape().numel(), 77, 1.0f, 0.0f, stream);
        }
        // Each GEMM runs after the kernels that stand for its producer in a decode step
        // (step_producer): alone, back to back, the CUDA-core GEMVs and the wgmma kernel overlap
        // differently with their neighbours than in the model, so the ranking alone can be the wrong
        // one in the step. The producer's own time is measured and taken off.
        // A shape that feeds a norm is timed with the norm after it (the norm's own time, after the
        // producer, taken off), where kWgmmaPartials competes: its sum moves into the norm.
        std::optional<NormConsumer> norm;
        if (shape.feeds_norm) norm.emplace(m, shape.n, act, stream);
        const auto quantize = [&] {
          step_producer(codes.as<uint8_t>(), scales.as<float>(), input.data(), m, shape.k, act, sink.as<float>(),
                        stream);
        };
        const auto baseline = [&] {
          quantize();
          if (norm) norm->run(y.data(), m, stream);
        };
        baseline();
        VT_CUDA_CHECK(cudaStreamSynchronize(stream));
        const double producer_us = time_in_graph(stream, kTuneCalls, [&](int64_t) { baseline(); });
        const int64_t instances = std::min<int64_t>(kTuneInstances, int64_t(shape.weights.size()));
        for (GemmBackend backend : kAllGemmBackends) {
          const bool partials = backend == GemmBackend::kWgmmaPartials;
          if (excluded(backend) || (partials && !(norm && supports_partials(m, shape.n, shape.k, act))) ||
              (!partials && !supports(backend, m, shape.n, shape.k, shape.n, act)))
            continue;
          auto call = [&](int64_t i) {
            const auto& [w, w_scales] = shape.weights[size_t(i % instances)];
            quantize();
            if (partials) {
              const GemmPartials sum =
                  run_partials(codes.as<uint8_t>(), scales.as<float>(), w, w_scales, m, shape.n, shape.k, stream);
              norm->run(&sum, m, stream);
              return;
            }
            run(backend, y.data(), shape.n, codes.as<uint8_t>(), scales.as<float>(), w, w_scales, m, shape.n,
                shape.k, act, stream);
            if (norm) norm->run(y.data(), m, stream);
          };
          call(0);  // plans and lazy loads outside the capture
          VT_CUDA_CHECK(cudaStreamSynchronize(stream));
          const double us = time_in_graph(stream, kTuneCalls, call) - producer_us;
          if (!partials && (best_us < 0 || us < best_us)) best = backend, best_us = us;
          if (norm_best_us < 0 || us < norm_best_us) norm_best = backend, norm_best_us = us;
        }
        cache[key][bucket_key] = {{"backend", gemm_backend_name(best)}, {"us", best_us}};
        if (shape.feeds_norm) {
          cache[key][bucket_key]["norm_backend"] = gemm_backend_name(norm_best);
          cache[key][bucket_key]["norm_us"] = norm_best_us;
        }
        cache_changed = true;
      }
      table_[{shape.n, shape.k, bucket}] = best;
      measured_us_[{shape.n, shape.k, bucket}] = best_us;
      if (shape.feeds_norm) norm_table_[{shape.n, shape.k, bucket}] = norm_best;
      char cell[96];
      if (shape.feeds_norm && norm_best != best)
        std::snprintf(cell, sizeof cell, " M<=%lld %s %.1f (else %s %.1f)", (long long)bucket,
                      gemm_backend_name(norm_best), norm_best_us, gemm_backend_name(best), best_us);
      else
        std::snprintf(cell, sizeof cell, " M<=%lld %s %.1f", (long long)bucket, gemm_backend_name(best), best_us);
      log << cell;
    }
    log << "\n";
  }
  if (cache_changed && !path.empty()) {
    std::error_code error;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), error);
    // Written aside and renamed: tensor-parallel ranks tune at once, and a reader never sees half a file.
    std::ostringstream unique;
    unique << path << ".tmp." << getpid() << "." << std::this_thread::get_id();
    const std::string temporary = unique.str();
    {
      std::ofstream out(temporary);
      if (out) out << cache.dump(1) << "\n";
      if (!out) std::fprintf(stderr, "vt: could not write the GEMM plan cache %s\n", temporary.c_str());
    }
    std::filesystem::rename(temporary, path, error);
    if (error) std::filesystem::remove(temporary, error);
  }
  if (forced_) log << "  forced backend " << gemm_backend_name(*forced_) << " (environment) overrides this table\n";
  if (!excluded_.empty()) log << "  tuned" << excluded_key_ << "\n";
  return log.str();
}

}  // namespace vt::cuda
