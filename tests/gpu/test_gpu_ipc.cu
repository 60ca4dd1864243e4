// tests/gpu/test_gpu_ipc.cu: the ipc transport (mdring/cuda/ipc.cuh), several MPI
// processes sharing one node's GPUs (each on device rank % GPUs: one GPU is
// enough, CUDA IPC works between processes on one device).
//
//   - automatic picks ipc for a GPU link whose ranks are processes of one node;
//   - all_reduce over the count matrix (0, 1, P-1, 13, ... 2^20 + 7) and several
//     types and ops, one-shot (staged) and in place (two-shot), bitwise equal on
//     every rank; the same with the ring algorithm asked for (messages pulled from
//     the peers' buffers) and with a second dimension over MPI;
//   - reduce_scatter, all_gather, broadcast and reduce (every root), every op on
//     float, double, half, bfloat16, int8, uint8, int32, int64, in and out of place;
//   - more than 64 Mi elements;
//   - a call captured into a CUDA graph and replayed with fresh inputs, between
//     eager calls; calls on several streams back to back with no host sync;
//   - peers' buffers mapped once per allocation (pointers inside one block);
//   - a buffer CUDA IPC cannot share: invalid_argument on that rank, remote_error
//     on the others, nobody hangs.
// Run with mpiexec -n 2, 3 or 4 (test_gpu_ipc: bound to MPI_COMM_WORLD), or, with
// no MPI at all, with mdring-run -n 2, 3 or 4 (test_gpu_ipc_store: bound through
// mdring's TCP store, mdring/cuda/store.cuh, as PyTorch's backend binds).
#include "spmd.cuh"

#ifdef MDRING_TEST_STORE
#include <mdring/cuda/store.cuh>
#include <mdring/rendezvous/launch.hpp>
#else
#include "mpi_support.cuh"

#include <mdring/cuda/mpi.cuh>
#endif

#include <cstdlib>
#include <functional>
#include <memory>
#include <set>

using namespace gpu_test;

