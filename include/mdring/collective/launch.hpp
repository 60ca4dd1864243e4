// mdring/collective/launch.hpp: how a host collective runs, around its stages.
//
//   1-2. when the call is issued: the compile-time and local checks
//        (collective/checks.hpp); with check_level::local a rank with a bad argument
//        tells its peers (so no rank waits for it), marks the communicator unusable
//        and throws (issue_checks);
//   3.   when its turn comes: with check_level::collective the ranks agree on count,
//        type, op and root (collective/agreement.hpp: one small all-reduce), and a
//        disagreement or any rank's bad argument makes every rank throw the same
//        invalid_argument (the communicator survives);
//   4.   the collective: a program run by the host engine (executor/host/engine.hpp);
//   5.   any failure marks the communicator unusable on this rank and is announced
//        to the peers, which stop waiting with remote_error (collective/guard.hpp).
//
// The state machine of steps 3 to 5 (call_machine) is written once per transport;
// what depends on the element type and op is only the call's folds (local_ops<T,
// Op>), how it starts and how it finishes (collective_call, a few lines). launch()
// runs it blocking or returns its request; launch_widened() runs a 16-bit
// reduction in float32 (options.accumulation).
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../executor/host/engine.hpp"
#include "../executor/host/local_ops.hpp"
#include "../executor/host/one_shot.hpp"
#include "../executor/progress.hpp"
#include "../reduce/ops.hpp"
#include "../reduce/types.hpp"
#include "agreement.hpp"
#include "checks.hpp"
#include "communicator.hpp"
#include "guard.hpp"
#include "request.hpp"
#include "status.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

MDRING_NAMESPACE_BEGIN

namespace detail {

// Steps 2 and 4, when the call is issued. A local error ends the calls in flight
// first (they complete, or fail, in order), then breaks the communicator and
// tells the peers. Returns the error left for step 3 (collective checks).
template <transport Transport>
std::optional<arg_error> issue_checks(communicator_core<Transport>& comm, const char* name, bool commutative,
                                      std::optional<arg_error> err) {
  if (!comm.usable()) throw_unusable(name, comm.failure());
  if (!err && commutative) return err;  // (check_op passes every commutative op)
  if (!err) err = check_op(comm, commutative, name);
  if (err && comm.get_options().checks != check_level::collective) {
    executor_of(comm)->drain();
    mark_broken(comm, err->what);
    one_shot<Transport>::mark_failed(binding_of(comm));
    comm.get_transport().abort(err->what);
    throw invalid_argument(err->argument, err->what);
  }
  return err;
}

// How a host rank's failure reaches its peers (collective/guard.hpp): the
// transport's abort; a peer's failure is passed on naming the rank that failed
// first (relayed_failure, over UCX), so that ranks which never talk to it directly
// stop too.
template <transport Transport>
struct host_peers {
  const host_binding<Transport>& b;
  Transport& tr = b.transport;

