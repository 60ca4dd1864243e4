// nccl/dispatch.cuh: one checked NCCL call, issued on mdring: its element type
// and op made C++ types, the collective enqueued on the caller's stream.
//
// NCCL's forms that mdring's calls do not take directly:
// - ncclBroadcast out of place: the root copies sendbuff to recvbuff on the
//   stream, then every rank broadcasts recvbuff in place;
// - PreMulSum: each rank's input is multiplied by the scalar (premul_kernel, into
//   the receive buffer or the communicator's scratch), then summed;
// - ncclAvg: mdring::avg (sum divided once by the ranks; integers truncate);
// - ncclSend and ncclRecv: the communicator's point-to-point link (ncclComm::p2p,
//   cuda/ipc.cuh's ipc_link::p2p), a group's messages enqueued together.
#pragma once

#include "communicator.cuh"
#include "group.hpp"

#include <mdring/cuda/collectives.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace mdring_nccl {

// One call as its entry point checked it (group.hpp queues these).
struct nccl_call {
  const void* comm;  // ncclComm_t, for grouping
  call_kind kind;
  int peer = -1;  // send, recv
  const char* function;
  const void* send;
  void* recv;
  std::size_t count;  // per rank: all_gather's sendcount, reduce_scatter's recvcount
  type_info type;
  op_info op;
  int root = 0;
  cudaStream_t stream;
};

// out[i] = scalar x in[i], the scalar from device memory when given, in float for
// the 16-bit types.
template <class T>
__global__ void premul_kernel(const T* in, T* out, std::size_t n, const T* device_scalar, T host_scalar) {
  const T s = device_scalar ? *device_scalar : host_scalar;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same_v<T, mdring::half>)
      out[i].bits = __half_as_ushort(
          __float2half_rn(__half2float(__ushort_as_half(in[i].bits)) * __half2float(__ushort_as_half(s.bits))));
    else if constexpr (std::is_same_v<T, mdring::bfloat16>)
      out[i].bits = __bfloat16_as_ushort(__float2bfloat16_rn(__bfloat162float(__ushort_as_bfloat16(in[i].bits)) *
                                                             __bfloat162float(__ushort_as_bfloat16(s.bits))));
    else out[i] = T(in[i] * s);
  }
}

template <class T>
void premultiply(const nccl_call& c, const T* in, T* out, std::size_t n) {
  if (n == 0) return;
  T host_scalar{};
  std::memcpy(&host_scalar, c.op.premul.value, sizeof(T));
  const T* dev = static_cast<const T*>(c.op.premul.device);
  const unsigned blocks = unsigned(std::min<std::size_t>((n + 255) / 256, 1024));
  premul_kernel<T><<<blocks, 256, 0, c.stream>>>(in, out, n, dev, host_scalar);
  mdring::cuda::detail::check(cudaGetLastError(), "premul_kernel launch");
}

// The communicator's PreMulSum scratch for n elements of T, once the stream's
// call may reuse it (ncclComm::scratch: the last call that used it has finished
// with it, on whatever stream); done_with_scratch marks this call's use.
template <class T>
T* premul_scratch(ncclComm& comm, std::size_t n, cudaStream_t s) {
  namespace cd = mdring::cuda::detail;
  const std::size_t bytes = std::max<std::size_t>(n * sizeof(T), 1);
  if (!comm.scratch_done)
    cd::check(cudaEventCreateWithFlags(&comm.scratch_done, cudaEventDisableTiming), "cudaEventCreate (PreMulSum)");
  if (bytes > comm.scratch_bytes) {
    if (comm.scratch) {
      cd::check(cudaEventSynchronize(comm.scratch_done), "cudaEventSynchronize (PreMulSum scratch)");
      cd::check(cudaFree(comm.scratch), "cudaFree (PreMulSum scratch)");
      comm.scratch = nullptr;
      comm.scratch_bytes = 0;
    }
    cd::check(cudaMalloc(&comm.scratch, bytes), "cudaMalloc (PreMulSum scratch)");
    comm.scratch_bytes = bytes;
  } else {
    cd::check(cudaStreamWaitEvent(s, comm.scratch_done, 0), "cudaStreamWaitEvent (PreMulSum scratch)");
  }
  return static_cast<T*>(comm.scratch);
}
inline void done_with_scratch(ncclComm& comm, cudaStream_t s) {
  mdring::cuda::detail::check(cudaEventRecord(comm.scratch_done, s), "cudaEventRecord (PreMulSum scratch)");
}

