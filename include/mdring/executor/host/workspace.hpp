// mdring/executor/host/workspace.hpp: what the host executor keeps for one
// communicator, between its calls and during each.
//
// Sized at bind, reused by every call (no allocation once a call's program and
// scratch exist): the request slots (2 p_max + 2 per segment in flight) and what
// each request is for (the hang report, timeouts), the fold's pointer slots, the
// call's decision (plan/call.hpp decide_call) and description (describe_call) in
// reused storage, the program cache (plan/program_cache.hpp), the scratch
// (scratch.hpp), and across calls what the pull form and measured planning learn:
// per dimension whether the last call that noted it had unmapped buffers, and the
// measured plans (plan/wisdom.hpp). The communicator owns one (collective/
// communicator.hpp) and hands it to each call's engine (engine.hpp); nothing
// outside the executor reads it except through the diagnostics below.
#pragma once

#include "../../config.hpp"
#include "../../options.hpp"
#include "../../plan/bound_layout.hpp"
#include "../../plan/call.hpp"
#include "../../plan/program_cache.hpp"
#include "../../plan/stream_choice.hpp"
#include "../../plan/wisdom.hpp"
#include "../../transport/transport.hpp"
#include "scratch.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <memory_resource>
#include <span>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

template <transport Transport>
class call_workspace {
public:
  using request_t = typename Transport::request;
  // What request slot i is for: the dimension, the peer (global rank), send or receive.
  struct request_info {
    std::size_t dim = 0, peer = 0;
    bool is_send = false;
  };
  // options.planning = measure: what measured planning is doing (engine.hpp measure).
  struct measuring_state {
    bool active = false;                      // timing candidates: no new measurement, no wisdom
    const measured_choice* forced = nullptr;  // the candidate being timed
  };

  // node_blocks: the widened calls' and the pull form's blocks come from node memory
  // (processes of a node with shared memory on).
  call_workspace(const bound_layout& L, const options& o, wisdom measured, bool node_blocks)
      : scratch_(o.memory), blocks_(std::make_shared<block_pool>(o.memory, node_blocks)), wisdom_(std::move(measured)) {
    std::size_t pmax = 1;
    for (std::size_t e : L.extents) pmax = e > pmax ? e : pmax;
    per_slot_ = 2 * pmax + 2;  // one set of request slots per segment an all_reduce has in flight
    reqs_.reset(new request_t[per_slot_ * o.tune.pipeline_depth]);
    infos_.resize(per_slot_ * o.tune.pipeline_depth);
    ptrs_.resize(pmax);
    unmapped_.assign(L.ndims(), 0);
    access_.resize(L.ndims());
  }
  call_workspace(const call_workspace&) = delete;
  call_workspace& operator=(const call_workspace&) = delete;

  // ---- the call in flight --------------------------------------------------------------
  // Request slot `slot` (a pipeline slot) holds per_slot() requests.
  std::size_t per_slot() const noexcept { return per_slot_; }
  request_t* requests(std::size_t slot = 0) noexcept { return reqs_.get() + slot * per_slot_; }
  request_info& info(std::size_t index) noexcept { return infos_[index]; }
  // A fold's input pointers (at most one per rank of a dimension).
  const void** pointers() noexcept { return ptrs_.data(); }

  // What the call runs (plan/call.hpp), in reused storage.
  const call_decision& decide(const call_request& r, std::span<const algorithm> required = {}) {
    decide_call(decision_, r, required);
    return decision_;
  }
  // Per executed dimension, what the transport can do there (the engine fills it
  // before program_for; reused storage).
  std::span<dim_access> access() noexcept { return access_; }
  // The program of the call decided last, for `c` on L with `access`: described,
  // then found in the cache or built by `build` (the collective's builder,
  // plan/collective_programs.hpp). The reference lasts until the next call.
  const program& program_for(const call_shape& c, const bound_layout& L, std::span<const dim_access> access,
                             const tuning& tune, bool between_processes, program_cache::builder build) {
    describe_call(described_, decision_, c, L, access, tune, executor_profile::on_host(between_processes));
    return programs_.get(described_.params, build);
  }
  const call_decision& decision() const noexcept { return decision_; }
  const call_program& description() const noexcept { return described_; }
  std::uint64_t programs_built() const noexcept { return programs_.built(); }

