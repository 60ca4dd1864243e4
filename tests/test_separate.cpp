// tests/test_separate.cpp: separate compilation (include/mdring/separate/api.hpp).
// This file sees only the declarations (the mdring::separate target defines
// MDRING_SEPARATE_COMPILATION and compiles the library, separate/src.cpp, once into
// the program). Its calls must give what header-only gives: exact results for every
// compiled element type and op in all five collectives, in and out of place, and
// explain() and reserve() identical to a header-only communicator's
// (separate_reference.cpp). Run under mpirun with 1 to 4 processes.
#include <doctest/doctest.h>
#include <mdring/mpi.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#ifndef MDRING_SEPARATE_COMPILATION
#error "test_separate is compiled in separate compilation (the mdring::separate target)"
#endif

namespace md = mdring;

std::string header_only_explain(std::size_t count, std::size_t& reserved);  // separate_reference.cpp

namespace {

// The same topology as separate_reference.cpp: shm:2 x ethernet:P/2 for an even
// P >= 4, else one shm dimension of P ranks.
template <class F>
void with_comm(F&& f) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size % 2 == 0 && size >= 4) {
    auto comm = md::bind(md::ring<md::shm, 2> * md::ring<md::ethernet>, MPI_COMM_WORLD);
    static_assert(std::is_same_v<decltype(comm), md::compiled_communicator>);
    f(comm);
  } else {
    auto comm = md::bind(md::ring<md::shm>, MPI_COMM_WORLD);
    f(comm);
  }
}

template <class T>
double as_double(T x) {
  if constexpr (md::is_16bit_float_v<T>) return double(float(x));
  else return double(x);
}
// The element of type T of a double (half and bfloat16: through float, their constructor's type).
template <class T>
T of_double(double v) {
  if constexpr (md::is_16bit_float_v<T>) return T(float(v));
  else return T(v);
}

// Rank r's element i: small integers, exact in every compiled type (bfloat16: up to 256).
double value(std::size_t r, std::size_t i) { return double((r + 1) * (i % 7 + 1)); }

// What op gives over the P ranks' value(r, i).
template <class Op>
double expected(std::size_t P, std::size_t i) {
  const double k = double(i % 7 + 1);
  if constexpr (std::is_same_v<Op, md::sum_t>) return k * double(P * (P + 1) / 2);
  else if constexpr (std::is_same_v<Op, md::avg_t>) return k * double(P + 1) / 2;
  else if constexpr (std::is_same_v<Op, md::min_t>) return k;
  else if constexpr (std::is_same_v<Op, md::max_t>) return k * double(P);
  else {  // prod, over values kept small: 1 on even ranks, 2 on odd ones (see input)
    double p = 1;
    for (std::size_t r = 0; r < P; ++r) p *= r % 2 ? 2 : 1;
    return p;
  }
}
template <class T, class Op>
T input(std::size_t r, std::size_t i) {
  if constexpr (std::is_same_v<Op, md::prod_t>) return T(r % 2 ? 2 : 1);
  else return of_double<T>(value(r, i));
}

template <class T, class Op>
void reductions(md::compiled_communicator& comm) {
  const std::size_t P = comm.size(), R = comm.rank();
  const std::size_t n = 1000, rc = 37;
  CAPTURE(sizeof(T));
  std::vector<T> send(n), recv(n, T(0)), inplace(n);
  for (std::size_t i = 0; i < n; ++i) send[i] = inplace[i] = input<T, Op>(R, i);
  md::all_reduce(comm, send.data(), recv.data(), n, Op{});
  md::all_reduce(comm, inplace.data(), n, Op{});
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i)
    bad += as_double(recv[i]) != expected<Op>(P, i) || as_double(inplace[i]) != expected<Op>(P, i);
  CHECK(bad == 0);
  // reduce_scatter: block R of the ranks' sendbufs of P * rc elements
  std::vector<T> rs_send(P * rc), rs_recv(rc, T(0));
  for (std::size_t j = 0; j < P * rc; ++j) rs_send[j] = input<T, Op>(R, j);
  md::reduce_scatter(comm, rs_send.data(), rs_recv.data(), rc, Op{});
  bad = 0;
  for (std::size_t i = 0; i < rc; ++i) bad += as_double(rs_recv[i]) != expected<Op>(P, R * rc + i);
  CHECK(bad == 0);
  // reduce to the last rank
  const std::size_t root = P - 1;
  std::vector<T> red(n, T(0));
  md::reduce(comm, send.data(), R == root ? red.data() : nullptr, n, root, Op{});
  if (R == root) {
    bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += as_double(red[i]) != expected<Op>(P, i);
    CHECK(bad == 0);
  }
}

