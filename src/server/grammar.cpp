// Structured output on xgrammar: compiled grammars (cached by xgrammar's compiler) and the
// per-sequence token rule that masks logits with a matcher's bitmask once reasoning is over.
#include "server/grammar.h"

#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <limits>
#include <string>
#include <variant>

#include "server/validation.h"

namespace vt::server {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kThinkClose = "</think>";

// Token texts as xgrammar's RAW vocabulary wants them: the bytes a token decodes to; special
// tokens are "" (xgrammar never lets them stand for text).
std::vector<std::string> raw_vocabulary(const Tokenizer& tokenizer, bool special_as_empty) {
  std::vector<std::string> texts(size_t(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.is_special(id)) {
      texts[size_t(id)] = special_as_empty ? "" : tokenizer.id_to_token(id);
    } else if (tokenizer.bytes_per_token()) {
      texts[size_t(id)] = std::string(tokenizer.token_bytes(id));
    } else {
      texts[size_t(id)] = tokenizer.decode({id});
    }
  }
  return texts;
}

class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(const xgrammar::CompiledGrammar& grammar, const std::vector<int32_t>& stop_ids,
                    std::shared_ptr<const std::vector<std::string>> texts, bool wait_for_reasoning, int64_t vocab_size)
      : matcher_(grammar, std::vector<int>(stop_ids.begin(), stop_ids.end())),
        texts_(std::move(texts)),
        active_(!wait_for_reasoning),
        bitmask_(size_t(xgrammar::GetBitmaskSize(int(vocab_size)))) {
    shape_[0] = int64_t(bitmask_.size());
    tensor_.data = bitmask_.data();
    tensor_.device = DLDevice{kDLCPU, 0};
    tensor_.ndim = 1;
    tensor_.dtype = xgrammar::GetBitmaskDLType();
    tensor_.shape = shape_;
    tensor_.strides = nullptr;
    tensor_.byte_offset = 0;
  }

  void mask(float* logits, int64_t vocab_size) override {
    if (!active_ || !matcher_.FillNextTokenBitmask(&tensor_)) return;  // reasoning, or every token allowed
    constexpr float kBlocked = -std::numeric_limits<float>::infinity();
    // Word by word: most words of a grammar's mask are all refused or all allowed.
    for (int64_t word = 0; word * 32 < vocab_size; ++word) {
      const uint32_t bits = uint32_t(bitmask_[size_t(word)]);
      if (bits == ~0u) continue;
      const int64_t end = std::min<int64_t>(vocab_size, word * 32 + 32);
      for (int64_t id = word * 32; id < end; ++id)
        if (!((bits >> (id & 31)) & 1u)) logits[id] = kBlocked;
    }
  }

  bool accept(int32_t token) override {
    if (active_) {
      if (!matcher_.AcceptToken(token)) return false;
      history_.push_back({Step::kMatched, {}, false});
      return true;
    }
    Step step{Step::kReasoning, tail_, false};
    if (token >= 0 && size_t(token) < texts_->size()) tail_ += (*texts_)[size_t(token)];
    const size_t close = tail_.find(kThinkClose);
    if (close == std::string::npos) {
      // Only the end that may still start the tag is kept.
      if (tail_.size() >= kThinkClose.size()) tail_.erase(0, tail_.size() - (kThinkClose.size() - 1));
    } else {
      // Reasoning ended inside this token: the grammar starts here; text after the tag in the
      // same token is its first input (when the grammar takes it).
      step.kind = Step::kActivated;
      active_ = true;
      const std::string rest = tail_.substr(close + kThinkClose.size());
      step.took_rest = !rest.empty() && matcher_.AcceptString(rest);
      tail_.clear();
    }
    history_.push_back(std::move(step));
    return true;
  }

  void rollback(int count) override {
    for (; count > 0 && !history_.empty(); --count) {
      Step& step = history_.back();
      if (step.kind == Step::kMatched) {
        matcher_.Rollback(1);
      } else {
        if (step.kind == Step::kActivated && step.took_rest) matcher_.Rollback(1);
        active_ = false;
        tail_ = std::move(step.tail);
      }
      history_.pop_back();
    }
  }

