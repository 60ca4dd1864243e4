// mdring/reduce/ops.hpp: reduction operations and their traits.
//
//   mdring::sum, mdring::prod, mdring::min, mdring::max, mdring::avg
//   any callable f(T, T) -> T                      (taken as commutative and associative)
//   mdring::non_commutative(f)                     (associative only: reduced in rank order)
//   a bulk op: op.reduce_local(in, inout, n)       (inout[i] = in[i] op inout[i] for a whole
//                                                   array at once; host path only, commutative)
//
// Semantics, per element x_0 .. x_{P-1} (rank order):
//   sum   x_0 + ... + x_{P-1}; integers wrap modulo 2^bits (no undefined overflow)
//   prod  x_0 * ... * x_{P-1}; integers wrap likewise
//   min   the smallest; max the largest (comparisons with <; a NaN may or may not win)
//   avg   sum / P, divided once by the owner of the element; integers truncate toward 0
//
// op_traits<Op> tells the plan what it may do: a non-commutative op forces the
// direct algorithm (which combines in rank order) on every dimension, and is
// rejected at compile time on a topology that has a ring-only dimension.
#pragma once

#include "../config.hpp"
#include "types.hpp"

#include <concepts>
#include <cstddef>
#include <type_traits>
#include <utility>

MDRING_NAMESPACE_BEGIN

namespace detail {
// Integer + and * in the unsigned type, so that overflow wraps instead of being UB.
template <class T>
MDRING_HOST_DEVICE constexpr T wrap_add(T a, T b) noexcept {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(a + b);
  } else {
    return a + b;
  }
}
template <class T>
MDRING_HOST_DEVICE constexpr T wrap_mul(T a, T b) noexcept {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, T>>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}
}  // namespace detail

/// The built-in ops work on accumulator_t<T> (float for half and bfloat16).
struct sum_t {
  static constexpr const char* name = "sum";  ///< the op's name in explain() and errors
  /// a + b (integers wrap).
  template <class A>
  MDRING_HOST_DEVICE constexpr A operator()(A a, A b) const noexcept {
    return detail::wrap_add(a, b);
  }
};
/// The product (integers wrap).
struct prod_t {
  static constexpr const char* name = "prod";  ///< the op's name in explain() and errors
  /// a * b (integers wrap).
  template <class A>
  MDRING_HOST_DEVICE constexpr A operator()(A a, A b) const noexcept {
    return detail::wrap_mul(a, b);
  }
};
/// The minimum.
struct min_t {
  static constexpr const char* name = "min";  ///< the op's name in explain() and errors
  /// The smaller of a and b.
  template <class A>
  MDRING_HOST_DEVICE constexpr A operator()(A a, A b) const noexcept {
    return b < a ? b : a;
  }
};
/// The maximum.
struct max_t {
  static constexpr const char* name = "max";  ///< the op's name in explain() and errors
  /// The larger of a and b.
  template <class A>
  MDRING_HOST_DEVICE constexpr A operator()(A a, A b) const noexcept {
    return a < b ? b : a;
  }
};
/// Sum, then one division by the number of ranks, fused into the owner's last pass.
struct avg_t {
  static constexpr const char* name = "avg";  ///< the op's name in explain() and errors
  /// a + b; finalize() then divides by the number of ranks.
  template <class A>
  MDRING_HOST_DEVICE constexpr A operator()(A a, A b) const noexcept {
    return detail::wrap_add(a, b);
  }
  /// The division happens in the widest type of A's kind, so that `ranks` never
  /// wraps (300 ranks of uint8 divide by 300, not by 44).
  template <class A>
  MDRING_HOST_DEVICE constexpr A finalize(A a, std::size_t ranks) const noexcept {
    if constexpr (std::is_integral_v<A> && std::is_signed_v<A>)
      return static_cast<A>(static_cast<long long>(a) / static_cast<long long>(ranks));
    else if constexpr (std::is_integral_v<A>)
      return static_cast<A>(static_cast<unsigned long long>(a) / static_cast<unsigned long long>(ranks));
    else return static_cast<A>(a / static_cast<A>(ranks));
  }
};

