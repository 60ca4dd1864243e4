// mdring/options.hpp: what a user can set when binding a topology.
//
//   mdring::options o;
//   o.timeout = std::chrono::seconds(30);                 // every wait's deadline
//   o.algorithms = {mdring::algorithm::direct, mdring::algorithm::ring};  // per dimension
//   o.memory = &my_pool;                                  // all scratch comes from here
//   auto comm = mdring::bind(topo, MPI_COMM_WORLD, o);
//
// The defaults can also be set from the environment (read when an options object
// is constructed): MDRING_TIMEOUT=<seconds>, MDRING_CHECKS=local|collective,
// MDRING_PROGRESS=agent|in_wait, MDRING_PROFILE=<file>, MDRING_PLANNING=measure,
// MDRING_WISDOM=<file>, MDRING_REPRODUCIBLE=1, MDRING_ACCUMULATION=float32,
// MDRING_EAGER_ROOTED=1 and MDRING_STREAM=0|1|auto.
#pragma once

#include "config.hpp"
#include "error.hpp"
#include "topology/link.hpp"
#include "tuning.hpp"

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <memory_resource>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// The algorithm of one dimension's stages.
///   ring    p-1 steps, each sends 1/p of the range to the next rank: bandwidth optimal
///           on any link, 2(p-1) latencies per all-reduce.
///   direct  one step: every rank sends block j to rank j and folds the p inputs of its
///           own block in one n-ary pass; 2 latencies, but (p-1) messages in flight and
///           (p-1)/p of the range in scratch. For fully connected links (nvlink, shm).
///   halving_doubling  recursive halving, then doubling (Rabenseifner): log2 p steps
///           (two more when p is not a power of two), sending halves, quarters, ...
///           of the range to ranks 1, 2, 4, ... apart: latency-bound sizes on rings
///           of many ranks (plan/halving_doubling.hpp).
///   recursive_doubling  all_reduce only: the dimension all-reduces its whole range
///           instead of cutting it into blocks, in log2 p exchanges of the whole
///           range with ranks 1, 2, 4, ... apart (two more steps when p is not a
///           power of two): the fewest latencies, for the tiniest calls, at p times
///           the bytes of a reduce-scatter (plan/halving_doubling.hpp). The other
///           collectives run halving_doubling on such a dimension.
///   automatic  direct on fully connected links of 2 to tuning::direct_max_extent ranks,
///           ring otherwise, and for a call's ranges where the cost model predicts
///           it faster (small messages) halving_doubling instead of that ring, or
///           (all_reduce, up to tuning::recursive_doubling_max_bytes) recursive_doubling
///           on the last dimensions; a non-commutative op always gets direct.
enum class algorithm { automatic, ring, direct, halving_doubling, recursive_doubling };

/// The algorithm's name ("ring", "halving_doubling", ...).
constexpr std::string_view to_string(algorithm a) noexcept {
  switch (a) {
    case algorithm::ring:
      return "ring";
    case algorithm::direct:
      return "direct";
    case algorithm::halving_doubling:
      return "halving_doubling";
    case algorithm::recursive_doubling:
      return "recursive_doubling";
    default:
      return "automatic";
  }
}

/// How bind's plans are chosen for all_reduce.
///   estimate  the cost model alone (plan/cost.hpp, plan/pipeline.hpp): free.
///   measure   the first call of each size class (a factor of 2 in bytes) times a few
///             candidate plans on the real ranks (algorithms per dimension, segment
///             count, segments in flight) and keeps the fastest (plan/wisdom.hpp).
enum class planning { estimate, measure };

/// "estimate" or "measure".
constexpr std::string_view to_string(planning p) noexcept { return p == planning::measure ? "measure" : "estimate"; }

/// The transport of one dimension when the buffers are in GPU memory (mdring/cuda/,
/// docs/GPU.md). automatic picks by the dimension's link (transport/device_select.hpp):
/// ipc on GPU links whose ranks share a node, NCCL on other GPU links and fast
/// fabrics, MPI on slow host links.
///   ipc             the processes of one node read each other's device buffers in
///                   place through CUDA IPC (direct stages fold the peers' blocks
///                   where they are; small ones go through staging buffers, one-shot);
///                   stream-ordered flags: can be captured in a CUDA graph
///   nccl            one NCCL communicator per dimension, grouped ncclSend/ncclRecv
///                   on the stream: stream-ordered, can be captured in a CUDA graph
///   mpi_staged      MPI through pinned host buffers, chunked and double-buffered
///                   (synchronizes the host with the stream; not capturable)
///   mpi_cuda_aware  MPI on the device pointers, when the MPI library supports it
///   local           several logical ranks on one GPU in one process (cudaMemcpyAsync)
enum class device_transport { automatic, nccl, mpi_staged, mpi_cuda_aware, local, ipc };

