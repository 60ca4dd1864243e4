// python/csrc/backend.cpp: mdring as a torch.distributed backend: PyTorch 1.13's
// c10d::ProcessGroup, or from PyTorch 2.0 a c10d::Backend registered for "cpu"
// and "cuda" (mdring_torch/__init__.py). The mdring side is behind group.hpp.
//
// CPU tensors run on mdring's nonblocking host calls, in issue order; one
// completion thread per group waits for them in that order and completes each
// Work and its Future outside every lock (a Future's callbacks may take the GIL).
// CUDA tensors (MDRING_TORCH_CUDA builds) run on the GPU path: each call is
// enqueued on the caller's current CUDA stream and returns at once; its Work
// carries a CUDA event (wait() makes the caller's current stream wait for it, as
// NCCL's does) and a Future over the CUDA device that DDP's comm hooks chain.
#include "group.hpp"

#include <mdring/transport/shared_access.hpp>
#include <mdring/version.hpp>

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#define MDRING_TORCH2 1
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#define MDRING_TORCH2 0
#endif

#ifndef MDRING_TORCH_CUDA
#define MDRING_TORCH_CUDA 0
#endif
#if MDRING_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace mdring_torch {

namespace {

#if MDRING_TORCH2
using base_t = ::c10d::Backend;
#else
using base_t = ::c10d::ProcessGroup;
#endif

// torch's c10d store as mdring's rendezvous store.
class c10d_store final : public mdring::rendezvous::store {
public:
  explicit c10d_store(c10::intrusive_ptr<::c10d::Store> s) : s_(std::move(s)) {}
  void set(const std::string& key, const std::string& value) override {
    s_->set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override { return s_->add(key, delta); }
  std::string get(const std::string& key, mdring::rendezvous::clock::time_point deadline) override {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - mdring::rendezvous::clock::now());
    try {
      s_->wait({key}, std::max(left, std::chrono::milliseconds(1)));
    } catch (const std::exception&) {
      throw mdring::rendezvous::missing_key(key, "mdring_torch (torch's store)");
    }
    const auto v = s_->get(key);
    return std::string(v.begin(), v.end());
  }

private:
  c10::intrusive_ptr<::c10d::Store> s_;
};

dtype dtype_of(const at::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return dtype::f32;
    case at::kDouble:
      return dtype::f64;
    case at::kHalf:
      return dtype::f16;
    case at::kBFloat16:
      return dtype::bf16;
    case at::kChar:
      return dtype::i8;
    case at::kByte:
      return dtype::u8;
    case at::kShort:
      return dtype::i16;
    case at::kInt:
      return dtype::i32;
    case at::kLong:
      return dtype::i64;
    default:
      TORCH_CHECK(false, "mdring: ", what, ": tensors of ", t.scalar_type(),
                  " are not supported (float32, float64, float16, bfloat16, int8, uint8, int16, int32, int64)");
  }
}

redop redop_of(const ::c10d::ReduceOp& o, const char* what) {
  switch (::c10d::ReduceOp::RedOpType(o)) {
    case ::c10d::ReduceOp::SUM:
      return redop::sum;
    case ::c10d::ReduceOp::AVG:
      return redop::avg;
    case ::c10d::ReduceOp::PRODUCT:
      return redop::prod;
    case ::c10d::ReduceOp::MIN:
      return redop::min;
    case ::c10d::ReduceOp::MAX:
      return redop::max;
    default:
      TORCH_CHECK(false, "mdring: ", what, ": reduce op ", int(::c10d::ReduceOp::RedOpType(o)),
                  " is not supported (SUM, AVG, PRODUCT, MIN, MAX)");
  }
}

void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.layout() == at::kStrided, "mdring: ", what,
              ": sparse tensors are not supported (dense, contiguous tensors only)");
#if MDRING_TORCH_CUDA
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "mdring: ", what, ": tensors on ", t.device(),
              " are not supported (CPU and CUDA tensors)");
#else
  TORCH_CHECK(t.device().is_cpu(), "mdring: ", what, ": tensors on ", t.device(),
              " are not supported (this build of mdring_torch takes CPU tensors only)");
#endif
  TORCH_CHECK(t.is_contiguous(), "mdring: ", what,
              ": non-contiguous tensors are not supported (call .contiguous() first)");
  (void)dtype_of(t, what);
}

// Every tensor of a call on one device: the call's device.
c10::Device device_of(const std::vector<at::Tensor>& ts, const char* what) {
  TORCH_CHECK(!ts.empty(), "mdring: ", what, ": no tensors");
  for (const auto& t : ts)
    TORCH_CHECK(t.device() == ts[0].device(), "mdring: ", what, ": tensors on different devices (", ts[0].device(),
                " and ", t.device(), "); every tensor of one call must be on the same device");
  return ts[0].device();
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* what) {
  TORCH_CHECK(ts.size() == 1, "mdring: ", what, " takes exactly one tensor per process (got ", ts.size(),
              "): multi-tensor (multi-device) calls are not supported");
  check_tensor(ts[0], what);
  return ts[0];
}

void same_kind(const at::Tensor& a, const at::Tensor& b, const char* what, const char* which) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "mdring: ", what, ": ", which, " is ", b.scalar_type(),
              " but the input is ", a.scalar_type());
}

