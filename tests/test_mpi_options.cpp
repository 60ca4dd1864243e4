// test_mpi_options.cpp: the collectives over MPI (and, compiled with
// MDRING_TEST_UCX=1, over a UCX world) with what options and the caller change:
// messages split by options.max_message_bytes, segments completing out of order, a
// split ring, node_alloc buffers, count 0, sub-communicators, options.memory and
// reserve(), two and moved communicators, detect_topology, calibrate, measured
// planning, a bulk op, options.reproducible. Every rank makes the same sequence of
// collective calls whatever its checks find. Harness: mpi_support.hpp (the plain
// collectives: test_mpi.cpp).
#include <doctest/doctest.h>

#include "mpi_support.hpp"

#include <thread>

// ---------------------------------------------------------------------------
TEST_CASE("options.max_message_bytes small: messages split into pieces, results exact") {
  const std::size_t P = world_size(), R = world_rank();
  for (std::size_t mmb : {std::size_t(1000), std::size_t(7), std::size_t(1)}) {
    for (auto& c : runtime_cases(P)) {
      md::options o = opts(c.algos);
      o.max_message_bytes = mmb;
      auto comm = md::bind(md::parse_topology(c.text), test_world(), o);
      const std::size_t n = mmb == 1 ? 301 : 2003;  // 8n bytes: many pieces plus a rest
      INFO(c.label() << ", max_message_bytes " << mmb << ", count " << n);
      std::vector<std::int64_t> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = val(R, i);
      md::all_reduce(comm, x.data(), n);
      CHECK(first_bad(n, [&](std::size_t i) { return x[i] == val_sum(P, i); }) == n);
      std::vector<std::int64_t> s(n * P), r(n);
      for (std::size_t j = 0; j < n * P; ++j) s[j] = val(R, j);
      md::reduce_scatter(comm, s.data(), r.data(), n);
      CHECK(first_bad(n, [&](std::size_t i) { return r[i] == val_sum(P, R * n + i); }) == n);
      std::vector<std::int64_t> g(n * P);
      md::all_gather(comm, x.data(), g.data(), n);
      CHECK(first_bad(n * P, [&](std::size_t j) { return g[j] == val_sum(P, j % n); }) == n * P);
      std::vector<std::int64_t> b(n, R == P - 1 ? 5 : 0);
      for (std::size_t i = 0; i < n && R == P - 1; ++i) b[i] = val(R, i);
      md::broadcast(comm, b.data(), n, P - 1);
      CHECK(first_bad(n, [&](std::size_t i) { return b[i] == val(P - 1, i); }) == n);
      std::vector<std::int64_t> rd(n, 0);
      for (std::size_t i = 0; i < n; ++i) x[i] = val(R, i);
      md::reduce(comm, x.data(), rd.data(), n, 0);
      if (R == 0) CHECK(first_bad(n, [&](std::size_t i) { return rd[i] == val_sum(P, i); }) == n);
      // A message exactly max_message_bytes long, and one byte longer.
      if (mmb == 1000) {
        for (std::size_t bytes : {std::size_t(1000) * P, std::size_t(1000) * P + P}) {
          std::vector<std::uint8_t> u(bytes);
          for (std::size_t i = 0; i < bytes; ++i) u[i] = std::uint8_t(i * 3 + R);
          md::all_reduce(comm, u.data(), bytes);
          CHECK(first_bad(bytes, [&](std::size_t i) { return u[i] == std::uint8_t(P * (i * 3) + P * (P - 1) / 2); }) ==
                bytes);
        }
      }
    }
  }
}

TEST_CASE("all_reduce in segments: steps of different segments complete out of order, results exact") {
  // Without shared access every pipelined stage is messages, and the executor goes
  // on with whichever segment's step is done (MPI_Testall / MPI_Waitany under
  // SMPI); with shared access it keeps one order on every rank. Many segments (so
  // tags wrap around modulo 8), depths 2 and 8, and messages cut into two pieces.
  const std::size_t P = world_size(), R = world_rank();
  for (bool shared : {false, true})
    for (std::size_t depth : {std::size_t(2), std::size_t(8)})
      for (auto& c : runtime_cases(P)) {
        md::options o = opts(c.algos);
        o.shared_memory = shared;
        o.tune.segment_bytes = 64;
        o.tune.pipeline_depth = depth;
        o.max_message_bytes = 40;  // a piece of 40 bytes and a rest
        auto comm = md::bind(md::parse_topology(c.text), test_world(), o);
        for (std::size_t n : {std::size_t(1), std::size_t(37), std::size_t(1001)}) {
          INFO(c.label() << (shared ? ", shared" : ", messages") << ", depth " << depth << ", count " << n);
          auto send = check_exact_sum(comm, P, R, n);
          md::all_reduce(comm, send.data(), n);
          CHECK(first_bad(n, [&](std::size_t i) { return send[i] == val_sum(P, i); }) == n);
        }
      }
}

TEST_CASE("a ring split in two (tune.split_ring_extent): MPI communicators per half, results exact") {
  // With split_ring_extent 4, ethernet:* on 4, 6 and 8 processes runs as 2 x 2,
  // 2 x 3 and 2 x 4 (plan/merge.hpp); on 2 and 3 it stays one ring. Every
  // collective must give what it gives unsplit: rank r still gets block r.
  const std::size_t P = world_size(), R = world_rank();
  std::vector<std::string> topos = {"ethernet:*"};
  if (P % 2 == 0 && P >= 8) topos.push_back("shm:2 x infiniband:*");
  for (const auto& text : topos)
    for (std::size_t seg : {std::size_t(0), std::size_t(64)}) {
      md::options o = opts();
      o.shared_memory = false;
      o.tune.split_ring_extent = 4;
      o.tune.segment_bytes = seg;
      auto comm = md::bind(md::parse_topology(text), test_world(), o);
      const std::size_t ring = text == "ethernet:*" ? P : P / 2;
      const std::size_t a = md::split_factor(ring, 4);
      INFO(text << " on " << P << " runs as " << comm.executed_topology().to_string() << ", segments of " << seg);
      CHECK(comm.executed_topology().ndims() == comm.topology().ndims() + (a ? 1 : 0));
      for (std::size_t n : {std::size_t(1), std::size_t(37), std::size_t(1001)}) {
        const auto send = check_exact_sum(comm, P, R, n);
        // reduce_scatter and all_gather of n per rank
        std::vector<std::int64_t> all(n * P);
        for (std::size_t j = 0; j < n * P; ++j) all[j] = val(R, j);
        guarded<std::int64_t> mine(n, -77);
        md::reduce_scatter(comm, all.data(), mine.data(), n);
        CHECK(first_bad(n, [&](std::size_t i) { return mine[i] == val_sum(P, R * n + i); }) == n);
        guarded<std::int64_t> gathered(n * P, -77);
        md::all_gather(comm, send.data(), gathered.data(), n);
        CHECK(first_bad(n * P, [&](std::size_t j) { return gathered[j] == val(j / n, j % n); }) == n * P);
        CHECK(mine.guards_intact());
        CHECK(gathered.guards_intact());
      }
    }
}

