// libmdring-pmpi.so: mdring as a drop-in for an unmodified MPI program.
//
//   mpirun -x LD_PRELOAD=/path/libmdring-pmpi.so -np 4 ./app     (or link it before libmpi)
//
// It defines MPI_Allreduce, MPI_Reduce, MPI_Reduce_scatter_block, MPI_Reduce_scatter,
// MPI_Allgather, MPI_Bcast and MPI_Iallreduce (and, for Open MPI, their Fortran
// mpif.h entry points: fortran.cpp), runs each call on mdring where it can, and
// calls the PMPI_ function otherwise. What it takes over is decided only from what every rank
// passes alike: the communicator (intra, more than one rank), count x type size
// against a threshold, a predefined datatype, and a predefined op valid for it or
// a commutative user op. Never from MPI_IN_PLACE, pointers or alignment, so every
// rank decides the same. See docs/DROP_IN.md and docs/DESIGN.md.
//
// Which of the calls it could take it does take is measured, by default: per
// communicator, collective and size class (floor(log2(bytes))), the first calls
// of the class alternate between MPI's own collective and mdring's (one of each
// untimed, then runs of two calls per side, the second timed, until each side
// has MDRING_PMPI_TRIALS timed calls, 4 x that below 64 KiB), then one small allreduce
// of every rank's medians decides, on every rank alike, from the slowest rank's:
// mdring only where it was faster by more than the runs' own spread (1 % to 5 %),
// else MPI. Every call is a real call of the program, so measuring costs only
// the trial calls that ran on the slower side; MDRING_REPORT shows each choice
// and that cost, and MDRING_WISDOM keeps the choices for the next run.
//
// Environment (read at the first call; every rank must see the same values, and
// a communicator whose ranks disagree stays on MPI):
//   MDRING_PMPI=0              pass everything to MPI
//   MDRING_PMPI_MIN_BYTES=n    no measuring: every call of n bytes or more taken over
//   MDRING_PMPI_TRIALS=n       timed calls per side while measuring (default 5, 1 to 50)
//   MDRING_WISDOM=path         the measured choices, read at a communicator's first
//                              call and written at each new choice (plan/wisdom.hpp)
//   MDRING_TOPOLOGY=...        the runtime topology syntax; default: detected
//   MDRING_PMPI_THREAD=multiple  ask for MPI_THREAD_MULTIPLE at MPI_Init, so that
//                              MPI_Iallreduce runs on mdring's progress agent
//                              (default keep: the level the program asks for;
//                              below MULTIPLE, MPI_Iallreduce stays on MPI)
//   MDRING_REPORT=1            per collective, at MPI_Finalize on rank 0: calls taken,
//                              calls passed to MPI and why, bytes
//   MDRING_TIMEOUT=s           mdring's deadline per wait (default: none, as MPI)
//   MDRING_REPRODUCIBLE=1      the same bits at every size (options::reproducible): every
//                              call of a supported type and op is taken (threshold 0
//                              unless MDRING_PMPI_MIN_BYTES says otherwise) and
//                              MPI_THREAD_MULTIPLE is asked for (unless MDRING_PMPI_THREAD=keep)
//                              so that MPI_Iallreduce runs on mdring too
#include <mdring/mpi.hpp>

#include "classify.hpp"
#include "config.hpp"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#define MDRING_PMPI_API extern "C" __attribute__((visibility("default")))

namespace {

namespace md = mdring;
using namespace mdring_pmpi;  // classify.hpp
using md_comm = md::communicator<md::runtime_topology, md::mpi::transport>;

// ---- statistics (MDRING_REPORT) ---------------------------------------------
enum coll {
  c_allreduce,
  c_reduce,
  c_reduce_scatter_block,
  c_reduce_scatter,
  c_allgather,
  c_bcast,
  c_iallreduce,
  n_coll
};
// What the one path of the entry points (dispatch(), below) needs to know of each.
struct collective_info {
  const char* name;     // MPI's: the report, failure messages
  const char* wisdom;   // its name in MDRING_WISDOM (MPI_Iallreduce has none: it follows MPI_Allreduce)
  bool in_rank_order;   // its result is blocks in rank order: not on a communicator mdring renumbered
  bool nonblocking;     // a failure on mdring is its request's (MPI_Wait returns it), not the call's
  md::collective kind;  // what it runs as on mdring
};
constexpr collective_info collectives[n_coll] = {
    {"MPI_Allreduce", "all_reduce", false, false, md::collective::all_reduce},
    {"MPI_Reduce", "reduce", false, false, md::collective::reduce},
    {"MPI_Reduce_scatter_block", "reduce_scatter_block", true, false, md::collective::reduce_scatter},
    {"MPI_Reduce_scatter", "reduce_scatter", true, false, md::collective::reduce_scatter},
    {"MPI_Allgather", "all_gather", true, false, md::collective::all_gather},
    {"MPI_Bcast", "broadcast", false, false, md::collective::broadcast},
    {"MPI_Iallreduce", nullptr, false, true, md::collective::all_reduce},
};
enum why {
  w_taken,
  w_not_initialized,
  w_invalid,
  w_disabled,
  w_config,
  w_intercomm,
  w_one_rank,
  w_small,
  w_datatype,
  w_op_type,
  w_noncommutative,
  w_counts,
  w_order,
  w_setup,
  w_failed,
  w_thread,
  w_trial,
  w_measured,
  w_unmeasured,
  n_why
};
constexpr const char* why_name[n_why] = {
    "taken by mdring",
    "MPI not initialized, or finalized",
    "invalid arguments (left to MPI)",
    "disabled (MDRING_PMPI=0)",
    "ranks disagree on MDRING_* settings",
    "intercommunicator",
    "one rank",
    "below threshold",
    "datatype not predefined (or not contiguous)",
    "op not defined for the datatype (left to MPI)",
    "non-commutative user op",
    "recvcounts not all equal",
    "ranks not node-major (blocks would be permuted)",
    "mdring could not bind the communicator",
    "mdring failed on this communicator earlier",
    "thread level below MPI_THREAD_MULTIPLE (no progress agent)",
    "measuring: MPI's turn",
    "measured: MPI's own is faster at this size",
    "MPI_Allreduce of this size not measured faster on mdring (yet)",
};
// Counted with a relaxed load and store, not an atomic increment: two locked
// instructions on every call cost more than the report is worth. Threads calling
// collectives at once may lose a count (the report is approximate then).
struct counter {
  std::atomic<unsigned long long> calls{0}, bytes{0};
  void add(std::size_t b) noexcept {
    calls.store(calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    bytes.store(bytes.load(std::memory_order_relaxed) + b, std::memory_order_relaxed);
  }
};
counter stats[n_coll][n_why];

// ---- configuration (config.hpp) ----------------------------------------------
const config& cfg() {
  static const config parsed = [] {
    std::vector<std::string> problems;
    config c = read_config(problems);
    for (const auto& p : problems) std::fprintf(stderr, "mdring-pmpi: %s\n", p.c_str());
    return c;
  }();
  return parsed;
}

// ---- re-entry: mdring's own MPI calls go straight to PMPI --------------------
thread_local int depth = 0;
struct inside {
  inside() { ++depth; }
  ~inside() { --depth; }
  inside(const inside&) = delete;
  inside& operator=(const inside&) = delete;
};
bool reentered() { return depth > 0 || md::detail::executing_depth() > 0; }

std::atomic<bool> finalized{false};    // MPI_Finalize has begun
std::atomic<bool> initialized{false};  // PMPI_Initialized said so once
bool mpi_usable() {
  if (finalized.load(std::memory_order_acquire)) return false;
  if (initialized.load(std::memory_order_acquire)) return true;
  int init = 0, fin = 0;
  PMPI_Initialized(&init);
  if (!init) return false;
  PMPI_Finalized(&fin);
  if (fin) return false;
  initialized.store(true, std::memory_order_release);
  return true;
}

// The settings agreed by every process at MPI_Init (one small allreduce on
// MPI_COMM_WORLD): then a call can be passed to MPI for its size without looking
// at its communicator. 0: not agreed (MPI was initialized without our MPI_Init,
// and each communicator agrees at its first call instead), 1: agreed, -1: the
// processes disagree (everything goes to MPI).
std::atomic<int> world_agreement{0};

// The settings as numbers every rank can compare: (v, -v) pairs under MPI_MAX.
bool settings_agree(MPI_Comm comm, const char* who, const char* what);

// ---- the measured choice, per communicator, collective and size class --------
constexpr std::size_t n_class = 64;
struct class_state {
  enum : unsigned char { measuring, mpi, mdring } side = measuring;
  bool from_wisdom = false;
  unsigned calls = 0;                 // calls of the class so far, while measuring
  std::vector<double> t[2];           // this rank's timed calls: MPI's [0], mdring's [1]
  double native_s = 0, mdring_s = 0;  // the slowest rank's medians
  double spent[2] = {0, 0};           // this rank's seconds in timed calls, per side
  unsigned one_shot = 0;              // calls taken without measuring: they ran one-shot (decide)
};

// ---- per communicator: config agreement, then (at the first call taken) bind ----
struct comm_state;
void report_choices(const comm_state& s);
struct comm_state {
  why off = w_taken;  // w_taken: usable; else why this communicator stays on MPI
  int size = 0, rank = 0;
  bool bound = false;                // phase 2 done
  std::vector<int> to_md;            // this communicator's rank -> mdring's
  MPI_Comm ordered = MPI_COMM_NULL;  // owned: the node-major split, when renumbered
  std::unique_ptr<md_comm> comm;
  std::pair<int, int> key{0, 0};  // (world rank, sequence) of its first rank: teardown order
  bool torn_down = false;
  std::unique_ptr<class_state> classes[n_coll][n_class];
  std::string wisdom_key;  // its section of MDRING_WISDOM

