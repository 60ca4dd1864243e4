// mdring/transport/mpi.hpp: MPI point-to-point, one communicator per dimension.
//
//   auto comm = mdring::bind(mdring::ring<mdring::shm, 2> * mdring::ring<mdring::infiniband>, MPI_COMM_WORLD);
//
// bind() (collective/bind_mpi.hpp) is collective over the MPI communicator. It
//   - duplicates it (mdring's traffic never mixes with yours) and sets
//     MPI_ERRORS_RETURN on the duplicate, so MPI failures become mpi_error;
//   - checks that every rank bound the same topology and algorithms (one small
//     MPI_Allreduce), and that the size fits the topology;
//   - splits one sub-communicator per non-trivial dimension whose rank is the
//     coordinate in that dimension;
//   - posts one receive on a control channel, through which a failing rank tells
//     the others to stop waiting (remote_error instead of a hang).
// Messages are MPI_Isend/MPI_Irecv of bytes. One longer than
// options::max_message_bytes (default 1 GiB, and MPI counts are int) is sent as
// floor(bytes / max) elements of a contiguous type of max bytes, plus the rest.
// Waits poll MPI_Testall and the control channel until the deadline.
//
// Under SimGrid SMPI (compiled with smpicxx; MDRING_SMPI, see docs/SCALING.md) the
// ranks are simulated actors of one process and time is simulated: waits block in
// MPI_Waitall instead (each MPI_Test would inject simulated time, and a wall-clock
// deadline means nothing there), so options::timeout and the control channel's
// early stop do not apply, and shared access is off (every byte is a message). A
// nonblocking call's cursor tests (MPI_Testall) instead of waiting
// (transport/mpi_requests.hpp).
//
// Destroy mdring communicators before MPI_Finalize (after it, their destructor
// frees nothing: MPI is gone).
#pragma once

#include "../config.hpp"
#include "../topology/runtime.hpp"
#include "../error.hpp"
#include "../fnv.hpp"
#include "../options.hpp"
#include "shared_access.hpp"
#include "transport.hpp"

#include "mpi_node.hpp"
#include "mpi_requests.hpp"

#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// The MPI transport (`mpi::transport`, include <mdring/mpi.hpp>).
namespace mpi {

/// The transport object of one rank in one bound communicator, over an MPI communicator.
class transport {
public:
  /// One dimension's ranks: a sub-communicator, and shared access where its ranks share a node.
  using channel = detail::channel;
  /// Peers' buffers are in other processes: read and write them with CMA.
  static constexpr bool same_address_space = false;
  using request = detail::mpi_request;  ///< one send or receive in flight

  static constexpr int control_tag = 1;  ///< the tag of control messages (failures) on control_comm()

  /// Collective over `comm`. `fingerprint` (topology and algorithms) must be the same on every rank.
  MDRING_COLD transport(MPI_Comm comm, const options& opts, const std::string& fingerprint)
      : max_bytes_(opts.max_message_bytes),
        shared_memory_(opts.shared_memory && !MDRING_SMPI),
        staging_((opts.tune.shared_staging_bytes + 63) / 64 * 64) {
    int init = 0;
    MPI_Initialized(&init);
    if (!init || detail::finalized())
      throw invalid_argument("comm", "mdring::bind: MPI is not initialized (call MPI_Init first) or already finalized");
    if (comm == MPI_COMM_NULL) throw invalid_argument("comm", "mdring::bind: comm is MPI_COMM_NULL");
    detail::check(MPI_Comm_dup(comm, &ctrl_), "MPI_Comm_dup");
    owned_.push_back(ctrl_);
    MPI_Comm_set_errhandler(ctrl_, MPI_ERRORS_RETURN);
    int r = 0, s = 0;
    MPI_Comm_rank(ctrl_, &r);
    MPI_Comm_size(ctrl_, &s);
    rank_ = std::size_t(r);
    size_ = std::size_t(s);
    // Every rank must bind the same topology, algorithms and schedule options.
    const std::uint64_t h = mdring::detail::fnv1a(fingerprint);
    std::uint64_t v[2] = {h, ~h}, m[2] = {0, 0};
    detail::check(MPI_Allreduce(v, m, 2, MPI_UINT64_T, MPI_MAX, ctrl_), "MPI_Allreduce");
    if (m[0] != ~m[1]) {
      free_all();
      throw topology_error("topology",
                           "mdring::bind: the ranks of the MPI communicator bound different topologies, "
                           "algorithms or options (this rank: \"" +
                               fingerprint + "\")");
    }
    detail::check(MPI_Type_contiguous(int(max_bytes_), MPI_BYTE, &chunk_), "MPI_Type_contiguous");
    detail::check(MPI_Type_commit(&chunk_), "MPI_Type_commit");
    detail::check(
        MPI_Irecv(control_buf_, sizeof control_buf_ - 1, MPI_CHAR, MPI_ANY_SOURCE, control_tag, ctrl_, &control_req_),
        "MPI_Irecv");
  }

