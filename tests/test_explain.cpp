// explain() against the program that runs: for every algorithm, collective,
// count, rank and root, each stage make_plan() lists (dimension, phase, steps,
// peers as global ranks, bytes sent and received) is the program's
// (plan/collective_programs.hpp, what both executors run), stage by stage, and
// the plan of a bound communicator takes the algorithms decide_call chose
// (plan/call.hpp, the decision every path asks).
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>
#include <mdring/plan/call.hpp>
#include <mdring/plan/collective_programs.hpp>
#include <mdring/plan/plan.hpp>

#include <algorithm>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace md = mdring;

namespace {

struct stage_view {
  std::size_t dim = 0;
  md::phase ph = md::phase::reduce_scatter;
  std::size_t steps = 0;
  std::set<std::size_t> send_to, recv_from;  // global ranks
  std::size_t bytes_sent = 0, bytes_received = 0;
  bool local_only = true;  // every step synchronizes nothing
};

// The program's stages, as make_plan() describes them (one segment).
std::vector<stage_view> stages_of(const md::program& pr, const md::runtime_topology& topo, std::size_t rank,
                                  std::size_t elem_size) {
  const auto ext = topo.extents();
  std::vector<stage_view> out;
  if (pr.segment_begin.size() < 2) return out;  // no steps at all
  for (std::size_t i = pr.segment_begin[0]; i < pr.segment_begin[1]; ++i) {
    const md::program_step& st = pr.steps[i];
    if (st.stage >= out.size()) out.resize(st.stage + 1);
    stage_view& v = out[st.stage];
    v.dim = st.dim, v.ph = st.ph;
    v.local_only = v.local_only && st.sync == md::sync_kind::none;
    ++v.steps;
    for (const auto& t : pr.sends_of(st))
      v.send_to.insert(md::peer_of(rank, st.dim, t.peer, ext)), v.bytes_sent += t.count * elem_size;
    for (const auto& t : pr.recvs_of(st))
      v.recv_from.insert(md::peer_of(rank, st.dim, t.peer, ext)), v.bytes_received += t.count * elem_size;
  }
  // all_gather's first stage places this rank's own block: local, no message,
  // no stage in the plan
  std::erase_if(
      out, [](const stage_view& v) { return v.steps && v.send_to.empty() && v.recv_from.empty() && v.local_only; });
  return out;
}

std::string list(const std::set<std::size_t>& s) {
  std::ostringstream o;
  for (auto r : s) o << r << ' ';
  return o.str();
}

}  // namespace

