// `vt bench op <name>`: one op's CUDA kernels on a synthetic model's real shapes at a few row
// counts (decode tokens), each timed as a decode step runs it: `--iters` launches back to back in
// one CUDA graph (PDL between them), inputs that the step reads from DRAM (weights, caches,
// states, logits, the embedding table) cycled over enough copies that L2 does not serve them.
// Bytes are what the launchers record in their intents (trace::LaunchCost), summed over one
// call; GB/s against the read bandwidth measured at start-up (cuda::measure_read_bandwidth, the
// floor); "of read": a pure read of the same byte count launched the same way (cuda::read_bytes,
// cold) over the op's time. CUPTI then checks that every intended kernel ran as often as launched
// (profile::kernel_gate_failure). `vt bench op gemm` is `vt bench gemm` (apps/gemm_bench.h).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "apps/cli_lists.h"
#include "apps/commands.h"
#include "apps/gemm_bench.h"
#include "core/error.h"
#ifdef VT_WITH_CUDA
#include <cuda_runtime.h>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "ops/activation/activation.h"
#include "ops/attention/attention.h"
#include "ops/embedding/embedding.h"
#include "ops/gdn/gdn.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/registry.h"
#include "ops/moe/moe.h"
#include "ops/norm/norm.h"
#include "ops/sampling/device_sampling.h"
#include "ops/sampling/sampling.h"
#include "ops/step_layout.h"
#include "profile/kernel_gate.h"
#include "profile/kernel_recorder.h"
#include "runtime/qwen3_5_cuda.h"
#include "trace/intent.h"
#endif

namespace vt::apps {
namespace {

// The ops `vt bench op` times besides gemm, with what each times; "all" runs each in turn (moe
// only on MoE models).
const std::vector<std::pair<std::string, std::string>> kOps = {
    {"norm", "add_rms_norm with the residual, with and without the fused FP8 codes"},
    {"activation", "silu_mul (MLP, experts, shared expert), with and without the fused FP8 codes"},
    {"embedding", "the token embedding gather"},
    {"attention", "attention_prepare and paged decode attention over --context keys"},
    {"gdn", "the Gated DeltaNet decode step: causal conv, recurrent core"},
    {"moe", "route, expert GEMVs, SwiGLU, combine (FP8 experts; default model qwen3.5-35b-a3b)"},
    {"sampling", "argmax and sample_rows (top-p, top-k + top-p) over the vocabulary"},
};
const std::vector<std::string> kSynthetic = {"qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3-next-80b"};

struct OpBenchArgs {
  std::string op, synthetic = "qwen3.5-27b", m_list = "1,8,16,32";
  int64_t context = 4096, iters = 200;
  bool json = false;
};

// What can be checked without a GPU, so a bad command line fails the same way everywhere.
std::vector<int64_t> checked_rows(const OpBenchArgs& args) {
  VT_CHECK(std::find(kSynthetic.begin(), kSynthetic.end(), args.synthetic) != kSynthetic.end(),
           "--synthetic: '", args.synthetic,
           "' is not one of qwen3.5-27b, qwen3.5-35b-a3b, qwen3-next-80b");
  VT_CHECK(args.context >= 1 && args.context <= 262144, "--context: ", args.context,
           " out of range [1, 262144]");
  return parse_int_list(args.m_list, "--m", 1, 1024);
}

#ifdef VT_WITH_CUDA
constexpr size_t kColdBytes = size_t(256) << 20;  // > 5x the H200's L2: copies cycled per timing
constexpr int64_t kAttentionSplitKeys =
    32;  // as the model splits keys (models/qwen3_5/cuda_model.cpp)

// Copies of `bytes` that together exceed L2 (at least 2).
int64_t cold_copies(double bytes) {
  return std::max<int64_t>(2, int64_t(double(kColdBytes) / std::max(bytes, 1.0)) + 1);
}

struct Row {
  std::string op, variant, shape, kernels, gate_failure;
  int64_t rows = 0;
  double us = 0, bytes = 0, read_us = 0;
};

class OpBench {
 public:
  OpBench(const OpBenchArgs& args, const Qwen35Config& config) : args_(args), config_(config) {
    VT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    int device = 0;
    VT_CUDA_CHECK(cudaGetDevice(&device));
    VT_CUDA_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device));
    bandwidth_ = cuda::measure_read_bandwidth(size_t(4) << 30);
  }
  ~OpBench() { cudaStreamDestroy(stream_); }
  OpBench(const OpBench&) = delete;
  OpBench& operator=(const OpBench&) = delete;

  cudaStream_t stream() const { return stream_; }
  const Qwen35Config& config() const { return config_; }
  const OpBenchArgs& args() const { return args_; }
  double bandwidth() const { return bandwidth_; }
  const std::vector<Row>& rows() const { return rows_; }

