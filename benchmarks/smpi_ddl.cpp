// smpi-ddl: a data-parallel training step of ResNet-50 on simulated GPUs (SimGrid
// SMPI), its gradients all-reduced in DDP's buckets with mdring's nonblocking
// all_reduce while the backward pass goes on (docs/SCALING.md, "The DDL table with
// overlap"). Built by the `smpi` preset; scripts/smpi/simulate.py --sections ddl
// runs it.
//
//   smpirun ... smpi-ddl --topology "sim-intra:4xsim-inter:16" --link ... [--link ...]
//                        [--step-ms 202.5] [--bucket-mb 25] [--poll-us 100]
//                        [--mode overlap|exposed] [--steps 2]
//
// The model (every figure is printed on rank 0):
//   - the layers: ResNet-50 v1.5 (torchvision), from its shapes: every convolution
//     with its batch norm, and the classifier; parameters (25.557 M in all, fp32)
//     and multiply-adds of the forward pass at 224 x 224 (4.1 G per image);
//   - compute: a step of 32 images per GPU takes --step-ms (202.5 ms: the paper's
//     90 epochs of ImageNet-1k in 50 minutes on 256 P100s at 0.95 efficiency give
//     158 images/s per GPU), one third forward, two thirds backward, each layer its
//     share of the multiply-adds; simulated with smpi_execute_flops;
//   - DDP: gradients are bucketed in the order the backward pass produces them
//     (last layer first), a bucket all-reduced (iall_reduce, avg) as soon as its
//     last gradient is ready, buckets of --bucket-mb (25 MB, DDP's bucket_cap_mb);
//   - progress: mdring's progress agent runs on a CPU core the GPU's work leaves
//     free; here the backward pass is cut into --poll-us slices (100 us: the
//     agent's longest nap while nothing moves) and every call in flight is tested
//     between them (test() is what the agent does), so a step of the collective
//     waits at most that long for its next message to be posted;
//   - --mode exposed: the same buckets all-reduced one after another once the
//     backward pass has ended (no overlap).
// Prints one JSON line: the step time, the compute alone, the time the all-reduce
// was exposed (after the backward pass), and the all_reduce time alone.
#include <mdring/mdring.hpp>
#include <mdring/mpi.hpp>

#include <simgrid/host.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory_resource>
#include <string>
#include <vector>

static_assert(MDRING_SMPI == 1, "compile with smpicxx");

namespace {

struct layer {
  std::string name;
  double params = 0;  // fp32 parameters (weights and batch-norm scale and shift)
  double macs = 0;    // forward multiply-adds for one 224 x 224 image
};

// ResNet-50 v1.5: stem, 3-4-6-3 bottlenecks (the stride in the 3 x 3), classifier.
std::vector<layer> resnet50() {
  std::vector<layer> L;
  auto conv = [&](const std::string& name, int k, int cin, int cout, int hw_out) {
    L.push_back({name, double(k) * k * cin * cout + 2.0 * cout, double(k) * k * cin * cout * hw_out * hw_out});
  };
  conv("conv1", 7, 3, 64, 112);
  int in = 64, hw = 56;
  const int widths[] = {64, 128, 256, 512}, blocks[] = {3, 4, 6, 3};
  for (int s = 0; s < 4; ++s) {
    const int w = widths[s], out = 4 * w;
    for (int b = 0; b < blocks[s]; ++b) {
      const int stride = (s > 0 && b == 0) ? 2 : 1, hw_out = hw / stride;
      const std::string n = "layer" + std::to_string(s + 1) + "." + std::to_string(b);
      conv(n + ".conv1", 1, in, w, hw);
      conv(n + ".conv2", 3, w, w, hw_out);
      conv(n + ".conv3", 1, w, out, hw_out);
      if (b == 0) conv(n + ".downsample", 1, in, out, hw_out);
      in = out, hw = hw_out;
    }
  }
  L.push_back({"fc", 2048.0 * 1000 + 1000, 2048.0 * 1000});
  return L;
}

struct args {
  std::string topology;
  std::vector<std::string> links;
  double step_ms = 202.5, bucket_mb = 25, poll_us = 100;
  bool exposed = false;
  int steps = 2;
};

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) std::fprintf(stderr, "smpi-ddl: %s needs a value\n", k.c_str()), std::exit(2);
      return argv[++i];
    };
    if (k == "--topology") a.topology = val();
    else if (k == "--link") a.links.push_back(val());
    else if (k == "--step-ms") a.step_ms = std::atof(val().c_str());
    else if (k == "--bucket-mb") a.bucket_mb = std::atof(val().c_str());
    else if (k == "--poll-us") a.poll_us = std::atof(val().c_str());
    else if (k == "--steps") a.steps = std::atoi(val().c_str());
    else if (k == "--mode") a.exposed = val() == "exposed";
    else std::fprintf(stderr, "smpi-ddl: unknown argument %s\n", k.c_str()), std::exit(2);
  }
  if (a.topology.empty() || a.step_ms <= 0 || a.poll_us <= 0 || a.bucket_mb <= 0 || a.steps < 1)
    std::fprintf(stderr, "smpi-ddl: --topology is required; times and sizes must be positive\n"), std::exit(2);
  return a;
}

