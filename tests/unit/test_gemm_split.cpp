// The wgmma FP8 GEMM's split of a weight matrix over its CTAs (fp8_gemm_split.h, the arithmetic
// the kernel and its launcher run), checked on the CPU by walking every CTA as the kernel does:
// every unit streamed once, every tile written once (alone or by its summer), every partial slot
// written once, within the workspace, and read by the summer of the same tile, and no CTA writing
// a partial after it has waited on another's (so the summers' waits cannot form a cycle); and the
// partials' self-marking words (kUnwritten, partial_bits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "ops/gemm/fp8_gemm_split.h"

namespace vt {
namespace {

namespace wg = cuda::wgmma_gemm;

void check_split(int64_t tiles, int64_t k_blocks, int64_t ctas, int64_t receive_units) {
  SCOPED_TRACE(testing::Message() << tiles << " tiles x " << k_blocks << " K blocks over " << ctas
                                  << " CTAs, receive_units " << receive_units);
  std::vector<int> streamed(size_t(tiles * k_blocks), 0), written(size_t(tiles), 0);
  std::map<int64_t, int64_t> slot_tile;                // partial slot -> the tile written there
  std::vector<std::pair<int64_t, int64_t>> reads;      // (slot, tile of the summer)
  for (int64_t cta = 0; cta < ctas; ++cta) {
    const wg::Walk walk = wg::walk_of(cta, ctas, tiles, k_blocks, receive_units);
    ASSERT_LE(walk.begin, walk.end);
    bool waited = false;
    wg::Cursor at(walk, walk.begin);
    for (int64_t u = walk.begin; u < walk.end; ++u, at.advance()) {
      ASSERT_GE(at.tile, 0);
      ASSERT_LT(at.tile, tiles);
      ASSERT_GE(at.block, 0);
      ASSERT_LT(at.block, k_blocks);
      ++streamed[size_t(at.tile * k_blocks + at.block)];
      if (!at.last_of_tile() && u + 1 != walk.end) continue;
      const wg::TileShares shares = wg::tile_shares(at.tile, tiles, k_blocks, ctas, receive_units, walk);
      if (shares.alone()) {
        ++written[size_t(at.tile)];
      } else if (!shares.sums(cta)) {
        EXPECT_FALSE(waited) << "CTA " << cta << " writes a partial after waiting on others";
        const int64_t slot = shares.slot(shares.owner_of(cta));
        ASSERT_GE(slot, 0);
        ASSERT_LT(slot, ctas) << "beyond the workspace";
        EXPECT_EQ(slot_tile.count(slot), 0u) << "slot " << slot << " written twice";
        slot_tile[slot] = at.tile;
      } else {
        waited = true;
        ++written[size_t(at.tile)];
        for (int64_t owner = shares.summed_from(); owner <= shares.last; ++owner)
          reads.push_back({shares.slot(owner), at.tile});
      }
    }
  }
  for (size_t i = 0; i < streamed.size(); ++i) ASSERT_EQ(streamed[i], 1) << "unit " << i;
  for (size_t t = 0; t < written.size(); ++t) ASSERT_EQ(written[t], 1) << "tile " << t;
  std::map<int64_t, int> read_count;
  for (const auto& [slot, tile] : reads) {
    ASSERT_EQ(slot_tile.count(slot), 1u) << "tile " << tile << " waits on slot " << slot << ", which nobody writes";
    EXPECT_EQ(slot_tile.at(slot), tile) << "slot " << slot;
    ++read_count[slot];
  }
  for (const auto& [slot, tile] : slot_tile) EXPECT_EQ(read_count[slot], 1) << "slot " << slot << " (tile " << tile << ")";
}

// A receiver streams at least `slack` units more than any sender (so their partials are written
// before it finishes its own share).
void check_slack(int64_t tiles, int64_t k_blocks, int64_t ctas, int64_t slack) {
  const int64_t receive = wg::receive_units_for(tiles, k_blocks, ctas, slack);
  if (!receive) return;
  for (int64_t cta = tiles; cta < ctas; ++cta) {
    const wg::Walk walk = wg::walk_of(cta, ctas, tiles, k_blocks, receive);
    EXPECT_GE(walk.end - walk.begin, 1) << "an idle sender, CTA " << cta;
    EXPECT_LE(walk.end - walk.begin + slack, receive) << "CTA " << cta;
  }
}

TEST(GemmSplit, The27bDecodeShapesOnAnH200) {
  struct Case {
    int64_t n, k, ctas, receive_units;
  };
  // 132 SMs, slack 2: the choices docs/perf/2026-12-02-wgmma-receivers.md measured.
  for (const Case& c : {Case{5120, 6144, 132, 16}, Case{5120, 17408, 132, 43}, Case{16384, 5120, 128, 0},
                        Case{14336, 5120, 132, 0}, Case{34816, 5120, 132, 0}, Case{248320, 5120, 132, 0}}) {
    const int64_t tiles = (c.n + 127) / 128, k_blocks = (c.k + 127) / 128;
    const wg::Split split = wg::plan_split(tiles, k_blocks, 132, 2);
    EXPECT_EQ(split.ctas, c.ctas) << c.n << " x " << c.k;
    EXPECT_EQ(split.receive_units, c.receive_units) << c.n << " x " << c.k;
    check_split(tiles, k_blocks, split.ctas, split.receive_units);
    check_slack(tiles, k_blocks, split.ctas, 2);
    const wg::Split stream_k = wg::plan_split(tiles, k_blocks, 132, -1);
    EXPECT_EQ(stream_k.receive_units, 0);
    check_split(tiles, k_blocks, stream_k.ctas, 0);
  }
}

TEST(GemmSplit, AwkwardSizesAndCtaCounts) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t tiles = 1 + int64_t(rng() % 300), k_blocks = 1 + int64_t(rng() % 140);
    const int64_t sms = 1 + int64_t(rng() % 160), slack = int64_t(rng() % 6) - 1;
    const wg::Split split = wg::plan_split(tiles, k_blocks, sms, slack);
    ASSERT_GE(split.ctas, 1);
    ASSERT_LE(split.ctas, sms);
    ASSERT_LE(split.ctas, tiles * k_blocks);
    check_split(tiles, k_blocks, split.ctas, split.receive_units);
    // The receivers split wherever it applies, not only where the launcher picks it.
    const int64_t receive = wg::receive_units_for(tiles, k_blocks, sms, slack);
    if (receive) {
      check_split(tiles, k_blocks, sms, receive);
      check_slack(tiles, k_blocks, sms, slack);
    }
    if (testing::Test::HasFatalFailure()) return;
  }
}

