// libmdring-pmpi.so: what a datatype and an op are, in MPI-3.1 5.9.2's terms,
// and the C++ element type and op that reduce them (mdring's own loops, or the
// MPI library's PMPI_Reduce_local on elements of the datatype's extent).
// Included by mdring_pmpi.cpp only.
#pragma once

#include <mdring/mpi.hpp>

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace mdring_pmpi {

namespace md = mdring;

// ---- datatypes and ops ------------------------------------------------------
// MPI-3.1 5.9.2's classes: C integer (sint, uint), Fortran integer and the
// multi-language types (fint: no logical ops), floating point, complex, logical,
// byte, the MINLOC/MAXLOC pairs; other: predefined, but for user ops only.
enum class kind { none, sint, uint, fint, flt, cplx, logical, byte, pair, other };
struct type_info {
  kind k = kind::none;
  std::size_t size = 0;    // bytes of data per element
  std::size_t extent = 0;  // stride
};

type_info classify_uncached(MPI_Datatype dt) {
  type_info t;
  if (dt == MPI_DATATYPE_NULL) return t;
  static const struct {
    MPI_Datatype d;
    kind k;
  } table[] = {
      {MPI_DOUBLE, kind::flt},
      {MPI_FLOAT, kind::flt},
      {MPI_INT, kind::sint},
      {MPI_LONG, kind::sint},
      {MPI_LONG_LONG, kind::sint},
      {MPI_LONG_LONG_INT, kind::sint},
      {MPI_SIGNED_CHAR, kind::sint},
      {MPI_SHORT, kind::sint},
      {MPI_INT8_T, kind::sint},
      {MPI_INT16_T, kind::sint},
      {MPI_INT32_T, kind::sint},
      {MPI_INT64_T, kind::sint},
      {MPI_AINT, kind::fint},
      {MPI_OFFSET, kind::fint},
      {MPI_COUNT, kind::fint},
      {MPI_INTEGER, kind::fint},
      {MPI_INTEGER1, kind::fint},
      {MPI_INTEGER2, kind::fint},
      {MPI_INTEGER4, kind::fint},
      {MPI_INTEGER8, kind::fint},
      {MPI_UNSIGNED_CHAR, kind::uint},
      {MPI_UNSIGNED_SHORT, kind::uint},
      {MPI_UNSIGNED, kind::uint},
      {MPI_UNSIGNED_LONG, kind::uint},
      {MPI_UNSIGNED_LONG_LONG, kind::uint},
      {MPI_UINT8_T, kind::uint},
      {MPI_UINT16_T, kind::uint},
      {MPI_UINT32_T, kind::uint},
      {MPI_UINT64_T, kind::uint},
      {MPI_LONG_DOUBLE, kind::flt},
      {MPI_REAL, kind::flt},
      {MPI_DOUBLE_PRECISION, kind::flt},
      {MPI_REAL4, kind::flt},
      {MPI_REAL8, kind::flt},
      {MPI_C_COMPLEX, kind::cplx},
      {MPI_C_FLOAT_COMPLEX, kind::cplx},
      {MPI_C_DOUBLE_COMPLEX, kind::cplx},
      {MPI_C_LONG_DOUBLE_COMPLEX, kind::cplx},
      {MPI_COMPLEX, kind::cplx},
      {MPI_DOUBLE_COMPLEX, kind::cplx},
      {MPI_CXX_FLOAT_COMPLEX, kind::cplx},
      {MPI_CXX_DOUBLE_COMPLEX, kind::cplx},
      {MPI_C_BOOL, kind::logical},
      {MPI_CXX_BOOL, kind::logical},
      {MPI_LOGICAL, kind::logical},
      {MPI_BYTE, kind::byte},
      {MPI_FLOAT_INT, kind::pair},
      {MPI_DOUBLE_INT, kind::pair},
      {MPI_LONG_INT, kind::pair},
      {MPI_2INT, kind::pair},
      {MPI_SHORT_INT, kind::pair},
      {MPI_LONG_DOUBLE_INT, kind::pair},
      {MPI_2REAL, kind::pair},
      {MPI_2DOUBLE_PRECISION, kind::pair},
      {MPI_2INTEGER, kind::pair},
  };
  for (auto& e : table)
    if (e.d == dt && e.d != MPI_DATATYPE_NULL) {
      t.k = e.k;
      break;
    }
  if (t.k == kind::none) {
    // Predefined but not in the table (MPI_CHAR, MPI_WCHAR, ...): user ops only.
    int ni, na, nd, combiner;
    if (PMPI_Type_get_envelope(dt, &ni, &na, &nd, &combiner) != MPI_SUCCESS || combiner != MPI_COMBINER_NAMED) return t;
    t.k = kind::other;
  }
  int size = 0;
  MPI_Aint lb = 0, extent = 0;
  PMPI_Type_size(dt, &size);
  PMPI_Type_get_extent(dt, &lb, &extent);
  if (size <= 0 || lb != 0 || extent <= 0) return type_info{};
  t.size = std::size_t(size);
  t.extent = std::size_t(extent);
  return t;
}

// Predefined datatypes are never freed, so the last one seen is remembered (a
// derived handle may be freed and its value reused: not cached).
type_info classify(MPI_Datatype dt) {
  thread_local MPI_Datatype last = MPI_DATATYPE_NULL;
  thread_local type_info last_info;
  if (dt == last && dt != MPI_DATATYPE_NULL) return last_info;
  const type_info t = classify_uncached(dt);
  if (t.k != kind::none) last = dt, last_info = t;
  return t;
}

// Bcast and Allgather move bytes: any datatype whose elements are contiguous and
// gap-free (a derived type too). Bytes per element, or 0.
std::size_t contiguous_bytes(MPI_Datatype dt) {
  if (dt == MPI_DATATYPE_NULL) return 0;
  int size = 0;
  MPI_Aint lb = 0, extent = 0, tlb = 0, textent = 0;
  if (PMPI_Type_size(dt, &size) != MPI_SUCCESS || size <= 0) return 0;
  PMPI_Type_get_extent(dt, &lb, &extent);
  PMPI_Type_get_true_extent(dt, &tlb, &textent);
  if (lb != 0 || tlb != 0 || extent != size || textent != size) return 0;
  return std::size_t(size);
}

enum class opclass { invalid, minmax, sumprod, logical, bitwise, loc, user };
opclass classify_op(MPI_Op op) {
  if (op == MPI_MIN || op == MPI_MAX) return opclass::minmax;
  if (op == MPI_SUM || op == MPI_PROD) return opclass::sumprod;
  if (op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR) return opclass::logical;
  if (op == MPI_BAND || op == MPI_BOR || op == MPI_BXOR) return opclass::bitwise;
  if (op == MPI_MINLOC || op == MPI_MAXLOC) return opclass::loc;
  if (op == MPI_OP_NULL || op == MPI_REPLACE || op == MPI_NO_OP) return opclass::invalid;
  return opclass::user;
}

// MPI-3.1 section 5.9.2: which predefined ops apply to which types.
bool defined_for(opclass o, kind k) {
  const bool c_integer = k == kind::sint || k == kind::uint, integer = c_integer || k == kind::fint;
  switch (o) {
    case opclass::minmax:
      return integer || k == kind::flt;
    case opclass::sumprod:
      return integer || k == kind::flt || k == kind::cplx;
    case opclass::logical:
      return c_integer || k == kind::logical;
    case opclass::bitwise:
      return integer || k == kind::byte;
    case opclass::loc:
      return k == kind::pair;
    case opclass::user:
      return k != kind::none;
    default:
      return false;
  }
}

// Elements of `extent` bytes, reduced by the MPI library itself (PMPI_Reduce_local):
// every predefined op/type pair and every user op, with MPI's exact semantics
// (MINLOC's lowest index on ties, Fortran LOGICAL, complex types).
template <std::size_t N>
struct blob {
  unsigned char b[N];
};
template <std::size_t N>
struct mpi_local_op {
  static constexpr const char* name = "MPI_Op";
  MPI_Datatype type;
  MPI_Op op;
  void reduce_local(const blob<N>* in, blob<N>* inout, std::size_t n) const {
    PMPI_Reduce_local(in, inout, int(n), type, op);
  }
};

// The element sizes a datatype's extent may have (the predefined types': 1 to 32).
using supported_extents = std::index_sequence<1, 2, 4, 8, 16, 32>;
template <std::size_t... N>
constexpr bool has_extent(std::size_t e, std::index_sequence<N...>) {
  return ((e == N) || ...);
}
template <class F, std::size_t... N>
bool reduce_as_blob(std::size_t e, MPI_Datatype dt, MPI_Op op, F& f, std::index_sequence<N...>) {
  return ((e == N ? (f(blob<N>{}, mpi_local_op<N>{dt, op}), true) : false) || ...);
}

// Calls f(T{}, op) with the C++ element type and op: mdring's own vectorized ops
// for sum/prod/min/max on float, double, int32 and int64; the MPI library's
// reduce_local on elements of the datatype's extent otherwise.
template <class F>
void with_reduction(const type_info& t, MPI_Datatype dt, MPI_Op op, F&& f) {
  auto builtin = [&](auto tag) -> bool {
    if (op == MPI_SUM) return f(tag, md::sum), true;
    if (op == MPI_PROD) return f(tag, md::prod), true;
    if (op == MPI_MIN) return f(tag, md::min), true;
    if (op == MPI_MAX) return f(tag, md::max), true;
    return false;
  };
  if (t.size == t.extent) {
    if (t.k == kind::flt && t.size == 4 && builtin(float{})) return;
    if (t.k == kind::flt && t.size == 8 && builtin(double{})) return;
    const bool signed_int = t.k == kind::sint || t.k == kind::fint;
    if (signed_int && t.size == 4 && builtin(std::int32_t{})) return;
    if (signed_int && t.size == 8 && builtin(std::int64_t{})) return;
  }
  if (!reduce_as_blob(t.extent, dt, op, f, supported_extents{}))
    throw std::logic_error("mdring-pmpi: no element type of " + std::to_string(t.extent) + " bytes");
}
bool extent_supported(std::size_t e) { return has_extent(e, supported_extents{}); }

}  // namespace mdring_pmpi
