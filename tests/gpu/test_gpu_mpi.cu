// tests/gpu/test_gpu_mpi.cu: device buffers over MPI (mdring/cuda/mpi.cuh), several
// processes, each on device (rank % GPUs) -- so it runs on a single GPU too.
//
//   - every dimension mpi_staged (pinned host buffers, chunked and double-buffered;
//     a 64 KiB chunk size forces many chunks), on shm:2 x ethernet:* and ethernet:*;
//   - mpi_cuda_aware as well when this MPI library says it is CUDA-aware;
//   - NCCL where there are as many GPUs as processes (one rank per GPU);
//   - the compile-time ring<nvlink, 2> * ring<infiniband> with default options
//     (NCCL where every process has its own GPU, staged MPI where they share one);
//   - NCCL requested where processes share a GPU: refused, saying why;
//   - a stream being captured is refused with invalid_argument("stream").
// Run with mpiexec -n 2 (or 4); checks the spmd suite and bitwise identity across
// ranks (one MPI_Allreduce of the result hashes).
#include "mpi_support.cuh"
#include "spmd.cuh"

#include <mdring/cuda/mpi.cuh>

using namespace gpu_test;

GPU_TEST("mpi: staged and CUDA-aware transports") {
  require_gpu();
  int G = 0;
  cuda_ok(cudaGetDeviceCount(&G), "cudaGetDeviceCount");
  cuda_ok(cudaSetDevice(world_rank() % G), "cudaSetDevice");
  const int P = world_size();
  std::vector<std::string> topos = {"ethernet:*"};
  if (P % 2 == 0) topos.push_back("shm:2 x ethernet:*");
  std::vector<md::device_transport> kinds = {md::device_transport::mpi_staged};
  if (md::cuda::mpi_is_cuda_aware()) kinds.push_back(md::device_transport::mpi_cuda_aware);
  for (const auto& text : topos)
    for (auto kind : kinds) {
      md::options o;
      const auto topo = md::parse_topology(text);
      o.device_transports.assign(topo.ndims(), kind);
      o.tune.staging_chunk_bytes = 64 << 10;
      auto comm = md::cuda::bind(topo, MPI_COMM_WORLD, o);
      check(comm.transport_of(0) == kind, text, ": transport ", md::to_string(comm.transport_of(0)));
      auto s = md::cuda::unique_stream::create();
      std::vector<u64> hashes;
      const std::string label = "\"" + text + "\" " + std::string(md::to_string(kind));
      spmd_suite(comm, s.get(), label, hashes);
      check_same(hashes, label);
      // Capture is refused (the MPI transports synchronize with the host).
      dbuf<float> buf(1000);
      cudaGraph_t g = nullptr;
      cuda_ok(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal), "begin capture");
      bool refused = false;
      try {
        md::cuda::all_reduce(comm, buf.get(), 1000, md::sum, s.get());
      } catch (const md::invalid_argument& e) {
        refused = e.argument() == "stream";
      }
      cudaStreamEndCapture(s.get(), &g);
      if (g) cudaGraphDestroy(g);
      (void)cudaGetLastError();
      check(refused, label, ": a captured call was not refused with invalid_argument(\"stream\")");
      check(comm.usable(), label, ": the refusal left the communicator unusable");
    }
  // The form the README advertises: a compile-time topology, ring<nvlink, 2> *
  // ring<infiniband> (dynamic extent), on device buffers, with default options.
  // The nvlink dimension's processes share this node: ipc (tests/gpu/test_gpu_ipc.cu).
  // The infiniband one: with a GPU per process NCCL; where processes share a GPU,
  // NCCL cannot run (one GPU per rank), and bind picks MPI itself (staged, or on
  // the device pointers where this MPI is CUDA-aware).
  if (P % 2 == 0) {
    constexpr auto topo = md::ring<md::nvlink, 2> * md::ring<md::infiniband>;
    auto comm = md::cuda::bind(topo, MPI_COMM_WORLD);
    check(comm.algorithm_of(0) == md::algorithm::direct && comm.algorithm_of(1) == md::algorithm::ring,
          "ring<nvlink, 2> * ring<infiniband>: nvlink direct, infiniband ring");
    const auto mpi =
        md::cuda::mpi_is_cuda_aware() ? md::device_transport::mpi_cuda_aware : md::device_transport::mpi_staged;
#ifndef MDRING_CUDA_NO_NCCL
    const auto want = G >= P ? md::device_transport::nccl : mpi;
#else
    const auto want = mpi;
#endif
    check(comm.transport_of(0) == md::device_transport::ipc, "ring<nvlink, 2> * ring<infiniband>: dimension 0 uses ",
          md::to_string(comm.transport_of(0)), ", expected ipc");
    check(comm.transport_of(1) == want, "ring<nvlink, 2> * ring<infiniband>: dimension 1 uses ",
          md::to_string(comm.transport_of(1)), ", expected ", md::to_string(want));
    auto s = md::cuda::unique_stream::create();
    std::vector<u64> hashes;
    spmd_suite(comm, s.get(), "ring<nvlink, 2> * ring<infiniband>", hashes);
    check_same(hashes, "ring<nvlink, 2> * ring<infiniband>");
  }
#ifndef MDRING_CUDA_NO_NCCL
  if (G >= P) {
    md::options o;  // automatic would pick ipc on one node
    o.device_transports = {md::device_transport::nccl};
    auto comm = md::cuda::bind(md::parse_topology("nvlink:*"), MPI_COMM_WORLD, o);
    check(comm.transport_of(0) == md::device_transport::nccl, "nvlink over MPI + NCCL uses nccl");
    auto s = md::cuda::unique_stream::create();
    std::vector<u64> hashes;
    spmd_suite(comm, s.get(), "\"nvlink:*\" nccl (ids over MPI)", hashes);
    check_same(hashes, "nccl over MPI");
  } else {
    if (world_rank() == 0)
      std::printf("  (NCCL over MPI not run: %d processes, %d GPUs; NCCL needs one GPU per rank)\n", P, G);
    // Asking for it anyway: refused on every rank, naming the option and why.
    md::options o;
    o.device_transports = {md::device_transport::nccl};
    bool refused = false;
    try {
      auto comm = md::cuda::bind(md::parse_topology("nvlink:*"), MPI_COMM_WORLD, o);
    } catch (const md::invalid_argument& e) {
      refused =
          e.argument() == "options.device_transports" && std::string(e.what()).find("share a GPU") != std::string::npos;
      if (!refused) std::printf("  got: %s\n", e.what());
    }
    check(refused, "nccl requested where processes share a GPU: not refused with invalid_argument naming why");
  }
#endif
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int worst = worst_of_all(gpu_test::run_all(argc, argv));
  MPI_Finalize();
  return worst;
}
