// tests/nccl/nccl_p2p_check.cpp: point to point of libmdring-nccl.so between
// processes, through NCCL's C API only (as an NCCL program sees it). The parent makes
// the unique id, forks P ranks (argv[1], default 3) that share the node's GPUs (rank r
// on device r % GPUs; one GPU is enough), and each checks, exactly:
//   1. a ring in a group (send to the next, receive from the one before), float and
//      int64, 0 to 1 Mi + 3 elements;
//   2. every pair both ways in one group, odd ranks calling their receives first;
//   3. 20 messages to one peer in one group (more than the mailbox's 8) and 3 more
//      outside any group;
//   4. pairs outside a group: even ranks send then receive, odd ranks the reverse;
//   5. ncclAlltoAll, ncclGather and ncclScatter from every root;
//   6. a send and its receive on different streams of one group, and one pair's
//      messages in consecutive groups on different streams, with no host sync;
//   7. a ring group captured into a CUDA graph, replayed 3 times with new inputs,
//      between eager calls;
//   8. ncclCommAbort on rank 0 while rank 1 waits in ncclRecv from it: rank 1's call
//      returns ncclRemoteError within the test's minute, nobody hangs.
// Exits 0 when every rank passed, 77 (skipped) without a GPU, 1 otherwise.
#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

int failures = 0;
int me = 0, P = 0;

#define EXPECT(cond, ...)                                                                   \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "rank %d: %s:%d: expected %s: ", me, __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                    \
      std::fprintf(stderr, "\n");                                                           \
      ++failures;                                                                           \
    }                                                                                       \
  } while (0)
#define NCCL_OK(call) EXPECT((call) == ncclSuccess, "%s: %s", #call, ncclGetLastError(nullptr))
#define CUDA_OK(call) EXPECT((call) == cudaSuccess, "%s", #call)

// Rank r's k-th message to rank j: n values, exact in float and int64.
template <class T>
std::vector<T> payload(int r, int j, int k, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = T((i * 7 + std::size_t(r) * 131 + std::size_t(j) * 17 + k * 3) % 1000);
  return v;
}

template <class T>
struct dev {
  T* p = nullptr;
  std::size_t n = 0;
  explicit dev(std::size_t count) : n(count) {
    if (n) cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T));
    if (n) cudaMemset(p, 0xff, n * sizeof(T));
    cudaDeviceSynchronize();  // (the library's work runs on non-blocking streams)
  }
  dev(const dev&) = delete;
  ~dev() { cudaFree(p); }
  void put(const std::vector<T>& v) {
    if (n) cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
  }
  void clear() {
    if (n) cudaMemset(p, 0, n * sizeof(T));
    cudaDeviceSynchronize();
  }
  std::vector<T> get() const {
    std::vector<T> v(n);
    if (n) cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }
};

template <class T>
constexpr ncclDataType_t type_of() {
  return sizeof(T) == 4 ? ncclFloat : ncclInt64;
}

template <class T>
void ring(ncclComm_t c, cudaStream_t s) {
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(4099), (std::size_t(1) << 20) + 3}) {
    const int next = (me + 1) % P, prev = (me + P - 1) % P;
    dev<T> out(n), in(n);
    in.put(payload<T>(me, next, 0, n));
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(in.p, n, type_of<T>(), next, c, s));
    NCCL_OK(ncclRecv(out.p, n, type_of<T>(), prev, c, s));
    NCCL_OK(ncclGroupEnd());
    CUDA_OK(cudaStreamSynchronize(s));
    EXPECT(out.get() == payload<T>(prev, me, 0, n), "ring of %zu elements of %zu bytes", n, sizeof(T));
  }
}

void every_pair(ncclComm_t c, cudaStream_t s) {
  const std::size_t n = 1000;
  std::vector<dev<float>*> outs, ins;
  for (int j = 0; j < P; ++j) {
    outs.push_back(new dev<float>(n));
    ins.push_back(new dev<float>(n));
    ins[j]->put(payload<float>(me, j, 1, n));
  }
  NCCL_OK(ncclGroupStart());
  for (int pass = 0; pass < 2; ++pass)
    for (int j = 0; j < P; ++j) {
      const bool recv_first = me % 2 == 1;
      if ((pass == 0) == recv_first) NCCL_OK(ncclRecv(outs[j]->p, n, ncclFloat, j, c, s));
      else NCCL_OK(ncclSend(ins[j]->p, n, ncclFloat, j, c, s));
    }
  NCCL_OK(ncclGroupEnd());
  CUDA_OK(cudaStreamSynchronize(s));
  for (int j = 0; j < P; ++j) EXPECT(outs[j]->get() == payload<float>(j, me, 1, n), "every pair: from rank %d", j);
  for (int j = 0; j < P; ++j) delete outs[j], delete ins[j];
}