// A Work completed by the group's completion thread.
class work final : public ::c10d::Work {
public:
  work(int rank, ::c10d::OpType t, std::vector<at::Tensor> outputs)
      : Work(rank, t),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  bool wait(std::chrono::milliseconds timeout) override {
    std::unique_lock l(mutex_);
    if (timeout == kNoTimeout) cv_.wait(l, [&] { return completed_; });
    else
      TORCH_CHECK(cv_.wait_for(l, timeout, [&] { return completed_; }), "mdring: Work.wait timed out after ",
                  timeout.count(), " ms (the collective is still in flight)");
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // On the completion thread, holding no lock. The Future first (its callbacks
  // run here), then wait(): when wait() returns, the Future is done too.
  void complete(std::exception_ptr e) {
    if (e) future_->setError(e);
    else future_->markCompleted(c10::IValue(outputs_));
    finish(e);
  }

private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

#if MDRING_TORCH_CUDA
// A Work of CUDA tensors: the call is enqueued on `stream`; an event marks its end.
// wait() and synchronize() make the caller's current stream wait for it (the host
// goes on), or, for a barrier, wait on the host. The Future is completed at once
// over the device: its callbacks' streams wait for the event (c10's CUDA Future).
class cuda_work final : public ::c10d::Work {
public:
  cuda_work(int rank, ::c10d::OpType t, std::vector<at::Tensor> outputs, c10::Device device,
            c10::cuda::CUDAStream stream, bool host_wait)
      : Work(rank, t), outputs_(std::move(outputs)), device_(device), stream_(stream), host_wait_(host_wait) {
    c10::cuda::CUDAGuard g(device_);
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming));
    C10_CUDA_CHECK(cudaEventRecord(ev_, stream_.stream()));
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                       std::vector<c10::Device>{device_});
    c10::cuda::CUDAStreamGuard sg(stream_);
    future_->markCompleted(c10::IValue(outputs_));
  }
  ~cuda_work() override {
    if (ev_) cudaEventDestroy(ev_);
  }
  bool isCompleted() override { return cudaEventQuery(ev_) != cudaErrorNotReady; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds) override {
    synchronize();
    if (host_wait_) C10_CUDA_CHECK(cudaEventSynchronize(ev_));
    return true;
  }
  void synchronize() override {
    c10::cuda::CUDAGuard g(device_);
    const auto cur = c10::cuda::getCurrentCUDAStream(device_.index());
    if (cur != stream_) C10_CUDA_CHECK(cudaStreamWaitEvent(cur.stream(), ev_, 0));
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

private:
  std::vector<at::Tensor> outputs_;
  c10::Device device_;
  c10::cuda::CUDAStream stream_;
  bool host_wait_;
  cudaEvent_t ev_ = nullptr;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};
#endif

class process_group;
// Every group, for shutdown() at interpreter exit: weak references, so that a
// group whose last reference goes while shutdown_all() runs is not used after its
// release (process_group::release_resources erases it, then notifies live_cv).
std::mutex live_m;
std::condition_variable live_cv;
std::map<process_group*, c10::weak_intrusive_ptr<process_group>> live;

// What creates a group's communicators: the store it binds through and its
// settings (the CUDA one is bound at the first call on CUDA tensors: collective,
// every rank makes it at the same call).
struct group_origin {
  c10::intrusive_ptr<::c10d::Store> store;  // null under MPI
  group_config cfg;
};

class process_group final : public base_t {
public:
  // A new group, listed for shutdown_all() (groups are made here only). g: the host
  // communicator (null when built without a host transport: then CPU tensors are refused).
  static c10::intrusive_ptr<process_group> make(std::unique_ptr<group> g, group_origin origin, int rank, int size) {
    auto pg = c10::make_intrusive<process_group>(std::move(g), std::move(origin), rank, size);
    std::lock_guard l(live_m);
    live.emplace(pg.get(), c10::weak_intrusive_ptr<process_group>(pg));
    return pg;
  }
  process_group(std::unique_ptr<group> g, group_origin origin, int rank, int size)
      : base_t(rank, size),
        g_(std::move(g)),
        origin_(std::move(origin)),
        thread_([this, released = released_] { loop(released); }) {}
  // The last reference went (on any thread: also the completion thread, in a
  // Future's callback that held the group, or a garbage collection that ran there).
  void release_resources() override {
    shutdown();
    {
      std::lock_guard l(live_m);
      live.erase(this);  // (its weak reference: the object is deleted after this returns)
    }
    live_cv.notify_all();
  }
  ~process_group() override { shutdown(); }

  // Finishes what is in flight, then releases the communicators. Idempotent.
  // Called on the completion thread (the group's last reference went in a callback
  // there), it cannot join that thread: it finishes the queued calls itself and
  // leaves the thread to end on its own (loop() sees `released_`).
  void shutdown()
#if MDRING_TORCH2
      override
#endif
  {
    bool own = false;
    {
      std::lock_guard l(q_m_);
      stop_ = true;
      own = thread_.joinable() && thread_.get_id() == std::this_thread::get_id();
    }
    q_cv_.notify_all();
    if (own) {
      for (pending p; take(p);) finish(p);
      *released_ = true;
      thread_.detach();
    } else if (thread_.joinable()) {
      // The completion thread may wait for the GIL in a Future's callback.
      if (PyGILState_Check()) {
        pybind11::gil_scoped_release nogil;
        thread_.join();
      } else {
        thread_.join();
      }
    }
    std::lock_guard l(issue_m_);
    g_.reset();
    dev_.reset();
    dev_store_.reset();
    destroyed_ = true;
  }