namespace {

#ifdef MDRING_TEST_STORE
// The job as mdring-run starts it; rank 0 hosts the store.
struct job {
  md::rendezvous::launched_job launched;
  std::size_t tags = 0;
  static job& get() {
    static job j = [] {
      if (!std::getenv("WORLD_SIZE")) throw skip_all("not started by mdring-run (no WORLD_SIZE)");
      return job{md::rendezvous::launched_job::from_env("test_gpu_ipc_store")};
    }();
    return j;
  }
  std::vector<std::string> gather(const std::string& mine) {
    return md::rendezvous::all_gather(*launched.job_store, "test/" + std::to_string(tags++), launched.rank,
                                      launched.size, mine, md::rendezvous::clock::now() + std::chrono::minutes(5));
  }
};
int world_rank() { return int(job::get().launched.rank); }
int world_size() { return int(job::get().launched.size); }
void check_same(const std::vector<u64>& h, const std::string& label) {
  const auto all = job::get().gather(std::string(reinterpret_cast<const char*>(h.data()), h.size() * sizeof(u64)));
  std::size_t bad = 0;
  for (const auto& a : all) bad += a != all[0];
  check(bad == 0, label, ": ", bad, " ranks got other bits than rank 0");
}
using ipc_comm = md::cuda::store_communicator<md::runtime_topology>;
ipc_comm bind_ipc(const std::string& text, md::options o = {}) {
  auto& l = job::get().launched;
  return md::cuda::bind(md::parse_topology(text), md::cuda::store_world{*l.job_store, l.rank, l.size, "test"}, o);
}
#else
using ipc_comm = md::cuda::mpi_communicator<md::runtime_topology>;
ipc_comm bind_ipc(const std::string& text, md::options o = {}) {
  return md::cuda::bind(md::parse_topology(text), MPI_COMM_WORLD, o);
}
#endif

void on_device() {
  require_gpu();
  int G = 0;
  cuda_ok(cudaGetDeviceCount(&G), "cudaGetDeviceCount");
  cuda_ok(cudaSetDevice(world_rank() % G), "cudaSetDevice");
}

md::cuda::ipc_link& ipc_of(ipc_comm& c, std::size_t d) { return std::get<md::cuda::ipc_link>(c.link(d)); }

// Every rank's inputs for a collective whose inputs are `m` elements per rank.
template <class T>
std::vector<std::vector<T>> inputs(std::size_t P, std::size_t m, opk k, u64 seed) {
  std::vector<std::vector<T>> xs(P, std::vector<T>(m));
  for (std::size_t r = 0; r < P; ++r)
    for (std::size_t i = 0; i < m; ++i) xs[r][i] = value<T>(seed, r, i, k);
  return xs;
}

// reduce_scatter, all_gather, broadcast and reduce on one type and op: results
// against the float64 (or exact) reference, bitwise equal across ranks (hashes).
template <class T, class Op>
void collectives_case(ipc_comm& comm, opk k, Op op, std::size_t n, bool in_place, u64 seed, cudaStream_t s,
                      const std::string& label, std::vector<u64>& hashes) {
  const std::size_t P = comm.size(), me = comm.rank();
  const std::string tn = md::type_name<T>();
  const double roundings = 2.0 * double(P);
  // reduce_scatter: n per rank out of P * n.
  {
    auto xs = inputs<T>(P, P * n, k, seed);
    dbuf<T> send(P * n), recv(n);
    send.upload(xs[me]);
    recv.poison();
    T* out = in_place ? send.get() + me * n : recv.get();
    md::cuda::reduce_scatter(comm, send.get(), out, n, op, s);
    cuda_ok(cudaStreamSynchronize(s), "sync");
    std::vector<T> got(n);
    cuda_ok(cudaMemcpy(got.data(), out, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
    std::vector<const T*> ptrs;
    for (auto& x : xs) ptrs.push_back(x.data() + me * n);
    check_against_reference<T>(
        cat(label, " reduce_scatter<", tn, "> ", name_of(k), " n ", n, in_place ? " in place" : ""), k, ptrs,
        got.data(), n, roundings);
  }
  // all_gather: every rank's n, in rank order.
  if (k == opk::sum) {
    auto xs = inputs<T>(P, n, k, seed + 1);
    dbuf<T> send(n), recv(P * n);
    recv.poison();
    if (in_place) {
      std::vector<T> whole(P * n);
      std::copy(xs[me].begin(), xs[me].end(), whole.begin() + std::ptrdiff_t(me * n));
      recv.upload(whole);
    } else {
      send.upload(xs[me]);
    }
    md::cuda::all_gather(comm, in_place ? recv.get() + me * n : send.get(), recv.get(), n, s);
    cuda_ok(cudaStreamSynchronize(s), "sync");
    const auto got = recv.download();
    std::size_t bad = 0;
    for (std::size_t r = 0; r < P; ++r)
      for (std::size_t i = 0; i < n; ++i) bad += !same_bits(got[r * n + i], xs[r][i]);
    check(bad == 0, label, " all_gather<", tn, "> n ", n, in_place ? " in place" : "", ": ", bad, " elements wrong");
    hashes.push_back(hash_bytes(got.data(), got.size() * sizeof(T)));
    // broadcast from every root.
    for (std::size_t root = 0; root < P; ++root) {
      dbuf<T> buf(n);
      if (me == root) buf.upload(xs[root]);
      else buf.poison();
      md::cuda::broadcast(comm, buf.get(), n, root, s);
      cuda_ok(cudaStreamSynchronize(s), "sync");
      const auto b = buf.download();
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) wrong += !same_bits(b[i], xs[root][i]);
      check(wrong == 0, label, " broadcast<", tn, "> n ", n, " root ", root, ": ", wrong, " elements wrong");
    }
  }
  // reduce to every root (in place at the root when asked).
  for (std::size_t root = 0; root < P; ++root) {
    auto xs = inputs<T>(P, n, k, seed + 2 + root);
    dbuf<T> send(n), recv(n);
    send.upload(xs[me]);
    recv.poison();
    const bool ip = in_place && me == root;
    md::cuda::reduce(comm, send.get(), ip ? send.get() : (me == root ? recv.get() : nullptr), n, root, op, s);
    cuda_ok(cudaStreamSynchronize(s), "sync");
    if (me != root) continue;
    const auto got = ip ? send.download() : recv.download();
    std::vector<const T*> ptrs;
    for (auto& x : xs) ptrs.push_back(x.data());
    check_against_reference<T>(
        cat(label, " reduce<", tn, "> ", name_of(k), " n ", n, " root ", root, ip ? " in place" : ""), k, ptrs,
        got.data(), n, roundings);
  }
}

template <class T>
void collectives_type(ipc_comm& comm, cudaStream_t s, const std::string& label, std::vector<u64>& hashes, u64 seed) {
  const std::size_t P = comm.size();
  int c = 0;
  for (opk k : {opk::sum, opk::prod, opk::min, opk::max, opk::avg})
    with_op(k, [&](auto op) {
      for (std::size_t n : {std::size_t(0), std::size_t(1), P + 1, std::size_t(4099), std::size_t(300001)}) {
        ++c;
        collectives_case<T>(comm, k, op, n, c % 2 == 0, seed + std::size_t(c) * 10, s, label, hashes);
      }
    });
}

}  // namespace

GPU_TEST("ipc: automatic picks ipc for a node's GPU link; all_reduce over the count matrix") {
  on_device();
  const int P = world_size();
  std::vector<std::pair<std::string, md::options>> cases;
  cases.push_back({"nvlink:*", {}});
  {
    md::options o;  // every stage in place (two-shot): no staging
    o.tune.ipc_staging_bytes = 0;
    cases.push_back({"nvlink:*", o});
  }
  {
    md::options o;  // messages pulled from the peers' buffers
    o.algorithms = {md::algorithm::ring};
    cases.push_back({"nvlink:*", o});
  }
  cases.push_back({"pcie:*", {}});
  if (P % 2 == 0) {
    md::options o;
    o.tune.ipc_staging_bytes = 4096;            // small stages staged, the rest in place
    cases.push_back({"nvlink:2 x pcie:*", o});  // two ipc dimensions, pipelined
#ifndef MDRING_TEST_STORE
    cases.push_back({"nvlink:2 x ethernet:*", o});  // ipc, then MPI
#endif
  }
  int idx = 0;
  for (auto& [text, o] : cases) {
    ++idx;
    auto comm = bind_ipc(text, o);
    const std::string label = cat("\"", text, "\" case ", idx);
    check(comm.transport_of(0) == md::device_transport::ipc, label, ": dimension 0 uses ",
          md::to_string(comm.transport_of(0)), ", expected ipc");
    const bool ring = !o.algorithms.empty();
    check(comm.algorithm_of(0) == (ring ? md::algorithm::ring : md::algorithm::direct), label, ": algorithm ",
          md::to_string(comm.algorithm_of(0)));
    if (text.find("pcie:*") != std::string::npos && text.find("nvlink") != std::string::npos && P > 2)
      check(comm.transport_of(1) == md::device_transport::ipc, label, ": dimension 1 uses ",
            md::to_string(comm.transport_of(1)));
    if (text.find("ethernet") != std::string::npos)
      check(comm.transport_of(1) == md::device_transport::mpi_staged ||
                comm.transport_of(1) == md::device_transport::mpi_cuda_aware,
            label, ": dimension 1 uses ", md::to_string(comm.transport_of(1)));
    auto s = md::cuda::unique_stream::create();
    std::vector<u64> hashes;
    spmd_suite(comm, s.get(), label, hashes);
    check_same(hashes, label);
    check(ipc_of(comm, 0).barrier_parity() == 0, label, ": an odd number of barriers after the calls");
  }
}

GPU_TEST("ipc: reduce_scatter, all_gather, broadcast and reduce, every op and type, in and out of place") {
  on_device();
  auto comm = bind_ipc("nvlink:*");
  auto s = md::cuda::unique_stream::create();
  std::vector<u64> hashes;
  collectives_type<float>(comm, s.get(), "nvlink:*", hashes, 100);
  collectives_type<double>(comm, s.get(), "nvlink:*", hashes, 200);
  collectives_type<md::half>(comm, s.get(), "nvlink:*", hashes, 300);
  collectives_type<md::bfloat16>(comm, s.get(), "nvlink:*", hashes, 400);
  collectives_type<std::int8_t>(comm, s.get(), "nvlink:*", hashes, 500);
  collectives_type<std::uint8_t>(comm, s.get(), "nvlink:*", hashes, 600);
  collectives_type<std::int32_t>(comm, s.get(), "nvlink:*", hashes, 700);
  collectives_type<std::int64_t>(comm, s.get(), "nvlink:*", hashes, 800);
  check_same(hashes, "nvlink:* collectives");
  // The same over two dimensions, when the process count allows.
  if (world_size() % 2 == 0) {
#ifdef MDRING_TEST_STORE
    const std::string text = "nvlink:2 x pcie:*";
#else
    const std::string text = "nvlink:2 x ethernet:*";
#endif
    auto two = bind_ipc(text);
    std::vector<u64> h2;
    collectives_type<float>(two, s.get(), text, h2, 900);
    collectives_type<std::int32_t>(two, s.get(), text, h2, 1000);
    check_same(h2, text + " collectives");
  }
}

GPU_TEST("ipc: more than 64 Mi elements") {
  on_device();
  auto comm = bind_ipc("nvlink:*");
  const std::size_t P = comm.size(), me = comm.rank();
  const std::size_t n = (std::size_t(64) << 20) + 3;
  std::size_t free_b = 0, total_b = 0;
  cuda_ok(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  if (free_b < 3 * n * sizeof(float) * P) {
    if (me == 0) std::printf("  (skipped: needs %zu bytes of free device memory)\n", 3 * n * sizeof(float) * P);
    return;
  }
  // Small integers in float: every sum is exact, whatever the order.
  std::vector<float> h(n);
  for (std::size_t i = 0; i < n; ++i) h[i] = float((me + 1) * (i % 251));
  dbuf<float> a(n), b(n);
  a.upload(h);
  b.poison();
  auto s = md::cuda::unique_stream::create();
  md::cuda::all_reduce(comm, a.get(), b.get(), n, md::sum, s.get());
  md::cuda::all_reduce(comm, a.get(), n, md::sum, s.get());  // in place
  cuda_ok(cudaStreamSynchronize(s.get()), "sync");
  const auto gb = b.download(), ga = a.download();
  const double tri = double(P * (P + 1) / 2);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float want = float(tri * double(i % 251));
    bad += gb[i] != want || ga[i] != want;
  }
  check(bad == 0, "all_reduce of ", n, " floats: ", bad, " elements wrong");
}

GPU_TEST("ipc: graph capture and replay between eager calls; streams back to back") {
  on_device();
  auto comm = bind_ipc("nvlink:*");
  const std::size_t P = comm.size(), me = comm.rank();
  auto s = md::cuda::unique_stream::create();
  for (std::size_t n : {std::size_t(1000), std::size_t(3) << 20}) {  // one-shot, then in place
    comm.reserve<float>(n);
    dbuf<float> a(n), b(n);
    // One eager call on the buffers first (as before any capture: it maps the
    // peers' buffers, which is host work a capture should not contain).
    a.poison();
    md::cuda::all_reduce(comm, a.get(), b.get(), n, md::sum, s.get());
    cuda_ok(cudaStreamSynchronize(s.get()), "sync");
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    cuda_ok(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal), "begin capture");
    md::cuda::all_reduce(comm, a.get(), b.get(), n, md::sum, s.get());
    cuda_ok(cudaStreamEndCapture(s.get(), &g), "end capture");
    cuda_ok(cudaGraphInstantiate(&ge, g, 0), "instantiate");
    for (int round = 0; round < 4; ++round) {
      std::vector<float> h(n);
      for (std::size_t i = 0; i < n; ++i) h[i] = float((me + 1 + std::size_t(round)) * (i % 13));
      a.upload(h);
      b.poison();
      cuda_ok(cudaGraphLaunch(ge, s.get()), "cudaGraphLaunch");
      if (round % 2) {  // an eager call between two replays, on other buffers
        dbuf<float> c(777);
        std::vector<float> hc(777, float(me));
        c.upload(hc);
        md::cuda::all_reduce(comm, c.get(), 777, md::sum, s.get());
        cuda_ok(cudaStreamSynchronize(s.get()), "sync");
        const auto gc = c.download();
        check(gc[776] == float(P * (P - 1) / 2), "eager call between replays: ", gc[776]);
      }
      cuda_ok(cudaStreamSynchronize(s.get()), "sync");
      const auto got = b.download();
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        double want = 0;
        for (std::size_t r = 0; r < P; ++r) want += double((r + 1 + std::size_t(round)) * (i % 13));
        bad += got[i] != float(want);
      }
      check(bad == 0, "graph replay ", round, " n ", n, ": ", bad, " elements wrong");
    }
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  }
  // Calls on three streams, back to back, no host synchronization between them.
  std::vector<md::cuda::unique_stream> ss;
  for (int i = 0; i < 3; ++i) ss.push_back(md::cuda::unique_stream::create());
  const std::size_t n = 100003;
  dbuf<std::int32_t> x(n);
  std::vector<std::int32_t> hx(n, std::int32_t(1));
  x.upload(hx);
  for (int i = 0; i < 5; ++i) md::cuda::all_reduce(comm, x.get(), n, md::sum, ss[std::size_t(i) % 3].get());
  cuda_ok(cudaDeviceSynchronize(), "sync");
  const auto gx = x.download();
  std::int32_t want = 1;
  for (int i = 0; i < 5; ++i) want *= std::int32_t(P);
  check(gx[0] == want && gx[n - 1] == want, "5 calls on 3 streams: ", gx[0], " expected ", want);
}

