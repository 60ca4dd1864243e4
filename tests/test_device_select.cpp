// tests/test_device_select.cpp: the transport of each dimension on the GPU path
// (transport/device_select.hpp), by link, support and request; exact expectations.
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>
#include <mdring/transport/device_select.hpp>

#include <string>
#include <vector>

namespace md = mdring;
using dt = md::device_transport;

namespace {

std::vector<dt> select(const std::string& topo, std::vector<dt> req, md::device_transport_support s,
                       md::tuning tune = {}) {
  const auto t = md::parse_topology(topo);
  const auto m = md::merge_dimensions(t, {}, tune);
  return md::select_device_transports(t, m, req, s);
}

md::device_transport_support sup(bool nccl, bool mpi, bool cuda_aware_mpi, bool local) {
  md::device_transport_support s;
  s.nccl = nccl, s.mpi = mpi, s.cuda_aware_mpi = cuda_aware_mpi, s.local = local;
  return s;
}
md::device_transport_support nccl_mpi() { return sup(true, true, false, false); }

std::string message_of(auto&& f) {
  try {
    f();
  } catch (const md::invalid_argument& e) {
    CHECK(e.argument() == "options.device_transports");
    return e.what();
  }
  return "no exception";
}

}  // namespace

TEST_CASE("device transports: defaults by link") {
  const md::device_transport_support all = nccl_mpi();
  CHECK(md::default_device_transport(md::link_info_of<md::nvlink>(), all) == dt::nccl);
  CHECK(md::default_device_transport(md::link_info_of<md::pcie>(), all) == dt::nccl);
  CHECK(md::default_device_transport(md::link_info_of<md::infiniband>(), all) == dt::nccl);
  CHECK(md::default_device_transport(md::link_info_of<md::shm>(), all) == dt::nccl);
  CHECK(md::default_device_transport(md::link_info_of<md::ethernet>(), all) == dt::mpi_staged);
  md::device_transport_support aware = all;
  aware.cuda_aware_mpi = true;
  CHECK(md::default_device_transport(md::link_info_of<md::ethernet>(), aware) == dt::mpi_cuda_aware);
  CHECK(md::default_device_transport(md::link_info_of<md::nvlink>(), aware) == dt::nccl);
  // The threshold: 5 GB/s in host memory space.
  md::link_info slow{"slow", 4.99e9, 1e-6, false, md::memory_space::host};
  md::link_info fast{"fast", 5e9, 1e-6, false, md::memory_space::host};
  CHECK(md::default_device_transport(slow, all) == dt::mpi_staged);
  CHECK(md::default_device_transport(fast, all) == dt::nccl);
  // What is there when the preferred one is not.
  CHECK(md::default_device_transport(md::link_info_of<md::nvlink>(), sup(false, true, false, false)) == dt::mpi_staged);
  CHECK(md::default_device_transport(md::link_info_of<md::ethernet>(), sup(true, false, false, false)) == dt::nccl);
  CHECK(md::default_device_transport(md::link_info_of<md::ethernet>(), {}) == dt::automatic);
  // A local world is local everywhere.
  CHECK(md::default_device_transport(md::link_info_of<md::ethernet>(), sup(true, true, true, true)) == dt::local);
}

