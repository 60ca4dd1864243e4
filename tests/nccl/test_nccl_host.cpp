// test_nccl_host.cpp: the parts of libmdring-nccl.so (nccl/) that need no GPU:
// error texts, argument mapping and checks, PreMulSum ops, the unique id,
// ncclCommSplit's arithmetic and group matching. Built where nccl.h is found.
#include <doctest/doctest.h>

#include "../../nccl/arguments.hpp"
#include "../../nccl/errors.hpp"
#include "../../nccl/group.hpp"
#include "../../nccl/split.hpp"
#include "../../nccl/unique_id.hpp"

#include <mdring/error.hpp>
#include <mdring/rendezvous/tcp_store.hpp>

#include <cstring>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace mdring_nccl;

TEST_CASE("result texts: one per ncclResult_t; a failure leaves 'function: what' for ncclGetLastError") {
  CHECK(std::string(result_text(ncclSuccess)) == "no error");
  CHECK(std::string(result_text(ncclInvalidArgument)) == "invalid argument (ncclGetLastError() names it)");
  CHECK(std::string(result_text(ncclRemoteError)) == "remote process exited or there was a network error");
  CHECK(std::string(result_text(ncclResult_t(15))) == "unknown result code");
  CHECK(fail(ncclInvalidUsage, "ncclFoo", "bar") == ncclInvalidUsage);
  CHECK(std::string(last_error()) == "ncclFoo: bar");
  CHECK(unsupported("ncclCommWindowRegister") == ncclInvalidUsage);
  CHECK(std::string(last_error()) == "ncclCommWindowRegister: not supported by mdring's NCCL library");
}

TEST_CASE("datatypes: sizes and mdring's types; fp8 and unknown values refused by name") {
  type_info t{};
  CHECK(describe_type("f", ncclInt8, t) == ncclSuccess);
  CHECK((t.kind == element::i8 && t.bytes == 1));
  CHECK(describe_type("f", ncclUint64, t) == ncclSuccess);
  CHECK((t.kind == element::u64 && t.bytes == 8));
  CHECK(describe_type("f", ncclHalf, t) == ncclSuccess);
  CHECK((t.kind == element::f16 && t.bytes == 2));
  CHECK(describe_type("f", ncclBfloat16, t) == ncclSuccess);
  CHECK((t.kind == element::bf16 && t.bytes == 2));
  CHECK(describe_type("f", ncclDouble, t) == ncclSuccess);
  CHECK((t.kind == element::f64 && t.bytes == 8));
  if (int(ncclNumTypes) > 10) {
    CHECK(describe_type("ncclAllReduce", ncclDataType_t(10), t) == ncclInvalidArgument);
    CHECK(std::string(last_error()) ==
          "ncclAllReduce: datatype ncclFloat8e4m3: fp8 is not supported by mdring (it "
          "has no fp8 arithmetic); use ncclBfloat16 or ncclFloat16");
  }
  // (A C caller may pass any int; in C++ the enum holds 0 to 15.)
  CHECK(describe_type("ncclBroadcast", ncclDataType_t(15), t) == ncclInvalidArgument);
  CHECK(std::string(last_error()).starts_with("ncclBroadcast: datatype 15 is not an ncclDataType_t of nccl.h "));
}

