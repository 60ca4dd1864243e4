// python/csrc/backend.cpp: mdring as a torch.distributed backend (PyTorch 1.13's
// c10d::ProcessGroup). The collectives run on mdring's nonblocking calls, in
// issue order; one completion thread per group waits for them in that order and
// completes each Work and its Future outside every lock (a Future's callbacks may
// take the GIL). The mdring side is behind group.hpp.
#include "group.hpp"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace mdring_torch {

namespace {

// torch's c10d store as mdring's rendezvous store.
class c10d_store final : public mdring::rendezvous::store {
public:
  explicit c10d_store(c10::intrusive_ptr<::c10d::Store> s) : s_(std::move(s)) {}
  void set(const std::string& key, const std::string& value) override {
    s_->set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
  }
  std::string get(const std::string& key, mdring::rendezvous::clock::time_point deadline) override {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - mdring::rendezvous::clock::now());
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
    case at::kFloat: return dtype::f32;
    case at::kDouble: return dtype::f64;
    case at::kHalf: return dtype::f16;
    case at::kBFloat16: return dtype::bf16;
    case at::kChar: return dtype::i8;
    case at::kByte: return dtype::u8;
    case at::kShort: return dtype::i16;
    case at::kInt: return dtype::i32;
    case at::kLong: return dtype::i64;
    default:
      TORCH_CHECK(false, "mdring: ", what, ": tensors of ", t.scalar_type(),
                  " are not supported (float32, float64, float16, bfloat16, int8, uint8, int16, int32, int64)");
  }
}

redop redop_of(const ::c10d::ReduceOp& o, const char* what) {
  switch (::c10d::ReduceOp::RedOpType(o)) {
    case ::c10d::ReduceOp::SUM: return redop::sum;
    case ::c10d::ReduceOp::AVG: return redop::avg;
    case ::c10d::ReduceOp::PRODUCT: return redop::prod;
    case ::c10d::ReduceOp::MIN: return redop::min;
    case ::c10d::ReduceOp::MAX: return redop::max;
    default:
      TORCH_CHECK(false, "mdring: ", what, ": reduce op ", int(::c10d::ReduceOp::RedOpType(o)),
                  " is not supported (SUM, AVG, PRODUCT, MIN, MAX)");
  }
}

void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.layout() == at::kStrided, "mdring: ", what,
              ": sparse tensors are not supported (dense, contiguous CPU tensors only)");
  TORCH_CHECK(t.device().is_cpu(), "mdring: ", what, ": tensors on ", t.device(),
              " are not supported (CPU tensors only; use the nccl backend for CUDA tensors)");
  TORCH_CHECK(t.is_contiguous(), "mdring: ", what,
              ": non-contiguous tensors are not supported (call .contiguous() first)");
  (void)dtype_of(t, what);
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
      : Work(rank, t), outputs_(std::move(outputs)),
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

class process_group;
std::mutex live_m;
std::set<process_group*> live;  // for shutdown() at interpreter exit

class process_group final : public ::c10d::ProcessGroup {
public:
  process_group(std::unique_ptr<group> g, int rank, int size)
      : ProcessGroup(rank, size), g_(std::move(g)), thread_([this] { loop(); }) {
    std::lock_guard l(live_m);
    live.insert(this);
  }
  ~process_group() override {
    {
      std::lock_guard l(live_m);
      live.erase(this);
    }
    shutdown();
  }

  // Finishes what is in flight, then releases the communicator. Idempotent.
  void shutdown() {
    {
      std::lock_guard l(q_m_);
      if (stop_) {
        if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
        return;
      }
      stop_ = true;
    }
    q_cv_.notify_all();
    // The completion thread may wait for the GIL in a Future's callback.
    if (thread_.joinable()) {
      if (PyGILState_Check()) {
        pybind11::gil_scoped_release nogil;
        thread_.join();
      } else {
        thread_.join();
      }
    }
    std::lock_guard l(issue_m_);
    g_.reset();
  }

  const std::string getBackendName() const override { return "mdring"; }
  std::string describe() const {
    std::lock_guard l(issue_m_);
    return g_ ? g_->describe() : std::string("destroyed");
  }

  c10::intrusive_ptr<::c10d::Work> allreduce(std::vector<at::Tensor>& ts,
                                             const ::c10d::AllreduceOptions& o) override {
    const auto& t = single(ts, "allreduce");
    const auto op = redop_of(o.reduceOp, "allreduce");
    return enqueue(::c10d::OpType::ALLREDUCE, ts, {}, [&] {
      return ops1(g_->all_reduce(t.data_ptr(), t.data_ptr(), t.numel(), dtype_of(t, ""), op));
    });
  }