// Buffers from mdring::node_alloc: processes on the node map each other's and
// fold and copy in place, instead of cross-memory attach. `where` picks the
// memory per rank: 0 node_alloc everywhere, 1 even ranks only (the others are
// reached by cross-memory attach), 2 heap everywhere. Data start 3 elements
// into the allocation (not 16-byte aligned: the non-temporal stores have a head
// and a tail); nontemporal_bytes 0 streams every stage, SIZE_MAX none.
template <class T>
struct placed {
  static constexpr std::size_t guard = 3;
  T* base = nullptr;
  std::size_t n = 0;
  bool node = false;
  placed(std::size_t count, bool in_node, T fill) : n(count), node(in_node) {
    base = node ? static_cast<T*>(md::node_alloc((n + 2 * guard) * sizeof(T))) : new T[n + 2 * guard];
    std::fill(base, base + n + 2 * guard, fill);
  }
  placed(const placed&) = delete;
  ~placed() { node ? md::node_free(base) : delete[] base; }
  T* data() { return base + guard; }
  T& operator[](std::size_t i) { return base[guard + i]; }
  const T& operator[](std::size_t i) const { return base[guard + i]; }
  bool guards_intact(T fill) const {
    for (std::size_t i = 0; i < guard; ++i)
      if (base[i] != fill || base[n + guard + i] != fill) return false;
    return true;
  }
};

TEST_CASE("buffers from node_alloc: peers map them, results exact, guards intact") {
  const std::size_t P = world_size(), R = world_rank();
  for (int where : {0, 1, 2})
    for (std::size_t nt : {std::size_t(0), std::size_t(-1)})
      for (const char* topo : {"shm:*", "shm:2 x shm:*", "shm:* x ethernet:1"}) {
        if (std::string(topo) == "shm:2 x shm:*" && P % 2) continue;
        md::options o;
        o.tune.nontemporal_bytes = nt;
        o.tune.stream_blocks_min_bytes = std::size_t(-1);  // heap stays heap (streaming: below)
        o.tune.stream_min_bytes = std::size_t(-1);
        auto comm = md::bind(md::parse_topology(topo), test_world(), o);
        const bool node = where == 0 || (where == 1 && R % 2 == 0);
        for (std::size_t n : {std::size_t(5), std::size_t(1009), std::size_t(20011), std::size_t(65537)}) {
          // 20011 already maps every peer's buffer (stages above 16 KiB); 65537 only adds
          // fresh pages.
          if (n == 65537 && P > large_count_ranks) continue;
          INFO(topo << ", memory " << where << ", nontemporal_bytes " << nt << ", count " << n);
          placed<std::int64_t> send(n, node, -77), recv(n, node, -77);
          for (std::size_t i = 0; i < n; ++i) send[i] = val(R, i);
          md::all_reduce(comm, send.data(), recv.data(), n);
          CHECK(first_bad(n, [&](std::size_t i) { return recv[i] == val_sum(P, i); }) == n);
          CHECK(first_bad(n, [&](std::size_t i) { return send[i] == val(R, i); }) == n);
          CHECK(recv.guards_intact(-77));
          CHECK(send.guards_intact(-77));
          md::all_reduce(comm, send.data(), n);  // in place
          CHECK(first_bad(n, [&](std::size_t i) { return send[i] == val_sum(P, i); }) == n);
          CHECK(send.guards_intact(-77));
          // reduce_scatter and all_gather, each rank's part n elements
          placed<std::int64_t> whole(n * P, node, -77), part(n, node, -77);
          for (std::size_t j = 0; j < n * P; ++j) whole[j] = val(R, j);
          md::reduce_scatter(comm, whole.data(), part.data(), n);
          CHECK(first_bad(n, [&](std::size_t i) { return part[i] == val_sum(P, R * n + i); }) == n);
          CHECK(part.guards_intact(-77));
          for (std::size_t i = 0; i < n; ++i) part[i] = val(R, i);
          md::all_gather(comm, part.data(), whole.data(), n);
          CHECK(first_bad(n * P, [&](std::size_t j) { return whole[j] == val(j / n, j % n); }) == n * P);
          CHECK(whole.guards_intact(-77));
        }
        // With node memory everywhere, every peer's buffers were mapped (stages
        // above 16 KiB skip the staging buffers); with the heap, none.
        const auto& tr = comm.get_transport();
        if (P > 1 && tr.shared_channels()) {
          if (where == 0) CHECK(tr.mapped_segments() > 0);
          if (where == 2) CHECK(tr.mapped_segments() == 0);
        }
      }
}

