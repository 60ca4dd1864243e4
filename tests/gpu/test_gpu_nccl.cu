// tests/gpu/test_gpu_nccl.cu: the NCCL transport (mdring/cuda/nccl.cuh), one rank
// per GPU of this machine, one thread per rank, bound to a parent communicator
// from ncclCommInitAll. NCCL runs one rank per GPU, so this needs two GPUs or
// more; with fewer it reports SKIP (exit code 77).
//
//   topologies  nvlink:G, nvlink:G ring, and with G even and >= 4 nvlink:2 x infiniband:G/2
//               (NCCL in both dimensions: infiniband is a fast fabric)
//   checks      the spmd suite (counts 0 .. 2^20+7, in place, misaligned, int32 and float
//               sums, bfloat16 avg, half max, int64 prod, double min), bitwise identity across ranks, a
//               pipelined call, and a call captured into a CUDA graph and replayed.
#include "spmd.cuh"

#include <mdring/cuda/nccl.cuh>

#include <thread>

using namespace gpu_test;

GPU_TEST("nccl: all_reduce with one rank per GPU") {
  require_gpu();
  int G = 0;
  cuda_ok(cudaGetDeviceCount(&G), "cudaGetDeviceCount");
  if (G < 2) throw skip_all("needs 2 or more GPUs (NCCL runs one rank per GPU); this machine has " + std::to_string(G));
  std::vector<std::pair<std::string, md::options>> shapes;
  md::options plain, ring, seg;
  ring.algorithms = {md::algorithm::ring};
  seg.tune.segment_bytes = 256 << 10;
  shapes.emplace_back("nvlink:" + std::to_string(G), plain);
  shapes.emplace_back("nvlink:" + std::to_string(G), ring);
  if (G % 2 == 0 && G >= 4) {
    shapes.emplace_back("nvlink:2 x infiniband:" + std::to_string(G / 2), plain);
    shapes.emplace_back("nvlink:2 x infiniband:" + std::to_string(G / 2), seg);
  }
  for (auto& [text, opts] : shapes) {
    std::vector<ncclComm_t> world(std::size_t(G), nullptr);
    std::vector<int> devs(static_cast<std::size_t>(G));
    for (int d = 0; d < G; ++d) devs[std::size_t(d)] = d;
    if (ncclCommInitAll(world.data(), G, devs.data()) != ncclSuccess) {
      check(false, "ncclCommInitAll failed");
      return;
    }
    std::vector<std::vector<u64>> hashes(static_cast<std::size_t>(G));
    std::vector<std::string> errors(static_cast<std::size_t>(G));
    std::vector<std::thread> threads;
    for (int r = 0; r < G; ++r)
      threads.emplace_back([&, r] {
        try {
          cuda_ok(cudaSetDevice(r), "cudaSetDevice");
          auto comm = md::cuda::bind(md::parse_topology(text), world[std::size_t(r)], opts);
          auto s = md::cuda::unique_stream::create();
          auto& h = hashes[std::size_t(r)];
          spmd_suite(comm, s.get(), "\"" + text + "\"", h);
          // Captured into a graph, replayed twice.
          const std::size_t n = 100003;
          comm.reserve<float>(n);
          dbuf<float> buf(n);
          std::vector<float> x(n);
          cudaGraph_t g = nullptr;
          cuda_ok(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal), "begin capture");
          md::cuda::all_reduce(comm, buf.get(), n, md::sum, s.get());
          cuda_ok(cudaStreamEndCapture(s.get(), &g), "end capture");
          cudaGraphExec_t e = nullptr;
          cuda_ok(cudaGraphInstantiate(&e, g, 0), "cudaGraphInstantiate");
          for (int round = 0; round < 2; ++round) {
            for (std::size_t i = 0; i < n; ++i) x[i] = float(r + 1) * float(round + 1) + float(i % 3);
            buf.upload(x);
            cuda_ok(cudaGraphLaunch(e, s.get()), "cudaGraphLaunch");
            cuda_ok(cudaStreamSynchronize(s.get()), "sync");
            const auto got = buf.download();
            std::size_t bad = 0;
            for (std::size_t i = 0; i < n; ++i)
              bad += got[i] != float(G * (G + 1) / 2) * float(round + 1) + float(G) * float(i % 3);
            check(bad == 0, "\"", text, "\" graph replay ", round, " rank ", r, ": ", bad, " wrong elements");
            h.push_back(hash_bytes(got.data(), n * sizeof(float)));
          }
          cudaGraphExecDestroy(e);
          cudaGraphDestroy(g);
        } catch (const std::exception& ex) {
          // Printed at once: the other threads may now wait in NCCL for this one
          // until ctest's timeout, and the reason should be on the screen by then.
          std::printf("  rank %d failed: %s\n", r, ex.what());
          std::fflush(stdout);
          errors[std::size_t(r)] = ex.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < G; ++r) {
      check(errors[std::size_t(r)].empty(), "\"", text, "\" rank ", r, ": ", errors[std::size_t(r)]);
      check(hashes[std::size_t(r)] == hashes[0], "\"", text, "\" rank ", r, " differs from rank 0 in its bits");
    }
    for (auto c : world) ncclCommDestroy(c);
  }
}

int main(int argc, char** argv) { return gpu_test::run_all(argc, argv); }