/// The ops' values: `mdring::all_reduce(comm, buf, n, mdring::sum)`.
///@{
inline constexpr sum_t sum{};
inline constexpr prod_t prod{};
inline constexpr min_t min{};
inline constexpr max_t max{};
inline constexpr avg_t avg{};
///@}

/// Wraps an associative but non-commutative callable. The library then combines
/// contributions strictly in rank order (x_0 op x_1 op ... op x_{P-1}).
template <class F>
struct non_commutative_op {
  F f;  ///< the wrapped callable
  /// f(a, b).
  template <class T>
    requires std::is_invocable_r_v<T, const F&, const T&, const T&>
  constexpr T operator()(const T& a, const T& b) const {
    return f(a, b);
  }
};
/// Wraps `f` as a non-commutative op.
template <class F>
constexpr non_commutative_op<std::decay_t<F>> non_commutative(F&& f) {
  return {std::forward<F>(f)};
}

namespace detail {
template <class Op>
struct builtin_op : std::false_type {};
template <>
struct builtin_op<sum_t> : std::true_type {};
template <>
struct builtin_op<prod_t> : std::true_type {};
template <>
struct builtin_op<min_t> : std::true_type {};
template <>
struct builtin_op<max_t> : std::true_type {};
template <>
struct builtin_op<avg_t> : std::true_type {};

template <class Op>
constexpr bool declared_commutative() {
  if constexpr (requires { Op::is_commutative; }) return bool(Op::is_commutative);
  else return true;
}
template <class F>
struct is_non_commutative_wrapper : std::false_type {};
template <class F>
struct is_non_commutative_wrapper<non_commutative_op<F>> : std::true_type {};
}  // namespace detail

/// What the plan needs to know about an op. Specialize it for your own functor, or
/// give the functor `static constexpr bool is_commutative = false;`.
template <class Op>
struct op_traits {
  static constexpr bool builtin = detail::builtin_op<Op>::value;  ///< Op is sum_t, prod_t, min_t, max_t or avg_t
  /// False for non_commutative_op and for a functor whose is_commutative is false.
  static constexpr bool commutative =
      !detail::is_non_commutative_wrapper<Op>::value && detail::declared_commutative<Op>();
  static constexpr bool has_finalize = std::is_same_v<Op, avg_t>;  ///< avg: a finalize() after the last fold
  /// Op::name where it has one, else "user op".
  static constexpr const char* name() noexcept {
    if constexpr (requires { Op::name; }) return Op::name;
    else return "user op";
  }
};

/// A bulk op reduces whole arrays in one call, the way MPI_Reduce_local does:
///   op.reduce_local(in, inout, n)   inout[i] = in[i] op inout[i], i < n
/// It suits an op whose per-element call would be expensive (a function pointer, an
/// MPI_Op applied by the MPI library: the drop-in interposer uses this). The host
/// executor calls it on tiles of a few KiB; it must be commutative (the folds give
/// it its inputs in either order), and it has no finalize. The GPU path rejects it.
template <class Op, class T>
concept bulk_reduction =
    !op_traits<Op>::builtin && op_traits<Op>::commutative &&
    requires(const Op& op, const T* in, T* inout, std::size_t n) { op.reduce_local(in, inout, n); };

/// Op can reduce elements of type T: a built-in op on a built-in element type, a
/// callable (T, T) -> T on a trivially copyable T, or a bulk op.
template <class Op, class T>
concept reduction_for =
    std::is_trivially_copyable_v<T> &&
    ((op_traits<Op>::builtin && builtin_element<T>) ||
     (!op_traits<Op>::builtin && std::is_invocable_r_v<T, const Op&, const T&, const T&>) || bulk_reduction<Op, T>);

MDRING_NAMESPACE_END
