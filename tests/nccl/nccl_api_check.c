/* tests/nccl/nccl_api_check.c: libmdring-nccl.so through NCCL's C API, as a C
 * program linked against it (in place of libnccl.so.2) sees it, on any machine.
 *
 * Everywhere: the version is the header's; error strings; ncclGetUniqueId starts
 * a store; a foreign unique id, NULL and out-of-range arguments, a bad config,
 * fp8, an unknown op and unsupported calls fail with the result and the
 * ncclGetLastError() text expected; groups nest and a failed call discards its
 * group. Without a GPU: ncclCommInitRank fails with ncclUnhandledCudaError naming
 * cudaGetDevice, nothing hangs. With one: a one-rank communicator all-reduces,
 * broadcasts and all-gathers exactly, PreMulSum included, sends to itself in a
 * group, all-to-alls, gathers and scatters exactly, and refuses a send to itself
 * without its receive and a receive of another size; shrinks it, and revokes one
 * (calls then refused, shrink and split go on). Exits 0 when all hold. */
#include <nccl.h>

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define EXPECT(cond)                                                      \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                         \
    }                                                                     \
  } while (0)
/* The call returns r, and ncclGetLastError() starts with text. */
#define EXPECT_FAIL(call, r, text)                                                                                    \
  do {                                                                                                                \
    ncclResult_t got_ = (call);                                                                                       \
    const char* last_ = ncclGetLastError(NULL);                                                                       \
    if (got_ != (r) || strncmp(last_, (text), strlen(text)) != 0) {                                                   \
      fprintf(stderr, "%s:%d: %s gave %d (%s), expected %d (%s)\n", __FILE__, __LINE__, #call, got_, last_, (int)(r), \
              (text));                                                                                                \
      ++failures;                                                                                                     \
    }                                                                                                                 \
  } while (0)

