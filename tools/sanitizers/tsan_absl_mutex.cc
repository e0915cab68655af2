// ThreadSanitizer builds only: tells TSan about Abseil's locks and
// notifications.
//
// Debian's Abseil is not instrumented, so TSan does not see absl::Mutex
// (futexes and atomics inside libabsl_synchronization) order anything and
// reports every access under a lock as a race (and every access after
// absl::Notification::HasBeenNotified as racing with the notifier's). These
// definitions interpose
// the library's exported lock functions (an executable's symbols come first),
// call the real ones and add the happens-before edges: release before a lock
// is let go, acquire once it is held. Await and CondVar::Wait release and
// re-acquire. Mangled names, because the functions are members of a class
// we cannot redefine; the inline namespace is Debian 12's (debian3): with
// another Abseil these never match and TSan reports the false races again.
#if defined(__SANITIZE_THREAD__)

#include <dlfcn.h>

#include <atomic>
#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}

namespace {

// absl::Duration and absl::Time as the ABI passes them (two registers).
struct Duration {
  int64_t hi;
  uint32_t lo;
};

template <typename F>
F Real(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

// The library evaluates a waiter's condition with the lock held, on the
// waiter's thread or on the thread unlocking, also after the waiter's own
// release: each evaluation acquires and releases like a critical section.
struct Guarded {
  void* mu;
  const absl::Condition* condition;
};

bool EvalGuarded(Guarded* g) {
  __tsan_acquire(g->mu);
  const bool ready = g->condition->Eval();
  __tsan_release(g->mu);
  return ready;
}

// The address of absl::Notification's flag (its private notified_yet_), by
// the layout of Debian 12's Abseil: the mutex, then the flag.
struct NotificationLayout {
  absl::Mutex mutex;
  std::atomic<bool> notified_yet;
};
static_assert(sizeof(NotificationLayout) == sizeof(absl::Notification),
              "absl::Notification's layout changed: update NotificationLayout");

void* NotifiedFlag(const void* notification) {
  auto* layout = static_cast<const NotificationLayout*>(notification);
  return const_cast<std::atomic<bool>*>(&layout->notified_yet);
}

#define GEMM_GUARD(mu, c)                                                   \
  Guarded guarded{mu, static_cast<const absl::Condition*>(c)};              \
  absl::Condition wrapped(&EvalGuarded, &guarded);                          \
  c = &wrapped

}  // namespace

#define GEMM_LOCKING(NAME, RET, PARAMS, ARGS, BEFORE, AFTER)  \
  RET NAME PARAMS {                                         \
    using Fn = RET(*) PARAMS;                               \
    static const Fn real = Real<Fn>(#NAME);                 \
    BEFORE;                                                 \
    RET r = real ARGS;                                      \
    AFTER;                                                  \
    return r;                                               \
  }
#define GEMM_LOCKING_VOID(NAME, PARAMS, ARGS, BEFORE, AFTER) \
  void NAME PARAMS {                                        \
    using Fn = void(*) PARAMS;                              \
    static const Fn real = Real<Fn>(#NAME);                 \
    BEFORE;                                                 \
    real ARGS;                                              \
    AFTER;                                                  \
  }

extern "C" {
// Mutex::Lock, ReaderLock, Unlock, ReaderUnlock, TryLock, ReaderTryLock.
GEMM_LOCKING_VOID(_ZN4absl7debian35Mutex4LockEv, (void* mu), (mu), , __tsan_acquire(mu))
GEMM_LOCKING_VOID(_ZN4absl7debian35Mutex10ReaderLockEv, (void* mu), (mu), , __tsan_acquire(mu))
GEMM_LOCKING_VOID(_ZN4absl7debian35Mutex6UnlockEv, (void* mu), (mu), __tsan_release(mu), )
GEMM_LOCKING_VOID(_ZN4absl7debian35Mutex12ReaderUnlockEv, (void* mu), (mu), __tsan_release(mu), )
GEMM_LOCKING(_ZN4absl7debian35Mutex7TryLockEv, bool, (void* mu), (mu), ,
             if (r) __tsan_acquire(mu))
GEMM_LOCKING(_ZN4absl7debian35Mutex13ReaderTryLockEv, bool, (void* mu), (mu), ,
             if (r) __tsan_acquire(mu))
// Mutex::LockWhen and ReaderLockWhen, with and without a time limit: the lock
// is held on return either way. Conditions go through EvalGuarded.
GEMM_LOCKING_VOID(_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE, (void* mu, const void* c),
                  (mu, c), GEMM_GUARD(mu, c), __tsan_acquire(mu))
GEMM_LOCKING_VOID(_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE,
                  (void* mu, const void* c), (mu, c), GEMM_GUARD(mu, c), __tsan_acquire(mu))
GEMM_LOCKING(_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE, bool,
             (void* mu, const void* c, Duration d), (mu, c, d), GEMM_GUARD(mu, c), __tsan_acquire(mu))
GEMM_LOCKING(_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE, bool,
             (void* mu, const void* c, Duration t), (mu, c, t), GEMM_GUARD(mu, c), __tsan_acquire(mu))
GEMM_LOCKING(_ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE,
             bool, (void* mu, const void* c, Duration d), (mu, c, d), GEMM_GUARD(mu, c), __tsan_acquire(mu))
GEMM_LOCKING(_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE,
             bool, (void* mu, const void* c, Duration t), (mu, c, t), GEMM_GUARD(mu, c), __tsan_acquire(mu))
// Mutex::Await*: the lock is let go while waiting.
GEMM_LOCKING_VOID(_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE, (void* mu, const void* c),
                  (mu, c), GEMM_GUARD(mu, c); __tsan_release(mu), __tsan_acquire(mu))
GEMM_LOCKING(_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE, bool,
             (void* mu, const void* c, Duration d), (mu, c, d),
             GEMM_GUARD(mu, c); __tsan_release(mu), __tsan_acquire(mu))
GEMM_LOCKING(_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE, bool,
             (void* mu, const void* c, Duration t), (mu, c, t),
             GEMM_GUARD(mu, c); __tsan_release(mu), __tsan_acquire(mu))
// CondVar::Wait*(mu): the same for the mutex waited with.
GEMM_LOCKING_VOID(_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE, (void* cv, void* mu), (cv, mu),
                  __tsan_release(mu), __tsan_acquire(mu))
GEMM_LOCKING(_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE, bool,
             (void* cv, void* mu, Duration d), (cv, mu, d), __tsan_release(mu), __tsan_acquire(mu))
GEMM_LOCKING(_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE, bool,
             (void* cv, void* mu, Duration t), (cv, mu, t), __tsan_release(mu), __tsan_acquire(mu))

// Notification::Notify and WaitForNotification*: Notify sets the flag in the
// library; HasBeenNotified reads it inline, in our instrumented code, with an
// acquire load, which TSan pairs with a release on the flag's address. So
// Notify releases on the flag, and a wait that saw the notification acquires
// from it.
GEMM_LOCKING_VOID(_ZN4absl7debian312Notification6NotifyEv, (void* n), (n),
                  __tsan_release(NotifiedFlag(n)), )
GEMM_LOCKING_VOID(_ZNK4absl7debian312Notification19WaitForNotificationEv, (const void* n), (n), ,
                  __tsan_acquire(NotifiedFlag(n)))
GEMM_LOCKING(_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE, bool,
             (const void* n, Duration d), (n, d), , if (r) __tsan_acquire(NotifiedFlag(n)))
GEMM_LOCKING(_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE, bool,
             (const void* n, Duration t), (n, t), , if (r) __tsan_acquire(NotifiedFlag(n)))
}  // extern "C"

#endif  // __SANITIZE_THREAD__
