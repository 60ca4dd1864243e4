// benchmarks/gpu_bench.cu: mdring-gpu-bench, the GPU path's numbers on one GPU.
//
//   mdring-gpu-bench [--quick] [--max-mib N] [--iters N] [--json FILE] [--kernels | --all-reduce]
//
// 1. The fused reduce kernels (mdring::cuda::fold), 2 and 4 inputs, fp32 and bf16,
//    sum, 1 MiB to 1 GiB per buffer: achieved bandwidth counts every byte read and
//    written ((inputs + 1) x size), against a cudaMemcpyAsync device-to-device copy
//    of one buffer in the same run (2 x size bytes: read + write); the ratio is
//    what the target (>= 90 % at 256 MiB and above) is about. For 2 inputs,
//    cub::DeviceTransform doing the same sum is timed beside them.
// 2. all_reduce over logical ranks on this one GPU (mdring/cuda/local.cuh): time per
//    call as called (one host thread enqueues every rank's steps: at small sizes
//    the host's enqueue rate), the same call captured into a CUDA graph and
//    replayed (the GPU's time; the algorithm bandwidth, bytes per rank / time, is
//    from it), and a baseline in the same run: one fold of all P buffers and P - 1
//    copies. All ranks share one GPU's memory, so this measures the schedule's
//    overheads, not a network.
//
// Method (device/METHOD.md): cudaEvents around each timed call on one stream,
// warm-up calls first, the median of the iterations; inputs hold nonzero values;
// below 4 x the L2 size the L2 is flushed before each timed call (a memset of a
// buffer twice the L2's size, outside the timed region); above it the buffers do
// not fit anyway. The numbers depend on the GPU, its clocks and what else runs on
// it: the table says which GPU it ran on.
#include <mdring/cuda/local.cuh>
#include <mdring/cuda/reduce.cuh>

#include <cub/device/device_transform.cuh>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace md = mdring;

namespace {

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "mdring-gpu-bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

struct args {
  bool quick = false, kernels = true, all_reduce = true;
  std::size_t max_mib = 1024;
  int iters = 20;
  std::string json;
};

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mdring-gpu-bench: %s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--quick") a.quick = true, a.iters = 5, a.max_mib = 256;
    else if (s == "--max-mib") a.max_mib = std::strtoull(next().c_str(), nullptr, 10);
    else if (s == "--iters") a.iters = std::atoi(next().c_str());
    else if (s == "--json") a.json = next();
    else if (s == "--kernels") a.all_reduce = false;
    else if (s == "--all-reduce") a.kernels = false;
    else {
      std::fprintf(stderr,
                   "usage: mdring-gpu-bench [--quick] [--max-mib N] [--iters N] [--json FILE] "
                   "[--kernels | --all-reduce]\n");
      std::exit(2);
    }
  }
  if (a.iters < 3) a.iters = 3;
  return a;
}

__global__ void fill_kernel(unsigned* p, std::size_t words, unsigned seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < words;
       i += std::size_t(gridDim.x) * blockDim.x) {
    unsigned x = unsigned(i) * 2654435761u ^ seed;
    x ^= x >> 15;
    // Two bf16 (or one fp32) values of moderate size: exponent bits kept near 1.0.
    p[i] = (x & 0x007f007fu) | 0x3f003f00u;
  }
}

void fill(void* p, std::size_t bytes, unsigned seed) {
  fill_kernel<<<1024, 256>>>(static_cast<unsigned*>(p), bytes / 4, seed);
  ok(cudaGetLastError(), "fill");
}