TEST_CASE("explain: every stage of the plan is the program's (peers, bytes, steps), every algorithm and collective") {
  const char* topologies[] = {"ethernet:2",
                              "ethernet:4",
                              "ethernet:5",
                              "ethernet:8",
                              "infiniband:6",
                              "ethernet:3 x ethernet:4",
                              "ethernet:2 x ethernet:2 x ethernet:3"};
  const md::algorithm algos[] = {md::algorithm::ring, md::algorithm::direct, md::algorithm::halving_doubling,
                                 md::algorithm::recursive_doubling};
  const md::collective kinds[] = {md::collective::all_reduce, md::collective::reduce_scatter,
                                  md::collective::all_gather, md::collective::broadcast, md::collective::reduce};
  const std::size_t counts[] = {0, 1, 7, 1000, 4099};
  const md::tuning tune{};
  std::size_t compared = 0;
  for (const char* text : topologies) {
    const md::runtime_topology topo = md::parse_topology(text);
    const std::size_t k = topo.ndims(), P = topo.size();
    for (md::algorithm a : algos) {
      // recursive doubling is all_reduce's; the others run halving-doubling for it
      std::vector<md::algorithm> al(k, a);
      for (md::collective kind : kinds) {
        if (a == md::algorithm::recursive_doubling && kind != md::collective::all_reduce) continue;
        const bool rooted = kind == md::collective::broadcast || kind == md::collective::reduce;
        for (bool trees : {false, true}) {
          if (trees && !rooted) continue;
          for (std::size_t count : counts) {
            for (std::size_t root : {std::size_t(0), P - 1}) {
              if (!rooted && root) continue;
              for (std::size_t rank = 0; rank < P; ++rank) {
                const md::plan pl = md::make_plan(kind, topo, rank, count, 4, al, tune, root, "float", "sum", 1, trees);
                std::vector<md::dim_program> dims(k);
                const auto coords = topo.coordinates(rank);
                for (std::size_t d = 0; d < k; ++d) dims[d] = {topo.extent(d), coords[d], al[d], false, 0};
                md::program_params p;
                p.kind = kind, p.dims = dims, p.count = count, p.rank = rank, p.root = root, p.elem_size = 4;
                p.trees = trees;
                const md::program pr = md::make_program(p);
                const auto prog = stages_of(pr, topo, rank, 4);
                // A stage of the root's line this rank is not on: idle in the plan, absent from its program.
                std::vector<md::plan_stage> stages;
                for (const auto& st : pl.stages)
                  if (st.participates) stages.push_back(st);
                const std::string what = std::string(text) + " " + std::string(md::to_string(a)) + " " +
                                         std::string(md::to_string(kind)) + " count " + std::to_string(count) +
                                         " rank " + std::to_string(rank) + " root " + std::to_string(root) +
                                         (trees ? " trees" : "");
                INFO(what);
                REQUIRE(stages.size() == prog.size());
                for (std::size_t s = 0; s < prog.size(); ++s) {
                  const md::plan_stage& ps = stages[s];
                  const std::string where = "stage " + std::to_string(s) + ": dimension " + std::to_string(ps.dim) +
                                            ", " + std::string(md::to_string(ps.ph));
                  INFO(where);
                  CHECK(ps.dim == prog[s].dim);
                  CHECK(ps.ph == prog[s].ph);
                  CHECK(ps.steps == prog[s].steps);
                  const std::set<std::size_t> to(ps.send_to.begin(), ps.send_to.end()),
                      from(ps.recv_from.begin(), ps.recv_from.end());
                  CHECK_MESSAGE(to == prog[s].send_to,
                                "plan sends to " << list(to) << ", program to " << list(prog[s].send_to));
                  CHECK_MESSAGE(from == prog[s].recv_from,
                                "plan receives from " << list(from) << ", program from " << list(prog[s].recv_from));
                  CHECK(ps.bytes_sent == prog[s].bytes_sent);
                  CHECK(ps.bytes_received == prog[s].bytes_received);
                  ++compared;
                }
              }
            }
          }
        }
      }
    }
  }
  CHECK(compared > 5000);
}

