// mdring/collective/checks.hpp: what every collective checks before it moves
// anything, on the host path and on the GPU path alike.
//
//   1. compile time: T is trivially copyable, Op can reduce T, and a non-commutative
//      op meets no ring-only dimension (static_checks: static_assert, naming the link);
//   2. run time, locally: the communicator is usable; buffers are not null when
//      count > 0; send and receive buffers either coincide (in place) or do not
//      overlap at all; root is a rank; the op fits the chosen algorithms
//      (check_null, check_overlap, check_root, check_op; first_error keeps the first).
//
// Arguments that pass cost a few compares: each collective's buffer check
// (all_reduce_buffers, ...) asks the predicates (holds, apart, is_rank) first and
// builds no std::optional<arg_error> and no message unless one fails (the messages
// are built out of line). Building them on every call was a measured part of a small
// call (docs/DESIGN.md, "The call's machinery").
//
// A failed check is an arg_error: the argument's name and what is wrong with it, which
// the caller throws as invalid_argument (after the ranks' agreement under
// check_level::collective: collective/agreement.hpp).
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../fnv.hpp"
#include "../options.hpp"
#include "../reduce/ops.hpp"
#include "../reduce/types.hpp"
#include "communicator_base.hpp"
#include "ring_only.hpp"

#include <cstdint>
#include <cstdio>
#include <iterator>
#include <optional>
#include <string>
#include <type_traits>

MDRING_NAMESPACE_BEGIN

namespace detail {

template <class C, class T, class Op>
constexpr void static_checks() {
  static_assert(std::is_trivially_copyable_v<T>, "mdring: the element type must be trivially copyable");
  static_assert(reduction_for<Op, T>,
                "mdring: the op cannot reduce this element type. Built-in ops (sum, prod, min, max, avg) take "
                "arithmetic types, mdring::half and mdring::bfloat16; a user op must be callable as T(T, T).");
  using topo = typename C::topology_type;
  if constexpr (!op_traits<Op>::commutative && has_ring_only_dimension<topo>())
    non_commutative_op_on_ring_dimension<typename first_ring_only_link<topo>::type, Op>();
}

// A local argument error, before any message: which argument, and what is wrong.
struct arg_error {
  std::string argument;
  std::string what;
};

// The arguments a rank can get wrong, numbered for the collective agreement, so
// that every rank names the same one.
inline constexpr const char* argument_names[] = {"sendbuf", "recvbuf", "buf", "root", "op", "count"};

inline int argument_code(const std::string& argument) {
  for (int i = 0; i < int(std::size(argument_names)); ++i)
    if (argument == argument_names[i]) return i + 1;
  return int(std::size(argument_names));  // "count"
}

// A stable id of a type (element type or op), without RTTI: a hash of the
// compiler's spelling of the type. Ranks of one program get the same id.
template <class T>
std::int64_t type_id() {
#if defined(_MSC_VER)
  const char* s = __FUNCSIG__;
#else
  const char* s = __PRETTY_FUNCTION__;
#endif
  return std::int64_t(fnv1a(s) >> 2);
}

inline std::uintptr_t addr(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }

// [a, a+an) and [b, b+bn) in bytes overlap.
inline bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) noexcept {
  if (!an || !bn) return false;
  return addr(a) < addr(b) + bn && addr(b) < addr(a) + an;
}

