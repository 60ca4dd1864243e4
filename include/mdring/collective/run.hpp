// mdring/collective/run.hpp: what every collective does around its stages.
//
//   1. compile time: T is trivially copyable, Op can reduce T, and a non-commutative
//      op meets no ring-only dimension (static_assert, naming the link);
//   2. run time, locally: the communicator is usable; buffers are not null when
//      count > 0; send and receive buffers either coincide (in place) or do not
//      overlap at all; root is a rank; the op fits the chosen algorithms;
//   3. with check_level::collective: the ranks agree on count, type, op and root
//      (one small all-reduce); a disagreement or any rank's bad argument makes
//      every rank throw the same invalid_argument, and the communicator survives;
//   4. otherwise a rank with a bad argument tells its peers (so no rank waits for
//      it), marks the communicator unusable and throws;
//   5. the stages; any failure marks the communicator unusable on this rank and is
//      announced to the peers, which stop waiting with remote_error.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../fnv.hpp"
#include "../reduce/ops.hpp"
#include "../reduce/types.hpp"
#include "communicator.hpp"
#include "../executor/host/engine.hpp"
#include "../executor/progress.hpp"
#include "request.hpp"

#include <cstdint>
#include <cstdio>
#include <iterator>
#include <memory>
#include <memory_resource>
#include <optional>
#include <string>
#include <thread>

MDRING_NAMESPACE_BEGIN

namespace detail {

template <class C, class T, class Op>
constexpr void static_checks() {
  static_assert(std::is_trivially_copyable_v<T>, "mdring: the element type must be trivially copyable");
  static_assert(reduction_for<Op, T>,
                "mdring: the op cannot reduce this element type. Built-in ops (sum, prod, min, max, avg) take "
                "arithmetic types, mdring::half and mdring::bfloat16; a user op must be callable as T(T, T).");
  using topo = typename C::topology_type;
  if constexpr (!op_traits<Op>::commutative && has_ring_only_dimension<topo>())
    non_commutative_op_on_ring_dimension<typename first_ring_only_link<topo>::type, Op>();
}

// A local argument error, before any message: which argument, and what is wrong.
struct arg_error {
  std::string argument;
  std::string what;
};

// The arguments a rank can get wrong, numbered for the collective agreement, so
// that every rank names the same one.
inline constexpr const char* argument_names[] = {"sendbuf", "recvbuf", "buf", "root", "op", "count"};

inline int argument_code(const std::string& argument) {
  for (int i = 0; i < int(std::size(argument_names)); ++i)
    if (argument == argument_names[i]) return i + 1;
  return int(std::size(argument_names));  // "count"
}

// A stable id of a type (element type or op), without RTTI: a hash of the
// compiler's spelling of the type. Ranks of one program get the same id.
template <class T>
std::int64_t type_id() {
#if defined(_MSC_VER)
  const char* s = __FUNCSIG__;
#else
  const char* s = __PRETTY_FUNCTION__;
#endif
  return std::int64_t(fnv1a(s) >> 2);
}

inline std::uintptr_t addr(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }

// [a, a+an) and [b, b+bn) in bytes overlap.
inline bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) noexcept {
  if (!an || !bn) return false;
  return addr(a) < addr(b) + bn && addr(b) < addr(a) + an;
}