TEST_CASE("explain: a communicator's plan and the free explain() show what its calls ran (one decision)") {
  // ethernet:6, automatic: recursive doubling for the smallest calls, halving-doubling
  // for small ones, the ring for large ones; shm:2 x ethernet:4 adds a direct stage.
  for (const char* text : {"ethernet:6", "shm:2 x ethernet:4"}) {
    const md::runtime_topology topo = md::parse_topology(text);
    std::vector<std::string> errors;
    std::mutex m;
    std::set<std::string> seen;  // the algorithms the calls ran, over every size
    md::options o;
    o.tune.one_shot_max_bytes = 256;       // 1 and 64 floats one-shot, the larger calls their programs
    o.tune.one_shot_stream_max_bytes = 0;  // (broadcasts too: test_one_shot.cpp streams them)
    md::threads::run(topo.size(), [&](md::threads::endpoint ep) {
      auto comm = md::bind(topo, ep, o);
      for (std::size_t n :
           {std::size_t(1), std::size_t(64), std::size_t(100), std::size_t(3000), std::size_t(1) << 20}) {
        std::vector<float> v(n, 1.0f);
        for (md::collective kind : {md::collective::all_reduce, md::collective::broadcast}) {
          if (kind == md::collective::all_reduce) md::all_reduce(comm, v.data(), n, md::sum);
          else md::broadcast(comm, v.data(), n, 0);
          const md::call_decision d =
              md::detail::workspace_of(md::detail::core_of(comm)).decision();  // what this call ran
          md::plan pl = comm.make_plan<float>(n, kind);
          const std::string free = md::explain<float>(topo, n, kind, comm.rank());
          std::lock_guard l(m);
          // A call that ran one-shot (every rank of a node, small: plan/one_shot.hpp) ran no
          // program: the plan says so, above the stages a program would run.
          const bool one_shot = md::detail::workspace_of(md::detail::core_of(comm)).last_one_shot();
          if (one_shot != !pl.one_shot.empty())
            errors.push_back(std::string(text) + " n=" + std::to_string(n) + ": the call ran " +
                             (one_shot ? "one-shot" : "its program") + ", the plan " +
                             (pl.one_shot.empty() ? "does not say one-shot" : "says one-shot"));
          if (one_shot) {
            seen.insert("one-shot");
            if (pl.to_string().find("one-shot: this call runs in one step over node memory") == std::string::npos)
              errors.push_back(std::string(text) + " n=" + std::to_string(n) + ": explain() does not print one-shot");
            continue;
          }
          for (const auto& st : pl.stages) {
            seen.insert(std::string(md::to_string(st.algo)));
            if (st.shared_access) seen.insert("(shared access)");
            const bool own_algo = st.ph != md::phase::scatter && st.ph != md::phase::gather;
            if (own_algo && st.algo != d.algos.at(st.dim))
              errors.push_back(std::string(text) + " " + std::string(md::to_string(kind)) + " n=" + std::to_string(n) +
                               ": the plan shows " + std::string(md::to_string(st.algo)) + " on dimension " +
                               std::to_string(st.dim) + ", the call ran " +
                               std::string(md::to_string(d.algos.at(st.dim))));
          }
          if (kind == md::collective::all_reduce && pl.segments != d.segments)
            errors.push_back(std::string(text) + " n=" + std::to_string(n) + ": the plan shows " +
                             std::to_string(pl.segments) + " segments, the call ran " + std::to_string(d.segments));
          // The free explain() knows no transport: the communicator's plan also marks
          // the direct stages it runs by shared access (threads: every shm stage).
          md::plan unmarked = pl;
          for (auto& st : unmarked.stages) {
            // The engine ran the dimension by shared access (program_dims: the
            // parameters the call's program was built with); of its stages, the
            // reduce-scatter and all-gather ones read and write peers' buffers, while
            // scatter, gather and tree stages move messages (plan/build_stages.hpp).
            // (A broadcast reads its range from the root on a shared last dimension.)
            const bool want = (st.ph == md::phase::reduce_scatter || st.ph == md::phase::all_gather ||
                               (st.ph == md::phase::broadcast && !d.trees)) &&
                              md::detail::workspace_of(md::detail::core_of(comm)).description().dims.at(st.dim).shared;
            if (st.shared_access != want)
              errors.push_back(std::string(text) + " n=" + std::to_string(n) + ": stage " +
                               std::string(md::to_string(st.ph)) + " of dimension " + std::to_string(st.dim) +
                               (want ? " is not" : " is") + " marked shared access");
            st.shared_access = false;
          }
          if ((pl.to_string().find("shared access: the stages marked so move no messages") != std::string::npos) !=
              std::any_of(pl.stages.begin(), pl.stages.end(), [](const auto& st) { return st.shared_access; }))
            errors.push_back(std::string(text) + " n=" + std::to_string(n) + ": the shared-access note is wrong");
          if (free != unmarked.to_string())
            errors.push_back(std::string(text) + " n=" + std::to_string(n) + ": explain() differs from make_plan:\n" +
                             free + "\n" + unmarked.to_string());
        }
      }
    });
    for (const auto& e : errors) FAIL_CHECK(e);
    CHECK(errors.empty());
    std::string all;
    for (const auto& a : seen) all += a + " ";
    const std::string shown = std::string(text) + ": the plans showed " + all;
    INFO(shown);
    CHECK(seen.count("one-shot"));
    if (std::string(text) == "ethernet:6") {  // the sizes reach three algorithms
      CHECK(seen.count("recursive_doubling"));
      CHECK(seen.count("halving_doubling"));
      CHECK(seen.count("ring"));
      CHECK(!seen.count("(shared access)"));
    } else {  // shm:2 runs direct, the threads reading each other's buffers
      CHECK(seen.count("(shared access)"));
    }
  }
}

