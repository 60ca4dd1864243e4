// gloo_baseline.hpp: Gloo (the library behind PyTorch's CPU backend) over its TCP
// transport, on the same processes and buffers as mdring, for mdring-bench
// --baseline gloo. Needs libgloo (Debian: libgloo-dev; CMake package Gloo, target
// gloo).
//
//   gloo_baseline g(world.store(), rank, size, std::chrono::seconds(300));
//   g.all_reduce(buf, n, gloo_baseline::algo::halving_doubling);   // sum, in place
//   const double slowest = g.max_over_ranks(my_seconds);
//
// The rendezvous goes through mdring's store (rendezvous/store.hpp), under keys
// prefixed "gloo/". Gloo's classic all-reduce algorithms are objects built once
// for fixed pointers and a fixed count (they register those buffers with the
// transport, at slots taken from a counter of the context): all_reduce() builds
// one per (T, buffer, count, algorithm) and keeps it. Every rank must build the
// same objects in the same order, so whether a call finds its object must agree
// across ranks; a pointer does not (a freed buffer's address may come back on one
// rank and not on another): call release() on every rank before the buffers that
// the cached objects hold are freed.
//
// What Gloo's algorithms accept (gloo/allreduce_ring_chunked.h,
// allreduce_halving_doubling.h):
//   - count is an int and so is count * sizeof(T): at most 2 GiB - 1 bytes;
//   - ring_chunked: 2P chunks of at least 256 elements, double-buffered around
//     the ring, any P and any count (chunks past the end are empty); it allocates
//     two inboxes of the whole buffer's size;
//   - halving_doubling: recursive vector halving / distance doubling, 2 lg P
//     steps; any P (a non power of two runs as binary blocks, 8 + 4 etc., with
//     some imbalance), any count; it allocates a receive buffer of about the
//     buffer's size.
// Both reduce in place only (the result lands in the input).
#pragma once

#include <mdring/rendezvous/store.hpp>

#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <climits>
#include <cstddef>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeindex>
#include <typeinfo>
#include <vector>

#include <net/if.h>

// mdring's rendezvous store as Gloo's: Gloo's keys under "gloo/", Gloo's waits
// bounded by their timeout (or by `timeout` when Gloo gives none).
class gloo_store final : public gloo::rendezvous::Store {
public:
  gloo_store(mdring::rendezvous::store& inner, std::chrono::milliseconds timeout)
      : inner_(inner, "gloo/"), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    inner_.set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string v = inner_.get(key, deadline(timeout_));
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    inner_.wait(keys, deadline(timeout));
  }

private:
  mdring::rendezvous::clock::time_point deadline(std::chrono::milliseconds t) const {
    return mdring::rendezvous::clock::now() + (t > std::chrono::milliseconds::zero() ? t : timeout_);
  }

  mdring::rendezvous::prefix_store inner_;
  std::chrono::milliseconds timeout_;
};

class gloo_baseline {
public:
  enum class algo { ring_chunked, halving_doubling };

  static const char* name(algo a) { return a == algo::ring_chunked ? "ring_chunked" : "halving_doubling"; }

  // Collective over the `size` processes: connects every pair over TCP.
  // iface_or_host: a network interface (e.g. "eth0") or a host name or address
  // that this process's Gloo listens on.
  gloo_baseline(mdring::rendezvous::store& store, int rank, int size, std::chrono::milliseconds timeout,
                const std::string& iface_or_host = "127.0.0.1") {
    gloo::transport::tcp::attr attr;
    if (if_nametoindex(iface_or_host.c_str()) != 0) attr.iface = iface_or_host;
    else attr.hostname = iface_or_host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(timeout);
    gloo_store s(store, timeout);
    context->connectFullMesh(s, device);
    context_ = std::move(context);
    scalar_max_ = std::make_unique<gloo::AllreduceRing<double>>(context_, std::vector<double*>{&scalar_}, 1,
                                                                gloo::ReductionFunction<double>::max);
    scalar_sum_ = std::make_unique<gloo::AllreduceRing<double>>(context_, std::vector<double*>{&scalar_}, 1,
                                                                gloo::ReductionFunction<double>::sum);
    barrier_ = std::make_unique<gloo::BarrierAllToAll>(context_);
  }

  int rank() const noexcept { return context_->rank; }
  int size() const noexcept { return context_->size; }

  // Sum over ranks, in place on buf[0..n) (T: float or double).
  template <class T>
    requires std::is_same_v<T, float> || std::is_same_v<T, double>
  void all_reduce(T* buf, std::size_t n, algo a) {
    if (n > std::size_t(INT_MAX) / sizeof(T))
      throw std::length_error("gloo_baseline::all_reduce: Gloo's algorithms take at most INT_MAX bytes (" +
                              std::to_string(n * sizeof(T)) + " asked)");
    const key k{std::type_index(typeid(T)), buf, n, a};
    auto it = cache_.find(k);
    if (it == cache_.end()) {
      std::unique_ptr<gloo::Algorithm> made;
      const std::vector<T*> ptrs{buf};
      if (a == algo::ring_chunked) made = std::make_unique<gloo::AllreduceRingChunked<T>>(context_, ptrs, int(n));
      else made = std::make_unique<gloo::AllreduceHalvingDoubling<T>>(context_, ptrs, int(n));
      it = cache_.emplace(k, std::move(made)).first;
    }
    it->second->run();
  }

  // The largest and the sum of one value over ranks (e.g. the slowest rank's time).
  double max_over_ranks(double local) { return scalar(*scalar_max_, local); }
  double sum_over_ranks(double local) { return scalar(*scalar_sum_, local); }

  void barrier() { barrier_->run(); }

  // Collective: forgets the algorithms built by all_reduce(), after a barrier (no
  // rank still uses them). Call it before freeing the buffers they were built for.
  void release() {
    if (cache_.empty()) return;
    barrier();
    cache_.clear();
  }

private:
  using key = std::tuple<std::type_index, const void*, std::size_t, algo>;

  double scalar(gloo::Algorithm& alg, double local) {
    scalar_ = local;
    alg.run();
    return scalar_;
  }

  std::shared_ptr<gloo::Context> context_;
  double scalar_ = 0;
  std::unique_ptr<gloo::Algorithm> scalar_max_, scalar_sum_;
  std::unique_ptr<gloo::Algorithm> barrier_;
  std::map<key, std::unique_ptr<gloo::Algorithm>> cache_;
};
