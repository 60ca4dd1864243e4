// tests/gpu/test_gpu_all_reduce.cu: all_reduce on device buffers over logical
// ranks on one GPU (mdring/cuda/local.cuh), i.e. the full multi-dimensional
// schedule with local copies.
//
//   shapes   nvlink:4 (direct), nvlink:4 ring, infiniband:5, nvlink:2 x infiniband:3,
//            pcie:3 x ethernet:2, nvlink:2 x nvlink:2 x infiniband:2 (merged to 4 x 2),
//            nvlink:1 x infiniband:4, infiniband:4 x nvlink:1, nvlink:9 (ring: above
//            direct_max_extent), nvlink:2 x infiniband:* (dynamic), and the compile-time
//            ring<nvlink, 4> * ring<infiniband, 2>
//   counts   0, 1, fewer than the ranks, 13, 97, 1009, 4099, and large ones cut into
//            segments (pipelined over per-dimension streams)
//   checks   every rank's result against the float64 reference (exact for integers),
//            bitwise identity across ranks, in place and out of place, buffers
//            misaligned by one element, every op on float double half bfloat16 int8
//            uint8 int32 int64, a non-commutative op on direct stages, per-rank streams,
//            one shared stream, the default stream, CUDA-graph capture (one stream,
//            and per-rank streams forked from the captured one), repeated calls,
//            calls on different streams ordered without host synchronization, a
//            graph replayed after a larger call grew the scratch, and the errors a
//            caller can make.
#include "common.cuh"

#include <mdring/cuda/local.cuh>

#include "../reproducible_reference.hpp"

#include <memory>

using namespace gpu_test;
using md::algorithm;

// Associative, not commutative: the result is rank 0's value when combined in rank order.
struct keep_left {
  static constexpr bool is_commutative = false;
  __host__ __device__ std::int32_t operator()(std::int32_t a, std::int32_t) const { return a; }
};

