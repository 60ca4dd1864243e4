// test_boost_mpi.cpp (2 and 4 processes): binding to a boost::mpi::communicator.
//
// mpi_main.cpp has already called MPI_Init, so no boost::mpi::environment is made:
// `boost::mpi::communicator world;` wraps MPI_COMM_WORLD. All five collectives are
// checked exactly on the world, on communicators from world.split(...) (including
// reversed key order, so that sub-communicator ranks differ from world ranks), and
// on a split communicator that is destroyed right after bind (mdring duplicates it).
// The nonblocking calls run request_cases.hpp on the world and on a split.
#include <doctest/doctest.h>
#include <mdring/boost_mpi.hpp>
#include "request_cases.hpp"

#include <boost/mpi/collectives.hpp>
#include <boost/mpi/communicator.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace md = mdring;
namespace bmpi = boost::mpi;

namespace {

std::int64_t val(std::size_t r, std::size_t i) { return std::int64_t(r) * 100003 + std::int64_t(i) * 3 - 7; }
std::int64_t val_sum(std::size_t P, std::size_t i) {
  return 100003 * std::int64_t(P * (P - 1) / 2) + std::int64_t(P) * (std::int64_t(i) * 3 - 7);
}

template <class F>
std::size_t first_bad(std::size_t n, F&& ok) {
  for (std::size_t i = 0; i < n; ++i)
    if (!ok(i)) return i;
  return n;
}

// The five collectives on `comm`, whose ranks are those of boost communicator `bc`.
template <class Comm>
void check_all_five(Comm& comm, const bmpi::communicator& bc, const std::string& label) {
  const std::size_t P = std::size_t(bc.size()), R = std::size_t(bc.rank());
  CHECK(comm.size() == P);
  CHECK(comm.rank() == R);
  for (std::size_t n : {std::size_t(0), std::size_t(1), P + 1, std::size_t(1000), std::size_t(4099)}) {
    INFO(label << ", count " << n);
    // all_reduce, out of place and in place
    std::vector<std::int64_t> s(n), r(n, -1);
    for (std::size_t i = 0; i < n; ++i) s[i] = val(R, i);
    md::all_reduce(comm, s.data(), r.data(), n);
    CHECK(first_bad(n, [&](std::size_t i) { return r[i] == val_sum(P, i); }) == n);
    md::all_reduce(comm, s.data(), n, md::max);
    CHECK(first_bad(n, [&](std::size_t i) { return s[i] == val(P - 1, i); }) == n);
    // reduce_scatter
    std::vector<std::int64_t> rs(n * P), rr(n, -1);
    for (std::size_t j = 0; j < n * P; ++j) rs[j] = val(R, j);
    md::reduce_scatter(comm, rs.data(), rr.data(), n);
    CHECK(first_bad(n, [&](std::size_t i) { return rr[i] == val_sum(P, R * n + i); }) == n);
    // all_gather
    std::vector<std::int64_t> gs(n), gr(n * P, -1);
    for (std::size_t i = 0; i < n; ++i) gs[i] = val(R, i);
    md::all_gather(comm, gs.data(), gr.data(), n);
    CHECK(first_bad(n * P, [&](std::size_t j) { return gr[j] == val(j / n, j % n); }) == n * P);
    // broadcast and reduce from every root
    for (std::size_t root = 0; root < P; ++root) {
      std::vector<std::int64_t> b(n, -1);
      if (R == root)
        for (std::size_t i = 0; i < n; ++i) b[i] = val(root, i);
      md::broadcast(comm, b.data(), n, root);
      CHECK(first_bad(n, [&](std::size_t i) { return b[i] == val(root, i); }) == n);
      std::vector<std::int64_t> out(n, -1);
      for (std::size_t i = 0; i < n; ++i) s[i] = val(R, i);
      md::reduce(comm, s.data(), out.data(), n, root);
      if (R == root) CHECK(first_bad(n, [&](std::size_t i) { return out[i] == val_sum(P, i); }) == n);
      else CHECK(first_bad(n, [&](std::size_t i) { return out[i] == -1; }) == n);
    }
  }
  // The result agrees with Boost.MPI's own all_reduce.
  std::int64_t mine = std::int64_t(R * R + 1), ours = mine, theirs = 0;
  md::all_reduce(comm, &ours, 1);
  bmpi::all_reduce(bc, mine, theirs, std::plus<std::int64_t>());
  CHECK(ours == theirs);
}

}  // namespace

