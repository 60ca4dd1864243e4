// tests/one_shot_support.hpp: what the one-shot path's tests share
// (tests/test_one_shot.cpp on threads, tests/test_mpi.cpp between processes):
// how many calls a communicator ran one-shot, and random sequences of small calls
// of every collective checked exactly.
#pragma once

#include <mdring/mdring.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace mdring_test {

namespace md = mdring;

std::uint64_t one_shot_calls(auto& comm) {
  return md::detail::workspace_of(md::detail::core_of(comm)).one_shot_calls();
}

// Rank r's element i of call `call` (small integers: every sum is exact).
template <class T>
T input(std::size_t call, std::size_t r, std::size_t i) {
  return T(double((call * 7 + r * 3 + i) % 11) - 5.0);
}

// Runs `calls` random small calls (the same sequence on every rank: kind, count,
// root) and checks each exactly; returns the failures (empty: none).
template <class T>
std::vector<std::string> random_calls(auto& comm, std::size_t calls, std::uint64_t seed, std::size_t max_count) {
  std::vector<std::string> fails;
  const std::size_t P = comm.size(), me = comm.rank();
  std::mt19937_64 rng(seed);
  for (std::size_t c = 0; c < calls; ++c) {
    const int kind = int(rng() % 5);
    const std::size_t n = 1 + rng() % max_count, root = rng() % P;
    const bool in_place = rng() % 2;
    std::vector<T> send(n * P), recv(n * P, T(-99));
    for (std::size_t i = 0; i < n * P; ++i) send[i] = input<T>(c, me, i);
    auto sum = [&](std::size_t i) {
      T s = 0;
      for (std::size_t r = 0; r < P; ++r) s += input<T>(c, r, i);
      return s;
    };
    auto fail = [&](const char* what, std::size_t i, T got, T want) {
      fails.push_back(std::string(what) + " call " + std::to_string(c) + " n=" + std::to_string(n) +
                      " root=" + std::to_string(root) + " rank " + std::to_string(me) + " [" + std::to_string(i) +
                      "]: " + std::to_string(double(got)) + " want " + std::to_string(double(want)));
    };
    switch (kind) {
      case 0:  // all_reduce
        if (in_place) md::all_reduce(comm, send.data(), n, md::sum), recv = send;
        else md::all_reduce(comm, send.data(), recv.data(), n, md::sum);
        for (std::size_t i = 0; i < n; ++i)
          if (recv[i] != sum(i)) fail("all_reduce", i, recv[i], sum(i));
        break;
      case 1:  // broadcast
        md::broadcast(comm, send.data(), n, root);
        for (std::size_t i = 0; i < n; ++i)
          if (send[i] != input<T>(c, root, i)) fail("broadcast", i, send[i], input<T>(c, root, i));
        break;
      case 2:  // reduce
        if (in_place) md::reduce(comm, send.data(), send.data(), n, root, md::sum), recv = send;
        else md::reduce(comm, send.data(), recv.data(), n, root, md::sum);
        if (me == root)
          for (std::size_t i = 0; i < n; ++i)
            if (recv[i] != sum(i)) fail("reduce", i, recv[i], sum(i));
        break;
      case 3:  // all_gather
        md::all_gather(comm, send.data(), recv.data(), n);
        for (std::size_t r = 0; r < P; ++r)
          for (std::size_t i = 0; i < n; ++i)
            if (recv[r * n + i] != input<T>(c, r, i)) fail("all_gather", r * n + i, recv[r * n + i], input<T>(c, r, i));
        break;
      default:  // reduce_scatter
        md::reduce_scatter(comm, send.data(), recv.data(), n, md::sum);
        for (std::size_t i = 0; i < n; ++i)
          if (recv[i] != sum(me * n + i)) fail("reduce_scatter", i, recv[i], sum(me * n + i));
        break;
    }
    if (fails.size() > 5) break;
  }
  return fails;
}

// Runs body(comm, failures) on a threads communicator of topology `topo` bound with o,
// one thread per rank; returns every rank's failures (and what a rank threw), each
// prefixed with the topology.
template <class Body>
std::vector<std::string> on_threads(const std::string& topo, const md::options& o, Body&& body) {
  const md::runtime_topology t = md::parse_topology(topo);
  std::vector<std::string> fails;
  std::mutex m;
  md::threads::run(t.size(), [&](md::threads::endpoint ep) {
    auto comm = md::bind(t, ep, o);
    std::vector<std::string> mine;
    try {
      body(comm, mine);
    } catch (const std::exception& e) {
      mine.push_back(std::string("rank ") + std::to_string(comm.rank()) + ": " + e.what());
    }
    std::lock_guard l(m);
    for (auto& f : mine) fails.push_back(topo + ": " + f);
  });
  return fails;
}

}  // namespace mdring_test
