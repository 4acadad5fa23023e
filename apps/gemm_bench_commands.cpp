// `vt bench gemm`: every decode GEMM shape of a model (the merged projections as vt runs them) at
// M = 1..128, on each FP8 block-scaled backend that can serve it and on cuBLASLt BF16 (the dense
// peer), in one run: µs per GEMM, GB/s of weight bytes, % of the read bandwidth measured at
// start-up, the speedup over cuBLASLt BF16 and over cuBLASLt's FP8 block-scaled GEMM (the
// checkpoint's own format, its scales in its own layout; it refuses M = 1), each peer the fastest
// of cuBLASLt's heuristic candidates, and the fastest FP8 backend per (shape, M). Each
// timing is a CUDA graph of GEMMs cycling through enough weight copies that nothing is served from
// L2, each after the kernel that makes its FP8 activations and a stand-in of the op before it, as
// the GEMM registry tunes them (cuda::step_producer; their own time, measured alone, is taken off);
// CUPTI then checks that each backend's kernel ran as often as launched. Beside them, the floor at
// each size: a pure read of the same weight bytes, launched and timed the same way ("of read": that
// time over the GEMM's). The block output projections (o_proj, the GDN out_proj, the MLP down) feed
// a norm in the model: for them every FP8 backend is also timed with that norm after it
// (cuda::NormConsumer; the norm's own time after the producer taken off), beside wgmma_partials,
// whose sum the norm does ("+norm" rows; the registry chooses among those for these linears).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "apps/cli_lists.h"
#include "apps/commands.h"
#include "apps/gemm_bench.h"
#include "core/error.h"
#include "cuda/device.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/partials.h"
#include "ops/norm/norm.h"
#ifdef VT_WITH_CUDA
#include <cuda_runtime.h>

#include "cuda/check.h"
#include "cuda/device_buffer.h"
#include "ops/gemm/cublaslt_gemm.h"
#include "ops/gemm/registry.h"
#include "profile/kernel_recorder.h"
#include "runtime/qwen3_5_cuda.h"
#endif

namespace vt::apps {

#ifdef VT_WITH_CUDA
namespace {

std::string format_ratio(double ratio) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", ratio);
  return text;
}

struct GemmShape {
  std::string name;
  int64_t n, k;
  bool feeds_norm = false;  // its output goes straight into add_rms_norm (project_branch)
};

// The decode GEMMs of a Qwen3.5-family config as vt merges them (models/qwen3_5/cuda_weights.cpp).
std::vector<GemmShape> decode_shapes(const Qwen35Config& c) {
  std::vector<GemmShape> shapes;
  const int64_t h = c.hidden_size;
  shapes.push_back({"gdn.in_proj (qkv+z)", c.conv_dim() + c.linear_value_dim(), h});
  shapes.push_back({"gdn.out_proj", h, c.linear_value_dim(), true});
  shapes.push_back({"attn.qkv (q+gate+k+v)", c.num_heads * c.head_dim * 2 + 2 * c.num_kv_heads * c.head_dim, h});
  shapes.push_back({"attn.o_proj", h, c.num_heads * c.head_dim, true});
  if (c.num_experts == 0) {
    shapes.push_back({"mlp.gate_up", 2 * c.intermediate_size, h});
    shapes.push_back({"mlp.down", h, c.intermediate_size, true});
  } else {
    shapes.push_back({"shared.gate_up", 2 * c.shared_expert_intermediate_size, h});
    shapes.push_back({"shared.down", h, c.shared_expert_intermediate_size});
  }
  shapes.push_back({"lm_head", c.vocab_size, h});
  return shapes;
}


constexpr size_t kColdBytes = size_t(256) << 20;  // weight copies per timing: > 5x the H200's L2
// cuBLASLt's heuristic candidates timed per shape for the peers (their fastest is the peer).
constexpr int kPeerAlgorithms = 16;

struct Timing {
  double us = 0;
  int64_t kernels_ran = 0, kernels_expected = 0;
};

// Times `iters` calls of `call(copy)` (copy cycling over the weight copies) in a graph
// (cuda::time_in_graph), then counts `kernel` under CUPTI in one more launch of that graph.
template <typename Call>
Timing time_graph(cudaStream_t stream, int64_t iters, int64_t copies, const char* kernel, int64_t launches_per_call,
                  Call call) {
  cudaGraphExec_t exec;
  Timing timing;
  timing.us = cuda::time_in_graph(stream, iters, [&](int64_t i) { call(i % copies); }, &exec);
  if (kernel) {
    profile::KernelRecorder recorder;
    recorder.start();
    VT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    VT_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (const auto& record : recorder.stop())
      if (record.name.find(kernel) != std::string::npos) ++timing.kernels_ran;
    timing.kernels_expected = iters * launches_per_call;
  }
  cudaGraphExecDestroy(exec);
  return timing;
}

}  // namespace

