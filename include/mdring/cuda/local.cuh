// mdring/cuda/local.cuh: several logical ranks on one GPU, in one process.
//
//   mdring::cuda::local_world world(8);  // 8 logical ranks on the current device
//   auto comms = mdring::cuda::bind(mdring::ring<mdring::nvlink, 2> * mdring::ring<mdring::infiniband, 4>, world);
//   mdring::cuda::all_reduce(std::span(comms), sendbufs, recvbufs, n, mdring::sum, streams);
//
// It runs the full multi-dimensional schedule of a real machine (every dimension,
// its algorithm, the segments of the pipeline) with only the data movement made
// local, so the GPU path can be run and tested on a single GPU. The link tags keep
// their meaning for the algorithms and the cost model (nvlink: direct, infiniband:
// ring).
//
// Each rank has its own buffers, scratch, streams and events. One call enqueues
// every rank's work, step by step in lock step (step i of every rank, then step
// i+1), from one host thread, so nothing ever waits on the host:
//   - a message is a cudaMemcpyAsync on the receiver's stream, after an event
//     recorded on the sender's stream when its data was ready;
//   - the sender's stream then waits for the receiver's copy before it goes on,
//     so it never overwrites a block that is still being copied;
//   - then every rank's folds of the step, on its own stream.
// `streams` holds one stream per rank (each rank's work is ordered after what is
// already on its stream, and the stream's later work after it), or one stream
// for all, or none (the default stream). The call can be captured into a CUDA
// graph: capture one stream, or fork every rank's stream from the captured one.
#pragma once

#include "../error.hpp"
#include "../options.hpp"
#include "../topology/ring.hpp"
#include "../topology/runtime.hpp"
#include "collectives.cuh"
#include "config.cuh"
#include "engine.cuh"

#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace cuda {

/// The link of one dimension of a local rank: two events, "my data is ready" and
/// "my copies are done" (re-recorded every step; lock step makes that safe).
struct local_link {
  static constexpr bool lock_step = true;  ///< its ranks are all driven at once by one thread
  /// Recorded by a rank when its data is ready and when its copies are done.
  ///@{
  unique_event ready, done;
  ///@}

  /// A link with two new events.
  static local_link create() { return {unique_event::create(), unique_event::create()}; }
  bool capturable() const noexcept { return true; }  ///< its steps can be captured into a CUDA graph
};

/// `ranks` logical ranks on `device` (-1: the current device).
class local_world {
public:
  /// `ranks` logical ranks on `device` (-1: the current device).
  explicit local_world(std::size_t ranks, int device = -1) : ranks_(ranks), device_(device) {
    if (ranks == 0) throw invalid_argument("ranks", "mdring::cuda::local_world: ranks must be at least 1");
    if (device_ < 0) device_ = detail::current_device();
    int n = 0;
    detail::check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
    if (device_ >= n)
      throw invalid_argument("device", "mdring::cuda::local_world: device " + std::to_string(device_) +
                                           " does not exist (this machine has " + std::to_string(n) + ")");
  }
  std::size_t size() const noexcept { return ranks_; }  ///< logical ranks
  int device() const noexcept { return device_; }       ///< the device they run on

private:
  std::size_t ranks_;
  int device_;
};

/// A communicator of a local_world.
template <class Topology>
using local_communicator = communicator<Topology, local_link>;

/// One communicator per logical rank, in rank order.
template <class Topology>
  requires static_topology<Topology> || std::same_as<Topology, runtime_topology>
std::vector<local_communicator<Topology>> bind(const Topology& topo, const local_world& world, options opts = {}) {
  detail::device_guard g(world.device());
  device_transport_support support;
  support.local = true;
  std::vector<local_communicator<Topology>> comms;
  comms.reserve(world.size());
  for (std::size_t r = 0; r < world.size(); ++r) {
    comms.emplace_back(topo, world.size(), r, opts, support, world.device());
    auto& c = comms.back();
    for (std::size_t d = 0; d < c.executed_extents().size(); ++d)
      if (c.executed_extents()[d] > 1) c.set_link(d, local_link::create());
  }
  return comms;
}