  transport(const transport&) = delete;
  transport& operator=(const transport&) = delete;
  ~transport() { free_all(); }

  std::size_t size() const noexcept { return size_; }  ///< ranks in the communicator
  std::size_t rank() const noexcept { return rank_; }  ///< this rank
  std::string name() const { return "mpi"; }           ///< "mpi"
  /// Why mdring::shrink refuses over MPI (collective/shrink.hpp).
  static std::string shrink_refusal() {
#ifdef MPIX_ERR_PROC_FAILED
    return "this MPI has ULFM (MPIX_Comm_shrink), which mdring's MPI transport does not use yet";
#else
    return "it needs ULFM (MPIX_Comm_shrink), which this MPI does not have (Open MPI 5 and MPICH 4 do; Open MPI 4.1 "
           "does not)";
#endif
  }
  /// The duplicate communicator that carries control messages (failures).
  MPI_Comm control_comm() const noexcept { return ctrl_; }

  /// Collective: every rank calls it for the same dimensions in the same order.
  MDRING_COLD channel make_channel(std::size_t dim, std::span<const std::size_t> members, std::size_t my_index) {
    MPI_Comm sub = MPI_COMM_NULL;
    // The global rank of coordinate 0 names the ring uniquely.
    detail::check(MPI_Comm_split(ctrl_, int(members[0]), int(my_index), &sub), "MPI_Comm_split");
    owned_.push_back(sub);
    int r = 0, s = 0;
    MPI_Comm_rank(sub, &r);
    MPI_Comm_size(sub, &s);
    if (std::size_t(r) != my_index || std::size_t(s) != members.size())
      throw transport_error("mdring::mpi: the communicator of dimension " + std::to_string(dim) +
                                " came out with rank " + std::to_string(r) + " of " + std::to_string(s) +
                                ", expected " + std::to_string(my_index) + " of " + std::to_string(members.size()),
                            0);
    channel ch{sub, {members.begin(), members.end()}, {}};
    // oversubscribed() is collective over the whole communicator (cached after the
    // first call): every rank asks it here, for every channel, in the same order.
    if (shared_memory_) {
      detail::allgather_exchange ex{sub};
      if (ch.window.open(ex, ch.members, my_index, staging_, oversubscribed())) ++shared_channels_;
    }
    return ch;
  }

  /// Whether the channel has shared access (its ranks share a node).
  bool shared(const channel& ch) const noexcept { return ch.window.shared(); }
  /// The channel's access group.
  mdring::detail::access_group& group(channel& ch) noexcept { return ch.window.group(); }
  /// A peer's failure, polled by the shared stages while they wait.
  wait_status shared_failure() {
    if (auto f = poll_control()) return *f;
    return wait_status::ok();
  }
  ///@{
  /// Copies `bytes` from peer j's address space (at `remote`) into this process, and back.
  void read(channel& ch, std::size_t j, const void* remote, void* local, std::size_t bytes) {
    ch.window.read(mappings_, j, remote, local, bytes);
  }
  void write(channel& ch, std::size_t j, const void* local, void* remote, std::size_t bytes) {
    ch.window.write(mappings_, j, local, remote, bytes);
  }
  ///@}

  ///@{
  /// How many peers' node_alloc segments this process has mapped (zero-copy), and
  /// whether any dimension runs on shared access at all.
  std::size_t mapped_segments() const noexcept { return mappings_.count(); }
  bool shared_channels() const noexcept { return shared_channels_ != 0; }
  ///@}

  /// Where peer j's bytes [remote, remote + bytes) can be reached in this process
  /// (node_window::local_address), or nullptr.
  void* local_address(channel& ch, std::size_t j, const void* remote, std::size_t bytes) {
    return ch.window.local_address(mappings_, j, remote, bytes);
  }

