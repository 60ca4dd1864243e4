// mdring/rendezvous/store.hpp: how N processes find each other without MPI.
//
// A key-value store that every process of a job reaches: each publishes what the
// others need (its UCX worker address, its host, its process id) under a key of
// its own and reads theirs. The interface is small so that a user can implement
// it over what their launcher already has (PyTorch's c10d store, etcd, a file
// system); mdring ships one over TCP, hosted by rank 0 (tcp_store.hpp).
//
//   set(key, value)            publish (overwrites)
//   get(key, deadline)         the value, waiting until some process has set it;
//                              throws timeout_error naming the key at the deadline
//   wait(keys, deadline)       until every key is set (same error)
//
// Values are bytes (std::string holds any byte). Keys are short printable text.
// A store is used by one thread of a process at a time.
#pragma once

#include "../config.hpp"
#include "../error.hpp"

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// How processes without MPI find each other: a key-value store and the job's description.
namespace rendezvous {

using clock = std::chrono::steady_clock;  ///< the clock deadlines are on

/// A key-value store the processes of a job share (rendezvous/tcp_store.hpp is one).
class store {
public:
  virtual ~store() = default;
  /// Sets `key` to `value`.
  virtual void set(const std::string& key, const std::string& value) = 0;
  /// The value of `key`, waiting for it to be set until the deadline (then timeout_error: missing_key).
  virtual std::string get(const std::string& key, clock::time_point deadline) = 0;
  /// The default waits for the keys one after the other with get().
  virtual void wait(std::span<const std::string> keys, clock::time_point deadline) {
    for (const auto& k : keys) (void)get(k, deadline);
  }
  /// An atomic counter under `key` (decimal text, 0 when unset): the value after adding
  /// `delta`. mdring::grow needs it; the default refuses.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) {
    (void)delta;
    throw invalid_argument("store", "mdring::rendezvous::store: this store cannot add to a counter (\"" + key +
                                        "\"): mdring::grow needs a store with add()");
  }
};

/// The timeout_error that get() and wait() throw when `key` is not set in time.
inline timeout_error missing_key(const std::string& key, const std::string& where) {
  return timeout_error(where + ": the key \"" + key +
                           "\" was not set before the deadline (did every process start, with the same "
                           "WORLD_SIZE and MASTER_ADDR:MASTER_PORT?)",
                       "rendezvous", 0, "rendezvous", 0, 0);
}

/// Every key prefixed, so that several users of one store (two communicators, a
/// user's own keys) never meet.
class prefix_store final : public store {
public:
  /// Prefixes every key of `inner` with `prefix`.
  prefix_store(store& inner, std::string prefix) : inner_(inner), prefix_(std::move(prefix)) {}
  /// Sets prefix + key.
  void set(const std::string& key, const std::string& value) override { inner_.set(prefix_ + key, value); }
  /// Gets prefix + key.
  std::string get(const std::string& key, clock::time_point deadline) override {
    return inner_.get(prefix_ + key, deadline);
  }
  void wait(std::span<const std::string> keys, clock::time_point deadline) override {
    std::vector<std::string> k(keys.begin(), keys.end());
    for (auto& s : k) s = prefix_ + s;
    inner_.wait(k, deadline);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override { return inner_.add(prefix_ + key, delta); }

private:
  store& inner_;
  std::string prefix_;
};

/// Each of `size` processes contributes `mine` (rank `rank`); returns everyone's,
/// by rank. Collective over the store: every process calls it with the same `tag`,
/// which no earlier call used.
inline std::vector<std::string> all_gather(store& s, const std::string& tag, std::size_t rank, std::size_t size,
                                           const std::string& mine, clock::time_point deadline) {
  s.set(tag + "/" + std::to_string(rank), mine);
  std::vector<std::string> keys(size);
  for (std::size_t r = 0; r < size; ++r) keys[r] = tag + "/" + std::to_string(r);
  s.wait(keys, deadline);
  std::vector<std::string> all(size);
  for (std::size_t r = 0; r < size; ++r) all[r] = r == rank ? mine : s.get(keys[r], deadline);
  return all;
}

}  // namespace rendezvous

MDRING_NAMESPACE_END
