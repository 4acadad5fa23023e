// The grouped split-key attention kernels (attention_args.h): a block per (token, KV head,
// split) computes the partials of every query head of the KV head's group, so K and V are read
// once per group: on the CUDA cores (any activation dtype) and on the tensor cores (bf16).
#include <atomic>
#include <cstdlib>
#include <string>

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/launch.cuh"
#include "cuda/mbarrier.cuh"
#include "ops/attention/attention.h"
#include "ops/attention/attention_args.h"

namespace vt::cuda {
namespace {

// The decode path for the usual group sizes: block (token, KV head, split), the kGroup query heads
// that share the KV head together, so K and V are read once per group (attention.cu's per-head
// kernel reads them once per query head and a key at a time: 15% of the bandwidth at batch 16 on
// the 27B).
// Each lane owns kPerLane consecutive dims (one 16-byte load per row at head_dim 256, bf16) and
// keeps the group's q and output accumulators for them in registers; a warp takes kKeys keys at a
// time, issuing every row's load first, then forms the kKeys x kGroup partial dot products and
// sums them over the lanes by halving: each step sends half the values to the partner lane
// (offsets 16, 8, ... while keys remain), so one shuffle per value and step, after which the lanes
// of a key group (lane >> kShift) hold that key's scores, summed over their remaining lanes by a
// butterfly. Online softmax per head (a running max and sum per warp), then each key's weights are
// broadcast from its group and the warp adds weight x V. The warps merge in shared memory in a
// fixed order (deterministic). Each token's visible keys are split evenly over the splits (the
// grid is static, so a captured graph stays valid as positions grow).
namespace gqa {

// A lane's kPerLane consecutive elements of a row, kept as raw 32-bit words until used.
template <typename T, int kPerLane>
struct Slice {
  static constexpr int kWords = kPerLane * int(sizeof(T)) / 4;
  static_assert(kWords >= 1 && kPerLane * int(sizeof(T)) % 4 == 0, "whole 32-bit words per lane");
  uint32_t w[kWords];
};
template <typename T, int kPerLane>
__device__ __forceinline__ void load(Slice<T, kPerLane>& slice, const T* pointer) {
  constexpr int kWords = Slice<T, kPerLane>::kWords;
  if constexpr (kWords % 4 == 0) {
#pragma unroll
    for (int c = 0; c < kWords / 4; ++c) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(pointer) + c);
      slice.w[4 * c] = v.x, slice.w[4 * c + 1] = v.y, slice.w[4 * c + 2] = v.z, slice.w[4 * c + 3] = v.w;
    }
  } else if constexpr (kWords == 2) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(pointer));
    slice.w[0] = v.x, slice.w[1] = v.y;
  } else {
    static_assert(kWords == 1, "1, 2 or a multiple of 4 words");
    slice.w[0] = __ldg(reinterpret_cast<const unsigned int*>(pointer));
  }
}
template <typename T, int kPerLane>
__device__ __forceinline__ void zero(Slice<T, kPerLane>& slice) {
#pragma unroll
  for (int i = 0; i < Slice<T, kPerLane>::kWords; ++i) slice.w[i] = 0;
}
template <typename T, int kPerLane>
__device__ __forceinline__ void to_floats(const Slice<T, kPerLane>& slice, float (&out)[kPerLane]) {
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) out[i] = __uint_as_float(slice.w[i]);
  } else {  // bf16 pairs, the first element in the low half
#pragma unroll
    for (int i = 0; i < kPerLane / 2; ++i) {
      out[2 * i] = __uint_as_float(slice.w[i] << 16);
      out[2 * i + 1] = __uint_as_float(slice.w[i] & 0xFFFF0000u);
    }
  }
}

