// test_mpi_errors.cpp: errors over MPI, on 2 and 3 processes (mpi_main.cpp: every
// rank runs every test case).
//   - a topology that does not fit the communicator, or ranks binding different
//     topologies: topology_error on every rank, nobody hangs;
//   - a bad argument on one rank: the others stop with remote_error long before
//     their deadline; the communicator is unusable afterwards, and a newly bound
//     one works;
//   - check_level::collective: every rank throws invalid_argument, the
//     communicator survives;
//   - a peer that never arrives: timeout_error naming the peer and the step; all
//     ranks still reach MPI_Barrier and finalize cleanly;
//   - counts that differ between ranks: an exception on every rank, never a
//     wrong result.
// Each test case runs under a watchdog: a rank stuck for 120 s prints what it was
// doing and exits, so a hang fails with a message instead of a silent ctest timeout.
// Outcomes are combined over MPI_COMM_WORLD (all_ranks) so that every rank reports
// the same verdict, and every rank makes the same sequence of MPI calls whatever
// its checks find.
#include <doctest/doctest.h>
#include <mdring/mpi.hpp>

#include "error_support.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <typeinfo>
#include <vector>

namespace md = mdring;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using namespace error_test;

namespace {

std::size_t world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return std::size_t(s);
}
std::size_t world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return std::size_t(r);
}

