// The HTTP/1.1 transport on Asio with Boost.Beast's request parser. Each connection lives on its
// own strand: a deadline timer bounds the headers, the body and every write of an answer; while an
// answer is pending the next request's headers are already being read, which both finds a client
// that hung up (end of stream) at once and keeps pipelined requests in order. Answers are written
// as raw HTTP/1.1 (a Content-Length body, or chunks for a stream) from a queue of bounded size.
#include "server/http_server.h"

#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/error.h"

namespace vt::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (beast::iequals(key, beast::string_view(name.data(), name.size()))) return value;
  return "";
}

namespace {

// Status line and headers; a body of `content_length` bytes follows, or chunks when it is empty.
std::string response_head(int status, const std::string& content_type, const HttpHeaders& headers,
                          const HttpHeaders& extra_headers, std::optional<size_t> content_length,
                          bool keep_alive) {
  const auto reason = http::obsolete_reason(http::int_to_status(unsigned(status)));
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " +
                     std::string(reason.data(), reason.size()) + "\r\n";
  if (!content_type.empty()) head += "Content-Type: " + content_type + "\r\n";
  for (const auto& [name, value] : headers) head += name + ": " + value + "\r\n";
  for (const auto& [name, value] : extra_headers) head += name + ": " + value + "\r\n";
  if (!content_length)
    head += "Transfer-Encoding: chunked\r\n";
  else if (status != 204 && status >= 200)
    head += "Content-Length: " + std::to_string(*content_length) + "\r\n";
  if (!keep_alive) head += "Connection: close\r\n";
  return head + "\r\n";
}

}  // namespace

// What the listener and its connections share.
struct HttpCore {
  HttpServerOptions options;
  std::vector<HttpRoute> routes;
  HttpServer::HeaderHook header_hook;
  HttpServer::ErrorBody error_body;
  HttpServer::StatusObserver observe_status;
  net::io_context io;
  tcp::acceptor acceptor{io};
  net::steady_timer accept_retry{io};
  net::thread_pool workers;
  std::atomic<bool> stopping{false};
  std::atomic<size_t> open{0};       // connections open
  std::atomic<size_t> answering{0};  // connections with an answer not yet written
  std::mutex connections_mutex;
  std::unordered_map<HttpExchange::Connection*, std::weak_ptr<HttpExchange::Connection>>
      connections;

  HttpCore(HttpServerOptions options_, std::vector<HttpRoute> routes_,
           HttpServer::HeaderHook header_hook_, HttpServer::ErrorBody error_body_,
           HttpServer::StatusObserver observe_status_)
      : options(std::move(options_)),
        routes(std::move(routes_)),
        header_hook(std::move(header_hook_)),
        error_body(std::move(error_body_)),
        observe_status(std::move(observe_status_)),
        io(std::max(1, options.io_threads)),
        workers(size_t(std::max(1, options.worker_threads))) {}

  // HEAD is answered by the GET route, without the body (RFC 9110, 9.3.2).
  const HttpRoute* find_route(const std::string& method, const std::string& path) const {
    const std::string_view wanted = method == "HEAD" ? std::string_view("GET") : std::string_view(method);
    for (const HttpRoute& route : routes)
      if (route.method == wanted && route.path == path) return &route;
    return nullptr;
  }

  // The methods `path` answers ("GET, HEAD"), empty for a path no route has: an Allow header.
  std::string allowed_methods(const std::string& path) const {
    std::string allow;
    for (const HttpRoute& route : routes) {
      if (route.path != path) continue;
      allow += (allow.empty() ? "" : ", ") + route.method;
      if (route.method == "GET") allow += ", HEAD";
    }
    return allow;
  }

  std::string error_response(int status, const std::string& message,
                             const HttpHeaders& extra_headers, bool keep_alive, bool head) {
    if (observe_status) observe_status(status);
    const std::string body = error_body(status, message);
    return response_head(status, "application/json", {}, extra_headers, body.size(), keep_alive) +
           (head ? "" : body);
  }

  void accept(const std::shared_ptr<HttpCore>& self);
  void refuse(tcp::socket socket);
};

