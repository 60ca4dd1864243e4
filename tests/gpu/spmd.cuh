// tests/gpu/spmd.cuh: one rank's all_reduce check, for the programs where every
// rank is its own thread or process (NCCL, MPI). Each rank recomputes every
// rank's closed-form inputs, so it can check its result against the float64
// reference alone; the returned hash lets the caller compare ranks bit for bit.
#pragma once

#include "common.cuh"

#include <mdring/cuda/collectives.cuh>

namespace gpu_test {

inline u64 hash_bytes(const void* p, std::size_t n) {
  u64 h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}

template <class T, class Comm, class Op>
u64 spmd_case(Comm& comm, opk k, Op op, std::size_t n, bool in_place, bool misaligned, u64 seed, cudaStream_t s,
              const std::string& label) {
  const std::size_t P = comm.size(), me = comm.rank();
  std::vector<std::vector<T>> xs(P, std::vector<T>(n));
  for (std::size_t r = 0; r < P; ++r)
    for (std::size_t i = 0; i < n; ++i) xs[r][i] = value<T>(seed, r, i, k);
  dbuf<T> send(n, misaligned), recv(n, misaligned);
  send.upload(xs[me]);
  if (in_place) recv.upload(xs[me]);
  else recv.poison();
  md::cuda::all_reduce(comm, in_place ? recv.get() : send.get(), recv.get(), n, op, s);
  cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  const auto got = recv.download();
  std::vector<const T*> ptrs;
  for (auto& x : xs) ptrs.push_back(x.data());
  check_against_reference<T>(cat(label, " rank ", me, " all_reduce<", md::type_name<T>(), "> ", name_of(k), " n ", n,
                                 in_place ? " in place" : "", misaligned ? " misaligned" : ""),
                             k, ptrs, got.data(), n, 2.0 * double(P));
  return hash_bytes(got.data(), n * sizeof(T));
}

// The count matrix (int32 and float sums) and a few other types and ops, on one
// rank's communicator (every op on every type is checked through the local
// transport and the fold test: here it is the transport that is under test).
// hashes gets one entry per call, in order (to compare across ranks).
template <class Comm>
void spmd_suite(Comm& comm, cudaStream_t s, const std::string& label, std::vector<u64>& hashes) {
  const std::size_t P = comm.size();
  std::vector<std::size_t> counts = {0, 1, 13, 97, 1009, 4099, (std::size_t(1) << 20) + 7};
  if (P > 2) counts.push_back(P - 1);
  int c = 0;
  for (std::size_t n : counts) {
    ++c;
    hashes.push_back(spmd_case<std::int32_t>(comm, opk::sum, md::sum, n, c % 2 == 0, c % 3 == 0, 10 + c, s, label));
    hashes.push_back(spmd_case<float>(comm, opk::sum, md::sum, n, c % 2 == 1, c % 3 == 1, 20 + c, s, label));
  }
  hashes.push_back(spmd_case<md::bfloat16>(comm, opk::avg, md::avg, 4099, false, false, 31, s, label));
  hashes.push_back(spmd_case<md::half>(comm, opk::max, md::max, 1009, true, true, 32, s, label));
  hashes.push_back(spmd_case<std::int64_t>(comm, opk::prod, md::prod, 97, false, true, 33, s, label));
  hashes.push_back(spmd_case<double>(comm, opk::min, md::min, 13, true, false, 34, s, label));
}

}  // namespace gpu_test
