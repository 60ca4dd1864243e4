// mdring/collective/failed_set.hpp: the survivors of a failure agree on who
// failed (mdring::shrink's first step, collective/shrink.hpp).
//
//   std::vector<char> failed = detail::agree_on_failed(t, size, rank, known_dead, step, epoch);
//
// Every rank that finishes gets the same set, also when ranks die or stall during
// the agreement itself; a rank that is only slow ends up in on every survivor or
// out on every survivor (it finds itself in the set and leaves). Over the
// transport's survivor messages (transport/transport.hpp survives_failures), which
// still flow after the failure broke the communicator. Two phases:
//
//   1. suspicions: each rank sends the ranks it knows dead (the transport's gone())
//      to every other and waits for theirs, all against one deadline (`step`); a
//      rank heard from adds what it knows, a rank gone or silent is added itself.
//      A stalled rank is found here.
//   2. a rotating coordinator, rank 0 to size-1 in turn: coordinator c sends its
//      set to every other; each rank waits for it (2 x step, or until c is gone;
//      one step where c is in its own set already, as the ranks of a node whose
//      link was cut are for every survivor) and takes it in place of its own.
//      The first coordinator that reaches every rank still taking part makes all
//      sets equal, and every later coordinator then sends that same set: a coordinator that dies half-way through its
//      sends, or is heard by some and not others, only matters before that round
//      (the rounds after it put everyone right again), and a rank that stalled
//      finds every coordinator's set waiting when it wakes.
// A rank that dies after the agreement is not in the set: the new communicator's
// first call finds it (remote_error), and the survivors shrink again.
//
// Sets travel as bitmaps. Tags: (epoch << 2) | phase, below 0x8000 (a transport's
// own shrink messages use the tags above it).
#pragma once

#include "../config.hpp"
#include "../transport/transport.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

inline std::string pack_ranks(const std::vector<char>& set) {
  std::string s((set.size() + 7) / 8, '\0');
  for (std::size_t r = 0; r < set.size(); ++r)
    if (set[r]) s[r / 8] = char(s[r / 8] | (1 << (r % 8)));
  return s;
}
// ORs the packed set into `set`; false if its size does not match.
inline bool unpack_ranks_into(const std::string& s, std::vector<char>& set) {
  if (s.size() != (set.size() + 7) / 8) return false;
  for (std::size_t r = 0; r < set.size(); ++r)
    if (s[r / 8] & (1 << (r % 8))) set[r] = 1;
  return true;
}

enum survivor_phase : std::uint32_t { suspicions = 1, coordinator = 2 };
constexpr std::uint32_t survivor_tag(std::uint32_t epoch, survivor_phase p) { return ((epoch << 2) | p) & 0x7fff; }

// What this rank itself saw of a rank in the agreed set (for the left-out ranks'
// errors): nothing (the others named it), gone before the agreement (`known`), gone
// during it, or silent for its first step.
enum class failure_seen : unsigned char { named_by_others, before, during, silent };

// See the top. T: a transport that survives failures (or a test's stand-in with
// the same survivor_send / survivor_recv). `known`: what this rank knows dead
// (size ranks); returns the agreed set, which may name `rank` itself. `seen`, if
// given, gets what this rank saw of each rank (failure_seen).
template <class T>
std::vector<char> agree_on_failed(T& t, std::size_t size, std::size_t rank, std::vector<char> known,
                                  std::chrono::milliseconds step, std::uint32_t epoch,
                                  std::vector<failure_seen>* seen = nullptr) {
  known.resize(size, 0);
  known[rank] = 0;
  std::vector<failure_seen> saw(size, failure_seen::named_by_others);
  for (std::size_t r = 0; r < size; ++r)
    if (known[r]) saw[r] = failure_seen::before;
  // 1. suspicions
  const std::uint32_t tag1 = survivor_tag(epoch, suspicions), tag2 = survivor_tag(epoch, coordinator);
  const std::string mine = pack_ranks(known);
  for (std::size_t r = 0; r < size; ++r)
    if (r != rank) t.survivor_send(r, mine, tag1);
  std::vector<char> set = known;
  const auto deadline = deadline_clock::now() + step;
  for (std::size_t r = 0; r < size; ++r) {
    if (r == rank) continue;
    const survivor_message m = t.survivor_recv(r, tag1, deadline);
    if (m.kind != survivor_message::got || !unpack_ranks_into(m.bytes, set)) {
      set[r] = 1;
      if (!known[r]) saw[r] = m.kind == survivor_message::gone ? failure_seen::during : failure_seen::silent;
    }
  }
  // 2. the rotating coordinator
  for (std::size_t c = 0; c < size; ++c) {
    if (c == rank) {
      const std::string s = pack_ranks(set);
      for (std::size_t r = 0; r < size; ++r)
        if (r != rank) t.survivor_send(r, s, tag2);
      continue;
    }
    // A coordinator this rank counts failed was silent for a step already (or
    // another rank saw it fail): one more step for its set, where one it does not
    // count failed gets two (the ranks enter this phase up to a step apart).
    const survivor_message m = t.survivor_recv(c, tag2, deadline_clock::now() + (set[c] ? 1 : 2) * step);
    std::vector<char> theirs(size, 0);
    if (m.kind == survivor_message::got && unpack_ranks_into(m.bytes, theirs)) set = std::move(theirs);
  }
  if (seen) *seen = std::move(saw);
  return set;
}

}  // namespace detail

MDRING_NAMESPACE_END
