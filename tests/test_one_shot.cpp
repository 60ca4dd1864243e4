// tests/test_one_shot.cpp: the one-shot path for small calls (plan/one_shot.hpp,
// executor/host/one_shot.hpp) on the threads transport: when it is taken, exact
// results for every collective, root, count up to the cap, type and op, in place,
// mixed with program calls and nonblocking calls in flight, the reproducible
// mode's bits, explain(), and its errors (a mismatched count, a stalled peer, a
// failed one). The MPI and UCX suites (test_mpi.cpp) run it between processes.
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>

#include "one_shot_support.hpp"
#include "reproducible_reference.hpp"
#include "test_support.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace md = mdring;

namespace {

using mdring_test::on_threads;
using mdring_test::one_shot_calls;
using mdring_test::random_calls;

// Waits up to 20 s for cond() (a test's threads waiting for each other without a collective).
template <class Cond>
bool until(Cond&& cond) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!cond())
    if (std::chrono::steady_clock::now() > end) return false;
    else std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return true;
}

}  // namespace

TEST_CASE("one-shot: random sequences of small calls (every collective, root, count, in place) are exact") {
  for (const char* topo : {"shm:2", "shm:3", "shm:2 x infiniband:5", "shm:4 x ethernet:2", "ethernet:6"}) {
    for (auto checks : {md::check_level::local, md::check_level::collective}) {
      md::options o;
      o.checks = checks;
      const auto fails = on_threads(topo, o, [&](auto& comm, std::vector<std::string>& f) {
        const std::uint64_t before = one_shot_calls(comm);
        f = random_calls<float>(comm, 200, 42, 64);
        auto g = random_calls<std::int64_t>(comm, 100, 7, 16);
        f.insert(f.end(), g.begin(), g.end());
        // Every call took the one-shot path (and under collective checks, so did its agreement).
        const std::uint64_t want = checks == md::check_level::collective ? 600 : 300;
        if (one_shot_calls(comm) - before != want)
          f.push_back("one-shot calls " + std::to_string(one_shot_calls(comm) - before) + ", want " +
                      std::to_string(want));
      });
      for (auto& f : fails) FAIL_CHECK(f);
    }
  }
}

TEST_CASE("one-shot: taken where it applies, and only there") {
  const auto fails = on_threads("shm:2 x shm:2", md::options{}, [&](auto& comm, std::vector<std::string>& f) {
    std::vector<float> v(8192, 1.0f);
    auto took = [&](auto call) {
      const std::uint64_t before = one_shot_calls(comm);
      call();
      return one_shot_calls(comm) != before;
    };
    // The default cap: 8 KiB per rank (2048 floats); reduce_scatter publishes its whole sendbuf.
    if (!took([&] { md::all_reduce(comm, v.data(), 2048); })) f.push_back("2048 floats not one-shot");
    if (took([&] { md::all_reduce(comm, v.data(), 2049); })) f.push_back("2049 floats one-shot");
    if (!took([&] { md::reduce_scatter(comm, v.data(), v.data() + 4096, 512); })) f.push_back("rs 4 x 512");
    if (took([&] { md::reduce_scatter(comm, v.data(), v.data() + 4200, 513); })) f.push_back("rs 4 x 513");
    if (took([&] { md::all_reduce(comm, v.data(), 0); })) f.push_back("count 0 one-shot");
    if (!took([&] { md::broadcast(comm, v.data(), 17, 3); })) f.push_back("broadcast 17 not one-shot");
    // explain() says which.
    if (comm.template make_plan<float>(2048).one_shot.empty()) f.push_back("explain: 2048 floats not one-shot");
    if (!comm.template make_plan<float>(2049).one_shot.empty()) f.push_back("explain: 2049 floats one-shot");
    if (comm.template explain<float>(64).find("one-shot: this call runs in one step over node memory") ==
        std::string::npos)
      f.push_back("explain() does not print the one-shot line");
    // runs_one_shot() says the same without a plan (what the interposer asks).
    using md::collective;
    const std::pair<bool, bool> asked[] = {{comm.runs_one_shot(collective::all_reduce, 2048, 4), true},
                                           {comm.runs_one_shot(collective::all_reduce, 2049, 4), false},
                                           {comm.runs_one_shot(collective::all_reduce, 8192, 1), true},
                                           {comm.runs_one_shot(collective::reduce_scatter, 512, 4), true},
                                           {comm.runs_one_shot(collective::reduce_scatter, 513, 4), false},
                                           {comm.runs_one_shot(collective::all_gather, 2048, 4), true},
                                           {comm.runs_one_shot(collective::broadcast, 17, 4), true},
                                           {comm.runs_one_shot(collective::reduce, 0, 4), false}};
    for (std::size_t i = 0; i < std::size(asked); ++i)
      if (asked[i].first != asked[i].second) f.push_back("runs_one_shot case " + std::to_string(i));
  });
  for (auto& f : fails) FAIL_CHECK(f);
  CHECK(fails.empty());

  // A larger cap meets a data buffer: the two 16 KiB staging buffers less the ring of
  // 16 slots of 8 lines, halved: 12288 B (3072 floats).
  md::options big;
  big.tune.one_shot_max_bytes = std::size_t(1) << 20;
  const auto f4 = on_threads("shm:2 x shm:2", big, [&](auto& comm, std::vector<std::string>& f) {
    std::vector<float> v(4100, 1.0f);
    md::all_reduce(comm, v.data(), 3072);
    if (one_shot_calls(comm) != 1) f.push_back("3072 floats not one-shot");
    md::all_reduce(comm, v.data(), 3073);
    if (one_shot_calls(comm) != 1) f.push_back("3073 floats one-shot");
    if (v[0] != 16.0f || v[3072] != 4.0f) f.push_back("wrong result");
    if (comm.template make_plan<float>(3073).one_shot.size()) f.push_back("explain: 3073 floats one-shot");
  });
  for (auto& f : f4) FAIL_CHECK(f);

  // A requested algorithm is run as asked; tune.one_shot_max_bytes = 0 turns it off;
  // no shared memory, no flat channel.
  md::options ring;
  ring.algorithms = {md::algorithm::ring, md::algorithm::automatic};
  md::options off;
  off.tune.one_shot_max_bytes = 0;
  md::options noshm;
  noshm.shared_memory = false;
  md::options small;
  small.tune.one_shot_max_bytes = 64;
  // A 16-bit call with float32 on one dimension only rounds per dimension: its program.
  md::options mixed;
  mixed.dimension_accumulation = {md::accumulation::element, md::accumulation::float32};
  const auto f3 = on_threads("shm:2 x ethernet:2", mixed, [&](auto& comm, std::vector<std::string>& f) {
    std::vector<md::half> h(8, md::half(1.0f));
    std::vector<float> x(8, 1.0f);
    md::all_reduce(comm, h.data(), h.size());
    if (one_shot_calls(comm) != 0) f.push_back("a mixed-accumulation half call ran one-shot");
    md::all_reduce(comm, x.data(), x.size());  // float: one-shot
    if (one_shot_calls(comm) != 1) f.push_back("a float call did not run one-shot");
    if (float(h[7]) != 4.0f || x[7] != 4.0f) f.push_back("wrong result");
  });
  for (auto& f : f3) FAIL_CHECK(f);
  for (const auto& [o, max] : {std::pair{ring, 0}, std::pair{off, 0}, std::pair{noshm, 0}, std::pair{small, 16}}) {
    const auto f2 = on_threads("shm:2 x shm:2", o, [&, max = max](auto& comm, std::vector<std::string>& f) {
      for (std::size_t n = 1; n <= 64; ++n) {
        std::vector<float> v(n, float(comm.rank() + 1));
        md::all_reduce(comm, v.data(), n);
        for (float x : v)
          if (x != 10.0f) f.push_back("n=" + std::to_string(n) + ": " + std::to_string(x) + ", want 10");
      }
      if (one_shot_calls(comm) != std::uint64_t(max))
        f.push_back("one-shot calls " + std::to_string(one_shot_calls(comm)) + ", want " + std::to_string(max));
      if (comm.runs_one_shot(md::collective::all_reduce, 16, 4) != (max > 0))
        f.push_back("runs_one_shot(all_reduce, 16 floats) disagrees with the calls");
      if (comm.runs_one_shot(md::collective::all_reduce, 17, 4))
        f.push_back("runs_one_shot(all_reduce, 17 floats) true");
    });
    for (auto& f : f2) FAIL_CHECK(f);
  }
}