  // Times `iters` calls of call(copy) (copy cycling over `copies`) in one graph; bytes and kernels
  // from the intents of one call; the kernel-ran gate over one more launch of the graph.
  void measure(const std::string& op, const std::string& variant, int64_t rows,
               const std::string& shape, int64_t copies, const std::function<void(int64_t)>& call) {
    call(0);  // module loads and lazy set-up outside the capture
    VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    trace::begin_intents();
    call(0);
    const std::vector<trace::Intent> intents = trace::end_intent_records();
    VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    Row row{op, variant, shape, "", "", rows};
    std::set<std::string> kernels;
    for (const trace::Intent& intent : intents) {
      if (!intent.optional) row.bytes += intent.bytes;
      kernels.insert(intent.kernel);
    }
    for (const std::string& kernel : kernels)
      row.kernels += (row.kernels.empty() ? "" : " ") + kernel;
    cudaGraphExec_t exec;
    row.us = cuda::time_in_graph(
        stream_, args_.iters, [&](int64_t i) { call(i % copies); }, &exec);
    profile::KernelRecorder recorder;
    recorder.start();
    VT_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
    VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    row.gate_failure = profile::kernel_gate_failure(intents, recorder.stop(), args_.iters);
    cudaGraphExecDestroy(exec);
    row.read_us = read_floor_us(row.bytes);
    rows_.push_back(row);
    if (!args_.json) print(row);
  }

  void print_header() const {
    std::printf(
        "%s, read bandwidth %.0f GB/s; us per call in a graph of %lld calls, DRAM inputs cycled "
        "over copies "
        "(cold); bytes from the launchers' intents; 'of read': a pure read of the same bytes "
        "(read_bytes, "
        "cold) over the op's time\n\n"
        "| op | variant | rows | shape | us | bytes | GB/s | of bw | of read | kernels | kernel "
        "ran |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n",
        args_.synthetic.c_str(), bandwidth_, (long long)args_.iters);
  }

 private:
  // The best of a few grid shapes of a cold pure read of `bytes` (16-byte multiple).
  double read_floor_us(double bytes) {
    const size_t size = std::max<size_t>(16, size_t(bytes) / 16 * 16);
    const int64_t copies = cold_copies(double(size));
    cuda::DeviceBuffer pool(DType::kU8, {int64_t(size) * copies + 256});
    cuda::DeviceBuffer sink(DType::kF32, {1});
    const size_t stride = (size + 255) / 256 * 256;
    const int64_t slots = std::max<int64_t>(1, int64_t(pool.bytes() - size) / int64_t(stride));
    double best = 1e30;
    for (int64_t per_sm : {1, 2, 4, 8}) {
      const auto read = [&](int64_t i) {
        cuda::read_bytes(pool.as<uint8_t>() + (i % slots) * stride, size, per_sm * sms_, 512,
                         sink.as<float>(), stream_);
      };
      read(0);
      best = std::min(best, cuda::time_in_graph(stream_, args_.iters, read));
    }
    return best;
  }

  void print(const Row& row) const {
    const double gbps = row.bytes / (row.us * 1e3);
    std::printf("| %s | %s | %lld | %s | %.2f | %.0f | %.0f | %.0f%% | %.0f%% | %s | %s |\n",
                row.op.c_str(), row.variant.c_str(), (long long)row.rows, row.shape.c_str(), row.us,
                row.bytes, gbps, 100.0 * gbps / bandwidth_, 100.0 * row.read_us / row.us,
                row.kernels.c_str(), row.gate_failure.empty() ? "yes" : "NO");
    std::fflush(stdout);
  }

  const OpBenchArgs& args_;
  const Qwen35Config& config_;
  cudaStream_t stream_ = nullptr;
  int sms_ = 0;
  double bandwidth_ = 0;
  std::vector<Row> rows_;
};

std::string dims(std::initializer_list<int64_t> values) {
  std::string text;
  for (int64_t value : values) text += (text.empty() ? "" : " x ") + std::to_string(value);
  return text;
}

cuda::DeviceBuffer random_buffer(DType dtype, int64_t count, uint64_t seed, float scale,
                                 float offset, cudaStream_t stream) {
  cuda::DeviceBuffer buffer(dtype, {count});
  cuda::fill_random(buffer.data(), dtype, count, seed, scale, offset, stream);
  return buffer;
}

// A device copy of host int32 values.
cuda::DeviceBuffer upload_ids(const std::vector<int32_t>& values) {
  cuda::DeviceBuffer buffer(DType::kI32, {int64_t(values.size())});
  cuda::copy_to_device(buffer.data(), values.data(), values.size() * sizeof(int32_t));
  return buffer;
}

