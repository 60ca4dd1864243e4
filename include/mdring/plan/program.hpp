// mdring/plan/program.hpp: what one rank does in one call, as data.
//
// Every collective of every executor is written once, here in plan/, as a
// program: a list of steps in a small vocabulary. The host executor
// (executor/host/) and the GPU executor (cuda/) both run programs; neither knows
// the algorithms. A step is
//
//   pre     local operations before any message (pack a permuted block, copy a
//           small range into this rank's staging buffer)
//   sends, recvs
//           messages to and from coordinates of the step's dimension
//   sync    what the step waits for: its messages (`messages`); every peer of the
//           dimension having published its buffers (`arrive`: shared access, the
//           ranks of a node reading each other's memory); every peer being done
//           with this rank's buffers (`leave`); or nothing (`none`)
//   ops     local operations once the sync has passed: folds (dst = in_0 op in_1
//           op ... in coordinate order, finalized when `final`) and copies, whose
//           inputs and outputs may be peers' published buffers
//
// Buffers are named, not pointed at (a `slice` is a region and an element offset),
// so a program serves every call with the same arguments whatever the pointers,
// and each executor resolves regions its own way: the host's receive slots belong
// to whichever of its pipeline slots the segment got, the GPU's to the segment.
//
//   send, recv     the user's buffers (broadcast's buffer is recv)
//   scratch        the call's scratch; `slot`: the segment's receive slots
//   peer_src/dst   what peer `peer` published at the step's arrive, `offset`
//                  elements further (in the peer's memory)
//   staging        peer `peer`'s staging buffer of the stage just arrived at;
//   staging_next   this rank's staging buffer for the next arrive
//   source, result what this rank's peers read of it on a streamed dimension
//                  (build_program.hpp dim_program::streamed): its sendbuf and
//                  recvbuf, or, where the executor streams them, one block of node
//                  memory that holds both (the program copies the peers' blocks of
//                  send into it, and this rank's results land there too)
//
// A call of all_reduce is cut into segments (plan/pipeline.hpp); the steps are
// stored segment after segment, and every segment has the same stages, with the
// same number of steps in each stage on every rank (an empty range still has its
// steps; they post nothing). Executors interleave the segments: the host admits
// a new segment when the newest has left its first stage; the GPU enqueues a
// wavefront (wavefront_order). Either way every rank runs the same sequence of
// (segment, stage, step), which is what keeps NCCL, the lock-step local executor
// and shared access (whose arrive/leave must come in the same order on every
// rank) free of deadlock.
//
// Example, 2 ranks ("shm:2", direct, by messages), all_reduce of 10 elements,
// rank 0: step 0 (reduce-scatter) receives rank 1's [0, 5) into slot 0 and sends
// send[5, 10) to rank 1, waits, then folds recv[0, 5) = send[0, 5) op slot[0, 5)
// (final); step 1 (all-gather) receives recv[5, 10) and sends recv[0, 5).
// Builders: plan/build_program.hpp. Tests: tests/test_program.cpp replays the
// programs of every collective on the host for all ranks at once.
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "../vocabulary.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// Where a slice lies: the user's buffers, scratch, receive slots, peers' published buffers, staging (the table above).
enum class region : std::uint8_t {
  send,
  recv,
  scratch,
  slot,
  peer_src,
  peer_dst,
  staging,
  staging_next,
  source,
  result
};

/// Elements [offset, offset + count) of a region (the count is held by the user of the slice).
struct slice {
  region where = region::recv;  ///< the region
  std::uint32_t peer = 0;       ///< peer_src, peer_dst, staging: the peer's coordinate in the step's dimension
  std::size_t offset = 0;       ///< elements from the region's start
  friend constexpr bool operator==(const slice&, const slice&) = default;
  /// True for the regions in a peer's memory (peer_src, peer_dst, staging).
  constexpr bool remote() const noexcept {
    return where == region::peer_src || where == region::peer_dst || where == region::staging;
  }
};

/// One message: `count` elements at `at`, to or from the rank at coordinate `peer`
/// of the step's dimension.
struct transfer {
  std::size_t peer = 0;   ///< the peer's coordinate in the step's dimension
  slice at;               ///< where the elements are
  std::size_t count = 0;  ///< elements
};

/// A local operation on `count` elements: a fold writes in_0 op in_1 op ... op
/// in_{ins-1} (coordinate order; one input is a copy, finalized when `final`) to
/// every output; a copy copies its one input to every output (and skips an output
/// that is the input). `nontemporal`: the outputs are large enough to bypass caches.
struct local_op {
  /// What the op does: fold its inputs, or copy its one input.
  enum kind_t : std::uint8_t { fold, copy } kind = fold;  ///< fold or copy
  /// `final`: the fold finalizes (avg's division); `nontemporal`: the outputs bypass caches.
  ///@{
  bool final = false, nontemporal = false;
  ///@}
  std::size_t count = 0;  ///< elements
  /// The op's outputs and inputs: first index and number, into program::slices.
  ///@{
  std::size_t first_out = 0, outs = 0;  ///< into program::slices
  std::size_t first_in = 0, ins = 0;
  ///@}
};