static void without_a_communicator(void) {
  int v = 0;
  EXPECT(ncclGetVersion(&v) == ncclSuccess && v == NCCL_VERSION_CODE);
  EXPECT(strcmp(ncclGetErrorString(ncclSuccess), "no error") == 0);
  EXPECT(strcmp(ncclGetErrorString(ncclRemoteError), "remote process exited or there was a network error") == 0);

  ncclUniqueId id, zero;
  memset(&zero, 0, sizeof zero);
  EXPECT(ncclGetUniqueId(&id) == ncclSuccess);
  EXPECT(memcmp(id.internal, "mdring", 6) == 0);

  ncclComm_t comm = NULL;
  EXPECT_FAIL(ncclCommInitRank(&comm, 2, zero, 0), ncclInvalidArgument,
              "ncclCommInitRank: commId was not made by mdring's ncclGetUniqueId");
  EXPECT(comm == NULL);
  EXPECT_FAIL(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument,
              "ncclCommInitRank: rank 2 is not a rank of this communicator (0 to 1)");
  EXPECT_FAIL(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument, "ncclCommInitRank: nranks 0 is below 1");
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  EXPECT_FAIL(ncclCommInitRankConfig(&comm, 1, id, 0, &bad), ncclInvalidArgument,
              "ncclCommInitRankConfig: config was not set up with NCCL_CONFIG_INITIALIZER");

  ncclConfig_t two = NCCL_CONFIG_INITIALIZER;
  two.blocking = 2;
  EXPECT_FAIL(ncclCommInitRankConfig(&comm, 1, id, 0, &two), ncclInvalidArgument,
              "ncclCommInitRankConfig: config->blocking is 2 (expected 0 or 1)");
  ncclComm_t child = (ncclComm_t)1;
  EXPECT_FAIL(ncclCommSplit(NULL, 0, 0, &child, NULL), ncclInvalidArgument, "ncclCommSplit: comm is NULL");
  EXPECT(child == NULL);
  ncclResult_t async = ncclSuccess;
  EXPECT_FAIL(ncclCommGetAsyncError(NULL, &async), ncclInvalidArgument, "ncclCommGetAsyncError: comm is NULL");
  int count = 0;
  EXPECT_FAIL(ncclCommCount(NULL, &count), ncclInvalidArgument, "ncclCommCount: comm is NULL");
  ncclRedOp_t op;
  float scalar = 2;
  EXPECT_FAIL(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, NULL), ncclInvalidArgument,
              "ncclRedOpCreatePreMulSum: comm is NULL");
  EXPECT_FAIL(ncclGetUniqueId(NULL), ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");

  float x = 1;
  EXPECT_FAIL(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, NULL, 0), ncclInvalidArgument,
              "ncclAllReduce: comm is NULL");
  EXPECT_FAIL(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart before it on this thread");
  EXPECT_FAIL(ncclSend(&x, 1, ncclFloat, 0, NULL, 0), ncclInvalidArgument, "ncclSend: comm is NULL");
  EXPECT_FAIL(ncclRecv(&x, 1, ncclFloat, 0, NULL, 0), ncclInvalidArgument, "ncclRecv: comm is NULL");
  EXPECT_FAIL(ncclAlltoAll(&x, &x, 1, ncclFloat, NULL, 0), ncclInvalidArgument, "ncclAlltoAll: comm is NULL");
  EXPECT_FAIL(ncclGather(&x, &x, 1, ncclFloat, 0, NULL, 0), ncclInvalidArgument, "ncclGather: comm is NULL");
  EXPECT_FAIL(ncclScatter(&x, &x, 1, ncclFloat, 0, NULL, 0), ncclInvalidArgument, "ncclScatter: comm is NULL");
  EXPECT_FAIL(ncclCommShrink(NULL, NULL, 0, NULL, NULL, 0), ncclInvalidArgument, "ncclCommShrink: newcomm is NULL");
  EXPECT_FAIL(ncclCommShrink(NULL, NULL, 0, &comm, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument,
              "ncclCommShrink: comm is NULL");
  EXPECT(comm == NULL);
  EXPECT_FAIL(ncclCommRevoke(NULL, NCCL_REVOKE_DEFAULT), ncclInvalidArgument, "ncclCommRevoke: comm is NULL");
  EXPECT_FAIL(ncclCommInitAll(&comm, 2, NULL), ncclInvalidUsage, "ncclCommInitAll: not supported");

  /* A group: nests; a call that fails inside discards it at the outermost end. */
  EXPECT(ncclGroupStart() == ncclSuccess);
  EXPECT(ncclGroupStart() == ncclSuccess);
  EXPECT(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, NULL, 0) == ncclInvalidArgument);
  EXPECT(ncclGroupEnd() == ncclSuccess);
  EXPECT_FAIL(ncclGroupEnd(), ncclInvalidArgument,
              "ncclGroupEnd: the group was discarded (0 calls not issued) because a call in it failed: "
              "ncclAllReduce: comm is NULL");
  EXPECT(ncclGroupStart() == ncclSuccess);
  EXPECT(ncclGroupEnd() == ncclSuccess); /* the next group is clean */
  EXPECT(ncclGroupStart() == ncclSuccess);
  EXPECT(ncclRecv(&x, 1, ncclFloat, 0, NULL, 0) == ncclInvalidArgument);
  EXPECT_FAIL(ncclGroupEnd(), ncclInvalidArgument,
              "ncclGroupEnd: the group was discarded (0 calls not issued) because a call in it failed: "
              "ncclRecv: comm is NULL");

  void* p = (void*)&x;
  EXPECT(ncclMemFree(NULL) == ncclSuccess);
  EXPECT(ncclCommDestroy(NULL) == ncclSuccess);
  EXPECT_FAIL(ncclMemAlloc(NULL, 8), ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  (void)p;
}

static void without_a_gpu(void) {
  ncclUniqueId id;
  ncclComm_t comm = (ncclComm_t)1;
  EXPECT(ncclGetUniqueId(&id) == ncclSuccess);
  EXPECT_FAIL(ncclCommInitRank(&comm, 2, id, 0), ncclUnhandledCudaError, "ncclCommInitRank: cudaGetDevice failed");
  EXPECT(comm == NULL);
}

/* One rank on this GPU: every call is exact. */
static void on_a_gpu(void) {
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  EXPECT(ncclGetUniqueId(&id) == ncclSuccess);
  EXPECT(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  if (!comm) return;
  int n = 0, r = -1;
  EXPECT(ncclCommCount(comm, &n) == ncclSuccess && n == 1);
  EXPECT(ncclCommUserRank(comm, &r) == ncclSuccess && r == 0);
  float host[8], back[8];
  for (int i = 0; i < 8; ++i) host[i] = (float)(i + 1);
  float *d = NULL, *e = NULL;
  cudaMalloc((void**)&d, sizeof host);
  cudaMalloc((void**)&e, sizeof host);
  cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice);
  EXPECT(ncclAllReduce(d, e, 8, ncclFloat, ncclSum, comm, 0) == ncclSuccess);
  cudaMemcpy(back, e, sizeof back, cudaMemcpyDeviceToHost);
  for (int i = 0; i < 8; ++i) EXPECT(back[i] == host[i]);
  ncclRedOp_t half_sum;
  float h = 0.5f;
  EXPECT(ncclRedOpCreatePreMulSum(&half_sum, &h, ncclFloat, ncclScalarHostImmediate, comm) == ncclSuccess);
  EXPECT(ncclAllReduce(d, e, 8, ncclFloat, half_sum, comm, 0) == ncclSuccess);
  cudaMemcpy(back, e, sizeof back, cudaMemcpyDeviceToHost);
  for (int i = 0; i < 8; ++i) EXPECT(back[i] == host[i] * 0.5f);
  EXPECT(ncclRedOpDestroy(half_sum, comm) == ncclSuccess);
  EXPECT(ncclBroadcast(d, e, 8, ncclFloat, 0, comm, 0) == ncclSuccess);
  EXPECT(ncclAllGather(d, e, 8, ncclFloat, comm, 0) == ncclSuccess);
  cudaMemcpy(back, e, sizeof back, cudaMemcpyDeviceToHost);
  for (int i = 0; i < 8; ++i) EXPECT(back[i] == host[i]);
  EXPECT_FAIL(ncclBroadcast(d, e, 8, ncclFloat, 1, comm, 0), ncclInvalidArgument,
              "ncclBroadcast: root 1 is not a rank of this communicator (0 to 0)");
  if (ncclNumTypes > 10)
    EXPECT_FAIL(ncclAllReduce(d, e, 8, (ncclDataType_t)10, ncclSum, comm, 0), ncclInvalidArgument,
                "ncclAllReduce: datatype ncclFloat8e4m3: fp8 is not supported by mdring");
  EXPECT_FAIL(ncclAllReduce(d, e, 8, ncclFloat, (ncclRedOp_t)9, comm, 0), ncclInvalidArgument,
              "ncclAllReduce: op 9 is not a live PreMulSum op of this communicator");

  /* Shrink: this rank excluded is refused; nothing excluded gives a communicator of
     the same one rank, which computes. */
  ncclComm_t child = NULL;
  int self = 0;
  EXPECT_FAIL(ncclCommShrink(comm, &self, 1, &child, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument,
              "ncclCommShrink: excludeRanksList[0] is this rank (0)");
  EXPECT(ncclCommShrink(comm, NULL, 0, &child, NULL, NCCL_SHRINK_DEFAULT) == ncclSuccess && child != NULL);
  if (child) {
    EXPECT(ncclCommCount(child, &n) == ncclSuccess && n == 1);
    EXPECT(ncclAllReduce(d, e, 8, ncclFloat, ncclSum, child, 0) == ncclSuccess);
    cudaMemcpy(back, e, sizeof back, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 8; ++i) EXPECT(back[i] == host[i]);
    EXPECT(ncclCommDestroy(child) == ncclSuccess);
    child = NULL;
  }

  /* Point to point on one rank: to itself, in a group; the collectives made of it. */
  cudaMemset(e, 0, sizeof host);
  EXPECT(ncclGroupStart() == ncclSuccess);
  EXPECT(ncclRecv(e, 8, ncclFloat, 0, comm, 0) == ncclSuccess);
  EXPECT(ncclSend(d, 8, ncclFloat, 0, comm, 0) == ncclSuccess);
  EXPECT(ncclGroupEnd() == ncclSuccess);
  cudaMemcpy(back, e, sizeof back, cudaMemcpyDeviceToHost);
  for (int i = 0; i < 8; ++i) EXPECT(back[i] == host[i]);
  cudaMemset(e, 0, sizeof host);
  EXPECT(ncclAlltoAll(d, e, 8, ncclFloat, comm, 0) == ncclSuccess);
  cudaMemcpy(back, e, sizeof back, cudaMemcpyDeviceToHost);
  for (int i = 0; i < 8; ++i) EXPECT(back[i] == host[i]);
  cudaMemset(e, 0, sizeof host);
  EXPECT(ncclGather(d, e, 8, ncclFloat, 0, comm, 0) == ncclSuccess);
  cudaMemcpy(back, e, sizeof back, cudaMemcpyDeviceToHost);
  for (int i = 0; i < 8; ++i) EXPECT(back[i] == host[i]);
  cudaMemset(e, 0, sizeof host);
  EXPECT(ncclScatter(d, e, 8, ncclFloat, 0, comm, 0) == ncclSuccess);
  cudaMemcpy(back, e, sizeof back, cudaMemcpyDeviceToHost);
  for (int i = 0; i < 8; ++i) EXPECT(back[i] == host[i]);
  EXPECT_FAIL(ncclSend(d, 8, ncclFloat, 1, comm, 0), ncclInvalidArgument,
              "ncclSend: peer 1 is not a rank of this communicator (0 to 0)");
  EXPECT_FAIL(ncclSend(d, 8, ncclFloat, 0, comm, 0), ncclInvalidArgument,
              "ncclSend: rank 0 sends to itself 1 times but receives from itself 0 times");
  /* A receive of another size: refused, and the communicator is then broken. */
  EXPECT(ncclGroupStart() == ncclSuccess);
  EXPECT(ncclSend(d, 8, ncclFloat, 0, comm, 0) == ncclSuccess);
  EXPECT(ncclRecv(e, 4, ncclFloat, 0, comm, 0) == ncclSuccess);
  EXPECT_FAIL(ncclGroupEnd(), ncclInvalidArgument, "ncclSend: point to point on rank 0: rank 0 sends 32 bytes where");
  ncclResult_t async_error = ncclSuccess;
  EXPECT(ncclCommGetAsyncError(comm, &async_error) == ncclSuccess && async_error == ncclInvalidArgument);
  /* The broken communicator shrinks (NCCL_SHRINK_ABORT: its calls stopped first) into one that computes. */
  EXPECT(ncclCommShrink(comm, NULL, 0, &child, NULL, NCCL_SHRINK_ABORT) == ncclSuccess && child != NULL);
  if (child) {
    EXPECT(ncclAllReduce(d, e, 8, ncclFloat, ncclSum, child, 0) == ncclSuccess);
    cudaMemcpy(back, e, sizeof back, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 8; ++i) EXPECT(back[i] == host[i]);
    EXPECT(ncclCommDestroy(child) == ncclSuccess);
    child = NULL;
  }
  EXPECT(ncclCommDestroy(comm) == ncclSuccess);

  /* Revoke: bad flags named; then calls and finalize refused, the state quiescent,
     a second revoke harmless; the revoked communicator shrinks (NCCL_SHRINK_DEFAULT)
     and splits into ones that compute. */
  comm = NULL;
  EXPECT(ncclGetUniqueId(&id) == ncclSuccess);
  EXPECT(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  if (comm) {
    EXPECT_FAIL(ncclCommRevoke(comm, 1), ncclInvalidArgument,
                "ncclCommRevoke: revokeFlags is 1 (expected NCCL_REVOKE_DEFAULT, 0)");
    EXPECT(ncclAllReduce(d, e, 8, ncclFloat, ncclSum, comm, 0) == ncclSuccess);
    EXPECT(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT) == ncclSuccess);
    EXPECT(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT) == ncclSuccess);
    async_error = ncclInternalError;
    EXPECT(ncclCommGetAsyncError(comm, &async_error) == ncclSuccess && async_error == ncclSuccess);
    EXPECT_FAIL(ncclAllReduce(d, e, 8, ncclFloat, ncclSum, comm, 0), ncclInvalidUsage,
                "ncclAllReduce: the communicator was revoked (ncclCommRevoke)");
    EXPECT_FAIL(ncclSend(d, 8, ncclFloat, 0, comm, 0), ncclInvalidUsage,
                "ncclSend: the communicator was revoked (ncclCommRevoke)");
    EXPECT_FAIL(ncclCommFinalize(comm), ncclInvalidUsage, "ncclCommFinalize: the communicator was revoked");
    EXPECT(ncclCommShrink(comm, NULL, 0, &child, NULL, NCCL_SHRINK_DEFAULT) == ncclSuccess && child != NULL);
    if (child) {
      cudaMemset(e, 0, sizeof host);
      EXPECT(ncclAllReduce(d, e, 8, ncclFloat, ncclSum, child, 0) == ncclSuccess);
      cudaMemcpy(back, e, sizeof back, cudaMemcpyDeviceToHost);
      for (int i = 0; i < 8; ++i) EXPECT(back[i] == host[i]);
      EXPECT(ncclCommDestroy(child) == ncclSuccess);
      child = NULL;
    }
    EXPECT(ncclCommSplit(comm, 0, 0, &child, NULL) == ncclSuccess && child != NULL);
    if (child) {
      cudaMemset(e, 0, sizeof host);
      EXPECT(ncclBroadcast(d, e, 8, ncclFloat, 0, child, 0) == ncclSuccess);
      cudaMemcpy(back, e, sizeof back, cudaMemcpyDeviceToHost);
      for (int i = 0; i < 8; ++i) EXPECT(back[i] == host[i]);
      EXPECT(ncclCommDestroy(child) == ncclSuccess);
    }
    EXPECT(ncclCommDestroy(comm) == ncclSuccess);
  }
  cudaFree(d);
  cudaFree(e);
}

int main(void) {
  int devices = 0;
  without_a_communicator();
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    without_a_gpu();
    printf("nccl_api_check: no GPU here: the calls that need none checked\n");
  } else {
    on_a_gpu();
    printf("nccl_api_check: %d GPU(s): a one-rank communicator checked too\n", devices);
  }
  if (failures) fprintf(stderr, "nccl_api_check: %d failed\n", failures);
  return failures ? 1 : 0;
}