  // mdring's rank == this communicator's rank (not renumbered).
  bool identity() const noexcept { return ordered == MPI_COMM_NULL; }

  class_state& of(coll c, std::size_t cls) {
    auto& p = classes[c][std::min(cls, n_class - 1)];
    if (!p) p = std::make_unique<class_state>();
    return *p;
  }

  void teardown() {
    if (torn_down) return;
    torn_down = true;
    report_choices(*this);
    inside g;
    comm.reset();
    if (ordered != MPI_COMM_NULL) PMPI_Comm_free(&ordered);
  }
};

std::mutex registry_m;
std::vector<comm_state*> registry;  // live states, for teardown at MPI_Finalize
std::atomic<int> sequence{0};
std::atomic<int> seen{0};  // communicators that got a state

// The communicator a thread last called a collective on, and its state: most
// programs call on one or two, and this spares three MPI calls per call (the
// attribute lookup above all: about 50 ns of a 1.5 us small allreduce). A state
// deleted (MPI_Comm_free: the handle may come back for another communicator)
// bumps states_gone, which invalidates every thread's entry.
std::atomic<unsigned> states_gone{0};
struct last_state {
  MPI_Comm comm = MPI_COMM_NULL;
  comm_state* s = nullptr;
  unsigned gen = 0;
};
thread_local last_state last;

int delete_state(MPI_Comm, int, void* attr, void*) {
  auto* s = static_cast<comm_state*>(attr);
  states_gone.fetch_add(1, std::memory_order_acq_rel);
  {
    std::lock_guard l(registry_m);
    std::erase(registry, s);
  }
  s->teardown();
  delete s;
  return MPI_SUCCESS;
}

int state_keyval = MPI_KEYVAL_INVALID;
std::once_flag keyval_once;

void print_report(std::size_t live);
int finalize_cleanup(MPI_Comm, int, void*, void*) {
  std::vector<comm_state*> live;
  {
    std::lock_guard l(registry_m);
    live = registry;
  }
  // One order on every process (each teardown frees shared windows, which
  // synchronizes the communicator's ranks): by the first rank's world rank and
  // its sequence number.
  std::sort(live.begin(), live.end(), [](comm_state* a, comm_state* b) { return a->key < b->key; });
  for (auto* s : live) s->teardown();
  if (cfg().report) print_report(live.size());
  finalized.store(true, std::memory_order_release);
  return MPI_SUCCESS;
}

void init_once() {
  std::call_once(keyval_once, [] {
    inside g;
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &state_keyval, nullptr);
    int self_key = MPI_KEYVAL_INVALID;
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, finalize_cleanup, &self_key, nullptr);
    PMPI_Comm_set_attr(MPI_COMM_SELF, self_key, nullptr);
  });
}

// Phase 1, at the first wrapped call on comm, collective: do the ranks agree on
// the settings? (A rank that took a call over while another passed it to MPI
// would hang both.)
comm_state* state_of(MPI_Comm comm, why& off) {
  init_once();
  void* v = nullptr;
  int found = 0;
  PMPI_Comm_get_attr(comm, state_keyval, &v, &found);
  if (found) {
    off = static_cast<comm_state*>(v)->off;
    return static_cast<comm_state*>(v);
  }
  auto* s = new comm_state;
  seen.fetch_add(1, std::memory_order_relaxed);
  PMPI_Comm_size(comm, &s->size);
  PMPI_Comm_rank(comm, &s->rank);
  const auto& c = cfg();
  const bool same =
      world_agreement.load() == 1 || settings_agree(comm, "the ranks of a communicator", "its collectives");
  s->off = !same ? w_config : !c.enabled ? w_disabled : w_taken;
  PMPI_Comm_set_attr(comm, state_keyval, s);
  {
    std::lock_guard l(registry_m);
    registry.push_back(s);
  }
  off = s->off;
  return s;
}

