// benchmarks/gpu_ipc_bench.cu: mdring-gpu-ipc-bench, all_reduce between the
// processes of one node over the ipc transport (mdring/cuda/ipc.cuh), against a
// baseline in the same run.
//
//   mdring-run -n 4 mdring-gpu-ipc-bench [--sizes 8k,1m,64m,256m] [--iters N] [--rounds N] [--json FILE]
//
// No MPI: the processes find each other through mdring's TCP store (mdring-run's
// variables), as PyTorch's backend does. Every process binds "nvlink:*"
// (automatic: ipc) on its device (rank % GPUs), and
// for each size (bytes per rank, fp32 sum, in place):
//   - eager: `iters` calls back to back on one stream, timed with cudaEvents on
//     every rank; the row's time per call is the slowest rank's, median of `rounds`
//     (the processes start each round together: a barrier through the store);
//   - graph: the same call captured once into a CUDA graph, replayed `iters` times;
//   - baseline, the least an all_reduce of P buffers in one memory does, on rank 0
//     alone while the others wait (what mdring-gpu-bench prints for one process):
//     one fold of the P buffers into the first, then P - 1 copies of it.
// ratio = mdring's time / baseline. With several processes on one GPU, their
// kernels share it by time slices unless the CUDA MPS daemon runs (docs/GPU.md):
// the row says which (--mps-label).
#include <mdring/cuda/reduce.cuh>
#include <mdring/cuda/store.cuh>
#include <mdring/rendezvous/launch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace md = mdring;

namespace {

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "mdring-gpu-ipc-bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// The job (mdring-run's variables), with the few collectives the bench needs
// outside its timed regions, through the store rank 0 hosts.
struct job {
  md::rendezvous::launched_job l;
  std::size_t tags = 0;
  std::vector<std::string> gather(const std::string& mine) {
    return md::rendezvous::all_gather(*l.job_store, "bench/" + std::to_string(tags++), l.rank, l.size, mine,
                                      md::rendezvous::clock::now() + std::chrono::minutes(5));
  }
  void barrier() { (void)gather(""); }
  double max(double x) {
    double m = x;
    for (const auto& v : gather(std::to_string(x))) m = std::max(m, std::stod(v));
    return m;
  }
  bool all(bool x) {
    bool a = true;
    for (const auto& v : gather(x ? "1" : "0")) a = a && v == "1";
    return a;
  }
};

std::size_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  const char u = end && *end ? char(*end | 0x20) : 'b';
  return std::size_t(v * (u == 'k' ? 1024.0 : u == 'm' ? 1048576.0 : u == 'g' ? 1073741824.0 : 1.0));
}

struct args {
  std::vector<std::size_t> sizes = {8 << 10, 1 << 20, 64 << 20, 256 << 20};
  int iters = 20, rounds = 5;
  std::string json, label = "time-sliced";
};

