// doctest over a UCX world (mdring-run -n N test_ucx_...): every process runs
// every test case (the collectives need all of them); rank 0 prints the full
// report, the others only their failures. The exit code is non-zero on every
// process if any failed (the verdicts travel through the world's store).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mdring/ucx.hpp>

#include <cstdio>
#include <memory>
#include <optional>

namespace {
std::optional<mdring::ucx::world> the_world;
}

const mdring::ucx::world& test_world() { return *the_world; }

int main(int argc, char** argv) {
  the_world.emplace(mdring::ucx::world::from_env());
  const auto& w = *the_world;
  int failed = 0;
  {
    doctest::Context ctx(argc, argv);
    if (w.rank() != 0) ctx.setOption("minimal", true);
    failed = ctx.run() != 0 ? 1 : 0;
    if (ctx.shouldExit()) return failed;
  }
  const auto all = mdring::rendezvous::all_gather(w.store(), "test/verdict", w.rank(), w.size(), failed ? "1" : "0",
                                                  mdring::rendezvous::clock::now() + std::chrono::seconds(600));
  int any = 0;
  for (const auto& v : all) any |= v == "1";
  if (w.rank() == 0)
    std::printf("mdring UCX tests on %zu processes: %s\n", w.size(), any ? "FAILED on some process" : "all passed");
  mdring::ucx::wait_to_leave(w);
  return any;
}