// Collective over comm; rank 0 says so when they disagree (who: "the processes",
// what stays on MPI: "every collective").
bool settings_agree(MPI_Comm comm, const char* who, const char* what) {
  const auto& c = cfg();
  const std::int64_t topo_hash = std::int64_t(md::detail::fnv1a(c.topology) >> 2);
  const std::int64_t choice = c.measure ? std::int64_t(c.trials) : -1;
  std::int64_t mine[10] = {c.enabled,
                           -std::int64_t(c.enabled),
                           std::int64_t(c.min_bytes),
                           -std::int64_t(c.min_bytes),
                           topo_hash,
                           -topo_hash,
                           c.reproducible,
                           -std::int64_t(c.reproducible),
                           choice,
                           -choice};
  std::int64_t all[10];
  PMPI_Allreduce(mine, all, 10, MPI_INT64_T, MPI_MAX, comm);
  bool same = true;
  for (int i = 0; i < 10; i += 2) same = same && all[i] == -all[i + 1];
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  if (!same && rank == 0)
    std::fprintf(stderr,
                 "mdring-pmpi: %s disagree on MDRING_PMPI, MDRING_PMPI_MIN_BYTES, MDRING_PMPI_TRIALS, "
                 "MDRING_REPRODUCIBLE or MDRING_TOPOLOGY; %s stay on MPI\n",
                 who, what);
  return same;
}

// After MPI_Init: every process agrees on the settings once, on MPI_COMM_WORLD.
void after_init() {
  if (!mpi_usable()) return;
  inside g;
  init_once();
  world_agreement.store(settings_agree(MPI_COMM_WORLD, "the processes", "all collectives") ? 1 : -1);
}

// MDRING_WISDOM's choices for this communicator (its topology and options), when
// every rank read the same ones; else none (measured afresh). Collective.
void load_choices(comm_state& s, MPI_Comm comm) {
  const auto& c = cfg();
  if (c.wisdom.empty()) return;
  md::wisdom w;
  try {
    w = md::wisdom::load(c.wisdom, s.wisdom_key);
  } catch (const md::invalid_argument& e) {
    if (s.rank == 0) std::fprintf(stderr, "mdring-pmpi: MDRING_WISDOM: %s; measuring afresh\n", e.what());
    w = md::wisdom{};
  }
  w.all_reduce.clear();  // measured planning's (MDRING_PLANNING=measure): the library's own
  const std::int64_t h = std::int64_t(md::detail::fnv1a(w.section()) >> 2);
  std::int64_t v[2] = {h, -h};
  PMPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT64_T, MPI_MAX, comm);
  if (v[0] != -v[1]) {
    if (s.rank == 0)
      std::fprintf(stderr, "mdring-pmpi: the ranks read different choices from MDRING_WISDOM (%s); measuring afresh\n",
                   c.wisdom.c_str());
    return;
  }
  for (const auto& [k, choice] : w.native) {
    for (int i = 0; i < n_coll; ++i) {
      if (!collectives[i].wisdom || k.first != collectives[i].wisdom || k.second >= n_class) continue;
      class_state& st = s.of(coll(i), k.second);
      st.side = choice.mdring ? class_state::mdring : class_state::mpi;
      st.from_wisdom = true;
      st.native_s = choice.native_seconds;
      st.mdring_s = choice.mdring_seconds;
    }
  }
}

// Phase 2, at the first call taken over, collective: the topology, a node-major
// order, and mdring's communicator. False (on every rank) when it could not.
bool bind_state(comm_state& s, MPI_Comm comm) {
  if (s.bound) return s.comm != nullptr;
  s.bound = true;
  inside g;
  std::string what, source;
  int ok = 1;
  md::runtime_topology topo;
  try {
    // MDRING_PMPI_TEST_NODES=k (tests only): pretend rank r is on node r % k,
    // which is not node-major, to exercise the renumbering on one machine.
    const char* fake = std::getenv("MDRING_PMPI_TEST_NODES");
    const int k = fake ? std::atoi(fake) : 0;
    const auto layout = k > 0 ? md::layout_of_nodes(comm, s.rank % k) : md::detect_node_layout(comm);
    const auto& c = cfg();
    bool from_env = false;
    if (!c.topology.empty()) {
      try {
        topo = md::parse_topology(c.topology).resolve(std::size_t(s.size), "bind");
        from_env = true;
        source = "MDRING_TOPOLOGY";
      } catch (const md::error& e) {
        source = "detected (MDRING_TOPOLOGY does not fit " + std::to_string(s.size) + " ranks)";
      }
    }
    if (!from_env) {
      topo = md::topology_of(layout);
      if (source.empty()) source = "detected";
    }
    // Detected topologies assume node-major ranks: renumber when they are not.
    MPI_Comm target = comm;
    if (!from_env && layout.ranks_per_node > 1 && !layout.node_major) {
      PMPI_Comm_split(comm, 0, layout.key, &s.ordered);
      target = s.ordered;
      source += ", renumbered node-major";
    }
    int md_rank = s.rank;
    if (!s.identity()) PMPI_Comm_rank(target, &md_rank);
    s.to_md.assign(std::size_t(s.size), 0);
    PMPI_Allgather(&md_rank, 1, MPI_INT, s.to_md.data(), 1, MPI_INT, comm);
    int world = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &world);
    int key[2] = {world, sequence.fetch_add(1)};
    PMPI_Bcast(key, 2, MPI_INT, 0, comm);
    s.key = {key[0], key[1]};
    md::options o;
    o.timeout = c.timeout;
    o.checks = md::check_level::local;
    s.comm = std::make_unique<md_comm>(md::bind(topo, target, o));
    s.wisdom_key = md::detail::wisdom_key(topo, o);
  } catch (const std::exception& e) {
    ok = 0;
    what = e.what();
  }
  int all = 0;
  PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
  if (!all) {
    s.comm.reset();
    if (s.ordered != MPI_COMM_NULL) PMPI_Comm_free(&s.ordered);
    s.off = w_setup;
    if (!what.empty())
      std::fprintf(stderr, "mdring-pmpi: rank %d: cannot bind mdring (%s); using MPI\n", s.rank, what.c_str());
    return false;
  }
  if (cfg().measure) load_choices(s, comm);
  static std::atomic<int> listed{0};
  if (cfg().report && s.rank == 0 && listed.fetch_add(1) < 8)
    std::fprintf(stderr, "mdring-pmpi: communicator of %d ranks: topology %s (%s), progress %s\n", s.size,
                 s.comm->topology().to_string().c_str(), source.c_str(),
                 std::string(md::to_string(s.comm->progress())).c_str());
  return true;
}