/// What a step waits for before its ops: nothing, its messages, every peer's arrive, or every peer's leave.
enum class sync_kind : std::uint8_t { none, messages, arrive, leave };

/// One step of a program: its pre ops, messages, sync and ops (see the table above), as index ranges into the program's
/// arrays.
struct program_step {
  std::size_t segment = 0;           ///< the segment the step belongs to
  std::size_t stage = 0;             ///< index into the segment's stages
  std::size_t dim = 0;               ///< executed dimension
  std::size_t index = 0;             ///< step within the stage (ring: 0 .. p-2); in messages' tags and errors
  phase ph = phase::reduce_scatter;  ///< what the step's stage does to its range
  /// The first and the last step of its stage.
  ///@{
  bool stage_begin = false, stage_end = false;
  ///@}
  sync_kind sync = sync_kind::none;  ///< what the step waits for
  ///@{
  std::size_t first_pre = 0, pre = 0;  ///< into program::ops
  ///@}
  /// The step's sends: first index and number, into program::sends.
  ///@{
  std::size_t first_send = 0, sends = 0;
  ///@}
  /// The step's receives: first index and number, into program::recvs.
  ///@{
  std::size_t first_recv = 0, recvs = 0;
  ///@}
  ///@{
  std::size_t first_op = 0, ops = 0;  ///< into program::ops
  ///@}
  ///@{
  /// arrive: what this rank publishes (peers read peer_src / peer_dst relative to
  /// it), and the stage's range in elements, which every peer must agree on.
  slice publish_src{}, publish_dst{};
  bool publishes_src = false, publishes_dst = false;
  std::size_t signature = 0;
  ///@}
};

/// What one rank does in one call: the steps of every segment, and the messages, ops and slices they index into.
struct program {
  collective kind = collective::all_reduce;  ///< the collective
  std::size_t count = 0;                     ///< the call's count argument
  /// The call's segments, and the elements of each.
  ///@{
  std::size_t segments = 1, segment_length = 0;
  ///@}
  std::vector<std::size_t> stage_dims;     ///< the stages of one segment: dimension and phase of each
  std::vector<phase> stage_phases;         ///< the phase of each stage of one segment
  std::vector<program_step> steps;         ///< segment after segment
  std::vector<std::size_t> segment_begin;  ///< steps of segment s: [segment_begin[s], segment_begin[s+1])
  /// Every step's sends and receives.
  ///@{
  std::vector<transfer> sends, recvs;
  ///@}
  std::vector<local_op> ops;         ///< every step's pre ops and ops
  std::vector<slice> slices;         ///< every op's inputs and outputs
  std::size_t scratch_elements = 0;  ///< the scratch region
  std::size_t slot_elements = 0;     ///< the receive slots of one segment
  bool shared = false;               ///< some step synchronizes by shared access

  /// The step's sends, receives, pre ops and ops, and the op's outputs and inputs, as spans into the program's arrays.
  ///@{
  std::span<const transfer> sends_of(const program_step& s) const { return {sends.data() + s.first_send, s.sends}; }
  std::span<const transfer> recvs_of(const program_step& s) const { return {recvs.data() + s.first_recv, s.recvs}; }
  std::span<const local_op> pre_of(const program_step& s) const { return {ops.data() + s.first_pre, s.pre}; }
  std::span<const local_op> ops_of(const program_step& s) const { return {ops.data() + s.first_op, s.ops}; }
  std::span<const slice> outputs_of(const local_op& o) const { return {slices.data() + o.first_out, o.outs}; }
  std::span<const slice> inputs_of(const local_op& o) const { return {slices.data() + o.first_in, o.ins}; }
  ///@}
  /// Steps of segment `seg`.
  std::size_t steps_of(std::size_t seg) const { return segment_begin[seg + 1] - segment_begin[seg]; }
};

/// The order a stream-ordered executor enqueues the steps in: a wavefront, where
/// at time t segment s runs stage t - s, later segments (earlier stages) first. So
/// a dimension's link works on segment s+1 while the next dimension works on
/// segment s. The same order on every rank.
inline std::vector<std::size_t> wavefront_order(const program& pr) {
  std::vector<std::size_t> order;
  order.reserve(pr.steps.size());
  if (pr.segments <= 1 || pr.steps.empty()) {
    for (std::size_t i = 0; i < pr.steps.size(); ++i) order.push_back(i);
    return order;
  }
  const std::size_t S = pr.stage_dims.size(), K = pr.segments;
  // first step of each stage of each segment
  std::vector<std::size_t> at(K);
  for (std::size_t s = 0; s < K; ++s) at[s] = pr.segment_begin[s];
  for (std::size_t t = 0; t + 1 < S + K; ++t) {
    const std::size_t hi = t < K - 1 ? t : K - 1;
    const std::size_t lo = t >= S - 1 ? t - (S - 1) : 0;
    for (std::size_t seg = hi + 1; seg-- > lo;) {
      const std::size_t stage = t - seg, end = pr.segment_begin[seg + 1];
      while (at[seg] < end && pr.steps[at[seg]].stage == stage) order.push_back(at[seg]++);
    }
  }
  return order;
}

MDRING_NAMESPACE_END