namespace {

// ethernet:3 x shm:2, dimension 1 shared, 600 floats, root 4 = (1, 1) (rank = c0 + 3 c1):
// what make_plan (told the last dimension is shared) shows this rank taking part in,
// and its program's stages (their phases; the stage of phase `shared` moves no message).
// The shared stage is checked here: dimension 1, shared access, this rank's block of
// dimension 0's range (200), nothing sent.
struct shared_last_case {
  std::vector<md::plan_stage> stages;
  std::vector<md::phase> phases;
  bool shared_moves_nothing = true;
  bool on_line = false;  // on the root's line of dimension 0 (coordinate 1 of dimension 1)
  // The program's shared stage: the global ranks whose memory it reads and writes,
  // and the bytes (what the plan's "receives from" and "sends to" report).
  std::vector<std::size_t> reads, writes;
  std::size_t bytes_read = 0, bytes_written = 0;
};
void add_peer(std::vector<std::size_t>& peers, std::size_t r) {
  if (std::find(peers.begin(), peers.end(), r) == peers.end()) peers.push_back(r);
}
shared_last_case shared_last_case_of(md::collective kind, md::phase shared, std::size_t rank, std::size_t n) {
  const md::runtime_topology topo = md::parse_topology("ethernet:3 x shm:2");
  const std::vector<md::algorithm> al = {md::algorithm::ring, md::algorithm::direct};
  const std::size_t root = 4;
  const bool reduces = kind == md::collective::reduce;
  shared_last_case c;
  const md::plan pl =
      md::make_plan(kind, topo, rank, n, 4, al, md::tuning{}, root, "float", reduces ? "sum" : "-", 0, false, true);
  for (const auto& s : pl.stages)
    if (s.participates) c.stages.push_back(s);
  const auto coords = topo.coordinates(rank);
  c.on_line = coords[1] == 1;
  REQUIRE(c.stages.size() == (c.on_line ? 3u : 2u));
  for (const auto& b : c.stages) {
    if (b.ph != shared) continue;
    CHECK(b.dim == 1);
    CHECK(b.shared_access);
    CHECK(b.range.count == n / 3);
  }
  std::vector<md::dim_program> dims(2);
  dims[0] = {3, coords[0], md::algorithm::ring, false, 0};
  dims[1] = {2, coords[1], md::algorithm::direct, true, md::tuning{}.shared_staging_bytes};
  md::program_params p;
  p.kind = kind, p.dims = dims, p.count = n, p.rank = rank, p.root = root, p.elem_size = 4;
  p.shared_reduce_max_bytes = md::tuning{}.shared_reduce_max_bytes, p.shared_reduce_split = true;
  const md::program pr = md::make_program(p);
  // Coordinate j of dimension 1 is global rank c0 + 3 j.
  const auto global = [&](const md::slice& sl) { return coords[0] + 3 * std::size_t(sl.peer); };
  for (const auto& step : pr.steps) {
    if (step.stage_begin) c.phases.push_back(step.ph);
    if (step.ph != shared) continue;
    c.shared_moves_nothing &= pr.sends_of(step).size() + pr.recvs_of(step).size() == 0;
    for (const auto& o : pr.ops_of(step)) {
      for (const auto& in : pr.inputs_of(o))  // (a staged fold reads this rank's own staging buffer too)
        if (in.remote() && in.peer != coords[1]) add_peer(c.reads, global(in)), c.bytes_read += o.count * 4;
      for (const auto& out : pr.outputs_of(o))
        if (out.remote()) add_peer(c.writes, global(out)), c.bytes_written += o.count * 4;
    }
  }
  for (const auto& b : c.stages) {
    if (b.ph != shared) continue;
    CHECK(b.recv_from == c.reads);
    CHECK(b.bytes_received == c.bytes_read);
    CHECK(b.send_to == c.writes);
    CHECK(b.bytes_sent == c.bytes_written);
  }
  return c;
}

}  // namespace

