// BPE: a piece becomes symbols (bytes or characters), then the lowest-ranked adjacent pair is
// merged until none is left, leftmost first among equal ranks, which is HF's priority order.
#include "tokenizer/bpe.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <queue>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/utf8.h"

namespace vt {
namespace {

constexpr uint32_t kNoMerge = UINT32_MAX;
constexpr size_t kSmallWord = 96;  // up to here an O(n^2) scan beats a heap

// HF writes merges as "left right" (older files) or ["left", "right"]. `where` is built only on
// error: a Qwen3.5 file has half a million merges.
std::pair<std::string, std::string> merge_pair(const nlohmann::json& merge,
                                               const std::string& where, size_t rank) {
  if (merge.is_array()) {
    VT_CHECK(merge.size() == 2 && merge[0].is_string() && merge[1].is_string(), where, ".merges[",
             rank, "]: expected [\"left\", \"right\"]");
    return {merge[0].get<std::string>(), merge[1].get<std::string>()};
  }
  VT_CHECK(merge.is_string(), where, ".merges[", rank,
           "]: expected \"left right\" or [\"left\", \"right\"]");
  const std::string& text = merge.get_ref<const std::string&>();
  const size_t space = text.find(' ');
  VT_CHECK(space != std::string::npos && text.find(' ', space + 1) == std::string::npos, where,
           ".merges[", rank, "]: '", text, "' is not two tokens separated by one space");
  return {text.substr(0, space), text.substr(space + 1)};
}

}  // namespace

bool byte_level::to_bytes(std::string_view text, std::string& bytes) {
  bytes.clear();
  const auto* data = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t position = 0; position < text.size();) {
    uint32_t code_point = 0;
    const int length = utf8::decode(data + position, text.size() - position, &code_point);
    if (length == 0) return false;
    const int byte = byte_of(code_point);
    if (byte < 0) return false;
    bytes += char(byte);
    position += size_t(length);
  }
  return true;
}

bool BpeCache::find(std::string_view word, uint64_t hash, std::vector<int32_t>& ids) const {
  if (word.size() > kMaxWordBytes) return false;
  const int32_t entry = words_.find(word, hash);
  if (entry < 0) return false;
  ids.insert(ids.end(), ids_.begin() + offsets_[size_t(entry)],
             ids_.begin() + offsets_[size_t(entry) + 1]);
  return true;
}

void BpeCache::insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t count) {
  if (word.size() > kMaxWordBytes || words_.size() >= kMaxWords) return;
  if (offsets_.empty()) offsets_.push_back(0);
  words_.insert(word, hash, int32_t(offsets_.size() - 1));
  ids_.insert(ids_.end(), ids, ids + count);
  offsets_.push_back(uint32_t(ids_.size()));
}

