// mdring/transport/shared_access.hpp: ranks of one node that read and write each
// other's buffers directly.
//
// A dimension whose ranks share a node can skip messages altogether: each rank
// publishes the addresses of its buffers in a control slot that all of them map,
// and then reads its peers' data (or writes its results into their buffers)
// itself. Threads of one process dereference the peers' pointers. Processes map
// each other's buffers when they come from mdring::node_alloc (arrive publishes
// the segments, mdring/memory.hpp) and then dereference them too; other buffers
// they reach by cross-memory attach (process_vm_readv / process_vm_writev, one
// kernel copy per piece). A stage is
//
//   arrive(src, dst)   publish this rank's addresses for the stage; bump `arrive`
//   wait_arrived()     every peer has published (their addresses are now valid)
//   ... read peers' src, write peers' dst ...
//   leave()            this rank is done touching the peers' buffers
//   wait_left()        every peer is done touching this rank's buffers
//
// Waiting spins for a few microseconds (not at all when the node's ranks outnumber
// its cores), then yields for up to 2 ms, then sleeps on
// a futex that the arriving rank wakes: when ranks outnumber cores, a yielding rank
// gives its core to the rank it waits for, and only a long wait (a peer still
// computing) pays a futex wake-up, which on a loaded machine can take a scheduler
// tick. Every wait has a deadline and also watches for a peer's failure.
#pragma once

#include "../config.hpp"
#include "../memory.hpp"
#include "transport.hpp"

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <thread>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#define MDRING_HAVE_FUTEX 1
#else
#define MDRING_HAVE_FUTEX 0
#endif

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define MDRING_CPU_RELAX() __builtin_ia32_pause()  // _mm_pause, without <immintrin.h>'s parse cost
#elif defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#define MDRING_CPU_RELAX() _mm_pause()
#else
#define MDRING_CPU_RELAX() std::this_thread::yield()
#endif

MDRING_NAMESPACE_BEGIN

namespace detail {

// One rank's control slot, in memory that every rank of the dimension maps. Each
// rank writes only its own slot.
struct alignas(64) access_slot {
  std::atomic<std::uint32_t> arrive{0};    // futex word: stages this rank has arrived at
  std::atomic<std::uint32_t> leave{0};     // futex word: stages this rank has left
  std::atomic<std::uint32_t> sleepers{0};  // peers asleep on this slot's words: wake only then
  // By stage parity, bit seq % 2: this rank's buffers of that stage are ones its
  // peers cannot map (set by the host executor for all_reduce, which streams them
  // through node memory from the next call on: executor/host/engine.hpp).
  std::atomic<std::uint32_t> flags{0};
  std::uint64_t src = 0;  // addresses published at arrive (in the owner's space)
  std::uint64_t dst = 0;
  std::uint64_t pid = 0;
  // What the stage works on (elements, element size), by stage parity: peers
  // compare it, so mismatched counts are caught. A peer is at most one stage
  // ahead, so the entry of this rank's stage stays put while it is compared.
  std::uint64_t signature[2] = {0, 0};
  // Between processes: the node_alloc segments that hold src and dst (id 0: none),
  // so that peers can map them and skip cross-memory attach.
  node_segment src_segment{};
  node_segment dst_segment{};
};
static_assert(sizeof(access_slot) == 128);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

inline void futex_wake(std::atomic<std::uint32_t>& word) noexcept {
#if MDRING_HAVE_FUTEX
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
#else
  (void)word;
#endif
}

// Sleeps while word == expected, at most `ns` nanoseconds (or until woken).
inline void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, long ns) noexcept {
#if MDRING_HAVE_FUTEX
  timespec ts{ns / 1000000000L, ns % 1000000000L};
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
#else
  (void)word;
  (void)expected;
  std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
#endif
}

// More ranks on the node than it has cores: waits should yield at once.
inline bool oversubscribed(std::size_t node_ranks) noexcept {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores && node_ranks > cores;
}

// counter has reached seq (32-bit sequence numbers that wrap).
inline bool reached(std::uint32_t counter, std::uint32_t seq) noexcept {
  return static_cast<std::int32_t>(counter - seq) >= 0;
}

// The bytes that hold one rank's slot and its two staging buffers of
// `staging` bytes each (small stages copy their data there, see below).
constexpr std::size_t access_region_bytes(std::size_t staging) noexcept { return sizeof(access_slot) + 2 * staging; }