  // ---- across calls ------------------------------------------------------------------
  // Executed dimension d: the last all_reduce that noted it had buffers some rank's
  // peers could not map (core.hpp sync; dim_access::unmapped).
  bool unmapped(std::size_t d) const noexcept { return unmapped_[d] != 0; }
  void note_unmapped(std::size_t d, bool any) noexcept { unmapped_[d] = any; }

  // The one-shot path (one_shot.hpp): calls (the agreement's included) that ran
  // one-shot so far, and whether the last collective of a call did (tests, diagnostics).
  std::uint64_t one_shot_calls() const noexcept { return one_shot_calls_; }
  bool last_one_shot() const noexcept { return last_one_shot_; }
  void note_one_shot(bool taken) noexcept {
    one_shot_calls_ += taken;
    last_one_shot_ = taken;
  }
  // Stages of the flat channel this rank has begun (a streamed call takes several:
  // one_shot.hpp), this one included.
  std::uint64_t one_shot_stages() const noexcept { return one_shot_stages_; }
  void note_one_shot_stage() noexcept { ++one_shot_stages_; }
  // The one-shot path's view of its peers: every other rank has arrived at least at
  // this stage of the flat channel (as last seen; one_shot.hpp reads their words again
  // only when it needs a later stage).
  std::uint32_t one_shot_peers() const noexcept { return one_shot_peers_; }
  void note_one_shot_peers(std::uint32_t stage) noexcept { one_shot_peers_ = stage; }
  // The stage at which this rank last wrote its one-shot data buffer `parity` (0: not yet).
  std::uint32_t one_shot_buffer(std::size_t parity) const noexcept { return one_shot_buffer_[parity]; }
  void note_one_shot_buffer(std::size_t parity, std::uint32_t stage) noexcept { one_shot_buffer_[parity] = stage; }
  // Broadcasts and reduces above the one-shot cap: streamed or by their programs, as
  // timing both on their first calls decided (plan/stream_choice.hpp; armed at bind
  // where the distance did not decide).
  stream_choice& streams() noexcept { return streams_; }
  const stream_choice& streams() const noexcept { return streams_; }

  // Measured planning: the plans measured so far, and what is being measured.
  wisdom& measured_plans() noexcept { return wisdom_; }
  const wisdom& measured_plans() const noexcept { return wisdom_; }
  measuring_state& measuring() noexcept { return measuring_; }

  // Scratch: one growing block (scratch.hpp workspace), and the pool of blocks for
  // widened calls and the pull form.
  workspace& scratch() noexcept { return scratch_; }
  const workspace& scratch() const noexcept { return scratch_; }
  block_pool& blocks() noexcept { return *blocks_; }

private:
  std::size_t per_slot_ = 0;
  std::unique_ptr<request_t[]> reqs_;
  std::vector<request_info> infos_;
  std::vector<const void*> ptrs_;
  call_decision decision_;
  call_program described_;
  program_cache programs_;
  std::vector<unsigned char> unmapped_;
  std::vector<dim_access> access_;
  workspace scratch_;
  std::shared_ptr<block_pool> blocks_;
  wisdom wisdom_;
  measuring_state measuring_;
  std::uint64_t one_shot_calls_ = 0, one_shot_stages_ = 0;
  bool last_one_shot_ = false;
  std::uint32_t one_shot_peers_ = 0;
  std::uint32_t one_shot_buffer_[2] = {0, 0};
  stream_choice streams_;
};

}  // namespace detail

MDRING_NAMESPACE_END
