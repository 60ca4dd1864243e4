// mdring/cuda/engine.cuh: runs an all_reduce program (plan/program.hpp) on streams.
//
// Nothing here waits on the host for the GPU: every step's messages are handed to
// the dimension's transport (NCCL enqueues them on the stream; the local transport
// enqueues copies; only MPI has to synchronize) and the step's folds are enqueued
// behind them. So the whole collective is ordered after the work already on the
// caller's stream, and the caller's later work is ordered after it: stream-ordered,
// and capturable in a CUDA graph when every transport it uses is.
//
// Streams. A call of one segment runs on the caller's stream. A call cut into
// several segments (pipelining across dimensions, plan/pipeline.hpp) runs each
// executed dimension's stages on a stream of its own: the dimension streams wait
// for the caller's stream at the start (fork), a segment's stage waits for its
// previous stage through the segment's event when that ran on another stream,
// and the caller's stream waits for every dimension stream at the end (join).
// Each segment has its own receive slots, so no slot is reused within a call and
// no other ordering is needed within a call. Between calls: a call on another
// stream than the previous call's waits for the previous call (stream_plan).
#pragma once

#include "../error.hpp"
#include "../plan/bound_layout.hpp"
#include "../plan/call.hpp"
#include "../plan/collective_programs.hpp"
#include "../plan/program.hpp"
#include "../plan/program_cache.hpp"
#include "../reduce/ops.hpp"
#include "../transport/transport.hpp"
#include "config.cuh"
#include "reduce.cuh"

#include <cstddef>
#include <memory_resource>
#include <span>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace cuda {

/// One message of a step, as a transport sees it: `bytes` at `ptr`, to or from the
/// rank at coordinate `peer` of the dimension.
struct device_message {
  void* ptr = nullptr;    ///< where the bytes are
  std::size_t bytes = 0;  ///< bytes
  std::size_t peer = 0;   ///< the peer's coordinate in the dimension
};

/// Where a step is, for error messages and deadlines.
struct step_context {
  const char* collective = "all_reduce";  ///< the collective's name
  std::size_t dim = 0;                    ///< executed dimension
  std::string link;                       ///< "nvlink:4"
  phase ph = phase::reduce_scatter;       ///< what the step's stage does
  std::size_t step = 0;                   ///< step within the stage
  std::size_t rank = 0;                   ///< this rank
  deadline_clock::time_point deadline{};  ///< the step's deadline
  const char* label = nullptr;            ///< instead of the above in where() (point to point: "ncclSend")

  /// `mdring::cuda::<collective>: dimension d (link), <phase> step s on rank r`, for error messages.
  std::string where() const {
    if (label) return std::string(label) + " on rank " + std::to_string(rank);
    return std::string("mdring::cuda::") + collective + ": dimension " + std::to_string(dim) + " (" + link + "), " +
           std::string(to_string(ph)) + " step " + std::to_string(step) + " on rank " + std::to_string(rank);
  }
};

namespace detail {

// Makes `device` current for the scope.
class device_guard {
public:
  explicit device_guard(int device) {
    check(cudaGetDevice(&old_), "cudaGetDevice");
    if (old_ != device) check(cudaSetDevice(device), "cudaSetDevice");
    set_ = old_ != device;
  }
  ~device_guard() {
    if (set_) cudaSetDevice(old_);
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

private:
  int old_ = 0;
  bool set_ = false;
};

// Device scratch: one block from options::device_memory (or cudaMalloc) that grows
// to the largest call and is then reused. Growing is refused while the stream is
// being captured (reserve() first). Once a call has been captured into a CUDA
// graph, the graph's nodes hold the block's address: a later, larger call then
// keeps the old block (retired, freed with the workspace) instead of freeing it,
// so that the graph stays valid. Blocks go back only after the device is idle:
// work that was enqueued, by a call whose stream the caller never synchronized,
// may still be using them.
class device_workspace {
public:
  explicit device_workspace(std::pmr::memory_resource* mr = nullptr, int device = 0) : mr_(mr), device_(device) {}
  device_workspace(device_workspace&& o) noexcept
      : mr_(o.mr_),
        device_(o.device_),
        p_(std::exchange(o.p_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)),
        captured_(std::exchange(o.captured_, false)),
        retired_(std::move(o.retired_)) {}
  device_workspace& operator=(device_workspace&& o) noexcept {
    if (this != &o) {
      release_all();
      mr_ = o.mr_, device_ = o.device_, p_ = std::exchange(o.p_, nullptr), bytes_ = std::exchange(o.bytes_, 0);
      captured_ = std::exchange(o.captured_, false), retired_ = std::move(o.retired_);
    }
    return *this;
  }
  ~device_workspace() { release_all(); }

