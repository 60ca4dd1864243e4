// mdring/separate/api.hpp: what a translation unit sees of mdring in separate
// compilation (MDRING_SEPARATE_COMPILATION).
//
// Header-only, every file that binds or calls a collective compiles the library
// (bind, topology detection, planning, the program builder, the engine, the
// transports): about 15 s of CPU per file at -O2. A code that vendors mdring into
// many files defines MDRING_SEPARATE_COMPILATION for all of them and compiles the
// library once, in one file that includes <mdring/separate/src.hpp> (or links the
// CMake target mdring::separate, which does both). Its files then see only this
// header: the topology types, options, errors, ops, node memory, and a
// communicator whose calls go to the compiled library through one indirect call.
// What a call does and its results are the same as header-only (the compiled file
// runs the same templates), and ranks of either kind interoperate.
//
//   #define MDRING_SEPARATE_COMPILATION   (or -DMDRING_SEPARATE_COMPILATION)
//   #include <mdring/mpi.hpp>
//   auto comm = mdring::bind(mdring::ring<mdring::shm> * mdring::ring<mdring::infiniband>, MPI_COMM_WORLD);
//   mdring::all_reduce(comm, grad.data(), grad.size(), mdring::sum);
//
// Compiled are the five blocking collectives over MPI for the element types float,
// double, std::int32_t, std::int64_t, half and bfloat16 with sum, prod, min, max
// and avg (avg: the floating types), explain() and reserve(). Anything else (user
// ops, other types, the threads and UCX transports, nonblocking calls, options
// that take C++ callables) needs header-only use; a call outside the compiled set
// is a compile-time error that says so.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../memory.hpp"
#include "../version.hpp"
#include "../options.hpp"
#include "../vocabulary.hpp"
#include "../reduce/ops.hpp"
#include "../reduce/types.hpp"
#include "../topology/link.hpp"
#include "../topology/ring.hpp"
#include "../topology/runtime.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

MDRING_NAMESPACE_BEGIN

/// Separate compilation (MDRING_SEPARATE_COMPILATION): the compiled set of types and ops.
namespace separate {

/// The element types and ops compiled into the library.
enum class element : unsigned char { float32, float64, int32, int64, float16, bfloat16 };
/// The compiled ops.
enum class op_kind : unsigned char { sum, prod, min, max, avg };

/// Whether a type is compiled into the library; a floating one (avg is compiled for those); whether an op is.
///@{
template <class T>
inline constexpr bool compiled_type =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::int32_t> ||
    std::is_same_v<T, std::int64_t> || std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;
template <class T>
inline constexpr bool floating_type =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;
template <class Op>
inline constexpr bool compiled_op = std::is_same_v<Op, sum_t> || std::is_same_v<Op, prod_t> ||
                                    std::is_same_v<Op, min_t> || std::is_same_v<Op, max_t> || std::is_same_v<Op, avg_t>;
///@}

/// The element (op_kind) that names T (Op) at run time; T and Op must be compiled.
///@{
template <class T>
constexpr element element_of() noexcept {
  if constexpr (std::is_same_v<T, float>) return element::float32;
  else if constexpr (std::is_same_v<T, double>) return element::float64;
  else if constexpr (std::is_same_v<T, std::int32_t>) return element::int32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return element::int64;
  else if constexpr (std::is_same_v<T, half>) return element::float16;
  else return element::bfloat16;
}
template <class Op>
constexpr op_kind op_of() noexcept {
  if constexpr (std::is_same_v<Op, sum_t>) return op_kind::sum;
  else if constexpr (std::is_same_v<Op, prod_t>) return op_kind::prod;
  else if constexpr (std::is_same_v<Op, min_t>) return op_kind::min;
  else if constexpr (std::is_same_v<Op, max_t>) return op_kind::max;
  else return op_kind::avg;
}
///@}

/// Compile-time errors, saying so, for an element type (and op) outside the compiled set.
///@{
template <class T>
constexpr void check_type() {
  static_assert(compiled_type<std::remove_const_t<T>>,
                "mdring (MDRING_SEPARATE_COMPILATION): this element type is not compiled into the library (float, "
                "double, std::int32_t, std::int64_t, half, bfloat16 are); use mdring header-only for it");
}
template <class T, class Op>
constexpr void check_reduction() {
  check_type<T>();
  static_assert(compiled_op<Op>,
                "mdring (MDRING_SEPARATE_COMPILATION): only mdring::sum, prod, min, max and avg are compiled into "
                "the library; a user-defined op needs mdring header-only");
  static_assert(!std::is_same_v<Op, avg_t> || floating_type<std::remove_const_t<T>>,
                "mdring (MDRING_SEPARATE_COMPILATION): avg is compiled for the floating types only");
}
///@}

/// A bound communicator of the compiled library (separate/src.hpp implements it).
class face {
public:
  virtual ~face() = default;
  /// The members of compiled_communicator, and the collectives with the element type and op named at run time.
  ///@{
  virtual std::size_t size() const noexcept = 0;
  virtual std::size_t rank() const noexcept = 0;
  virtual const runtime_topology& topology() const noexcept = 0;
  virtual const options& get_options() const noexcept = 0;
  virtual bool usable() const noexcept = 0;
  virtual const std::string& failure() const noexcept = 0;
  virtual std::size_t scratch_bytes() const noexcept = 0;
  virtual void all_reduce(element, op_kind, const void* send, void* recv, std::size_t count) = 0;
  virtual void reduce_scatter(element, op_kind, const void* send, void* recv, std::size_t recvcount) = 0;
  virtual void all_gather(element, const void* send, void* recv, std::size_t sendcount) = 0;
  virtual void broadcast(element, void* buf, std::size_t count, std::size_t root) = 0;
  virtual void reduce(element, op_kind, const void* send, void* recv, std::size_t count, std::size_t root) = 0;
  virtual std::string explain(element, op_kind, std::size_t count, collective kind, std::size_t root) const = 0;
  virtual void reserve(element, std::size_t count) = 0;
  ///@}
};

}  // namespace separate

