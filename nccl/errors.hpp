// nccl/errors.hpp: the results and error texts of libmdring-nccl.so, the NCCL API
// on mdring (docs/NCCL.md).
//
// Every entry point that fails returns an ncclResult_t and leaves one line for
// ncclGetLastError() on the calling thread: the function, then what was wrong,
// naming the argument and what was expected ("ncclAllReduce: root 5 is not a rank
// of this communicator (0 to 3)"). NCCL_DEBUG=WARN (or INFO, TRACE) also prints
// that line on stderr when it is set, as NCCL does.
#pragma once

#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace mdring_nccl {

// ncclGetErrorString: one text per ncclResult_t of the header; the details of the
// last failure are ncclGetLastError()'s.
inline const char* result_text(ncclResult_t r) noexcept {
  switch (int(r)) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (ncclGetLastError() names the CUDA call)";
    case ncclSystemError:
      return "unhandled system error (ncclGetLastError() says which)";
    case ncclInternalError:
      return "internal error in mdring's NCCL library (ncclGetLastError() says where)";
    case ncclInvalidArgument:
      return "invalid argument (ncclGetLastError() names it)";
    case ncclInvalidUsage:
      return "invalid usage (ncclGetLastError() says what)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

// The calling thread's last failure ("" before the first).
inline std::string& last_error_slot() noexcept {
  thread_local std::string text;
  return text;
}
inline const char* last_error() noexcept { return last_error_slot().c_str(); }

// NCCL_DEBUG: WARN, INFO or TRACE print each failure on stderr; unset or VERSION does not.
inline bool warn_on_stderr() noexcept {
  static const bool on = [] {
    const char* v = std::getenv("NCCL_DEBUG");
    return v && (!strcasecmp(v, "WARN") || !strcasecmp(v, "INFO") || !strcasecmp(v, "TRACE"));
  }();
  return on;
}

// Records "function: what" as the thread's last error and returns code.
inline ncclResult_t fail(ncclResult_t code, const char* function, const std::string& what) {
  std::string& slot = last_error_slot();
  slot = std::string(function) + ": " + what;
  if (warn_on_stderr()) std::fprintf(stderr, "mdring NCCL WARN %s\n", slot.c_str());
  return code;
}

// A function of the NCCL API that mdring does not implement: ncclInvalidUsage,
// never a crash or a hang.
inline ncclResult_t unsupported(const char* function, const char* why = nullptr) {
  std::string what = "not supported by mdring's NCCL library";
  if (why) what += std::string(" (") + why + ")";
  return fail(ncclInvalidUsage, function, what);
}

}  // namespace mdring_nccl
