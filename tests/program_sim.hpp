// tests/program_sim.hpp: the one simulator of mdring's programs (plan/program.hpp,
// plan/collective_programs.hpp) in the tests. It runs one call's programs for all
// ranks at once and knows nothing of the algorithms: only the step vocabulary.
// tests/test_program.cpp runs every collective on it, tests/test_schedule.cpp the
// all_reduce program as the GPU runs it.
//
// It gives each rank its buffers, receive slots and two staging buffers per
// dimension, and a cursor. It moves the ranks round robin: a step posts its
// messages (a send's data is taken when it is posted) and, for an arrive,
// publishes its slices; it completes when every receive has its send and every
// send its receive (the same dimension, segment, phase, step and peer), or when
// every peer of the dimension has arrived (left); then its ops run, reading peers'
// published buffers and staging buffers as the executors do. Every run checks:
//   - progress: no deadlock, whatever the order the ranks move in;
//   - both ends of a message agree on its count, one send and one receive per
//     (step, peer); nothing is read or written out of its region (a non-root's
//     recvbuf of reduce has no elements at all); scratch and slots are written
//     before they are read; peers agree on the range of a shared stage and read
//     only what was published for it;
//   - every rank of a ring has the same steps in the stages of that ring.
// The GPU modes (mode::gpu, mode::lockstep) run each rank's steps in wavefront
// order (wavefront_order) with the ipc transport's barriers on shared dimensions
// (a message step waits until every rank of the ring has posted it, a staged
// stage ends with a barrier: cuda/ipc.cuh), and check what the GPU relies on:
//   - no receive of a step overlaps a send or another receive of the same rank
//     (on the GPU a step's copies run concurrently);
//   - with vector_elements V > 1, every fold's destination(s) and inputs have the
//     same address modulo V (send and recv misaligned by recv_misalignment, the
//     device scratch block, scratch then each segment's slots, aligned), which is
//     what lets the kernels use 16-byte loads on any block boundaries;
//   - a dimension not shared synchronizes only by messages; an all_reduce step of
//     such a dimension has no pre ops, its ops are folds into recvbuf alone, and
//     its sends read no scratch.
// mode::lockstep is the single-GPU executor of several logical ranks: every rank
// has the same steps in the same wavefront order (checked), and step k completes
// on every rank before any rank starts step k + 1.
#pragma once

#include <doctest/doctest.h>
#include <mdring/plan/collective_programs.hpp>
#include <mdring/reduce/host.hpp>
#include <mdring/reduce/ops.hpp>
#include <mdring/topology/coordinates.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace md = mdring;

namespace {

using md::algorithm;
using md::collective;
using md::region;

struct dim_case {
  std::size_t extent;
  algorithm algo;
  bool shared;
  bool streamed = false;  // dim_program::streamed (all_reduce's pull form)
};
using shape = std::vector<dim_case>;

// host: as the host executor runs programs; gpu: wavefront order, the ipc
// transport's barriers and the GPU's checks; lockstep: gpu, all ranks in lock step.
enum class mode { host, gpu, lockstep };

template <class T>
struct world {
  std::vector<dim_case> dims;
  collective kind;
  std::size_t count, root, seg_len, staging;
  bool in_place, trees = false;
  std::size_t V = 1, mis = 0;  // program_params::vector_elements, recv_misalignment
  std::size_t P = 1;
  std::vector<std::size_t> ext;
  std::vector<std::string> failures;