// ---- a call passed to MPI again -------------------------------------------------
// A thread's last call passed to MPI for a reason that cannot change (its size
// class measured MPI's own faster, below the threshold, disabled), by what the
// decision read: the same call again goes straight to MPI, counted. At half a
// microsecond per small collective, the full decision's lookups were about a
// tenth of the call (benchmarks/pmpi_overhead.c).
struct call_key {
  int c = n_coll;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Datatype dt = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
  int count = 0, extra = 0;  // extra: the root, or the send count
  bool operator==(const call_key&) const = default;
};
struct passed_call {
  call_key k;
  unsigned gen = 0;
  why reason = w_taken;
  std::size_t bytes = 0;
};
thread_local passed_call passed;
bool pass_again(const call_key& k) {
  if (!(passed.k == k) || passed.gen != states_gone.load(std::memory_order_acquire) || passed.k.c == n_coll)
    return false;
  stats[k.c][passed.reason].add(passed.bytes);
  return true;
}
struct decision;
void remember_pass(const call_key& k, unsigned gen, const decision& d, std::size_t bytes);

// The decision shared by all collectives: the communicator's state when the call
// is to be taken over, nullptr (and the reason counted) when it goes to MPI.
// While a size class is measured, `trial` is its state and the call is timed
// (trial_timer), on whichever side runs it.
struct decision {
  comm_state* s = nullptr;
  why reason = w_taken;
  comm_state* owner = nullptr;  // with trial
  class_state* trial = nullptr;
  coll c = c_allreduce;
  std::size_t cls = 0;
  bool timed = false;
};
// An all-reduce, all-gather or reduce-scatter that mdring runs one-shot over node
// memory (all of comm's ranks on one node, at most tune.one_shot_max_bytes per rank)
// with less than 1 KiB per rank is taken without measuring: there it took 0.6 to
// 0.8 x Open MPI's time on 2026-12-02's Xeon VM and about as long (0.9 to 1.2 x,
// varying run to run) on 2026-12-07's AMD EPYC VM (docs/perf/pmpi-small.md),
// differences that trials of calls under a microsecond cannot resolve (their medians
// move by more than that from run to run, and kept MPI's at 8 B where it was 1.7 x).
// From 1 KiB per rank the measured choice decides: there the calls take a
// microsecond or more, and the answer depends on the machine (2 processes, each call
// after a barrier: 0.61 to 0.89 x Open MPI's time at 1 to 4 KiB on the Xeon VM, 1.07
// to 1.45 x on the AMD VM). A reduce-scatter, whose ranks read only their block of
// each peer's data, is taken up to the cap (0.69 to 0.84 x at 1 to 4 KiB per call on
// the AMD VM, where trials, wanting 15 %, gave the 4 KiB one to MPI). Not a broadcast
// or reduce: below 512 B Open MPI's are faster in a loop (see choose), and from 4 KiB
// on 2 processes, 512 B on 4, after a barrier; the measured choice decides those. Nor
// a communicator of more than 8 ranks, where every rank reads every other's data.
constexpr std::size_t one_shot_unmeasured_below = 1024;  // bytes per rank
bool one_shot_first(const comm_state& s, coll c, std::size_t bytes) {
  const md::collective kind = collectives[c].kind;
  if (s.size > 8 || !s.comm || kind == md::collective::broadcast || kind == md::collective::reduce) return false;
  // (bytes: the whole call's; those whose result is blocks in rank order count per rank.)
  const std::size_t count = collectives[c].in_rank_order ? bytes / std::size_t(s.size) : bytes;
  if (kind != md::collective::reduce_scatter && count >= one_shot_unmeasured_below) return false;
  return s.comm->runs_one_shot(kind, count, 1);
}

// A collective whose result is in rank order (blocks) cannot be taken on a
// communicator that mdring renumbered node-major.
decision decide(coll c, MPI_Comm comm, std::size_t bytes, why local_reason) {
  decision d;
  auto pass = [&](why w) {
    d.s = nullptr;
    d.reason = w;
    stats[c][w].add(bytes);
    return d;
  };
  if (!mpi_usable()) return d.reason = w_not_initialized, d;  // not counted: nothing can be reported
  // With the settings agreed at MPI_Init, the size alone decides small calls:
  // every rank passes the same count and datatype.
  const int agreed = world_agreement.load(std::memory_order_relaxed);
  if (agreed == -1) return pass(w_config);
  if (agreed == 1) {
    if (!cfg().enabled) return pass(w_disabled);
    if (bytes < cfg().min_bytes && local_reason == w_taken) return pass(w_small);
  }
  why off = w_taken;
  comm_state* s = nullptr;
  const unsigned gen = states_gone.load(std::memory_order_acquire);
  if (comm != MPI_COMM_NULL && comm == last.comm && gen == last.gen) {
    s = last.s;  // an intracommunicator of 2 ranks or more, seen before
    off = s->off;
  } else {
    init_once();  // the report at MPI_Finalize, whatever happens to this call
    if (comm == MPI_COMM_NULL) return pass(w_invalid);
    int inter = 0;
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS) return pass(w_invalid);
    if (inter) return pass(w_intercomm);
    int size = 0;
    PMPI_Comm_size(comm, &size);
    if (size < 2) return pass(w_one_rank);
    s = state_of(comm, off);
    last = {comm, s, gen};
  }
  if (off != w_taken) return pass(off);
  if (local_reason != w_taken) return pass(local_reason);
  if (bytes < cfg().min_bytes) return pass(w_small);  // settings agreed per communicator
  if (!bind_state(*s, comm)) return pass(w_setup);
  if (collectives[c].in_rank_order && !s->identity()) return pass(w_order);
  if (cfg().measure) {
    // Every rank makes the same calls on comm in the same order, so every rank's
    // class state is the same at each call: they all take the same side.
    const std::size_t cls = md::size_class(bytes);
    if (one_shot_first(*s, c, bytes)) {
      ++s->of(c, cls).one_shot;
    } else if (c == c_iallreduce) {  // not timed (it overlaps): MPI_Allreduce's choice
      if (s->of(c_allreduce, cls).side != class_state::mdring) return pass(w_unmeasured);
    } else {
      class_state& k = s->of(c, cls);
      if (k.side == class_state::mpi) return pass(w_measured);
      if (k.side == class_state::measuring) {
        // Call 0: MPI's, call 1: mdring's, untimed (first-call costs); then
        // runs of two calls on one side, alternating sides, the second of each
        // run timed, until each side has trials_for(bytes). (Timing single
        // alternating calls charged each call with its peers' lag from the other
        // library's call before it: MPI's small allreduce measured 2 x slower
        // than in a loop of its own, and lost.)
        const unsigned i = k.calls++;
        const bool md_turn = i < 2 ? i == 1 : ((i - 2) / 2) % 2 == 1;
        d.owner = s, d.trial = &k, d.c = c, d.cls = cls, d.timed = i >= 2 && (i - 2) % 2 == 1;
        if (!md_turn) return pass(w_trial);  // (keeps the trial fields)
      }
    }
  }
  d.s = s;
  stats[c][w_taken].add(bytes);
  return d;
}

