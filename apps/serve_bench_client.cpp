// `vt bench serve`'s OpenAI client: streamed chat completions timed chunk by chunk, GETs and
// /metrics, over one new Boost.Beast connection per exchange.
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <limits>
#include <sstream>

#include "apps/serve_bench.h"
#include "core/error.h"

namespace vt::apps::serve_bench {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

ApiClient::ApiClient(const std::string& url, std::string api_key, Json sampling)
    : url_(url), api_key_(std::move(api_key)), sampling_(std::move(sampling)) {
  std::string rest = url;
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  rest = rest.substr(0, rest.find('/'));
  const size_t colon = rest.rfind(':');
  host_ = colon == std::string::npos ? rest : rest.substr(0, colon);
  port_ = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  VT_CHECK(!host_.empty(), "bench serve: --url '", url, "' is not http://HOST:PORT");
}

std::pair<int, bool> ApiClient::exchange(
    http::verb method, const std::string& path, const std::string& body,
    const std::function<bool(std::string_view)>& receive) const {
  net::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code error;
  auto wait = [&] {  // runs the pending operation to its end
    io.restart();
    io.run();
    return !error;
  };
  net::ip::tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(host_, port_, error);
  if (error) return {0, false};
  stream.expires_after(std::chrono::seconds(10));
  stream.async_connect(endpoints, [&](beast::error_code result, const auto&) { error = result; });
  if (!wait()) return {0, false};
  stream.socket().set_option(net::ip::tcp::no_delay(true), error);
  http::request<http::string_body> request(method, path, 11);
  request.set(http::field::host, host_);
  if (!api_key_.empty()) request.set(http::field::authorization, "Bearer " + api_key_);
  if (method == http::verb::post) request.set(http::field::content_type, "application/json");
  request.body() = body;
  request.prepare_payload();
  stream.expires_after(std::chrono::seconds(600));
  http::async_write(stream, request, [&](beast::error_code result, size_t) { error = result; });
  if (!wait()) return {0, false};
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(std::numeric_limits<uint64_t>::max());
  stream.expires_after(std::chrono::seconds(600));
  http::async_read_header(stream, buffer, parser,
                          [&](beast::error_code result, size_t) { error = result; });
  if (!wait()) return {0, false};
  const int status = int(parser.get().result_int());
  char piece[16384];
  while (!parser.is_done()) {
    parser.get().body().data = piece;
    parser.get().body().size = sizeof(piece);
    stream.expires_after(std::chrono::seconds(600));
    http::async_read_some(stream, buffer, parser, [&](beast::error_code result, size_t) {
      error = result == http::error::need_buffer ? beast::error_code() : result;
    });
    if (!wait()) return {status, false};  // cut off
    const size_t size = sizeof(piece) - parser.get().body().size;
    if (size > 0 && !receive(std::string_view(piece, size))) return {status, false};  // hang up
  }
  return {status, true};
}

Sample ApiClient::chat(const std::string& model, const Json& messages, int64_t max_tokens,
                       int64_t cancel_after) const {
  Json body = {{"model", model},           {"messages", messages},
               {"max_tokens", max_tokens}, {"temperature", 0},
               {"stream", true},           {"stream_options", {{"include_usage", true}}}};
  body.update(sampling_);
  Sample sample;
  std::string buffer;
  const auto start = Clock::now();
  auto last = start;
  int64_t chunks = 0;
  bool done = false;  // [DONE] came
  auto receive = [&](std::string_view data) {
    buffer.append(data);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      if (event == "data: [DONE]") {
        done = true;
        continue;
      }
      const Json chunk = Json::parse(event.substr(6), nullptr, false);
      if (chunk.is_discarded()) continue;
      // A server that fails a stream it has started says so in an error event (OpenAI's form).
      if (chunk.contains("error")) {
        const Json& error = chunk["error"];
        sample.error = error.is_object() && error.contains("message") && error["message"].is_string()
                           ? error["message"].get<std::string>()
                           : error.dump();
        continue;
      }
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        const Json& usage = chunk["usage"];
        sample.prompt_tokens = usage.value("prompt_tokens", int64_t(0));
        sample.completion_tokens = usage.value("completion_tokens", int64_t(0));
        // Servers without a prefix cache leave the details out, or send null.
        if (usage.contains("prompt_tokens_details") && usage["prompt_tokens_details"].is_object()) {
          const Json& details = usage["prompt_tokens_details"];
          if (details.contains("cached_tokens") && details["cached_tokens"].is_number_integer())
            sample.cached_tokens = details["cached_tokens"].get<int64_t>();
        }
      }
      if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
      // A token's text arrives as content, or as reasoning_content while the model thinks (the
      // family's templates open <think> in the prompt): either is the next chunk of output.
      const Json& delta = chunk["choices"][0]["delta"];
      const auto text_of = [&](const char* field) {
        return delta.contains(field) && delta[field].is_string() ? delta[field].get<std::string>()
                                                                 : std::string();
      };
      const std::string content = text_of("content"), reasoning = text_of("reasoning_content");
      if (content.empty() && reasoning.empty()) continue;
      const auto now = Clock::now();
      if (chunks == 0)
        sample.ttft = std::chrono::duration<double>(now - start).count();
      else
        sample.gaps.push_back(std::chrono::duration<double>(now - last).count());
      last = now;
      sample.content += content;
      sample.reasoning += reasoning;
      if (++chunks == cancel_after) {
        sample.cancelled = true;
        return false;  // hang up
      }
    }
    return true;
  };
  const auto [status, complete] =
      exchange(http::verb::post, "/v1/chat/completions", body.dump(), receive);
  sample.status = status;
  sample.latency = std::chrono::duration<double>(Clock::now() - start).count();
  if (sample.cancelled) return sample;
  if ((!complete || !done) && sample.status == 200) sample.status = 0;  // cut off before [DONE]
  if (sample.completion_tokens == 0) sample.completion_tokens = chunks;
  return sample;
}

std::optional<std::string> ApiClient::get(const std::string& path) const {
  std::string body;
  const auto [status, complete] = exchange(http::verb::get, path, "", [&](std::string_view data) {
    body.append(data);
    return true;
  });
  if (status != 200 || !complete) return std::nullopt;
  return body;
}

Json ApiClient::get_json(const std::string& path) const {
  const auto body = get(path);
  VT_CHECK(body, "bench serve: GET ", url_, path, " failed");
  return Json::parse(*body);
}

std::map<std::string, double> ApiClient::metrics() const {
  std::map<std::string, double> values;
  const auto body = get("/metrics");
  if (!body) return values;
  std::stringstream lines(*body);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    try {
      values[line.substr(0, space)] = std::stod(line.substr(space + 1));
    } catch (const std::exception&) {
    }
  }
  return values;
}

}  // namespace vt::apps::serve_bench
