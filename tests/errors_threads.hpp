// tests/errors_threads.hpp: the harness of the threads transport's error tests
// (test_errors.cpp, test_errors_bind.cpp, test_errors_peers.cpp): a 2 x 2 topology,
// running a body on every rank and recording what each threw, options with local or
// collective checks, and "every rank rejects this call naming that argument".
#pragma once

#include <doctest/doctest.h>
#include <mdring/mdring.hpp>

#include "error_support.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <latch>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <typeinfo>
#include <vector>

namespace md = mdring;
using namespace std::chrono_literals;
using namespace error_test;

namespace {

constexpr auto t22 = md::ring<md::shm, 2> * md::ring<md::shm, 2>;  // 4 ranks, 2 x 2

// p is exactly an E (not a subclass) carrying argument() == argument and every word
// in what(); what() starts with "mdring::".
template <class E>
void expect_arg_error(const std::exception_ptr& p, std::string_view argument, std::vector<std::string> words,
                      const std::string& where) {
  INFO(where);
  INFO("got " << describe(p));
  const E* e = as<E>(p);
  REQUIRE(e != nullptr);
  CHECK(typeid(*e) == typeid(E));
  CHECK(e->argument() == argument);
  CHECK(std::string_view(e->what()).substr(0, 8) == "mdring::");
  for (auto& w : words) {
    INFO("what() should contain \"" << w << "\"");
    CHECK(contains(e->what(), w));
  }
}

// One rank's record: what it threw in the phase under test, what a following call
// threw, and how long the phase under test took.
struct rank_record {
  std::exception_ptr first;
  std::exception_ptr next;
  double seconds = 0;
  std::vector<std::vector<std::size_t>> rings;  // members of this rank's ring per dimension
};

// Runs body(ep, record) on n threads of a fresh world; exceptions escaping body are
// recorded in `first` (so threads::run itself never rethrows).
template <class F>
std::vector<rank_record> on_ranks(std::size_t n, F&& body) {
  std::vector<rank_record> rec(n);
  md::threads::run(n, [&](md::threads::endpoint ep) {
    const auto t0 = steady::now();
    try {
      body(ep, rec[ep.rank]);
    } catch (...) {
      if (!rec[ep.rank].first) rec[ep.rank].first = std::current_exception();
    }
    if (rec[ep.rank].seconds == 0) rec[ep.rank].seconds = seconds_since(t0);
  });
  return rec;
}

inline md::options local_opts(std::chrono::milliseconds timeout = 30s) {
  md::options o;
  o.timeout = timeout;
  o.checks = md::check_level::local;
  return o;
}
inline md::options collective_opts(std::chrono::milliseconds timeout = 30s) {
  md::options o;
  o.timeout = timeout;
  o.checks = md::check_level::collective;
  return o;
}

// Every rank runs `call(comm)` on a fresh 2 x 2 communicator (local checks); all
// of them must throw the same argument error locally, before any message.
template <class Call>
void all_ranks_reject(Call call, std::string_view argument, std::vector<std::string> words, const std::string& where,
                      std::size_t n = 4) {
  auto rec = on_ranks(n, [&](md::threads::endpoint ep, rank_record& r) {
    auto comm = md::bind(md::ring<md::shm, 2> * md::ring<md::shm>, ep, local_opts());
    const auto t0 = steady::now();
    r.first = thrown([&] { call(comm); });
    r.seconds = seconds_since(t0);
    r.next = thrown([&] {
      int x = 1;
      md::all_reduce(comm, &x, 1);
    });
  });
  for (std::size_t i = 0; i < n; ++i) {
    expect_arg_error<md::invalid_argument>(rec[i].first, argument, words, where + ", rank " + std::to_string(i));
    CHECK(rec[i].seconds < 5.0);
    // A bad argument with local checks leaves the communicator unusable.
    INFO(where << ", rank " << i << ", next call: " << describe(rec[i].next));
    CHECK(as<md::communicator_error>(rec[i].next) != nullptr);
  }
}

}  // namespace