// Heap buffers streamed through node memory (the pull form, dim_program::streamed;
// tune.stream_min_bytes 0 so that it runs at these sizes): each all_reduce notes
// whether any rank passed buffers its peers cannot map, and the next one runs the
// pull form if so, on every rank alike; a rank with heap buffers then streams
// them through a block of node memory, one with node memory runs in place. Any
// mix, and back: results exact, sendbuf untouched, guards intact.
TEST_CASE("heap buffers streamed through node memory: the next call decides, alike on every rank") {
  const std::size_t P = world_size(), R = world_rank();
  md::options o;
  o.tune.stream_min_bytes = 0;
  o.tune.segment_bytes = 64 << 10;  // several segments in flight
  auto comm = md::bind(md::parse_topology("shm:*"), test_world(), o);
  const bool shared = P > 1 && comm.get_transport().shared_channels() > 0;
  bool before = false;  // the last call had buffers some rank's peers cannot map
  const std::size_t n = 20011;
  // explain() says so where the engine would (and not for a call under the floor).
  CHECK((comm.explain<std::int64_t>(n).find("streamed through node memory") != std::string::npos) == shared);
  o.tune.stream_min_bytes = n * sizeof(std::int64_t) + 1;
  auto floor = md::bind(md::parse_topology("shm:*"), test_world(), o);
  CHECK(floor.explain<std::int64_t>(n).find("streamed") == std::string::npos);
  for (int where : {2, 1, 0, 2, 0}) {  // heap everywhere, odd ranks' heap, node memory everywhere
    const bool node = where == 0 || (where == 1 && R % 2 == 0);
    const bool unmapped = where == 2 || (where == 1 && P > 1);
    for (bool in_place : {false, true}) {
      INFO("memory " << where << (in_place ? ", in place" : ""));
      placed<std::int64_t> send(n, node, -77), recv(n, node, -77);
      for (std::size_t i = 0; i < n; ++i) send[i] = val(R, i);
      if (in_place) md::all_reduce(comm, send.data(), n);
      else md::all_reduce(comm, send.data(), recv.data(), n);
      const auto& out = in_place ? send : recv;
      CHECK(first_bad(n, [&](std::size_t i) { return out[i] == val_sum(P, i); }) == n);
      if (!in_place) CHECK(first_bad(n, [&](std::size_t i) { return send[i] == val(R, i); }) == n);
      CHECK(send.guards_intact(-77));
      CHECK(recv.guards_intact(-77));
      CHECK(md::detail::workspace_of(md::detail::core_of(comm)).description().dims.at(0).streamed ==
            (shared && before));
      before = unmapped;
    }
  }
}

// A reduce over a shared dimension: over two ranks, in a call of at most
// tune.shared_reduce_max_bytes, one stage, the root folding its peer's range
// (plan/reduce_program.hpp shared_reduce); else, where the range is not
// staged, one stage too, each rank folding its block and writing it into the
// root's (shared_reduce_split); else the reduce-scatter and the gather. Every
// form on heap and node memory, every root: exact at the root, recvbuf untouched
// elsewhere, and the plan says which.
TEST_CASE("reduce: a shared dimension in one stage, at the root alone or a block each") {
  const std::size_t P = world_size(), R = world_rank();
  for (std::size_t most : {std::size_t(0), std::size_t(-1)}) {
    md::options o;
    o.tune.shared_reduce_max_bytes = most;
    auto comm = md::bind(md::parse_topology("shm:*"), test_world(), o);
    const bool shared = P > 1 && comm.get_transport().shared_channels() > 0;
    const bool whole = most && P == 2;
    for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(1009), std::size_t(20011)}) {
      const md::plan pl = comm.make_plan<std::int64_t>(n, md::collective::reduce, md::sum, 1 % P);
      const auto at = std::find_if(pl.stages.begin(), pl.stages.end(), [](const md::plan_stage& st) {
        return st.ph == md::phase::reduce && st.shared_access;
      });
      const bool split = !whole && n * sizeof(std::int64_t) > o.tune.shared_staging_bytes;
      // (1 and 7 elements: a binomial tree, by messages)
      CHECK((at != pl.stages.end()) == (shared && n > 7 && (whole || split)));
      if (at != pl.stages.end() && split && R != 1 % P) CHECK(at->send_to == std::vector<std::size_t>{1 % P});
      for (bool node : {false, true})
        for (std::size_t root = 0; root < P; ++root) {
          INFO("shared_reduce_max_bytes " << most << ", count " << n << ", node memory " << node << ", root " << root);
          placed<std::int64_t> send(n, node, -77), recv(n, node, -77);
          for (std::size_t i = 0; i < n; ++i) send[i] = val(R, i), recv[i] = -5;
          md::reduce(comm, send.data(), recv.data(), n, root);
          if (R == root) CHECK(first_bad(n, [&](std::size_t i) { return recv[i] == val_sum(P, i); }) == n);
          else CHECK(first_bad(n, [&](std::size_t i) { return recv[i] == -5; }) == n);
          CHECK(first_bad(n, [&](std::size_t i) { return send[i] == val(R, i); }) == n);
          CHECK(send.guards_intact(-77));
          CHECK(recv.guards_intact(-77));
        }
    }
  }
}

