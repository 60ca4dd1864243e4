// nccl/library.cu: libmdring-nccl.so, NCCL's C API on mdring (docs/NCCL.md).
//
// Every function of the nccl.h it is built against is exported, each also as its
// pnccl* twin (as NCCL exports them for profilers): implemented on mdring, or
// failing with ncclInvalidUsage and a ncclGetLastError() text that names it.
// Only the nccl* and pnccl* symbols are visible (exports.map).
#include "communicator.cuh"
#include "dispatch.cuh"
#include "group.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

using namespace mdring_nccl;

#define MDRING_NCCL_EXPORT extern "C" __attribute__((visibility("default")))
// The pnccl* twin of an exported function.
#define MDRING_NCCL_TWIN(ret, name, ...) MDRING_NCCL_EXPORT ret p##name(__VA_ARGS__) __attribute__((alias(#name)));

namespace mdring_nccl {

std::string store_host() {
  if (const char* h = std::getenv("MDRING_NCCL_HOST"); h && *h) return h;
  const char* want = std::getenv("NCCL_SOCKET_IFNAME");
  ifaddrs* all = nullptr;
  std::string found;
  if (getifaddrs(&all) == 0) {
    for (ifaddrs* a = all; a && found.empty(); a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP)) continue;
      const bool named = want && *want && std::strncmp(a->ifa_name, want, std::strlen(want)) == 0;
      if (want && *want ? !named : (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
      char text[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
      found = text;
    }
    freeifaddrs(all);
  }
  return found.empty() ? "127.0.0.1" : found;
}

namespace {

// The stores ncclGetUniqueId started: they live as long as the process.
std::mutex stores_mutex;
std::vector<std::unique_ptr<mdring::rendezvous::tcp_store>>& stores() {
  static auto* s = new std::vector<std::unique_ptr<mdring::rendezvous::tcp_store>>;
  return *s;
}

group_queue<nccl_call>& group() {
  thread_local group_queue<nccl_call> g;
  return g;
}

// A checked call: queued inside a group, else issued now.
ncclResult_t submit(const nccl_call& c) {
  if (group().active()) {
    try {
      group().add(c);
    } catch (...) {
      return from_exception(c.function);
    }
    return ncclSuccess;
  }
  return issue_checked(c);
}

// A failed check: inside a group, the group is discarded at its end too.
ncclResult_t refused(ncclResult_t r) {
  if (group().active()) group().poison(r);
  return r;
}

// config's blocking mode into `blocking` (left as it is without a config, or with
// the field unset: NCCL's default, or a split's parent's).
ncclResult_t check_config(const char* function, const ncclConfig_t* config, bool& blocking) {
  if (!config) return ncclSuccess;
  if (config->magic != 0xcafebeef || config->size < offsetof(ncclConfig_t, cgaClusterSize))
    return fail(ncclInvalidArgument, function,
                "config was not set up with NCCL_CONFIG_INITIALIZER (its magic or size is wrong)");
  if (config->blocking != NCCL_CONFIG_UNDEF_INT && config->blocking != 0 && config->blocking != 1)
    return fail(ncclInvalidArgument, function,
                "config->blocking is " + std::to_string(config->blocking) + " (expected 0 or 1)");
  if (config->blocking != NCCL_CONFIG_UNDEF_INT) blocking = config->blocking != 0;
  return ncclSuccess;
}

ncclResult_t init_rank(const char* function, ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank,
                       const ncclConfig_t* config) {
  if (!out) return fail(ncclInvalidArgument, function, "comm is NULL (expected where to store the communicator)");
  *out = nullptr;
  if (nranks < 1) return fail(ncclInvalidArgument, function, "nranks " + std::to_string(nranks) + " is below 1");
  if (auto r = check_rank(function, "rank", rank, nranks); r != ncclSuccess) return r;
  bool blocking = true;
  if (auto r = check_config(function, config, blocking); r != ncclSuccess) return r;
  try {
    rendezvous_point at;
    if (auto r = decode_id(function, id, at); r != ncclSuccess) return r;
    int device = 0;
    if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return cuda_failed(function, "cudaGetDevice", e);
    auto c = std::make_unique<ncclComm>();
    c->rank = rank;
    c->size = nranks;
    c->device = device;
    c->blocking = blocking;
    c->store_at = at;
    // Keys of their own per unique id: the bind numbers its binds per prefix and
    // process, which agree across ranks only within one communicator's history.
    c->prefix = "mdring/nccl/" + at.secret;
    const ncclResult_t r = start_init(function, *c);
    if (r == ncclSuccess || r == ncclInProgress) *out = c.release();
    return r;
  } catch (...) {
    return from_exception(function);
  }
}

// Checks shared by the reducing collectives; fills the call's type and op.
ncclResult_t check_reduction(nccl_call& c, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm) {
  if (auto r = usable(c.function, comm); r != ncclSuccess) return r;
  if (auto r = describe_type(c.function, type, c.type); r != ncclSuccess) return r;
  return describe_op(c.function, op, type, comm->premul, c.op);
}

// A communicator made from parent's ranks (a split's, a shrink's): rank of size, on
// the parent's device and store, its keys under prefix; *newcomm once it initializes.
ncclResult_t init_child(const char* fn, const ncclComm& parent, int rank, int size, bool blocking, std::string prefix,
                        ncclComm_t* newcomm) {
  auto c = std::make_unique<ncclComm>();
  c->rank = rank;
  c->size = size;
  c->device = parent.device;
  c->blocking = blocking;
  c->store_at = parent.store_at;
  c->prefix = std::move(prefix);
  const ncclResult_t r = start_init(fn, *c);
  if (r == ncclSuccess || r == ncclInProgress) *newcomm = c.release();
  return r;
}

}  // namespace
}  // namespace mdring_nccl

// ---- versions, errors ---------------------------------------------------------------

MDRING_NCCL_EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (!version) return fail(ncclInvalidArgument, "ncclGetVersion", "version is NULL");
  *version = NCCL_VERSION_CODE;  // the nccl.h this library was built against: its ABI
  return ncclSuccess;
}
MDRING_NCCL_TWIN(ncclResult_t, ncclGetVersion, int*)

