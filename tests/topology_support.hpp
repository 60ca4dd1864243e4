// tests/topology_support.hpp: two link tags the library does not know, as a user
// would write them (test_topology.cpp, test_topology_text.cpp): upi with the
// required members only, roce with the optional ports and overhead.
#pragma once

#include <mdring/mdring.hpp>

#include <string>
#include <string_view>

// ---- a user-defined link tag -------------------------------------------------

namespace user {
struct upi {};   // a link the library does not know
struct roce {};  // one with the optional members: ports and overhead
}  // namespace user

template <>
struct mdring::link_traits<user::roce> {
  static constexpr std::string_view name = "roce";
  static constexpr double bandwidth = 25e9;
  static constexpr double latency = 3e-6;
  static constexpr bool fully_connected = false;
  static constexpr mdring::memory_space space = mdring::memory_space::host;
  static constexpr unsigned ports = 2;
  static constexpr double overhead = 1.5e-6;
};

template <>
struct mdring::link_traits<user::upi> {
  static constexpr std::string_view name = "upi";
  static constexpr double bandwidth = 64e9;
  static constexpr double latency = 3e-7;
  static constexpr bool fully_connected = true;
  static constexpr mdring::memory_space space = mdring::memory_space::host;
};

namespace topology_test {
inline bool contains(const std::string& s, std::string_view sub) { return s.find(sub) != std::string::npos; }
}  // namespace topology_test
