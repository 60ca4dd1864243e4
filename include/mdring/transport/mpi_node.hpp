// mdring/transport/mpi_node.hpp: what the MPI transport (mpi.hpp) does with the
// ranks of its own node, and the MPI helpers both use.
//
// A channel whose members all share this node gets shared access
// (transport/shared_access.hpp): an MPI-3 shared window holds one control slot
// per rank, and a probe checks that every member can read and write every peer
// by cross-memory attach (process_vm_readv / writev). Peers' buffers in node
// memory (mdring::node_alloc) are mapped once per segment (segment_mappings) and
// then reached by pointer; other buffers go through cross-memory attach (cma).
// Any failure on any member leaves the channel on messages.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
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

#if defined(__linux__) && !MDRING_SMPI
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <cerrno>
#define MDRING_HAVE_CMA 1
#else
#define MDRING_HAVE_CMA 0
#endif

#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <new>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <cstdint>
#include <cstring>
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
// coordinate in that dimension) and, with shared access, the group, the members'
// process ids and the window that holds the control slots.
struct channel {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<std::size_t> members;  // global ranks, by coordinate
  // Shared access, when every member is on this node and cross-memory attach works.
  mdring::detail::access_group group;
  std::vector<long> pids;
  MPI_Win win = MPI_WIN_NULL;
};

// Every member says ok (MPI_MIN over the channel).
inline bool agree(MPI_Comm comm, int ok) {
  int all = 0;
  if (MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) return false;
  return all != 0;
}

inline void free_window(channel& ch) {
  if (ch.win != MPI_WIN_NULL) MPI_Win_free(&ch.win);
  ch.win = MPI_WIN_NULL;
  ch.group = {};
}

inline void cma(const channel& ch, std::size_t j, void* remote, void* local, std::size_t bytes, bool to_remote) {
#if MDRING_HAVE_CMA
  auto* l = static_cast<char*>(local);
  auto* r = static_cast<char*>(remote);
  while (bytes) {
    iovec lv{l, bytes}, rv{r, bytes};
    const ssize_t n = to_remote ? process_vm_writev(pid_t(ch.pids[j]), &lv, 1, &rv, 1, 0)
                                : process_vm_readv(pid_t(ch.pids[j]), &lv, 1, &rv, 1, 0);
    if (n <= 0)
      throw transport_error(std::string("mdring::mpi: cross-memory attach ") + (to_remote ? "write to" : "read from") +
                                " rank " + std::to_string(ch.members[j]) + " failed: " + std::strerror(errno),
                            errno);
    l += n;
    r += n;
    bytes -= std::size_t(n);
  }
#else
  (void)ch, (void)j, (void)remote, (void)local, (void)bytes, (void)to_remote;
  throw transport_error("mdring::mpi: shared access is not available on this platform", 0);
#endif
}

inline std::uint64_t probe_value(std::size_t rank) { return 0x6d6472696e670000ull ^ rank; }