MDRING_NCCL_EXPORT const char* ncclGetErrorString(ncclResult_t result) { return result_text(result); }
MDRING_NCCL_TWIN(const char*, ncclGetErrorString, ncclResult_t)

MDRING_NCCL_EXPORT const char* ncclGetLastError(ncclComm_t) { return last_error(); }
MDRING_NCCL_TWIN(const char*, ncclGetLastError, ncclComm_t)

// ---- communicators ------------------------------------------------------------------

MDRING_NCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  constexpr const char* fn = "ncclGetUniqueId";
  if (!id) return fail(ncclInvalidArgument, fn, "uniqueId is NULL");
  try {
    mdring::rendezvous::tcp_store_options o;
    o.host = store_host();
    o.secret = mdring::rendezvous::random_secret();
    auto s = std::make_unique<mdring::rendezvous::tcp_store>(true, o);
    const rendezvous_point at{o.host, s->port(), o.secret};
    {
      std::lock_guard l(stores_mutex);
      stores().push_back(std::move(s));
    }
    return encode_id(fn, at, *id);
  } catch (...) {
    return from_exception(fn);
  }
}
MDRING_NCCL_TWIN(ncclResult_t, ncclGetUniqueId, ncclUniqueId*)

MDRING_NCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return init_rank("ncclCommInitRank", comm, nranks, commId, rank, nullptr);
}
MDRING_NCCL_TWIN(ncclResult_t, ncclCommInitRank, ncclComm_t*, int, ncclUniqueId, int)

MDRING_NCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                       ncclConfig_t* config) {
  return init_rank("ncclCommInitRankConfig", comm, nranks, commId, rank, config);
}
MDRING_NCCL_TWIN(ncclResult_t, ncclCommInitRankConfig, ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*)

MDRING_NCCL_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int myrank, int nId,
                                                         ncclUniqueId* commIds, ncclConfig_t* config) {
  constexpr const char* fn = "ncclCommInitRankScalable";
  if (nId < 1 || !commIds)
    return fail(ncclInvalidArgument, fn, "expected nId >= 1 unique ids in commIds (got " + std::to_string(nId) + ")");
  return init_rank(fn, comm, nranks, commIds[0], myrank, config);  // one store serves every rank
}
MDRING_NCCL_TWIN(ncclResult_t, ncclCommInitRankScalable, ncclComm_t*, int, int, int, ncclUniqueId*, ncclConfig_t*)

MDRING_NCCL_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  constexpr const char* fn = "ncclCommInitAll";
  if (!comms) return fail(ncclInvalidArgument, fn, "comms is NULL");
  if (ndev < 1) return fail(ncclInvalidArgument, fn, "ndev " + std::to_string(ndev) + " is below 1");
  if (ndev > 1)
    return unsupported(fn,
                       "several GPUs in one process: mdring's ipc transport runs one rank per process; start "
                       "a process per GPU and use ncclCommInitRank");
  int prev = 0;
  if (cudaError_t e = cudaGetDevice(&prev); e != cudaSuccess) return cuda_failed(fn, "cudaGetDevice", e);
  if (cudaError_t e = cudaSetDevice(devlist ? devlist[0] : 0); e != cudaSuccess)  // NULL: device 0
    return cuda_failed(fn, "cudaSetDevice", e);
  ncclUniqueId id{};
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r == ncclSuccess) r = init_rank(fn, comms, 1, id, 0, nullptr);
  (void)cudaSetDevice(prev);
  return r;
}
MDRING_NCCL_TWIN(ncclResult_t, ncclCommInitAll, ncclComm_t*, int, const int*)

