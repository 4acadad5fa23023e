// Tokenizer throughput on one thread: load time, encode of every line of a file (as the tests do),
// decode and the streaming detokenizer over the same ids. Compared with HF tokenizers by
// scripts/tokenizer/bench_hf.py; results in docs/perf/2026-11-29-tokenizer.md.
//   vt_tokenizer_bench TOKENIZER_DIR TEXT_FILE [REPEATS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR TEXT_FILE [REPEATS]\n", argv[0]);
    return 2;
  }
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
  std::ifstream in(argv[2], std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  std::vector<std::string> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    end = end == std::string::npos ? text.size() : end + 1;
    lines.push_back(text.substr(start, end - start));
    start = end;
  }

  // The same text in 64-line chunks: per-call overhead out of the way.
  std::vector<std::string> chunks;
  for (size_t i = 0; i < lines.size(); i += 64) {
    chunks.emplace_back();
    for (size_t j = i; j < lines.size() && j < i + 64; ++j) chunks.back() += lines[j];
  }

  auto start = std::chrono::steady_clock::now();
  auto tokenizer = vt::Tokenizer::load(argv[1]);
  const double load_seconds = seconds_since(start);

  double best_encode = 1e30, best_encode_cold = 1e30, best_chunks = 1e30, best_decode = 1e30,
         best_stream = 1e30;
  size_t token_count = 0;
  std::vector<std::vector<int32_t>> encoded(lines.size());
  for (int repeat = 0; repeat < repeats; ++repeat) {
    // Cold: a fresh tokenizer each time, so the word cache starts empty (first repeat only costs
    // the load).
    if (repeat == 0) {
      start = std::chrono::steady_clock::now();
      for (size_t i = 0; i < lines.size(); ++i) encoded[i] = tokenizer->encode(lines[i]);
      best_encode_cold = seconds_since(start);
    }
    start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < lines.size(); ++i) encoded[i] = tokenizer->encode(lines[i]);
    best_encode = std::min(best_encode, seconds_since(start));
    token_count = 0;
    for (const auto& ids : encoded) token_count += ids.size();

    start = std::chrono::steady_clock::now();
    size_t chunk_tokens = 0;
    for (const std::string& chunk : chunks) chunk_tokens += tokenizer->encode(chunk).size();
    best_chunks = std::min(best_chunks, seconds_since(start));
    if (chunk_tokens == 0) return 1;

    start = std::chrono::steady_clock::now();
    size_t decoded_bytes = 0;
    for (const auto& ids : encoded) decoded_bytes += tokenizer->decode(ids).size();
    best_decode = std::min(best_decode, seconds_since(start));

    start = std::chrono::steady_clock::now();
    vt::StreamingDetokenizer stream(*tokenizer);
    size_t streamed_bytes = 0;
    for (const auto& ids : encoded)
      for (int32_t id : ids) streamed_bytes += stream.push(id).size();
    streamed_bytes += stream.finish().size();
    best_stream = std::min(best_stream, seconds_since(start));
    if (decoded_bytes == 0 || streamed_bytes == 0) return 1;
  }
  const double megabytes = double(text.size()) / 1e6;
  std::printf(
      "vt  %s: load %.2f s | %zu lines, %.1f MB, %zu tokens | encode per line: cold %.2f s (%.1f "
      "MB/s), "
      "warm %.2f s (%.1f MB/s) | encode 64-line chunks %.2f s (%.1f MB/s) | decode per line %.2f s "
      "(%.1f M tok/s) | stream %.2f s (%.1f M tok/s)\n",
      argv[1], load_seconds, lines.size(), megabytes, token_count, best_encode_cold,
      megabytes / best_encode_cold, best_encode, megabytes / best_encode, best_chunks,
      megabytes / best_chunks, best_decode, double(token_count) / best_decode / 1e6, best_stream,
      double(token_count) / best_stream / 1e6);
  return 0;
}
