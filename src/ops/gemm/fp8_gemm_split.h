// How the wgmma FP8 GEMM (fp8_gemm_wgmma.cuh) splits a weight matrix over its CTAs: which units
// each CTA streams, in what order, and who sums each 128-row tile from whose partials. Plain C++
// for the host and the device, so the CPU tests (tests/unit/test_gemm_split.cpp) check the same
// arithmetic the kernel and its launcher run: every unit streamed once, every partial written
// once and read by its tile's summer, no CTA waiting before it has written what others wait on.
//
// The matrix is tiles x k_blocks units (a unit: one tile's 128-byte slice of K). Two walks:
//  - stream-K (receive_units == 0): the units in order, CTA c of C taking [c U / C, (c + 1) U / C).
//    A tile shared by several CTAs is summed by its first owner, whose share ends its range; the
//    later owners write their partials into slot `cta` (a CTA starts inside at most one tile).
//  - receivers (receive_units = R > 0, fewer tiles than CTAs): CTA t < tiles streams tile t's last
//    R K blocks and sums the tile; the other CTAs ("senders") split the tiles' first k_blocks - R
//    blocks evenly. R exceeds a sender's share by a slack of a few units, so the senders' partials
//    are written before their receiver needs them. A sender's piece that starts its tile writes
//    slot `tile`, any other (it starts the sender's range) slot tiles + sender.
// Slots number at most C.
// A third split runs as its own kernel (sm90_fp8_gemm_wgmma_cluster): clusters of c CTAs, one per
// tile, CTA t c + r streaming tile t's K blocks [r kb / c, (r + 1) kb / c) (cluster_walk); the
// cluster's first CTA sums the others' partials through distributed shared memory.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define VT_SPLIT_FN __host__ __device__ __forceinline__
#else
#define VT_SPLIT_FN inline
#endif

