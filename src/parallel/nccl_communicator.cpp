// NCCL communicator: init from a unique id, in-place sum all-reduce on a stream.
#include "parallel/nccl_communicator.h"

#include <nccl.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "cuda/check.h"

// Checks an NCCL call; the message names the call, NCCL's error string and its last error detail.
#define VT_NCCL_CHECK(call)                                                                        \
  do {                                                                                             \
    ncclResult_t vt_nccl_status = (call);                                                          \
    VT_CHECK(vt_nccl_status == ncclSuccess, #call, ": ", ncclGetErrorString(vt_nccl_status), " (", \
             ncclGetLastError(nullptr), ")");                                                      \
  } while (0)

namespace vt {
namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclCommunicator::UniqueId),
              "NcclCommunicator::UniqueId must hold exactly an ncclUniqueId");

ncclDataType_t nccl_type(DType dtype) {
  if (dtype == DType::kF32) return ncclFloat32;
  if (dtype == DType::kBF16) return ncclBfloat16;
  if (dtype == DType::kF16) return ncclFloat16;
  VT_FAIL("NCCL all-reduce: dtype ", dtype_name(dtype), " is not summed (f32, bf16, f16 are)");
}

}  // namespace

NcclCommunicator::UniqueId NcclCommunicator::make_unique_id() {
  ncclUniqueId id;
  VT_NCCL_CHECK(ncclGetUniqueId(&id));
  UniqueId bytes;
  std::memcpy(bytes.data(), &id, sizeof(id));
  return bytes;
}

NcclCommunicator::NcclCommunicator(const UniqueId& id, int world_size, int rank, int device)
    : world_size_(world_size), rank_(rank), device_(device) {
  VT_CHECK(world_size >= 1, "NCCL communicator: world size ", world_size, " must be at least 1");
  VT_CHECK(rank >= 0 && rank < world_size, "NCCL communicator: rank ", rank,
           " outside the world of ", world_size);
  VT_CHECK(device >= 0, "NCCL communicator: device ", device, " is not a CUDA device index");
  // NCCL reads its environment at init; NVLS must be off before the first communicator exists.
  VT_CHECK(setenv("NCCL_NVLS_ENABLE", "0", 1) == 0,
           "NCCL communicator: cannot set NCCL_NVLS_ENABLE=0");
  VT_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId nccl_id;
  std::memcpy(&nccl_id, id.data(), sizeof(nccl_id));
  VT_NCCL_CHECK(ncclCommInitRank(&comm_, world_size, nccl_id, rank));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) ncclCommDestroy(comm_);  // no throw from a destructor; a failed destroy leaks only
}

void NcclCommunicator::all_reduce_sum(const TensorView& buffer, cudaStream_t stream) const {
  VT_CHECK(buffer.device == Device::kCuda, "NCCL all-reduce: the buffer ", buffer.shape.str(),
           " must be in device memory");
  VT_NCCL_CHECK(ncclAllReduce(buffer.data, buffer.data, size_t(buffer.numel()),
                              nccl_type(buffer.dtype), ncclSum, comm_, stream));
}

}  // namespace vt
