// LD_PRELOAD'ed into SimGrid's smpimain by scripts/simulate.sh (not into the
// simulated program): SMPI_SHARED_MALLOC maps one "bogus" file, which SimGrid
// 3.32 creates with mkstemp("/tmp/simgrid-shmalloc-XXXXXX"), many times over. On
// a disk-backed /tmp every first write to each page of each mapping goes through
// the filesystem's dirty-page tracking, and large simulations spend most of their
// wall time in the kernel there (4x slower at 64 ranks x 100 MB). This creates
// the file in /dev/shm (tmpfs) instead; the simulated results are the same.
// Built with the host compiler: g++ -O2 -shared -fPIC -o libtmpfs_shmalloc.so tmpfs_shmalloc.cpp -ldl
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

extern "C" int mkstemp(char* name) {
  using fn = int (*)(char*);
  static fn real = reinterpret_cast<fn>(dlsym(RTLD_NEXT, "mkstemp"));
  static const char from[] = "/tmp/simgrid-shmalloc-";
  if (real && std::strncmp(name, from, sizeof from - 1) == 0) {
    char alt[] = "/dev/shm/simgrid-shmalloc-XXXXXX";
    const int fd = real(alt);
    if (fd >= 0) {
      // SimGrid unlinks `name` right away; the file must vanish the same way.
      unlink(alt);
      return fd;
    }
  }
  return real ? real(name) : -1;
}
