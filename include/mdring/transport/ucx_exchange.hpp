// mdring/transport/ucx_exchange.hpp: the UCX transport's exchanges and endpoints'
// end: the node window's exchange, closing endpoints, and the messages of
// mdring::shrink (transport/transport.hpp survives_failures; collective/shrink.hpp).
//
// After a failure the UCX transport's waits end at once (its control message, a
// failed endpoint), so shrink's agreement has messages of its own: kind
// `survive` in the tag, sent from a copy that lives until UCX is done with it
// (never waiting for the peer), received by probing for the exact tag, so that
// nothing a failed collective left pending is touched. The survivors' new
// transport finds their workers' addresses with them (all_gather_among), not
// through the store, whose host (rank 0) may be the process that died.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "transport.hpp"
#include "ucx_requests.hpp"

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace ucx {

namespace detail {

// The node window's exchange (node_window.hpp): every member of a channel sends its
// bytes to every other, as setup messages. T: the UCX transport, whose friend it is.
template <class T>
struct window_exchange {
  T& t;
  typename T::channel& ch;
  std::size_t me;
  bool tolerant = false;  // a failure leaves `failed` set instead of throwing
  bool failed = false;
  void all_gather(const void* mine, std::size_t bytes, void* all) {
    const std::size_t p = ch.members.size();
    auto* out = static_cast<char*>(all);
    std::memcpy(out + me * bytes, mine, bytes);
    std::vector<typename T::request> rs(2 * p);
    const std::uint32_t tag = t.stamped(int(t.setup_seq_++));
    try {
      for (std::size_t j = 0; j < p; ++j) {
        if (j == me) continue;
        t.post(ch.members[j], detail::make_tag(detail::setup, ch.id, ch.members[j], tag), out + j * bytes, bytes,
               rs[2 * j], false);
        t.post(ch.members[j], detail::make_tag(detail::setup, ch.id, t.rank_, tag), const_cast<void*>(mine), bytes,
               rs[2 * j + 1], true);
      }
    } catch (const transport_error&) {  // a send to a member that is gone failed at once
      t.cancel_all(rs);
      if (tolerant) return void(failed = true);
      throw;
    }
    const auto st = t.wait_until(rs, deadline_clock::now() + t.timeout_, false);
    if (st.kind != wait_status::done) {
      t.cancel_all(rs);
      if (tolerant) return void(failed = true);  // the window is not used; the first call fails
      throw transport_error(
          "mdring::ucx: setting up shared access with rank " +
              std::to_string(st.kind == wait_status::timeout ? ch.members[st.index / 2] : st.failed_rank) +
              " failed: " + (st.kind == wait_status::timeout ? "no answer before the deadline" : st.reason),
          0);
    }
  }
};

// Closes every endpoint (flushing what is queued unless forced or the peer failed),
// for at most 1 s; whether all closed in time.
inline bool close_endpoints(ucp_worker_h w, std::vector<ucp_ep_h>& eps, const std::vector<char>& failed,
                            bool force) noexcept {
  std::vector<void*> closing;
  for (std::size_t r = 0; r < eps.size(); ++r) {
    if (!eps[r]) continue;
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = force || failed[r] ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t sp = ucp_ep_close_nbx(eps[r], &prm);
    if (UCS_PTR_IS_PTR(sp)) closing.push_back(sp);
    eps[r] = nullptr;
  }
  const auto until = deadline_clock::now() + std::chrono::seconds(1);
  bool closed = true;
  for (void* r : closing) {
    while (ucp_request_check_status(r) == UCS_INPROGRESS && deadline_clock::now() < until) ucp_worker_progress(w);
    closed = closed && ucp_request_check_status(r) != UCS_INPROGRESS;
    ucp_request_free(r);
  }
  return closed;
}

// Shrink's messages in flight on one worker, and taking those that arrived.
class survivor_messages {
public:
  survivor_messages() = default;
  survivor_messages(const survivor_messages&) = delete;
  survivor_messages& operator=(const survivor_messages&) = delete;
  ~survivor_messages() { drop(); }

  // Sends `bytes` (copied) on ep; a failure to send is the peer's failure, which
  // the receiving side sees as its absence.
  void send(ucp_ep_h ep, ucp_tag_t tag, const std::string& bytes) {
    reap();
    auto buf = std::make_unique<std::string>(bytes);
    ucp_request_param_t prm{};
    ucs_status_ptr_t sp = ucp_tag_send_nbx(ep, buf->data(), buf->size(), tag, &prm);
    if (UCS_PTR_IS_PTR(sp)) sends_.push_back({sp, std::move(buf)});
  }

  // The next message with exactly `tag` that has arrived, if any.
  std::optional<std::string> take(ucp_worker_h w, ucp_tag_t tag) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h msg = ucp_tag_probe_nb(w, tag, full_mask, 1, &info);
    if (!msg) return std::nullopt;
    std::string out(info.length, '\0');
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    ucs_status_ptr_t sp = ucp_tag_msg_recv_nbx(w, out.data(), out.size(), msg, &prm);
    if (UCS_PTR_IS_ERR(sp)) return std::nullopt;
    const auto until = deadline_clock::now() + std::chrono::seconds(1);
    while (ucp_request_check_status(sp) == UCS_INPROGRESS && deadline_clock::now() < until) ucp_worker_progress(w);
    const bool done = ucp_request_check_status(sp) == UCS_OK;
    if (ucp_request_check_status(sp) == UCS_INPROGRESS) ucp_request_cancel(w, sp);
    ucp_request_free(sp);
    if (!done) return std::nullopt;
    return out;
  }

  // The next message with `tag`, polling until it comes, gone() says the sender
  // is, or the deadline passes.
  template <class Gone>
  survivor_message receive(ucp_worker_h w, ucp_tag_t tag, deadline_clock::time_point deadline, Gone gone) {
    for (unsigned spin = 1;; ++spin) {
      ucp_worker_progress(w);
      if (auto m = take(w, tag)) return {survivor_message::got, std::move(*m)};
      if ((spin & 15) == 0 && gone()) return {survivor_message::gone, {}};
      if ((spin & 15) == 0 && deadline_clock::now() >= deadline) return {survivor_message::timeout, {}};
      if ((spin & 255) == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // Before the worker's endpoints close: up to `limit` for the sends to finish.
  void finish(ucp_worker_h w, std::chrono::milliseconds limit) noexcept {
    const auto until = deadline_clock::now() + limit;
    for (auto& s : sends_)
      while (ucp_request_check_status(s.r) == UCS_INPROGRESS && deadline_clock::now() < until) ucp_worker_progress(w);
    drop();
  }

private:
  struct in_flight {
    void* r = nullptr;
    std::unique_ptr<std::string> buf;  // what UCX reads until r completes
  };
  void reap() noexcept {
    std::erase_if(sends_, [](in_flight& s) {
      if (ucp_request_check_status(s.r) == UCS_INPROGRESS) return false;
      ucp_request_free(s.r);
      return true;
    });
  }
  // Releases the requests; a buffer UCX may still read is kept (leaked) rather than freed.
  void drop() noexcept {
    for (auto& s : sends_) {
      if (ucp_request_check_status(s.r) == UCS_INPROGRESS) (void)s.buf.release();
      ucp_request_free(s.r);
    }
    sends_.clear();
  }
  std::vector<in_flight> sends_;
};

}  // namespace detail

/// Each of `members` (ranks of t) contributes its string (this rank is
/// members[me]); returns them by index, "" for a member that is gone or silent
/// until the deadline. Over survivor messages with `tag`.
template <class T>
std::vector<std::string> all_gather_among(T& t, std::span<const std::size_t> members, std::size_t me,
                                          const std::string& mine, std::uint32_t tag,
                                          deadline_clock::time_point deadline) {
  for (std::size_t i = 0; i < members.size(); ++i)
    if (i != me) t.survivor_send(members[i], mine, tag);
  std::vector<std::string> all(members.size());
  all[me] = mine;
  for (std::size_t i = 0; i < members.size(); ++i)
    if (i != me)
      if (auto m = t.survivor_recv(members[i], tag, deadline); m.kind == survivor_message::got) all[i] = m.bytes;
  return all;
}

}  // namespace ucx

MDRING_NAMESPACE_END
