// tests/plan_support.hpp: what the plan room's tests share (test_plan*.cpp):
// shm topologies of given extents, make_plan with the default tuning, and the
// shapes they sweep.
#pragma once

#include <mdring/mdring.hpp>

#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace m = mdring;

namespace plan_test {

inline bool contains(const std::string& s, std::string_view sub) { return s.find(sub) != std::string::npos; }

inline std::size_t product(const std::vector<std::size_t>& e) {
  return std::accumulate(e.begin(), e.end(), std::size_t(1), [](std::size_t x, std::size_t y) { return x * y; });
}

inline m::runtime_topology shm_topology(const std::vector<std::size_t>& e) {
  std::vector<m::runtime_topology::dimension> dims;
  for (auto x : e) dims.push_back({m::link_info_of<m::shm>(), x});
  return m::runtime_topology(dims);
}

inline std::vector<m::algorithm> all(std::size_t k, m::algorithm a) { return std::vector<m::algorithm>(k, a); }

inline m::plan plan_of(m::collective kind, const m::runtime_topology& t, std::size_t rank, std::size_t count,
                       const std::vector<m::algorithm>& algos, std::size_t root = 0, std::size_t elem = 4) {
  return m::make_plan(kind, t, rank, count, elem, algos, m::tuning{}, root);
}

inline std::vector<std::pair<m::phase, std::size_t>> phases(const m::plan& p) {
  std::vector<std::pair<m::phase, std::size_t>> v;
  for (auto& s : p.stages) v.emplace_back(s.ph, s.dim);
  return v;
}

inline std::size_t total_steps(const m::plan& p) {
  std::size_t s = 0;
  for (auto& st : p.stages) s += st.steps;
  return s;
}

inline const std::vector<std::vector<std::size_t>> shapes = {{1},       {2},       {5},          {2, 3}, {3, 2}, {4, 4},
                                                             {2, 1, 3}, {3, 5, 2}, {2, 2, 2, 2}, {7, 3}, {4, 64}};

}  // namespace plan_test