  // Either way the communicator broke: its one-shot slot says so too.
  void failed_here(const std::string& why) {
    one_shot<Transport>::mark_failed(b);
    tr.abort(why);
  }
  void peer_failed(const remote_error& e) {
    one_shot<Transport>::mark_failed(b);
    // The rank that failed first: a peer that left the call (its buffers gone
    // under cross-memory attach) left it because of an earlier failure, whose
    // notice may be on its way (20 ms at most); name that one.
    wait_status first{wait_status::peer_failed, 0, e.failed_rank(), e.what()};
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
    if constexpr (requires { requires bool(Transport::relays_failures); })
      tr.abort(relayed_failure(first.failed_rank, first.reason));
    if (first.failed_rank != e.failed_rank())
      throw remote_error(
          std::string(e.what()) + "; rank " + std::to_string(first.failed_rank) + " had failed before: " + first.reason,
          first.failed_rank);
  }
};

// What a call is of: its element type and op, as the state machine needs them.
struct call_types {
  const char* type_name;
  const char* op_name;
  // The ids the agreement compares (checks.hpp type_id: a hash of the type's
  // spelling), computed only when a call agrees (check_level::collective).
  std::int64_t (*type_id)();
  std::int64_t (*op_id)();
  std::size_t elem_size;
  bool commutative;
};
template <class T, class Op>
call_types call_types_of() {
  return {type_name<T>(), op_traits<Op>::name(), &type_id<T>, &type_id<Op>, sizeof(T), op_traits<Op>::commutative};
}

// What runs one collective of a call (the agreement's, or the call's own): the
// one-shot path where it takes the call (executor/host/one_shot.hpp), else an
// engine running its program. begin(comm, name, ops, elem_size, commutative, start)
// calls start(e) on whichever runs it (start may be called twice: it only passes
// the call's arguments on).
template <transport Transport>
class call_runner {
public:
  template <class Start>
  void begin(communicator_core<Transport>& comm, const char* name, step_ops<Transport>& ops, std::size_t elem_size,
             bool commutative, Start&& start) {
    const host_binding<Transport> b = binding_of(comm);
    trial_.reset();
    if (one_shot<Transport>::available(b)) {
      fast_.emplace(b, name, ops, elem_size);
      start(*fast_);
      // A call timed to choose between streaming and the program (plan/stream_choice.hpp):
      // from here to its end.
      if ((trial_ = b.workspace.streams().take_pending()))
        choice_ = &b.workspace.streams(), began_ = trial_clock::now();
      if (fast_->taken()) return;
      fast_.reset();
    } else {
      one_shot<Transport>::not_taken(b);
    }
    eng_.emplace(b, name, ops, elem_size, commutative);
    start(*eng_);
  }
  // Moves it on (see engine::run); `moved` is set when a step passed.
  bool run(bool block, bool& moved) {
    const bool finished = fast_ ? advance(*fast_, block, moved) : advance(*eng_, block, moved);
    if (finished && trial_) {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(trial_clock::now() - began_).count();
      choice_->record(trial_->slot, trial_->w, std::uint64_t(ns));
      trial_.reset();
    }
    return finished;
  }
  void reset() noexcept { fast_.reset(), eng_.reset(); }

private:
  using trial_clock = std::chrono::steady_clock;
  template <class E>
  static bool advance(E& e, bool block, bool& moved) {
    const auto before = e.progress();
    const bool finished = e.run(block);
    moved |= e.progress() != before;
    return finished;
  }
  std::optional<one_shot<Transport>> fast_;
  std::optional<engine<Transport>> eng_;
  std::optional<stream_choice::trial> trial_;
  stream_choice* choice_ = nullptr;
  trial_clock::time_point began_{};
};

// Steps 3 to 5 of a call, when its turn comes: at once for a blocking call with
// nothing in flight, else when the calls before it have completed. A call is
// moved on by advance() (executor/progress.hpp): the agreement's all-reduce
// (check_level::collective), then the collective, each a program run by an
// engine. start(engine) sets the collective going; finish() runs once it has
// completed without failing (the widened 16-bit calls round their float results
// there). Failures end the call with `error` set.
template <transport Transport>
class call_machine : public call_state {
public:
  bool advance(bool block) override {
    try {
      const bool finished = step(block);
      if (finished) report_end(comm_, nullptr);
      return finished;
    } catch (...) {
      error = std::current_exception();
      agree_.reset(), main_.reset();
      report_end(comm_, error);
      return true;
    }
  }

protected:
  call_machine(communicator_core<Transport>& comm, const char* name, std::optional<arg_error> err, std::size_t count,
               std::size_t root, const call_types& types)
      : comm_(comm),
        name_(name),
        err_(std::move(err)),
        count_(count),
        root_(root),
        types_(types),
        agree_ops_(max_t{}, comm.size()) {}

  virtual step_ops<Transport>& ops() = 0;               // the call's folds
  virtual void start(engine<Transport>& e) = 0;         // sets the collective going
  virtual void start(one_shot<Transport>& e) = 0;       // the same, on the one-shot path
  virtual void finish() = 0;                            // after it has completed
  virtual bool valid() const noexcept { return true; }  // false: a failed static check

private:
  bool step(bool block) {
    if (stage_ == 0) {
      board_of(comm_).begin_call(name_, types_.type_name, types_.op_name, count_);
      if (!comm_.usable()) throw_unusable(name_, comm_.failure());
      stage_ = 2;
      if (comm_.get_options().checks == check_level::collective) {
        values_ = agreement_of(comm_.rank(), err_, std::int64_t(count_), types_.type_id(), types_.op_id(),
                               std::int64_t(root_));
        guard([&] {
          agree_.begin(comm_, name_, agree_ops_, sizeof(std::int64_t), true,
                       [&](auto& e) { e.start_all_reduce(values_.v, values_.v, 9); });
        });
        stage_ = 1;
      }
    }
    if (stage_ == 1) {
      if (!guard([&] { return agree_.run(block, moved); })) return false;
      agree_.reset();
      stage_ = 2;
      agreement(name_, err_, values_);  // throws when the ranks disagree (the communicator survives)
    }
    if (!valid()) return true;
    if (stage_ == 2) {
      guard(
          [&] { main_.begin(comm_, name_, ops(), types_.elem_size, types_.commutative, [&](auto& e) { start(e); }); });
      stage_ = 3;
    }
    if (!guard([&] { return main_.run(block, moved); })) return false;
    main_.reset();
    finish();
    return true;
  }
  template <class F>
  decltype(auto) guard(F&& f) {
    const host_binding<Transport> b = binding_of(comm_);
    return guarded(comm_, host_peers<Transport>{b}, std::forward<F>(f));
  }

