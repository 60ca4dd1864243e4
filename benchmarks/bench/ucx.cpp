// benchmarks/bench/ucx.cpp: mdring-bench --transport ucx: processes without MPI on
// mdring's UCX transport (started by mdring-run or torchrun,
// mdring::ucx::world::from_env()), with the baseline gloo: Gloo over TCP
// (gloo_baseline.hpp), all_reduce of float or double, sum. Every collective is
// compiled here for the UCX transport.
#include "collectives.hpp"

#include <mdring/ucx.hpp>
#if MDRING_BENCH_WITH_GLOO
#include "../gloo_baseline.hpp"
#endif

#include <unistd.h>  // gethostname

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace mdring_bench {
namespace {

// The ranks' barrier and max over ranks (outside the timed region): 1-element
// all-reduces on a second mdring communicator of the measured topology (on one
// node: shared-memory flags, as tight as MPI_Barrier over shm); with --baseline
// gloo, Gloo's barrier first and Gloo's max.
template <class Comm>
world_ops world_of(Comm& flat) {
  world_ops w;
  w.rank = flat.rank();
  w.size = flat.size();
  w.barrier = [&flat] {
    int x = 0;
    md::all_reduce(flat, &x, 1, md::sum);
  };
  w.max = [&flat](double x) {
    md::all_reduce(flat, &x, 1, md::max);
    return x;
  };
  w.sum_int = [&flat](int x) {
    md::all_reduce(flat, &x, 1, md::sum);
    return x;
  };
  return w;
}
#if MDRING_BENCH_WITH_GLOO
world_ops world_of(gloo_baseline& g) {
  world_ops w;
  w.rank = std::size_t(g.rank());
  w.size = std::size_t(g.size());
  w.barrier = [&g] { g.barrier(); };
  w.max = [&g](double x) { return g.max_over_ranks(x); };
  w.sum_int = [&g](int x) { return int(g.sum_over_ranks(double(x))); };
  return w;
}

// Where this process's Gloo listens: GLOO_SOCKET_IFNAME's first interface (as
// PyTorch reads it), else the loopback when the job is on one node, else this
// host's name.
std::string gloo_host(const md::ucx::world& world) {
  if (const char* v = std::getenv("GLOO_SOCKET_IFNAME"); v && *v) {
    const std::string names = v;
    return names.substr(0, names.find(','));
  }
  if (world.layout().nodes <= 1) return "127.0.0.1";
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// --baseline gloo: Gloo's all-reduce algorithms, each a variant (sum, in place; out
// of place, the send buffer is first copied into the receive buffer, in the timed
// region, as a Gloo user would). Gloo is timed for all_reduce of float or double
// only (parse() refuses the rest).
template <class C, class T>
baseline_lib<T> gloo_all_reduce(const config& cfg, gloo_baseline& gloo) {
  using algo = gloo_baseline::algo;
  static constexpr algo algos[] = {algo::ring_chunked, algo::halving_doubling};
  baseline_lib<T> b;
  if constexpr (C::kind == md::collective::all_reduce && (std::is_same_v<T, float> || std::is_same_v<T, double>)) {
    for (algo a : algos) b.variants.emplace_back(gloo_baseline::name(a));
    b.run = [&cfg, &gloo](buffers<T>& rn, std::size_t v) {
      if (!cfg.inplace && rn.count) std::memcpy(rn.recv.data(), rn.send.data(), rn.count * sizeof(T));
      gloo.all_reduce(rn.recv.data(), rn.count, algos[v]);
    };
    b.release = [&gloo] { gloo.release(); };
  }
  return b;
}
#endif

int run_ucx_world(const config& cfg, const collective_bench& coll, const md::ucx::world& world) {
  const md::options opts = make_options(cfg);
  auto sync = md::bind(md::parse_topology(cfg.topology), world, opts);
  world_ops w = world_of(sync);
#if MDRING_BENCH_WITH_GLOO
  // Only with --baseline gloo: Gloo's TCP transport has a thread of its own, which
  // (with the processes bound to a core each, mdring-run --bind-to core) shares the
  // timed thread's core and cost mdring's 64 KiB all_reduce 100 us instead of 7.
  std::optional<gloo_baseline> gloo;
  if (cfg.baseline == "gloo") {
    gloo.emplace(world.store(), int(world.rank()), int(world.size()), opts.timeout, gloo_host(world));
    w = world_of(*gloo);
    // Gloo's barrier (TCP messages) lets the ranks go tens of microseconds apart,
    // which the first one out would count as its collective's time: the 1-element
    // all-reduce on `sync` follows it.
    w.barrier = [&gloo, &sync] {
      gloo->barrier();
      int x = 0;
      md::all_reduce(sync, &x, 1, md::sum);
    };
  }
#endif
  auto comm = md::bind(md::parse_topology(cfg.topology), world, opts);
  std::vector<result_row> rows;
  every_collective::with(cfg.op, [&](auto c) {
    rows = run_collective<decltype(c)>(cfg, comm, w, [&]<class C, class T>(C, T, auto) {
      baseline_lib<T> base;  // parse() allows only --baseline gloo or none
#if MDRING_BENCH_WITH_GLOO
      if (gloo) base = gloo_all_reduce<C, T>(cfg, *gloo);
#endif
      return base;
    });
  });
  if (world.rank() == 0)
    print_rows(cfg, rows, comm.topology().to_string(), world.size(), "ucx", coll.bus_factor(world.size()));
  w.barrier();  // every rank is done with the connections before they close
  return exit_status(rows);
}

}  // namespace

int run_ucx(const config& cfg, const collective_bench& coll) {
  const auto world = md::ucx::world::from_env();
  const int status = run_ucx_world(cfg, coll, world);  // its communicators are gone after it
  md::ucx::wait_to_leave(world);                       // rank 0 hosts the store: it leaves last
  return status;
}

}  // namespace mdring_bench
