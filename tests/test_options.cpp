// test_options.cpp: version() (version.hpp), and the MDRING_* variables that set options' defaults
// (options.hpp): a value mdring can use is used; one it cannot use (found by
// tests/fuzz: MDRING_TIMEOUT=4444444444444496929 overflowed a conversion, and
// "2x" was read as 2 s, "yes" as on, silently) is named once on stderr with what
// was expected, and the default kept.
#include <doctest/doctest.h>
#include <mdring/options.hpp>
#include <mdring/version.hpp>

#include "stderr_capture.hpp"

#include <chrono>
#include <cstdlib>
#include <string>

namespace md = mdring;
using mdring_test::stderr_of;
using namespace std::chrono_literals;

namespace {
bool contains(const std::string& s, const std::string& w) { return s.find(w) != std::string::npos; }

struct env_var {  // sets a variable for one scope
  const char* name;
  explicit env_var(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~env_var() { unsetenv(name); }
};
// Reads the default with the variable set to a value it cannot use: the value is
// named on stderr with what was expected; returns what was read (the default).
template <class F>
auto rejected(const char* name, const char* value, F read, const char* expected) {
  decltype(read()) got{};
  const std::string err = stderr_of([&] { got = read(); });
  INFO(name << "=" << value << ": " << err);
  CHECK(contains(err, std::string(name) + "=\"" + value + "\": expected " + expected));
  return got;
}
}  // namespace

TEST_CASE("MDRING_TIMEOUT: seconds above 0, fractions too; anything else named, 5 minutes kept") {
  for (auto [v, want] : {std::pair{"2.5", std::chrono::milliseconds(2500)}, {"30", 30000ms}, {"1e3", 1000000ms}}) {
    env_var e("MDRING_TIMEOUT", v);
    std::chrono::milliseconds got{};
    const std::string err = stderr_of([&] { got = md::detail::default_timeout(); });
    CHECK(got == want);
    CHECK(err.empty());
  }
  for (const char* bad : {"4444444444444496929", "2x", "abc", "-1", "0", "nan", "inf", "1e10"}) {
    env_var e("MDRING_TIMEOUT", bad);
    std::chrono::milliseconds got{};
    const std::string err = stderr_of([&] { got = md::detail::default_timeout(); });
    INFO(bad << ": " << err);
    CHECK(got == std::chrono::minutes(5));
    CHECK(contains(err, std::string("mdring: MDRING_TIMEOUT=\"") + bad + "\": expected a number of seconds above 0"));
    CHECK(contains(err, "using the default"));
  }
  env_var e("MDRING_TIMEOUT", "");
  CHECK(stderr_of([] { (void)md::detail::default_timeout(); }).empty());  // empty: unset
}

TEST_CASE("the other MDRING_* defaults: known values used, others named once") {
  {
    env_var e("MDRING_PROGRESS", "in_wait");
    CHECK(md::detail::default_progress() == md::progress_mode::in_wait);
  }
  {
    env_var e("MDRING_PROGRESS", "sometimes");
    CHECK(rejected("MDRING_PROGRESS", "sometimes", md::detail::default_progress, "agent, in_wait or automatic") ==
          md::progress_mode::automatic);
    CHECK(stderr_of([&] { (void)md::detail::default_progress(); }).empty());  // once per value
  }
  {
    env_var e("MDRING_REPRODUCIBLE", "yes");  // was on, silently
    CHECK(!rejected("MDRING_REPRODUCIBLE", "yes", md::detail::default_reproducible, "0 or 1"));
  }
  {
    env_var e("MDRING_REPRODUCIBLE", "1");
    CHECK(md::detail::default_reproducible());
  }
  {
    env_var e("MDRING_PLANNING", "mesure");
    CHECK(rejected("MDRING_PLANNING", "mesure", md::detail::default_planning, "estimate or measure") ==
          md::planning::estimate);
  }
  {
    env_var e("MDRING_ACCUMULATION", "fp32");
    CHECK(rejected("MDRING_ACCUMULATION", "fp32", md::detail::default_accumulation, "element or float32") ==
          md::accumulation::element);
    CHECK(md::detail::default_dimension_accumulation().empty());
  }
  {  // one per dimension
    env_var e("MDRING_ACCUMULATION", "element,float32");
    CHECK(md::detail::default_accumulation() == md::accumulation::element);
    CHECK(md::detail::default_dimension_accumulation() ==
          std::vector<md::accumulation>{md::accumulation::element, md::accumulation::float32});
    env_var f("MDRING_ACCUMULATION", "float32");
    CHECK(md::detail::default_accumulation() == md::accumulation::float32);
    CHECK(md::detail::default_dimension_accumulation().empty());
    env_var g("MDRING_ACCUMULATION", "float32,fp16");
    CHECK(rejected("MDRING_ACCUMULATION", "float32,fp16", md::detail::default_dimension_accumulation,
                   "element or float32, or one of them per dimension")
              .empty());
    env_var h("MDRING_ACCUMULATION", "float32,");
    CHECK(rejected("MDRING_ACCUMULATION", "float32,", md::detail::default_accumulation, "element or float32") ==
          md::accumulation::element);
  }
  {
    env_var e("MDRING_CHECKS", "all");
    CHECK(rejected("MDRING_CHECKS", "all", md::detail::default_checks, "local or collective") ==
          md::check_level::local);
  }
  {
    env_var e("MDRING_SHARED", "no");
    CHECK(rejected("MDRING_SHARED", "no", md::detail::default_shared, "0 or 1"));
  }
  {
    env_var e("MDRING_EAGER_ROOTED", "1");
    CHECK(md::detail::default_eager_rooted());
    CHECK(md::options{}.eager_rooted);
    env_var f("MDRING_EAGER_ROOTED", "yes");
    CHECK(!rejected("MDRING_EAGER_ROOTED", "yes", md::detail::default_eager_rooted, "0 or 1"));
  }
  CHECK(!md::options{}.eager_rooted);  // off by default
  {
    // MDRING_STREAM: the streamed rooted calls' default (tuning.hpp), for programs
    // that do not build their options (the interposer, torch).
    const md::tuning plain;
    CHECK(md::options{}.tune.one_shot_stream_max_bytes == plain.one_shot_stream_max_bytes);
    CHECK(md::options{}.tune.one_shot_stream_max_trip_ns == 100);
    env_var e("MDRING_STREAM", "1");  // always, without measuring
    CHECK(md::options{}.tune.one_shot_stream_max_trip_ns == SIZE_MAX);
    CHECK(md::options{}.tune.one_shot_stream_max_bytes == std::size_t(64) << 10);
    env_var f("MDRING_STREAM", "0");  // never
    CHECK(md::options{}.tune.one_shot_stream_max_bytes == 0);
    CHECK(md::options{}.tune.one_shot_stream_max_trip_ns == 100);
    env_var g("MDRING_STREAM", "auto");
    CHECK(md::options{}.tune.one_shot_stream_max_bytes == std::size_t(64) << 10);
    CHECK(md::options{}.tune.one_shot_stream_max_trip_ns == 100);
    env_var h("MDRING_STREAM", "yes");
    const md::tuning t = rejected("MDRING_STREAM", "yes", md::detail::default_tuning, "auto, 0 or 1");
    CHECK(t.one_shot_stream_max_bytes == plain.one_shot_stream_max_bytes);
    CHECK(t.one_shot_stream_max_trip_ns == plain.one_shot_stream_max_trip_ns);
  }
  {
    env_var e("MDRING_HANG_REPORT", "0");
    CHECK(!md::detail::default_hang_report());
  }
}

TEST_CASE("version(): the numbers of config.hpp's macros, and their text") {
  static_assert(mdring::version() ==
                mdring::version_info{MDRING_VERSION_MAJOR, MDRING_VERSION_MINOR, MDRING_VERSION_PATCH});
  static_assert(mdring::version() > mdring::version_info{0, 0, 9});
  static_assert(mdring::version_info{0, 2, 0} > mdring::version_info{0, 1, 9});
  const std::string text = std::to_string(MDRING_VERSION_MAJOR) + "." + std::to_string(MDRING_VERSION_MINOR) + "." +
                           std::to_string(MDRING_VERSION_PATCH);
  CHECK(std::string(mdring::version_string()) == text);
}