struct HttpExchange::Connection : std::enable_shared_from_this<HttpExchange::Connection> {
  std::shared_ptr<HttpCore> core;
  tcp::socket socket;
  const net::any_io_executor executor;  // the connection's strand
  net::steady_timer deadline;
  uint64_t deadline_serial = 0;
  beast::flat_buffer buffer;
  std::optional<http::request_parser<http::string_body>> parser;
  bool reading = false;    // a header read is pending
  bool answering = false;  // a request is being answered
  bool keep_alive = true;
  bool head_request = false;  // the request being answered is a HEAD: its answer has no body
  bool next_ready = false;  // the next request's headers came in while answering
  bool closed = false;
  std::atomic<bool> gone{false};  // hung up or cut off before its answer was written
  std::function<void()> gone_callback;
  // Pending writes: `queue` waits while `writing` is on the wire.
  std::deque<std::string> queue;
  std::string writing;
  size_t queued_bytes = 0;
  bool write_pending = false;
  bool answer_complete = false;  // the answer's last bytes are queued
  // The request whose body is being read.
  HttpRequest pending;
  HttpHeaders pending_extra;
  const HttpRoute* pending_route = nullptr;

  Connection(std::shared_ptr<HttpCore> core_, tcp::socket socket_)
      : core(std::move(core_)),
        socket(std::move(socket_)),
        executor(socket.get_executor()),
        deadline(executor) {}

  void start() {
    {
      std::lock_guard<std::mutex> lock(core->connections_mutex);
      core->connections[this] = weak_from_this();
    }
    arm(core->options.header_timeout);
    read_header();
  }

  // The timer closes the connection when it fires; arming again or disarming replaces it.
  void arm(std::chrono::milliseconds timeout) {
    const uint64_t serial = ++deadline_serial;
    deadline.expires_after(timeout);
    deadline.async_wait([self = shared_from_this(), serial](beast::error_code error) {
      if (error || serial != self->deadline_serial) return;
      self->close();
    });
  }
  void disarm() {
    ++deadline_serial;
    deadline.cancel();
  }

  void read_header() {
    head_request = false;  // a refusal before the next request's method is known carries its body
    parser.emplace();
    parser->header_limit(uint32_t(core->options.max_header_bytes));
    // No limit until the headers passed the hook (auth comes before size). Not boost::none: Beast
    // 1.74 compares a Content-Length with an empty optional as larger.
    parser->body_limit(std::numeric_limits<uint64_t>::max());
    reading = true;
    http::async_read_header(socket, buffer, *parser,
                            [self = shared_from_this()](beast::error_code error, size_t) {
                              self->reading = false;
                              self->on_header(error);
                            });
  }

  void on_header(beast::error_code error) {
    if (closed) return;
    if (answering) {  // read early, while the answer is pending
      if (error)
        notify_gone();
      else
        next_ready = true;
      return;
    }
    if (error) return read_failed(error);
    handle_header();
  }

  void read_failed(beast::error_code error) {
    if (error == http::error::body_limit)
      return refuse_request(413, "the request body exceeds " +
                                     std::to_string(core->options.max_body_bytes) + " bytes");
    if (error == http::error::header_limit)
      return refuse_request(431, "the request headers exceed " +
                                     std::to_string(core->options.max_header_bytes) + " bytes");
    if (error.category() == http::make_error_code(http::error::end_of_stream).category() &&
        error != http::error::end_of_stream && error != http::error::partial_message)
      return refuse_request(400, "malformed HTTP request: " + error.message());
    close();  // end of stream, timeout, reset
  }

  // An answer the transport makes after which the connection closes (what is left of the request
  // is not read).
  void refuse_request(int status, const std::string& message,
                      const HttpHeaders& extra_headers = {}) {
    keep_alive = false;
    begin_answer();
    queue_write(core->error_response(status, message, extra_headers, false, head_request));
    answer_complete = true;
    flush();
  }

