// smpi-ddl: a data-parallel training step of ResNet-50 on simulated GPUs (SimGrid
// SMPI), its gradients all-reduced in DDP's buckets by mdring while the backward
// pass goes on (docs/SCALING.md, "ResNet-50 with the all-reduce overlapped").
// Built by the `smpi` preset; scripts/smpi/simulate.py --sections ddl runs it.
//
//   smpirun -np 2P ... smpi-ddl --topology "sim-intra:4xsim-inter:16" --link ... [--link ...]
//                      [--step-ms 202.5] [--bucket-mb 25] [--first-bucket-mb 1] [--mode overlap|exposed]
//                      [--profile FILE] [--host-gamma S] [--trace]
//
// Two simulated processes per GPU, on the GPU's node (the hostfile gives each node
// 2 G slots; world rank w is slot w mod 2G of node w / 2G):
//   - the trainer (slots 0 .. G-1) computes: the forward pass, then the backward
//     pass layer by layer, and tells its communicator when a bucket's gradients
//     are all ready (a message of 4 bytes on the node); at the end it waits to
//     hear that every bucket is reduced;
//   - the communicator (slots G .. 2G-1) all-reduces each bucket as soon as it is
//     ready, in order, through mdring bound to the communicators' own MPI
//     communicator (node-major: the topology's ranks). This is mdring's progress
//     agent on a core the GPU's work leaves free, polling while calls are in
//     flight: a simulated rank has no threads, so the agent is a rank of its own.
//     Calls on one communicator run one after the other anyway, so waiting for
//     each before taking the next ready bucket changes nothing.
// The model (every figure is printed on trainer 0):
//   - the layers: ResNet-50 v1.5 (torchvision), from its shapes: every convolution
//     with its batch norm, and the classifier; parameters (25.557 M in all, fp32)
//     and multiply-adds of the forward pass at 224 x 224 (4.09 G per image);
//   - compute: a step of 32 images per GPU takes --step-ms (202.5 ms: the paper's
//     90 epochs of ImageNet-1k in 50 minutes on 256 P100s at 0.95 efficiency give
//     158 images/s per GPU), one third forward, two thirds backward, each layer its
//     share of the multiply-adds; simulated with smpi_execute_flops;
//   - DDP: gradients are bucketed as DDP's Reducer does from its second iteration
//     on (Reducer::rebuild_buckets, compute_bucket_assignment_by_size in
//     torch/csrc/distributed/c10d/reducer.cpp): parameter tensors (a convolution's
//     weight, its batch norm's weight and bias; the classifier's bias and weight)
//     in the order their gradients become ready (last layer first), a bucket
//     closed as soon as it holds at least its limit, the first bucket's limit
//     --first-bucket-mb (1 MiB, dist._DEFAULT_FIRST_BUCKET_BYTES), the others'
//     --bucket-mb (25 MiB, DDP's bucket_cap_mb); a bucket is all-reduced (avg)
//     once its last gradient is ready;
//   - --mode exposed: the trainer says every bucket is ready only after the backward
//     pass (no overlap);
//   - --profile: mdring plans with a calibration profile (options.profile, written by
//     mdring-calibrate on the same platform); --host-gamma: options.tune.host_gamma
//     (1e-12 for GPUs: host-memory links' folds cost nothing in the simulation).
// Prints one JSON line: the step time (the slowest trainer's), the compute alone,
// the all-reduce left after the backward pass (exposed), and the all-reduce of
// every bucket alone.
#include <mdring/mdring.hpp>
#include <mdring/mpi.hpp>

#include <simgrid/host.h>

#include <algorithm>
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
  std::vector<std::size_t> tensors;  // fp32 parameter tensors, in the order the backward pass readies them
  double macs = 0;                   // forward multiply-adds for one 224 x 224 image
  double params() const {
    double n = 0;
    for (auto t : tensors) n += double(t);
    return n;
  }
};

