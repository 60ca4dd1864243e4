// tests/test_program.cpp: the programs of every collective (plan/program.hpp,
// plan/collective_programs.hpp), run for all ranks at once by a simulator that
// knows nothing of the algorithms: only the step vocabulary.
//
// The simulator gives each rank its buffers, receive slots and two staging
// buffers per dimension, and a cursor. It moves the ranks round robin: a step
// posts its messages (a send's data is taken when it is posted) and, for an
// arrive, publishes its slices; it completes when every receive has its send and
// every send its receive (the same dimension, segment, phase, step and peer), or
// when every peer of the dimension has arrived (left); then its ops run, reading
// peers' published buffers and staging buffers as the executors do. So a program
// is checked for what every executor relies on:
//   - exact results: int32 sums, avg truncated once (the owner's last fold),
//     a non-commutative op in rank order on direct dimensions; bitwise identity;
//   - progress: no deadlock, whatever the order the ranks move in;
//   - both ends of a message agree on its count; nothing is read or written out
//     of its region (a non-root's recvbuf of reduce has no elements at all);
//     scratch and slots are written before they are read; peers agree on the
//     range of a shared stage and read only what was published for it;
//   - every rank of a ring has the same steps in the stages of that ring.
// For all five collectives, rings, direct stages by messages and by shared access
// (with and without staging), halving-doubling, permuted block orders, every root,
// counts 0, 1, P-1 and uneven ones, in and out of place, one segment and many.
#include <doctest/doctest.h>
#include <mdring/plan/collective_programs.hpp>
#include <mdring/reduce/host.hpp>
#include <mdring/reduce/ops.hpp>
#include <mdring/topology/coordinates.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace md = mdring;
using md::algorithm;
using md::collective;
using md::region;

namespace {

struct dim_case {
  std::size_t extent;
  algorithm algo;
  bool shared;
  bool streamed = false;  // dim_program::streamed (all_reduce's pull form)
};

template <class T>
struct world {
  std::vector<dim_case> dims;
  collective kind;
  std::size_t count, root, seg_len, staging;
  bool in_place, trees = false;
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
  // The GPU executor's order and its ipc transport's waits (set_gpu()): every rank
  // runs its steps in wavefront order (plan/program.hpp); a message step of a
  // shared dimension waits until every rank of the ring has posted it (the ipc
  // transport's barrier), and a staged stage ends with a barrier (cuda/ipc.cuh).
  bool gpu = false;
  void set_gpu() {
    gpu = true;
    for (auto& rs : ranks) rs.order = md::wavefront_order(rs.prog);
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
        bool ip, bool tr = false)
      : dims(std::move(dc)), kind(k), count(n), root(rt), seg_len(len), staging(stg), in_place(ip), trees(tr) {
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
      rs.prog = md::make_program(p);
      rs.sendv.assign(send_size(), T{});
      rs.recvv.assign(recv_size(r), T(-7));
      rs.copy.assign(send_size(), T(-9));
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

  // Element pointer of slice s (n elements) for rank r at step st; nullptr after a failure.
  T* resolve(std::size_t r, const md::program_step& st, md::slice s, std::size_t n, bool write) {
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
      return resolve_own(j, at, n, write, st);
    }
    return resolve_own(r, s, n, write, st);
  }
  T* resolve_own(std::size_t r, md::slice s, std::size_t n, bool write, const md::program_step& st) {
    if (s.where == region::source || s.where == region::result) {  // a streamed dimension's
      if (kind != collective::all_reduce) return fail("region source or result outside all_reduce"), nullptr;
      auto& cp = ranks[r].copy;
      if (!ranks[r].streams) s.where = s.where == region::source ? region::send : region::recv;
      else if (s.offset + n > cp.size()) return fail("out of bounds in the streamed copy"), nullptr;
      else return cp.data() + s.offset;
    }
    if (s.offset + n > limit(r, s.where)) return fail("out of bounds in " + std::to_string(int(s.where))), nullptr;
    auto& rs = ranks[r];
    if (s.where == region::scratch || s.where == region::slot) {
      auto& w = s.where == region::scratch ? rs.scratch_written : rs.slots_written;
      const std::size_t off = s.where == region::slot ? st.segment * rs.prog.slot_elements : 0;
      for (std::size_t e = 0; e < n; ++e) {
        if (!write && !w[off + s.offset + e]) return fail("reads scratch nothing wrote"), nullptr;
        if (write) w[off + s.offset + e] = 1;
      }
      return base(r, s.where) + off + s.offset;
    }
    return base(r, s.where) + s.offset;
  }
  std::size_t peer(std::size_t r, std::size_t d, std::size_t coord) const { return md::peer_of(r, d, coord, ext); }

