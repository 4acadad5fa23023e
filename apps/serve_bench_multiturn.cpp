// `vt bench serve --workload multiturn`: sessions of turns as multi-turn chat and coding agents
// send them (each turn the whole history after a system prompt every session shares), and what a
// prefix cache saves them: cached prompt tokens against all prompt tokens and against the tokens
// the previous turn left reusable, and TTFT by turn.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

#include "apps/serve_bench.h"

namespace vt::apps::serve_bench {
namespace {

// README.md and docs/ through the Qwen3.5 tokenizer (SmolLM2's: 3.1). The sizes asked for are
// approximate; the report counts the server's tokens (usage).
constexpr double kCharsPerToken = 3.4;

// About `tokens` of corpus text from paragraph `first` on, cut at a space or line end so that no
// UTF-8 sequence is split.
std::string corpus_text(const std::vector<std::string>& corpus, uint64_t first, int64_t tokens) {
  const size_t chars = size_t(double(std::max<int64_t>(1, tokens)) * kCharsPerToken);
  std::string text;
  for (uint64_t i = first; text.size() < chars; ++i)
    text += (text.empty() ? "" : "\n\n") + corpus[i % corpus.size()];
  size_t cut = text.find_last_of(" \n", chars);
  if (cut == std::string::npos || cut == 0)
    for (cut = chars; cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80;) --cut;
  text.resize(cut);
  return text;
}

// Turn `turn` (from 1) of session `session`: new text to read and a question about it. The first
// turn names its task, so that no two sessions share more than the system prompt.
std::string user_message(const std::vector<std::string>& corpus, uint64_t session, int64_t turn,
                         const ServeBenchArgs& args) {
  const uint64_t first = (session * uint64_t(args.turns) + uint64_t(turn)) * 7;
  const std::string text = corpus_text(corpus, first, args.user_tokens);
  if (turn == 1)
    return "Task " + std::to_string(session) +
           ": read this part of the documentation and summarise it in two sentences.\n\n" + text;
  return "Next, this part. How does it relate to what you read before?\n\n" + text;
}

double ratio(double part, double whole) {
  return whole > 0 ? std::round(part / whole * 1000) / 1000 : 0.0;
}

struct TurnTotals {
  int64_t requests = 0, ok = 0, prompt_tokens = 0, cached_tokens = 0, reusable_tokens = 0;
  std::vector<double> ttft;

  void add(const Sample& sample) {
    ++requests;
    prompt_tokens += sample.prompt_tokens;
    cached_tokens += sample.cached_tokens;
    reusable_tokens += sample.reusable_tokens;
    if (sample.status != 200 || sample.cancelled) return;
    ++ok;
    ttft.push_back(sample.ttft);
  }

