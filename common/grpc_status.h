// The one home of the service's status plumbing, linked by the server and the
// client alike: Abseil <-> gRPC status conversions and the retry pushback
// trailer (`grpc-retry-pushback-ms`) the server writes and the client reads.
//
// Abseil and gRPC share numeric codes (both follow google.rpc.Code), so the
// conversions map by value. Each function is defined once, here, so that one
// binary can link both the client and the server (in-process tests do).
#ifndef GEMM_COMMON_GRPC_STATUS_H_
#define GEMM_COMMON_GRPC_STATUS_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <grpcpp/support/status.h>
#include <grpcpp/support/string_ref.h>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace grpc {
class ServerContextBase;
}  // namespace grpc

namespace gemm {

// absl::Status -> grpc::Status (same code and message).
grpc::Status ToGrpcStatus(const absl::Status& status);

// grpc::Status -> absl::Status (same code and message).
absl::Status FromGrpcStatus(const grpc::Status& status);

// A status carried inside a message as (code, message), as GemmResponse does
// on GemmStream. Codes outside the known range become UNKNOWN.
absl::Status StatusFromCode(int code, std::string_view message);

// Trailing metadata key with which the server asks the client to wait before
// retrying: a decimal number of milliseconds; negative means "do not retry".
inline constexpr std::string_view kRetryPushbackKey = "grpc-retry-pushback-ms";

// The server's pushback hint, parsed from the value of kRetryPushbackKey.
struct Pushback {
  enum class Kind {
    kAbsent,     // no hint: use the policy's backoff
    kDelay,      // wait exactly `delay`
    kDontRetry,  // negative or unparseable: the server asks not to retry
  };
  Kind kind = Kind::kAbsent;
  absl::Duration delay = absl::ZeroDuration();
};

// `value` is std::nullopt when the key is absent.
Pushback ParsePushback(std::optional<std::string_view> value);

// The value the server writes for `delay`: whole milliseconds, truncated
// toward zero (a negative delay asks the client not to retry).
std::string FormatPushback(absl::Duration delay);

// Server side: adds the kRetryPushbackKey trailer for `delay` to the call.
void SetRetryPushback(grpc::ServerContextBase* context, absl::Duration delay);

// Client side: the pushback in a call's trailing metadata (as
// grpc::ClientContext::GetServerTrailingMetadata() returns it).
Pushback PushbackFromTrailers(const std::multimap<grpc::string_ref, grpc::string_ref>& trailers);

}  // namespace gemm

#endif  // GEMM_COMMON_GRPC_STATUS_H_
