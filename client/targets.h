// What a client target names and what a handle says of its server: target
// strings split into replicas, "dns:" targets parsed and resolved, the
// server instance in a handle. Private to the client library.
#ifndef GEMM_CLIENT_TARGETS_H_
#define GEMM_CLIENT_TARGETS_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gemm {
namespace client_internal {

// The replicas a target names: an "ipv4:"/"ipv6:" list gives one channel
// target per address; anything else is one replica on the target itself
// ("dns:" targets are resolved by the client, see Client::Resolve).
std::vector<std::string> SplitAddressList(const std::string& target);

// "dns:///name:port", "dns://authority/name:port" or "dns:name:port": the
// name and port (443 when none is given), or false for another target.
bool ParseDnsTarget(const std::string& target, std::string* name, std::string* port);

// The channel targets ("ipv4:a.b.c.d:port", "ipv6:[::1]:port") `name`
// resolves to, sorted and without repeats, or UNAVAILABLE naming it.
absl::StatusOr<std::vector<std::string>> ResolveName(const std::string& name,
                                                     const std::string& port);

// The server instance a handle names ("<16 hex>-<32 hex>", gemm.proto's
// RegisterMatrixResponse), or empty for a handle without one.
std::string_view HandleInstance(std::string_view handle);

}  // namespace client_internal
}  // namespace gemm

#endif  // GEMM_CLIENT_TARGETS_H_