  Json to_json(Json turn) const {
    return {{"turn", std::move(turn)},
            {"requests", requests},
            {"ok", ok},
            {"prompt_tokens", prompt_tokens},
            {"cached_tokens", cached_tokens},
            {"reusable_tokens", reusable_tokens},
            {"hit_rate", ratio(double(cached_tokens), double(prompt_tokens))},
            {"ttft_ms", percentiles_ms(ttft)}};
  }
};

}  // namespace

std::string multiturn_system_prompt(const std::vector<std::string>& corpus, int64_t tokens) {
  return "You are a coding assistant for the vt repository, a C++20/CUDA inference engine. "
         "Answer from its documentation below.\n\n" +
         corpus_text(corpus, 0, tokens);
}

std::vector<Sample> run_multiturn_session(const ApiClient& client, const std::string& model,
                                          const std::vector<std::string>& corpus,
                                          const std::string& system_prompt, uint64_t session,
                                          int64_t cancel_after, const ServeBenchArgs& args) {
  // Think times vary (half to 1.5 times --think-time) so that sessions do not move in lockstep.
  std::mt19937_64 rng(args.seed ^ (session * 0x9E3779B97F4A7C15ull));
  std::uniform_real_distribution<double> think(0.5 * args.think_time, 1.5 * args.think_time);
  Json messages = Json::array({{{"role", "system"}, {"content", system_prompt}}});
  std::vector<Sample> samples;
  for (int64_t turn = 1; turn <= args.turns; ++turn) {
    if (turn > 1 && args.think_time > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(think(rng)));
    messages.push_back({{"role", "user"}, {"content", user_message(corpus, session, turn, args)}});
    Sample sample =
        client.chat(model, messages, args.multiturn_tokens, turn == args.turns ? cancel_after : 0);
    sample.turn = turn;
    // The previous turn's prompt and completion start this prompt (the template renders the reply
    // after it), as far as the reply's text re-tokenises the same: the most a cache can serve.
    if (turn > 1)
      sample.reusable_tokens = std::min(
          sample.prompt_tokens, samples.back().prompt_tokens + samples.back().completion_tokens);
    const bool answered = sample.status == 200 && !sample.cancelled;
    // The reply goes back as the server returned it, reasoning included (templates decide what of
    // it they render).
    Json reply = {{"role", "assistant"}, {"content", sample.content}};
    if (!sample.reasoning.empty()) reply["reasoning_content"] = sample.reasoning;
    samples.push_back(std::move(sample));
    if (!answered) break;
    messages.push_back(std::move(reply));
  }
  return samples;
}

// Hit rate: cached over prompt tokens, all turns. Reusable hit rate: cached over reusable tokens,
// turns 2 on; a first turn's hits (the shared system prompt, from other sessions) count only in the
// former, as the bench cannot count the system prompt's tokens without the server's tokenizer.
Json summarize_multiturn(const std::vector<Sample>& samples, const ServeBenchArgs& args) {
  std::vector<TurnTotals> by_turn(size_t(args.turns));
  TurnTotals all, later, from_third;  // later: turns >= 2
  int64_t sessions = 0;
  for (const Sample& sample : samples) {
    if (sample.turn < 1 || sample.turn > args.turns) continue;
    sessions += sample.turn == 1;
    by_turn[size_t(sample.turn - 1)].add(sample);
    all.add(sample);
    if (sample.turn >= 2) later.add(sample);
    if (sample.turn >= 3) from_third.add(sample);
  }
  Json turns = Json::array();
  for (size_t i = 0; i < by_turn.size(); ++i) turns.push_back(by_turn[i].to_json(int64_t(i + 1)));
  return {{"sessions", sessions},
          {"turns", args.turns},
          {"system_tokens", args.system_tokens},
          {"user_tokens", args.user_tokens},
          {"think_time_s", args.think_time},
          {"prompt_tokens", all.prompt_tokens},
          {"cached_tokens", all.cached_tokens},
          {"hit_rate", ratio(double(all.cached_tokens), double(all.prompt_tokens))},
          {"reusable_tokens", later.reusable_tokens},
          {"reusable_cached_tokens", later.cached_tokens},
          {"reusable_hit_rate", ratio(double(later.cached_tokens), double(later.reusable_tokens))},
          {"by_turn", turns},
          {"turns_3plus", from_third.to_json("3+")}};
}

namespace {

// "p50/p90" of a turn's TTFT, or "-" when no turn of that index answered.
std::string ttft_pair(const Json& turn) {
  if (turn["ok"].get<int64_t>() == 0) return "-";
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f/%.1f", turn["ttft_ms"]["p50"].get<double>(),
                turn["ttft_ms"]["p90"].get<double>());
  return text;
}

}  // namespace

void print_multiturn(const Json& summary) {
  const Json& multiturn = summary["multiturn"];
  const Json& by_turn = multiturn["by_turn"];
  std::printf(
      "       multiturn: %lld sessions x %lld turns, %lld prompt tokens, %lld cached: hit rate "
      "%.1f%%, %.1f%% of the %lld reusable\n",
      static_cast<long long>(multiturn["sessions"].get<int64_t>()),
      static_cast<long long>(multiturn["turns"].get<int64_t>()),
      static_cast<long long>(multiturn["prompt_tokens"].get<int64_t>()),
      static_cast<long long>(multiturn["cached_tokens"].get<int64_t>()),
      100 * multiturn["hit_rate"].get<double>(), 100 * multiturn["reusable_hit_rate"].get<double>(),
      static_cast<long long>(multiturn["reusable_tokens"].get<int64_t>()));
  std::string turns;
  for (size_t i = 0; i < std::min<size_t>(2, by_turn.size()); ++i)
    turns += ", turn " + std::to_string(i + 1) + " " + ttft_pair(by_turn[i]);
  if (by_turn.size() >= 3) turns += ", turn 3+ " + ttft_pair(multiturn["turns_3plus"]);
  std::printf("       TTFT p50/p90 ms%s\n", turns.c_str());
  const Json& cache = summary["prefix_cache"];
  std::printf(
      "       prefix cache %s: server hits %.0f of %.0f queried tokens, snapshots %.1f MiB\n",
      cache["setting"].get<std::string>().c_str(), cache["hits"].get<double>(),
      cache["queries"].get<double>(), cache["snapshot_bytes"].get<double>() / (1 << 20));
}

