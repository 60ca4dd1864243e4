// test_errors.cpp: every run-time error path of the public API, on the threads
// transport. Each check names the exception TYPE, the argument() and words of
// what() that say what was wrong and what was expected.
//
// The properties under test (collective/run.hpp, communicator.hpp):
//   - a local argument error throws invalid_argument before any message moves;
//   - with check_level::local a rank with a bad argument tells its peers, which
//     stop with remote_error long before their deadline (nobody hangs), and the
//     communicator is unusable afterwards (communicator_error);
//   - with check_level::collective every rank throws invalid_argument and the
//     communicator survives;
//   - a peer that never arrives gives timeout_error naming the collective,
//     dimension, step and peer; a count mismatch gives an error, never a wrong
//     result or a hang.
//
// Every rank of a test runs in its own thread; what a rank threw is recorded and
// checked on the test's thread afterwards.
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <latch>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <typeinfo>
#include <vector>

namespace md = mdring;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

constexpr auto t22 = md::ring<md::shm, 2> * md::ring<md::shm, 2>;  // 4 ranks, 2 x 2

double seconds_since(steady::time_point t0) { return std::chrono::duration<double>(steady::now() - t0).count(); }

bool contains(std::string_view s, std::string_view w) { return s.find(w) != std::string_view::npos; }

// What f threw (nullptr: nothing).
template <class F>
std::exception_ptr thrown(F&& f) {
  try {
    f();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

// The exception object inside p as E, or nullptr. (rethrow_exception rethrows the
// stored object itself, which lives as long as p.)
template <class E>
const E* as(const std::exception_ptr& p) {
  if (!p) return nullptr;
  try {
    std::rethrow_exception(p);
  } catch (const E& e) {
    return &e;
  } catch (...) {
  }
  return nullptr;
}

std::string type_of(const std::exception_ptr& p) {
  if (!p) return "no exception";
  if (auto* e = as<md::topology_error>(p); e && typeid(*e) == typeid(md::topology_error)) return "topology_error";
  if (auto* e = as<md::invalid_argument>(p); e && typeid(*e) == typeid(md::invalid_argument)) return "invalid_argument";
  if (as<md::timeout_error>(p)) return "timeout_error";
  if (as<md::remote_error>(p)) return "remote_error";
  if (as<md::communicator_error>(p)) return "communicator_error";
  if (as<md::mpi_error>(p)) return "mpi_error";
  if (as<md::transport_error>(p)) return "transport_error";
  if (as<md::error>(p)) return "mdring::error";
  if (as<std::exception>(p)) return std::string("std::exception (") + typeid(*as<std::exception>(p)).name() + ")";
  return "not a std::exception";
}

std::string describe(const std::exception_ptr& p) {
  if (auto* e = as<std::exception>(p)) return type_of(p) + ": " + e->what();
  return type_of(p);
}

// p is exactly an E (not a subclass) carrying argument() == argument and every word
// in what(); what() starts with "mdring::".
template <class E>
void expect_arg_error(const std::exception_ptr& p, std::string_view argument, std::vector<std::string> words,
                      const std::string& where) {
  INFO(where);
  INFO("got " << describe(p));
  const E* e = as<E>(p);
  REQUIRE(e != nullptr);
  CHECK(typeid(*e) == typeid(E));
  CHECK(e->argument() == argument);
  CHECK(std::string_view(e->what()).substr(0, 8) == "mdring::");
  for (auto& w : words) {
    INFO("what() should contain \"" << w << "\"");
    CHECK(contains(e->what(), w));
  }
}

// One rank's record: what it threw in the phase under test, what a following call
// threw, and how long the phase under test took.
struct rank_record {
  std::exception_ptr first;
  std::exception_ptr next;
  double seconds = 0;
  std::vector<std::vector<std::size_t>> rings;  // members of this rank's ring per dimension
};

// Runs body(ep, record) on n threads of a fresh world; exceptions escaping body are
// recorded in `first` (so threads::run itself never rethrows).
template <class F>
std::vector<rank_record> on_ranks(std::size_t n, F&& body) {
  std::vector<rank_record> rec(n);
  md::threads::run(n, [&](md::threads::endpoint ep) {
    const auto t0 = steady::now();
    try {
      body(ep, rec[ep.rank]);
    } catch (...) {
      if (!rec[ep.rank].first) rec[ep.rank].first = std::current_exception();
    }
    if (rec[ep.rank].seconds == 0) rec[ep.rank].seconds = seconds_since(t0);
  });
  return rec;
}

md::options local_opts(std::chrono::milliseconds timeout = 30s) {
  md::options o;
  o.timeout = timeout;
  o.checks = md::check_level::local;
  return o;
}
md::options collective_opts(std::chrono::milliseconds timeout = 30s) {
  md::options o;
  o.timeout = timeout;
  o.checks = md::check_level::collective;
  return o;
}

// Every rank runs `call(comm)` on a fresh 2 x 2 communicator (local checks); all
// of them must throw the same argument error locally, before any message.
template <class Call>
void all_ranks_reject(Call call, std::string_view argument, std::vector<std::string> words, const std::string& where,
                      std::size_t n = 4) {
  auto rec = on_ranks(n, [&](md::threads::endpoint ep, rank_record& r) {
    auto comm = md::bind(md::ring<md::shm, 2> * md::ring<md::shm>, ep, local_opts());
    const auto t0 = steady::now();
    r.first = thrown([&] { call(comm); });
    r.seconds = seconds_since(t0);
    r.next = thrown([&] {
      int x = 1;
      md::all_reduce(comm, &x, 1);
    });
  });
  for (std::size_t i = 0; i < n; ++i) {
    expect_arg_error<md::invalid_argument>(rec[i].first, argument, words, where + ", rank " + std::to_string(i));
    CHECK(rec[i].seconds < 5.0);
    // A bad argument with local checks leaves the communicator unusable.
    INFO(where << ", rank " << i << ", next call: " << describe(rec[i].next));
    CHECK(as<md::communicator_error>(rec[i].next) != nullptr);
  }
}

}  // namespace

// ---------------------------------------------------------------------------
TEST_CASE("null buffers with count > 0 are rejected on every rank, naming the buffer") {
  std::vector<int> a(64, 1), b(64, 0);
  SUBCASE("all_reduce") {
    all_ranks_reject([&](auto& c) { md::all_reduce(c, static_cast<const int*>(nullptr), b.data(), 5); }, "sendbuf",
                     {"mdring::all_reduce", "sendbuf is null", "count = 5"}, "all_reduce sendbuf");
    all_ranks_reject([&](auto& c) { md::all_reduce(c, a.data(), static_cast<int*>(nullptr), 5); }, "recvbuf",
                     {"mdring::all_reduce", "recvbuf is null", "count = 5"}, "all_reduce recvbuf");
    all_ranks_reject([&](auto& c) { md::all_reduce(c, static_cast<int*>(nullptr), 7); }, "sendbuf",
                     {"mdring::all_reduce", "null", "count = 7"}, "all_reduce in place");
    all_ranks_reject([&](auto& c) { md::all_reduce(c, std::span<int>(static_cast<int*>(nullptr), 3)); }, "sendbuf",
                     {"mdring::all_reduce", "null", "3"}, "all_reduce span");
  }
  SUBCASE("reduce_scatter") {
    all_ranks_reject([&](auto& c) { md::reduce_scatter(c, static_cast<const int*>(nullptr), b.data(), 3); },
                     "sendbuf", {"mdring::reduce_scatter", "sendbuf is null", "size() * recvcount = 12"}, "reduce_scatter sendbuf");
    all_ranks_reject([&](auto& c) { md::reduce_scatter(c, a.data(), static_cast<int*>(nullptr), 3); }, "recvbuf",
                     {"mdring::reduce_scatter", "recvbuf is null", "3"}, "reduce_scatter recvbuf");
  }
  SUBCASE("all_gather") {
    all_ranks_reject([&](auto& c) { md::all_gather(c, static_cast<const int*>(nullptr), b.data(), 3); }, "sendbuf",
                     {"mdring::all_gather", "sendbuf is null", "3"}, "all_gather sendbuf");
    all_ranks_reject([&](auto& c) { md::all_gather(c, a.data(), static_cast<int*>(nullptr), 3); }, "recvbuf",
                     {"mdring::all_gather", "recvbuf is null"}, "all_gather recvbuf");
  }
  SUBCASE("broadcast") {
    all_ranks_reject([&](auto& c) { md::broadcast(c, static_cast<int*>(nullptr), 5, 0); }, "buf",
                     {"mdring::broadcast", "buf is null", "count = 5"}, "broadcast buf");
  }
  SUBCASE("reduce") {
    all_ranks_reject([&](auto& c) { md::reduce(c, static_cast<const int*>(nullptr), b.data(), 5, 1); }, "sendbuf",
                     {"mdring::reduce", "sendbuf is null", "count = 5"}, "reduce sendbuf");
  }
}

TEST_CASE("null buffers with count 0 are fine, and reduce ignores recvbuf off the root") {
  std::atomic<int> ok{0};
  auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& r) {
    auto comm = md::bind(t22, ep, local_opts());
    md::all_reduce(comm, static_cast<const int*>(nullptr), static_cast<int*>(nullptr), 0);
    md::all_reduce(comm, static_cast<int*>(nullptr), 0);
    md::reduce_scatter(comm, static_cast<const int*>(nullptr), static_cast<int*>(nullptr), 0);
    md::all_gather(comm, static_cast<const int*>(nullptr), static_cast<int*>(nullptr), 0);
    md::broadcast(comm, static_cast<int*>(nullptr), 0, 3);
    md::reduce(comm, static_cast<const int*>(nullptr), static_cast<int*>(nullptr), 0, 2);
    // recvbuf may be null on the ranks that are not the root.
    std::vector<int> s(10, int(comm.rank()) + 1), out(10, -1);
    md::reduce(comm, s.data(), comm.rank() == 1 ? out.data() : nullptr, 10, 1);
    if (comm.rank() == 1)
      for (int v : out) CHECK(v == 10);
    // ... and may even overlap sendbuf partially there (it is not touched).
    md::reduce(comm, s.data(), comm.rank() == 1 ? out.data() : s.data() + 1, 10, 1);
    CHECK(comm.usable());
    std::vector<int> x(5, int(comm.rank()));
    md::all_reduce(comm, x.data(), x.size());
    for (int v : x) CHECK(v == 6);
    ++ok;
    (void)r;
  });
  for (auto& r : rec) CHECK_MESSAGE(!r.first, describe(r.first));
  CHECK(ok == 4);
}

