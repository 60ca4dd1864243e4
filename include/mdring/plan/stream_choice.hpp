// mdring/plan/stream_choice.hpp: whether a broadcast or reduce above the one-shot
// cap streams over node memory, chosen by timing both ways on its first calls.
//
// Where bind measured the node's ranks farther apart than
// tune.one_shot_stream_max_trip_ns (collective/communicator.hpp decide_streaming),
// the distance alone does not tell whether streaming beats the call's program: on
// two 2-core AMD EPYC VMs whose cores were both about 0.2 us apart, streamed 32 KiB
// broadcasts took 0.5 x Open MPI's time on one and 2.3 x on the other (the programs
// 1.1 to 1.5 x on both). So such a communicator times the two ways, per collective
// (broadcast, reduce) and size class (the bytes rounded up to a power of two):
//
//   calls 1 .. 2 x trials   alternate: odd calls run the program, even ones stream;
//                           each rank keeps its least time of each way
//   call 2 x trials + 1     first exchanges every rank's two times over node memory
//                           (a one-shot all_gather of 16 bytes per rank), then
//   from there on           the class streams when the slowest rank's least streamed
//                           time is below the slowest rank's least program time
//
// Every rank decides the same: the ranks make the same calls in the same order, so
// they count the same, and they all decide on the same exchanged times. A rank that
// timed no call of a way (none completed: it cannot happen to a blocking call) counts
// as infinitely slow that way, so that an unknown never streams.
#pragma once

#include "../config.hpp"
#include "../vocabulary.hpp"

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>

MDRING_NAMESPACE_BEGIN

namespace detail {

class stream_choice {
public:
  enum class way : unsigned char { program, stream };
  static constexpr std::uint64_t untimed = UINT64_MAX;
  static constexpr std::size_t npos = std::size_t(-1);
  static constexpr std::size_t classes = 64;  // size classes per collective
  // What one collective and size class have learned.
  struct entry {
    std::uint32_t calls = 0;                        // trial calls begun
    std::uint64_t best[2] = {untimed, untimed};     // this rank's least ns, by way
    std::uint64_t slowest[2] = {untimed, untimed};  // after the exchange: the slowest rank's least, by way
    signed char decided = -1;                       // -1 timing; else the way (0 program, 1 stream)
  };
  // A trial call under way: its entry and way (the caller times it: record).
  struct trial {
    std::size_t slot = npos;
    way w = way::program;
  };

  // Times the two ways, `trials` calls each, for calls of up to `requested` bytes
  // (tune.one_shot_stream_max_bytes as bound); trials 0: never (always the program).
  void arm(std::size_t requested, std::size_t trials) noexcept {
    requested_ = requested;
    trials_ = trials;
  }
  bool armed() const noexcept { return trials_ > 0 && requested_ > 0; }
  std::size_t requested() const noexcept { return requested_; }
  std::size_t trials() const noexcept { return trials_; }

  // The entry of a broadcast or reduce of `bytes` per rank (npos for other collectives).
  static std::size_t slot_of(collective kind, std::size_t bytes) noexcept {
    if (kind != collective::broadcast && kind != collective::reduce) return npos;
    const std::size_t cls = bytes <= 1 ? 0 : std::size_t(std::bit_width(bytes - 1));  // ceil(log2 bytes)
    return (kind == collective::reduce ? classes : 0) + (cls < classes ? cls : classes - 1);
  }
  // The collective of an entry, and its size class's largest bytes (the class: above half of them).
  static collective kind_of(std::size_t slot) noexcept {
    return slot < classes ? collective::broadcast : collective::reduce;
  }
  static std::size_t class_max(std::size_t slot) noexcept { return std::size_t(1) << (slot % classes); }

  const entry& at(std::size_t slot) const noexcept { return entries_[slot]; }
  // The exchange decided that `slot` streams.
  bool chose_stream(std::size_t slot) const noexcept { return entries_[slot].decided == 1; }
  // The next call of `slot` must exchange the times first.
  bool must_agree(std::size_t slot) const noexcept {
    const entry& e = entries_[slot];
    return e.decided < 0 && e.calls >= 2 * trials_;
  }
  // The way the next call of `slot` goes, once must_agree is false; begin() counts it.
  way next(std::size_t slot) const noexcept {
    const entry& e = entries_[slot];
    if (e.decided >= 0) return way(e.decided);
    return e.calls % 2 ? way::stream : way::program;
  }
  // The next call of `slot` begins: its way; a trial is left to be taken (pending).
  way begin(std::size_t slot) noexcept {
    const way w = next(slot);
    entry& e = entries_[slot];
    if (e.decided < 0) {
      ++e.calls;
      pending_ = trial{slot, w};
    }
    return w;
  }
  // The trial that begin() started, if any (once: the caller times it).
  std::optional<trial> take_pending() noexcept {
    std::optional<trial> t = pending_;
    pending_.reset();
    return t;
  }
  // A trial call of `slot` by way w took ns nanoseconds on this rank.
  void record(std::size_t slot, way w, std::uint64_t ns) noexcept {
    std::uint64_t& b = entries_[slot].best[std::size_t(w)];
    if (ns < b) b = ns;
  }
  // This rank's two times, as the exchange sends them: program, stream.
  void times(std::size_t slot, std::uint64_t out[2]) const noexcept {
    out[0] = entries_[slot].best[0], out[1] = entries_[slot].best[1];
  }
  // Decides `slot` from every rank's two times (all[2 j], all[2 j + 1]: rank j's).
  void decide(std::size_t slot, const std::uint64_t* all, std::size_t ranks) noexcept {
    entry& e = entries_[slot];
    e.slowest[0] = e.slowest[1] = 0;
    for (std::size_t j = 0; j < ranks; ++j)
      for (std::size_t w = 0; w < 2; ++w)
        if (all[2 * j + w] > e.slowest[w]) e.slowest[w] = all[2 * j + w];
    e.decided = e.slowest[1] < e.slowest[0] ? 1 : 0;
  }

private:
  std::size_t requested_ = 0, trials_ = 0;
  entry entries_[2 * classes];
  std::optional<trial> pending_;
};

}  // namespace detail

MDRING_NAMESPACE_END