namespace {

template <class T>
struct rank_buffers {
  std::vector<std::unique_ptr<dbuf<T>>> send, recv;
  std::vector<const T*> sp;
  std::vector<T*> rp;
  std::vector<std::vector<T>> host;
};

// Rank r's buffers of n elements value(r, i), misaligned(r) or not.
template <class T, class Misaligned, class Value>
rank_buffers<T> make_buffers(std::size_t P, std::size_t n, bool in_place, Misaligned misaligned_of, Value value) {
  rank_buffers<T> b;
  for (std::size_t r = 0; r < P; ++r) {
    std::vector<T> h(n);
    for (std::size_t i = 0; i < n; ++i) h[i] = value(r, i);
    const bool misaligned = misaligned_of(r);
    b.recv.push_back(std::make_unique<dbuf<T>>(n, misaligned));
    if (in_place) {
      b.recv.back()->upload(h);
      b.sp.push_back(b.recv.back()->get());
    } else {
      b.send.push_back(std::make_unique<dbuf<T>>(n, misaligned));
      b.send.back()->upload(h);
      b.recv.back()->poison();
      b.sp.push_back(b.send.back()->get());
    }
    b.rp.push_back(b.recv.back()->get());
    b.host.push_back(std::move(h));
  }
  return b;
}

template <class T>
rank_buffers<T> make_buffers(std::size_t P, std::size_t n, bool in_place, bool misaligned, u64 seed, opk k) {
  return make_buffers<T>(
      P, n, in_place, [=](std::size_t) { return misaligned; },
      [=](std::size_t r, std::size_t i) { return value<T>(seed, r, i, k); });
}

// Checks every rank's result: same bits as rank 0, and the reference.
template <class T>
void check_results(const std::string& where, rank_buffers<T>& b, std::size_t n, opk k) {
  const std::size_t P = b.rp.size();
  std::vector<std::vector<T>> got(P);
  for (std::size_t r = 0; r < P; ++r) got[r] = b.recv[r]->download();
  for (std::size_t r = 1; r < P; ++r) {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += !same_bits(got[r][i], got[0][i]);
    check(bad == 0, where, ": rank ", r, " differs from rank 0 in ", bad, " elements");
  }
  std::vector<const T*> xs;
  for (auto& h : b.host) xs.push_back(h.data());
  check_against_reference<T>(where, k, xs, got[0].data(), n, 2.0 * double(P));
}

template <class T, class Comms, class Op>
void one_call(Comms& comms, opk k, Op op, std::size_t n, bool in_place, bool misaligned, u64 seed,
              const std::vector<cudaStream_t>& streams, const std::string& label) {
  auto b = make_buffers<T>(comms.size(), n, in_place, misaligned, seed, k);
  md::cuda::all_reduce(comms, b.sp, b.rp, n, op, streams);
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check_results<T>(cat(label, " all_reduce<", md::type_name<T>(), "> ", name_of(k), " n ", n,
                       in_place ? " in place" : " out of place", misaligned ? " misaligned" : ""),
                   b, n, k);
}

struct streams_t {
  std::vector<md::cuda::unique_stream> owned;
  std::vector<cudaStream_t> raw;
  explicit streams_t(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
      owned.push_back(md::cuda::unique_stream::create()), raw.push_back(owned.back().get());
  }
};

template <class Comms>
void shape_suite(Comms& comms, const std::string& label) {
  const std::size_t P = comms.size();
  std::vector<std::size_t> counts = {0, 1, 13, 97, 1009, 4099};
  if (P > 2) counts.push_back(P - 1);
  streams_t per_rank(P), shared(1);
  int c = 0;
  for (std::size_t n : counts) {
    ++c;
    const auto& st = c % 3 == 0 ? std::vector<cudaStream_t>{} : c % 3 == 1 ? per_rank.raw : shared.raw;
    one_call<std::int32_t>(comms, opk::sum, md::sum, n, false, c % 2 == 0, 10 + c, st, label);
    one_call<std::int32_t>(comms, opk::sum, md::sum, n, true, c % 2 == 1, 20 + c, st, label);
    one_call<float>(comms, opk::sum, md::sum, n, c % 2 == 0, true, 30 + c, per_rank.raw, label);
  }
  // Large enough for the cost model to cut segments (1 Mi floats), and a forced
  // small segment size (many segments in flight over per-dimension streams).
  one_call<float>(comms, opk::sum, md::sum, std::size_t(1) << 20, false, false, 41, per_rank.raw, label);
  one_call<md::bfloat16>(comms, opk::avg, md::avg, (std::size_t(1) << 20) + 3, true, true, 42, shared.raw, label);
}

std::vector<std::pair<std::string, md::options>> shapes() {
  std::vector<std::pair<std::string, md::options>> s;
  auto add = [&](std::string t, std::vector<algorithm> a = {}, std::size_t seg = 0, bool merge = true) {
    md::options o;
    o.algorithms = std::move(a);
    o.tune.segment_bytes = seg;
    o.tune.merge_same_link = merge;
    s.emplace_back(std::move(t), o);
  };
  add("nvlink:4");
  add("nvlink:4", {algorithm::ring});
  add("infiniband:5");
  add("nvlink:2 x infiniband:3");
  add("nvlink:2 x infiniband:3", {algorithm::ring, algorithm::direct}, 16 << 10);
  add("pcie:3 x ethernet:2");
  add("nvlink:2 x nvlink:2 x infiniband:2");
  add("nvlink:2 x nvlink:2 x infiniband:2", {}, 32 << 10, false);
  add("nvlink:1 x infiniband:4");
  add("infiniband:4 x nvlink:1");
  add("nvlink:9");
  add("nvlink:1");
  return s;
}

}  // namespace

