// tests/test_collectives_planning.cpp: planning with measured figures on the
// threads transport: mdring::calibrate's profile (the same on every rank, bind
// plans with it, ranks that disagree fail at bind) and options.planning = measure
// (exact results, one choice on every rank, kept in a wisdom file). The harness:
// collective_suites.hpp.
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>
#include "collective_suites.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <memory_resource>
#include <random>
#include <string>
#include <type_traits>
#include <vector>
TEST_CASE("calibrate: the same profile on every rank; bind plans with it; ranks that disagree fail at bind") {
  const std::string path = "test_collectives_calibrate.profile";
  std::vector<std::string> text(6);
  md::calibration how;
  how.bytes = {8, 4096, 65536, 262144};
  how.trials = 2;
  md::threads::run(6, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("shm:2 x ethernet:3"), ep, opts_with());
    const md::profile p = md::calibrate(comm, how);
    text[ep.rank] = p.to_string();
    if (ep.rank == 0) p.save(path);
    // the communicator still works afterwards
    std::int32_t x = std::int32_t(ep.rank);
    md::all_reduce(comm, &x, 1, md::sum);
    if (x != 15) text[ep.rank] = "all_reduce after calibrate: " + std::to_string(x);
  });
  for (auto& t : text) CHECK(t == text[0]);
  const md::profile p = md::profile::parse(text[0]);
  CHECK(p.topology == "shm:2 x ethernet:3");
  CHECK(p.ranks == 6);
  REQUIRE(p.links.size() == 2);
  CHECK(p.points.size() == 8);    // 4 sizes in each of 2 dimensions
  REQUIRE(p.trains.size() == 8);  // each size is at most how.train_max_bytes: also a train of how.train
  for (std::size_t i = 0; i < 8; ++i) {
    CHECK(p.trains[i].link == p.points[i].link);
    CHECK(p.trains[i].bytes == p.points[i].bytes);
    CHECK(p.trains[i].messages == 4);
    CHECK(p.trains[i].seconds > 0);
  }
  for (auto& l : p.links) {
    INFO(l.name);
    CHECK(l.bandwidth > 0);
    CHECK(l.latency + l.overhead > 0);
    CHECK(l.ports == md::find_link(l.name)->ports);
  }
  // bind with it: the executed links carry the profile's figures (its measured
  // points as their curves: 4 each), on every rank
  md::options o = opts_with();
  o.profile = path;
  std::vector<int> same(6, 0);
  md::threads::run(6, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("shm:2 x ethernet:3"), ep, o);
    const auto& ex = comm.executed_topology();
    same[ep.rank] = ex.dim(0).link == p.with_curve(*p.find("shm")) &&
                    ex.dim(1).link == p.with_curve(*p.find("ethernet")) && ex.dim(1).link.curve.points == 4;
  });
  CHECK(same == std::vector<int>(6, 1));
  // rank 2 without the profile: a rank that binds after one that disagrees gets
  // topology_error naming the profile (threads compare with the first to bind; MPI
  // and UCX compare everywhere at once), the others remote_error at their first
  // call: nobody computes with other figures, nobody hangs
  std::vector<std::string> caught(6);
  try {
    md::threads::run(6, [&](md::threads::endpoint ep) {
      md::options oo = opts_with();
      if (ep.rank != 2) oo.profile = path;
      try {
        auto comm = md::bind(md::parse_topology("shm:2 x ethernet:3"), ep, oo);
        std::int32_t x = 1;
        md::all_reduce(comm, &x, 1, md::sum);
        caught[ep.rank] = "no error";
      } catch (const md::topology_error& e) {
        caught[ep.rank] = std::string(e.what()).find("|profile") != std::string::npos ? "names the profile" : e.what();
      } catch (const md::remote_error&) {
        caught[ep.rank] = "remote_error";
      } catch (const std::exception& e) {
        caught[ep.rank] = std::string("other: ") + e.what();
      }
    });
  } catch (const std::exception&) {}
  std::size_t named = 0;
  for (auto& c : caught) {
    CHECK((c == "names the profile" || c == "remote_error"));
    named += c == "names the profile";
  }
  CHECK(named >= 1);
  // a profile that no rank can read: invalid_argument naming options.profile, everywhere
  std::remove(path.c_str());
  std::vector<std::string> missing(3);
  try {
    md::threads::run(3, [&](md::threads::endpoint ep) {
      try {
        auto comm = md::bind(md::parse_topology("ethernet:3"), ep, o);
        missing[ep.rank] = "bound";
      } catch (const md::invalid_argument& e) {
        missing[ep.rank] = e.argument();
      }
    });
  } catch (const std::exception&) {}
  for (auto& m : missing) CHECK(m == "options.profile");
  // bad arguments
  md::threads::run(2, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("ethernet:2"), ep, opts_with());
    md::calibration bad;
    bad.bytes = {8, 8, 64};
    try {
      md::calibrate(comm, bad);
      text[ep.rank] = "accepted";
    } catch (const md::invalid_argument& e) {
      text[ep.rank] = e.argument();
    }
  });
  CHECK(text[0] == "how.bytes");
  CHECK(text[1] == "how.bytes");
  // more sizes than a curve holds; a "train" of one message
  std::vector<std::string> more(2), one(2);
  md::threads::run(2, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("ethernet:2"), ep, opts_with());
    auto argument_of = [&](const md::calibration& c) -> std::string {
      try {
        md::calibrate(comm, c);
        return "accepted";
      } catch (const md::invalid_argument& e) {
        return e.argument();
      }
    };
    md::calibration nine;
    nine.bytes = {8, 16, 32, 64, 128, 256, 512, 1024, 2048};
    more[ep.rank] = argument_of(nine);
    md::calibration single;
    single.bytes = {8, 64, 512};
    single.train = 1;
    one[ep.rank] = argument_of(single);
  });
  CHECK(more == std::vector<std::string>(2, "how.bytes"));
  CHECK(one == std::vector<std::string>(2, "how.train"));
}