TEST_CASE("explain: a broadcast over a shared last dimension splits its range with the root (the program's stages)") {
  // plan/broadcast_program.hpp shared_broadcast: the scatter and all-gather of the
  // last dimension become one stage, the root writing the second half into its
  // peer, which reads the first from the root; a staged range (600 elements: 200
  // in the stage) is read whole from the root's staging buffer.
  // Scatter on dimension 0 among the root's line, the shared broadcast on dimension
  // 1, the all-gather on dimension 0.
  const md::runtime_topology topo = md::parse_topology("ethernet:3 x shm:2");
  const std::vector<md::algorithm> al = {md::algorithm::ring, md::algorithm::direct};
  const std::size_t n = 60000, root = 4;
  for (std::size_t rank = 0; rank < 6; ++rank) {
    INFO("rank " << rank);
    const shared_last_case c = shared_last_case_of(md::collective::broadcast, md::phase::broadcast, rank, n);
    const std::vector<md::plan_stage>& st = c.stages;
    const bool on_line = c.on_line;
    const md::plan_stage& b = st[on_line ? 1 : 0];
    CHECK(b.ph == md::phase::broadcast);
    // 20000 elements of 4 bytes: block 0 is [0, 10000), block 1 [10000, 20000).
    if (on_line) {  // coordinate 1 of dimension 1, the root's: it writes block 1 into (c0, 0)
      CHECK(b.recv_from.empty());
      CHECK(b.bytes_received == 0);
      CHECK(b.send_to == std::vector<std::size_t>{rank - 3});
      CHECK(b.bytes_sent == 40000);
    } else {  // rank = c0 + 3 c1: it reads block 0 of (c0, 1)
      CHECK(b.recv_from == std::vector<std::size_t>{rank + 3});
      CHECK(b.bytes_received == 40000);
      CHECK(b.send_to.empty());
      CHECK(b.bytes_sent == 0);
    }
    const shared_last_case small = shared_last_case_of(md::collective::broadcast, md::phase::broadcast, rank, 600);
    const md::plan_stage& sb = small.stages[on_line ? 1 : 0];
    CHECK(sb.bytes_sent == 0);
    CHECK(sb.bytes_received == (on_line ? 0u : 800u));
    CHECK(st.back().ph == md::phase::all_gather);
    CHECK(st.back().dim == 0);
    if (on_line) CHECK(st.front().ph == md::phase::scatter);
    // The program: the same stages, the broadcast by shared access (no messages).
    std::vector<md::phase> want = {md::phase::broadcast, md::phase::all_gather};
    if (on_line) want.insert(want.begin(), md::phase::scatter);
    CHECK(c.phases == want);
    CHECK(c.shared_moves_nothing);
  }
  // Without shared access, the scatter and all-gather of dimension 1 stay.
  const md::plan msg = md::make_plan(md::collective::broadcast, topo, 0, n, 4, al, md::tuning{}, root);
  for (const auto& s : msg.stages) CHECK(s.ph != md::phase::broadcast);
}