  struct published {
    std::uint32_t seq = 0;
    bool has_src = false, has_dst = false;
    md::slice src, dst;
    std::size_t signature = 0;
  };
  struct rank_state {
    std::vector<std::size_t> coords;
    md::program prog;
    std::vector<T> sendv, recvv, scratch, slots;
    std::vector<unsigned char> scratch_written, slots_written;
    std::vector<std::vector<T>> staging;   // per dimension: 2 buffers
    std::vector<std::uint32_t> seq, left;  // per dimension: shared stages arrived at, left
    // Per dimension, by parity of the stage: a peer may have arrived at the next
    // shared stage (staged ones; and in the GPU's order, the next segment's) while
    // this rank still reads what it published for this one.
    std::vector<std::array<published, 2>> pub;
    std::vector<std::uint32_t> steps_posted;  // gpu: per dimension, message steps posted (ipc: a barrier)
    std::vector<std::size_t> order;           // gpu: the steps in wavefront order
    std::size_t cursor = 0;
    bool posted = false;
    bool staged_open = false;  // gpu: a staged stage arrived, not yet closed
    bool streams = false;      // regions source and result are `copy` (the executor's block), else send and recv
    std::vector<T> copy;
  };
  std::vector<rank_state> ranks;
  bool gpu = false, lockstep = false;
  void set_mode(mode m) {
    gpu = m != mode::host, lockstep = m == mode::lockstep;
    for (auto& rs : ranks) rs.order = gpu ? md::wavefront_order(rs.prog) : std::vector<std::size_t>{};
  }
  // Messages posted and not yet matched: (from, to, dim, segment, phase, index) -> data.
  using key = std::tuple<std::size_t, std::size_t, std::size_t, std::size_t, int, std::size_t>;
  std::map<key, std::vector<T>> sent;
  std::map<key, std::size_t> received;  // posted receives: count

  std::size_t send_size() const {
    return kind == collective::reduce_scatter ? count * P : kind == collective::all_gather ? count : count;
  }
  std::size_t recv_size(std::size_t r) const {
    if (kind == collective::reduce_scatter) return count;
    if (kind == collective::all_gather) return count * P;
    if (kind == collective::reduce && r != root) return 0;
    return count;
  }

  world(std::vector<dim_case> dc, collective k, std::size_t n, std::size_t rt, std::size_t len, std::size_t stg,
        bool ip, bool tr = false, std::size_t v = 1, std::size_t m = 0, bool split = true)
      : dims(std::move(dc)),
        kind(k),
        count(n),
        root(rt),
        seg_len(len),
        staging(stg),
        in_place(ip),
        trees(tr),
        V(v ? v : 1),
        mis(m) {
    for (auto& x : dims) ext.push_back(x.extent), P *= x.extent;
    ranks.resize(P);
    for (std::size_t r = 0; r < P; ++r) {
      auto& rs = ranks[r];
      rs.coords.resize(ext.size());
      md::to_coordinates(r, ext, rs.coords);
      std::vector<md::dim_program> dp;
      for (std::size_t d = 0; d < dims.size(); ++d)
        dp.push_back({dims[d].extent, rs.coords[d], dims[d].algo, dims[d].shared, staging, dims[d].streamed});
      md::program_params p;
      p.kind = kind, p.dims = dp, p.count = count, p.rank = r, p.root = root, p.elem_size = sizeof(T);
      p.segment_length = seg_len, p.nontemporal_bytes = 4096, p.trees = trees;
      // A reduce of at most 256 bytes over a shared last dimension of two: one stage
      // at the root (plan/reduce_program.hpp shared_reduce); the tests' 97 elements: two.
      p.shared_reduce_max_bytes = 256;
      // Larger ones, not staged: one stage, each rank writing its block into the
      // root's (shared_reduce_split) as the host engine runs it; split false (the
      // GPU modes, as the CUDA communicator builds them): the reduce-scatter and gather.
      p.shared_reduce_split = split;
      p.vector_elements = V, p.recv_misalignment = mis;
      rs.prog = md::make_program(p);
      rs.sendv.assign(send_size(), T{});
      rs.recvv.assign(recv_size(r), T(-7));
      rs.copy.assign(std::max(send_size(), recv_size(r)), T(-9));
      rs.scratch.assign(rs.prog.scratch_elements, T{});
      rs.scratch_written.assign(rs.prog.scratch_elements, 0);
      rs.slots.assign(rs.prog.segments * rs.prog.slot_elements, T{});
      rs.slots_written.assign(rs.slots.size(), 0);
      rs.staging.assign(2 * dims.size(), std::vector<T>(staging / sizeof(T)));
      rs.seq.assign(dims.size(), 0), rs.left.assign(dims.size(), 0), rs.pub.assign(dims.size(), {});
      rs.steps_posted.assign(dims.size(), 0);
    }
  }

