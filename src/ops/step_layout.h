// The batch of one step as the device kernels see it (attention and Gated DeltaNet).
#pragma once

#include <cstdint>



namespace vt::cuda {

// Per-step batch layout shared by attention and GDN kernels. All arrays on the device.
struct StepLayout {
  const int32_t* token_seq;    // [T] sequence index of each token
  const int32_t* positions;    // [T] absolute position of each token
  const int32_t* seq_start;    // [S + 1] first token of each sequence in this step
  const int32_t* block_tables; // [slots, max_blocks] KV block ids of each slot
  const int32_t* slots;        // [S] cache slot of each sequence: its GDN state and block-table row
  int64_t num_tokens = 0, num_seqs = 0, max_blocks = 0;
};

}  // namespace vt::cuda
