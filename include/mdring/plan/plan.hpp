// mdring/plan/plan.hpp: the stages of a collective, as data, and explain().
//
// make_plan() lists what one rank does for one call: which stages, in which dimension, over which link, with which
// algorithm, on which range, exchanging with which peers, how many bytes, and how long the cost model predicts. The
// algorithms are what plan/call.hpp decides for the call (the communicator's make_plan and explain() ask it), and each
// stage's steps, peers and bytes are those of the program the executors run (plan/collective_programs.hpp; they share
// blocks.hpp's arithmetic): tests/test_explain.cpp compares the two for every algorithm, collective, count, rank and
// root. The plan object itself exists for explain() and for tests.
//   all_reduce      reduce-scatter in dims 0..k-1, then all-gather in dims k-1..0
//   reduce_scatter  reduce-scatter in dims 0..k-1
//   all_gather      all-gather in dims k-1..0
//   broadcast       scatter from the root in dims 0..k-1, then all-gather k-1..0
//   reduce          reduce-scatter in dims 0..k-1, then gather to the root k-1..0
// Dimensions of extent 1 have no stage.
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "../topology/coordinates.hpp"
#include "../topology/runtime.hpp"
#include "blocks.hpp"
#include "cost.hpp"
#include "halving_doubling.hpp"
#include "pipeline.hpp"

#include <cstddef>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

MDRING_NAMESPACE_BEGIN
/// One stage of a plan: what this rank does in one dimension, with whom, and its predicted time.
struct plan_stage {
  phase ph = phase::reduce_scatter;    ///< what the stage does to its range
  std::size_t dim = 0;                 ///< executed dimension
  link_info link;                      ///< as the topology has it
  double rank_bandwidth = 0;           ///< this rank's share of it (runtime_topology::rank_link)
  std::size_t port_sharers = 1;        ///< ranks of the node using its ports at once
  std::size_t extent = 1;              ///< ranks in the dimension
  std::size_t coordinate = 0;          ///< this rank's coordinate in it
  algorithm algo = algorithm::ring;    ///< the stage's algorithm
  bool participates = true;            ///< scatter/gather stages involve only the root's line
  block_range range;                   ///< elements of the (nested) buffer this stage works on
  std::size_t steps = 0;               ///< rounds of messages
  std::vector<std::size_t> send_to;    ///< global ranks
  std::vector<std::size_t> recv_from;  ///< global ranks
  std::size_t bytes_sent = 0;          ///< by this rank
  std::size_t bytes_received = 0;      ///< by this rank
  double seconds = 0;                  ///< predicted for the whole stage
  /// A direct stage the bound communicator runs by shared access: no messages; this
  /// rank reads its peers' buffers (reduce-scatter) and writes into them (all-gather)
  /// in place. Set by communicator::make_plan (the free explain() knows no transport).
  bool shared_access = false;
};
/// What one rank does in one call, stage by stage (make_plan, explain()).
struct plan {
  collective kind = collective::all_reduce;  ///< the collective
  std::string type;                          ///< element type name
  std::size_t elem_size = 0;                 ///< bytes per element
  std::size_t count = 0;                     ///< as passed to the collective
  std::size_t elements = 0;                  ///< elements of the whole buffer the stages cut up
  std::string op;                            ///< the op's name
  runtime_topology topology;                 ///< resolved, as executed (same-link dimensions merged)
  runtime_topology written;                  ///< as the user wrote it (resolved), when known
  std::size_t rank = 0;                      ///< this rank
  std::vector<std::size_t> coords;           ///< its coordinates in the executed topology
  std::size_t root = 0;                      ///< broadcast, reduce: the root
  std::vector<plan_stage> stages;            ///< in the order they run
  /// all_reduce cut into this many segments that move through the stages one
  /// behind the other (plan/pipeline.hpp); each stage's seconds above are for the
  /// whole buffer, and pipelined_seconds is the model's total for the segments.
  std::size_t segments = 1;
  std::size_t segment_elements = 0;  ///< elements per segment
  double pipelined_seconds = 0;      ///< the model's total for the segments
  /// How the algorithms and segments were picked (options.planning): empty for the
  /// cost model's estimate, or what the measurement found (plan/wisdom.hpp).
  std::string chosen_by;
  /// options.reproducible: every reduction folds in the topology's fixed order.
  bool reproducible = false;
  /// half and bfloat16 reductions under a float32 accumulation (options.accumulation,
  /// options.dimension_accumulation): what it does, printed as it is.
  std::string accumulation;
  /// A bound communicator's all_reduce that would stream heap buffers through node memory (tuning::cma_gamma).
  std::string streaming;
  /// A bound communicator's call that runs one-shot over node memory instead of the stages (plan/one_shot.hpp).
  std::string one_shot;
  /// Predicted seconds of the call: the pipelined total, or the stages' sum.
  double seconds() const noexcept {
    if (segments > 1) return pipelined_seconds;
    double s = 0;
    for (auto& st : stages) s += st.seconds;
    return s;
  }
  /// Bytes this rank sends over all stages.
  std::size_t bytes_sent() const noexcept {
    std::size_t b = 0;
    for (auto& st : stages) b += st.bytes_sent;
    return b;
  }
  std::string to_string() const;  ///< the plan as explain() prints it
};

