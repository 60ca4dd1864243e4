// mdring/cuda/ipc_memory.cuh: the device memory the ipc transport (cuda/ipc.cuh)
// shares between the processes of a node, process-wide.
//
//   ipc_exports: this process's allocations as published (cudaIpcGetMemHandle once
//                per allocation, by allocation id);
//   ipc_registry: the peers' allocations mapped into this process, for every ipc
//                link of every communicator (CUDA maps an allocation of another
//                process once per process), counted by the links that use them;
//   ipc_mappings: one link's view of the registry, released with the link.
#pragma once

#include "../error.hpp"
#include "../transport/ipc_window.hpp"
#include "config.cuh"
#include "driver.cuh"

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace cuda {

namespace detail {

static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(mdring::detail::ipc_handle_bytes),
              "mdring: cudaIpcMemHandle_t is not 64 bytes");

// This process's allocations as published: id -> handle (cudaIpcGetMemHandle once).
class ipc_exports {
public:
  // The allocation that holds p, and p's offset in it. `what` names the buffer in errors.
  mdring::detail::ipc_allocation find(const void* p, std::uint64_t& offset, const char* what) {
    const allocation_info a = allocation_of(p);
    if (!a.device || !a.ipc_capable)
      throw invalid_argument(what, std::string(what) + " (" + std::to_string(address(p)) +
                                       ") is not memory that CUDA IPC can share with the other processes of the "
                                       "dimension (the ipc transport reads it in place): allocate it with cudaMalloc "
                                       "(or a caching allocator on it, as PyTorch's), not cudaMallocAsync pools, "
                                       "managed memory or VMM allocations; or set options.device_transports to nccl "
                                       "there");
    offset = std::uint64_t(address(p) - a.base);
    for (auto& e : cache_)
      if (e.id == a.id) return e;
    mdring::detail::ipc_allocation out;
    out.id = a.id;
    out.bytes = a.bytes;
    out.base = a.base;
    cudaIpcMemHandle_t h;
    check(cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(a.base)), "cudaIpcGetMemHandle");
    std::memcpy(out.handle.bytes, &h, sizeof h);
    if (cache_.size() >= max_cached) cache_.erase(cache_.begin());
    cache_.push_back(out);
    return out;
  }

private:
  static constexpr std::size_t max_cached = 256;
  std::vector<mdring::detail::ipc_allocation> cache_;
};

// The peers' allocations mapped into this process, for every ipc link of every
// communicator: CUDA maps an allocation of another process once per process
// (opening it again fails with cudaErrorAlreadyMapped), and two communicators (a
// torch group and a subgroup) may read the same tensor. By (owner's process id,
// CUDA buffer id), counted by the links that use it; closed when no link does, or
// when the owner publishes a new allocation over its range (it freed the old one:
// see ipc_allocation).
class ipc_registry {
public:
  static ipc_registry& instance() {
    static ipc_registry* r = new ipc_registry;  // never destroyed: links may outlive static destruction
    return *r;
  }
  // The mapping of allocation a of process pid; `mine` is the caller's list of
  // what it holds (it gets a reference the first time).
  char* map(long pid, const mdring::detail::ipc_allocation& a, std::vector<std::uint64_t>& mine) {
    std::lock_guard l(m_);
    for (auto& e : e_)
      if (e.pid == pid && e.id == a.id) return hold(e, mine), e.local;
    for (std::size_t i = 0; i < e_.size();) {  // stale: freed by its owner
      entry& e = e_[i];
      if (e.pid == pid && e.remote < a.base + a.bytes && a.base < e.remote + e.bytes) {
        cudaIpcCloseMemHandle(e.local);
        e_.erase(e_.begin() + std::ptrdiff_t(i));
      } else {
        ++i;
      }
    }
    cudaIpcMemHandle_t h;
    std::memcpy(&h, a.handle.bytes, sizeof h);
    void* p = nullptr;
    check(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
    e_.push_back({pid, a.id, a.base, a.bytes, static_cast<char*>(p), 0, next_key_++});
    hold(e_.back(), mine);
    return e_.back().local;
  }
  // The caller lets go of everything it holds.
  void release(std::vector<std::uint64_t>& mine) noexcept {
    std::lock_guard l(m_);
    for (const std::uint64_t k : mine)
      for (std::size_t i = 0; i < e_.size(); ++i)
        if (e_[i].key == k) {
          if (--e_[i].refs == 0) {
            cudaIpcCloseMemHandle(e_[i].local);
            e_.erase(e_.begin() + std::ptrdiff_t(i));
          }
          break;
        }
    mine.clear();
  }
  std::size_t count() const {
    std::lock_guard l(m_);
    return e_.size();
  }

private:
  struct entry {
    long pid;
    std::uint64_t id, remote, bytes;  // the allocation in its owner's process
    char* local;                      // its mapping here
    std::size_t refs;
    std::uint64_t key;
  };
  void hold(entry& e, std::vector<std::uint64_t>& mine) {
    for (const std::uint64_t k : mine)
      if (k == e.key) return;
    mine.push_back(e.key);
    ++e.refs;
  }
  mutable std::mutex m_;
  std::vector<entry> e_;
  std::uint64_t next_key_ = 1;
};

// One link's view of the registry: what it holds, released with it.
class ipc_mappings {
public:
  ipc_mappings() = default;
  ipc_mappings(const ipc_mappings&) = delete;
  ipc_mappings& operator=(const ipc_mappings&) = delete;
  ipc_mappings(ipc_mappings&& o) noexcept : held_(std::move(o.held_)) {}
  ipc_mappings& operator=(ipc_mappings&& o) noexcept {
    if (this != &o) ipc_registry::instance().release(held_), held_ = std::move(o.held_);
    return *this;
  }
  ~ipc_mappings() { ipc_registry::instance().release(held_); }
  char* map(long pid, const mdring::detail::ipc_allocation& a) { return ipc_registry::instance().map(pid, a, held_); }
  // Allocations this link holds (tests: a repeated call maps nothing new).
  std::size_t count() const noexcept { return held_.size(); }

private:
  std::vector<std::uint64_t> held_;
};

}  // namespace detail

}  // namespace cuda

MDRING_NAMESPACE_END