TEST_CASE("device transports: per dimension, merged dimensions, requests") {
  // Per executed dimension. A ring of 16 or more ranks on a switched link runs as
  // two (plan/merge.hpp): both halves get its transport, chosen or requested.
  CHECK(select("nvlink:4 x infiniband:8", {}, nccl_mpi()) == std::vector<dt>{dt::nccl, dt::nccl});
  CHECK(select("nvlink:4 x infiniband:64", {}, nccl_mpi()) == std::vector<dt>{dt::nccl, dt::nccl, dt::nccl});
  CHECK(select("nvlink:4 x ethernet:16", {}, nccl_mpi()) == std::vector<dt>{dt::nccl, dt::mpi_staged, dt::mpi_staged});
  CHECK(select("nvlink:4 x ethernet:16", {}, sup(true, true, true, false)) ==
        std::vector<dt>{dt::nccl, dt::mpi_cuda_aware, dt::mpi_cuda_aware});
  CHECK(select("nvlink:4 x infiniband:64", {dt::automatic, dt::mpi_staged}, nccl_mpi()) ==
        std::vector<dt>{dt::nccl, dt::mpi_staged, dt::mpi_staged});
  CHECK(select("nvlink:4 x infiniband:64", {dt::mpi_staged}, nccl_mpi()) ==
        std::vector<dt>{dt::mpi_staged, dt::nccl, dt::nccl});
  CHECK(select("infiniband:64 x nvlink:4", {dt::mpi_staged, dt::nccl}, nccl_mpi()) ==
        std::vector<dt>{dt::mpi_staged, dt::mpi_staged, dt::nccl});
  md::tuning nosplit;
  nosplit.split_ring_extent = 0;
  CHECK(select("nvlink:4 x infiniband:64", {dt::automatic, dt::mpi_staged}, nccl_mpi(), nosplit) ==
        std::vector<dt>{dt::nccl, dt::mpi_staged});
  // nvlink:2 x nvlink:2 runs as nvlink:4: one executed dimension.
  CHECK(select("nvlink:2 x nvlink:2 x ethernet:3", {}, nccl_mpi()) == std::vector<dt>{dt::nccl, dt::mpi_staged});
  CHECK(select("nvlink:2 x nvlink:2", {dt::automatic, dt::mpi_staged}, nccl_mpi()) == std::vector<dt>{dt::mpi_staged});
  md::tuning nomerge;
  nomerge.merge_same_link = false;
  CHECK(select("nvlink:2 x nvlink:2", {dt::nccl, dt::mpi_staged}, nccl_mpi(), nomerge) ==
        std::vector<dt>{dt::nccl, dt::mpi_staged});
  CHECK(select("nvlink:2 x ethernet:4", {}, sup(false, false, false, true)) == std::vector<dt>{dt::local, dt::local});
  // A dimension of one rank never throws for want of a transport.
  CHECK(select("ethernet:1 x nvlink:2", {}, sup(true, false, false, false)) == std::vector<dt>{dt::nccl, dt::nccl});
}

TEST_CASE("device transports: errors name the entry") {
  CHECK(message_of([] {
          select("nvlink:4", {dt::nccl, dt::nccl}, nccl_mpi());
        }) ==
        "mdring::cuda::bind: options.device_transports has 2 entries but the topology \"nvlink:4\" has 1 dimensions");
  CHECK(message_of([] {
          select("nvlink:4 x infiniband:2", {dt::automatic, dt::mpi_cuda_aware}, nccl_mpi());
        }) ==
        "mdring::cuda::bind: options.device_transports[1] is mpi_cuda_aware, which this communicator cannot use "
        "(it supports: nccl, mpi_staged)");
  CHECK(message_of([] { select("nvlink:4", {dt::nccl}, sup(false, false, false, true)); }) ==
        "mdring::cuda::bind: options.device_transports[0] is nccl, which this communicator cannot use (it "
        "supports: local)");
  CHECK(message_of([] {
          select("nvlink:2 x nvlink:2", {dt::nccl, dt::mpi_staged}, nccl_mpi());
        }) ==
        "mdring::cuda::bind: options.device_transports[1] is mpi_staged but options.device_transports[0] is nccl, "
        "and the two dimensions run merged as one (same fully connected link); ask for the same transport or set "
        "options.tune.merge_same_link = false");
  // Built with NCCL, but it cannot run here (MPI bind: ranks sharing a GPU): the
  // reason is part of the message, and automatic picks MPI.
  md::device_transport_support shared_gpu = sup(false, true, false, false);
  shared_gpu.nccl_unavailable = "2 ranks share a GPU with another rank, and NCCL needs one GPU per rank";
  CHECK(message_of([&] {
          select("nvlink:2 x infiniband:2", {dt::automatic, dt::nccl}, shared_gpu);
        }) ==
        "mdring::cuda::bind: options.device_transports[1] is nccl, which this communicator cannot use (it "
        "supports: mpi_staged): 2 ranks share a GPU with another rank, and NCCL needs one GPU per rank");
  CHECK(select("nvlink:2 x infiniband:2", {}, shared_gpu) == std::vector<dt>{dt::mpi_staged, dt::mpi_staged});
  CHECK(message_of([] { select("ethernet:2", {}, {}); }) ==
        "mdring::cuda::bind: no transport can move device buffers in dimension 0 (ethernet): the communicator "
        "supports none");
}