  // mdring_torch.shrink(): the survivors' group after a failure (null on a process
  // left out) and the old rank of each new one. Waits for this group's calls in
  // flight (they fail), then agrees with the other survivors (mdring::shrink).
  std::pair<c10::intrusive_ptr<process_group>, std::vector<std::int64_t>> shrink(double timeout_s) {
    std::lock_guard l(issue_m_);
    TORCH_CHECK(!destroyed_, "mdring: the process group was destroyed");
    TORCH_CHECK(g_, "mdring: shrink: this group has no host transport");
    shrunk_group s;
    try {
      s = g_->shrink(std::chrono::milliseconds(std::int64_t(timeout_s * 1000)));
    } catch (const mdring::error& e) {
      TORCH_CHECK(false, e.what());
    }
    if (!s.g) return {{}, {}};
    group_config c = origin_.cfg;
    c.rank = s.rank;
    c.size = s.size;
    auto next = process_group::make(std::move(s.g), group_origin{{}, c}, int(s.rank), int(s.size));
    return {next, std::move(s.kept)};
  }
  // Root's text on every rank (blocking; the host transport): how the survivors
  // of a shrink learn where their new store is.
  std::string share(const std::string& text, int root) {
    std::lock_guard l(issue_m_);
    TORCH_CHECK(g_ && !destroyed_, "mdring: share: the group has no host communicator");
    try {
      std::uint64_t n = text.size();
      g_->broadcast(&n, 1, std::size_t(root), dtype::i64).req.wait();
      std::string out = text;
      out.resize(n);
      if (n) g_->broadcast(out.data(), n, std::size_t(root), dtype::u8).req.wait();
      return out;
    } catch (const mdring::error& e) {
      TORCH_CHECK(false, e.what());
    }
  }

  double timeout_s() const { return double(origin_.cfg.timeout.count()) / 1000.0; }