TEST_CASE("explain: a reduce over a shared last dimension of two folds its range at the root (the program's stages)") {
  // plan/reduce_program.hpp shared_reduce: the reduce-scatter and gather of the
  // last dimension become one stage, the rank at the root's coordinate reading its
  // peer's range. The reduce-scatter on dimension 0, the shared reduce on dimension
  // 1 (every line of it, into its rank at coordinate 1), the gather on dimension 0
  // among the root's line.
  const std::vector<md::algorithm> al = {md::algorithm::ring, md::algorithm::direct};
  const std::size_t n = 600;
  for (std::size_t rank = 0; rank < 6; ++rank) {
    INFO("rank " << rank);
    const shared_last_case c = shared_last_case_of(md::collective::reduce, md::phase::reduce, rank, n);
    const std::vector<md::plan_stage>& st = c.stages;
    const bool on_line = c.on_line;
    CHECK(st[0].ph == md::phase::reduce_scatter);
    CHECK(st[0].dim == 0);
    const md::plan_stage& b = st[1];
    CHECK(b.ph == md::phase::reduce);
    if (on_line) {  // it reads (c0, 0)
      CHECK(b.recv_from == std::vector<std::size_t>{rank - 3});
      CHECK(b.bytes_received == 800);
      CHECK(st[2].ph == md::phase::gather);
      CHECK(st[2].dim == 0);
    } else {
      CHECK(b.recv_from.empty());
      CHECK(b.bytes_received == 0);
    }
    // The program: the same stages, the reduce by shared access (no messages).
    std::vector<md::phase> want = {md::phase::reduce_scatter, md::phase::reduce};
    if (on_line) want.push_back(md::phase::gather);
    CHECK(c.phases == want);
    CHECK(c.shared_moves_nothing);
  }
  // Three ranks on the shared dimension with a staged range (200 elements), or no
  // shared access: the reduce-scatter and the gather of dimension 1 stay.
  for (int c = 0; c < 2; ++c) {
    const md::runtime_topology t = md::parse_topology(c == 0 ? "ethernet:3 x shm:3" : "ethernet:3 x shm:2");
    const md::plan pl =
        md::make_plan(md::collective::reduce, t, 0, n, 4, al, md::tuning{}, 0, "float", "sum", 0, false, c != 1);
    std::size_t gathers = 0;
    for (const auto& s : pl.stages) {
      CHECK(s.ph != md::phase::reduce);
      gathers += s.ph == md::phase::gather;
    }
    CHECK(gathers == 2);
  }
}

TEST_CASE(
    "explain: a larger reduce over a shared last dimension writes each block into the root's (the program's stages)") {
  // plan/reduce_program.hpp shared_reduce_split: above
  // tune.shared_reduce_max_bytes, and where the range is not staged, each rank of
  // the last dimension folds its block from every peer's and writes it into the
  // root's buffer: the reduce-scatter and gather of dimension 1 are one stage.
  const std::size_t n = 36000;  // above the threshold (144000 bytes); 12000 elements in each stage
  for (std::size_t rank = 0; rank < 6; ++rank) {
    INFO("rank " << rank);
    const shared_last_case c = shared_last_case_of(md::collective::reduce, md::phase::reduce, rank, n);
    const md::plan_stage& b = c.stages[1];
    CHECK(b.ph == md::phase::reduce);
    REQUIRE(n * 4 > md::tuning{}.shared_reduce_max_bytes);
    const std::size_t mine = 6000 * 4;  // a block of the stage's two
    CHECK(b.recv_from == std::vector<std::size_t>{rank < 3 ? rank + 3 : rank - 3});
    CHECK(b.bytes_received == mine);
    if (c.on_line) {  // the root's coordinate: the others write into it
      CHECK(b.send_to.empty());
      CHECK(b.bytes_sent == 0);
    } else {
      CHECK(b.send_to == std::vector<std::size_t>{rank + 3});
      CHECK(b.bytes_sent == mine);
    }
    std::vector<md::phase> want = {md::phase::reduce_scatter, md::phase::reduce};
    if (c.on_line) want.push_back(md::phase::gather);
    CHECK(c.phases == want);
    CHECK(c.shared_moves_nothing);
  }
}
