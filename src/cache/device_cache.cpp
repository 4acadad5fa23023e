#include "cache/device_cache.h"

#include <cuda_runtime.h>

#include <utility>

#include "core/error.h"
#include "core/tensor.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "ops/gdn/gdn.h"
#include "trace/intent.h"

namespace vt {
namespace {

// The bytes the constructor allocates (its buffers, in its order).
size_t cache_bytes(const CacheSpec& spec, int64_t slots, int64_t sequences, int64_t tokens, int64_t entries) {
  const size_t activation = dtype_size(spec.activations), f32 = sizeof(float);
  size_t bytes = 0;
  for (const CacheLayerSpec& layer : spec.layers) {
    if (layer.attention) {
      bytes += 2 * size_t(slots * tokens * layer.kv_heads * layer.head_dim) * activation;
      continue;
    }
    const size_t conv = size_t(layer.conv_channels * layer.conv_history) * f32;
    const size_t state = size_t(layer.state_heads * layer.state_k * layer.state_v) * f32;
    bytes += size_t(slots) * (conv + state) + size_t(sequences * entries) * (conv + state);
  }
  if (spec.has_mtp) bytes += 2 * size_t(sequences * tokens * spec.mtp.kv_heads * spec.mtp.head_dim) * activation;
  return bytes;
}

}  // namespace

DeviceCache::DeviceCache(const CacheSpec& spec, const DeviceCacheOptions& options) : options_(options) {
  VT_CHECK(options.sequences >= 1 && options.max_blocks >= 1 && options.block_size >= 1 && options.window_entries >= 0,
           "device cache: ", options.sequences, " sequences of ", options.max_blocks, " blocks of ",
           options.block_size, " tokens, ", options.window_entries, " window entries");
  const int64_t slots = state_slots(), S = options.sequences, entries = options.window_entries;
  const int64_t kv_rows = slots * options.max_blocks * options.block_size;
  cuda::check_fits(cache_bytes(spec, slots, S, options.max_blocks * options.block_size, entries),
                   str("KV cache and recurrent states for ", S, " sequences of ", options.max_blocks * options.block_size,
                       " tokens (", options.max_blocks, " blocks each", entries > 0 ? ", rollback windows" : "", ")"),
                   "lower --max-running or --max-context");
  for (const CacheLayerSpec& layer : spec.layers) {
    Layer buffers;
    if (layer.attention) {
      buffers.k = cuda::DeviceBuffer(spec.activations, {kv_rows, layer.kv_heads, layer.head_dim});
      buffers.v = cuda::DeviceBuffer(spec.activations, {kv_rows, layer.kv_heads, layer.head_dim});
    } else {
      buffers.conv = cuda::DeviceBuffer(DType::kF32, {slots, layer.conv_channels, layer.conv_history});
      buffers.recurrent = cuda::DeviceBuffer(DType::kF32, {slots, layer.state_heads, layer.state_k, layer.state_v});
      if (entries > 0) {
        buffers.conv_window = cuda::DeviceBuffer(DType::kF32, {S, entries, layer.conv_channels, layer.conv_history});
        buffers.recurrent_window =
            cuda::DeviceBuffer(DType::kF32, {S * entries, layer.state_heads, layer.state_k, layer.state_v});
      }
    }
    buffers_.push_back(std::move(buffers));
  }
  for (Layer& buffers : buffers_)
    layers_.push_back({buffers.k.data(), buffers.v.data(), buffers.conv.as<float>(), buffers.recurrent.as<float>(),
                       buffers.conv_window.as<float>(), buffers.recurrent_window.as<float>()});
  if (spec.has_mtp) {
    // The head's sequence s uses the blocks of block-table row s, as a target sequence does.
    const int64_t rows = S * options.max_blocks * options.block_size;
    mtp_k_ = cuda::DeviceBuffer(spec.activations, {rows, spec.mtp.kv_heads, spec.mtp.head_dim});
    mtp_v_ = cuda::DeviceBuffer(spec.activations, {rows, spec.mtp.kv_heads, spec.mtp.head_dim});
    mtp_ = {mtp_k_.data(), mtp_v_.data()};
  }
  // Slot s owns blocks [s * max_blocks, (s + 1) * max_blocks).
  Buffer tables(DType::kI32, {slots, options.max_blocks});
  for (int64_t i = 0; i < tables.numel(); ++i) tables.view().as<int32_t>()[i] = int32_t(i);
  block_tables_ = cuda::to_device(tables);
}

void DeviceCache::reset_slot(int64_t slot, cudaStream_t stream) const {
  VT_CHECK(slot >= 0 && slot < state_slots(), "device cache: slot ", slot, " of ", state_slots());
  for (const Layer& layer : buffers_) {
    if (!layer.recurrent.data()) continue;
    const size_t conv_bytes = layer.conv.bytes() / size_t(state_slots());
    const size_t state_bytes = layer.recurrent.bytes() / size_t(state_slots());
    VT_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(layer.conv.data()) + slot * conv_bytes, 0, conv_bytes, stream));
    VT_CUDA_CHECK(
        cudaMemsetAsync(static_cast<char*>(layer.recurrent.data()) + slot * state_bytes, 0, state_bytes, stream));
  }
}