// Streamed rooted calls (tune.one_shot_stream_max_bytes, 64 KiB by default) run at
// once where rank 0 measured at bind that the node's ranks are close (a cache line's
// trip of at most tune.one_shot_stream_max_trip_ns); where it measured them farther,
// each size class's first calls time both ways and every rank takes the way its
// slowest rank found faster (plan/stream_choice.hpp); where they outnumber the
// cores, the programs. Limits no trip meets (1 ns) or every trip meets (1 s), and
// SIZE_MAX (no measuring): the same decision everywhere, results exact either way.
TEST_CASE("streamed rooted calls: rank 0 measures the node at bind, every rank takes its verdict") {
  const std::size_t P = world_size(), R = world_rank();
  const bool crowded = P > std::thread::hardware_concurrency();
  for (std::size_t limit : {std::size_t(1), std::size_t(100), std::size_t(1'000'000'000), SIZE_MAX}) {
    INFO("one_shot_stream_max_trip_ns " << limit);
    md::options o;
    o.tune.one_shot_stream_max_trip_ns = limit;
    auto comm = md::bind(md::parse_topology("shm:*"), test_world(), o);
    const auto& d = comm.distance();
    const std::uint64_t seen[3] = {d.trip_ns, d.farthest, comm.get_options().tune.one_shot_stream_max_bytes};
    CHECK(identical_everywhere(seen, sizeof seen));
    const bool flat = comm.runs_one_shot(md::collective::all_reduce, 1, 4);  // every rank on one node
    CHECK(flat == (P > 1 && comm.get_transport().shared_channels() > 0));
    const bool measured = flat && limit != SIZE_MAX && !crowded;
    CHECK(d.measured() == measured);
    if (measured) CHECK(d.trip_ns > 1);
    if (measured) CHECK(d.farthest > 0);
    if (measured) CHECK(d.farthest < P);
    const bool streams = flat && (limit == SIZE_MAX || (measured && d.trip_ns <= limit));
    if (limit == 1) CHECK_FALSE(streams);
    if (limit == 1'000'000'000) CHECK(streams == measured);
    CHECK(comm.runs_one_shot(md::collective::broadcast, 16384, 4) == streams);
    CHECK(comm.runs_one_shot(md::collective::reduce, 8192, 8) == streams);
    CHECK(comm.get_options().tune.one_shot_stream_max_bytes == (flat && !streams ? 0u : 65536u));
    CHECK(comm.bind_options().tune.one_shot_stream_max_bytes == 65536u);
    const std::string e = comm.explain<float>(16384, md::collective::broadcast);
    INFO(e);
    CHECK((e.find("one-shot: this call runs over node memory in 8 steps of at most 8192 B") != std::string::npos) ==
          streams);
    if (flat && !streams && measured)
      CHECK(e.find("streamed or not by timing: the first 8 broadcasts of 32769 to 65536 B alternate between the "
                   "stages below and streaming over node memory, then every rank takes the way whose slowest rank "
                   "was faster (tune.one_shot_stream_trials = 4; at bind a cache line took " +
                   std::to_string(d.trip_ns) + " ns from rank 0's core to rank " + std::to_string(d.farthest) +
                   "'s, over tune.one_shot_stream_max_trip_ns = " + std::to_string(limit) + "); 0 of them so far") !=
            std::string::npos);
    if (flat && !streams && !measured)
      CHECK(e.find("not streamed over node memory: the node's " + std::to_string(P) +
                   " ranks outnumber its cores, where each step would wait for a descheduled peer") !=
            std::string::npos);
    if (!flat || streams) CHECK(e.find("not streamed") == std::string::npos);
    // Timed: 8 broadcasts and 8 reduces of each class alternate, the 9th of each goes
    // the way every rank decided (the same everywhere), all exact.
    const bool timed = flat && !streams && measured;
    for (std::size_t k = 0; k < (timed ? 10 : 1); ++k) {
      const std::size_t root = k % P;
      std::vector<float> b(12000, -1.0f);  // 48000 B: the 64 KiB class
      if (R == root)
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(i % 991) + float(k);
      md::broadcast(comm, b.data(), b.size(), root);
      CHECK(first_bad(b.size(), [&](std::size_t i) { return b[i] == float(i % 991) + float(k); }) == b.size());
      std::vector<double> x(5000, double(R + k)), y(5000, -5.0);  // 40000 B
      md::reduce(comm, x.data(), y.data(), x.size(), root);
      if (R == root)
        CHECK(first_bad(y.size(), [&](std::size_t i) { return y[i] == double(P * (P - 1) / 2 + P * k); }) == y.size());
    }
    if (timed) {
      const bool chosen[2] = {comm.runs_one_shot(md::collective::broadcast, 16384, 4),
                              comm.runs_one_shot(md::collective::reduce, 8192, 8)};
      CHECK(identical_everywhere(chosen, sizeof chosen));
      const std::string after = comm.explain<float>(16384, md::collective::broadcast);
      INFO(after);
      CHECK(after.find(chosen[0] ? "; chosen by timing the first 8 broadcasts of 32769 to 65536 B both ways: "
                                 : "not streamed over node memory: the first 8 broadcasts of 32769 to 65536 B were "
                                   "timed both ways") != std::string::npos);
    }
    for (std::size_t root = 0; root < P; ++root) {
      std::vector<float> b(16384, R == root ? 0.0f : -1.0f);
      if (R == root)
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(i % 997) + float(root);
      md::broadcast(comm, b.data(), b.size(), root);
      CHECK(first_bad(b.size(), [&](std::size_t i) { return b[i] == float(i % 997) + float(root); }) == b.size());
      std::vector<std::int64_t> x(8192), y(8192, -5);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = val(R, i);
      md::reduce(comm, x.data(), y.data(), x.size(), root);
      if (R == root) CHECK(first_bad(y.size(), [&](std::size_t i) { return y[i] == val_sum(P, i); }) == y.size());
    }
  }
}

// A broadcast's root buffer streamed through node memory
// (tune.stream_broadcast_min_bytes 0): from three ranks, the root copies it into
// node memory, which the others map and copy from, from the call after one on
// buffers some rank's peers cannot map; every rank alike. Two ranks never stream
// (the root writes half, its peer reads half). Every root, heap or node memory on
// any rank, and back: results exact, guards intact.
TEST_CASE("broadcast: a root's heap buffer streamed through node memory, the next call decides alike") {
  const std::size_t P = world_size(), R = world_rank();
  md::options o;
  o.tune.stream_broadcast_min_bytes = 0;
  auto comm = md::bind(md::parse_topology("shm:*"), test_world(), o);
  const bool shared = P > 2 && comm.get_transport().shared_channels() > 0;
  bool before = false;
  const std::size_t n = 20011;  // above the staging buffers
  // explain() says so where the engine would.
  CHECK((comm.explain<std::int64_t>(n, md::collective::broadcast).find("a root whose buffer is not node memory") !=
         std::string::npos) == shared);
  std::size_t calls = 0;
  for (int where : {2, 1, 0, 2, 0, 1})  // heap everywhere, odd ranks' heap, node memory everywhere
    for (std::size_t root = 0; root < P; ++root) {
      const bool node = where == 0 || (where == 1 && R % 2 == 0);
      const bool unmapped = where == 2 || (where == 1 && P > 1);
      INFO("memory " << where << ", root " << root);
      placed<std::int64_t> buf(n, node, -77);
      for (std::size_t i = 0; i < n; ++i) buf[i] = R == root ? val(root, i) : -5;
      md::broadcast(comm, buf.data(), n, root);
      CHECK(first_bad(n, [&](std::size_t i) { return buf[i] == val(root, i); }) == n);
      CHECK(buf.guards_intact(-77));
      CHECK(md::detail::workspace_of(md::detail::core_of(comm)).description().dims.at(0).streamed ==
            (shared && before));
      before = unmapped;
      ++calls;
    }
  // Under the floor the ranks read and write each other's buffers in place (not streamed).
  o.tune.stream_broadcast_min_bytes = n * sizeof(std::int64_t) + 1;
  auto floor = md::bind(md::parse_topology("shm:*"), test_world(), o);
  CHECK(floor.explain<std::int64_t>(n, md::collective::broadcast).find("streamed") == std::string::npos);
  for (int k = 0; k < 2; ++k) {
    placed<std::int64_t> buf(n, false, -77);
    for (std::size_t i = 0; i < n; ++i) buf[i] = R == 0 ? val(0, i) : -5;
    md::broadcast(floor, buf.data(), n, 0);
    CHECK(first_bad(n, [&](std::size_t i) { return buf[i] == val(0, i); }) == n);
    CHECK_FALSE(md::detail::workspace_of(md::detail::core_of(floor)).description().dims.at(0).streamed);
  }
  CHECK(calls == 6 * P);
}

// all_gather's pull form (tune.stream_blocks_min_bytes 0): a rank whose recvbuf
// its peers cannot map copies its block into node memory, which they map and copy
// from, from the call after one on such buffers; every rank alike. Heap or node
// memory on any rank, in and out of place: results exact, guards intact.
TEST_CASE("all_gather: heap buffers streamed through node memory, the next call decides alike") {
  const std::size_t P = world_size(), R = world_rank();
  md::options o;
  o.tune.stream_blocks_min_bytes = 0;
  auto comm = md::bind(md::parse_topology("shm:*"), test_world(), o);
  const bool shared = P > 1 && comm.get_transport().shared_channels() > 0;
  const std::size_t sc = 5003;  // per rank: above the staging buffers
  CHECK((comm.explain<std::int64_t>(sc, md::collective::all_gather).find("copies its block into node memory") !=
         std::string::npos) == shared);
  bool before = false;
  for (int where : {2, 1, 0, 2, 0, 1})  // heap everywhere, odd ranks' heap, node memory everywhere
    for (bool in_place : {false, true}) {
      const bool node = where == 0 || (where == 1 && R % 2 == 0);
      const bool unmapped = where == 2 || (where == 1 && P > 1);
      INFO("memory " << where << (in_place ? ", in place" : ""));
      placed<std::int64_t> send(sc, node, -77), recv(sc * P, node, -77);
      for (std::size_t i = 0; i < sc * P; ++i) recv[i] = -5;
      for (std::size_t i = 0; i < sc; ++i) (in_place ? recv[R * sc + i] : send[i]) = val(R, i);
      if (in_place) md::all_gather(comm, recv.data() + R * sc, recv.data(), sc);
      else md::all_gather(comm, send.data(), recv.data(), sc);
      CHECK(first_bad(sc * P, [&](std::size_t i) { return recv[i] == val(i / sc, i % sc); }) == sc * P);
      CHECK(send.guards_intact(-77));
      CHECK(recv.guards_intact(-77));
      CHECK(md::detail::workspace_of(md::detail::core_of(comm)).description().dims.at(0).streamed ==
            (shared && before));
      before = unmapped;
    }
  // Under the floor the peers' recvbufs are read in place (not streamed).
  o.tune.stream_blocks_min_bytes = sc * P * sizeof(std::int64_t) + 1;
  auto floor = md::bind(md::parse_topology("shm:*"), test_world(), o);
  CHECK(floor.explain<std::int64_t>(sc, md::collective::all_gather).find("streamed") == std::string::npos);
  for (int k = 0; k < 2; ++k) {
    placed<std::int64_t> send(sc, false, -77), recv(sc * P, false, -77);
    for (std::size_t i = 0; i < sc; ++i) send[i] = val(R, i);
    md::all_gather(floor, send.data(), recv.data(), sc);
    CHECK(first_bad(sc * P, [&](std::size_t i) { return recv[i] == val(i / sc, i % sc); }) == sc * P);
    CHECK_FALSE(md::detail::workspace_of(md::detail::core_of(floor)).description().dims.at(0).streamed);
  }
}

// reduce_scatter's pull form (tune.stream_blocks_min_bytes 0): a rank whose
// sendbuf its peers cannot map copies the blocks they fold into node memory, which
// they map and fold from, from the call after one on such buffers; every rank
// alike. Heap or node memory on any rank: results exact, sendbuf untouched.
TEST_CASE("reduce_scatter: heap buffers streamed through node memory, the next call decides alike") {
  const std::size_t P = world_size(), R = world_rank();
  md::options o;
  o.tune.stream_blocks_min_bytes = 0;
  auto comm = md::bind(md::parse_topology("shm:*"), test_world(), o);
  const bool shared = P > 1 && comm.get_transport().shared_channels() > 0;
  const std::size_t rc = 5003;  // per rank: above the staging buffers
  CHECK((comm.explain<std::int64_t>(rc, md::collective::reduce_scatter).find("copies the blocks its peers fold") !=
         std::string::npos) == shared);
  bool before = false;
  for (int where : {2, 1, 0, 2, 0, 1}) {  // heap everywhere, odd ranks' heap, node memory everywhere
    const bool node = where == 0 || (where == 1 && R % 2 == 0);
    const bool unmapped = where == 2 || (where == 1 && P > 1);
    INFO("memory " << where);
    placed<std::int64_t> send(rc * P, node, -77), recv(rc, node, -77);
    for (std::size_t j = 0; j < rc * P; ++j) send[j] = val(R, j);
    md::reduce_scatter(comm, send.data(), recv.data(), rc);
    CHECK(first_bad(rc, [&](std::size_t i) { return recv[i] == val_sum(P, R * rc + i); }) == rc);
    CHECK(first_bad(rc * P, [&](std::size_t j) { return send[j] == val(R, j); }) == rc * P);
    CHECK(send.guards_intact(-77));
    CHECK(recv.guards_intact(-77));
    CHECK(md::detail::workspace_of(md::detail::core_of(comm)).description().dims.at(0).streamed == (shared && before));
    before = unmapped;
  }
}

TEST_CASE("count 0 with null buffers, on every collective") {
  const std::size_t P = world_size();
  for_each_topology([&](auto& comm, const std::string& label) {
    INFO(label);
    md::all_reduce(comm, static_cast<const float*>(nullptr), static_cast<float*>(nullptr), 0);
    md::reduce_scatter(comm, static_cast<const float*>(nullptr), static_cast<float*>(nullptr), 0);
    md::all_gather(comm, static_cast<const float*>(nullptr), static_cast<float*>(nullptr), 0);
    md::broadcast(comm, static_cast<float*>(nullptr), 0, P - 1);
    md::reduce(comm, static_cast<const float*>(nullptr), static_cast<float*>(nullptr), 0, 0);
    CHECK(comm.usable());
  });
}

#if !MDRING_TEST_UCX  // MPI communicators of the program's own
TEST_CASE("sub-communicators from MPI_Comm_split, with reversed rank order") {
  const std::size_t R = world_rank();
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, int(R % 2), -int(R), &sub);  // reversed: highest world rank first
  int sr = 0, ss = 0;
  MPI_Comm_rank(sub, &sr);
  MPI_Comm_size(sub, &ss);
  {
    auto comm = md::bind(md::ring<md::shm>, sub);
    CHECK(comm.rank() == std::size_t(sr));
    CHECK(comm.size() == std::size_t(ss));
    std::vector<std::int64_t> x(100);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::int64_t(R) * 100 + std::int64_t(i);
    md::all_reduce(comm, x.data(), x.size());
    std::int64_t rsum = 0;
    for (std::size_t r = R % 2; r < world_size(); r += 2) rsum += std::int64_t(r);
    CHECK(first_bad(x.size(), [&](std::size_t i) { return x[i] == rsum * 100 + std::int64_t(ss) * std::int64_t(i); }) ==
          x.size());
    std::vector<std::int64_t> g(static_cast<std::size_t>(ss));
    std::int64_t mine = std::int64_t(R);
    md::all_gather(comm, &mine, g.data(), 1);
    // Block q comes from the rank with sub-communicator rank q: world rank (largest first).
    std::vector<std::int64_t> want;
    for (std::size_t r = R % 2; r < world_size(); r += 2) want.push_back(std::int64_t(r));
    std::reverse(want.begin(), want.end());
    CHECK(g == want);
  }
  MPI_Comm_free(&sub);
  CHECK(all_ranks(true));
}

#endif

// ---------------------------------------------------------------------------
namespace {
// Counts what goes through it (the scratch of the communicators that use it).
class counting_resource : public std::pmr::memory_resource {
public:
  std::size_t allocations = 0, bytes = 0;

private:
  void* do_allocate(std::size_t n, std::size_t align) override {
    ++allocations;
    bytes += n;
    return std::pmr::new_delete_resource()->allocate(n, align);
  }
  void do_deallocate(void* p, std::size_t n, std::size_t align) override {
    std::pmr::new_delete_resource()->deallocate(p, n, align);
  }
  bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override { return this == &o; }
};
}  // namespace

TEST_CASE("scratch comes from options.memory, and after reserve() calls allocate nothing") {
  // communicator::reserve<T>(count): "calls up to `count` elements of T allocate
  // nothing". Checked per collective, on a fresh communicator each, with the count
  // reserved being the whole buffer (count * size() for reduce_scatter/all_gather).
  const std::size_t P = world_size(), R = world_rank();
  const std::size_t rc = 1001, n = rc * P;
  std::vector<std::int64_t> s(n), r(n);
  for (auto& c : runtime_cases(P)) {
    for (int which = 0; which < 5; ++which) {
      const std::string name = which == 0   ? "all_reduce"
                               : which == 1 ? "reduce_scatter"
                               : which == 2 ? "all_gather"
                               : which == 3 ? "reduce (root 0)"
                                            : "broadcast";
      counting_resource mem;
      md::options o = opts(c.algos);
      o.memory = &mem;
      auto comm = md::bind(md::parse_topology(c.text), test_world(), o);
      comm.reserve<std::int64_t>(n);
      const std::size_t before = mem.allocations, reserved = comm.scratch_bytes();
      for (std::size_t j = 0; j < n; ++j) s[j] = val(R, j);
      switch (which) {
        case 0:
          md::all_reduce(comm, s.data(), r.data(), n);
          CHECK(first_bad(n, [&](std::size_t i) { return r[i] == val_sum(P, i); }) == n);
          break;
        case 1:
          md::reduce_scatter(comm, s.data(), r.data(), rc);
          CHECK(first_bad(rc, [&](std::size_t i) { return r[i] == val_sum(P, R * rc + i); }) == rc);
          break;
        case 2:
          md::all_gather(comm, s.data(), r.data(), rc);
          CHECK(first_bad(n, [&](std::size_t j) { return r[j] == val(j / rc, j % rc); }) == n);
          break;
        case 3:
          md::reduce(comm, s.data(), r.data(), n, 0);
          if (R == 0) CHECK(first_bad(n, [&](std::size_t i) { return r[i] == val_sum(P, i); }) == n);
          break;
        default:
          md::broadcast(comm, s.data(), n, 0);
          CHECK(first_bad(n, [&](std::size_t i) { return s[i] == val(0, i); }) == n);
      }
      INFO(c.label() << ", " << name << " on rank " << R << ", " << n << " int64 (recvcount " << rc
                     << ") after reserve<int64>(" << n << ") = " << reserved << " bytes; scratch now "
                     << comm.scratch_bytes() << " bytes");
      CHECK(mem.allocations == before);
    }
    // Without reserve(): scratch grows to the largest call, then is reused.
    counting_resource mem2;
    md::options o = opts(c.algos);
    o.memory = &mem2;
    auto comm2 = md::bind(md::parse_topology(c.text), test_world(), o);
    std::vector<float> f(5000, 1.0f);
    md::all_reduce(comm2, f.data(), f.size());
    const std::size_t warm = mem2.allocations;
    for (int k = 0; k < 5; ++k) md::all_reduce(comm2, f.data(), f.size());
    INFO(c.label() << ": repeated all_reduce");
    CHECK(mem2.allocations == warm);
    CHECK(f[4999] == float(std::pow(double(P), 6)));
  }
}

TEST_CASE("two communicators used alternately, and a moved communicator") {
  const std::size_t P = world_size(), R = world_rank();
  auto a = md::bind(md::ring<md::shm>, test_world());
  auto b = md::bind(md::parse_topology(P % 2 == 0 ? "shm:2 x ethernet:*" : "ethernet:*"), test_world());
  std::vector<std::int64_t> x(513), y(777);
  for (int k = 0; k < 4; ++k) {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = val(R, i) + k;
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = val(R, i) - k;
    if (k % 2) {
      md::all_reduce(a, x.data(), x.size());
      md::all_reduce(b, y.data(), y.size());
    } else {
      md::all_reduce(b, x.data(), x.size());
      md::all_reduce(a, y.data(), y.size());
    }
    CHECK(first_bad(x.size(), [&](std::size_t i) { return x[i] == val_sum(P, i) + std::int64_t(P) * k; }) == x.size());
    CHECK(first_bad(y.size(), [&](std::size_t i) { return y[i] == val_sum(P, i) - std::int64_t(P) * k; }) == y.size());
  }
  auto moved = std::move(a);
  std::vector<std::int64_t> z(100);
  for (std::size_t i = 0; i < z.size(); ++i) z[i] = val(R, i);
  md::all_reduce(moved, z.data(), z.size());
  CHECK(first_bad(z.size(), [&](std::size_t i) { return z[i] == val_sum(P, i); }) == z.size());
}

// ---------------------------------------------------------------------------
#if !MDRING_TEST_UCX  // detection through MPI (the UCX world detects across network namespaces:
                      // tests/cluster/cluster_probe.cpp)
TEST_CASE("detect_topology: one node of P ranks here; node_layout and a node-major split") {
  const std::size_t P = world_size(), R = world_rank();
  const auto l = md::detect_node_layout(MPI_COMM_WORLD);
  // mpirun starts every process on this machine: one node, node-major by construction.
  CHECK(l.ranks == P);
  CHECK(l.nodes == 1);
  CHECK(l.ranks_per_node == P);
  CHECK(l.node == 0);
  CHECK(l.local_rank == R);
  CHECK(l.node_major);
  CHECK(l.key == int(R));
  CHECK((l.network == "ethernet" || l.network == "infiniband"));
  const auto t = md::detect_topology(MPI_COMM_WORLD);
  CHECK(t.to_string() == "shm:" + std::to_string(P));
  // Reversed ranks are still node-major on one node (one node holds them all).
  MPI_Comm rev = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, 0, -int(R), &rev);
  const auto lr = md::detect_node_layout(rev);
  CHECK(lr.local_rank == P - 1 - R);
  CHECK(lr.node_major);
  MPI_Comm_free(&rev);

  // Nodes named by the ranks: round robin over two nodes is not node-major, and
  // key orders the ranks node by node (even ranks first).
  if (P >= 2) {
    const auto rr = md::layout_of_nodes(MPI_COMM_WORLD, int(R % 2));
    CHECK(rr.nodes == 2);
    CHECK(rr.ranks_per_node == (P % 2 ? 0 : P / 2));
    CHECK(rr.node == R % 2);
    CHECK(rr.local_rank == R / 2);
    CHECK(rr.node_major == (P == 2));
    CHECK(rr.key == int(R % 2 == 0 ? R / 2 : (P + 1) / 2 + R / 2));
    CHECK(md::topology_of(rr).to_string() == (P == 2  ? rr.network + ":2"
                                              : P % 2 ? rr.network + ":" + std::to_string(P)
                                                      : "shm:" + std::to_string(P / 2) + " x " + rr.network + ":2"));
  }
  // The layouts of several nodes, as topology_of turns them into topologies.
  md::node_layout two{8, 2, 4, 0, 0, true, 0, "infiniband"};
  CHECK(md::topology_of(two).to_string() == "shm:4 x infiniband:2");
  md::node_layout single{6, 6, 1, 0, 0, true, 0, "ethernet"};
  CHECK(md::topology_of(single).to_string() == "ethernet:6");
  md::node_layout unequal{5, 2, 0, 0, 0, false, 0, "ethernet"};
  CHECK(md::topology_of(unequal).to_string() == "ethernet:5");
  CHECK(all_ranks(true));
}

#endif

#if !MDRING_TEST_UCX  // MPI_Reduce_local
namespace {
// A bulk op, as the MPI interposer uses: MPI_Reduce_local with MPI_SUM on int32,
// counting its calls.
struct mpi_local_sum {
  static inline std::atomic<long> calls{0};
  void reduce_local(const std::int32_t* in, std::int32_t* inout, std::size_t n) const {
    ++calls;
    MPI_Reduce_local(in, inout, int(n), MPI_INT32_T, MPI_SUM);
  }
};
static_assert(md::bulk_reduction<mpi_local_sum, std::int32_t>);
static_assert(md::reduction_for<mpi_local_sum, std::int32_t>);
}  // namespace

TEST_CASE("calibrate: one profile on every rank, and bind plans with it") {
  const std::size_t P = world_size(), R = world_rank();
  const std::string topo = P % 2 == 0 && P > 2 ? "shm:2 x ethernet:*" : "ethernet:*";
  auto comm = md::bind(md::parse_topology(topo), test_world());
  md::calibration how;
  how.bytes = {8, 4096, 65536, 262144};
  how.trials = 2;
  const md::profile p = md::calibrate(comm, how);
  const std::string text = p.to_string();
  CHECK(identical_everywhere(text.data(), text.size()));
  const std::size_t dims = P == 1 ? 0 : P % 2 == 0 && P > 2 ? 2 : 1;
  CHECK(p.links.size() == dims);
  CHECK(p.points.size() == 4 * dims);
  CHECK(p.trains.size() == 4 * dims);  // every size is a train too (at most how.train_max_bytes)
  for (auto& t : p.trains) CHECK((t.messages == how.train && t.seconds > 0));
  for (auto& l : p.links) CHECK((l.bandwidth > 0 && l.latency + l.overhead > 0));
  // rank 0 writes it, every rank binds with it (the file is on this one node)
  const std::string path = "test_mpi_calibrate_np" + std::to_string(P) + ".profile";
  if (R == 0) p.save(path);
  int go = 0;
  md::all_reduce(comm, &go, 1, md::max);  // the file is written
  md::options o;
  o.profile = path;
  auto c2 = md::bind(md::parse_topology(topo), test_world(), o);
  bool same = true;
  for (std::size_t d = 0; d < c2.executed_topology().ndims(); ++d)
    if (const md::link_info* l = p.find(c2.executed_topology().dim(d).link.name))
      same = same && c2.executed_topology().dim(d).link == p.with_curve(*l) &&
             c2.executed_topology().dim(d).link.curve.points == 4;  // the measured points
  CHECK(same);
  std::vector<std::int64_t> x(1000, std::int64_t(R)), y(1000);
  md::all_reduce(c2, x.data(), y.data(), x.size());
  CHECK(y[999] == std::int64_t(P * (P - 1) / 2));
  md::all_reduce(c2, &go, 1, md::max);  // everyone has read it
  if (R == 0) std::remove(path.c_str());
}

TEST_CASE("planning = measure: every rank picks the same plan, results exact") {
  const std::size_t P = world_size(), R = world_rank();
  md::options o;
  o.planning = md::planning::measure;
  o.tune.one_shot_max_bytes = 0;  // measured planning times programs; small calls would run one-shot
  // shm:4 (4 and 8 processes): its direct stages are timed as a ring and as
  // halving-doubling too, through messages instead of shared access.
  const std::string topo = P % 4 == 0            ? "shm:4 x ethernet:*"
                           : P % 2 == 0 && P > 2 ? "shm:2 x ethernet:*"
                                                 : "ethernet:*";
  auto comm = md::bind(md::parse_topology(topo), test_world(), o);
  for (std::size_t n : {std::size_t(1), std::size_t(1009), std::size_t(65537)}) {
    std::vector<std::int64_t> x(n), y(n, -1);
    for (std::size_t i = 0; i < n; ++i) x[i] = val(R, i);
    md::all_reduce(comm, x.data(), y.data(), n);
    CHECK(first_bad(n, [&](std::size_t i) { return y[i] == val_sum(P, i); }) == n);
    md::all_reduce(comm, x.data(), n);  // in place, the same class
    CHECK(x == y);
    const md::plan pl = comm.make_plan<std::int64_t>(n);
    std::string choice = pl.chosen_by + "|" + std::to_string(pl.segments);
    for (auto& st : pl.stages) choice += "|" + std::string(md::to_string(st.algo));
    CHECK(identical_everywhere(choice.data(), choice.size()));
    if (P > 1) CHECK(pl.chosen_by.find("measured") == 0);
  }
}

TEST_CASE("a bulk op (reduce_local on whole arrays) gives the exact sums, every algorithm") {
  const std::size_t P = world_size(), R = world_rank();
  for (auto alg :
       {md::algorithm::automatic, md::algorithm::ring, md::algorithm::direct, md::algorithm::halving_doubling}) {
    md::options o;
    o.algorithms = {alg};
    auto comm = md::bind(md::parse_topology("shm:*"), test_world(), o);
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(5000), std::size_t(70001)}) {
      mpi_local_sum::calls = 0;
      std::vector<std::int32_t> x(n), y(n, -1);
      for (std::size_t i = 0; i < n; ++i) x[i] = std::int32_t(R * 1000 + i % 1000);
      md::all_reduce(comm, x.data(), y.data(), n, mpi_local_sum{});
      const std::int32_t rs = std::int32_t(P * (P - 1) / 2);
      CHECK(first_bad(n, [&](std::size_t i) { return y[i] == rs * 1000 + std::int32_t(P * (i % 1000)); }) == n);
      // every rank folds something, except the even rank of a pair in halving-doubling
      // on a non-power-of-two (it hands its range over and gets its block back)
      const bool folds = alg != md::algorithm::halving_doubling || (P & (P - 1)) == 0 ||
                         R >= 2 * (P - std::bit_floor(P)) || R % 2 == 1;
      if (P > 1 && n >= P && folds) CHECK(mpi_local_sum::calls.load() > 0);
      md::all_reduce(comm, x.data(), n, mpi_local_sum{});  // in place
      CHECK(x == y);
      std::vector<std::int32_t> rsout(n / std::max<std::size_t>(P, 1));
      std::vector<std::int32_t> full(rsout.size() * P);
      for (std::size_t i = 0; i < full.size(); ++i) full[i] = std::int32_t(i);
      md::reduce_scatter(comm, full.data(), rsout.data(), rsout.size(), mpi_local_sum{});
      CHECK(first_bad(rsout.size(), [&](std::size_t i) {
              return rsout[i] == std::int32_t(P * (R * rsout.size() + i));
            }) == rsout.size());
    }
  }
  CHECK(all_ranks(true));
}
#endif