__global__ void fill_kernel(float* p, std::size_t n, float v) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    p[i] = v + float(i % 7);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  job j{md::rendezvous::launched_job::from_env("mdring-gpu-ipc-bench")};
  const int rank = int(j.l.rank), size = int(j.l.size);
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (s == "--iters") a.iters = std::max(1, std::atoi(next().c_str()));
    else if (s == "--rounds") a.rounds = std::max(1, std::atoi(next().c_str()));
    else if (s == "--json") a.json = next();
    else if (s == "--mps-label") a.label = next();
    else if (s == "--sizes") {
      a.sizes.clear();
      std::string list = next();
      for (std::size_t at = 0; at < list.size();) {
        const std::size_t comma = std::min(list.find(',', at), list.size());
        a.sizes.push_back(parse_size(list.substr(at, comma - at)));
        at = comma + 1;
      }
    }
  }
  int G = 0;
  if (cudaGetDeviceCount(&G) != cudaSuccess || G == 0) {
    if (rank == 0) std::printf("mdring-gpu-ipc-bench: no CUDA device; nothing to measure\n");
    return 77;
  }
  ok(cudaSetDevice(rank % G), "cudaSetDevice");
  cudaDeviceProp prop{};
  ok(cudaGetDeviceProperties(&prop, rank % G), "cudaGetDeviceProperties");
  auto comm = md::cuda::bind(md::parse_topology("nvlink:*"), md::cuda::store_world{*j.l.job_store, j.l.rank, j.l.size});
  FILE* json = rank == 0 && !a.json.empty() ? std::fopen(a.json.c_str(), "a") : nullptr;
  if (rank == 0)
    std::printf(
        "mdring-gpu-ipc-bench: %d processes on %d GPU(s) (%s), transport %s, %s; median of %d rounds of %d calls\n",
        size, G, prop.name, std::string(md::to_string(comm.transport_of(0))).c_str(), a.label.c_str(), a.rounds,
        a.iters);
  auto stream = md::cuda::unique_stream::create();
  cudaStream_t s = stream.get();
  md::cuda::unique_event t0 = md::cuda::unique_event::create(cudaEventDefault),
                         t1 = md::cuda::unique_event::create(cudaEventDefault);
  const std::size_t P = std::size_t(size);
  for (const std::size_t bytes : a.sizes) {
    const std::size_t n = bytes / sizeof(float);
    float* buf = nullptr;
    ok(cudaMalloc(&buf, bytes), "cudaMalloc");
    fill_kernel<<<264, 512, 0, s>>>(buf, n, float(rank));
    comm.reserve<float>(md::collective::all_reduce, n);
    auto timed = [&](auto&& body) {  // seconds per call, the slowest rank's, median of rounds
      std::vector<double> per;
      for (int r = 0; r < a.rounds; ++r) {
        ok(cudaStreamSynchronize(s), "sync");
        j.barrier();
        ok(cudaEventRecord(t0.get(), s), "record");
        for (int i = 0; i < a.iters; ++i) body();
        ok(cudaEventRecord(t1.get(), s), "record");
        ok(cudaEventSynchronize(t1.get()), "sync");
        float ms = 0;
        ok(cudaEventElapsedTime(&ms, t0.get(), t1.get()), "elapsed");
        per.push_back(j.max(double(ms) / a.iters));
      }
      return median(per);
    };
    // Warm-up (maps the peers' buffer once).
    for (int i = 0; i < 3; ++i) md::cuda::all_reduce(comm, buf, n, md::sum, s);
    const double eager = timed([&] { md::cuda::all_reduce(comm, buf, n, md::sum, s); });
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "begin capture");
    md::cuda::all_reduce(comm, buf, n, md::sum, s);
    ok(cudaStreamEndCapture(s, &g), "end capture");
    ok(cudaGraphInstantiate(&ge, g, 0), "instantiate");
    const double graph = timed([&] { ok(cudaGraphLaunch(ge, s), "graph launch"); });
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    // Correctness spot check of what was timed: refill, one call, element 5.
    fill_kernel<<<264, 512, 0, s>>>(buf, n, float(rank));
    md::cuda::all_reduce(comm, buf, n, md::sum, s);
    float got = 0;
    ok(cudaMemcpyAsync(&got, buf + 5 % n, sizeof got, cudaMemcpyDeviceToHost, s), "copy");
    ok(cudaStreamSynchronize(s), "sync");
    const float want = float(P * (P - 1) / 2) + float(P) * float(5 % n % 7);
    const bool all_good = j.all(got == want);
    // Baseline on rank 0 alone.
    double base = 0;
    j.barrier();
    if (rank == 0) {
      std::vector<float*> bufs(P);
      for (std::size_t r = 0; r < P; ++r)
        ok(cudaMalloc(&bufs[r], bytes), "cudaMalloc"), fill_kernel<<<264, 512, 0, s>>>(bufs[r], n, float(r));
      std::vector<const float*> in(bufs.begin(), bufs.end());
      auto once = [&] {
        md::cuda::fold(bufs[0], std::span<const float* const>(in.data(), P), n, md::sum, false, 1, s);
        for (std::size_t r = 1; r < P; ++r)
          ok(cudaMemcpyAsync(bufs[r], bufs[0], bytes, cudaMemcpyDeviceToDevice, s), "copy");
      };
      for (int i = 0; i < 3; ++i) once();
      std::vector<double> per;
      for (int r = 0; r < a.rounds; ++r) {
        ok(cudaEventRecord(t0.get(), s), "record");
        for (int i = 0; i < a.iters; ++i) once();
        ok(cudaEventRecord(t1.get(), s), "record");
        ok(cudaEventSynchronize(t1.get()), "sync");
        float ms = 0;
        ok(cudaEventElapsedTime(&ms, t0.get(), t1.get()), "elapsed");
        per.push_back(double(ms) / a.iters);
      }
      base = median(per);
      for (auto b : bufs) cudaFree(b);
    }
    j.barrier();
    if (rank == 0) {
      const char* unit = bytes >= (1 << 20) ? "MiB" : "KiB";
      const double shown = bytes >= (1 << 20) ? double(bytes >> 20) : double(bytes >> 10);
      std::printf(
          "all_reduce fp32 %2zu processes %7.0f %s/rank  eager %9.4f ms  graph %9.4f ms  baseline %9.4f ms  "
          "eager/baseline %6.2f  graph/baseline %6.2f  %s  check %s\n",
          P, shown, unit, eager, graph, base, eager / base, graph / base, a.label.c_str(), all_good ? "ok" : "FAILED");
      if (json)
        std::fprintf(json,
                     "{\"kind\":\"ipc_all_reduce\",\"processes\":%zu,\"gpus\":%d,\"device\":\"%s\",\"mode\":\"%s\","
                     "\"bytes\":%zu,\"eager_ms\":%.6f,\"graph_ms\":%.6f,\"baseline_ms\":%.6f,\"check\":%s}\n",
                     P, G, prop.name, a.label.c_str(), bytes, eager, graph, base, all_good ? "true" : "false");
    }
    cudaFree(buf);
  }
  if (json) std::fclose(json);
  j.barrier();
  j.l.leave("bench/leave");
  return 0;
}