// Sets up shared access on a channel whose members all share this node: a
// window of one control slot per rank, the members' pids, and a probe that
// reads and writes every peer once. Any failure on any member (another node, a
// kernel that forbids cross-memory attach) leaves the channel on messages.
inline void try_shared_access(channel& ch, std::size_t me, std::size_t staging, bool oversubscribed) {
#if MDRING_HAVE_CMA
  std::uint64_t probe[2] = {0, 0};  // what the peers read and write in the probe below
  const int p = int(ch.members.size());
  if (p > int(mdring::detail::access_group::max_ranks)) return;
  int ok = 1;
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(ch.comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) ok = 0;
  if (ok) {
    int n = 0;
    MPI_Comm_size(node, &n);
    ok = n == p;
    MPI_Comm_free(&node);
  }
  if (!agree(ch.comm, ok)) return;
  void* base = nullptr;
  // 64 bytes more, to align each rank's slot to a cache line (MPI may not): the
  // segment is mapped page-aligned in every process, so the offsets agree.
  if (MPI_Win_allocate_shared(MPI_Aint(mdring::detail::access_region_bytes(staging) + 64), 1, MPI_INFO_NULL,
                              ch.comm, &base, &ch.win) != MPI_SUCCESS) {
    ch.win = MPI_WIN_NULL;
    ok = 0;
  }
  if (!agree(ch.comm, ok)) return free_window(ch);
  std::vector<mdring::detail::access_slot*> slots(std::size_t(p), nullptr);
  for (int j = 0; j < p; ++j) {
    MPI_Aint size = 0;
    int disp = 0;
    void* ptr = nullptr;
    if (MPI_Win_shared_query(ch.win, j, &size, &disp, &ptr) != MPI_SUCCESS || !ptr) ok = 0;
    const std::uintptr_t aligned = (reinterpret_cast<std::uintptr_t>(ptr) + 63) / 64 * 64;
    slots[std::size_t(j)] = reinterpret_cast<mdring::detail::access_slot*>(aligned);
  }
  if (!agree(ch.comm, ok)) return free_window(ch);
  auto* mine = new (slots[me]) mdring::detail::access_slot{};
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // let peers attach under Yama
  long pid = long(getpid());
  ch.pids.assign(std::size_t(p), 0);
  MPI_Allgather(&pid, 1, MPI_LONG, ch.pids.data(), 1, MPI_LONG, ch.comm);
  // The probe: read each peer's word, then write into it.
  probe[0] = probe_value(ch.members[me]);
  mine->src = reinterpret_cast<std::uintptr_t>(&probe[0]);
  mine->dst = reinterpret_cast<std::uintptr_t>(&probe[1]);
  MPI_Barrier(ch.comm);
  for (std::size_t j = 0; j < std::size_t(p) && ok; ++j) {
    if (j == me) continue;
    std::uint64_t got = 0, mark = probe_value(ch.members[me]);
    iovec l{&got, sizeof got}, r{reinterpret_cast<void*>(slots[j]->src), sizeof got};
    if (process_vm_readv(pid_t(ch.pids[j]), &l, 1, &r, 1, 0) != ssize_t(sizeof got) ||
        got != probe_value(ch.members[j]))
      ok = 0;
    iovec lw{&mark, sizeof mark}, rw{reinterpret_cast<void*>(slots[j]->dst), sizeof mark};
    if (ok && process_vm_writev(pid_t(ch.pids[j]), &lw, 1, &rw, 1, 0) != ssize_t(sizeof mark)) ok = 0;
  }
  MPI_Barrier(ch.comm);
  if (!agree(ch.comm, ok)) return free_window(ch);
  mine->src = mine->dst = 0;
  ch.group = mdring::detail::access_group(slots.data(), std::size_t(p), me, staging, true, oversubscribed);
#else
  (void)ch, (void)me, (void)staging, (void)oversubscribed;
#endif
}

// The peers' node_alloc segments this process has mapped, at most max_mappings
// (the least recently used is dropped).
class segment_mappings {
public:
  segment_mappings() = default;
  segment_mappings(const segment_mappings&) = delete;
  segment_mappings& operator=(const segment_mappings&) = delete;
  ~segment_mappings() { release(); }

  // A peer's node_alloc segment, mapped into this process (local == nullptr: the
  // mapping failed once; it is not tried again).
  struct mapping {
    long pid = 0;
    std::uint32_t id = 0;
    std::uint64_t size = 0;
    char* local = nullptr;
    std::uint64_t used = 0;
  };
  static constexpr std::size_t max_mappings = 256;

  // Segment sg of process pid, mapped here (nullptr when it cannot be).
  char* map(long pid, const mdring::detail::node_segment& sg) {
    ++use_clock_;
    for (auto& m : mappings_)
      if (m.pid == pid && m.id == sg.id && m.size == sg.size) {
        m.used = use_clock_;
        return m.local;
      }
    mapping m{pid, sg.id, sg.size, nullptr, use_clock_};
#if MDRING_HAVE_CMA
    // The owner is inside the collective that published the segment, so its
    // descriptor is open; ids are never reused, so a cached mapping stays right.
    const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(sg.fd);
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st {};
      if (fstat(fd, &st) == 0 && std::uint64_t(st.st_size) >= sg.size) {
        void* p = mmap(nullptr, sg.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) m.local = static_cast<char*>(p);
      }
      close(fd);
    }
#endif
    if (mappings_.size() >= max_mappings) {  // drop the least recently used
      std::size_t lru = 0;
      for (std::size_t i = 1; i < mappings_.size(); ++i)
        if (mappings_[i].used < mappings_[lru].used) lru = i;
      unmap(mappings_[lru]);
      mappings_.erase(mappings_.begin() + std::ptrdiff_t(lru));
    }
    mappings_.push_back(m);
    return m.local;
  }
  // How many are mapped.
  std::size_t count() const noexcept {
    std::size_t n = 0;
    for (const auto& m : mappings_) n += m.local != nullptr;
    return n;
  }
  void release() noexcept {
    for (auto& m : mappings_) unmap(m);
    mappings_.clear();
  }

private:
  static void unmap(mapping& m) noexcept {
#if MDRING_HAVE_CMA
    if (m.local) munmap(m.local, m.size);
#endif
    m.local = nullptr;
  }

  std::vector<mapping> mappings_;
  std::uint64_t use_clock_ = 0;
};

}  // namespace detail

}  // namespace mpi

MDRING_NAMESPACE_END