namespace detail {

inline std::string human_bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", b, unit[u]);
  return buf;
}

inline std::string human_seconds(double s) {
  char buf[32];
  if (s < 1e-3) std::snprintf(buf, sizeof buf, "%.2f us", s * 1e6);
  else if (s < 1) std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

inline std::string rank_list(const std::vector<std::size_t>& v) {
  if (v.empty()) return "-";
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i == 6 && v.size() > 7) return s + ",.. (" + std::to_string(v.size()) + ")";
    s += (i ? "," : "") + std::to_string(v[i]);
  }
  return s;
}

}  // namespace detail

/// The plan of one call on one rank. `count` is what the collective takes (per-rank
/// block for reduce_scatter / all_gather, the whole buffer otherwise); `algos[d]` is
/// the algorithm already chosen for dimension d; `segments` (> 0) cuts an all_reduce
/// into that many instead of the model's count. shared_last: the last dimension of
/// more than one rank runs by shared access (the transport's answer; a broadcast then
/// reads its range from the root there, and a reduce folds it in one stage: over two
/// ranks at the root up to tune.shared_reduce_max_bytes, else a block each written
/// into the root's buffer; plan/broadcast_program.hpp shared_broadcast, plan/reduce_program.hpp
/// shared_reduce and shared_reduce_split). topo must be resolved.
inline plan make_plan(collective kind, const runtime_topology& topo, std::size_t rank, std::size_t count,
                      std::size_t elem_size, std::span<const algorithm> algos, const tuning& tune, std::size_t root = 0,
                      std::string type = "float", std::string op = "sum", std::size_t segments = 0, bool trees = false,
                      bool shared_last = false) {
  plan pl;
  pl.kind = kind;
  pl.type = std::move(type);
  pl.elem_size = elem_size;
  pl.count = count;
  pl.op = (kind == collective::all_gather || kind == collective::broadcast) ? "-" : std::move(op);
  pl.topology = topo;
  pl.rank = rank;
  pl.root = root;
  const auto ext = topo.extents();
  const std::size_t k = ext.size(), P = topo.size();
  pl.coords = topo.coordinates(rank);
  const auto root_coords = topo.coordinates(root);
  const bool per_rank = kind == collective::reduce_scatter || kind == collective::all_gather;
  pl.elements = per_rank ? count * P : count;
  std::vector<block_range> ranges(k);
  const cut_shape cut = cut_shape_of(ext, pl.coords, algos);  // recursive doubling keeps its range whole
  stage_ranges(pl.elements, cut.extents, cut.coords, ranges);

  // The stages this rank's program has (plan/collective_programs.hpp: what runs):
  // none for no elements; the collectives other than all_reduce skip a stage
  // whose range is empty on its line (all_reduce keeps the steps of an empty
  // range). A stage of the root's line that this rank is not on stays, idle.
  bool split_reduce = false;  // a reduce's shared last dimension: shared_reduce_split (set below)
  // Shared stages of at most this many bytes go through the staging buffers (as the
  // transports open them): a broadcast's root then writes nothing into its peer.
  const std::size_t staging = (tune.shared_staging_bytes + 63) / 64 * 64;
  auto add = [&](phase ph, std::size_t d) {
    const std::size_t p = ext[d], c = pl.coords[d];
    if (p == 1 || pl.elements == 0) return;
    const bool whole = (ph == phase::broadcast || ph == phase::reduce) && trees;
    if (kind != collective::all_reduce && !whole && ranges[d].count == 0) return;
    plan_stage st;
    st.ph = ph;
    st.dim = d;
    st.link = topo.dim(d).link;
    const link_info rank_link = topo.rank_link(d);
    st.rank_bandwidth = rank_link.bandwidth;
    st.port_sharers = topo.port_sharers(d);
    st.extent = p;
    st.coordinate = c;
    st.algo = algos[d];
    st.range = whole ? block_range{0, pl.elements} : ranges[d];
    const std::size_t n = st.range.count;
    auto peer = [&](std::size_t j) { return peer_of(rank, d, j, ext); };
    auto bytes = [&](std::size_t j) { return block_of(n, p, j).count * elem_size; };
    if (ph == phase::broadcast && !whole) {  // a shared last dimension: the range read from the root; on two
      st.algo = algorithm::direct;           // ranks the root writes the second half (shared_broadcast)
      st.steps = 1;
      st.shared_access = true;
      const std::size_t rc = root_coords[d];
      const std::size_t half = p == 2 && n * elem_size > staging ? block_of(n, 2, 1).count * elem_size : 0;
      if (c == rc && half) st.send_to.push_back(peer(1 - c)), st.bytes_sent = half;
      if (c != rc) st.recv_from.push_back(peer(rc)), st.bytes_received = n * elem_size - half;
    } else if (ph == phase::reduce && !whole && split_reduce) {  // a shared last dimension: each rank folds
      st.algo = algorithm::direct;  // its block from every peer's and writes it into the root's buffer
      st.steps = 1;
      st.shared_access = true;
      for (std::size_t j = 0; j < p; ++j)
        if (j != c) st.recv_from.push_back(peer(j)), st.bytes_received += bytes(c);
      if (c != root_coords[d]) st.send_to.push_back(peer(root_coords[d])), st.bytes_sent = bytes(c);
    } else if (ph == phase::reduce && !whole) {  // a shared last dimension of two: the root reads the range
      st.algo = algorithm::direct;
      st.steps = 1;
      st.shared_access = true;
      if (c == root_coords[d]) st.recv_from.push_back(peer(1 - c)), st.bytes_received = n * elem_size;
    } else if (whole) {  // binomial trees of the whole buffer
      for (std::size_t e = 0; e < d; ++e) st.participates &= pl.coords[e] == root_coords[e];
      st.steps = tree_steps(p);
      const std::size_t v = (c + p - root_coords[d]) % p, all = pl.elements * elem_size;
      for (std::size_t s = 0; s < st.steps && st.participates; ++s) {
        const std::size_t m = std::size_t(1) << s;
        const bool b = ph == phase::broadcast;
        if (b ? v < m && v + m < p : v % (2 * m) == 0 && v + m < p)
          (b ? st.send_to : st.recv_from).push_back(peer((c + m) % p)), (b ? st.bytes_sent : st.bytes_received) += all;
        if (b ? v >= m && v < 2 * m : v % (2 * m) == m)
          (b ? st.recv_from : st.send_to).push_back(peer((c + p - m) % p)),
              (b ? st.bytes_received : st.bytes_sent) += all;
      }
    } else if (ph == phase::all_reduce) {  // recursive doubling of the whole range
      const hd_shape h = hd_shape_of(p);
      st.steps = h.steps();
      for (std::size_t s = 0; s < st.steps; ++s) {
        const rd_step rs = rd_step_of(h, c, s);
        if (rs.sends) st.send_to.push_back(peer(rs.partner)), st.bytes_sent += n * elem_size;
        if (rs.receives) st.recv_from.push_back(peer(rs.partner)), st.bytes_received += n * elem_size;
      }
    } else if (ph == phase::scatter || ph == phase::gather) {
      st.algo = algorithm::direct;
      // Only ranks whose coordinates above d equal the root's take part.
      for (std::size_t e = d + 1; e < k; ++e) st.participates &= pl.coords[e] == root_coords[e];
      const bool is_root_side = c == root_coords[d];
      st.steps = 1;
      if (st.participates) {
        const bool sends = (ph == phase::scatter) == is_root_side;
        for (std::size_t j = 0; j < p; ++j) {
          if (j == c) continue;
          if (!is_root_side && j != root_coords[d]) continue;
          // a peer whose block is empty gets no message (as the program runs it)
          const std::size_t b = sends ? bytes(ph == phase::scatter ? j : c) : bytes(ph == phase::gather ? j : c);
          if (b == 0) continue;
          (sends ? st.send_to : st.recv_from).push_back(peer(j));
          (sends ? st.bytes_sent : st.bytes_received) += b;
        }
      }
    } else if (st.algo == algorithm::halving_doubling) {
      const hd_shape h = hd_shape_of(p);
      st.steps = h.steps();
      auto note = [](std::vector<std::size_t>& v, std::size_t r) {
        for (auto x : v)
          if (x == r) return;
        v.push_back(r);
      };
      for (std::size_t s = 0; s < st.steps; ++s) {
        const hd_step hs = ph == phase::reduce_scatter ? hd_rs_step(h, n, c, s) : hd_ag_step(h, n, c, s);
        if (hs.sends && hs.send.count) note(st.send_to, peer(hs.partner)), st.bytes_sent += hs.send.count * elem_size;
        if (hs.receives && hs.recv.count)
          note(st.recv_from, peer(hs.partner)), st.bytes_received += hs.recv.count * elem_size;
      }
    } else if (st.algo == algorithm::direct) {
      st.steps = 1;
      for (std::size_t j = 0; j < p; ++j) {
        if (j == c) continue;
        const std::size_t out = bytes(ph == phase::reduce_scatter ? j : c),
                          in = bytes(ph == phase::reduce_scatter ? c : j);
        if (out) st.send_to.push_back(peer(j)), st.bytes_sent += out;  // empty blocks are not sent
        if (in) st.recv_from.push_back(peer(j)), st.bytes_received += in;
      }
    } else {
      st.steps = p - 1;
      const bool rs = ph == phase::reduce_scatter;
      for (std::size_t s = 0; s + 1 < p; ++s) {
        st.bytes_sent += bytes(rs ? ring_rs_send_block(c, s, p) : ring_ag_send_block(c, s, p));
        st.bytes_received += bytes(rs ? ring_rs_recv_block(c, s, p) : ring_ag_recv_block(c, s, p));
      }
      if (st.bytes_sent) st.send_to.push_back(peer((c + 1) % p));  // only empty blocks: no message
      if (st.bytes_received) st.recv_from.push_back(peer((c + p - 1) % p));
    }
    // (The shared broadcast: one copy of the range, as one message; on two ranks,
    // a half each, as a direct all-gather moves them. The shared reduce: the root
    // reads the range and folds it, as one message; split, a block each, as a
    // direct reduce-scatter folds them.)
    const bool shared_whole = (ph == phase::broadcast || ph == phase::reduce) && !whole;
    const bool split = shared_whole && (ph == phase::broadcast ? p == 2 && n * elem_size > staging : split_reduce);
    const phase cost_ph = !split ? ph : ph == phase::broadcast ? phase::all_gather : phase::reduce_scatter;
    const std::size_t pc = shared_whole && !split ? 2 : p;
    st.seconds =
        st.participates ? stage_seconds(cost_ph, st.algo, pc, n, elem_size, rank_link, tune.gamma(st.link.space)) : 0.0;
    pl.stages.push_back(std::move(st));
  };

  auto rd = [&](std::size_t d) { return algos[d] == algorithm::recursive_doubling; };
  if (trees && kind == collective::broadcast) {
    for (std::size_t d = k; d-- > 0;) add(phase::broadcast, d);
  } else if (trees && kind == collective::reduce) {
    for (std::size_t d = 0; d < k; ++d) add(phase::reduce, d);
  } else {
    const bool has_rs =
        kind == collective::all_reduce || kind == collective::reduce_scatter || kind == collective::reduce;
    std::size_t last = k;  // the last dimension of more than one rank
    for (std::size_t d = 0; d < k; ++d)
      if (ext[d] > 1) last = d;
    const bool whole_last = kind == collective::broadcast && shared_last && last < k;
    // (reduce_program.hpp whole_reduce: the same test)
    const bool whole_reduce = kind == collective::reduce && shared_last && last < k && ext[last] == 2 &&
                              count * elem_size <= tune.shared_reduce_max_bytes;
    // (reduce_program.hpp split_reduce: the same test)
    split_reduce = kind == collective::reduce && shared_last && last < k && !whole_reduce &&
                   ranges[last].count * elem_size > staging;
    const bool one_reduce = whole_reduce || split_reduce;
    if (has_rs)
      for (std::size_t d = 0; d < k; ++d)
        add(one_reduce && d == last ? phase::reduce : rd(d) ? phase::all_reduce : phase::reduce_scatter, d);
    if (kind == collective::broadcast)
      for (std::size_t d = 0; d < k; ++d) add(whole_last && d == last ? phase::broadcast : phase::scatter, d);
    if (kind == collective::all_reduce || kind == collective::all_gather || kind == collective::broadcast)
      for (std::size_t d = k; d-- > 0;)
        if (!rd(d) && !(whole_last && d == last)) add(phase::all_gather, d);
    if (kind == collective::reduce)
      for (std::size_t d = k; d-- > 0;)
        if (!(one_reduce && d == last)) add(phase::gather, d);
  }
  if (kind == collective::all_reduce) {
    const std::size_t len =
        segments ? segment_length(count, segments, elem_size) : segment_elements(topo, algos, count, elem_size, tune);
    pl.segments = segment_count(count, len);
    pl.segment_elements = len;
    if (pl.segments > 1) pl.pipelined_seconds = mdring::pipelined_seconds(topo, algos, count, elem_size, tune, len);
  }
  return pl;
}