inline std::string ptr_string(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

template <class Comm>
std::optional<arg_error> check_op(Comm& comm, bool commutative, const char* name) {
  if (commutative) return std::nullopt;
  const auto& written = comm.topology();
  const auto& requested = comm.get_options().algorithms;
  for (std::size_t d = 0; d < written.ndims(); ++d) {
    const auto& dim = written.dim(d);
    if (dim.extent < 2) continue;
    if (d < requested.size() && (requested[d] == algorithm::ring || requested[d] == algorithm::halving_doubling ||
                                 requested[d] == algorithm::recursive_doubling))
      return arg_error{"op", std::string("mdring::") + name + ": options.algorithms[" + std::to_string(d) + "] is " +
                                 std::string(to_string(requested[d])) +
                                 ", but the op is not commutative; only the direct algorithm combines in "
                                 "rank order"};
    if (!dim.link.fully_connected)
      return arg_error{
          "op", std::string("mdring::") + name + ": the op is not commutative, but dimension " + std::to_string(d) +
                    " (" + dim.link.name +
                    ") is ring-only (its link is not fully connected); a ring folds blocks in rotated order"};
  }
  return std::nullopt;
}

[[noreturn]] inline void throw_unusable(const std::string& name, const std::string& failure) {
  throw communicator_error("mdring::" + name + ": the communicator is unusable after an earlier error (" + failure +
                           "); bind a new one");
}

// Steps 2 and 4, when the call is issued. A local error ends the calls in flight
// first (they complete, or fail, in order), then breaks the communicator and
// tells the peers. Returns the error left for step 3 (collective checks).
template <class Comm>
std::optional<arg_error> issue_checks(Comm& comm, const char* name, bool commutative, std::optional<arg_error> err) {
  if (!comm.usable()) throw_unusable(name, comm.failure());
  if (!err) err = check_op(comm, commutative, name);
  if (err && comm.get_options().checks != check_level::collective) {
    detail::internals_of(comm).executor().drain();
    detail::internals_of(comm).mark_broken(err->what);
    comm.get_transport().abort(err->what);
    throw invalid_argument(err->argument, err->what);
  }
  return err;
}

// The arguments every rank must agree on under check_level::collective, as one
// small all-reduce (max) of pairs (x, -x), which gives the maximum and minus the
// minimum of each; afterwards every rank knows whether all agree and who had a bad
// argument (agreement() throws what that means).
struct agreement_values {
  std::int64_t v[9] = {};
};
inline agreement_values agreement_of(std::size_t rank, const std::optional<arg_error>& err, std::int64_t count,
                                     std::int64_t type_id, std::int64_t op_id, std::int64_t root) {
  return {{err ? std::int64_t(rank + 1) * 16 + argument_code(err->argument) : 0, count, -count, type_id, -type_id,
           op_id, -op_id, root, -root}};
}
inline void agreement(const char* name, const std::optional<arg_error>& err, const agreement_values& a);

// Steps 3 and 5 of a call, when its turn comes: at once for a blocking call with
// nothing in flight, else when the calls before it have completed. A call is
// moved on by advance() (executor/progress.hpp): the agreement's all-reduce
// (check_level::collective), then the collective, each a program run by the
// engine's cursor. start(engine) sets the collective going (Start holds its
// arguments by value); finish() runs once it has completed without failing (the
// widened 16-bit calls round their float results there). Failures end the call
// with `error` set.
struct no_finish {
  void operator()() const noexcept {}
};
template <class T, class Op, class Comm, class Start, class Finish = no_finish>
class collective_call final : public call_state {
public:
  collective_call(Comm& comm, const char* name, const Op& op, std::optional<arg_error> err, std::size_t count,
                  std::size_t root, Start start, Finish finish = {})
      : comm_(comm),
        name_(name),
        op_(op),
        err_(std::move(err)),
        count_(count),
        root_(root),
        start_(std::move(start)),
        finish_(std::move(finish)) {}

  bool advance(bool block) override {
    try {
      const bool finished = step(block);
      if (finished) detail::internals_of(comm_).board().end_call(false);
      return finished;
    } catch (...) {
      error = std::current_exception();
      agree_.reset(), main_.reset();
      report(error);
      return true;
    }
  }

private:
  using agree_engine = engine<std::int64_t, max_t, Comm>;
  // After a failed static check, instantiate nothing more: one message, not a cascade.
  static constexpr bool valid = std::is_trivially_copyable_v<T> && reduction_for<Op, T>;

  // The hang report (executor/state.hpp): a call that failed on its deadline or on
  // a peer's failure writes this rank's line (options::hang_report).
  void report(const std::exception_ptr& e) {
    auto& b = detail::internals_of(comm_).board();
    b.end_call(true);
    if (!comm_.get_options().hang_report) return;
    try {
      std::rethrow_exception(e);
    } catch (const timeout_error&) {
      report_failure(b);
    } catch (const remote_error&) {
      report_failure(b);
    } catch (...) {}
  }

  bool step(bool block) {
    if (stage_ == 0) {
      detail::internals_of(comm_).board().begin_call(name_, type_name<T>(), op_traits<Op>::name(), count_);
      if (!comm_.usable()) throw_unusable(name_, comm_.failure());
      stage_ = 2;
      if (comm_.get_options().checks == check_level::collective) {
        values_ =
            agreement_of(comm_.rank(), err_, std::int64_t(count_), type_id<T>(), type_id<Op>(), std::int64_t(root_));
        guarded([&] {
          agree_.emplace(comm_, name_, max_t{}, true);
          agree_->start_all_reduce(values_.v, values_.v, 9);
        });
        stage_ = 1;
      }
    }
    if (stage_ == 1) {
      if (!guarded([&] { return run(*agree_, block); })) return false;
      agree_.reset();
      stage_ = 2;
      agreement(name_, err_, values_);  // throws when the ranks disagree (the communicator survives)
    }
    if constexpr (valid) {
      if (stage_ == 2) {
        guarded([&] {
          main_.emplace(comm_, name_, op_, op_traits<Op>::commutative);
          start_(*main_);
        });
        stage_ = 3;
      }
      if (!guarded([&] { return run(*main_, block); })) return false;
      main_.reset();
      finish_();
    }
    return true;
  }
  template <class E>
  bool run(E& e, bool block) {
    const auto before = e.progress();
    const bool finished = e.run(block);
    moved |= e.progress() != before;
    return finished;
  }
  // Step 5: any failure marks the communicator unusable on this rank and is
  // announced to the peers, which stop waiting with remote_error; a peer's failure
  // is passed on naming that peer (relayed_failure, over UCX), so that ranks which
  // never talk to it directly stop too.
  template <class F>
  auto guarded(F&& f) {
    try {
      return f();
    } catch (const remote_error& e) {
      detail::internals_of(comm_).mark_broken(e.what());
      // The rank that failed first: a peer that left the call (its buffers gone
      // under cross-memory attach) left it because of an earlier failure, whose
      // notice may be on its way (20 ms at most); name that one.
      wait_status first{wait_status::peer_failed, 0, e.failed_rank(), e.what()};
      auto& tr = comm_.get_transport();
      if constexpr (requires { tr.shared_failure(); }) {
        const auto until = deadline_clock::now() + std::chrono::milliseconds(20);
        for (;;) {
          const wait_status st = tr.shared_failure();
          if (st.kind == wait_status::peer_failed) {
            if (st.failed_rank != e.failed_rank()) first = st;
            break;
          }
          if (deadline_clock::now() >= until) break;
          std::this_thread::yield();
        }
      }
      // Passed on where the transport learns of deaths from neighbours only (UCX);
      // over MPI and threads every failing rank tells everyone itself, and extra
      // control messages would outlive the communicator.
      if constexpr (requires { requires bool(std::remove_cvref_t<decltype(tr)>::relays_failures); })
        tr.abort(relayed_failure(first.failed_rank, first.reason));
      if (first.failed_rank != e.failed_rank())
        throw remote_error(std::string(e.what()) + "; rank " + std::to_string(first.failed_rank) +
                               " had failed before: " + first.reason,
                           first.failed_rank);
      throw;
    } catch (const std::exception& e) {
      detail::internals_of(comm_).mark_broken(e.what());
      comm_.get_transport().abort(std::string("rank ") + std::to_string(comm_.rank()) + ": " + e.what());
      throw;
    }
  }

  Comm& comm_;
  const char* name_;
  Op op_;
  std::optional<arg_error> err_;
  std::size_t count_, root_;
  Start start_;
  Finish finish_;
  int stage_ = 0;
  agreement_values values_;
  std::optional<agree_engine> agree_;
  std::optional<engine<T, Op, Comm>> main_;
};

// Runs a collective: blocking (Async false: returns when it has completed), or
// nonblocking (Async true: returns its request at once). start(engine) sets the
// collective going; it must hold its arguments by value.
template <bool Async, class T, class Op, class Comm, class Start, class Finish = no_finish>
auto launch(Comm& comm, const char* name, const Op& op, std::optional<arg_error> err, std::size_t count,
            std::size_t root, Start start, Finish finish = {}) {
  err = issue_checks(comm, name, op_traits<Op>::commutative, std::move(err));
  using call = collective_call<T, Op, Comm, Start, Finish>;
  if constexpr (Async) {
    return request(detail::internals_of(comm).executor_handle(),
                   detail::internals_of(comm).executor().submit(
                       std::make_shared<call>(comm, name, op, err, count, root, start, finish)));
  } else {
    std::exception_ptr error;
    if (!detail::internals_of(comm).executor().run_now([&] {
          call c(comm, name, op, err, count, root, start, finish);
          c.advance(true);
          error = c.error;
        })) {
      auto c = std::make_shared<call>(comm, name, op, err, count, root, start, finish);
      detail::internals_of(comm).executor().submit(c);
      detail::internals_of(comm).executor().wait(*c);
      error = c->error;
    }
    if (error) std::rethrow_exception(error);
  }
}

// A half or bfloat16 reduction under options.accumulation = float32: scratch of
// `scratch` floats (the communicator's widened_scratch()); in[0, in_n) is converted
// into its front now (the buffers belong to the call from here), start(engine, w)
// runs the float32 collective on it, and once that has completed the out_n floats
// at w + out_at are rounded into out. Every rank takes this path or none (bind
// checks that the ranks' options agree).
template <class T, class Op>
inline constexpr bool widens = is_16bit_float_v<T> && op_traits<Op>::builtin;

// The conversions both ways, in blocks of 16 that the compiler vectorizes.
template <class From, class To>
void widened_convert(const From* MDRING_RESTRICT in, To* MDRING_RESTRICT out, std::size_t n) noexcept {
  std::size_t b = 0;
  for (; b + 16 <= n; b += 16)
    for (std::size_t i = b; i < b + 16; ++i) out[i] = static_cast<To>(in[i]);
  for (; b < n; ++b) out[b] = static_cast<To>(in[b]);
}

template <bool Async, class C, class T, class Op, class Start>
auto launch_widened(C& comm, const char* name, const Op& op, std::optional<arg_error> err, std::size_t count,
                    std::size_t root, std::size_t scratch, const T* in, std::size_t in_n, T* out, std::size_t out_at,
                    std::size_t out_n, Start start) {
  std::shared_ptr<void> w;
  float* wp = nullptr;
  if (!err && scratch > 0) {
    w = detail::internals_of(comm).widened_scratch().take(scratch * sizeof(float));  // reused, not zeroed
    wp = static_cast<float*>(w.get());
    widened_convert(in, wp, in_n);
  } else {
    out_n = 0;
  }
  return launch<Async, float>(
      comm, name, op, std::move(err), count, root, [=](auto& e) { start(e, wp); },
      [w, out, res = wp ? wp + out_at : nullptr, out_n]() mutable {
        widened_convert(static_cast<const float*>(res), out, out_n);
        w.reset();  // back to the pool now, not when the call is destroyed
      });
}

inline void agreement(const char* name, const std::optional<arg_error>& err, const agreement_values& a) {
  const std::int64_t* v = a.v;
  const std::string fn = std::string("mdring::") + name + ": ";
  if (err) throw invalid_argument(err->argument, err->what);
  if (v[0] > 0) {
    const std::size_t who = std::size_t(v[0] / 16 - 1);
    const char* arg = argument_names[std::size_t(v[0] % 16) - 1];
    throw invalid_argument(arg, fn + "rank " + std::to_string(who) + " passed an invalid " + arg +
                                    " (its own exception says what); no data was moved");
  }
  auto differ = [&](int i, const char* arg, const char* what) {
    if (v[i] != -v[i + 1])
      throw invalid_argument(arg, fn + "the ranks passed different " + what + " (from " + std::to_string(-v[i + 1]) +
                                      " to " + std::to_string(v[i]) + "); no data was moved");
  };
  differ(1, "count", "counts");
  if (v[3] != -v[4]) throw invalid_argument("T", fn + "the ranks passed different element types; no data was moved");
  if (v[5] != -v[6]) throw invalid_argument("op", fn + "the ranks passed different ops; no data was moved");
  differ(7, "root", "roots");
}

// The local checks shared by the collectives.
// `count` elements must be readable/writable at p. `count_text` says where that
// count comes from when it is not the count argument itself.
inline std::optional<arg_error> check_null(const char* name, const char* arg, const void* p, std::size_t count,
                                           const char* count_text = "count") {
  if (count > 0 && p == nullptr)
    return arg_error{arg, std::string("mdring::") + name + ": " + arg + " is null but must hold " + count_text + " = " +
                              std::to_string(count) + " elements"};
  return std::nullopt;
}

inline std::optional<arg_error> check_root(const char* name, std::size_t root, std::size_t size) {
  if (root >= size)
    return arg_error{"root", std::string("mdring::") + name + ": root " + std::to_string(root) +
                                 " is not a rank of this communicator (size " + std::to_string(size) + ")"};
  return std::nullopt;
}

// send [s, s+sn) and recv [r, r+rn) (bytes) must coincide as described by
// `in_place_ok` or not overlap at all.
inline std::optional<arg_error> check_overlap(const char* name, const void* s, std::size_t sn, const void* r,
                                              std::size_t rn, bool in_place, const char* in_place_rule) {
  if (in_place || !overlaps(s, sn, r, rn)) return std::nullopt;
  return arg_error{"recvbuf", std::string("mdring::") + name + ": sendbuf [" + ptr_string(s) + ", +" +
                                  std::to_string(sn) + " bytes) and recvbuf [" + ptr_string(r) + ", +" +
                                  std::to_string(rn) + " bytes) overlap partially; for in place " + in_place_rule};
}

template <class... E>
std::optional<arg_error> first_error(E&&... e) {
  std::optional<arg_error> out;
  ((out ? void() : void(out = std::move(e))), ...);
  return out;
}

}  // namespace detail

