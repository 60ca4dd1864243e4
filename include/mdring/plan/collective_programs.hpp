// mdring/plan/collective_programs.hpp: the five collectives as programs.
//
//   make_program(params)   the program of one rank's call (plan/program.hpp), by
//                          params.kind; a caller that knows its collective can
//                          include that collective's header and call its entry
//                          alone (the same program):
//
//   all_reduce      make_all_reduce_program (plan/all_reduce_program.hpp): per
//                   segment, reduce-scatter in dims 0..k-1 (partials in recvbuf),
//                   all-gather in k-1..0; a shared last dimension fuses the two
//                   (plan/build_stages.hpp fused_rs, streamed_rs)
//   reduce_scatter  make_reduce_scatter_program (plan/reduce_scatter_program.hpp):
//                   reduce-scatter in 0..k-1 (partials in scratch W after the first
//                   stage), sendbuf read in MPI's block order
//   all_gather      make_all_gather_program (plan/all_gather_program.hpp): the
//                   block copied into W, all-gather in k-1..1, then dimension 0
//                   unpacks into recvbuf in MPI's block order (unpack)
//   broadcast       make_broadcast_program (plan/broadcast_program.hpp): scatter
//                   from the root in 0..k-1 (the root's line), all-gather back (a
//                   shared last dimension: the range read from the root in
//                   between, or halves on two ranks: shared_broadcast,
//                   split_broadcast); or (small calls, program_params::trees)
//                   binomial trees of the whole buffer in k-1..0 (broadcast_trees)
//   reduce          make_reduce_program (plan/reduce_program.hpp): reduce-scatter
//                   in 0..k-1, then gather to the root in k-1..0 (a shared last
//                   dimension: both in one stage, whole_reduce's shared_reduce or
//                   split_reduce's shared_reduce_split); or binomial trees to the
//                   root in 0..k-1 (reduce_trees)
//
// Each collective's builder is composed of the same parts (detail::builder_parts,
// made once per program), none derived from another:
//   detail::call_context     the parameters and this rank's place   plan/build_program.hpp
//   detail::buffer_layout    receive slots or scratch parts          plan/build_program.hpp
//   detail::program_writer   the program and its open step           plan/program_writer.hpp
//   detail::stage_emitter    the stages of every algorithm           plan/build_stages.hpp
//
// A recursive_doubling dimension of all_reduce all-reduces its whole range in one
// stage (no all-gather); the dimensions after it cut that range as usual (other
// collectives run halving-doubling there: call_context). Dimensions of extent 1
// have no stage. Scratch: plan/build_program.hpp.
// Postconditions: every rank of a ring of dimension d gets the same number of
// steps in each stage of d, and a message's count is the same at both ends
// (tests/test_program.cpp replays every program of every rank).
#pragma once

#include "../config.hpp"
#include "../vocabulary.hpp"
#include "all_gather_program.hpp"
#include "all_reduce_program.hpp"
#include "broadcast_program.hpp"
#include "build_program.hpp"
#include "build_stages.hpp"
#include "program.hpp"
#include "reduce_program.hpp"
#include "reduce_scatter_program.hpp"

#include <utility>

MDRING_NAMESPACE_BEGIN

/// The program of one rank's call (see the top of this file and plan/program.hpp):
/// for p.kind == collective::X, the same program as make_X_program(p), through the
/// same builder.
inline program make_program(const program_params& p) {
  detail::builder_parts x(p, p.kind);
  switch (p.kind) {
    case collective::all_reduce:
      detail::all_reduce_builder(x).write();
      break;
    case collective::reduce_scatter:
      detail::reduce_scatter_builder(x).write();
      break;
    case collective::all_gather:
      detail::all_gather_builder(x).write();
      break;
    case collective::broadcast:
      detail::broadcast_builder(x).write();
      break;
    default:
      detail::reduce_builder(x).write();
      break;
  }
  return std::move(x).finish();
}

/// The builder of one collective's programs (what program_cache::get takes).
inline program (*builder_of(collective kind) noexcept)(const program_params&) {
  switch (kind) {
    case collective::all_reduce:
      return make_all_reduce_program;
    case collective::reduce_scatter:
      return make_reduce_scatter_program;
    case collective::all_gather:
      return make_all_gather_program;
    case collective::broadcast:
      return make_broadcast_program;
    default:
      return make_reduce_program;
  }
}

MDRING_NAMESPACE_END
