// Sanitizer runtime defaults, read by the runtimes at start-up in sanitizer
// builds and unused otherwise. They cover only the uninstrumented Debian
// libraries under our code; nothing of ours is suppressed.

extern "C" {

// LeakSanitizer: c-ares (under gRPC's DNS resolver) keeps one 10-byte
// allocation for the life of the process.
__attribute__((visibility("default"), used)) const char* __lsan_default_suppressions() {
  return "leak:libcares.so\n";
}

}  // extern "C"