GPU_TEST("all_reduce: every shape, every count, in and out of place, misaligned, three kinds of streams") {
  require_gpu();
  for (auto& [text, opts] : shapes()) {
    const auto topo = md::parse_topology(text);
    md::cuda::local_world world(topo.size());
    auto comms = md::cuda::bind(topo, world, opts);
    shape_suite(comms, cat("\"", text, "\" segment_bytes ", opts.tune.segment_bytes));
  }
  // A dynamic extent, resolved by the world's size.
  md::cuda::local_world w8(8);
  auto dyn = md::cuda::bind(md::parse_topology("nvlink:2 x infiniband:*"), w8);
  check(dyn[0].executed_extents() == std::vector<std::size_t>{2, 4}, "nvlink:2 x infiniband:* on 8 ranks is 2 x 4");
  shape_suite(dyn, "\"nvlink:2 x infiniband:*\"");
}

GPU_TEST("all_reduce: ring<nvlink, 4> * ring<infiniband, 2> written as a type") {
  require_gpu();
  constexpr auto topo = md::ring<md::nvlink, 4> * md::ring<md::infiniband, 2>;
  md::cuda::local_world world(decltype(topo)::size());
  auto comms = md::cuda::bind(topo, world);
  check(comms[0].algorithm_of(0) == algorithm::direct && comms[0].algorithm_of(1) == algorithm::ring,
        "nvlink direct, infiniband ring");
  check(comms[0].transport_of(0) == md::device_transport::local, "local transport");
  shape_suite(comms, "ring<nvlink, 4> * ring<infiniband, 2>");
}

namespace {
template <class T, class Comms>
void type_suite(Comms& comms, const std::string& label) {
  streams_t st(comms.size());
  int c = 0;
  for (opk k : {opk::sum, opk::prod, opk::min, opk::max, opk::avg})
    with_op(k, [&](auto op) {
      for (std::size_t n : {std::size_t(1), std::size_t(97), std::size_t(4099)}) {
        ++c;
        one_call<T>(comms, k, op, n, c % 2 == 0, c % 3 == 0, 100 + c, st.raw, label);
      }
    });
}
template <class Comms>
void all_types(Comms& comms, const std::string& label) {
  type_suite<float>(comms, label);
  type_suite<double>(comms, label);
  type_suite<md::half>(comms, label);
  type_suite<md::bfloat16>(comms, label);
  type_suite<std::int8_t>(comms, label);
  type_suite<std::uint8_t>(comms, label);
  type_suite<std::int32_t>(comms, label);
  type_suite<std::int64_t>(comms, label);
}
}  // namespace

GPU_TEST("all_reduce: every op and type (direct x ring, and direct)") {
  require_gpu();
  for (const char* text : {"nvlink:2 x infiniband:3", "nvlink:4"}) {
    md::cuda::local_world world(md::parse_topology(text).size());
    auto comms = md::cuda::bind(md::parse_topology(text), world);
    all_types(comms, cat("\"", text, "\""));
  }
}

GPU_TEST("all_reduce: a non-commutative op combines in rank order (direct stages)") {
  require_gpu();
  md::options o;
  o.tune.merge_same_link = false;  // two direct dimensions
  const auto topo = md::parse_topology("nvlink:2 x nvlink:3");
  md::cuda::local_world world(6);
  auto comms = md::cuda::bind(topo, world, o);
  for (std::size_t n : {std::size_t(1), std::size_t(13), std::size_t(4099)}) {
    std::vector<std::unique_ptr<dbuf<std::int32_t>>> bufs;
    std::vector<const std::int32_t*> sp;
    std::vector<std::int32_t*> rp;
    for (std::size_t r = 0; r < 6; ++r) {
      std::vector<std::int32_t> h(n);
      for (std::size_t i = 0; i < n; ++i) h[i] = std::int32_t(r * 100000 + i);
      bufs.push_back(std::make_unique<dbuf<std::int32_t>>(n, true));
      bufs.back()->upload(h);
      sp.push_back(bufs.back()->get());
      rp.push_back(bufs.back()->get());
    }
    md::cuda::all_reduce(comms, sp, rp, n, keep_left{});
    cuda_ok(cudaDeviceSynchronize(), "sync");
    for (std::size_t r = 0; r < 6; ++r) {
      const auto got = bufs[r]->download();
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) bad += got[i] != std::int32_t(i);
      check(bad == 0, "keep_left n ", n, " rank ", r, ": ", bad, " elements are not rank 0's");
    }
  }
}