 private:
  struct Step {
    enum Kind { kReasoning, kActivated, kMatched } kind;
    std::string tail;  // the reasoning's end before the token (restored by rollback)
    bool took_rest;    // kActivated: the matcher took text after `</think>`
  };
  xgrammar::GrammarMatcher matcher_;
  std::shared_ptr<const std::vector<std::string>> texts_;
  bool active_;
  std::string tail_;
  std::vector<Step> history_;
  std::vector<int32_t> bitmask_;  // bit id set: token id allowed
  int64_t shape_[1] = {0};
  DLTensor tensor_{};
};

std::string structural_tag_message(const xgrammar::StructuralTagError& error) {
  return std::visit([](const auto& detail) { return std::string(detail.what()); }, error);
}

}  // namespace

struct StructuredOutput::Impl {
  int64_t vocab_size;
  std::vector<int32_t> stop_ids;
  std::shared_ptr<const std::vector<std::string>> texts;
  xgrammar::TokenizerInfo info;
  xgrammar::GrammarCompiler compiler;

  Impl(const Tokenizer& tokenizer, int64_t vocab, std::vector<int32_t> stops)
      : vocab_size(std::max<int64_t>(vocab, tokenizer.vocab_size())),  // xgrammar wants every token id
        stop_ids(std::move(stops)),
        texts(std::make_shared<const std::vector<std::string>>(raw_vocabulary(tokenizer, false))),
        info(raw_vocabulary(tokenizer, true), xgrammar::VocabType::RAW, int(vocab_size), stop_ids),
        compiler(info, /*max_threads=*/2, /*cache_enabled=*/true) {}

  xgrammar::CompiledGrammar compile(const ChatOptions& options, const OutputParserOptions& output) {
    const bool forced_call =
        options.has_tools() && (options.tool_choice == ToolChoice::kRequired || options.tool_choice == ToolChoice::kNamed);
    std::string param = "tools";
    try {
      xgrammar::Grammar grammar = xgrammar::Grammar::BuiltinJSONGrammar();
      if (forced_call) {
        auto tag = xgrammar::Grammar::FromStructuralTag(tool_call_structural_tag(options, output.format).dump());
        if (auto* error = std::get_if<xgrammar::StructuralTagError>(&tag))
          throw ApiError(400, "the tool-call grammar cannot be built from 'tools': " + structural_tag_message(*error),
                         param);
        grammar = std::get<xgrammar::Grammar>(tag);
      } else {
        // Compact JSON (no free whitespace): a small model cannot wander into endless newlines.
        const bool object = options.response_format == ResponseFormat::kJsonObject;
        param = object ? "response_format" : "response_format.json_schema.schema";
        grammar = xgrammar::Grammar::FromJSONSchema(object ? R"({"type": "object"})" : options.json_schema.dump(),
                                                    /*any_whitespace=*/false, std::nullopt, std::nullopt,
                                                    /*strict_mode=*/true);
      }
      // After `</think>` the family writes a blank line before answering: allowed, no more.
      if (output.reasoning)
        grammar = xgrammar::Grammar::Concat({xgrammar::Grammar::FromEBNF(R"(root ::= [\n]{0,2})"), grammar});
      return compiler.CompileGrammar(grammar);
    } catch (const ApiError&) {
      throw;
    } catch (const std::exception& error) {
      throw ApiError(400, "the grammar for '" + param + "' cannot be compiled: " + error.what(), param);
    }
  }
};

StructuredOutput::StructuredOutput(const Tokenizer& tokenizer, int64_t vocab_size, std::vector<int32_t> stop_ids)
    : impl_(std::make_unique<Impl>(tokenizer, vocab_size, std::move(stop_ids))) {}

StructuredOutput::~StructuredOutput() = default;

ConstraintFactory StructuredOutput::constraint_for(const ChatOptions& options, const OutputParserOptions& output) {
  if (!wants_structure(options)) return nullptr;
  const xgrammar::CompiledGrammar grammar = impl_->compile(options, output);
  return [grammar, stop_ids = impl_->stop_ids, texts = impl_->texts, wait = output.reasoning,
          vocab = impl_->vocab_size]() -> std::unique_ptr<TokenConstraint> {
    return std::make_unique<GrammarConstraint>(grammar, stop_ids, texts, wait, vocab);
  };
}

}  // namespace vt::server