inline std::string plan::to_string() const {
  std::string s;
  char line[512];
  std::snprintf(line, sizeof line, "mdring plan: %s of %zu x %s (%s)%s%s\n",
                std::string(mdring::to_string(kind)).c_str(), count, type.c_str(),
                detail::human_bytes(double(count) * double(elem_size)).c_str(), op == "-" ? "" : ", op ",
                op == "-" ? "" : op.c_str());
  s += line;
  std::string c;
  for (std::size_t i = 0; i < coords.size(); ++i) c += (i ? "," : "") + std::to_string(coords[i]);
  std::snprintf(
      line, sizeof line, "topology: %s = %zu ranks; shown for rank %zu at (%s)%s\n", topology.to_string().c_str(),
      topology.size(), rank, c.c_str(),
      kind == collective::broadcast || kind == collective::reduce ? (", root " + std::to_string(root)).c_str() : "");
  s += line;
  if (written.ndims() && written != topology) {
    // Merging only joins fully connected dimensions, splitting only cuts the
    // others (plan/merge.hpp): count each kind to tell which happened.
    auto dims_of = [](const runtime_topology& t, bool full) {
      std::size_t k = 0;
      for (std::size_t d = 0; d < t.ndims(); ++d) k += t.dim(d).link.fully_connected == full;
      return k;
    };
    const bool merged = dims_of(topology, true) < dims_of(written, true);
    const bool split = dims_of(topology, false) > dims_of(written, false);
    const int shape = merged && split ? 2 : split ? 1 : 0;
    static const char* const label[] = {"merged", "split", "merged and split"};
    static const char* const why[] = {
        "adjacent dimensions of one fully connected link",
        "a long ring as a grid of two: fewer latencies, the same bytes; tune.split_ring_extent",
        "adjacent dimensions of one fully connected link as one, a long ring as two"};
    std::snprintf(line, sizeof line, "%s: written as %s, run as %s (%s)\n", label[shape], written.to_string().c_str(),
                  topology.to_string().c_str(), why[shape]);
    s += line;
  }
  if (!one_shot.empty()) s += "one-shot: " + one_shot + "\n";
  std::snprintf(line, sizeof line, "  %-2s %-15s %3s %-11s %5s %-16s %6s %-16s %-16s %11s %11s\n", "#", "phase", "dim",
                "link", "ranks", "algo", "steps", "sends to", "receives from", "bytes out", "predicted");
  s += line;
  std::size_t i = 0;
  for (auto& st : stages) {
    std::snprintf(line, sizeof line, "  %-2zu %-15s %3zu %-11s %5zu %-16s %6zu %-16s %-16s %11s %11s%s\n", ++i,
                  std::string(mdring::to_string(st.ph)).c_str(), st.dim, st.link.name.c_str(), st.extent,
                  std::string(mdring::to_string(st.algo)).c_str(), st.steps, detail::rank_list(st.send_to).c_str(),
                  detail::rank_list(st.recv_from).c_str(), detail::human_bytes(double(st.bytes_sent)).c_str(),
                  detail::human_seconds(st.seconds).c_str(),
                  !st.participates   ? "  (idle)"
                  : st.shared_access ? "  (shared access)"
                                     : "");
    s += line;
  }
  for (auto& st : stages)
    if (st.shared_access) {
      s += "shared access: the stages marked so move no messages; this rank reads its peers' buffers in place "
           "(reduce-scatter; broadcast: the root's, which on two ranks writes the second half; reduce: the root "
           "reads, or each rank reads its block and writes it into the root's) and writes into them (all-gather): "
           "\"sends to\" and \"receives from\" are the peers whose memory it writes and reads, the bytes what "
           "it moves\n";
      break;
    }
  if (stages.empty())
    s += elements == 0 ? "  (no elements: nothing to do)\n" : "  (one rank: a local copy, no stage)\n";
  // Each link once: what one rank gets of it, and of what (ports shared by the node's ranks).
  bool measured = false;
  std::string typical;  // links with the built-in figures
  for (std::size_t a = 0; a < stages.size(); ++a) {
    const auto& st = stages[a];
    bool first = true;
    for (std::size_t b = 0; b < a && first; ++b) first = stages[b].link.name != st.link.name;
    if (!first) continue;
    if (builtin_figures(st.link)) typical += (typical.empty() ? "" : ", ") + st.link.name;
    std::string shared;
    if (st.link.ports) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "; %zu port%s of %s/s per node, shared by %zu ranks", st.link.ports,
                    st.link.ports == 1 ? "" : "s", detail::human_bytes(st.link.bandwidth).c_str(), st.port_sharers);
      shared = buf;
    }
    if (const auto& cv = st.link.curve; cv.points) {
      measured = true;
      std::snprintf(line, sizeof line,
                    "link %s: measured (options.profile) at %zu sizes, %s to %s: latency %s to %s, busy %s to %s per "
                    "message%s\n",
                    st.link.name.c_str(), cv.points, detail::human_bytes(cv.bytes[0]).c_str(),
                    detail::human_bytes(cv.bytes[cv.points - 1]).c_str(), detail::human_seconds(cv.latency[0]).c_str(),
                    detail::human_seconds(cv.latency[cv.points - 1]).c_str(),
                    detail::human_seconds(cv.seconds[0]).c_str(),
                    detail::human_seconds(cv.seconds[cv.points - 1]).c_str(), shared.c_str());
    } else {
      std::snprintf(line, sizeof line, "link %s: %s/s per rank, latency %s, overhead %s per message%s\n",
                    st.link.name.c_str(), detail::human_bytes(st.rank_bandwidth).c_str(),
                    detail::human_seconds(st.link.latency).c_str(), detail::human_seconds(st.link.overhead).c_str(),
                    shared.c_str());
    }
    s += line;
  }
  if (segments > 1) {
    std::snprintf(line, sizeof line, "pipelined: %zu segments of up to %s, the stages of different segments overlap\n",
                  segments, detail::human_bytes(double(segment_elements) * double(elem_size)).c_str());
    s += line;
  }
  std::snprintf(line, sizeof line, "predicted total: %s (alpha-beta-gamma model from the links' %s)\n",
                detail::human_seconds(seconds()).c_str(), measured ? "measured curves" : "traits");
  s += line;
  if (!typical.empty())
    s += "figures of " + typical +
         ": the built-in typical ones, not this machine's; mdring-calibrate measures them (options.profile or "
         "MDRING_PROFILE), options.planning = measure times the plans\n";
  if (!chosen_by.empty()) s += "plan: " + chosen_by + "\n";
  if (!accumulation.empty()) s += accumulation + "\n";
  if (!streaming.empty()) s += streaming + "\n";
  if (reproducible)
    s += "reproducible (options.reproducible): direct on every dimension, unsplit, innermost first, each folding its "
         "ranks left to right in coordinate order (merged dimensions nested, as the stages they replace); the same "
         "bits at every count, segment length and transport\n";
  return s;
}

MDRING_NAMESPACE_END