// ---- measuring -----------------------------------------------------------------
// Timed calls per side for a class: MDRING_PMPI_TRIALS, 4 x that below 64 KiB,
// where calls take microseconds and a few samples are the cold ones (the same
// on every rank: the bytes are).
std::size_t trials_for(std::size_t bytes) { return cfg().trials * (bytes < (std::size_t(64) << 10) ? 4 : 1); }
// The calls a class is measured in: 2 untimed, then runs of 2 (one timed).
std::size_t calls_to_measure(std::size_t cls) { return 2 + 4 * trials_for(std::size_t(1) << cls); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// MDRING_PMPI_TEST_BIAS (tests only): "mdring,mpi,..." by world rank; such a rank
// sees the other side's times 100 x slower, so that alone it would take the side
// named: the choice must still be one, on every rank. With it, every rank prints
// its choices.
const char* bias_of_this_rank() {
  static const std::string mine = [] {
    const std::string& b = cfg().test_bias;
    if (b.empty()) return std::string();
    int world = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &world);
    std::vector<std::string> by_rank(1);
    for (char ch : b) {
      if (ch == ',') by_rank.emplace_back();
      else by_rank.back().push_back(ch);
    }
    return std::size_t(world) < by_rank.size() ? by_rank[std::size_t(world)] : std::string("-");
  }();
  return mine.empty() ? nullptr : mine.c_str();
}

// After the last trial call of a class, on every rank (collective over comm).
void choose(comm_state& s, MPI_Comm comm, coll c, std::size_t cls, class_state& k) {
  inside g;
  const double mine_native = median(k.t[0]), mine_md = median(k.t[1]);
  double v[3] = {mine_native, mine_md, 0};
  for (int side = 0; side < 2; ++side) {
    const auto [lo, hi] = std::minmax_element(k.t[side].begin(), k.t[side].end());
    const double m = side ? mine_md : mine_native;
    if (m > 0) v[2] = std::max(v[2], (*hi - *lo) / m);
  }
  const char* bias = bias_of_this_rank();
  if (bias && std::string_view(bias) == "mdring") v[0] *= 100;
  if (bias && std::string_view(bias) == "mpi") v[1] *= 100;
  // mdring must beat MPI by more than the runs' spread (1 % to 5 %), and below
  // 64 KiB by 15 % at least: there the trials' short runs flattered mdring by up
  // to that much against long loops of one side (pmpi-overhead, 2 processes:
  // 0.88 x in the trials, 1.05 x in a loop, at 64 B), and a call of a microsecond
  // has no 15 % to give.
  const double small_margin = (std::size_t(1) << cls) < (std::size_t(64) << 10) ? 0.15 : 0.0;
  // A broadcast or reduce below 512 B stays with MPI: there a loop of Open MPI's, whose
  // root (leaves) return as soon as their part is done, costs 0.08 to 0.15 us a call;
  // mdring's one-shot call waits for every rank (1.2 to 2.4 x MPI's time in a loop, 2
  // processes), and even with MDRING_EAGER_ROOTED=1, its root returning at once, a loop
  // costs its leaves about 0.13 us (1.2 to 2.1 x: docs/perf/latency.md), which the
  // trials' alternating pairs, each after a barrier, do not show.
  const bool rooted_eager = (c == c_bcast || c == c_reduce) && (std::size_t(1) << cls) < 512;
  auto pick = [&](const double* x) {
    return !rooted_eager && md::pick_measured({x[0], x[1]}, x[2]) == 1 && x[1] < (1 - small_margin) * x[0];
  };
  const bool alone = pick(v);
  PMPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_DOUBLE, MPI_MAX, comm);
  const bool md_side = pick(v);
  k.side = md_side ? class_state::mdring : class_state::mpi;
  k.native_s = v[0], k.mdring_s = v[1];
  if (bias)
    std::fprintf(stderr, "mdring-pmpi: rank %d: %s class %zu: alone %s, chosen %s\n", s.rank, collectives[c].name, cls,
                 alone ? "mdring" : "mpi", md_side ? "mdring" : "mpi");
  const auto& path = cfg().wisdom;
  if (path.empty() || s.wisdom_key.empty()) return;
  md::wisdom w;
  w.key = s.wisdom_key;
  w.native[{collectives[c].wisdom, cls}] = {md_side, v[0], v[1], k.t[0].size()};
  try {
    int world = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &world);
    w.save(path, std::size_t(world));
  } catch (const std::exception& e) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) std::fprintf(stderr, "mdring-pmpi: MDRING_WISDOM: %s\n", e.what());
  }
}

// Times the call on the side decide() picked, while its class is measured.
class trial_timer {
public:
  trial_timer(const decision& d, MPI_Comm comm) : d_(d), comm_(comm) {
    if (d_.trial) t0_ = std::chrono::steady_clock::now();
  }
  ~trial_timer() {
    if (!d_.trial) return;
    class_state& k = *d_.trial;
    const int side = d_.s ? 1 : 0;
    if (d_.timed) {
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
      k.t[side].push_back(t);
      k.spent[side] += t;
    }
    if (k.calls == calls_to_measure(d_.cls)) choose(*d_.owner, comm_, d_.c, d_.cls, k);
  }
  trial_timer(const trial_timer&) = delete;
  trial_timer& operator=(const trial_timer&) = delete;

private:
  const decision& d_;
  MPI_Comm comm_;
  std::chrono::steady_clock::time_point t0_{};
};