template <class F>
void on_element(element e, F&& f) {
  switch (e) {
    case element::i8:
      return f.template operator()<std::int8_t>();
    case element::u8:
      return f.template operator()<std::uint8_t>();
    case element::i32:
      return f.template operator()<std::int32_t>();
    case element::u32:
      return f.template operator()<std::uint32_t>();
    case element::i64:
      return f.template operator()<std::int64_t>();
    case element::u64:
      return f.template operator()<std::uint64_t>();
    case element::f16:
      return f.template operator()<mdring::half>();
    case element::f32:
      return f.template operator()<float>();
    case element::f64:
      return f.template operator()<double>();
    case element::bf16:
      return f.template operator()<mdring::bfloat16>();
  }
}

// f(op) with mdring's op for a built-in kind (PreMulSum: sum, after premultiply).
template <class F>
void on_op(op_kind k, F&& f) {
  switch (k) {
    case op_kind::sum:
    case op_kind::premul_sum:
      return f(mdring::sum);
    case op_kind::prod:
      return f(mdring::prod);
    case op_kind::max:
      return f(mdring::max);
    case op_kind::min:
      return f(mdring::min);
    case op_kind::avg:
      return f(mdring::avg);
  }
}

// Enqueues a group's sends and receives on one communicator, each on its call's
// stream (the k-th send to a peer meets its k-th receive from this rank); throws
// what mdring throws.
inline void issue_p2p(ncclComm& comm, std::span<const nccl_call> calls) {
  if (calls.empty()) return;
  const char* function = calls.front().function;
  if (!comm.p2p) throw mdring::communicator_error(std::string(function) + ": " + comm.p2p_unavailable);
  std::vector<mdring::cuda::p2p_send> sends;
  std::vector<mdring::cuda::p2p_recv> recvs;
  for (const nccl_call& c : calls) {
    const std::size_t bytes = c.count * c.type.bytes, peer = std::size_t(c.peer);
    if (c.kind == call_kind::send) sends.push_back({c.send, bytes, peer, c.stream});
    else recvs.push_back({c.recv, bytes, peer, c.stream});
  }
  mdring::cuda::detail::device_guard g(comm.device);
  mdring::cuda::step_context cx;
  cx.label = "point to point";
  cx.collective = function;
  cx.rank = std::size_t(comm.rank);
  cx.deadline = mdring::deadline_clock::now() + comm.comm->get_options().timeout;
  try {
    comm.p2p->p2p(sends, recvs, cx);
  } catch (const mdring::invalid_argument& e) {
    if (e.argument() != "peer") mark_broken(*comm.comm, e.what());  // (refused by the schedule: nothing enqueued)
    throw;
  } catch (const std::exception& e) {
    mark_broken(*comm.comm, e.what());  // partly enqueued: the peers were told (ipc_link::p2p)
    throw;
  }
}