GPU_TEST("ipc: peers' buffers are mapped once per allocation") {
  on_device();
  md::options o;
  o.tune.ipc_staging_bytes = 0;  // every call reads the peers' buffers in place
  auto comm = bind_ipc("nvlink:*", o);
  auto s = md::cuda::unique_stream::create();
  const std::size_t n = 4096;
  dbuf<float> block(16 * n);  // one allocation, like a caching allocator's block
  std::vector<float> h(16 * n, 1.0f);
  block.upload(h);
  md::cuda::all_reduce(comm, block.get(), n, md::sum, s.get());
  cuda_ok(cudaStreamSynchronize(s.get()), "sync");
  const std::size_t first = ipc_of(comm, 0).mappings();
  for (std::size_t k = 1; k < 16; ++k) md::cuda::all_reduce(comm, block.get() + k * n, n, md::sum, s.get());
  cuda_ok(cudaStreamSynchronize(s.get()), "sync");
  check(ipc_of(comm, 0).mappings() == first, "15 calls at other offsets of one block mapped ",
        ipc_of(comm, 0).mappings() - first, " more allocations");
  check(first == comm.size() - 1, "the first call mapped ", first, " allocations, expected one per peer");
  const auto got = block.download();
  check(got[0] == float(comm.size()) && got[16 * n - 1] == float(comm.size()), "mapped-block calls: ", got[16 * n - 1]);
}