constexpr DType kAct = DType::kBF16;  // the model's activations (CudaModelOptions::activations)

// add_rms_norm with the residual, as the block's input and post-attention norms run it, with and
// without the fused FP8 codes for the next W8A8 linear.
void bench_norm(OpBench& bench, int64_t m) {
  const int64_t h = bench.config().hidden_size;
  cudaStream_t stream = bench.stream();
  auto out = random_buffer(kAct, m * h, 1, 1.0f, 0.0f, stream),
       residual = random_buffer(kAct, m * h, 2, 1.0f, 0.0f, stream);
  auto branch = random_buffer(kAct, m * h, 3, 0.1f, 0.0f, stream),
       w = random_buffer(DType::kF32, h, 4, 0.1f, 1.0f, stream);
  cuda::DeviceBuffer q(DType::kU8, {m * h}), scales(DType::kF32, {m * h / 128});
  const float eps = bench.config().rms_norm_eps;
  for (bool fp8 : {false, true}) {
    if (fp8 && h % 128 != 0) continue;
    bench.measure("norm", fp8 ? "add_rms_norm+fp8" : "add_rms_norm", m, dims({m, h}), 1,
                  [&](int64_t) {
                    cuda::add_rms_norm(out.data(), residual.data(), branch.data(), w.as<float>(), m,
                                       h, eps, 1.0f, kAct, stream, fp8 ? q.as<uint8_t>() : nullptr,
                                       fp8 ? scales.as<float>() : nullptr);
                  });
  }
}

// SwiGLU after the MLP's (or the experts' and the shared expert's) gate_up, with and without the
// fused FP8 codes for the down projection.
void bench_activation(OpBench& bench, int64_t m) {
  const Qwen35Config& c = bench.config();
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> uses;  // (name, (rows, width))
  if (c.num_experts == 0) uses.push_back({"mlp", {m, c.intermediate_size}});
  if (c.num_experts > 0)
    uses.push_back({"experts", {m * c.num_experts_per_tok, c.moe_intermediate_size}});
  if (c.num_experts > 0 && c.shared_expert_intermediate_size > 0)
    uses.push_back({"shared", {m, c.shared_expert_intermediate_size}});
  cudaStream_t stream = bench.stream();
  for (const auto& [name, size] : uses) {
    const auto [rows, n] = size;
    auto gate_up = random_buffer(kAct, rows * 2 * n, 5, 2.0f, 0.0f, stream);
    cuda::DeviceBuffer out(kAct, {rows * n}), q(DType::kU8, {rows * n}),
        scales(DType::kF32, {rows * n / 128});
    for (bool fp8 : {false, true}) {
      if (fp8 && n % 128 != 0) continue;
      bench.measure("activation", name + (fp8 ? " silu_mul+fp8" : " silu_mul"), rows,
                    dims({rows, 2 * n}), 1, [&](int64_t) {
                      cuda::silu_mul(out.data(), gate_up.data(), rows, n, kAct, stream,
                                     fp8 ? q.as<uint8_t>() : nullptr,
                                     fp8 ? scales.as<float>() : nullptr);
                    });
    }
  }
}

// The token embedding gather from the bf16 table; ids differ per copy, so rows come from DRAM.
void bench_embedding(OpBench& bench, int64_t m) {
  const int64_t vocab = bench.config().vocab_size, h = bench.config().hidden_size;
  cudaStream_t stream = bench.stream();
  auto table = random_buffer(kAct, vocab * h, 6, 0.05f, 0.0f, stream);
  const int64_t copies = cold_copies(double(m * h * 2));
  std::vector<int32_t> ids(size_t(m * copies));
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = int32_t((i * 2654435761u + 12345u) % uint64_t(vocab));
  auto d_ids = upload_ids(ids);
  cuda::DeviceBuffer out(kAct, {m * h});
  bench.measure("embedding", "embedding", m, dims({m, h}) + " of " + std::to_string(vocab), copies,
                [&](int64_t copy) {
                  cuda::embedding(out.data(), kAct, d_ids.as<int32_t>() + copy * m, m, table.data(),
                                  kAct, h, stream);
                });
}

