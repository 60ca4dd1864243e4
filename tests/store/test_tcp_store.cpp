// tests/store/test_tcp_store.cpp: the job's TCP store (rendezvous/tcp_store.hpp):
// what clients see, and what strangers cannot do to it.
#include <doctest/doctest.h>
#include <mdring/rendezvous/tcp_store.hpp>

#include "../error_support.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace rv = mdring::rendezvous;
using namespace std::chrono_literals;

namespace {

rv::tcp_store_options opts(std::uint16_t port = 0, std::string secret = "s3cret-of-the-job") {
  rv::tcp_store_options o;
  o.port = port;
  o.secret = std::move(secret);
  o.connect_timeout = 5000ms;
  o.max_key_bytes = 64;
  o.max_value_bytes = 1 << 20;
  return o;
}

rv::clock::time_point in(std::chrono::milliseconds d) { return rv::clock::now() + d; }

// A raw TCP connection to the store, for strangers.
int raw_connect(std::uint16_t port) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return s;
}

// The server has closed s (reads end-of-file or an error within 2 s).
bool closed_by_server(int s) {
  timeval tv{2, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[16];
  for (;;) {
    const ssize_t n = recv(s, buf, sizeof buf, 0);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

void still_works(rv::tcp_store& a, std::uint16_t port, const std::string& key) {
  rv::tcp_store b(false, opts(port));
  b.set(key, "fine");
  CHECK(a.get(key, in(2000ms)) == "fine");
}

}  // namespace

TEST_CASE("set, get, overwrite and binary values between clients") {
  rv::tcp_store server(true, opts());
  rv::tcp_store a(false, opts(server.port())), b(false, opts(server.port()));
  const std::string bin("a\0b\0\xff", 5);
  a.set("k", bin);
  CHECK(b.get("k", in(1000ms)) == bin);
  b.set("k", "second");
  CHECK(a.get("k", in(1000ms)) == "second");
  server.set("empty", "");
  CHECK(a.get("empty", in(1000ms)).empty());
}

TEST_CASE("get waits for a later set; wait on several keys") {
  rv::tcp_store server(true, opts());
  rv::tcp_store a(false, opts(server.port()));
  std::thread t([&] {
    rv::tcp_store b(false, opts(server.port()));
    std::this_thread::sleep_for(100ms);
    b.set("late", "here");
    b.set("x", "1");
    b.set("y", "2");
  });
  CHECK(a.get("late", in(5000ms)) == "here");
  const std::vector<std::string> keys = {"x", "y"};
  a.wait(keys, in(5000ms));
  CHECK(a.get("y", in(100ms)) == "2");
  t.join();
}

TEST_CASE("add: 8 clients counting concurrently give exactly 8 * k") {
  rv::tcp_store server(true, opts());
  std::vector<std::thread> ts;
  for (int c = 0; c < 8; ++c)
    ts.emplace_back([&] {
      rv::tcp_store s(false, opts(server.port()));
      for (int i = 0; i < 50; ++i) s.add("n", 1);
    });
  for (auto& t : ts) t.join();
  CHECK(server.add("n", 0) == 400);
  CHECK(server.add("n", -400) == 0);
}

TEST_CASE("add beyond 64 bits: invalid_argument naming delta, the counter unchanged, the store goes on") {
  // (found by fuzz_store: the server added with atoll, a signed overflow)
  rv::tcp_store server(true, opts());
  rv::tcp_store c(false, opts(server.port()));
  const std::int64_t top = std::numeric_limits<std::int64_t>::max(), bottom = std::numeric_limits<std::int64_t>::min();
  CHECK(c.add("big", top) == top);
  const auto [arg, what] = error_test::arg_error_of([&] { c.add("big", 1); });
  CHECK(arg == "delta");
  CHECK(what.find("add(\"big\")") != std::string::npos);
  CHECK(what.find("outside the 64-bit range") != std::string::npos);
  CHECK(c.add("big", 0) == top);  // unchanged, and the connection still serves
  CHECK(c.add("big", bottom) == -1);
  CHECK(c.add("low", bottom) == bottom);
  CHECK_THROWS_AS(c.add("low", -1), mdring::invalid_argument);
  CHECK(c.add("low", 0) == bottom);
  // A value that set() stored and that is no 64-bit number: refused the same way.
  c.set("huge", "99999999999999999999");
  CHECK_THROWS_AS(c.add("huge", 1), mdring::invalid_argument);
  CHECK(c.get("huge", in(2000ms)) == "99999999999999999999");
  c.set("word", "abc");  // no number: read as 0, as before
  CHECK(c.add("word", 5) == 5);
  still_works(c, server.port(), "after-overflow");
}

TEST_CASE("all_gather through the store, every rank's bytes in rank order") {
  rv::tcp_store server(true, opts());
  std::vector<std::vector<std::string>> got(4);
  std::vector<std::thread> ts;
  for (std::size_t r = 0; r < 4; ++r)
    ts.emplace_back([&, r] {
      rv::tcp_store s(false, opts(server.port()));
      got[r] = rv::all_gather(s, "g", r, 4, "rank" + std::to_string(r), in(5000ms));
    });
  for (auto& t : ts) t.join();
  for (const auto& g : got) CHECK(g == std::vector<std::string>{"rank0", "rank1", "rank2", "rank3"});
}

TEST_CASE("a key never set: timeout_error naming it at the deadline; the client reconnects after") {
  rv::tcp_store server(true, opts());
  rv::tcp_store a(false, opts(server.port()));
  const auto t0 = rv::clock::now();
  std::string what;
  try {
    (void)a.get("never/set", in(300ms));
  } catch (const mdring::timeout_error& e) {
    what = e.what();
  }
  const auto took = rv::clock::now() - t0;
  CHECK(what.find("\"never/set\"") != std::string::npos);
  CHECK(took >= 300ms);
  CHECK(took < 1500ms);
  a.set("after", "ok");
  CHECK(a.get("after", in(1000ms)) == "ok");
}

TEST_CASE("a wrong secret is refused with a clear error; the job goes on") {
  rv::tcp_store server(true, opts());
  std::string what;
  try {
    rv::tcp_store bad(false, opts(server.port(), "not-the-secret"));
  } catch (const mdring::transport_error& e) {
    what = e.what();
  }
  CHECK(what.find("secret") != std::string::npos);
  still_works(server, server.port(), "after-wrong-secret");
  std::string arg;
  try {
    rv::tcp_store empty(false, opts(server.port(), ""));
  } catch (const mdring::invalid_argument& e) {
    arg = e.argument();
  }
  CHECK(arg == "secret");
}

TEST_CASE("garbage bytes, a half handshake and an oversized frame: the stranger is dropped, the store goes on") {
  rv::tcp_store server(true, opts());
  {
    const int s = raw_connect(server.port());
    const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    send(s, junk, sizeof junk, MSG_NOSIGNAL);
    CHECK(closed_by_server(s));
    close(s);
  }
  {
    const int s = raw_connect(server.port());  // the magic, then a secret length over the limit
    const unsigned char hello[] = {'M', 'D', 'R', 'S', 0xff, 0xff, 0xff, 0x7f};
    send(s, hello, sizeof hello, MSG_NOSIGNAL);
    CHECK(closed_by_server(s));
    close(s);
  }
  {
    const int s = raw_connect(server.port());  // half a handshake, then gone
    send(s, "MDR", 3, MSG_NOSIGNAL);
    close(s);
  }
  {
    // A correct handshake, then a frame whose value is over max_value_bytes.
    const int s = raw_connect(server.port());
    std::string hello = "MDRS";
    mdring::rendezvous::detail::put_u32(hello, std::uint32_t(opts().secret.size()));
    hello += opts().secret;
    send(s, hello.data(), hello.size(), MSG_NOSIGNAL);
    char answer = 0;
    CHECK(recv(s, &answer, 1, 0) == 1);
    CHECK(answer == 'K');
    std::string frame = "S";
    mdring::rendezvous::detail::put_u32(frame, 1);
    mdring::rendezvous::detail::put_u32(frame, 0x7fffffff);
    frame += "k";
    send(s, frame.data(), frame.size(), MSG_NOSIGNAL);
    CHECK(closed_by_server(s));
    close(s);
  }
  still_works(server, server.port(), "after-garbage");
}

TEST_CASE("keys and values over the limits: invalid_argument naming which") {
  rv::tcp_store server(true, opts());
  std::string arg;
  try {
    server.set(std::string(65, 'k'), "v");
  } catch (const mdring::invalid_argument& e) {
    arg = e.argument();
  }
  CHECK(arg == "key");
  try {
    server.set("k", std::string((1 << 20) + 1, 'v'));
  } catch (const mdring::invalid_argument& e) {
    arg = e.argument();
  }
  CHECK(arg == "value");
  server.set("k", std::string(1 << 20, 'v'));  // at the limit: fine
  CHECK(server.get("k", in(2000ms)).size() == std::size_t(1) << 20);
}

TEST_CASE("the server listens on the address it was given only") {
  rv::tcp_store server(true, opts());
  // Another address of this machine (the loopback network's 127.0.0.2) is not served.
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(server.port());
  a.sin_addr.s_addr = inet_addr("127.0.0.2");
  CHECK(connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0);
  close(s);
}

TEST_CASE("the server ends while a client waits: the client gets transport_error promptly") {
  auto server = std::make_unique<rv::tcp_store>(true, opts());
  rv::tcp_store a(false, opts(server->port()));
  std::thread t([&] {
    std::this_thread::sleep_for(200ms);
    server.reset();
  });
  const auto t0 = rv::clock::now();
  std::string what;
  try {
    (void)a.get("never", in(10000ms));
  } catch (const mdring::transport_error& e) {
    what = e.what();
  }
  t.join();
  CHECK(what.find("lost the connection") != std::string::npos);
  CHECK(rv::clock::now() - t0 < 3000ms);
}

TEST_CASE("a silent stranger does not hold up the server's destructor") {
  auto server = std::make_unique<rv::tcp_store>(true, opts());
  const int s = raw_connect(server->port());
  const auto t0 = rv::clock::now();
  server.reset();
  CHECK(rv::clock::now() - t0 < 2000ms);
  close(s);
}

TEST_CASE("a store host that never answers: the client gives up at its deadline, saying so; none listening: refused") {
  // A listener whose accept queue is full drops further SYNs, as a host whose link
  // is down does: connect() alone would retry for about two minutes.
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(listen(l, 0) == 0);
  socklen_t len = sizeof a;
  REQUIRE(getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  const std::uint16_t port = ntohs(a.sin_port);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {  // fill the queue (never accepted)
    const int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    (void)connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
    fillers.push_back(s);
  }
  std::this_thread::sleep_for(100ms);
  auto o = opts(port);
  o.connect_timeout = 700ms;
  const auto t0 = rv::clock::now();
  std::string what;
  try {
    rv::tcp_store c(false, o);
  } catch (const mdring::transport_error& e) {
    what = e.what();
  }
  const auto took = rv::clock::now() - t0;
  CAPTURE(what);
  CHECK(what.find("no store at 127.0.0.1:" + std::to_string(port)) != std::string::npos);
  CHECK(what.find("no answer from that host within 700 ms") != std::string::npos);
  CHECK(took >= 600ms);
  CHECK(took < 3000ms);
  for (const int s : fillers) close(s);
  close(l);

  // Nothing listens on the port now: refused, said as such, at the deadline.
  std::string refused;
  try {
    rv::tcp_store c(false, o);
  } catch (const mdring::transport_error& e) {
    refused = e.what();
  }
  CAPTURE(refused);
  CHECK(refused.find("nothing listens there") != std::string::npos);
}