bool all_ranks(bool ok) {
  int v = ok ? 1 : 0, m = 0;
  MPI_Allreduce(&v, &m, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return m == 1;
}
int count_ranks(bool b) {
  int v = b ? 1 : 0, s = 0;
  MPI_Allreduce(&v, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  return s;
}
double max_over_ranks(double x) {
  double m = 0;
  MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

// Exits the process (so mpiexec ends the others) if the scope lasts longer than
// `limit`, saying what hung.
class watchdog {
public:
  watchdog(std::string what, std::chrono::seconds limit) : what_(std::move(what)) {
    thread_ = std::thread([this, limit] {
      std::unique_lock lock(m_);
      if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
        std::fprintf(stderr, "test_mpi_errors: rank %zu HUNG for %lld s in: %s\n", world_rank(),
                     static_cast<long long>(limit.count()), what_.c_str());
        std::fflush(stderr);
        std::_Exit(124);
      }
    });
  }
  ~watchdog() {
    {
      std::lock_guard lock(m_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

private:
  std::string what_;
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

md::options local_opts(std::chrono::milliseconds timeout = 30s) {
  md::options o;
  o.timeout = timeout;
  o.checks = md::check_level::local;
  return o;
}

// A freshly bound communicator works (after earlier failures on other ones).
bool fresh_communicator_works() {
  bool ok = false;
  auto e = thrown([&] {
    auto comm = md::bind(md::ring<md::shm>, MPI_COMM_WORLD, local_opts());
    const std::size_t P = comm.size();
    std::vector<std::int64_t> x(1000);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::int64_t(comm.rank() * 1000 + i);
    md::all_reduce(comm, x.data(), x.size());
    ok = true;
    for (std::size_t i = 0; i < x.size(); ++i) ok = ok && x[i] == std::int64_t(1000 * P * (P - 1) / 2 + P * i);
  });
  INFO("fresh communicator: " << describe(e));
  return all_ranks(ok && !e);
}

}  // namespace

// ---------------------------------------------------------------------------
TEST_CASE("a topology that does not fit the communicator: topology_error on every rank") {
  watchdog wd("topology size mismatch", 120s);
  const std::size_t P = world_size();
  auto expect = [&](auto make, std::vector<std::string> words, const std::string& where) {
    const auto t0 = steady::now();
    auto e = thrown([&] { auto comm = make(); });
    const double secs = seconds_since(t0);
    INFO(where << ": " << describe(e));
    const bool ok = is_exactly<md::topology_error>(e);
    CHECK(all_ranks(ok));
    if (ok) {
      CHECK(as<md::topology_error>(e)->argument() == "topology");
      for (auto& w : words) {
        INFO("what() should contain \"" << w << "\"");
        CHECK(contains(as<md::topology_error>(e)->what(), w));
      }
    }
    CHECK(max_over_ranks(secs) < 10.0);
  };
  expect([] { return md::bind(md::ring<md::shm, 5>, MPI_COMM_WORLD, local_opts()); },
         {"shm:5", "5 ranks", "has " + std::to_string(P)}, "ring<shm, 5>");
  expect([] { return md::bind(md::ring<md::shm, 2> * md::ring<md::ethernet, 2>, MPI_COMM_WORLD, local_opts()); },
         {"shm:2 x ethernet:2", "4 ranks"}, "2 x 2");
  expect([] { return md::bind(md::parse_topology("nvlink:7"), MPI_COMM_WORLD, local_opts()); }, {"nvlink:7", "7 ranks"},
         "runtime nvlink:7");
  // A dynamic extent that the size is not a multiple of.
  const std::string dyn = P % 2 ? "shm:2 x infiniband:*" : "shm:3 x infiniband:*";
  expect([&] { return md::bind(md::parse_topology(dyn), MPI_COMM_WORLD, local_opts()); },
         {"size " + std::to_string(P), "not a multiple of"}, dyn);
  CHECK(fresh_communicator_works());
}

TEST_CASE("ranks binding different topologies: topology_error on every rank") {
  watchdog wd("different topologies", 120s);
  const std::size_t R = world_rank();
  auto expect = [&](auto make, const std::string& where) {
    const auto t0 = steady::now();
    auto e = thrown([&] { auto comm = make(); });
    INFO(where << ": " << describe(e));
    const bool ok = is_exactly<md::topology_error>(e);
    CHECK(all_ranks(ok));
    if (ok) {
      CHECK(as<md::topology_error>(e)->argument() == "topology");
      CHECK(contains(as<md::topology_error>(e)->what(), "mdring::bind"));
      CHECK(contains(as<md::topology_error>(e)->what(), "different"));
    }
    CHECK(max_over_ranks(seconds_since(t0)) < 10.0);
  };
  expect([&] { return md::bind(md::parse_topology(R == 0 ? "shm:*" : "ethernet:*"), MPI_COMM_WORLD, local_opts()); },
         "shm:* on rank 0, ethernet:* elsewhere");
  expect(
      [&] {
        auto o = local_opts();
        o.algorithms = {R == world_size() - 1 ? md::algorithm::ring : md::algorithm::direct};
        return md::bind(md::ring<md::shm>, MPI_COMM_WORLD, o);
      },
      "same topology, different algorithms on the last rank");
  expect([&] { return md::bind(md::parse_topology(R == 1 ? "shm:1 x shm:*" : "shm:*"), MPI_COMM_WORLD, local_opts()); },
         "an extra dimension of extent 1 on rank 1");
  expect(
      [&] {
        auto o = local_opts();
        if (R == 0) o.tune.segment_bytes = 4096;
        return md::bind(md::ring<md::shm>, MPI_COMM_WORLD, o);
      },
      "same topology, a different segment length on rank 0");
  CHECK(fresh_communicator_works());
}

// ---------------------------------------------------------------------------
TEST_CASE("a bad argument on one rank: the others get remote_error quickly") {
  watchdog wd("bad argument on one rank", 120s);
  const std::size_t P = world_size(), R = world_rank();
  const std::size_t bad = P - 1;
  auto run = [&](const std::string& where, auto call, std::string_view argument) {
    auto comm = md::bind(md::ring<md::shm>, MPI_COMM_WORLD, local_opts(30s));
    const auto t0 = steady::now();
    auto e = thrown([&] { call(comm, R == bad); });
    const double secs = seconds_since(t0);
    INFO(where << ", rank " << R << ": " << describe(e) << " after " << secs << " s (deadline 30 s)");
    bool ok;
    if (R == bad) {
      ok = is_exactly<md::invalid_argument>(e) && as<md::invalid_argument>(e)->argument() == argument;
    } else {
      const auto* re = as<md::remote_error>(e);
      ok = re && re->failed_rank() == bad && contains(re->what(), "rank " + std::to_string(bad));
    }
    CHECK(ok);
    CHECK(all_ranks(ok));
    CHECK(max_over_ranks(secs) < 5.0);
    // The communicator is unusable now, on every rank.
    auto next = thrown([&] {
      int x = 1;
      md::all_reduce(comm, &x, 1);
    });
    INFO("next call: " << describe(next));
    CHECK(all_ranks(as<md::communicator_error>(next) != nullptr));
    CHECK(!comm.usable());
  };
  std::vector<float> s(4000 * P, 1.0f), r(4000 * P, 0.0f);
  run(
      "all_reduce, null sendbuf", [&](auto& c, bool b) { md::all_reduce(c, b ? nullptr : s.data(), r.data(), 4000); },
      "sendbuf");
  run(
      "all_reduce, overlap", [&](auto& c, bool b) { md::all_reduce(c, s.data(), b ? s.data() + 1 : r.data(), 4000); },
      "recvbuf");
  run(
      "reduce_scatter, null recvbuf",
      [&](auto& c, bool b) { md::reduce_scatter(c, s.data(), b ? nullptr : r.data(), 4000); }, "recvbuf");
  run(
      "all_gather, overlap", [&](auto& c, bool b) { md::all_gather(c, b ? r.data() + 1 : s.data(), r.data(), 4000); },
      "recvbuf");
  run(
      "broadcast, bad root", [&](auto& c, bool b) { md::broadcast(c, s.data(), 4000, b ? P : 0); }, "root");
  run(
      "reduce, root's null recvbuf",
      [&](auto& c, bool b) { md::reduce(c, s.data(), b ? nullptr : r.data(), 4000, bad); }, "recvbuf");
  // Large messages (beyond the eager limit) are pending when the failure arrives.
  std::vector<double> big(1 << 20, 1.0);
  run(
      "all_reduce of 8 MiB, null recvbuf",
      [&](auto& c, bool b) { md::all_reduce(c, big.data(), b ? nullptr : big.data(), big.size()); }, "recvbuf");
  CHECK(fresh_communicator_works());
}

TEST_CASE("check_level::collective: every rank throws invalid_argument, the communicator stays usable") {
  watchdog wd("collective checks", 120s);
  const std::size_t P = world_size(), R = world_rank();
  md::options o = local_opts(30s);
  o.checks = md::check_level::collective;
  auto comm = md::bind(md::ring<md::shm>, MPI_COMM_WORLD, o);
  auto run = [&](const std::string& where, auto call, std::string_view argument, std::vector<std::string> words) {
    const auto t0 = steady::now();
    auto e = thrown([&] { call(comm); });
    INFO(where << ", rank " << R << ": " << describe(e));
    const auto* ia = is_exactly<md::invalid_argument>(e) ? as<md::invalid_argument>(e) : nullptr;
    CHECK(all_ranks(ia != nullptr));
    if (ia) {
      CHECK(ia->argument() == argument);
      for (auto& w : words) {
        INFO("what() should contain \"" << w << "\"");
        CHECK(contains(ia->what(), w));
      }
    }
    CHECK(max_over_ranks(seconds_since(t0)) < 5.0);
    // Still usable: a correct call is exact.
    CHECK(comm.usable());
    std::vector<std::int64_t> x(333);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::int64_t(R + i);
    auto e2 = thrown([&] { md::all_reduce(comm, x.data(), x.size()); });
    INFO("following all_reduce: " << describe(e2));
    bool ok = !e2;
    for (std::size_t i = 0; i < x.size(); ++i) ok = ok && x[i] == std::int64_t(P * (P - 1) / 2 + P * i);
    CHECK(all_ranks(ok));
  };
  std::vector<int> s(100 * P, 1), r(100 * P, 0);
  run("null sendbuf on rank 1", [&](auto& c) { md::all_reduce(c, R == 1 ? nullptr : s.data(), r.data(), 100); },
      "sendbuf", {"mdring::all_reduce", "sendbuf"});
  run("root out of range on rank 0", [&](auto& c) { md::reduce(c, s.data(), r.data(), 100, R == 0 ? 99 : 0); }, "root",
      {"mdring::reduce", "root"});
  run("different counts", [&](auto& c) { md::all_reduce(c, s.data(), r.data(), R == P - 1 ? 99 : 100); }, "count",
      {"different counts", "99", "100"});
  run("different recvcounts", [&](auto& c) { md::reduce_scatter(c, s.data(), r.data(), R == 0 ? 10 : 11); }, "count",
      {"mdring::reduce_scatter", "different counts"});
  run("different roots", [&](auto& c) { md::broadcast(c, s.data(), 100, R == 1 ? 1 : 0); }, "root",
      {"mdring::broadcast", "different roots"});
  run("different ops",
      [&](auto& c) {
        if (R == 0) md::all_reduce(c, s.data(), 100, md::prod);
        else md::all_reduce(c, s.data(), 100, md::sum);
      },
      "op", {"different ops"});
}

// ---------------------------------------------------------------------------
TEST_CASE("a peer that never arrives: timeout_error naming the peer and the step; everyone finishes") {
  watchdog wd("peer never arrives", 120s);
  const std::size_t P = world_size(), R = world_rank();
  const std::size_t absent = 1;
  for (auto algos : {std::vector<md::algorithm>{}, std::vector<md::algorithm>{md::algorithm::ring}}) {
    md::options o = local_opts(500ms);
    o.algorithms = algos;
    const std::string label = algos.empty() ? "automatic" : "ring";
    for (std::size_t n : {std::size_t(1000), std::size_t(1) << 20}) {
      INFO(label << ", " << n << " floats");
      {
        auto comm = md::bind(md::ring<md::shm>, MPI_COMM_WORLD, o);
        std::exception_ptr e;
        double secs = 0;
        if (R != absent) {
          std::vector<float> x(n, 1.0f);
          const auto t0 = steady::now();
          e = thrown([&] { md::all_reduce(comm, x.data(), x.size()); });
          secs = seconds_since(t0);
        }
        INFO("rank " << R << ": " << describe(e) << " after " << secs << " s");
        bool ok = true;
        const auto* t = as<md::timeout_error>(e);
        if (R != absent) {
          CHECK(secs < 10.0);
          if (t) {
            const std::string w = t->what();
            CHECK(t->collective() == "all_reduce");
            CHECK(t->dimension() == 0);
            CHECK(t->peer() != R);
            CHECK(t->peer() < P);
            CHECK(t->step() + 1 < P);
            CHECK(contains(w, "timed out"));
            CHECK(contains(w, "0.5 s"));
            CHECK(contains(w, "dimension 0"));
            CHECK(contains(w, "step " + std::to_string(t->step())));
            CHECK(contains(w, "rank " + std::to_string(t->peer())));
            CHECK(contains(w, "mpi transport"));
          } else {
            const auto* re = as<md::remote_error>(e);
            ok = re != nullptr && re->failed_rank() != absent && contains(re->what(), "timed out");
            CHECK(ok);
          }
        }
        // At least one rank timed out. With the automatic algorithm (direct on 3
        // ranks, a 2-rank exchange on 2) every waiting rank waits for the absent one
        // itself, so a timeout names it; along a ring of 3 the first timeout may be
        // a rank waiting for a neighbour that is stuck waiting for the absent one.
        CHECK(count_ranks(t != nullptr) >= 1);
        if (algos.empty()) CHECK(count_ranks(t != nullptr && t->peer() == absent) >= 1);
        CHECK(all_ranks(ok));
        // Everybody, the absent rank included, still reaches a barrier.
        const auto tb = steady::now();
        MPI_Barrier(MPI_COMM_WORLD);
        CHECK(seconds_since(tb) < 10.0);
      }  // communicators destroyed before MPI_Finalize (at the end of main)
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  CHECK(fresh_communicator_works());
}

// ---------------------------------------------------------------------------
TEST_CASE("counts that differ between ranks: an exception on every rank, not a wrong result") {
  watchdog wd("count mismatch", 120s);
  const std::size_t P = world_size(), R = world_rank();
  auto run = [&](const std::string& where, std::size_t bigger_rank, std::size_t n, auto topo, md::options o,
                 bool reduce_scatter) {
    auto comm = md::bind(topo, MPI_COMM_WORLD, o);
    const std::size_t mine = R == bigger_rank ? n + 1 : n;
    std::vector<std::int32_t> x((n + 1) * P, 1), y((n + 1) * P, 0);
    const auto t0 = steady::now();
    auto e = thrown([&] {
      if (reduce_scatter) md::reduce_scatter(comm, x.data(), y.data(), mine);
      else md::all_reduce(comm, x.data(), mine);
    });
    const double secs = seconds_since(t0);
    INFO(where << ", rank " << R << " (count " << mine << "): " << describe(e) << " after " << secs << " s");
    const bool ok =
        as<md::mpi_error>(e) || as<md::remote_error>(e) || as<md::transport_error>(e) || as<md::timeout_error>(e);
    CHECK(ok);
    CHECK(all_ranks(ok));
    CHECK(max_over_ranks(secs) < 10.0);
  };
  md::options o = local_opts(30s);
  md::options ring = o;
  ring.algorithms = {md::algorithm::ring};
  for (std::size_t n : {std::size_t(100), std::size_t(1000), std::size_t(100000)}) {
    const std::string sz = std::to_string(n) + " vs " + std::to_string(n + 1);
    run("all_reduce " + sz + ", rank 0 larger", 0, n, md::ring<md::shm>, o, false);
    run("all_reduce " + sz + ", last rank larger", P - 1, n, md::ring<md::shm>, o, false);
    run("all_reduce ring " + sz + ", rank 0 larger", 0, n, md::ring<md::shm>, ring, false);
    run("all_reduce ring " + sz + ", last rank larger", P - 1, n, md::ring<md::shm>, ring, false);
    run("reduce_scatter " + sz + ", rank 0 larger", 0, n, md::ring<md::shm>, o, true);
  }
  CHECK(fresh_communicator_works());
}