TEST_CASE("ops: the built-in five; PreMulSum ops numbered from ncclNumOps, checked against their datatype") {
  premul_table table;
  op_info o{};
  CHECK(describe_op("f", ncclAvg, ncclFloat, table, o) == ncclSuccess);
  CHECK(o.kind == op_kind::avg);
  CHECK(describe_op("f", ncclMin, ncclInt32, table, o) == ncclSuccess);
  CHECK(o.kind == op_kind::min);

  ncclRedOp_t a{}, b{}, c{};
  const float half_ = 0.5f;
  CHECK(table.create("ncclRedOpCreatePreMulSum", &a, &half_, ncclFloat, ncclScalarHostImmediate) == ncclSuccess);
  CHECK(int(a) == int(ncclNumOps));
  const double* device_scalar = reinterpret_cast<const double*>(0x1000);
  CHECK(table.create("ncclRedOpCreatePreMulSum", &b, device_scalar, ncclDouble, ncclScalarDevice) == ncclSuccess);
  CHECK(int(b) == int(ncclNumOps) + 1);
  CHECK(table.alive() == 2);

  CHECK(describe_op("ncclAllReduce", a, ncclFloat, table, o) == ncclSuccess);
  REQUIRE(o.kind == op_kind::premul_sum);
  float got = 0;
  std::memcpy(&got, o.premul.value, sizeof got);
  CHECK(got == 0.5f);  // copied when created: a later change of half_ does not count
  CHECK(o.premul.residence == ncclScalarHostImmediate);
  CHECK(describe_op("ncclAllReduce", b, ncclDouble, table, o) == ncclSuccess);
  CHECK(o.premul.device == device_scalar);

  CHECK(describe_op("ncclAllReduce", a, ncclDouble, table, o) == ncclInvalidArgument);
  CHECK(std::string(last_error()) ==
        "ncclAllReduce: op 5 was made by ncclRedOpCreatePreMulSum for ncclFloat32, used "
        "with ncclFloat64");
  CHECK(describe_op("ncclReduce", ncclRedOp_t(9), ncclFloat, table, o) == ncclInvalidArgument);
  CHECK(std::string(last_error()) ==
        "ncclReduce: op 9 is not a live PreMulSum op of this communicator (never "
        "created here, or destroyed)");

  // A call keeps its op: destroyed (and its number given to another op) before the
  // call is issued, as a group allows, the call still multiplies by 0.5.
  op_info kept{};
  REQUIRE(describe_op("ncclReduceScatter", a, ncclFloat, table, kept) == ncclSuccess);

  // Destroyed: refused, and its number given to the next op.
  CHECK(table.destroy("ncclRedOpDestroy", a) == ncclSuccess);
  CHECK(describe_op("ncclAllReduce", a, ncclFloat, table, o) == ncclInvalidArgument);
  CHECK(table.destroy("ncclRedOpDestroy", a) == ncclInvalidArgument);
  CHECK(table.destroy("ncclRedOpDestroy", ncclSum) == ncclInvalidArgument);
  CHECK(std::string(last_error()) == "ncclRedOpDestroy: op 0 is a built-in op, not one of ncclRedOpCreatePreMulSum's");
  const int three = 3;
  CHECK(table.create("ncclRedOpCreatePreMulSum", &c, &three, ncclInt32, ncclScalarHostImmediate) == ncclSuccess);
  CHECK(int(c) == int(ncclNumOps));
  CHECK(table.alive() == 2);
  for (int i = 0; i < 64; ++i) {  // more ops: the table grows (moves); the kept copy does not care
    ncclRedOp_t extra{};
    REQUIRE(table.create("ncclRedOpCreatePreMulSum", &extra, &three, ncclInt32, ncclScalarHostImmediate) ==
            ncclSuccess);
  }
  float kept_scalar = 0;
  std::memcpy(&kept_scalar, kept.premul.value, sizeof kept_scalar);
  CHECK(kept_scalar == 0.5f);
  CHECK(kept.premul.type == ncclFloat);

  CHECK(table.create("ncclRedOpCreatePreMulSum", &c, nullptr, ncclInt32, ncclScalarHostImmediate) ==
        ncclInvalidArgument);
  CHECK(std::string(last_error()) == "ncclRedOpCreatePreMulSum: scalar is NULL (expected a host or device pointer)");
}