// ResNet-50 v1.5: stem, 3-4-6-3 bottlenecks (the stride in the 3 x 3), classifier.
std::vector<layer> resnet50() {
  std::vector<layer> L;
  // A convolution (no bias) and its batch norm: the batch norm's weight and bias
  // are ready before the convolution's weight.
  auto conv = [&](const std::string& name, int k, int cin, int cout, int hw_out) {
    const std::size_t w = std::size_t(k) * k * cin * cout;
    L.push_back({name, {std::size_t(cout), std::size_t(cout), w}, double(w) * hw_out * hw_out});
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
  L.push_back({"fc", {1000, 2048 * 1000}, 2048.0 * 1000});  // bias, weight (reversed definition order)
  return L;
}

struct args {
  std::string topology;
  std::vector<std::string> links;
  std::string profile;
  double step_ms = 202.5, bucket_mb = 25, first_bucket_mb = 1, host_gamma = 0;
  bool exposed = false, trace = false;
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
    else if (k == "--first-bucket-mb") a.first_bucket_mb = std::atof(val().c_str());
    else if (k == "--mode") a.exposed = val() == "exposed";
    else if (k == "--profile") a.profile = val();
    else if (k == "--host-gamma") a.host_gamma = std::atof(val().c_str());
    else if (k == "--trace") a.trace = true;
    else std::fprintf(stderr, "smpi-ddl: unknown argument %s\n", k.c_str()), std::exit(2);
  }
  if (a.topology.empty() || a.step_ms <= 0 || a.bucket_mb <= 0 || a.first_bucket_mb <= 0)
    std::fprintf(stderr, "smpi-ddl: --topology is required; times and sizes must be positive\n"), std::exit(2);
  if (a.host_gamma < 0)
    std::fprintf(stderr, "smpi-ddl: --host-gamma takes seconds per byte, at least 0, not %g\n", a.host_gamma),
        std::exit(2);
  return a;
}

// `seconds` of computation on this rank's simulated host (smpi_execute converts by
// the speed of the machine running the simulation instead).
void compute(double seconds) { smpi_execute_flops(seconds * sg_host_get_speed(sg_host_self())); }

struct bucket {
  std::size_t ready_layer = 0, elements = 0;  // ready once layer ready_layer's backward is done
};

// DDP's bucket assignment (see the top): tensors in ready order, a bucket closed
// once it holds at least its limit; the first limit, then `cap` for the rest.
std::vector<bucket> ddp_buckets(const std::vector<layer>& L, double first_bytes, double cap_bytes) {
  std::vector<bucket> out;
  bucket open;
  for (std::size_t i = L.size(); i-- > 0;)
    for (auto t : L[i].tensors) {
      open.elements += t, open.ready_layer = i;
      if (double(open.elements) * sizeof(float) >= (out.empty() ? first_bytes : cap_bytes))
        out.push_back(open), open = {};
    }
  if (open.elements > 0) out.push_back(open);
  return out;
}

