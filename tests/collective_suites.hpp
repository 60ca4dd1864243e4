// tests/collective_suites.hpp: the collectives checked (each call's result against
// its spec, every element, poison around the buffers), a world of ranks on the
// threads transport, and the suites the test files run over shapes, algorithms,
// counts and types (test_collectives*.cpp; values and specs: collective_support.hpp).
#pragma once

#include "collective_support.hpp"

namespace {

// ---- the collectives, checked ----------------------------------------------------------
//
// Inputs and expected values are computed by functions templated on the element type
// and spec only (not on the communicator), kept out of line to keep the test quick to
// compile; the do_* wrappers only allocate, call and compare.

template <class Spec>
const typename Spec::values& values_of(const Spec& sp) {
  return sp;
}

template <class T, class Spec>
[[gnu::noinline]] std::vector<T> make_inputs(const Spec& sp, std::size_t r, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t j = 0; j < n; ++j) v[j] = sp.in(r, j);
  return v;
}

// fold over ranks q of sp.in(q, off + i), for i in [0, n).
template <class T, class Spec>
[[gnu::noinline]] std::vector<T> make_expected(const Spec& sp, std::size_t P, std::size_t off, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = sp.fold(P, [&](std::size_t q) { return sp.in(q, off + i); });
  return v;
}

template <class T>
[[gnu::noinline]] std::vector<T> make_bits(std::size_t r, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = bits_value<T>(hash3(r, i, 11));
  return v;
}

// got[0..n) must equal want[0..n) bitwise.
template <class T>
[[gnu::noinline]] void expect_eq(rank_ctx& cx, const char* what, const T* got, const T* want, std::size_t n) {
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < n; ++i) {
    ++cx.checks;
    if (!same(got[i], want[i])) {
      if (!bad) first = i;
      ++bad;
    }
  }
  if (bad)
    cx.fail(std::string(what) + ": " + std::to_string(bad) + " of " + std::to_string(n) + " elements wrong; first [" +
            std::to_string(first) + "]: got " + show(got[first]) + ", expected " + show(want[first]) +
            (same(got[first], poison<T>()) ? " (never written: still the sentinel)" : ""));
}
template <class T>
void expect_eq(rank_ctx& cx, const char* what, const T* got, const std::vector<T>& want) {
  expect_eq(cx, what, got, want.data(), want.size());
}

template <class T>
[[gnu::noinline]] void copy_to(T* dst, const std::vector<T>& src) {
  if (!src.empty()) std::memcpy(dst, src.data(), src.size() * sizeof(T));
}

template <class T, class Spec, class Comm>
void do_all_reduce(Comm& c, rank_ctx& cx, const Spec& sp, std::size_t n, bool in_place) {
  const std::size_t r = c.rank(), P = c.size();
  cx.where = where_of("all_reduce", md::type_name<T>(), sp.name(), "n=" + std::to_string(n),
                      in_place ? "in place" : "out of place", cx.misaligned);
  const auto x = make_inputs<T>(values_of(sp), r, n);
  const auto want = make_expected<T>(values_of(sp), P, 0, n);
  buffer<T> s(n, cx.misaligned), d(n, cx.misaligned);
  copy_to(s.data(), x);
  if (in_place) {
    md::all_reduce(c, s.data(), n, sp.op);
    expect_eq(cx, "buf", s.data(), want);
  } else {
    fill_poison(d.data(), n);
    md::all_reduce(c, static_cast<const T*>(s.data()), d.data(), n, sp.op);
    expect_eq(cx, "recvbuf", d.data(), want);
    expect_eq(cx, "sendbuf (must be unchanged)", s.data(), x);
  }
}

// MPI_Reduce_scatter_block: rank r gets block r of the element-wise reduction.
template <class T, class Spec, class Comm>
void do_reduce_scatter(Comm& c, rank_ctx& cx, const Spec& sp, std::size_t rc, bool in_place) {
  const std::size_t r = c.rank(), P = c.size();
  cx.where = where_of("reduce_scatter", md::type_name<T>(), sp.name(), "recvcount=" + std::to_string(rc),
                      in_place ? "in place" : "out of place", cx.misaligned);
  const auto x = make_inputs<T>(values_of(sp), r, P * rc);
  const auto want = make_expected<T>(values_of(sp), P, r * rc, rc);
  buffer<T> s(P * rc, cx.misaligned), d(rc, cx.misaligned);
  copy_to(s.data(), x);
  if (in_place) {
    md::reduce_scatter(c, static_cast<const T*>(s.data()), s.data() + r * rc, rc, sp.op);
    expect_eq(cx, "sendbuf + rank * recvcount", s.data() + r * rc, want);
  } else {
    fill_poison(d.data(), rc);
    md::reduce_scatter(c, static_cast<const T*>(s.data()), d.data(), rc, sp.op);
    expect_eq(cx, "recvbuf", d.data(), want);
    expect_eq(cx, "sendbuf (must be unchanged)", s.data(), x);
  }
}