// `seconds` of computation on this rank's simulated host (smpi_execute converts by
// the speed of the machine running the simulation instead).
void compute(double seconds) { smpi_execute_flops(seconds * sg_host_get_speed(sg_host_self())); }

// Scratch and gradients in SMPI's shared memory (every rank's bytes are the same
// pages): 256 ranks x 102 MB fit in this machine.
class shared_resource : public std::pmr::memory_resource {
  void* do_allocate(std::size_t bytes, std::size_t) override { return SMPI_SHARED_MALLOC(bytes ? bytes : 1); }
  void do_deallocate(void* p, std::size_t, std::size_t) override { SMPI_SHARED_FREE(p); }
  bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override { return this == &o; }
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const args a = parse(argc, argv);
  for (const auto& l : a.links) mdring::register_link(mdring::parse_link(l));
  shared_resource mem;
  mdring::options o;
  o.memory = &mem;
  auto comm = mdring::bind(mdring::parse_topology(a.topology), MPI_COMM_WORLD, o);

  const auto L = resnet50();
  double macs = 0, params = 0;
  for (const auto& l : L) macs += l.macs, params += l.params;
  const double step_s = a.step_ms * 1e-3, fwd_s = step_s / 3, bwd_s = step_s - fwd_s;
  // Buckets in the order the backward pass makes gradients (last layer first).
  struct bucket {
    std::size_t first_layer = 0, elements = 0;  // layers [first_layer, previous bucket's first)
    float* data = nullptr;
  };
  std::vector<bucket> buckets;
  const double cap = a.bucket_mb * 1e6 / 4;
  std::vector<std::size_t> bucket_of(L.size());
  for (std::size_t i = L.size(); i-- > 0;) {
    if (buckets.empty() || double(buckets.back().elements) >= cap) buckets.push_back({i, 0, nullptr});
    buckets.back().first_layer = i;
    buckets.back().elements += std::size_t(L[i].params);
    bucket_of[i] = buckets.size() - 1;
  }
  for (auto& b : buckets) b.data = static_cast<float*>(SMPI_SHARED_MALLOC(b.elements * sizeof(float)));
  if (rank == 0) {
    std::fprintf(stderr, "smpi-ddl: ResNet-50, %zu layers, %.3f M parameters, %.2f G multiply-adds per image; "
                         "%zu buckets of up to %.0f MB:", L.size(), params / 1e6, macs / 1e9, buckets.size(), a.bucket_mb);
    for (auto& b : buckets) std::fprintf(stderr, " %.1f", double(b.elements) * 4 / 1e6);
    std::fprintf(stderr, " MB\n");
  }

  // The all-reduce of every bucket alone (the communication a step needs).
  double t_comm = 0;
  for (int s = 0; s < a.steps; ++s) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (auto& b : buckets) mdring::all_reduce(comm, b.data, b.elements, mdring::avg);
    t_comm = MPI_Wtime() - t0;
  }

  double t_step = 0, t_exposed = 0, t_compute = 0;
  std::vector<mdring::request> reqs;
  for (int s = 0; s < a.steps; ++s) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    compute(fwd_s);
    for (std::size_t i = L.size(); i-- > 0;) {
      // This layer's backward, in slices; calls in flight move between them.
      for (double left = bwd_s * L[i].macs / macs; left > 0;) {
        const double slice = left < a.poll_us * 1e-6 ? left : a.poll_us * 1e-6;
        compute(slice);
        left -= slice;
        if (!a.exposed)
          for (auto& r : reqs) r.test();
      }
      const bucket& b = buckets[bucket_of[i]];
      if (!a.exposed && i == b.first_layer) reqs.push_back(mdring::iall_reduce(comm, b.data, b.elements, mdring::avg));
    }
    const double t_bwd = MPI_Wtime();
    if (a.exposed)
      for (auto& b : buckets) mdring::all_reduce(comm, b.data, b.elements, mdring::avg);
    mdring::wait_all(reqs);
    reqs.clear();
    const double t1 = MPI_Wtime();
    t_step = t1 - t0, t_exposed = t1 - t_bwd, t_compute = t_bwd - t0;
  }
  // The slowest rank's step is the step.
  double v[3] = {t_step, t_exposed, t_comm};
  MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("{\"ranks\":%d,\"mode\":\"%s\",\"step_s\":%.9g,\"compute_s\":%.9g,\"exposed_s\":%.9g,"
                "\"all_reduce_s\":%.9g,\"efficiency\":%.6f,\"buckets\":%zu,\"poll_us\":%g}\n",
                size, a.exposed ? "exposed" : "overlap", v[0], t_compute, v[1], v[2], step_s / v[0], buckets.size(),
                a.poll_us);
  for (auto& b : buckets) SMPI_SHARED_FREE(b.data);
  MPI_Finalize();
  return 0;
}
