// Client's shared-memory calls (client/shared_memory.h).
#include "absl/strings/str_cat.h"
#include "client/gemm_client.h"
#include "client/gemm_client_internal.h"

namespace gemm {

absl::StatusOr<std::string> Client::RegisterSharedMemory(const SharedMemory& memory,
                                                         absl::string_view label,
                                                         const CallOptions& options) {
  const v1::RegisterSharedMemoryRequest request = memory.RegisterRequest(std::string(label));
  v1::RegisterSharedMemoryResponse response;
  absl::Status status = RunRequest(options, {}, [&](const Route& route, const CallOptions& within) {
    absl::Status st = CallWithRetry(
        within, route,
        [&](grpc::ClientContext* ctx) {
          return route.replica->stub->RegisterSharedMemory(ctx, request, &response);
        },
        /*fail_over=*/true);
    if (st.ok()) NoteHandle(route, response.region());
    return st;
  });
  if (!status.ok()) return status;
  return response.region();
}

absl::Status Client::UnregisterSharedMemory(const std::string& region,
                                            const CallOptions& options) {
  v1::UnregisterSharedMemoryRequest request;
  request.set_region(region);
  return RunRequest(options, {region}, [&](const Route& route, const CallOptions& within) {
    v1::UnregisterSharedMemoryResponse response;
    absl::Status st = CallWithRetry(within, route, [&](grpc::ClientContext* ctx) {
      return route.replica->stub->UnregisterSharedMemory(ctx, request, &response);
    });
    if (st.ok() || st.code() == absl::StatusCode::kNotFound) {
      absl::MutexLock lock(&mu_);
      handle_keys_.erase(region);
    }
    return st;
  });
}

}  // namespace gemm
