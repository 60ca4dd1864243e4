// mdring/transport/node_window.hpp: shared access between the processes of one
// node, for any transport (MPI, UCX).
//
// A channel whose members all run on this node can skip messages (see
// shared_access.hpp): a node window is one POSIX shared-memory segment that every
// member maps, holding one control slot (and two staging buffers) per member. It
// is set up collectively through whatever the transport can already do: an
// exchange object with
//
//   ex.all_gather(const void* mine, std::size_t bytes, void* all)   // members' bytes, by index
//
// (MPI: MPI_Allgather on the channel's communicator; UCX: tagged messages). The
// steps: every member says which node it runs on (host name and boot id) and its
// process id; if they all agree, member 0 creates the segment (shm_open, unlinked
// as soon as every member has mapped it), the others map it, and a probe checks
// that every member can read and write every peer by cross-memory attach
// (process_vm_readv / writev). Every member sees the same gathered answers, so
// they all take the same decision; any failure anywhere leaves the channel on
// messages. Peers' buffers in node memory (mdring::node_alloc) are mapped once per
// segment (segment_mappings) and then reached by pointer; other buffers go through
// cross-memory attach (cma).
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "shared_access.hpp"

#if defined(__linux__)
#include <fcntl.h>
#include <signal.h>
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

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdio>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

// Which machine (and boot) this process runs on: processes that agree can share memory.
inline std::string node_identity() {
  std::string id;
#if MDRING_HAVE_CMA
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  id = host;
  // The boot's id: its first word (the file holds one line).
  if (std::FILE* boot = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char b[128] = {};
    if (std::fscanf(boot, "%127s", b) == 1) id += "/" + std::string(b);
    std::fclose(boot);
  }
#endif
  return id;
}

// Process `pid` of this node has ended. A process that was killed cannot say so
// itself: the transports without a launcher that ends the job (UCX) ask this
// about their node's peers while they wait.
inline bool process_gone(long pid) noexcept {
#if MDRING_HAVE_CMA
  if (kill(pid_t(pid), 0) != 0 && errno == ESRCH) return true;
  // A zombie (ended, not yet reaped by its parent) counts as gone too.
  char path[64], stat[256] = {};
  std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (!f) return false;
  const std::size_t n = std::fread(stat, 1, sizeof stat - 1, f);
  std::fclose(f);
  const char* close = std::strrchr(stat, ')');  // "pid (comm) S ..."
  return n > 0 && close && close[1] == ' ' && close[2] == 'Z';
#else
  (void)pid;
  return false;
#endif
}

// Copies between this process and peer `pid` (cross-memory attach); `rank` names
// the peer in the error.
inline void cma(long pid, std::size_t rank, void* remote, void* local, std::size_t bytes, bool to_remote) {
#if MDRING_HAVE_CMA
  auto* l = static_cast<char*>(local);
  auto* r = static_cast<char*>(remote);
  while (bytes) {
    iovec lv{l, bytes}, rv{r, bytes};
    const ssize_t n =
        to_remote ? process_vm_writev(pid_t(pid), &lv, 1, &rv, 1, 0) : process_vm_readv(pid_t(pid), &lv, 1, &rv, 1, 0);
    if (n <= 0) {
      // The peer's process ended, or its buffer is gone (it left the call after a
      // failure and freed it): that rank's failure, as the peers' others are.
      if (errno == ESRCH || errno == EFAULT)
        throw remote_error(std::string("mdring: cross-memory attach ") + (to_remote ? "write to" : "read from") +
                               " rank " + std::to_string(rank) + " failed (" + std::strerror(errno) + "): rank " +
                               std::to_string(rank) +
                               " left the call (its process ended, or it gave up on the call "
                               "after a failure and freed its buffers)",
                           rank);
      throw transport_error(std::string("mdring: cross-memory attach ") + (to_remote ? "write to" : "read from") +
                                " rank " + std::to_string(rank) + " failed: " + std::strerror(errno),
                            errno);
    }
    l += n;
    r += n;
    bytes -= std::size_t(n);
  }
#else
  (void)pid, (void)rank, (void)remote, (void)local, (void)bytes, (void)to_remote;
  throw transport_error("mdring: shared access is not available on this platform", 0);
#endif
}