template <class T, class Comm>
void do_all_gather(Comm& c, rank_ctx& cx, std::size_t sc, bool in_place) {
  const std::size_t r = c.rank(), P = c.size();
  cx.where = where_of("all_gather", md::type_name<T>(), "", "sendcount=" + std::to_string(sc),
                      in_place ? "in place" : "out of place", cx.misaligned);
  std::vector<T> want;
  for (std::size_t q = 0; q < P; ++q) {
    const auto b = make_bits<T>(q, sc);
    want.insert(want.end(), b.begin(), b.end());
  }
  const auto mine = make_bits<T>(r, sc);
  buffer<T> s(sc, cx.misaligned), d(P * sc, cx.misaligned);
  fill_poison(d.data(), P * sc);
  if (in_place) {
    copy_to(d.data() + r * sc, mine);
    md::all_gather(c, static_cast<const T*>(d.data() + r * sc), d.data(), sc);
  } else {
    copy_to(s.data(), mine);
    md::all_gather(c, static_cast<const T*>(s.data()), d.data(), sc);
    expect_eq(cx, "sendbuf (must be unchanged)", s.data(), mine);
  }
  expect_eq(cx, "recvbuf", d.data(), want);
}

template <class T, class Comm>
void do_broadcast(Comm& c, rank_ctx& cx, std::size_t n, std::size_t root) {
  const std::size_t r = c.rank();
  cx.where = where_of("broadcast", md::type_name<T>(), "", "n=" + std::to_string(n) + " root=" + std::to_string(root),
                      "", cx.misaligned);
  const auto want = make_bits<T>(root + 1000, n);
  buffer<T> b(n, cx.misaligned);
  if (r == root) copy_to(b.data(), want);
  else fill_poison(b.data(), n);
  md::broadcast(c, b.data(), n, root);
  expect_eq(cx, "buf", b.data(), want);
}

// On the root: in place (sendbuf == recvbuf) or not. Elsewhere: recvbuf null, or a
// buffer that must stay untouched.
template <class T, class Spec, class Comm>
void do_reduce(Comm& c, rank_ctx& cx, const Spec& sp, std::size_t n, std::size_t root, bool in_place,
               bool null_elsewhere) {
  const std::size_t r = c.rank(), P = c.size();
  cx.where =
      where_of("reduce", md::type_name<T>(), sp.name(), "n=" + std::to_string(n) + " root=" + std::to_string(root),
               in_place ? "in place on root" : "out of place", cx.misaligned) +
      (null_elsewhere ? ", recvbuf null elsewhere" : "");
  const auto x = make_inputs<T>(values_of(sp), r, n);
  buffer<T> s(n, cx.misaligned), d(n, cx.misaligned);
  copy_to(s.data(), x);
  fill_poison(d.data(), n);
  if (r == root) {
    const auto want = make_expected<T>(values_of(sp), P, 0, n);
    if (in_place) {
      md::reduce(c, static_cast<const T*>(s.data()), s.data(), n, root, sp.op);
      expect_eq(cx, "buf on root", s.data(), want);
    } else {
      md::reduce(c, static_cast<const T*>(s.data()), d.data(), n, root, sp.op);
      expect_eq(cx, "recvbuf on root", d.data(), want);
      expect_eq(cx, "sendbuf (must be unchanged)", s.data(), x);
    }
  } else {
    md::reduce(c, static_cast<const T*>(s.data()), null_elsewhere ? static_cast<T*>(nullptr) : d.data(), n, root,
               sp.op);
    expect_eq(cx, "sendbuf (must be unchanged)", s.data(), x);
    if (!null_elsewhere) {
      const std::vector<T> untouched(n, poison<T>());
      expect_eq(cx, "recvbuf off the root (must be untouched)", d.data(), untouched);
    }
  }
}

// ---- running a world ----------------------------------------------------------------------

