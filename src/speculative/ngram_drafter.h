// Prompt-lookup (n-gram) drafter: finds the last n tokens earlier in the prompt + output and
// proposes what followed them there. Strong when the output repeats the prompt (edits, code,
// quoting); free to run, deterministic (q is a point mass).
#pragma once

#include "speculative/drafter.h"

namespace vt {

struct NgramOptions {
  int64_t min_n = 2;  // shortest suffix matched
  int64_t max_n = 4;  // longest suffix matched (tried first)
};

class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(const NgramOptions& options = {});
  std::string name() const override { return "ngram"; }
  void start(std::span<const int32_t>, int64_t) override {}
  // The longest suffix (max_n down to min_n) that occurs earlier wins; among its occurrences the
  // most recent. The continuation is copied from there (it may run into the suffix itself).
  void propose(std::span<const int32_t> context, int64_t max_tokens, Draft& draft) override;

 private:
  NgramOptions options_;
};

}  // namespace vt
