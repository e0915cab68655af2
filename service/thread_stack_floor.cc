// Raises explicitly requested thread stack sizes to a floor.
//
// Why: Debian 12's civetweb (under prometheus-cpp's metrics exposer) creates
// its workers with a fixed 100 KiB stack, and glibc carves every thread's
// static TLS out of that stack. OpenBLAS alone has 60 KiB of static TLS and
// the CUDA runtime 4 KiB, which leaves the exposer too little: a scrape
// overflowed the stack and crashed the server. civetweb has no run-time
// option for its stack size, so the server interposes on
// pthread_attr_setstacksize (exported from the executable, see BUILD) and
// never lets a library ask for less than the floor. Larger requests pass
// through unchanged.
#include <dlfcn.h>
#include <pthread.h>

#include <cstddef>

namespace {

constexpr size_t kStackFloor = size_t{1} << 20;  // 1 MiB

using SetStackSize = int (*)(pthread_attr_t*, size_t);

SetStackSize RealSetStackSize() {
  static const SetStackSize real =
      reinterpret_cast<SetStackSize>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return real;
}

}  // namespace

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  return RealSetStackSize()(attr, size < kStackFloor ? kStackFloor : size);
}
