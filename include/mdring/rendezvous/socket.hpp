// mdring/rendezvous/socket.hpp: the TCP pieces of tcp_store.hpp (POSIX sockets).
#pragma once

#include "../config.hpp"
#include "../error.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

MDRING_NAMESPACE_BEGIN

namespace rendezvous {

/// A fresh secret: 32 hex characters from the kernel's random source.
inline std::string random_secret() {
  unsigned char b[16] = {};
  std::size_t got = 0;
  while (got < sizeof b) {
    const ssize_t n = getrandom(b + got, sizeof b - got, 0);
    if (n <= 0 && errno != EINTR)
      throw transport_error("mdring: getrandom failed: " + std::string(std::strerror(errno)), errno);
    if (n > 0) got += std::size_t(n);
  }
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) s += hex[c >> 4], s += hex[c & 15];
  return s;
}

namespace detail {

// An owned file descriptor.
class fd {
public:
  fd() = default;
  explicit fd(int f) : f_(f) {}
  fd(fd&& o) noexcept : f_(o.release()) {}
  fd& operator=(fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  ~fd() { reset(); }
  int get() const noexcept { return f_; }
  explicit operator bool() const noexcept { return f_ >= 0; }
  int release() noexcept {
    const int f = f_;
    f_ = -1;
    return f;
  }
  void reset(int f = -1) noexcept {
    if (f_ >= 0) ::close(f_);
    f_ = f;
  }

private:
  int f_ = -1;
};

// host:port, resolved (IPv4 or IPv6).
inline addrinfo* resolve(const std::string& host, std::uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0)
    throw invalid_argument("host", "mdring::rendezvous: cannot resolve \"" + host + "\": " + gai_strerror(rc));
  return res;
}

inline void no_delay(int s) {
  int one = 1;
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Sends all of [p, p + n) (false: the peer is gone). Never raises SIGPIPE.
inline bool send_all(int s, const void* p, std::size_t n) {
  const auto* c = static_cast<const char*>(p);
  while (n) {
    const ssize_t k = ::send(s, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= std::size_t(k);
  }
  return true;
}

enum class io { ok, closed, timeout };

// connect() that gives up at the deadline: a host that drops the SYN (its link
// down, a firewall) would otherwise hold a blocking connect for the kernel's two
// minutes of retries. 0, or the errno of the failure (ETIMEDOUT at the deadline).
inline int connect_until(int s, const sockaddr* a, socklen_t len, std::chrono::steady_clock::time_point deadline) {
  const int flags = fcntl(s, F_GETFL);
  fcntl(s, F_SETFL, flags | O_NONBLOCK);
  int err = ::connect(s, a, len) == 0 ? 0 : errno;
  if (err == EINPROGRESS || err == EINTR) {
    err = ETIMEDOUT;
    for (;;) {  // (at least one look, even past the deadline: a refusal is immediate)
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd pf{s, POLLOUT, 0};
      const int r = ::poll(&pf, 1, int(std::clamp<long long>(left.count() + 1, 0, 1000)));
      if (r < 0 && errno != EINTR) {
        err = errno;
        break;
      }
      if (r > 0) {
        socklen_t l = sizeof err;
        if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &l) != 0) err = errno;
        break;
      }
      if (left.count() <= 0) break;  // err stays ETIMEDOUT
    }
  }
  fcntl(s, F_SETFL, flags);
  return err;
}

// Receives exactly n bytes before the deadline.
inline io recv_all(int s, void* p, std::size_t n, std::chrono::steady_clock::time_point deadline) {
  auto* c = static_cast<char*>(p);
  while (n) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return io::timeout;
    pollfd pf{s, POLLIN, 0};
    const int r = ::poll(&pf, 1, int(std::min<long long>(left.count() + 1, 1000)));
    if (r < 0 && errno != EINTR) return io::closed;
    if (r <= 0) continue;
    const ssize_t k = ::recv(s, c, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return io::closed;
    c += k;
    n -= std::size_t(k);
  }
  return io::ok;
}

inline void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
inline std::uint32_t get_u32(const unsigned char* p) {
  return std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 | std::uint32_t(p[3]) << 24;
}

// Equal strings, in time that does not depend on where they first differ.
inline bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i)
    diff |= static_cast<unsigned char>((i < a.size() ? a[i] : 0) ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

}  // namespace detail

}  // namespace rendezvous

MDRING_NAMESPACE_END