GPU_TEST("all_reduce: options.reproducible gives the contract's bits at every count and segment length") {
  // The host path's property test (tests/test_reproducible.cpp) on the GPU path:
  // inputs with wide exponents, every element compared bitwise with the contract
  // (reproducible_reference.hpp), float and bfloat16, pipelined and not.
  require_gpu();
  const auto topo = md::parse_topology("nvlink:2 x nvlink:2 x infiniband:3");
  const std::size_t P = topo.size();
  const std::vector<std::size_t> ext = topo.resolve(P).extents();
  auto run = [&]<class T>(T, int spread, const char* name) {
    for (std::size_t seg : {std::size_t(0), std::size_t(16) << 10}) {
      md::options o;
      o.reproducible = true;
      o.tune.segment_bytes = seg;
      md::cuda::local_world world(P);
      auto comms = md::cuda::bind(topo, world, o);
      for (std::size_t n : {std::size_t(13), std::size_t(4099), std::size_t(100003)}) {
        std::vector<T> column(P), expect(n);
        for (std::size_t i = 0; i < n; ++i) {
          for (std::size_t r = 0; r < P; ++r) column[r] = T(mdring_test::wide_value(5, r, i, spread));
          expect[i] = mdring_test::contract_result(column, ext, md::sum);
        }
        auto b = make_buffers<T>(
            P, n, true, [](std::size_t r) { return r % 2 == 1; },
            [&](std::size_t r, std::size_t i) { return T(mdring_test::wide_value(5, r, i, spread)); });
        md::cuda::all_reduce(comms, b.sp, b.rp, n, md::sum);
        cuda_ok(cudaDeviceSynchronize(), "sync");
        for (std::size_t r = 0; r < P; ++r) {
          const auto got = b.recv[r]->download();
          std::size_t bad = 0;
          for (std::size_t i = 0; i < n; ++i) bad += std::memcmp(&got[i], &expect[i], sizeof(T)) != 0;
          check(bad == 0, name, " n ", n, " segment_bytes ", seg, " rank ", r, ": ", bad,
                " elements differ from the contract");
        }
      }
    }
  };
  run(float{}, 24, "float");
  run(md::bfloat16{}, 12, "bfloat16");
}