// The cluster split: every unit streamed once, each CTA inside its own tile with at least one unit,
// the clusters resident at once, and the 27B shapes' cluster sizes on 132 SMs.
void check_clusters(int64_t tiles, int64_t k_blocks, int64_t sms, int64_t most) {
  const int64_t c = wg::cluster_size_for(tiles, k_blocks, sms, most);
  SCOPED_TRACE(testing::Message() << tiles << " tiles x " << k_blocks << " K blocks, " << sms << " SMs: cluster " << c);
  if (!c) {
    EXPECT_TRUE(2 * tiles > sms || k_blocks < 2 || most < 2);
    return;
  }
  ASSERT_GE(c, 2);
  ASSERT_LE(c, most);
  ASSERT_LE(tiles * c, sms);
  std::vector<int> streamed(size_t(tiles * k_blocks), 0);
  for (int64_t cta = 0; cta < tiles * c; ++cta) {
    const wg::Walk walk = wg::cluster_walk(cta, c, k_blocks);
    ASSERT_LT(walk.begin, walk.end) << "CTA " << cta << " streams nothing";
    wg::Cursor at(walk, walk.begin);
    for (int64_t u = walk.begin; u < walk.end; ++u, at.advance()) {
      ASSERT_EQ(at.tile, cta / c) << "CTA " << cta << " left its tile";
      ASSERT_LT(at.block, k_blocks);
      ++streamed[size_t(at.tile * k_blocks + at.block)];
      ASSERT_EQ(at.last_of_tile() && u + 1 != walk.end, false) << "CTA " << cta << " ends its tile early";
    }
  }
  for (size_t i = 0; i < streamed.size(); ++i) ASSERT_EQ(streamed[i], 1) << "unit " << i;
}

TEST(GemmSplit, Clusters) {
  EXPECT_EQ(wg::cluster_size_for(40, 48, 132, 8), 3);      // o_proj / gdn out_proj
  EXPECT_EQ(wg::cluster_size_for(40, 136, 132, 8), 3);     // mlp down
  EXPECT_EQ(wg::cluster_size_for(128, 40, 132, 8), 0);     // gdn in_proj: one CTA per tile
  EXPECT_EQ(wg::cluster_size_for(8, 33, 132, 8), 8);       // 1000 x 4112
  EXPECT_EQ(wg::cluster_size_for(2, 2, 132, 8), 2);        // 200 x 192: one K block each
  EXPECT_EQ(wg::cluster_size_for(8, 33, 132, 4), 4);       // limited by the launcher (shared memory)
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    check_clusters(1 + int64_t(rng() % 100), 1 + int64_t(rng() % 140), 1 + int64_t(rng() % 160), int64_t(rng() % 9));
    if (testing::Test::HasFatalFailure()) return;
  }
}

