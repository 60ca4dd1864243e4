// mdring/cuda/mpi_host.cuh: what the MPI link of the GPU path (cuda/mpi.cuh)
// does on the host: whether MPI takes device pointers, waiting on the host for a
// stream under a deadline, how many ranks share a GPU, and pinned staging buffers.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../transport/mpi.hpp"
#include "config.cuh"
#include "engine.cuh"

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

MDRING_NAMESPACE_BEGIN

namespace cuda {

/// Whether this process's MPI library takes device pointers (see the top).
inline bool mpi_is_cuda_aware() {
  if (const char* s = std::getenv("MDRING_CUDA_AWARE_MPI")) return std::string_view(s) != "0";
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#elif defined(MPIX_GPU_SUPPORT_CUDA)
  int yes = 0;
  return MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &yes) == MPI_SUCCESS && yes;
#else
  return false;
#endif
}

namespace detail {

// Waits on the host until the stream has reached `ev`, polling under the deadline
// (and the control channel, so that a peer's failure ends the wait).
inline void wait_for_stream(cudaEvent_t ev, mdring::mpi::transport& tr, const step_context& cx) {
  for (unsigned spin = 0;; ++spin) {
    const cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) check(e, "cudaEventQuery");
    if ((spin & 63) == 63) {
      const wait_status st = tr.shared_failure();
      if (st.kind == wait_status::peer_failed)
        throw remote_error(cx.where() + ": rank " + std::to_string(st.failed_rank) + " failed: " + st.reason,
                           st.failed_rank);
      if (deadline_clock::now() >= cx.deadline)
        throw timeout_error(cx.where() + ": timed out waiting for the GPU to reach the MPI transfer", cx.collective,
                            cx.dim, std::string(to_string(cx.ph)), cx.step, cx.rank);
      std::this_thread::yield();
    }
  }
}

// How many ranks of `comm` use the same GPU as some other rank (by device UUID,
// unique across machines); collective over comm.
inline std::size_t ranks_sharing_a_gpu(MPI_Comm comm, int device) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  int n = 0;
  MPI_Comm_size(comm, &n);
  std::vector<char> all(std::size_t(n) * sizeof prop.uuid);
  mdring::mpi::detail::check(
      MPI_Allgather(&prop.uuid, int(sizeof prop.uuid), MPI_BYTE, all.data(), int(sizeof prop.uuid), MPI_BYTE, comm),
      "MPI_Allgather");
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) ids.emplace_back(all.data() + std::size_t(i) * sizeof prop.uuid, sizeof prop.uuid);
  std::sort(ids.begin(), ids.end());
  std::size_t shared = 0;
  for (std::size_t i = 0; i < ids.size(); ++i)
    shared += (i > 0 && ids[i] == ids[i - 1]) || (i + 1 < ids.size() && ids[i] == ids[i + 1]);
  return shared;
}

// Pinned host memory that grows and is reused.
class pinned_buffer {
public:
  pinned_buffer() = default;
  pinned_buffer(pinned_buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  pinned_buffer& operator=(pinned_buffer&& o) noexcept {
    if (this != &o) release(), p_ = std::exchange(o.p_, nullptr), bytes_ = std::exchange(o.bytes_, 0);
    return *this;
  }
  ~pinned_buffer() { release(); }
  char* get(std::size_t bytes) {
    if (bytes > bytes_) {
      release();
      check(cudaMallocHost(&p_, bytes), "cudaMallocHost");
      bytes_ = bytes;
    }
    return static_cast<char*>(p_);
  }

private:
  void release() noexcept {
    if (p_) cudaFreeHost(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace detail

}  // namespace cuda

MDRING_NAMESPACE_END
