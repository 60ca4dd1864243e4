// python/csrc/group_mpi.cpp: groups over MPI (under mpirun), and the bootstrap
// that lets torch's env:// rendezvous run under mpirun without MASTER_ADDR.
#include "group_impl.hpp"

#include <mdring/mpi.hpp>

#include <mpi.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace mdring_torch {

namespace {
std::atomic<bool> we_initialized{false};

void ensure_mpi() {
  static std::mutex m;
  std::lock_guard l(m);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (fin) throw mdring::communicator_error("mdring_torch: MPI was finalized already");
  if (init) return;
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  we_initialized = true;
  if (provided < MPI_THREAD_MULTIPLE)
    throw mdring::invalid_argument("MDRING_TORCH_TRANSPORT",
                                   "mdring_torch: this MPI library does not provide MPI_THREAD_MULTIPLE, which "
                                   "mdring's progress thread needs beside torch's threads; set "
                                   "MDRING_TORCH_TRANSPORT=ucx to run over UCX under mpirun");
}

// A free TCP port on this host (the kernel's choice; torch's store binds it next).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

struct mpi_comms {
  MPI_Comm group = MPI_COMM_NULL, ordered = MPI_COMM_NULL;
  ~mpi_comms() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) return;
    if (ordered != MPI_COMM_NULL) MPI_Comm_free(&ordered);
    if (group != MPI_COMM_NULL) MPI_Comm_free(&group);
  }
};
}  // namespace

bool have_mpi() noexcept { return true; }

mpi_bootstrap bootstrap_mpi() {
  ensure_mpi();
  mpi_bootstrap b{};
  MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &b.size);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, b.rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &b.local_rank);
  MPI_Comm_size(node, &b.local_size);
  MPI_Comm_free(&node);
  char host[256] = {};
  int port = 0;
  if (b.rank == 0) {
    ::gethostname(host, sizeof host - 1);
    port = free_port();
  }
  MPI_Bcast(host, sizeof host, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
  b.master_addr = host;
  b.master_port = port;
  return b;
}

void finalize_mpi() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (we_initialized && !fin) MPI_Finalize();
}

std::unique_ptr<group> make_mpi_group(const std::vector<int>& world_ranks, const group_config& cfg) {
  ensure_mpi();
  auto c = std::make_shared<mpi_comms>();
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (world_ranks.empty()) {
    if (std::size_t(world_size) != cfg.size || std::size_t(world_rank) != cfg.rank)
      throw mdring::invalid_argument("RANK", "mdring_torch: torch's rank " + std::to_string(cfg.rank) + " of " +
                                                 std::to_string(cfg.size) + " is not MPI's (" +
                                                 std::to_string(world_rank) + " of " + std::to_string(world_size) +
                                                 "); under mpirun leave RANK and WORLD_SIZE to mdring_torch, or set "
                                                 "MDRING_TORCH_TRANSPORT=ucx");
    MPI_Comm_dup(MPI_COMM_WORLD, &c->group);
  } else {
    MPI_Group all, mine;
    MPI_Comm_group(MPI_COMM_WORLD, &all);
    MPI_Group_incl(all, int(world_ranks.size()), world_ranks.data(), &mine);
    MPI_Comm_create_group(MPI_COMM_WORLD, mine, 0x6d64, &c->group);
    MPI_Group_free(&mine);
    MPI_Group_free(&all);
  }
  const auto fake = detail::test_layout(cfg.rank, cfg.size);
  const auto layout = fake ? *fake : mdring::detect_node_layout(c->group);
  auto p = detail::place(cfg, layout, [&](int key) {
    std::vector<int> keys(cfg.size);
    MPI_Allgather(&key, 1, MPI_INT, keys.data(), 1, MPI_INT, c->group);
    return keys;
  });
  MPI_Comm target = c->group;
  if (!p.position.empty()) {
    MPI_Comm_split(c->group, 0, int(p.position[cfg.rank]), &c->ordered);
    target = c->ordered;
  }
  mdring::options o;
  o.timeout = cfg.timeout;
  auto comm = mdring::bind(p.topology, target, o);
  std::string desc = "mpi, topology " + p.topology.to_string() + " (" + p.source + ")";
  return std::make_unique<group_impl<decltype(comm)>>(std::move(c), std::move(comm), std::move(p.position),
                                                      std::move(desc));
}

}  // namespace mdring_torch
