#include "common/grpc_status.h"

#include <cstdint>

#include <grpcpp/server_context.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"

namespace gemm {
namespace {

// google.rpc.Code runs from OK (0) to UNAUTHENTICATED (16).
constexpr int kMaxCode = 16;

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status StatusFromCode(int code, std::string_view message) {
  if (code == 0) return absl::OkStatus();
  const absl::string_view text(message.data(), message.size());
  if (code < 0 || code > kMaxCode) return absl::UnknownError(text);
  return absl::Status(static_cast<absl::StatusCode>(code), text);
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  return StatusFromCode(static_cast<int>(status.error_code()), status.error_message());
}

Pushback ParsePushback(std::optional<std::string_view> value) {
  Pushback out;
  if (!value.has_value()) return out;
  int64_t ms = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(value->data(), value->size())),
                        &ms) ||
      ms < 0) {
    out.kind = Pushback::Kind::kDontRetry;
    return out;
  }
  out.kind = Pushback::Kind::kDelay;
  out.delay = absl::Milliseconds(ms);
  return out;
}

std::string FormatPushback(absl::Duration delay) {
  return std::to_string(absl::ToInt64Milliseconds(delay));
}

void SetRetryPushback(grpc::ServerContextBase* context, absl::Duration delay) {
  context->AddTrailingMetadata(std::string(kRetryPushbackKey), FormatPushback(delay));
}

Pushback PushbackFromTrailers(const std::multimap<grpc::string_ref, grpc::string_ref>& trailers) {
  const auto it = trailers.find(grpc::string_ref(kRetryPushbackKey.data(), kRetryPushbackKey.size()));
  if (it == trailers.end()) return ParsePushback(std::nullopt);
  return ParsePushback(std::string_view(it->second.data(), it->second.size()));
}

}  // namespace gemm