  void handle_header() {
    disarm();
    auto& message = parser->get();
    HttpRequest request;
    request.method = std::string(message.method_string());
    const auto target = message.target();
    request.path = std::string(target.substr(0, target.find('?')));
    for (const auto& field : message)
      request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    keep_alive = message.keep_alive();
    head_request = request.method == "HEAD";
    const bool has_body = !parser->is_done();
    HttpHeaders extra;
    std::optional<HttpResponse> early;
    if (core->header_hook) early = core->header_hook(request, extra);
    if (early) {
      if (has_body) keep_alive = false;
      begin_answer();
      const std::string head = response_head(early->status, early->content_type, early->headers,
                                             extra, early->body.size(), keep_alive);
      if (core->observe_status) core->observe_status(early->status);
      queue_write(head_request ? head : head + early->body);
      answer_complete = true;
      return flush();
    }
    const HttpRoute* route = core->find_route(request.method, request.path);
    if (!route) {
      // A known path asked with another method: 405 with the methods it takes, as RFC 9110 asks.
      const std::string allow = core->allowed_methods(request.path);
      const int status = allow.empty() ? 404 : 405;
      const std::string why = allow.empty() ? "no such route" : request.path + " takes " + allow + ", not " + request.method;
      if (!allow.empty()) extra.emplace_back("Allow", allow);
      if (has_body) return refuse_request(status, why, extra);
      begin_answer();
      queue_write(core->error_response(status, why, extra, keep_alive, head_request));
      answer_complete = true;
      return flush();
    }
    const auto announced = parser->content_length();
    if (announced && *announced > core->options.max_body_bytes)
      return refuse_request(
          413,
          "the request body exceeds " + std::to_string(core->options.max_body_bytes) + " bytes",
          extra);
    parser->body_limit(
        uint64_t(core->options.max_body_bytes));  // chunked bodies: checked chunk by chunk
    pending = std::move(request);
    pending_extra = std::move(extra);
    pending_route = route;
    if (!has_body) return dispatch();
    if (beast::iequals(message[http::field::expect], "100-continue")) {
      queue_write("HTTP/1.1 100 Continue\r\n\r\n");
      flush();
    }
    arm(core->options.body_timeout);
    http::async_read(socket, buffer, *parser,
                     [self = shared_from_this()](beast::error_code error, size_t) {
                       if (self->closed) return;
                       self->disarm();
                       if (error) return self->read_failed(error);
                       self->dispatch();
                     });
  }

  void begin_answer() {
    answering = true;
    ++core->answering;
    gone = false;
  }

  void dispatch() {
    pending.body = std::move(parser->get().body());
    begin_answer();
    auto exchange = std::make_shared<HttpExchange>(shared_from_this(), std::move(pending),
                                                   std::move(pending_extra));
    const HttpRoute* route = pending_route;
    read_header();  // finds a hang-up while the answer is pending (no deadline meanwhile)
    auto run = [exchange, route, core = core] {
      try {
        route->handler(exchange);
      } catch (const std::exception& error) {
        exchange->respond({500, "application/json", core->error_body(500, error.what()), {}});
      }
    };
    if (route->on_worker)
      net::post(core->workers, std::move(run));
    else
      run();
  }

  void notify_gone() {
    if (!answering || gone) return;
    gone = true;
    if (auto callback = std::move(gone_callback)) {
      gone_callback = nullptr;
      callback();
    }
    close();
  }

  // `chunk`: a piece of a stream, which a client too slow to read it is cut off for.
  void queue_write(std::string data, bool chunk = false) {
    if (closed || data.empty()) return;
    queued_bytes += data.size();
    queue.push_back(std::move(data));
    if (chunk && queued_bytes > core->options.max_queued_bytes) {
      notify_gone();  // a reader this slow is cut off rather than waited for
      close();
    }
  }

  void flush() {
    if (closed || write_pending) return;
    if (queue.empty()) {
      if (answer_complete) answer_done();
      return;
    }
    writing.clear();
    for (std::string& data : queue) writing += data;
    queue.clear();
    write_pending = true;
    if (answering) arm(core->options.write_timeout);
    net::async_write(socket, net::buffer(writing),
                     [self = shared_from_this()](beast::error_code error, size_t) {
                       self->write_pending = false;
                       if (self->closed) return;
                       if (self->answering) self->disarm();
                       self->queued_bytes -= self->writing.size();
                       if (error) {
                         self->notify_gone();
                         return self->close();
                       }
                       self->flush();
                     });
  }

