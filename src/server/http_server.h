// The HTTP/1.1 transport under vt serve: an event-driven server (Boost.Beast's parser on Asio) for
// many long-lived streams. Every connection has deadlines for its headers and body, the number of
// connections is capped (refused with a 503 beyond it), a hook sees the headers before any body is
// read (auth, CORS), bodies are limited on every transfer encoding, and a response is either one
// body or a stream of chunks whose writes never block the caller (a reader too slow is cut off).
// A client that hangs up before its answer is written is reported to the handler at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vt::server {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target without its query
  HttpHeaders headers;
  std::string body;
  // The first header of that name (case-insensitive), or "".
  std::string header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;     // 0: any free port
  int backlog = 4096;  // the listen queue (the kernel caps it at net.core.somaxconn)
  // Open connections at once; a connection beyond it gets a 503 and is closed.
  size_t max_connections = 4096;
  std::chrono::milliseconds header_timeout{
      10000};  // from the connection (or the last answer) to the end of the headers
  std::chrono::milliseconds body_timeout{30000};   // from the headers to the end of the body
  std::chrono::milliseconds write_timeout{30000};  // one write to a client that does not read
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 1 << 20;  // Content-Length or chunked alike; 413 beyond it
  // Bytes of a stream queued for a client that reads slower than it is written; beyond it the
  // client is cut off (as if it hung up), so the writer never waits.
  size_t max_queued_bytes = 8 << 20;
  int io_threads = 2;      // sockets, parsing, writes
  int worker_threads = 8;  // handlers that may take a while (HttpRoute::on_worker)
};

// One request being answered. Thread-safe: any thread may answer, and the answer is written on the
// connection's own thread. Answer once with respond(), or with start_stream(), write()s and end().
class HttpExchange {
 public:
  struct Connection;
  HttpExchange(std::shared_ptr<Connection> connection, HttpRequest request,
               HttpHeaders extra_headers);
  ~HttpExchange();
  HttpExchange(const HttpExchange&) = delete;
  HttpExchange& operator=(const HttpExchange&) = delete;

  const HttpRequest& request() const { return request_; }
  void respond(HttpResponse response);
  // Sends the status and headers; the body follows in chunks (Transfer-Encoding: chunked).
  void start_stream(HttpResponse head);
  // Queues a chunk; false when the client is gone or was cut off for reading too slowly.
  bool write(std::string data);
  void end();
  // Runs `callback` once on the connection's thread when the client goes away before the answer is
  // written (at once if it already has). It must be quick.
  void on_gone(std::function<void()> callback);
  // Runs `task` on the connection's thread (serialised with on_gone callbacks).
  void post(std::function<void()> task);
  bool gone() const;

 private:
  std::shared_ptr<Connection> connection_;
  HttpRequest request_;
  HttpHeaders extra_headers_;
  std::atomic<bool> answered_{false};
  std::atomic<bool> streaming_{false};
};

using HttpHandler = std::function<void(const std::shared_ptr<HttpExchange>&)>;

struct HttpRoute {
  std::string method, path;
  HttpHandler handler;
  // Runs on the worker pool (parsing, tokenising); otherwise on the IO thread, so it must be quick.
  bool on_worker = false;
};

class HttpServer {
 public:
  // Sees a request's headers before its body is read (the body is empty): returns an answer to send
  // instead (401, a CORS preflight) or nothing, and adds headers every answer to it carries (CORS).
  using HeaderHook =
      std::function<std::optional<HttpResponse>(const HttpRequest&, HttpHeaders& extra_headers)>;
  // The body of an error answer made by the transport (404, 413, 503 ...).
  using ErrorBody = std::function<std::string(int status, const std::string& message)>;
  // Called with the status of every answer as it starts.
  using StatusObserver = std::function<void(int status)>;

  HttpServer(HttpServerOptions options, std::vector<HttpRoute> routes, HeaderHook header_hook,
             ErrorBody error_body, StatusObserver observe_status);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens; returns the port. Throws vt::Error when it cannot.
  int bind();
  // Serves until stop().
  void run();
  // Stops accepting, lets answers being written finish (up to `grace`), then closes everything and
  // makes run() return. Thread-safe.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));
  size_t connections() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace vt::server