GPU_TEST("all_reduce: float32 accumulation runs its dimensions direct, each rounded once (the contract's bits)") {
  // options.dimension_accumulation {element, float32} on nvlink:2 x infiniband:3
  // (two ranks fold alike either way round; the float32 dimension folds direct in
  // coordinate order), and options.accumulation = float32 on three dimensions (the
  // GPU path widens nothing: every dimension direct): both are the contract of
  // tests/reproducible_reference.hpp, bitwise, without options.reproducible.
  require_gpu();
  struct variant {
    const char* topo;
    std::vector<md::accumulation> per;
    md::accumulation all;
  };
  for (const variant& v : {variant{"nvlink:2 x infiniband:3",
                                   {md::accumulation::element, md::accumulation::float32},
                                   md::accumulation::element},
                           variant{"nvlink:2 x nvlink:2 x infiniband:3", {}, md::accumulation::float32}}) {
    const auto topo = md::parse_topology(v.topo);
    const std::size_t P = topo.size(), n = 100003;
    const std::vector<std::size_t> ext = topo.resolve(P).extents();
    for (std::size_t seg : {std::size_t(0), std::size_t(16) << 10}) {
      md::options o;
      o.dimension_accumulation = v.per;
      o.accumulation = v.all;
      o.tune.segment_bytes = seg;
      md::cuda::local_world world(P);
      auto comms = md::cuda::bind(topo, world, o);
      std::vector<md::bfloat16> column(P), expect(n);
      for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t r = 0; r < P; ++r) column[r] = md::bfloat16(mdring_test::wide_value(9, r, i, 12));
        expect[i] = mdring_test::contract_result(column, ext, md::sum);
      }
      auto b = make_buffers<md::bfloat16>(
          P, n, true, [](std::size_t) { return false; },
          [](std::size_t r, std::size_t i) { return md::bfloat16(mdring_test::wide_value(9, r, i, 12)); });
      md::cuda::all_reduce(comms, b.sp, b.rp, n, md::sum);
      cuda_ok(cudaDeviceSynchronize(), "sync");
      for (std::size_t r = 0; r < P; ++r) {
        const auto got = b.recv[r]->download();
        std::size_t bad = 0;
        for (std::size_t i = 0; i < n; ++i) bad += std::memcmp(&got[i], &expect[i], sizeof(md::bfloat16)) != 0;
        check(bad == 0, v.topo, " segment_bytes ", seg, " rank ", r, ": ", bad, " elements differ from the contract");
      }
    }
  }
}