  // `capturing`: the call's stream is being captured (detail::capturing).
  void* get(std::size_t bytes, bool capturing, const char* fn) {
    if (bytes <= bytes_) {
      captured_ |= capturing && bytes > 0;
      return p_;
    }
    if (capturing)
      throw invalid_argument("stream", std::string("mdring::cuda::") + fn + ": device scratch must grow to " +
                                           std::to_string(bytes) +
                                           " bytes while the stream is being captured into a CUDA graph; call "
                                           "comm.reserve<T>(count) (or run the call once) before capturing");
    if (p_) {
      if (captured_) retired_.push_back({p_, bytes_}), captured_ = false;  // the new block is not in a graph yet
      else {
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // work enqueued may still use it
        free_block(p_, bytes_);
      }
      p_ = nullptr, bytes_ = 0;
    }
    const std::size_t rounded = (bytes + (std::size_t(1) << 20) - 1) >> 20 << 20;
    if (mr_) {
      p_ = mr_->allocate(rounded, alignment);
    } else {
      check(cudaMalloc(&p_, rounded), "cudaMalloc");
    }
    bytes_ = rounded;
    return p_;
  }
  std::size_t capacity() const noexcept { return bytes_; }
  // Blocks kept alive for captured graphs (see above).
  std::size_t retired_blocks() const noexcept { return retired_.size(); }

  static constexpr std::size_t alignment = 256;

private:
  struct block {
    void* p;
    std::size_t bytes;
  };
  void free_block(void* p, std::size_t bytes) noexcept {
    if (mr_) mr_->deallocate(p, bytes, alignment);
    else cudaFree(p);
  }
  void release_all() noexcept {
    if (!p_ && retired_.empty()) return;
    int current = 0;
    const bool switch_device = cudaGetDevice(&current) == cudaSuccess && current != device_;
    if (switch_device) cudaSetDevice(device_);
    cudaDeviceSynchronize();  // the blocks' device; a pmr resource would hand a block out at once
    if (p_) free_block(p_, bytes_);
    for (const block& b : retired_) free_block(b.p, b.bytes);
    retired_.clear();
    p_ = nullptr;
    bytes_ = 0;
    if (switch_device) cudaSetDevice(current);
  }
  std::pmr::memory_resource* mr_ = nullptr;
  int device_ = 0;
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
  bool captured_ = false;
  std::vector<block> retired_;
};

// The streams and events of one rank (see the top of this file).
class stream_plan {
public:
  // Streams for `dims` executed dimensions and events for `segments` segments
  // (created once, on the first call that needs them).
  void prepare(std::size_t dims, std::size_t segments) {
    if (segments <= 1) return;
    while (dim_streams_.size() < dims) {
      dim_streams_.push_back(unique_stream::create());
      join_.push_back(unique_event::create());
    }
    if (!fork_.get()) fork_ = unique_event::create();
    while (seg_events_.size() < segments) seg_events_.push_back(unique_event::create());
  }

  // `capturing`: the user's stream is being captured into a CUDA graph.
  void begin(cudaStream_t user, std::size_t dims, std::size_t segments, bool capturing) {
    user_ = user;
    capturing_ = capturing;
    // Calls on one communicator share its scratch, slots and events: a call on
    // another stream than the last one waits (on the GPU) for the last one to
    // end. Not while capturing: a graph may not wait on work outside it, so the
    // caller orders a captured call (and the graph's launches) with the others.
    if (!capturing && has_last_call_ && last_user_ != user)
      check(cudaStreamWaitEvent(user, call_done_.get(), 0), "cudaStreamWaitEvent");
    pipelined_ = segments > 1;
    if (!pipelined_) return;
    prepare(dims, segments);
    last_.assign(segments, nullptr);
    forked_ = dims;
    check(cudaEventRecord(fork_.get(), user), "cudaEventRecord");
    for (std::size_t d = 0; d < dims; ++d)
      check(cudaStreamWaitEvent(dim_streams_[d].get(), fork_.get(), 0), "cudaStreamWaitEvent");
  }

