// mdring/rendezvous/launch.hpp: a job as its launcher describes it (mdring-run,
// torchrun), with no MPI: this process's rank, the job's size, and the job's store.
//
//   auto job = mdring::rendezvous::launched_job::from_env("my_program");
//   auto comm = mdring::cuda::bind(topo, mdring::cuda::store_world{*job.store, job.rank, job.size});
//   ...
//   job.leave();   // at the end, every rank: rank 0, where it hosts the store, goes last
//
// from_env() reads, as torchrun sets them (MDRING_* names take precedence):
//   RANK, WORLD_SIZE                  this process and the job's size
//   LOCAL_WORLD_SIZE                  processes on its node (0 when unset)
//   MASTER_ADDR, MASTER_PORT          where rank 0 hosts the store (MDRING_STORE_PORT
//                                     overrides the port: torch's own store may hold it)
//   MDRING_SECRET                     the job's secret, which every connection to the
//                                     store must present (mdring-run generates one)
//   MDRING_STORE_HOSTED=1             the launcher hosts the store (mdring-run does, on
//                                     MDRING_STORE_PORT):
//                                     rank 0 is a client of it like the others, so the
//                                     store outlives rank 0
// A single process (WORLD_SIZE 1 or unset) needs none of them and gets a store in
// its own memory. Errors name the variable (invalid_argument).
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "store.hpp"
#include "tcp_store.hpp"

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

MDRING_NAMESPACE_BEGIN

namespace rendezvous {

/// A store inside one process (a job of one, or tests).
class memory_store final : public store {
public:
  void set(const std::string& key, const std::string& value) override {
    std::lock_guard l(m_);
    kv_[key] = value;
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    std::lock_guard l(m_);
    auto& v = kv_[key];
    v = std::to_string(std::atoll(v.c_str()) + delta);
    return std::atoll(v.c_str());
  }
  std::string get(const std::string& key, clock::time_point deadline) override {
    std::unique_lock l(m_);
    for (;;) {
      if (auto it = kv_.find(key); it != kv_.end()) return it->second;
      if (clock::now() >= deadline) throw missing_key(key, "mdring::rendezvous::memory_store");
      l.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      l.lock();
    }
  }

private:
  std::mutex m_;
  std::map<std::string, std::string> kv_;
};

namespace detail {
inline const char* env(const char* mdring_name, const char* torch_name) {
  if (const char* v = std::getenv(mdring_name); v && *v) return v;
  if (torch_name)
    if (const char* v = std::getenv(torch_name); v && *v) return v;
  return nullptr;
}

// A non-negative integer from the environment, or `fallback` when unset.
inline std::size_t env_count(const char* mdring_name, const char* torch_name, std::size_t fallback,
                             const std::string& fn) {
  const char* v = env(mdring_name, torch_name);
  if (!v) return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (*end || x < 0)
    throw invalid_argument(
        torch_name ? torch_name : mdring_name,
        fn + ": " + (torch_name ? torch_name : mdring_name) + " must be a non-negative integer, not \"" + v + "\"");
  return std::size_t(x);
}
}  // namespace detail

/// The job a launcher started this process in (from_env()): its rank, size, processes on this node, and the job's
/// store.
struct launched_job {
  /// This process's rank, the job's processes, and those on this node (0: not told).
  ///@{
  std::size_t rank = 0, size = 1, local_size = 0;
  ///@}
  std::unique_ptr<store> job_store;  ///< rank 0 or the launcher serves it (tcp_store), or in memory for a job of one
  bool store_hosted = false;         ///< the launcher hosts the store (MDRING_STORE_HOSTED=1), not rank 0
  store* store_ptr() const noexcept { return job_store.get(); }  ///< job_store, or nullptr

