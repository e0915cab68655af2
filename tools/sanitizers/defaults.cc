// Sanitizer runtime defaults, read by the runtimes at start-up in sanitizer
// builds and unused otherwise. They cover only the uninstrumented Debian
// libraries under our code, each entry with what it costs us.

extern "C" {

// LeakSanitizer: c-ares (under gRPC's DNS resolver) keeps one 10-byte
// allocation for the life of the process.
__attribute__((visibility("default"), used)) const char* __lsan_default_suppressions() {
  return "leak:libcares.so\n";
}

// ThreadSanitizer (tsan_grpc_edges.cc makes gRPC's hand-offs visible; these
// are what it cannot reach):
// - thread: gRPC's own threads (timer manager, executor) are not all joined
//   when a test process exits. Only threads made by grpc_core::Thread match;
//   ours are std::threads.
// - race: the Transfer service is a CallbackGenericService, whose handler
//   (CallbackBidiHandler<ByteBuffer, ByteBuffer>) is compiled inside
//   libgrpc++: the ordering it gives its reactor (OnDone and the handler's
//   own teardown after the last reaction) is invisible, and reads as races.
//   Matches reports with any frame of that handler on either stack, so
//   races that involve the Transfer service's reactions are not checked
//   (the service's shared state, ResidentStore, is checked through the Gemm
//   paths and its own test). Our generated handlers are unaffected.
__attribute__((visibility("default"), used)) const char* __tsan_default_suppressions() {
  return "thread:grpc_core::Thread::Thread\n"
         "race:grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, grpc::ByteBuffer>\n";
}

}  // extern "C"