TEST_CASE("partially overlapping send and receive buffers are rejected; exact in place is fine") {
  SUBCASE("all_reduce") {
    std::vector<std::vector<int>> bufs(4, std::vector<int>(16, 1));
    all_ranks_reject(
        [&](auto& c) {
          auto& b = bufs[c.rank()];
          md::all_reduce(c, b.data(), b.data() + 1, 8);
        },
        "recvbuf", {"mdring::all_reduce", "overlap", "sendbuf", "recvbuf", "same pointer"}, "all_reduce recv = send + 1");
    all_ranks_reject(
        [&](auto& c) {
          auto& b = bufs[c.rank()];
          md::all_reduce(c, b.data() + 3, b.data(), 8);
        },
        "recvbuf", {"overlap"}, "all_reduce recv = send - 3");
    all_ranks_reject(
        [&](auto& c) {
          auto& b = bufs[c.rank()];
          md::all_reduce(c, std::span<const int>(b.data() + 7, 8), std::span<int>(b.data(), 8));
        },
        "recvbuf", {"overlap"}, "all_reduce spans overlapping by one element");
  }
  SUBCASE("reduce_scatter") {
    std::vector<std::vector<int>> bufs(4, std::vector<int>(64, 1));
    all_ranks_reject(
        [&](auto& c) {
          auto& b = bufs[c.rank()];
          md::reduce_scatter(c, b.data(), b.data() + c.rank() * 3 + 1, 3);
        },
        "recvbuf", {"mdring::reduce_scatter", "overlap", "sendbuf + rank() * recvcount"}, "reduce_scatter");
  }
  SUBCASE("all_gather") {
    std::vector<std::vector<int>> bufs(4, std::vector<int>(64, 1));
    all_ranks_reject(
        [&](auto& c) {
          auto& b = bufs[c.rank()];
          md::all_gather(c, b.data() + c.rank() * 3 + 1, b.data(), 3);
        },
        "recvbuf", {"mdring::all_gather", "overlap", "recvbuf + rank() * sendcount"}, "all_gather");
  }
  SUBCASE("reduce, on the root") {
    // Only the root checks its recvbuf; it throws, the others hear about it.
    auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& r) {
      auto comm = md::bind(t22, ep, local_opts());
      std::vector<int> b(32, 1);
      const auto t0 = steady::now();
      r.first = thrown([&] { md::reduce(comm, b.data(), b.data() + 2, 16, 3); });
      r.seconds = seconds_since(t0);
    });
    expect_arg_error<md::invalid_argument>(rec[3].first, "recvbuf", {"mdring::reduce", "overlap"}, "reduce root");
    for (std::size_t i = 0; i < 3; ++i) {
      INFO("rank " << i << ": " << describe(rec[i].first));
      CHECK(as<md::remote_error>(rec[i].first) != nullptr);
      CHECK(rec[i].seconds < 5.0);
    }
  }
  SUBCASE("exact in place works for all four") {
    auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record&) {
      auto comm = md::bind(t22, ep, local_opts());
      const int r = int(comm.rank());
      std::vector<int> v(9);
      for (int i = 0; i < 9; ++i) v[i] = r * 100 + i;
      md::all_reduce(comm, v.data(), v.data(), v.size());
      for (int i = 0; i < 9; ++i) CHECK(v[i] == 600 + 4 * i);
      // reduce_scatter in place: recvbuf == sendbuf + rank * recvcount.
      std::vector<int> rs(4 * 5);
      for (int i = 0; i < 20; ++i) rs[i] = r + i;
      md::reduce_scatter(comm, rs.data(), rs.data() + r * 5, 5);
      for (int i = 0; i < 5; ++i) CHECK(rs[r * 5 + i] == 6 + 4 * (r * 5 + i));
      // all_gather in place: sendbuf == recvbuf + rank * sendcount.
      std::vector<int> ag(4 * 3, -1);
      for (int i = 0; i < 3; ++i) ag[r * 3 + i] = 10 * r + i;
      md::all_gather(comm, ag.data() + r * 3, ag.data(), 3);
      for (int q = 0; q < 4; ++q)
        for (int i = 0; i < 3; ++i) CHECK(ag[q * 3 + i] == 10 * q + i);
      // reduce in place on the root.
      std::vector<int> rd(6, r + 1);
      md::reduce(comm, rd.data(), r == 2 ? rd.data() : nullptr, 6, 2);
      if (r == 2)
        for (int x : rd) CHECK(x == 10);
    });
    for (auto& r : rec) CHECK_MESSAGE(!r.first, describe(r.first));
  }
}

