// test_large.cpp (label "large"): more than 2^31 elements through the threads transport.
//
// ring<shm, 2>, uint8_t, count = 2^31 + 11, in place. Rank r holds
// x_r[i] = (7 i + r) mod 256, so the sum is (14 i + 1) mod 256 (uint8 sum wraps).
// Every element is checked exactly. Memory: two 2 GiB buffers plus 1 GiB of
// scratch per rank, about 6 GiB in all.
//
// Both the fill and the check use the pattern's period (256 elements; 2^31 is a
// multiple of it): a 1 MiB tile of the pattern is copied or memcmp'd block by block,
// which runs at memory speed.
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace md = mdring;

namespace {

constexpr std::size_t tile_bytes = std::size_t(1) << 20;  // a multiple of 256

// tile[i] = (a i + b) mod 256 for a tile of tile_bytes elements.
std::vector<std::uint8_t> pattern(unsigned a, unsigned b) {
  std::vector<std::uint8_t> t(tile_bytes);
  for (std::size_t i = 0; i < tile_bytes; ++i) t[i] = static_cast<std::uint8_t>((a * (i & 0xff) + b) & 0xff);
  return t;
}

void fill(std::uint8_t* x, std::size_t n, const std::vector<std::uint8_t>& tile) {
  for (std::size_t off = 0; off < n; off += tile_bytes)
    std::memcpy(x + off, tile.data(), std::min(tile_bytes, n - off));
}

// The index of the first element that differs from the pattern, or n.
std::size_t first_mismatch(const std::uint8_t* x, std::size_t n, const std::vector<std::uint8_t>& tile) {
  for (std::size_t off = 0; off < n; off += tile_bytes) {
    const std::size_t len = std::min(tile_bytes, n - off);
    if (std::memcmp(x + off, tile.data(), len) != 0)
      for (std::size_t i = 0; i < len; ++i)
        if (x[off + i] != tile[i]) return off + i;
  }
  return n;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("all_reduce of 2^31 + 11 uint8 on ring<shm, 2>, in place, exact") {
  constexpr std::size_t count = (std::size_t(1) << 31) + 11;
  const auto expected = pattern(14, 1);
  std::size_t bad[2] = {count, count};
  std::uint8_t got[2] = {0, 0};
  double fill_s[2] = {0, 0}, reduce_s[2] = {0, 0}, check_s[2] = {0, 0};

  md::threads::run(2, [&](md::threads::endpoint ep) {
    const std::size_t r = ep.rank;
    auto comm = md::bind(md::ring<md::shm, 2>, ep);
    std::unique_ptr<std::uint8_t[]> x(new std::uint8_t[count]);  // uninitialized: fill() writes it all

    auto t0 = std::chrono::steady_clock::now();
    fill(x.get(), count, pattern(7, unsigned(r)));
    fill_s[r] = since(t0);

    t0 = std::chrono::steady_clock::now();
    md::all_reduce(comm, x.get(), count, md::sum);
    reduce_s[r] = since(t0);

    t0 = std::chrono::steady_clock::now();
    bad[r] = first_mismatch(x.get(), count, expected);
    if (bad[r] < count) got[r] = x[bad[r]];
    check_s[r] = since(t0);
  });

  for (std::size_t r = 0; r < 2; ++r) {
    std::printf("test_large: rank %zu: fill %.2f s, all_reduce of %zu uint8 %.2f s (%.2f GB/s), check %.2f s\n", r,
                fill_s[r], count, reduce_s[r], double(count) / reduce_s[r] / 1e9, check_s[r]);
    INFO("rank " << r << ": first wrong element " << bad[r] << " holds " << int(got[r]) << ", expected "
                 << int(bad[r] < count ? expected[bad[r] % tile_bytes] : 0));
    CHECK(bad[r] == count);
  }
}
