// mdring/error.hpp: the exceptions mdring throws at run time.
//
//   mdring::error                      base of everything below (a std::runtime_error)
//   ├── mdring::invalid_argument       a caller's argument is wrong; argument() names it
//   │   └── mdring::topology_error     a malformed topology string, or a topology that
//   │                                  does not fit the communicator it is bound to
//   ├── mdring::timeout_error          a wait passed its deadline; names the collective,
//   │                                  the dimension, the step and the peer
//   ├── mdring::remote_error           another rank failed inside the same collective
//   ├── mdring::communicator_error     the bound communicator is unusable (after an error)
//   └── mdring::transport_error        the transport failed; code() carries its code
//       ├── mdring::mpi_error          an MPI call failed; code() is the MPI error code
//       ├── mdring::cuda_error         a CUDA runtime call failed; code() is the cudaError_t
//       └── mdring::nccl_error         an NCCL call failed; code() is the ncclResult_t
//
// Every message starts with "mdring::<function>: " so that a log line says which
// call failed without a stack trace.
#pragma once

#include "config.hpp"

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

MDRING_NAMESPACE_BEGIN

/// Base of every exception mdring throws (a std::runtime_error).
class error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A caller's argument is wrong. argument() is the parameter's name as the
/// documentation spells it ("sendbuf", "count", "root", "topology", ...).
class invalid_argument : public error {
public:
  /// Thrown for `argument`, with the message `what`.
  invalid_argument(std::string argument, const std::string& what) : error(what), argument_(std::move(argument)) {}
  const std::string& argument() const noexcept { return argument_; }  ///< the parameter's name

private:
  std::string argument_;
};

/// A malformed topology string, or a topology that does not fit the communicator it is bound to.
class topology_error : public invalid_argument {
public:
  /// The constructor of invalid_argument.
  using invalid_argument::invalid_argument;
};

/// A wait passed its deadline. The fields say where: collective ("all_reduce"),
/// dimension (0-based index into the topology), phase ("reduce-scatter", ...), step
/// within that phase, and the peer's rank in the bound communicator.
class timeout_error : public error {
public:
  /// Thrown with the message `what` and where the wait was.
  timeout_error(const std::string& what, std::string collective, std::size_t dimension, std::string phase,
                std::size_t step, std::size_t peer)
      : error(what),
        collective_(std::move(collective)),
        dimension_(dimension),
        phase_(std::move(phase)),
        step_(step),
        peer_(peer) {}
  const std::string& collective() const noexcept { return collective_; }  ///< "all_reduce", ...
  std::size_t dimension() const noexcept { return dimension_; }           ///< 0-based index into the topology
  const std::string& phase() const noexcept { return phase_; }            ///< "reduce-scatter", ...
  std::size_t step() const noexcept { return step_; }                     ///< step within the phase
  std::size_t peer() const noexcept { return peer_; }                     ///< the peer's rank in the bound communicator

private:
  std::string collective_;
  std::size_t dimension_;
  std::string phase_;
  std::size_t step_;
  std::size_t peer_;
};

/// Another rank of the same communicator failed (bad argument, timeout, transport
/// error) and told the others, so that they stop waiting instead of hanging.
class remote_error : public error {
public:
  /// Thrown with the message `what`, naming the rank that failed.
  remote_error(const std::string& what, std::size_t failed_rank) : error(what), failed_rank_(failed_rank) {}
  std::size_t failed_rank() const noexcept { return failed_rank_; }  ///< the rank that failed first

private:
  std::size_t failed_rank_;
};

/// The bound communicator is unusable (after an error).
class communicator_error : public error {
public:
  using error::error;
};

/// The transport failed; code() carries its code.
class transport_error : public error {
public:
  /// Thrown with the message `what` and the transport's error code.
  transport_error(const std::string& what, int code) : error(what), code_(code) {}
  int code() const noexcept { return code_; }  ///< the transport's error code

private:
  int code_;
};

/// An MPI call failed; code() is the MPI error code.
class mpi_error : public transport_error {
public:
  /// The constructor of transport_error.
  using transport_error::transport_error;
};

/// A CUDA call failed; code() is the cudaError_t. Thrown by the GPU path (mdring/cuda/*.cuh); declared here so that
/// host code can catch them without including CUDA headers.
class cuda_error : public transport_error {
public:
  /// The constructor of transport_error.
  using transport_error::transport_error;
};

/// An NCCL call failed; code() is the ncclResult_t.
class nccl_error : public transport_error {
public:
  /// The constructor of transport_error.
  using transport_error::transport_error;
};

MDRING_NAMESPACE_END
