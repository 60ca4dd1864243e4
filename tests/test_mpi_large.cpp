// test_mpi_large.cpp (2 processes, label "large"): more than 2^31 bytes over MPI.
//
//  1. all_reduce of 2^31 + 11 uint8 in place on ring<shm> (2 ranks): every message
//     is half the buffer, 2^30 + 6 bytes, longer than the default
//     options.max_message_bytes (2^30), so each is sent as one 1 GiB element of a
//     contiguous type plus the rest. About 3 GiB per process.
//  2. all_gather of 2^31 + 11 uint8 per rank, in place: each rank sends its whole
//     block in one message of 2^31 + 11 bytes > INT_MAX, which must be split
//     (MPI counts are int). About 4 GiB per process, with the default
//     max_message_bytes and with max_message_bytes = 2^31 - 1 (the largest value
//     options accepts).
// Rank r's element i is (7 i + r) mod 256; every element is checked exactly, by
// memcmp against a tile of the pattern (256-element period), at memory speed.
#include <doctest/doctest.h>
#include <mdring/mpi.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

namespace md = mdring;

namespace {

std::size_t world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return std::size_t(r);
}
std::size_t world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return std::size_t(s);
}
bool all_ranks(bool ok) {
  int v = ok ? 1 : 0, m = 0;
  MPI_Allreduce(&v, &m, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return m == 1;
}
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

constexpr std::size_t tile_bytes = std::size_t(1) << 20;  // a multiple of 256

// tile[i] = (a i + b) mod 256
std::vector<std::uint8_t> pattern(unsigned a, unsigned b) {
  std::vector<std::uint8_t> t(tile_bytes);
  for (std::size_t i = 0; i < tile_bytes; ++i) t[i] = static_cast<std::uint8_t>((a * (i & 0xff) + b) & 0xff);
  return t;
}
void fill(std::uint8_t* x, std::size_t n, const std::vector<std::uint8_t>& tile) {
  for (std::size_t off = 0; off < n; off += tile_bytes)
    std::memcpy(x + off, tile.data(), std::min(tile_bytes, n - off));
}
// The first index that differs from the pattern, or n.
std::size_t first_mismatch(const std::uint8_t* x, std::size_t n, const std::vector<std::uint8_t>& tile) {
  for (std::size_t off = 0; off < n; off += tile_bytes) {
    const std::size_t len = std::min(tile_bytes, n - off);
    if (std::memcmp(x + off, tile.data(), len) != 0)
      for (std::size_t i = 0; i < len; ++i)
        if (x[off + i] != tile[i]) return off + i;
  }
  return n;
}

std::string describe(const std::exception_ptr& p) {
  if (!p) return "no exception";
  try {
    std::rethrow_exception(p);
  } catch (const std::exception& e) {
    return std::string(typeid(e).name()) + ": " + e.what();
  } catch (...) {}
  return "not a std::exception";
}

constexpr std::size_t big = (std::size_t(1) << 31) + 11;

}  // namespace

TEST_CASE("all_reduce of 2^31 + 11 uint8 over MPI, in place, exact") {
  const std::size_t P = world_size(), R = world_rank();
  std::exception_ptr err;
  std::size_t bad = big;
  double fill_s = 0, reduce_s = 0, check_s = 0;
  {
    auto comm = md::bind(md::ring<md::shm>, MPI_COMM_WORLD);
    std::unique_ptr<std::uint8_t[]> x(new std::uint8_t[big]);
    auto t0 = std::chrono::steady_clock::now();
    fill(x.get(), big, pattern(7, unsigned(R)));
    fill_s = since(t0);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = std::chrono::steady_clock::now();
    try {
      md::all_reduce(comm, x.get(), big);
    } catch (...) {
      err = std::current_exception();
    }
    reduce_s = since(t0);
    t0 = std::chrono::steady_clock::now();
    // sum over r < P of (7 i + r) = 7 P i + P (P - 1) / 2 (mod 256)
    if (!err) bad = first_mismatch(x.get(), big, pattern(unsigned(7 * P), unsigned(P * (P - 1) / 2)));
    check_s = since(t0);
  }
  std::printf(
      "test_mpi_large: rank %zu of %zu: all_reduce of %zu uint8: fill %.2f s, all_reduce %.2f s, check %.2f s\n", R, P,
      big, fill_s, reduce_s, check_s);
  INFO("rank " << R << ": " << describe(err) << "; first wrong element " << bad);
  CHECK(!err);
  CHECK(bad == big);
  CHECK(all_ranks(!err && bad == big));
}

namespace {
// In-place all_gather of `big` bytes per rank with the given max_message_bytes.
void big_all_gather(std::size_t max_message_bytes) {
  const std::size_t P = world_size(), R = world_rank();
  std::exception_ptr err;
  std::vector<std::size_t> bad(P, big);
  double gather_s = 0, check_s = 0;
  {
    md::options o;
    o.max_message_bytes = max_message_bytes;
    auto comm = md::bind(md::ring<md::shm>, MPI_COMM_WORLD, o);
    std::unique_ptr<std::uint8_t[]> x(new std::uint8_t[big * P]);
    fill(x.get() + R * big, big, pattern(7, unsigned(R)));
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = std::chrono::steady_clock::now();
    try {
      md::all_gather(comm, x.get() + R * big, x.get(), big);
    } catch (...) {
      err = std::current_exception();
    }
    gather_s = since(t0);
    t0 = std::chrono::steady_clock::now();
    if (!err)
      for (std::size_t q = 0; q < P; ++q) bad[q] = first_mismatch(x.get() + q * big, big, pattern(7, unsigned(q)));
    check_s = since(t0);
  }
  std::printf(
      "test_mpi_large: rank %zu: all_gather of %zu uint8 per rank (max_message_bytes %zu): %.2f s, check %.2f s\n", R,
      big, max_message_bytes, gather_s, check_s);
  INFO("rank " << R << ", max_message_bytes " << max_message_bytes << ": " << describe(err));
  CHECK(!err);
  bool ok = !err;
  for (std::size_t q = 0; q < P; ++q) {
    INFO("block of rank " << q << ": first wrong element " << bad[q]);
    CHECK(bad[q] == big);
    ok = ok && bad[q] == big;
  }
  CHECK(all_ranks(ok));
}
}  // namespace

TEST_CASE("all_gather of 2^31 + 11 uint8 per rank: one message longer than INT_MAX bytes") {
  big_all_gather(std::size_t(1) << 30);  // the default
}

TEST_CASE("all_gather of 2^31 + 11 uint8 per rank with options.max_message_bytes = 2^31 - 1") {
  big_all_gather(std::size_t(INT_MAX));
}