  void fail(const std::string& s) {
    if (failures.size() < 10) failures.push_back(s);
  }

  // The in-place aliases: send inside recv (all_reduce: the same; all_gather: block
  // rank), or recv inside send (reduce_scatter).
  T* base(std::size_t r, region g) {
    auto& rs = ranks[r];
    if (in_place && g == region::send) {
      if (kind == collective::all_reduce) return rs.recvv.data();
      if (kind == collective::all_gather) return rs.recvv.data() + r * count;
    }
    if (in_place && g == region::recv && kind == collective::reduce_scatter) return rs.sendv.data() + r * count;
    switch (g) {
      case region::send:
        return rs.sendv.data();
      case region::recv:
        return rs.recvv.data();
      case region::scratch:
        return rs.scratch.data();
      default:
        return rs.slots.data();
    }
  }
  std::size_t limit(std::size_t r, region g) const {
    switch (g) {
      case region::send:
        return send_size();
      case region::recv:
        return recv_size(r);
      case region::scratch:
        return ranks[r].prog.scratch_elements;
      default:
        return ranks[r].prog.slot_elements;
    }
  }

  // read: scratch and slots must have been written; write: marks them written;
  // peek: neither (where a step's receive lies before it is delivered).
  enum class access { read, write, peek };
  // Element pointer of slice s (n elements) for rank r at step st; nullptr after a failure.
  T* resolve(std::size_t r, const md::program_step& st, md::slice s, std::size_t n, access a) {
    auto& rs = ranks[r];
    const std::size_t d = st.dim;
    if (s.where == region::staging || s.where == region::staging_next) {
      const std::size_t j = s.where == region::staging ? peer(r, d, s.peer) : r;
      const std::uint32_t q = s.where == region::staging ? rs.seq[d] : rs.seq[d] + 1;
      auto& buf = ranks[j].staging[2 * d + q % 2];
      if (s.offset + n > buf.size()) return fail("staging out of bounds"), nullptr;
      return buf.data() + s.offset;
    }
    if (s.where == region::peer_src || s.where == region::peer_dst) {
      const std::size_t j = peer(r, d, s.peer);
      const auto& pb = ranks[j].pub[d][rs.seq[d] % 2];
      if (pb.seq != rs.seq[d]) return fail("reads a peer's buffer published for another stage"), nullptr;
      const bool src = s.where == region::peer_src;
      if (!(src ? pb.has_src : pb.has_dst)) return fail("reads a peer's buffer it did not publish"), nullptr;
      md::slice at = src ? pb.src : pb.dst;
      at.offset += s.offset;
      return resolve_own(j, at, n, a, st);
    }
    return resolve_own(r, s, n, a, st);
  }
  T* resolve_own(std::size_t r, md::slice s, std::size_t n, access a, const md::program_step& st) {
    if (s.where == region::source || s.where == region::result) {  // a streamed dimension's
      // (broadcast and all_gather: a source laid out as recvbuf, or the copy;
      // reduce_scatter: one laid out as send, as all_reduce's)
      const bool whole = (kind == collective::broadcast || kind == collective::all_gather) && s.where == region::source;
      if (kind != collective::all_reduce && !whole &&
          !(kind == collective::reduce_scatter && s.where == region::source))
        return fail("region source or result outside all_reduce, reduce_scatter, all_gather and broadcast"), nullptr;
      auto& cp = ranks[r].copy;
      if (!ranks[r].streams) s.where = s.where == region::source && !whole ? region::send : region::recv;
      else if (s.offset + n > cp.size()) return fail("out of bounds in the streamed copy"), nullptr;
      else return cp.data() + s.offset;
    }
    if (s.offset + n > limit(r, s.where)) return fail("out of bounds in " + std::to_string(int(s.where))), nullptr;
    auto& rs = ranks[r];
    if (s.where == region::scratch || s.where == region::slot) {
      auto& w = s.where == region::scratch ? rs.scratch_written : rs.slots_written;
      const std::size_t off = s.where == region::slot ? st.segment * rs.prog.slot_elements : 0;
      for (std::size_t e = 0; e < n && a != access::peek; ++e) {
        if (a == access::read && !w[off + s.offset + e]) return fail("reads scratch nothing wrote"), nullptr;
        if (a == access::write) w[off + s.offset + e] = 1;
      }
      return base(r, s.where) + off + s.offset;
    }
    return base(r, s.where) + s.offset;
  }
  std::size_t peer(std::size_t r, std::size_t d, std::size_t coord) const { return md::peer_of(r, d, coord, ext); }

