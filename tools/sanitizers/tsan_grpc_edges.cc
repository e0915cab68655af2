// ThreadSanitizer builds only: tells TSan that a gRPC operation's start
// happens before its completion is handed back.
//
// Debian's gRPC is not instrumented. Between a thread that starts an
// operation (grpc_call_start_batch) and the thread that runs its completion
// (a callback, or whoever takes the event from a completion queue), gRPC
// hands the work over through its own atomics and lock-free queues, which
// TSan cannot see; it then reports every access before the start and after
// the completion, in our code and in gRPC's header-only code compiled into
// ours, as a race. gRPC's contract (grpc/grpc.h) is that the completion of a
// batch comes after the batch was started, with everything the starter wrote.
// These definitions interpose the C functions libgrpc++ calls in libgrpc (an
// executable's symbols come first, as in tsan_absl_mutex.cc) and state that
// contract: release on the tag when an operation is started or a call is
// requested, acquire on it when a completion queue returns it. Callbacks
// (the callback API's reactions) are run by gRPC either after taking them
// off a queue with grpc_completion_queue_next (its "nexting" threads) or
// inline, inside gRPC, on whichever thread completed the operation; so the
// function that runs every reaction tag, CallbackWithSuccessTag::StaticRun,
// acquires on its tag too. libgrpc++ takes that function's address through
// its global offset table, so our exported definition replaces it for the
// tags libgrpc++ sets up as well as ours, and it calls libgrpc++'s copy.
//
// The callback server's reactions are ordered by two counters in
// grpc::internal::ServerCallbackCall (server_callback.h): OnCancel runs once
// the handler has returned and the call was cancelled, OnDone once every
// reaction has run. Both are decremented in header code (instrumented in our
// copy) and also inside libgrpc++ (not instrumented), so ScheduleOnDone and
// CallOnCancel acquire from their counter, and an OnCancel that gRPC runs on
// its executor releases to the done counter when it returns (before
// libgrpc++'s own uninstrumented decrement).
//
// Nothing is suppressed by this file: an edge is added only where gRPC's API
// guarantees one, so a race between two of our threads that do not go
// through a gRPC operation is still reported.
#if defined(__SANITIZE_THREAD__)

#include <dlfcn.h>
#include <grpc/grpc.h>
#include <grpcpp/support/server_callback.h>

#include <atomic>

extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}

