// mdring/rendezvous/tcp_store.hpp: the job's key-value store over TCP, hosted by
// rank 0 (a thread of its process), for jobs without MPI (mdring-run, torchrun).
//
//   rendezvous::tcp_store_options o;
//   o.host = "10.0.0.1"; o.port = 29500; o.secret = getenv("MDRING_SECRET");
//   rendezvous::tcp_store s(rank == 0, o);      // rank 0 serves, everyone is a client
//   s.set("k", "v"); s.get("k", deadline);
//
// The server listens on o.host only (not on every interface), and accepts only
// connections that present the job's secret first: a stranger's connection, one
// that sends garbage, a frame over the size limits, or nothing within 10 s of
// connecting is closed, and the job goes on. Requests are frames:
//   handshake  "MDRS" u32 secret length, secret         -> 'K' (accepted) or 'R', close
//   request    op u32 key length, u32 value length, key, value
//              op 'S' set -> 'K';  'G' get -> 'V' u32 length, value (once set);
//              'A' add (value: a decimal delta) -> 'V' u32 length, the new value, or
//                  'E' u32 length, why (a sum outside 64 bits: the counter is left as
//                  it was, and the client throws invalid_argument naming delta)
// A get that passes its deadline throws timeout_error naming the key; that
// connection is dropped and the next call reconnects. One store object is used by
// one thread at a time.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "socket.hpp"
#include "store.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace rendezvous {

/// How a tcp_store connects and what its server accepts.
struct tcp_store_options {
  std::string host = "127.0.0.1";                       ///< the server listens on this address only
  std::uint16_t port = 0;                               ///< server: 0 picks a free port (port() says which)
  std::string secret;                                   ///< every connection presents it (MDRING_SECRET)
  std::size_t max_key_bytes = 1024;                     ///< the server refuses longer keys
  std::size_t max_value_bytes = std::size_t(16) << 20;  ///< the server refuses longer values
  std::size_t max_keys = std::size_t(1) << 20;          ///< the server holds at most this many keys
  std::chrono::milliseconds connect_timeout{60000};     ///< clients retry until the server is up
};

namespace detail {

// The server: one thread, poll() over the listening socket and the connections.
class store_server {
public:
  explicit store_server(const tcp_store_options& o) : o_(o) {
    addrinfo* res = resolve(o.host, o.port, true);
    for (addrinfo* a = res; a && !listen_; a = a->ai_next) {
      fd s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0));
      if (!s) continue;
      int one = 1;
      setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(s.get(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(s.get(), 1024) == 0) listen_ = std::move(s);
    }
    freeaddrinfo(res);
    if (!listen_)
      throw transport_error("mdring::rendezvous::tcp_store: cannot listen on " + o.host + ":" + std::to_string(o.port) +
                                ": " + std::strerror(errno) + " (is the port in use? MDRING_STORE_PORT picks another)",
                            errno);
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    getsockname(listen_.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) throw transport_error("mdring::rendezvous::tcp_store: pipe failed", errno);
    wake_r_.reset(p[0]);
    wake_w_.reset(p[1]);
    thread_ = std::thread([this] { serve(); });
  }
  ~store_server() {
    stop_ = true;
    char c = 0;
    (void)!::write(wake_w_.get(), &c, 1);
    thread_.join();
  }
  std::uint16_t port() const noexcept { return port_; }

private:
  struct conn {
    fd s;
    std::string in;
    bool trusted = false;
    std::chrono::steady_clock::time_point since;
  };
  using clk = std::chrono::steady_clock;

  void serve() {
    std::map<std::string, std::vector<int>> waiting;  // key -> connections waiting for it
    for (;;) {
      std::vector<pollfd> pf{{wake_r_.get(), POLLIN, 0}, {listen_.get(), POLLIN, 0}};
      for (auto& [f, c] : conns_) pf.push_back({f, POLLIN, 0});
      (void)::poll(pf.data(), pf.size(), 1000);
      if (stop_) return;
      if (pf[1].revents & POLLIN) {
        const int s = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (s >= 0) {
          no_delay(s);
          conns_[s] = conn{fd(s), {}, false, clk::now()};
        }
      }
      const auto now = clk::now();
      for (std::size_t i = 2; i < pf.size(); ++i) {
        auto it = conns_.find(pf[i].fd);
        if (it == conns_.end()) continue;
        bool ok = true;
        if (pf[i].revents & (POLLIN | POLLHUP | POLLERR)) {
          char buf[65536];
          const ssize_t k = ::recv(pf[i].fd, buf, sizeof buf, MSG_DONTWAIT);
          if (k <= 0) ok = k < 0 && (errno == EAGAIN || errno == EINTR);
          else ok = take(it->second, buf, std::size_t(k), waiting);
        }
        if (!it->second.trusted && now - it->second.since > std::chrono::seconds(10)) ok = false;
        if (!ok) drop(pf[i].fd, waiting);
      }
    }
  }