TEST_CASE("options.reproducible: every element is the contract's fold, whatever the count and segments") {
  // Inputs with wide exponents: a sum's bits depend on the order of its terms.
  // Every rank computes the contract (reproducible_reference.hpp) for every
  // element from every rank's inputs, and compares bitwise.
  const std::size_t P = world_size(), R = world_rank();
  const std::string topo = P % 4 == 0            ? "shm:2 x shm:2 x ethernet:*"
                           : P % 2 == 0 && P > 2 ? "shm:2 x ethernet:*"
                                                 : "ethernet:*";
  const md::runtime_topology rt = md::parse_topology(topo).resolve(P);
  const std::vector<std::size_t> ext = rt.extents();
  const std::size_t nmax = 70001;
  std::vector<float> expect(nmax), column(P);
  for (std::size_t i = 0; i < nmax; ++i) {
    for (std::size_t r = 0; r < P; ++r) column[r] = mdring_test::wide_value(99, r, i, 24);
    expect[i] = mdring_test::contract_result(column, ext, md::sum);
  }
  for (std::size_t seg : {std::size_t(0), std::size_t(8) << 10, std::size_t(1) << 30}) {
    md::options o;
    o.reproducible = true;
    o.tune.segment_bytes = seg;
    o.tune.min_segment_bytes = 1024;
    auto comm = md::bind(rt, test_world(), o);
    for (std::size_t n : {std::size_t(1), std::size_t(1009), nmax}) {
      std::vector<float> x(n), y(n, -1.0f);
      for (std::size_t i = 0; i < n; ++i) x[i] = mdring_test::wide_value(99, R, i, 24);
      md::all_reduce(comm, x.data(), y.data(), n);
      CHECK(first_bad(n, [&](std::size_t i) { return std::memcmp(&y[i], &expect[i], sizeof(float)) == 0; }) == n);
      const std::size_t b = n / P;
      std::vector<float> block(b);
      md::reduce_scatter(comm, x.data(), block.data(), b);
      CHECK(first_bad(
                b, [&](std::size_t i) { return std::memcmp(&block[i], &expect[R * b + i], sizeof(float)) == 0; }) == b);
      md::request rq = md::iall_reduce(comm, x.data(), n);
      rq.wait();
      CHECK(std::memcmp(x.data(), y.data(), n * sizeof(float)) == 0);
    }
  }
  // accumulation = float32: bfloat16 results are the contract over the float32
  // inputs, rounded once (the widened call's scratch is node memory here).
  md::options o;
  o.reproducible = true;
  o.accumulation = md::accumulation::float32;
  auto comm = md::bind(rt, test_world(), o);
  std::vector<float> wide(P);
  for (std::size_t n : {std::size_t(1), std::size_t(4099), nmax}) {
    std::vector<md::bfloat16> x(n), y(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = md::bfloat16(mdring_test::wide_value(99, R, i, 12));
    for (int rep = 0; rep < 2; ++rep) {  // the second call reuses the scratch
      md::all_reduce(comm, x.data(), y.data(), n);
      CHECK(first_bad(n, [&](std::size_t i) {
              for (std::size_t r = 0; r < P; ++r) wide[r] = float(md::bfloat16(mdring_test::wide_value(99, r, i, 12)));
              const md::bfloat16 e(mdring_test::contract_result(wide, ext, md::sum));
              return y[i].bits == e.bits;
            }) == n);
    }
  }
}
