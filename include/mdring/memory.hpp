// mdring/memory.hpp: host memory that the ranks of one node can map, for
// zero-copy collectives between processes.
//
//   std::vector<float, mdring::node_allocator<float>> grads(n);   // or
//   float* p = static_cast<float*>(mdring::node_alloc(n * sizeof(float)));
//   ...
//   mdring::node_free(p);
//
// A buffer allocated here lives in a memory file (Linux memfd) instead of private
// anonymous memory. When an MPI process passes such a buffer to a collective,
// peers on the same node map the file once (by /proc/<pid>/fd, under the same
// permission check as cross-memory attach) and then read the inputs and write the
// results straight into each other's buffers: no kernel copy per piece and no
// scratch copy. Buffers from anywhere else still work; they go through
// cross-memory attach (process_vm_readv / writev), which costs about 3 x the time
// for large all_reduce calls (docs/PERFORMANCE.md). Threads of one process read
// each other's buffers in place whatever allocated them.
//
// Where memory files are not available (not Linux, or memfd_create refused), the
// functions fall back to ordinary aligned memory, and collectives fall back to
// cross-memory attach. node_alloc throws std::bad_alloc when memory runs out.
#pragma once

#include "config.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory_resource>
#include <mutex>
#include <new>

#if defined(__linux__)
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#define MDRING_HAVE_NODE_MEMORY 1
#else
#define MDRING_HAVE_NODE_MEMORY 0
#endif

MDRING_NAMESPACE_BEGIN

namespace detail {

// One allocation, as its owner publishes it to peers: its base in the owner's
// address space, its size, the owner's descriptor of the memory file and an id
// unique in the owner's process (ids are never reused, so a peer's cached mapping
// can never be mistaken for a later allocation).
struct node_segment {
  std::uint64_t base = 0;
  std::uint64_t size = 0;
  std::int32_t fd = -1;
  std::uint32_t id = 0;  // 0: not in a shareable segment
};
static_assert(sizeof(node_segment) == 24);

class node_registry {
public:
  static node_registry& instance() {
    static node_registry r;
    return r;
  }

  void* allocate(std::size_t bytes) {
    constexpr std::size_t page = 4096;
    const std::size_t size = bytes == 0 ? page : (bytes + page - 1) / page * page;
    if (size < bytes) throw std::bad_alloc();
    node_segment s;
    s.size = size;
#if MDRING_HAVE_NODE_MEMORY
    const int fd = int(memfd_create("mdring", MFD_CLOEXEC));
    if (fd >= 0) {
      if (ftruncate(fd, off_t(size)) == 0) {
        void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
          s.base = reinterpret_cast<std::uintptr_t>(p);
          s.fd = fd;
        }
      }
      if (s.fd < 0) {
        close(fd);
        throw std::bad_alloc();  // memory files work here, but there is no memory
      }
    }
#endif
    if (s.fd < 0) s.base = reinterpret_cast<std::uintptr_t>(::operator new(size, std::align_val_t(page)));
    std::lock_guard lock(m_);
    s.id = s.fd >= 0 ? ++next_id_ : 0;
    segments_[s.base] = s;
    return reinterpret_cast<void*>(s.base);
  }

  void deallocate(void* p) noexcept {
    if (!p) return;
    node_segment s;
    {
      std::lock_guard lock(m_);
      auto it = segments_.find(reinterpret_cast<std::uintptr_t>(p));
      if (it == segments_.end()) {
        std::fputs("mdring::node_free: the pointer was not returned by mdring::node_alloc (or was freed twice)\n",
                   stderr);
        std::abort();
      }
      s = it->second;
      segments_.erase(it);
    }
#if MDRING_HAVE_NODE_MEMORY
    if (s.fd >= 0) {
      // Peers may still map the file: truncating it frees the memory now.
      (void)!ftruncate(s.fd, 0);
      munmap(p, s.size);
      close(s.fd);
      return;
    }
#endif
    ::operator delete(p, std::align_val_t(4096));
  }

  // The shareable segment that holds [p, p + bytes), or one with id 0.
  node_segment find(const void* p, std::size_t bytes = 1) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard lock(m_);
    if (segments_.empty() || !p) return {};
    auto it = segments_.upper_bound(a);
    if (it == segments_.begin()) return {};
    --it;
    const node_segment& s = it->second;
    if (s.id == 0 || a + bytes > s.base + s.size) return {};
    return s;
  }

private:
  mutable std::mutex m_;
  std::map<std::uintptr_t, node_segment> segments_;
  std::uint32_t next_id_ = 0;
};

}  // namespace detail

/// `bytes` of host memory (page-aligned) that peers on this node can map; see above.
inline void* node_alloc(std::size_t bytes) { return detail::node_registry::instance().allocate(bytes); }
/// Frees memory from node_alloc (nullptr is ignored; any other pointer aborts).
inline void node_free(void* p) noexcept { detail::node_registry::instance().deallocate(p); }
/// Whether [p, p + bytes) lies in one buffer from node_alloc that peers can map.
inline bool is_node_memory(const void* p, std::size_t bytes = 1) {
  return detail::node_registry::instance().find(p, bytes).id != 0;
}

/// std::allocator-shaped access to node_alloc, for containers.
template <class T>
struct node_allocator {
  using value_type = T;  ///< the element type
  node_allocator() noexcept = default;
  /// Converts from an allocator of another type (they are all alike).
  ///@{
  template <class U>
  node_allocator(const node_allocator<U>&) noexcept {}
  ///@}
  /// n elements of T from node_alloc (std::bad_alloc when n * sizeof(T) overflows).
  T* allocate(std::size_t n) {
    if (n > std::size_t(-1) / sizeof(T)) throw std::bad_alloc();
    return static_cast<T*>(node_alloc(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t) noexcept { node_free(p); }  ///< node_free(p)
  /// All node_allocators are equal (one node_alloc).
  ///@{
  template <class U>
  bool operator==(const node_allocator<U>&) const noexcept {
    return true;
  }
  ///@}
};

/// A memory resource over node_alloc (for std::pmr containers).
class node_memory_resource final : public std::pmr::memory_resource {
  void* do_allocate(std::size_t bytes, std::size_t align) override {
    if (align > 4096) throw std::bad_alloc();
    return node_alloc(bytes);
  }
  void do_deallocate(void* p, std::size_t, std::size_t) override { node_free(p); }
  bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override { return this == &o; }
};

MDRING_NAMESPACE_END
