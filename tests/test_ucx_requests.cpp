// tests/test_ucx_requests.cpp: nonblocking collectives on a UCX world
// (mdring-run -n N): the cases of request_cases.hpp on a one-dimensional and a
// two-dimensional topology, in both progress modes. The UCX transport allows the
// progress agent always (each communicator has its own worker, which only
// mdring's calls touch), so automatic resolves to agent.
#include <doctest/doctest.h>
#include <mdring/ucx.hpp>
#include "request_cases.hpp"

#include <string>

namespace md = mdring;

const md::ucx::world& test_world();

namespace {

void run_cases(const char* topo, md::progress_mode mode) {
  request_cases::report rep;
  auto bind = [&](md::options o) { return md::bind(md::parse_topology(topo), test_world(), o); };
  request_cases::all_cases(bind, mode, rep);
  for (const auto& f : rep.failures)
    FAIL_CHECK("rank " << test_world().rank() << " (" << topo << ", " << md::to_string(mode) << "): " << f);
}

}  // namespace

TEST_CASE("ucx requests: every case, one and two dimensions, in_wait") {
  run_cases("shm:*", md::progress_mode::in_wait);
  run_cases("shm:1 x ethernet:*", md::progress_mode::in_wait);
}

TEST_CASE("ucx requests: every case with the progress agent") {
  auto comm = md::bind(md::ring<md::shm>, test_world());
  CHECK(comm.progress() == md::progress_mode::agent);
  run_cases("shm:*", md::progress_mode::agent);
  run_cases("shm:1 x ethernet:*", md::progress_mode::agent);
}
