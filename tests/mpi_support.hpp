// tests/mpi_support.hpp: the harness of test_mpi.cpp and test_mpi_options.cpp (the
// collectives over MPI, and compiled with MDRING_TEST_UCX=1 over a UCX world): the
// world's size and rank, checks across ranks through the world (not the transport
// under test), guarded buffers, the topologies derived from the world size, exact
// expected values.
#pragma once

#include <doctest/doctest.h>
#if MDRING_TEST_UCX
#include <mdring/ucx.hpp>
#else
#include <mdring/mpi.hpp>
#endif

#include <mdring/fnv.hpp>

#include "reproducible_reference.hpp"

#include <algorithm>
#include <bit>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory_resource>
#include <string>
#include <vector>

namespace md = mdring;

namespace {

// The checks below compare a hash of the bytes across ranks (the library's FNV-1a),
// not the bytes.
inline std::uint64_t hash_bytes(const void* p, std::size_t bytes) {
  return md::detail::fnv1a(std::string_view(static_cast<const char*>(p), bytes));
}

#if MDRING_TEST_UCX
}  // namespace
// The UCX world of this process (ucx_main.cpp), and the checks across ranks
// through its store: nothing of the transport under test.
const md::ucx::world& test_world();
namespace {
inline std::size_t world_size() { return test_world().size(); }
inline std::size_t world_rank() { return test_world().rank(); }
// Every rank's bytes (collective: the same order of calls on every rank).
inline std::vector<std::string> gather_all(const std::string& mine) {
  static std::size_t seq = 0;
  const auto& w = test_world();
  return md::rendezvous::all_gather(w.store(), "test/" + std::to_string(seq++), w.rank(), w.size(), mine,
                                    md::rendezvous::clock::now() + std::chrono::seconds(120));
}
// The bytes are the same on every rank (collective). Their hash goes through the
// store, not the bytes: the all_gather checks of 65537 elements on 6 ranks would
// move megabytes through rank 0's store thread per check.
inline bool identical_everywhere(const void* p, std::size_t bytes) {
  const std::string mine = std::to_string(hash_bytes(p, bytes)) + "/" + std::to_string(bytes);
  for (const auto& s : gather_all(mine))
    if (s != mine) return false;
  return true;
}
#else
inline MPI_Comm test_world() { return MPI_COMM_WORLD; }
inline std::size_t world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return std::size_t(s);
}
inline std::size_t world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return std::size_t(r);
}