/// The device transport's name.
constexpr std::string_view to_string(device_transport t) noexcept {
  switch (t) {
    case device_transport::nccl:
      return "nccl";
    case device_transport::mpi_staged:
      return "mpi_staged";
    case device_transport::mpi_cuda_aware:
      return "mpi_cuda_aware";
    case device_transport::local:
      return "local";
    case device_transport::ipc:
      return "ipc";
    default:
      return "automatic";
  }
}

/// Where the partial results of half and bfloat16 reductions are carried.
///   element  each fold accumulates in float and rounds to the element type: the
///            partial sums cross the stages (and the wire) in 16 bits, rounded once
///            per ring hop, or once per dimension where the dimension runs direct.
///   float32  the call is widened: its inputs converted to float32, the reduction run
///            in float32 through every stage, and the result rounded to 16 bits once,
///            at the end. Twice the bytes of every stage, a conversion pass each way,
///            and count floats of scratch per call in flight, kept for reuse (node
///            memory between the processes of a node, else options.memory). Host
///            path; the GPU path runs every dimension direct instead (one rounding
///            per dimension).
/// Per dimension (options::dimension_accumulation, MDRING_ACCUMULATION=element,float32):
/// a float32 dimension's partial results are not rounded inside it. The dimension
/// runs direct: every rank's 16-bit inputs to a block reach its owner, which folds
/// them in float and rounds once, as the block leaves the dimension. The bytes are
/// those of a ring's reduce-scatter (16 bits); what it costs is (p - 1) messages in
/// flight instead of one. Rings of the other dimensions still round per hop. Every
/// dimension float32 is the widened call. Other element types and user ops are not
/// affected.
enum class accumulation { element, float32 };

/// The accumulation's name.
constexpr std::string_view to_string(accumulation a) noexcept {
  return a == accumulation::float32 ? "float32" : "element";
}

/// How much argument checking a collective does.
///   local       each rank checks its own arguments (null buffers, overlap, root); a
///               rank that fails tells its peers, so nobody waits for it.
///   collective  additionally, the ranks agree on count, element type, op and root
///               with one small all-reduce per call before moving data, and all of
///               them throw the same invalid_argument when they differ.
enum class check_level { local, collective };

/// Who moves nonblocking calls (iall_reduce, ...) on while the caller does
/// something else (executor/progress.hpp).
///   automatic  agent where the transport allows a second thread to call it (threads
///              always; MPI when initialized with MPI_THREAD_MULTIPLE), else in_wait.
///   agent      a progress thread of mdring's, one per process, that sleeps while no
///              call is in flight. Over MPI it needs MPI_THREAD_MULTIPLE: bind throws
///              invalid_argument("options.progress") when MPI provides less.
///   in_wait    no extra thread: calls move only inside request::wait/test,
///              wait_all and wait_any (and blocking calls), on the caller's thread.
enum class progress_mode { automatic, agent, in_wait };

/// The progress mode's name.
constexpr std::string_view to_string(progress_mode m) noexcept {
  switch (m) {
    case progress_mode::agent:
      return "agent";
    case progress_mode::in_wait:
      return "in_wait";
    default:
      return "automatic";
  }
}