namespace detail {

template <class Topology>
local_link& local_of(local_communicator<Topology>& c, std::size_t d) {
  return std::get<local_link>(c.link(d));
}

// Step i of every rank: the copies (receiver's stream, after the sender's data),
// the senders' waits for them, then the folds.
template <class Topology, class T, class Op>
void local_step(std::span<local_communicator<Topology>> comms, std::span<const program* const> sch,
                std::span<const call_buffers<T>> b, std::size_t i, const Op& op, std::span<cudaStream_t> s) {
  const std::size_t P = comms.size();
  const program_step& s0 = sch[0]->steps[i];
  const std::size_t d = s0.dim;
  bool messages = false;
  for (std::size_t r = 0; r < P; ++r) {
    const program_step& st = sch[r]->steps[i];
    s[r] = comms[r].calls().streams().enter(st);
    run_ops(*sch[r], sch[r]->pre_of(st), st, b[r], op, P, s[r]);
    messages |= st.sends + st.recvs > 0;
  }
  if (messages) {
    for (std::size_t r = 0; r < P; ++r)
      if (sch[r]->steps[i].sends) check(cudaEventRecord(local_of(comms[r], d).ready.get(), s[r]), "cudaEventRecord");
    for (std::size_t r = 0; r < P; ++r) {
      const program_step& st = sch[r]->steps[i];
      const std::size_t me = comms[r].executed_coordinates()[d];
      for (const auto& m : sch[r]->recvs_of(st)) {
        const std::size_t j = comms[r].members(d)[m.peer];
        const transfer* from = nullptr;
        for (const auto& x : sch[j]->sends_of(sch[j]->steps[i]))
          if (x.peer == me) from = &x;
        if (!from || from->count != m.count)
          throw transport_error("mdring::cuda::all_reduce: rank " + std::to_string(j) + " sends " +
                                    (from ? std::to_string(from->count) : std::string("nothing")) + " where rank " +
                                    std::to_string(r) + " expects " + std::to_string(m.count) +
                                    " elements (an internal error: the programs disagree)",
                                0);
        check(cudaStreamWaitEvent(s[r], local_of(comms[j], d).ready.get(), 0), "cudaStreamWaitEvent");
        check(cudaMemcpyAsync(b[r].at(m.at, st.segment), b[j].at(from->at, st.segment), m.count * sizeof(T),
                              cudaMemcpyDeviceToDevice, s[r]),
              "cudaMemcpyAsync");
      }
      if (st.recvs) check(cudaEventRecord(local_of(comms[r], d).done.get(), s[r]), "cudaEventRecord");
    }
    for (std::size_t r = 0; r < P; ++r)
      for (const auto& x : sch[r]->sends_of(sch[r]->steps[i])) {
        const std::size_t k = comms[r].members(d)[x.peer];
        check(cudaStreamWaitEvent(s[r], local_of(comms[k], d).done.get(), 0), "cudaStreamWaitEvent");
      }
  }
  for (std::size_t r = 0; r < P; ++r) {
    const program_step& st = sch[r]->steps[i];
    run_ops(*sch[r], sch[r]->ops_of(st), st, b[r], op, P, s[r]);
    comms[r].calls().streams().leave(st, s[r]);
  }
}

}  // namespace detail