// One decode token for each of m sequences with `--context` tokens cached: attention_prepare
// (norms, RoPE, cache writes) and paged_attention (split keys as the model chooses them), the
// latter with and without the fused FP8 output for the o_proj.
void bench_attention(OpBench& bench, int64_t m) {
  const Qwen35Config& c = bench.config();
  cudaStream_t stream = bench.stream();
  const int64_t block_size = 32, context = bench.args().context;  // CudaModelOptions::block_size
  const int64_t max_blocks = (context + 1 + block_size - 1) / block_size,
                max_context = max_blocks * block_size;
  const int64_t hq = c.num_heads, hkv = c.num_kv_heads, d = c.head_dim;
  const cuda::AttentionShape shape{hq, hkv, d, c.rotary_dim, block_size, c.rope, c.rms_norm_eps};
  const int64_t cache_rows = m * max_blocks * block_size, cache_values = cache_rows * hkv * d;
  const int64_t copies = cold_copies(2.0 * double(cache_values) * 2);
  std::vector<cuda::DeviceBuffer> k_caches, v_caches;
  for (int64_t i = 0; i < copies; ++i) {
    k_caches.push_back(random_buffer(kAct, cache_values, 10 + i, 1.0f, 0.0f, stream));
    v_caches.push_back(random_buffer(kAct, cache_values, 50 + i, 1.0f, 0.0f, stream));
  }
  std::vector<int32_t> token_seq(static_cast<size_t>(m)),
      positions(static_cast<size_t>(m), int32_t(context)), seq_start(static_cast<size_t>(m + 1)),
      slots(static_cast<size_t>(m)), tables(static_cast<size_t>(m * max_blocks));
  for (int64_t s = 0; s < m; ++s)
    token_seq[size_t(s)] = slots[size_t(s)] = int32_t(s), seq_start[size_t(s + 1)] = int32_t(s + 1);
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = int32_t(i);
  auto d_seq = upload_ids(token_seq), d_pos = upload_ids(positions),
       d_start = upload_ids(seq_start);
  auto d_slots = upload_ids(slots), d_tables = upload_ids(tables);
  const cuda::StepLayout layout{d_seq.as<int32_t>(),
                                d_pos.as<int32_t>(),
                                d_start.as<int32_t>(),
                                d_tables.as<int32_t>(),
                                d_slots.as<int32_t>(),
                                m,
                                m,
                                max_blocks};
  const int64_t width = hq * 2 * d + 2 * hkv * d;
  auto projected = random_buffer(kAct, m * width, 7, 1.0f, 0.0f, stream);
  auto q_norm = random_buffer(DType::kF32, d, 8, 0.1f, 0.0f, stream),
       k_norm = random_buffer(DType::kF32, d, 9, 0.1f, 0.0f, stream);
  cuda::DeviceBuffer q(DType::kF32, {m * hq * d}), gate(kAct, {m * hq * d}),
      out(kAct, {m * hq * d});
  cuda::DeviceBuffer codes(DType::kU8, {m * hq * d}), scales(DType::kF32, {m * hq * d / 128 + 1});
  bench.measure("attention", "prepare", m, dims({m, width}), copies, [&](int64_t copy) {
    cuda::attention_prepare(q.as<float>(), gate.data(), k_caches[size_t(copy)].data(),
                            v_caches[size_t(copy)].data(), projected.data(), q_norm.as<float>(),
                            k_norm.as<float>(), layout, shape, kAct, stream);
  });
  const int64_t splits =
      std::clamp<int64_t>(cuda::attention_target_blocks(shape, kAct) / (m * hkv), 1,
                          (max_context + kAttentionSplitKeys - 1) / kAttentionSplitKeys);
  const int64_t keys_per_split = (max_context + splits - 1) / splits;
  cuda::DeviceBuffer partials(DType::kF32, {m * hq * splits * (d + 2)});
  const std::string text = dims({m, hq, d}) + ", " + std::to_string(context + 1) + " keys, " +
                           std::to_string(splits) + " splits";
  for (bool fp8 : {false, true}) {
    if (fp8 && d % 128 != 0) continue;
    bench.measure("attention", fp8 ? "paged_attention+fp8" : "paged_attention", m, text, copies,
                  [&](int64_t copy) {
                    cuda::paged_attention(
                        out.data(), partials.as<float>(), q.as<float>(), gate.data(),
                        k_caches[size_t(copy)].data(), v_caches[size_t(copy)].data(), layout, shape,
                        splits, keys_per_split, kAct, stream, fp8 ? codes.as<uint8_t>() : nullptr,
                        fp8 ? scales.as<float>() : nullptr, m * (context + 1));
                  });
  }
}