MDRING_NCCL_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                              ncclConfig_t* config) {
  constexpr const char* fn = "ncclCommSplit";
  if (!newcomm) return fail(ncclInvalidArgument, fn, "newcomm is NULL");
  *newcomm = nullptr;
  if (auto r = usable(fn, comm, true); r != ncclSuccess) return r;
  if (auto r = check_color(fn, color); r != ncclSuccess) return r;
  bool blocking = comm->blocking;  // without a config, as its parent
  if (auto r = check_config(fn, config, blocking); r != ncclSuccess) return r;
  std::lock_guard l(comm->calls);
  try {
    // Every rank's (color, key), through the parent's store; the child's keys go
    // under the parent's, numbered by the parent's splits.
    const std::string prefix = comm->prefix + "/split" + std::to_string(comm->children++);
    const auto got =
        mdring::rendezvous::all_gather(*comm->store, prefix + "/colors", std::size_t(comm->rank),
                                       std::size_t(comm->size), std::to_string(color) + " " + std::to_string(key),
                                       mdring::rendezvous::clock::now() + mdring::options{}.timeout);
    std::vector<split_entry> all(got.size());
    for (std::size_t r = 0; r < got.size(); ++r)
      if (std::sscanf(got[r].c_str(), "%d %d", &all[r].color, &all[r].key) != 2)
        return fail(ncclInternalError, fn, "rank " + std::to_string(r) + " sent a malformed color and key");
    const split_result mine = split_of(all, comm->rank);
    if (!mine.member) return ncclSuccess;
    return init_child(fn, *comm, mine.rank, int(mine.parents.size()), blocking,
                      prefix + "/color" + std::to_string(color), newcomm);
  } catch (...) {
    return from_exception(fn);
  }
}
MDRING_NCCL_TWIN(ncclResult_t, ncclCommSplit, ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*)

// Stops c's calls in flight here and on its peers, as ncclCommAbort does, naming
// this rank and `what` it did, but frees nothing: ncclCommShrink with
// NCCL_SHRINK_ABORT, ncclCommRevoke.
static ncclResult_t stop_in_flight(const char* fn, ncclComm& c, const char* what, bool mark = true) {
  try {
    announce_failure(c, "rank " + std::to_string(c.rank) + " " + what, mark);
    return ncclSuccess;
  } catch (...) {
    return from_exception(fn);
  }
}

// Shrink: the ranks not in excludeRanksList, each with the same list (checked
// through the parent's store), form a new communicator in their parent order. The
// parent may have failed (a dead peer): that is what shrinking is for. With
// NCCL_SHRINK_ABORT its calls in flight are stopped first, as ncclCommAbort stops
// them, but it is not freed (ncclCommAbort or ncclCommDestroy it after).
MDRING_NCCL_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                               ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  constexpr const char* fn = "ncclCommShrink";
  if (!newcomm) return fail(ncclInvalidArgument, fn, "newcomm is NULL");
  *newcomm = nullptr;
  if (auto r = recoverable(fn, comm); r != ncclSuccess) return r;
  shrink_result mine;
  if (auto r = shrink_of(fn, comm->size, comm->rank, excludeRanksList, excludeRanksCount, shrinkFlags, mine);
      r != ncclSuccess)
    return r;
  bool blocking = comm->blocking;  // without a config, as its parent
  if (auto r = check_config(fn, config, blocking); r != ncclSuccess) return r;
  if (shrinkFlags == NCCL_SHRINK_ABORT) {
    if (auto r = stop_in_flight(fn, *comm, "shrank the communicator (ncclCommShrink, NCCL_SHRINK_ABORT)");
        r != ncclSuccess)
      return r;
  }
  std::lock_guard l(comm->calls);
  try {
    // The survivors' keys go under the parent's, numbered with its splits (every
    // survivor has made the same ones); each checks the others were given its list.
    const std::string prefix = comm->prefix + "/shrink" + std::to_string(comm->children++);
    if (auto r = agree_on_shrink(fn, *comm->store, prefix + "/excluded", comm->rank, mine,
                                 mdring::rendezvous::clock::now() + mdring::options{}.timeout);
        r != ncclSuccess)
      return r;
    return init_child(fn, *comm, mine.rank, int(mine.parents.size()), blocking, prefix + "/comm", newcomm);
  } catch (...) {
    return from_exception(fn);
  }
}
MDRING_NCCL_TWIN(ncclResult_t, ncclCommShrink, ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int)