// MDRING_REPORT: the choices of a communicator, by its rank 0.
std::string human_bytes(unsigned long long b);
void report_choices(const comm_state& s) {
  if (!cfg().report || !cfg().measure || s.rank != 0) return;
  for (int c = 0; c < n_coll; ++c)
    for (std::size_t cls = 0; cls < n_class; ++cls) {
      const auto& p = s.classes[c][cls];
      if (!p) continue;
      const class_state& k = *p;
      const std::string range = human_bytes(1ull << cls) + " to " + human_bytes((2ull << cls) - 1);
      if (k.one_shot)
        std::fprintf(stderr,
                     "mdring-pmpi: choice: %s %s: mdring (one-shot over node memory, %u calls taken unmeasured)\n",
                     collectives[c].name, range.c_str(), k.one_shot);
      if (k.side == class_state::measuring && k.one_shot && k.calls == 0) continue;
      if (k.side == class_state::measuring) {
        std::fprintf(stderr, "mdring-pmpi: choice: %s %s: not decided (%u of %zu calls measured)\n",
                     collectives[c].name, range.c_str(), k.calls, calls_to_measure(cls));
        continue;
      }
      const bool md_side = k.side == class_state::mdring;
      const double ratio = k.native_s > 0 ? k.mdring_s / k.native_s : 0;
      char cost[96] = "from MDRING_WISDOM";
      if (!k.from_wisdom) {
        // What measuring cost this rank: its timed calls on the side not taken,
        // beyond what they would have taken on the side taken.
        const int lost = md_side ? 0 : 1;
        const double extra =
            std::max(0.0, k.spent[lost] - double(k.t[lost].size()) * (md_side ? k.mdring_s : k.native_s));
        std::snprintf(cost, sizeof cost, "measured in %u calls, %zu timed per side, measuring cost %.1f us", k.calls,
                      k.t[0].size(), extra * 1e6);
      }
      // (No semicolons: tests split the report into lines as CMake lists.)
      std::fprintf(stderr, "mdring-pmpi: choice: %s %s: %s (MPI %.1f us, mdring %.1f us: %.2f x MPI's time, %s)\n",
                   collectives[c].name, range.c_str(), md_side ? "mdring" : "MPI", k.native_s * 1e6, k.mdring_s * 1e6,
                   ratio, cost);
    }
}

void remember_pass(const call_key& k, unsigned gen, const decision& d, std::size_t bytes) {
  if (d.s || !(d.reason == w_measured || d.reason == w_small || d.reason == w_disabled)) return;
  passed = {k, gen, d.reason, bytes};
}

// Why a reduction cannot be taken over, from its datatype and op alone.
why reduction_reason(const type_info& t, MPI_Op op) {
  if (t.k == kind::none || !extent_supported(t.extent)) return w_datatype;
  const opclass o = classify_op(op);
  if (o == opclass::user) {
    int commute = 0;
    if (PMPI_Op_commutative(op, &commute) != MPI_SUCCESS) return w_op_type;
    if (!commute) return w_noncommutative;
  }
  if (!defined_for(o, t.k)) return w_op_type;
  return w_taken;
}

// An mdring failure: say what, and hand it to the communicator's error handler.
int failed(comm_state& s, MPI_Comm comm, const char* name, const std::exception& e) {
  std::fprintf(stderr, "mdring-pmpi: %s (rank %d): %s\n", name, s.rank, e.what());
  s.off = w_failed;
  PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
  return MPI_ERR_OTHER;
}

// ---- MPI_Iallreduce: a generalized request completed by mdring's callback ------
// Owned twice: by MPI (extra_state, released by ireq_free) and by the completion
// callback. MPI may call ireq_free from inside PMPI_Grequest_complete (a request
// the program freed early), that is from inside the callback, before the call is
// done: the request then goes with the callback's copy, after it is done.
struct ireq {
  md::request r;
  MPI_Request greq = MPI_REQUEST_NULL;
  int rank = 0;
  std::string error;
};
using ireq_ptr = std::shared_ptr<ireq>;
int ireq_query(void* extra, MPI_Status* st) {
  const auto& q = *static_cast<ireq_ptr*>(extra);
  PMPI_Status_set_elements(st, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(st, 0);
  st->MPI_SOURCE = MPI_UNDEFINED;
  st->MPI_TAG = MPI_UNDEFINED;
  st->MPI_ERROR = q->error.empty() ? MPI_SUCCESS : MPI_ERR_OTHER;
  return st->MPI_ERROR;
}
int ireq_free(void* extra) {
  delete static_cast<ireq_ptr*>(extra);
  return MPI_SUCCESS;
}
int ireq_cancel(void*, int) { return MPI_SUCCESS; }  // a collective cannot be cancelled

// ---- the one path of every entry point ------------------------------------------
// What an entry point finds in its arguments: the bytes the call moves (counted in
// the report, compared with the threshold, its size class), why they alone keep it
// on MPI (w_taken: they do not), and what its mdring call needs of them again.
template <class Kept>
struct facts {
  std::size_t bytes = 0;
  why local = w_taken;
  Kept kept{};
};

// Every C entry point below (and through them the Fortran ones, fortran.cpp) is
// this path with its own arguments: native() calls PMPI_, facts_of() looks at the
// arguments, on_mdring(state, kept) runs the call on mdring.
//   1. Re-entered (an MPI call made by mdring, or by this library, on this
//      thread): MPI's.
//   2. The same call as this thread's last one passed for a reason that cannot
//      change (key; nullptr where the arguments do not fit one): MPI's, counted.
//   3. facts_of(), then decide() (counted), then the call on the side decided,
//      timed while its size class is measured (trial_timer, on either side).
//   4. On mdring, a failure is the call's (failed(): the communicator's error
//      handler, and MPI from then on) or, for MPI_Iallreduce, its request's.
template <coll C, class Native, class FactsOf, class OnMdring>
int dispatch(MPI_Comm comm, const call_key* key, Native&& native, FactsOf&& facts_of, OnMdring&& on_mdring) {
  if (reentered()) return native();
  if (key && pass_again(*key)) return native();
  const unsigned gen = states_gone.load(std::memory_order_acquire);
  const auto f = facts_of();
  const decision d = decide(C, comm, f.bytes, f.local);
  trial_timer timer(d, comm);
  if (key) remember_pass(*key, gen, d, f.bytes);
  if (!d.s) return native();
  inside g;
  if constexpr (collectives[C].nonblocking) {
    on_mdring(*d.s, f.kept);  // (start_iall_reduce: its failures are the request's)
  } else {
    try {
      on_mdring(*d.s, f.kept);
    } catch (const std::exception& e) {
      return failed(*d.s, comm, collectives[C].name, e);
    }
  }
  return MPI_SUCCESS;
}

// ---- what some entry points run on mdring ----------------------------------------
// MPI_Iallreduce: a generalized request, completed by mdring's callback.
void start_iall_reduce(comm_state& s, const type_info& t, const void* sendbuf, void* recvbuf, int count,
                       MPI_Datatype datatype, MPI_Op op, MPI_Request* request) {
  auto q = std::make_shared<ireq>();
  q->rank = s.rank;
  // A failure, at the call or later, is the request's: MPI_Wait and friends return
  // it (MPI_ERR_OTHER, through MPI's error handler), and the communicator stays
  // with mdring, whose next calls fail at once until a blocking call fails and
  // moves it to MPI (see failed()). Whether a call fails here or in flight depends
  // on when this rank heard of the failure; moving to MPI on it would send the
  // ranks' next calls to different libraries, and hang.
  PMPI_Grequest_start(ireq_query, ireq_free, ireq_cancel, new ireq_ptr(q), &q->greq);
  *request = q->greq;
  auto done = [q](std::exception_ptr e) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        q->error = x.what();
      } catch (...) {
        q->error = "unknown failure";
      }
      std::fprintf(stderr, "mdring-pmpi: MPI_Iallreduce (rank %d): %s\n", q->rank, q->error.c_str());
    }
    PMPI_Grequest_complete(q->greq);
  };
  try {
    with_reduction(t, datatype, op, [&](auto tag, auto o) {
      using T = decltype(tag);
      T* out = static_cast<T*>(recvbuf);
      q->r = sendbuf == MPI_IN_PLACE
                 ? md::iall_reduce(*s.comm, out, std::size_t(count), o)
                 : md::iall_reduce(*s.comm, static_cast<const T*>(sendbuf), out, std::size_t(count), o);
    });
  } catch (...) {
    done(std::current_exception());
    return;
  }
  // Completed by whichever thread finishes the call (the progress agent, usually).
  q->r.on_complete(std::move(done));
}