// The Gated DeltaNet decode step of m sequences (one token each): the causal conv and the
// recurrent core (with and without the fused FP8 output for the out_proj); conv and recurrent
// states cycled over copies.
void bench_gdn(OpBench& bench, int64_t m) {
  const Qwen35Config& c = bench.config();
  cudaStream_t stream = bench.stream();
  const cuda::DeltaNetShape shape{c.linear_num_key_heads, c.linear_num_value_heads,
                                  c.linear_key_head_dim,  c.linear_value_head_dim,
                                  c.linear_conv_kernel,   c.rms_norm_eps};
  const int64_t conv_dim = c.conv_dim(), value_dim = c.linear_value_dim(), hv = shape.num_v_heads;
  const int64_t stride = conv_dim + value_dim;  // the in_proj's [qkv | z] rows
  const int64_t conv_state = m * conv_dim * (shape.conv_kernel - 1),
                state = m * hv * shape.k_dim * shape.v_dim;
  const int64_t copies = cold_copies(4.0 * double(conv_state + state));
  std::vector<cuda::DeviceBuffer> conv_states, states;
  for (int64_t i = 0; i < copies; ++i) {
    conv_states.push_back(random_buffer(DType::kF32, conv_state, 20 + i, 1.0f, 0.0f, stream));
    states.push_back(random_buffer(DType::kF32, state, 60 + i, 0.1f, 0.0f, stream));
  }
  std::vector<int32_t> token_seq(static_cast<size_t>(m)), positions(static_cast<size_t>(m), 100),
      seq_start(static_cast<size_t>(m + 1)), slots(static_cast<size_t>(m));
  for (int64_t s = 0; s < m; ++s)
    token_seq[size_t(s)] = slots[size_t(s)] = int32_t(s), seq_start[size_t(s + 1)] = int32_t(s + 1);
  auto d_seq = upload_ids(token_seq), d_pos = upload_ids(positions),
       d_start = upload_ids(seq_start), d_slots = upload_ids(slots);
  const cuda::StepLayout layout{d_seq.as<int32_t>(),
                                d_pos.as<int32_t>(),
                                d_start.as<int32_t>(),
                                nullptr,
                                d_slots.as<int32_t>(),
                                m,
                                m,
                                0};
  auto projected = random_buffer(kAct, m * stride, 11, 1.0f, 0.0f, stream),
       ba = random_buffer(kAct, m * 2 * hv, 12, 1.0f, 0.0f, stream);
  auto conv_weight =
      random_buffer(DType::kF32, conv_dim * shape.conv_kernel, 13, 0.5f, 0.0f, stream);
  auto a_log = random_buffer(DType::kF32, hv, 14, 0.5f, 0.0f, stream),
       dt_bias = random_buffer(DType::kF32, hv, 15, 0.5f, 0.0f, stream);
  auto norm_w = random_buffer(DType::kF32, shape.v_dim, 16, 0.1f, 1.0f, stream);
  cuda::DeviceBuffer conv_out(DType::kF32, {m * conv_dim}), out(kAct, {m * value_dim});
  cuda::DeviceBuffer codes(DType::kU8, {m * value_dim}), scales(DType::kF32, {m * hv});
  bench.measure("gdn", "conv", m, dims({m, conv_dim}), copies, [&](int64_t copy) {
    cuda::gdn_conv(conv_out.as<float>(), conv_states[size_t(copy)].as<float>(), projected.data(),
                   stride, conv_weight.as<float>(), layout, shape, kAct, stream);
  });
  for (bool fp8 : {false, true}) {
    if (fp8 && shape.v_dim != 128) continue;
    bench.measure("gdn", fp8 ? "recurrent+fp8" : "recurrent", m,
                  dims({m, hv, shape.k_dim, shape.v_dim}), copies, [&](int64_t copy) {
                    cuda::gdn_recurrent(
                        {out.data(), states[size_t(copy)].as<float>(), conv_out.as<float>(),
                         projected.data(), stride, conv_dim, ba.data(), a_log.as<float>(),
                         dt_bias.as<float>(), norm_w.as<float>(), layout, shape,
                         fp8 ? codes.as<uint8_t>() : nullptr, fp8 ? scales.as<float>() : nullptr},
                        kAct, stream);
                  });
  }
}