TEST_CASE("root out of range") {
  std::vector<std::vector<int>> bufs(4, std::vector<int>(8, 1));
  all_ranks_reject([&](auto& c) { md::broadcast(c, bufs[c.rank()].data(), 8, 4); }, "root",
                   {"mdring::broadcast", "root 4", "size 4"}, "broadcast root 4");
  all_ranks_reject([&](auto& c) { md::broadcast(c, std::span<int>(bufs[c.rank()]), std::size_t(-1)); }, "root",
                   {"mdring::broadcast", "root", "size 4"}, "broadcast root SIZE_MAX");
  all_ranks_reject(
      [&](auto& c) {
        std::vector<int> out(8);
        md::reduce(c, bufs[c.rank()].data(), out.data(), 8, 7);
      },
      "root", {"mdring::reduce", "root 7", "size 4"}, "reduce root 7");
  // A bad root even with count 0 (nothing to move, but the call is wrong).
  all_ranks_reject([&](auto& c) { md::broadcast(c, static_cast<int*>(nullptr), 0, 9); }, "root", {"root 9"},
                   "broadcast count 0 root 9");
}

TEST_CASE("span size mismatch") {
  std::vector<std::vector<int>> s(4, std::vector<int>(13, 1)), r(4, std::vector<int>(13, 0));
  all_ranks_reject(
      [&](auto& c) {
        md::all_reduce(c, std::span<const int>(s[c.rank()].data(), 8), std::span<int>(r[c.rank()].data(), 7));
      },
      "recvbuf", {"mdring::all_reduce", "recvbuf has 7", "sendbuf has 8"}, "all_reduce spans");
  all_ranks_reject(
      [&](auto& c) {
        md::reduce_scatter(c, std::span<const int>(s[c.rank()].data(), 13), std::span<int>(r[c.rank()].data(), 3));
      },
      "sendbuf", {"mdring::reduce_scatter", "sendbuf has 13", "12"}, "reduce_scatter spans");
  all_ranks_reject(
      [&](auto& c) {
        md::all_gather(c, std::span<const int>(s[c.rank()].data(), 3), std::span<int>(r[c.rank()].data(), 11));
      },
      "recvbuf", {"mdring::all_gather", "recvbuf has 11", "12"}, "all_gather spans");
  // reduce: only the root's recvbuf has a size to check, so only the root (rank 0)
  // throws invalid_argument; the others are told and stop with remote_error.
  auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& rr) {
    auto comm = md::bind(t22, ep, local_opts());
    const auto t0 = steady::now();
    rr.first = thrown([&] {
      md::reduce(comm, std::span<const int>(s[ep.rank].data(), 8), std::span<int>(r[ep.rank].data(), 9), 0);
    });
    rr.seconds = seconds_since(t0);
  });
  expect_arg_error<md::invalid_argument>(rec[0].first, "recvbuf", {"mdring::reduce", "recvbuf has 9", "sendbuf has 8"},
                                         "reduce spans, root");
  for (std::size_t i = 1; i < 4; ++i) {
    INFO("rank " << i << ": " << describe(rec[i].first));
    CHECK(as<md::remote_error>(rec[i].first) != nullptr);
    CHECK(rec[i].seconds < 5.0);
  }
}

// ---------------------------------------------------------------------------
TEST_CASE("a topology that does not fit the world throws topology_error on every rank") {
  auto bind_fails = [](std::size_t n, auto make, std::vector<std::string> words, const std::string& where) {
    auto rec = on_ranks(n, [&](md::threads::endpoint ep, rank_record& r) {
      const auto t0 = steady::now();
      r.first = thrown([&] { auto comm = make(ep); });
      r.seconds = seconds_since(t0);
    });
    for (std::size_t i = 0; i < n; ++i) {
      expect_arg_error<md::topology_error>(rec[i].first, "topology", words, where + ", rank " + std::to_string(i));
      CHECK(rec[i].seconds < 5.0);
    }
  };
  SUBCASE("static topology of the wrong size") {
    bind_fails(3, [](auto ep) { return md::bind(t22, ep, local_opts()); }, {"shm:2 x shm:2", "4 ranks", "has 3"},
               "2 x 2 on 3 ranks");
    bind_fails(5, [](auto ep) { return md::bind(t22, ep, local_opts()); }, {"4 ranks", "has 5"}, "2 x 2 on 5 ranks");
    bind_fails(2, [](auto ep) { return md::bind(md::ring<md::shm, 3>, ep, local_opts()); }, {"shm:3", "3 ranks", "2"},
               "ring of 3 on 2 ranks");
    bind_fails(4, [](auto ep) { return md::bind(md::parse_topology("shm:2 x ethernet:3"), ep, local_opts()); },
               {"shm:2 x ethernet:3", "6 ranks", "4"}, "runtime 2 x 3 on 4 ranks");
  }
  SUBCASE("a world size that the static extents do not divide") {
    bind_fails(3, [](auto ep) { return md::bind(md::ring<md::shm, 2> * md::ring<md::shm>, ep, local_opts()); },
               {"size 3", "not a multiple of 2", "shm:2 x shm:*"}, "2 x * on 3 ranks");
    bind_fails(
        5, [](auto ep) { return md::bind(md::ring<md::shm> * md::ring<md::ethernet, 2>, ep, local_opts()); },
        {"size 5", "not a multiple of 2"}, "* x 2 on 5 ranks");
    bind_fails(4, [](auto ep) { return md::bind(md::parse_topology("shm:3 x infiniband:*"), ep, local_opts()); },
               {"size 4", "not a multiple of 3"}, "runtime 3 x * on 4 ranks");
  }
}

