// mdring/plan/program_cache.hpp: programs built once and reused.
//
// A program names buffers instead of pointing at them (plan/program.hpp), so the
// program of a call serves every later call with the same parameters. A
// communicator keeps the most recent ones; a call whose program is here builds
// nothing and allocates nothing. A reference returned by get() stays valid until
// the next get() (a communicator runs one call at a time).
//
// get() takes the builder of the call's collective (plan/collective_programs.hpp:
// make_all_reduce_program, ..., or make_program for any), so that a program which
// calls only all_reduce compiles only all_reduce's builder.
#pragma once

#include "../config.hpp"
#include "build_program.hpp"
#include "program.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// The most recent programs of a communicator (see the top).
class program_cache {
public:
  static constexpr std::size_t capacity = 16;  ///< programs kept

  using builder = program (*)(const program_params&);  ///< a collective's program builder

  /// The program of `p`, from the cache or built with `build` (and kept, evicting the least recently used).
  const program& get(const program_params& p, builder build) {
    ++clock_;
    entry* victim = &entries_[0];
    for (auto& e : entries_) {
      if (e.used && same(e, p)) return e.used = clock_, e.pr;
      if (e.used < victim->used) victim = &e;
    }
    victim->kind = p.kind, victim->count = p.count, victim->rank = p.rank, victim->root = p.root;
    victim->elem_size = p.elem_size, victim->segment_length = p.segment_length;
    victim->vector_elements = p.vector_elements, victim->recv_misalignment = p.recv_misalignment;
    victim->nontemporal_bytes = p.nontemporal_bytes, victim->trees = p.trees;
    victim->shared_reduce_max_bytes = p.shared_reduce_max_bytes, victim->shared_reduce_split = p.shared_reduce_split;
    victim->dims.assign(p.dims.begin(), p.dims.end());
    victim->pr = build(p);
    victim->used = clock_;
    ++built_;
    return victim->pr;
  }
  /// Programs built so far (tests: a repeated call builds nothing).
  std::uint64_t built() const noexcept { return built_; }

private:
  struct entry {
    collective kind = collective::all_reduce;
    std::size_t count = 0, rank = 0, root = 0, elem_size = 0, segment_length = 0;
    std::size_t vector_elements = 0, recv_misalignment = 0, nontemporal_bytes = 0, shared_reduce_max_bytes = 0;
    bool trees = false, shared_reduce_split = false;
    std::vector<dim_program> dims;
    program pr;
    std::uint64_t used = 0;  // 0: empty
  };
  static bool same(const entry& e, const program_params& p) {
    return e.kind == p.kind && e.count == p.count && e.rank == p.rank && e.root == p.root &&
           e.elem_size == p.elem_size && e.segment_length == p.segment_length &&
           e.vector_elements == p.vector_elements && e.recv_misalignment == p.recv_misalignment &&
           e.nontemporal_bytes == p.nontemporal_bytes && e.trees == p.trees &&
           e.shared_reduce_max_bytes == p.shared_reduce_max_bytes && e.shared_reduce_split == p.shared_reduce_split &&
           std::equal(e.dims.begin(), e.dims.end(), p.dims.begin(), p.dims.end());
  }
  std::array<entry, capacity> entries_{};
  std::uint64_t clock_ = 0, built_ = 0;
};

MDRING_NAMESPACE_END