// The protocol over p slots; `me` is this rank's index. Each slot is followed in
// memory by two staging buffers of staging_bytes() (see access_region_bytes).
//
// Small stages go through the staging buffers instead: copy in, arrive, wait,
// read the peers' staging directly. They alternate between the two buffers, so
// they need no `leave`: a rank writes a buffer again only two stages later, after
// it has seen every peer arrive at the stage in between, which each peer does only
// once it has finished reading.
class access_group {
public:
  access_group() = default;
  // publish_segments: arrive() also publishes which node_alloc segments hold the
  // buffers (processes; threads read each other's memory anyway).
  // oversubscribed: more ranks on the node than cores, so a waiting rank yields
  // at once instead of spinning first (the rank it waits for may need its core).
  access_group(access_slot* const* slots, std::size_t p, std::size_t me, std::size_t staging = 0,
               bool publish_segments = false, bool oversubscribed = false)
      : p_(p), me_(me), staging_(staging), publish_(publish_segments), spins_(oversubscribed ? 1 : 256) {
    for (std::size_t j = 0; j < p && j < max_ranks; ++j) slots_[j] = slots[j];
  }
  static constexpr std::size_t max_ranks = 64;

  std::size_t staging_bytes() const noexcept { return staging_; }
  // Rank j's staging buffer for the stage this rank arrives at next.
  void* next_staging(std::size_t j) const noexcept { return staging(j, seq_ + 1); }
  // Rank j's staging buffer for the stage this rank has arrived at.
  void* staging(std::size_t j) const noexcept { return staging(j, seq_); }

  // Rank j's two staging buffers, one after the other (2 x staging_bytes(); the
  // one-shot path lays them out its own way: executor/host/one_shot.hpp).
  unsigned char* region(std::size_t j) const noexcept { return reinterpret_cast<unsigned char*>(slots_[j] + 1); }

  std::size_t size() const noexcept { return p_; }
  std::size_t index() const noexcept { return me_; }
  // How long a wait spins before it yields (1: at once, when oversubscribed).
  unsigned spins() const noexcept { return spins_; }
  access_slot& slot(std::size_t j) const noexcept { return *slots_[j]; }

  void arrive(const void* src, void* dst, std::uint64_t signature, bool unmapped = false) noexcept {
    auto& s = slot(me_);
    const std::uint32_t bit = 1u << ((seq_ + 1) % 2), f = s.flags.load(std::memory_order_relaxed);
    s.flags.store(unmapped ? f | bit : f & ~bit, std::memory_order_relaxed);  // published by the arrive below
    s.src = reinterpret_cast<std::uintptr_t>(src);
    s.dst = reinterpret_cast<std::uintptr_t>(dst);
    if (publish_) {
      auto& reg = node_registry::instance();
      s.src_segment = reg.find(src);
      s.dst_segment = reg.find(dst);
    }
    arrive_signed(signature);
  }
  // arrive() with nothing published but the signature (the one-shot path's calls:
  // executor/host/one_shot.hpp, whose data is in the staging buffers); arrive() ends so.
  void arrive_signed(std::uint64_t signature) noexcept {
    auto& s = slot(me_);
    s.signature[(seq_ + 1) % 2] = signature;
    ++seq_;
    s.arrive.store(seq_, std::memory_order_seq_cst);
    if (s.sleepers.load(std::memory_order_seq_cst)) futex_wake(s.arrive);
  }
  void leave() noexcept {
    auto& s = slot(me_);
    s.leave.store(seq_, std::memory_order_seq_cst);
    if (s.sleepers.load(std::memory_order_seq_cst)) futex_wake(s.leave);
  }

  // Waits until every peer's `arrive` (or `leave`) has reached this rank's sequence.
  // failed() is polled while sleeping; on it, or at the deadline, returns the
  // index of a peer that had not arrived (timeout), or peer_failed.
  template <class Failed>
  wait_status wait_arrived(deadline_clock::time_point deadline, Failed&& failed) const {
    return wait_all(&access_slot::arrive, deadline, failed);
  }
  template <class Failed>
  wait_status wait_left(deadline_clock::time_point deadline, Failed&& failed) const {
    return wait_all(&access_slot::leave, deadline, failed);
  }

  // The same, without waiting: done when every peer has reached this rank's
  // sequence, else peer_failed (if failed() says so) or timeout naming the first
  // peer that has not (a call running on a fiber tests this and yields).
  template <class Failed>
  wait_status test_arrived(Failed&& failed) const {
    return test_all(&access_slot::arrive, failed);
  }
  template <class Failed>
  wait_status test_left(Failed&& failed) const {
    return test_all(&access_slot::leave, failed);
  }

  // Waits until peer j's `arrive` has reached seq, as wait_arrived waits for each
  // peer; the deadline is taken from deadline_of() only once spinning has not
  // sufficed (a wait that spins through reads no clock), and on_yield(deadline) is
  // called then (the hang report's waiting line).
  template <class Deadline, class Failed, class OnYield>
  wait_status wait_arrive_of(std::size_t j, std::uint32_t seq, Deadline&& deadline_of, Failed&& failed,
                             OnYield&& on_yield) const {
    return wait_word(slot(j).arrive, j, seq, deadline_of, failed, on_yield);
  }

