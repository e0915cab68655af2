#include "service/rpc/gemm_calls.h"

#include <chrono>

namespace gemm::rpc {

absl::Time DeadlineOf(const grpc::CallbackServerContext& context) {
  const auto d = context.deadline();
  if (d >= std::chrono::system_clock::time_point::max() - std::chrono::hours(24 * 365))
    return absl::InfiniteFuture();
  return absl::FromChrono(d);
}

absl::Status ParseRequest(const grpc::ByteBuffer* bytes, v1::GemmRequest* request) {
  grpc::ByteBuffer* ours = const_cast<grpc::ByteBuffer*>(bytes);
  if (!grpc::SerializationTraits<v1::GemmRequest>::Deserialize(ours, request).ok())
    return absl::InvalidArgumentError(
        "the message did not parse as a gemm.v1.GemmRequest (corrupt or not that message)");
  return absl::OkStatus();
}

grpc::Status SerializeResponse(const v1::GemmResponse& response, grpc::ByteBuffer* bytes) {
  bool own_buffer;
  return grpc::SerializationTraits<v1::GemmResponse>::Serialize(response, bytes, &own_buffer);
}

}  // namespace gemm::rpc