// Revoke: the calls in flight stop here and on the peers (stop_in_flight), later
// calls are refused naming it, and the communicator stays a parent for
// ncclCommShrink (NCCL_SHRINK_DEFAULT then suffices) and ncclCommSplit, or is
// destroyed. NCCL's way after a failure: every survivor revokes, agrees, shrinks.
// Quiescent when it returns (ncclCommGetAsyncError: ncclSuccess, also for a
// nonblocking communicator); a second revoke does nothing.
MDRING_NCCL_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  constexpr const char* fn = "ncclCommRevoke";
  if (auto r = recoverable(fn, comm); r != ncclSuccess) return r;
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    return fail(ncclInvalidArgument, fn,
                "revokeFlags is " + std::to_string(revokeFlags) + " (expected NCCL_REVOKE_DEFAULT, 0)");
  if (comm->revoked.exchange(true)) return ncclSuccess;
  if (auto r = stop_in_flight(fn, *comm, "revoked the communicator (ncclCommRevoke)"); r != ncclSuccess) return r;
  comm->set_state(ncclSuccess, "");
  return ncclSuccess;
}
MDRING_NCCL_TWIN(ncclResult_t, ncclCommRevoke, ncclComm_t, int)

// Finalize: the calls were enqueued on the callers' streams, which complete them;
// nothing is left to flush.
MDRING_NCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (!comm) return fail(ncclInvalidArgument, "ncclCommFinalize", "comm is NULL");
  if (comm->revoked.load())
    return fail(ncclInvalidUsage, "ncclCommFinalize",
                "the communicator was revoked (ncclCommRevoke): there is nothing to finalize; destroy it "
                "(ncclCommDestroy)");
  if (comm->init.joinable()) comm->init.join();
  return ncclSuccess;
}
MDRING_NCCL_TWIN(ncclResult_t, ncclCommFinalize, ncclComm_t)

MDRING_NCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;  // as NCCL: destroying NULL is allowed
  delete comm;
  return ncclSuccess;
}
MDRING_NCCL_TWIN(ncclResult_t, ncclCommDestroy, ncclComm_t)

// Abort: the communicator refuses every later call, and its peers' waits on it end
// (each link's abort, as a failing rank announces itself: they throw remote_error,
// which their calls return as ncclRemoteError). Its memory is released unless
// another thread is inside a call on it (then it is left to the process's exit).
MDRING_NCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  comm->aborted.store(true);
  if (comm->state.load() == ncclInProgress) return ncclSuccess;  // its init thread still uses it: left
  (void)stop_in_flight("ncclCommAbort", *comm, "aborted the communicator (ncclCommAbort)", false);
  std::unique_lock l(comm->calls, std::try_to_lock);
  if (!l.owns_lock()) return ncclSuccess;
  // Its device state is left, not freed: freeing synchronizes the device, which
  // waits for ever on a stream stopped at a dead peer's flag.
  if (comm->comm) {
    mark_broken(*comm->comm, "aborted (ncclCommAbort)");
    try {
      (void)new device_comm(std::move(*comm->comm));
      if (comm->p2p) (void)new mdring::cuda::ipc_link(std::move(*comm->p2p));
    } catch (...) {}
    comm->comm.reset();
    comm->p2p.reset();
  }
  comm->scratch = nullptr;
  l.unlock();
  delete comm;
  return ncclSuccess;
}
MDRING_NCCL_TWIN(ncclResult_t, ncclCommAbort, ncclComm_t)

MDRING_NCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  constexpr const char* fn = "ncclCommGetAsyncError";
  if (!comm) return fail(ncclInvalidArgument, fn, "comm is NULL");
  if (!asyncError) return fail(ncclInvalidArgument, fn, "asyncError is NULL");
  *asyncError = ncclResult_t(comm->state.load());
  if (*asyncError != ncclSuccess && *asyncError != ncclInProgress) last_error_slot() = comm->state_message();
  return ncclSuccess;
}
MDRING_NCCL_TWIN(ncclResult_t, ncclCommGetAsyncError, ncclComm_t, ncclResult_t*)

