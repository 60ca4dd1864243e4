// tests/test_errors_peers.cpp: what the other ranks see when one fails, on the
// threads transport: one bad argument (remote_error, quickly), an exception escaping
// a rank, check_level::collective (every rank throws, the communicator survives), a
// peer that never arrives (timeout_error naming where), a count mismatch (an error,
// never a wrong result or a hang). Harness: errors_threads.hpp.
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>

#include "errors_threads.hpp"

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
    one_bad_rank(
        2, [&](auto& c, bool bad) { md::all_reduce(c, bad ? nullptr : s[c.rank()].data(), r[c.rank()].data(), n); },
        "sendbuf", {"sendbuf is null"}, "all_reduce");
  }
  SUBCASE("reduce_scatter, overlap on rank 1") {
    one_bad_rank(
        1,
        [&](auto& c, bool bad) {
          int* sb = s[c.rank()].data();
          md::reduce_scatter(c, sb, bad ? sb + 5 : r[c.rank()].data(), n);
        },
        "recvbuf", {"overlap"}, "reduce_scatter");
  }
  SUBCASE("all_gather, span size mismatch on rank 3") {
    one_bad_rank(
        3,
        [&](auto& c, bool bad) {
          md::all_gather(c, std::span<const int>(s[c.rank()].data(), n),
                         std::span<int>(r[c.rank()].data(), bad ? 4 * n - 1 : 4 * n));
        },
        "recvbuf", {"recvbuf has 3999"}, "all_gather");
  }
  SUBCASE("broadcast, root out of range on rank 0") {
    one_bad_rank(
        0, [&](auto& c, bool bad) { md::broadcast(c, s[c.rank()].data(), n, bad ? 4 : 1); }, "root", {"root 4"},
        "broadcast");
  }
  SUBCASE("reduce, the root passes a null recvbuf") {
    one_bad_rank(
        2, [&](auto& c, bool bad) { md::reduce(c, s[c.rank()].data(), bad ? nullptr : r[c.rank()].data(), n, 2); },
        "recvbuf", {"recvbuf is null"}, "reduce");
  }
  SUBCASE("ring algorithms on every dimension") {
    auto o = local_opts();
    o.algorithms = {md::algorithm::ring, md::algorithm::ring};
    one_bad_rank(
        1, [&](auto& c, bool bad) { md::all_reduce(c, s[c.rank()].data(), bad ? nullptr : r[c.rank()].data(), n); },
        "recvbuf", {"recvbuf is null"}, "all_reduce ring", o);
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
    collective_reject(
        2, [&](auto& c, bool bad) { md::all_reduce(c, bad ? nullptr : s[c.rank()].data(), r[c.rank()].data(), n); },
        "sendbuf", {"sendbuf is null"}, "sendbuf", {"mdring::all_reduce", "rank 2", "sendbuf"}, "all_reduce null");
  }
  SUBCASE("overlap on one rank") {
    collective_reject(
        1,
        [&](auto& c, bool bad) {
          int* sb = s[c.rank()].data();
          md::all_reduce(c, sb, bad ? sb + 1 : r[c.rank()].data(), n);
        },
        "recvbuf", {"overlap"}, "recvbuf", {"rank 1", "recvbuf"}, "all_reduce overlap");
  }
  SUBCASE("root out of range on one rank") {
    collective_reject(
        3, [&](auto& c, bool bad) { md::reduce(c, s[c.rank()].data(), r[c.rank()].data(), n, bad ? 11 : 0); }, "root",
        {"root 11"}, "root", {"mdring::reduce", "rank 3", "root"}, "reduce root");
  }
  SUBCASE("null buf of broadcast on one rank") {
    // The bad rank's argument is "buf"; the others must name the same argument.
    collective_reject(
        1, [&](auto& c, bool bad) { md::broadcast(c, bad ? nullptr : s[c.rank()].data(), n, 0); }, "buf",
        {"buf is null"}, "buf", {"mdring::broadcast", "rank 1", "buf"}, "broadcast null buf");
  }
  SUBCASE("span size mismatch on one rank") {
    // The bad rank's argument is "recvbuf"; the others must name the same argument.
    collective_reject(
        0,
        [&](auto& c, bool bad) {
          md::all_reduce(c, std::span<const int>(s[c.rank()].data(), n),
                         std::span<int>(r[c.rank()].data(), bad ? n + 1 : n));
        },
        "recvbuf", {"recvbuf has 101"}, "recvbuf", {"mdring::all_reduce", "rank 0", "recvbuf"}, "all_reduce span");
  }
  SUBCASE("different counts") {
    collective_reject(
        1, [&](auto& c, bool bad) { md::all_reduce(c, s[c.rank()].data(), r[c.rank()].data(), bad ? n + 1 : n); },
        "count", {"different counts", "100", "101"}, "count", {"mdring::all_reduce", "different counts", "100", "101"},
        "all_reduce counts");
    collective_reject(
        3, [&](auto& c, bool bad) { md::reduce_scatter(c, s[c.rank()].data(), r[c.rank()].data(), bad ? 7 : 9); },
        "count", {"different counts"}, "count", {"mdring::reduce_scatter", "different counts", "7", "9"},
        "reduce_scatter counts");
    collective_reject(
        0, [&](auto& c, bool bad) { md::all_gather(c, s[c.rank()].data(), r[c.rank()].data(), bad ? 0 : 5); }, "count",
        {"different counts"}, "count", {"mdring::all_gather", "different counts", "0", "5"},
        "all_gather counts, one of them 0");
  }
  SUBCASE("different roots") {
    collective_reject(
        2, [&](auto& c, bool bad) { md::broadcast(c, s[c.rank()].data(), n, bad ? 3 : 1); }, "root",
        {"different roots"}, "root", {"mdring::broadcast", "different roots", "1", "3"}, "broadcast roots");
  }
  SUBCASE("different element types") {
    std::vector<std::vector<float>> f(4, std::vector<float>(n, 1.0f));
    collective_reject(
        1,
        [&](auto& c, bool bad) {
          if (bad) md::all_reduce(c, f[c.rank()].data(), f[c.rank()].size());
          else md::all_reduce(c, s[c.rank()].data(), n);
        },
        "T", {"element types"}, "T", {"mdring::all_reduce", "element types"}, "float vs int32");
    collective_reject(
        2,
        [&](auto& c, bool bad) {
          if (bad) md::all_reduce(c, reinterpret_cast<unsigned*>(s[c.rank()].data()), n);
          else md::all_reduce(c, s[c.rank()].data(), n);
        },
        "T", {"element types"}, "T", {"element types"}, "uint32 vs int32");
  }
  SUBCASE("different ops: sum and max") {
    collective_reject(
        0,
        [&](auto& c, bool bad) {
          if (bad) md::all_reduce(c, s[c.rank()].data(), n, md::sum);
          else md::all_reduce(c, s[c.rank()].data(), n, md::max);
        },
        "op", {"different ops"}, "op", {"mdring::all_reduce", "different ops"}, "sum vs max");
  }
  SUBCASE("different ops: min and max") {
    // Two ops with names of the same length and first letter: the agreement must
    // still tell them apart (otherwise the ranks silently compute different results).
    collective_reject(
        3,
        [&](auto& c, bool bad) {
          if (bad) md::all_reduce(c, s[c.rank()].data(), n, md::min);
          else md::all_reduce(c, s[c.rank()].data(), n, md::max);
        },
        "op", {"different ops"}, "op", {"mdring::all_reduce", "different ops"}, "min vs max");
  }
  SUBCASE("every rank bad: all throw, communicator survives") {
    collective_reject(
        0, [&](auto& c, bool) { md::all_reduce(c, static_cast<const int*>(nullptr), r[c.rank()].data(), n); },
        "sendbuf", {"sendbuf is null"}, "sendbuf", {"sendbuf is null"}, "all null");
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
  o.tune.one_shot_max_bytes = 0;  // the programs' stages (the one-shot path: test_one_shot.cpp)
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
  SUBCASE("2 x 2, 1000 vs 1003 on rank 3") { CHECK(mismatch(4, t22, 3, 1000, 1003, 30s, 5.0, false) >= 1); }
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