inline md::options opts_with(std::vector<algorithm> algos = {}) {
  md::options o;
  o.algorithms = std::move(algos);
  o.timeout = std::chrono::seconds(20);  // a hang fails with timeout_error naming the wait
  return o;
}

inline std::string algos_string(const std::vector<algorithm>& a) {
  if (a.empty()) return "automatic";
  std::string s;
  for (auto x : a) s += (s.empty() ? "" : ",") + std::string(md::to_string(x));
  return s;
}

// Binds topo on each of n threads, runs body(comm, ctx) on every rank, and reports
// each rank's failures (and any exception) in the main thread.
template <class Topo, class Body>
void in_world(const std::string& label, std::size_t n, const Topo& topo, const md::options& o, Body&& body) {
  std::vector<std::vector<std::string>> fails(n);
  std::vector<std::size_t> checks(n, 0);
  std::string error;
  try {
    md::threads::run(n, [&](md::threads::endpoint ep) {
      auto comm = md::bind(topo, ep, o);
      rank_ctx cx;
      cx.rank = comm.rank();
      cx.P = comm.size();
      cx.fails = &fails[ep.rank];
      body(comm, cx);
      checks[ep.rank] = cx.checks;
    });
  } catch (const std::exception& e) {
    error = e.what();
  }
  INFO(label);
  if (!error.empty()) FAIL_CHECK(label << ": exception: " << error);
  std::size_t nfail = 0, nchecks = 0;
  for (std::size_t r = 0; r < n; ++r) {
    nchecks += checks[r];
    for (auto& f : fails[r]) {
      ++nfail;
      FAIL_CHECK(label << ": " << f);
    }
  }
  CHECK(nfail == 0);
  if (error.empty()) CHECK(nchecks > 0);
}

struct shape {
  std::string topo;  // parsed with mdring::parse_topology
  std::vector<algorithm> algos;
  std::size_t threads;
};

inline std::string label_of(const shape& s) {
  return "topology \"" + s.topo + "\", algorithms " + algos_string(s.algos);
}

// ---- suites ----------------------------------------------------------------------------------

// Every collective at every count, int32 sum and float sum (quarters: exact), plus
// byte-sized and double data movement; every root for broadcast and reduce.
template <class Comm>
void shape_suite(Comm& c, rank_ctx& cx) {
  const std::size_t P = c.size();
  std::vector<std::size_t> counts = {0, 1, 13, 97, 1009, 4099};
  if (P > 2) counts.push_back(P - 1);  // fewer elements than ranks
  const auto isum = bspec<std::int32_t>(md::sum, opk::sum);
  const auto fsum = bspec<float>(md::sum, opk::sum);
  bool mis = false;
  for (std::size_t n : counts) {
    cx.misaligned = mis;
    do_all_reduce<std::int32_t>(c, cx, isum, n, false);
    do_all_reduce<std::int32_t>(c, cx, isum, n, true);
    cx.misaligned = !mis;
    do_all_reduce<float>(c, cx, fsum, n, mis);
    for (std::size_t root = 0; root < P; ++root) {
      cx.misaligned = (root + n) % 3 == 1;
      do_broadcast<std::int32_t>(c, cx, n, root);
      do_reduce<std::int32_t>(c, cx, isum, n, root, root % 2 == 0, (root / 2) % 2 == 1);
    }
    cx.misaligned = mis;
    do_broadcast<double>(c, cx, n, P / 2);
    do_reduce<float>(c, cx, fsum, n, P - 1, false, true);
    mis = !mis;
  }
  for (std::size_t rc : {0, 1, 2, 13, 97, 1009}) {
    cx.misaligned = mis;
    do_reduce_scatter<std::int32_t>(c, cx, isum, rc, false);
    do_reduce_scatter<std::int32_t>(c, cx, isum, rc, true);
    do_all_gather<std::int32_t>(c, cx, rc, false);
    do_all_gather<std::int32_t>(c, cx, rc, true);
    cx.misaligned = !mis;
    do_reduce_scatter<float>(c, cx, fsum, rc, !mis);
    do_all_gather<std::uint8_t>(c, cx, rc, mis);
    mis = !mis;
  }
}