void DeviceCache::copy_window_entry(int64_t slot, int64_t entry, bool into_window, cudaStream_t stream) {
  const int64_t entries = options_.window_entries;
  VT_CHECK(slot >= 0 && slot < options_.sequences && entry >= 0 && entry < entries, "rollback window: slot ", slot,
           " entry ", entry, " outside ", options_.sequences, " x ", entries);
  std::vector<cuda::CopySpan> spans;
  for (Layer& layer : buffers_) {
    if (!layer.recurrent_window.data()) continue;
    for (auto [live, window] : {std::pair{&layer.recurrent, &layer.recurrent_window},
                                std::pair{&layer.conv, &layer.conv_window}}) {
      const int64_t count = live->shape().numel() / state_slots();
      float* state = live->as<float>() + slot * count;
      float* saved = window->as<float>() + (slot * entries + entry) * count;
      spans.push_back(into_window ? cuda::CopySpan{saved, state, count} : cuda::CopySpan{state, saved, count});
    }
  }
  trace::OpScope op(into_window ? "gdn.window_open" : "gdn.rollback", trace::OpGroup::kGdn);
  cuda::copy_spans(spans.data(), int64_t(spans.size()), stream);
}

// Slot s's KV rows are those of its blocks [s * max_blocks, ...): one span per layer and tensor.
std::vector<cuda::CopySpan> DeviceCache::snapshot_spans(int64_t slot, int64_t length, float* snapshot, bool save,
                                                        int64_t* floats) const {
  VT_CHECK(slot >= 0 && slot < state_slots() && length >= 0 && length <= options_.max_blocks * options_.block_size,
           "prefix snapshot: slot ", slot, " at ", length, " tokens");
  std::vector<cuda::CopySpan> spans;
  int64_t offset = 0;
  const auto part = [&](float* live, int64_t count) {
    float* saved = snapshot ? snapshot + offset : nullptr;
    offset += count;
    spans.push_back(save ? cuda::CopySpan{saved, live, count} : cuda::CopySpan{live, saved, count});
  };
  const int64_t first_row = slot * options_.max_blocks * options_.block_size;
  for (const Layer& layer : buffers_) {
    if (layer.k.data()) {
      const int64_t row_floats = int64_t(layer.k.bytes()) / layer.k.shape()[0] / int64_t(sizeof(float));
      for (const cuda::DeviceBuffer* kv : {&layer.k, &layer.v})
        part(static_cast<float*>(kv->data()) + first_row * row_floats, length * row_floats);
    } else if (layer.recurrent.data()) {
      for (const cuda::DeviceBuffer* state : {&layer.conv, &layer.recurrent}) {
        const int64_t count = state->shape().numel() / state_slots();
        part(static_cast<float*>(state->data()) + slot * count, count);
      }
    }
  }
  *floats = offset;
  return spans;
}

int64_t DeviceCache::snapshot_floats(int64_t length) const {
  int64_t floats = 0;
  snapshot_spans(0, length, nullptr, true, &floats);
  return floats;
}

void DeviceCache::copy_snapshot(int64_t slot, int64_t length, float* snapshot, bool save, cudaStream_t stream) const {
  int64_t floats = 0;
  const std::vector<cuda::CopySpan> spans = snapshot_spans(slot, length, snapshot, save, &floats);
  trace::OpScope op(save ? "prefix.save" : "prefix.restore", trace::OpGroup::kOther);
  cuda::copy_spans(spans.data(), int64_t(spans.size()), stream);
}

void DeviceCache::randomize(uint64_t seed, cudaStream_t stream) {
  for (Layer& layer : buffers_) {
    for (cuda::DeviceBuffer* buffer : {&layer.k, &layer.v})
      if (buffer->data())
        cuda::fill_random(buffer->data(), buffer->view().dtype, buffer->shape().numel(), ++seed, 1.0f, 0.0f, stream);
    if (layer.recurrent.data()) {
      cuda::fill_random(layer.recurrent.data(), DType::kF32, layer.recurrent.shape().numel(), ++seed, 0.05f, 0.0f,
                        stream);
      cuda::fill_random(layer.conv.data(), DType::kF32, layer.conv.shape().numel(), ++seed, 1.0f, 0.0f, stream);
    }
  }
  VT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace vt
