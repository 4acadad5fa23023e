// The server over an engine whose model forward fails (FaultyModel, a stand-in for a CUDA error),
// on SmolLM2 (skipped unless fetched, as vt_smollm2_tests): a non-streaming request gets a 500 with
// an OpenAI-style error body, a stream an error event then [DONE] (never a finish_reason), and then
// /health, new requests and /metrics say the engine failed (503, vt_engine_failed 1).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "apps/serve_bench.h"
#include "engine/engine.h"
#include "io/gguf.h"
#include "model/faulty_model.h"
#include "models/registry.h"
#include "server/server.h"
#include "tokenizer/gguf_tokenizer.h"

namespace vt {
namespace {

namespace http = boost::beast::http;
using apps::serve_bench::ApiClient;
using Json = nlohmann::json;

const std::string kModel = std::string(VT_SOURCE_DIR) + "/.cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

// vt serve in this process over `model` with its batched forwards failing from `fail_from` on.
class FailingServer {
 public:
  FailingServer(Model& model, const Tokenizer& tokenizer, int64_t fail_from) : faulty_(model, fail_from) {
    EngineOptions options;
    options.max_running = 2;
    options.cache_blocks = 256;
    options.prefill_chunk = 64;
    options.step_token_budget = 128;
    engine_ = std::make_unique<Engine>(faulty_, &tokenizer, options);
    server::ServerOptions server_options;
    server_options.port = 0;
    server_options.model_name = "m";
    server_ = std::make_unique<server::Server>(*engine_, server::ModelTextView{&tokenizer, nullptr, {}}, server_options);
    url_ = "http://127.0.0.1:" + std::to_string(server_->bind());
    thread_ = std::thread([this] { server_->run(); });
  }
  ~FailingServer() {
    server_->stop();
    thread_.join();
  }
  const std::string& url() const { return url_; }
  const Engine& engine() const { return *engine_; }

 private:
  FaultyModel faulty_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<server::Server> server_;
  std::thread thread_;
  std::string url_;
};

struct Answer {
  int status = 0;
  std::string body;
};

Answer post(const ApiClient& client, const Json& body) {
  Answer answer;
  answer.status = client
                      .exchange(http::verb::post, "/v1/completions", body.dump(),
                                [&](std::string_view data) {
                                  answer.body.append(data);
                                  return true;
                                })
                      .first;
  return answer;
}

Answer get(const ApiClient& client, const std::string& path) {
  Answer answer;
  answer.status = client
                      .exchange(http::verb::get, path, "",
                                [&](std::string_view data) {
                                  answer.body.append(data);
                                  return true;
                                })
                      .first;
  return answer;
}

class ServerEngineFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModel)) {
      const char* required = std::getenv("VT_REQUIRE_SMOLLM2");
      if (required && std::string(required) == "1") FAIL() << kModel << " is missing; run scripts/fetch-smollm2.sh";
      GTEST_SKIP() << kModel << " is not fetched (scripts/fetch-smollm2.sh)";
    }
    if (!model_) {
      model_ = load_model(kModel, {}).release();
      tokenizer_ = load_gguf_tokenizer(GgufFile(kModel)).release();
    }
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tokenizer_;
    model_ = nullptr;
    tokenizer_ = nullptr;
  }
  static Model* model_;
  static Tokenizer* tokenizer_;
};
Model* ServerEngineFailureTest::model_ = nullptr;
Tokenizer* ServerEngineFailureTest::tokenizer_ = nullptr;

const Json kRequest = {{"model", "m"}, {"prompt", "The capital of France is"}, {"max_tokens", 32}, {"temperature", 0}};

TEST_F(ServerEngineFailureTest, NonStreamingGets500ThenTheServerRefuses) {
  FailingServer server(*model_, *tokenizer_, 4);
  const ApiClient client(server.url(), "");
  ASSERT_EQ(get(client, "/health").status, 200);

  const Answer failed = post(client, kRequest);
  EXPECT_EQ(failed.status, 500) << failed.body;
  const Json error = Json::parse(failed.body)["error"];
  EXPECT_EQ(error["type"], "server_error");
  EXPECT_EQ(error["code"], "generation_failed");
  EXPECT_NE(error["message"].get<std::string>().find("injected fault"), std::string::npos) << failed.body;
  EXPECT_TRUE(server.engine().failed());

  const Answer health = get(client, "/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(Json::parse(health.body)["status"], "failed");
  const Answer refused = post(client, kRequest);
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(Json::parse(refused.body)["error"]["code"], "engine_failed");
  Json streaming = kRequest;
  streaming["stream"] = true;
  EXPECT_EQ(post(client, streaming).status, 503);
  const Answer metrics = get(client, "/metrics");
  EXPECT_NE(metrics.body.find("\nvt_engine_failed 1\n"), std::string::npos);
  EXPECT_NE(metrics.body.find("\nvt_requests_running 0\n"), std::string::npos);
  EXPECT_NE(metrics.body.find("\nvt_kv_blocks_used 0\n"), std::string::npos);
}

// Tokens streamed before the fault stay; the stream then carries the error and [DONE], and no
// chunk claims the choice finished.
TEST_F(ServerEngineFailureTest, StreamGetsAnErrorEventThenDone) {
  FailingServer server(*model_, *tokenizer_, 6);
  const ApiClient client(server.url(), "");
  Json streaming = kRequest;
  streaming["stream"] = true;
  const Answer answer = post(client, streaming);
  ASSERT_EQ(answer.status, 200) << answer.body;
  std::vector<Json> events;
  bool done = false;
  for (size_t start = 0, end; (end = answer.body.find("\n\n", start)) != std::string::npos; start = end + 2) {
    const std::string event = answer.body.substr(start, end - start);
    ASSERT_EQ(event.rfind("data: ", 0), 0u) << event;
    ASSERT_FALSE(done) << "an event after [DONE]: " << event;
    if (event == "data: [DONE]") {
      done = true;
      continue;
    }
    events.push_back(Json::parse(event.substr(6)));
  }
  EXPECT_TRUE(done) << answer.body;
  ASSERT_GE(events.size(), 2u) << answer.body;
  const Json& last = events.back();
  ASSERT_TRUE(last.contains("error")) << last.dump();
  EXPECT_EQ(last["error"]["code"], "generation_failed");
  EXPECT_NE(last["error"]["message"].get<std::string>().find("injected fault"), std::string::npos);
  int64_t text_chunks = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    ASSERT_TRUE(events[i].contains("choices")) << events[i].dump();
    EXPECT_TRUE(events[i]["choices"][0]["finish_reason"].is_null()) << events[i].dump();
    text_chunks += !events[i]["choices"][0]["text"].get<std::string>().empty();
  }
  EXPECT_GE(text_chunks, 1);  // the tokens made before the fault
  EXPECT_EQ(get(client, "/health").status, 503);
}

}  // namespace
}  // namespace vt