// Measured planning with a wisdom file at `path`, which is removed first.
md::options measure_opts(const std::string& path) {
  std::remove(path.c_str());
  md::options o = opts_with();
  o.planning = md::planning::measure;
  o.wisdom = path;
  o.tune.one_shot_max_bytes = 0;  // measured planning times programs; small calls would run one-shot
  return o;
}

TEST_CASE("planning = measure: exact results, one choice on every rank, kept in a wisdom file") {
  // The first all_reduce of each size class times the candidates; explain() then
  // names the measured plan, the same on every rank. A second bind with the same
  // wisdom file starts from those plans (explain says so before any call).
  const std::string path = "test_collectives_measure.wisdom";
  const md::options o = measure_opts(path);
  const auto topo = md::parse_topology("shm:2 x ethernet:5");
  in_world("measure shm:2 x ethernet:5", 10, topo, o, [&](auto& c, rank_ctx& cx) {
    const auto isum = bspec<std::int32_t>(md::sum, opk::sum);
    const auto davg = bspec<double>(md::avg, opk::avg);
    for (std::size_t n : {std::size_t(1), std::size_t(97), std::size_t(4099), std::size_t(70001)}) {
      do_all_reduce<std::int32_t>(c, cx, isum, n, false);
      do_all_reduce<std::int32_t>(c, cx, isum, n, true);  // the same class: measured already
      do_all_reduce<double>(c, cx, davg, n, false);
      const std::string plan = c.template explain<std::int32_t>(n);
      if (plan.find("plan: measured (options.planning = measure): ") == std::string::npos)
        cx.fail("explain does not name the measured plan:\n" + plan);
    }
    do_reduce_scatter<std::int32_t>(c, cx, isum, 13, false);  // the other collectives are unchanged
  });
  const md::wisdom w = md::wisdom::load(path);
  CHECK(w.all_reduce.size() == 4 * 2);  // 4 classes of int32 and of double; agree() adds none (local checks)
  for (auto& [k, m] : w.all_reduce) {
    CHECK(m.candidates >= 2);  // the estimate, ethernet flipped between ring and halving-doubling
    CHECK(m.algos.size() == 2);
    CHECK(m.algos[0] == DIRECT);
  }
  std::vector<std::string> plans(10);
  md::threads::run(10, [&](md::threads::endpoint ep) {
    auto comm = md::bind(topo, ep, o);
    plans[ep.rank] = comm.explain<std::int32_t>(4099);
  });
  for (auto& p : plans) {  // the same measured plan on every rank (explain's last line)
    REQUIRE(p.find("\nplan: measured") != std::string::npos);
    CHECK(p.substr(p.find("\nplan: ")) == plans[0].substr(plans[0].find("\nplan: ")));
  }
  // a rank that estimates while the others measure: topology_error naming it (on
  // the ranks that bind after a disagreeing one), remote_error on the others
  std::vector<std::string> caught(4);
  try {
    md::threads::run(4, [&](md::threads::endpoint ep) {
      md::options oo = opts_with();
      if (ep.rank != 3) oo.planning = md::planning::measure;
      try {
        auto comm = md::bind(md::parse_topology("ethernet:4"), ep, oo);
        std::int32_t x = 1;
        md::all_reduce(comm, &x, 1, md::sum);
        caught[ep.rank] = "no error";
      } catch (const md::topology_error& e) {
        caught[ep.rank] = std::string(e.what()).find("|measure") != std::string::npos ? "names measure" : e.what();
      } catch (const md::remote_error&) {
        caught[ep.rank] = "remote_error";
      }
    });
  } catch (const std::exception&) {}
  std::size_t named = 0;
  for (auto& c : caught) {
    CHECK((c == "names measure" || c == "remote_error"));
    named += c == "names measure";
  }
  CHECK(named >= 1);
  // a wisdom file that cannot be parsed: invalid_argument naming options.wisdom
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("not wisdom\n", f);
    std::fclose(f);
  }
  std::vector<std::string> bad(2);
  try {
    md::threads::run(2, [&](md::threads::endpoint ep) {
      try {
        auto comm = md::bind(md::parse_topology("ethernet:2"), ep, o);
        bad[ep.rank] = "bound";
      } catch (const md::invalid_argument& e) {
        bad[ep.rank] = e.argument();
      }
    });
  } catch (const std::exception&) {}
  for (auto& b : bad) CHECK(b == "options.wisdom");
  std::remove(path.c_str());
}