// Sums kCount values (key-major: key j's head h at j x kStop + h) over the lanes whose bits
// offset, offset / 2, ... differ, halving the values each step until kStop remain: a lane with the
// offset bit set keeps the upper half (the later keys) and receives it from its partner.
template <int kCount, int kStop>
__device__ __forceinline__ void halve(float* values, int lane, int offset) {
  if constexpr (kCount > kStop) {
    constexpr int kHalf = kCount / 2;
    const bool upper = (lane & offset) != 0;
#pragma unroll
    for (int i = 0; i < kHalf; ++i) {
      const float send = upper ? values[i] : values[i + kHalf];
      const float keep = upper ? values[i + kHalf] : values[i];
      values[i] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
    }
    halve<kHalf, kStop>(values, lane, offset / 2);
  }
}

constexpr int log2(int x) { return x <= 1 ? 0 : 1 + log2(x / 2); }

// The keys [begin, end) of `split` for a token that sees `visible` keys: the keys split evenly,
// each split a whole number of kRound keys (one batch of every warp).
struct KeyRange {
  int64_t begin, end;
};
__device__ __forceinline__ KeyRange split_keys(int64_t visible, int64_t splits, int64_t split, int64_t round) {
  const int64_t per_split = (visible + splits - 1) / splits;
  const int64_t keys = (per_split + round - 1) / round * round;
  const int64_t begin = split * keys;
  return {begin, min(visible, begin + keys)};
}

// A grouped kernel's block: (token, KV head, split) from the grid, its keys [begin, end) (splits
// of whole rounds of `round` keys) and the token's sequence's block table.
struct BlockKeys {
  int64_t token, kv_head, split, begin, end;
  const int32_t* table;
};
__device__ __forceinline__ BlockKeys block_keys(const AttentionArgs& args, int64_t round) {
  BlockKeys block{blockIdx.x, blockIdx.y, blockIdx.z, 0, 0, nullptr};
  const int32_t seq = args.layout.token_seq[block.token];
  const KeyRange keys = split_keys(args.layout.positions[block.token] + 1, args.num_splits, block.split, round);
  block.begin = keys.begin, block.end = keys.end;
  block.table = args.layout.block_tables + int64_t(args.layout.slots[seq]) * args.layout.max_blocks;
  return block;
}

// Cache rows of consecutive keys from `first` (< end): one division, then (block, offset)
// stepped per key; the block table is read only for keys below `end`.
struct RowWalker {
  const int32_t* table;
  int block_size, block, offset;
  int64_t block_row;
  __device__ __forceinline__ RowWalker(const int32_t* t, int size, int64_t first)
      : table(t), block_size(size), block(int(first / size)), offset(int(first - int64_t(block) * size)),
        block_row(int64_t(t[block]) * size) {}
  __device__ __forceinline__ int64_t row() const { return block_row + offset; }
  // To the next key, `more`: whether it is below end.
  __device__ __forceinline__ void next(bool more) {
    if (++offset == block_size && more) offset = 0, block_row = int64_t(table[++block]) * block_size;
  }
};

// The block's warps' partials (running max, sum and accumulators per query head of the group, in
// shared memory: warp w's max and sum of head h at [w state_stride + h], its accumulators at
// s_acc + w acc_stride, [kGroup][kDim]) merged in warp order into one partial per query head for
// the combine kernel (deterministic). After a barrier.
template <int kGroup, int kDim>
__device__ __forceinline__ void merge_warps(const float* s_max, const float* s_sum, int state_stride,
                                            const float* s_acc, int acc_stride, const AttentionArgs& args,
                                            int64_t token, int64_t kv_head, int64_t split) {
  for (int h = 0; h < kGroup; ++h) {
    float block_max = -INFINITY;
    for (int w = 0; w < kAttentionWarps; ++w)
      if (s_sum[w * state_stride + h] > 0.0f) block_max = fmaxf(block_max, s_max[w * state_stride + h]);
    float weight[kAttentionWarps], block_sum = 0.0f;
    for (int w = 0; w < kAttentionWarps; ++w) {
      weight[w] = s_sum[w * state_stride + h] > 0.0f ? __expf(s_max[w * state_stride + h] - block_max) : 0.0f;
      block_sum += s_sum[w * state_stride + h] * weight[w];
    }
    const int64_t head = kv_head * kGroup + h;
    float* out = args.partials + ((token * args.shape.num_heads + head) * args.num_splits + split) * (kDim + 2);
    if (threadIdx.x == 0) {
      out[0] = block_max;
      out[1] = block_sum;  // 0 for an empty split
    }
    for (int i = threadIdx.x; i < kDim; i += blockDim.x) {
      float value = 0.0f;
      for (int w = 0; w < kAttentionWarps; ++w) value += s_acc[w * acc_stride + h * kDim + i] * weight[w];
      out[2 + i] = value;
    }
  }
}

}  // namespace gqa