// The bytes are the same on every rank of MPI_COMM_WORLD (collective).
inline bool identical_everywhere(const void* p, std::size_t bytes) {
  const std::uint64_t h = hash_bytes(p, bytes);
  std::uint64_t v[2] = {h, ~h}, m[2] = {0, 0};
  MPI_Allreduce(v, m, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return m[0] == h && m[1] == ~h;
}

// Every rank passed (collective): a check that some rank failed shows everywhere.
inline bool all_ranks(bool ok) {
  int v = ok ? 1 : 0, m = 0;
  MPI_Allreduce(&v, &m, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return m == 1;
}

#endif

inline double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A buffer with `guard` sentinel elements on both sides; data() points past the
// front guard (so it is not 64-byte aligned, unlike what an allocator returns).
template <class T>
struct guarded {
  static constexpr std::size_t guard = 3;
  std::vector<T> v;
  T sentinel;
  guarded(std::size_t n, T s) : v(n + 2 * guard, s), sentinel(s) {}
  T* data() { return v.data() + guard; }
  T& operator[](std::size_t i) { return v[guard + i]; }
  std::size_t size() const { return v.size() - 2 * guard; }
  bool guards_intact() const {
    for (std::size_t i = 0; i < guard; ++i)
      if (std::memcmp(&v[i], &sentinel, sizeof(T)) != 0 || std::memcmp(&v[v.size() - 1 - i], &sentinel, sizeof(T)) != 0)
        return false;
    return true;
  }
};

// The first i in [0, n) with !ok(i), or n.
template <class F>
std::size_t first_bad(std::size_t n, F&& ok) {
  for (std::size_t i = 0; i < n; ++i)
    if (!ok(i)) return i;
  return n;
}

// Past this many ranks (more processes than CI's 2 cores by far) the suites run their
// largest counts on fewer configurations: each costs seconds a configuration there.
constexpr std::size_t large_count_ranks = 4;

// The counts each collective is checked at on P ranks and the topology named
// `label` (for_each_topology's): 0, 1, 2, around P, primes, and 65537 (512 KiB of
// int64: past recursive_doubling_max_bytes, and two pipelined segments of
// min_segment_bytes). Past large_count_ranks 65537 runs on the compile-time topologies
// (labels "ring<...": flat, both 2-D shapes, 3 x 2 and 2 x 2 x 2) and not on the
// runtime ones as well: there the large count costs seconds a topology on an
// oversubscribed machine (most of test_mpi's 13 s on 6 processes of 2 cores),
// and up to that every runtime topology and algorithm mix still runs it.
inline std::vector<std::size_t> counts_for(std::size_t P, const std::string& label) {
  std::vector<std::size_t> c = {0, 1, 2, P - 1, P, P + 1, 7, 31, 257, 1009};
  if (P <= large_count_ranks || label.starts_with("ring<")) c.push_back(65537);
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

inline md::options opts(std::vector<md::algorithm> algos = {}) {
  md::options o;
  o.algorithms = std::move(algos);
  return o;
}

struct rt_case {
  std::string text;
  std::vector<md::algorithm> algos;
  std::string label() const {
    std::string s = text;
    for (auto a : algos) s += std::string(" ") + std::string(md::to_string(a));
    return s;
  }
};

// Runtime topologies that fit P ranks.
inline std::vector<rt_case> runtime_cases(std::size_t P) {
  using A = md::algorithm;
  std::vector<rt_case> c = {
      {"shm:*", {}},
      {"shm:*", {A::ring}},
      {"shm:*", {A::direct}},
      {"ethernet:*", {}},
      {"ethernet:*", {A::halving_doubling}},
      {"ethernet:*", {A::recursive_doubling}},
      {"shm:1 x ethernet:*", {}},
      {"infiniband:* x shm:1", {}},
  };
  if (P % 2 == 0) {
    c.push_back({"shm:2 x infiniband:*", {}});
    c.push_back({"ethernet:* x shm:2", {}});
    c.push_back({"shm:2 x shm:*", {A::ring, A::direct}});
  }
  if (P % 3 == 0) c.push_back({"shm:3 x ethernet:*", {}});
  if (P == 6) {
    c.push_back({"shm:3 x shm:2", {A::direct, A::ring}});
    c.push_back({"shm:2 x shm:3", {A::ring, A::ring}});
    c.push_back({"ethernet:2 x shm:3", {}});
    c.push_back({"shm:2 x infiniband:3", {A::direct, A::halving_doubling}});
    c.push_back({"shm:2 x infiniband:3", {A::direct, A::recursive_doubling}});
  }
  if (P == 8) {
    c.push_back({"shm:2 x ethernet:2 x infiniband:2", {}});
    c.push_back({"shm:4 x ethernet:2", {}});
    c.push_back({"ethernet:2 x shm:4", {A::ring, A::direct}});
    c.push_back({"shm:2 x shm:1 x shm:2 x shm:2", {}});
  }
  return c;
}

// f(comm, label) for every topology that fits the world: compile-time ones first,
// then runtime ones. Every rank calls it identically (binding is collective).
template <class F>
void for_each_topology(F&& f, bool with_static = true) {
  const std::size_t P = world_size();
  if (with_static) {
    {
      auto comm = md::bind(md::ring<md::shm>, test_world());
      f(comm, std::string("ring<shm>"));
    }
    if (P % 2 == 0) {
      auto a = md::bind(md::ring<md::shm, 2> * md::ring<md::infiniband>, test_world());
      f(a, std::string("ring<shm,2> * ring<infiniband>"));
      auto b = md::bind(md::ring<md::shm> * md::ring<md::shm, 2>, test_world());
      f(b, std::string("ring<shm> * ring<shm,2>"));
    }
    if (P == 6) {
      auto comm = md::bind(md::ring<md::shm, 3> * md::ring<md::shm, 2>, test_world());
      f(comm, std::string("ring<shm,3> * ring<shm,2>"));
    }
    if (P == 8) {
      auto comm = md::bind(md::ring<md::shm, 2> * md::ring<md::shm, 2> * md::ring<md::ethernet, 2>, test_world());
      f(comm, std::string("ring<shm,2> * ring<shm,2> * ring<ethernet,2>"));
    }
  }
  for (auto& c : runtime_cases(P)) {
    auto comm = md::bind(md::parse_topology(c.text), test_world(), opts(c.algos));
    f(comm, c.label());
  }
}

// x_r[i]: distinct, signed, rank dependent.
inline std::int64_t val(std::size_t r, std::size_t i) { return std::int64_t(r) * 1000003 + std::int64_t(i) * 7 - 5; }
// sum over r < P of val(r, i)
inline std::int64_t val_sum(std::size_t P, std::size_t i) {
  return 1000003 * std::int64_t(P * (P - 1) / 2) + std::int64_t(P) * (std::int64_t(i) * 7 - 5);
}

// all_reduce of val(R, i) into a guarded buffer: exact sums, guards intact, the
// send buffer untouched. Returns the send buffer, for callers that go on in place.
template <class Comm>
std::vector<std::int64_t> check_exact_sum(Comm& comm, std::size_t P, std::size_t R, std::size_t n) {
  std::vector<std::int64_t> send(n);
  for (std::size_t i = 0; i < n; ++i) send[i] = val(R, i);
  guarded<std::int64_t> recv(n, -77);
  md::all_reduce(comm, send.data(), recv.data(), n);
  CHECK(first_bad(n, [&](std::size_t i) { return recv[i] == val_sum(P, i); }) == n);
  CHECK(recv.guards_intact());
  CHECK(first_bad(n, [&](std::size_t i) { return send[i] == val(R, i); }) == n);  // sendbuf untouched
  return send;
}

}  // namespace