// MPI_Reduce_scatter_block, and MPI_Reduce_scatter with recvcounts all equal:
// `rc` elements per rank.
struct blocks {
  type_info t;
  int rc = 0;
};
facts<blocks> reduce_scatter_facts(MPI_Comm comm, int rc, MPI_Datatype datatype, MPI_Op op, why local) {
  const type_info t = classify(datatype);
  int size = 0;
  if (comm != MPI_COMM_NULL) PMPI_Comm_size(comm, &size);
  if (local == w_taken) local = rc < 0 ? w_invalid : reduction_reason(t, op);
  return {std::size_t(std::max(rc, 0)) * std::size_t(std::max(size, 0)) * t.size, local, {t, rc}};
}
// MPI_IN_PLACE: the input is recvbuf (size x rc elements) and the result goes to its start.
void reduce_scatter_on_mdring(comm_state& s, const void* sendbuf, void* recvbuf, const blocks& b, MPI_Datatype datatype,
                              MPI_Op op) {
  with_reduction(b.t, datatype, op, [&](auto tag, auto o) {
    using T = decltype(tag);
    T* out = static_cast<T*>(recvbuf);
    const std::size_t n = std::size_t(b.rc);
    if (sendbuf == MPI_IN_PLACE) {
      // mdring's in-place form puts rank r's block where it was, at r * rc; MPI's
      // at the start, leaving every element past it as it was (native MPI does):
      // rank r's own input block is kept aside and put back.
      const std::size_t r = std::size_t(s.rank);
      T* mine = out + r * n;
      std::vector<T> kept;
      if (r != 0) kept.assign(mine, mine + n);
      md::reduce_scatter(*s.comm, static_cast<const T*>(out), mine, n, o);
      if (r != 0) {
        std::memmove(out, mine, n * sizeof(T));
        std::memcpy(mine, kept.data(), n * sizeof(T));
      }
    } else {
      md::reduce_scatter(*s.comm, static_cast<const T*>(sendbuf), out, n, o);
    }
  });
}

}  // namespace

// ============================================================================
// The C entry points.
// ============================================================================

MDRING_PMPI_API int MPI_Init(int* argc, char*** argv) {
  int provided = 0;
  const int rc =
      cfg().raise_thread ? PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) : PMPI_Init(argc, argv);
  if (rc == MPI_SUCCESS) after_init();
  return rc;
}

MDRING_PMPI_API int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  const int rc = PMPI_Init_thread(argc, argv, cfg().raise_thread ? MPI_THREAD_MULTIPLE : required, provided);
  if (rc == MPI_SUCCESS) after_init();
  return rc;
}

// The collectives: each dispatch() (above) with its PMPI_ call, its facts and its
// mdring call.

MDRING_PMPI_API int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                  MPI_Comm comm) {
  const call_key key{c_allreduce, comm, datatype, op, count, 0};
  return dispatch<c_allreduce>(
      comm, &key, [&] { return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm); },
      [&] {
        const type_info t = classify(datatype);
        const why local = count < 0 ? w_invalid : reduction_reason(t, op);
        return facts<type_info>{std::size_t(std::max(count, 0)) * t.size, local, t};
      },
      [&](comm_state& s, const type_info& t) {
        with_reduction(t, datatype, op, [&](auto tag, auto o) {
          using T = decltype(tag);
          T* out = static_cast<T*>(recvbuf);
          if (sendbuf == MPI_IN_PLACE) md::all_reduce(*s.comm, out, std::size_t(count), o);
          else md::all_reduce(*s.comm, static_cast<const T*>(sendbuf), out, std::size_t(count), o);
        });
      });
}

// (No key: a call passed to MPI is decided afresh each time.)
MDRING_PMPI_API int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                   MPI_Comm comm, MPI_Request* request) {
  return dispatch<c_iallreduce>(
      comm, nullptr, [&] { return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request); },
      [&] {
        const type_info t = classify(datatype);
        why local = count < 0 ? w_invalid : reduction_reason(t, op);
        if (local == w_taken && mpi_usable() && !md::mpi::transport::thread_multiple()) local = w_thread;
        return facts<type_info>{std::size_t(std::max(count, 0)) * t.size, local, t};
      },
      [&](comm_state& s, const type_info& t) {
        start_iall_reduce(s, t, sendbuf, recvbuf, count, datatype, op, request);
      });
}

MDRING_PMPI_API int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                               int root, MPI_Comm comm) {
  const call_key key{c_reduce, comm, datatype, op, count, root};
  return dispatch<c_reduce>(
      comm, &key, [&] { return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm); },
      [&] {
        const type_info t = classify(datatype);
        int size = 0;
        if (comm != MPI_COMM_NULL) PMPI_Comm_size(comm, &size);
        const why local = count < 0 || root < 0 || root >= size ? w_invalid : reduction_reason(t, op);
        return facts<type_info>{std::size_t(std::max(count, 0)) * t.size, local, t};
      },
      [&](comm_state& s, const type_info& t) {
        const std::size_t md_root = std::size_t(s.to_md[std::size_t(root)]);
        with_reduction(t, datatype, op, [&](auto tag, auto o) {
          using T = decltype(tag);
          T* out = static_cast<T*>(recvbuf);
          const T* in = sendbuf == MPI_IN_PLACE ? out : static_cast<const T*>(sendbuf);
          md::reduce(*s.comm, in, s.rank == root ? out : nullptr, std::size_t(count), md_root, o);
        });
      });
}