  c10::intrusive_ptr<::c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& ts,
                                                       const ::c10d::AllreduceCoalescedOptions& o) override {
    TORCH_CHECK(!ts.empty(), "mdring: allreduce_coalesced: no tensors");
    for (const auto& t : ts) {
      check_tensor(t, "allreduce_coalesced");
      same_kind(ts[0], t, "allreduce_coalesced", "a tensor");
    }
    const auto op = redop_of(o.reduceOp, "allreduce_coalesced");
    // One call over the tensors side by side; copied back when it completes.
    std::vector<at::Tensor> flat_in;
    for (const auto& t : ts) flat_in.push_back(t.view(-1));
    at::Tensor flat = at::cat(flat_in);
    auto outs = ts;
    return enqueue(::c10d::OpType::ALLREDUCE_COALESCED, ts, {flat}, [&] {
      auto x = g_->all_reduce(flat.data_ptr(), flat.data_ptr(), flat.numel(), dtype_of(flat, ""), op);
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

  c10::intrusive_ptr<::c10d::Work> broadcast(std::vector<at::Tensor>& ts,
                                             const ::c10d::BroadcastOptions& o) override {
    const auto& t = single(ts, "broadcast");
    const auto root = checked_root(o.rootRank, o.rootTensor, "broadcast");
    return enqueue(::c10d::OpType::BROADCAST, ts, {},
                   [&] { return ops1(g_->broadcast(t.data_ptr(), t.numel(), root, dtype_of(t, ""))); });
  }

  c10::intrusive_ptr<::c10d::Work> reduce(std::vector<at::Tensor>& ts, const ::c10d::ReduceOptions& o) override {
    const auto& t = single(ts, "reduce");
    const auto root = checked_root(o.rootRank, o.rootTensor, "reduce");
    const auto op = redop_of(o.reduceOp, "reduce");
    return enqueue(::c10d::OpType::REDUCE, ts, {}, [&] {
      return ops1(g_->reduce(t.data_ptr(), t.data_ptr(), t.numel(), root, dtype_of(t, ""), op));
    });
  }

  c10::intrusive_ptr<::c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outs,
                                             std::vector<at::Tensor>& ins,
                                             const ::c10d::AllgatherOptions&) override {
    const auto& in = single(ins, "allgather");
    TORCH_CHECK(outs.size() == 1, "mdring: allgather takes one list of output tensors (got ", outs.size(), ")");
    auto& list = outs[0];
    TORCH_CHECK(list.size() == std::size_t(getSize()), "mdring: allgather: the output list has ", list.size(),
                " tensors, expected one per process (", getSize(), ")");
    for (const auto& t : list) {
      check_tensor(t, "allgather");
      same_kind(in, t, "allgather", "an output tensor");
      TORCH_CHECK(t.numel() == in.numel(), "mdring: allgather: an output tensor has ", t.numel(),
                  " elements, the input ", in.numel());
    }
    at::Tensor flat = at::empty({getSize() * in.numel()}, in.options());
    return enqueue(::c10d::OpType::ALLGATHER, list, {in, flat}, [&] {
      auto x = g_->all_gather(in.data_ptr(), flat.data_ptr(), in.numel(), dtype_of(in, ""));
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
    TORCH_CHECK(out.numel() == getSize() * in.numel(), "mdring: _allgather_base: the output has ", out.numel(),
                " elements, expected ", getSize(), " x ", in.numel());
    return enqueue(::c10d::OpType::_ALLGATHER_BASE, {out}, {in}, [&] {
      return ops1(g_->all_gather(in.data_ptr(), out.data_ptr(), in.numel(), dtype_of(in, "")));
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
      TORCH_CHECK(t.numel() == out.numel(), "mdring: reduce_scatter: an input tensor has ", t.numel(),
                  " elements, the output ", out.numel());
    }
    const auto op = redop_of(o.reduceOp, "reduce_scatter");
    std::vector<at::Tensor> flat_in;
    for (const auto& t : list) flat_in.push_back(t.view(-1));
    at::Tensor flat = at::cat(flat_in);
    return enqueue(::c10d::OpType::REDUCE_SCATTER, outs, {flat}, [&] {
      return ops1(g_->reduce_scatter(flat.data_ptr(), out.data_ptr(), out.numel(), dtype_of(out, ""), op));
    });
  }

  c10::intrusive_ptr<::c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                        const ::c10d::ReduceScatterOptions& o) override {
    check_tensor(in, "_reduce_scatter_base");
    check_tensor(out, "_reduce_scatter_base");
    same_kind(out, in, "_reduce_scatter_base", "the input");
    TORCH_CHECK(in.numel() == getSize() * out.numel(), "mdring: _reduce_scatter_base: the input has ", in.numel(),
                " elements, expected ", getSize(), " x ", out.numel());
    const auto op = redop_of(o.reduceOp, "_reduce_scatter_base");
    return enqueue(::c10d::OpType::_REDUCE_SCATTER_BASE, {out}, {in}, [&] {
      return ops1(g_->reduce_scatter(in.data_ptr(), out.data_ptr(), out.numel(), dtype_of(out, ""), op));
    });
  }

  c10::intrusive_ptr<::c10d::Work> barrier(const ::c10d::BarrierOptions&) override {
    at::Tensor one = at::zeros({1}, at::kInt);
    return enqueue(::c10d::OpType::BARRIER, {}, {one}, [&] {
      return ops1(g_->all_reduce(one.data_ptr(), one.data_ptr(), 1, dtype::i32, redop::sum));
    });
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

  std::size_t checked_root(int64_t root, int64_t root_tensor, const char* what) const {
    TORCH_CHECK(root >= 0 && root < getSize(), "mdring: ", what, ": root rank ", root, " is not in [0, ", getSize(),
                ")");
    TORCH_CHECK(root_tensor == 0, "mdring: ", what, ": rootTensor must be 0 (one tensor per process)");
    return std::size_t(root);
  }

  // Issues the calls (issue() runs under the issue lock, so every rank's calls
  // keep the order of its torch calls) and queues them for completion.
  template <class Issue>
  c10::intrusive_ptr<::c10d::Work> enqueue(::c10d::OpType type, std::vector<at::Tensor> outputs,
                                           std::vector<at::Tensor> keep, Issue&& issue) {
    auto w = c10::make_intrusive<work>(getRank(), type, outputs);
    std::vector<op> ops;
    {
      std::lock_guard l(issue_m_);
      TORCH_CHECK(g_, "mdring: the process group was destroyed");
      try {
        ops = issue();
      } catch (const mdring::error& e) {
        TORCH_CHECK(false, e.what());
      }
      std::lock_guard q(q_m_);
      TORCH_CHECK(!stop_, "mdring: the process group is shutting down");
      keep.insert(keep.end(), outputs.begin(), outputs.end());
      q_.push_back(pending{std::move(ops), w, std::move(keep)});
    }
    q_cv_.notify_one();
    return w;
  }

  void loop() {
    for (;;) {
      pending p;
      {
        std::unique_lock l(q_m_);
        q_cv_.wait(l, [&] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;
        p = std::move(q_.front());
        q_.pop_front();
      }
      std::exception_ptr e;
      for (auto& x : p.ops) {
        try {
          x.req.wait();
          if (!e && x.after) x.after();
        } catch (const std::exception& ex) {
          if (!e) e = std::make_exception_ptr(std::runtime_error(std::string("mdring: ") + ex.what()));
        }
      }
      p.ops.clear();
      p.keep.clear();
      p.w->complete(e);
    }
  }

  mutable std::mutex issue_m_;
  std::unique_ptr<group> g_;
  std::mutex q_m_;
  std::condition_variable q_cv_;
  std::deque<pending> q_;
  bool stop_ = false;
  std::thread thread_;
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

  c10::DataPtr allocate(std::size_t n) const override {
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

  static node_memory* instance;

private:
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
void shutdown_all() {
  std::vector<process_group*> v;
  {
    std::lock_guard l(live_m);
    v.assign(live.begin(), live.end());
  }
  for (auto* pg : v) pg->shutdown();
}

}  // namespace

}  // namespace mdring_torch

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  using namespace mdring_torch;
  py::module_::import("torch.distributed");
  m.doc() = "mdring's torch.distributed backend (see mdring_torch/__init__.py)";
  py::class_<process_group, ::c10d::ProcessGroup, c10::intrusive_ptr<process_group>>(m, "ProcessGroupMdring")
      .def("describe", &process_group::describe,
           "How this group runs: transport, topology, and where the topology came from.")
      .def("shutdown", &process_group::shutdown, py::call_guard<py::gil_scoped_release>());
  m.def(
      "create_ucx",
      [](const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size, double timeout_s, int local_size,
         bool is_world) {
        group_config c;
        c.rank = std::size_t(rank);
        c.size = std::size_t(size);
        c.timeout = std::chrono::milliseconds(std::int64_t(timeout_s * 1000));
        c.local_size = std::size_t(local_size);
        c.is_world = is_world;
        std::unique_ptr<group> g;
        {
          py::gil_scoped_release nogil;
          g = make_ucx_group(std::make_unique<c10d_store>(store), c);
        }
        return c10::make_intrusive<process_group>(std::move(g), rank, size);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout_s"), py::arg("local_size") = 0,
      py::arg("is_world") = false);
  m.def(
      "create_mpi",
      [](std::vector<int> world_ranks, int rank, int size, double timeout_s, bool is_world) {
        group_config c;
        c.rank = std::size_t(rank);
        c.size = std::size_t(size);
        c.timeout = std::chrono::milliseconds(std::int64_t(timeout_s * 1000));
        c.is_world = is_world;
        std::unique_ptr<group> g;
        {
          py::gil_scoped_release nogil;
          g = make_mpi_group(world_ranks, c);
        }
        return c10::make_intrusive<process_group>(std::move(g), rank, size);
      },
      py::arg("world_ranks"), py::arg("rank"), py::arg("size"), py::arg("timeout_s"), py::arg("is_world") = false);
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