void run_bench_gemm(const GemmBenchArgs& args) {
  VT_CHECK(cuda::device_count() > 0, "vt bench gemm needs a CUDA GPU");
  const Qwen35Config config = synthetic_config(args.synthetic);
  const std::vector<int64_t> ms = parse_int_list(args.m_list, "--m", 1, 4096);
  const int64_t max_m = *std::max_element(ms.begin(), ms.end());
  const double bandwidth = cuda::measure_read_bandwidth(size_t(4) << 30);
  cudaStream_t stream;
  VT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int device = 0, sms = 0;
  VT_CUDA_CHECK(cudaGetDevice(&device));
  VT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cuda::DeviceBuffer sink(DType::kF32, {1});
  cuda::CublasLtGemm cublas;
  nlohmann::json rows = nlohmann::json::array();
  int failures = 0;
  if (!args.json)
    std::printf("%s, read bandwidth %.0f GB/s; us per GEMM in a graph of %lld, weights cold (L2 cycled), each after "
                "the kernel that makes its activations and a %.0f us stand-in of the op before it (their time alone "
                "taken off); 'of read': the time of a pure "
                "read of the same weight codes launched the same way (read_floor) over the GEMM's; cuBLASLt "
                "peers: the fastest of up to %d of its heuristic's algorithms, FP8 with its scales in its own "
                "layout\n\n"
                "| shape | N x K | M | backend | us | GB/s | of bw | of read | x cuBLASLt bf16 | x cuBLASLt fp8 | kernel ran "
                "|\n|---|---|---|---|---|---|---|---|---|---|---|\n",
                args.synthetic.c_str(), bandwidth, (long long)args.iters, cuda::kStandInMicroseconds,
                kPeerAlgorithms);
  for (const GemmShape& shape : decode_shapes(config)) {
    const int64_t n = shape.n, k = shape.k, kb = (k + 127) / 128, nb = (n + 127) / 128;
    const size_t fp8_bytes = size_t(n * k) + size_t(nb * kb) * sizeof(float), bf16_bytes = size_t(n * k) * 2;
    const int64_t copies = std::max<int64_t>(2, int64_t(kColdBytes / bf16_bytes) + 1);
    std::vector<cuda::DeviceBuffer> weights, scales, dense;
    for (int64_t i = 0; i < copies; ++i) {
      weights.emplace_back(DType::kU8, Shape{n, k});
      scales.emplace_back(DType::kF32, Shape{nb, kb});
      dense.emplace_back(DType::kBF16, Shape{n, k});
      cuda::fill_random_fp8(weights.back().as<uint8_t>(), n * k, 10 + i, stream);
      cuda::fill_random(scales.back().data(), DType::kF32, nb * kb, 20 + i, 1e-3f, 2e-3f, stream);
      cuda::fill_random(dense.back().data(), DType::kBF16, n * k, 30 + i, 0.05f, 0.0f, stream);
    }
    cuda::DeviceBuffer x(DType::kBF16, {max_m, k}), codes(DType::kU8, {max_m, k}), x_scales(DType::kF32, {max_m, kb});
    cuda::DeviceBuffer y(DType::kBF16, {max_m, n}), scales_t(DType::kF32, {kb, max_m});
    cuda::fill_random(x.data(), DType::kBF16, max_m * k, 5, 1.0f, 0.0f, stream);
    cuda::fp8_quantize_rows(codes.as<uint8_t>(), x_scales.as<float>(), x.data(), max_m, k, DType::kBF16, stream);
    VT_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int64_t m : ms) {
      struct Result {
        std::string backend;
        Timing timing;
        size_t bytes;
        int algorithms = 0;  // cuBLASLt peers: candidates timed
      };
      std::vector<Result> results;
      // The producer of the activations and a stand-in of the op before it, before every GEMM (as
      // the registry times them, cuda::step_producer), and their time alone.
      const auto produce = [&] {
        cuda::step_producer(codes.as<uint8_t>(), x_scales.as<float>(), x.data(), m, k, DType::kBF16, sink.as<float>(),
                            stream);
      };
      const double producer_us = time_graph(stream, args.iters, copies, nullptr, 0, [&](int64_t) { produce(); }).us;
      cuda::Fp8GemmRegistry registry(max_m, k);
      for (cuda::GemmBackend backend : cuda::kAllGemmBackends) {
        if (!registry.supports(backend, m, n, k, n, DType::kBF16)) continue;
        // vt's kernels are counted by name; cuBLASLt's (names vary) through the scale transpose
        // vt launches in front of each of its calls.
        const bool cublas = backend == cuda::GemmBackend::kCublasLt;
        const char* kernel = cuda::gemm_backend_kernel(backend);
        const int64_t launches = cublas ? 1 : cuda::fp8_gemm_launches(cuda::kernel_backend(backend), m);
        registry.run(backend, y.data(), n, codes.as<uint8_t>(), x_scales.as<float>(), weights[0].as<uint8_t>(),
                     scales[0].as<float>(), m, n, k, DType::kBF16, stream);  // plans outside the capture
        Timing timing = time_graph(stream, args.iters, copies, kernel, launches, [&](int64_t copy) {
          produce();
          registry.run(backend, y.data(), n, codes.as<uint8_t>(), x_scales.as<float>(), weights[copy].as<uint8_t>(),
                       scales[copy].as<float>(), m, n, k, DType::kBF16, stream);
        });
        timing.us -= producer_us;
        results.push_back({std::string("fp8_") + cuda::gemm_backend_name(backend), timing, fp8_bytes});
      }
      // cuBLASLt as a peer at its best: each of its heuristic candidates timed as the rows above
      // are, the fastest kept (and left as the shape's plan for the rows after). Its kernels' names
      // vary: timed, not counted. Plans are made outside the capture.
      const auto fastest = [&](int candidates, const auto& choose, const auto& call) {
        Timing best;
        best.us = 1e30;
        int best_index = 0;
        for (int i = 0; i < candidates; ++i) {
          choose(i);
          call(0);
          const Timing t = time_graph(stream, args.iters, copies, nullptr, 0, [&](int64_t copy) {
            produce();
            call(copy);
          });
          if (t.us < best.us) best = t, best_index = i;
        }
        choose(best_index);
        best.us -= producer_us;
        return best;
      };
      const int bf16_algorithms = cublas.dense_candidates(m, n, k, DType::kBF16, kPeerAlgorithms);
      VT_CHECK(bf16_algorithms > 0, "cuBLASLt has no BF16 algorithm for ", m, " x ", n, " x ", k);
      const Timing bf16 = fastest(
          bf16_algorithms, [&](int i) { cublas.choose_dense(m, n, k, DType::kBF16, i); },
          [&](int64_t copy) { cublas.matmul(y.data(), x.data(), dense[copy].data(), m, n, k, DType::kBF16, stream); });
      results.push_back({"cublaslt_bf16", bf16, bf16_bytes, bf16_algorithms});
      // cuBLASLt's FP8 block-scaled GEMM, the checkpoint's format, with the activation scales in
      // its own layout (transposed once here, outside the timing; vt's fp8_cublaslt row pays that
      // transpose in every call, as the model does): the "x cuBLASLt fp8" column's peer.
      cuda::transpose_scales(scales_t.as<float>(), x_scales.as<float>(), m, kb, n, stream);
      const auto cublas_fp8_call = [&](int64_t copy) {
        cublas.matmul_fp8_block(y.data(), n, codes.as<uint8_t>(), scales_t.as<float>(), weights[copy].as<uint8_t>(),
                                scales[copy].as<float>(), m, n, k, DType::kBF16, stream);
      };
      const int fp8_algorithms = cublas.fp8_block_candidates(m, n, k, n, DType::kBF16, kPeerAlgorithms);
      if (fp8_algorithms > 0)
        results.push_back({"cublaslt_fp8",
                           fastest(
                               fp8_algorithms, [&](int i) { cublas.choose_fp8_block(m, n, k, n, DType::kBF16, i); },
                               cublas_fp8_call),
                           fp8_bytes, fp8_algorithms});
      // The floor at this size: a pure read of the same weight codes, launched and timed the same
      // way (after the producer, cold); the best of a few grid shapes.
      Timing floor;
      floor.us = 1e30;
      for (int64_t per_sm : {1, 2, 4, 8}) {
        const Timing t = time_graph(stream, args.iters, copies, "sm90_read_bytes", 1, [&](int64_t copy) {
          produce();
          cuda::read_bytes(weights[copy].data(), size_t(n * k) / 16 * 16, per_sm * sms, 512, sink.as<float>(), stream);
        });
        if (t.us - producer_us < floor.us) floor = t, floor.us = t.us - producer_us;
      }
      results.push_back({"read_floor", floor, size_t(n * k) / 16 * 16});
      // With the norm after it: the norm's time after the producer taken off.
      if (shape.feeds_norm) {
        cuda::NormConsumer norm(m, n, DType::kBF16, stream);
        const double norm_us = time_graph(stream, args.iters, copies, nullptr, 0, [&](int64_t) {
                                 produce();
                                 norm.run(y.data(), m, stream);
                               }).us;
        if (fp8_algorithms > 0) {  // the peer's fastest algorithm, the norm after it
          Timing peer = time_graph(stream, args.iters, copies, nullptr, 0, [&](int64_t copy) {
            produce();
            cublas_fp8_call(copy);
            norm.run(y.data(), m, stream);
          });
          peer.us -= norm_us;
          results.push_back({"cublaslt_fp8+norm", peer, fp8_bytes, fp8_algorithms});
        }
        for (cuda::GemmBackend backend : cuda::kAllGemmBackends) {
          const bool partials = backend == cuda::GemmBackend::kWgmmaPartials;
          if (partials ? !registry.supports_partials(m, n, k, DType::kBF16)
                       : !registry.supports(backend, m, n, k, n, DType::kBF16))
            continue;
          const auto call = [&](int64_t copy) {
            produce();
            if (partials) {
              const cuda::GemmPartials sum = registry.run_partials(codes.as<uint8_t>(), x_scales.as<float>(),
                                                                   weights[copy].as<uint8_t>(),
                                                                   scales[copy].as<float>(), m, n, k, stream);
              norm.run(&sum, m, stream);
              return;
            }
            registry.run(backend, y.data(), n, codes.as<uint8_t>(), x_scales.as<float>(), weights[copy].as<uint8_t>(),
                         scales[copy].as<float>(), m, n, k, DType::kBF16, stream);
            norm.run(y.data(), m, stream);
          };
          call(0);  // plans outside the capture
          const bool cublas = backend == cuda::GemmBackend::kCublasLt;
          const int64_t launches =
              cublas || partials ? 1 : cuda::fp8_gemm_launches(cuda::kernel_backend(backend), m);
          Timing timing = time_graph(stream, args.iters, copies, cuda::gemm_backend_kernel(backend), launches, call);
          timing.us -= norm_us;
          results.push_back({std::string("fp8_") + cuda::gemm_backend_name(backend) + "+norm", timing, fp8_bytes});
          if (partials) {  // its GEMM alone (no sum anywhere): what the norm's extra reading is measured against
            Timing alone = time_graph(stream, args.iters, copies, cuda::gemm_backend_kernel(backend), 1,
                                      [&](int64_t copy) {
                                        produce();
                                        registry.run_partials(codes.as<uint8_t>(), x_scales.as<float>(),
                                                              weights[copy].as<uint8_t>(), scales[copy].as<float>(),
                                                              m, n, k, stream);
                                      });
            alone.us -= producer_us;
            results.push_back({"wgmma_partials_alone", alone, fp8_bytes});
          }
        }
      }
      // The fastest FP8 backend, alone and (for these shapes) with the norm; cuBLASLt's block-scaled
      // GEMM at its best (the checkpoint's own format) alone and with the norm, the peer of the
      // "x cuBLASLt fp8" column (0 where it refuses the size: M = 1).
      const auto with_norm = [](const std::string& backend) {
        return backend.size() > 5 && backend.compare(backend.size() - 5, 5, "+norm") == 0;
      };
      const std::string cublas_fp8 = "cublaslt_fp8";
      std::string best, best_norm;
      double best_us = 1e30, best_norm_us = 1e30, cublas_fp8_us = 0, cublas_fp8_norm_us = 0;
      for (const auto& r : results) {
        if (r.backend == cublas_fp8) cublas_fp8_us = r.timing.us;
        if (r.backend == cublas_fp8 + "+norm") cublas_fp8_norm_us = r.timing.us;
        if (r.backend.rfind("fp8_", 0) != 0) continue;
        if (!with_norm(r.backend) && r.timing.us < best_us) best_us = r.timing.us, best = r.backend;
        if (with_norm(r.backend) && r.timing.us < best_norm_us) best_norm_us = r.timing.us, best_norm = r.backend;
      }
      for (const auto& r : results) {
        const double gbps = double(r.bytes) / (r.timing.us * 1e3);
        const bool ran = r.timing.kernels_expected == 0 || r.timing.kernels_ran == r.timing.kernels_expected;
        if (!ran) ++failures;
        const bool chosen = r.backend == best || r.backend == best_norm;
        const std::string name = r.backend + (chosen ? " *" : "");
        const double peer_us = with_norm(r.backend) ? cublas_fp8_norm_us : cublas_fp8_us;
        const double vs_fp8 = peer_us > 0 ? peer_us / r.timing.us : 0;
        if (!args.json)
          std::printf("| %s | %lld x %lld | %lld | %s | %.1f | %.0f | %.0f%% | %.0f%% | %.2f | %s | %s |\n",
                      shape.name.c_str(), (long long)n, (long long)k, (long long)m, name.c_str(), r.timing.us, gbps,
                      100.0 * gbps / bandwidth, 100.0 * floor.us / r.timing.us, bf16.us / r.timing.us,
                      vs_fp8 > 0 ? format_ratio(vs_fp8).c_str() : "-",
                      r.timing.kernels_expected == 0
                          ? "(not counted)"
                          : (std::to_string(r.timing.kernels_ran) + "/" + std::to_string(r.timing.kernels_expected)).c_str());
        rows.push_back({{"shape", shape.name}, {"n", n}, {"k", k}, {"m", m}, {"backend", r.backend},
                        {"chosen", chosen}, {"us", r.timing.us}, {"gbps", gbps},
                        {"bandwidth_fraction", gbps / bandwidth}, {"read_floor_fraction", floor.us / r.timing.us},
                        {"speedup_vs_cublaslt_bf16", bf16.us / r.timing.us},
                        {"speedup_vs_cublaslt_fp8", vs_fp8 > 0 ? nlohmann::json(vs_fp8) : nlohmann::json(nullptr)},
                        {"kernels_ran", r.timing.kernels_ran}, {"kernels_expected", r.timing.kernels_expected},
                        {"algorithms", r.algorithms}});
      }
    }
    std::fflush(stdout);
  }
  cudaStreamDestroy(stream);
  if (args.json)
    std::cout << nlohmann::json{{"model", args.synthetic}, {"bandwidth_gbps", bandwidth}, {"iters", args.iters},
                                {"rows", rows}}.dump(1)
              << "\n";
  VT_CHECK(failures == 0, failures, " timings whose kernel did not run as often as launched (see 'kernel ran')");
}
#else
void run_bench_gemm(const GemmBenchArgs&) {
  VT_FAIL("vt bench gemm needs a CUDA build (this vt was built without CUDA)");
}
#endif

void add_gemm_bench_options(CLI::App* command, GemmBenchArgs& args) {
  command->add_option("--synthetic", args.synthetic, "qwen3.5-27b | qwen3.5-35b-a3b | qwen3-next-80b")->capture_default_str();
  command->add_option("--m", args.m_list, "rows (tokens) per GEMM, comma-separated")->capture_default_str();
  command->add_option("--iters", args.iters, "GEMMs per timed graph")->check(CLI::Range(4, 1000))->capture_default_str();
  command->add_flag("--json", args.json, "machine-readable output");
}

void add_gemm_bench_commands(CLI::App& app) {
  auto* bench = app.get_subcommand("bench");
  auto args = std::make_shared<GemmBenchArgs>();
  auto* gemm = bench->add_subcommand("gemm", "FP8 block-scaled GEMM backends vs cuBLASLt BF16 on a model's decode shapes "
                                             "(the same as `vt bench op gemm`)");
  add_gemm_bench_options(gemm, *args);
  gemm->callback([args] { run_bench_gemm(*args); });
}

}  // namespace vt::apps
