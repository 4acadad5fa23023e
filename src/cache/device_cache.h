// The cache's memory on the device, for any model that describes it (model/cuda_forward.h's
// CacheSpec): paged KV rows of the attention layers, conv and recurrent state slots of the linear-
// attention layers, their rollback windows (speculative verification), and the MTP head's KV rows.
// Allocated once; a sequence slot owns block-table row `slot`. Rollback is written here, once.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cuda/device_buffer.h"
#include "model/cuda_forward.h"
#include "ops/gdn/gdn.h"

namespace vt {

struct DeviceCacheOptions {
  int64_t sequences = 1;    // sequence slots; one more scratch slot is kept for graph warm-ups
  int64_t max_blocks = 0;   // KV blocks per sequence
  int64_t block_size = 32;  // tokens per KV block
  int64_t window_entries = 0;  // rollback window entries per sequence slot (0: no rollback)
};

class DeviceCache {
 public:
  DeviceCache(const CacheSpec& spec, const DeviceCacheOptions& options);

  int64_t sequences() const { return options_.sequences; }
  int64_t state_slots() const { return options_.sequences + 1; }
  int64_t scratch_slot() const { return options_.sequences; }
  int64_t max_blocks() const { return options_.max_blocks; }
  int64_t block_size() const { return options_.block_size; }
  int64_t window_entries() const { return options_.window_entries; }
  const int32_t* block_tables() const { return block_tables_.as<int32_t>(); }  // [state_slots, max_blocks]
  std::span<const LayerCache> layers() const { return layers_; }
  const LayerCache& mtp() const { return mtp_; }

  // A new sequence in `slot` starts from zero recurrent and conv state (KV rows are written before
  // any position reads them).
  void reset_slot(int64_t slot, cudaStream_t stream) const;
  // Copies every linear-attention layer's state of `slot` into its window entry `entry`
  // (into_window) or back from it (a rollback), in one launch.
  void copy_window_entry(int64_t slot, int64_t entry, bool into_window, cudaStream_t stream);
  // Prefix caching: the floats a snapshot of a slot at `length` tokens takes (its KV rows
  // [0, length) of every attention layer, and its conv and recurrent states), and one launch
  // copying the slot into the snapshot at `snapshot` (save) or back.
  int64_t snapshot_floats(int64_t length) const;
  void copy_snapshot(int64_t slot, int64_t length, float* snapshot, bool save, cudaStream_t stream) const;
  // Random KV rows and states (benchmarks at a context length: the values do not change the work).
  void randomize(uint64_t seed, cudaStream_t stream);

 private:
  std::vector<cuda::CopySpan> snapshot_spans(int64_t slot, int64_t length, float* snapshot, bool save,
                                             int64_t* floats) const;
  struct Layer {
    cuda::DeviceBuffer k, v, conv, recurrent, conv_window, recurrent_window;
  };
  DeviceCacheOptions options_;
  std::vector<Layer> buffers_;
  std::vector<LayerCache> layers_;
  cuda::DeviceBuffer mtp_k_, mtp_v_;
  LayerCache mtp_;
  cuda::DeviceBuffer block_tables_;
};

}  // namespace vt