// The MoE FFN's own kernels on FP8 block-scaled experts: route (with the expert-grouped layout),
// the grouped gate_up GEMV, SwiGLU with its FP8 codes, the grouped down GEMV, the weighted combine
// with the shared expert's row, each alone and all five in a row. A shared expert as wide as the
// routed ones is folded in as the model folds it (expert E, every token's last pair, its gate as
// router row E). Router logits differ per copy, so the experts (and their weights) differ from
// call to call.
void bench_moe(OpBench& bench, int64_t m) {
  const Qwen35Config& c = bench.config();
  cudaStream_t stream = bench.stream();
  const int64_t h = c.hidden_size, routed = c.num_experts, routed_k = c.num_experts_per_tok;
  const int64_t inter = c.moe_intermediate_size;
  const bool folded = c.shared_expert_intermediate_size == inter;
  // The grouped GEMVs' experts and pairs a token (the folded shared expert one more of each).
  const int64_t experts = routed + folded, top_k = routed_k + folded, pairs = m * top_k;
  const int64_t gate_up_values = experts * 2 * inter * h, down_values = experts * h * inter;
  cuda::DeviceBuffer gate_up(DType::kU8, {gate_up_values}), down(DType::kU8, {down_values});
  cuda::fill_random_fp8(gate_up.as<uint8_t>(), gate_up_values, 30, stream);
  cuda::fill_random_fp8(down.as<uint8_t>(), down_values, 31, stream);
  auto gate_up_scales =
      random_buffer(DType::kF32, experts * (2 * inter / 128) * (h / 128), 32, 1e-3f, 2e-3f, stream);
  auto down_scales =
      random_buffer(DType::kF32, experts * (h / 128) * (inter / 128), 33, 1e-3f, 2e-3f, stream);
  const int64_t copies = 16;  // 16 x m x top_k routes: most experts of a layer touched per graph
  auto logits = random_buffer(DType::kF32, copies * m * experts, 34, 2.0f, 0.0f, stream);
  const auto logits_of = [&](int64_t copy) { return logits.as<float>() + copy * m * experts; };
  const int64_t words = moe_routing_words(m, experts, top_k);
  cuda::DeviceBuffer route_words(DType::kI32, {copies * words}), weights(DType::kF32, {copies * pairs});
  std::vector<MoeRouting> routings;
  for (int64_t copy = 0; copy < copies; ++copy)
    routings.push_back(moe_routing_in(route_words.as<int32_t>() + copy * words,
                                      weights.as<float>() + copy * pairs, m, experts, top_k));
  for (int64_t copy = 0; copy < copies; ++copy)
    cuda::moe_route(routings[copy], logits_of(copy), m, routed, routed_k, c.norm_topk_prob,
                    DType::kF32, stream, folded);
  // Distinct experts a copy's routing touches (expected, as the model states it): the bytes.
  const double experts_read =
      double(routed) * (1.0 - std::pow(1.0 - double(routed_k) / double(routed), double(m))) +
      double(folded);
  auto normed = random_buffer(kAct, m * h, 35, 1.0f, 0.0f, stream);
  cuda::DeviceBuffer x_codes(DType::kU8, {m * h}), x_scales(DType::kF32, {m * h / 128});
  cuda::fp8_quantize_rows(x_codes.as<uint8_t>(), x_scales.as<float>(), normed.data(), m, h, kAct,
                          stream);
  cuda::DeviceBuffer hidden(kAct, {pairs * 2 * inter}), activated(kAct, {pairs * inter}),
      expert_out(kAct, {pairs * h});
  cuda::DeviceBuffer codes(DType::kU8, {pairs * inter}), scales(DType::kF32, {pairs * inter / 128});
  auto shared = random_buffer(kAct, m * h, 36, 1.0f, 0.0f, stream),
       shared_gate = random_buffer(kAct, m, 37, 1.0f, 0.0f, stream);
  cuda::DeviceBuffer branch(kAct, {m * h});
  const auto route = [&](int64_t copy) {
    cuda::moe_route(routings[copy], logits_of(copy), m, routed, routed_k, c.norm_topk_prob,
                    DType::kF32, stream, folded);
  };
  const auto expert_gate_up = [&](int64_t copy) {
    cuda::moe_expert_gemv(hidden.data(), x_codes.data(), x_scales.as<float>(), routings[copy],
                          gate_up.data(), gate_up_scales.as<float>(), m, experts, top_k, 2 * inter,
                          h, top_k, true, kAct, stream, experts_read);
  };
  // The model's sequence: gate_up given the router routes the step first (in its own launch at
  // one token).
  const auto routed_gate_up = [&](int64_t copy) {
    const cuda::MoeRouter router{logits_of(copy), routed, routed_k, c.norm_topk_prob, folded,
                                 experts};
    cuda::moe_expert_gemv(hidden.data(), x_codes.data(), x_scales.as<float>(), routings[copy],
                          gate_up.data(), gate_up_scales.as<float>(), m, experts, top_k, 2 * inter,
                          h, top_k, true, kAct, stream, experts_read, {}, false, &router);
  };
  const auto silu = [&](int64_t) {
    cuda::silu_mul(activated.data(), hidden.data(), pairs, inter, kAct, stream, codes.as<uint8_t>(),
                   scales.as<float>());
  };
  // The routings are all made above: ready before each launch's wait, as the model's down GEMV.
  const auto expert_down = [&](int64_t copy) {
    cuda::moe_expert_gemv(expert_out.data(), codes.data(), scales.as<float>(), routings[copy],
                          down.data(), down_scales.as<float>(), m, experts, top_k, h, inter, 1,
                          true, kAct, stream, experts_read, {}, true);
  };
  const auto combine = [&](int64_t copy) {
    cuda::moe_combine(branch.data(), expert_out.data(), weights.as<float>() + copy * pairs,
                      c.shared_expert_intermediate_size > 0 && !folded ? shared.data() : nullptr,
                      c.shared_expert_intermediate_size > 0 && !folded ? shared_gate.data()
                                                                       : nullptr,
                      m, h, top_k, kAct, stream);
  };
  const std::string of = " of " + std::to_string(experts);
  bench.measure("moe", "route", m, dims({m, experts}) + ", top " + std::to_string(top_k), copies,
                route);
  bench.measure("moe", "grouped_gemv gate_up", m, dims({pairs, 2 * inter, h}) + of, copies,
                expert_gate_up);
  bench.measure("moe", "route+grouped_gemv gate_up", m, dims({pairs, 2 * inter, h}) + of, copies,
                routed_gate_up);
  bench.measure("moe", "silu_mul+fp8", m, dims({pairs, 2 * inter}), copies, silu);
  bench.measure("moe", "grouped_gemv down", m, dims({pairs, h, inter}) + of, copies, expert_down);
  bench.measure("moe", "combine", m, dims({m, h}) + ", top " + std::to_string(top_k), copies,
                combine);
  // The FP8 expert GEMVs at each work split (cuda::MoeGemvSchedule; the rows above are the
  // built-in choice): what the split heuristic is to be chosen from.
  std::vector<std::pair<cuda::MoeGemvSchedule, std::string>> schedules;
  for (int splits : {1, 2, 4, 8}) schedules.push_back({{splits, 0}, " splits " + std::to_string(splits)});
  for (int columns : {2, 4, 8}) schedules.push_back({{0, columns}, " cores " + std::to_string(columns)});
  for (const auto& [schedule, split] : schedules) {
    bench.measure("moe", "grouped_gemv gate_up" + split, m, dims({pairs, 2 * inter, h}) + of, copies,
                  [&](int64_t copy) {
                    cuda::moe_expert_gemv(hidden.data(), x_codes.data(), x_scales.as<float>(), routings[copy],
                                          gate_up.data(), gate_up_scales.as<float>(), m, experts, top_k,
                                          2 * inter, h, top_k, true, kAct, stream, experts_read, schedule);
                  });
    bench.measure("moe", "grouped_gemv down" + split, m, dims({pairs, h, inter}) + of, copies,
                  [&](int64_t copy) {
                    cuda::moe_expert_gemv(expert_out.data(), codes.data(), scales.as<float>(), routings[copy],
                                          down.data(), down_scales.as<float>(), m, experts, top_k, h, inter, 1,
                                          true, kAct, stream, experts_read, schedule, true);
                  });
  }
  bench.measure("moe", "route+experts+combine", m, dims({m, h}), copies, [&](int64_t copy) {
    routed_gate_up(copy);
    silu(copy);
    expert_down(copy);
    combine(copy);
  });
}