// Count, device, rank: known from the init's arguments, also while it runs.
#define MDRING_NCCL_QUERY(name, field)                                               \
  MDRING_NCCL_EXPORT ncclResult_t name(const ncclComm_t comm, int* out) {            \
    if (!comm) return fail(ncclInvalidArgument, #name, "comm is NULL");              \
    if (!out) return fail(ncclInvalidArgument, #name, "the result pointer is NULL"); \
    *out = comm->field;                                                              \
    return ncclSuccess;                                                              \
  }                                                                                  \
  MDRING_NCCL_TWIN(ncclResult_t, name, const ncclComm_t, int*)
MDRING_NCCL_QUERY(ncclCommCount, size)
MDRING_NCCL_QUERY(ncclCommCuDevice, device)
MDRING_NCCL_QUERY(ncclCommUserRank, rank)

// ---- memory -----------------------------------------------------------------------------

MDRING_NCCL_EXPORT ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (!ptr) return fail(ncclInvalidArgument, "ncclMemAlloc", "ptr is NULL");
  *ptr = nullptr;
  if (size == 0) return ncclSuccess;
  if (cudaError_t e = cudaMalloc(ptr, size); e != cudaSuccess) return cuda_failed("ncclMemAlloc", "cudaMalloc", e);
  return ncclSuccess;
}
MDRING_NCCL_TWIN(ncclResult_t, ncclMemAlloc, void**, size_t)

MDRING_NCCL_EXPORT ncclResult_t ncclMemFree(void* ptr) {
  if (!ptr) return ncclSuccess;
  if (cudaError_t e = cudaFree(ptr); e != cudaSuccess) return cuda_failed("ncclMemFree", "cudaFree", e);
  return ncclSuccess;
}
MDRING_NCCL_TWIN(ncclResult_t, ncclMemFree, void*)

// Registration is a hint in NCCL; mdring needs none (the ipc transport maps
// buffers as calls use them): the handle is the buffer itself.
MDRING_NCCL_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t, void** handle) {
  constexpr const char* fn = "ncclCommRegister";
  if (!comm) return fail(ncclInvalidArgument, fn, "comm is NULL");
  if (!handle) return fail(ncclInvalidArgument, fn, "handle is NULL");
  *handle = buff;
  return ncclSuccess;
}
MDRING_NCCL_TWIN(ncclResult_t, ncclCommRegister, const ncclComm_t, void*, size_t, void**)

MDRING_NCCL_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void*) {
  if (!comm) return fail(ncclInvalidArgument, "ncclCommDeregister", "comm is NULL");
  return ncclSuccess;
}
MDRING_NCCL_TWIN(ncclResult_t, ncclCommDeregister, const ncclComm_t, void*)

MDRING_NCCL_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t, void*, size_t, ncclWindow_t*, int) {
  return unsupported("ncclCommWindowRegister", "symmetric memory windows");
}
MDRING_NCCL_TWIN(ncclResult_t, ncclCommWindowRegister, ncclComm_t, void*, size_t, ncclWindow_t*, int)

MDRING_NCCL_EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t, ncclWindow_t) {
  return unsupported("ncclCommWindowDeregister", "symmetric memory windows");
}
MDRING_NCCL_TWIN(ncclResult_t, ncclCommWindowDeregister, ncclComm_t, ncclWindow_t)

// ---- reduction ops --------------------------------------------------------------------

MDRING_NCCL_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                         ncclScalarResidence_t residence, ncclComm_t comm) {
  constexpr const char* fn = "ncclRedOpCreatePreMulSum";
  if (!comm) return fail(ncclInvalidArgument, fn, "comm is NULL");
  std::lock_guard l(comm->calls);
  try {
    return comm->premul.create(fn, op, scalar, datatype, residence);
  } catch (...) {
    return from_exception(fn);
  }
}
MDRING_NCCL_TWIN(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t,
                 ncclComm_t)

MDRING_NCCL_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if (!comm) return fail(ncclInvalidArgument, "ncclRedOpDestroy", "comm is NULL");
  std::lock_guard l(comm->calls);
  return comm->premul.destroy("ncclRedOpDestroy", op);
}
MDRING_NCCL_TWIN(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t, ncclComm_t)

// ---- collectives ------------------------------------------------------------------------

MDRING_NCCL_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                              ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                              cudaStream_t stream) {
  nccl_call c{comm, call_kind::all_reduce, -1, "ncclAllReduce", sendbuff, recvbuff, count, {}, {}, 0, stream};
  ncclResult_t r = check_reduction(c, datatype, op, comm);
  if (r == ncclSuccess) r = check_count(c.function, "count", count, c.type.bytes);
  if (r == ncclSuccess) r = check_buffer(c.function, "sendbuff", sendbuff, count);
  if (r == ncclSuccess) r = check_buffer(c.function, "recvbuff", recvbuff, count);
  return r == ncclSuccess ? submit(c) : refused(r);
}
MDRING_NCCL_TWIN(ncclResult_t, ncclAllReduce, const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                 cudaStream_t)