TEST_CASE("ranks binding different topologies: topology_error, and nobody waits for the deadline") {
  // Rank 0 binds first (the others wait for it), so which ranks throw at bind is
  // deterministic: the later ones, whose topology differs from the one recorded.
  auto run = [](auto make0, auto make_other, std::vector<std::string> words) {
    std::atomic<bool> first_bound{false};
    auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& r) {
      const auto t0 = steady::now();
      if (ep.rank == 0) {
        auto comm = make0(ep);
        first_bound = true;
        r.next = thrown([&] {
          std::vector<float> x(100, 1.0f);
          md::all_reduce(comm, x.data(), x.size());
        });
      } else {
        while (!first_bound) std::this_thread::yield();
        r.first = thrown([&] { auto comm = make_other(ep); });
      }
      r.seconds = seconds_since(t0);
    });
    for (std::size_t i = 1; i < 4; ++i)
      expect_arg_error<md::topology_error>(rec[i].first, "topology", words, "rank " + std::to_string(i));
    // Rank 0's bind could not know yet; its first collective must not wait for the
    // 30 s deadline: the others' failure reached it.
    INFO("rank 0: " << describe(rec[0].next));
    CHECK(as<md::remote_error>(rec[0].next) != nullptr);
    if (auto* e = as<md::error>(rec[0].next)) CHECK(contains(e->what(), "bound"));
    for (auto& r : rec) CHECK(r.seconds < 5.0);
  };
  SUBCASE("2 x 2 against a ring of 4") {
    run([](auto ep) { return md::bind(t22, ep, local_opts()); },
        [](auto ep) { return md::bind(md::ring<md::shm, 4>, ep, local_opts()); },
        {"mdring::bind", "shm:4", "shm:2 x shm:2"});
  }
  SUBCASE("a compile-time topology against a different runtime one") {
    run([](auto ep) { return md::bind(t22, ep, local_opts()); },
        [](auto ep) { return md::bind(md::parse_topology("shm:2 x ethernet:2"), ep, local_opts()); },
        {"ethernet:2", "shm:2 x shm:2"});
  }
  SUBCASE("same topology, different algorithms") {
    run(
        [](auto ep) { return md::bind(t22, ep, local_opts()); },
        [](auto ep) {
          auto o = local_opts();
          o.algorithms = {md::algorithm::direct, md::algorithm::ring};
          return md::bind(t22, ep, o);
        },
        {"direct", "ring"});
  }
  // Options that change the schedule or the framing of messages: ranks that
  // disagreed would post messages that never match.
  auto other_option = [&](auto change, std::vector<std::string> words) {
    run([](auto ep) { return md::bind(t22, ep, local_opts()); },
        [change](auto ep) {
          auto o = local_opts();
          change(o);
          return md::bind(t22, ep, o);
        },
        std::move(words));
  };
  SUBCASE("same topology, a different segment length") {
    other_option([](md::options& o) { o.tune.segment_bytes = 4096; }, {"segment 4096", "segment 0"});
  }
  SUBCASE("same topology, merging of same-link dimensions off") {
    other_option([](md::options& o) { o.tune.merge_same_link = false; }, {"nomerge", "|merge"});
  }
  SUBCASE("same topology, a different host gamma (cost model)") {
    // 1e-7 relative: lost by a decimal print of 6 digits, kept by the exact one.
    other_option([](md::options& o) { o.tune.host_gamma *= 1.0000001; }, {"host gamma"});
  }
}

TEST_CASE("the bind fingerprint names every option that changes the schedule or the messages") {
  const md::options base;
  const std::string b = md::detail::fingerprint(md::detail::to_runtime(t22), base);
  auto differs = [&](auto change, const char* what) {
    md::options o = base;
    change(o);
    INFO(what);
    CHECK(md::detail::fingerprint(md::detail::to_runtime(t22), o) != b);
  };
  differs([](md::options& o) { o.algorithms = {md::algorithm::ring}; }, "algorithms");
  differs([](md::options& o) { o.tune.direct_max_extent = 4; }, "direct_max_extent");
  differs([](md::options& o) { o.tune.split_ring_extent = 0; }, "split_ring_extent");
  differs([](md::options& o) { o.tune.merge_same_link = false; }, "merge_same_link");
  differs([](md::options& o) { o.tune.segment_bytes = 1 << 20; }, "segment_bytes");
  differs([](md::options& o) { o.tune.min_segment_bytes = 1 << 16; }, "min_segment_bytes");
  differs([](md::options& o) { o.tune.max_segments = 8; }, "max_segments");
  differs([](md::options& o) { o.tune.pipeline_depth = 2; }, "pipeline_depth");
  differs([](md::options& o) { o.tune.host_gamma = 1e-10; }, "host_gamma");
  differs([](md::options& o) { o.tune.device_gamma = 1e-13; }, "device_gamma");
  differs([](md::options& o) { o.tune.shared_staging_bytes = 4096; }, "shared_staging_bytes");
  differs([](md::options& o) { o.tune.staging_chunk_bytes = 1 << 16; }, "staging_chunk_bytes");
  differs([](md::options& o) { o.max_message_bytes = 1 << 20; }, "max_message_bytes");
  differs([](md::options& o) {
    o.checks = o.checks == md::check_level::collective ? md::check_level::local : md::check_level::collective;
  }, "checks");
  differs([](md::options& o) { o.shared_memory = !o.shared_memory; }, "shared_memory");
  // The links' figures choose the segment length: each of them is in it too.
  auto link_differs = [&](auto change, const char* what) {
    auto rt = md::detail::to_runtime(t22);
    change(rt.dim(1).link);
    INFO(what);
    CHECK(md::detail::fingerprint(rt, base) != b);
  };
  link_differs([](md::link_info& l) { l.bandwidth *= 1.0000001; }, "bandwidth");
  link_differs([](md::link_info& l) { l.latency += 1e-9; }, "latency");
  link_differs([](md::link_info& l) { l.overhead += 1e-9; }, "overhead");
  link_differs([](md::link_info& l) { l.ports += 1; }, "ports");
  link_differs([](md::link_info& l) { l.fully_connected = !l.fully_connected; }, "fully_connected");
  // What only changes this rank's own behaviour is left out, so ranks may differ.
  md::options local = base;
  local.timeout = std::chrono::seconds(5);
  local.tune.nontemporal_bytes = 0;
  CHECK(md::detail::fingerprint(md::detail::to_runtime(t22), local) == b);
}

TEST_CASE("options are validated at bind, on every rank") {
  auto bind_fails = [](md::options o, std::string_view argument, std::vector<std::string> words,
                       const std::string& where) {
    auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& r) {
      const auto t0 = steady::now();
      r.first = thrown([&] { auto comm = md::bind(t22, ep, o); });
      r.seconds = seconds_since(t0);
    });
    for (std::size_t i = 0; i < 4; ++i) {
      expect_arg_error<md::invalid_argument>(rec[i].first, argument, words, where + ", rank " + std::to_string(i));
      CHECK(rec[i].seconds < 5.0);
    }
  };
  md::options o = local_opts();
  SUBCASE("timeout") {
    o.timeout = 0ms;
    bind_fails(o, "options.timeout", {"mdring::bind", "options.timeout", "positive"}, "timeout 0");
    o.timeout = -5ms;
    bind_fails(o, "options.timeout", {"options.timeout", "positive"}, "timeout -5 ms");
  }
  SUBCASE("max_message_bytes") {
    o.max_message_bytes = 0;
    bind_fails(o, "options.max_message_bytes", {"mdring::bind", "options.max_message_bytes", "got 0", "2^31 - 1"},
               "max_message_bytes 0");
    o.max_message_bytes = std::size_t(1) << 31;
    bind_fails(o, "options.max_message_bytes", {"got 2147483648"}, "max_message_bytes 2^31");
  }
  SUBCASE("algorithms longer than ndims") {
    o.algorithms = {md::algorithm::ring, md::algorithm::direct, md::algorithm::ring};
    bind_fails(o, "options.algorithms", {"mdring::bind", "options.algorithms", "3 entries", "2 dimensions", "shm:2 x shm:2"},
               "3 algorithms for 2 dimensions");
  }
  SUBCASE("tune.direct_max_extent") {
    o.tune.direct_max_extent = 1;
    bind_fails(o, "options.tune.direct_max_extent", {"options.tune.direct_max_extent", "at least 2"},
               "direct_max_extent 1");
  }
}