template <typename T, int kGroup, int kPerLane, int kKeys>
__global__ void __launch_bounds__(kAttentionWarps * 32, kKeys == 4 && kGroup <= 6 && sizeof(T) == 2 ? 3 : 2)
    sm90_paged_attention_gqa(AttentionArgs args) {
  static_assert(kKeys >= 2 && kKeys <= 32 && (kKeys & (kKeys - 1)) == 0, "a power-of-two batch of keys");
  constexpr int kShift = 5 - gqa::log2(kKeys);  // a key's scores end in the 1 << kShift lanes lane >> kShift
  constexpr int kDim = 32 * kPerLane;
  __shared__ float s_max[kAttentionWarps][kGroup], s_sum[kAttentionWarps][kGroup];
  __shared__ float s_acc[kAttentionWarps][kGroup][kDim];
  device::pdl_enter();
  const auto& shape = args.shape;
  const int64_t hkv = shape.num_kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // This token's keys split evenly, whole batches of the block's warps per split.
  constexpr int64_t kRound = int64_t(kAttentionWarps) * kKeys;
  const gqa::BlockKeys block = gqa::block_keys(args, kRound);
  const int block_size = int(shape.block_size);
  const T* k_cache = static_cast<const T*>(args.k_cache) + block.kv_head * kDim + lane * kPerLane;
  const T* v_cache = static_cast<const T*>(args.v_cache) + block.kv_head * kDim + lane * kPerLane;

  float r_q[kGroup][kPerLane], r_acc[kGroup][kPerLane], r_max[kGroup], r_sum[kGroup];
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
    const float* q =
        args.q + (block.token * shape.num_heads + block.kv_head * kGroup + h) * kDim + lane * kPerLane;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) r_q[h][e] = q[e] * args.scale, r_acc[h][e] = 0.0f;
    r_max[h] = -INFINITY, r_sum[h] = 0.0f;
  }
  const int my_key = lane >> kShift;
  for (int64_t base = block.begin + warp * kKeys; base < block.end; base += kRound) {
    gqa::Slice<T, kPerLane> r_k[kKeys], r_v[kKeys];
    gqa::RowWalker rows(block.table, block_size, base);
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      if (base + j < block.end) {
        const int64_t row = rows.row() * hkv;
        gqa::load(r_k[j], k_cache + row * kDim);
        gqa::load(r_v[j], v_cache + row * kDim);
        rows.next(base + j + 1 < block.end);
      } else {
        gqa::zero(r_k[j]);
        gqa::zero(r_v[j]);
      }
    }
    float r_part[kKeys * kGroup];
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      float r_key[kPerLane];
      gqa::to_floats(r_k[j], r_key);
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) dot += r_q[h][e] * r_key[e];
        r_part[j * kGroup + h] = dot;
      }
    }
    gqa::halve<kKeys * kGroup, kGroup>(r_part, lane, 16);
#pragma unroll
    for (int offset = (1 << kShift) / 2; offset > 0; offset /= 2)
#pragma unroll
      for (int h = 0; h < kGroup; ++h) r_part[h] += __shfl_xor_sync(0xffffffffu, r_part[h], offset);
    const bool valid = base + my_key < block.end;
    float r_p[kGroup];
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      const float score = valid ? r_part[h] : -INFINITY;
      float batch_max = score;
