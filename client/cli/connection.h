// The client the flags describe (target, replicas, TLS, token, deadlines,
// retries), and what the CLI asks of the server before it sends a request.
#ifndef GEMM_CLIENT_CLI_CONNECTION_H_
#define GEMM_CLIENT_CLI_CONNECTION_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cli/shared_requests.h"
#include "client/gemm_client.h"
#include "proto/gemm/v1/gemm.pb.h"

namespace gemm::cli {

// `s` with the client library's option names in its message replaced by the
// CLI flags that set them.
absl::Status FlagNames(const absl::Status& s);

// A client for --target with the flags' security, deadline, retry and
// replica settings; INVALID_ARGUMENT naming the flag when one is wrong.
absl::StatusOr<std::unique_ptr<Client>> MakeClient();

// The limits to check shapes against: the server's when GetServerInfo
// answers, else the local ones (and a note on stderr saying so).
struct CheckLimits {
  v1::Limits limits;
  bool from_server = false;
};
CheckLimits FetchLimits(Client* client);

// With --shared_memory, `request` placed in a new shared-memory region with
// `slots` copies (one per request in flight); null without the flag, or
// after saying why on stderr when the region could not be set up (the
// bytes then go in messages).
std::unique_ptr<SharedRequests> SharedOrNull(Client* client, const v1::GemmRequest& request,
                                             int slots);

}  // namespace gemm::cli

#endif  // GEMM_CLIENT_CLI_CONNECTION_H_