struct timer {
  cudaStream_t s;
  cudaEvent_t a, b;
  void* flush = nullptr;
  std::size_t flush_bytes = 0, l2 = 0;
  timer() {
    ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
    ok(cudaEventCreate(&a), "event");
    ok(cudaEventCreate(&b), "event");
    int dev = 0, l2b = 0;
    ok(cudaGetDevice(&dev), "device");
    ok(cudaDeviceGetAttribute(&l2b, cudaDevAttrL2CacheSize, dev), "L2 size");
    l2 = std::size_t(l2b);
    flush_bytes = 2 * l2;
    ok(cudaMalloc(&flush, flush_bytes), "flush buffer");
  }
  // Median milliseconds of f() over iters timed calls (after warm-up).
  template <class F>
  double median_ms(F&& f, int iters, std::size_t working_set) {
    for (int i = 0; i < 3; ++i) f(s);
    ok(cudaStreamSynchronize(s), "warm-up");
    std::vector<float> t;
    for (int i = 0; i < iters; ++i) {
      if (working_set < 4 * l2) ok(cudaMemsetAsync(flush, i & 0xff, flush_bytes, s), "flush");
      ok(cudaEventRecord(a, s), "record");
      f(s);
      ok(cudaEventRecord(b, s), "record");
      ok(cudaEventSynchronize(b), "sync");
      float ms = 0;
      ok(cudaEventElapsedTime(&ms, a, b), "elapsed");
      t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return double(t[t.size() / 2]);
  }
};

struct add_f {
  __device__ float operator()(float x, float y) const { return x + y; }
};
struct add_bf16 {
  __device__ __nv_bfloat16 operator()(__nv_bfloat16 x, __nv_bfloat16 y) const {
    return __float2bfloat16_rn(__bfloat162float(x) + __bfloat162float(y));
  }
};

FILE* json_out = nullptr;

template <class T>
void kernel_rows(timer& tm, const args& a, void* const* in, void* out, void* copy_dst) {
  using dt = std::conditional_t<std::is_same_v<T, float>, float, __nv_bfloat16>;
  const char* tname = std::is_same_v<T, float> ? "fp32" : "bf16";
  for (int k : {2, 4}) {
    for (std::size_t mib = 1; mib <= a.max_mib; mib *= 4) {
      const std::size_t bytes = mib << 20, n = bytes / sizeof(T);
      std::vector<const T*> ptrs;
      for (int j = 0; j < k; ++j) ptrs.push_back(static_cast<const T*>(in[j]));
      const std::size_t ws = bytes * std::size_t(k + 1);
      const double t_fold = tm.median_ms(
          [&](cudaStream_t s) {
            md::cuda::fold(static_cast<T*>(out), std::span<const T* const>(ptrs.data(), ptrs.size()), n, md::sum, false,
                           1, s);
          },
          a.iters, ws);
      const double t_copy = tm.median_ms(
          [&](cudaStream_t s) { ok(cudaMemcpyAsync(copy_dst, in[0], bytes, cudaMemcpyDeviceToDevice, s), "copy"); },
          a.iters, 2 * bytes);
      double t_cub = 0;
      if (k == 2) {
        using op_t = std::conditional_t<std::is_same_v<T, float>, add_f, add_bf16>;
        t_cub = tm.median_ms(
            [&](cudaStream_t s) {
              ok(cub::DeviceTransform::Transform(
                     cuda::std::make_tuple(static_cast<const dt*>(in[0]), static_cast<const dt*>(in[1])),
                     static_cast<dt*>(out), n, op_t{}, s),
                 "cub::DeviceTransform");
            },
            a.iters, ws);
      }
      const double gbs_fold = double(ws) / (t_fold * 1e6), gbs_copy = double(2 * bytes) / (t_copy * 1e6);
      const double gbs_cub = t_cub > 0 ? double(ws) / (t_cub * 1e6) : 0;
      std::printf("fold sum %-4s %d inputs %6zu MiB   %8.1f GB/s   copy %8.1f GB/s   %5.1f %%", tname, k, mib, gbs_fold,
                  gbs_copy, 100.0 * gbs_fold / gbs_copy);
      if (k == 2) std::printf("   DeviceTransform %8.1f GB/s (%5.1f %%)", gbs_cub, 100.0 * gbs_cub / gbs_copy);
      std::printf("\n");
      if (json_out)
        std::fprintf(
            json_out,
            "{\"kind\":\"fold\",\"type\":\"%s\",\"inputs\":%d,\"bytes\":%zu,\"fold_ms\":%.6f,\"fold_gbs\":%.2f,"
            "\"copy_ms\":%.6f,\"copy_gbs\":%.2f,\"ratio\":%.4f,\"cub_gbs\":%.2f}\n",
            tname, k, bytes, t_fold, gbs_fold, t_copy, gbs_copy, gbs_fold / gbs_copy, gbs_cub);
    }
  }
}

// A correctness spot check of what is timed: fold of 4 fp32 inputs against the host.
bool spot_check(void* const* in, void* out) {
  const std::size_t n = 100003;
  std::vector<std::vector<float>> h(4, std::vector<float>(n));
  std::vector<const float*> ptrs;
  for (int j = 0; j < 4; ++j) {
    ok(cudaMemcpy(h[std::size_t(j)].data(), in[j], n * 4, cudaMemcpyDeviceToHost), "download");
    ptrs.push_back(static_cast<const float*>(in[j]));
  }
  md::cuda::fold(static_cast<float*>(out), std::span<const float* const>(ptrs.data(), 4), n, md::sum, false, 1,
                 nullptr);
  std::vector<float> got(n);
  ok(cudaMemcpy(got.data(), out, n * 4, cudaMemcpyDeviceToHost), "download");
  for (std::size_t i = 0; i < n; ++i)
    if (got[i] != ((h[0][i] + h[1][i]) + h[2][i]) + h[3][i]) return false;
  return true;
}

void all_reduce_rows(timer& tm, const args& a) {
  for (const char* text : {"nvlink:4", "nvlink:8", "nvlink:2 x infiniband:4"}) {
    const auto topo = md::parse_topology(text);
    const std::size_t P = topo.size();
    md::cuda::local_world world(P);
    auto comms = md::cuda::bind(topo, world);
    const std::size_t max_mib = std::min<std::size_t>(a.max_mib, 256);
    std::vector<float*> bufs(P);
    for (auto& b : bufs) ok(cudaMalloc(&b, max_mib << 20), "cudaMalloc"), fill(b, max_mib << 20, 7);
    std::vector<md::cuda::unique_stream> rs;
    std::vector<cudaStream_t> raw;
    std::vector<md::cuda::unique_event> joins;
    for (std::size_t r = 0; r < P; ++r) {
      rs.push_back(md::cuda::unique_stream::create());
      raw.push_back(rs.back().get());
      joins.push_back(md::cuda::unique_event::create());
    }
    auto fork = md::cuda::unique_event::create();
    auto capture = md::cuda::unique_stream::create();
    std::vector<const float*> sp(bufs.begin(), bufs.end());
    auto enqueue = [&](std::size_t n, cudaStream_t s) {
      ok(cudaEventRecord(fork.get(), s), "record");
      for (auto r : raw) ok(cudaStreamWaitEvent(r, fork.get(), 0), "wait");
      md::cuda::all_reduce(comms, sp, bufs, n, md::sum, raw);
      for (std::size_t r = 0; r < P; ++r) {
        ok(cudaEventRecord(joins[r].get(), raw[r]), "record");
        ok(cudaStreamWaitEvent(s, joins[r].get(), 0), "wait");
      }
    };
    auto refill = [&](std::size_t bytes) {
      for (std::size_t r = 0; r < P; ++r) fill(bufs[r], bytes, unsigned(r + 3));
      ok(cudaDeviceSynchronize(), "fill");
    };
    for (std::size_t mib = 1; mib <= max_mib; mib *= 4) {
      const std::size_t bytes = mib << 20, n = bytes / sizeof(float), ws = bytes * P * 2;
      for (auto& c : comms) c.reserve<float>(n);
      // 1. As called: one host thread enqueues every rank's steps, so at small sizes
      //    this is the host's enqueue rate, not the GPU's.
      refill(bytes);
      const double ms = tm.median_ms([&](cudaStream_t s) { enqueue(n, s); }, a.iters, ws);
      // 2. The same call captured once into a CUDA graph and replayed: the GPU's time.
      refill(bytes);
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      ok(cudaStreamBeginCapture(capture.get(), cudaStreamCaptureModeThreadLocal), "begin capture");
      enqueue(n, capture.get());
      ok(cudaStreamEndCapture(capture.get(), &graph), "end capture");
      ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
      const double graph_ms =
          tm.median_ms([&](cudaStream_t s) { ok(cudaGraphLaunch(exec, s), "graph launch"); }, a.iters, ws);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      // 3. Baseline in the same run, the least an all_reduce of P buffers in one
      //    memory does: one fold of all P buffers into the first, then P - 1 copies
      //    of it, on one stream.
      refill(bytes);
      const double base_ms = tm.median_ms(
          [&](cudaStream_t s) {
            md::cuda::fold(bufs[0], std::span<const float* const>(sp.data(), sp.size()), n, md::sum, false, 1, s);
            for (std::size_t r = 1; r < P; ++r)
              ok(cudaMemcpyAsync(bufs[r], bufs[0], bytes, cudaMemcpyDeviceToDevice, s), "copy");
          },
          a.iters, ws);
      const auto& sch = comms[0].program_for<float>(n, true, 0);
      std::printf(
          "all_reduce fp32 %-26s %6zu MiB/rank   %9.3f ms (graph %8.3f ms, %6.1f GB/s)   one fold + copies %8.3f ms"
          "   graph/baseline %5.2f   segments %zu\n",
          text, mib, ms, graph_ms, double(bytes) / (graph_ms * 1e6), base_ms, graph_ms / base_ms, sch.segments);
      if (json_out)
        std::fprintf(json_out,
                     "{\"kind\":\"all_reduce\",\"topology\":\"%s\",\"ranks\":%zu,\"bytes\":%zu,\"ms\":%.6f,"
                     "\"algbw_gbs\":%.2f,\"graph_ms\":%.6f,\"graph_algbw_gbs\":%.2f,\"baseline_ms\":%.6f,"
                     "\"segments\":%zu}\n",
                     text, P, bytes, ms, double(bytes) / (ms * 1e6), graph_ms, double(bytes) / (graph_ms * 1e6),
                     base_ms, sch.segments);
    }
    for (auto b : bufs) cudaFree(b);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const args a = parse(argc, argv);
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("mdring-gpu-bench: no CUDA device; nothing to measure\n");
    return 77;
  }
  cudaDeviceProp prop{};
  ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("mdring-gpu-bench on %s (%d SMs, L2 %d MiB), median of %d, %s\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, a.iters, a.quick ? "quick" : "full");
  if (!a.json.empty()) json_out = std::fopen(a.json.c_str(), "w");
  timer tm;
  if (a.kernels) {
    const std::size_t max_bytes = a.max_mib << 20;
    void* in[4];
    void *out, *copy_dst;
    for (auto& p : in) ok(cudaMalloc(&p, max_bytes), "cudaMalloc");
    ok(cudaMalloc(&out, max_bytes), "cudaMalloc");
    ok(cudaMalloc(&copy_dst, max_bytes), "cudaMalloc");
    for (int j = 0; j < 4; ++j) fill(in[j], max_bytes, unsigned(j + 1) * 0x9e3779b9u);
    ok(cudaDeviceSynchronize(), "fill");
    std::printf("spot check (4 x fp32 fold against the host): %s\n", spot_check(in, out) ? "ok" : "FAILED");
    kernel_rows<float>(tm, a, in, out, copy_dst);
    kernel_rows<md::bfloat16>(tm, a, in, out, copy_dst);
    for (auto p : in) cudaFree(p);
    cudaFree(out);
    cudaFree(copy_dst);
  }
  if (a.all_reduce) all_reduce_rows(tm, a);
  if (json_out) std::fclose(json_out);
  return 0;
}