// One type, every built-in op through all_reduce; through reduce_scatter and reduce
// too when Full, else only for sum.
template <class T, bool Full, class Comm>
void type_suite(Comm& c, rank_ctx& cx) {
  const std::size_t P = c.size();
  auto run = [&](auto op, opk k) {
    const auto sp = bspec<T>(op, k);
    cx.misaligned = false;
    do_all_reduce<T>(c, cx, sp, 1, false);
    do_all_reduce<T>(c, cx, sp, 13, true);
    cx.misaligned = true;
    do_all_reduce<T>(c, cx, sp, 1009, false);
    do_all_reduce<T>(c, cx, sp, 97, true);
    using O = decltype(op);
    if constexpr (Full || std::is_same_v<O, md::sum_t>) {
      do_reduce_scatter<T>(c, cx, sp, 13, false);
      cx.misaligned = false;
      do_reduce_scatter<T>(c, cx, sp, 1, true);
      do_reduce_scatter<T>(c, cx, sp, 97, true);
      do_reduce<T>(c, cx, sp, 97, 0, true, false);
      cx.misaligned = true;
      do_reduce<T>(c, cx, sp, 13, P - 1, false, true);
      do_reduce<T>(c, cx, sp, 1, P / 2, false, false);
    }
  };
  run(md::sum, opk::sum);
  run(md::prod, opk::prod);
  run(md::min, opk::min);
  run(md::max, opk::max);
  run(md::avg, opk::avg);
  cx.misaligned = true;
  do_all_gather<T>(c, cx, 13, true);
  do_broadcast<T>(c, cx, 97, P - 1);
}

// The reducing collectives with a user spec (xor, matrix product, keep-left).
template <class T, class Spec, class Comm>
void user_suite(Comm& c, rank_ctx& cx, const Spec& sp) {
  const std::size_t P = c.size();
  for (std::size_t n : {std::size_t(0), std::size_t(1), P > 1 ? P - 1 : 2, std::size_t(13), std::size_t(1009)}) {
    cx.misaligned = n % 2 == 1;
    do_all_reduce<T>(c, cx, sp, n, false);
    do_all_reduce<T>(c, cx, sp, n, true);
    do_reduce_scatter<T>(c, cx, sp, n % 50, false);
    do_reduce_scatter<T>(c, cx, sp, n % 50, true);
    for (std::size_t root = 0; root < P; ++root) do_reduce<T>(c, cx, sp, n, root, (root + n) % 2 == 0, root % 3 == 1);
  }
}

// int32 sum through all five collectives at a few counts (for compile-time topologies).
template <class Comm>
void basic_suite(Comm& c, rank_ctx& cx) {
  const std::size_t P = c.size();
  const auto isum = bspec<std::int32_t>(md::sum, opk::sum);
  for (std::size_t n : {std::size_t(0), std::size_t(1), P > 1 ? P - 1 : 3, std::size_t(97), std::size_t(1009)}) {
    cx.misaligned = n % 2 == 1;
    do_all_reduce<std::int32_t>(c, cx, isum, n, false);
    do_all_reduce<std::int32_t>(c, cx, isum, n, true);
    do_reduce_scatter<std::int32_t>(c, cx, isum, n % 100, false);
    do_reduce_scatter<std::int32_t>(c, cx, isum, n % 100, true);
    do_all_gather<std::int32_t>(c, cx, n % 100, false);
    do_all_gather<std::int32_t>(c, cx, n % 100, true);
    for (std::size_t root = 0; root < P; ++root) {
      do_broadcast<std::int32_t>(c, cx, n, root);
      do_reduce<std::int32_t>(c, cx, isum, n, root, root % 2 == 1, root % 3 == 0);
    }
  }
}

// The shape suite on every shape, and every op and type on a few of them.
inline void run_shapes(const std::vector<shape>& shapes, std::initializer_list<shape> typed) {
  for (const auto& s : shapes) {
    const auto topo = md::parse_topology(s.topo);
    in_world(label_of(s), s.threads, topo, opts_with(s.algos), [](auto& c, rank_ctx& cx) { shape_suite(c, cx); });
  }
  for (const auto& s : typed) {
    in_world(label_of(s) + ", every op and type", s.threads, md::parse_topology(s.topo), opts_with(s.algos),
             [](auto& c, rank_ctx& cx) {
               type_suite<std::int32_t, true>(c, cx);
               type_suite<std::int64_t, false>(c, cx);
               type_suite<float, true>(c, cx);
               type_suite<double, false>(c, cx);
               type_suite<md::bfloat16, false>(c, cx);
             });
  }
}

}  // namespace
