// benchmarks/bench/output.cpp: what mdring-bench prints: a table (the default), one
// JSON object per size (--json), and --plot's rows for scripts/plot_bench.py.
#include "harness.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace mdring_bench {
namespace {

// One size as a JSON object; f: busbw = algbw * f.
std::string json_row(const config& cfg, const result_row& r, const std::string& topo, std::size_t P,
                     const std::string& transport, double f) {
  const double algbw = r.mdring_s > 0 ? double(r.bytes) / r.mdring_s / 1e9 : 0;
  // --baseline-only: mdring did not run, its numbers are null.
  auto num = [&](const char* fmt, double v) {
    char b[64] = "null";
    if (!cfg.baseline_only) std::snprintf(b, sizeof b, fmt, v);
    return std::string(b);
  };
  char buf[1024];
  std::string s;
  std::snprintf(buf, sizeof buf,
                "{\"op\": \"%s\", \"dtype\": \"%s\", \"reduce_op\": \"%s\", \"topology\": \"%s\", \"ranks\": %zu, "
                "\"transport\": \"%s\", \"alloc\": \"%s\", \"inplace\": %s, \"bytes\": %zu, \"elements\": %zu, "
                "\"mdring_s\": %s, ",
                cfg.op.c_str(), cfg.dtype.c_str(), cfg.reduce_op.c_str(), topo.c_str(), P, transport.c_str(),
                cfg.alloc.c_str(), cfg.inplace ? "true" : "false", r.bytes, r.elements,
                num("%.9g", r.mdring_s).c_str());
  s += buf;
  if (r.has_baseline) {
    const double balg = r.baseline_s > 0 ? double(r.bytes) / r.baseline_s / 1e9 : 0;
    std::snprintf(buf, sizeof buf,
                  "\"baseline\": \"%s\", \"baseline_s\": %.9g, \"ratio\": %s, \"baseline_algbw\": %.6g, "
                  "\"baseline_busbw\": %.6g, ",
                  cfg.baseline.c_str(), r.baseline_s,
                  num("%.6g", r.baseline_s > 0 ? r.mdring_s / r.baseline_s : 0.0).c_str(), balg, balg * f);
    s += buf;
    if (!r.variant_s.empty()) {  // baseline_s is the fastest variant's
      s += "\"baseline_variant\": \"" + r.baseline_variant + "\", \"variants_s\": {";
      for (std::size_t v = 0; v < r.variant_s.size(); ++v) {
        std::snprintf(buf, sizeof buf, "%s\"%s\": %.9g", v ? ", " : "", r.variant_s[v].first.c_str(),
                      r.variant_s[v].second);
        s += buf;
      }
      s += "}, ";
    }
  } else {
    s += "\"baseline\": null, \"baseline_s\": null, \"ratio\": null, ";
  }
  std::snprintf(buf, sizeof buf, "\"algbw\": %s, \"busbw\": %s, \"predicted_s\": %.9g, \"iters\": %d, \"check\": %s}",
                num("%.6g", algbw).c_str(), num("%.6g", algbw * f).c_str(), r.predicted_s, cfg.iters,
                cfg.check ? (r.errors ? "\"FAILED\"" : "\"ok\"") : "null");
  return s + buf;
}

#ifndef MDRING_SOURCE_DIR
#define MDRING_SOURCE_DIR "."  // CMake sets the source tree
#endif

// --plot FILE.png: the rows go to FILE.png.jsonl and scripts/plot_bench.py draws them.
void plot_rows(const config& cfg, const std::vector<result_row>& rows, const std::string& topo, std::size_t P,
               const std::string& transport, double bus) {
  const std::string data = cfg.plot + ".jsonl";
  std::FILE* out = std::fopen(data.c_str(), "w");
  if (!out) {
    std::fprintf(stderr, "mdring-bench: --plot: cannot write %s\n", data.c_str());
    return;
  }
  for (auto& r : rows) std::fprintf(out, "%s\n", json_row(cfg, r, topo, P, transport, bus).c_str());
  std::fclose(out);
  const std::string cmd =
      "python3 \"" MDRING_SOURCE_DIR "/scripts/plot_bench.py\" \"" + cfg.plot + "\" \"" + data + "\"";
  if (std::system(cmd.c_str()) != 0)
    std::fprintf(stderr, "mdring-bench: --plot: %s failed (is python3-matplotlib installed?)\n", cmd.c_str());
}

}  // namespace

void print_rows(const config& cfg, const std::vector<result_row>& rows, const std::string& topo, std::size_t P,
                const std::string& transport, double f) {
  if (!cfg.plot.empty()) plot_rows(cfg, rows, topo, P, transport, f);
  if (cfg.json) {
    for (auto& r : rows) std::printf("%s\n", json_row(cfg, r, topo, P, transport, f).c_str());
    return;
  }
  std::printf(
      "# mdring-bench: %s of %s (op %s), topology %s = %zu ranks, %s transport, %s, %s memory, median of "
      "%d iters (%d warmup), time = slowest rank\n",
      cfg.op.c_str(), cfg.dtype.c_str(), cfg.reduce_op.c_str(), topo.c_str(), P, transport.c_str(),
      cfg.inplace ? "in place" : "out of place", cfg.alloc.c_str(), cfg.iters, cfg.warmup);
  const bool b = !rows.empty() && rows[0].has_baseline;
  std::printf("# %12s %12s | %11s %9s %9s", "bytes", "elements", "mdring us", "algbw", "busbw");
  if (b) std::printf(" | %11s %9s %9s | %6s", (cfg.baseline + " us").c_str(), "algbw", "busbw", "ratio");
  // A baseline of several variants: the fastest (whose time the columns before
  // show), then each one's time.
  const auto& variants = rows.empty() ? std::vector<std::pair<std::string, double>>{} : rows[0].variant_s;
  auto width = [](const std::string& name) { return int(std::max<std::size_t>(11, name.size() + 3)); };
  if (!variants.empty()) std::printf(" | %-16s", "fastest");
  for (auto& v : variants) std::printf(" %*s", width(v.first), (v.first + " us").c_str());
  std::printf("%s\n", cfg.check ? " | check" : "");
  for (auto& r : rows) {
    const double algbw = r.mdring_s > 0 ? double(r.bytes) / r.mdring_s / 1e9 : 0;
    if (cfg.baseline_only) std::printf("  %12zu %12zu | %11s %9s %9s", r.bytes, r.elements, "-", "-", "-");
    else std::printf("  %12zu %12zu | %11.2f %9.3f %9.3f", r.bytes, r.elements, r.mdring_s * 1e6, algbw, algbw * f);
    if (b) {
      const double balg = r.baseline_s > 0 ? double(r.bytes) / r.baseline_s / 1e9 : 0;
      std::printf(" | %11.2f %9.3f %9.3f", r.baseline_s * 1e6, balg, balg * f);
      if (cfg.baseline_only) std::printf(" | %6s", "-");
      else std::printf(" | %6.3f", r.baseline_s > 0 ? r.mdring_s / r.baseline_s : 0.0);
    }
    if (!r.variant_s.empty()) std::printf(" | %-16s", r.baseline_variant.c_str());
    for (auto& v : r.variant_s) std::printf(" %*.2f", width(v.first), v.second * 1e6);
    if (cfg.check) std::printf(" | %s", r.errors ? "FAILED" : "ok");
    std::printf("\n");
  }
  if (!rows.empty())
    std::printf("# algbw and busbw in GB/s (1e9 bytes per second); ratio = mdring time / baseline time%s\n",
                variants.empty() ? "" : " (the fastest variant's)");
}

}  // namespace mdring_bench