Json compare_prefix_cache(const Json& runs, bool json) {
  const auto find = [&](const std::string& setting, int64_t concurrency) -> const Json* {
    for (const Json& run : runs)
      if (run["workload"] == "multiturn" && run["concurrency"] == concurrency &&
          run["prefix_cache"]["setting"] == setting)
        return &run;
    return nullptr;
  };
  Json comparison = Json::array();
  std::vector<std::pair<const Json*, const Json*>> pairs;
  for (const Json& run : runs) {
    if (run["workload"] != "multiturn" || run["prefix_cache"]["setting"] != "on") continue;
    const Json* off = find("off", run["concurrency"].get<int64_t>());
    if (!off) continue;
    const Json &on_ttft = run["multiturn"]["turns_3plus"]["ttft_ms"],
               &off_ttft = (*off)["multiturn"]["turns_3plus"]["ttft_ms"];
    Json ratios = Json::object();
    for (const auto& [name, value] : on_ttft.items())
      ratios[name] = ratio(off_ttft[name].get<double>(), value.get<double>());
    comparison.push_back(
        {{"workload", "multiturn"},
         {"concurrency", run["concurrency"]},
         {"hit_rate",
          {{"on", run["multiturn"]["hit_rate"]}, {"off", (*off)["multiturn"]["hit_rate"]}}},
         {"ttft_3plus_ms", {{"on", on_ttft}, {"off", off_ttft}}},
         {"ttft_3plus_off_over_on", ratios}});
    pairs.emplace_back(&run, off);
  }
  if (json || pairs.empty()) return comparison;
  std::printf("\nprefix cache on and off, multiturn (TTFT p50/p90 ms by turn):\n");
  std::printf("%-5s %5s %9s %9s %6s %7s %15s %15s %15s %9s\n", "cache", "conc", "prompt", "cached",
              "hit%", "reuse%", "turn 1", "turn 2", "turn 3+", "snap_MiB");
  for (size_t i = 0; i < pairs.size(); ++i) {
    for (const Json* run : {pairs[i].first, pairs[i].second}) {
      const Json& multiturn = (*run)["multiturn"];
      const Json& by_turn = multiturn["by_turn"];
      std::printf("%-5s %5lld %9lld %9lld %6.1f %7.1f %15s %15s %15s %9.1f\n",
                  (*run)["prefix_cache"]["setting"].get<std::string>().c_str(),
                  static_cast<long long>((*run)["concurrency"].get<int64_t>()),
                  static_cast<long long>(multiturn["prompt_tokens"].get<int64_t>()),
                  static_cast<long long>(multiturn["cached_tokens"].get<int64_t>()),
                  100 * multiturn["hit_rate"].get<double>(),
                  100 * multiturn["reusable_hit_rate"].get<double>(),
                  by_turn.size() > 0 ? ttft_pair(by_turn[0]).c_str() : "-",
                  by_turn.size() > 1 ? ttft_pair(by_turn[1]).c_str() : "-",
                  by_turn.size() > 2 ? ttft_pair(multiturn["turns_3plus"]).c_str() : "-",
                  (*run)["prefix_cache"]["snapshot_bytes"].get<double>() / (1 << 20));
    }
    const Json& ratios = comparison[i]["ttft_3plus_off_over_on"];
    std::printf("      turn 3+ TTFT off/on: p50 %.2fx, p90 %.2fx, p99 %.2fx\n",
                ratios["p50"].get<double>(), ratios["p90"].get<double>(),
                ratios["p99"].get<double>());
  }
  return comparison;
}

}  // namespace vt::apps::serve_bench
