// RegisterSharedMemory and UnregisterSharedMemory: same-host clients'
// memory mapped into the server (shared_memory_store.h).
#include <string>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "service/rpc/gemm_service.h"
#include "service/security/caller_identity.h"

namespace gemm {

grpc::ServerUnaryReactor* GemmServiceImpl::RegisterSharedMemory(
    grpc::CallbackServerContext* context, const v1::RegisterSharedMemoryRequest* request,
    v1::RegisterSharedMemoryResponse* response) {
  const absl::Time received = clock_->Now();
  absl::Status st;
  if (shared_memory() == nullptr) {
    st = absl::UnimplementedError("this server keeps no shared memory");
  } else if (draining()) {
    st = RefuseDraining("RegisterSharedMemory");
  } else if (!IsSameHostPeer(context->peer())) {
    st = absl::PermissionDeniedError(absl::StrCat(
        "shared memory is for clients on the server's host, over loopback or a Unix socket; "
        "this call came from ", context->peer()));
  } else if (request->has_label() && request->label().size() > 256) {
    st = absl::InvalidArgumentError("label: longer than 256 bytes");
  } else {
    const std::string caller = CallerIdentity(*context);
    auto registered = shared_memory()->Register(caller, request->pid(), request->fd(),
                                               request->bytes(), request->token());
    if (registered.ok()) {
      response->set_region(registered->region);
      response->set_bytes(registered->bytes);
      spdlog::debug("mapped {} bytes of shared memory of process {} (label \"{}\") for \"{}\"",
                    registered->bytes, request->pid(), request->label(), caller);
    }
    st = registered.status();
  }
  return FinishUnary(context, "RegisterSharedMemory", st, received);
}

grpc::ServerUnaryReactor* GemmServiceImpl::UnregisterSharedMemory(
    grpc::CallbackServerContext* context, const v1::UnregisterSharedMemoryRequest* request,
    v1::UnregisterSharedMemoryResponse*) {
  const absl::Time received = clock_->Now();
  absl::Status st = absl::UnimplementedError("this server keeps no shared memory");
  if (shared_memory() != nullptr) {
    st = shared_memory()->Unregister(CallerIdentity(*context), request->region());
    if (!st.ok()) st = absl::Status(st.code(), absl::StrCat("region: ", st.message()));
  }
  return FinishUnary(context, "UnregisterSharedMemory", st, received);
}

}  // namespace gemm