// The step's last kernels on the logits [m, vocab] bf16: argmax (greedy rows) and sample_rows
// with top-p 0.9 and with top-k 50 + top-p 0.9 (each row's bytes as the runner states them).
void bench_sampling(OpBench& bench, int64_t m) {
  const int64_t vocab = bench.config().vocab_size;
  cudaStream_t stream = bench.stream();
  const int64_t copies = cold_copies(double(m * vocab * 2));
  auto logits = random_buffer(kAct, copies * m * vocab, 40, 2.0f, 0.0f, stream);
  cuda::DeviceBuffer tokens(DType::kI32, {m});
  const auto rows_of = [&](int64_t copy) {
    return static_cast<const uint16_t*>(logits.data()) + copy * m * vocab;
  };
  bench.measure("sampling", "argmax", m, dims({m, vocab}), copies, [&](int64_t copy) {
    cuda::argmax_rows(tokens.as<int32_t>(), rows_of(copy), m, vocab, kAct, stream);
  });
  for (const auto& [name, sampling_params] :
       {std::pair<std::string, SamplingParams>{"sample top-p 0.9", {1.0f, 0, 0.9f, 1}},
        {"sample top-k 50 top-p 0.9", {0.8f, 50, 0.9f, 2}}}) {
    std::vector<SampleRowParams> params;
    double bytes = 0;
    for (int64_t row = 0; row < m; ++row) {
      params.push_back(sample_row_params(sampling_params, uint64_t(row), row, vocab));
      bytes += double(sampling::sample_row_passes(params.back(), vocab)) * double(vocab) * 2.0;
    }
    cuda::DeviceBuffer d_params(DType::kU8, {int64_t(params.size() * sizeof(SampleRowParams))});
    cuda::copy_to_device(d_params.data(), params.data(), params.size() * sizeof(SampleRowParams));
    const auto* device_params = reinterpret_cast<const SampleRowParams*>(d_params.data());
    bench.measure("sampling", name, m, dims({m, vocab}), copies, [&](int64_t copy) {
      cuda::sample_rows(tokens.as<int32_t>(), rows_of(copy), vocab, kAct, device_params, m, stream,
                        bytes);
    });
  }
}