  // Address modulo V of the element at p, wherever it lies: send, recv and the
  // streamed copy are misaligned by mis; the device scratch block (scratch, then
  // each segment's slots, as cuda/engine.cuh lays it out) and staging are aligned.
  std::size_t phase_of(const T* p) const {
    const std::less_equal<const T*> le;
    std::size_t out = V;
    auto in = [&](const std::vector<T>& v, std::size_t origin) {
      if (v.empty() || !le(v.data(), p) || le(v.data() + v.size(), p)) return false;
      return out = (origin + std::size_t(p - v.data())) % V, true;
    };
    for (const auto& rs : ranks) {
      if (in(rs.sendv, mis) || in(rs.recvv, mis) || in(rs.copy, mis) || in(rs.scratch, 0) ||
          in(rs.slots, rs.prog.scratch_elements))
        return out;
      for (const auto& b : rs.staging)
        if (in(b, 0)) return out;
    }
    return out;
  }
  // A GPU step of a dimension not shared: by messages alone (the all_reduce checks).
  bool gpu_messages(const md::program_step& st) const { return gpu && !dims[st.dim].shared; }

  template <class Op>
  void run_ops(std::size_t r, const md::program_step& st, std::span<const md::local_op> ops, Op op) {
    const auto& pr = ranks[r].prog;
    const bool plain = gpu_messages(st) && kind == collective::all_reduce;
    md::host_reducer<T, Op> red(op, P);
    for (const auto& o : ops) {
      if (plain && (o.kind != md::local_op::fold || o.outs != 1))
        return fail("a GPU all_reduce op is not a fold into one buffer");
      std::vector<const T*> in;
      for (const auto& s : pr.inputs_of(o)) {
        const T* p = resolve(r, st, s, o.count, access::read);
        if (!p) return;
        in.push_back(p);
      }
      std::vector<T> tmp(o.count);
      if (o.kind == md::local_op::copy) std::memcpy(tmp.data(), in[0], o.count * sizeof(T));
      else red.combine_n(tmp.data(), in.data(), in.size(), o.count, o.final);
      for (const auto& s : pr.outputs_of(o)) {
        if (plain && s.where != region::recv) return fail("fold writes outside recvbuf");
        T* p = resolve(r, st, s, o.count, access::write);
        if (!p) return;
        if (gpu && V > 1 && o.kind == md::local_op::fold && o.count > 0)
          for (const T* q : in)
            if (phase_of(q) != phase_of(p)) return fail("fold input not vector-aligned with its destination");
        std::memcpy(p, tmp.data(), o.count * sizeof(T));
      }
    }
  }

  key key_of(std::size_t from, std::size_t to, const md::program_step& st) const {
    return {from, to, st.dim, st.segment, int(st.ph), st.index};
  }

