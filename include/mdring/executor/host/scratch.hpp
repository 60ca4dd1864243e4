// mdring/executor/host/scratch.hpp: the host executor's scratch memory.
//
//   workspace ws(opts.memory);
//   void* p = ws.get(1 << 20);   // grows to the largest request, then is reused
//
// workspace: one block from the user's memory_resource (options::memory) that grows
// to the largest call and is then reused, so that a call after the first allocates
// nothing. block_pool: the widened 16-bit calls' float32 copies and the pull form's
// blocks of node memory (executor/host/engine.hpp stream_in), one block per call in
// flight, kept for reuse. Scratch regions are cache-line aligned (align_up).
#pragma once

#include "../../config.hpp"
#include "../../memory.hpp"

#include <algorithm>
#include <cstddef>
#include <exception>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <utility>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

// Scratch regions are aligned to cache lines.
inline constexpr std::size_t scratch_alignment = 64;

inline std::size_t align_up(std::size_t bytes) {
  return (bytes + scratch_alignment - 1) / scratch_alignment * scratch_alignment;
}

// Scratch of the widened 16-bit calls (options.accumulation = float32): blocks
// kept for reuse, one per call in flight, so that a call after the first allocates
// nothing and touches no fresh page. Between processes of a node with shared
// memory on, node memory (memory.hpp: peers map it and fold in place, as they do
// node_alloc buffers), else the user's memory_resource. take() hands a block out
// until the last copy of its pointer is gone.
class block_pool : public std::enable_shared_from_this<block_pool> {
public:
  block_pool(std::pmr::memory_resource* mr, bool node) : mr_(mr ? mr : std::pmr::get_default_resource()), node_(node) {}
  block_pool(const block_pool&) = delete;
  block_pool& operator=(const block_pool&) = delete;
  ~block_pool() {
    for (auto& b : free_) drop(b);
  }

  std::shared_ptr<void> take(std::size_t bytes) {
    bytes = (bytes + 4095) / 4096 * 4096;
    block b;
    {
      std::lock_guard<std::mutex> g(m_);
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it)
        if (it->bytes >= bytes && (best == free_.end() || it->bytes < best->bytes)) best = it;
      if (best != free_.end()) b = *best, free_.erase(best);
    }
    if (!b.p) b = make(bytes);
    return std::shared_ptr<void>(b.p, [pool = shared_from_this(), b](void*) { pool->give(b); });
  }

private:
  struct block {
    void* p = nullptr;
    std::size_t bytes = 0;
    bool node = false;
  };
  static constexpr std::size_t keep = 4;  // free blocks kept (the largest)
  block make(std::size_t bytes) {
    if (node_) {
      try {
        return {node_alloc(bytes), bytes, true};
      } catch (const std::exception&) {  // no memory files here: plain memory, read by cross-memory attach
      }
    }
    return {mr_->allocate(bytes, 64), bytes, false};
  }
  void drop(const block& b) noexcept {
    if (b.node) node_free(b.p);
    else mr_->deallocate(b.p, b.bytes, 64);
  }
  void give(const block& b) {
    block out;
    {
      std::lock_guard<std::mutex> g(m_);
      free_.push_back(b);
      if (free_.size() <= keep) return;
      auto smallest = std::min_element(free_.begin(), free_.end(),
                                       [](const block& x, const block& y) { return x.bytes < y.bytes; });
      out = *smallest;
      free_.erase(smallest);
    }
    drop(out);
  }
  std::mutex m_;
  std::pmr::memory_resource* mr_;
  bool node_;
  std::vector<block> free_;
};

// Scratch memory: one block from the user's memory_resource that grows to the
// largest request and is then reused.
class workspace {
public:
  explicit workspace(std::pmr::memory_resource* mr) : mr_(mr ? mr : std::pmr::get_default_resource()) {}
  workspace(workspace&& o) noexcept
      : mr_(o.mr_), p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  workspace& operator=(workspace&& o) noexcept {
    if (this != &o) {
      release();
      mr_ = o.mr_;
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~workspace() { release(); }

  void* get(std::size_t bytes) {
    if (bytes > bytes_) {
      release();
      const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
      p_ = mr_->allocate(rounded, alignment);
      bytes_ = rounded;
    }
    return p_;
  }
  std::size_t capacity() const noexcept { return bytes_; }
  std::pmr::memory_resource* resource() const noexcept { return mr_; }

  static constexpr std::size_t alignment = 64;

private:
  void release() noexcept {
    if (p_) mr_->deallocate(p_, bytes_, alignment);
    p_ = nullptr;
    bytes_ = 0;
  }
  std::pmr::memory_resource* mr_;
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace detail

MDRING_NAMESPACE_END