void many_to_one_peer(ncclComm_t c, cudaStream_t s) {
  if (P < 2 || me > 1) return;
  const int peer = 1 - me;
  const int k = 23;  // 20 in a group, 3 alone
  const std::size_t n = 257;
  std::vector<dev<float>*> bufs;
  for (int i = 0; i < k; ++i) {
    bufs.push_back(new dev<float>(n));
    if (me == 0) bufs[i]->put(payload<float>(0, 1, i, n));
  }
  NCCL_OK(ncclGroupStart());
  for (int i = 0; i < 20; ++i)
    NCCL_OK(me == 0 ? ncclSend(bufs[i]->p, n, ncclFloat, peer, c, s) : ncclRecv(bufs[i]->p, n, ncclFloat, peer, c, s));
  NCCL_OK(ncclGroupEnd());
  for (int i = 20; i < k; ++i)
    NCCL_OK(me == 0 ? ncclSend(bufs[i]->p, n, ncclFloat, peer, c, s) : ncclRecv(bufs[i]->p, n, ncclFloat, peer, c, s));
  CUDA_OK(cudaStreamSynchronize(s));
  if (me == 1)
    for (int i = 0; i < k; ++i) EXPECT(bufs[i]->get() == payload<float>(0, 1, i, n), "message %d of %d", i, k);
  for (auto* b : bufs) delete b;
}

void pairs_outside_groups(ncclComm_t c, cudaStream_t s) {
  const int peer = me % 2 == 0 ? me + 1 : me - 1;
  if (peer >= P) return;
  const std::size_t n = 4099;
  dev<std::int64_t> out(n), in(n);
  in.put(payload<std::int64_t>(me, peer, 2, n));
  if (me % 2 == 0) {
    NCCL_OK(ncclSend(in.p, n, ncclInt64, peer, c, s));
    NCCL_OK(ncclRecv(out.p, n, ncclInt64, peer, c, s));
  } else {
    NCCL_OK(ncclRecv(out.p, n, ncclInt64, peer, c, s));
    NCCL_OK(ncclSend(in.p, n, ncclInt64, peer, c, s));
  }
  CUDA_OK(cudaStreamSynchronize(s));
  EXPECT(out.get() == payload<std::int64_t>(peer, me, 2, n), "pair with rank %d", peer);
}

void composed(ncclComm_t c, cudaStream_t s) {
  const std::size_t n = 333;
  dev<float> in(n * std::size_t(P)), out(n * std::size_t(P));
  std::vector<float> mine;
  for (int j = 0; j < P; ++j) {
    const auto b = payload<float>(me, j, 3, n);
    mine.insert(mine.end(), b.begin(), b.end());
  }
  in.put(mine);
  NCCL_OK(ncclAlltoAll(in.p, out.p, n, ncclFloat, c, s));
  CUDA_OK(cudaStreamSynchronize(s));
  std::vector<float> want;
  for (int j = 0; j < P; ++j) {
    const auto b = payload<float>(j, me, 3, n);
    want.insert(want.end(), b.begin(), b.end());
  }
  EXPECT(out.get() == want, "ncclAlltoAll");
  for (int root = 0; root < P; ++root) {
    dev<float> one(n), all(n * std::size_t(P));
    one.put(payload<float>(me, root, 4, n));
    NCCL_OK(ncclGather(one.p, all.p, n, ncclFloat, root, c, s));
    CUDA_OK(cudaStreamSynchronize(s));
    if (me == root) {
      std::vector<float> g;
      for (int j = 0; j < P; ++j) {
        const auto b = payload<float>(j, root, 4, n);
        g.insert(g.end(), b.begin(), b.end());
      }
      EXPECT(all.get() == g, "ncclGather to root %d", root);
    }
    if (me == root)
      all.put([&] {
        std::vector<float> v;
        for (int j = 0; j < P; ++j) {
          const auto b = payload<float>(root, j, 5, n);
          v.insert(v.end(), b.begin(), b.end());
        }
        return v;
      }());
    NCCL_OK(ncclScatter(all.p, one.p, n, ncclFloat, root, c, s));
    CUDA_OK(cudaStreamSynchronize(s));
    EXPECT(one.get() == payload<float>(root, me, 5, n), "ncclScatter from root %d", root);
  }
}

void two_streams(ncclComm_t c, cudaStream_t s) {
  cudaStream_t t = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
  const std::size_t n = 5000;
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  dev<float> out(n), in(n);
  in.put(payload<float>(me, next, 6, n));
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(in.p, n, ncclFloat, next, c, s));
  NCCL_OK(ncclRecv(out.p, n, ncclFloat, prev, c, t));
  NCCL_OK(ncclGroupEnd());
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaStreamSynchronize(t));
  EXPECT(out.get() == payload<float>(prev, me, 6, n), "send on one stream, receive on another");
  // Ranks 0 and 1: two messages, each alone, the first on s and the second on t at
  // the sender, the other way round at the receiver.
  if (me < 2) {
    dev<float> a(n), b(n);
    if (me == 0) a.put(payload<float>(0, 1, 11, n)), b.put(payload<float>(0, 1, 12, n));
    if (me == 0) {
      NCCL_OK(ncclSend(a.p, n, ncclFloat, 1, c, s));
      NCCL_OK(ncclSend(b.p, n, ncclFloat, 1, c, t));
    } else {
      NCCL_OK(ncclRecv(a.p, n, ncclFloat, 0, c, t));
      NCCL_OK(ncclRecv(b.p, n, ncclFloat, 0, c, s));
    }
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaStreamSynchronize(t));
    if (me == 1) {
      EXPECT(a.get() == payload<float>(0, 1, 11, n), "a pair's first message, on two streams");
      EXPECT(b.get() == payload<float>(0, 1, 12, n), "a pair's second message, on two streams");
    }
  }
  cudaStreamDestroy(t);
}