// Enqueues c on its stream; throws what mdring throws.
inline void issue(ncclComm& comm, const nccl_call& c) {
  auto& dc = *comm.comm;
  const std::size_t P = std::size_t(comm.size), me = std::size_t(comm.rank);
  mdring::cuda::detail::device_guard g(comm.device);
  switch (c.kind) {
    case call_kind::broadcast: {
      auto* buf = static_cast<std::uint8_t*>(c.recv);
      const std::size_t bytes = c.count * c.type.bytes;
      if (int(me) == c.root && c.send != c.recv && bytes)
        mdring::cuda::detail::check(cudaMemcpyAsync(buf, c.send, bytes, cudaMemcpyDeviceToDevice, c.stream),
                                    "cudaMemcpyAsync (ncclBroadcast's root, out of place)");
      mdring::cuda::broadcast(dc, buf, bytes, std::size_t(c.root), c.stream);
      return;
    }
    case call_kind::all_gather:
      mdring::cuda::all_gather(dc, static_cast<const std::uint8_t*>(c.send), static_cast<std::uint8_t*>(c.recv),
                               c.count * c.type.bytes, c.stream);
      return;
    case call_kind::send:
    case call_kind::recv:
      return issue_p2p(comm, std::span<const nccl_call>(&c, 1));
    default:
      break;
  }
  on_element(c.type.kind, [&]<class T>() {
    const T* send = static_cast<const T*>(c.send);
    T* recv = static_cast<T*>(c.recv);
    on_op(c.op.kind, [&](auto op) {
      const bool premul = c.op.kind == op_kind::premul_sum;
      switch (c.kind) {
        case call_kind::all_reduce:
          if (premul) {
            premultiply(c, send, recv, c.count);  // in place or not, recv then holds the products
            send = recv;
          }
          mdring::cuda::all_reduce(dc, send, recv, c.count, op, c.stream);
          return;
        case call_kind::reduce_scatter:
          if (premul) {
            T* scratch = premul_scratch<T>(comm, P * c.count, c.stream);
            premultiply(c, send, scratch, P * c.count);
            send = scratch;
          }
          mdring::cuda::reduce_scatter(dc, send, recv, c.count, op, c.stream);
          if (premul) done_with_scratch(comm, c.stream);
          return;
        case call_kind::reduce:
          if (premul) {
            T* scratch = premul_scratch<T>(comm, c.count, c.stream);
            premultiply(c, send, scratch, c.count);
            send = scratch;
          }
          mdring::cuda::reduce(dc, send, int(me) == c.root ? recv : nullptr, c.count, std::size_t(c.root), op,
                               c.stream);
          if (premul) done_with_scratch(comm, c.stream);
          return;
        default:
          return;
      }
    });
  });
}

// Tells comm's peers that it failed here (their device waits on it end; their calls
// return ncclRemoteError naming `why`), ends its point-to-point link's waits and,
// with `mark`, marks it unusable (the first reason stays; ncclCommAbort passes
// false and marks it once it holds comm.calls): a failed call, ncclCommAbort,
// ncclCommRevoke, ncclCommShrink with NCCL_SHRINK_ABORT. Frees nothing.
inline void announce_failure(ncclComm& comm, const std::string& why, bool mark = true) {
  if (!comm.comm) return;
  mdring::cuda::detail::device_peers<device_comm>{*comm.comm}.failed_here(why);
  if (comm.p2p) comm.p2p->abort(why);
  if (mark) mark_broken(*comm.comm, why);
}

// Runs f (which issues calls of one communicator) under the communicator's lock;
// a failure is returned and kept for ncclCommGetAsyncError, and one that leaves
// the communicator unusable is announced to its peers (their waits on this rank end).
template <class F>
ncclResult_t issue_guarded(ncclComm& comm, const char* function, F&& f) {
  std::lock_guard l(comm.calls);
  try {
    f();
    return ncclSuccess;
  } catch (...) {
    const ncclResult_t r = from_exception(function);
    // A bad argument found before the enqueue leaves the communicator usable; one
    // found during it (a buffer CUDA IPC cannot share, ranks that disagree) does not.
    if (r != ncclInvalidArgument || !comm.comm->usable()) comm.set_state(int(r), last_error());
    if (comm.state.load() != ncclSuccess) announce_failure(comm, last_error());  // (a second time is harmless)
    return r;
  }
}

// Issues c on its communicator, one call at a time.
inline ncclResult_t issue_checked(const nccl_call& c) {
  auto& comm = *const_cast<ncclComm*>(static_cast<const ncclComm*>(c.comm));
  return issue_guarded(comm, c.function, [&] { issue(comm, c); });
}

}  // namespace mdring_nccl
