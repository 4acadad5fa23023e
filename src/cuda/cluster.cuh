// Thread block clusters (sm90): the cluster-wide barrier (every thread of every CTA of the cluster
// arrives, then waits; release / acquire order the distributed shared memory accesses before it),
// the CTA's rank, and loads and stores in another CTA's shared memory. Device code only; used by
// the wgmma GEMM's cluster split and the Gated DeltaNet recurrent kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/mbarrier.cuh"

namespace vt::cuda::device {

__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory"); }
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }
// The whole barrier, where only the threads with `releases` set have shared-memory accesses that
// other CTAs must see ordered across it: the others arrive relaxed (no fence).
__device__ __forceinline__ void cluster_sync(bool releases) {
  if (releases)
    cluster_arrive();
  else
    cluster_arrive_relaxed();
  cluster_wait();
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}
__device__ __forceinline__ uint32_t cluster_size() {
  uint32_t size;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(size));
  return size;
}
// The address of `pointer` (this CTA's shared memory) in CTA `rank`'s shared memory.
__device__ __forceinline__ uint32_t cluster_address(const void* pointer, uint32_t rank) {
  uint32_t address;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(address) : "r"(smem_address(pointer)), "r"(rank));
  return address;
}
__device__ __forceinline__ void store_cluster(uint32_t address, float a, float b, float c, float d) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(address), "f"(a), "f"(b), "f"(c), "f"(d)
               : "memory");
}
__device__ __forceinline__ float load_cluster(uint32_t address) {
  float value;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(value) : "r"(address) : "memory");
  return value;
}

}  // namespace vt::cuda::device