void graph(ncclComm_t c, cudaStream_t s) {
  const std::size_t n = 10000;
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  dev<float> out(n), in(n);
  in.put(payload<float>(me, next, 7, n));
  auto ring_once = [&] {  // an eager call first: the graph's buffers are then mapped
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(in.p, n, ncclFloat, next, c, s));
    NCCL_OK(ncclRecv(out.p, n, ncclFloat, prev, c, s));
    NCCL_OK(ncclGroupEnd());
  };
  ring_once();
  CUDA_OK(cudaStreamSynchronize(s));
  cudaGraph_t g = nullptr;
  cudaGraphExec_t x = nullptr;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  ring_once();
  CUDA_OK(cudaStreamEndCapture(s, &g));
  CUDA_OK(cudaGraphInstantiate(&x, g, 0));
  for (int k = 8; k < 11; ++k) {
    in.put(payload<float>(me, next, k, n));
    CUDA_OK(cudaGraphLaunch(x, s));
    CUDA_OK(cudaStreamSynchronize(s));
    EXPECT(out.get() == payload<float>(prev, me, k, n), "graph replay %d", k - 8);
    out.clear();
    ring_once();  // an eager call between replays
    CUDA_OK(cudaStreamSynchronize(s));
    EXPECT(out.get() == payload<float>(prev, me, k, n), "eager call after replay %d", k - 8);
  }
  cudaGraphExecDestroy(x);
  cudaGraphDestroy(g);
}

void abort_unblocks(ncclComm_t c, cudaStream_t s) {
  if (me == 0) {
    sleep(1);  // rank 1 is waiting in its receive by now
    NCCL_OK(ncclCommAbort(c));
    return;
  }
  if (me != 1) return;
  dev<float> out(16);
  const ncclResult_t r = ncclRecv(out.p, 16, ncclFloat, 0, c, s);
  EXPECT(r == ncclRemoteError, "ncclRecv from an aborted rank gave %d (%s)", int(r), ncclGetLastError(nullptr));
}

int rank_main(const ncclUniqueId& id) {
  int G = 0;
  if (cudaGetDeviceCount(&G) != cudaSuccess || G == 0) return 77;
  cudaSetDevice(me % G);
  ncclComm_t c = nullptr;
  NCCL_OK(ncclCommInitRank(&c, P, id, me));
  if (!c) return 1;
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ring<float>(c, s);
  ring<std::int64_t>(c, s);
  every_pair(c, s);
  many_to_one_peer(c, s);
  pairs_outside_groups(c, s);
  composed(c, s);
  two_streams(c, s);
  graph(c, s);
  // Every rank done before the abort (a collective, so it needs nothing but the library).
  dev<float> one(1);
  NCCL_OK(ncclAllReduce(one.p, one.p, 1, ncclFloat, ncclSum, c, s));
  CUDA_OK(cudaStreamSynchronize(s));
  abort_unblocks(c, s);
  if (me != 0) ncclCommDestroy(c);
  if (failures) std::fprintf(stderr, "nccl_p2p_check: rank %d: %d failed\n", me, failures);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  P = argc > 1 ? std::atoi(argv[1]) : 3;
  if (P < 2) {
    std::fprintf(stderr, "nccl_p2p_check: expected at least 2 ranks (argv[1])\n");
    return 2;
  }
  setenv("MDRING_TIMEOUT", "60", 0);  // a host wait that times out says so, before alarm() below
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) {  // (touches no GPU: the store starts here)
    std::fprintf(stderr, "nccl_p2p_check: ncclGetUniqueId: %s\n", ncclGetLastError(nullptr));
    return 1;
  }
  std::vector<pid_t> kids;
  for (int r = 0; r < P; ++r) {
    const pid_t k = fork();
    if (k == 0) {
      me = r;
      alarm(300);  // nothing hangs for ever
      std::_Exit(rank_main(id));
    }
    kids.push_back(k);
  }
  int worst = 0;
  for (pid_t k : kids) {
    int st = 0;
    waitpid(k, &st, 0);
    const int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    if (rc == 77 && worst == 0) worst = 77;
    else if (rc != 0 && rc != 77) worst = 1;
  }
  std::printf("nccl_p2p_check: %d ranks: %s\n", P, worst == 0 ? "ok" : worst == 77 ? "skipped (no GPU)" : "FAILED");
  return worst;
}