void run_bench_op(const OpBenchArgs& args, const std::vector<int64_t>& ms) {
  VT_CHECK(cuda::device_count() > 0, "vt bench op needs a CUDA GPU");
  const Qwen35Config config = synthetic_config(args.synthetic);
  std::vector<std::string> ops;
  for (const auto& [name, description] : kOps)
    if (args.op == name || (args.op == "all" && (name != "moe" || config.num_experts > 0)))
      ops.push_back(name);
  VT_CHECK(args.op != "moe" || config.num_experts > 0, "vt bench op moe: ", args.synthetic,
           " has no MoE layers (try --synthetic qwen3.5-35b-a3b)");
  OpBench bench(args, config);
  if (!args.json) bench.print_header();
  const std::map<std::string, std::function<void(OpBench&, int64_t)>> benches = {
      {"norm", bench_norm},
      {"activation", bench_activation},
      {"embedding", bench_embedding},
      {"attention", bench_attention},
      {"gdn", bench_gdn},
      {"moe", bench_moe},
      {"sampling", bench_sampling}};
  for (const std::string& op : ops)
    for (int64_t m : ms) benches.at(op)(bench, m);
  int failures = 0;
  nlohmann::json rows = nlohmann::json::array();
  for (const Row& row : bench.rows()) {
    failures += !row.gate_failure.empty();
    if (!row.gate_failure.empty())
      std::fprintf(stderr, "%s %s m = %lld: %s\n", row.op.c_str(), row.variant.c_str(),
                   (long long)row.rows, row.gate_failure.c_str());
    const double gbps = row.bytes / (row.us * 1e3);
    rows.push_back({{"op", row.op},
                    {"variant", row.variant},
                    {"rows", row.rows},
                    {"shape", row.shape},
                    {"us", row.us},
                    {"bytes", row.bytes},
                    {"gbps", gbps},
                    {"bandwidth_fraction", gbps / bench.bandwidth()},
                    {"read_floor_fraction", row.read_us / row.us},
                    {"kernels", row.kernels},
                    {"kernel_ran", row.gate_failure.empty()}});
  }
  if (args.json)
    std::cout << nlohmann::json{{"model", args.synthetic},
                                {"bandwidth_gbps", bench.bandwidth()},
                                {"iters", args.iters},
                                {"context", args.context},
                                {"rows", rows}}
                     .dump(1)
              << "\n";
  VT_CHECK(failures == 0, failures,
           " timings whose kernels did not run as often as launched (see 'kernel ran')");
}
#endif

}  // namespace

void add_op_bench_commands(CLI::App& app) {
  auto* bench = app.get_subcommand("bench");
  auto* op = bench->add_subcommand(
      "op",
      "One op's CUDA kernels on a model's decode shapes: us, bytes, GB/s, % of the "
      "read bandwidth, kernel-ran check");
  op->require_subcommand(1);
  auto gemm_args = std::make_shared<GemmBenchArgs>();
  auto* gemm = op->add_subcommand(
      "gemm", "FP8 block-scaled GEMM backends vs cuBLASLt (the same as `vt bench gemm`)");
  add_gemm_bench_options(gemm, *gemm_args);
  gemm->callback([gemm_args] { run_bench_gemm(*gemm_args); });
  std::vector<std::pair<std::string, std::string>> commands = kOps;
  commands.push_back({"all", "every op above but gemm, in one table"});
  for (const auto& [name, description] : commands) {
    auto args = std::make_shared<OpBenchArgs>();
    args->op = name;
    if (name == "moe") args->synthetic = "qwen3.5-35b-a3b";  // the 27B is dense
    auto* command = op->add_subcommand(name, description);
    command
        ->add_option("--synthetic", args->synthetic,
                     "qwen3.5-27b | qwen3.5-35b-a3b | qwen3-next-80b")
        ->capture_default_str();
    command
        ->add_option("--m,--batch", args->m_list,
                     "rows (decode tokens, one per sequence), comma-separated")
        ->capture_default_str();
    command->add_option("--context", args->context, "attention: tokens cached per sequence")
        ->capture_default_str();
    command->add_option("--iters", args->iters, "calls per timed graph")
        ->check(CLI::Range(4, 10000))
        ->capture_default_str();
    command->add_flag("--json", args->json, "machine-readable output");
    command->callback([args] {
      const std::vector<int64_t> ms = checked_rows(*args);
#ifdef VT_WITH_CUDA
      run_bench_op(*args, ms);
#else
      (void)ms;
      VT_FAIL("vt bench op needs a CUDA build (this vt was built without CUDA)");
#endif
    });
  }
}

}  // namespace vt::apps
