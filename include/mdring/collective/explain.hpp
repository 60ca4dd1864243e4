// mdring/collective/explain.hpp: what a call would do on one rank, as a plan,
// without running it: a bound communicator's make_plan() and explain(), and the
// free explain() of a topology.
//
//   std::cout << mdring::explain(mdring::ring<mdring::shm, 2> * mdring::ring<mdring::ethernet, 4>,
//                                1 << 20, mdring::collective::all_reduce, 5);
//
// Both ask what every executor asks: the call's decision (plan/call.hpp
// decide_call, with a bound communicator's measured plans) and its description
// (describe_call: which dimensions run by shared access, which stream through node
// memory); plan/plan.hpp make_plan then lists the stages those algorithms run,
// their peers, bytes and predicted seconds. The free explain() knows no transport:
// no shared access, no measured plans.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "../plan/bound_layout.hpp"
#include "../plan/call.hpp"
#include "../plan/one_shot.hpp"
#include "../plan/plan.hpp"
#include "../plan/wisdom.hpp"
#include "communicator_base.hpp"
#include "../reduce/ops.hpp"
#include "../reduce/types.hpp"
#include "../topology/runtime.hpp"

#include <cstdio>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

// How explain() shows a reduction of T with Op under options.accumulation: the
// element size and type the call runs with (a widened half/bfloat16 call runs
// float32), and the line that says so.
struct accumulated_type {
  std::size_t size;
  std::string name, note;
};
template <class T, class Op>
accumulated_type accumulated(collective kind, const runtime_topology& written, const options& o) {
  accumulated_type a{sizeof(T), type_name<T>(), {}};
  if constexpr (is_16bit_float_v<T> && op_traits<Op>::builtin) {
    if (kind != collective::all_reduce && kind != collective::reduce_scatter && kind != collective::reduce) return a;
    if (accumulates_float32(o, written.ndims())) {
      a.size = sizeof(float);
      a.note = "accumulation float32 (options.accumulation): the call is widened, its " + a.name +
               " inputs converted to float32, every stage above carrying float32, the result rounded once";
      a.name = "float (widened " + a.name + ")";
      return a;
    }
    std::string dims;
    for (std::size_t d = 0; d < written.ndims(); ++d)
      if (accumulation_of(o, d) == accumulation::float32 && written.extent(d) > 1)
        dims += (dims.empty() ? "" : ", ") + written.dim(d).link.name + ":" + std::to_string(written.extent(d));
    if (!dims.empty())
      a.note = "accumulation float32 on " + dims +
               " (options.dimension_accumulation): direct there, each block's inputs folded in float32 at its "
               "owner and rounded once as it leaves the dimension; " +
               a.name + " on the wire";
  }
  return a;
}