BpeModel BpeModel::from_json(const nlohmann::json& model, const std::string& where,
                             bool byte_level) {
  BpeModel bpe;
  bpe.byte_level_ = byte_level;
  VT_CHECK(json_string(model, "type", where) == "BPE", where,
           ".type: only BPE models are supported, not '", json_string(model, "type", where), "'");
  const auto& dropout = model.find("dropout");
  VT_CHECK(dropout == model.end() || dropout->is_null() ||
               (dropout->is_number() && dropout->get<double>() == 0.0),
           where, ".dropout: BPE dropout is random and not supported");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    VT_CHECK(json_string_or(model, affix, "", where).empty(), where, ".", affix, ": not supported");
  bpe.fuse_unk_ = json_bool_or(model, "fuse_unk", false, where);
  bpe.byte_fallback_ = json_bool_or(model, "byte_fallback", false, where);
  bpe.ignore_merges_ = json_bool_or(model, "ignore_merges", false, where);

  const auto& vocab = json_field(model, "vocab", where);
  VT_CHECK(vocab.is_object(), where, ".vocab: expected an object of token -> id");
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab.items()) {
    VT_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX,
             where, ".vocab[\"", token, "\"]: expected a non-negative 32-bit id");
    max_id = std::max(max_id, id.get<int64_t>());
  }
  bpe.id_to_token_.resize(size_t(max_id + 1));
  bpe.has_id_.assign(size_t(max_id + 1), false);
  std::string bytes;
  for (const auto& [token, id_json] : vocab.items()) {
    const auto id = int32_t(id_json.get<int64_t>());
    VT_CHECK(!bpe.has_id_[size_t(id)], where, ".vocab: id ", id, " is given to both '",
             bpe.id_to_token_[size_t(id)], "' and '", token, "'");
    VT_CHECK(utf8::is_valid(token), where, ".vocab: token with id ", id, " is not valid UTF-8");
    bpe.id_to_token_[size_t(id)] = token;
    bpe.has_id_[size_t(id)] = true;
    bpe.vocab_.insert(token, id);
    // Tokens outside the alphabet can never match byte-level input; they only decode.
    if (byte_level && byte_level::to_bytes(token, bytes)) bpe.raw_vocab_.insert(bytes, id);
  }
  for (int b = 0; b < 256; ++b) {
    std::string character;
    utf8::append(character, byte_level::char_of(uint8_t(b)));
    bpe.byte_symbol_[b] = bpe.vocab_.find(character);
  }

  const std::string unk = json_string_or(model, "unk_token", "", where);
  if (!unk.empty()) {
    bpe.unk_id_ = bpe.vocab_.find(unk);
    VT_CHECK(bpe.unk_id_ >= 0, where, ".unk_token: '", unk, "' is not in the vocabulary");
  }

  const auto& merges = json_array(model, "merges", where);
  bpe.merges_.reserve(merges.size());
  std::string merged;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto [left, right] = merge_pair(merges[rank], where, rank);
    const int32_t left_id = bpe.vocab_.find(left), right_id = bpe.vocab_.find(right);
    VT_CHECK(left_id >= 0, where, ".merges[", rank, "]: '", left, "' is not in the vocabulary");
    VT_CHECK(right_id >= 0, where, ".merges[", rank, "]: '", right, "' is not in the vocabulary");
    merged.assign(left).append(right);
    const int32_t merged_id = bpe.vocab_.find(merged);
    VT_CHECK(merged_id >= 0, where, ".merges[", rank, "]: the merged token '", merged,
             "' is not in the vocabulary");
    bpe.merges_.insert(left_id, right_id, {uint32_t(rank), merged_id});
  }
  return bpe;
}

void BpeModel::add_unknown_unit(std::string_view unit, std::vector<int32_t>& symbols,
                                bool& unk_pending) const {
  if (byte_fallback_) {
    int32_t fallback[4];
    size_t found = 0;
    for (char c : unit) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", unsigned(static_cast<unsigned char>(c)));
      const int32_t id = vocab_.find(name);
      if (id < 0) break;
      fallback[found++] = id;
    }
    // As HF: a byte fallback leaves a pending unk where it was (it is added later).
    if (found == unit.size()) {
      symbols.insert(symbols.end(), fallback, fallback + found);
      return;
    }
  }
  if (unk_id_ < 0) return;  // no unk token: the character is dropped, as in HF
  if (unk_pending && !fuse_unk_) symbols.push_back(unk_id_);
  unk_pending = true;
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const {
  bool unk_pending = false;
  auto add_known = [&](int32_t id) {
    if (unk_pending) symbols.push_back(unk_id_), unk_pending = false;
    symbols.push_back(id);
  };
  if (byte_level_) {
    for (char c : piece) {
      const int32_t id = byte_symbol_[static_cast<unsigned char>(c)];
      if (id >= 0) {
        add_known(id);
      } else {
        std::string character;
        utf8::append(character, byte_level::char_of(static_cast<unsigned char>(c)));
        add_unknown_unit(character, symbols, unk_pending);
      }
    }
  } else {
    const auto* data = reinterpret_cast<const unsigned char*>(piece.data());
    for (size_t position = 0; position < piece.size();) {
      uint32_t code_point = 0;
      const int length = utf8::decode(data + position, piece.size() - position, &code_point);
      VT_CHECK(length > 0, "bpe: invalid UTF-8 in a pre-tokenized piece");
      const std::string_view unit = piece.substr(position, size_t(length));
      const int32_t id = vocab_.find(unit);
      if (id >= 0)
        add_known(id);
      else
        add_unknown_unit(unit, symbols, unk_pending);
      position += size_t(length);
    }
  }
  if (unk_pending) symbols.push_back(unk_id_);
}