namespace {

template <typename F>
F Real(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

void AcquireCompletion(const grpc_event& event) {
  if (event.type == GRPC_OP_COMPLETE && event.tag != nullptr) __tsan_acquire(event.tag);
}

// grpc::internal::ServerCallbackCall's layout in gRPC 1.51 (its counters
// are private): the vtable pointer, then the two counters.
struct ServerCallbackCallLayout {
  void* vptr;
  std::atomic_int on_cancel_conditions_remaining;
  std::atomic_int callbacks_outstanding;
};
static_assert(sizeof(ServerCallbackCallLayout) == sizeof(grpc::internal::ServerCallbackCall),
              "grpc::internal::ServerCallbackCall's layout changed: update the layout here");

ServerCallbackCallLayout* Counters(void* call) {
  return static_cast<ServerCallbackCallLayout*>(call);
}

// Stands in for the reactor that CallOnCancel is given: runs its OnCancel,
// then releases to the call's done counter. CallOnCancel calls only
// InternalInlineable and OnCancel (once) on it.
class CancelReleasingReactor final : public grpc::internal::ServerReactor {
 public:
  CancelReleasingReactor(grpc::internal::ServerReactor* reactor, std::atomic_int* done_counter)
      : reactor_(reactor), done_counter_(done_counter) {}

  void OnCancel() override {
    reactor_->OnCancel();
    __tsan_release(done_counter_);
    delete this;
  }
  void OnDone() override { reactor_->OnDone(); }
  bool InternalInlineable() override { return reactor_->InternalInlineable(); }

 private:
  grpc::internal::ServerReactor* const reactor_;
  std::atomic_int* const done_counter_;
};

}  // namespace

extern "C" {

grpc_call_error grpc_call_start_batch(grpc_call* call, const grpc_op* ops, size_t nops, void* tag,
                                      void* reserved) {
  using Fn = decltype(&grpc_call_start_batch);
  static const Fn real = Real<Fn>("grpc_call_start_batch");
  if (tag != nullptr) __tsan_release(tag);
  return real(call, ops, nops, tag, reserved);
}

grpc_call_error grpc_server_request_call(grpc_server* server, grpc_call** call,
                                         grpc_call_details* details,
                                         grpc_metadata_array* request_metadata,
                                         grpc_completion_queue* cq_bound_to_call,
                                         grpc_completion_queue* cq_for_notification,
                                         void* tag_new) {
  using Fn = decltype(&grpc_server_request_call);
  static const Fn real = Real<Fn>("grpc_server_request_call");
  if (tag_new != nullptr) __tsan_release(tag_new);
  return real(server, call, details, request_metadata, cq_bound_to_call, cq_for_notification,
              tag_new);
}

grpc_call_error grpc_server_request_registered_call(
    grpc_server* server, void* registered_method, grpc_call** call, gpr_timespec* deadline,
    grpc_metadata_array* request_metadata, grpc_byte_buffer** optional_payload,
    grpc_completion_queue* cq_bound_to_call, grpc_completion_queue* cq_for_notification,
    void* tag_new) {
  using Fn = decltype(&grpc_server_request_registered_call);
  static const Fn real = Real<Fn>("grpc_server_request_registered_call");
  if (tag_new != nullptr) __tsan_release(tag_new);
  return real(server, registered_method, call, deadline, request_metadata, optional_payload,
              cq_bound_to_call, cq_for_notification, tag_new);
}

grpc_event grpc_completion_queue_next(grpc_completion_queue* cq, gpr_timespec deadline,
                                      void* reserved) {
  using Fn = decltype(&grpc_completion_queue_next);
  static const Fn real = Real<Fn>("grpc_completion_queue_next");
  const grpc_event event = real(cq, deadline, reserved);
  AcquireCompletion(event);
  return event;
}

grpc_event grpc_completion_queue_pluck(grpc_completion_queue* cq, void* tag, gpr_timespec deadline,
                                       void* reserved) {
  using Fn = decltype(&grpc_completion_queue_pluck);
  static const Fn real = Real<Fn>("grpc_completion_queue_pluck");
  const grpc_event event = real(cq, tag, deadline, reserved);
  AcquireCompletion(event);
  return event;
}

// grpc::internal::CallbackWithSuccessTag::StaticRun (private, inline; every
// copy is the same code).
void _ZN4grpc8internal22CallbackWithSuccessTag9StaticRunEP29grpc_completion_queue_functori(
    grpc_completion_queue_functor* tag, int ok) {
  using Fn = void (*)(grpc_completion_queue_functor*, int);
  static const Fn real = Real<Fn>(
      "_ZN4grpc8internal22CallbackWithSuccessTag9StaticRunEP29grpc_completion_queue_functori");
  __tsan_acquire(tag);
  real(tag, ok);
}

// grpc::internal::ServerCallbackCall::ScheduleOnDone(bool) and
// CallOnCancel(ServerReactor*).
void _ZN4grpc8internal18ServerCallbackCall14ScheduleOnDoneEb(void* call, bool inline_ondone) {
  using Fn = void (*)(void*, bool);
  static const Fn real = Real<Fn>("_ZN4grpc8internal18ServerCallbackCall14ScheduleOnDoneEb");
  __tsan_acquire(&Counters(call)->callbacks_outstanding);
  real(call, inline_ondone);
}

void _ZN4grpc8internal18ServerCallbackCall12CallOnCancelEPNS0_13ServerReactorE(
    void* call, grpc::internal::ServerReactor* reactor) {
  using Fn = void (*)(void*, grpc::internal::ServerReactor*);
  static const Fn real =
      Real<Fn>("_ZN4grpc8internal18ServerCallbackCall12CallOnCancelEPNS0_13ServerReactorE");
  __tsan_acquire(&Counters(call)->on_cancel_conditions_remaining);
  real(call, new CancelReleasingReactor(reactor, &Counters(call)->callbacks_outstanding));
}

}  // extern "C"

#endif  // __SANITIZE_THREAD__