  // The answer is on the wire: the next request, or the end.
  void answer_done() {
    answer_complete = false;
    answering = false;
    --core->answering;
    gone_callback = nullptr;
    if (!keep_alive || core->stopping) return close_after_answer();
    if (next_ready) {
      next_ready = false;
      return handle_header();
    }
    arm(core->options.header_timeout);
    if (!reading) read_header();
  }

  // Half-closes, then reads and drops what the client still sends for a moment, so that an answer
  // sent before its request was read (413, 401) reaches the client instead of being lost to a
  // reset.
  void close_after_answer() {
    beast::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_send, ignored);
    if (reading) return close();
    arm(std::chrono::milliseconds(2000));
    discard();
  }
  void discard() {
    buffer.consume(buffer.size());
    socket.async_read_some(buffer.prepare(64 << 10),
                           [self = shared_from_this()](beast::error_code error, size_t) {
                             if (self->closed) return;
                             if (error) return self->close();
                             self->discard();
                           });
  }

  void close() {
    if (closed) return;
    if (answering && !gone) {
      gone = true;
      if (auto callback = std::move(gone_callback)) {
        gone_callback = nullptr;
        callback();
      }
    }
    closed = true;
    if (answering) {
      answering = false;
      --core->answering;
    }
    disarm();
    beast::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
    queue.clear();
    --core->open;
    std::lock_guard<std::mutex> lock(core->connections_mutex);
    core->connections.erase(this);
  }
};

HttpExchange::HttpExchange(std::shared_ptr<Connection> connection, HttpRequest request,
                           HttpHeaders extra_headers)
    : connection_(std::move(connection)),
      request_(std::move(request)),
      extra_headers_(std::move(extra_headers)) {}

HttpExchange::~HttpExchange() {
  // Every request ends with a status, even one whose handler dropped it.
  if (!answered_)
    respond({500,
             "application/json",
             connection_->core->error_body(500, "the request was not answered"),
             {}});
}

void HttpExchange::respond(HttpResponse response) {
  if (answered_.exchange(true)) return;
  if (connection_->core->observe_status) connection_->core->observe_status(response.status);
  net::post(connection_->executor, [connection = connection_, response = std::move(response),
                                    extra = extra_headers_, head = request_.method == "HEAD"] {
    if (connection->closed) return;
    connection->queue_write(response_head(response.status, response.content_type, response.headers,
                                          extra, response.body.size(), connection->keep_alive) +
                            (head ? "" : response.body));
    connection->answer_complete = true;
    connection->flush();
  });
}

void HttpExchange::start_stream(HttpResponse head) {
  if (answered_.exchange(true)) return;
  streaming_ = true;
  if (connection_->core->observe_status) connection_->core->observe_status(head.status);
  net::post(connection_->executor,
            [connection = connection_, head = std::move(head), extra = extra_headers_] {
              if (connection->closed) return;
              connection->queue_write(response_head(head.status, head.content_type, head.headers,
                                                    extra, std::nullopt, connection->keep_alive));
              connection->flush();
            });
}

bool HttpExchange::write(std::string data) {
  if (!streaming_ || connection_->gone || data.empty()) return !connection_->gone;
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  net::post(connection_->executor,
            [connection = connection_, data = size + std::move(data) + "\r\n"]() mutable {
              connection->queue_write(std::move(data), /*chunk=*/true);
              connection->flush();
            });
  return true;
}

void HttpExchange::end() {
  if (!streaming_) return;
  streaming_ = false;
  net::post(connection_->executor, [connection = connection_] {
    connection->queue_write("0\r\n\r\n");
    connection->answer_complete = true;
    connection->flush();
  });
}

void HttpExchange::on_gone(std::function<void()> callback) {
  net::post(connection_->executor,
            [connection = connection_, callback = std::move(callback)]() mutable {
              if (connection->gone || connection->closed)
                callback();
              else
                connection->gone_callback = std::move(callback);
            });
}

void HttpExchange::post(std::function<void()> task) {
  net::post(connection_->executor, std::move(task));
}

bool HttpExchange::gone() const {
  return connection_->gone;
}