  /// Posts a send or a receive of `bytes` to or from coordinate `peer` of the channel, with `tag`, into `rq`
  /// (transport/transport.hpp).
  ///@{
  void isend(channel& ch, const void* buf, std::size_t bytes, std::size_t peer, int tag, request& rq) {
    post(ch, const_cast<void*>(buf), bytes, peer, tag, rq, true);
  }
  void irecv(channel& ch, void* buf, std::size_t bytes, std::size_t peer, int tag, request& rq) {
    post(ch, buf, bytes, peer, tag, rq, false);
  }

  ///@}
  /// Waits until every request in rs completes, a peer fails or the deadline passes.
  wait_status wait_all(std::span<request> rs, deadline_clock::time_point deadline) {
#if MDRING_SMPI
    // A deadline already passed (a nonblocking call's cursor testing) tests once;
    // any other blocks (a blocked actor costs no simulated time).
    if (deadline == deadline_clock::time_point{}) return simulated_.test(rs, false, rank_);
    return simulated_.wait_all(rs, rank_);
#else
    return wait_until(rs, deadline, false);
#endif
  }

  /// Returns once at least one of the requests that are pending in rs has
  /// completed (at once when none is pending); complete() says which. It lets the
  /// pipelined all_reduce go on with whichever segment's step is done first.
  wait_status wait_any(std::span<request> rs, deadline_clock::time_point deadline) {
#if MDRING_SMPI
    if (deadline == deadline_clock::time_point{}) return simulated_.test(rs, true, rank_);
    return simulated_.wait_any(rs, rank_);
#else
    return wait_until(rs, deadline, true);
#endif
  }
  /// What the last wait saw (transport/transport.hpp).
  static bool complete(const request& rq) noexcept { return rq.n == 0; }

  /// MPI_Wtime: simulated seconds under SimGrid SMPI (calibration and measured
  /// planning time with it).
  double seconds() const noexcept { return MPI_Wtime(); }

  /// A progress thread may call MPI while the user's threads do only under
  /// MPI_THREAD_MULTIPLE (never under SMPI, whose ranks are simulated actors).
  bool background_progress() const noexcept { return thread_multiple(); }
  /// Whether MPI was initialized with MPI_THREAD_MULTIPLE.
  static bool thread_multiple() noexcept {
#if MDRING_SMPI
    return false;
#else
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    return level == MPI_THREAD_MULTIPLE;
#endif
  }

#if !MDRING_SMPI
  /// Completes rq if its messages are done (true); throws if one failed.
  bool test(request& rq) { return detail::test_request(rq, rank_); }
  /// Waits until all (or, with `any`, one) of the pending requests in rs complete, a peer fails or the deadline passes.
  wait_status wait_until(std::span<request> rs, deadline_clock::time_point deadline, bool any) {
    for (unsigned spin = 0;; ++spin) {
      bool all = true, some = false;
      for (auto& rq : rs) {
        if (rq.n == 0) continue;
        if (test(rq)) some = true;
        else all = false;
      }
      if (all || (any && some)) return wait_status::ok();
      if (auto f = poll_control()) return *f;
      if ((spin & 63) == 63) {
        if (deadline_clock::now() >= deadline) {
          for (std::size_t i = 0; i < rs.size(); ++i)
            if (rs[i].n) return wait_status{wait_status::timeout, i, 0, {}};
          return wait_status::ok();
        }
        std::this_thread::yield();
      }
    }
  }
#endif

  /// Cancels what is pending. Receives are cancelled and completed (so MPI will not
  /// write into the caller's buffers later); sends that cannot be cancelled are freed.
  void cancel_all(std::span<request> rs) noexcept {
    if (detail::finalized()) return;
    for (auto& rq : rs) {
      for (int i = 0; i < rq.n; ++i) {
        if (rq.r[i] == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&rq.r[i]);
        int flag = 0;
        const auto until = deadline_clock::now() + std::chrono::milliseconds(200);
        while (!flag && deadline_clock::now() < until) MPI_Test(&rq.r[i], &flag, MPI_STATUS_IGNORE);
        if (!flag) MPI_Request_free(&rq.r[i]);
      }
      rq.n = 0;
    }
  }