  // The first peer whose published signature differs from this rank's (or size()).
  std::size_t mismatch() const noexcept {
    for (std::size_t j = 0; j < p_; ++j)
      if (signature(j) != signature(me_)) return j;
    return p_;
  }
  std::uint64_t signature(std::size_t j) const noexcept { return slot(j).signature[seq_ % 2]; }
  // After wait_arrived: whether any rank (this one too) arrived with `unmapped`.
  bool any_unmapped() const noexcept {
    for (std::size_t j = 0; j < p_; ++j)
      if ((slot(j).flags.load(std::memory_order_relaxed) >> (seq_ % 2)) & 1u) return true;
    return false;
  }

  const void* peer_src(std::size_t j) const noexcept { return reinterpret_cast<const void*>(slot(j).src); }
  void* peer_dst(std::size_t j) const noexcept { return reinterpret_cast<void*>(slot(j).dst); }
  const node_segment& peer_src_segment(std::size_t j) const noexcept { return slot(j).src_segment; }
  const node_segment& peer_dst_segment(std::size_t j) const noexcept { return slot(j).dst_segment; }
  std::uint32_t sequence() const noexcept { return seq_; }

private:
  template <class Failed>
  wait_status wait_all(std::atomic<std::uint32_t> access_slot::*word, deadline_clock::time_point deadline,
                       Failed&& failed) const {
    for (std::size_t j = 0; j < p_; ++j) {
      if (j == me_) continue;
      const wait_status st = wait_word(
          slot(j).*word, j, seq_, [&] { return deadline; }, failed, [](deadline_clock::time_point) {});
      if (st.kind != wait_status::done) return st;
    }
    return wait_status::ok();
  }

  // Waits until word (peer j's) has reached seq: spins, yields for 2 ms, then sleeps
  // on it in 2 ms slices, polling failed() and the deadline between them.
  template <class Deadline, class Failed, class OnYield>
  wait_status wait_word(std::atomic<std::uint32_t>& w, std::size_t j, std::uint32_t seq, Deadline&& deadline_of,
                        Failed&& failed, OnYield&& on_yield) const {
    unsigned spins = 0;
    deadline_clock::time_point yield_until{}, deadline{};
    for (;;) {
      const std::uint32_t v = w.load(std::memory_order_acquire);
      if (reached(v, seq)) return wait_status::ok();
      ++spins;
      if (spins < spins_) {
        MDRING_CPU_RELAX();
        continue;
      }
      if (spins == spins_) {
        deadline = deadline_of();
        on_yield(deadline);
        yield_until = deadline_clock::now() + std::chrono::milliseconds(2);
      }
      if (deadline_clock::now() < yield_until) {
        std::this_thread::yield();
        continue;
      }
      if (auto st = failed(); st.kind != wait_status::done) return st;
      if (deadline_clock::now() >= deadline) return wait_status{wait_status::timeout, j, 0, {}};
      // Announce the sleep, then sleep unless the word moved meanwhile (the
      // waker stores the word, then reads sleepers: one of the two sees the other).
      auto& sl = slot(j).sleepers;
      sl.fetch_add(1, std::memory_order_seq_cst);
      if (w.load(std::memory_order_seq_cst) == v) futex_wait(w, v, 2'000'000);  // 2 ms slices
      sl.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  // A test spins as briefly as a wait does before it yields (not at all when the
  // node's ranks outnumber its cores): a peer a few hundred nanoseconds away is
  // cheaper to spin for than to switch the fiber out and back for.
  template <class Failed>
  wait_status test_all(std::atomic<std::uint32_t> access_slot::*word, Failed&& failed) const {
    for (std::size_t j = 0; j < p_; ++j) {
      if (j == me_) continue;
      unsigned spins = 0;
      while (!reached((slot(j).*word).load(std::memory_order_acquire), seq_)) {
        if (++spins < spins_) {
          MDRING_CPU_RELAX();
          continue;
        }
        if (auto st = failed(); st.kind != wait_status::done) return st;
        return wait_status{wait_status::timeout, j, 0, {}};
      }
    }
    return wait_status::ok();
  }

  void* staging(std::size_t j, std::uint32_t seq) const noexcept {
    return reinterpret_cast<unsigned char*>(slots_[j] + 1) + (seq % 2) * staging_;
  }

  access_slot* slots_[max_ranks] = {};
  std::size_t p_ = 0, me_ = 0, staging_ = 0;
  bool publish_ = false;
  unsigned spins_ = 256;
  std::uint32_t seq_ = 0;
};

}  // namespace detail

/// A transport whose channels may offer shared access (checked per channel with
/// shared(ch)): the engine then runs that dimension's direct stages through it.
template <class T>
concept shared_access_transport = requires(T& t, typename T::channel& ch, const void* c, void* v, std::size_t n) {
  { t.shared(ch) } -> std::convertible_to<bool>;
  { t.group(ch) } -> std::same_as<detail::access_group&>;
  { t.shared_failure() } -> std::same_as<wait_status>;
  t.read(ch, n, c, v, n);
  t.write(ch, n, c, v, n);
  { T::same_address_space } -> std::convertible_to<bool>;
};

MDRING_NAMESPACE_END