#pragma unroll
      for (int offset = 16; offset >= (1 << kShift); offset /= 2)
        batch_max = fmaxf(batch_max, __shfl_xor_sync(0xffffffffu, batch_max, offset));
      const float new_max = fmaxf(r_max[h], batch_max);  // finite: the batch has a valid key
      const float correction = __expf(r_max[h] - new_max);
      r_p[h] = valid ? __expf(score - new_max) : 0.0f;
      r_sum[h] = r_sum[h] * correction + r_p[h];  // this lane's key only; summed over the keys at the end
      r_max[h] = new_max;
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) r_acc[h][e] *= correction;
    }
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      float r_value[kPerLane];
      gqa::to_floats(r_v[j], r_value);
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        const float p = __shfl_sync(0xffffffffu, r_p[h], j << kShift);
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) r_acc[h][e] += p * r_value[e];
      }
    }
  }
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
#pragma unroll
    for (int offset = 16; offset >= (1 << kShift); offset /= 2)
      r_sum[h] += __shfl_xor_sync(0xffffffffu, r_sum[h], offset);
    if (lane == 0) s_max[warp][h] = r_max[h], s_sum[warp][h] = r_sum[h];
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) s_acc[warp][h][lane * kPerLane + e] = r_acc[h][e];
  }
  __syncthreads();
  gqa::merge_warps<kGroup, kDim>(&s_max[0][0], &s_sum[0][0], kGroup, &s_acc[0][0][0], kGroup * kDim, args,
                                 block.token, block.kv_head, block.split);
}

// The same partials on the tensor cores, for bf16 caches (head_dim 128 or 256, up to 8 query
// heads per KV head). Each warp takes 16 keys at a time: their K and V rows are copied into its
// shared-memory stages (cp.async, kStages - 1 batches in flight beside the one it multiplies, rows
// padded by 16 bytes against bank conflicts; one block per SM, its shared memory mostly stages),
// then S^T = K Q^T with mma.m16n8k16 (K by ldmatrix as A, 16 keys x 16 dims; the group's q as B,
// 8 heads), an online softmax per head, and O^T += V^T P^T (V by ldmatrix.trans as A, 16 dims x
// 16 keys; P as B through a 256-byte transpose in shared memory). q and P are fp32 split into two
// bf16 parts (hi + lo, two mma each), K and V are bf16 already, and the tensor cores sum in fp32:
// the products carry ~16 bits of q and P (the tests measure the same error as the CUDA-core
// kernel's). A thread's O^T accumulators are for the heads of its softmax state (2 (lane % 4) and
// + 1), so the running max rescales them in place.
namespace mma {

constexpr int kKeys = 16;  // keys per warp per batch: one m16 (QK) / k16 (PV) step

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t& r0, uint32_t& r1, uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(address) : "memory");
}
// 16 bytes from global to shared memory, zeros where !valid.
__device__ __forceinline__ void copy_16(uint32_t destination, const void* source, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(destination), "l"(source), "r"(valid ? 16 : 0)
               : "memory");
}
// Groups of these: device::cp_async_commit / cp_async_wait (mbarrier.cuh).
using device::smem_address;
// Two floats as a bf16 pair (the first in the low half), and x's bf16 part and its remainder's.
__device__ __forceinline__ uint32_t pack(float low, float high) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
  return *reinterpret_cast<const uint32_t*>(&pair);
}
__device__ __forceinline__ float remainder(float x) { return x - __bfloat162float(__float2bfloat16_rn(x)); }

template <int kDim>
constexpr int row_bytes() {
  return kDim * 2 + 16;
}
template <int kDim, int kStages>
constexpr int warp_bytes() {  // the stages (K and V rows of a batch each) and P's hi and lo parts
  return kStages * 2 * kKeys * row_bytes<kDim>() + 2 * 8 * kKeys * 2;
}
template <int kDim, int kStages>
constexpr size_t shared_bytes() {
  return size_t(kAttentionWarps) * warp_bytes<kDim, kStages>() + 2 * kAttentionWarps * 8 * sizeof(float);
}

}  // namespace mma

