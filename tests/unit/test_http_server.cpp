// The HTTP transport on loopback with raw sockets: keep-alive and pipelining, streams in chunks,
// the header hook before any body, body limits on chunked bodies, deadlines, the connection cap,
// and a hang-up reaching the handler.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "server/http_server.h"

namespace vt::server {
namespace {

using namespace std::chrono_literals;

// A server on a free loopback port, run on its own thread.
class TestServer {
 public:
  explicit TestServer(HttpServerOptions options, std::vector<HttpRoute> routes,
                      HttpServer::HeaderHook hook = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    server_ = std::make_unique<HttpServer>(
        options, std::move(routes), std::move(hook),
        [](int status, const std::string& message) {
          return "{\"error\": {\"status\": " + std::to_string(status) + ", \"message\": \"" +
                 message + "\"}}";
        },
        [](int) {});
    port = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }
  ~TestServer() {
    server_->stop(100ms);
    thread_.join();
  }
  int port = 0;

 private:
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(uint16_t(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return fd;
}

void send_all(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += size_t(n);
  }
}

// Reads until `until` appears, the peer closes, or the 5 s receive timeout passes.
std::string receive(int fd, const std::string& until = "") {
  std::string data;
  char buffer[65536];
  while (until.empty() || data.find(until) == std::string::npos) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    data.append(buffer, size_t(n));
  }
  return data;
}

HttpRoute echo_route() {
  return {"POST", "/echo", [](const std::shared_ptr<HttpExchange>& exchange) {
            exchange->respond({200, "text/plain", "got " + exchange->request().body, {}});
          }};
}

TEST(HttpServer, KeepAliveAndPipelinedRequestsAnswerInOrder) {
  TestServer server({}, {echo_route()});
  const int fd = connect_to(server.port);
  send_all(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\na");
  EXPECT_NE(receive(fd, "got a").find("HTTP/1.1 200 OK"), std::string::npos);
  send_all(fd,
           "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nb"
           "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nc");
  const std::string both = receive(fd, "got c");
  ASSERT_NE(both.find("got b"), std::string::npos);
  EXPECT_LT(both.find("got b"), both.find("got c"));
  send_all(fd, "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(receive(fd, "}}").find("HTTP/1.1 404"), std::string::npos);
  ::close(fd);
}

// HEAD is answered as GET without a body, and so is its 404, so that the next answer on the
// connection is read from its first byte; a known path asked with another method is a 405 naming
// the methods it takes.
TEST(HttpServer, HeadHasNoBodyAndAnotherMethodIs405) {
  HttpRoute health{"GET", "/health", [](const std::shared_ptr<HttpExchange>& exchange) {
                     exchange->respond({200, "application/json", "{\"status\": \"ok\"}", {}});
                   }};
  TestServer server({}, {echo_route(), health});
  const int fd = connect_to(server.port);
  send_all(fd,
           "HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n"
           "HEAD /nowhere HTTP/1.1\r\nHost: x\r\n\r\n"
           "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\na");
  const std::string answers = receive(fd, "got a");
  const size_t second = answers.find("HTTP/1.1", 1), third = answers.find("HTTP/1.1", second + 1);
  ASSERT_NE(third, std::string::npos) << answers;
  const std::string head = answers.substr(0, second), missing = answers.substr(second, third - second);
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: 16\r\n"), std::string::npos) << head;  // the GET body's length
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n") << head;             // and no body
  EXPECT_EQ(missing.rfind("HTTP/1.1 404", 0), 0u) << missing;
  EXPECT_EQ(missing.substr(missing.size() - 4), "\r\n\r\n") << missing;
  EXPECT_EQ(answers.substr(third).rfind("HTTP/1.1 200 OK", 0), 0u) << answers.substr(third);

  send_all(fd, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string wrong = receive(fd, "}}");
  EXPECT_EQ(wrong.rfind("HTTP/1.1 405", 0), 0u) << wrong;
  EXPECT_NE(wrong.find("Allow: POST\r\n"), std::string::npos) << wrong;
  send_all(fd, "POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nz");
  const std::string refused = receive(fd, "}}");
  EXPECT_EQ(refused.rfind("HTTP/1.1 405", 0), 0u) << refused;
  EXPECT_NE(refused.find("Allow: GET, HEAD\r\n"), std::string::npos) << refused;
  ::close(fd);
}

TEST(HttpServer, StreamsInChunks) {
  HttpRoute route{"GET", "/stream", [](const std::shared_ptr<HttpExchange>& exchange) {
                    exchange->start_stream({200, "text/event-stream", "", {}});
                    EXPECT_TRUE(exchange->write("data: 1\n\n"));
                    EXPECT_TRUE(exchange->write("data: 2\n\n"));
                    exchange->end();
                  }};
  TestServer server({}, {route});
  const int fd = connect_to(server.port);
  send_all(fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string answer = receive(fd, "0\r\n\r\n");
  EXPECT_NE(answer.find("Transfer-Encoding: chunked"), std::string::npos);
  EXPECT_NE(answer.find("9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"), std::string::npos)
      << answer;
  ::close(fd);
}

TEST(HttpServer, HeaderHookAnswersBeforeTheBody) {
  auto hook = [](const HttpRequest& request, HttpHeaders& extra) -> std::optional<HttpResponse> {
    extra.emplace_back("X-Seen", "yes");
    if (request.header("authorization") != "Bearer key")
      return HttpResponse{401, "application/json", "{}", {}};
    return std::nullopt;
  };
  TestServer server({}, {echo_route()}, hook);
  const int fd = connect_to(server.port);
  // Announces 100 MB and sends none of it: the refusal must not wait for the body.
  send_all(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n");
  const std::string answer = receive(fd);
  EXPECT_NE(answer.find("HTTP/1.1 401"), std::string::npos);
  EXPECT_NE(answer.find("X-Seen: yes"), std::string::npos);
  EXPECT_NE(answer.find("Connection: close"), std::string::npos);
  ::close(fd);
  // With the key, the announced size is refused, also before the body.
  const int with_key = connect_to(server.port);
  send_all(with_key,
           "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer key\r\nContent-Length: "
           "100000000\r\n\r\n");
  const std::string too_large = receive(with_key);
  EXPECT_NE(too_large.find("HTTP/1.1 413"), std::string::npos) << too_large;
  EXPECT_NE(too_large.find("X-Seen: yes"), std::string::npos);
  ::close(with_key);
}

TEST(HttpServer, ChunkedBodyOverTheLimitIs413) {
  HttpServerOptions options;
  options.max_body_bytes = 1000;
  TestServer server(options, {echo_route()});
  const int fd = connect_to(server.port);
  std::string request = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int chunk = 0; chunk < 8; ++chunk) request += "100\r\n" + std::string(256, 'a') + "\r\n";
  send_all(fd, request);
  EXPECT_NE(receive(fd, "}}").find("HTTP/1.1 413"), std::string::npos);
  ::close(fd);
  const int within = connect_to(server.port);
  send_all(
      within,
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
  EXPECT_NE(receive(within, "got abc").find("HTTP/1.1 200"), std::string::npos);
  ::close(within);
}

TEST(HttpServer, HeaderDeadlineClosesADrippingConnection) {
  HttpServerOptions options;
  options.header_timeout = 300ms;
  TestServer server(options, {echo_route()});
  const int fd = connect_to(server.port);
  const auto start = std::chrono::steady_clock::now();
  send_all(fd, "POST /echo HTTP/1.1\r\n");
  for (int line = 0; line < 20; ++line) {
    std::this_thread::sleep_for(50ms);
    send_all(fd, "X-Drip: 1\r\n");
  }
  EXPECT_EQ(receive(fd), "");  // closed without an answer
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  ::close(fd);
}

TEST(HttpServer, ConnectionsBeyondTheCapGet503) {
  HttpServerOptions options;
  options.max_connections = 2;
  TestServer server(options, {echo_route()});
  const int first = connect_to(server.port), second = connect_to(server.port);
  std::this_thread::sleep_for(100ms);
  const int third = connect_to(server.port);
  EXPECT_NE(receive(third).find("HTTP/1.1 503"), std::string::npos);
  ::close(third);
  ::close(first);
  ::close(second);
}

TEST(HttpServer, AHangUpReachesTheHandler) {
  std::atomic<bool> gone{false};
  std::shared_ptr<HttpExchange> held;
  std::atomic<bool> received{false};
  HttpRoute route{"GET", "/wait",
                  [&](const std::shared_ptr<HttpExchange>& exchange) {
                    held = exchange;  // answered never: the client hangs up first
                    exchange->on_gone([&] { gone = true; });
                    received = true;
                  },
                  /*on_worker=*/true};
  TestServer server({}, {route});
  const int fd = connect_to(server.port);
  send_all(fd, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n");
  for (int wait = 0; wait < 200 && !received; ++wait) std::this_thread::sleep_for(10ms);
  ::close(fd);
  for (int wait = 0; wait < 200 && !gone; ++wait) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(gone);
  EXPECT_TRUE(held->gone());
  EXPECT_FALSE(held->write("late"));
  held.reset();
}

TEST(HttpServer, AReaderTooSlowIsCutOffAndTheWriterNeverWaits) {
  HttpServerOptions options;
  options.max_queued_bytes = 1 << 20;
  std::atomic<bool> gone{false}, refused{false};
  std::atomic<int> writes{0};
  HttpRoute route{"GET", "/flood",
                  [&](const std::shared_ptr<HttpExchange>& exchange) {
                    exchange->on_gone([&] { gone = true; });
                    exchange->start_stream({200, "text/event-stream", "", {}});
                    const std::string piece(256 << 10, 'x');
                    for (int index = 0; index < 400 && !refused; ++index) {
                      if (!exchange->write(piece)) refused = true;
                      ++writes;
                      std::this_thread::sleep_for(1ms);
                    }
                    exchange->end();
                  },
                  /*on_worker=*/true};
  TestServer server(options, {route});
  const int fd = connect_to(server.port);
  send_all(fd, "GET /flood HTTP/1.1\r\nHost: x\r\n\r\n");  // and never reads
  for (int wait = 0; wait < 500 && !refused; ++wait) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(refused) << writes << " writes of 256 KiB all accepted";
  EXPECT_LT(writes.load(), 400);
  for (int wait = 0; wait < 200 && !gone; ++wait) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(gone);
  ::close(fd);
}

}  // namespace
}  // namespace vt::server
