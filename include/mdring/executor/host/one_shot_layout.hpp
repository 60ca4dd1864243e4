// mdring/executor/host/one_shot_layout.hpp: how the one-shot path (one_shot.hpp)
// lays out each rank's staging buffers of the flat channel: the line a reader
// waits on, the ring of slots and the two data buffers.
#pragma once

#include "../../config.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>

MDRING_NAMESPACE_BEGIN

namespace detail {

// The first cache line of each staging buffer of the flat channel: the stage its
// owner has arrived at, with the call's signature and, when they fit, its data. A
// reader waits on this line and finds everything a small call needs in it: one
// cache line moves from writer to reader (the slot's arrive word, which the owner
// also bumps for sleepers, stays in the owner's cache while nobody sleeps). Larger
// data follows the line. Node windows and the threads transport's regions start
// zeroed, and only the one-shot path writes here.
struct alignas(64) one_shot_line {
  static constexpr std::size_t payload = 48;  // bytes of data that fit in the line
  unsigned char data[payload];
  std::uint64_t signature;
  std::atomic<std::uint32_t> stage;
  std::atomic<std::uint32_t> failed;  // the owner's communicator broke
};
static_assert(sizeof(one_shot_line) == 64 && std::atomic<std::uint32_t>::is_always_lock_free);

// How the one-shot path lays out a rank's two staging buffers of `staging` bytes
// each (contiguous): two data buffers of `data` bytes for larger data (stage s uses
// buffer s % 2), then a ring of slots of `slot_lines` cache lines (stage s uses slot
// s % ring: its line, and after it the data that do not fit in the line, up to
// slot_bytes()). The deeper the ring, the further a rank that only gives runs
// ahead of its readers; the default 16 KiB staging makes 16 slots of 8 lines (448 B
// of data each) and two buffers of 12 KiB. The ring is a power of two (a call's slot
// is a mask of its stage, no division on the call's path).
struct one_shot_layout {
  static constexpr std::size_t max_ring = 16, max_slot_lines = 8;
  std::size_t ring = 0;        // slots (0: too small for the path)
  std::size_t slot_lines = 1;  // cache lines per slot, the first one_shot_line
  std::size_t data = 0;        // bytes per data buffer, a multiple of 64
  constexpr explicit one_shot_layout(std::size_t staging) noexcept {
    const std::size_t lines = 2 * staging / sizeof(one_shot_line);
    if (lines < 2) return;
    // Shifts only: a call lays this out afresh (it is a few instructions, not a division).
    unsigned log_ring = 1;
    while (log_ring < 4 && (std::size_t(2) << log_ring) <= lines / 8) ++log_ring;
    static_assert(max_ring == 16);
    ring = std::size_t(1) << log_ring;
    const std::size_t l = lines >> (log_ring + 2);  // at most half the lines for the ring
    slot_lines = l < 1 ? 1 : l > max_slot_lines ? max_slot_lines : l;
    data = (lines - ring * slot_lines) / 2 * sizeof(one_shot_line);
  }
  // Where the ring starts in a rank's region: after the data buffers (with the ring
  // in front, 4 KiB all_reduce and all_gather took 1.06 to 1.10 x as long here).
  constexpr std::size_t ring_offset() const noexcept { return 2 * data; }
  // The bytes of data that a slot holds (in its line's payload, or in the lines after it).
  constexpr std::size_t slot_bytes() const noexcept {
    const std::size_t after = (slot_lines - 1) * sizeof(one_shot_line);
    return after > one_shot_line::payload ? after : one_shot_line::payload;
  }
};
static_assert(one_shot_layout(16384).ring == 16 && one_shot_layout(16384).slot_lines == 8 &&
              one_shot_layout(16384).data == 12288 && one_shot_layout(16384).slot_bytes() == 448 &&
              one_shot_layout(128).ring == 2 && one_shot_layout(128).slot_lines == 1 &&
              one_shot_layout(128).data == 64 && one_shot_layout(32).ring == 0 && one_shot_layout(3000).ring == 8);

}  // namespace detail

MDRING_NAMESPACE_END