constexpr int ready_tag = 7, done_tag = 8;

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const args a = parse(argc, argv);
  for (const auto& l : a.links) mdring::register_link(mdring::parse_link(l));
  const std::size_t G = mdring::parse_topology(a.topology).extent(0);
  const int slot = world % int(2 * G), node = world / int(2 * G);
  const bool trainer = slot < int(G);
  const int partner = trainer ? world + int(G) : world - int(G);
  const int gpu = node * int(G) + slot % int(G);  // node-major
  MPI_Comm roles;
  MPI_Comm_split(MPI_COMM_WORLD, trainer ? 0 : 1, gpu, &roles);

  const auto L = resnet50();
  double macs = 0, params = 0;
  for (const auto& l : L) macs += l.macs, params += l.params();
  const double step_s = a.step_ms * 1e-3, fwd_s = step_s / 3, bwd_s = step_s - fwd_s;
  const double MiB = 1024.0 * 1024.0;
  const std::vector<bucket> buckets = ddp_buckets(L, a.first_bucket_mb * MiB, a.bucket_mb * MiB);
  double v[4] = {0, 0, 0, 0};  // step, exposed, compute (trainers); every bucket alone (communicators)

  if (trainer) {
    if (gpu == 0) {
      std::fprintf(stderr,
                   "smpi-ddl: ResNet-50, %zu layers, %.3f M parameters, %.2f G multiply-adds per image; "
                   "%zu buckets (limits %g MiB, then %g MiB):",
                   L.size(), params / 1e6, macs / 1e9, buckets.size(), a.first_bucket_mb, a.bucket_mb);
      for (auto& b : buckets) std::fprintf(stderr, " %.1f", double(b.elements) * 4 / 1e6);
      std::fprintf(stderr, " MB\n");
    }
    MPI_Barrier(MPI_COMM_WORLD);  // the communicators have timed the buckets alone
    MPI_Barrier(roles);
    const double t0 = MPI_Wtime();
    compute(fwd_s);
    std::size_t next = 0;
    int k = 0;
    for (std::size_t i = L.size(); i-- > 0;) {
      compute(bwd_s * L[i].macs / macs);
      for (; !a.exposed && next < buckets.size() && buckets[next].ready_layer == i; ++next)
        MPI_Send(&k, 1, MPI_INT, partner, ready_tag, MPI_COMM_WORLD);
    }
    const double t_bwd = MPI_Wtime();
    for (; next < buckets.size(); ++next) MPI_Send(&k, 1, MPI_INT, partner, ready_tag, MPI_COMM_WORLD);
    MPI_Recv(&k, 1, MPI_INT, partner, done_tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    const double t1 = MPI_Wtime();
    v[0] = t1 - t0, v[1] = t1 - t_bwd, v[2] = t_bwd - t0;
  } else {
    mdring::options o;
    o.memory = mdring::mpi::smpi_shared_memory();  // scratch in SMPI's shared pages: 256 GPUs x 102 MB fit
    o.profile = a.profile;
    if (a.host_gamma > 0) o.tune.host_gamma = a.host_gamma;
    auto comm = mdring::bind(mdring::parse_topology(a.topology), roles, o);
    std::vector<float*> data;
    for (auto& b : buckets) data.push_back(static_cast<float*>(SMPI_SHARED_MALLOC(b.elements * sizeof(float))));
    // Every bucket alone, one after the other (also the warm-up: plans, scratch).
    MPI_Barrier(roles);
    double t0 = MPI_Wtime();
    for (std::size_t k = 0; k < buckets.size(); ++k)
      mdring::all_reduce(comm, data[k], buckets[k].elements, mdring::avg);
    v[3] = MPI_Wtime() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (std::size_t k = 0; k < buckets.size(); ++k) {
      int msg = 0;
      MPI_Recv(&msg, 1, MPI_INT, partner, ready_tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      const double at = MPI_Wtime() - t0;
      mdring::all_reduce(comm, data[k], buckets[k].elements, mdring::avg);
      if (a.trace && gpu == 0)
        std::fprintf(stderr, "smpi-ddl: bucket %zu (%.1f MB) ready at %.3f ms, reduced at %.3f ms\n", k,
                     double(buckets[k].elements) * 4 / 1e6, at * 1e3, (MPI_Wtime() - t0) * 1e3);
    }
    int msg = 0;
    MPI_Send(&msg, 1, MPI_INT, partner, done_tag, MPI_COMM_WORLD);
    for (auto* p : data) SMPI_SHARED_FREE(p);
  }
  // The slowest trainer's step is the step.
  double m[4];
  MPI_Allreduce(v, m, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (world == 0)
    std::printf(
        "{\"gpus\":%d,\"mode\":\"%s\",\"step_s\":%.9g,\"compute_s\":%.9g,\"exposed_s\":%.9g,"
        "\"all_reduce_s\":%.9g,\"efficiency\":%.6f,\"buckets\":%zu}\n",
        size / 2, a.exposed ? "exposed" : "overlap", m[0], m[2], m[1], m[3], step_s / m[0], buckets.size());
  MPI_Comm_free(&roles);
  MPI_Finalize();
  return 0;
}