template <int kGroup, int kDim, int kStages>
__global__ void __launch_bounds__(kAttentionWarps * 32) sm90_paged_attention_mma(AttentionArgs args) {
  static_assert(kGroup <= 8 && kDim % 16 == 0 && kDim * kGroup <= 8 * 256, "8 heads of up to 256 dims");
  using mma::kKeys;
  constexpr int kRow = mma::row_bytes<kDim>(), kSteps = kDim / 16;
  extern __shared__ __align__(16) uint8_t s_raw[];
  device::pdl_enter();
  const auto& shape = args.shape;
  const int64_t hkv = shape.num_kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  uint8_t* s_warp = s_raw + warp * mma::warp_bytes<kDim, kStages>();
  uint8_t* s_p = s_warp + kStages * 2 * kKeys * kRow;  // [hi, lo][8 heads][16 keys] bf16
  float* s_max = reinterpret_cast<float*>(s_raw + kAttentionWarps * mma::warp_bytes<kDim, kStages>());  // [warp][8]
  float* s_sum = s_max + kAttentionWarps * 8;
  constexpr int64_t kRound = int64_t(kAttentionWarps) * kKeys;
  const gqa::BlockKeys block = gqa::block_keys(args, kRound);
  const int block_size = int(shape.block_size);
  const uint8_t* k_cache = static_cast<const uint8_t*>(args.k_cache) + block.kv_head * kDim * 2;
  const uint8_t* v_cache = static_cast<const uint8_t*>(args.v_cache) + block.kv_head * kDim * 2;

  // q as the B operand (16 dims x 8 heads per step): head g, dims 16 s + 2 q (+1) and + 8 (+9),
  // scaled, as bf16 hi and lo parts; heads past the group are zero.
  uint32_t r_qhi[kSteps][2], r_qlo[kSteps][2];
  {
    const float* qrow =
        args.q + (block.token * shape.num_heads + block.kv_head * kGroup + (g < kGroup ? g : 0)) * kDim;
#pragma unroll
    for (int step = 0; step < kSteps; ++step)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int dim = 16 * step + 2 * q + 8 * half;
        const float a = g < kGroup ? qrow[dim] * args.scale : 0.0f, b = g < kGroup ? qrow[dim + 1] * args.scale : 0.0f;
        r_qhi[step][half] = mma::pack(a, b);
        r_qlo[step][half] = mma::pack(mma::remainder(a), mma::remainder(b));
      }
  }
  // This warp's batches: keys first + 64 b .. + 16.
  const int64_t first = block.begin + warp * kKeys;
  const int batches = first < block.end ? int((block.end - first + kRound - 1) / kRound) : 0;
  // Batch b's K and V rows into stage b % kStages: lane l copies 16-byte piece l (and l + 32 ...)
  // of every row; keys past the end read as zeros.
  const auto issue = [&](int b) {
    const int64_t base = first + int64_t(b) * kRound;
    uint8_t* stage = s_warp + (b % kStages) * 2 * kKeys * kRow;
    gqa::RowWalker rows(block.table, block_size, base);
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      const bool valid = base + j < block.end;
      const int64_t offset = valid ? rows.row() * hkv * kDim * 2 : 0;
#pragma unroll
      for (int piece = lane; piece < kDim * 2 / 16; piece += 32) {
        mma::copy_16(mma::smem_address(stage + j * kRow + piece * 16), k_cache + offset + piece * 16, valid);
        mma::copy_16(mma::smem_address(stage + (kKeys + j) * kRow + piece * 16), v_cache + offset + piece * 16, valid);
      }
      if (valid) rows.next(base + j + 1 < block.end);
    }
  };
  float r_acc[kSteps][4];  // O^T: dims 16 t + g (+ 8 in [2], [3]) x heads 2 q, 2 q + 1
