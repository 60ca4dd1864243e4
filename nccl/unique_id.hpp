// nccl/unique_id.hpp: what mdring puts in NCCL's 128-byte ncclUniqueId.
//
// ncclGetUniqueId starts mdring's TCP store (rendezvous/tcp_store.hpp) in the
// calling process and writes where it listens and its secret into the id; every
// rank's ncclCommInitRank connects there with the secret. The layout:
//
//   bytes   0..7    "mdring" 0 1    (magic; the last byte is the layout's version)
//   bytes   8..9    the store's TCP port, big-endian
//   bytes  10..73   the store's host (address or name), NUL-padded, at most 63 characters
//   bytes  74..89   the secret, 16 bytes (the store's 32 hex characters)
//   bytes  90..123  zero (reserved)
//   bytes 124..127  FNV-1a of bytes 0..123, big-endian
//
// An id that is not mdring's (the real NCCL's, or memory never set) or that
// changed on the way is refused with a text that says which.
#pragma once

#include "errors.hpp"

#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace mdring_nccl {

struct rendezvous_point {
  std::string host;
  std::uint16_t port = 0;
  std::string secret;  // 32 hex characters
};

namespace id_layout {
inline constexpr unsigned char magic[8] = {'m', 'd', 'r', 'i', 'n', 'g', 0, 1};
inline constexpr std::size_t port = 8, host = 10, host_bytes = 64, secret = 74, secret_bytes = 16, sum = 124;
}  // namespace id_layout

inline std::uint32_t id_checksum(const unsigned char* p, std::size_t n) noexcept {
  std::uint32_t h = 2166136261u;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

inline int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// p into id; ncclInvalidArgument when the host or the secret does not fit.
inline ncclResult_t encode_id(const char* function, const rendezvous_point& p, ncclUniqueId& id) {
  using namespace id_layout;
  if (p.host.empty() || p.host.size() >= host_bytes || p.host.find('\0') != std::string::npos)
    return fail(ncclInvalidArgument, function,
                "the store's host '" + p.host + "' does not fit the unique id (1 to 63 characters)");
  if (p.secret.size() != 2 * secret_bytes)
    return fail(ncclInvalidArgument, function, "the store's secret must be 32 hex characters");
  unsigned char b[NCCL_UNIQUE_ID_BYTES] = {};
  std::memcpy(b, magic, sizeof magic);
  b[port] = static_cast<unsigned char>(p.port >> 8);
  b[port + 1] = static_cast<unsigned char>(p.port & 0xff);
  std::memcpy(b + host, p.host.data(), p.host.size());
  for (std::size_t i = 0; i < secret_bytes; ++i) {
    const int hi = hex_value(p.secret[2 * i]), lo = hex_value(p.secret[2 * i + 1]);
    if (hi < 0 || lo < 0) return fail(ncclInvalidArgument, function, "the store's secret must be 32 hex characters");
    b[secret + i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  const std::uint32_t s = id_checksum(b, sum);
  for (int i = 0; i < 4; ++i) b[sum + i] = static_cast<unsigned char>(s >> (24 - 8 * i));
  std::memcpy(id.internal, b, sizeof b);
  return ncclSuccess;
}

// id back into where the store is; ncclInvalidArgument, saying why, for an id
// that mdring's ncclGetUniqueId did not make or that was damaged.
inline ncclResult_t decode_id(const char* function, const ncclUniqueId& id, rendezvous_point& out) {
  using namespace id_layout;
  unsigned char b[NCCL_UNIQUE_ID_BYTES];
  std::memcpy(b, id.internal, sizeof b);
  if (std::memcmp(b, magic, sizeof magic) != 0)
    return fail(ncclInvalidArgument, function,
                "commId was not made by mdring's ncclGetUniqueId (is another rank running the real libnccl, or "
                "was the id not broadcast to this rank?)");
  std::uint32_t s = 0;
  for (int i = 0; i < 4; ++i) s = s << 8 | b[sum + i];
  if (s != id_checksum(b, sum))
    return fail(
        ncclInvalidArgument, function,
        "commId is damaged (its checksum does not match): pass all 128 bytes of ncclGetUniqueId's id unchanged");
  if (b[host + host_bytes - 1] != 0 || b[host] == 0)
    return fail(ncclInvalidArgument, function, "commId names no store host");
  rendezvous_point p;
  p.port = static_cast<std::uint16_t>(b[port] << 8 | b[port + 1]);
  p.host = reinterpret_cast<const char*>(b + host);
  static const char* hex = "0123456789abcdef";
  for (std::size_t i = 0; i < secret_bytes; ++i)
    p.secret += hex[b[secret + i] >> 4], p.secret += hex[b[secret + i] & 15];
  out = std::move(p);
  return ncclSuccess;
}

}  // namespace mdring_nccl
