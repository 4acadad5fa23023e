// The BPE model of tokenizer.json ("model": {"type": "BPE"}): vocabulary, ranked merges,
// unk / fuse_unk / byte_fallback / ignore_merges, and a cache of words already split.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/hash_tables.h"

namespace vt {

// Words already split into ids; bounded (HF's cache is too). Not thread-safe: the owner locks.
class BpeCache {
 public:
  bool find(std::string_view word, uint64_t hash, std::vector<int32_t>& ids) const;
  void insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t count);

 private:
  static constexpr size_t kMaxWords = 1 << 18;
  static constexpr size_t kMaxWordBytes = 256;  // longer words are rare and cheap to re-split
  StringTable words_;
  std::vector<uint32_t> offsets_;  // entry i: ids_[offsets_[i], offsets_[i + 1])
  std::vector<int32_t> ids_;
};

class BpeModel {
 public:
  // byte_level: the pre-tokenizer ends with ByteLevel, so pieces arrive as raw bytes and each byte
  // is one symbol (its character in GPT-2's byte alphabet).
  static BpeModel from_json(const nlohmann::json& model, const std::string& where, bool byte_level);

  // Appends the ids of one pre-tokenized piece; cache may be null.
  void tokenize(std::string_view piece, std::vector<int32_t>& ids, BpeCache* cache) const;

  size_t size() const { return id_to_token_.size(); }  // one past the largest id
  int32_t token_to_id(std::string_view token) const { return vocab_.find(token); }
  // The vocabulary string of an id ("" for an id the vocabulary skips).
  const std::string& id_to_token(int32_t id) const { return id_to_token_[size_t(id)]; }
  bool has_id(int32_t id) const {
    return id >= 0 && size_t(id) < id_to_token_.size() && has_id_[size_t(id)];
  }
  bool byte_level() const { return byte_level_; }

 private:
  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const;
  void add_unknown_unit(std::string_view unit, std::vector<int32_t>& symbols,
                        bool& unk_pending) const;
  void merge(std::vector<int32_t>& symbols) const;
  void merge_small(std::vector<int32_t>& symbols) const;
  void merge_large(std::vector<int32_t>& symbols) const;

  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  StringTable vocab_;      // vocabulary strings as written in tokenizer.json
  StringTable raw_vocab_;  // byte_level: the raw bytes each token stands for
  MergeTable merges_;
  int32_t byte_symbol_[256];  // byte_level: id of each byte's alphabet character, or -1
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false, byte_level_ = false;
};

}  // namespace vt
