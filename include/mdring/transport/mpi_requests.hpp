// mdring/transport/mpi_requests.hpp: one message of the MPI transport, and
// finding out that it completed (transport/mpi.hpp).
//
// A message longer than options::max_message_bytes goes in two pieces (whole
// chunks of a contiguous type, then the rest), so a request holds up to two MPI
// requests and what each should carry: a receive that got fewer elements than
// expected means the ranks passed different counts, and throws transport_error.
// Under SimGrid SMPI (MDRING_SMPI) waits block in MPI_Waitall / MPI_Waitany (a
// blocked actor costs no simulated time); a nonblocking call's cursor tests.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "mpi_node.hpp"
#include "transport.hpp"

#include <span>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace mpi {

namespace detail {

struct mpi_request {
  MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int n = 0;
  bool recv = false;
  std::size_t peer = 0;    // global rank
  std::size_t bytes = 0;   // expected
  int expect[2] = {0, 0};  // elements of each piece's datatype
  MPI_Datatype type[2] = {MPI_BYTE, MPI_BYTE};
};

[[noreturn]] inline void message_failed(const mpi_request& rq, int rc, const MPI_Status* st) {
  int code = rc;
  for (int i = 0; i < rq.n; ++i)
    if (rc == MPI_ERR_IN_STATUS && st[i].MPI_ERROR != MPI_SUCCESS) code = st[i].MPI_ERROR;
  throw mpi_error("mdring::mpi: a message failed: " + error_string(code) +
                      " (did the ranks pass different counts or types to the same collective?)",
                  code);
}

// MPI accepts a message shorter than the receive buffer: a rank that passed a
// smaller count would otherwise go unnoticed. `rank`: this one, for the message.
inline void check_received(const mpi_request& rq, const MPI_Status* st, std::size_t rank) {
  for (int i = 0; i < rq.n; ++i) {
    int got = 0;
    MPI_Get_count(&st[i], rq.type[i], &got);
    if (got != rq.expect[i]) {
      int bytes = 0;
      MPI_Get_count(&st[i], MPI_BYTE, &bytes);
      throw transport_error(
          "mdring::mpi: rank " + std::to_string(rq.peer) + " sent a message of " +
              (bytes == MPI_UNDEFINED ? std::string("an unexpected size") : std::to_string(bytes) + " bytes") +
              " where rank " + std::to_string(rank) + " expected " + std::to_string(rq.bytes) +
              ": the ranks passed different counts, types or roots to the same collective",
          0);
    }
  }
}

// Completes rq if its messages are done (true); throws if one failed.
inline bool test_request(mpi_request& rq, std::size_t rank) {
  int flag = 0;
  MPI_Status st[2];
  const int rc = MPI_Testall(rq.n, rq.r, &flag, st);
  if (rc != MPI_SUCCESS) message_failed(rq, rc, st);
  if (!flag) return false;
  if (rq.recv) check_received(rq, st, rank);
  rq.n = 0;
  return true;
}

#if MDRING_SMPI
class simulated_waits {
public:
  // Blocks until every request is done, one after the other: the simulated network
  // moves all of them meanwhile. A rank that fails leaves the others blocked, and
  // SimGrid ends the run as a deadlock.
  wait_status wait_all(std::span<mpi_request> rs, std::size_t rank) {
    for (auto& rq : rs) {
      if (rq.n == 0) continue;
      MPI_Status st[2];
      const int rc = MPI_Waitall(rq.n, rq.r, st);
      if (rc != MPI_SUCCESS) message_failed(rq, rc, st);
      if (rq.recv) check_received(rq, st, rank);
      rq.n = 0;
    }
    return wait_status::ok();
  }
  // Tests every pending request once: done when all (any: one) completed, else a
  // timeout naming the first still pending.
  wait_status test(std::span<mpi_request> rs, bool any, std::size_t rank) {
    bool all = true, some = false;
    for (auto& rq : rs) {
      if (rq.n == 0) continue;
      if (test_request(rq, rank)) some = true;
      else all = false;
    }
    if (all || (any && some)) return wait_status::ok();
    for (std::size_t i = 0; i < rs.size(); ++i)
      if (rs[i].n) return wait_status{wait_status::timeout, i, 0, {}};
    return wait_status::ok();
  }
  // MPI_Waitany over the first piece of every pending request, then the rest of
  // that request's pieces (one message cut in two: they complete together).
  wait_status wait_any(std::span<mpi_request> rs, std::size_t rank) {
    any_req_.clear();
    any_idx_.clear();
    for (std::size_t i = 0; i < rs.size(); ++i)
      if (rs[i].n) any_req_.push_back(rs[i].r[0]), any_idx_.push_back(i);
    if (any_req_.empty()) return wait_status::ok();
    int k = MPI_UNDEFINED;
    MPI_Status st[2];
    int rc = MPI_Waitany(int(any_req_.size()), any_req_.data(), &k, &st[0]);
    if (k == MPI_UNDEFINED) return wait_status::ok();
    mpi_request& rq = rs[any_idx_[std::size_t(k)]];
    rq.r[0] = MPI_REQUEST_NULL;
    if (rc == MPI_SUCCESS && rq.n > 1) rc = MPI_Wait(&rq.r[1], &st[1]);
    if (rc != MPI_SUCCESS) message_failed(rq, rc, st);
    if (rq.recv) check_received(rq, st, rank);
    rq.n = 0;
    return wait_status::ok();
  }

private:
  std::vector<MPI_Request> any_req_;
  std::vector<std::size_t> any_idx_;
};
#endif

}  // namespace detail

}  // namespace mpi

MDRING_NAMESPACE_END