TEST_CASE("roots, peers, counts and buffers: refused with the argument named and what was expected") {
  CHECK(check_rank("ncclBroadcast", "root", 3, 4) == ncclSuccess);
  CHECK(check_rank("ncclBroadcast", "root", 4, 4) == ncclInvalidArgument);
  CHECK(std::string(last_error()) == "ncclBroadcast: root 4 is not a rank of this communicator (0 to 3)");
  CHECK(check_rank("ncclSend", "peer", -1, 2) == ncclInvalidArgument);
  CHECK(std::string(last_error()) == "ncclSend: peer -1 is not a rank of this communicator (0 to 1)");
  CHECK(check_buffer("ncclAllReduce", "sendbuff", nullptr, 0) == ncclSuccess);
  CHECK(check_buffer("ncclAllReduce", "recvbuff", nullptr, 7) == ncclInvalidArgument);
  CHECK(std::string(last_error()) == "ncclAllReduce: recvbuff is NULL with count 7 (expected a device buffer)");
  CHECK(check_count("ncclAllGather", "sendcount", std::size_t(1) << 40, 4, 8) == ncclSuccess);
  CHECK(check_count("ncclAllGather", "sendcount", std::size_t(1) << 60, 4, 8) == ncclInvalidArgument);
  CHECK(std::string(last_error()).starts_with("ncclAllGather: sendcount 1152921504606846976 is too large"));
}

TEST_CASE("the unique id: where the store is and its secret, in 128 bytes; a foreign or damaged id refused") {
  rendezvous_point p{"10.1.2.3", 29500, "0123456789abcdef0123456789ABCDEF"};
  ncclUniqueId id{};
  REQUIRE(encode_id("ncclGetUniqueId", p, id) == ncclSuccess);
  CHECK(std::memcmp(id.internal, "mdring\0\1", 8) == 0);
  CHECK((unsigned char)id.internal[8] == 29500 >> 8);
  CHECK((unsigned char)id.internal[9] == (29500 & 0xff));
  rendezvous_point q;
  REQUIRE(decode_id("ncclCommInitRank", id, q) == ncclSuccess);
  CHECK(q.host == "10.1.2.3");
  CHECK(q.port == 29500);
  CHECK(q.secret == "0123456789abcdef0123456789abcdef");

  ncclUniqueId damaged = id;
  damaged.internal[80] ^= 1;
  CHECK(decode_id("ncclCommInitRank", damaged, q) == ncclInvalidArgument);
  CHECK(std::string(last_error()).starts_with("ncclCommInitRank: commId is damaged"));
  ncclUniqueId foreign{};
  CHECK(decode_id("ncclCommInitRankConfig", foreign, q) == ncclInvalidArgument);
  CHECK(std::string(last_error())
            .starts_with("ncclCommInitRankConfig: commId was not made by mdring's "
                         "ncclGetUniqueId"));

  CHECK(encode_id("ncclGetUniqueId", {std::string(64, 'h'), 1, p.secret}, id) == ncclInvalidArgument);
  CHECK(encode_id("ncclGetUniqueId", {"host", 1, "xyz"}, id) == ncclInvalidArgument);
  CHECK(encode_id("ncclGetUniqueId", {std::string(63, 'h'), 65535, p.secret}, id) == ncclSuccess);
  REQUIRE(decode_id("f", id, q) == ncclSuccess);
  CHECK(q.host == std::string(63, 'h'));
  CHECK(q.port == 65535);
}