namespace vt::cuda::wgmma_gemm {

VT_SPLIT_FN int64_t unit_begin(int64_t cta, int64_t units, int64_t ctas) { return cta * units / ctas; }
// The CTA whose range [unit_begin(c), unit_begin(c + 1)) holds `unit`.
VT_SPLIT_FN int64_t unit_owner(int64_t unit, int64_t units, int64_t ctas) { return ((unit + 1) * ctas - 1) / units; }

// The R of the receivers split for `tiles` x `k_blocks` units over `ctas` CTAs, each receiver
// `slack` units longer than a sender's share; 0 (stream-K) where slack < 0, tiles >= ctas, R would
// be the whole tile, or a sender would have no unit (a receiver reads a partial from every sender
// in its range).
VT_SPLIT_FN int64_t receive_units_for(int64_t tiles, int64_t k_blocks, int64_t ctas, int64_t slack) {
  if (slack < 0 || tiles >= ctas) return 0;
  const int64_t r = (tiles * k_blocks + (ctas - tiles) * slack + ctas - 1) / ctas;
  return r < k_blocks && tiles * (k_blocks - r) >= ctas - tiles ? r : 0;
}

// The launcher's choice for a matrix on `sms` SMs: one CTA per tile where the tiles nearly fill
// the SMs (no shared tile), the receivers split where they fill at most half (with more tiles each
// sender would hand out many small pieces), else stream-K over every SM.
struct Split {
  int64_t ctas, receive_units;
};
VT_SPLIT_FN Split plan_split(int64_t tiles, int64_t k_blocks, int64_t sms, int64_t slack) {
  const int64_t units = tiles * k_blocks;
  if (tiles <= sms && 10 * tiles >= 9 * sms) return {tiles, 0};
  const int64_t receive = 2 * tiles <= sms ? receive_units_for(tiles, k_blocks, sms, slack) : 0;
  if (receive) return {sms, receive};
  return {units < sms ? units : sms, 0};
}

// A CTA's units as a walk over a sequence: position p in [begin, end) is tile p / width, K block
// offset + p % width.
struct Walk {
  int64_t begin, end, width, offset;
  int64_t senders, sender_units;  // receivers: the sender CTAs and the units they split
};
VT_SPLIT_FN Walk walk_of(int64_t cta, int64_t ctas, int64_t tiles, int64_t k_blocks, int64_t receive_units) {
  Walk w{};
  if (receive_units == 0) {
    const int64_t units = tiles * k_blocks;
    w.begin = unit_begin(cta, units, ctas), w.end = unit_begin(cta + 1, units, ctas);
    w.width = k_blocks;
    return w;
  }
  w.senders = ctas - tiles, w.sender_units = tiles * (k_blocks - receive_units);
  if (cta < tiles) {
    w.begin = cta * receive_units, w.end = w.begin + receive_units;
    w.width = receive_units, w.offset = k_blocks - receive_units;
  } else {
    w.begin = unit_begin(cta - tiles, w.sender_units, w.senders);
    w.end = unit_begin(cta - tiles + 1, w.sender_units, w.senders);
    w.width = k_blocks - receive_units;
  }
  return w;
}

// The cluster split: CTA `cta` of clusters of `cluster` CTAs (one cluster per tile) streams its
// tile's K blocks [r kb / c, (r + 1) kb / c), r = cta % c. Every rank has a unit where c <= kb.
VT_SPLIT_FN Walk cluster_walk(int64_t cta, int64_t cluster, int64_t k_blocks) {
  const int64_t tile = cta / cluster, rank = cta % cluster;
  Walk w{};
  w.begin = tile * k_blocks + unit_begin(rank, k_blocks, cluster);
  w.end = tile * k_blocks + unit_begin(rank + 1, k_blocks, cluster);
  w.width = k_blocks;
  return w;
}
// The largest cluster size for `tiles` tiles on `sms` SMs: at most `most` CTAs per cluster, one
// cluster per tile all resident (tiles * c <= sms), every CTA with at least one K block; 0 where
// that is under 2 (the split does not apply).
VT_SPLIT_FN int64_t cluster_size_for(int64_t tiles, int64_t k_blocks, int64_t sms, int64_t most) {
  int64_t c = tiles > 0 ? sms / tiles : 0;
  if (c > most) c = most;
  if (c > k_blocks) c = k_blocks;
  return c >= 2 ? c : 0;
}

// The stream-K split with its sum left to the consumer (fp8_gemm_wgmma_partials; add_rms_norm
// adds the shares): every CTA writes each tile share it holds as an fp32 partial, [rows][128]
// words, in slot tile x max_owners + (cta - the tile's first owner), and nobody waits. The
// consumer adds a tile's owners' partials in CTA order, the order the in-kernel summer uses (its
// own share, the first owner's, then the later owners'), so the sum is the in-kernel stream-K sum
// bit for bit. Ranges hold at least floor(units / ctas) units, so a tile of k_blocks units meets
// at most this many of them.
VT_SPLIT_FN int64_t max_tile_owners(int64_t tiles, int64_t k_blocks, int64_t ctas) {
  const int64_t shortest = tiles * k_blocks / ctas;
  return shortest < 1 ? ctas : (k_blocks + shortest - 1) / shortest + 1;
}
// The CTAs holding shares of `tile`, in the consumer's order: first..last. 32-bit arithmetic
// (the consumer runs it per thread): the caller keeps units x ctas below 2^32.
struct TileOwners {
  uint32_t first, last;
};
VT_SPLIT_FN TileOwners tile_owners(uint32_t tile, uint32_t k_blocks, uint32_t units, uint32_t ctas) {
  return {((tile * k_blocks + 1) * ctas - 1) / units, ((tile * k_blocks + k_blocks) * ctas - 1) / units};
}
VT_SPLIT_FN int64_t partial_slot(int64_t tile, int64_t owner, int64_t first_owner, int64_t max_owners) {
  return tile * max_owners + owner - first_owner;
}

// A partial word not yet written this call (the workspace starts filled with it; the summer puts
// it back after reading): a NaN that no writer stores, since partial_bits turns a partial with
// these bits into the canonical NaN (still NaN: the sum is the same). So each fp32 word says by
// itself whether it holds this call's value: no flag, fence or counter.
constexpr uint32_t kUnwritten = 0xFFFFFFFFu;
VT_SPLIT_FN uint32_t partial_bits(uint32_t bits) { return bits == kUnwritten ? 0x7FFFFFFFu : bits; }

// The (tile, K block) of consecutive walk positions without a division per unit (a 64-bit
// division per unit in the producer warp measured ~25% slower on the large shapes).
struct Cursor {
  int tile, block, first_block, end_block;
  VT_SPLIT_FN Cursor(const Walk& w, int64_t position)
      : tile(int(position / w.width)),
        block(int(w.offset + position % w.width)),
        first_block(int(w.offset)),
        end_block(int(w.offset + w.width)) {}
  VT_SPLIT_FN bool last_of_tile() const { return block + 1 == end_block; }
  VT_SPLIT_FN void advance() {
    if (++block == end_block) block = first_block, ++tile;
  }
};

// Who holds shares of `tile`, asked by a CTA whose share of it is done: the other holders are
// owners first..last (CTAs for stream-K, sender indices for receivers).
struct TileShares {
  int64_t tile, tiles, first, last;
  bool receivers;
  // Nobody else holds a share: the CTA writes the tile.
  VT_SPLIT_FN bool alone() const { return !receivers && first == last; }
  // The CTA sums the tile (else it hands its partial to the summer).
  VT_SPLIT_FN bool sums(int64_t cta) const { return receivers ? cta < tiles : cta == first; }
  // The owners whose partials the summer adds, in order: [summed_from(), last].
  VT_SPLIT_FN int64_t summed_from() const { return receivers ? first : first + 1; }
  // The owner index of a CTA that hands a partial over.
  VT_SPLIT_FN int64_t owner_of(int64_t cta) const { return receivers ? cta - tiles : cta; }
  // Where an owner's partial of this tile goes.
  VT_SPLIT_FN int64_t slot(int64_t owner) const {
    if (!receivers) return owner;
    return owner == first ? tile : tiles + owner;
  }
};
VT_SPLIT_FN TileShares tile_shares(int64_t tile, int64_t tiles, int64_t k_blocks, int64_t ctas, int64_t receive_units,
                                   const Walk& walk) {
  const bool receivers = receive_units != 0;
  const int64_t piece_units = receivers ? walk.sender_units : tiles * k_blocks;
  const int64_t piece_ctas = receivers ? walk.senders : ctas;
  const int64_t width = receivers ? k_blocks - receive_units : k_blocks;
  TileShares shares{tile, tiles, 1, 0, receivers};
  if (width > 0) {
    shares.first = unit_owner(tile * width, piece_units, piece_ctas);
    shares.last = unit_owner(tile * width + width - 1, piece_units, piece_ctas);
  }
  return shares;
}

}  // namespace vt::cuda::wgmma_gemm
