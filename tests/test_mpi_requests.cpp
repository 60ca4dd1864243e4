// tests/test_mpi_requests.cpp: nonblocking collectives on MPI processes.
//
// The cases of request_cases.hpp on MPI_COMM_WORLD, on a one-dimensional and a
// two-dimensional topology, in both progress modes (the agent needs
// MPI_THREAD_MULTIPLE, which tests/mpi_main.cpp asks for). Run again with
// MDRING_TEST_MPI_INIT=single (plain MPI_Init): there bind refuses the agent with
// an error that says what to do, automatic resolves to in_wait, and every case
// still passes.
#include <doctest/doctest.h>
#include <mdring/mpi.hpp>
#include "error_support.hpp"
#include "request_cases.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

namespace md = mdring;

namespace {

bool thread_multiple() {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  return level == MPI_THREAD_MULTIPLE;
}

void run_cases(const char* topo, md::progress_mode mode) {
  request_cases::report rep;
  auto bind = [&](md::options o) { return md::bind(md::parse_topology(topo), MPI_COMM_WORLD, o); };
  request_cases::all_cases(bind, mode, rep);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (const auto& f : rep.failures)
    FAIL_CHECK("rank " << rank << " (" << topo << ", " << md::to_string(mode) << "): " << f);
}

}  // namespace

TEST_CASE("mpi requests: a peer that fails with 1, 2 or 8 calls in flight: every wait throws, nothing terminates") {
  // (MPI lets the survivors of a failed call run on; each scenario binds anew.)
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (auto mode : {md::progress_mode::in_wait, md::progress_mode::agent}) {
    if (mode == md::progress_mode::agent && !thread_multiple()) continue;
    for (std::size_t k : {std::size_t(1), std::size_t(2), std::size_t(8)})
      for (int how = 0; how < 4; ++how) {
        if (k != 8 && how > 1) continue;
        request_cases::report rep;
        md::options o;
        o.progress = mode;

        request_cases::peer_fails_in_flight(
            [&](md::options x) { return md::bind(md::parse_topology("shm:1 x ethernet:*"), MPI_COMM_WORLD, x); }, o, k,
            how, rep);
        for (const auto& f : rep.failures) FAIL_CHECK("rank " << rank << " (" << md::to_string(mode) << "): " << f);
      }
  }
}

TEST_CASE("mpi requests: every case, one and two dimensions, in_wait") {
  run_cases("shm:*", md::progress_mode::in_wait);
  run_cases("shm:1 x ethernet:*", md::progress_mode::in_wait);
}

TEST_CASE("mpi requests: every case with the progress agent (MPI_THREAD_MULTIPLE)") {
  if (!thread_multiple()) {
    md::options o;
    o.progress = md::progress_mode::agent;
    const auto [arg, what] =
        error_test::arg_error_of([&] { auto comm = md::bind(md::ring<md::shm>, MPI_COMM_WORLD, o); });
    CHECK(arg == "options.progress");
    CHECK(what.find("MPI_THREAD_MULTIPLE") != std::string::npos);
    CHECK(what.find("progress_mode::in_wait") != std::string::npos);
    auto comm = md::bind(md::ring<md::shm>, MPI_COMM_WORLD);
    CHECK(comm.progress() == md::progress_mode::in_wait);
    run_cases("shm:*", md::progress_mode::automatic);
    return;
  }
  auto comm = md::bind(md::ring<md::shm>, MPI_COMM_WORLD);
  CHECK(comm.progress() == md::progress_mode::agent);
  run_cases("shm:*", md::progress_mode::agent);
  run_cases("shm:1 x ethernet:*", md::progress_mode::agent);
}

TEST_CASE("mpi requests: the user's own MPI calls on another thread while the agent runs") {
  if (!thread_multiple()) return;
  auto comm = md::bind(md::ring<md::shm>, MPI_COMM_WORLD);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<std::int64_t> big(1 << 18, rank);
  auto req = md::iall_reduce(comm, big.data(), big.size(), md::sum);
  // Meanwhile this thread runs MPI collectives of its own on MPI_COMM_WORLD.
  int sum = 0;
  for (int i = 0; i < 50; ++i) MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  req.wait();
  CHECK(sum == size * (size - 1) / 2);
  CHECK(big.back() == std::int64_t(size) * (size - 1) / 2);
}
