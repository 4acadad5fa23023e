// Shared-memory mbarriers and bulk copies (sm90): the completion tracking of the kernels that
// stream weights through shared memory with the copy engine (dense_gemv.cu,
// fp8_gemm_wgmma.cuh). Device code only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace vt::cuda::device {

__device__ __forceinline__ uint32_t smem_address(const void* pointer) {
  return uint32_t(__cvta_generic_to_shared(pointer));
}

__device__ __forceinline__ void barrier_init(uint64_t* barrier, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(barrier)), "r"(count) : "memory");
}
// Makes initialised barriers visible to the copy engine (once, after the inits, before a sync).
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Arrives and adds `bytes` to the transaction count the phase waits for.
__device__ __forceinline__ void barrier_expect_bytes(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(barrier)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void barrier_arrive(uint64_t* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(barrier)) : "memory");
}
// Waits until the phase of `parity` (0, 1, 0, ... per use) has completed.
__device__ __forceinline__ void barrier_wait(uint64_t* barrier, uint32_t parity) {
  const uint32_t address = smem_address(barrier);
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(address), "r"(parity)
        : "memory");
}

// `bytes` (a multiple of 16) from global to shared memory by the copy engine, completing on `barrier`.
__device__ __forceinline__ void bulk_copy(void* destination, const void* source, uint32_t bytes, uint64_t* barrier) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_address(destination)),
               "l"(source), "r"(bytes), "r"(smem_address(barrier))
               : "memory");
}

// 16 bytes from global to shared memory, asynchronously, through L2 (bypassing L1: data another
// CTA or kernel wrote); cp_async_commit closes this thread's group of them, cp_async_wait<n> waits
// until at most n of its groups are pending, cp_async_wait_all for all of them.
__device__ __forceinline__ void copy_async_16(void* destination, const void* source) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_address(destination)), "l"(source) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

}  // namespace vt::cuda::device
