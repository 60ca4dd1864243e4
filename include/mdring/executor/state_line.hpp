// mdring/executor/state_line.hpp: the hang report's line, its one definition.
//
// A line is "mdring-state: " and space-separated key=value fields, in this order
// (the groups in brackets only where they apply):
//   rank size comm pid host transport call done state
//   [collective type op count step=DONE/TOTAL
//    [phase phase_step dim link peer dir step_bytes]
//    recv_bytes [waiting_s | waited_s]]
// The call's group is there from a communicator's first call on; the step's once
// the call in flight has waited for a step (a failed call keeps it); the seconds
// while it waits (waiting_s) or once it failed (waited_s). What each field means
// is in executor/state.hpp, which fills state_fields from a communicator's state
// board and writes format_state_line's text; mdring-run (tools/mdring_run.cpp)
// reads the lines back with parse_state_line into its table. A field is added
// here alone: to state_fields, format_state_line and parse_state_line's
// field_readers (tests/test_hang_report.cpp sets every field and checks that it
// reads back; tests/fuzz/fuzz_text.cpp feeds parse_state_line any bytes).
//
// Plain C++20: mdring-run includes it without the rest of mdring.
#pragma once

#include "../config.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

MDRING_NAMESPACE_BEGIN

namespace detail {

inline constexpr std::string_view state_line_prefix = "mdring-state: ";

// The step a call waits for (or last waited for).
struct state_step_fields {
  std::string phase;  // reduce-scatter, all-gather, ..., "?"
  std::uint64_t phase_step = 0;
  std::int64_t dim = 0;
  std::string link;  // the dimension's link, "ethernet:4", "?"
  std::int64_t peer = -1;
  std::string dir;  // recv, send, group, none
  std::uint64_t step_bytes = 0;
  bool operator==(const state_step_fields&) const = default;
};

// The call in flight, or the last one.
struct state_call_fields {
  std::string collective, type, op;  // type "?" and op "-" when none
  std::uint64_t count = 0;
  std::uint64_t steps_done = 0, steps_total = 0;  // step=DONE/TOTAL
  std::optional<state_step_fields> step;
  std::uint64_t recv_bytes = 0;
  std::optional<double> seconds;  // waiting_s (state waiting) or waited_s (any other state)
  bool operator==(const state_call_fields&) const = default;
};

struct state_fields {
  std::uint64_t rank = 0, size = 0;
  std::int64_t comm = 0, pid = -1;
  std::string host, transport;
  std::uint64_t call = 0, done = 0;  // calls started, calls finished
  std::string state;                 // idle, running, waiting, failed
  std::optional<state_call_fields> call_fields;
  bool operator==(const state_fields&) const = default;
};

// waiting_s's and waited_s's text: seconds to the millisecond ("2.310").
inline std::string state_seconds_text(double seconds) {
  const int n = std::snprintf(nullptr, 0, "%.3f", seconds);
  std::string w(std::size_t(n > 0 ? n : 0), '\0');
  std::snprintf(w.data(), w.size() + 1, "%.3f", seconds);
  return w;
}

// The line of f (without a newline).
MDRING_COLD inline std::string format_state_line(const state_fields& f) {
  std::string out(state_line_prefix);
  auto put = [&out](std::string_view key, std::string_view value) {
    if (out.size() > state_line_prefix.size()) out += ' ';
    out += key;
    out += '=';
    out += value;
  };
  put("rank", std::to_string(f.rank));
  put("size", std::to_string(f.size));
  put("comm", std::to_string(f.comm));
  put("pid", std::to_string(f.pid));
  put("host", f.host);
  put("transport", f.transport);
  put("call", std::to_string(f.call));
  put("done", std::to_string(f.done));
  put("state", f.state);
  if (!f.call_fields) return out;
  const state_call_fields& c = *f.call_fields;
  put("collective", c.collective);
  put("type", c.type);
  put("op", c.op);
  put("count", std::to_string(c.count));
  put("step", std::to_string(c.steps_done) + "/" + std::to_string(c.steps_total));
  if (c.step) {
    const state_step_fields& s = *c.step;
    put("phase", s.phase);
    put("phase_step", std::to_string(s.phase_step));
    put("dim", std::to_string(s.dim));
    put("link", s.link);
    put("peer", std::to_string(s.peer));
    put("dir", s.dir);
    put("step_bytes", std::to_string(s.step_bytes));
  }
  put("recv_bytes", std::to_string(c.recv_bytes));
  if (c.seconds) put(f.state == "waiting" ? "waiting_s" : "waited_s", state_seconds_text(*c.seconds));
  return out;
}

namespace state_line_impl {
// A whole number: v set only when all of s is one (else left as it was).
template <class T>
void number(std::string_view s, T& v) {
  T x{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (ec == std::errc{} && end == s.data() + s.size()) v = x;
}
// Seconds ("2.310"), finite; the first of waiting_s and waited_s given counts.
inline void seconds(std::string_view s, std::optional<double>& v) {
  double x = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x, std::chars_format::fixed);
  if (!v && ec == std::errc{} && end == s.data() + s.size() && std::isfinite(x)) v = x;
}

// What parse_state_line has read so far.
struct parsed {
  state_fields f;
  state_call_fields c;
  state_step_fields s;
  bool have_call = false, have_step = false;
};

// A key, and where its value goes.
struct field_reader {
  std::string_view key;
  void (*read)(std::string_view value, parsed& p);
};
}  // namespace state_line_impl

// The fields of a line; std::nullopt when it does not start with "mdring-state: ".
// Tolerant: an unknown key, a token without '=' and a value that is not a number
// where one is expected are skipped (the field keeps its default); the first of
// a repeated key counts. A line of another version, missing or adding fields,
// gives what it has. The call's group is read when the line has collective=, the
// step's when it has dim= too.
inline std::optional<state_fields> parse_state_line(std::string_view line) {
  using state_line_impl::number, state_line_impl::seconds, state_line_impl::parsed;
  // Each key (in format_state_line's order), and where its value goes.
  static constexpr state_line_impl::field_reader field_readers[] = {
      {"rank", [](std::string_view v, parsed& p) { number(v, p.f.rank); }},
      {"size", [](std::string_view v, parsed& p) { number(v, p.f.size); }},
      {"comm", [](std::string_view v, parsed& p) { number(v, p.f.comm); }},
      {"pid", [](std::string_view v, parsed& p) { number(v, p.f.pid); }},
      {"host", [](std::string_view v, parsed& p) { p.f.host = v; }},
      {"transport", [](std::string_view v, parsed& p) { p.f.transport = v; }},
      {"call", [](std::string_view v, parsed& p) { number(v, p.f.call); }},
      {"done", [](std::string_view v, parsed& p) { number(v, p.f.done); }},
      {"state", [](std::string_view v, parsed& p) { p.f.state = v; }},
      {"collective",
       [](std::string_view v, parsed& p) {
         p.c.collective = v;
         p.have_call = true;
       }},
      {"type", [](std::string_view v, parsed& p) { p.c.type = v; }},
      {"op", [](std::string_view v, parsed& p) { p.c.op = v; }},
      {"count", [](std::string_view v, parsed& p) { number(v, p.c.count); }},
      {"step",  // DONE/TOTAL
       [](std::string_view v, parsed& p) {
         const std::size_t slash = v.find('/');
         number(v.substr(0, slash), p.c.steps_done);
         if (slash != std::string_view::npos) number(v.substr(slash + 1), p.c.steps_total);
       }},
      {"phase", [](std::string_view v, parsed& p) { p.s.phase = v; }},
      {"phase_step", [](std::string_view v, parsed& p) { number(v, p.s.phase_step); }},
      {"dim",  // a dimension, >= 0: the step's fields are read
       [](std::string_view v, parsed& p) {
         std::int64_t d = -1;
         number(v, d);
         if (d >= 0) p.s.dim = d, p.have_step = true;
       }},
      {"link", [](std::string_view v, parsed& p) { p.s.link = v; }},
      {"peer", [](std::string_view v, parsed& p) { number(v, p.s.peer); }},
      {"dir", [](std::string_view v, parsed& p) { p.s.dir = v; }},
      {"step_bytes", [](std::string_view v, parsed& p) { number(v, p.s.step_bytes); }},
      {"recv_bytes", [](std::string_view v, parsed& p) { number(v, p.c.recv_bytes); }},
      {"waiting_s", [](std::string_view v, parsed& p) { seconds(v, p.c.seconds); }},
      {"waited_s", [](std::string_view v, parsed& p) { seconds(v, p.c.seconds); }},
  };
  if (line.substr(0, state_line_prefix.size()) != state_line_prefix) return std::nullopt;
  line.remove_prefix(state_line_prefix.size());
  state_line_impl::parsed p;
  static_assert(std::size(field_readers) <= 64);
  std::uint64_t seen = 0;  // one bit per key: the first of a repeated key counts
  while (!line.empty()) {
    const std::size_t sp = line.find(' ');
    const std::string_view token = line.substr(0, sp);
    line.remove_prefix(sp == std::string_view::npos ? line.size() : sp + 1);
    const std::size_t eq = token.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = token.substr(0, eq);
    std::size_t k = 0;
    while (k < std::size(field_readers) && field_readers[k].key != key) ++k;
    if (k == std::size(field_readers) || (seen >> k & 1)) continue;
    seen |= std::uint64_t(1) << k;
    field_readers[k].read(token.substr(eq + 1), p);
  }
  if (p.have_call) {
    if (p.have_step) p.c.step = std::move(p.s);
    p.f.call_fields = std::move(p.c);
  }
  return std::move(p.f);
}

}  // namespace detail

MDRING_NAMESPACE_END
