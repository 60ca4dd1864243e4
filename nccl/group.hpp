// nccl/group.hpp: ncclGroupStart/ncclGroupEnd on one thread.
//
// Between the outermost ncclGroupStart and its ncclGroupEnd (groups nest: only
// the outermost end issues) the calls are queued, checked but not issued. At the
// end they are issued together, sorted by communicator (in the order each first
// appeared): each communicator's collectives in the order they were called, and
// its sends and receives by peer, each peer's in call order, so that the k-th send
// to a peer meets that peer's k-th receive from this rank, as in NCCL. A call
// outside a group is a group of its own. A call that fails its checks inside a
// group fails at once and discards the whole group at ncclGroupEnd, which returns
// that call's result.
#pragma once

#include "errors.hpp"

#include <nccl.h>

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mdring_nccl {

enum class call_kind : unsigned char { all_reduce, broadcast, reduce, all_gather, reduce_scatter, send, recv };

inline bool is_p2p(call_kind k) noexcept { return k == call_kind::send || k == call_kind::recv; }

// A group's calls on one communicator, in the order they are issued.
template <class Call>
struct comm_batch {
  const void* comm = nullptr;
  std::vector<Call> collectives;                                       // call order
  std::map<int, std::pair<std::vector<Call>, std::vector<Call>>> p2p;  // peer -> (sends, recvs), call order
};

// A batch's sends to rank `me` itself that its receives from itself do not match one
// for one: why (a send to itself needs its receive in the same group), else empty;
// `others`: whether the batch holds other work (collectives, messages to peers),
// which its peers then wait on.
template <class Call>
std::string unmatched_self(const comm_batch<Call>& b, int me, bool& others) {
  std::size_t to_self = 0, from_self = 0;
  others = !b.collectives.empty();
  for (const auto& [peer, lists] : b.p2p)
    if (peer == me) to_self = lists.first.size(), from_self = lists.second.size();
    else others = true;
  if (to_self == from_self) return {};
  return "rank " + std::to_string(me) + " sends to itself " + std::to_string(to_self) +
         " times but receives from itself " + std::to_string(from_self) +
         " times in one group (a send to itself needs its receive in the same group)";
}

// Call: anything with `const void* comm`, `call_kind kind` and `int peer` (send, recv).
template <class Call>
class group_queue {
public:
  bool active() const noexcept { return depth_ > 0; }
  int depth() const noexcept { return depth_; }

  void start() noexcept { ++depth_; }

  // A checked call: queued inside a group; outside, the caller issues it alone.
  void add(Call c) { calls_.push_back(std::move(c)); }

  // A call inside the group failed its checks (its result already returned):
  // the group is discarded at its end, which returns `r`.
  void poison(ncclResult_t r) {
    if (error_ == ncclSuccess) error_ = r, error_text_ = last_error();
  }

  // ncclGroupEnd: ncclInvalidUsage without a start; at an inner end, nothing
  // issued (batches empty); at the outermost one, the batches to issue, or the
  // first failure of a call inside (the group discarded).
  ncclResult_t end(std::vector<comm_batch<Call>>& batches) {
    batches.clear();
    if (depth_ == 0) return fail(ncclInvalidUsage, "ncclGroupEnd", "no ncclGroupStart before it on this thread");
    if (--depth_ > 0) return ncclSuccess;
    std::vector<Call> calls = std::move(calls_);
    calls_.clear();
    const ncclResult_t error = std::exchange(error_, ncclSuccess);
    if (error != ncclSuccess)
      return fail(error, "ncclGroupEnd",
                  "the group was discarded (" + std::to_string(calls.size()) +
                      " calls not issued) because a call in it failed: " + std::exchange(error_text_, {}));
    for (Call& c : calls) {
      comm_batch<Call>* b = nullptr;
      for (auto& x : batches)
        if (x.comm == c.comm) b = &x;
      if (!b) b = &batches.emplace_back(), b->comm = c.comm;
      if (!is_p2p(c.kind)) b->collectives.push_back(std::move(c));
      else {
        auto& lists = b->p2p[c.peer];
        (c.kind == call_kind::send ? lists.first : lists.second).push_back(std::move(c));
      }
    }
    return ncclSuccess;
  }

private:
  int depth_ = 0;
  std::vector<Call> calls_;
  ncclResult_t error_ = ncclSuccess;
  std::string error_text_;
};

}  // namespace mdring_nccl
