// nccl/communicator.cuh: ncclComm, the communicator of libmdring-nccl.so: one
// mdring GPU communicator bound through mdring's TCP store (mdring/cuda/store.cuh),
// with the unique id saying where the store is.
//
// Init: ncclGetUniqueId starts the store in its process (it lives as long as the
// process) and writes its address and secret into the id (unique_id.hpp). Each
// rank's init connects there, agrees on the topology (MDRING_TOPOLOGY, else
// cuda::detect_topology: nvlink:<ranks per node> x infiniband:<nodes>) and binds:
// the ipc transport between the processes of a node, several ranks per GPU
// allowed. A split binds the child over the parent's store, under the parent's
// key prefix. Each communicator has its own connection to the store.
#pragma once

#include "arguments.hpp"
#include "errors.hpp"
#include "split.hpp"
#include "unique_id.hpp"

#include <mdring/collective/explain.hpp>
#include <mdring/cuda/ipc.cuh>
#include <mdring/cuda/store.cuh>
#include <mdring/rendezvous/tcp_store.hpp>

#include <nccl.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>

namespace mdring_nccl {

using topology_type = mdring::runtime_topology;
using device_comm = mdring::cuda::store_communicator<topology_type>;

// The result an exception thrown by mdring (or the standard library) stands for,
// with its text as the thread's last error.
inline ncclResult_t from_exception(const char* function) {
  try {
    throw;
  } catch (const mdring::cuda_error& e) {
    return fail(ncclUnhandledCudaError, function, e.what());
  } catch (const mdring::remote_error& e) {
    return fail(ncclRemoteError, function, e.what());
  } catch (const mdring::timeout_error& e) {
    return fail(ncclRemoteError, function, e.what());
  } catch (const mdring::invalid_argument& e) {
    return fail(ncclInvalidArgument, function, e.what());
  } catch (const mdring::communicator_error& e) {
    return fail(ncclInvalidUsage, function, e.what());
  } catch (const mdring::transport_error& e) {
    return fail(ncclSystemError, function, e.what());
  } catch (const std::bad_alloc&) {
    return fail(ncclSystemError, function, "out of host memory");
  } catch (const std::exception& e) {
    return fail(ncclInternalError, function, e.what());
  } catch (...) {
    return fail(ncclInternalError, function, "an unknown exception");
  }
}

// A CUDA runtime call's failure as ncclUnhandledCudaError naming it.
inline ncclResult_t cuda_failed(const char* function, const char* call, cudaError_t e) {
  (void)cudaGetLastError();
  return fail(ncclUnhandledCudaError, function,
              std::string(call) + " failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

}  // namespace mdring_nccl

// The opaque type of nccl.h's ncclComm_t.
struct ncclComm {
  int rank = 0, size = 1, device = 0;
  bool blocking = true;
  mdring_nccl::rendezvous_point store_at;  // the job's store, from the unique id
  std::string prefix;                      // this communicator's keys in it
  std::unique_ptr<mdring::rendezvous::tcp_store> store;
  std::optional<mdring_nccl::device_comm> comm;
  // Point to point (ncclSend, ncclRecv and what NCCL builds on them): one ipc link
  // over every rank, with mailboxes, opened at init; none when the ranks are not
  // processes of one node (p2p_unavailable says why).
  std::optional<mdring::cuda::ipc_link> p2p;
  std::string p2p_unavailable;
  std::string topology_text, topology_source;
  mdring_nccl::premul_table premul;
  std::size_t children = 0;  // splits made from it, which number their keys
  // ncclSuccess once ready; ncclInProgress while a nonblocking init runs; else
  // the init's or a call's failure (ncclCommGetAsyncError), with its text (read by
  // a watchdog thread while calls run: set_state and state_message lock it).
  std::atomic<int> state{ncclInProgress};
  std::thread init;
  std::atomic<bool> aborted{false};
  std::atomic<bool> revoked{false};  // ncclCommRevoke: calls refused; split, shrink and destroy go on
  std::recursive_mutex calls;        // one call at a time (NCCL asks the same of its users)
  // PreMulSum's premultiplied inputs of reduce_scatter and reduce: cudaMalloc'd (the
  // ipc transport shares it through CUDA IPC, which stream-ordered pools cannot),
  // grown on demand; scratch_done follows its last use on a stream.
  void* scratch = nullptr;
  std::size_t scratch_bytes = 0;
  cudaEvent_t scratch_done = nullptr;

  void set_state(int r, std::string text) {
    std::lock_guard l(state_mutex_);
    state_text_ = std::move(text);
    state.store(r);
  }
  std::string state_message() const {
    std::lock_guard l(state_mutex_);
    return state_text_;
  }

  // On the communicator's device: its ipc mappings and scratch belong there.
  ~ncclComm() {
    if (init.joinable()) init.join();
    int prev = -1;
    const bool switched = cudaGetDevice(&prev) == cudaSuccess && prev != device && cudaSetDevice(device) == cudaSuccess;
    p2p.reset();
    comm.reset();
    if (scratch) (void)cudaFree(scratch);
    if (scratch_done) (void)cudaEventDestroy(scratch_done);
    if (switched) (void)cudaSetDevice(prev);
  }

private:
  mutable std::mutex state_mutex_;
  std::string state_text_;
};

namespace mdring_nccl {

// Where ncclGetUniqueId's store listens: MDRING_NCCL_HOST, else the first address of
// an interface named by NCCL_SOCKET_IFNAME (a prefix, as NCCL reads it), else the
// first interface that is up and not loopback, else 127.0.0.1.
std::string store_host();

// Binds c (rank, size, device, store_at and prefix set) and marks it ready;
// throws what mdring throws.
inline void bind_communicator(ncclComm& c) {
  mdring::rendezvous::tcp_store_options o;
  o.host = c.store_at.host;
  o.port = c.store_at.port;
  o.secret = c.store_at.secret;
  c.store = std::make_unique<mdring::rendezvous::tcp_store>(false, o);
  mdring::cuda::detail::device_guard g(c.device);
  const mdring::cuda::store_world world{*c.store, std::size_t(c.rank), std::size_t(c.size), c.prefix};
  mdring::options opts;
  // NCCL waits for a peer as long as it takes (PyTorch's watchdog decides when to
  // give up): an hour here unless MDRING_TIMEOUT says otherwise.
  if (!std::getenv("MDRING_TIMEOUT")) opts.timeout = std::chrono::hours(1);
  topology_type topo;
  bool detect = true;
  if (const char* t = std::getenv("MDRING_TOPOLOGY"); t && *t) {
    const auto parsed = mdring::parse_topology(t);  // malformed: an error, named
    try {
      topo = parsed.resolve(std::size_t(c.size), "mdring's NCCL library (MDRING_TOPOLOGY)");
      c.topology_source = "MDRING_TOPOLOGY";
      detect = false;
    } catch (const mdring::topology_error&) {  // another size (a split, a sub-group): detected
    }
  }
  if (detect) {
    topo = mdring::cuda::detect_topology(world, "node", mdring::rendezvous::clock::now() + opts.timeout,
                                         c.topology_source);
    if (std::getenv("MDRING_TOPOLOGY"))
      c.topology_source += " (MDRING_TOPOLOGY does not fit " + std::to_string(c.size) + " ranks)";
  }
  c.topology_text = topo.to_string();
  c.comm.emplace(mdring::cuda::bind(topo, world, opts));
  // Point to point: every rank with every other, whatever the topology.
  std::vector<std::size_t> members(std::size_t(c.size));
  std::iota(members.begin(), members.end(), std::size_t(0));
  mdring::cuda::detail::store_exchange ex{c.store.get(), c.prefix + "/p2p", std::size_t(c.rank), std::size_t(c.size),
                                          mdring::rendezvous::clock::now() + opts.timeout};
  std::string why;
  c.p2p.emplace(mdring::cuda::ipc_link::open(ex, members, std::size_t(c.rank), 0, &why, true));
  if (!c.p2p->is_open()) {
    c.p2p.reset();
    c.p2p_unavailable = "point-to-point calls need every rank of the communicator in a process of one node (at most " +
                        std::to_string(mdring::detail::ipc_max_ranks) + "), with CUDA IPC between them: " + why;
  }
  if (const char* r = std::getenv("MDRING_REPORT"); r && *r && *r != '0' && c.rank == 0)
    std::fprintf(
        stderr,
        "mdring NCCL: a communicator of %d ranks: %s (%s); rank 0 on GPU %d\n%smdring NCCL: point to point: %s\n",
        c.size, c.topology_text.c_str(), c.topology_source.c_str(), c.device,
        mdring::explain<float>(topo, std::size_t(1) << 20, mdring::collective::all_reduce, 0).c_str(),
        c.p2p ? "pulled through CUDA IPC between every pair of ranks" : c.p2p_unavailable.c_str());
}

// Runs the bind of c as the init asks: at once (blocking; a failure returned), or
// on a thread of its own (nonblocking: ncclInProgress, then ncclCommGetAsyncError).
inline ncclResult_t start_init(const char* function, ncclComm& c) {
  auto work = [&c, function]() -> ncclResult_t {
    ncclResult_t r = ncclSuccess;
    try {
      bind_communicator(c);
    } catch (...) {
      r = from_exception(function);
    }
    c.set_state(int(r), r == ncclSuccess ? std::string() : std::string(last_error()));
    return r;
  };
  if (c.blocking) return work();
  c.init = std::thread([work] { (void)work(); });
  return ncclInProgress;
}

// A communicator that may be shrunk or revoked: not NULL or aborted, its init done
// and successful; a failure since (a dead peer) is what shrinking is for.
inline ncclResult_t recoverable(const char* function, ncclComm_t c) {
  if (!c) return fail(ncclInvalidArgument, function, "comm is NULL (expected a communicator from ncclCommInitRank)");
  if (c->aborted.load()) return fail(ncclInvalidUsage, function, "the communicator was aborted (ncclCommAbort)");
  if (c->state.load() == ncclInProgress)
    return fail(ncclInvalidUsage, function,
                "the communicator's nonblocking init has not finished (wait until ncclCommGetAsyncError gives "
                "ncclSuccess)");
  if (!c->store) return fail(ncclInvalidUsage, function, "the communicator's init failed: " + c->state_message());
  return ncclSuccess;
}

// The communicator a call may use: not NULL, initialized, not aborted, revoked
// (unless `revoked_ok`: ncclCommSplit) or failed.
inline ncclResult_t usable(const char* function, ncclComm_t c, bool revoked_ok = false) {
  if (!c) return fail(ncclInvalidArgument, function, "comm is NULL (expected a communicator from ncclCommInitRank)");
  if (c->aborted.load()) return fail(ncclInvalidUsage, function, "the communicator was aborted (ncclCommAbort)");
  if (!revoked_ok && c->revoked.load())
    return fail(ncclInvalidUsage, function,
                "the communicator was revoked (ncclCommRevoke): shrink it (ncclCommShrink), split it or destroy it");
  const int s = c->state.load();
  if (s == ncclInProgress)
    return fail(ncclInvalidUsage, function,
                "the communicator's nonblocking init has not finished (wait until ncclCommGetAsyncError gives "
                "ncclSuccess)");
  if (s != ncclSuccess) return fail(ncclResult_t(s), function, "the communicator failed before: " + c->state_message());
  return ncclSuccess;
}

}  // namespace mdring_nccl