// Moves the communicator's calls in flight on, once, without waiting: what the
// progress agent does in each round, for programs that run without it
// (progress_mode::in_wait, and simulated ranks under SimGrid SMPI, which have no
// threads) and compute between the calls. True when something moved (a step
// passed, or a call completed). Any thread may call it; it does nothing while
// another thread is moving the same calls.
template <bound_communicator C>
bool poll(C& comm) {
  return detail::internals_of(comm).executor().try_step();
}

// The hang report's line for this rank of `comm` (executor/state.hpp): the call in
// flight (sequence number, collective, count, type), its step, dimension and link,
// the peer it waits on and for how long, or "state=idle". Any thread may call it,
// at any time, without disturbing the call.
template <bound_communicator C>
std::string state_line(const C& comm) {
  return detail::internals_of(comm).board().line();
}
// Writes state_line(comm) to stderr (and to MDRING_STATE_DIR, where mdring-run
// collects the job's lines into one table).
template <bound_communicator C>
void dump_state(const C& comm) {
  detail::write_lines(state_line(comm) + "\n");
  detail::write_state_file();
}

template <transport Transport>
template <class T>
void detail::communicator_core<Transport>::reserve(std::size_t count) {
  exec_.drain();  // a larger block replaces the one that calls in flight may be using
  std::size_t bytes = 0;
  for (bool commutative : {true, false}) {  // non-commutative ops run direct everywhere
    detail::engine<T, sum_t, communicator_core> e(*this, "reserve", sum_t{}, commutative);
    for (auto kind : {collective::all_reduce, collective::reduce_scatter, collective::all_gather, collective::reduce}) {
      const std::size_t b = e.reserve_bytes(kind, count);  // smaller calls included
      bytes = b > bytes ? b : bytes;
    }
  }
  ws_.get(bytes);
  // A streamed all_reduce's block of node memory (executor/host/engine.hpp
  // stream_in), kept by the pool for the calls.
  if constexpr (!Transport::same_address_space)
    if (opts_.shared_memory && count) (void)wide_->take(count * sizeof(T));
}

MDRING_NAMESPACE_END