  const std::string getBackendName() const override { return "mdring"; }
  std::string describe() const {
    std::lock_guard l(issue_m_);
    if (destroyed_) return "destroyed";
    std::string d = g_ ? g_->describe() : std::string("no host transport (CPU tensors refused)");
    if (dev_) d += "; " + dev_->describe();
    return d;
  }

#if MDRING_TORCH2
  // torch 2.x sends sparse tensors here rather than to allreduce().
  c10::intrusive_ptr<::c10d::Work> allreduce_sparse(std::vector<at::Tensor>& ts,
                                                    const ::c10d::AllreduceOptions&) override {
    for (const auto& t : ts) check_tensor(t, "allreduce");
    TORCH_CHECK(false, "mdring: allreduce: sparse tensors are not supported (dense, contiguous tensors only)");
  }
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }
#endif

  c10::intrusive_ptr<::c10d::Work> allreduce(std::vector<at::Tensor>& ts, const ::c10d::AllreduceOptions& o) override {
    const auto& t = single(ts, "allreduce");
    const auto op = redop_of(o.reduceOp, "allreduce");
    if (t.is_cuda())
      return on_device(::c10d::OpType::ALLREDUCE, ts, t.device(), [&](device_group& d, void* s) {
        d.all_reduce(t.data_ptr(), t.data_ptr(), t.numel(), dtype_of(t, ""), op, s);
      });
    return enqueue(::c10d::OpType::ALLREDUCE, ts, {},
                   [&] { return ops1(host().all_reduce(t.data_ptr(), t.data_ptr(), t.numel(), dtype_of(t, ""), op)); });
  }

  c10::intrusive_ptr<::c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& ts,
                                                       const ::c10d::AllreduceCoalescedOptions& o) override {
    TORCH_CHECK(!ts.empty(), "mdring: allreduce_coalesced: no tensors");
    for (const auto& t : ts) {
      check_tensor(t, "allreduce_coalesced");
      same_kind(ts[0], t, "allreduce_coalesced", "a tensor");
    }
    const auto device = device_of(ts, "allreduce_coalesced");
    const auto op = redop_of(o.reduceOp, "allreduce_coalesced");
    // One call over the tensors side by side; copied back when it completes.
    std::vector<at::Tensor> flat_in;
    for (const auto& t : ts) flat_in.push_back(t.view(-1));
    if (device.is_cuda())
      return on_device(::c10d::OpType::ALLREDUCE_COALESCED, ts, device, [&](device_group& d, void* s) {
        at::Tensor flat = at::cat(flat_in);  // on the current stream, as the copies back
        d.all_reduce(flat.data_ptr(), flat.data_ptr(), flat.numel(), dtype_of(flat, ""), op, s);
        std::int64_t at = 0;
        for (auto& t : ts) {
          t.view(-1).copy_(flat.narrow(0, at, t.numel()));
          at += t.numel();
        }
      });
    at::Tensor flat = at::cat(flat_in);
    auto outs = ts;
    return enqueue(::c10d::OpType::ALLREDUCE_COALESCED, ts, {flat}, [&] {
      auto x = host().all_reduce(flat.data_ptr(), flat.data_ptr(), flat.numel(), dtype_of(flat, ""), op);
      x.after = [flat, outs] {
        const auto* src = static_cast<const char*>(flat.data_ptr());
        for (const auto& t : outs) {
          std::memcpy(t.data_ptr(), src, t.nbytes());
          src += t.nbytes();
        }
      };
      return ops1(std::move(x));
    });
  }

  c10::intrusive_ptr<::c10d::Work> broadcast(std::vector<at::Tensor>& ts, const ::c10d::BroadcastOptions& o) override {
    const auto& t = single(ts, "broadcast");
    const auto root = checked_root(o.rootRank, o.rootTensor, "broadcast");
    if (t.is_cuda())
      return on_device(::c10d::OpType::BROADCAST, ts, t.device(), [&](device_group& d, void* s) {
        d.broadcast(t.data_ptr(), t.numel(), root, dtype_of(t, ""), s);
      });
    return enqueue(::c10d::OpType::BROADCAST, ts, {},
                   [&] { return ops1(host().broadcast(t.data_ptr(), t.numel(), root, dtype_of(t, ""))); });
  }

  c10::intrusive_ptr<::c10d::Work> reduce(std::vector<at::Tensor>& ts, const ::c10d::ReduceOptions& o) override {
    const auto& t = single(ts, "reduce");
    const auto root = checked_root(o.rootRank, o.rootTensor, "reduce");
    const auto op = redop_of(o.reduceOp, "reduce");
    if (t.is_cuda())
      return on_device(::c10d::OpType::REDUCE, ts, t.device(), [&](device_group& d, void* s) {
        d.reduce(t.data_ptr(), t.data_ptr(), t.numel(), root, dtype_of(t, ""), op, s);
      });
    return enqueue(::c10d::OpType::REDUCE, ts, {}, [&] {
      return ops1(host().reduce(t.data_ptr(), t.data_ptr(), t.numel(), root, dtype_of(t, ""), op));
    });
  }

  c10::intrusive_ptr<::c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
                                             const ::c10d::AllgatherOptions&) override {
    const auto& in = single(ins, "allgather");
    TORCH_CHECK(outs.size() == 1, "mdring: allgather takes one list of output tensors (got ", outs.size(), ")");
    auto& list = outs[0];
    TORCH_CHECK(list.size() == std::size_t(getSize()), "mdring: allgather: the output list has ", list.size(),
                " tensors, expected one per process (", getSize(), ")");
    for (const auto& t : list) {
      check_tensor(t, "allgather");
      same_kind(in, t, "allgather", "an output tensor");
      TORCH_CHECK(t.device() == in.device(), "mdring: allgather: an output tensor is on ", t.device(),
                  ", the input on ", in.device());
      TORCH_CHECK(t.numel() == in.numel(), "mdring: allgather: an output tensor has ", t.numel(),
                  " elements, the input ", in.numel());
    }
    if (in.is_cuda())
      return on_device(::c10d::OpType::ALLGATHER, list, in.device(), [&](device_group& d, void* s) {
        at::Tensor flat = at::empty({getSize() * in.numel()}, in.options());
        d.all_gather(in.data_ptr(), flat.data_ptr(), in.numel(), dtype_of(in, ""), s);
        for (std::size_t r = 0; r < list.size(); ++r)
          list[r].view(-1).copy_(flat.narrow(0, std::int64_t(r) * in.numel(), in.numel()));
      });
    at::Tensor flat = at::empty({getSize() * in.numel()}, in.options());
    return enqueue(::c10d::OpType::ALLGATHER, list, {in, flat}, [&] {
      auto x = host().all_gather(in.data_ptr(), flat.data_ptr(), in.numel(), dtype_of(in, ""));
      x.after = [first = std::move(x.after), flat, list] {
        if (first) first();
        const auto* src = static_cast<const char*>(flat.data_ptr());
        for (const auto& t : list) {
          std::memcpy(t.data_ptr(), src, t.nbytes());
          src += t.nbytes();
        }
      };
      return ops1(std::move(x));
    });
  }

  c10::intrusive_ptr<::c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                   const ::c10d::AllgatherOptions&) override {
    check_tensor(in, "_allgather_base");
    check_tensor(out, "_allgather_base");
    same_kind(in, out, "_allgather_base", "the output");
    const auto device = device_of({in, out}, "_allgather_base");
    TORCH_CHECK(out.numel() == getSize() * in.numel(), "mdring: _allgather_base: the output has ", out.numel(),
                " elements, expected ", getSize(), " x ", in.numel());
    if (device.is_cuda())
      return on_device(::c10d::OpType::_ALLGATHER_BASE, {out}, device, [&](device_group& d, void* s) {
        d.all_gather(in.data_ptr(), out.data_ptr(), in.numel(), dtype_of(in, ""), s);
      });
    return enqueue(::c10d::OpType::_ALLGATHER_BASE, {out}, {in}, [&] {
      return ops1(host().all_gather(in.data_ptr(), out.data_ptr(), in.numel(), dtype_of(in, "")));
    });
  }

  c10::intrusive_ptr<::c10d::Work> reduce_scatter(std::vector<at::Tensor>& outs,
                                                  std::vector<std::vector<at::Tensor>>& ins,
                                                  const ::c10d::ReduceScatterOptions& o) override {
    const auto& out = single(outs, "reduce_scatter");
    TORCH_CHECK(ins.size() == 1, "mdring: reduce_scatter takes one list of input tensors (got ", ins.size(), ")");
    const auto& list = ins[0];
    TORCH_CHECK(list.size() == std::size_t(getSize()), "mdring: reduce_scatter: the input list has ", list.size(),
                " tensors, expected one per process (", getSize(), ")");
    for (const auto& t : list) {
      check_tensor(t, "reduce_scatter");
      same_kind(out, t, "reduce_scatter", "an input tensor");
      TORCH_CHECK(t.device() == out.device(), "mdring: reduce_scatter: an input tensor is on ", t.device(),
                  ", the output on ", out.device());
      TORCH_CHECK(t.numel() == out.numel(), "mdring: reduce_scatter: an input tensor has ", t.numel(),
                  " elements, the output ", out.numel());
    }
    const auto op = redop_of(o.reduceOp, "reduce_scatter");
    std::vector<at::Tensor> flat_in;
    for (const auto& t : list) flat_in.push_back(t.view(-1));
    if (out.is_cuda())
      return on_device(::c10d::OpType::REDUCE_SCATTER, outs, out.device(), [&](device_group& d, void* s) {
        at::Tensor flat = at::cat(flat_in);
        d.reduce_scatter(flat.data_ptr(), out.data_ptr(), out.numel(), dtype_of(out, ""), op, s);
      });
    at::Tensor flat = at::cat(flat_in);
    return enqueue(::c10d::OpType::REDUCE_SCATTER, outs, {flat}, [&] {
      return ops1(host().reduce_scatter(flat.data_ptr(), out.data_ptr(), out.numel(), dtype_of(out, ""), op));
    });
  }

  c10::intrusive_ptr<::c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                        const ::c10d::ReduceScatterOptions& o) override {
    check_tensor(in, "_reduce_scatter_base");
    check_tensor(out, "_reduce_scatter_base");
    same_kind(out, in, "_reduce_scatter_base", "the input");
    const auto device = device_of({in, out}, "_reduce_scatter_base");
    TORCH_CHECK(in.numel() == getSize() * out.numel(), "mdring: _reduce_scatter_base: the input has ", in.numel(),
                " elements, expected ", getSize(), " x ", out.numel());
    const auto op = redop_of(o.reduceOp, "_reduce_scatter_base");
    if (device.is_cuda())
      return on_device(::c10d::OpType::_REDUCE_SCATTER_BASE, {out}, device, [&](device_group& d, void* s) {
        d.reduce_scatter(in.data_ptr(), out.data_ptr(), out.numel(), dtype_of(out, ""), op, s);
      });
    return enqueue(::c10d::OpType::_REDUCE_SCATTER_BASE, {out}, {in}, [&] {
      return ops1(host().reduce_scatter(in.data_ptr(), out.data_ptr(), out.numel(), dtype_of(out, ""), op));
    });
  }

  // Over the host group when there is one; else (CUDA tensors only) an all_reduce
  // of one int on the CUDA device, waited for on the host.
  c10::intrusive_ptr<::c10d::Work> barrier(const ::c10d::BarrierOptions& o) override {
    bool on_host;
    {
      std::lock_guard l(issue_m_);
      on_host = g_ != nullptr || destroyed_;
    }
#if MDRING_TORCH_CUDA
    if (!on_host) {
      const int dev = o.device_ids.empty() ? int(c10::cuda::current_device()) : int(o.device_ids[0]);
      at::Tensor one = at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(at::Device(at::kCUDA, dev)));
      return on_device(
          ::c10d::OpType::BARRIER, {one}, one.device(),
          [&](device_group& d, void* s) { d.all_reduce(one.data_ptr(), one.data_ptr(), 1, dtype::i32, redop::sum, s); },
          true);
    }