void BpeModel::merge_small(std::vector<int32_t>& symbols) const {
  size_t count = symbols.size();
  int32_t* ids = symbols.data();
  uint32_t rank[kSmallWord];
  int32_t merged[kSmallWord];
  auto look_up = [&](size_t i) {
    const MergeTable::Merge* merge = merges_.find(ids[i], ids[i + 1]);
    rank[i] = merge ? merge->rank : kNoMerge;
    merged[i] = merge ? merge->id : -1;
  };
  for (size_t i = 0; i + 1 < count; ++i) look_up(i);
  while (count > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < count; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == kNoMerge) break;
    ids[best] = merged[best];
    // Drop symbol best + 1 and the pair that started there.
    for (size_t i = best + 1; i + 1 < count; ++i) ids[i] = ids[i + 1];
    for (size_t i = best + 1; i + 2 < count; ++i) rank[i] = rank[i + 1], merged[i] = merged[i + 1];
    --count;
    if (best > 0) look_up(best - 1);
    if (best + 1 < count) look_up(best);
  }
  symbols.resize(count);
}

// HF's Word::merge_all: a heap of (rank, position), with stale entries skipped.
void BpeModel::merge_large(std::vector<int32_t>& symbols) const {
  struct Symbol {
    int32_t id;
    int32_t previous, next;
    bool alive;
  };
  struct Candidate {
    uint32_t rank;
    int32_t position;
    int32_t merged;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : position > other.position;
    }
  };
  const auto count = int32_t(symbols.size());
  std::vector<Symbol> word(static_cast<size_t>(count));
  for (int32_t i = 0; i < count; ++i)
    word[size_t(i)] = {symbols[size_t(i)], i - 1, i + 1 < count ? i + 1 : -1, true};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push_pair = [&](int32_t position) {
    const int32_t next = word[size_t(position)].next;
    if (next < 0) return;
    if (const MergeTable::Merge* merge =
            merges_.find(word[size_t(position)].id, word[size_t(next)].id))
      queue.push({merge->rank, position, merge->id});
  };
  for (int32_t i = 0; i + 1 < count; ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = word[size_t(top.position)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = word[size_t(left.next)];
    const MergeTable::Merge* current = merges_.find(left.id, right.id);
    if (current == nullptr || current->id != top.merged) continue;  // stale entry
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) word[size_t(right.next)].previous = top.position;
    if (left.previous >= 0) push_pair(left.previous);
    push_pair(top.position);
  }
  symbols.clear();
  for (int32_t i = 0; i >= 0 && i < count; i = word[size_t(i)].next)
    symbols.push_back(word[size_t(i)].id);
}

void BpeModel::merge(std::vector<int32_t>& symbols) const {
  if (symbols.size() < 2) return;
  if (symbols.size() <= kSmallWord)
    merge_small(symbols);
  else
    merge_large(symbols);
}

void BpeModel::tokenize(std::string_view piece, std::vector<int32_t>& ids, BpeCache* cache) const {
  if (piece.empty()) return;
  const uint64_t hash = hash_bytes(piece);
  if (ignore_merges_) {
    const int32_t whole = (byte_level_ ? raw_vocab_ : vocab_).find(piece, hash);
    if (whole >= 0) {
      ids.push_back(whole);
      return;
    }
  }
  if (cache != nullptr && cache->find(piece, hash, ids)) return;
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  initial_symbols(piece, symbols);
  merge(symbols);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
  if (cache != nullptr) cache->insert(piece, hash, symbols.data(), symbols.size());
}

}  // namespace vt
