// tests/gpu/harness.hpp: a minimal test harness for the GPU programs, so that they
// build where doctest is not installed (a lent GPU machine). Host-only.
//
//   GPU_TEST(name) { ... check(cond, "what", ...); ... }
//   int main() { return gpu_test::run_all(argc, argv); }   (see run_all)
//
// A failed check prints its message and the test goes on; an exception ends the
// test and counts as a failure. run_all returns 0 when every test passed, 77 when
// the program was told there is nothing it can run here (skip()).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace gpu_test {

struct test {
  const char* name;
  std::function<void()> body;
};

inline std::vector<test>& registry() {
  static std::vector<test> r;
  return r;
}

struct registrar {
  registrar(const char* name, std::function<void()> body) { registry().push_back({name, std::move(body)}); }
};

inline long& failures() {
  static long f = 0;
  return f;
}
inline long& checks() {
  static long c = 0;
  return c;
}

template <class... A>
std::string cat(const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}

// Prints at most `limit` failures per test, counts them all.
inline long& printed() {
  static long p = 0;
  return p;
}

inline std::mutex& lock() {
  static std::mutex m;
  return m;
}

// Thread-safe: the NCCL test checks from one thread per GPU.
template <class... A>
bool check(bool ok, const A&... what) {
  std::lock_guard<std::mutex> g(lock());
  ++checks();
  if (ok) return true;
  ++failures();
  if (printed()++ < 20) std::printf("  FAILED: %s\n", cat(what...).c_str());
  return false;
}

struct skip_all : std::exception {
  std::string why;
  explicit skip_all(std::string w) : why(std::move(w)) {}
};

// Filter: run the tests whose name contains argv[1] (if given).
inline int run_all(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  long failed_tests = 0, ran = 0;
  for (auto& t : registry()) {
    if (!filter.empty() && std::string(t.name).find(filter) == std::string::npos) continue;
    const long before = failures();
    printed() = 0;
    std::printf("[ RUN  ] %s\n", t.name);
    std::fflush(stdout);
    try {
      t.body();
    } catch (const skip_all& s) {
      std::printf("[ SKIP ] %s\n", s.why.c_str());
      return 77;
    } catch (const std::exception& e) {
      ++failures();
      std::printf("  FAILED: exception: %s\n", e.what());
    }
    ++ran;
    const bool ok = failures() == before;
    failed_tests += !ok;
    std::printf("[ %s ] %s\n", ok ? " OK " : "FAIL", t.name);
    std::fflush(stdout);
  }
  std::printf("%ld tests, %ld failed, %ld checks, %ld failed checks\n", ran, failed_tests, checks(), failures());
  return failed_tests ? 1 : 0;
}

}  // namespace gpu_test

#define GPU_TEST_CAT2(a, b) a##b
#define GPU_TEST_CAT(a, b) GPU_TEST_CAT2(a, b)
#define GPU_TEST(name)                                                                                                \
  static void GPU_TEST_CAT(gpu_test_fn_, __LINE__)();                                                                 \
  static const gpu_test::registrar GPU_TEST_CAT(gpu_test_reg_, __LINE__)(name, GPU_TEST_CAT(gpu_test_fn_, __LINE__)); \
  static void GPU_TEST_CAT(gpu_test_fn_, __LINE__)()