MDRING_PMPI_API int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype datatype,
                                             MPI_Op op, MPI_Comm comm) {
  const call_key key{c_reduce_scatter_block, comm, datatype, op, recvcount, 0};
  return dispatch<c_reduce_scatter_block>(
      comm, &key, [&] { return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm); },
      [&] { return reduce_scatter_facts(comm, recvcount, datatype, op, w_taken); },
      [&](comm_state& s, const blocks& b) { reduce_scatter_on_mdring(s, sendbuf, recvbuf, b, datatype, op); });
}

// (No key: recvcounts is an array; a call passed to MPI is decided afresh each time.)
MDRING_PMPI_API int MPI_Reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[],
                                       MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  return dispatch<c_reduce_scatter>(
      comm, nullptr, [&] { return PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm); },
      [&] {
        int size = 0, inter = 0;
        if (comm != MPI_COMM_NULL && PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && !inter)
          PMPI_Comm_size(comm, &size);
        // recvcounts is the same on every rank (MPI requires it), so this is decided alike.
        why local = w_taken;
        for (int i = 1; i < size; ++i)
          if (recvcounts[i] != recvcounts[0]) local = w_counts;
        return reduce_scatter_facts(comm, size > 0 ? recvcounts[0] : 0, datatype, op, local);
      },
      [&](comm_state& s, const blocks& b) { reduce_scatter_on_mdring(s, sendbuf, recvbuf, b, datatype, op); });
}

MDRING_PMPI_API int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  // (The decision reads the receive side only; sendcount is in the key so that
  // an invalid pair is looked at again.)
  const call_key key{c_allgather, comm, recvtype, MPI_OP_NULL, recvcount, sendcount};
  return dispatch<c_allgather>(
      comm, &key, [&] { return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm); },
      [&] {
        int size = 0;
        if (comm != MPI_COMM_NULL) PMPI_Comm_size(comm, &size);
        // Decided from the receive side: the bytes of each rank's block, when recvtype
        // is contiguous. (Every rank is assumed to pass a recvtype of the same layout,
        // as it does when all pass the same datatype.) The send side is not looked at:
        // it may be any datatype of the same signature, and is copied into place below.
        const std::size_t rb = contiguous_bytes(recvtype);
        const std::size_t block = rb * std::size_t(std::max(recvcount, 0));
        const why local = recvcount < 0 ? w_invalid : rb == 0 ? w_datatype : w_taken;
        return facts<std::size_t>{block * std::size_t(std::max(size, 0)), local, block};
      },
      [&](comm_state& s, std::size_t block) {
        auto* out = static_cast<unsigned char*>(recvbuf);
        unsigned char* mine = out + std::size_t(s.rank) * block;
        if (sendbuf != MPI_IN_PLACE) {
          const std::size_t sb = contiguous_bytes(sendtype);
          if (sb != 0 && sb * std::size_t(std::max(sendcount, 0)) == block) {
            if (block) std::memcpy(mine, sendbuf, block);
          } else {
            // MPI's own type matching (and its error for a mismatch) puts this rank's
            // block in place.
            const int rc = PMPI_Sendrecv(sendbuf, sendcount, sendtype, 0, 0, mine, recvcount, recvtype, 0, 0,
                                         MPI_COMM_SELF, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) throw std::runtime_error("the send datatype does not match the receive datatype");
          }
        }
        md::all_gather(*s.comm, static_cast<const unsigned char*>(mine), out, block);
      });
}

MDRING_PMPI_API int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  const call_key key{c_bcast, comm, datatype, MPI_OP_NULL, count, root};
  return dispatch<c_bcast>(
      comm, &key, [&] { return PMPI_Bcast(buffer, count, datatype, root, comm); },
      [&] {
        int size = 0;
        if (comm != MPI_COMM_NULL) PMPI_Comm_size(comm, &size);
        const std::size_t eb = contiguous_bytes(datatype);
        const why local = count < 0 || root < 0 || root >= size ? w_invalid : eb == 0 ? w_datatype : w_taken;
        const std::size_t bytes = eb * std::size_t(std::max(count, 0));
        // A datatype that is not contiguous is passed, and counted at its size.
        int tsize = 0;
        if (eb == 0 && datatype != MPI_DATATYPE_NULL) PMPI_Type_size(datatype, &tsize);
        const std::size_t counted = eb ? bytes : std::size_t(std::max(tsize, 0)) * std::size_t(std::max(count, 0));
        return facts<std::size_t>{counted, local, bytes};
      },
      [&](comm_state& s, std::size_t bytes) {
        md::broadcast(*s.comm, static_cast<unsigned char*>(buffer), bytes, std::size_t(s.to_md[std::size_t(root)]));
      });
}

// ---- the report --------------------------------------------------------------
namespace {
std::string human_bytes(unsigned long long b) {
  char buf[32];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", double(b) / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / double(1ull << 20));
  else if (b >= (1ull << 10)) std::snprintf(buf, sizeof buf, "%.1f KiB", double(b) / double(1ull << 10));
  else std::snprintf(buf, sizeof buf, "%llu B", b);
  return buf;
}

void print_report(std::size_t live) {
  int rank = 0, level = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return;
  PMPI_Query_thread(&level);
  char how[96];
  if (cfg().measure) std::snprintf(how, sizeof how, "measured choice (%zu timed calls per side)", cfg().trials);
  else std::snprintf(how, sizeof how, "threshold %zu bytes", cfg().min_bytes);
  std::fprintf(stderr, "mdring-pmpi report (rank 0): %s, thread level %s%s\n", how,
               level == MPI_THREAD_MULTIPLE ? "multiple" : "below multiple",
               cfg().reproducible ? ", reproducible" : "");
  std::fprintf(stderr, "mdring-pmpi: communicators: %d seen; live communicators at finalize: %zu\n", seen.load(), live);
  for (int c = 0; c < n_coll; ++c) {
    unsigned long long total = 0;
    for (int w = 0; w < n_why; ++w) total += stats[c][w].calls.load();
    if (!total) continue;
    const auto& t = stats[c][w_taken];
    std::fprintf(stderr, "mdring-pmpi: %s taken=%llu bytes=%llu (%s)\n", collectives[c].name, t.calls.load(),
                 t.bytes.load(), human_bytes(t.bytes.load()).c_str());
    for (int w = 1; w < n_why; ++w) {
      const auto& p = stats[c][w];
      if (p.calls.load())
        std::fprintf(stderr, "mdring-pmpi: %s passed=%llu bytes=%llu reason=\"%s\"\n", collectives[c].name,
                     p.calls.load(), p.bytes.load(), why_name[w]);
    }
  }
}
}  // namespace
