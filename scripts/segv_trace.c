/* scripts/segv_trace.c: a crash's native stack, for a device run without gdb.
 *
 *   cc -shared -fPIC -O1 -o segv_trace.so scripts/segv_trace.c -ldl
 *   LD_PRELOAD=$PWD/segv_trace.so python3 ...
 *
 * On SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGABRT it writes every frame of the
 * faulting thread to stderr as "segv_trace: #N OBJECT+0xOFFSET SYMBOL" (the
 * offset from the object's load base, what `addr2line -f -C -e OBJECT 0xOFFSET`
 * takes), then lets the signal end the process as it would have. A handler
 * installed later (Python's faulthandler) runs first and then re-raises into
 * this one. Used by scripts/gpu-device.sh's diag phase. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void say(const char* s) { (void)!write(2, s, strlen(s)); }

static void on_fatal(int sig, siginfo_t* info, void* ctx) {
  (void)ctx;
  char line[1024];
  snprintf(line, sizeof line, "segv_trace: signal %d at address %p, pid %d\n", sig, info ? info->si_addr : NULL,
           (int)getpid());
  say(line);
  void* frames[64];
  int n = backtrace(frames, 64);
  for (int i = 0; i < n; ++i) {
    Dl_info d;
    memset(&d, 0, sizeof d);
    if (dladdr(frames[i], &d) && d.dli_fname) {
      snprintf(line, sizeof line, "segv_trace: #%d %s+0x%lx %s\n", i, d.dli_fname,
               (unsigned long)((char*)frames[i] - (char*)d.dli_fbase), d.dli_sname ? d.dli_sname : "?");
    } else {
      snprintf(line, sizeof line, "segv_trace: #%d %p\n", i, frames[i]);
    }
    say(line);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fatal;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
  for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; ++i) sigaction(sigs[i], &sa, NULL);
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc_s now, not inside the handler
}