  /// From the launcher's environment (see the top); `fn` names the caller in errors.
  static launched_job from_env(const std::string& fn,
                               std::chrono::milliseconds timeout = mdring::detail::default_timeout()) {
    launched_job j;
    j.size = detail::env_count("MDRING_WORLD_SIZE", "WORLD_SIZE", 1, fn);
    j.rank = detail::env_count("MDRING_RANK", "RANK", 0, fn);
    if (j.size == 0) throw invalid_argument("WORLD_SIZE", fn + ": WORLD_SIZE must be at least 1");
    if (j.rank >= j.size)
      throw invalid_argument(
          "RANK", fn + ": RANK " + std::to_string(j.rank) + " is not below WORLD_SIZE " + std::to_string(j.size));
    j.local_size = detail::env_count("MDRING_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE", 0, fn);
    if (j.size == 1) {
      j.local_size = 1;
      j.job_store = std::make_unique<memory_store>();
      return j;
    }
    const char* hosted = std::getenv("MDRING_STORE_HOSTED");
    j.store_hosted = hosted && std::string(hosted) == "1";
    j.job_store =
        std::make_unique<tcp_store>(j.rank == 0 && !j.store_hosted, store_options_from_env(fn, timeout, j.size));
    return j;
  }

  /// The job's store as a client only (a process that joins a running job: mdring::ucx::join_from_env; mdring-run
  /// --replace starts one with MDRING_JOIN=1), from MASTER_ADDR, MASTER_PORT and MDRING_SECRET.
  static std::unique_ptr<store> client_from_env(const std::string& fn,
                                                std::chrono::milliseconds timeout = mdring::detail::default_timeout()) {
    return std::make_unique<tcp_store>(false, store_options_from_env(fn, timeout, 0));
  }

private:
  // Where the store is and its secret (size: the job's, for the message; 0: joining).
  static tcp_store_options store_options_from_env(const std::string& fn, std::chrono::milliseconds timeout,
                                                  std::size_t size) {
    const char* addr = detail::env("MDRING_MASTER_ADDR", "MASTER_ADDR");
    const char* port = detail::env("MDRING_STORE_PORT", "MASTER_PORT");
    const char* secret = std::getenv("MDRING_SECRET");
    if (!port)
      throw invalid_argument("MASTER_PORT", fn + ": " +
                                                (size ? "WORLD_SIZE is " + std::to_string(size) + " but " : "") +
                                                "MASTER_PORT is not set: start the processes with mdring-run "
                                                "or torchrun, or set MASTER_ADDR and MASTER_PORT");
    if (!secret || !*secret)
      throw invalid_argument(
          "MDRING_SECRET", fn + ": MDRING_SECRET is not set: mdring-run sets it; with another "
                                "launcher, export the same secret to every process (e.g. MDRING_SECRET=$(openssl rand "
                                "-hex 16)); the store refuses connections without it");
    tcp_store_options o;
    o.host = addr ? addr : "127.0.0.1";
    const std::size_t p = detail::env_count("MDRING_STORE_PORT", "MASTER_PORT", 0, fn);
    if (p == 0 || p > 65535)
      throw invalid_argument("MASTER_PORT", fn + ": MASTER_PORT must be a TCP port, not \"" + std::string(port) + "\"");
    o.port = std::uint16_t(p);
    o.secret = secret;
    o.connect_timeout = timeout;
    return o;
  }

public:
  /// Every rank, at the end: where rank 0 hosts the store, it returns only once every
  /// other rank has said it is done with it (else a rank still reading the last
  /// keys loses its connection when rank 0's process ends); where the launcher hosts
  /// it, at once.
  void leave(const std::string& tag = "mdring/leave",
             std::chrono::milliseconds timeout = std::chrono::minutes(1)) const {
    if (size <= 1 || !job_store || store_hosted) return;
    const auto deadline = clock::now() + timeout;
    if (rank != 0) return job_store->set(tag + "/" + std::to_string(rank), "1");
    for (std::size_t r = 1; r < size; ++r) (void)job_store->get(tag + "/" + std::to_string(r), deadline);
  }
};

}  // namespace rendezvous

MDRING_NAMESPACE_END