void HttpCore::accept(const std::shared_ptr<HttpCore>& self) {
  acceptor.async_accept(net::make_strand(io), [self](beast::error_code error, tcp::socket socket) {
    if (self->stopping || error == net::error::operation_aborted) return;
    if (error) {  // out of descriptors, say: try again shortly rather than spin
      self->accept_retry.expires_after(std::chrono::milliseconds(50));
      self->accept_retry.async_wait([self](beast::error_code wait_error) {
        if (!wait_error) self->accept(self);
      });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true),
                      ignored);  // a small answer goes out now, not after the peer's delayed ACK
    if (self->open >= self->options.max_connections) {
      self->refuse(std::move(socket));
    } else {
      ++self->open;
      std::make_shared<HttpExchange::Connection>(self, std::move(socket))->start();
    }
    self->accept(self);
  });
}

void HttpCore::refuse(tcp::socket socket) {
  if (observe_status) observe_status(503);
  const std::string body =
      error_body(503, "the server has " + std::to_string(options.max_connections) +
                          " connections open, its limit; retry later");
  const std::string answer =
      response_head(503, "application/json", {{"Retry-After", "1"}}, {}, body.size(), false) + body;
  beast::error_code ignored;
  socket.non_blocking(true, ignored);
  socket.write_some(net::buffer(answer), ignored);  // a fresh socket's buffer takes it whole
  socket.shutdown(tcp::socket::shutdown_both, ignored);
  socket.close(ignored);
}

struct HttpServer::Impl {
  std::shared_ptr<HttpCore> core;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
};

HttpServer::HttpServer(HttpServerOptions options, std::vector<HttpRoute> routes,
                       HeaderHook header_hook, ErrorBody error_body, StatusObserver observe_status)
    : impl_(std::make_shared<Impl>()) {
  impl_->core =
      std::make_shared<HttpCore>(std::move(options), std::move(routes), std::move(header_hook),
                                 std::move(error_body), std::move(observe_status));
}

HttpServer::~HttpServer() {
  stop(std::chrono::milliseconds(0));
  impl_->core->workers.join();
  // Connections hold the core; break the cycle through their handlers.
  impl_->core->io.restart();
  impl_->core->io.poll();
}

int HttpServer::bind() {
  auto& core = *impl_->core;
  beast::error_code error;
  const auto address = net::ip::make_address(core.options.host, error);
  VT_CHECK(!error, "serve: '", core.options.host, "' is not an IP address");
  const tcp::endpoint endpoint(address, uint16_t(core.options.port));
  core.acceptor.open(endpoint.protocol(), error);
  if (!error) core.acceptor.set_option(net::socket_base::reuse_address(true), error);
  if (!error) core.acceptor.bind(endpoint, error);
  if (!error) core.acceptor.listen(core.options.backlog, error);
  VT_CHECK(!error, "serve: cannot bind ", core.options.host, ":", core.options.port, " (",
           error.message(), "; in use, or not an address of this machine)");
  return core.acceptor.local_endpoint().port();
}

void HttpServer::run() {
  auto core = impl_->core;
  if (core->stopping) return;
  impl_->work.emplace(core->io.get_executor());
  core->accept(core);
  std::vector<std::thread> threads;
  for (int index = 1; index < core->options.io_threads; ++index)
    threads.emplace_back([core] { core->io.run(); });
  core->io.run();
  for (std::thread& thread : threads) thread.join();
}

void HttpServer::stop(std::chrono::milliseconds grace) {
  auto core = impl_->core;
  if (core->stopping.exchange(true)) return;
  net::post(core->io, [core] {
    beast::error_code ignored;
    core->acceptor.close(ignored);
    core->accept_retry.cancel();
  });
  std::vector<std::shared_ptr<HttpExchange::Connection>> connections;
  {
    std::lock_guard<std::mutex> lock(core->connections_mutex);
    for (auto& [pointer, weak] : core->connections)
      if (auto connection = weak.lock()) connections.push_back(connection);
  }
  // Idle connections close now; those answering close once the answer is written.
  for (auto& connection : connections)
    net::post(connection->executor, [connection] {
      connection->keep_alive = false;
      if (!connection->answering) connection->close();
    });
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (core->answering > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  for (auto& connection : connections)
    net::post(connection->executor, [connection] { connection->close(); });
  impl_->work.reset();
  core->io.stop();
}

size_t HttpServer::connections() const {
  return impl_->core->open;
}

}  // namespace vt::server