TEST_CASE("one-shot: every type and op, the reproducible mode's bits, identical on every rank") {
  // Rank r's element i: floats whose sums depend on the order of their terms.
  for (bool reproducible : {true, false}) {
    md::options o;
    o.reproducible = reproducible;
    for (const char* text : {"shm:3", "shm:2 x ethernet:3", "shm:2 x shm:2 x infiniband:2"}) {
      const md::runtime_topology t = md::parse_topology(text);
      std::vector<std::vector<float>> got(t.size());
      std::vector<std::vector<md::half>> got_h(t.size());
      const auto fails = on_threads(text, o, [&](auto& comm, std::vector<std::string>& f) {
        const std::size_t n = 257, r = comm.rank();
        std::vector<float> x(n);
        for (std::size_t i = 0; i < n; ++i) x[i] = mdring_test::wide_value(11, r, i, 20);
        md::all_reduce(comm, x.data(), n, md::sum);
        got[r] = x;
        std::vector<md::half> h(n);
        for (std::size_t i = 0; i < n; ++i) h[i] = md::half(mdring_test::wide_value(5, r, i, 4));
        md::all_reduce(comm, h.data(), n, md::avg);
        got_h[r] = h;
        // prod, min, max of int64 and double: exact.
        std::vector<std::int64_t> p(5, std::int64_t(r % 3) + 1), mn(5), mx(5);
        std::vector<double> d(5, double(r) - 1.5);
        for (std::size_t i = 0; i < 5; ++i) mn[i] = mx[i] = std::int64_t(r * 10 + i);
        md::all_reduce(comm, p.data(), 5, md::prod);
        md::all_reduce(comm, mn.data(), 5, md::min);
        md::all_reduce(comm, mx.data(), 5, md::max);
        md::all_reduce(comm, d.data(), 5, md::max);
        std::int64_t want_p = 1;
        for (std::size_t q = 0; q < comm.size(); ++q) want_p *= std::int64_t(q % 3) + 1;
        for (std::size_t i = 0; i < 5; ++i) {
          if (p[i] != want_p) f.push_back("prod " + std::to_string(p[i]));
          if (mn[i] != std::int64_t(i)) f.push_back("min " + std::to_string(mn[i]));
          if (mx[i] != std::int64_t((comm.size() - 1) * 10 + i)) f.push_back("max " + std::to_string(mx[i]));
          if (d[i] != double(comm.size()) - 2.5) f.push_back("max double " + std::to_string(d[i]));
        }
        if (one_shot_calls(comm) != 6) f.push_back("one-shot calls " + std::to_string(one_shot_calls(comm)));
      });
      for (auto& f : fails) FAIL_CHECK(text << ": " << f);
      INFO(text << (reproducible ? " reproducible" : ""));
      for (std::size_t r = 1; r < t.size(); ++r) {
        CHECK(std::memcmp(got[r].data(), got[0].data(), got[0].size() * sizeof(float)) == 0);
        CHECK(std::memcmp(got_h[r].data(), got_h[0].data(), got_h[0].size() * sizeof(md::half)) == 0);
      }
      if (!reproducible) continue;
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < 257; ++i) {
        std::vector<float> col(t.size());
        std::vector<md::half> colh(t.size());
        for (std::size_t r = 0; r < t.size(); ++r) {
          col[r] = mdring_test::wide_value(11, r, i, 20);
          colh[r] = md::half(mdring_test::wide_value(5, r, i, 4));
        }
        const float want = mdring_test::contract_result(col, t.extents(), md::sum);
        const md::half want_h = mdring_test::contract_result(colh, t.extents(), md::avg);
        wrong += std::memcmp(&want, &got[0][i], sizeof want) != 0;
        wrong += std::memcmp(&want_h, &got_h[0][i], sizeof want_h) != 0;
      }
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("one-shot: nonblocking calls in flight, program calls between, in order") {
  const auto fails = on_threads("shm:2 x shm:2", md::options{}, [&](auto& comm, std::vector<std::string>& f) {
    const std::size_t big = 100000, r = comm.rank();
    std::vector<float> a(big, float(r)), s1(8, float(r + 1)), s2(8, float(r + 1));
    md::request q1 = md::iall_reduce(comm, a.data(), big);  // its program
    md::request q2 = md::iall_reduce(comm, s1.data(), 8);   // one-shot, behind it
    float b = r == 2 ? 7.0f : 0.0f;
    md::broadcast(comm, &b, 1, 2);  // blocking, behind both
    md::request q3 = md::ibroadcast(comm, s2.data(), 8, 1);
    q3.wait();
    q1.wait();
    q2.wait();
    if (a[0] != 6.0f || a[big - 1] != 6.0f) f.push_back("big all_reduce " + std::to_string(a[0]));
    if (s1[7] != 10.0f) f.push_back("small iall_reduce " + std::to_string(s1[7]));
    if (b != 7.0f) f.push_back("broadcast " + std::to_string(b));
    if (s2[0] != 2.0f) f.push_back("ibroadcast " + std::to_string(s2[0]));
    if (one_shot_calls(comm) != 3) f.push_back("one-shot calls " + std::to_string(one_shot_calls(comm)));
  });
  for (auto& f : fails) FAIL_CHECK(f);
  CHECK(fails.empty());
}

TEST_CASE("one-shot, streamed: broadcast and reduce above the cap run in steps over node memory, exact") {
  // A cap of 64 B (16 floats: each step in a slot of the ring) and a stream limit of
  // 4 KiB: 17 to 1024 floats are streamed in ceil(n / 16) steps, 1025 run the program.
  using md::collective;
  const auto steps_of = [](auto& comm) {
    return md::detail::workspace_of(md::detail::core_of(comm)).one_shot_stages();
  };
  for (int mode = 0; mode < 4; ++mode) {
    md::options o;
    o.tune.one_shot_max_bytes = 64;
    o.tune.one_shot_stream_max_bytes = 4096;
    o.tune.one_shot_stream_max_trip_ns = SIZE_MAX;  // without measuring (the threads may share cores)
    o.eager_rooted = mode == 1;
    if (mode == 2) o.checks = md::check_level::collective;
    o.reproducible = mode == 3;
    for (const char* topo : {"shm:2", "shm:3", "shm:2 x ethernet:2"}) {
      INFO("mode " << mode << " " << topo);
      const auto fails = on_threads(topo, o, [&](auto& comm, std::vector<std::string>& f) {
        const std::size_t P = comm.size(), r = comm.rank();
        // (under collective checks the agreement's all_reduce carries more than 64 B: its
        // program, not a stage of the flat channel)
        const std::size_t agreement = 0;
        for (std::size_t n : {17u, 32u, 33u, 100u, 1000u, 1024u, 1025u}) {
          const bool streamed = n <= 1024;
          if (comm.runs_one_shot(collective::broadcast, n, 4) != streamed)
            f.push_back("runs_one_shot n=" + std::to_string(n));
          for (std::size_t root = 0; root < P; ++root) {
            // broadcast of floats
            std::vector<float> b(n);
            for (std::size_t i = 0; i < n; ++i) b[i] = r == root ? float(i % 1000) + 0.5f : -1.0f;
            std::uint64_t calls = one_shot_calls(comm), stages = steps_of(comm);
            md::broadcast(comm, b.data(), n, root);
            for (std::size_t i = 0; i < n; ++i)
              if (b[i] != float(i % 1000) + 0.5f) {
                f.push_back("broadcast n=" + std::to_string(n) + " root " + std::to_string(root) + " [" +
                            std::to_string(i) + "] " + std::to_string(b[i]));
                break;
              }
            const std::uint64_t want_steps = streamed ? (n + 15) / 16 : 0;
            if (one_shot_calls(comm) - calls != (streamed ? 1 + agreement : agreement) ||
                steps_of(comm) - stages != want_steps + agreement)
              f.push_back("broadcast n=" + std::to_string(n) + ": one-shot calls " +
                          std::to_string(one_shot_calls(comm) - calls) + ", stages " +
                          std::to_string(steps_of(comm) - stages) + ", want " + std::to_string(want_steps) + " steps");
            // reduce of int64 (sum, prod, min) and double max, out of place and in place
            std::vector<std::int64_t> x(n), y(n, -7), p(n), mn(n);
            for (std::size_t i = 0; i < n; ++i) {
              x[i] = std::int64_t(i * 3 + r);
              p[i] = std::int64_t((i + r) % 3) + 1;
              mn[i] = std::int64_t(i) - std::int64_t(r);
            }
            md::reduce(comm, x.data(), y.data(), n, root, md::sum);
            md::reduce(comm, p.data(), p.data(), n, root, md::prod);
            md::reduce(comm, mn.data(), mn.data(), n, root, md::min);
            std::vector<double> d(n);
            for (std::size_t i = 0; i < n; ++i) d[i] = double(i) * 0.25 + double(r);
            md::reduce(comm, d.data(), d.data(), n, root, md::max);
            if (r != root) continue;
            for (std::size_t i = 0; i < n; ++i) {
              std::int64_t want_p = 1;
              for (std::size_t q = 0; q < P; ++q) want_p *= std::int64_t((i + q) % 3) + 1;
              const std::int64_t want_sum = std::int64_t(P * i * 3 + P * (P - 1) / 2);
              if (y[i] != want_sum || p[i] != want_p || mn[i] != std::int64_t(i) - std::int64_t(P - 1) ||
                  d[i] != double(i) * 0.25 + double(P - 1)) {
                f.push_back("reduce n=" + std::to_string(n) + " root " + std::to_string(root) + " [" +
                            std::to_string(i) + "]: " + std::to_string(y[i]) + " " + std::to_string(p[i]) + " " +
                            std::to_string(mn[i]) + " " + std::to_string(d[i]));
                break;
              }
            }
          }
        }
      });
      for (auto& f : fails) FAIL_CHECK(f);
      CHECK(fails.empty());
    }
  }
}

TEST_CASE("one-shot, streamed: the default limits, explain(), in flight with other calls, errors") {
  using namespace std::chrono_literals;
  using md::collective;
  md::options streaming;  // streamed wherever the path runs, without measuring the ranks' distance
  streaming.tune.one_shot_stream_max_trip_ns = SIZE_MAX;
  CHECK(streaming.tune.one_shot_stream_max_bytes == 64 << 10);
  SUBCASE("by default, on threads: a broadcast or reduce above the cap runs its program, and explain() says why") {
    // (ranks of one process measure nothing at bind: processes, test_mpi_options.cpp).
    // 4 threads on fewer cores: the programs; on more, the first calls time both ways
    // (the next test case), the first one by the program.
    const bool crowded = std::thread::hardware_concurrency() < 4;
    const auto fails = on_threads("shm:2 x shm:2", md::options{}, [&](auto& comm, std::vector<std::string>& f) {
      if (comm.distance().measured()) f.push_back("threads measured a distance");
      if (comm.runs_one_shot(collective::broadcast, 2049, 4)) f.push_back("8196 B broadcast one-shot");
      if (comm.runs_one_shot(collective::reduce, 1025, 8)) f.push_back("8200 B reduce one-shot");
      if (!comm.runs_one_shot(collective::broadcast, 2048, 4)) f.push_back("8 KiB broadcast not one-shot");
      if (comm.get_options().tune.one_shot_stream_max_bytes != 0 ||
          comm.bind_options().tune.one_shot_stream_max_bytes != 64 << 10)
        f.push_back("get_options / bind_options: " + std::to_string(comm.get_options().tune.one_shot_stream_max_bytes) +
                    " / " + std::to_string(comm.bind_options().tune.one_shot_stream_max_bytes));
      const std::string e = comm.template explain<float>(16384, collective::broadcast);
      if (e.find("one-shot") != std::string::npos) f.push_back("explain(16384 floats, broadcast) says one-shot");
      if (e.find(crowded ? "not streamed over node memory: the node's 4 ranks outnumber its cores, where each step "
                           "would wait for a descheduled peer (tune.one_shot_stream_max_trip_ns = 100)"
                         : "streamed or not by timing: the first 8 broadcasts of 32769 to 65536 B alternate") ==
          std::string::npos)
        f.push_back("explain(16384 floats, broadcast) does not say why it is not streamed:\n" + e);
      if (comm.template explain<float>(16385, collective::broadcast).find("not streamed") != std::string::npos)
        f.push_back("explain(16385 floats, broadcast), above the limit, speaks of streaming");
      if (comm.template explain<float>(2048, collective::broadcast).find("not streamed") != std::string::npos)
        f.push_back("explain(2048 floats, broadcast), one-shot, speaks of streaming");
      if (comm.template explain<float>(16384, collective::all_reduce).find("not streamed") != std::string::npos)
        f.push_back("explain(16384 floats, all_reduce) speaks of streaming");
      // The programs' results.
      const std::size_t r = comm.rank();
      std::vector<float> v(16384, float(r + 1)), out(16384, 0.0f);
      const std::uint64_t before = one_shot_calls(comm);
      md::reduce(comm, v.data(), out.data(), v.size(), 3);
      if (one_shot_calls(comm) != before) f.push_back("the 64 KiB reduce was one-shot");
      if (r == 3 && (out[0] != 10.0f || out[16383] != 10.0f)) f.push_back("64 KiB reduce");
    });
    for (auto& f : fails) FAIL_CHECK(f);
    CHECK(fails.empty());
  }
  SUBCASE("asked for, 64 KiB streamed in steps of 8 KiB; above it the program; all_reduce never") {
    const auto fails = on_threads("shm:2 x shm:2", streaming, [&](auto& comm, std::vector<std::string>& f) {
      const std::pair<bool, bool> asked[] = {{comm.runs_one_shot(collective::broadcast, 16384, 4), true},
                                             {comm.runs_one_shot(collective::broadcast, 16385, 4), false},
                                             {comm.runs_one_shot(collective::reduce, 8192, 8), true},
                                             {comm.runs_one_shot(collective::reduce, 8193, 8), false},
                                             {comm.runs_one_shot(collective::all_reduce, 2049, 4), false},
                                             {comm.runs_one_shot(collective::all_gather, 2049, 4), false}};
      for (std::size_t i = 0; i < std::size(asked); ++i)
        if (asked[i].first != asked[i].second) f.push_back("runs_one_shot case " + std::to_string(i));
      const std::string e = comm.template explain<float>(16384, collective::broadcast);
      if (e.find("one-shot: this call runs over node memory in 8 steps of at most 8192 B") == std::string::npos)
        f.push_back("explain(16384 floats, broadcast):\n" + e);
      if (comm.template explain<float>(16385, collective::broadcast).find("one-shot") != std::string::npos)
        f.push_back("explain(16385 floats, broadcast) says one-shot");
      const std::size_t r = comm.rank();
      std::vector<float> v(16384, float(r + 1)), out(16384, 0.0f);
      const std::uint64_t before = one_shot_calls(comm);
      md::reduce(comm, v.data(), out.data(), v.size(), 3);
      if (one_shot_calls(comm) != before + 1) f.push_back("the 64 KiB reduce was not one-shot");
      if (r == 3 && (out[0] != 10.0f || out[16383] != 10.0f || out[8191] != 10.0f)) f.push_back("64 KiB reduce");
    });
    for (auto& f : fails) FAIL_CHECK(f);
    CHECK(fails.empty());
  }
  SUBCASE("nonblocking streamed calls in flight, behind a program and a small call, in order") {
    const auto fails = on_threads("shm:3", streaming, [&](auto& comm, std::vector<std::string>& f) {
      const std::size_t r = comm.rank(), n = 10000;  // 40000 B: 5 steps
      std::vector<float> big(100000, 1.0f), a(n), b(n, float(r)), c(n), s(4, 1.0f);
      for (std::size_t i = 0; i < n; ++i) a[i] = r == 1 ? float(i) : -1.0f;
      md::request q1 = md::iall_reduce(comm, big.data(), big.size());  // its program
      md::request q2 = md::ibroadcast(comm, a.data(), n, 1);           // streamed behind it
      md::request q3 = md::iall_reduce(comm, s.data(), 4);             // one-shot behind that
      md::request q4 = md::ireduce(comm, b.data(), c.data(), n, 0);    // streamed
      q4.wait(), q3.wait(), q2.wait(), q1.wait();
      if (big[99999] != 3.0f) f.push_back("big all_reduce");
      for (std::size_t i = 0; i < n; ++i)
        if (a[i] != float(i)) {
          f.push_back("ibroadcast [" + std::to_string(i) + "] " + std::to_string(a[i]));
          break;
        }
      if (s[3] != 3.0f) f.push_back("small all_reduce");
      if (r == 0 && (c[0] != 3.0f || c[n - 1] != 3.0f)) f.push_back("ireduce " + std::to_string(c[0]));
      if (one_shot_calls(comm) != 3) f.push_back("one-shot calls " + std::to_string(one_shot_calls(comm)));
    });
    for (auto& f : fails) FAIL_CHECK(f);
    CHECK(fails.empty());
  }
  SUBCASE("different counts: every rank throws at the first step, naming the whole counts") {
    md::options o = streaming;
    o.timeout = 2s;
    std::vector<std::string> what(3);
    md::threads::run(3, [&](md::threads::endpoint ep) {
      auto comm = md::bind(md::parse_topology("shm:3"), ep, o);
      std::vector<float> v(12000, 1.0f);
      try {
        md::broadcast(comm, v.data(), ep.rank == 1 ? 12000 : 10000, 0);
      } catch (const md::error& e) {
        what[ep.rank] = e.what();
      }
    });
    for (std::size_t r = 0; r < 3; ++r) {
      INFO("rank " << r << ": " << what[r]);
      CHECK(what[r].find("different counts, types or roots") != std::string::npos);
      // (a rank may stop first because a peer that found the mismatch broke: its text is quoted)
      CHECK(what[r].find("works on 12000") != std::string::npos);
      CHECK(what[r].find("works on 10000") != std::string::npos);
    }
  }
  SUBCASE("eager_rooted: a root two steps ahead of an absent reader waits at step 2 and names it") {
    md::options o = streaming;
    o.timeout = 300ms;
    o.eager_rooted = true;
    std::string what;
    std::size_t peer = 99, step = 99;
    std::latch done(2);
    md::threads::run(2, [&](md::threads::endpoint ep) {
      auto comm = md::bind(md::parse_topology("shm:2"), ep, o);
      if (ep.rank == 0) {
        std::vector<float> v(16384, 2.0f);  // 8 steps of 8 KiB, in the two data buffers
        try {
          md::broadcast(comm, v.data(), v.size(), 0);
        } catch (const md::timeout_error& e) {
          what = e.what(), peer = e.peer(), step = e.step();
        }
      }
      done.arrive_and_wait();
    });
    INFO(what);
    CHECK(peer == 1);
    CHECK(step == 2);
    CHECK(what.find("broadcast step 2, waiting for rank 1 to read the data of an earlier call of rank 0") !=
          std::string::npos);
  }
}

TEST_CASE(
    "one-shot, streamed: the knobs on threads (SIZE_MAX streams, 0 never; MDRING_STREAM=1, 0), and ranks that differ "
    "in them") {
  // How bind measures the distance between processes: test_mpi_options.cpp and
  // test_transport.cpp ("node distance"); ranks of one process measure nothing.
  using md::collective;
  struct seen {
    std::size_t stream = 9, asked = 9;
    bool runs = false, measured = true, exact = false;
    std::string explain;
    std::uint64_t one_shot = 0;
  };
  const auto bind_and_call = [](const md::options& o) {
    std::vector<seen> out(2);
    md::threads::run(2, [&](md::threads::endpoint ep) {
      auto comm = md::bind(md::parse_topology("shm:2"), ep, o);
      seen& s = out[ep.rank];
      s.measured = comm.distance().measured();
      s.stream = comm.get_options().tune.one_shot_stream_max_bytes;
      s.asked = comm.bind_options().tune.one_shot_stream_max_bytes;
      s.runs = comm.runs_one_shot(collective::broadcast, 16384, 4);
      s.explain = comm.template explain<float>(16384, collective::reduce, md::sum, 1);
      std::vector<float> b(16384, ep.rank == 1 ? 2.5f : 0.0f), x(16384, float(ep.rank + 1)), y(16384, 0.0f);
      const std::uint64_t before = one_shot_calls(comm);
      md::broadcast(comm, b.data(), b.size(), 1);
      md::reduce(comm, x.data(), y.data(), x.size(), 1);
      s.one_shot = one_shot_calls(comm) - before;
      s.exact = b[0] == 2.5f && b[16383] == 2.5f && (ep.rank != 1 || (y[0] == 3.0f && y[16383] == 3.0f));
    });
    return out;
  };
  for (int m = 0; m < 5; ++m) {
    // 0: the default (not measured: the first calls time both ways, the first ones by the
    // programs); 1: SIZE_MAX (streamed); 2: 0 (never);
    // 3 and 4: 1 and 2 set by MDRING_STREAM=1 and 0 (options' defaults, read when built)
    if (m >= 3) ::setenv("MDRING_STREAM", m == 3 ? "1" : "0", 1);
    md::options o;
    ::unsetenv("MDRING_STREAM");
    if (m == 1) o.tune.one_shot_stream_max_trip_ns = SIZE_MAX;
    if (m == 2) o.tune.one_shot_stream_max_bytes = 0;
    const int mode = m == 3 ? 1 : m == 4 ? 2 : m;
    const auto s = bind_and_call(o);
    for (std::size_t r = 0; r < 2; ++r) {
      INFO("mode " << m << " rank " << r << ": " << s[r].explain);
      CHECK_FALSE(s[r].measured);
      CHECK(s[r].runs == (mode == 1));
      CHECK(s[r].one_shot == (mode == 1 ? 2u : 0u));
      CHECK(s[r].exact);
      CHECK(s[r].stream == (mode == 1 ? 65536u : 0u));
      CHECK(s[r].asked == (mode == 2 ? 0u : 65536u));
      CHECK((s[r].explain.find("one-shot: this call runs over node memory in 8 steps of at most 8192 B") !=
             std::string::npos) == (mode == 1));
      // (mode 0: two threads time both ways on their first calls, the first by the program)
      if (std::thread::hardware_concurrency() >= 2) {
        CHECK((s[r].explain.find("streamed or not by timing: the first 8 reduces of 32769 to 65536 B") !=
               std::string::npos) == (mode == 0));
        CHECK(s[r].explain.find("not streamed over node memory") == std::string::npos);
      }
    }
  }
  {  // Ranks that set different limits: the bind fails, naming the knob (threads: the
     // rank that binds second finds the difference; the first binds)
    std::vector<std::string> what(2);
    md::threads::run(2, [&](md::threads::endpoint ep) {
      md::options o;
      o.tune.one_shot_stream_max_trip_ns = ep.rank == 0 ? 100 : SIZE_MAX;
      try {
        auto comm = md::bind(md::parse_topology("shm:2"), ep, o);
      } catch (const md::error& e) {
        what[ep.rank] = e.what();
      }
    });
    INFO("rank 0: " << what[0] << "\nrank 1: " << what[1]);
    CHECK((what[0] + what[1]).find("one-shot stream trip 100") != std::string::npos);
  }
}

TEST_CASE("one-shot, eager_rooted: a broadcast's root and a reduce's leaves return once their data is in node memory") {
  // Rooted calls with options::eager_rooted: a rank that only gives data does not wait
  // for the others; it waits only before writing a slot or buffer that a rank has not
  // read yet (a ring of slots for data of at most 448 bytes, two buffers above that).
  using namespace std::chrono_literals;
  const std::size_t ring = md::detail::one_shot_layout(md::tuning{}.shared_staging_bytes).ring;
  CHECK(ring == 16);
  md::options o;
  o.timeout = 5s;
  o.eager_rooted = true;
  SUBCASE("the root runs ring - 1 small broadcasts ahead, then one of 512 B, before any other rank calls") {
    std::atomic<int> root_done{0};
    const auto fails = on_threads("shm:4", o, [&](auto& comm, std::vector<std::string>& f) {
      const std::size_t r = comm.rank();
      if (r != 0 && !until([&] { return root_done.load() != 0; })) f.push_back("the root did not get ahead");
      for (std::size_t i = 0; i + 1 < ring; ++i) {
        float x = r == 0 ? float(i + 1) : -1.0f;
        md::broadcast(comm, &x, 1, 0);
        if (x != float(i + 1)) f.push_back("broadcast " + std::to_string(i) + ": " + std::to_string(x));
      }
      std::vector<double> big(64, r == 0 ? 3.5 : 0.0);  // 512 B: a data buffer, not written before
      md::broadcast(comm, big.data(), big.size(), 0);
      if (big[63] != 3.5) f.push_back("512-byte broadcast: " + std::to_string(big[63]));
      if (r == 0) root_done = 1;
    });
    for (auto& f : fails) FAIL_CHECK(f);
    CHECK(fails.empty());
  }
  SUBCASE("the leaves run reduces ahead of the root") {
    std::atomic<int> leaves_done{0};
    const auto fails = on_threads("shm:3", o, [&](auto& comm, std::vector<std::string>& f) {
      const std::size_t r = comm.rank();
      if (r == 2 && !until([&] { return leaves_done.load() == 2; })) f.push_back("the leaves did not get ahead");
      for (std::size_t i = 0; i + 1 < ring; ++i) {
        const std::int64_t x = std::int64_t(10 * i + r);
        std::int64_t y = -1;
        md::reduce(comm, &x, &y, 1, 2);
        if (r == 2 && y != std::int64_t(30 * i + 3))
          f.push_back("reduce " + std::to_string(i) + ": " + std::to_string(y));
      }
      if (r != 2) ++leaves_done;
    });
    for (auto& f : fails) FAIL_CHECK(f);
    CHECK(fails.empty());
  }
  SUBCASE("a root a ring of calls ahead waits, and its deadline names the rank that has not read") {
    o.timeout = 300ms;
    std::string what;
    std::size_t calls = 0;
    std::latch done(2);
    md::threads::run(2, [&](md::threads::endpoint ep) {
      auto comm = md::bind(md::parse_topology("shm:2"), ep, o);
      if (ep.rank == 0) {
        try {
          for (float x = 1; calls < 2 * ring; ++calls) md::broadcast(comm, &x, 1, 0);
        } catch (const md::timeout_error& e) {
          what = e.what();
          CHECK(e.peer() == 1);
        }
      }
      done.arrive_and_wait();
    });
    CHECK(calls == ring);  // each line written once; the next call would overwrite one that rank 1 has not read
    INFO(what);
    CHECK(what.find("broadcast step 0, waiting for rank 1 to read the data of an earlier call of rank 0") !=
          std::string::npos);
  }
}

TEST_CASE("one-shot: rooted calls in a long random loop with slow readers stay exact") {
  // Every size class (data in the line, in the slot, in a buffer), roots and ops mixed with
  // all_reduce; some ranks pause at random, so givers run ahead as far as the
  // lines and buffers allow.
  // The default, eager_rooted, eager_rooted under collective checks, and eager_rooted
  // with a small staging (a ring of 8 slots of 2 lines, data buffers of 2496 B).
  const md::detail::one_shot_layout small(3008);  // 3000 rounded up to whole lines, as the transports do
  CHECK(small.ring == 8);
  CHECK(small.slot_lines == 2);
  CHECK(small.data == 2496);
  // Modes 4 to 6 stream the larger rooted calls (plan/one_shot.hpp): eager_rooted in
  // steps of 1 KiB through the data buffers of that small staging, eager_rooted and
  // the default in steps of 256 B through the ring's slots.
  for (int mode = 0; mode < 7; ++mode) {
    INFO("mode " << mode);
    md::options o;
    o.eager_rooted = mode > 0 && mode < 6;
    if (mode == 2) o.checks = md::check_level::collective;
    if (mode == 3 || mode == 4) o.tune.shared_staging_bytes = 3000;
    if (mode == 4) o.tune.one_shot_max_bytes = 1024;
    if (mode >= 5) o.tune.one_shot_max_bytes = 256;
    if (mode >= 4) o.tune.one_shot_stream_max_trip_ns = SIZE_MAX;
    if (mode < 4) o.tune.one_shot_stream_max_bytes = 0;
    const std::size_t largest = mode >= 4 ? 1000 : 200;
    const auto fails = on_threads("shm:4", o, [&](auto& comm, std::vector<std::string>& f) {
      const std::size_t r = comm.rank(), P = comm.size();
      std::mt19937_64 pause(r + 100), rng(5);
      std::uint64_t want_one_shot = 0;
      for (std::size_t c = 0; c < 3000 && f.size() < 5; ++c) {
        if (pause() % 64 == 0) std::this_thread::sleep_for(std::chrono::microseconds(pause() % 200));
        const std::size_t n = rng() % 3 == 0 ? 1 + rng() % largest : 1 + rng() % 12, root = rng() % P;
        const int kind = int(rng() % 5);
        want_one_shot += kind <= 3 || n * 4 <= o.tune.one_shot_max_bytes;
        std::vector<std::int32_t> v(n), out(n, -1);
        for (std::size_t i = 0; i < n; ++i) v[i] = std::int32_t(c * 13 + r * 5 + i);
        auto want_sum = [&](std::size_t i) {
          std::int32_t s = 0;
          for (std::size_t q = 0; q < P; ++q) s += std::int32_t(c * 13 + q * 5 + i);
          return s;
        };
        if (kind <= 1) {
          md::broadcast(comm, v.data(), n, root);
          for (std::size_t i = 0; i < n; ++i)
            if (v[i] != std::int32_t(c * 13 + root * 5 + i)) f.push_back("broadcast " + std::to_string(c));
        } else if (kind <= 3) {
          md::reduce(comm, v.data(), out.data(), n, root);
          if (r == root)
            for (std::size_t i = 0; i < n; ++i)
              if (out[i] != want_sum(i)) f.push_back("reduce " + std::to_string(c));
        } else {
          md::all_reduce(comm, v.data(), n);
          for (std::size_t i = 0; i < n; ++i)
            if (v[i] != want_sum(i)) f.push_back("all_reduce " + std::to_string(c));
        }
      }
      if (one_shot_calls(comm) < want_one_shot)
        f.push_back("one-shot calls " + std::to_string(one_shot_calls(comm)) + ", want " +
                    std::to_string(want_one_shot) + " at least");
    });
    for (auto& f : fails) FAIL_CHECK(f);
    CHECK(fails.empty());
  }
}

TEST_CASE("one-shot: errors name the rank and leave no rank waiting") {
  using namespace std::chrono_literals;
  md::options o;
  o.timeout = 300ms;
  o.checks = md::check_level::local;
  const md::runtime_topology t = md::parse_topology("shm:2 x shm:2");
  SUBCASE("different counts: every rank throws, naming the counts") {
    std::vector<std::string> what(4);
    md::threads::run(4, [&](md::threads::endpoint ep) {
      auto comm = md::bind(t, ep, o);
      std::vector<float> v(8, 1.0f);
      try {
        md::all_reduce(comm, v.data(), ep.rank == 1 ? 5 : 4);
      } catch (const md::error& e) {
        what[ep.rank] = e.what();
      }
    });
    for (std::size_t r = 0; r < 4; ++r) {
      INFO("rank " << r << ": " << what[r]);
      CHECK(what[r].find("different counts, types or roots") != std::string::npos);
    }
  }
  SUBCASE("an absent rank: timeout_error naming it, or remote_error, on every other rank") {
    // By default in the call itself; with eager_rooted the broadcast returns on the
    // ranks that have what they read (the root reads nothing, the others its line),
    // and they learn it at their next call.
    for (bool eager : {false, true}) {
      o.eager_rooted = eager;
      std::vector<std::string> what(4);
      std::vector<std::size_t> peer(4, 99);
      std::vector<int> returned(4, 0);
      std::latch done(4);
      md::threads::run(4, [&](md::threads::endpoint ep) {
        auto comm = md::bind(t, ep, o);
        if (ep.rank != 3) {
          float x = 1;
          try {
            md::broadcast(comm, &x, 1, 0);
            returned[ep.rank] = 1;
            md::all_reduce(comm, &x, 1);
          } catch (const md::timeout_error& e) {
            what[ep.rank] = e.what(), peer[ep.rank] = e.peer();
            CHECK(e.phase() == (returned[ep.rank] ? "all-reduce" : "broadcast"));
          } catch (const md::remote_error& e) {
            what[ep.rank] = e.what(), peer[ep.rank] = e.failed_rank();
          }
        }
        done.arrive_and_wait();
      });
      const int e = eager;
      CHECK(returned == std::vector<int>{e, e, e, 0});
      for (std::size_t r = 0; r < 3; ++r) {
        INFO("rank " << r << ": " << what[r]);
        CHECK(what[r].find("(one-shot over node memory, all 4 ranks)") != std::string::npos);
        CHECK((peer[r] == 3 || what[r].find("timed out") != std::string::npos));
      }
      std::size_t timed_out = 0;  // the first to time out tells the others, which may stop with remote_error
      for (std::size_t r = 0; r < 3; ++r)
        timed_out += what[r].find("step 0, waiting for rank 3 to arrive at the call with rank " + std::to_string(r)) !=
                     std::string::npos;
      CHECK(timed_out >= 1);
    }
  }
  SUBCASE("a bad argument at a broadcast's root: every other rank gets remote_error, then communicator_error") {
    std::vector<std::string> first(4), next(4);
    md::threads::run(4, [&](md::threads::endpoint ep) {
      auto comm = md::bind(t, ep, o);
      float x = 1;
      try {
        md::broadcast(comm, ep.rank == 2 ? static_cast<float*>(nullptr) : &x, 1, 2);
      } catch (const md::remote_error& e) {
        first[ep.rank] = std::string("remote_error: ") + e.what();
      } catch (const md::invalid_argument& e) {
        first[ep.rank] = std::string("invalid_argument: ") + e.what();
      }
      try {
        md::all_reduce(comm, &x, 1);
      } catch (const md::communicator_error& e) {
        next[ep.rank] = std::string("communicator_error: ") + e.what();
      }
    });
    for (std::size_t r = 0; r < 4; ++r) {
      INFO("rank " << r << ": " << first[r] << " / " << next[r]);
      CHECK(first[r].find(r == 2 ? "invalid_argument" : "remote_error") == 0);
      if (r != 2) CHECK(first[r].find("rank 2") != std::string::npos);
      CHECK(next[r].find("communicator_error") == 0);
    }
  }
}

TEST_CASE("one-shot: the decision's bounds (plan/one_shot.hpp)") {
  md::options o;
  o.tune.one_shot_max_bytes = 32;
  using md::collective;
  // 64 ranks and a 32-byte cap: 8 floats each still fit; reduce_scatter publishes 64 x its block.
  CHECK(md::one_shot_applies({collective::all_reduce, 8, 4, 64, 0}, o, 16320));
  CHECK_FALSE(md::one_shot_applies({collective::all_reduce, 9, 4, 64, 0}, o, 16320));
  CHECK_FALSE(md::one_shot_applies({collective::reduce_scatter, 1, 4, 64, 0}, o, 16320));
  o.tune.one_shot_max_bytes = 256;
  CHECK(md::one_shot_applies({collective::reduce_scatter, 1, 4, 64, 0}, o, 16320));
  CHECK_FALSE(md::one_shot_applies({collective::reduce_scatter, 2, 4, 64, 0}, o, 16320));
  // The staging buffer caps it; no product overflows; nothing for no elements or one rank.
  o.tune.one_shot_max_bytes = SIZE_MAX;
  CHECK(md::one_shot_applies({collective::all_gather, 4080, 4, 2, 0}, o, 16320));
  CHECK_FALSE(md::one_shot_applies({collective::all_gather, 4081, 4, 2, 0}, o, 16320));
  CHECK_FALSE(md::one_shot_applies({collective::all_reduce, SIZE_MAX / 2, 4, 2, 0}, o, SIZE_MAX));
  CHECK_FALSE(md::one_shot_applies({collective::reduce_scatter, SIZE_MAX / 8, 4, 64, 0}, o, SIZE_MAX));
  CHECK_FALSE(md::one_shot_applies({collective::all_reduce, 0, 4, 2, 0}, o, 16320));
  CHECK_FALSE(md::one_shot_applies({collective::all_reduce, 8, 4, 1, 0}, o, 16320));
  // Under options.reproducible, at most 8 written dimensions of more than one rank nest.
  o.reproducible = true;
  const std::vector<std::size_t> nine(9, 2), eight(8, 2);
  CHECK(md::one_shot_applies({collective::all_reduce, 8, 4, 256, 0}, o, 16320, eight));
  CHECK_FALSE(md::one_shot_applies({collective::all_reduce, 8, 4, 512, 0}, o, 16320, nine));
}
