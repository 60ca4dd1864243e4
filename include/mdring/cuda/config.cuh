// mdring/cuda/config.cuh: what every CUDA header of mdring shares.
//
//   MDRING_KERNEL              __global__ with hidden visibility: a kernel (and its host
//                              stub) never leaks out of the shared object that
//                              instantiated it, so two libraries that both include
//                              mdring do not collide (everything is also inside the
//                              versioned inline namespace mdring::v0)
//   cuda::detail::check(e, what)   throws mdring::cuda_error naming the call
//   cuda::unique_handle, unique_stream, unique_event   owning handles
//   cuda::detail::capturing(s)     the stream is being captured into a CUDA graph
//
// Only .cuh headers include CUDA; the .hpp headers stay plain C++.
#pragma once

#include "../config.hpp"
#include "../error.hpp"

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#define MDRING_KERNEL __global__ MDRING_HIDDEN

MDRING_NAMESPACE_BEGIN

/// The GPU path: communicators on device buffers, their collectives and device transports.
namespace cuda {

namespace detail {

inline std::string error_text(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

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

// The device's SM count, asked once per device (every fold launch needs it).
inline int sm_count(int device) {
  constexpr int cached = 64;
  static std::atomic<int> known[cached] = {};
  if (device >= 0 && device < cached)
    if (const int n = known[device].load(std::memory_order_relaxed)) return n;
  int n = 0;
  check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  n = n > 0 ? n : 1;
  if (device >= 0 && device < cached) known[device].store(n, std::memory_order_relaxed);
  return n;
}

inline std::uintptr_t address(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }

}  // namespace detail

/// An owning handle: Destroy{}(h) releases a non-null H. Move-only.
template <class H, class Destroy>
class unique_handle {
public:
  unique_handle() = default;
  /// Owns h.
  explicit unique_handle(H h) noexcept : h_(h) {}
  /// Moves: `o` is left empty.
  ///@{
  unique_handle(unique_handle&& o) noexcept : h_(std::exchange(o.h_, H{})) {}
  unique_handle& operator=(unique_handle&& o) noexcept {
    if (this != &o) reset(std::exchange(o.h_, H{}));
    return *this;
  }
  ///@}
  ~unique_handle() { reset(); }
  H get() const noexcept { return h_; }                    ///< the handle, still owned
  H release() noexcept { return std::exchange(h_, H{}); }  ///< the handle, no longer owned
  /// Releases the handle held, and owns h.
  void reset(H h = H{}) noexcept {
    if (h_) Destroy{}(h_);
    h_ = h;
  }
  explicit operator bool() const noexcept { return h_ != H{}; }  ///< owns a handle

private:
  H h_{};
};

namespace detail {
struct stream_destroy {
  void operator()(cudaStream_t s) const noexcept { cudaStreamDestroy(s); }
};
struct event_destroy {
  void operator()(cudaEvent_t e) const noexcept { cudaEventDestroy(e); }
};
}  // namespace detail

/// An owning cudaStream_t (non-blocking: no implicit synchronization with the legacy stream).
class unique_stream : public unique_handle<cudaStream_t, detail::stream_destroy> {
public:
  /// The constructors of unique_handle.
  using unique_handle::unique_handle;
  /// A new non-blocking stream.
  static unique_stream create() {
    cudaStream_t s = nullptr;
    detail::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return unique_stream(s);
  }
};

/// An owning cudaEvent_t, by default without timing (cheapest to record and wait on).
class unique_event : public unique_handle<cudaEvent_t, detail::event_destroy> {
public:
  /// The constructors of unique_handle.
  using unique_handle::unique_handle;
  /// A new event, by default without timing.
  static unique_event create(unsigned flags = cudaEventDisableTiming) {
    cudaEvent_t e = nullptr;
    detail::check(cudaEventCreateWithFlags(&e, flags), "cudaEventCreateWithFlags");
    return unique_event(e);
  }
};

}  // namespace cuda

MDRING_NAMESPACE_END