MDRING_NCCL_EXPORT ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                           ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  nccl_call c{comm, call_kind::reduce, -1, "ncclReduce", sendbuff, recvbuff, count, {}, {}, root, stream};
  ncclResult_t r = check_reduction(c, datatype, op, comm);
  if (r == ncclSuccess) r = check_rank(c.function, "root", root, comm->size);
  if (r == ncclSuccess) r = check_count(c.function, "count", count, c.type.bytes);
  if (r == ncclSuccess) r = check_buffer(c.function, "sendbuff", sendbuff, count);
  if (r == ncclSuccess && comm->rank == root) r = check_buffer(c.function, "recvbuff (at the root)", recvbuff, count);
  return r == ncclSuccess ? submit(c) : refused(r);
}
MDRING_NCCL_TWIN(ncclResult_t, ncclReduce, const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                 cudaStream_t)

MDRING_NCCL_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                                  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                                  cudaStream_t stream) {
  nccl_call c{comm,  call_kind::reduce_scatter, -1, "ncclReduceScatter", sendbuff, recvbuff, recvcount, {}, {}, 0,
              stream};
  ncclResult_t r = check_reduction(c, datatype, op, comm);
  if (r == ncclSuccess) r = check_count(c.function, "recvcount", recvcount, c.type.bytes, std::size_t(comm->size));
  if (r == ncclSuccess) r = check_buffer(c.function, "sendbuff", sendbuff, recvcount);
  if (r == ncclSuccess) r = check_buffer(c.function, "recvbuff", recvbuff, recvcount);
  return r == ncclSuccess ? submit(c) : refused(r);
}
MDRING_NCCL_TWIN(ncclResult_t, ncclReduceScatter, const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                 cudaStream_t)

MDRING_NCCL_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  nccl_call c{comm, call_kind::all_gather, -1, "ncclAllGather", sendbuff, recvbuff, sendcount, {}, {}, 0, stream};
  ncclResult_t r = usable(c.function, comm);
  if (r == ncclSuccess) r = describe_type(c.function, datatype, c.type);
  if (r == ncclSuccess) r = check_count(c.function, "sendcount", sendcount, c.type.bytes, std::size_t(comm->size));
  if (r == ncclSuccess) r = check_buffer(c.function, "sendbuff", sendbuff, sendcount);
  if (r == ncclSuccess) r = check_buffer(c.function, "recvbuff", recvbuff, sendcount);
  return r == ncclSuccess ? submit(c) : refused(r);
}
MDRING_NCCL_TWIN(ncclResult_t, ncclAllGather, const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t)

MDRING_NCCL_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  nccl_call c{comm, call_kind::broadcast, -1, "ncclBroadcast", sendbuff, recvbuff, count, {}, {}, root, stream};
  ncclResult_t r = usable(c.function, comm);
  if (r == ncclSuccess) r = describe_type(c.function, datatype, c.type);
  if (r == ncclSuccess) r = check_rank(c.function, "root", root, comm->size);
  if (r == ncclSuccess) r = check_count(c.function, "count", count, c.type.bytes);
  if (r == ncclSuccess && comm->rank == root) r = check_buffer(c.function, "sendbuff (at the root)", sendbuff, count);
  if (r == ncclSuccess) r = check_buffer(c.function, "recvbuff", recvbuff, count);
  return r == ncclSuccess ? submit(c) : refused(r);
}
MDRING_NCCL_TWIN(ncclResult_t, ncclBroadcast, const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)

MDRING_NCCL_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                          cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}
MDRING_NCCL_TWIN(ncclResult_t, ncclBcast, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)

// ---- point to point, and the collectives NCCL builds from it ----------------------------
// Queued like the collectives; a group's messages are issued together at its end
// (issue_p2p: the k-th send to a peer meets that peer's k-th receive from this rank).