GPU_TEST("ipc: a buffer CUDA IPC cannot share fails on its rank and stops the others") {
  on_device();
  md::options o;
  o.timeout = std::chrono::seconds(30);
  auto comm = bind_ipc("nvlink:*", o);
  const std::size_t n = 1 << 20;  // above the staging threshold: buffers are published
  auto s = md::cuda::unique_stream::create();
  dbuf<float> ok(n);
  float* managed = nullptr;
  cuda_ok(cudaMallocManaged(&managed, n * sizeof(float)), "cudaMallocManaged");
  std::string got = "nothing";
  std::string arg;
  try {
    md::cuda::all_reduce(comm, comm.rank() == 0 ? managed : ok.get(), n, md::sum, s.get());
  } catch (const md::invalid_argument& e) {
    got = "invalid_argument", arg = e.argument();
  } catch (const md::remote_error&) {
    got = "remote_error";
  } catch (const std::exception& e) {
    got = e.what();
  }
  cuda_ok(cudaStreamSynchronize(s.get()), "sync (nothing may be left waiting on the GPU)");
  if (comm.rank() == 0)
    check(got == "invalid_argument" && arg == "sendbuf", "rank 0 (managed memory): got ", got, " (", arg, ")");
  else check(got == "remote_error", "rank ", comm.rank(), ": got ", got, " instead of remote_error");
  check(!comm.usable(), "the communicator is unusable after the failure");
  cudaFree(managed);
}

int main(int argc, char** argv) {
#ifdef MDRING_TEST_STORE
  const int rc = gpu_test::run_all(argc, argv);
  if (rc == 77) return rc;
  int worst = rc;
  for (const auto& v : job::get().gather(std::to_string(rc))) worst = std::max(worst, std::stoi(v));
  job::get().launched.leave("test/leave");
  return worst;
#else
  MPI_Init(&argc, &argv);
  const int worst = worst_of_all(gpu_test::run_all(argc, argv));
  MPI_Finalize();
  return worst;
#endif
}