  template <class Op>
  void run_ops(std::size_t r, const md::program_step& st, std::span<const md::local_op> ops, Op op) {
    const auto& pr = ranks[r].prog;
    md::host_reducer<T, Op> red(op, P);
    for (const auto& o : ops) {
      std::vector<const T*> in;
      for (const auto& s : pr.inputs_of(o)) {
        const T* p = resolve(r, st, s, o.count, false);
        if (!p) return;
        in.push_back(p);
      }
      std::vector<T> tmp(o.count);
      if (o.kind == md::local_op::copy) std::memcpy(tmp.data(), in[0], o.count * sizeof(T));
      else red.combine_n(tmp.data(), in.data(), in.size(), o.count, o.final);
      for (const auto& s : pr.outputs_of(o)) {
        T* p = resolve(r, st, s, o.count, true);
        if (!p) return;
        std::memcpy(p, tmp.data(), o.count * sizeof(T));
      }
    }
  }

  key key_of(std::size_t from, std::size_t to, const md::program_step& st) const {
    return {from, to, st.dim, st.segment, int(st.ph), st.index};
  }

  // Moves rank r as far as it can go; whether it moved.
  template <class Op>
  bool advance(std::size_t r, Op op) {
    auto& rs = ranks[r];
    bool moved = false;
    while (rs.cursor < rs.prog.steps.size() && failures.empty()) {
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
        run_ops(r, st, rs.prog.pre_of(st), op);
        for (const auto& m : rs.prog.sends_of(st)) {
          const T* p = resolve(r, st, m.at, m.count, false);
          if (!p) return false;
          auto k = key_of(r, peer(r, d, m.peer), st);
          if (sent.count(k)) return fail("two sends with one key"), false;
          sent[k].assign(p, p + m.count);
        }
        for (const auto& m : rs.prog.recvs_of(st)) received[key_of(peer(r, d, m.peer), r, st)] = m.count;
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
        T* p = resolve(r, st, m.at, m.count, true);
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

  template <class Op>
  void run(Op op, bool reverse) {
    for (;;) {
      bool moved = false, done = true;
      for (std::size_t i = 0; i < P; ++i) {
        const std::size_t r = reverse ? P - 1 - i : i;
        moved |= advance(r, op);
        done = done && ranks[r].cursor == ranks[r].prog.steps.size();
      }
      if (!failures.empty() || done) return;
      if (!moved) return fail("deadlock: no rank can move");
    }
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

}  // namespace

TEST_CASE("program: the simulator runs a tiny all_reduce") {
  world<std::int32_t> w({{2, algorithm::direct, false}}, collective::all_reduce, 10, 0, 0, 0, false);
  for (std::size_t r = 0; r < 2; ++r)
    for (std::size_t i = 0; i < 10; ++i) w.ranks[r].sendv[i] = std::int32_t(r * 100 + i);
  w.run(md::sum, false);
  REQUIRE(w.failures.empty());
  for (std::size_t r = 0; r < 2; ++r)
    for (std::size_t i = 0; i < 10; ++i) CHECK(w.ranks[r].recvv[i] == std::int32_t(100 + 2 * i));
}

namespace {

using shape = std::vector<dim_case>;
const algorithm R = algorithm::ring, D = algorithm::direct, H = algorithm::halving_doubling,
                Rd = algorithm::recursive_doubling;

const std::vector<shape> shapes = {
    {{1, R, false}},
    {{2, D, false}},
    {{2, D, true}},
    {{5, R, false}},
    {{5, D, true}},
    {{3, H, false}},
    {{6, H, false}},
    {{8, H, false}},
    {{1, R, false}, {4, D, false}},
    {{4, R, false}, {1, R, false}},
    {{2, D, true}, {3, R, false}},
    {{4, D, true}, {3, H, false}},
    {{3, R, false}, {2, D, false}},
    {{2, D, true}, {3, D, true}},
    {{3, H, false}, {2, D, true}},
    {{2, R, false}, {1, R, false}, {3, D, false}},
    {{2, D, true}, {2, R, false}, {2, H, false}},
    // recursive doubling (all_reduce; the others run halving-doubling there)
    {{2, Rd, false}},
    {{5, Rd, false}},
    {{8, Rd, false}},
    {{2, D, true}, {6, Rd, false}},
    {{3, R, false}, {4, Rd, false}, {3, Rd, false}},
    {{3, Rd, false}, {2, R, false}},  // asked for in the middle: the later dimensions cut its whole range
};

std::string label(const shape& s, collective k, std::size_t n, std::size_t root, std::size_t len, std::size_t stg,
                  bool ip) {
  std::string out(md::to_string(k));
  for (const auto& d : s)
    out += " " + std::to_string(d.extent) + std::string(md::to_string(d.algo)) + (d.shared ? "(shared)" : "") +
           (d.streamed ? "(streamed)" : "");
  return out + ", count " + std::to_string(n) + ", root " + std::to_string(root) + ", segment " + std::to_string(len) +
         ", staging " + std::to_string(stg) + (ip ? ", in place" : "");
}

// Runs one case: rank r's input element i is val(r, i); combine(a, b) folds two
// values as the op does (for the expected values), fin(x) finalizes.
template <class Op, class Val, class Combine, class Fin>
void check(const shape& s, collective k, std::size_t n, std::size_t root, std::size_t len, std::size_t stg, bool ip,
           Op op, Val val, Combine combine, Fin fin, bool trees = false, bool gpu = false, int streams = 0) {
  for (bool reverse : {false, true}) {
    world<std::int32_t> w(s, k, n, root, len, stg, ip, trees);
    if (gpu) w.set_gpu();
    // Which ranks keep their results in their copy of send (streams 1: all, 2: every other one).
    for (std::size_t r = 0; r < w.P; ++r) w.ranks[r].streams = streams == 1 || (streams == 2 && r % 2 == 1);
    const std::string where =
        label(s, k, n, root, len, stg, ip) + (trees ? ", trees" : "") + (gpu ? ", gpu order" : "") +
        (streams ? ", streaming ranks " + std::to_string(streams) : "") + (reverse ? ", ranks moved in reverse" : "");
    const std::size_t P = w.P;
    for (std::size_t r = 0; r < P; ++r) {
      auto& rs = w.ranks[r];
      if (k == collective::broadcast) {
        if (r == root)
          for (std::size_t i = 0; i < n; ++i) rs.recvv[i] = val(r, i);
        continue;
      }
      std::int32_t* in = w.base(r, region::send);
      const std::size_t m = k == collective::reduce_scatter ? n * P : n;
      for (std::size_t i = 0; i < m; ++i) in[i] = val(r, i);
    }
    w.check_structure();
    w.run(op, reverse);
    for (auto& f : w.failures) FAIL_CHECK(where << ": " << f);
    if (!w.failures.empty()) return;
    std::size_t bad = 0;
    auto reduced = [&](std::size_t i) {
      std::int32_t a = val(0, i);
      for (std::size_t r = 1; r < P; ++r) a = combine(a, val(r, i));
      return fin(a);
    };
    for (std::size_t r = 0; r < P && bad < 3; ++r) {
      const std::int32_t* out = w.base(r, region::recv);
      for (std::size_t i = 0; i < w.recv_size(r) && bad < 3; ++i) {
        std::int32_t want = 0;
        switch (k) {
          case collective::all_reduce:
            want = reduced(i);
            break;
          case collective::reduce_scatter:
            want = reduced(r * n + i);
            break;
          case collective::all_gather:
            want = val(i / n, i % n);
            break;
          case collective::broadcast:
            want = val(root, i);
            break;
          default:
            want = reduced(i);
            break;
        }
        if (out[i] != want) {
          ++bad;
          FAIL_CHECK(where << ": rank " << r << " element " << i << " is " << out[i] << ", expected " << want);
        }
      }
    }
    CHECK_MESSAGE(bad == 0, where);
  }
}

std::size_t size_of(const shape& s) {
  std::size_t P = 1;
  for (auto& d : s) P *= d.extent;
  return P;
}

std::int32_t value(std::size_t r, std::size_t i) { return std::int32_t((r + 1) * 1000 + i % 997); }
std::int32_t add(std::int32_t a, std::int32_t b) { return a + b; }
std::int32_t same(std::int32_t a) { return a; }

}  // namespace

TEST_CASE("program: all_reduce, int32 sum, every shape, count, segment length and staging, in and out of place") {
  for (const auto& s : shapes) {
    const std::size_t P = size_of(s);
    for (std::size_t n : {std::size_t(0), std::size_t(1), P - 1, std::size_t(13), std::size_t(97), std::size_t(1009)})
      for (std::size_t len : {std::size_t(0), std::size_t(64), std::size_t(300)})
        for (std::size_t stg : {std::size_t(0), std::size_t(64), std::size_t(4096)})
          for (bool ip : {false, true}) check(s, collective::all_reduce, n, 0, len, stg, ip, md::sum, value, add, same);
  }
}

namespace {
struct keep_left {
  static constexpr bool is_commutative = false;
  std::int32_t operator()(std::int32_t a, std::int32_t) const { return a; }
};
}  // namespace

TEST_CASE("program: all_reduce's pull form (a streamed dimension), whichever ranks keep their results in send") {
  // dim_program::streamed: peers read a rank's region source and result, which are
  // its send and recv, or one block (the executor streams where its buffers cannot
  // be mapped) that the program fills; any mix of ranks works. Where the dimension
  // is not the call's only one, the fused form runs.
  const std::vector<shape> streamed = {
      {{2, D, true, true}},
      {{5, D, true, true}},
      {{1, R, false}, {4, D, true, true}, {1, R, false}},
      {{2, D, true, true}, {3, R, false}},
      {{3, R, false}, {2, D, true, true}},
  };
  auto val = [](std::size_t r, std::size_t i) { return std::int32_t(3 * r + i % 5); };
  auto left = [](std::int32_t a, std::int32_t) { return a; };
  for (const auto& s : streamed) {
    const std::size_t P = size_of(s);
    auto fin = [P](std::int32_t a) { return std::int32_t(a / std::int32_t(P)); };
    for (int streams : {0, 1, 2})
      for (std::size_t stg : {std::size_t(0), std::size_t(64)}) {
        for (std::size_t n : {std::size_t(0), std::size_t(1), P - 1, std::size_t(13), std::size_t(1009)})
          for (std::size_t len : {std::size_t(0), std::size_t(64), std::size_t(300)})
            for (bool ip : {false, true})
              check(s, collective::all_reduce, n, 0, len, stg, ip, md::sum, value, add, same, false, false, streams);
        check(s, collective::all_reduce, 97, 0, 32, stg, false, md::avg, val, add, fin, false, false, streams);
        if (std::all_of(s.begin(), s.end(), [](const dim_case& d) { return d.extent == 1 || d.algo == D; }))
          check(s, collective::all_reduce, 1009, 0, 100, stg, false, keep_left{}, value, left, same, false, false,
                streams);  // in rank order (direct dimensions only)
      }
  }
}

TEST_CASE("program: reduce_scatter, all_gather, broadcast and reduce, every shape, count, root and staging") {
  for (const auto& s : shapes) {
    const std::size_t P = size_of(s);
    for (std::size_t stg : {std::size_t(0), std::size_t(64), std::size_t(4096)}) {
      for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(3), std::size_t(17)})
        for (bool ip : {false, true}) {
          check(s, collective::reduce_scatter, n, 0, 0, stg, ip, md::sum, value, add, same);
          check(s, collective::all_gather, n, 0, 0, stg, ip, md::sum, value, add, same);
        }
      for (std::size_t n : {std::size_t(0), std::size_t(1), P - 1, std::size_t(97)})
        for (std::size_t root : {std::size_t(0), P / 2, P - 1})
          for (bool trees : {false, true}) {
            check(s, collective::broadcast, n, root, 0, stg, false, md::sum, value, add, same, trees);
            check(s, collective::reduce, n, root, 0, stg, false, md::sum, value, add, same, trees);
          }
    }
  }
}

TEST_CASE("program: every collective as the GPU runs it (wavefront order, the ipc transport's barriers)") {
  // Shared dimensions are the ipc transport's: direct stages read the peers'
  // buffers in place, staged ones (one-shot) go through the staging buffers.
  for (const auto& s : shapes) {
    const std::size_t P = size_of(s);
    for (std::size_t stg : {std::size_t(0), std::size_t(64), std::size_t(4096)}) {
      for (std::size_t n : {std::size_t(0), std::size_t(1), P - 1, std::size_t(97), std::size_t(1009)})
        for (std::size_t len : {std::size_t(0), std::size_t(64)})
          for (bool ip : {false, true})
            check(s, collective::all_reduce, n, 0, len, stg, ip, md::sum, value, add, same, false, true);
      for (std::size_t n : {std::size_t(1), std::size_t(17)})
        for (bool ip : {false, true}) {
          check(s, collective::reduce_scatter, n, 0, 0, stg, ip, md::sum, value, add, same, false, true);
          check(s, collective::all_gather, n, 0, 0, stg, ip, md::sum, value, add, same, false, true);
        }
      for (std::size_t root : {std::size_t(0), P - 1})
        for (bool trees : {false, true}) {
          check(s, collective::broadcast, 97, root, 0, stg, false, md::sum, value, add, same, trees, true);
          check(s, collective::reduce, 97, root, 0, stg, false, md::sum, value, add, same, trees, true);
        }
    }
  }
}

TEST_CASE("program: avg divides once, by the owner") {
  // Truncating integer division shows that the division happens once, on the full sum.
  auto val = [](std::size_t r, std::size_t i) { return std::int32_t(3 * r + i % 5); };
  for (const auto& s : shapes) {
    const std::int32_t P = std::int32_t(size_of(s));
    auto fin = [P](std::int32_t a) { return std::int32_t(a / P); };
    for (std::size_t stg : {std::size_t(0), std::size_t(4096)}) {
      check(s, collective::all_reduce, 97, 0, 32, stg, false, md::avg, val, add, fin);
      check(s, collective::reduce_scatter, 7, 0, 0, stg, false, md::avg, val, add, fin);
      check(s, collective::reduce, 97, std::size_t(P) - 1, 0, stg, false, md::avg, val, add, fin);
      check(s, collective::reduce, 97, std::size_t(P) / 2, 0, stg, false, md::avg, val, add, fin, true);
    }
  }
}

TEST_CASE("program: a non-commutative op on direct stages combines in rank order") {
  // keep_left over ranks 0..P-1 in rank order gives rank 0's value.
  const std::vector<shape> direct_shapes = {
      {{2, D, false}}, {{5, D, true}}, {{2, D, true}, {3, D, false}}, {{2, D, false}, {2, D, true}, {2, D, false}}};
  auto left = [](std::int32_t a, std::int32_t) { return a; };
  for (const auto& s : direct_shapes)
    for (std::size_t stg : {std::size_t(0), std::size_t(64)}) {
      check(s, collective::all_reduce, 1009, 0, 100, stg, false, keep_left{}, value, left, same);
      check(s, collective::reduce_scatter, 13, 0, 0, stg, false, keep_left{}, value, left, same);
      check(s, collective::reduce, 97, 1, 0, stg, false, keep_left{}, value, left, same);
    }
}
