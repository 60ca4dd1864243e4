// mdring/tuning.hpp: the knobs of the cost model and the executors, one plain
// aggregate per communicator (options::tune, options.hpp).
//
//   mdring::options o;
//   o.tune.segment_bytes = 4 << 20;      // pipeline segments of 4 MiB
//   o.tune.direct_max_extent = 4;        // direct on fully connected links up to 4 ranks
//
// Every field has the default the library was measured with (docs/PERFORMANCE.md);
// every field that changes a schedule goes into the bind fingerprint
// (collective/fingerprint.hpp), so ranks that set it differently fail at bind.
#pragma once

#include "config.hpp"
#include "topology/link.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>

MDRING_NAMESPACE_BEGIN

/// Tuning knobs: a plain aggregate, chosen once per communicator.
struct tuning {
  /// automatic picks direct on fully connected links up to this many ranks.
  std::size_t direct_max_extent = 8;
  /// Seconds per byte the host spends folding one input into another (gamma of the
  /// alpha-beta-gamma model); about 1 / (memory bandwidth / 3).
  double host_gamma = 1.0 / 4e9;
  /// The same on a GPU (fused kernels at HBM speed), for links in device memory.
  double device_gamma = 1.0 / 1e12;

  /// Shared access: a stage whose range fits in this many bytes goes through each
  /// rank's staging buffers (copy in, one synchronization, read the peers') rather
  /// than reading the peers' buffers in place or by cross-memory attach.
  std::size_t shared_staging_bytes = std::size_t(16) << 10;
  /// The one-shot path (executor/host/one_shot.hpp) for calls whose ranks all share
  /// a node, every dimension's algorithm automatic: a call that publishes at most
  /// this many bytes per rank (all_reduce, reduce, broadcast, all_gather: the count;
  /// reduce_scatter: the whole sendbuf) copies them into its staging buffer in node
  /// memory and every rank that needs them reads them there: one synchronization, no
  /// program, no message. Capped by a data buffer of the one-shot layout (the two
  /// staging buffers of shared_staging_bytes, less a ring of 16 slots of 512 B,
  /// halved: 12288 B by default; executor/host/one_shot.hpp). Measured on 2 and 4
  /// processes of a 2-core EPYC against the programs: 0.5 to 0.9 x their time up to
  /// 8 KiB, about 1.05 x at 16 KiB for all_reduce and all_gather. 0: never.
  std::size_t one_shot_max_bytes = std::size_t(8) << 10;
  /// A broadcast or reduce larger than that, up to this many bytes, also runs over
  /// the one-shot path, streamed: in steps of the one-shot cap (one_shot_max_bytes,
  /// or a data buffer if smaller), the giving ranks writing step k + 1 into their
  /// other data buffer while the others read step k. No program and no message;
  /// the call's stages are the steps. At once where the node's ranks are close
  /// (one_shot_stream_max_trip_ns, below), elsewhere as timing the first calls
  /// decides (one_shot_stream_trials); bind sets this to 0 where it does not stream
  /// at once, which get_options() then shows. Measured on 2 processes against Open MPI's
  /// shared-memory path and mdring's programs in one run (docs/perf/latency.md): on a
  /// 2-core Xeon VM broadcast 32 to 64 KiB 0.2 to 0.3 x Open MPI's time (the
  /// programs: 1.1 to 1.2 x), reduce 0.5 to 0.6 x (the programs: 1.5 x); on a 2-core
  /// AMD EPYC VM 0.66 to 0.89 x (the programs: 1.09 to 1.41 x) where its two cores
  /// were 0.05 us apart (a cache line's one-way trip), but 2.3 to 4.9 x (the
  /// programs: 1.04 to 1.8 x) where they were 0.2 us apart. 0: never.
  std::size_t one_shot_stream_max_bytes = std::size_t(64) << 10;
  /// Streamed calls (above) run at once where, at bind, rank 0 measured a cache
  /// line's one-way trip to every other rank of the node of at most this many
  /// nanoseconds (transport/node_distance.hpp: the least of 8 batches of 32 round
  /// trips, about 0.1 ms per peer), and never where the node's ranks outnumber its
  /// cores (there a step waits for a descheduled peer: 4 processes on 2 cores took
  /// 1.2 to 2.2 x Open MPI's time streamed against 1.0 to 1.3 x through the
  /// programs). The rule sits between the two distances measured above. Anywhere
  /// else (farther; ranks of one process, the threads transport, which measure
  /// nothing since their bind does not wait for each other) the calls time both
  /// ways (one_shot_stream_trials). SIZE_MAX: stream without measuring,
  /// oversubscribed too. MDRING_STREAM=1 sets options{}' default to SIZE_MAX,
  /// MDRING_STREAM=0 sets one_shot_stream_max_bytes to 0 (options.hpp).
  std::size_t one_shot_stream_max_trip_ns = 100;
  /// Where bind measured the ranks farther apart than the limit above, or ranks of
  /// one process measured nothing (and they do not outnumber the cores), the
  /// distance does not decide: the communicator times
  /// both ways on the first calls of each collective and size class (bytes rounded
  /// up to a power of two), this many calls each, alternating, then every rank
  /// takes the way whose slowest rank was faster (plan/stream_choice.hpp; the call
  /// after the trials first exchanges each rank's times over node memory). On 2
  /// processes of a 2-core AMD EPYC VM whose cores were 0.23 us apart, where the
  /// distance chose the programs (1.15 to 1.47 x Open MPI's time), this streamed 32
  /// and 64 KiB broadcasts and reduces (0.58 to 1.07 x). 0: the distance alone
  /// decides (no streaming there).
  std::size_t one_shot_stream_trials = 4;
  ///@{
  /// Shared access between processes, buffers the peers cannot map (not from
  /// node_alloc: the heap, a PyTorch tensor, an MPI program's malloc): seconds per
  /// byte that peers take to read or write them by cross-memory attach
  /// (process_vm_readv / writev), and that a rank takes to copy them itself. Where
  /// the model says so (plan/cost.hpp streaming_pays), all_reduce streams them
  /// through node memory instead: such a rank copies the blocks of sendbuf its peers
  /// fold into node memory, which they map, and its results land there too (one
  /// more synchronization per segment). Not below stream_min_bytes: a smaller call's
  /// buffers sit in the cache, where cross-memory attach is about as fast as the
  /// copy and the synchronization. Measured on a 2-core EPYC (docs/PERFORMANCE.md):
  /// cross-memory attach about 4.5 GB/s from memory, a copy about 7 GB/s. It was 1 MiB,
  /// where the two took equal times on 2026-11-27's kernel; on 2026-12-08's the same
  /// VM's cross-memory attach was slower (the commit of 11-27 measured the same): at 256
  /// and 512 KiB, 2 processes, streaming took 0.82 to 1.01 x Open MPI's time where
  /// attaching took 1.07 to 1.35 x (the variants' order rotated; the VM's speed moved
  /// by 2 x within minutes), 4 processes 0.46 to 0.54 x against 0.71 to 0.85 x; at
  /// 128 KiB streaming lost on 2 (1.0 to 1.2 x against 0.6 to 0.7 x). cma_gamma 0:
  /// never stream.
  double cma_gamma = 1.0 / 4.5e9;
  double copy_gamma = 1.0 / 7e9;
  std::size_t stream_min_bytes = std::size_t(256) << 10;
  ///@}
  /// A broadcast over one such dimension of three ranks or more streams a root's
  /// unmapped buffer from this size (the root copies it into node memory, the others
  /// copy it out): two copies one after the other beat one by cross-memory attach
  /// only where the buffer has left the cache. Measured on 2 processes of a 2-core
  /// EPYC (32 MiB L3), through the interposer: from 16 MiB 0.8 to 0.9 x the time of
  /// cross-memory attach, below it up to 1.7 x. Two ranks never stream: the root
  /// writes half while its peer reads half, faster at every size.
  std::size_t stream_broadcast_min_bytes = std::size_t(16) << 20;
  /// An all_gather or reduce_scatter over one such dimension (bytes: the whole
  /// recvbuf, or sendbuf) streams from this size: a rank whose buffer its peers
  /// cannot map copies its block (all_gather) or the blocks they fold
  /// (reduce_scatter) into node memory, from which they copy or fold; a copy is
  /// cheaper than cross-memory attach, which costs about 5 us per call on top
  /// (same machine, all_gather: 0.4 to 0.6 x the time of cross-memory attach from
  /// 32 KiB to 1 MiB, about equal from 2 to 8 MiB).
  std::size_t stream_blocks_min_bytes = std::size_t(32) << 10;
  /// A reduce whose last dimension of more than one rank is shared by two ranks
  /// folds it at the root alone, reading its peer's range, up to this many bytes
  /// (the call's): one synchronization, one rank folding. Larger (and not staged),
  /// the ranks fold a block each, in parallel, and write it into the root's buffer
  /// (also one synchronization). Measured through the interposer on 2 processes of
  /// a 2-core EPYC, heap buffers, the root alone against the split: 0.9 x at
  /// 64 KiB, equal at 128 KiB, 1.25 to 1.5 x from 256 KiB to 2 MiB. 0: never.
  std::size_t shared_reduce_max_bytes = std::size_t(128) << 10;
  /// Shared access: a rank whose results of one stage (its block, times the ranks
  /// it writes it to) reach this many bytes writes them with non-temporal stores,
  /// which skip reading the destination lines and leave the cache alone: about 2 x
  /// faster for large buffers, slower when the caller rereads a small result from
  /// cache. SIZE_MAX turns them off.
  std::size_t nontemporal_bytes = std::size_t(1) << 20;
  /// Adjacent dimensions with the same fully connected link, all `automatic`, are
  /// run as one direct stage over their product when it has at most
  /// direct_max_extent ranks (one pass over the data instead of one per dimension).
  bool merge_same_link = true;
  /// A dimension of at least this many ranks on a link that is not fully connected
  /// (a switched network), algorithm automatic, runs as two, a x b (a the largest
  /// divisor of p up to sqrt(p)): 2 (a + b - 2) latencies per all_reduce instead of
  /// 2 (p - 1), the same bytes through each port (plan/merge.hpp). 0: never.
  std::size_t split_ring_extent = 16;
  /// automatic runs halving-doubling instead of a ring (not fully connected links)
  /// on a call's stage range of at most this many bytes, where the cost model
  /// predicts it faster: it saves 2 (p - 1 - log2 p) latencies, and on a power of
  /// two it moves the same bytes, so it wins at every size the cap lets it. Its
  /// receive buffer is the largest half it receives (half the stage's range per
  /// segment in flight; the whole range when p is not a power of two) rather than
  /// a block, which is what the cap bounds (SIZE_MAX: no bound). On a link that is
  /// a ring of point-to-point wires its distant partners share wires: 0 (never) there.
  std::size_t halving_doubling_max_bytes = std::size_t(64) << 20;
  /// automatic runs all_reduce's last dimensions by recursive doubling (whole-range
  /// exchanges) on calls of at most this many bytes where the cost model predicts it
  /// faster; broadcast and reduce run binomial trees (the whole buffer along each
  /// dimension, log2 p steps) instead of scatter/reduce-scatter and all-gather/gather
  /// on calls up to this size where the model says. 0: never.
  std::size_t recursive_doubling_max_bytes = std::size_t(64) << 10;

