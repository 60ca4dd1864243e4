// mdring/transport/mpi_node.hpp: the MPI helpers of the MPI transport (mpi.hpp),
// and how it sets up shared access between the ranks of its own node.
//
// A channel whose members all share this node gets shared access
// (transport/shared_access.hpp) through a node window (node_window.hpp, the same
// for every transport), set up with MPI_Allgather on the channel's communicator.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "node_window.hpp"
#include "shared_access.hpp"
#include "transport.hpp"
#include <mpi.h>

// SimGrid's mpi.h defines SMPI_SHARED_MALLOC: building with smpicxx is enough.
#ifndef MDRING_SMPI
#if defined(SMPI_SHARED_MALLOC)
#define MDRING_SMPI 1
#else
#define MDRING_SMPI 0
#endif
#endif

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <new>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace mpi {

namespace detail {
inline std::string error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING + 1] = {};
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, std::size_t(len));
}

inline void check(int code, const char* call) {
  if (code != MPI_SUCCESS)
    throw mpi_error(std::string("mdring::mpi: ") + call + " failed: " + error_string(code), code);
}

inline bool finalized() {
  int f = 0;
  MPI_Finalized(&f);
  return f != 0;
}

// One dimension of a bound communicator: its sub-communicator (rank = the
// coordinate in that dimension) and, with shared access, its node window.
struct channel {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<std::size_t> members;  // global ranks, by coordinate
  mdring::detail::node_window window;
};

// The node window's exchange: MPI_Allgather of bytes over the channel.
struct allgather_exchange {
  MPI_Comm comm;
  void all_gather(const void* mine, std::size_t bytes, void* all) const {
    check(MPI_Allgather(mine, int(bytes), MPI_BYTE, all, int(bytes), MPI_BYTE, comm), "MPI_Allgather");
  }
};

}  // namespace detail

#if MDRING_SMPI
/// Under SimGrid SMPI every simulated rank lives in one process. SMPI_SHARED_MALLOC
/// maps each allocation onto the same few physical pages (the data is garbage, the
/// timing is not) and SMPI copies no payload between such buffers, so thousands of
/// ranks x 100 MB fit in a few GB. Give it to options.memory (all scratch) and use
/// it for the programs' own buffers; runs that check their results need ordinary
/// memory.
class smpi_shared_resource final : public std::pmr::memory_resource {
  void* do_allocate(std::size_t bytes, std::size_t align) override {
    void* p = SMPI_SHARED_MALLOC(bytes ? bytes : 1);
    if (!p || reinterpret_cast<std::uintptr_t>(p) % align) throw std::bad_alloc();  // mmap: page aligned
    return p;
  }
  void do_deallocate(void* p, std::size_t, std::size_t) override { SMPI_SHARED_FREE(p); }
  bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override { return this == &o; }
};
inline std::pmr::memory_resource* smpi_shared_memory() {
  static smpi_shared_resource shared;
  return &shared;
}
#endif

}  // namespace mpi

MDRING_NAMESPACE_END
