// tests/error_support.hpp: what the error tests share (test_errors*.cpp on threads,
// test_mpi_errors.cpp under mpirun): what a call threw, as which exception type, and
// a description naming mdring's exception types.
#pragma once

#include <mdring/error.hpp>

#include <chrono>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>

namespace error_test {
namespace md = mdring;
using steady = std::chrono::steady_clock;

inline double seconds_since(steady::time_point t0) { return std::chrono::duration<double>(steady::now() - t0).count(); }

inline bool contains(std::string_view s, std::string_view w) { return s.find(w) != std::string_view::npos; }

// What f threw (nullptr: nothing).
template <class F>
std::exception_ptr thrown(F&& f) {
  try {
    f();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

// The exception object inside p as E, or nullptr. (rethrow_exception rethrows the
// stored object itself, which lives as long as p.)
template <class E>
const E* as(const std::exception_ptr& p) {
  if (!p) return nullptr;
  try {
    std::rethrow_exception(p);
  } catch (const E& e) {
    return &e;
  } catch (...) {}
  return nullptr;
}

// What f threw as an invalid_argument: its argument() and what(); both empty when f
// threw nothing or another exception (the caller's checks then name what it expected).
template <class F>
std::pair<std::string, std::string> arg_error_of(F&& f) {
  const std::exception_ptr p = thrown(std::forward<F>(f));
  if (const auto* e = as<md::invalid_argument>(p)) return {std::string(e->argument()), e->what()};
  return {};
}

// p holds exactly an E (not a subclass).
template <class E>
bool is_exactly(const std::exception_ptr& p) {
  const E* e = as<E>(p);
  return e && typeid(*e) == typeid(E);
}

// The name of the exception type in p: mdring's by name, exactly (a subclass is not its base).
inline std::string type_of(const std::exception_ptr& p) {
  if (!p) return "no exception";
  if (auto* e = as<md::topology_error>(p); e && typeid(*e) == typeid(md::topology_error)) return "topology_error";
  if (auto* e = as<md::invalid_argument>(p); e && typeid(*e) == typeid(md::invalid_argument)) return "invalid_argument";
  if (as<md::timeout_error>(p)) return "timeout_error";
  if (as<md::remote_error>(p)) return "remote_error";
  if (as<md::communicator_error>(p)) return "communicator_error";
  if (as<md::mpi_error>(p)) return "mpi_error";
  if (as<md::transport_error>(p)) return "transport_error";
  if (as<md::error>(p)) return "mdring::error";
  if (auto* e = as<std::exception>(p)) return std::string("std::exception (") + typeid(*e).name() + ")";
  return "not a std::exception";
}

inline std::string describe(const std::exception_ptr& p) {
  if (auto* e = as<std::exception>(p)) return type_of(p) + ": " + e->what();
  return type_of(p);
}

}  // namespace error_test