// The partials' self-marking words: no written partial reads as unwritten, every other value is
// stored bit for bit, and the one it replaces stays a NaN.
TEST(GemmSplit, PartialWords) {
  const auto as_float = [](uint32_t bits) {
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  };
  EXPECT_TRUE(std::isnan(as_float(wg::kUnwritten)));
  EXPECT_NE(wg::partial_bits(wg::kUnwritten), wg::kUnwritten);
  EXPECT_TRUE(std::isnan(as_float(wg::partial_bits(wg::kUnwritten))));
  for (uint32_t bits : {0x00000000u, 0x80000000u, 0x00000001u, 0x3F800000u, 0xBF800000u, 0x7F800000u, 0xFF800000u,
                        0x7FC00000u, 0xFFC00000u, 0x7FFFFFFFu, 0xFFFFFFFEu, 0x7F7FFFFFu})
    EXPECT_EQ(wg::partial_bits(bits), bits) << std::hex << bits;
  std::mt19937 rng(5);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t bits = uint32_t(rng());
    EXPECT_EQ(wg::partial_bits(bits), bits == wg::kUnwritten ? 0x7FFFFFFFu : bits);
  }
}

}  // namespace
}  // namespace vt

namespace vt {
namespace {

// The deferred sum (fp8_gemm_wgmma_partials + add_rms_norm): walking every CTA's stream-K range as
// the kernel does, each (CTA, tile) share goes to its own slot within tiles x max_owners, and the
// consumer's owners of each tile (its 32-bit arithmetic) are exactly the CTAs that hold a share
// of it, in CTA order, the first being the one whose share the in-kernel summer starts from.
void check_deferred(int64_t tiles, int64_t k_blocks, int64_t ctas) {
  SCOPED_TRACE(testing::Message() << tiles << " tiles x " << k_blocks << " K blocks over " << ctas << " CTAs");
  const int64_t max_owners = wg::max_tile_owners(tiles, k_blocks, ctas), units = tiles * k_blocks;
  std::map<int64_t, std::pair<int64_t, int64_t>> slots;  // slot -> (cta, tile)
  std::vector<std::vector<int64_t>> holders(static_cast<size_t>(tiles));
  for (int64_t cta = 0; cta < ctas; ++cta) {
    const wg::Walk walk = wg::walk_of(cta, ctas, tiles, k_blocks, 0);
    wg::Cursor at(walk, walk.begin);
    for (int64_t u = walk.begin; u < walk.end; ++u, at.advance()) {
      if (!at.last_of_tile() && u + 1 != walk.end) continue;
      const int64_t first_owner = wg::unit_owner(at.tile * k_blocks, units, ctas);  // as the kernel
      const int64_t slot = wg::partial_slot(at.tile, cta, first_owner, max_owners);
      ASSERT_GE(slot, at.tile * max_owners) << "CTA " << cta << " tile " << at.tile;
      ASSERT_LT(slot, (at.tile + 1) * max_owners) << "CTA " << cta << " tile " << at.tile << ": beyond its slots";
      ASSERT_EQ(slots.count(slot), 0u) << "slot " << slot << " written twice";
      slots[slot] = {cta, at.tile};
      holders[size_t(at.tile)].push_back(cta);
    }
  }
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const wg::TileOwners owners =
        wg::tile_owners(uint32_t(tile), uint32_t(k_blocks), uint32_t(units), uint32_t(ctas));
    std::vector<int64_t> expected;
    for (int64_t o = owners.first; o <= int64_t(owners.last); ++o) expected.push_back(o);
    ASSERT_EQ(holders[size_t(tile)], expected) << "tile " << tile;
    // The in-kernel summer's order starts from the same first owner.
    const wg::Walk walk = wg::walk_of(owners.first, ctas, tiles, k_blocks, 0);
    const wg::TileShares shares = wg::tile_shares(tile, tiles, k_blocks, ctas, 0, walk);
    EXPECT_EQ(shares.first, int64_t(owners.first));
    EXPECT_EQ(shares.last, int64_t(owners.last));
  }
}

TEST(GemmSplit, DeferredSum) {
  // The 27B shapes that feed a norm, on 132 SMs: five slots per tile.
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{5120, 6144}, {5120, 17408}}) {
    const int64_t tiles = n / 128, k_blocks = k / 128;
    EXPECT_EQ(wg::max_tile_owners(tiles, k_blocks, 132), 5) << n << " x " << k;
    check_deferred(tiles, k_blocks, 132);
  }
  std::mt19937_64 rng(13);
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t tiles = 1 + int64_t(rng() % 300), k_blocks = 1 + int64_t(rng() % 140);
    check_deferred(tiles, k_blocks, std::min<int64_t>(1 + int64_t(rng() % 160), tiles * k_blocks));
    if (testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace vt
