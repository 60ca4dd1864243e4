// mdring/executor/fiber.hpp: a stackful coroutine, the cursor of a call in flight.
//
// A nonblocking collective runs the same engine code as the blocking one. Where
// the blocking call would wait (for messages, or for a peer's shared-access
// flag), a call running on a fiber instead tests once and, if it is not done,
// yields: control returns to whoever resumed the fiber (the progress agent, or a
// wait()/test() of the user's), and the next resume continues from exactly that
// wait. The fiber's stack is the call's cursor: which collective, stage, step,
// segment and request it was at.
//
//   fiber f([](void* arg) { ... fiber::yield(); ... }, arg);
//   f.resume();   // runs until the first yield (or the end)
//   f.resume();   // continues after it
//
// One fiber serves one communicator for its whole life (its calls run one after
// the other on it), so a call allocates no stack. The stack is 1 MiB of address
// space with a guard page below it; only the pages touched are ever backed.
// A fiber may be resumed from different threads, one at a time (the caller holds
// the communicator's lock). ThreadSanitizer and AddressSanitizer are told about
// every switch, so sanitized builds see consistent stacks.
#pragma once

#include "../config.hpp"
#include "../error.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define MDRING_ASAN_FIBERS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MDRING_ASAN_FIBERS 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define MDRING_TSAN_FIBERS 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MDRING_TSAN_FIBERS 1
#endif
#endif

#if MDRING_ASAN_FIBERS
extern "C" void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, std::size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, std::size_t* size_old);
#endif
#if MDRING_TSAN_FIBERS
extern "C" void* __tsan_get_current_fiber(void);
extern "C" void* __tsan_create_fiber(unsigned flags);
extern "C" void __tsan_destroy_fiber(void* fiber);
extern "C" void __tsan_switch_to_fiber(void* fiber, unsigned flags);
#endif

MDRING_NAMESPACE_BEGIN

namespace detail {

class fiber;

// The fiber running on this thread, or nullptr. Not inlined: a fiber may move to
// another thread between a yield and the next resume, and an inlined read of a
// thread_local could keep the first thread's address.
[[gnu::noinline]] inline fiber*& current_fiber_slot() noexcept {
  static thread_local fiber* f = nullptr;
  return f;
}

class fiber {
public:
  using entry_fn = void (*)(void*);
  static constexpr std::size_t stack_bytes = std::size_t(1) << 20;

  fiber(entry_fn entry, void* arg) : entry_(entry), arg_(arg) {
    page_ = std::size_t(::sysconf(_SC_PAGESIZE));
    map_bytes_ = stack_bytes + page_;
    void* m = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) throw error("mdring: cannot map the 1 MiB stack of a progress fiber");
    map_ = static_cast<unsigned char*>(m);
    ::mprotect(map_, page_, PROT_NONE);  // guard page: an overflow faults instead of corrupting
    if (::getcontext(&ctx_) != 0) {
      ::munmap(map_, map_bytes_);
      throw error("mdring: getcontext failed for a progress fiber");
    }
    ctx_.uc_stack.ss_sp = map_ + page_;
    ctx_.uc_stack.ss_size = stack_bytes;
    ctx_.uc_link = nullptr;  // the entry never returns (see trampoline)
    const auto self = reinterpret_cast<std::uintptr_t>(this);
    ::makecontext(&ctx_, reinterpret_cast<void (*)()>(&trampoline), 2, unsigned(self >> 32), unsigned(self));
#if MDRING_TSAN_FIBERS
    tsan_fiber_ = __tsan_create_fiber(0);
#endif
  }
  fiber(const fiber&) = delete;
  fiber& operator=(const fiber&) = delete;
  // Only a fiber that is not running may be destroyed; objects still alive on its
  // stack are not destroyed (the executor destroys it only when it is idle).
  ~fiber() {
#if MDRING_TSAN_FIBERS
    __tsan_destroy_fiber(tsan_fiber_);
#endif
    ::munmap(map_, map_bytes_);
  }

  // Runs the fiber on this thread until it yields or finishes.
  void resume() {
    fiber*& slot = current_fiber_slot();
    fiber* outer = slot;
    slot = this;
#if MDRING_TSAN_FIBERS
    caller_tsan_ = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(tsan_fiber_, 0);
#endif
#if MDRING_ASAN_FIBERS
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, map_ + page_, stack_bytes);
#endif
    ::swapcontext(&caller_, &ctx_);
#if MDRING_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    current_fiber_slot() = outer;
  }

  // Inside a fiber: back to the resume() that started this stretch.
  static void yield() {
    fiber* f = current();
    if (!f) return;
    f->switch_out();
  }

  static fiber* current() noexcept { return current_fiber_slot(); }

  bool finished() const noexcept { return finished_; }

  // Counts the waits the fiber reached: a resume after which it changed moved the
  // call on (the progress agent backs off when nothing moves).
  std::uint64_t waits() const noexcept { return waits_; }
  void note_wait() noexcept { ++waits_; }

private:
  void switch_out() {
#if MDRING_TSAN_FIBERS
    __tsan_switch_to_fiber(caller_tsan_, 0);
#endif
#if MDRING_ASAN_FIBERS
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, caller_bottom_, caller_size_);
#endif
    ::swapcontext(&ctx_, &caller_);
#if MDRING_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(fake, &caller_bottom_, &caller_size_);
#endif
  }

  static void trampoline(unsigned hi, unsigned lo) {
    auto* f = reinterpret_cast<fiber*>((std::uintptr_t(hi) << 32) | std::uintptr_t(lo));
#if MDRING_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(nullptr, &f->caller_bottom_, &f->caller_size_);
#endif
    f->entry_(f->arg_);  // must not throw: the executor's loop catches everything
    f->finished_ = true;
    for (;;) f->switch_out();  // a finished fiber is never resumed again
  }

  entry_fn entry_;
  void* arg_;
  unsigned char* map_ = nullptr;
  std::size_t map_bytes_ = 0, page_ = 0;
  ucontext_t ctx_{}, caller_{};
  bool finished_ = false;
  std::uint64_t waits_ = 0;
#if MDRING_ASAN_FIBERS
  const void* caller_bottom_ = nullptr;
  std::size_t caller_size_ = 0;
#endif
#if MDRING_TSAN_FIBERS
  void* tsan_fiber_ = nullptr;
  void* caller_tsan_ = nullptr;
#endif
};

}  // namespace detail

MDRING_NAMESPACE_END