  // GPU: the step's receives, where they will land, overlap none of its sends nor
  // each other (the copies of a step run concurrently with the peers' reads).
  void check_overlap(std::size_t r, const md::program_step& st) {
    const auto& pr = ranks[r].prog;
    auto span_of = [&](const md::transfer& m) {
      const T* p = resolve(r, st, m.at, m.count, access::peek);
      return std::pair<std::uintptr_t, std::size_t>{reinterpret_cast<std::uintptr_t>(p), m.count * sizeof(T)};
    };
    auto overlap = [](std::pair<std::uintptr_t, std::size_t> x, std::pair<std::uintptr_t, std::size_t> y) {
      return x.first && y.first && x.first < y.first + y.second && y.first < x.first + x.second;
    };
    const auto recvs = pr.recvs_of(st);
    for (std::size_t a = 0; a < recvs.size(); ++a) {
      const auto x = span_of(recvs[a]);
      for (const auto& m : pr.sends_of(st))
        if (overlap(x, span_of(m))) fail("step " + std::to_string(st.index) + ": a receive overlaps a send");
      for (std::size_t b = a + 1; b < recvs.size(); ++b)
        if (overlap(x, span_of(recvs[b]))) fail("step " + std::to_string(st.index) + ": two receives overlap");
    }
  }

  // Moves rank r as far as it can go, up to its step `cap` (its cursor; lockstep);
  // whether it moved.
  template <class Op>
  bool advance(std::size_t r, Op op, std::size_t cap) {
    auto& rs = ranks[r];
    bool moved = false;
    while (rs.cursor < std::min(cap, rs.prog.steps.size()) && failures.empty()) {
      const auto& st = rs.prog.steps[gpu ? rs.order[rs.cursor] : rs.cursor];
      const std::size_t d = st.dim;
      if (!rs.posted) {
        if (gpu && dims[d].shared) {
          // The barrier that closed a staged stage of this dimension: every peer
          // has closed it too.
          for (std::size_t j = 0; j < ext[d]; ++j)
            if (ranks[peer(r, d, j)].left[d] < rs.left[d]) return moved;
          if (st.sync == md::sync_kind::messages) ++rs.steps_posted[d];
        }
        if (gpu_messages(st) && st.sync != md::sync_kind::messages && st.sync != md::sync_kind::none)
          return fail("a GPU program synchronizes by shared access on a dimension not shared"), false;
        if (gpu_messages(st) && kind == collective::all_reduce && st.pre)
          return fail("a GPU all_reduce step has pre ops"), false;
        run_ops(r, st, rs.prog.pre_of(st), op);
        for (const auto& m : rs.prog.sends_of(st)) {
          if (gpu_messages(st) && kind == collective::all_reduce &&
              (m.at.where == region::scratch || m.at.where == region::slot))
            return fail("a send reads scratch"), false;
          const T* p = resolve(r, st, m.at, m.count, access::read);
          if (!p) return false;
          auto k = key_of(r, peer(r, d, m.peer), st);
          if (sent.count(k)) return fail("two sends with one key"), false;
          sent[k].assign(p, p + m.count);
        }
        for (const auto& m : rs.prog.recvs_of(st)) {
          auto k = key_of(peer(r, d, m.peer), r, st);
          if (received.count(k)) return fail("two receives with one key"), false;
          received[k] = m.count;
        }
        if (gpu) check_overlap(r, st);
        if (st.sync == md::sync_kind::arrive) {
          rs.seq[d] += 1;
          auto& pb = rs.pub[d][rs.seq[d] % 2];
          pb.seq = rs.seq[d], pb.has_src = st.publishes_src, pb.has_dst = st.publishes_dst;
          pb.src = st.publish_src, pb.dst = st.publish_dst, pb.signature = st.signature;
        }
        if (st.sync == md::sync_kind::leave) rs.left[d] = rs.seq[d];
        rs.posted = true;
        moved = true;
      }
      bool ready = true;
      if (st.sync == md::sync_kind::messages) {
        for (const auto& m : rs.prog.recvs_of(st)) ready = ready && sent.count(key_of(peer(r, d, m.peer), r, st));
        for (const auto& m : rs.prog.sends_of(st)) ready = ready && received.count(key_of(r, peer(r, d, m.peer), st));
        if (gpu && dims[d].shared)
          for (std::size_t j = 0; j < ext[d]; ++j)
            ready = ready && ranks[peer(r, d, j)].steps_posted[d] >= rs.steps_posted[d];
      } else if (st.sync != md::sync_kind::none) {
        for (std::size_t j = 0; j < ext[d]; ++j) {
          const auto& ps = ranks[peer(r, d, j)];
          ready = ready && (st.sync == md::sync_kind::arrive ? ps.seq[d] >= rs.seq[d] : ps.left[d] >= rs.seq[d]);
        }
      }
      if (!ready) return moved;
      if (st.sync == md::sync_kind::arrive)
        for (std::size_t j = 0; j < ext[d]; ++j)
          if (ranks[peer(r, d, j)].pub[d][rs.seq[d] % 2].signature != st.signature)
            return fail("peers disagree on a range"), false;
      for (const auto& m : rs.prog.recvs_of(st)) {  // deliver
        auto k = key_of(peer(r, d, m.peer), r, st);
        auto& data = sent[k];
        if (data.size() != m.count) return fail("a message's count differs at its two ends"), false;
        T* p = resolve(r, st, m.at, m.count, access::write);
        if (!p) return false;
        std::memcpy(p, data.data(), m.count * sizeof(T));
      }
      // Both ends are done with a message once its receiver has it.
      for (const auto& m : rs.prog.recvs_of(st)) sent.erase(key_of(peer(r, d, m.peer), r, st));
      for (const auto& m : rs.prog.sends_of(st)) received.erase(key_of(r, peer(r, d, m.peer), st));
      run_ops(r, st, rs.prog.ops_of(st), op);
      if (gpu && dims[d].shared) {
        if (st.sync == md::sync_kind::arrive && !st.publishes_src && !st.publishes_dst) rs.staged_open = true;
        if (st.stage_end && rs.staged_open) rs.staged_open = false, rs.left[d] = rs.seq[d];
      }
      rs.posted = false;
      ++rs.cursor;
      moved = true;
    }
    return moved;
  }