namespace detail {
// A variable's value mdring cannot use: named once on stderr with what was
// expected, and the default kept (a setting never stops a program). Empty is unset.
inline void env_problem(const char* name, const char* value, const char* expected) {
  static std::mutex m;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> g(m);
  if (!said.insert(std::string(name) + "=" + value).second) return;
  std::fprintf(stderr, "mdring: %s=\"%s\": expected %s; using the default\n", name, value, expected);
}
// The variable's value when it is one of `allowed`; nullptr when unset or empty,
// or (named on stderr) when it is something else.
inline const char* env_choice(const char* name, std::initializer_list<const char*> allowed, const char* expected) {
  const char* s = std::getenv(name);
  if (!s || !*s) return nullptr;
  for (const char* a : allowed)
    if (std::string_view(s) == a) return a;
  env_problem(name, s, expected);
  return nullptr;
}
// The variable as a number of seconds above 0, up to 10^9 (about 31 years), and
// nothing after it; `fallback` when unset, empty or (named on stderr) anything else.
inline std::chrono::milliseconds env_seconds(const char* name, std::chrono::milliseconds fallback) {
  if (const char* s = std::getenv(name); s && *s) {
    char* end = nullptr;
    const double seconds = std::strtod(s, &end);
    if (end != s && *end == 0 && std::isfinite(seconds) && seconds > 0 && seconds <= 1e9)
      return std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
    env_problem(name, s, "a number of seconds above 0 (e.g. 30 or 2.5), at most 1e9");
  }
  return fallback;
}
inline std::chrono::milliseconds default_timeout() { return env_seconds("MDRING_TIMEOUT", std::chrono::minutes(5)); }
inline bool default_shared() {
  const char* s = env_choice("MDRING_SHARED", {"0", "1"}, "0 or 1");
  return !(s && std::string_view(s) == "0");
}
inline progress_mode default_progress() {
  if (const char* s =
          env_choice("MDRING_PROGRESS", {"agent", "in_wait", "wait", "automatic"}, "agent, in_wait or automatic")) {
    if (std::string_view(s) == "agent") return progress_mode::agent;
    if (std::string_view(s) == "in_wait" || std::string_view(s) == "wait") return progress_mode::in_wait;
  }
  return progress_mode::automatic;
}
inline planning default_planning() {
  const char* s = env_choice("MDRING_PLANNING", {"estimate", "measure"}, "estimate or measure");
  return s && std::string_view(s) == "measure" ? planning::measure : planning::estimate;
}
inline std::string default_wisdom() {
  const char* s = std::getenv("MDRING_WISDOM");
  return s ? std::string(s) : std::string();
}
inline std::string default_profile() {
  const char* s = std::getenv("MDRING_PROFILE");
  return s ? std::string(s) : std::string();
}
inline bool default_hang_report() {
  const char* s = env_choice("MDRING_HANG_REPORT", {"0", "1"}, "0 or 1");
  return !(s && std::string_view(s) == "0");
}
inline bool default_eager_rooted() {
  const char* s = env_choice("MDRING_EAGER_ROOTED", {"0", "1"}, "0 or 1");
  return s && std::string_view(s) == "1";
}
// MDRING_STREAM: whether broadcasts and reduces above the one-shot cap stream over
// node memory (tuning::one_shot_stream_max_bytes): auto (bind measures the node's
// ranks, tuning::one_shot_stream_max_trip_ns, and where that does not decide the first
// calls time both ways, tuning::one_shot_stream_trials), 1 (always, without measuring)
// or 0 (never).
inline tuning default_tuning() {
  tuning t;
  if (const char* s = env_choice("MDRING_STREAM", {"auto", "0", "1"}, "auto, 0 or 1")) {
    if (std::string_view(s) == "0") t.one_shot_stream_max_bytes = 0;
    if (std::string_view(s) == "1") t.one_shot_stream_max_trip_ns = SIZE_MAX;
  }
  return t;
}
inline bool default_reproducible() {
  const char* s = env_choice("MDRING_REPRODUCIBLE", {"0", "1"}, "0 or 1");
  return s && std::string_view(s) == "1";
}
// MDRING_ACCUMULATION: element, float32 (every dimension), or one of them per
// dimension separated by commas ("element,float32": dimension_accumulation).
inline std::vector<accumulation> env_accumulation() {
  const char* s = std::getenv("MDRING_ACCUMULATION");
  std::vector<accumulation> out;
  if (!s || !*s) return out;
  std::string_view v(s);
  for (;;) {
    const std::size_t comma = v.find(',');
    const std::string_view w = v.substr(0, comma);
    if (w == "float32") out.push_back(accumulation::float32);
    else if (w == "element") out.push_back(accumulation::element);
    else {
      env_problem("MDRING_ACCUMULATION", s, "element or float32, or one of them per dimension (element,float32)");
      return {};
    }
    if (comma == std::string_view::npos) return out;
    v.remove_prefix(comma + 1);
  }
}
inline accumulation default_accumulation() {
  const auto v = env_accumulation();
  return v.size() == 1 ? v[0] : accumulation::element;
}
inline std::vector<accumulation> default_dimension_accumulation() {
  auto v = env_accumulation();
  if (v.size() == 1) v.clear();
  return v;
}
inline check_level default_checks() {
  if (const char* s = env_choice("MDRING_CHECKS", {"local", "collective"}, "local or collective"))
    if (std::string_view(s) == "collective") return check_level::collective;
  return check_level::local;
}
}  // namespace detail

/// What bind() takes besides the topology and the world; the defaults come from the MDRING_* environment variables.
struct options {
  /// The deadline of every single wait (one step of one stage). Generous by default
  /// (5 minutes, or MDRING_TIMEOUT seconds); when it passes, timeout_error names the
  /// collective, dimension, step and peer that did not answer.
  std::chrono::milliseconds timeout = detail::default_timeout();