  // The stream step `st` runs on, after what it depends on.
  cudaStream_t enter(const program_step& st) {
    if (!pipelined_) return user_;
    cudaStream_t s = dim_streams_[st.dim].get();
    if (st.stage_begin && last_[st.segment] && last_[st.segment] != s)
      check(cudaStreamWaitEvent(s, seg_events_[st.segment].get(), 0), "cudaStreamWaitEvent");
    return s;
  }
  void leave(const program_step& st, cudaStream_t s) {
    if (!pipelined_ || !st.stage_end) return;
    check(cudaEventRecord(seg_events_[st.segment].get(), s), "cudaEventRecord");
    last_[st.segment] = s;
  }

  // Every forked stream joins back, used or not: a stream left out of the join
  // would make cudaStreamEndCapture fail (cudaErrorStreamCaptureUnjoined).
  void end() {
    if (pipelined_) {
      for (std::size_t d = 0; d < forked_; ++d) {
        check(cudaEventRecord(join_[d].get(), dim_streams_[d].get()), "cudaEventRecord");
        check(cudaStreamWaitEvent(user_, join_[d].get(), 0), "cudaStreamWaitEvent");
      }
      pipelined_ = false;
    }
    if (capturing_) return;  // an event recorded in a capture cannot be waited on outside it
    if (!call_done_.get()) call_done_ = unique_event::create();
    check(cudaEventRecord(call_done_.get(), user_), "cudaEventRecord");
    last_user_ = user_;
    has_last_call_ = true;
  }

private:
  cudaStream_t user_ = nullptr, last_user_ = nullptr;
  bool pipelined_ = false, capturing_ = false, has_last_call_ = false;
  unique_event call_done_;
  std::vector<unique_stream> dim_streams_;
  std::vector<unique_event> join_, seg_events_;
  unique_event fork_;
  std::vector<cudaStream_t> last_;
  std::size_t forked_ = 0;
};

// What a shared-access link (cuda/ipc.cuh) says about the stage it has arrived at,
// as addresses in this process: each peer's published source and destination, each
// peer's staging buffer, and this rank's staging buffer for its next arrive (by
// coordinate in the dimension). Null where nothing was published.
struct remote_view {
  const void* const* src = nullptr;
  void* const* dst = nullptr;
  void* const* staging = nullptr;
  void* staging_next = nullptr;
};

// One rank's buffers for one call: the user's, scratch, and each segment's own
// receive slots (so that no slot is reused within a call and streams need no
// reuse barriers).
template <class T>
struct call_buffers {
  const T* send = nullptr;
  T* recv = nullptr;
  T* scratch = nullptr;  // program::scratch_elements, then the slots
  std::size_t scratch_elements = 0, slot_elements = 0;

