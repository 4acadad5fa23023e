// Sampling on the device (Model::forward_batch_sample): the step, then one launch of
// cuda::sample_rows over the sampled rows; greedy rows take the step's argmax. Only the ids and
// the rows the host still needs come back.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/error.h"
#include "cuda/check.h"
#include "ops/sampling/device_sampling.h"
#include "ops/sampling/sampling.h"
#include "runtime/cuda_runner.h"
#include "trace/intent.h"

namespace vt {

void CudaRunner::allocate_sampling(int64_t rows) {
  auto& s = sampling_;
  s.rows = rows;
  s.params = cuda::DeviceBuffer(DType::kU8, {rows * int64_t(sizeof(SampleRowParams))});
  s.tokens = cuda::DeviceBuffer(DType::kI32, {rows});
  VT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&s.host_params), size_t(rows) * sizeof(SampleRowParams)));
  VT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&s.host_tokens), size_t(rows) * sizeof(int32_t)));
  VT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&s.host_argmax), size_t(rows) * sizeof(int32_t)));
  s.greedy_rows.reserve(size_t(rows));
  s.host_rows.reserve(size_t(rows));
}

CudaRunner::Sampling::~Sampling() {
  if (host_params) cudaFreeHost(host_params);
  if (host_tokens) cudaFreeHost(host_tokens);
  if (host_argmax) cudaFreeHost(host_argmax);
}

void CudaRunner::forward_batch_sample(std::span<const BatchItem> items, std::span<const RowOutput> rows,
                                      std::span<int32_t> tokens, const TensorView& logits) {
  const int64_t count = batch_logit_rows(items), vocab = info().vocab_size;
  VT_CHECK(int64_t(rows.size()) == count && int64_t(tokens.size()) == count, "forward_batch_sample: ", rows.size(),
           " row outputs and ", tokens.size(), " tokens for ", count, " logit rows");
  VT_CHECK(logits.dtype == DType::kF32 && logits.device == Device::kCpu && logits.shape == Shape({count, vocab}),
           "forward_batch_sample: logits must be host f32 [", count, ", ", vocab, "]");
  VT_CHECK(count <= sampling_.rows, "forward_batch_sample: ", count, " logit rows exceed the ", sampling_.rows,
           " a step holds");
  // Every row's parameters are checked before the step changes any state.
  const DType act = model_->activations();
  int64_t sampled = 0;
  double bytes = 0;
  auto& greedy_rows = sampling_.greedy_rows;
  auto& host_rows = sampling_.host_rows;
  greedy_rows.clear();
  host_rows.clear();
  for (int64_t row = 0; row < count; ++row) {
    const RowOutput& output = rows[size_t(row)];
    if (output.kind == RowOutput::Kind::kToken) {
      const SampleRowParams params = sample_row_params(output.sampling, output.counter, row, vocab);
      if (sampling::greedy(params)) {
        greedy_rows.push_back(row);
        continue;
      }
      bytes += double(sampling::sample_row_passes(params, vocab)) * double(vocab) * double(dtype_size(act));
      sampling_.host_params[sampled++] = params;
    } else if (output.kind == RowOutput::Kind::kLogits) {
      if (!host_rows.empty() && host_rows.back().first + host_rows.back().second == row) {
        ++host_rows.back().second;
      } else {
        host_rows.push_back({row, 1});
      }
    }
  }
  if (sampled > 0)  // queued before the step, which may be a graph launch
    VT_CUDA_CHECK(cudaMemcpyAsync(sampling_.params.data(), sampling_.host_params,
                                  size_t(sampled) * sizeof(SampleRowParams), cudaMemcpyHostToDevice, stream_));
  run_batch(items, false);
  if (sampled > 0) {
    {
      trace::OpScope op("sample", trace::OpGroup::kSampling);
      cuda::sample_rows(sampling_.tokens.as<int32_t>(), model_->logits(), vocab, act,
                        reinterpret_cast<const SampleRowParams*>(sampling_.params.data()), sampled, stream_, bytes);
    }
    VT_CUDA_CHECK(cudaMemcpyAsync(sampling_.host_tokens, sampling_.tokens.data(), size_t(sampled) * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, stream_));
  }
  if (!greedy_rows.empty())
    VT_CUDA_CHECK(cudaMemcpyAsync(sampling_.host_argmax, model_->next_tokens(), size_t(count) * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, stream_));
  copy_logit_rows_to_host(logits.f32(), host_rows);  // waits for the stream: the tokens are in too
  std::fill(tokens.begin(), tokens.end(), -1);
  for (int64_t row : greedy_rows) tokens[size_t(row)] = sampling_.host_argmax[row];
  for (int64_t i = 0; i < sampled; ++i) tokens[size_t(sampling_.host_params[i].row)] = sampling_.host_tokens[i];
}

}  // namespace vt