#endif
    (void)o;
    (void)on_host;
    at::Tensor one = at::zeros({1}, at::kInt);
    return enqueue(::c10d::OpType::BARRIER, {}, {one},
                   [&] { return ops1(host().all_reduce(one.data_ptr(), one.data_ptr(), 1, dtype::i32, redop::sum)); });
  }

private:
  struct pending {
    std::vector<op> ops;
    c10::intrusive_ptr<work> w;
    std::vector<at::Tensor> keep;  // inputs and scratch, alive until the calls complete
  };

  static std::vector<op> ops1(op x) {
    std::vector<op> v;
    v.push_back(std::move(x));
    return v;
  }

  // The host group (under issue_m_).
  group& host() {
    TORCH_CHECK(g_, "mdring: CPU tensors need a host transport, and this build of mdring_torch has none (",
                have_ucx() ? "UCX" : "no UCX", ", ", have_mpi() ? "MPI" : "no MPI",
                "): use CUDA tensors, or rebuild with libucx-dev or MPI");
    return *g_;
  }

  std::size_t checked_root(int64_t root, int64_t root_tensor, const char* what) const {
    TORCH_CHECK(root >= 0 && root < getSize(), "mdring: ", what, ": root rank ", root, " is not in [0, ", getSize(),
                ")");
    TORCH_CHECK(root_tensor == 0, "mdring: ", what, ": rootTensor must be 0 (one tensor per process)");
    return std::size_t(root);
  }

  // CUDA tensors: the call enqueued on the current stream of `device`, under the
  // issue lock (every rank's calls keep their torch order); the device group is
  // bound at the first such call (collective).
  template <class Issue>
  c10::intrusive_ptr<::c10d::Work> on_device(::c10d::OpType type, std::vector<at::Tensor> outputs, c10::Device device,
                                             Issue&& issue, bool host_wait = false) {
#if MDRING_TORCH_CUDA
    c10::cuda::CUDAGuard guard(device);
    const auto stream = c10::cuda::getCurrentCUDAStream(device.index());
    {
      std::lock_guard l(issue_m_);
      TORCH_CHECK(!destroyed_, "mdring: the process group was destroyed");
      try {
        if (!dev_) {
          TORCH_CHECK(origin_.store,
                      "mdring: CUDA tensors need the group's store (torchrun's env:// rendezvous); "
                      "this group was made without one");
          dev_store_ = std::make_unique<c10d_store>(origin_.store);
          std::optional<pybind11::gil_scoped_release> nogil;  // binding waits for the other ranks
          if (PyGILState_Check()) nogil.emplace();
          dev_ = make_device_group(*dev_store_, origin_.cfg, device.index());
        }
        TORCH_CHECK(dev_->device() == device.index(), "mdring: this group runs on cuda:", dev_->device(),
                    " (its first CUDA call's device); a tensor on ", device, " cannot join it");
        issue(*dev_, static_cast<void*>(stream.stream()));
      } catch (const mdring::error& e) {
        TORCH_CHECK(false, e.what());
      }
      ++seq_;
    }
    return c10::make_intrusive<cuda_work>(getRank(), type, std::move(outputs), device, stream, host_wait);
#else
    (void)type, (void)outputs, (void)issue, (void)host_wait;
    TORCH_CHECK(false, "mdring: tensors on ", device, " are not supported (this build takes CPU tensors only)");
#endif
  }

  // Issues the calls (issue() runs under the issue lock, so every rank's calls
  // keep the order of its torch calls) and queues them for completion.
  //
  // A small call (one operation, at most 64 KiB of output) issued while no earlier
  // one is pending is first moved on here for up to MDRING_TORCH_SPIN_US (default
  // 20) microseconds, and completed here if it ends by then (the one-shot path,
  // its peers already there): handing it to the completion thread and back costs
  // two thread wake-ups, tens of microseconds, where the call takes one. Else it
  // is queued as any other.
  template <class Issue>
  c10::intrusive_ptr<::c10d::Work> enqueue(::c10d::OpType type, std::vector<at::Tensor> outputs,
                                           std::vector<at::Tensor> keep, Issue&& issue) {
    auto w = c10::make_intrusive<work>(getRank(), type, outputs);
    std::vector<op> ops;
    {
      std::lock_guard l(issue_m_);
      TORCH_CHECK(!destroyed_, "mdring: the process group was destroyed");
      try {
        ops = issue();
      } catch (const mdring::error& e) {
        TORCH_CHECK(false, e.what());
      }
      std::size_t bytes = 0;
      for (const auto& t : outputs) bytes += t.numel() * t.element_size();
      if (ops.size() == 1 && bytes <= (std::size_t(64) << 10) && spin_.count() > 0 && nothing_pending() &&
          completed_here(ops[0], *w))
        return w;
      std::lock_guard q(q_m_);
      TORCH_CHECK(!stop_, "mdring: the process group is shutting down");
      keep.insert(keep.end(), outputs.begin(), outputs.end());
      q_.push_back(pending{std::move(ops), w, std::move(keep)});
      ++seq_;
    }
    q_cv_.notify_one();
    return w;
  }

  bool nothing_pending() {
    std::lock_guard q(q_m_);
    return q_.empty() && !busy_;
  }
  // Moves x on until it completes or spin_ passes; completes w when it did.
  bool completed_here(op& x, work& w) {
    const auto until = std::chrono::steady_clock::now() + spin_;
    std::exception_ptr e;
    try {
      for (;;) {
        if (x.req.test()) break;
        if (std::chrono::steady_clock::now() >= until) return false;
        if (share_cores_) std::this_thread::yield();  // (a peer waiting for this core runs)
      }
      if (x.after) x.after();
    } catch (const std::exception& ex) {
      e = std::make_exception_ptr(std::runtime_error(std::string("mdring: ") + ex.what()));
    }
    x = op{};
    w.complete(e);
    return true;
  }

  // The completion thread. `released`: set when the group was released on this
  // thread (shutdown()), which then touches nothing of it again.
  void loop(std::shared_ptr<std::atomic<bool>> released) {
    for (pending p; wait_and_take(p);) {
      finish(p);
      if (released->load()) return;
    }
  }
  // The next queued call (false: stopped, none left).
  bool wait_and_take(pending& p) {
    std::unique_lock l(q_m_);
    q_cv_.wait(l, [&] { return stop_ || !q_.empty(); });
    return pop(p);
  }
  bool take(pending& p) {
    std::lock_guard l(q_m_);
    return pop(p);
  }
  bool pop(pending& p) {  // (under q_m_)
    if (q_.empty()) return false;
    p = std::move(q_.front());
    q_.pop_front();
    busy_ = true;  // (nothing_pending: this one is not completed yet)
    return true;
  }
  // Waits for p's calls and completes its work. What follows busy_ may release the
  // group (the tensors kept, the work's callbacks): nothing of it is touched there.
  void finish(pending& p) {
    std::exception_ptr e;
    for (auto& x : p.ops) {
      try {
        x.req.wait();
        if (!e && x.after) x.after();
      } catch (const std::exception& ex) {
        if (!e) e = std::make_exception_ptr(std::runtime_error(std::string("mdring: ") + ex.what()));
      }
    }
    {
      std::lock_guard l(q_m_);
      busy_ = false;  // (before completing: the caller's next call may come at once)
    }
    p.ops.clear();
    p.keep.clear();
    const c10::intrusive_ptr<work> w = std::move(p.w);
    w->complete(e);
  }

  mutable std::mutex issue_m_;
  std::unique_ptr<group> g_;
  group_origin origin_;
  std::unique_ptr<mdring::rendezvous::store> dev_store_;
  std::unique_ptr<device_group> dev_;
  bool destroyed_ = false;
  std::atomic<std::uint64_t> seq_{0};
  std::mutex q_m_;
  std::condition_variable q_cv_;
  std::deque<pending> q_;
  bool stop_ = false;
  bool busy_ = false;  // the completion thread holds a pending call
  std::chrono::microseconds spin_ = spin_from_env();
  // More processes on this node (the launcher's LOCAL_WORLD_SIZE) than cores.
  bool share_cores_ = [] {
    const char* s = std::getenv("LOCAL_WORLD_SIZE");
    return s && mdring::detail::oversubscribed(std::strtoul(s, nullptr, 10));
  }();
  std::shared_ptr<std::atomic<bool>> released_ = std::make_shared<std::atomic<bool>>(false);
  std::thread thread_;  // (last: it starts in the constructor)

  static std::chrono::microseconds spin_from_env() {
    const char* s = std::getenv("MDRING_TORCH_SPIN_US");
    if (!s || !*s) return std::chrono::microseconds(20);
    char* end = nullptr;
    const long v = std::strtol(s, &end, 10);
    if (end == s || *end || v < 0 || v > 1000000) {
      std::fprintf(stderr, "mdring: MDRING_TORCH_SPIN_US=\"%s\": expected microseconds from 0 to 1000000; using 20\n",
                   s);
      return std::chrono::microseconds(20);
    }
    return std::chrono::microseconds(v);
  }
};