#pragma unroll
  for (int t = 0; t < kSteps; ++t) r_acc[t][0] = r_acc[t][1] = r_acc[t][2] = r_acc[t][3] = 0.0f;
  float r_max[2] = {-INFINITY, -INFINITY}, r_sum[2] = {0.0f, 0.0f};  // heads 2 q, 2 q + 1

  // One copy group per batch, empty past the last: before batch b's wait, b + kStages groups are
  // committed, so waiting for all but the newest kStages - 1 leaves batch b's rows in place.
#pragma unroll 1
  for (int b = 0; b < kStages - 1; ++b) {
    if (b < batches) issue(b);
    device::cp_async_commit();
  }
#pragma unroll 1
  for (int b = 0; b < batches; ++b) {
    if (b + kStages - 1 < batches) issue(b + kStages - 1);
    device::cp_async_commit();
    device::cp_async_wait<kStages - 1>();
    __syncwarp();
    const uint8_t* stage = s_warp + (b % kStages) * 2 * kKeys * kRow;
    const int64_t base = first + int64_t(b) * kRound;
    // S^T [16 keys x 8 heads]: K rows (lane: row lane % 8 (+ 8 for lanes 8-15 and 24-31), dims + 8
    // for lanes 16-31) as A.
    float r_s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const uint32_t k_lane = mma::smem_address(stage + ((lane % 8) + 8 * ((lane / 8) % 2)) * kRow + 16 * (lane / 16));
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      uint32_t a[4];
      mma::ldmatrix_x4(a, k_lane + step * 32);
      mma::mma_bf16(r_s, a, r_qhi[step][0], r_qhi[step][1]);
      mma::mma_bf16(r_s, a, r_qlo[step][0], r_qlo[step][1]);
    }
    // r_s: key g / g + 8 ([2], [3]) x head 2 q / 2 q + 1. Online softmax per head.
    const bool valid_low = base + g < block.end, valid_high = base + g + 8 < block.end;
    float r_p[4], correction[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float low = valid_low ? r_s[e] : -INFINITY, high = valid_high ? r_s[2 + e] : -INFINITY;
      float batch_max = fmaxf(low, high);
#pragma unroll
      for (int offset = 4; offset < 32; offset *= 2)
        batch_max = fmaxf(batch_max, __shfl_xor_sync(0xffffffffu, batch_max, offset));
      const float new_max = fmaxf(r_max[e], batch_max);  // finite: key 0 of the batch is valid
      correction[e] = __expf(r_max[e] - new_max);
      r_p[e] = valid_low ? __expf(low - new_max) : 0.0f;
      r_p[2 + e] = valid_high ? __expf(high - new_max) : 0.0f;
      r_sum[e] = r_sum[e] * correction[e] + r_p[e] + r_p[2 + e];  // this thread's two keys
      r_max[e] = new_max;
    }
#pragma unroll
    for (int t = 0; t < kSteps; ++t)
      r_acc[t][0] *= correction[0], r_acc[t][1] *= correction[1], r_acc[t][2] *= correction[0],
          r_acc[t][3] *= correction[1];
    // P as [part][head][key] bf16, then each lane's B fragment (head g, keys 2 q (+1), + 8 (+9)).
    __nv_bfloat16* p_parts = reinterpret_cast<__nv_bfloat16*>(s_p);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int head = 2 * q + (e % 2), key = g + 8 * (e / 2);
      const __nv_bfloat16 hi = __float2bfloat16_rn(r_p[e]);
      p_parts[head * kKeys + key] = hi;
      p_parts[8 * kKeys + head * kKeys + key] = __float2bfloat16_rn(r_p[e] - __bfloat162float(hi));
    }
    __syncwarp();
    uint32_t p_hi0, p_hi1, p_lo0, p_lo1;
    const uint32_t p_lane = mma::smem_address(s_p + (lane % 8) * kKeys * 2 + 16 * ((lane / 8) % 2));
    mma::ldmatrix_x2(p_hi0, p_hi1, p_lane);
    mma::ldmatrix_x2(p_lo0, p_lo1, p_lane + 8 * kKeys * 2);
    // O^T += V^T P^T: V rows transposed (lane: row lane % 8 (+ 8 for lanes 16-31), dims + 8 for
    // lanes 8-15 and 24-31) as A, 16 dims at a time.
    const uint32_t v_lane =
        mma::smem_address(stage + (kKeys + (lane % 8) + 8 * (lane / 16)) * kRow + 16 * ((lane / 8) % 2));
