// nccl/arguments.hpp: NCCL's arguments, checked and mapped to mdring's: element
// types, reduction ops (PreMulSum included), roots, peers, counts and buffers.
// Host code only (no CUDA runtime call), so that CI tests it without a GPU.
#pragma once

#include "errors.hpp"

#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace mdring_nccl {

// The element types mdring reduces (ncclDataType_t without fp8).
enum class element : unsigned char { i8, u8, i32, u32, i64, u64, f16, f32, f64, bf16 };

struct type_info {
  element kind;
  std::size_t bytes;
  const char* name;  // the header's name, for messages
};

// The name of an ncclDataType_t value, for messages ("datatype 42" when it is none).
inline std::string type_name(ncclDataType_t t) {
  static const char* names[] = {"ncclInt8",    "ncclUint8",    "ncclInt32",      "ncclUint32",
                                "ncclInt64",   "ncclUint64",   "ncclFloat16",    "ncclFloat32",
                                "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
  const int v = int(t);
  if (v >= 0 && v < int(sizeof names / sizeof *names) && v < int(ncclNumTypes)) return names[v];
  return "datatype " + std::to_string(v);
}

// t's size and mdring's type; fp8 (in nccl.h since 2.24) is refused by name.
inline ncclResult_t describe_type(const char* function, ncclDataType_t t, type_info& out) {
  switch (int(t)) {
    case ncclInt8:
      out = {element::i8, 1, "ncclInt8"};
      return ncclSuccess;
    case ncclUint8:
      out = {element::u8, 1, "ncclUint8"};
      return ncclSuccess;
    case ncclInt32:
      out = {element::i32, 4, "ncclInt32"};
      return ncclSuccess;
    case ncclUint32:
      out = {element::u32, 4, "ncclUint32"};
      return ncclSuccess;
    case ncclInt64:
      out = {element::i64, 8, "ncclInt64"};
      return ncclSuccess;
    case ncclUint64:
      out = {element::u64, 8, "ncclUint64"};
      return ncclSuccess;
    case ncclFloat16:
      out = {element::f16, 2, "ncclFloat16"};
      return ncclSuccess;
    case ncclFloat32:
      out = {element::f32, 4, "ncclFloat32"};
      return ncclSuccess;
    case ncclFloat64:
      out = {element::f64, 8, "ncclFloat64"};
      return ncclSuccess;
    case ncclBfloat16:
      out = {element::bf16, 2, "ncclBfloat16"};
      return ncclSuccess;
    default:
      break;
  }
  const int v = int(t);
  if (v >= 10 && v < int(ncclNumTypes))
    return fail(ncclInvalidArgument, function,
                "datatype " + type_name(t) +
                    ": fp8 is not supported by mdring (it has no fp8 arithmetic); use ncclBfloat16 or ncclFloat16");
  return fail(ncclInvalidArgument, function,
              "datatype " + std::to_string(v) + " is not an ncclDataType_t of nccl.h " + std::to_string(NCCL_MAJOR) +
                  "." + std::to_string(NCCL_MINOR) + " (0 to " + std::to_string(int(ncclNumTypes) - 1) + ")");
}

// ---- reduction ops ------------------------------------------------------------

enum class op_kind : unsigned char { sum, prod, max, min, avg, premul_sum };

// A PreMulSum op (ncclRedOpCreatePreMulSum): sum of (scalar x input). The scalar
// is copied when the call returns (ncclScalarHostImmediate) or read from device
// memory when each collective runs (ncclScalarDevice).
struct premul_op {
  ncclDataType_t type;
  ncclScalarResidence_t residence;
  unsigned char value[8];  // host immediate: the scalar's bytes (type's size)
  const void* device;      // device residence: where the scalar is
};

// An op as a call uses it. A PreMulSum op is copied: a call queued in a group keeps
// its scalar even when the op is destroyed (and its number given to another)
// before ncclGroupEnd, as NCCL allows once the call has returned.
struct op_info {
  op_kind kind;
  premul_op premul{};  // for premul_sum
};

// A communicator's PreMulSum ops: ncclRedOp_t values ncclNumOps, ncclNumOps + 1, ...
// (a destroyed one's value is given again by a later create), as NCCL numbers them.
class premul_table {
public:
  ncclResult_t create(const char* function, ncclRedOp_t* op, const void* scalar, ncclDataType_t type,
                      ncclScalarResidence_t residence) {
    type_info ti{};
    if (!op) return fail(ncclInvalidArgument, function, "op is NULL (expected where to store the new op)");
    if (!scalar) return fail(ncclInvalidArgument, function, "scalar is NULL (expected a host or device pointer)");
    if (auto r = describe_type(function, type, ti); r != ncclSuccess) return r;
    if (residence != ncclScalarHostImmediate && residence != ncclScalarDevice)
      return fail(ncclInvalidArgument, function,
                  "residence " + std::to_string(int(residence)) +
                      " is not an ncclScalarResidence_t (ncclScalarDevice or ncclScalarHostImmediate)");
    premul_op p{type, residence, {}, nullptr};
    if (residence == ncclScalarHostImmediate) std::memcpy(p.value, scalar, ti.bytes);
    else p.device = scalar;
    std::size_t slot = 0;
    while (slot < ops_.size() && live_[slot]) ++slot;
    if (slot == ops_.size()) {
      if (slot >= std::size_t(ncclMaxRedOp) - std::size_t(ncclNumOps))
        return fail(ncclInvalidUsage, function, "too many PreMulSum ops alive on this communicator");
      ops_.push_back(p);
      live_.push_back(true);
    } else {
      ops_[slot] = p;
      live_[slot] = true;
    }
    *op = ncclRedOp_t(int(ncclNumOps) + int(slot));
    return ncclSuccess;
  }

  ncclResult_t destroy(const char* function, ncclRedOp_t op) {
    const premul_op* p = nullptr;
    if (auto r = find(function, op, p); r != ncclSuccess) return r;
    live_[std::size_t(int(op) - int(ncclNumOps))] = false;
    return ncclSuccess;
  }

  // The live PreMulSum op `op` names on this communicator.
  ncclResult_t find(const char* function, ncclRedOp_t op, const premul_op*& out) const {
    const long v = long(op);
    if (v < long(ncclNumOps))
      return fail(ncclInvalidArgument, function,
                  "op " + std::to_string(v) + " is a built-in op, not one of ncclRedOpCreatePreMulSum's");
    const std::size_t slot = std::size_t(v - long(ncclNumOps));
    if (slot >= ops_.size() || !live_[slot])
      return fail(ncclInvalidArgument, function,
                  "op " + std::to_string(v) +
                      " is not a live PreMulSum op of this communicator (never created here, or destroyed)");
    out = &ops_[slot];
    return ncclSuccess;
  }

  std::size_t alive() const noexcept {
    std::size_t n = 0;
    for (bool b : live_) n += b;
    return n;
  }

private:
  std::vector<premul_op> ops_;
  std::vector<bool> live_;
};

// op for a collective of type t: a built-in op, or a PreMulSum op of this
// communicator made for t.
inline ncclResult_t describe_op(const char* function, ncclRedOp_t op, ncclDataType_t t, const premul_table& table,
                                op_info& out) {
  switch (int(op)) {
    case ncclSum:
      out = {op_kind::sum};
      return ncclSuccess;
    case ncclProd:
      out = {op_kind::prod};
      return ncclSuccess;
    case ncclMax:
      out = {op_kind::max};
      return ncclSuccess;
    case ncclMin:
      out = {op_kind::min};
      return ncclSuccess;
    case ncclAvg:
      out = {op_kind::avg};
      return ncclSuccess;
    default:
      break;
  }
  const premul_op* p = nullptr;
  if (auto r = table.find(function, op, p); r != ncclSuccess) return r;
  if (p->type != t)
    return fail(ncclInvalidArgument, function,
                "op " + std::to_string(long(op)) + " was made by ncclRedOpCreatePreMulSum for " + type_name(p->type) +
                    ", used with " + type_name(t));
  out = {op_kind::premul_sum, *p};
  return ncclSuccess;
}

// ---- ranks, counts, buffers -----------------------------------------------------

// `what` ("root", "peer") is a rank of a communicator of `size` ranks.
inline ncclResult_t check_rank(const char* function, const char* what, int r, int size) {
  if (r >= 0 && r < size) return ncclSuccess;
  return fail(ncclInvalidArgument, function,
              std::string(what) + " " + std::to_string(r) + " is not a rank of this communicator (0 to " +
                  std::to_string(size - 1) + ")");
}

// count elements of `bytes` each fit in memory (count x bytes x `factor` does not
// overflow: all_gather's receive buffer is nranks x count).
inline ncclResult_t check_count(const char* function, const char* what, std::size_t count, std::size_t bytes,
                                std::size_t factor = 1) {
  const std::size_t max = std::numeric_limits<std::size_t>::max();
  if (bytes == 0 || factor == 0 || count <= max / bytes / factor) return ncclSuccess;
  return fail(ncclInvalidArgument, function,
              std::string(what) + " " + std::to_string(count) + " is too large: " + std::to_string(factor) + " x " +
                  std::to_string(count) + " elements of " + std::to_string(bytes) + " bytes overflow size_t");
}

// A buffer the call reads or writes: not NULL when it moves any element.
inline ncclResult_t check_buffer(const char* function, const char* what, const void* p, std::size_t count) {
  if (p || count == 0) return ncclSuccess;
  return fail(ncclInvalidArgument, function,
              std::string(what) + " is NULL with count " + std::to_string(count) + " (expected a device buffer)");
}

}  // namespace mdring_nccl
