// mdring/executor/internals.hpp: the executor's way into a communicator.
//
// A communicator's public members are what users call. What the executor reads
// and writes of it for a call (request slots, the call's decision, the program
// cache, scratch, the hang report's board, ...) stays private to it, and
// detail::internals, which the communicator befriends, forwards to it.
#pragma once

#include "../config.hpp"

#include <cstddef>
#include <string>

MDRING_NAMESPACE_BEGIN
namespace detail {

// What the executor (executor/host/, collective/run.hpp, calibrate.hpp) reads and
// writes of a communicator: its per-call state, behind the public face that users
// call. internals_of(c) gives the view; it holds a reference and costs nothing.
template <class Comm>
class internals {
public:
  using dim_state = typename Comm::dim_state;
  using request_info = typename Comm::request_info;
  using measuring_state = typename Comm::measuring_state;
  explicit internals(Comm& c) noexcept : c_(c) {}

  auto& dims() const noexcept { return c_.dims(); }
  auto* requests() const noexcept { return c_.requests(); }
  std::size_t request_slot_size() const noexcept { return c_.request_slot_size(); }
  auto& request_infos() const noexcept { return c_.request_infos(); }
  auto& pointer_slots() const noexcept { return c_.pointer_slots(); }
  auto& algorithm_slots() const noexcept { return c_.algorithm_slots(); }
  const auto& bind_algorithms() const noexcept { return c_.bind_algorithms(); }
  const auto& rank_links() const noexcept { return c_.rank_links(); }
  const auto& requested_algorithms() const noexcept { return c_.requested_algorithms(); }
  auto& decision() const noexcept { return c_.decision(); }
  auto& programs() const noexcept { return c_.programs(); }
  auto& program_dims() const noexcept { return c_.program_dims(); }
  auto& unmapped_buffers() const noexcept { return c_.unmapped_buffers(); }
  auto& measured_plans() const noexcept { return c_.measured_plans(); }
  auto& measuring() const noexcept { return c_.measuring(); }
  auto& scratch() const noexcept { return c_.scratch(); }
  auto& widened_scratch() const { return c_.widened_scratch(); }
  auto& executor() const noexcept { return c_.executor(); }
  const auto& executor_handle() const noexcept { return c_.executor_handle(); }
  auto& board() const noexcept { return c_.board(); }
  void mark_broken(const std::string& why) const { c_.mark_broken(why); }

private:
  Comm& c_;
};
template <class Comm>
internals<Comm> internals_of(Comm& c) noexcept {
  return internals<Comm>(c);
}
}  // namespace detail
MDRING_NAMESPACE_END