TEST_CASE("device transports: names and option checks") {
  CHECK(md::to_string(dt::automatic) == "automatic");
  CHECK(md::to_string(dt::nccl) == "nccl");
  CHECK(md::to_string(dt::mpi_staged) == "mpi_staged");
  CHECK(md::to_string(dt::mpi_cuda_aware) == "mpi_cuda_aware");
  CHECK(md::to_string(dt::local) == "local");
  md::options o;
  o.tune.staging_chunk_bytes = 100;
  try {
    md::detail::validate(o);
    FAIL("no exception");
  } catch (const md::invalid_argument& e) {
    CHECK(e.argument() == "options.tune.staging_chunk_bytes");
    CHECK(std::string(e.what()) == "mdring::bind: options.tune.staging_chunk_bytes must be in [4096, 2^30], got 100");
  }
}

TEST_CASE("device transports: ipc for a GPU link whose ranks share a node") {
  // Dimension 0 node-local (ipc works there), dimension 1 not.
  md::device_transport_support s = nccl_mpi();
  s.ipc = {true, false};
  CHECK(select("nvlink:4 x infiniband:8", {}, s) == std::vector<dt>{dt::ipc, dt::nccl});
  CHECK(select("pcie:4 x ethernet:8", {}, s) == std::vector<dt>{dt::ipc, dt::mpi_staged});
  // Only GPU links (memory space device) pick it: shm stays on NCCL.
  CHECK(select("shm:4 x infiniband:8", {}, s) == std::vector<dt>{dt::nccl, dt::nccl});
  // nccl is still there when asked for.
  CHECK(select("nvlink:4 x infiniband:8", {dt::nccl}, s) == std::vector<dt>{dt::nccl, dt::nccl});
  CHECK(select("nvlink:4 x infiniband:8", {dt::ipc}, s) == std::vector<dt>{dt::ipc, dt::nccl});
  // Where it cannot run, a request names the dimension and why.
  s.ipc_unavailable = "dimension 1: its ranks are not processes of one node";
  const std::string m = message_of([&] { select("nvlink:4 x nvlink:8", {dt::automatic, dt::ipc}, s); });
  CHECK(m.find("options.device_transports[1] is ipc") != std::string::npos);
  CHECK(m.find("not processes of one node") != std::string::npos);
  // No ipc anywhere (processes on several nodes, or IPC refused): NCCL as before.
  s.ipc = {};
  CHECK(select("nvlink:4 x infiniband:8", {}, s) == std::vector<dt>{dt::nccl, dt::nccl});
  CHECK(md::to_string(dt::ipc) == "ipc");
}

TEST_CASE("device transports: the ipc transport's one-shot threshold (ipc_staging_bytes)") {
  md::tuning t;                                    // 20 us to publish, 1e-12 s per byte folded on the GPU, cap 1 MiB
  const auto nv = md::link_info_of<md::nvlink>();  // 150 GB/s
  // p = 2: (p-1)(1-2/p) = 0, so 20e-6 / 2e-12 = 10 MB: the cap.
  CHECK(md::ipc_staging_bytes(nv, 2, t) == std::size_t(1) << 20);
  // p = 4: 3 * 0.5 / 150e9 + 2e-12 = 1.2e-11 s/byte: 1666666 bytes > 1 MiB: the cap.
  CHECK(md::ipc_staging_bytes(nv, 4, t) == std::size_t(1) << 20);
  // p = 8 on PCIe (24 GB/s): 7 * 0.75 / 24e9 + 2e-12 = 2.2075e-10: 90600 bytes, in cache lines.
  CHECK(md::ipc_staging_bytes(md::link_info_of<md::pcie>(), 8, t) == 90560);
  t.ipc_staging_bytes = 0;
  CHECK(md::ipc_staging_bytes(nv, 4, t) == 0);
  CHECK(md::ipc_staging_bytes(nv, 1, md::tuning{}) == 0);
}
