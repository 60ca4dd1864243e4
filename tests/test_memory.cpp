// test_memory.cpp: mdring/memory.hpp, the node_alloc segments that processes on
// one node map for zero-copy collectives (the mapping itself is tested in
// test_mpi.cpp, "buffers from node_alloc").
#include <doctest/doctest.h>
#include <mdring/memory.hpp>

#include <cstdint>
#include <cstring>
#include <memory_resource>
#include <vector>

namespace md = mdring;

TEST_CASE("node_alloc: page-aligned, writable, found by is_node_memory over its whole range only") {
  for (std::size_t bytes :
       {std::size_t(0), std::size_t(1), std::size_t(4096), std::size_t(5000), std::size_t(3) << 20}) {
    INFO("bytes " << bytes);
    void* p = md::node_alloc(bytes);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 4096 == 0);
    std::memset(p, 0xab, bytes);
    const auto* c = static_cast<const unsigned char*>(p);
    if (bytes) CHECK(c[bytes - 1] == 0xab);
#if MDRING_HAVE_NODE_MEMORY
    const std::size_t size = bytes == 0 ? 4096 : (bytes + 4095) / 4096 * 4096;  // whole pages
    CHECK(md::is_node_memory(p));
    CHECK(md::is_node_memory(p, size));
    CHECK(md::is_node_memory(c + size - 1));
    CHECK_FALSE(md::is_node_memory(p, size + 1));  // runs past the end
    CHECK_FALSE(md::is_node_memory(c + size));
    CHECK_FALSE(md::is_node_memory(c - 1));
#endif
    md::node_free(p);
    CHECK_FALSE(md::is_node_memory(p));
  }
  md::node_free(nullptr);  // ignored
}

TEST_CASE("node_alloc: separate allocations are told apart, ids are not reused") {
  void* a = md::node_alloc(8192);
  void* b = md::node_alloc(8192);
  CHECK(a != b);
  const auto sa = md::detail::node_registry::instance().find(a);
  const auto sb = md::detail::node_registry::instance().find(b);
#if MDRING_HAVE_NODE_MEMORY
  CHECK(sa.id != 0);
  CHECK(sb.id != 0);
  CHECK(sa.id != sb.id);
  CHECK(sa.fd >= 0);
  CHECK(sa.base == reinterpret_cast<std::uintptr_t>(a));
  CHECK(sa.size == 8192);
  // a range that starts in a and ends in b is in neither
  CHECK_FALSE(md::is_node_memory(a, 8193));
  md::node_free(a);
  void* c = md::node_alloc(8192);
  CHECK(md::detail::node_registry::instance().find(c).id > sb.id);
  md::node_free(c);
#endif
  md::node_free(b);
  std::vector<int> heap(100);
  CHECK_FALSE(md::is_node_memory(heap.data()));
  CHECK_FALSE(md::is_node_memory(nullptr));
}

TEST_CASE("node_allocator and node_memory_resource serve containers") {
  std::vector<double, md::node_allocator<double>> v(100000, 1.5);
  CHECK(v[99999] == 1.5);
#if MDRING_HAVE_NODE_MEMORY
  CHECK(md::is_node_memory(v.data(), v.size() * sizeof(double)));
#endif
  v.resize(300000, 2.5);  // reallocates: the old segment is freed
  CHECK(v[0] == 1.5);
  CHECK(v[299999] == 2.5);
  md::node_memory_resource res;
  std::pmr::vector<int> w(&res);
  w.assign(5000, 7);
  CHECK(w[4999] == 7);
#if MDRING_HAVE_NODE_MEMORY
  CHECK(md::is_node_memory(w.data()));
#endif
}