#pragma unroll
    for (int t = 0; t < kSteps; ++t) {
      uint32_t a[4];
      mma::ldmatrix_x4_trans(a, v_lane + t * 32);
      mma::mma_bf16(r_acc[t], a, p_hi0, p_hi1);
      mma::mma_bf16(r_acc[t], a, p_lo0, p_lo1);
    }
    __syncwarp();  // the stage and P are read: the next batches may overwrite them
  }
  device::cp_async_wait<0>();
  // The warp's state: sums over its keys (lanes differing in g), then per head into shared memory
  // (the stages are done: accumulators [kGroup][kDim] at the warp's own region).
#pragma unroll
  for (int e = 0; e < 2; ++e)
#pragma unroll
    for (int offset = 4; offset < 32; offset *= 2) r_sum[e] += __shfl_xor_sync(0xffffffffu, r_sum[e], offset);
  __syncwarp();
  float* s_acc_warp = reinterpret_cast<float*>(s_warp);
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int head = 2 * q + e;
    if (head < kGroup) {
      if (g == 0) s_max[warp * 8 + head] = r_max[e], s_sum[warp * 8 + head] = r_sum[e];
#pragma unroll
      for (int t = 0; t < kSteps; ++t) {
        s_acc_warp[head * kDim + 16 * t + g] = r_acc[t][e];
        s_acc_warp[head * kDim + 16 * t + g + 8] = r_acc[t][2 + e];
      }
    }
  }
  __syncthreads();
  gqa::merge_warps<kGroup, kDim>(s_max, s_sum, 8, reinterpret_cast<const float*>(s_raw),
                                 mma::warp_bytes<kDim, kStages>() / int(sizeof(float)), args, block.token,
                                 block.kv_head, block.split);
}