  void drop(int f, std::map<std::string, std::vector<int>>& waiting) {
    for (auto& [k, v] : waiting) std::erase(v, f);
    conns_.erase(f);
  }

  // Takes bytes from c; answers every whole frame. false: close the connection.
  bool take(conn& c, const char* p, std::size_t n, std::map<std::string, std::vector<int>>& waiting) {
    c.in.append(p, n);
    for (;;) {
      const auto* u = reinterpret_cast<const unsigned char*>(c.in.data());
      if (!c.trusted) {
        if (c.in.size() < 8) return c.in.compare(0, c.in.size(), std::string("MDRS").substr(0, c.in.size())) == 0;
        if (c.in.compare(0, 4, "MDRS") != 0) return false;
        const std::uint32_t len = get_u32(u + 4);
        if (len > 4096) return false;
        if (c.in.size() < 8 + len) return true;
        const bool good = same_secret(c.in.substr(8, len), o_.secret);
        send_all(c.s.get(), good ? "K" : "R", 1);
        if (!good) return false;
        c.trusted = true;
        c.in.erase(0, 8 + len);
        continue;
      }
      if (c.in.size() < 9) return true;
      const char op = c.in[0];
      const std::uint32_t kl = get_u32(u + 1), vl = get_u32(u + 5);
      if ((op != 'S' && op != 'G' && op != 'A') || kl > o_.max_key_bytes || vl > o_.max_value_bytes) return false;
      if (c.in.size() < 9 + std::size_t(kl) + vl) return true;
      std::string key = c.in.substr(9, kl), value = c.in.substr(9 + kl, vl);
      c.in.erase(0, 9 + std::size_t(kl) + vl);
      const int f = c.s.get();
      if (op == 'G') {
        if (auto it = kv_.find(key); it != kv_.end()) reply(f, it->second);
        else waiting[key].push_back(f);
        continue;
      }
      if (!kv_.count(key) && kv_.size() >= o_.max_keys) return false;
      if (op == 'A') {
        // Read as atoll reads (a leading integer, 0 without one), but a number or a
        // sum outside 64 bits is refused instead of overflowing.
        using limits = std::numeric_limits<long long>;
        long long have = 0, delta = 0;
        const auto it = kv_.find(key);
        if (!read_count(it == kv_.end() ? std::string() : it->second, have) || !read_count(value, delta) ||
            (delta > 0 && have > limits::max() - delta) || (delta < 0 && have < limits::min() - delta)) {
          reply(f,
                "the counter (" + (it == kv_.end() ? std::string("0") : it->second.substr(0, 32)) + ") plus " +
                    value.substr(0, 32) + " is outside the 64-bit range",
                'E');
          continue;
        }
        value = std::to_string(have + delta);
      }
      kv_[key] = value;
      if (op == 'S') send_all(f, "K", 1);
      else reply(f, value);
      if (auto w = waiting.find(key); w != waiting.end()) {
        for (int g : w->second) reply(g, value);
        waiting.erase(w);
      }
    }
  }
  static bool read_count(const std::string& text, long long& out) {
    errno = 0;
    out = std::strtoll(text.c_str(), nullptr, 10);
    return errno != ERANGE;
  }
  static void reply(int f, const std::string& v, char kind = 'V') {
    std::string out(1, kind);
    put_u32(out, std::uint32_t(v.size()));
    out += v;
    send_all(f, out.data(), out.size());
  }

  tcp_store_options o_;
  fd listen_, wake_r_, wake_w_;
  std::uint16_t port_ = 0;
  std::map<int, conn> conns_;
  std::map<std::string, std::string> kv_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace detail

/// The TCP key-value store of mdring-run and the UCX transport (see the top); one process hosts the server.
class tcp_store final : public store {
public:
  /// is_server: this process hosts the store (and is a client of it too).
  tcp_store(bool is_server, tcp_store_options o) : o_(std::move(o)) {
    if (o_.secret.empty())
      throw invalid_argument("secret",
                             "mdring::rendezvous::tcp_store: the secret is empty (MDRING_SECRET: every "
                             "process of the job must present the same one)");
    if (is_server) {
      server_ = std::make_unique<detail::store_server>(o_);
      o_.port = server_->port();
    }
    connect();
  }

  std::uint16_t port() const noexcept { return o_.port; }  ///< the server's port