TEST_CASE("ncclCommSplit: by color, ordered by key then parent rank; NCCL_SPLIT_NOCOLOR gets none") {
  // Parent ranks 0..5: colors 1 0 1 NOCOLOR 0 1, keys 5 0 5 0 -1 2.
  const std::vector<split_entry> all = {{1, 5}, {0, 0}, {1, 5}, {NCCL_SPLIT_NOCOLOR, 0}, {0, -1}, {1, 2}};
  const auto r0 = split_of(all, 0);
  CHECK(r0.member);
  CHECK(r0.parents == std::vector<int>{5, 0, 2});  // key 2, then key 5 in parent order
  CHECK(r0.rank == 1);
  CHECK(split_of(all, 2).rank == 2);
  CHECK(split_of(all, 5).rank == 0);
  const auto r1 = split_of(all, 1);
  CHECK(r1.parents == std::vector<int>{4, 1});
  CHECK(r1.rank == 1);
  CHECK_FALSE(split_of(all, 3).member);
  CHECK(check_color("ncclCommSplit", NCCL_SPLIT_NOCOLOR) == ncclSuccess);
  CHECK(check_color("ncclCommSplit", -2) == ncclInvalidArgument);
  CHECK(std::string(last_error()) ==
        "ncclCommSplit: color -2 is negative (expected a color >= 0, or NCCL_SPLIT_NOCOLOR)");
}

TEST_CASE("ncclCommShrink: the ranks not excluded, in parent order; every bad argument named") {
  // Parent of 6 ranks, ranks 1 and 4 excluded (given unsorted): 0 2 3 5 go on as 0 1 2 3.
  const int ex[] = {4, 1};
  shrink_result r;
  REQUIRE(shrink_of("ncclCommShrink", 6, 3, ex, 2, NCCL_SHRINK_DEFAULT, r) == ncclSuccess);
  CHECK(r.parents == std::vector<int>{0, 2, 3, 5});
  CHECK(r.rank == 2);
  CHECK(r.excluded == "1 4");  // what every survivor must have given: sorted, whatever the order
  REQUIRE(shrink_of("ncclCommShrink", 6, 5, ex, 2, NCCL_SHRINK_ABORT, r) == ncclSuccess);
  CHECK(r.rank == 3);
  REQUIRE(shrink_of("ncclCommShrink", 6, 0, nullptr, 0, NCCL_SHRINK_DEFAULT, r) == ncclSuccess);
  CHECK(r.parents == std::vector<int>{0, 1, 2, 3, 4, 5});  // nothing excluded: the same ranks
  CHECK(r.rank == 0);
  CHECK(r.excluded.empty());

  auto refused = [&](int size, int me, const int* list, int count, int flags) {
    shrink_result out;
    const ncclResult_t code = shrink_of("ncclCommShrink", size, me, list, count, flags, out);
    CHECK(out.parents.empty());
    return std::pair{code, std::string(last_error())};
  };
  CHECK(refused(6, 0, ex, -1, 0) ==
        std::pair{ncclInvalidArgument,
                  std::string("ncclCommShrink: excludeRanksCount -1 is negative (expected 0 or more)")});
  CHECK(
      refused(6, 0, nullptr, 2, 0) ==
      std::pair{ncclInvalidArgument, std::string("ncclCommShrink: excludeRanksList is NULL with excludeRanksCount 2")});
  CHECK(
      refused(6, 0, ex, 2, 2) ==
      std::pair{ncclInvalidArgument,
                std::string("ncclCommShrink: shrinkFlags 2 is not NCCL_SHRINK_DEFAULT (0) or NCCL_SHRINK_ABORT (1)")});
  const int out_of_range[] = {1, 6};
  CHECK(refused(6, 0, out_of_range, 2, 0) ==
        std::pair{ncclInvalidArgument, std::string("ncclCommShrink: excludeRanksList[1] is 6, not a rank of this "
                                                   "communicator (expected 0 to 5)")});
  const int negative[] = {-1};
  CHECK(refused(6, 0, negative, 1, 0).second ==
        "ncclCommShrink: excludeRanksList[0] is -1, not a rank of this communicator (expected 0 to 5)");
  const int twice[] = {2, 3, 2};
  CHECK(refused(6, 0, twice, 3, 0) ==
        std::pair{ncclInvalidArgument, std::string("ncclCommShrink: excludeRanksList[2] repeats rank 2")});
  const int self[] = {5, 1};
  CHECK(refused(6, 1, self, 2, 0) ==
        std::pair{ncclInvalidArgument,
                  std::string("ncclCommShrink: excludeRanksList[1] is this rank (1): the excluded ranks must not call "
                              "ncclCommShrink, the others call it with the same list")});
}

