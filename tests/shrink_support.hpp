// tests/shrink_support.hpp: what test_shrink.cpp (threads) and
// tests/ucx/test_ucx_shrink.cpp check on a shrunk communicator: every collective,
// exact.
#pragma once

#include <mdring/mdring.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shrink_test {

// One step of the random jobs' loop: an all_reduce of count floats, or 3 nonblocking
// ones on consecutive slices of buf (3 x count), waited together.
template <class C>
void one_call(C& c, float* buf, std::size_t count, bool nonblocking) {
  if (!nonblocking) return mdring::all_reduce(c, buf, count);
  std::vector<mdring::request> q;
  for (std::size_t k = 0; k < 3; ++k) q.push_back(mdring::iall_reduce(c, buf + k * count, count));
  mdring::wait_all(q);
}

// Every collective on c, exact (integers), `tag` making each round's data its own.
template <class C>
std::string check_all(C& c, std::int64_t tag) {
  const std::size_t p = c.size(), me = c.rank();
  const std::size_t n = 37;
  std::vector<std::int64_t> x(n), all(n * p);
  for (std::size_t i = 0; i < n; ++i) x[i] = tag + std::int64_t(me * 1000 + i);
  std::int64_t base = 0;
  for (std::size_t r = 0; r < p; ++r) base += tag + std::int64_t(r * 1000);
  auto y = x;
  mdring::all_reduce(c, y.data(), n);
  for (std::size_t i = 0; i < n; ++i)
    if (y[i] != base + std::int64_t(p * i)) return "all_reduce";
  y = x;
  mdring::broadcast(c, y.data(), n, p - 1);
  for (std::size_t i = 0; i < n; ++i)
    if (y[i] != tag + std::int64_t((p - 1) * 1000 + i)) return "broadcast";
  std::vector<std::int64_t> out(n, -1);
  mdring::reduce(c, x.data(), out.data(), n, 0);
  for (std::size_t i = 0; me == 0 && i < n; ++i)
    if (out[i] != base + std::int64_t(p * i)) return "reduce";
  mdring::all_gather(c, x.data(), all.data(), n);
  for (std::size_t r = 0; r < p; ++r)
    for (std::size_t i = 0; i < n; ++i)
      if (all[r * n + i] != tag + std::int64_t(r * 1000 + i)) return "all_gather";
  std::vector<std::int64_t> in(n * p);
  for (std::size_t i = 0; i < n * p; ++i) in[i] = tag + std::int64_t(me + i);
  mdring::reduce_scatter(c, in.data(), out.data(), n);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t want = 0;
    for (std::size_t r = 0; r < p; ++r) want += tag + std::int64_t(r + me * n + i);
    if (out[i] != want) return "reduce_scatter";
  }
  return "";
}

}  // namespace shrink_test