// The plan of a call of `count` T with Op on layout L bound with options o
// (normalized by bind_layout), where `access` says what the transport can do in each
// executed dimension (empty: nothing shared) and `measured` holds the measured plans
// (null: none); one_shot_staging: the staging bytes of the communicator's flat
// channel (0: it has none, plan/one_shot.hpp).
template <class T, class Op>
plan plan_of_call(const bound_layout& L, const options& o, collective kind, std::size_t count, std::size_t root,
                  std::span<const dim_access> access, bool between_processes, const wisdom* measured,
                  std::size_t one_shot_staging = 0) {
  constexpr bool commutative = op_traits<Op>::commutative;
  const accumulated_type at = accumulated<T, Op>(kind, L.written, o);
  // A measured plan, when this size class has one (options.planning = measure).
  const measured_choice* m =
      measured && kind == collective::all_reduce && o.planning == planning::measure && commutative
          ? measured->find(at.size, count * at.size)
          : nullptr;
  call_decision d;  // what the call would run: the executors' own decision (plan/call.hpp)
  decide_call(d, request_for(L, kind, count, at.size, commutative, o.tune, m));
  if (d.source != call_decision::origin::measured) m = nullptr;
  tuning tune = o.tune;
  if (m) tune.pipeline_depth = m->depth;
  // What the executor runs by shared access and streams (plan/call.hpp describe_call):
  // the reduce-scatter and all-gather stages of a dimension the call runs direct
  // whose ranks share memory, and a broadcast's or reduce's last such dimension
  // (plan/broadcast_program.hpp shared_broadcast, plan/reduce_program.hpp shared_reduce); tree, scatter
  // and gather stages move messages.
  call_program cp;
  describe_call(cp, d, {kind, count, root, at.size}, L, access, o.tune, executor_profile::on_host(between_processes));
  std::size_t last = L.ndims();
  for (std::size_t e = 0; e < L.ndims(); ++e)
    if (L.extents[e] > 1) last = e;
  plan pl =
      mdring::make_plan(kind, L.executed(), L.rank, count, at.size, d.algos, tune, root, at.name, op_traits<Op>::name(),
                        m ? m->segments : 0, d.trees, last < L.ndims() && cp.dims[last].shared);
  pl.accumulation = at.note;
  if (one_shot_applies({kind, count, at.size, L.size, root}, o, one_shot_staging, L.written_extents))
    pl.one_shot = one_shot_text({kind, count, at.size, L.size, root}, o, one_shot_staging);
  for (auto& st : pl.stages)
    st.shared_access = (st.ph == phase::reduce_scatter || st.ph == phase::all_gather ||
                        ((st.ph == phase::broadcast || st.ph == phase::reduce) && !d.trees)) &&
                       cp.dims[st.dim].shared;
  // The pull form where it pays (a widened call runs on node memory of its own:
  // nothing to stream).
  bool streams = false;
  for (std::size_t e = 0; e < L.ndims() && at.size == sizeof(T); ++e) streams |= cp.stream_pays[e] != 0;
  if (streams && kind == collective::broadcast)
    pl.streaming =
        "buffers not from node_alloc (on any rank): streamed through node memory from the call after "
        "the first such one (tune.stream_broadcast_min_bytes): a root whose buffer is not node memory "
        "copies it into node memory, which the others map and copy from";
  else if (streams && kind == collective::reduce_scatter)
    pl.streaming =
        "buffers not from node_alloc (on any rank): streamed through node memory from the call after "
        "the first such one (tune.stream_blocks_min_bytes): a rank whose sendbuf is not node memory "
        "copies the blocks its peers fold into node memory, which they map and fold from";
  else if (streams && kind == collective::all_gather)
    pl.streaming =
        "buffers not from node_alloc (on any rank): streamed through node memory from the call after "
        "the first such one (tune.stream_blocks_min_bytes): a rank whose recvbuf is not node memory "
        "copies its block into node memory, which the others map and copy from";
  else if (streams)
    pl.streaming =
        "buffers not from node_alloc (on any rank): streamed through node memory from the call after "
        "the first such one (tune.cma_gamma, copy_gamma, stream_min_bytes): each such rank copies the "
        "peers' blocks into node memory, and the all-gather reads the peers' results (one more "
        "synchronization per segment)";
  if (m) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "measured (options.planning = measure): %zu candidates timed at the first call of this "
                  "size class; this plan took %s, the estimate's %s",
                  m->candidates, detail::human_seconds(m->seconds).c_str(),
                  detail::human_seconds(m->estimate_seconds).c_str());
    pl.chosen_by = buf;
  } else if (kind == collective::all_reduce && o.planning == planning::measure) {
    pl.chosen_by = "estimated: options.planning = measure measures this size class at its first call";
  }
  pl.written = L.written;
  pl.reproducible = o.reproducible;
  return pl;
}

}  // namespace detail

/// explain() without binding: the plan of `count` elements of T on `rank` of a
/// topology (a compile-time one without dynamic extent, or a resolved runtime one).
template <class T = float, class Op = sum_t, class Topology>
std::string explain(const Topology& topo, std::size_t count, collective kind = collective::all_reduce,
                    std::size_t rank = 0, Op = {}, const options& opts = {}, std::size_t root = 0) {
  runtime_topology rt = detail::to_runtime(topo);
  if (!rt.is_static())
    throw topology_error("topology", "mdring::explain: \"" + rt.to_string() +
                                         "\" has a dynamic extent; resolve() it with the number of ranks first");
  if (rank >= rt.size())
    throw invalid_argument("rank", "mdring::explain: rank " + std::to_string(rank) + " is not below the size " +
                                       std::to_string(rt.size()) + " of \"" + rt.to_string() + "\"");
  // What a communicator bound to it would run (plan/bound_layout.hpp, the bind every path runs).
  options o = opts;
  const bound_layout L = bind_layout(rt, rt.size(), rank, o, bind_path::host, "explain");
  return detail::plan_of_call<T, Op>(L, o, kind, count, root, {}, false, nullptr).to_string();
}

MDRING_NAMESPACE_END