  /// Pipelining of all_reduce across dimensions: the buffer is cut into segments
  /// that move through the stages one behind the other, so that a segment's
  /// inter-node stage overlaps the next one's intra-node stage. 0 (the default):
  /// the cost model picks the segment count (plan/pipeline.hpp); otherwise
  /// segments of about this many bytes. One segment turns pipelining off.
  std::size_t segment_bytes = 0;
  /// The cost model never cuts segments smaller than this.
  std::size_t min_segment_bytes = std::size_t(256) << 10;
  ///@{
  /// The most segments the cost model cuts, and the most in flight at once (1 to 8).
  std::size_t max_segments = 64;
  std::size_t pipeline_depth = 4;
  ///@}

  /// GPU path, MPI staged through pinned host memory: bytes per chunk; each message
  /// has two chunks in flight (one being copied, one on the wire).
  std::size_t staging_chunk_bytes = std::size_t(1) << 20;
  /// GPU path, ipc transport: a stage whose range is at most this many bytes goes
  /// through each rank's staging buffer (every rank folds the whole range from the
  /// peers' staging: one-shot, no host exchange); larger ones read the peers'
  /// buffers in place, after the host has published them (about ipc_publish_seconds).
  /// The cost model picks the threshold (transport/device_select.hpp
  /// ipc_staging_bytes) up to this cap, which is also each staging buffer's size.
  std::size_t ipc_staging_bytes = std::size_t(1) << 20;
  /// The cost model's seconds for the host to publish a step's buffers (see ipc_staging_bytes).
  double ipc_publish_seconds = 20e-6;

  /// Host_gamma or device_gamma, for links in memory space s.
  double gamma(memory_space s) const noexcept { return s == memory_space::device ? device_gamma : host_gamma; }
};

MDRING_NAMESPACE_END