  /// When a call fails on its deadline or on a peer's failure, this rank writes one
  /// line on stderr saying what it was doing: the call, its step, dimension and link,
  /// the peer it waited on (executor/state.hpp; mdring::dump_state writes the same on
  /// demand). On by default; MDRING_HANG_REPORT=0 turns it off.
  bool hang_report = detail::default_hang_report();

  /// Per-dimension algorithm; missing entries mean automatic.
  std::vector<algorithm> algorithms{};

  /// A profile file written by mdring::calibrate / mdring-calibrate (plan/profile.hpp):
  /// the cost model plans with its measured figures for the links it names instead
  /// of their traits. Every rank must read the same figures (bind checks). Empty:
  /// none; `MDRING_PROFILE=<file>` sets the default.
  std::string profile = detail::default_profile();

  /// estimate (the default) or measure (see planning); MDRING_PLANNING=measure.
  mdring::planning planning = detail::default_planning();
  /// With measure: a file that keeps the measured plans across runs (plan/wisdom.hpp),
  /// read at bind and rewritten by rank 0 after each measurement. Every rank must
  /// read the same (bind checks). Empty: kept in memory only; `MDRING_WISDOM=<file>`.
  std::string wisdom = detail::default_wisdom();

  /// Where all scratch memory comes from (nullptr: std::pmr::get_default_resource()).
  /// Scratch grows to the largest call and is then reused: no allocation per call.
  std::pmr::memory_resource* memory = nullptr;
  /// memory, or std::pmr::get_default_resource().
  std::pmr::memory_resource* memory_or_default() const noexcept {
    return memory ? memory : std::pmr::get_default_resource();
  }

  /// MPI: messages longer than this are sent as several MPI elements (MPI counts are
  /// int). Must be at least 1.
  std::size_t max_message_bytes = std::size_t(1) << 30;

  /// local or collective argument checks (check_level); MDRING_CHECKS=collective sets the default.
  check_level checks = detail::default_checks();

  /// Small broadcasts and reduces that run one-shot (every rank on one node: docs/USAGE.md,
  /// "Small calls, one-shot"). The root of a broadcast and the leaves of a reduce read
  /// nothing; by default they still wait until every rank has arrived at the call, so
  /// that a peer's failure or bad argument reaches every rank in that very call. With
  /// eager_rooted they return as soon as their data is in node memory, as MPI's eager
  /// path does, up to 15 calls ahead of their slowest reader, so that a loop of them
  /// pipelines; a peer's failure or bad argument then reaches them at their next call
  /// that waits (the readers still learn in the call). No effect under
  /// check_level::collective. Ranks may differ. MDRING_EAGER_ROOTED=1 sets the default.
  bool eager_rooted = detail::default_eager_rooted();

  /// Reproducible results (docs/USAGE.md, "Reproducible reductions"): every element of a
  /// reduction is combined in one order that depends on the topology alone, whatever
  /// the count, the element's place in the buffer, the segments, the pipeline depth,
  /// the planning mode, the transport and the progress mode:
  ///   dimension by dimension, innermost first; within a dimension, the partial
  ///   results of the ranks along it folded left to right in coordinate order
  ///   (((x_0 op x_1) op x_2) ... op x_{p-1}), in the op's accumulator type (float for
  ///   half and bfloat16), rounded to the element type once per dimension.
  /// Only the direct algorithm folds so: every dimension runs it, none is split,
  /// merged same-link dimensions fold nested (plan/merge.hpp), and asking for ring,
  /// halving_doubling or recursive_doubling as well is an
  /// invalid_argument("options.algorithms").
  /// Costs (p - 1) messages in flight per rank on long rings (docs/PERFORMANCE.md).
  /// Every rank must agree (bind checks). MDRING_REPRODUCIBLE=1 sets the default.
  bool reproducible = detail::default_reproducible();

  /// half and bfloat16 reductions: partial results in 16 bits (element, the default)
  /// or the whole call widened to float32 and rounded once (see accumulation).
  /// Every rank must agree (bind checks). MDRING_ACCUMULATION=float32 sets the default.
  mdring::accumulation accumulation = detail::default_accumulation();
  /// The same per dimension of the topology as written, overriding `accumulation`
  /// (missing entries take it): {element, float32} keeps the inner dimension's
  /// default and folds the outer one direct, rounded once (see accumulation). A
  /// float32 dimension must leave its algorithm automatic or direct
  /// (invalid_argument("options.algorithms")), unless every dimension is float32.
  /// At bind the communicator's options hold one entry per dimension, and
  /// `accumulation` says float32 only when every dimension is.
  /// MDRING_ACCUMULATION=element,float32 sets the default.
  std::vector<mdring::accumulation> dimension_accumulation = detail::default_dimension_accumulation();