namespace {
// Concatenation of decimal digit strings: associative, not commutative.
struct digits {
  std::uint64_t value = 0;
  std::uint64_t len = 0;
};
struct concat_fn {
  digits operator()(const digits& a, const digits& b) const {
    std::uint64_t p = 1;
    for (std::uint64_t i = 0; i < b.len; ++i) p *= 10;
    return {a.value * p + b.value, a.len + b.len};
  }
};
}  // namespace

TEST_CASE("a non-commutative op is rejected where a ring would reorder it") {
  const auto concat = md::non_commutative(concat_fn{});
  SUBCASE("runtime topology with an ethernet (ring-only) dimension") {
    for (int which = 0; which < 3; ++which) {
      const std::string where = which == 0 ? "all_reduce" : which == 1 ? "reduce_scatter" : "reduce";
      auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& r) {
        auto comm = md::bind(md::parse_topology("shm:2 x ethernet:2"), ep, local_opts());
        std::vector<digits> s(8, digits{1, 1}), out(8);
        r.first = thrown([&] {
          if (which == 0) md::all_reduce(comm, s.data(), out.data(), 8, concat);
          else if (which == 1) md::reduce_scatter(comm, s.data(), out.data(), 2, concat);
          else md::reduce(comm, s.data(), out.data(), 8, 0, concat);
        });
      });
      for (std::size_t i = 0; i < 4; ++i)
        expect_arg_error<md::invalid_argument>(rec[i].first, "op",
                                               {"mdring::" + where, "not commutative", "dimension 1", "ethernet"},
                                               where + ", rank " + std::to_string(i));
    }
  }
  SUBCASE("algorithms forced to ring") {
    auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& r) {
      auto o = local_opts();
      o.algorithms = {md::algorithm::direct, md::algorithm::ring};
      auto comm = md::bind(t22, ep, o);
      std::vector<digits> s(8, digits{1, 1}), out(8);
      r.first = thrown([&] { md::all_reduce(comm, s.data(), out.data(), 8, concat); });
    });
    for (std::size_t i = 0; i < 4; ++i)
      expect_arg_error<md::invalid_argument>(rec[i].first, "op",
                                             {"mdring::all_reduce", "options.algorithms[1]", "ring", "not commutative"},
                                             "forced ring, rank " + std::to_string(i));
  }
  SUBCASE("control: on fully connected dimensions it runs, in rank order") {
    auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record&) {
      auto comm = md::bind(md::parse_topology("shm:2 x shm:2"), ep, local_opts());
      const std::uint64_t r = comm.rank();
      std::vector<digits> s(7), out(7);
      for (std::uint64_t i = 0; i < 7; ++i) s[i] = {(r + i) % 9 + 1, 1};
      md::all_reduce(comm, s.data(), out.data(), 7, concat);
      for (std::uint64_t i = 0; i < 7; ++i) {
        std::uint64_t want = 0;
        for (std::uint64_t q = 0; q < 4; ++q) want = want * 10 + (q + i) % 9 + 1;
        CHECK(out[i].value == want);
        CHECK(out[i].len == 4);
      }
    });
    for (auto& r : rec) CHECK_MESSAGE(!r.first, describe(r.first));
  }
}

// ---------------------------------------------------------------------------
// check_level::local: one rank's bad argument; the others hear of it at once.
namespace {
template <class Call>
void one_bad_rank(std::size_t bad, Call call, std::string_view argument, std::vector<std::string> words,
                  const std::string& where, md::options o = local_opts()) {
  auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& r) {
    auto comm = md::bind(t22, ep, o);
    const auto t0 = steady::now();
    r.first = thrown([&] { call(comm, ep.rank == bad); });
    r.seconds = seconds_since(t0);
    r.next = thrown([&] {
      std::vector<int> x(10, 1);
      md::all_reduce(comm, x.data(), x.size());
    });
  });
  for (std::size_t i = 0; i < 4; ++i) {
    const std::string w = where + ", rank " + std::to_string(i);
    if (i == bad) {
      expect_arg_error<md::invalid_argument>(rec[i].first, argument, words, w);
    } else {
      INFO(w << ": " << describe(rec[i].first));
      const auto* e = as<md::remote_error>(rec[i].first);
      REQUIRE(e != nullptr);
      CHECK(e->failed_rank() == bad);
      CHECK(contains(e->what(), "rank " + std::to_string(bad)));
      CHECK(contains(e->what(), "mdring::"));
    }
    INFO(w << " took " << rec[i].seconds << " s (deadline 30 s)");
    CHECK(rec[i].seconds < 5.0);
    INFO(w << ", next call: " << describe(rec[i].next));
    const auto* ce = as<md::communicator_error>(rec[i].next);
    REQUIRE(ce != nullptr);
    CHECK(contains(ce->what(), "unusable"));
  }
}
}  // namespace

TEST_CASE("no rank is left hanging: one bad argument, the others get remote_error quickly") {
  constexpr std::size_t n = 1000;
  std::vector<std::vector<int>> s(4, std::vector<int>(4 * n, 1)), r(4, std::vector<int>(4 * n, 0));
  SUBCASE("all_reduce, null sendbuf on rank 2") {
    one_bad_rank(2, [&](auto& c, bool bad) {
      md::all_reduce(c, bad ? nullptr : s[c.rank()].data(), r[c.rank()].data(), n);
    }, "sendbuf", {"sendbuf is null"}, "all_reduce");
  }
  SUBCASE("reduce_scatter, overlap on rank 1") {
    one_bad_rank(1, [&](auto& c, bool bad) {
      int* sb = s[c.rank()].data();
      md::reduce_scatter(c, sb, bad ? sb + 5 : r[c.rank()].data(), n);
    }, "recvbuf", {"overlap"}, "reduce_scatter");
  }
  SUBCASE("all_gather, span size mismatch on rank 3") {
    one_bad_rank(3, [&](auto& c, bool bad) {
      md::all_gather(c, std::span<const int>(s[c.rank()].data(), n),
                     std::span<int>(r[c.rank()].data(), bad ? 4 * n - 1 : 4 * n));
    }, "recvbuf", {"recvbuf has 3999"}, "all_gather");
  }
  SUBCASE("broadcast, root out of range on rank 0") {
    one_bad_rank(0, [&](auto& c, bool bad) { md::broadcast(c, s[c.rank()].data(), n, bad ? 4 : 1); }, "root",
                 {"root 4"}, "broadcast");
  }
  SUBCASE("reduce, the root passes a null recvbuf") {
    one_bad_rank(2, [&](auto& c, bool bad) {
      md::reduce(c, s[c.rank()].data(), bad ? nullptr : r[c.rank()].data(), n, 2);
    }, "recvbuf", {"recvbuf is null"}, "reduce");
  }
  SUBCASE("ring algorithms on every dimension") {
    auto o = local_opts();
    o.algorithms = {md::algorithm::ring, md::algorithm::ring};
    one_bad_rank(1, [&](auto& c, bool bad) {
      md::all_reduce(c, s[c.rank()].data(), bad ? nullptr : r[c.rank()].data(), n);
    }, "recvbuf", {"recvbuf is null"}, "all_reduce ring", o);
  }
}