inline std::string ptr_string(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

inline std::optional<arg_error> check_op(const communicator_base& comm, bool commutative, const char* name) {
  if (commutative) return std::nullopt;
  const auto& written = comm.topology();
  const auto& requested = comm.get_options().algorithms;
  for (std::size_t d = 0; d < written.ndims(); ++d) {
    const auto& dim = written.dim(d);
    if (dim.extent < 2) continue;
    if (d < requested.size() && (requested[d] == algorithm::ring || requested[d] == algorithm::halving_doubling ||
                                 requested[d] == algorithm::recursive_doubling))
      return arg_error{"op", std::string("mdring::") + name + ": options.algorithms[" + std::to_string(d) + "] is " +
                                 std::string(to_string(requested[d])) +
                                 ", but the op is not commutative; only the direct algorithm combines in "
                                 "rank order"};
    if (!dim.link.fully_connected)
      return arg_error{
          "op", std::string("mdring::") + name + ": the op is not commutative, but dimension " + std::to_string(d) +
                    " (" + dim.link.name +
                    ") is ring-only (its link is not fully connected); a ring folds blocks in rotated order"};
  }
  return std::nullopt;
}

[[noreturn]] inline void throw_unusable(const std::string& name, const std::string& failure) {
  throw communicator_error("mdring::" + name + ": the communicator is unusable after an earlier error (" + failure +
                           "); bind a new one");
}

// The local checks shared by the collectives.
// `count` elements must be readable/writable at p. `count_text` says where that
// count comes from when it is not the count argument itself.
inline bool holds(const void* p, std::size_t count) noexcept { return count == 0 || p != nullptr; }
MDRING_COLD inline arg_error null_error(const char* name, const char* arg, std::size_t count, const char* count_text) {
  return arg_error{arg, std::string("mdring::") + name + ": " + arg + " is null but must hold " + count_text + " = " +
                            std::to_string(count) + " elements"};
}
inline std::optional<arg_error> check_null(const char* name, const char* arg, const void* p, std::size_t count,
                                           const char* count_text = "count") {
  if (holds(p, count)) return std::nullopt;
  return null_error(name, arg, count, count_text);
}

inline bool is_rank(std::size_t root, std::size_t size) noexcept { return root < size; }
MDRING_COLD inline arg_error root_error(const char* name, std::size_t root, std::size_t size) {
  return arg_error{"root", std::string("mdring::") + name + ": root " + std::to_string(root) +
                               " is not a rank of this communicator (size " + std::to_string(size) + ")"};
}
inline std::optional<arg_error> check_root(const char* name, std::size_t root, std::size_t size) {
  if (is_rank(root, size)) return std::nullopt;
  return root_error(name, root, size);
}

// send [s, s+sn) and recv [r, r+rn) (bytes) must coincide as described by
// `in_place_ok` or not overlap at all.
inline bool apart(const void* s, std::size_t sn, const void* r, std::size_t rn, bool in_place) noexcept {
  return in_place || !overlaps(s, sn, r, rn);
}
MDRING_COLD inline arg_error overlap_error(const char* name, const void* s, std::size_t sn, const void* r,
                                           std::size_t rn, const char* in_place_rule) {
  return arg_error{"recvbuf", std::string("mdring::") + name + ": sendbuf [" + ptr_string(s) + ", +" +
                                  std::to_string(sn) + " bytes) and recvbuf [" + ptr_string(r) + ", +" +
                                  std::to_string(rn) + " bytes) overlap partially; for in place " + in_place_rule};
}
inline std::optional<arg_error> check_overlap(const char* name, const void* s, std::size_t sn, const void* r,
                                              std::size_t rn, bool in_place, const char* in_place_rule) {
  if (apart(s, sn, r, rn, in_place)) return std::nullopt;
  return overlap_error(name, s, sn, r, rn, in_place_rule);
}

// The first of the errors that is there.
inline std::optional<arg_error> first_error(std::optional<arg_error>&& e) { return std::move(e); }
template <class... E>
std::optional<arg_error> first_error(std::optional<arg_error>&& e, E&&... rest) {
  if (e) return std::move(e);
  return first_error(std::forward<E>(rest)...);
}
// f(): the errors of arguments that failed a predicate, built out of line (the
// buffer checks below return at once when every predicate holds).
template <class F>
MDRING_COLD std::optional<arg_error> errors_of(F&& f) {
  return f();
}

// A sendbuf and a recvbuf of send_count and recv_count elements of `bytes` each
// (send_text, recv_text: where those counts come from): neither null while it must
// hold elements, and apart unless in place (in_place_rule says what in place is).
// Checks the predicates first; the errors, in that order, only when one fails.
inline std::optional<arg_error> two_buffers(const char* name, const void* send, std::size_t send_count,
                                            const char* send_text, const void* recv, std::size_t recv_count,
                                            const char* recv_text, std::size_t bytes, bool in_place,
                                            const char* in_place_rule) {
  const std::size_t sn = send_count * bytes, rn = recv_count * bytes;
  if (holds(send, send_count) && holds(recv, recv_count) && apart(send, sn, recv, rn, in_place)) return std::nullopt;
  return errors_of([&] {
    return first_error(check_null(name, "sendbuf", send, send_count, send_text),
                       check_null(name, "recvbuf", recv, recv_count, recv_text),
                       check_overlap(name, send, sn, recv, rn, in_place, in_place_rule));
  });
}

// Each collective's buffer checks (null buffers, partial overlap, in-place rules),
// the host path's and the GPU path's alike (the GPU path adds alignment); `bytes`
// is the element's size. The first failure, or none.
inline std::optional<arg_error> all_reduce_buffers(const char* name, const void* send, const void* recv,
                                                   std::size_t count, std::size_t bytes) {
  return two_buffers(name, send, count, "count", recv, count, "count", bytes, send == recv,
                     "pass the same pointer twice");
}
inline std::optional<arg_error> reduce_scatter_buffers(const char* name, std::size_t rank, std::size_t size,
                                                       const void* send, const void* recv, std::size_t recvcount,
                                                       std::size_t bytes) {
  return two_buffers(name, send, recvcount * size, "size() * recvcount", recv, recvcount, "recvcount", bytes,
                     addr(recv) == addr(send) + rank * recvcount * bytes,
                     "recvbuf must be sendbuf + rank() * recvcount");
}
inline std::optional<arg_error> all_gather_buffers(const char* name, std::size_t rank, std::size_t size,
                                                   const void* send, const void* recv, std::size_t sendcount,
                                                   std::size_t bytes) {
  return two_buffers(name, send, sendcount, "sendcount", recv, sendcount * size, "size() * sendcount", bytes,
                     addr(send) == addr(recv) + rank * sendcount * bytes,
                     "sendbuf must be recvbuf + rank() * sendcount");
}
inline std::optional<arg_error> broadcast_buffers(const char* name, std::size_t root, std::size_t size, const void* buf,
                                                  std::size_t count) {
  if (!is_rank(root, size)) return root_error(name, root, size);
  return check_null(name, "buf", buf, count);
}
// recvbuf counts at the root only.
inline std::optional<arg_error> reduce_buffers(const char* name, std::size_t root, std::size_t rank, std::size_t size,
                                               const void* send, const void* recv, std::size_t count,
                                               std::size_t bytes) {
  if (!is_rank(root, size)) return root_error(name, root, size);
  if (rank != root) return check_null(name, "sendbuf", send, count);
  return two_buffers(name, send, count, "count", recv, count, "count", bytes, send == recv,
                     "pass the same pointer twice");
}

}  // namespace detail

MDRING_NAMESPACE_END