namespace mdring_nccl {
namespace {

// Checks one message and queues it (or issues it alone, outside a group).
ncclResult_t message(const char* function, call_kind kind, const void* send, void* recv, std::size_t count,
                     ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream, const char* peer_name) {
  nccl_call c{comm, kind, peer, function, send, recv, count, {}, {}, 0, stream};
  ncclResult_t r = usable(function, comm);
  if (r == ncclSuccess && !comm->p2p)  // refused, the communicator unharmed
    r = fail(ncclInvalidUsage, function, comm->p2p_unavailable);
  if (r == ncclSuccess) r = describe_type(function, datatype, c.type);
  if (r == ncclSuccess) r = check_rank(function, peer_name, peer, comm->size);
  if (r == ncclSuccess) r = check_count(function, "count", count, c.type.bytes);
  if (r == ncclSuccess)
    r = check_buffer(function, kind == call_kind::send ? "sendbuff" : "recvbuff", kind == call_kind::send ? send : recv,
                     count);
  return r == ncclSuccess ? submit(c) : refused(r);
}

// A collective made of messages: its own group (nested in the caller's, if any),
// `each(j)` queueing what goes to and from rank j.
template <class Each>
ncclResult_t as_group(const char* function, ncclComm_t comm, ncclDataType_t datatype, std::size_t count,
                      std::size_t per_rank_factor, int root, bool rooted, Each&& each) {
  ncclResult_t r = usable(function, comm);
  type_info t{};
  if (r == ncclSuccess) r = describe_type(function, datatype, t);
  if (r == ncclSuccess && rooted) r = check_rank(function, "root", root, comm->size);
  if (r == ncclSuccess) r = check_count(function, "count", count, t.bytes, per_rank_factor);
  if (r != ncclSuccess) return refused(r);
  group().start();
  for (int j = 0; j < comm->size && r == ncclSuccess; ++j) r = each(j, count * t.bytes);
  std::vector<comm_batch<nccl_call>> none;
  if (r != ncclSuccess) {
    (void)group().end(none);  // discards the group when it is the outermost
    return r;
  }
  return ncclGroupEnd();
}

char* at(void* p, std::size_t bytes) { return static_cast<char*>(p) + bytes; }
const char* at(const void* p, std::size_t bytes) { return static_cast<const char*>(p) + bytes; }

}  // namespace
}  // namespace mdring_nccl

MDRING_NCCL_EXPORT ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                         ncclComm_t comm, cudaStream_t stream) {
  return message("ncclSend", call_kind::send, sendbuff, nullptr, count, datatype, peer, comm, stream, "peer");
}
MDRING_NCCL_TWIN(ncclResult_t, ncclSend, const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)

MDRING_NCCL_EXPORT ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                         ncclComm_t comm, cudaStream_t stream) {
  return message("ncclRecv", call_kind::recv, nullptr, recvbuff, count, datatype, peer, comm, stream, "peer");
}
MDRING_NCCL_TWIN(ncclResult_t, ncclRecv, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)

// count elements to and from every rank: block j of sendbuff goes to rank j, block j
// of recvbuff comes from rank j.
MDRING_NCCL_EXPORT ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                             ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  constexpr const char* fn = "ncclAlltoAll";
  if (comm && count && (!sendbuff || !recvbuff))
    return refused(check_buffer(fn, sendbuff ? "recvbuff" : "sendbuff", nullptr, count));
  return as_group(
      fn, comm, datatype, count, comm ? std::size_t(comm->size) : 1, 0, false, [&](int j, std::size_t bytes) {
        ncclResult_t r =
            message(fn, call_kind::send, at(sendbuff, j * bytes), nullptr, count, datatype, j, comm, stream, "peer");
        if (r == ncclSuccess)
          r = message(fn, call_kind::recv, nullptr, at(recvbuff, j * bytes), count, datatype, j, comm, stream, "peer");
        return r;
      });
}
MDRING_NCCL_TWIN(ncclResult_t, ncclAlltoAll, const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t)

// Every rank's count elements into block r of the root's recvbuff.
MDRING_NCCL_EXPORT ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                           int root, ncclComm_t comm, cudaStream_t stream) {
  constexpr const char* fn = "ncclGather";
  if (comm && count && !sendbuff) return refused(check_buffer(fn, "sendbuff", nullptr, count));
  if (comm && count && comm->rank == root && !recvbuff)
    return refused(check_buffer(fn, "recvbuff (at the root)", nullptr, count));
  return as_group(
      fn, comm, datatype, count, comm ? std::size_t(comm->size) : 1, root, true, [&](int j, std::size_t bytes) {
        ncclResult_t r = ncclSuccess;
        if (j == comm->rank)
          r = message(fn, call_kind::send, sendbuff, nullptr, count, datatype, root, comm, stream, "root");
        if (r == ncclSuccess && comm->rank == root)
          r = message(fn, call_kind::recv, nullptr, at(recvbuff, j * bytes), count, datatype, j, comm, stream, "root");
        return r;
      });
}
MDRING_NCCL_TWIN(ncclResult_t, ncclGather, const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)