TEST_CASE("an exception escaping one rank's code does not leave the others waiting") {
  const auto t0 = steady::now();
  std::vector<std::exception_ptr> seen(3);
  auto ex = thrown([&] {
    md::threads::run(3, [&](md::threads::endpoint ep) {
      if (ep.rank == 1) throw std::logic_error("user code failed on rank 1");
      auto o = local_opts();
      auto comm = md::bind(md::ring<md::shm>, ep, o);
      std::vector<double> x(100, 1.0);
      seen[ep.rank] = thrown([&] { md::all_reduce(comm, x.data(), x.size()); });
    });
  });
  CHECK(seconds_since(t0) < 5.0);
  // run() rethrows the first failure: rank 1's own exception.
  INFO(describe(ex));
  REQUIRE(as<std::logic_error>(ex) != nullptr);
  for (std::size_t i : {0u, 2u}) {
    INFO("rank " << i << ": " << describe(seen[i]));
    const auto* e = as<md::remote_error>(seen[i]);
    REQUIRE(e != nullptr);
    CHECK(e->failed_rank() == 1);
    CHECK(contains(e->what(), "user code failed on rank 1"));
  }
}

// ---------------------------------------------------------------------------
// check_level::collective: everybody throws invalid_argument; the communicator lives.
namespace {
template <class Call>
void collective_reject(std::size_t bad, Call call, std::string_view bad_argument, std::vector<std::string> bad_words,
                       std::string_view others_argument, std::vector<std::string> others_words,
                       const std::string& where) {
  auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& r) {
    auto comm = md::bind(t22, ep, collective_opts());
    const auto t0 = steady::now();
    r.first = thrown([&] { call(comm, ep.rank == bad); });
    r.seconds = seconds_since(t0);
    // The communicator survives: a correct call works and is exact.
    r.next = thrown([&] {
      if (!comm.usable()) throw std::runtime_error("communicator not usable: " + comm.failure());
      std::vector<int> x(37);
      for (int i = 0; i < 37; ++i) x[i] = int(comm.rank()) * 1000 + i;
      md::all_reduce(comm, x.data(), x.size());
      for (int i = 0; i < 37; ++i)
        if (x[i] != 6000 + 4 * i) throw std::runtime_error("wrong all_reduce result after the error");
    });
  });
  for (std::size_t i = 0; i < 4; ++i) {
    const std::string w = where + ", rank " + std::to_string(i);
    if (i == bad) expect_arg_error<md::invalid_argument>(rec[i].first, bad_argument, bad_words, w);
    else expect_arg_error<md::invalid_argument>(rec[i].first, others_argument, others_words, w);
    CHECK(rec[i].seconds < 5.0);
    INFO(w << ", following all_reduce: " << describe(rec[i].next));
    CHECK(!rec[i].next);
  }
}
}  // namespace

TEST_CASE("check_level::collective: every rank throws invalid_argument and the communicator stays usable") {
  constexpr std::size_t n = 100;
  std::vector<std::vector<int>> s(4, std::vector<int>(4 * n + 8, 1)), r(4, std::vector<int>(4 * n + 8, 0));
  SUBCASE("null sendbuf on one rank") {
    collective_reject(2, [&](auto& c, bool bad) {
      md::all_reduce(c, bad ? nullptr : s[c.rank()].data(), r[c.rank()].data(), n);
    }, "sendbuf", {"sendbuf is null"}, "sendbuf", {"mdring::all_reduce", "rank 2", "sendbuf"}, "all_reduce null");
  }
  SUBCASE("overlap on one rank") {
    collective_reject(1, [&](auto& c, bool bad) {
      int* sb = s[c.rank()].data();
      md::all_reduce(c, sb, bad ? sb + 1 : r[c.rank()].data(), n);
    }, "recvbuf", {"overlap"}, "recvbuf", {"rank 1", "recvbuf"}, "all_reduce overlap");
  }
  SUBCASE("root out of range on one rank") {
    collective_reject(3, [&](auto& c, bool bad) {
      md::reduce(c, s[c.rank()].data(), r[c.rank()].data(), n, bad ? 11 : 0);
    }, "root", {"root 11"}, "root", {"mdring::reduce", "rank 3", "root"}, "reduce root");
  }
  SUBCASE("null buf of broadcast on one rank") {
    // The bad rank's argument is "buf"; the others must name the same argument.
    collective_reject(1, [&](auto& c, bool bad) {
      md::broadcast(c, bad ? nullptr : s[c.rank()].data(), n, 0);
    }, "buf", {"buf is null"}, "buf", {"mdring::broadcast", "rank 1", "buf"}, "broadcast null buf");
  }
  SUBCASE("span size mismatch on one rank") {
    // The bad rank's argument is "recvbuf"; the others must name the same argument.
    collective_reject(0, [&](auto& c, bool bad) {
      md::all_reduce(c, std::span<const int>(s[c.rank()].data(), n), std::span<int>(r[c.rank()].data(), bad ? n + 1 : n));
    }, "recvbuf", {"recvbuf has 101"}, "recvbuf", {"mdring::all_reduce", "rank 0", "recvbuf"}, "all_reduce span");
  }
  SUBCASE("different counts") {
    collective_reject(1, [&](auto& c, bool bad) {
      md::all_reduce(c, s[c.rank()].data(), r[c.rank()].data(), bad ? n + 1 : n);
    }, "count", {"different counts", "100", "101"}, "count", {"mdring::all_reduce", "different counts", "100", "101"},
                      "all_reduce counts");
    collective_reject(3, [&](auto& c, bool bad) {
      md::reduce_scatter(c, s[c.rank()].data(), r[c.rank()].data(), bad ? 7 : 9);
    }, "count", {"different counts"}, "count", {"mdring::reduce_scatter", "different counts", "7", "9"},
                      "reduce_scatter counts");
    collective_reject(0, [&](auto& c, bool bad) {
      md::all_gather(c, s[c.rank()].data(), r[c.rank()].data(), bad ? 0 : 5);
    }, "count", {"different counts"}, "count", {"mdring::all_gather", "different counts", "0", "5"},
                      "all_gather counts, one of them 0");
  }
  SUBCASE("different roots") {
    collective_reject(2, [&](auto& c, bool bad) { md::broadcast(c, s[c.rank()].data(), n, bad ? 3 : 1); }, "root",
                      {"different roots"}, "root", {"mdring::broadcast", "different roots", "1", "3"}, "broadcast roots");
  }
  SUBCASE("different element types") {
    std::vector<std::vector<float>> f(4, std::vector<float>(n, 1.0f));
    collective_reject(1, [&](auto& c, bool bad) {
      if (bad) md::all_reduce(c, f[c.rank()].data(), f[c.rank()].size());
      else md::all_reduce(c, s[c.rank()].data(), n);
    }, "T", {"element types"}, "T", {"mdring::all_reduce", "element types"}, "float vs int32");
    collective_reject(2, [&](auto& c, bool bad) {
      if (bad) md::all_reduce(c, reinterpret_cast<unsigned*>(s[c.rank()].data()), n);
      else md::all_reduce(c, s[c.rank()].data(), n);
    }, "T", {"element types"}, "T", {"element types"}, "uint32 vs int32");
  }
  SUBCASE("different ops: sum and max") {
    collective_reject(0, [&](auto& c, bool bad) {
      if (bad) md::all_reduce(c, s[c.rank()].data(), n, md::sum);
      else md::all_reduce(c, s[c.rank()].data(), n, md::max);
    }, "op", {"different ops"}, "op", {"mdring::all_reduce", "different ops"}, "sum vs max");
  }
  SUBCASE("different ops: min and max") {
    // Two ops with names of the same length and first letter: the agreement must
    // still tell them apart (otherwise the ranks silently compute different results).
    collective_reject(3, [&](auto& c, bool bad) {
      if (bad) md::all_reduce(c, s[c.rank()].data(), n, md::min);
      else md::all_reduce(c, s[c.rank()].data(), n, md::max);
    }, "op", {"different ops"}, "op", {"mdring::all_reduce", "different ops"}, "min vs max");
  }
  SUBCASE("every rank bad: all throw, communicator survives") {
    collective_reject(0, [&](auto& c, bool) {
      md::all_reduce(c, static_cast<const int*>(nullptr), r[c.rank()].data(), n);
    }, "sendbuf", {"sendbuf is null"}, "sendbuf", {"sendbuf is null"}, "all null");
  }
}