TEST_CASE("ncclCommShrink: the callers check through the store that they were all given one list") {
  namespace rv = mdring::rendezvous;
  rv::tcp_store_options o;
  o.secret = "shrink-test";
  rv::tcp_store server(true, o);
  o.port = server.port();
  // Parent ranks `callers` of a parent of 4 call with lists[i]; each on a thread with
  // its own connection, as processes would be. Returns each caller's result and text.
  auto shrink_on = [&](const std::string& key, std::vector<int> callers, std::vector<std::vector<int>> lists,
                       std::chrono::milliseconds wait) {
    std::vector<std::pair<ncclResult_t, std::string>> out(callers.size());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < callers.size(); ++i)
      threads.emplace_back([&, i] {
        rv::tcp_store client(false, o);
        shrink_result mine;
        CHECK(shrink_of("ncclCommShrink", 4, callers[i], lists[i].data(), int(lists[i].size()), 0, mine) ==
              ncclSuccess);
        try {
          out[i].first = agree_on_shrink("ncclCommShrink", client, key, callers[i], mine, rv::clock::now() + wait);
          out[i].second = out[i].first == ncclSuccess ? "" : last_error();
        } catch (const mdring::timeout_error& e) {
          out[i] = {ncclSystemError, e.what()};
        }
      });
    for (auto& t : threads) t.join();
    return out;
  };
  using namespace std::chrono_literals;
  // Rank 1 excluded (it never calls): 0, 2 and 3 agree.
  for (const auto& [r, text] : shrink_on("same", {0, 2, 3}, {{1}, {1}, {1}}, 10s)) {
    CHECK(r == ncclSuccess);
    CHECK(text.empty());
  }
  // Rank 3 was given another list ({1, 2}): every caller reads a list other than its own.
  const auto other = shrink_on("other", {0, 2, 3}, {{1}, {1}, {2, 1}}, 10s);
  CHECK(other[0] ==
        std::pair{ncclInvalidUsage,
                  std::string("ncclCommShrink: rank 3 excluded ranks {1 2} where rank 0 excluded {1}: every "
                              "rank that calls ncclCommShrink must pass the same excludeRanksList")});
  CHECK(other[1].second ==
        "ncclCommShrink: rank 3 excluded ranks {1 2} where rank 2 excluded {1}: every rank that "
        "calls ncclCommShrink must pass the same excludeRanksList");
  CHECK(other[2].second ==
        "ncclCommShrink: rank 0 excluded ranks {1} where rank 3 excluded {1 2}: every rank that "
        "calls ncclCommShrink must pass the same excludeRanksList");
  // Rank 2 is kept but never calls: the others wait for it until their deadline.
  for (const auto& [r, text] : shrink_on("missing", {0, 3}, {{1}, {1}}, 300ms)) {
    CHECK(r == ncclSystemError);
    CHECK(text.find("missing/2") != std::string::npos);
  }
}

namespace {
struct call {
  const void* comm;
  call_kind kind;
  int peer;
  int tag;  // which call it was, for the checks
};
}  // namespace

