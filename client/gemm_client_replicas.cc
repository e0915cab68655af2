// Client's replica set: resolving a "dns:" target, picking a replica for a
// call, and routing a call on a handle to the replica that owns it.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/gemm_client.h"
#include "client/gemm_client_internal.h"
#include "client/targets.h"

namespace gemm {

using client_internal::HandleInstance;
using client_internal::ResolveName;

void Client::Resolve() {
  absl::StatusOr<std::vector<std::string>> found = ResolveName(dns_name_, dns_port_);
  absl::MutexLock lock(&replicas_mu_);
  if (!found.ok()) {
    // Keep the last set: a lookup failing for a moment must not drop
    // replicas that still serve.
    resolve_error_ = std::string(found.status().message());
    return;
  }
  resolve_error_.clear();
  for (const std::shared_ptr<Replica>& r : replicas_)
    r->active.store(std::find(found->begin(), found->end(), r->address) != found->end());
  for (const std::string& a : *found) {
    const bool known = std::any_of(replicas_.begin(), replicas_.end(),
                                   [&](const auto& r) { return r->address == a; });
    if (!known) replicas_.push_back(make_replica_(a));
  }
}

void Client::ResolverLoop() {
  while (true) {
    {
      absl::MutexLock lock(&replicas_mu_);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(replicas_mu_) {
        return stop_resolver_ || resolve_now_;
      };
      replicas_mu_.AwaitWithTimeout(absl::Condition(&wake), options_.resolve_interval);
      if (stop_resolver_) return;
      resolve_now_ = false;
    }
    Resolve();
    // At most one lookup a second, however often replicas fail.
    absl::MutexLock lock(&replicas_mu_);
    auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(replicas_mu_) { return stop_resolver_; };
    replicas_mu_.AwaitWithTimeout(absl::Condition(&stop), absl::Seconds(1));
    if (stop_resolver_) return;
  }
}

std::vector<Client::ReplicaStats> Client::Replicas() const {
  absl::MutexLock lock(&replicas_mu_);
  std::vector<ReplicaStats> out;
  for (const std::shared_ptr<Replica>& r : replicas_) {
    ReplicaStats s;
    s.address = r->address;
    s.instance_id = r->instance();
    s.requests = r->requests.load();
    s.failed_over = r->failed_over.load();
    s.active = r->active.load();
    out.push_back(std::move(s));
  }
  return out;
}

size_t Client::ActiveReplicas() const {
  absl::MutexLock lock(&replicas_mu_);
  return std::count_if(replicas_.begin(), replicas_.end(),
                       [](const auto& r) { return r->active.load(); });
}

size_t Client::UsableReplicas(const Replica* except) const {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&replicas_mu_);
  size_t n = 0;
  for (const std::shared_ptr<Replica>& r : replicas_)
    if (r.get() != except && r->Usable(now)) ++n;
  return n;
}

absl::StatusOr<std::shared_ptr<Client::Replica>> Client::PickReplica(const Replica* avoid) {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&replicas_mu_);
  std::vector<std::shared_ptr<Replica>> usable, active;
  for (const std::shared_ptr<Replica>& r : replicas_) {
    if (!r->active.load()) continue;
    active.push_back(r);
    if (r.get() != avoid && r->Usable(now)) usable.push_back(r);
  }
  // None known to be up: try any of the set (one may have come back; the
  // attempt tells), the one just tried last.
  if (usable.empty()) {
    for (const std::shared_ptr<Replica>& r : active)
      if (r.get() != avoid) usable.push_back(r);
  }
  if (usable.empty()) usable = active;
  if (usable.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "target \"", options_.target, "\" names no replica",
        resolve_error_.empty() ? "" : absl::StrCat(" (", resolve_error_, ")")));
  }
  const uint64_t turn = next_replica_++;
  if (options_.replica_policy == ClientOptions::ReplicaPolicy::kRoundRobin)
    return usable[turn % usable.size()];
  // Fewest outstanding; among equals, in turn. The counts are read once:
  // other threads change them meanwhile, and a second read could leave no
  // replica equal to the minimum of the first.
  std::vector<int> outstanding(usable.size());
  for (size_t i = 0; i < usable.size(); ++i) outstanding[i] = usable[i]->outstanding.load();
  const int fewest = *std::min_element(outstanding.begin(), outstanding.end());
  std::vector<std::shared_ptr<Replica>> least;
  for (size_t i = 0; i < usable.size(); ++i)
    if (outstanding[i] == fewest) least.push_back(usable[i]);
  return least[turn % least.size()];
}

absl::StatusOr<std::shared_ptr<Client::Replica>> Client::OwnerOf(
    const std::vector<std::string>& handles, const CallOptions& options) {
  std::shared_ptr<Replica> owner;
  for (const std::string& h : handles) {
    absl::StatusOr<Route> r = RouteForHandle(h, options);
    if (!r.ok()) return r.status();
    if (owner != nullptr && owner != r->replica)
      return absl::InvalidArgumentError(absl::StrCat(
          "the request names handles of two servers (", owner->address, " and ",
          r->replica->address, "): one request's matrices must live on one replica"));
    owner = r->replica;
  }
  return owner;
}

absl::StatusOr<Client::Route> Client::RouteForHandle(const std::string& handle,
                                                     const CallOptions& options) {
  Route route;
  {
    absl::MutexLock lock(&mu_);
    auto it = handle_keys_.find(handle);
    route.key = it != handle_keys_.end() ? it->second : std::string(HandleInstance(handle));
  }
  const std::string_view instance = HandleInstance(handle);
  std::vector<std::shared_ptr<Replica>> all;
  {
    absl::MutexLock lock(&replicas_mu_);
    all = replicas_;
  }
  // One server, or a handle that names none (an older server): nothing to
  // choose.
  if (all.size() == 1 || instance.empty()) {
    absl::StatusOr<std::shared_ptr<Replica>> r =
        all.size() == 1 ? absl::StatusOr<std::shared_ptr<Replica>>(all[0]) : PickReplica(nullptr);
    if (!r.ok()) return r.status();
    route.replica = *r;
    return route;
  }
  for (const auto& r : all)
    if (r->instance() == instance) {
      route.replica = r;
      return route;
    }
  // Not one of ours yet (another client object made it): ask each replica of
  // the set who it is, those not yet known first.
  for (bool unknown_only : {true, false}) {
    for (const auto& r : all) {
      if (!r->active.load() || (unknown_only && !r->instance().empty())) continue;
      grpc::ClientContext ctx;
      PrepareContext(&ctx, options,
                     std::min(DeadlineFor(options), absl::Now() + absl::Seconds(2)));
      v1::ServerInfo info;
      if (r->stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok())
        r->SetInstance(info.instance_id());
      if (r->instance() == instance) {
        route.replica = r;
        return route;
      }
    }
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "handle \"", handle, "\" belongs to server instance ", std::string(instance),
      ", which is not among the replicas of \"", options_.target,
      "\" now (it restarted or left the set: its matrices are gone)"));
}

void Client::NoteHandle(const Route& route, const std::string& handle) {
  route.replica->SetInstance(HandleInstance(handle));
  if (!options_.affinity_header) return;
  absl::MutexLock lock(&mu_);
  handle_keys_[handle] = route.key;
}

std::string Client::NewAffinityKey() {
  absl::MutexLock lock(&mu_);
  return absl::StrFormat("%016x", absl::Uniform<uint64_t>(bitgen_));
}
}  // namespace gemm