  // Moves the ranks round robin until each is at its step `cap` or done.
  template <class Op>
  void drive(Op op, bool reverse, std::size_t cap) {
    for (;;) {
      bool moved = false, done = true;
      for (std::size_t i = 0; i < P; ++i) {
        const std::size_t r = reverse ? P - 1 - i : i;
        moved |= advance(r, op, cap);
        done = done && ranks[r].cursor == std::min(cap, ranks[r].prog.steps.size());
      }
      if (!failures.empty() || done) return;
      if (!moved) return fail("deadlock: no rank can move");
    }
  }

  template <class Op>
  void run(Op op, bool reverse) {
    if (!lockstep) return drive(op, reverse, std::numeric_limits<std::size_t>::max());
    const auto& r0 = ranks[0];
    for (std::size_t r = 1; r < P; ++r) {
      if (ranks[r].prog.steps.size() != r0.prog.steps.size())
        return fail("step counts differ between ranks 0 and " + std::to_string(r));
      if (ranks[r].order != r0.order) return fail("wavefront orders differ between ranks 0 and " + std::to_string(r));
      for (std::size_t i : r0.order) {
        const auto &s = ranks[r].prog.steps[i], &s0 = r0.prog.steps[i];
        if (s.segment != s0.segment || s.stage != s0.stage || s.dim != s0.dim || s.index != s0.index || s.ph != s0.ph)
          return fail("step " + std::to_string(i) + " differs between ranks 0 and " + std::to_string(r));
      }
    }
    for (std::size_t k = 0; k < r0.prog.steps.size() && failures.empty(); ++k) drive(op, reverse, k + 1);
  }