  communicator_core<Transport>& comm_;
  const char* name_;
  std::optional<arg_error> err_;
  std::size_t count_, root_;
  call_types types_;
  int stage_ = 0;
  agreement_values values_;
  local_ops<std::int64_t, max_t, Transport> agree_ops_;
  call_runner<Transport> agree_, main_;
};

// A call of T with Op: its folds, how it starts (Start holds its arguments by value)
// and how it finishes.
struct no_finish {
  void operator()() const noexcept {}
};
template <class T, class Op, transport Transport, class Start, class Finish = no_finish>
class collective_call final : public call_machine<Transport> {
public:
  collective_call(communicator_core<Transport>& comm, const char* name, const Op& op, std::optional<arg_error> err,
                  std::size_t count, std::size_t root, Start start, Finish finish = {})
      : call_machine<Transport>(comm, name, std::move(err), count, root, call_types_of<T, Op>()),
        ops_(op, comm.size()),
        start_(std::move(start)),
        finish_(std::move(finish)) {}

private:
  // After a failed static check, instantiate nothing more: one message, not a cascade.
  static constexpr bool valid_ = std::is_trivially_copyable_v<T> && reduction_for<Op, T>;

  step_ops<Transport>& ops() override { return ops_; }
  void start(engine<Transport>& e) override {
    if constexpr (valid_) start_(e);
  }
  void start(one_shot<Transport>& e) override {
    if constexpr (valid_) start_(e);
  }
  void finish() override { finish_(); }
  bool valid() const noexcept override { return valid_; }

  struct no_ops : no_step_ops<Transport> {
    no_ops(const Op&, std::size_t) {}
  };
  std::conditional_t<valid_, local_ops<T, Op, Transport>, no_ops> ops_;
  Start start_;
  Finish finish_;
};

// Runs a collective: blocking (Async false: returns when it has completed), or
// nonblocking (Async true: returns its request at once). start(engine) sets the
// collective going; it must hold its arguments by value.
template <bool Async, class T, class Op, transport Transport, class Start, class Finish = no_finish>
auto launch(communicator_core<Transport>& comm, const char* name, const Op& op, std::optional<arg_error> err,
            std::size_t count, std::size_t root, Start start, Finish finish = {}) {
  err = issue_checks(comm, name, op_traits<Op>::commutative, std::move(err));
  using call = collective_call<T, Op, Transport, Start, Finish>;
  host_executor& ex = *executor_of(comm);
  if constexpr (Async) {
    return request(executor_of(comm),
                   ex.submit(std::make_shared<call>(comm, name, op, err, count, root, start, finish)));
  } else {
    std::exception_ptr error;
    if (!ex.run_now([&] {
          call c(comm, name, op, err, count, root, start, finish);
          c.advance(true);
          error = c.error;
        })) {
      auto c = std::make_shared<call>(comm, name, op, err, count, root, start, finish);
      ex.submit(c);
      ex.wait(*c);
      error = c->error;
    }
    if (error) std::rethrow_exception(error);
  }
}

// A half or bfloat16 reduction under options.accumulation = float32: scratch of
// `scratch` floats (the workspace's block pool); in[0, in_n) is converted into its
// front now (the buffers belong to the call from here), start(engine, w) runs the
// float32 collective on it, and once that has completed the out_n floats at w +
// out_at are rounded into out. Every rank takes this path or none (bind checks that
// the ranks' options agree).
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

template <bool Async, transport Transport, class T, class Op, class Start>
auto launch_widened(communicator_core<Transport>& comm, const char* name, const Op& op, std::optional<arg_error> err,
                    std::size_t count, std::size_t root, std::size_t scratch, const T* in, std::size_t in_n, T* out,
                    std::size_t out_at, std::size_t out_n, Start start) {
  if (!comm.usable()) throw_unusable(name, comm.failure());  // (its workspace may be gone: shrink)
  std::shared_ptr<void> w;
  float* wp = nullptr;
  if (!err && scratch > 0) {
    w = binding_of(comm).workspace.blocks().take(scratch * sizeof(float));  // reused, not zeroed
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

}  // namespace detail

MDRING_NAMESPACE_END
