// tests/stderr_capture.hpp: what a piece of code writes on file descriptor 2 (the
// hang report's lines, the warnings about settings), for the host tests.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace mdring_test {

template <class F>
std::string stderr_of(F&& f) {
  std::fflush(stderr);
  char path[] = "/tmp/mdring-stderr-XXXXXX";
  const int fd = mkstemp(path);
  const int saved = dup(2);
  dup2(fd, 2);
  f();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  unlink(path);
  return ss.str();
}

}  // namespace mdring_test