  /// Let the ranks of a node read and write each other's buffers directly in the
  /// direct stages (threads: plain pointers; MPI processes on one node: cross-memory
  /// attach, when the kernel allows it). Off: messages only. MDRING_SHARED=0 turns
  /// the default off.
  bool shared_memory = detail::default_shared();

  /// Who moves nonblocking calls on (see progress_mode). MDRING_PROGRESS=agent|in_wait
  /// sets the default.
  progress_mode progress = detail::default_progress();

  /// GPU path (mdring/cuda/): the transport of each dimension (missing entries:
  /// automatic), and where device scratch comes from (nullptr: cudaMalloc); a
  /// resource given here must return device memory.
  std::vector<device_transport> device_transports{};
  std::pmr::memory_resource* device_memory = nullptr;  ///< where device scratch comes from (nullptr: cudaMalloc)

  /// the knobs of the cost model and the executors (tuning.hpp); MDRING_STREAM=0|1|auto
  /// sets the default of the streamed rooted calls (one_shot_stream_max_bytes 0, or
  /// one_shot_stream_max_trip_ns SIZE_MAX: streamed without measuring; auto: measured,
  /// and timed on the first calls where the measure does not decide).
  tuning tune = detail::default_tuning();
};

namespace detail {
MDRING_COLD inline void validate(const options& o) {
  if (o.reproducible)
    for (std::size_t d = 0; d < o.algorithms.size(); ++d)
      if (o.algorithms[d] != algorithm::automatic && o.algorithms[d] != algorithm::direct)
        throw invalid_argument("options.algorithms",
                               "mdring::bind: options.algorithms[" + std::to_string(d) + "] is " +
                                   std::string(to_string(o.algorithms[d])) +
                                   ", but options.reproducible is set; only the direct algorithm folds in the "
                                   "reproducible order (leave it automatic or ask for direct)");
  if (o.timeout.count() <= 0)
    throw invalid_argument("options.timeout", "mdring::bind: options.timeout must be positive");
  if (o.max_message_bytes == 0 || o.max_message_bytes > (std::size_t(1) << 31) - 1)
    throw invalid_argument(
        "options.max_message_bytes",
        "mdring::bind: options.max_message_bytes must be in [1, 2^31 - 1], got " + std::to_string(o.max_message_bytes));
  if (o.tune.pipeline_depth < 1 || o.tune.pipeline_depth > 8)
    throw invalid_argument(
        "options.tune.pipeline_depth",
        "mdring::bind: options.tune.pipeline_depth must be in [1, 8], got " + std::to_string(o.tune.pipeline_depth));
  if (o.tune.max_segments < 1)
    throw invalid_argument("options.tune.max_segments", "mdring::bind: options.tune.max_segments must be at least 1");
  if (o.tune.staging_chunk_bytes < 4096 || o.tune.staging_chunk_bytes > (std::size_t(1) << 30))
    throw invalid_argument("options.tune.staging_chunk_bytes",
                           "mdring::bind: options.tune.staging_chunk_bytes must be in [4096, 2^30], got " +
                               std::to_string(o.tune.staging_chunk_bytes));
  if (o.tune.split_ring_extent != 0 && o.tune.split_ring_extent < 4)
    throw invalid_argument("options.tune.split_ring_extent",
                           "mdring::bind: options.tune.split_ring_extent must be 0 (never split) or at least 4, got " +
                               std::to_string(o.tune.split_ring_extent));
  if (o.tune.direct_max_extent < 2)
    throw invalid_argument("options.tune.direct_max_extent",
                           "mdring::bind: options.tune.direct_max_extent must be at least 2");
}

// Dimension d's accumulation (options::dimension_accumulation, else accumulation).
inline accumulation accumulation_of(const options& o, std::size_t d) noexcept {
  return d < o.dimension_accumulation.size() ? o.dimension_accumulation[d] : o.accumulation;
}
// Every one of `ndims` dimensions float32: the call is widened (host path).
inline bool accumulates_float32(const options& o, std::size_t ndims) noexcept {
  for (std::size_t d = 0; d < ndims; ++d)
    if (accumulation_of(o, d) != accumulation::float32) return false;
  return true;
}
}  // namespace detail

MDRING_NAMESPACE_END