TEST_CASE("groups: nested, issued at the outermost end by communicator; sends and receives by peer in call order") {
  group_queue<call> g;
  std::vector<comm_batch<call>> out;
  CHECK(g.end(out) == ncclInvalidUsage);
  CHECK(std::string(last_error()) == "ncclGroupEnd: no ncclGroupStart before it on this thread");

  int A = 0, B = 0;
  g.start();
  g.add({&A, call_kind::send, 1, 0});
  g.add({&B, call_kind::all_reduce, -1, 1});
  g.start();  // nested
  g.add({&A, call_kind::recv, 1, 2});
  g.add({&A, call_kind::send, 2, 3});
  g.add({&A, call_kind::send, 1, 4});
  CHECK(g.end(out) == ncclSuccess);
  CHECK(out.empty());  // inner end: nothing issued yet
  CHECK(g.active());
  g.add({&A, call_kind::all_gather, -1, 5});
  g.add({&B, call_kind::broadcast, -1, 6});
  CHECK(g.end(out) == ncclSuccess);
  CHECK_FALSE(g.active());
  REQUIRE(out.size() == 2);
  CHECK(out[0].comm == &A);
  REQUIRE(out[0].collectives.size() == 1);
  CHECK(out[0].collectives[0].tag == 5);
  REQUIRE(out[0].p2p.size() == 2);
  const auto& to1 = out[0].p2p.at(1);
  REQUIRE(to1.first.size() == 2);
  CHECK(to1.first[0].tag == 0);  // the first send to peer 1 meets its first receive from us
  CHECK(to1.first[1].tag == 4);
  REQUIRE(to1.second.size() == 1);
  CHECK(to1.second[0].tag == 2);
  CHECK(out[0].p2p.at(2).first.at(0).tag == 3);
  CHECK(out[1].comm == &B);
  REQUIRE(out[1].collectives.size() == 2);
  CHECK(out[1].collectives[0].tag == 1);
  CHECK(out[1].collectives[1].tag == 6);
}

TEST_CASE("groups: sends to itself that its receives from itself do not match are found before issuing") {
  int A = 0;
  comm_batch<call> b;
  b.comm = &A;
  bool others = true;
  CHECK(unmatched_self(b, 0, others).empty());
  CHECK_FALSE(others);
  b.p2p[0].first.push_back({&A, call_kind::send, 0, 0});
  b.p2p[0].second.push_back({&A, call_kind::recv, 0, 1});
  CHECK(unmatched_self(b, 0, others).empty());  // one for one
  b.p2p[0].first.push_back({&A, call_kind::send, 0, 2});
  CHECK(unmatched_self(b, 0, others) ==
        "rank 0 sends to itself 2 times but receives from itself 1 times in one group (a send to itself needs its "
        "receive in the same group)");
  CHECK_FALSE(others);  // nothing else in the group: no peer waits on it
  b.p2p[1].second.push_back({&A, call_kind::recv, 1, 3});
  CHECK_FALSE(unmatched_self(b, 0, others).empty());
  CHECK(others);  // a receive from rank 1: rank 1 waits on this group
  comm_batch<call> c;
  c.collectives.push_back({&A, call_kind::all_reduce, -1, 4});
  c.p2p[2].second.push_back({&A, call_kind::recv, 2, 5});
  CHECK(unmatched_self(c, 2, others) ==
        "rank 2 sends to itself 0 times but receives from itself 1 times in one group (a send to itself needs its "
        "receive in the same group)");
  CHECK(others);
}

TEST_CASE("groups: a call that failed inside discards the whole group; the next group is clean") {
  group_queue<call> g;
  std::vector<comm_batch<call>> out;
  int A = 0;
  g.start();
  g.add({&A, call_kind::all_reduce, -1, 0});
  CHECK(check_rank("ncclSend", "peer", 9, 2) == ncclInvalidArgument);
  g.poison(ncclInvalidArgument);
  CHECK(g.end(out) == ncclInvalidArgument);
  CHECK(out.empty());
  CHECK(std::string(last_error()) ==
        "ncclGroupEnd: the group was discarded (1 calls not issued) because a call in "
        "it failed: ncclSend: peer 9 is not a rank of this communicator (0 to 1)");
  g.start();
  g.add({&A, call_kind::all_reduce, -1, 1});
  CHECK(g.end(out) == ncclSuccess);
  REQUIRE(out.size() == 1);
  CHECK(out[0].collectives.at(0).tag == 1);
}