GPU_TEST("all_reduce: captured into a CUDA graph and replayed") {
  require_gpu();
  for (const char* text : {"nvlink:2 x infiniband:3", "nvlink:4"}) {
    for (std::size_t seg : {std::size_t(0), std::size_t(16) << 10}) {
      md::options o;
      o.tune.segment_bytes = seg;
      const auto topo = md::parse_topology(text);
      const std::size_t P = topo.size(), n = 100003;
      md::cuda::local_world world(P);
      auto comms = md::cuda::bind(topo, world, o);
      for (auto& c : comms) c.reserve<float>(n);
      for (bool per_rank : {false, true}) {
        auto b = make_buffers<float>(P, n, false, false, 7, opk::sum);
        streams_t ranks(P);
        auto origin = md::cuda::unique_stream::create();
        auto fork = md::cuda::unique_event::create();
        std::vector<md::cuda::unique_event> joins;
        for (std::size_t r = 0; r < P; ++r) joins.push_back(md::cuda::unique_event::create());
        cudaGraph_t graph = nullptr;
        cuda_ok(cudaStreamBeginCapture(origin.get(), cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
        if (per_rank) {
          cuda_ok(cudaEventRecord(fork.get(), origin.get()), "record");
          for (auto s : ranks.raw) cuda_ok(cudaStreamWaitEvent(s, fork.get(), 0), "wait");
          md::cuda::all_reduce(comms, b.sp, b.rp, n, md::sum, ranks.raw);
          for (std::size_t r = 0; r < P; ++r) {
            cuda_ok(cudaEventRecord(joins[r].get(), ranks.raw[r]), "record");
            cuda_ok(cudaStreamWaitEvent(origin.get(), joins[r].get(), 0), "wait");
          }
        } else {
          md::cuda::all_reduce(comms, b.sp, b.rp, n, md::sum, std::vector<cudaStream_t>{origin.get()});
        }
        cuda_ok(cudaStreamEndCapture(origin.get(), &graph), "cudaStreamEndCapture");
        cudaGraphExec_t exec = nullptr;
        cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
        for (u64 round = 0; round < 2; ++round) {
          // Fresh inputs each replay: the graph reads the buffers, not their values at capture.
          for (std::size_t r = 0; r < P; ++r) {
            for (std::size_t i = 0; i < n; ++i) b.host[r][i] = value<float>(round + 70, r, i, opk::sum);
            b.send[r]->upload(b.host[r]);
            b.recv[r]->poison();
          }
          cuda_ok(cudaGraphLaunch(exec, origin.get()), "cudaGraphLaunch");
          cuda_ok(cudaStreamSynchronize(origin.get()), "sync");
          check_results<float>(cat("graph \"", text, "\" segment_bytes ", seg,
                                   per_rank ? " per-rank streams" : " one stream", " replay ", round),
                               b, n, opk::sum);
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
      }
    }
  }
}

namespace {
// Keeps a stream busy for about `ns` nanoseconds, so that work another stream
// does not wait for runs first (a missing ordering then shows as a wrong result).
__global__ void spin_for(unsigned long long ns) {
  const unsigned long long t0 = clock64();
  while (clock64() - t0 < ns) {}
}
}  // namespace

GPU_TEST("all_reduce: calls on different streams are ordered by the communicator, no host synchronization between") {
  require_gpu();
  // In place, int32: after k calls every element is P^(k-1) times the sum of the
  // inputs, exactly (at most 6^4 x 600, well inside int32); a call that ran before the previous one ended (shared
  // scratch, slots, events) gives something else.
  md::options o;
  o.tune.segment_bytes = 16 << 10;  // pipelined: per-dimension streams and events
  const auto topo = md::parse_topology("nvlink:2 x infiniband:3");
  const std::size_t P = topo.size(), n = 100003;
  md::cuda::local_world world(P);
  auto comms = md::cuda::bind(topo, world, o);
  auto b = make_buffers<std::int32_t>(P, n, true, false, 5, opk::sum);
  streams_t a(P), c(P), one(1);
  const std::vector<cudaStream_t>* order[] = {&a.raw, &c.raw, &a.raw, &one.raw, &c.raw};
  std::int64_t factor = 1;
  for (std::size_t k = 0; k < std::size(order); ++k) {
    // A busy kernel ahead of calls 0, 2 and 4 only: calls 1 and 3, on other
    // streams, would run first if the communicator did not order them.
    if (k % 2 == 0) {
      for (cudaStream_t s : *order[k]) spin_for<<<1, 1, 0, s>>>(2000000);  // ~1 ms at 2 GHz
      cuda_ok(cudaGetLastError(), "spin_for");
    }
    md::cuda::all_reduce(comms, b.sp, b.rp, n, md::sum, *order[k]);
    if (k) factor *= std::int64_t(P);
  }
  for (cudaStream_t s : c.raw) cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");  // the last call's only
  std::vector<std::int64_t> sum(n, 0);
  for (std::size_t r = 0; r < P; ++r)
    for (std::size_t i = 0; i < n; ++i) sum[i] += b.host[r][i];
  for (std::size_t r = 0; r < P; ++r) {
    const auto got = b.recv[r]->download();
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += std::int64_t(got[i]) != factor * sum[i];
    check(bad == 0, "five calls over three sets of streams: rank ", r, " has ", bad, " elements that are not ", factor,
          " x the sum");
  }
}

GPU_TEST("all_reduce: a captured graph stays valid after a larger call grows the scratch") {
  require_gpu();
  const auto topo = md::parse_topology("nvlink:2 x infiniband:3");
  const std::size_t P = topo.size(), small = 4099, large = 1 << 20;
  md::cuda::local_world world(P);
  auto comms = md::cuda::bind(topo, world);
  for (auto& cm : comms) cm.reserve<float>(small);
  auto b = make_buffers<float>(P, small, false, false, 9, opk::sum);
  auto s = md::cuda::unique_stream::create();
  cudaGraph_t graph = nullptr;
  cuda_ok(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  md::cuda::all_reduce(comms, b.sp, b.rp, small, md::sum, std::vector<cudaStream_t>{s.get()});
  cuda_ok(cudaStreamEndCapture(s.get(), &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  // A larger call: the scratch grows; the captured block must stay allocated.
  one_call<float>(comms, opk::sum, md::sum, large, false, false, 10, {}, "the larger call");
  check(comms[0].calls().workspace().retired_blocks() == 1, "the block the graph uses was kept (retired_blocks ",
        comms[0].calls().workspace().retired_blocks(), ")");
  for (std::size_t r = 0; r < P; ++r) b.recv[r]->poison();
  cuda_ok(cudaGraphLaunch(exec, s.get()), "cudaGraphLaunch");
  cuda_ok(cudaStreamSynchronize(s.get()), "sync");
  check_results<float>("the graph replayed after the scratch grew", b, small, opk::sum);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

namespace {
template <class F>
void expect_invalid(const char* arg, const std::string& where, F&& f) {
  try {
    f();
    check(false, where, ": no exception");
  } catch (const md::invalid_argument& e) {
    check(e.argument() == arg, where, ": argument() is \"", e.argument(), "\", expected \"", arg, "\" (", e.what(),
          ")");
  } catch (const std::exception& e) {
    check(false, where, ": unexpected exception ", e.what());
  }
}
}  // namespace

GPU_TEST("all_reduce: errors name the argument") {
  require_gpu();
  expect_invalid("ranks", "local_world(0)", [] { md::cuda::local_world w(0); });
  md::cuda::local_world world(4);
  {
    md::options o;
    o.device_transports = {md::device_transport::nccl};
    expect_invalid("options.device_transports", "nccl on a local world",
                   [&] { md::cuda::bind(md::parse_topology("nvlink:4"), world, o); });
  }
  expect_invalid("topology", "4 ranks for nvlink:3", [&] { md::cuda::bind(md::parse_topology("nvlink:3"), world); });
  auto comms = md::cuda::bind(md::parse_topology("nvlink:2 x infiniband:2"), world);
  auto b = make_buffers<float>(4, 100, false, false, 1, opk::sum);
  expect_invalid("comm", "one rank's call on a local communicator",
                 [&] { md::cuda::all_reduce(comms[0], b.sp[0], b.rp[0], 100, md::sum); });
  auto sp = b.sp;
  sp[2] = nullptr;
  expect_invalid("sendbufs", "null sendbuf", [&] { md::cuda::all_reduce(comms, sp, b.rp, 100); });
  expect_invalid("recvbufs", "three recvbufs", [&] {
    std::vector<float*> rp(b.rp.begin(), b.rp.begin() + 3);
    md::cuda::all_reduce(comms, b.sp, rp, 100);
  });
  expect_invalid("streams", "two streams for four ranks", [&] {
    std::vector<cudaStream_t> two = {nullptr, nullptr};
    md::cuda::all_reduce(comms, b.sp, b.rp, 100, md::sum, two);
  });
  expect_invalid("recvbufs", "overlapping buffers", [&] {
    auto rp = b.rp;
    rp[1] = const_cast<float*>(b.sp[1]) + 1;
    md::cuda::all_reduce(comms, b.sp, rp, 50);
  });
  expect_invalid("comms", "communicators out of order", [&] {
    md::cuda::all_reduce(std::span(comms.data() + 1, 3), std::span<const float* const>(b.sp.data(), 3),
                         std::span<float* const>(b.rp.data(), 3), 10);
  });
  {
    // Scratch cannot grow during capture: reserve first.
    auto fresh = md::cuda::bind(md::parse_topology("nvlink:2 x infiniband:2"), world);
    auto s = md::cuda::unique_stream::create();
    cudaGraph_t g = nullptr;
    cuda_ok(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal), "begin");
    expect_invalid("stream", "growing scratch during capture",
                   [&] { md::cuda::all_reduce(fresh, b.sp, b.rp, 100, md::sum, std::vector<cudaStream_t>{s.get()}); });
    cudaStreamEndCapture(s.get(), &g);
    if (g) cudaGraphDestroy(g);
    (void)cudaGetLastError();
  }
  // A communicator stays usable after argument errors.
  one_call<float>(comms, opk::sum, md::sum, 100, false, false, 3, {}, "after errors");
}

int main(int argc, char** argv) { return gpu_test::run_all(argc, argv); }