/// What bind() returns in separate compilation: the members users call of a
/// header-only communicator (collective/communicator.hpp).
class compiled_communicator {
public:
  /// Takes the compiled library's communicator (what bind() makes).
  explicit compiled_communicator(std::unique_ptr<separate::face> f) noexcept : f_(std::move(f)) {}

  /// As the header-only communicator's members of the same names: size, this rank, the number of dimensions, the
  /// topology, the options, false after an error inside a call, the failure that broke it, the scratch bytes held.
  ///@{
  std::size_t size() const noexcept { return f_->size(); }
  std::size_t rank() const noexcept { return f_->rank(); }
  std::size_t ndims() const noexcept { return f_->topology().ndims(); }
  const runtime_topology& topology() const noexcept { return f_->topology(); }
  const options& get_options() const noexcept { return f_->get_options(); }
  bool usable() const noexcept { return f_->usable(); }
  const std::string& failure() const noexcept { return f_->failure(); }
  std::size_t scratch_bytes() const noexcept { return f_->scratch_bytes(); }
  ///@}
  /// The plan of a call, as the header-only communicator's explain().
  template <class T = float, class Op = sum_t>
  std::string explain(std::size_t count, collective kind = collective::all_reduce, Op = {},
                      std::size_t root = 0) const {
    separate::check_type<T>();
    static_assert(separate::compiled_op<Op>, "mdring (MDRING_SEPARATE_COMPILATION): explain() of a compiled op");
    return f_->explain(separate::element_of<T>(), separate::op_of<Op>(), count, kind, root);
  }
  /// Pre-sizes the scratch for calls of `count` elements of T, as the header-only communicator's reserve().
  template <class T>
  void reserve(std::size_t count) {
    separate::check_type<T>();
    f_->reserve(separate::element_of<T>(), count);
  }

  separate::face& compiled() noexcept { return *f_; }  ///< the compiled library's communicator

private:
  std::unique_ptr<separate::face> f_;
};

// ---- the collectives (their header-only forms: collective/*.hpp) -----------------
/// The collectives, as their header-only forms (collective/*.hpp), for the compiled types and ops; a call outside that
/// set does not compile.
///@{
template <class T, class Op = sum_t>
void all_reduce(compiled_communicator& comm, const T* sendbuf, T* recvbuf, std::size_t count, Op = {}) {
  separate::check_reduction<T, Op>();
  comm.compiled().all_reduce(separate::element_of<T>(), separate::op_of<Op>(), sendbuf, recvbuf, count);
}
template <class T, class Op = sum_t>
void all_reduce(compiled_communicator& comm, T* buf, std::size_t count, Op op = {}) {
  all_reduce(comm, static_cast<const T*>(buf), buf, count, op);
}
template <class T, class Op = sum_t>
void all_reduce(compiled_communicator& comm, std::span<T> buf, Op op = {}) {
  all_reduce(comm, static_cast<const T*>(buf.data()), buf.data(), buf.size(), op);
}
template <class T, class Op = sum_t>
void reduce_scatter(compiled_communicator& comm, const T* sendbuf, T* recvbuf, std::size_t recvcount, Op = {}) {
  separate::check_reduction<T, Op>();
  comm.compiled().reduce_scatter(separate::element_of<T>(), separate::op_of<Op>(), sendbuf, recvbuf, recvcount);
}
template <class T>
void all_gather(compiled_communicator& comm, const T* sendbuf, T* recvbuf, std::size_t sendcount) {
  separate::check_type<T>();
  comm.compiled().all_gather(separate::element_of<T>(), sendbuf, recvbuf, sendcount);
}
template <class T>
void broadcast(compiled_communicator& comm, T* buf, std::size_t count, std::size_t root) {
  separate::check_type<T>();
  comm.compiled().broadcast(separate::element_of<T>(), buf, count, root);
}
template <class T, class Op = sum_t>
void reduce(compiled_communicator& comm, const T* sendbuf, T* recvbuf, std::size_t count, std::size_t root, Op = {}) {
  separate::check_reduction<T, Op>();
  comm.compiled().reduce(separate::element_of<T>(), separate::op_of<Op>(), sendbuf, recvbuf, count, root);
}
///@}

MDRING_NAMESPACE_END