// ---------------------------------------------------------------------------
namespace {
void check_timeouts(const std::vector<rank_record>& rec, std::size_t absent, const char* collective_name) {
  std::size_t timeouts = 0;
  for (std::size_t i = 0; i < rec.size(); ++i) {
    if (i == absent) continue;
    INFO("rank " << i << ": " << describe(rec[i].first) << " after " << rec[i].seconds << " s");
    CHECK(rec[i].seconds < 10.0);  // the deadline is 300 ms
    if (const auto* t = as<md::timeout_error>(rec[i].first)) {
      ++timeouts;
      CHECK(t->collective() == collective_name);
      REQUIRE(t->dimension() < rec[i].rings.size());
      const auto& ring = rec[i].rings[t->dimension()];
      // The peer it waited for is another member of its ring in that dimension.
      CHECK(t->peer() != i);
      CHECK(std::find(ring.begin(), ring.end(), t->peer()) != ring.end());
      CHECK(t->step() + 1 < (ring.size() < 2 ? 2 : ring.size()));
      CHECK((t->phase() == "reduce-scatter" || t->phase() == "all-gather"));
      const std::string w = t->what();
      CHECK(contains(w, std::string("mdring::") + collective_name));
      CHECK(contains(w, "timed out"));
      CHECK(contains(w, "0.3 s"));
      CHECK(contains(w, "dimension " + std::to_string(t->dimension())));
      CHECK(contains(w, "step " + std::to_string(t->step())));
      CHECK(contains(w, "rank " + std::to_string(t->peer())));
      CHECK(contains(w, t->phase()));
    } else {
      const auto* e = as<md::remote_error>(rec[i].first);
      REQUIRE(e != nullptr);
      CHECK(e->failed_rank() != absent);
      CHECK(e->failed_rank() != i);
      CHECK(contains(e->what(), "timed out"));
    }
    INFO("next call: " << describe(rec[i].next));
    CHECK(as<md::communicator_error>(rec[i].next) != nullptr);
  }
  CHECK(timeouts >= 1);
}

template <class Topo>
std::vector<rank_record> absent_peer(const Topo& topo, md::options o, std::size_t absent, bool use_reduce_scatter) {
  std::latch done(4);
  auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& r) {
    auto comm = md::bind(topo, ep, o);
    // timeout_error's dimension is one of the executed topology (same-link dimensions merged)
    const auto& ex = comm.executed_topology();
    for (std::size_t d = 0; d < ex.ndims(); ++d) r.rings.push_back(ex.peers(comm.rank(), d));
    if (ep.rank != absent) {
      std::vector<float> x(4 * 1000, 1.0f), y(1000);
      const auto t0 = steady::now();
      r.first = thrown([&] {
        if (use_reduce_scatter) md::reduce_scatter(comm, x.data(), y.data(), 1000);
        else md::all_reduce(comm, x.data(), 1000);
      });
      r.seconds = seconds_since(t0);
      r.next = thrown([&] { md::all_reduce(comm, x.data(), 1000); });
    }
    // The absent rank keeps its communicator alive until the others are done.
    done.arrive_and_wait();
  });
  return rec;
}
}  // namespace

TEST_CASE("a peer that never arrives: timeout_error names collective, dimension, step and peer") {
  md::options o = local_opts(300ms);
  SUBCASE("2 x 2, rank 3 absent") {
    auto rec = absent_peer(t22, o, 3, false);
    check_timeouts(rec, 3, "all_reduce");
    // Ranks 1 and 2 share a ring with rank 3; if one of them timed out it waited for 3.
    for (std::size_t i : {1u, 2u})
      if (auto* t = as<md::timeout_error>(rec[i].first)) CHECK(t->peer() == 3);
  }
  SUBCASE("ring of 4 with the ring algorithm, rank 3 absent") {
    o.algorithms = {md::algorithm::ring};
    auto rec = absent_peer(md::ring<md::shm, 4>, o, 3, false);
    check_timeouts(rec, 3, "all_reduce");
  }
  SUBCASE("reduce_scatter on a runtime topology, rank 0 absent") {
    auto rec = absent_peer(md::parse_topology("shm:2 x infiniband:*"), o, 0, true);
    check_timeouts(rec, 0, "reduce_scatter");
  }
}

