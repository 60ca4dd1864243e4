// mdring/collective/ring_only.hpp: the compile-time check that a non-commutative
// op meets no ring-only dimension (collective/checks.hpp static_checks): a ring folds
// blocks in rotated order, so only a fully connected link (the direct algorithm,
// which combines in rank order) can run such an op.
#pragma once

#include "../config.hpp"
#include "../topology/link.hpp"
#include "../topology/ring.hpp"

#include <type_traits>

MDRING_NAMESPACE_BEGIN

namespace detail {

// A compile-time topology has a ring-only dimension (a link that is not fully
// connected): non-commutative ops cannot run on it.
template <class Topology>
constexpr bool has_ring_only_dimension() {
  if constexpr (static_topology<Topology>) {
    return []<class... R>(detail::type_list<R...>) {
      return (!link_traits<typename R::link_type>::fully_connected || ...);
    }(typename Topology::rings{});
  } else {
    return false;
  }
}

template <class Topology>
struct first_ring_only_link {
  using type = void;
};
template <class... R>
struct first_ring_only_link<topology<R...>> {
  template <class...>
  struct pick {
    using type = void;
  };
  template <class H, class... Tl>
  struct pick<H, Tl...> {
    using type = std::conditional_t<!link_traits<typename H::link_type>::fully_connected, typename H::link_type,
                                    typename pick<Tl...>::type>;
  };
  using type = typename pick<R...>::type;
};
template <class L, std::size_t N>
struct first_ring_only_link<ring_t<L, N>> : first_ring_only_link<topology<ring_t<L, N>>> {};

// Instantiated only to fail: the compiler prints Link (the offending link tag) and
// Op in the "required from" lines beneath this message.
template <class Link, class Op>
constexpr bool non_commutative_op_on_ring_dimension() {
  static_assert(sizeof(Link) == 0,
                "mdring: this op is not commutative, but the topology has a ring-only dimension "
                "(Link below has link_traits::fully_connected == false). A ring folds blocks in "
                "rotated order, so only commutative ops may run on it; use a commutative op or a "
                "fully connected link.");
  return false;
}

}  // namespace detail

MDRING_NAMESPACE_END
