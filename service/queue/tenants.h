// Tenants: who shares the server, with what weight and under what limits.
//
// A tenant is a set of callers (the identities caller_identity.h derives:
// a bearer-token caller, or "x509:<subject>" for a mutual-TLS client). The
// queue (request_queue.h) serves backlogged tenants in proportion to their
// weights, measured in predicted device time, and refuses a tenant's
// request that would take it over one of its limits.
//
// The tenants file (gemm_server --tenants_file) is plain text, one directive
// per line; '#' starts a comment, blank lines are ignored:
//
//   tenant <name> [key=value ...]
//   default <name>
//
// `tenant` defines a tenant. <name> is [A-Za-z0-9._@-]+, at most 64
// characters; it is the tenant's metrics label. Keys (each at most once,
// except `caller`):
//   caller=<identity>        a caller of this tenant; repeatable. Without
//                            any, the tenant's one caller is <name> itself.
//                            A value with spaces goes in double quotes:
//                            caller="x509:CN=build bot,O=Example".
//   weight=<number>          share of the device under contention, relative
//                            to the other backlogged tenants; default 1.
//   max_inflight_bytes=<n>   operand and result bytes of its admitted
//                            requests, queued or running; n is an integer
//                            with an optional suffix KB, MB, GB, TB (powers
//                            of 1000) or KiB, MiB, GiB, TiB (powers of 1024).
//   max_requests_in_flight=<n>  its admitted requests, queued or running.
//   max_resident_bytes=<n>   bytes of the matrices its callers hold on the
//                            server (RegisterMatrix, BeginUpload, kept
//                            results); a byte count as above.
//   max_flops_per_s=<number> sustained FLOP/s admitted (a token bucket).
//   flops_burst=<number>     the bucket's size in FLOPs; default one second
//                            of max_flops_per_s. Needs max_flops_per_s.
// A limit left out is unlimited.
//
// `default <name>` names the tenant of every caller no tenant lists,
// anonymous callers included (where the server allows them). Without it
// they form the tenant "other" (weight 1, no limits), which a `tenant other`
// line may configure. Metrics label tenants by name, so the label takes
// only the configured names and "other".
//
// Errors name the source, the line and the field at fault.
#ifndef GEMM_SERVICE_QUEUE_TENANTS_H_
#define GEMM_SERVICE_QUEUE_TENANTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gemm {

// The tenant of callers nobody lists, unless `default` names another.
inline constexpr char kOtherTenant[] = "other";

struct TenantLimits {
  uint64_t max_inflight_bytes = 0;      // 0: unlimited
  uint32_t max_requests_in_flight = 0;  // 0: unlimited
  uint64_t max_resident_bytes = 0;      // 0: unlimited
  double max_flops_per_s = 0;           // 0: unlimited
  double flops_burst = 0;               // set whenever max_flops_per_s is
};

struct TenantSpec {
  std::string name;
  double weight = 1;
  TenantLimits limits;
  std::vector<std::string> callers;
  int line = 0;  // where the file defines it; 0 for the implicit "other"
};

class TenantsConfig {
 public:
  // Parses the text of a tenants file; `source` names it in errors
  // ("tenants.txt:7: ...").
  static absl::StatusOr<TenantsConfig> Parse(absl::string_view text, absl::string_view source);
  // Reads and parses the file at `path`.
  static absl::StatusOr<TenantsConfig> Load(const std::string& path);

  // The tenant of `caller` (any string: an unlisted one, "" or a peer
  // address falls to the default tenant). Never null.
  const TenantSpec& Resolve(absl::string_view caller) const;
  // The tenant named `name`, or null.
  const TenantSpec* Find(absl::string_view name) const;
  // Every tenant, in file order, and "other" last when no line defines it.
  const std::vector<TenantSpec>& tenants() const { return tenants_; }
  const std::string& default_tenant() const { return tenants_[default_].name; }
  // One line for logs: "a(weight 3) b(weight 1) other(weight 1); unlisted
  // callers: other".
  std::string Summary() const;

 private:
  TenantsConfig() = default;

  std::vector<TenantSpec> tenants_;
  size_t default_ = 0;  // index into tenants_
  absl::flat_hash_map<std::string, size_t> by_caller_;
  absl::flat_hash_map<std::string, size_t> by_name_;
};

}  // namespace gemm

#endif  // GEMM_SERVICE_QUEUE_TENANTS_H_