// ---------------------------------------------------------------------------
TEST_CASE("count mismatch without collective checks: an error, never a wrong result or a hang") {
  auto mismatch = [](std::size_t nranks, auto topo, std::size_t bad, std::size_t n, std::size_t n_bad,
                     std::chrono::milliseconds timeout, double limit, bool reduce_scatter) {
    auto rec = on_ranks(nranks, [&](md::threads::endpoint ep, rank_record& r) {
      auto comm = md::bind(topo, ep, local_opts(timeout));
      const std::size_t mine = ep.rank == bad ? n_bad : n;
      std::vector<int> x(nranks * (n > n_bad ? n : n_bad) + 1, 1), y(x.size());
      const auto t0 = steady::now();
      r.first = thrown([&] {
        if (reduce_scatter) md::reduce_scatter(comm, x.data(), y.data(), mine);
        else md::all_reduce(comm, x.data(), mine);
      });
      r.seconds = seconds_since(t0);
    });
    std::size_t transport_errors = 0;
    for (std::size_t i = 0; i < nranks; ++i) {
      INFO("rank " << i << " (count " << (i == bad ? n_bad : n) << "): " << describe(rec[i].first) << " after "
                   << rec[i].seconds << " s");
      CHECK(rec[i].first != nullptr);
      CHECK(as<md::error>(rec[i].first) != nullptr);
      CHECK(rec[i].seconds < limit);
      if (auto* e = as<md::transport_error>(rec[i].first)) {
        ++transport_errors;
        CHECK(contains(e->what(), "different counts"));
      }
    }
    return transport_errors;
  };
  SUBCASE("2 ranks, 1000 vs 1001: transport_error at once") {
    CHECK(mismatch(2, md::ring<md::shm, 2>, 1, 1000, 1001, 30s, 5.0, false) >= 1);
  }
  SUBCASE("2 x 2, 1000 vs 1003 on rank 3") {
    CHECK(mismatch(4, t22, 3, 1000, 1003, 30s, 5.0, false) >= 1);
  }
  SUBCASE("ring of 4 (ring algorithm), reduce_scatter 50 vs 49") {
    CHECK(mismatch(4, md::ring<md::shm, 4>, 0, 50, 49, 30s, 5.0, true) >= 1);
  }
  SUBCASE("tiny counts 1 vs 2: some messages vanish; still an error on every rank") {
    // Zero-length blocks are not sent, so a mismatch may show as a missing message:
    // then the error is a timeout (or the remote_error it causes), after the deadline.
    mismatch(2, md::ring<md::shm, 2>, 1, 1, 2, 300ms, 10.0, false);
  }
  SUBCASE("count 0 on one rank, 5 on the others: the others fail by the deadline") {
    // The rank with count 0 moves nothing and returns; the ranks that wait for its
    // data must not hang.
    auto rec = on_ranks(3, [&](md::threads::endpoint ep, rank_record& r) {
      auto comm = md::bind(md::ring<md::shm>, ep, local_opts(300ms));
      std::vector<int> x(5, 1);
      const auto t0 = steady::now();
      r.first = thrown([&] { md::all_reduce(comm, x.data(), ep.rank == 0 ? 0 : 5); });
      r.seconds = seconds_since(t0);
    });
    for (std::size_t i = 1; i < 3; ++i) {
      INFO("rank " << i << ": " << describe(rec[i].first) << " after " << rec[i].seconds << " s");
      CHECK(as<md::error>(rec[i].first) != nullptr);
      CHECK(rec[i].seconds < 10.0);
    }
  }
}

// ---------------------------------------------------------------------------
TEST_CASE("other error paths of the public API") {
  SUBCASE("threads::world and bind") {
    expect_arg_error<md::invalid_argument>(thrown([] { md::threads::world w(0); }), "n",
                                           {"mdring::threads::world", "at least 1"}, "world(0)");
    md::threads::world w(2);
    expect_arg_error<md::invalid_argument>(thrown([&] { (void)w.at(2); }), "rank",
                                           {"mdring::threads::world::at", "rank 2", "size 2"}, "at(2)");
    expect_arg_error<md::invalid_argument>(thrown([] { auto c = md::bind(t22, md::threads::endpoint{}); }),
                                           "endpoint", {"mdring::bind", "no world"}, "endpoint{}");
  }
  SUBCASE("parse_topology") {
    auto bad = [](std::string_view text, std::vector<std::string> words) {
      expect_arg_error<md::topology_error>(thrown([&] { (void)md::parse_topology(text); }), "topology",
                                           [&] {
                                             words.push_back("mdring::parse_topology");
                                             words.push_back("\"" + std::string(text) + "\"");
                                             return words;
                                           }(),
                                           "parse_topology(\"" + std::string(text) + "\")");
    };
    bad("", {"empty"});
    bad("   ", {"empty"});
    bad("warp:4", {"unknown link \"warp\"", "known:", "nvlink"});
    bad("shm 4", {"expected ':'"});
    bad("shm:", {"expected an extent"});
    bad("shm:0", {"extent 0"});
    bad("shm:* x ethernet:*", {"second dynamic extent"});
    bad("shm:2 x", {"expected a dimension"});
    bad("shm:2 + shm:2", {"unexpected character '+'", "position 6"});
    bad("shm:99999999999999999999", {"extent too large"});
  }
  SUBCASE("runtime_topology") {
    expect_arg_error<md::topology_error>(thrown([] { md::runtime_topology t(std::vector<md::runtime_topology::dimension>{}); }),
                                         "topology", {"at least one dimension"}, "no dimensions");
    const auto shm = md::link_info_of<md::shm>();
    expect_arg_error<md::topology_error>(thrown([&] { md::runtime_topology t({{shm, 0}}); }), "topology",
                                         {"extent 0"}, "extent 0");
    expect_arg_error<md::topology_error>(
        thrown([&] { md::runtime_topology t({{shm, md::dynamic_extent}, {shm, md::dynamic_extent}}); }), "topology",
        {"more than one dynamic extent"}, "two dynamic");
    const auto dyn = md::parse_topology("shm:2 x shm:*");
    expect_arg_error<md::topology_error>(thrown([&] { (void)dyn.coordinates(1); }), "topology",
                                         {"coordinates", "dynamic extent", "resolve"}, "coordinates of dynamic");
    expect_arg_error<md::topology_error>(thrown([&] { (void)dyn.resolve(0); }), "topology",
                                         {"mdring::resolve", "size 0"}, "resolve(0)");
    expect_arg_error<md::topology_error>(thrown([&] { (void)md::parse_topology("shm:2 x shm:3").resolve(5); }),
                                         "topology", {"mdring::resolve", "6 ranks", "5"}, "resolve(5)");
  }
  SUBCASE("explain") {
    expect_arg_error<md::topology_error>(thrown([] { (void)md::explain(md::ring<md::shm, 2> * md::ring<md::shm>, 10); }),
                                         "topology", {"mdring::explain", "dynamic extent", "resolve"}, "dynamic");
    expect_arg_error<md::invalid_argument>(thrown([] { (void)md::explain(t22, 10, md::collective::all_reduce, 4); }),
                                           "rank", {"mdring::explain", "rank 4", "size 4"}, "rank 4");
  }
  SUBCASE("register_link") {
    md::link_info bad{"my link", 1e9, 1e-6, true, md::memory_space::host};
    expect_arg_error<md::invalid_argument>(thrown([&] { md::register_link(bad); }), "info",
                                           {"mdring::register_link", "\"my link\""}, "blank in name");
    bad.name = "";
    expect_arg_error<md::invalid_argument>(thrown([&] { md::register_link(bad); }), "info", {"non-empty"}, "empty");
    bad.name = "fastlink";
    bad.bandwidth = 0;
    expect_arg_error<md::invalid_argument>(thrown([&] { md::register_link(bad); }), "info", {"bandwidth > 0"},
                                           "bandwidth 0");
  }
}
