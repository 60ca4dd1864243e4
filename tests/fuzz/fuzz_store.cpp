// fuzz_store.cpp: libFuzzer target for the TCP store's server (rendezvous/
// tcp_store.hpp), fed arbitrary bytes by a stranger. One server runs for the whole
// fuzzing session, with a client of the job connected to it. For each input, a
// fresh connection writes the input (after a correct handshake when the first
// byte is odd, so that the frame parser behind it is reached too; in pieces cut
// where the second byte says) and closes. Then the job's client must still be
// served: a set and a get of its own key give back what it wrote, within the
// client's deadline. A crash, a sanitizer report, a hang, or a store that stops
// serving is a finding.
#include <mdring/rendezvous/tcp_store.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

namespace rv = mdring::rendezvous;

namespace {

const std::string secret = "fuzz-secret-0123456789";

rv::tcp_store& server() {
  static std::unique_ptr<rv::tcp_store> s = [] {
    rv::tcp_store_options o;
    o.secret = secret;
    o.max_keys = 4096;  // what strangers may store stays small
    o.max_value_bytes = 1 << 16;
    o.connect_timeout = std::chrono::milliseconds(5000);
    return std::make_unique<rv::tcp_store>(true, o);
  }();
  return *s;
}

int connect_to(std::uint16_t port) {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // libFuzzer's -timeout is a SIGALRM each second: connect as the store's clients do
  // (signals are no failure there).
  const int err = mdring::rendezvous::detail::connect_until(s, reinterpret_cast<sockaddr*>(&a), sizeof a,
                                                            std::chrono::steady_clock::now() + std::chrono::seconds(5));
  if (err != 0) {
    std::fprintf(stderr, "fuzz_store: connect: %s\n", std::strerror(err));
    std::abort();
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static std::uint64_t round = 0;
  rv::tcp_store& st = server();
  if (size < 2) return 0;
  const bool handshake = data[0] & 1;
  const std::size_t piece = std::size_t(data[1]) + 1;
  data += 2, size -= 2;
  const int s = connect_to(st.port());
  if (handshake) {
    std::string hello = "MDRS";
    rv::detail::put_u32(hello, std::uint32_t(secret.size()));
    hello += secret;
    (void)::send(s, hello.data(), hello.size(), MSG_NOSIGNAL);
  }
  for (std::size_t off = 0; off < size; off += piece)
    if (::send(s, data + off, std::min(piece, size - off), MSG_NOSIGNAL) < 0) break;  // dropped: fine
  ::close(s);
  // The job's client is still served, with what it wrote.
  const std::string key = "fuzz-check", value = "v" + std::to_string(++round);
  try {
    st.set(key, value);
    const std::string got = st.get(key, rv::clock::now() + std::chrono::seconds(5));
    if (got != value) {
      std::fprintf(stderr, "fuzz_store: the job's get returned \"%s\", not \"%s\"\n", got.c_str(), value.c_str());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_store: the store stopped serving the job: %s\n", e.what());
    std::abort();
  }
  return 0;
}
