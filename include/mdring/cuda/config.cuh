// mdring/cuda/config.cuh: what every CUDA header of mdring shares.
//
//   MDRING_KERNEL              __global__ with hidden visibility: a kernel (and its host
//                              stub) never leaks out of the shared object that
//                              instantiated it, so two libraries that both include
//                              mdring do not collide (everything is also inside the
//                              versioned inline namespace mdring::v0)
//   cuda::detail::check(e, what)   throws mdring::cuda_error naming the call
//   cuda::unique_stream, unique_event   owning handles
//   cuda::detail::capturing(s)     the stream is being captured into a CUDA graph
//
// Only .cuh headers include CUDA; the .hpp headers stay plain C++.
#pragma once

#include "../config.hpp"
#include "../error.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#define MDRING_KERNEL __global__ MDRING_HIDDEN

MDRING_NAMESPACE_BEGIN

namespace cuda {

namespace detail {

inline std::string error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

// Throws cuda_error("mdring::cuda: <what> failed: <name>: <text>") unless e is cudaSuccess.
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear a non-sticky error so that later calls do not report it again
    throw cuda_error(std::string("mdring::cuda: ") + what + " failed: " + error_text(e), int(e));
  }
}

inline bool capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(s, &st), "cudaStreamIsCapturing");
  return st != cudaStreamCaptureStatusNone;
}

inline int current_device() {
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

inline int sm_count(int device) {
  int n = 0;
  check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  return n > 0 ? n : 1;
}

inline std::uintptr_t address(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }

}  // namespace detail

// An owning cudaStream_t (non-blocking: no implicit synchronization with the legacy stream).
class unique_stream {
public:
  unique_stream() = default;
  static unique_stream create() {
    unique_stream s;
    detail::check(cudaStreamCreateWithFlags(&s.s_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return s;
  }
  unique_stream(unique_stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  unique_stream& operator=(unique_stream&& o) noexcept {
    if (this != &o) reset(), s_ = std::exchange(o.s_, nullptr);
    return *this;
  }
  ~unique_stream() { reset(); }
  cudaStream_t get() const noexcept { return s_; }
  explicit operator bool() const noexcept { return s_ != nullptr; }

private:
  void reset() noexcept {
    if (s_) cudaStreamDestroy(s_);
    s_ = nullptr;
  }
  cudaStream_t s_ = nullptr;
};

// An owning cudaEvent_t without timing (cheapest to record and wait on).
class unique_event {
public:
  unique_event() = default;
  static unique_event create(unsigned flags = cudaEventDisableTiming) {
    unique_event e;
    detail::check(cudaEventCreateWithFlags(&e.e_, flags), "cudaEventCreateWithFlags");
    return e;
  }
  unique_event(unique_event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  unique_event& operator=(unique_event&& o) noexcept {
    if (this != &o) reset(), e_ = std::exchange(o.e_, nullptr);
    return *this;
  }
  ~unique_event() { reset(); }
  cudaEvent_t get() const noexcept { return e_; }

private:
  void reset() noexcept {
    if (e_) cudaEventDestroy(e_);
    e_ = nullptr;
  }
  cudaEvent_t e_ = nullptr;
};

namespace detail {
// `waiter` waits (on the GPU) for the work enqueued so far on `signaller`.
inline void order_after(cudaStream_t waiter, cudaStream_t signaller, cudaEvent_t ev) {
  if (waiter == signaller) return;
  check(cudaEventRecord(ev, signaller), "cudaEventRecord");
  check(cudaStreamWaitEvent(waiter, ev, 0), "cudaStreamWaitEvent");
}
}  // namespace detail

}  // namespace cuda

MDRING_NAMESPACE_END