TEST_CASE("planning = measure: a direct dimension of 3 ranks or more is timed as a ring and halving-doubling too") {
  // shm:4 x ethernet:2, 4099 int32 (16 KiB). Candidates: the estimate (direct in the
  // node, recursive doubling between nodes: below its cap, and then nothing is
  // pipelined), ethernet as halving-doubling, and shm as a ring and as
  // halving-doubling: 4, where before there were 2 (shm:2 gets no such pair: with
  // two ranks direct and a ring are one exchange).
  const std::string path = "test_collectives_measure_direct.wisdom";
  const md::options o = measure_opts(path);
  const auto topo = md::parse_topology("shm:4 x ethernet:2");
  const auto isum = bspec<std::int32_t>(md::sum, opk::sum);
  in_world("measure shm:4 x ethernet:2", 8, topo, o,
           [&](auto& c, rank_ctx& cx) { do_all_reduce<std::int32_t>(c, cx, isum, 4099, false); });
  md::wisdom w = md::wisdom::load(path);
  REQUIRE(w.all_reduce.size() == 1);
  CHECK(w.all_reduce.begin()->second.candidates == 4);
  // Whatever was picked, the shm dimension can run any of them from the wisdom file:
  // exact results, and the plan it runs is the wisdom's.
  for (algorithm a : {RING, HD, DIRECT}) {
    w.all_reduce.begin()->second.algos = {a, RING};
    w.save(path);
    in_world("wisdom shm as " + std::string(md::to_string(a)), 8, topo, o, [&](auto& c, rank_ctx& cx) {
      for (bool in_place : {false, true}) do_all_reduce<std::int32_t>(c, cx, isum, 4099, in_place);
      do_all_reduce<std::int32_t>(c, cx, isum, 4000, false);  // the same size class
      const md::plan pl = c.template make_plan<std::int32_t>(4099);
      bool ran = pl.chosen_by.find("measured") == 0;
      for (auto& st : pl.stages) ran = ran && (st.dim != 0 || st.algo == a);
      if (!ran) cx.fail("the plan is not the wisdom's:\n" + pl.to_string());
    });
  }
  std::remove(path.c_str());
}