  /// Tells every other rank that this one failed; they stop waiting with remote_error.
  void abort(const std::string& reason) noexcept {
    if (aborted_ || detail::finalized()) return;
    aborted_ = true;
    try {
      reason_ = reason.substr(0, sizeof control_buf_ - 2);
    } catch (...) {}
    for (std::size_t r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      MPI_Request req;
      if (MPI_Isend(reason_.c_str(), int(reason_.size() + 1), MPI_CHAR, int(r), control_tag, ctrl_, &req) ==
          MPI_SUCCESS)
        MPI_Request_free(&req);
    }
  }

private:
  void post(channel& ch, void* buf, std::size_t bytes, std::size_t peer, int tag, request& rq, bool send) {
    auto op = [&](void* p, int count, MPI_Datatype type, MPI_Request* out) {
      const int rc = send ? MPI_Isend(p, count, type, int(peer), tag, ch.comm, out)
                          : MPI_Irecv(p, count, type, int(peer), tag, ch.comm, out);
      detail::check(rc, send ? "MPI_Isend" : "MPI_Irecv");
    };
    rq.n = 0;
    rq.recv = !send;
    rq.peer = ch.members[peer];
    rq.bytes = bytes;
    auto piece = [&](void* p, int count, MPI_Datatype type) {
      rq.expect[rq.n] = count;
      rq.type[rq.n] = type;
      op(p, count, type, &rq.r[rq.n]);
      ++rq.n;
    };
    if (bytes <= max_bytes_) {
      piece(buf, int(bytes), MPI_BYTE);
      return;
    }
    const std::size_t chunks = bytes / max_bytes_, rest = bytes % max_bytes_;
    if (chunks > std::size_t(INT_MAX))
      throw invalid_argument(
          "options.max_message_bytes",
          "mdring::mpi: a message of " + std::to_string(bytes) +
              " bytes needs more than INT_MAX pieces of options.max_message_bytes = " + std::to_string(max_bytes_));
    piece(buf, int(chunks), chunk_);
    if (rest) piece(static_cast<char*>(buf) + chunks * max_bytes_, int(rest), MPI_BYTE);
  }

  // More processes of this communicator on this node than the node has cores.
  bool oversubscribed() {
    if (node_ranks_ == 0) {
      MPI_Comm node = MPI_COMM_NULL;
      int n = 1;
      if (MPI_Comm_split_type(ctrl_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &n);
        MPI_Comm_free(&node);
      }
      node_ranks_ = std::size_t(n);
    }
    return mdring::detail::oversubscribed(node_ranks_);
  }

  std::optional<wait_status> poll_control() {
    if (failed_) return failed_status();
    if (control_req_ == MPI_REQUEST_NULL) return std::nullopt;
    int flag = 0;
    MPI_Status st;
    MPI_Test(&control_req_, &flag, &st);
    if (!flag) return std::nullopt;
    failed_ = true;
    control_buf_[sizeof control_buf_ - 1] = '\0';
    const wait_status got = received_failure(std::size_t(st.MPI_SOURCE), control_buf_);
    failed_rank_ = got.failed_rank;
    failed_reason_ = got.reason;
    return failed_status();
  }
  wait_status failed_status() const { return wait_status{wait_status::peer_failed, 0, failed_rank_, failed_reason_}; }

  void free_all() noexcept {
    mappings_.release();
    if (detail::finalized()) return;
    if (control_req_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&control_req_);
      MPI_Wait(&control_req_, MPI_STATUS_IGNORE);
    }
    if (chunk_ != MPI_DATATYPE_NULL) MPI_Type_free(&chunk_);
    for (auto& c : owned_)
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
    owned_.clear();
  }

  MPI_Comm ctrl_ = MPI_COMM_NULL;
  std::vector<MPI_Comm> owned_;
  mdring::detail::segment_mappings mappings_;
  std::size_t shared_channels_ = 0;
  std::size_t node_ranks_ = 0;  // oversubscribed()'s, once known
  std::size_t rank_ = 0, size_ = 0;
  std::size_t max_bytes_;
  bool shared_memory_ = true;
  std::size_t staging_ = 0;
  MPI_Datatype chunk_ = MPI_DATATYPE_NULL;
  MPI_Request control_req_ = MPI_REQUEST_NULL;
  char control_buf_[512] = {};
  bool aborted_ = false;
  std::string reason_;
  bool failed_ = false;
  std::size_t failed_rank_ = 0;
  std::string failed_reason_;
#if MDRING_SMPI
  detail::simulated_waits simulated_;
#endif
};

}  // namespace mpi

static_assert(transport<mpi::transport>);
static_assert(waits_for_any<mpi::transport>);
static_assert(shared_access_transport<mpi::transport>);
static_assert(maps_peer_memory<mpi::transport>);
static_assert(reports_background_progress<mpi::transport>);
static_assert(has_clock<mpi::transport>);

MDRING_NAMESPACE_END