// The grouped kernel for (group, head_dim) pairs it is built for; false for any other (the
// per-head kernel runs them). bf16 rows take 8 keys per warp at a time up to 6 heads a group and
// more than 4 tokens, else 4 (registers: the group's q and accumulators, and every key's K and V
// slices, per lane; at 4 keys three blocks fit an SM, which wins at 1-4 tokens).
template <typename T, int kGroup, int kPerLane>
void launch_gqa(const AttentionArgs& args, dim3 grid, const ::vt::trace::LaunchCost& cost, cudaStream_t stream) {
  if constexpr (sizeof(T) == 2) {
    if (kGroup <= 6 && grid.x > 4) {
      launch("sm90_paged_attention_gqa", cost, sm90_paged_attention_gqa<T, kGroup, kPerLane, 8>, grid,
             dim3(kAttentionWarps * 32), 0, stream, args);
      return;
    }
  }
  launch("sm90_paged_attention_gqa", cost, sm90_paged_attention_gqa<T, kGroup, kPerLane, 4>, grid,
         dim3(kAttentionWarps * 32), 0, stream, args);
}
template <typename T, int kGroup>
bool launch_gqa_dims(const AttentionArgs& args, dim3 grid, const ::vt::trace::LaunchCost& cost,
                     cudaStream_t stream) {
  switch (args.shape.head_dim) {
    case 64: launch_gqa<T, kGroup, 2>(args, grid, cost, stream); return true;
    case 128: launch_gqa<T, kGroup, 4>(args, grid, cost, stream); return true;
    case 256: launch_gqa<T, kGroup, 8>(args, grid, cost, stream); return true;
    default: return false;
  }
}
// The tensor-core kernel (bf16 caches, head_dim 128 or 256, groups of up to 8), two shared-memory
// stages per warp (a third measured no faster).
template <int kGroup, int kDim>
void launch_mma(const AttentionArgs& args, dim3 grid, const ::vt::trace::LaunchCost& cost, cudaStream_t stream) {
  constexpr int kStages = 2;
  static std::atomic<uint64_t> devices{0};
  constexpr size_t bytes = mma::shared_bytes<kDim, kStages>();
  allow_dynamic_shared(sm90_paged_attention_mma<kGroup, kDim, kStages>, bytes, devices, "sm90_paged_attention_mma");
  launch("sm90_paged_attention_mma", cost, sm90_paged_attention_mma<kGroup, kDim, kStages>, grid,
         dim3(kAttentionWarps * 32), bytes, stream, args);
}
template <int kDim>
bool launch_mma_group(const AttentionArgs& args, dim3 grid, const ::vt::trace::LaunchCost& cost,
                      cudaStream_t stream) {
  switch (args.shape.num_heads / args.shape.num_kv_heads) {
    case 1: launch_mma<1, kDim>(args, grid, cost, stream); return true;
    case 2: launch_mma<2, kDim>(args, grid, cost, stream); return true;
    case 3: launch_mma<3, kDim>(args, grid, cost, stream); return true;
    case 4: launch_mma<4, kDim>(args, grid, cost, stream); return true;
    case 6: launch_mma<6, kDim>(args, grid, cost, stream); return true;
    case 8: launch_mma<8, kDim>(args, grid, cost, stream); return true;
    default: return false;
  }
}
bool mma_serves(DType act, const AttentionShape& shape) {
  if (shape.num_kv_heads <= 0 || shape.num_heads % shape.num_kv_heads != 0) return false;
  const int64_t group = shape.num_heads / shape.num_kv_heads;
  return act == DType::kBF16 && (shape.head_dim == 128 || shape.head_dim == 256) &&
         (group <= 4 || group == 6 || group == 8);
}
bool launch_mma_kernel(DType act, const AttentionArgs& args, dim3 grid, const ::vt::trace::LaunchCost& cost,
                       cudaStream_t stream) {
  if (!mma_serves(act, args.shape)) return false;
  switch (args.shape.head_dim) {
    case 128: return launch_mma_group<128>(args, grid, cost, stream);
    case 256: return launch_mma_group<256>(args, grid, cost, stream);
    default: return false;
  }
}

template <typename T>
bool launch_gqa_group(const AttentionArgs& args, dim3 grid, const ::vt::trace::LaunchCost& cost,
                      cudaStream_t stream) {
  switch (args.shape.num_heads / args.shape.num_kv_heads) {
    case 1: return launch_gqa_dims<T, 1>(args, grid, cost, stream);
    case 2: return launch_gqa_dims<T, 2>(args, grid, cost, stream);
    case 3: return launch_gqa_dims<T, 3>(args, grid, cost, stream);
    case 4: return launch_gqa_dims<T, 4>(args, grid, cost, stream);
    case 6: return launch_gqa_dims<T, 6>(args, grid, cost, stream);
    case 8: return launch_gqa_dims<T, 8>(args, grid, cost, stream);
    default: return false;
  }
}

}  // namespace

bool launch_grouped_attention(DType act, const AttentionArgs& args, dim3 grid, const ::vt::trace::LaunchCost& cost,
                              cudaStream_t stream) {
  if (launch_mma_kernel(act, args, grid, cost, stream)) return true;
  bool launched = false;
  VT_DISPATCH_ACT(act, T, launched = launch_gqa_group<T>(args, grid, cost, stream));
  return launched;
}

int64_t attention_target_blocks(const AttentionShape& shape, DType act) {
  if (!mma_serves(act, shape)) return 512;
  int device = 0, sms = 0;
  VT_CUDA_CHECK(cudaGetDevice(&device));
  VT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

}  // namespace vt::cuda
