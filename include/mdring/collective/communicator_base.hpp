// mdring/collective/communicator_base.hpp: what every communicator is, whatever
// runs its calls.
//
//   detail::communicator_base b(parse_topology("shm:2 x ethernet:*"), 8, 5, opts,
//                               bind_path::host, "bind", "mpi");
//   b.extents();      // {2, 4}: the topology as written, resolved for 8 ranks
//   b.usable();       // true until a call fails
//
// The bind result (plan/bound_layout.hpp), the options it was bound with (their
// accumulation normalized, as the calls run), the failure flag that makes the
// communicator unusable after an error inside a call, and the hang report's board
// (executor/state.hpp: what this rank is doing, for state_line()). The host
// communicator (collective/communicator.hpp: communicator_core, which adds a
// transport and the host executor) and the GPU communicator (cuda/communicator.cuh,
// which adds device links) are this plus what runs their calls; the argument checks
// (collective/checks.hpp), the failure guard (collective/guard.hpp) and the hang
// report's entry points take it.
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "../plan/bound_layout.hpp"
#include "../topology/ring.hpp"
#include "../topology/runtime.hpp"
#include "../executor/state.hpp"

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

// A program run with MDRING_STATE_SIGNAL handles that signal from its start, not
// from its first communicator: a rank still in its rendezvous, or a PyTorch rank
// whose group binds at its first collective, must not die of it (its default
// action). Reading the environment is all this costs a program without it. (Here,
// not in executor/state.hpp, which mdring-run includes for the lines alone.)
inline const bool state_signal_at_start = (install_state_signal(), true);

// A topology as a runtime_topology (a compile-time one described).
template <class Topology>
runtime_topology to_runtime(const Topology& t) {
  if constexpr (std::is_same_v<std::remove_cv_t<Topology>, runtime_topology>) return t;
  else return describe(t);
}

class communicator_base {
public:
  // Validates `opts`, then binds (plan/bound_layout.hpp bind_layout): rank `rank`
  // of `size`, for `path`; `caller` names the bind in errors, `transport` the
  // transport in the hang report.
  communicator_base(const runtime_topology& written, std::size_t size, std::size_t rank, options opts, bind_path path,
                    const char* caller, std::string transport)
      : opts_((detail::validate(opts), std::move(opts))),
        layout_(bind_layout(written, size, rank, opts_, path, caller)) {
    std::vector<std::string> links;
    for (std::size_t d = 0; d < layout_.ndims(); ++d) links.push_back(layout_.dim_name(d));
    board_ = std::make_unique<state_board>(rank, size, std::move(transport), std::move(links), opts_.timeout);
  }
  // A communicator of no ranks (a survivor that mdring::shrink left out: its
  // node was dropped): topology() is the shrunk topology, size() 0, and every
  // call throws communicator_error with `why`.
  communicator_base(const runtime_topology& shrunk, options opts, std::string transport, std::string why)
      : opts_(std::move(opts)), broken_(true), broken_why_(std::move(why)) {
    layout_.written = shrunk;
    board_ = std::make_unique<state_board>(0, 0, std::move(transport), std::vector<std::string>{}, opts_.timeout);
  }
  communicator_base(communicator_base&&) noexcept = default;
  communicator_base& operator=(communicator_base&&) noexcept = default;

  std::size_t size() const noexcept { return layout_.size; }
  std::size_t rank() const noexcept { return layout_.rank; }
  // The dimensions of the topology as written (see executed_topology()).
  std::size_t ndims() const noexcept { return layout_.written.ndims(); }
  const std::vector<std::size_t>& coordinates() const noexcept { return layout_.written_coords; }
  const std::vector<std::size_t>& extents() const noexcept { return layout_.written_extents; }
  // The same for executed_topology() (what the executors work with).
  const std::vector<std::size_t>& executed_coordinates() const noexcept { return layout_.coords; }
  const std::vector<std::size_t>& executed_extents() const noexcept { return layout_.extents; }
  // The resolved topology (dynamic extent filled in).
  const runtime_topology& topology() const noexcept { return layout_.written; }
  // The dimensions the collectives run: topology() with adjacent same-link
  // dimensions merged and long rings split (plan/merge.hpp).
  const runtime_topology& executed_topology() const noexcept { return layout_.executed(); }
  // The whole bind result.
  const bound_layout& layout() const noexcept { return layout_; }
  const options& get_options() const noexcept { return opts_; }
  // The algorithm dimension d of topology() runs for commutative ops
  // (non-commutative: direct); a merged dimension reports its merged stage's.
  algorithm algorithm_of(std::size_t d) const { return layout_.algorithm_of(d); }

  // False after an error inside a call (then failure() says which): every later
  // call throws communicator_error.
  bool usable() const noexcept { return !broken_; }
  const std::string& failure() const noexcept { return broken_why_; }

  // ---- for the collectives and executors (found by argument-dependent lookup) ---------
  // Marks the communicator unusable (the first reason stays).
  friend void mark_broken(communicator_base& c, const std::string& why) {
    if (!c.broken_) c.broken_why_ = why;
    c.broken_ = true;
  }
  // What this rank is doing, for the hang report (executor/state.hpp).
  friend state_board& board_of(const communicator_base& c) noexcept { return *c.board_; }

protected:
  // Marks the communicator unusable with `why` in place of any earlier reason (shrink's release).
  void replace_failure(std::string why) {
    broken_ = true;
    broken_why_ = std::move(why);
  }
  options& mutable_options() noexcept { return opts_; }
  bound_layout& mutable_layout() noexcept { return layout_; }

private:
  options opts_;
  bound_layout layout_;
  bool broken_ = false;
  std::string broken_why_;
  std::unique_ptr<state_board> board_;
};

}  // namespace detail

MDRING_NAMESPACE_END
