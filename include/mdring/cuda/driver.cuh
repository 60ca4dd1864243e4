// mdring/cuda/driver.cuh: the few CUDA driver API calls the IPC transport needs,
// found at run time through the runtime (cudaGetDriverEntryPointByVersion), so
// that a program using mdring links only the CUDA runtime, as before.
//
//   stream_write(s, addr, value)   cuStreamWriteValue32: a flag store, stream-ordered
//                                  (with a memory fence before it: what the stream
//                                  wrote before is visible to whoever sees the flag)
//   stream_wait(s, addr, value)    cuStreamWaitValue32 (CU_STREAM_WAIT_VALUE_EQ): the
//                                  stream waits, on the GPU, until the word equals value
//   allocation_of(p)               the allocation holding device pointer p: its start,
//                                  size, CUDA buffer id, and whether CUDA IPC can share it
#pragma once

#include "config.cuh"

#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <string>

MDRING_NAMESPACE_BEGIN

namespace cuda {

namespace detail {

struct driver_api {
  CUresult (*write_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned) = nullptr;
  CUresult (*wait_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned) = nullptr;
  CUresult (*pointer_attributes)(unsigned, CUpointer_attribute*, void**, CUdeviceptr) = nullptr;
  CUresult (*error_string)(CUresult, const char**) = nullptr;
  std::string missing;  // what could not be found (empty: everything)
};

template <class F>
void driver_entry(const char* name, F*& fn, std::string& missing) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !p) {
    (void)cudaGetLastError();
    missing += missing.empty() ? name : std::string(", ") + name;
    return;
  }
  fn = reinterpret_cast<F*>(p);
}

inline const driver_api& driver() {
  static const driver_api api = [] {
    driver_api a;
    driver_entry("cuStreamWriteValue32", a.write_value32, a.missing);
    driver_entry("cuStreamWaitValue32", a.wait_value32, a.missing);
    driver_entry("cuPointerGetAttributes", a.pointer_attributes, a.missing);
    driver_entry("cuGetErrorString", a.error_string, a.missing);
    return a;
  }();
  return api;
}

inline void driver_check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* text = nullptr;
  if (driver().error_string) driver().error_string(r, &text);
  throw cuda_error(
      std::string("mdring::cuda: ") + what + " failed: " + (text ? text : "error " + std::to_string(int(r))), int(r));
}

inline const driver_api& require_driver() {
  const driver_api& a = driver();
  if (!a.missing.empty())
    throw cuda_error("mdring::cuda: the CUDA driver does not provide " + a.missing +
                         " (needed by the ipc transport; a driver for CUDA 12 or newer does)",
                     0);
  return a;
}

inline void stream_write(cudaStream_t s, void* addr, std::uint32_t value) {
  driver_check(require_driver().write_value32(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(addr), value,
                                              CU_STREAM_WRITE_VALUE_DEFAULT),
               "cuStreamWriteValue32");
}
inline void stream_wait(cudaStream_t s, void* addr, std::uint32_t value) {
  driver_check(require_driver().wait_value32(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(addr), value,
                                             CU_STREAM_WAIT_VALUE_EQ),
               "cuStreamWaitValue32");
}

struct allocation_info {
  std::uintptr_t base = 0;
  std::size_t bytes = 0;
  std::uint64_t id = 0;
  bool ipc_capable = false;
  bool device = false;  // device memory (not host, not managed)
};

// The allocation that holds p (a device pointer of this process).
inline allocation_info allocation_of(const void* p) {
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID,        CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                 CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      CU_POINTER_ATTRIBUTE_IS_MANAGED};
  CUdeviceptr start = 0;
  std::size_t size = 0;
  unsigned long long id = 0;
  int capable = 0, managed = 0;
  unsigned type = 0;
  void* data[] = {&start, &size, &id, &capable, &type, &managed};
  driver_check(require_driver().pointer_attributes(6, attrs, data, reinterpret_cast<CUdeviceptr>(p)),
               "cuPointerGetAttributes");
  allocation_info a;
  a.base = std::uintptr_t(start);
  a.bytes = size;
  a.id = id;
  a.ipc_capable = capable != 0;
  a.device = type == CU_MEMORYTYPE_DEVICE && !managed;
  return a;
}

}  // namespace detail

}  // namespace cuda

MDRING_NAMESPACE_END