// use_node_memory(): torch's CPU allocator, with allocations of `threshold` bytes
// or more in node memory (mdring::node_alloc), which peers on the node map and
// read in place instead of copying through cross-memory attach. Freed blocks are
// kept (up to `cache` bytes) and handed out again for the same size class: each
// node block is a segment that peers map once and keep mapped, so reusing blocks
// keeps both the mapping cost and the peers' mappings bounded.
class node_memory final : public c10::Allocator {
public:
  node_memory(c10::Allocator* prev, std::size_t threshold, std::size_t cache)
      : prev_(prev), threshold_(threshold), cache_(cache) {}

#if MDRING_TORCH2  // allocate() is not const there, and copy_data() is pure
  c10::DataPtr allocate(std::size_t n) override { return allocate_block(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#else
  c10::DataPtr allocate(std::size_t n) const override { return allocate_block(n); }
#endif

  static node_memory* instance;

private:
  c10::DataPtr allocate_block(std::size_t n) const {
    if (n < threshold_) return prev_->allocate(n);
    const std::size_t c = size_class(n);
    void* p = nullptr;
    {
      std::lock_guard l(m_);
      auto it = free_.find(c);
      if (it != free_.end()) {
        p = it->second;
        free_.erase(it);
        cached_ -= c;
      }
    }
    if (!p) p = node_alloc(c);
    {
      std::lock_guard l(m_);
      live_[p] = c;
    }
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  // Four classes per power of two (at most 25 % over the request).
  static std::size_t size_class(std::size_t n) {
    std::size_t p = 1;
    while (p * 2 <= n) p *= 2;
    const std::size_t q = std::max<std::size_t>(p / 4, 1);
    return (n + q - 1) / q * q;
  }
  static void release(void* p) { instance->give_back(p); }
  void give_back(void* p) const {
    std::size_t c = 0;
    {
      std::lock_guard l(m_);
      auto it = live_.find(p);
      if (it == live_.end()) return;
      c = it->second;
      live_.erase(it);
      if (cached_ + c <= cache_) {
        free_.emplace(c, p);
        cached_ += c;
        return;
      }
    }
    node_free(p);
  }

  c10::Allocator* prev_;
  std::size_t threshold_, cache_;
  mutable std::mutex m_;
  mutable std::multimap<std::size_t, void*> free_;
  mutable std::map<void*, std::size_t> live_;
  mutable std::size_t cached_ = 0;
};
node_memory* node_memory::instance = nullptr;

void use_node_memory(std::size_t threshold, std::size_t cache) {
  static std::mutex m;
  std::lock_guard l(m);
  TORCH_CHECK(!node_memory::instance, "mdring: use_node_memory() was called already");
  // Never freed: tensors allocated through it may outlive everything else.
  node_memory::instance = new node_memory(c10::GetAllocator(c10::DeviceType::CPU), threshold, cache);
  c10::SetAllocator(c10::DeviceType::CPU, node_memory::instance, 100);
}

// Every live group finishes its work and releases its communicator (at
// interpreter exit, before MPI_Finalize and before UCX's context goes).
// A group whose last reference is going on another thread (lock() finds none)
// finishes there: this waits for it.
void shutdown_all() {
  std::vector<c10::intrusive_ptr<process_group>> v;
  {
    std::lock_guard l(live_m);
    for (auto& [pg, weak] : live)
      if (auto strong = weak.lock()) v.push_back(std::move(strong));
  }
  for (auto& pg : v) pg->shutdown();
  v.clear();  // (a group may be released here)
  std::unique_lock l(live_m);
  live_cv.wait(l,
               [] { return std::none_of(live.begin(), live.end(), [](const auto& e) { return e.second.expired(); }); });
}

}  // namespace

}  // namespace mdring_torch

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  using namespace mdring_torch;
  py::module_::import("torch.distributed");
  m.doc() = "mdring's torch.distributed backend (see mdring_torch/__init__.py)";
  py::class_<process_group, base_t, c10::intrusive_ptr<process_group>>(m, "ProcessGroupMdring")
      .def("describe", &process_group::describe,
           "How this group runs: transport, topology, and where the topology came from.")
      .def("shutdown", &process_group::shutdown, py::call_guard<py::gil_scoped_release>())
      .def("_shrink", &process_group::shrink, py::arg("timeout_s"), py::call_guard<py::gil_scoped_release>(),
           "The survivors' group after a failure and the old rank of each new rank (mdring_torch.shrink).")
      .def("_share", &process_group::share, py::arg("text"), py::arg("root"), py::call_guard<py::gil_scoped_release>())
      .def("_timeout_s", &process_group::timeout_s);
  // transport: "ucx", "mpi" (world_ranks: the group's MPI_COMM_WORLD ranks, empty
  // for all), or "none" (CUDA tensors only). The store binds the CUDA communicator.
  m.def(
      "create",
      [](const c10::intrusive_ptr<::c10d::Store>& store, const std::string& transport, std::vector<int> world_ranks,
         int rank, int size, double timeout_s, int local_size, bool is_world, const std::string& name) {
        group_config c;
        c.rank = std::size_t(rank);
        c.size = std::size_t(size);
        c.timeout = std::chrono::milliseconds(std::int64_t(timeout_s * 1000));
        c.local_size = std::size_t(local_size);
        c.is_world = is_world;
        c.name = name;
        TORCH_CHECK(transport == "ucx" || transport == "mpi" || transport == "none",
                    "mdring: transport must be \"ucx\", \"mpi\" or \"none\", not \"", transport, "\"");
        std::unique_ptr<group> g;
        try {
          py::gil_scoped_release nogil;
          if (transport == "ucx") g = make_ucx_group(std::make_unique<c10d_store>(store), c);
          else if (transport == "mpi") g = make_mpi_group(world_ranks, c);
        } catch (const mdring::error& e) {
          TORCH_CHECK(false, e.what());
        }
        return process_group::make(std::move(g), group_origin{store, c}, rank, size);
      },
      py::arg("store"), py::arg("transport"), py::arg("world_ranks"), py::arg("rank"), py::arg("size"),
      py::arg("timeout_s"), py::arg("local_size") = 0, py::arg("is_world") = false, py::arg("name") = "");
  m.def("have_ucx", &have_ucx);
  m.def("have_cuda", [] { return MDRING_TORCH_CUDA != 0 && have_cuda(); });
  m.attr("torch_api") = MDRING_TORCH2 ? "Backend" : "ProcessGroup";
  // The mdring headers' version (include/mdring/config.hpp), the same as the
  // package's metadata (python/setup.py reads it there): mdring_torch.__version__.
  m.attr("__version__") = mdring::version_string();
  m.def("use_node_memory", &use_node_memory, py::arg("threshold"), py::arg("cache"));
  m.def("have_mpi", &have_mpi);
  m.def("bootstrap_mpi", [] {
    const auto b = bootstrap_mpi();
    return py::make_tuple(b.rank, b.size, b.local_rank, b.local_size, b.master_addr, b.master_port);
  });
  m.def(
      "shutdown",
      [] {
        shutdown_all();
        finalize_mpi();
      },
      py::call_guard<py::gil_scoped_release>(),
      "Finishes every group's work and releases the communicators, then MPI_Finalize if mdring_torch "
      "initialized MPI (registered with atexit).");
}