template <class T>
void movements(md::compiled_communicator& comm) {
  const std::size_t P = comm.size(), R = comm.rank(), sc = 29, n = 501;
  std::vector<T> send(sc), recv(P * sc, T(0));
  for (std::size_t i = 0; i < sc; ++i) send[i] = of_double<T>(value(R, i));
  md::all_gather(comm, send.data(), recv.data(), sc);
  std::size_t bad = 0;
  for (std::size_t r = 0; r < P; ++r)
    for (std::size_t i = 0; i < sc; ++i) bad += as_double(recv[r * sc + i]) != value(r, i);
  CHECK(bad == 0);
  const std::size_t root = P / 2;
  std::vector<T> buf(n);
  for (std::size_t i = 0; i < n; ++i) buf[i] = of_double<T>(value(R, i));
  md::broadcast(comm, buf.data(), n, root);
  bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad += as_double(buf[i]) != value(root, i);
  CHECK(bad == 0);
}

template <class T>
void every_op(md::compiled_communicator& comm) {
  reductions<T, md::sum_t>(comm);
  reductions<T, md::prod_t>(comm);
  reductions<T, md::min_t>(comm);
  reductions<T, md::max_t>(comm);
  if constexpr (md::separate::floating_type<T>) reductions<T, md::avg_t>(comm);
  movements<T>(comm);
}

}  // namespace

TEST_CASE("separate compilation: every compiled type and op, all five collectives, exact") {
  with_comm([](md::compiled_communicator& comm) {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(comm.size() == std::size_t(size));
    CHECK(comm.usable());
    every_op<float>(comm);
    every_op<double>(comm);
    every_op<std::int32_t>(comm);
    every_op<std::int64_t>(comm);
    every_op<md::half>(comm);
    every_op<md::bfloat16>(comm);
    CHECK(comm.usable());
  });
}

TEST_CASE("separate compilation: explain() and reserve() as header-only") {
  const std::size_t count = 100000;
  std::size_t reserved = 0;
  const std::string reference = header_only_explain(count, reserved);
  with_comm([&](md::compiled_communicator& comm) {
    comm.reserve<float>(count);
    CHECK(comm.scratch_bytes() == reserved);
    const std::string mine = comm.explain<float>(count) + comm.explain<double, md::max_t>(count / 3) +
                             comm.explain<float>(count, md::collective::reduce, md::sum, comm.size() - 1);
    CHECK(mine == reference);
    CHECK(mine.find("all_reduce of 100000 x float") != std::string::npos);
  });
}

TEST_CASE("separate compilation: an argument error is the header-only one, naming the argument") {
  with_comm([](md::compiled_communicator& comm) {
    std::vector<float> buf(10, 1.0f);
    bool thrown = false;
    try {
      md::broadcast(comm, buf.data(), buf.size(), comm.size());  // every rank passes the same bad root
    } catch (const md::invalid_argument& e) {
      thrown = true;
      CHECK(std::string(e.argument()) == "root");
    }
    CHECK(thrown);
  });
}

TEST_CASE("separate compilation: a detected topology binds and runs") {
  const md::runtime_topology topo = md::detect_topology(MPI_COMM_WORLD);
  auto comm = md::bind(topo, MPI_COMM_WORLD);
  CHECK(comm.topology().to_string() == topo.to_string());
  std::vector<double> v(100, double(comm.rank() + 1));
  md::all_reduce(comm, v.data(), v.size(), md::sum);
  const double want = double(comm.size() * (comm.size() + 1) / 2);
  std::size_t bad = 0;
  for (double x : v) bad += x != want;
  CHECK(bad == 0);
}
