// One rank's NCCL communicator for tensor parallelism: one GPU per rank, the ranks being threads
// of one process, processes of one node, or processes of several nodes (NCCL bootstraps over TCP
// from a unique id that rank 0 makes and the caller hands to the others by any channel).
// All-reduces run on a caller's stream and can be captured in a CUDA graph.
#pragma once

#include <array>

#include "core/tensor.h"

typedef struct CUstream_st* cudaStream_t;
typedef struct ncclComm* ncclComm_t;

namespace vt {

class NcclCommunicator {
 public:
  // The bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES; checked against nccl.h in the .cpp).
  using UniqueId = std::array<char, 128>;
  // Made once, by rank 0, and given to every rank of the world.
  static UniqueId make_unique_id();

  // Joins the world as `rank` of `world_size` on CUDA device `device` (made current on the calling
  // thread). Blocks until all ranks have joined, so with several ranks in one process each must
  // construct its communicator on its own thread. Sets NCCL_NVLS_ENABLE=0 first: NVLink
  // multicast (NVLS) stays off on the shared machines, whatever the environment said.
  NcclCommunicator(const UniqueId& id, int world_size, int rank, int device);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  int device() const { return device_; }

  // Sums `buffer` (device memory on this rank's GPU; f32, bf16 or f16) over the ranks in place,
  // enqueued on `stream`: every rank passes the same shape and dtype, in the same order.
  void all_reduce_sum(const TensorView& buffer, cudaStream_t stream) const;

 private:
  ncclComm_t comm_ = nullptr;
  int world_size_ = 0, rank_ = 0, device_ = 0;
};

}  // namespace vt