  void set(const std::string& key, const std::string& value) override {
    request('S', key, value, clock::now() + o_.connect_timeout);
  }
  std::string get(const std::string& key, clock::time_point deadline) override {
    return request('G', key, {}, deadline);
  }
  /// An atomic counter (decimal text): the value after adding delta.
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return std::atoll(request('A', key, std::to_string(delta), clock::now() + o_.connect_timeout).c_str());
  }

private:
  std::string where() const { return o_.host + ":" + std::to_string(o_.port); }

  void connect() {
    const auto until = clock::now() + o_.connect_timeout;
    int err = 0;
    for (auto pause = std::chrono::milliseconds(5);; pause = std::min(pause * 2, std::chrono::milliseconds(200))) {
      addrinfo* res = detail::resolve(o_.host, o_.port, false);
      for (addrinfo* a = res; a && !s_; a = a->ai_next) {
        detail::fd s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0));
        if (!s) {
          err = errno;
          continue;
        }
        err = detail::connect_until(s.get(), a->ai_addr, a->ai_addrlen, until);
        if (err == 0) s_ = std::move(s);
      }
      freeaddrinfo(res);
      if (s_) break;
      if (clock::now() >= until) {
        // Refused: nothing listens there (yet); else the host did not answer at all.
        const std::string why =
            err == ECONNREFUSED ? "nothing listens there"
            : err == ETIMEDOUT ? "no answer from that host within " + std::to_string(o_.connect_timeout.count()) + " ms"
                               : std::strerror(err);
        throw transport_error(
            "mdring::rendezvous::tcp_store: no store at " + where() + " (" + why +
                "; is its host running (mdring-run's store process, or rank 0), with the same MASTER_ADDR and "
                "MDRING_STORE_PORT or MASTER_PORT, and can this "
                "host reach it?)",
            err);
      }
      std::this_thread::sleep_for(pause);
    }
    detail::no_delay(s_.get());
    std::string hello = "MDRS";
    detail::put_u32(hello, std::uint32_t(o_.secret.size()));
    hello += o_.secret;
    char answer = 0;
    if (!detail::send_all(s_.get(), hello.data(), hello.size()) ||
        detail::recv_all(s_.get(), &answer, 1, until + std::chrono::seconds(10)) != detail::io::ok || answer != 'K') {
      s_.reset();
      throw transport_error("mdring::rendezvous::tcp_store: the store at " + where() +
                                " refused this process's secret (MDRING_SECRET differs from the job's?)",
                            0);
    }
  }

  std::string request(char op, const std::string& key, const std::string& value, clock::time_point deadline) {
    if (key.size() > o_.max_key_bytes)
      throw invalid_argument("key", "mdring::rendezvous::tcp_store: a key of " + std::to_string(key.size()) +
                                        " bytes; the limit is max_key_bytes = " + std::to_string(o_.max_key_bytes));
    if (value.size() > o_.max_value_bytes)
      throw invalid_argument("value",
                             "mdring::rendezvous::tcp_store: a value of " + std::to_string(value.size()) +
                                 " bytes; the limit is max_value_bytes = " + std::to_string(o_.max_value_bytes));
    if (!s_) connect();
    std::string out(1, op);
    detail::put_u32(out, std::uint32_t(key.size()));
    detail::put_u32(out, std::uint32_t(value.size()));
    out += key;
    out += value;
    if (!detail::send_all(s_.get(), out.data(), out.size())) lost();
    char kind = 0;
    auto r = detail::recv_all(s_.get(), &kind, 1, deadline);
    if (r == detail::io::timeout) {
      s_.reset();  // the answer may still come: this connection is done
      throw missing_key(key, "mdring::rendezvous::tcp_store");
    }
    if (r != detail::io::ok) lost();
    if (kind == 'K') return {};
    unsigned char len[4];
    std::string v;
    if ((kind != 'V' && kind != 'E') ||
        detail::recv_all(s_.get(), len, 4, deadline + std::chrono::seconds(10)) != detail::io::ok)
      lost();
    v.resize(detail::get_u32(len));
    if (!v.empty() &&
        detail::recv_all(s_.get(), v.data(), v.size(), deadline + std::chrono::seconds(10)) != detail::io::ok)
      lost();
    if (kind == 'E') throw invalid_argument("delta", "mdring::rendezvous::tcp_store: add(\"" + key + "\"): " + v);
    return v;
  }

  [[noreturn]] void lost() {
    s_.reset();
    throw transport_error("mdring::rendezvous::tcp_store: lost the connection to the store at " + where() +
                              " (its host ended: rank 0's process, or mdring-run's?)",
                          0);
  }

  tcp_store_options o_;
  std::unique_ptr<detail::store_server> server_;
  detail::fd s_;
};

}  // namespace rendezvous

MDRING_NAMESPACE_END