  // Ranks of one ring of dimension d have the same steps in d's stages.
  void check_structure() {
    for (std::size_t r = 0; r < P; ++r)
      for (std::size_t d = 0; d < ext.size(); ++d) {
        if (ext[d] < 2) continue;
        auto sig = [&](std::size_t x) {
          std::vector<std::tuple<std::size_t, std::size_t, int, std::size_t>> v;
          for (const auto& st : ranks[x].prog.steps)
            if (st.dim == d) v.emplace_back(st.segment, st.index, int(st.ph), std::size_t(st.sync));
          return v;
        };
        if (sig(r) != sig(peer(r, d, 0))) fail("ranks of one ring have different steps in its stages");
      }
  }
};

// One call to replay: the simulator's arguments, its mode, and which ranks keep
// their results in their copy of send (streams 1: all, 2: every other one).
struct sim_case {
  shape dims;
  collective kind = collective::all_reduce;
  std::size_t count = 0, root = 0, segment = 0, staging = 0;
  bool in_place = false, trees = false;
  mode how = mode::host;
  int streams = 0;
  std::size_t V = 1, mis = 0;
};

std::size_t size_of(const shape& s) {
  std::size_t P = 1;
  for (auto& d : s) P *= d.extent;
  return P;
}

std::string label(const sim_case& c) {
  std::string out(md::to_string(c.kind));
  for (const auto& d : c.dims)
    out += " " + std::to_string(d.extent) + std::string(md::to_string(d.algo)) + (d.shared ? "(shared)" : "") +
           (d.streamed ? "(streamed)" : "");
  out += ", count " + std::to_string(c.count) + ", root " + std::to_string(c.root) + ", segment " +
         std::to_string(c.segment) + ", staging " + std::to_string(c.staging) + (c.in_place ? ", in place" : "");
  if (c.V > 1) out += ", V " + std::to_string(c.V) + ", misaligned " + std::to_string(c.mis);
  return out + (c.trees ? ", trees" : "") + (c.how == mode::gpu ? ", gpu order" : "") +
         (c.how == mode::lockstep ? ", gpu lock step" : "") +
         (c.streams ? ", streaming ranks " + std::to_string(c.streams) : "");
}

// Replays case c twice (ranks moved in order, then in reverse): rank r's input
// element i is val(r, i) (broadcast: the root's recvbuf), and element i of rank
// r's recvbuf must be want(r, i) afterwards; an all_reduce's results are also
// bitwise the same on every rank. One CHECK per replay, FAIL_CHECKs for the details.
template <class T, class Op, class Val, class Want>
void replay(const sim_case& c, Op op, Val val, Want want) {
  for (bool reverse : {false, true}) {
    world<T> w(c.dims, c.kind, c.count, c.root, c.segment, c.staging, c.in_place, c.trees, c.V, c.mis,
               c.how == mode::host);
    w.set_mode(c.how);
    for (std::size_t r = 0; r < w.P; ++r) w.ranks[r].streams = c.streams == 1 || (c.streams == 2 && r % 2 == 1);
    const std::string where = label(c) + (reverse ? ", ranks moved in reverse" : "");
    const std::size_t P = w.P, n = c.count;
    for (std::size_t r = 0; r < P; ++r) {
      auto& rs = w.ranks[r];
      if (c.kind == collective::broadcast) {
        if (r == c.root)
          for (std::size_t i = 0; i < n; ++i) rs.recvv[i] = val(r, i);
        continue;
      }
      T* in = w.base(r, region::send);
      const std::size_t m = c.kind == collective::reduce_scatter ? n * P : n;
      for (std::size_t i = 0; i < m; ++i) in[i] = val(r, i);
    }
    w.check_structure();
    w.run(op, reverse);
    for (auto& f : w.failures) FAIL_CHECK(where << ": " << f);
    if (!w.failures.empty()) return;
    std::size_t bad = 0;
    for (std::size_t r = 0; r < P && bad < 3; ++r) {
      const T* out = w.base(r, region::recv);
      for (std::size_t i = 0; i < w.recv_size(r) && bad < 3; ++i) {
        const T expect = want(r, i);
        if (!(out[i] == expect)) {
          ++bad;
          FAIL_CHECK(where << ": rank " << r << " element " << i << " is " << double(out[i]) << ", expected "
                           << double(expect));
        }
        if (c.kind == collective::all_reduce && std::memcmp(&out[i], w.base(0, region::recv) + i, sizeof(T)) != 0) {
          ++bad;
          FAIL_CHECK(where << ": rank " << r << " element " << i << " differs from rank 0 in its bits");
        }
      }
    }
    CHECK_MESSAGE(bad == 0, where);
  }
}

}  // namespace