  // Where slice s of a step of `segment` is; a peer's region through rv (the
  // step's dimension's remote view).
  T* at(slice s, std::size_t segment, const remote_view* rv = nullptr) const {
    switch (s.where) {
      case region::send:
      case region::source:  // the GPU path streams nothing (dim_program::streamed is host only)
        return const_cast<T*>(send) + s.offset;
      case region::recv:
      case region::result:
        return recv + s.offset;
      case region::scratch:
        return scratch + s.offset;
      case region::slot:
        return scratch + scratch_elements + segment * slot_elements + s.offset;
      default:
        break;
    }
    const void* p = nullptr;
    if (rv) {
      if (s.where == region::peer_src && rv->src) p = rv->src[s.peer];
      else if (s.where == region::peer_dst && rv->dst) p = rv->dst[s.peer];
      else if (s.where == region::staging && rv->staging) p = rv->staging[s.peer];
      else if (s.where == region::staging_next) p = rv->staging_next;
    }
    if (!p)
      throw transport_error(
          "mdring::cuda: a program step reads another rank's memory, but its dimension's "
          "transport published none (an internal error)",
          0);
    return const_cast<T*>(static_cast<const T*>(p)) + s.offset;
  }
};

// Device scratch of a program: its scratch region and every segment's slots.
inline std::size_t scratch_elements(const program& pr) { return pr.scratch_elements + pr.segments * pr.slot_elements; }

template <class T>
call_buffers<T> buffers_of(const program& pr, const T* send, T* recv, T* scratch) {
  return {send, recv, scratch, pr.scratch_elements, pr.slot_elements};
}

// Enqueues local ops (a step's pre or post ops) on stream s: folds as kernels (one
// kernel for all of a fold's outputs), copies as device-to-device copies. rv: the
// step's dimension's remote view, for ops on peers' memory.
template <class T, class Op>
void run_ops(const program& pr, std::span<const local_op> ops, const program_step& st, const call_buffers<T>& b,
             const Op& op, std::size_t ranks, cudaStream_t s, const remote_view* rv = nullptr) {
  thread_local std::vector<const T*> ptrs;  // grow to the largest fold, then reused
  thread_local std::vector<T*> outs;
  for (const auto& o : ops) {
    ptrs.clear();
    outs.clear();
    for (const auto& in : pr.inputs_of(o)) ptrs.push_back(b.at(in, st.segment, rv));
    for (const auto& out : pr.outputs_of(o)) outs.push_back(b.at(out, st.segment, rv));
    if (o.kind == local_op::copy) {
      for (T* dst : outs)
        if (dst != ptrs[0])
          check(cudaMemcpyAsync(dst, ptrs[0], o.count * sizeof(T), cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
      continue;
    }
    fold(std::span<T* const>(outs.data(), outs.size()), std::span<const T* const>(ptrs.data(), ptrs.size()), o.count,
         op, o.final, ranks, s);
  }
}

// The messages of step st as byte pointers.
template <class T>
void step_messages(const program& pr, const program_step& st, const call_buffers<T>& b,
                   std::vector<device_message>& sends, std::vector<device_message>& recvs) {
  sends.clear();
  recvs.clear();
  for (const auto& m : pr.sends_of(st)) sends.push_back({b.at(m.at, st.segment), m.count * sizeof(T), m.peer});
  for (const auto& m : pr.recvs_of(st)) recvs.push_back({b.at(m.at, st.segment), m.count * sizeof(T), m.peer});
}

// Element misalignment of p within 16 bytes (what the schedule shifts slots by).
template <class T>
std::size_t misalignment(const T* p) noexcept {
  constexpr std::size_t V = std::size_t(vector_elements<T>);
  return V > 1 ? (address(p) / sizeof(T)) % V : 0;
}

// What the GPU executor keeps for one communicator, between its calls and during
// each: the call's decision and description (plan/call.hpp) in reused storage, the
// program cache, the order the steps are enqueued in, the messages of a step, the
// streams and events (stream_plan) and the device scratch (device_workspace).
// The communicator owns one (cuda/communicator.cuh) and hands it to each call.
class device_calls {
public:
  device_calls(std::pmr::memory_resource* mr, int device) : ws_(mr, device) {}

  // The program of a call of `c` on layout L (plan/call.hpp decide_call, then
  // describe_call with what each dimension's link can do, `access`), built once per
  // parameters and cached. recv_mis: all_reduce's receive buffer's misalignment
  // (elements modulo a 16-byte vector of vector_elements).
  const program& program_for(const call_shape& c, const bound_layout& L, std::span<const dim_access> access,
                             const tuning& tune, bool commutative, std::size_t vector_elements, std::size_t recv_mis) {
    decide_call(decision_, request_for(L, c.kind, c.count, c.elem_size, commutative, tune));
    describe_call(described_, decision_, c, L, access, tune, executor_profile::on_device(vector_elements, recv_mis));
    return programs_.get(described_.params, builder_of(c.kind));
  }
  const call_decision& decision() const noexcept { return decision_; }
  const call_program& description() const noexcept { return described_; }
  std::uint64_t programs_built() const noexcept { return programs_.built(); }

  // The order the engine enqueues a program's steps in, and a step's messages (reused storage).
  std::vector<std::size_t>& order() noexcept { return order_; }
  std::vector<device_message>& sends() noexcept { return sends_; }
  std::vector<device_message>& recvs() noexcept { return recvs_; }
  device_workspace& workspace() noexcept { return ws_; }
  const device_workspace& workspace() const noexcept { return ws_; }
  stream_plan& streams() noexcept { return streams_; }

private:
  call_decision decision_;
  call_program described_;
  program_cache programs_;
  std::vector<std::size_t> order_;
  std::vector<device_message> sends_, recvs_;
  device_workspace ws_;
  stream_plan streams_;
};

}  // namespace detail

}  // namespace cuda

MDRING_NAMESPACE_END
