// tests/node_threads.hpp: threads standing in for the processes of a node, for the
// tests of the node segments (test_ipc_window, test_p2p_mailbox): an all_gather
// among them (the Exchange of node_window and ipc_window), a run of f(rank) on p
// threads, and a deadline some seconds from now.
#pragma once

#include <mdring/transport/transport.hpp>

#include <barrier>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>
#include <vector>

namespace node_threads {

struct exchange {
  std::size_t p;
  std::vector<std::vector<unsigned char>> cells;
  std::barrier<> sync;
  explicit exchange(std::size_t n) : p(n), cells(n), sync(std::ptrdiff_t(n)) {}
  struct member {
    exchange* x;
    std::size_t me;
    void all_gather(const void* mine, std::size_t bytes, void* all) {
      x->cells[me].assign(static_cast<const unsigned char*>(mine), static_cast<const unsigned char*>(mine) + bytes);
      x->sync.arrive_and_wait();
      for (std::size_t j = 0; j < x->p; ++j)
        std::memcpy(static_cast<char*>(all) + j * bytes, x->cells[j].data(), bytes);
      x->sync.arrive_and_wait();
    }
  };
};

template <class F>
void on_threads(std::size_t p, F&& f) {
  std::vector<std::thread> ts;
  for (std::size_t r = 0; r < p; ++r) ts.emplace_back([&, r] { f(r); });
  for (auto& t : ts) t.join();
}

inline mdring::deadline_clock::time_point in(double seconds) {
  return mdring::deadline_clock::now() + std::chrono::microseconds(long(seconds * 1e6));
}

}  // namespace node_threads