/// all_reduce over every rank of a local world at once: sendbufs[r] and recvbufs[r]
/// are rank r's device buffers of `count` elements (in place when equal); streams
/// as described at the top of this file. Postcondition as for all_reduce
/// (communicator.cuh): every recvbufs[r] holds the same bits.
template <class Topology, class T, class Op = sum_t>
void all_reduce(std::span<local_communicator<Topology>> comms, std::span<const T* const> sendbufs,
                std::span<T* const> recvbufs, std::size_t count, Op op = {},
                std::span<const cudaStream_t> streams = {}) {
  using C = local_communicator<Topology>;
  mdring::detail::static_checks<C, T, Op>();
  static_assert(!std::is_same_v<std::remove_cv_t<T>, long double>,
                "mdring::cuda::all_reduce: long double has no device representation; use double");
  constexpr const char* name = "all_reduce";
  if (comms.empty()) throw invalid_argument("comms", "mdring::cuda::all_reduce: comms is empty");
  const std::size_t P = comms[0].size();
  if (comms.size() != P)
    throw invalid_argument("comms", "mdring::cuda::all_reduce: comms has " + std::to_string(comms.size()) +
                                        " communicators but the world has " + std::to_string(P) +
                                        " ranks; pass every rank's communicator, in rank order");
  for (std::size_t r = 0; r < P; ++r) {
    detail::check_usable(comms[r], name);
    if (comms[r].rank() != r || comms[r].size() != P || comms[r].device() != comms[0].device())
      throw invalid_argument("comms", "mdring::cuda::all_reduce: comms[" + std::to_string(r) + "] is not rank " +
                                          std::to_string(r) +
                                          " of the same local world; pass the communicators bind() returned, in order");
  }
  auto sizes = [&](std::size_t n, const char* arg) {
    if (n != P)
      throw invalid_argument(arg, std::string("mdring::cuda::all_reduce: ") + arg + " has " + std::to_string(n) +
                                      " entries, expected one per rank (" + std::to_string(P) + ")");
  };
  sizes(sendbufs.size(), "sendbufs");
  sizes(recvbufs.size(), "recvbufs");
  if (streams.size() > 1) sizes(streams.size(), "streams");
  for (std::size_t r = 0; r < P; ++r)
    if (auto err = detail::check_all_reduce<C, T, Op>(comms[r], sendbufs[r], recvbufs[r], count, name))
      throw invalid_argument(err->argument == "sendbuf"   ? "sendbufs"
                             : err->argument == "recvbuf" ? "recvbufs"
                                                          : err->argument,
                             err->what + " (rank " + std::to_string(r) + ")");
  if constexpr (std::is_trivially_copyable_v<T> && reduction_for<Op, T>) {
    detail::device_guard g(comms[0].device());
    // Errors before the first enqueue leave the communicators usable.
    std::vector<const program*> sch(P);
    std::vector<detail::call_buffers<T>> b(P);
    std::vector<cudaStream_t> user(P), cur(P);
    std::vector<char> capturing(P);
    for (std::size_t r = 0; r < P; ++r) {
      user[r] = streams.empty() ? nullptr : streams[streams.size() == 1 ? 0 : r];
      capturing[r] = detail::capturing(user[r]);
      sch[r] = &comms[r].template program_for<T>(count, op_traits<Op>::commutative, detail::misalignment(recvbufs[r]));
    }
    auto& order = comms[0].calls().order();  // the same on every rank
    order = wavefront_order(*sch[0]);
    for (std::size_t r = 0; r < P; ++r)
      b[r] = detail::buffers_of(*sch[r], sendbufs[r], recvbufs[r],
                                static_cast<T*>(comms[r].calls().workspace().get(
                                    detail::scratch_elements(*sch[r]) * sizeof(T), capturing[r], name)));
    try {
      for (std::size_t r = 0; r < P; ++r)
        comms[r].calls().streams().begin(user[r], comms[r].executed_extents().size(), sch[r]->segments,
                                         capturing[r] != 0);
      for (const std::size_t i : order) detail::local_step<Topology, T, Op>(comms, sch, b, i, op, cur);
      for (std::size_t r = 0; r < P; ++r) comms[r].calls().streams().end();
    } catch (const std::exception& e) {
      for (auto& c : comms) mark_broken(c, e.what());
      throw;
    }
  }
}

/// The same with std::vector arguments (deduces T from them).
template <class Topology, class T, class Op = sum_t>
void all_reduce(std::vector<local_communicator<Topology>>& comms, const std::vector<const T*>& sendbufs,
                const std::vector<T*>& recvbufs, std::size_t count, Op op = {},
                const std::vector<cudaStream_t>& streams = {}) {
  all_reduce<Topology, T, Op>(std::span<local_communicator<Topology>>(comms),
                              std::span<const T* const>(sendbufs.data(), sendbufs.size()),
                              std::span<T* const>(recvbufs.data(), recvbufs.size()), count, op,
                              std::span<const cudaStream_t>(streams.data(), streams.size()));
}

}  // namespace cuda

MDRING_NAMESPACE_END