// Collective over the members of an exchange (see the top): every member's
// process id, by index, when all of them run on this node (host name and boot
// id); nullopt on every member otherwise (they all see the same answers).
template <class Exchange>
std::optional<std::vector<long>> node_pids(Exchange& ex, std::size_t p) {
  struct who {
    char node[240];
    std::int64_t pid;
  };
  who mine{};
  const std::string id = node_identity();
  std::snprintf(mine.node, sizeof mine.node, "%s", id.c_str());
#if MDRING_HAVE_CMA
  mine.pid = std::int64_t(getpid());
#endif
  std::vector<who> all(p);
  ex.all_gather(&mine, sizeof mine, all.data());
  std::vector<long> pids(p);
  for (std::size_t j = 0; j < p; ++j) {
    if (id.empty() || std::strncmp(all[j].node, mine.node, sizeof mine.node) != 0) return std::nullopt;
    pids[j] = long(all[j].pid);
  }
  return pids;
}

// One POSIX shared-memory segment that every member of an exchange maps:
// member 0 creates it (shm_open, a name of its own) and says its name, the others
// map it by that name. open() is collective and returns whether this member has
// it mapped (members may differ: agree before relying on it); unlink() (member 0,
// once every member has it mapped) removes the name, so nothing is left behind
// whatever happens later. Zero-filled when created.
class shared_segment {
public:
  shared_segment() = default;
  shared_segment(const shared_segment&) = delete;
  shared_segment& operator=(const shared_segment&) = delete;
  shared_segment(shared_segment&& o) noexcept { *this = std::move(o); }
  shared_segment& operator=(shared_segment&& o) noexcept {
    if (this != &o) {
      close();
      base_ = std::exchange(o.base_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      name_ = std::exchange(o.name_, {});
    }
    return *this;
  }
  ~shared_segment() { close(); }

  // p members, this one is `me`.
  template <class Exchange>
  bool open(Exchange& ex, std::size_t p, std::size_t me, std::size_t bytes) {
    close();
    std::array<char, 64> name{};
#if MDRING_HAVE_CMA
    bytes_ = bytes;
    if (me == 0) {
      static std::atomic<unsigned> counter{0};
      std::snprintf(
          name.data(), name.size(), "/mdring.%ld.%u.%lx", long(getpid()), counter.fetch_add(1),
          static_cast<unsigned long>(reinterpret_cast<std::uintptr_t>(&name) ^ std::uintptr_t(time(nullptr))));
      const int fd = shm_open(name.data(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
      const bool mapped = fd >= 0 && ftruncate(fd, off_t(bytes_)) == 0 && map(fd);
      if (fd >= 0) ::close(fd);
      if (fd >= 0 && !mapped) shm_unlink(name.data());
      if (!mapped) name[0] = '\0';
      name_ = name;
    }
#else
    (void)me, (void)bytes;
#endif
    std::vector<std::array<char, 64>> names(p);
    ex.all_gather(name.data(), name.size(), names.data());
    name = names[0];
#if MDRING_HAVE_CMA
    if (name[0] != '\0' && me != 0) {
      const int fd = shm_open(name.data(), O_RDWR | O_CLOEXEC, 0600);
      if (fd >= 0) map(fd), ::close(fd);
    }
#endif
    return base_ != nullptr;
  }
  // Member 0: removes the segment's name (the mappings stay).
  void unlink() noexcept {
#if MDRING_HAVE_CMA
    if (name_[0] != '\0') shm_unlink(name_.data());
#endif
    name_[0] = '\0';
  }
  void* data() const noexcept { return base_; }
  std::size_t size() const noexcept { return bytes_; }
  void close() noexcept {
    unlink();
#if MDRING_HAVE_CMA
    if (base_) munmap(base_, bytes_);
#endif
    base_ = nullptr;
    bytes_ = 0;
  }

private:
  bool map(int fd) noexcept {
#if MDRING_HAVE_CMA
    void* q = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (q == MAP_FAILED) return false;
    base_ = q;
    return true;
#else
    (void)fd;
    return false;
#endif
  }
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  std::array<char, 64> name_{};
};

// The peers' node_alloc segments this process has mapped, at most max_mappings
// (the least recently used is dropped).
class segment_mappings {
public:
  segment_mappings() = default;
  segment_mappings(const segment_mappings&) = delete;
  segment_mappings& operator=(const segment_mappings&) = delete;
  ~segment_mappings() { release(); }

  static constexpr std::size_t max_mappings = 256;

  // Segment sg of process pid, mapped here (nullptr when it cannot be; a failed
  // mapping is remembered and not tried again).
  char* map(long pid, const node_segment& sg) {
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
  struct mapping {
    long pid = 0;
    std::uint32_t id = 0;
    std::uint64_t size = 0;
    char* local = nullptr;
    std::uint64_t used = 0;
  };
  static void unmap(mapping& m) noexcept {
#if MDRING_HAVE_CMA
    if (m.local) munmap(m.local, m.size);
#endif
    m.local = nullptr;
  }

  std::vector<mapping> mappings_;
  std::uint64_t use_clock_ = 0;
};

// One channel's shared access between processes: the mapped control segment, the
// members' pids and global ranks, and the access group over the slots.
class node_window {
public:
  node_window() = default;
  node_window(const node_window&) = delete;
  node_window& operator=(const node_window&) = delete;
  node_window(node_window&& o) noexcept { *this = std::move(o); }
  node_window& operator=(node_window&& o) noexcept {
    if (this != &o) {
      close();
      group_ = std::exchange(o.group_, {});
      pids_ = std::move(o.pids_);
      ranks_ = std::move(o.ranks_);
      segment_ = std::move(o.segment_);
    }
    return *this;
  }
  ~node_window() { close(); }

  // Collective over the members (through ex, see the top). members[j]: the global
  // rank of member j (errors name it); me: this process's index. Returns whether
  // the channel now has shared access; the same on every member.
  template <class Exchange>
  bool open(Exchange& ex, std::span<const std::size_t> members, std::size_t me, std::size_t staging,
            bool oversubscribed) {
#if MDRING_HAVE_CMA
    const std::size_t p = members.size();
    if (p > access_group::max_ranks || p == 0) return false;
    // 1. Same node? (host name and boot id, and the pid)
    auto pids = node_pids(ex, p);
    if (!pids) return false;
    pids_ = std::move(*pids);
    ranks_.assign(members.begin(), members.end());
    // 2. Member 0 creates the segment; the others map it; 0 unlinks it.
    const std::size_t region = (access_region_bytes(staging) + 63) / 64 * 64;
    int ok = segment_.open(ex, p, me, region * p);
    auto* base = static_cast<char*>(segment_.data());
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // let peers attach under Yama
    std::vector<access_slot*> slots(p);
    for (std::size_t j = 0; j < p; ++j) slots[j] = base ? reinterpret_cast<access_slot*>(base + j * region) : nullptr;
    // 3. The probe: publish two words, read each peer's, write into it.
    std::uint64_t probe[2] = {probe_value(members[me]), 0};
    if (ok) {
      auto* s = make_slot(slots[me]);
      s->src = reinterpret_cast<std::uintptr_t>(&probe[0]);
      s->dst = reinterpret_cast<std::uintptr_t>(&probe[1]);
    }
    if (!agree(ex, ok, p)) return fail();
    segment_.unlink();  // every member has it mapped
    for (std::size_t j = 0; j < p && ok; ++j) {
      if (j == me) continue;
      std::uint64_t got = 0, mark = probe_value(members[me]);
      iovec l{&got, sizeof got}, r{reinterpret_cast<void*>(slots[j]->src), sizeof got};
      if (process_vm_readv(pid_t(pids_[j]), &l, 1, &r, 1, 0) != ssize_t(sizeof got) || got != probe_value(members[j]))
        ok = 0;
      iovec lw{&mark, sizeof mark}, rw{reinterpret_cast<void*>(slots[j]->dst), sizeof mark};
      if (ok && process_vm_writev(pid_t(pids_[j]), &lw, 1, &rw, 1, 0) != ssize_t(sizeof mark)) ok = 0;
    }
    if (!agree(ex, ok, p)) return fail();  // also: nobody's probe words are read after this
    slots[me]->src = slots[me]->dst = 0;
    group_ = access_group(slots.data(), p, me, staging, true, oversubscribed);
    return true;
#else
    (void)ex, (void)members, (void)me, (void)staging, (void)oversubscribed;
    return false;
#endif
  }

  bool shared() const noexcept { return segment_.data() != nullptr; }
  access_group& group() noexcept { return group_; }
  long pid(std::size_t j) const noexcept { return pids_[j]; }

  // Copies `bytes` from member j's address space (at `remote`) here, or back.
  void read(segment_mappings& m, std::size_t j, const void* remote, void* local, std::size_t bytes) {
    if (bytes == 0) return;
    if (const void* mine = local_address(m, j, remote, bytes)) return void(std::memcpy(local, mine, bytes));
    cma(pids_[j], ranks_[j], const_cast<void*>(remote), local, bytes, false);
  }
  void write(segment_mappings& m, std::size_t j, const void* local, void* remote, std::size_t bytes) {
    if (bytes == 0) return;
    if (void* mine = local_address(m, j, remote, bytes)) return void(std::memcpy(mine, local, bytes));
    cma(pids_[j], ranks_[j], remote, const_cast<void*>(local), bytes, true);
  }

  // Where member j's bytes [remote, remote + bytes) can be reached in this
  // process: when j published them (at this stage's arrive) inside a node_alloc
  // segment, the segment is mapped here once and the address returned; else
  // nullptr (then read / write go through cross-memory attach).
  void* local_address(segment_mappings& m, std::size_t j, const void* remote, std::size_t bytes) {
#if MDRING_HAVE_CMA
    const auto a = reinterpret_cast<std::uintptr_t>(remote);
    for (const auto* sg : {&group_.peer_src_segment(j), &group_.peer_dst_segment(j)}) {
      if (sg->id == 0 || a < sg->base || a - sg->base > sg->size || bytes > sg->size - (a - sg->base)) continue;
      if (char* base = m.map(pids_[j], *sg)) return base + (a - sg->base);
    }
#else
    (void)m, (void)j, (void)remote, (void)bytes;
#endif
    return nullptr;
  }

private:
  // Outside the template open(): nvcc finds no placement new for the over-aligned
  // slot inside it.
  static access_slot* make_slot(void* where) { return new (where) access_slot{}; }
  static std::uint64_t probe_value(std::size_t rank) { return 0x6d6472696e670000ull ^ rank; }

  template <class Exchange>
  static bool agree(Exchange& ex, int ok, std::size_t p) {
    std::vector<int> all(p);
    ex.all_gather(&ok, sizeof ok, all.data());
    for (int v : all)
      if (!v) return false;
    return true;
  }

  bool fail() noexcept {
    close();
    return false;
  }
  void close() noexcept {
    segment_.close();
    group_ = {};
  }

  access_group group_;
  shared_segment segment_;
  std::vector<long> pids_;
  std::vector<std::size_t> ranks_;
};

}  // namespace detail

MDRING_NAMESPACE_END
