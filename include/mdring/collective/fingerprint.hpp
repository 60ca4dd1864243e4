// mdring/collective/fingerprint.hpp: what the ranks of a communicator agree on at
// bind, and the measured figures and plans a bind starts from (options.profile,
// options.wisdom).
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../fnv.hpp"
#include "../options.hpp"
#include "../plan/profile.hpp"
#include "../plan/wisdom.hpp"
#include "../topology/runtime.hpp"

#include <cstdio>
#include <string>

MDRING_NAMESPACE_BEGIN

namespace detail {

// What every rank of a communicator must agree on at bind time: the topology and
// every option that changes the schedule (which dimensions run, their algorithms,
// the segment length through the cost model and the links' figures) or how a message is framed (pieces
// of max_message_bytes, staging chunks, the shared-access staging threshold), or
// that adds collectives of its own (collective checks, shared memory).
// Ranks that disagreed on any of them would post messages that do not match and
// wait for each other forever; with it in the fingerprint they get topology_error
// at bind instead. Doubles are printed exactly (hexadecimal).
MDRING_COLD inline std::string fingerprint_core(const runtime_topology& written, const options& o) {
  const tuning& u = o.tune;
  // A profile's figures replace the links' (and a rank that cannot read it says so).
  runtime_topology t = written;
  std::string prof;
  if (!o.profile.empty()) {
    try {
      profile::load(o.profile).apply(t);
      prof = "|profile";
    } catch (const std::exception& e) {
      prof = std::string("|profile unreadable (") + e.what() + ")";
    }
  }
  std::string s = t.to_string() + prof;
  for (auto a : o.algorithms) s += "|" + std::string(to_string(a));
  if (o.reproducible) s += "|reproducible";
  for (std::size_t d = 0; d < written.ndims(); ++d)
    if (detail::accumulation_of(o, d) != accumulation::element)
      s += "|accumulate " + std::to_string(d) + " " + std::string(to_string(detail::accumulation_of(o, d)));
  auto num = [&](const char* name, std::size_t v) { s += std::string("|") + name + " " + std::to_string(v); };
  auto real = [&](const char* name, double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%a", v);
    s += std::string("|") + name + " " + buf;
  };
  // The links' figures choose the segment length: ranks whose figures differ (a
  // --link or register_link on some ranks only) would cut different segments.
  for (auto& d : t.dims()) {
    s += "|" + d.link.name;
    real("bw", d.link.bandwidth);
    real("lat", d.link.latency);
    real("o", d.link.overhead);
    num("ports", d.link.ports);
    for (std::size_t i = 0; i < d.link.curve.points; ++i)
      real("curve", d.link.curve.seconds[i]), real("curve lat", d.link.curve.latency[i]);
    s += d.link.fully_connected ? " full" : " ring";
  }
  num("direct", u.direct_max_extent);
  num("split", u.split_ring_extent);
  num("halving-doubling", u.halving_doubling_max_bytes);
  num("recursive-doubling", u.recursive_doubling_max_bytes);
  s += u.merge_same_link ? "|merge" : "|nomerge";
  num("segment", u.segment_bytes);
  num("min segment", u.min_segment_bytes);
  num("max segments", u.max_segments);
  num("depth", u.pipeline_depth);
  real("host gamma", u.host_gamma);
  real("device gamma", u.device_gamma);
  num("shared staging", u.shared_staging_bytes);
  num("one-shot", u.one_shot_max_bytes);
  num("one-shot stream", u.one_shot_stream_max_bytes);
  num("one-shot stream trip", u.one_shot_stream_max_trip_ns);
  num("one-shot stream trials", u.one_shot_stream_trials);
  real("cma gamma", u.cma_gamma);
  real("copy gamma", u.copy_gamma);
  num("stream min", u.stream_min_bytes);
  num("stream broadcast min", u.stream_broadcast_min_bytes);
  num("stream blocks min", u.stream_blocks_min_bytes);
  num("shared reduce max", u.shared_reduce_max_bytes);
  num("staging chunk", u.staging_chunk_bytes);
  num("ipc staging", u.ipc_staging_bytes);
  real("ipc publish", u.ipc_publish_seconds);
  num("max message", o.max_message_bytes);
  // Collective argument checks add a reduction to every call; shared memory adds
  // collectives at bind (MDRING_CHECKS and MDRING_SHARED can differ per process).
  s += o.checks == check_level::collective ? "|checks collective" : "|checks local";
  s += o.shared_memory ? "|shared" : "|noshared";
  return s;
}

// What a wisdom file must have been measured under to apply (plan/wisdom.hpp).
inline std::string wisdom_key(const runtime_topology& written, const options& o) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(fingerprint_core(written, o))));
  return buf;
}

// The measured plans a bind starts from: options.wisdom's, when measured under the
// same topology and options. Throws invalid_argument("options.wisdom").
MDRING_COLD inline wisdom load_wisdom(const runtime_topology& written, const options& o) {
  if (o.planning != planning::measure || o.wisdom.empty()) return {};
  // Its section for this topology and these options (none: another machine,
  // topology or options, measured afresh).
  try {
    return wisdom::load(o.wisdom, wisdom_key(written, o));
  } catch (const invalid_argument& e) {
    throw invalid_argument("options.wisdom",
                           std::string("mdring::bind: options.wisdom (or MDRING_WISDOM): ") + e.what());
  }
}

// Ranks that bind together must agree on all of the above, on the planning mode
// and on the wisdom they start from.
MDRING_COLD inline std::string fingerprint(const runtime_topology& written, const options& o) {
  std::string s = fingerprint_core(written, o);
  if (o.planning == planning::measure) {
    s += "|measure";
    try {
      wisdom w = load_wisdom(written, o);
      w.native.clear();  // the drop-in's choices: agreed by it (pmpi/mdring_pmpi.cpp)
      if (!w.all_reduce.empty()) {
        char buf[40];
        std::snprintf(buf, sizeof buf, "|wisdom %016llx", static_cast<unsigned long long>(fnv1a(w.to_string())));
        s += buf;
      }
    } catch (const std::exception& e) {
      s += std::string("|wisdom unreadable (") + e.what() + ")";
    }
  }
  return s;
}

}  // namespace detail

MDRING_NAMESPACE_END