TEST_CASE("bind to boost::mpi::communicator world: all five collectives") {
  bmpi::communicator world;  // MPI_COMM_WORLD, attached
  {
    auto comm = md::bind(md::ring<md::shm>, world);
    check_all_five(comm, world, "ring<shm>");
  }
  if (world.size() % 2 == 0) {
    auto comm = md::bind(md::ring<md::shm, 2> * md::ring<md::infiniband>, world);
    CHECK(comm.ndims() == 2);
    check_all_five(comm, world, "ring<shm,2> * ring<infiniband>");
  }
  {
    md::options o;
    o.algorithms = {md::algorithm::ring};
    o.max_message_bytes = 1000;  // messages in pieces
    auto comm = md::bind(md::parse_topology("ethernet:*"), world, o);
    check_all_five(comm, world, "ethernet:* ring, max_message_bytes 1000");
  }
}

TEST_CASE("bind to communicators from world.split(...)") {
  bmpi::communicator world;
  const int R = world.rank();
  SUBCASE("split by parity, world order") {
    bmpi::communicator half = world.split(R % 2);
    auto comm = md::bind(md::ring<md::shm>, half);
    check_all_five(comm, half, "split(rank % 2)");
  }
  SUBCASE("one group, reversed key: sub-communicator ranks are reversed") {
    bmpi::communicator rev = world.split(0, -R);
    CHECK(rev.rank() == world.size() - 1 - R);
    auto comm = md::bind(md::ring<md::shm>, rev);
    CHECK(comm.rank() == std::size_t(rev.rank()));
    check_all_five(comm, rev, "split(0, -rank)");
    if (rev.size() % 2 == 0) {
      auto comm2 = md::bind(md::parse_topology("shm:2 x ethernet:*"), rev);
      check_all_five(comm2, rev, "split(0, -rank), shm:2 x ethernet:*");
    }
  }
  SUBCASE("the Boost communicator may go away after bind") {
    std::optional<decltype(md::bind(md::ring<md::shm>, world))> comm;
    std::size_t sub_size = 0;
    {
      bmpi::communicator tmp = world.split(R < 2 ? 0 : 1, R);  // freed at the end of this scope
      sub_size = std::size_t(tmp.size());
      comm.emplace(md::bind(md::ring<md::shm>, tmp));
    }
    CHECK(comm->size() == sub_size);
    std::vector<std::int64_t> x(777);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::int64_t(R) + std::int64_t(i);
    md::all_reduce(*comm, x.data(), x.size());
    const std::int64_t rsum = R < 2 ? 0 + 1 : (world.size() == 4 ? 2 + 3 : 0);
    CHECK(first_bad(x.size(), [&](std::size_t i) { return x[i] == rsum + std::int64_t(sub_size) * std::int64_t(i); }) ==
          x.size());
  }
}

TEST_CASE("boost.mpi: nonblocking collectives on the world and on a split communicator") {
  bmpi::communicator world;
  bmpi::communicator half = world.split(world.rank() % 2, -world.rank());
  for (const bmpi::communicator* bc : {&world, &half}) {
    request_cases::report rep;
    auto bind = [&](md::options o) { return md::bind(md::ring<md::shm, 1> * md::ring<md::ethernet>, *bc, o); };
    request_cases::all_cases(bind, md::progress_mode::automatic, rep);
    for (const auto& f : rep.failures) FAIL_CHECK("rank " << world.rank() << ": " << f);
  }
}
