// gemm.v1.Transfer: the bytes of resident matrices in chunks (Upload,
// Download), for operands and results too large for one message.
//
// Served through gRPC's generic callback API rather than generated code, so
// that chunk bytes go straight between gRPC's buffers and the matrix's memory
// (common/chunk_wire.h) instead of through a protobuf message's string. The
// wire format is still the gemm.v1.Chunk message of the proto file. Method
// names this service does not know get UNIMPLEMENTED, as gRPC would answer.
#ifndef GEMM_SERVICE_RPC_TRANSFER_SERVICE_H_
#define GEMM_SERVICE_RPC_TRANSFER_SERVICE_H_

#include <atomic>
#include <cstdint>

#include <grpcpp/generic/async_generic_service.h>

#include "service/base/clock.h"
#include "service/base/limits.h"
#include "service/observe/call_log.h"
#include "service/observe/metrics.h"
#include "service/store/resident_store.h"

namespace gemm {

// Largest chunk a Transfer stream may carry in one message: the message limit
// less room for the chunk's other fields.
inline uint64_t MaxChunkBytes(const ServiceLimits& limits) {
  return limits.max_message_bytes > 4096 ? limits.max_message_bytes - 4096 : 1;
}

class TransferService final : public grpc::CallbackGenericService {
 public:
  static constexpr char kUploadMethod[] = "/gemm.v1.Transfer/Upload";
  static constexpr char kDownloadMethod[] = "/gemm.v1.Transfer/Download";
  // Trailing metadata of a Download stream that honoured
  // DownloadRequest.release_after_download.
  static constexpr char kReleaseAfterDownloadKey[] = "gemm-release-after-download";
  // Chunk size of a Download that asks for none.
  static constexpr uint64_t kDefaultDownloadChunkBytes = uint64_t{4} << 20;

  // `residents` (may be null: every call then fails UNIMPLEMENTED), `metrics`
  // and `clock` must outlive the service.
  TransferService(const ServiceLimits& limits, ResidentStore* residents,
                  ServiceMetrics* metrics, const Clock* clock);

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override;

  const ServiceLimits& limits() const { return limits_; }
  ResidentStore* residents() const { return residents_; }
  ServiceMetrics* metrics() const { return metrics_; }
  const Clock* clock() const { return clock_; }
  // Where failed streams are logged (may be null: not logged). Set before
  // the service serves; `log` must outlive it.
  void set_call_log(CallLog* log) { call_log_ = log; }
  CallLog* call_log() const { return call_log_; }
  // Upload and Download streams running now (a drain waits for them).
  int active_streams() const { return active_.load(); }

  // Implementation details follow.
  std::atomic<int> active_{0};

 private:
  const ServiceLimits limits_;
  ResidentStore* const residents_;
  ServiceMetrics* const metrics_;
  const Clock* const clock_;
  CallLog* call_log_ = nullptr;
};

}  // namespace gemm

#endif  // GEMM_SERVICE_RPC_TRANSFER_SERVICE_H_