// Block r of the root's sendbuff into rank r's recvbuff (count elements).
MDRING_NCCL_EXPORT ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                            int root, ncclComm_t comm, cudaStream_t stream) {
  constexpr const char* fn = "ncclScatter";
  if (comm && count && !recvbuff) return refused(check_buffer(fn, "recvbuff", nullptr, count));
  if (comm && count && comm->rank == root && !sendbuff)
    return refused(check_buffer(fn, "sendbuff (at the root)", nullptr, count));
  return as_group(
      fn, comm, datatype, count, comm ? std::size_t(comm->size) : 1, root, true, [&](int j, std::size_t bytes) {
        ncclResult_t r = ncclSuccess;
        if (comm->rank == root)
          r = message(fn, call_kind::send, at(sendbuff, j * bytes), nullptr, count, datatype, j, comm, stream, "root");
        if (r == ncclSuccess && j == comm->rank)
          r = message(fn, call_kind::recv, nullptr, recvbuff, count, datatype, root, comm, stream, "root");
        return r;
      });
}
MDRING_NCCL_TWIN(ncclResult_t, ncclScatter, const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)

// ---- groups ------------------------------------------------------------------------------

MDRING_NCCL_EXPORT ncclResult_t ncclGroupStart() {
  group().start();
  return ncclSuccess;
}
MDRING_NCCL_TWIN(ncclResult_t, ncclGroupStart)

// The outermost end issues the group: one communicator's calls in order on this
// thread; several communicators' each on a thread of its own (a call may wait on
// the host for its peers, which are other communicators' ranks in this process).
MDRING_NCCL_EXPORT ncclResult_t ncclGroupEnd() {
  try {
    std::vector<comm_batch<nccl_call>> batches;
    if (auto r = group().end(batches); r != ncclSuccess) return r;
    std::vector<std::pair<ncclResult_t, std::string>> results(batches.size(), {ncclSuccess, std::string()});
    auto run = [&](std::size_t i) noexcept {
      auto failed = [&](ncclResult_t r) {
        try {
          results[i] = {r, last_error()};
        } catch (...) {
          results[i].first = r;
        }
      };
      auto& comm = *const_cast<ncclComm*>(static_cast<const ncclComm*>(batches[i].comm));
      // Sends to itself without their receives: refused before anything is issued
      // (and, when the group holds other work its peers wait on, announced to them).
      bool others = false;
      if (std::string why = unmatched_self(batches[i], comm.rank, others); !why.empty()) {
        const auto& self = batches[i].p2p[comm.rank];
        const char* fn = (self.first.empty() ? self.second : self.first)[0].function;
        return failed(issue_guarded(comm, fn, [&] {
          if (others) mark_broken(*comm.comm, why);
          throw mdring::invalid_argument("peer", why);
        }));
      }
      for (const auto& c : batches[i].collectives)
        if (auto r = issue_checked(c); r != ncclSuccess) return failed(r);
      // Then its messages, all together (each peer's in call order).
      std::vector<nccl_call> p2p;
      try {
        for (auto& [peer, lists] : batches[i].p2p) {
          p2p.insert(p2p.end(), lists.first.begin(), lists.first.end());
          p2p.insert(p2p.end(), lists.second.begin(), lists.second.end());
        }
      } catch (...) {
        return failed(from_exception("ncclGroupEnd"));
      }
      if (p2p.empty()) return;
      if (auto r = issue_guarded(comm, p2p.front().function, [&] { issue_p2p(comm, p2p); }); r != ncclSuccess)
        failed(r);
    };
    std::vector<std::thread> threads;
    std::size_t next = 0;
    if (batches.size() > 1) {
      try {
        for (; next < batches.size(); ++next) threads.emplace_back(run, next);
      } catch (...) {  // no thread for the rest: they run here, after those started
      }
    }
    for (auto& t : threads) t.join();
    for (; next < batches.size(); ++next) run(next);
    for (const auto& [r, text] : results)
      if (r != ncclSuccess) {
        last_error_slot() = text;
        return r;
      }
    return ncclSuccess;
  } catch (...) {
    return from_exception("ncclGroupEnd");
  }
}
MDRING_NCCL_TWIN(ncclResult_t, ncclGroupEnd)

// The device API (nccl_device.h): its communicators are what NCCL's benchmark
// programs probe for (weak symbols) and use only when asked; refused by name.
#if __has_include(<nccl_device.h>)
#include <nccl_device.h>
MDRING_NCCL_EXPORT ncclResult_t ncclDevCommCreate(ncclComm_t, ncclDevCommRequirements_t const*, ncclDevComm_t*) {
  return unsupported("ncclDevCommCreate", "NCCL's device API");
}
MDRING_NCCL_EXPORT ncclResult_t ncclDevCommDestroy(ncclComm_t, ncclDevComm_t const*) {
  return unsupported("ncclDevCommDestroy", "NCCL's device API");
}
#endif

MDRING_NCCL_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t*) {
  return unsupported("ncclGroupSimulateEnd", "mdring's cost model is in explain(); MDRING_REPORT=1 prints it");
}
MDRING_NCCL_TWIN(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t*)
