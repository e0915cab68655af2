#include "client/gemm_client.h"
#include "client/gemm_client_internal.h"
#include "client/targets.h"

#include <algorithm>
#include <deque>
#include <queue>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_status.h"
#include "common/proto_enums.h"

namespace gemm {

using client_internal::FailsOver;
using client_internal::HandlesOf;
using client_internal::ParseDnsTarget;
using client_internal::SplitAddressList;
namespace {

// Spreads calls over every resolved address; with a single address it
// behaves like the default pick_first.
constexpr char kServiceConfig[] = R"({"loadBalancingConfig":[{"round_robin":{}}]})";

absl::Status ValidateOptions(const ClientOptions& o, bool need_target) {
  if (need_target && o.target.empty()) return absl::InvalidArgumentError("target is empty");
  if (o.default_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("default_timeout must be positive");
  }
  if (o.max_message_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes must be positive, got ", o.max_message_bytes));
  }
  if (o.tls_cert_chain_pem.empty() != o.tls_private_key_pem.empty()) {
    return absl::InvalidArgumentError("tls_cert_chain_pem and tls_private_key_pem go together");
  }
  if (!o.tls && (!o.tls_root_certs_pem.empty() || !o.tls_cert_chain_pem.empty())) {
    return absl::InvalidArgumentError("TLS certificates are set but tls is false");
  }
  if (o.chunk_bytes == 0 || o.chunk_bytes + 4096 > static_cast<uint64_t>(o.max_message_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk_bytes must be in [1, max_message_bytes - 4096], got ", o.chunk_bytes));
  }
  if (o.transfer_channels < 1 || o.transfer_channels > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer_channels must be in [1, 64], got ", o.transfer_channels));
  }
  if (absl::Status s = o.http2.Validate(); !s.ok()) return s;
  for (char c : o.bearer_token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError("bearer_token must be printable ASCII without spaces");
    }
  }
  return ValidateRetryPolicy(o.retry);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const ClientOptions& o) {
  if (o.credentials) return o.credentials;
  if (!o.tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = o.tls_root_certs_pem;
  ssl.pem_cert_chain = o.tls_cert_chain_pem;
  ssl.pem_private_key = o.tls_private_key_pem;
  return grpc::SslCredentials(ssl);
}

constexpr char kAffinityHeader[] = "gemm-affinity";


}  // namespace

namespace client_internal {

// The replica refused the request while draining, is down, or cut the call
// off as it stopped (gRPC's bare "CANCELLED" for a call that reached a
// stopping server's transport, never its handler; the chunked path names the
// operand or the transfer in front of it, as in "problems[0].a: CANCELLED").
bool FailsOver(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kUnavailable) return true;
  if (status.code() != absl::StatusCode::kCancelled) return false;
  return status.message() == "CANCELLED" || absl::EndsWith(status.message(), ": CANCELLED");
}

}  // namespace client_internal

namespace client_internal {

std::vector<std::string> HandlesOf(const v1::GemmRequest& request) {
  std::vector<std::string> out;
  for (const v1::GemmProblem& p : request.problems()) {
    for (const v1::Matrix* m : {&p.a(), &p.b(), &p.c()}) {
      if (m->source_case() == v1::Matrix::kHandle) out.push_back(m->handle());
      // Shared-memory regions are issued like handles: to the replica
      // that mapped them.
      if (m->source_case() == v1::Matrix::kShared) out.push_back(m->shared().region());
    }
    if (p.has_output()) out.push_back(p.output().region());
  }
  return out;
}

}  // namespace client_internal

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  if (absl::Status s = ValidateOptions(options, /*need_target=*/true); !s.ok()) return s;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  args.SetServiceConfigJSON(kServiceConfig);
  if (!options.bearer_token.empty()) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  for (const auto& [name, value] : options.http2.ChannelArgs()) args.SetInt(name, value);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.max_reconnect_backoff)));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(std::min<int64_t>(
                  1000, absl::ToInt64Milliseconds(options.max_reconnect_backoff))));
  std::shared_ptr<grpc::ChannelCredentials> creds = ChannelCredentialsFor(options);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(options.target, creds, args);
  if (channel == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot create a channel to ", options.target));
  }
  std::string dns_name, dns_port;
  const bool dns = ParseDnsTarget(options.target, &dns_name, &dns_port);
  if (options.target.rfind("dns:", 0) == 0 && !dns)
    return absl::InvalidArgumentError(
        absl::StrCat("target: \"", options.target, "\" is not dns:///name:port"));
  // A replica's channels reach its one address; with TLS the certificate is
  // still checked against the name the target gave, and :authority is it.
  grpc::ChannelArguments replica_args = args;
  if (dns) {
    replica_args.SetString(GRPC_ARG_DEFAULT_AUTHORITY, absl::StrCat(dns_name, ":", dns_port));
    if (options.tls || options.credentials != nullptr)
      replica_args.SetSslTargetNameOverride(dns_name);
  }
  const bool single = !dns && SplitAddressList(options.target).size() == 1;
  ReplicaFactory make_replica = [options, creds, replica_args, single,
                                 target = options.target](const std::string& address) {
    // A single-server target keeps its own channel (and gRPC's resolution).
    const std::string channel_target = single ? target : address;
    std::shared_ptr<grpc::Channel> ch =
        grpc::CreateCustomChannel(channel_target, creds, replica_args);
    // Transfer channels: each its own connection (distinct arguments and a
    // local subchannel pool keep gRPC from sharing one between them).
    auto make_transfer_channel = [channel_target, creds, replica_args](int i) {
      grpc::ChannelArguments mine = replica_args;
      mine.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      mine.SetInt("gemm.transfer_channel", i);
      return grpc::CreateCustomChannel(channel_target, creds, mine);
    };
    return std::make_shared<Replica>(address, std::move(ch), make_transfer_channel, options);
  };
  std::vector<std::string> addresses;
  if (!dns) addresses = SplitAddressList(options.target);
  return std::unique_ptr<Client>(new Client(std::move(channel), options, std::move(make_replica),
                                            std::move(addresses), dns_name, dns_port));
}

absl::StatusOr<std::unique_ptr<Client>> Client::CreateWithChannel(
    std::shared_ptr<grpc::Channel> channel, const ClientOptions& options) {
  if (channel == nullptr) return absl::InvalidArgumentError("channel is null");
  if (absl::Status s = ValidateOptions(options, /*need_target=*/false); !s.ok()) return s;
  return std::unique_ptr<Client>(new Client(std::move(channel), options));
}

Client::Client(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options,
               ReplicaFactory make_replica, std::vector<std::string> addresses,
               std::string dns_name, std::string dns_port)
    : options_(options),
      channel_(std::move(channel)),
      make_replica_(std::move(make_replica)),
      dns_name_(std::move(dns_name)),
      dns_port_(std::move(dns_port)),
      timer_(std::make_unique<RetryTimer>()) {
  {
    absl::MutexLock lock(&replicas_mu_);
    for (const std::string& a : addresses) replicas_.push_back(make_replica_(a));
  }
  if (!dns_name_.empty()) {
    Resolve();
    resolver_ = std::thread([this] { ResolverLoop(); });
  }
}

Client::Client(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options)
    : options_(options), channel_(std::move(channel)), timer_(std::make_unique<RetryTimer>()) {
  absl::MutexLock lock(&replicas_mu_);
  replicas_.push_back(std::make_shared<Replica>(options_.target, channel_, nullptr, options_));
}

Client::~Client() {
  if (resolver_.joinable()) {
    {
      absl::MutexLock lock(&replicas_mu_);
      stop_resolver_ = true;
    }
    resolver_.join();
  }
  std::vector<std::shared_ptr<AsyncCall>> live;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    for (auto& [ptr, weak] : calls_) {
      if (std::shared_ptr<AsyncCall> call = weak.lock()) live.push_back(std::move(call));
    }
  }
  // Cancel first: a pending retry that the flush starts must find its call
  // cancelled, or it would run a fresh attempt.
  for (const auto& call : live) call->Cancel();
  timer_->Flush();
  live.clear();
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](absl::flat_hash_map<AsyncCall*, std::weak_ptr<AsyncCall>>* calls) {
          return calls->empty();
        },
        &calls_));
  }
  timer_.reset();
}

absl::Status Client::RunRequest(
    const CallOptions& options, const std::vector<std::string>& handles,
    const std::function<absl::Status(const Route&, const CallOptions&)>& body) {
  const absl::Time deadline = DeadlineFor(options);
  CallOptions within = options;
  within.deadline = deadline;
  std::shared_ptr<Replica> avoid;
  for (int attempt = 1;; ++attempt) {
    Route route;
    if (handles.empty()) {
      absl::StatusOr<std::shared_ptr<Replica>> r = PickReplica(avoid.get());
      if (!r.ok()) return r.status();
      route.replica = *r;
      route.key = options_.affinity_header ? NewAffinityKey() : "";
    } else {
      absl::StatusOr<Route> r = RouteForHandle(handles[0], within);
      if (!r.ok()) return r.status();
      if (handles.size() > 1) {
        absl::StatusOr<std::shared_ptr<Replica>> owner = OwnerOf(handles, within);
        if (!owner.ok()) return owner.status();
      }
      route = *std::move(r);
    }
    Replica& replica = *route.replica;
    replica.requests.fetch_add(1);
    replica.outstanding.fetch_add(1);
    const absl::Status status = body(route, within);
    replica.outstanding.fetch_sub(1);
    // Behind an L7 proxy, a call of this request that the proxy sent to
    // another backend finds the request's own uploads missing: the request
    // can run again, whole.
    const bool moved = handles.empty() && status.code() == absl::StatusCode::kFailedPrecondition &&
                       absl::StrContains(status.message(), "belongs to another server");
    if (status.ok() || !(FailsOver(status) || moved)) return status;
    if (!moved) replica.MarkDown(absl::Now() + options_.replica_backoff);
    if (!dns_name_.empty()) {
      absl::MutexLock lock(&replicas_mu_);
      resolve_now_ = true;
    }
    // Its matrices live there: another replica cannot take it. With one
    // replica the calls' own retries were the retries.
    if (!handles.empty() || !options.retry || ActiveReplicas() < 2) return status;
    double uniform;
    {
      absl::MutexLock lock(&mu_);
      uniform = absl::Uniform(bitgen_, 0.0, 1.0);
    }
    // As UNAVAILABLE: gRPC's bare CANCELLED from a stopping server and the
    // moved request are retryable here, on another replica, though not on
    // the same one.
    std::optional<absl::Duration> delay =
        NextRetryDelay(options_.retry, attempt, absl::UnavailableError(status.message()),
                       Pushback{}, absl::Now(), deadline, uniform);
    if (!delay.has_value()) return status;
    replica.failed_over.fetch_add(1);
    retries_.fetch_add(1);
    // Another replica is up: go there at once.
    if (UsableReplicas(&replica) > 0) delay = absl::ZeroDuration();
    absl::SleepFor(*delay);
    avoid = route.replica;
  }
}

absl::Time Client::DeadlineFor(const CallOptions& options) const {
  if (options.deadline.has_value()) return *options.deadline;
  return absl::Now() + options.timeout.value_or(options_.default_timeout);
}

void Client::PrepareContext(grpc::ClientContext* ctx, const CallOptions& options,
                            absl::Time deadline, const std::string& affinity_key) const {
  if (deadline != absl::InfiniteFuture()) ctx->set_deadline(absl::ToChronoTime(deadline));
  ctx->set_wait_for_ready(options.wait_for_ready);
  if (!options_.bearer_token.empty()) {
    ctx->AddMetadata("authorization", "Bearer " + options_.bearer_token);
  }
  if (options_.affinity_header && !affinity_key.empty())
    ctx->AddMetadata(kAffinityHeader, affinity_key);
}

std::optional<absl::Duration> Client::RetryDelay(const CallOptions& options, int attempts_made,
                                                 const absl::Status& status,
                                                 const grpc::ClientContext& ctx,
                                                 absl::Time deadline, bool fail_over) {
  if (!options.retry) return std::nullopt;
  if (fail_over && status.code() == absl::StatusCode::kUnavailable) return std::nullopt;
  const Pushback pushback = PushbackFromTrailers(ctx.GetServerTrailingMetadata());
  double uniform;
  {
    absl::MutexLock lock(&mu_);
    uniform = absl::Uniform(bitgen_, 0.0, 1.0);
  }
  std::optional<absl::Duration> delay = NextRetryDelay(
      options_.retry, attempts_made, status, pushback, absl::Now(), deadline, uniform);
  if (delay.has_value()) retries_.fetch_add(1);
  return delay;
}

absl::Status Client::CallWithRetry(
    const CallOptions& options, const Route& route,
    const std::function<grpc::Status(grpc::ClientContext*)>& attempt, bool fail_over) {
  const absl::Time deadline = DeadlineFor(options);
  // Failing over needs somewhere to go.
  fail_over = fail_over && UsableReplicas(route.replica.get()) > 0;
  for (int attempts = 1;; ++attempts) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, options, deadline, route.key);
    const absl::Status status = FromGrpcStatus(attempt(&ctx));
    if (status.ok()) return status;
    const std::optional<absl::Duration> delay =
        RetryDelay(options, attempts, status, ctx, deadline, fail_over);
    if (!delay.has_value()) return status;
    absl::SleepFor(*delay);
  }
}

GemmResult Client::GemmOnce(const Route& route, const v1::GemmRequest& request,
                            const CallOptions& options, bool fail_over) {
  v1::GemmResponse response;
  absl::Status status = CallWithRetry(
      options, route,
      [&](grpc::ClientContext* ctx) { return route.replica->stub->Gemm(ctx, request, &response); },
      fail_over);
  if (!status.ok()) return status;
  if (request.keep_results())
    for (const v1::GemmResult& r : response.results())
      if (!r.handle().empty()) NoteHandle(route, r.handle());
  return response;
}

GemmResult Client::Gemm(const v1::GemmRequest& request, const CallOptions& options) {
  if (options_.deterministic && !request.has_deterministic()) {
    v1::GemmRequest with = request;
    with.set_deterministic(*options_.deterministic);
    return Gemm(with, options);
  }
  const std::vector<std::string> handles = HandlesOf(request);
  const bool chunked = NeedsChunks(request);
  GemmResult result = absl::UnknownError("no attempt");
  absl::Status status = RunRequest(options, handles, [&](const Route& route, const CallOptions& within) {
    result = chunked ? GemmChunked(route, request, within)
                     : GemmOnce(route, request, within, /*fail_over=*/handles.empty());
    return result.status();
  });
  if (!status.ok()) return status;
  return result;
}

absl::StatusOr<v1::ServerInfo> Client::GetServerInfo(const CallOptions& options) {
  v1::ServerInfo info;
  absl::Status status = RunRequest(options, {}, [&](const Route& route, const CallOptions& within) {
    absl::Status st = CallWithRetry(
        within, route,
        [&](grpc::ClientContext* ctx) {
          return route.replica->stub->GetServerInfo(ctx, v1::GetServerInfoRequest(), &info);
        },
        /*fail_over=*/true);
    if (st.ok()) route.replica->SetInstance(info.instance_id());
    return st;
  });
  if (!status.ok()) return status;
  return info;
}

absl::StatusOr<ResidentHandle> Client::RegisterMatrix(const MatrixView& matrix,
                                                      absl::string_view label,
                                                      const CallOptions& options) {
  return RegisterAs(matrix, nullptr, label, options);
}

absl::StatusOr<ResidentHandle> Client::RegisterQuantized(const MatrixView& matrix,
                                                         const Fp8Quantization& quantize,
                                                         absl::string_view label,
                                                         const CallOptions& options) {
  return RegisterAs(matrix, &quantize, label, options);
}

absl::StatusOr<ResidentHandle> Client::RegisterAs(const MatrixView& matrix,
                                                  const Fp8Quantization* quantize,
                                                  absl::string_view label,
                                                  const CallOptions& options) {
  if (absl::Status s = matrix.Validate("matrix"); !s.ok()) return s;
  const uint64_t bytes = matrix.ref().bytes();
  if ((options_.chunked_threshold_bytes != 0 && bytes >= options_.chunked_threshold_bytes) ||
      bytes + 4096 > static_cast<uint64_t>(options_.max_message_bytes)) {
    absl::StatusOr<ResidentHandle> result = absl::UnknownError("no attempt");
    absl::Status status =
        RunRequest(options, {}, [&](const Route& route, const CallOptions& within) {
          result = UploadMatrixOn(route, matrix, /*transient=*/false, label, within,
                                  /*fail_over=*/true, quantize);
          return result.status();
        });
    if (!status.ok()) return status;
    return result;
  }
  v1::RegisterMatrixRequest request;
  if (quantize != nullptr) *request.mutable_quantize() = ToProto(*quantize);
  request.set_dtype(ToProto(matrix.dtype()));
  request.set_rows(matrix.rows());
  request.set_cols(matrix.cols());
  request.set_layout(ToProto(matrix.layout()));
  request.mutable_data()->assign(static_cast<const char*>(matrix.data()), matrix.ref().bytes());
  if (!label.empty()) request.set_label(std::string(label));
  v1::RegisterMatrixResponse response;
  absl::Status status = RunRequest(options, {}, [&](const Route& route, const CallOptions& within) {
    absl::Status st = CallWithRetry(
        within, route,
        [&](grpc::ClientContext* ctx) {
          return route.replica->stub->RegisterMatrix(ctx, request, &response);
        },
        /*fail_over=*/true);
    if (st.ok()) NoteHandle(route, response.handle());
    return st;
  });
  if (!status.ok()) return status;
  return ResidentHandle{response.handle(), matrix.rows(), matrix.cols(), matrix.layout(),
                        quantize != nullptr ? quantize->format : matrix.dtype(),
                        response.bytes()};
}

absl::Status Client::ReleaseMatrix(const ResidentHandle& matrix, const CallOptions& options) {
  return ReleaseMatrix(matrix.handle, options);
}

absl::Status Client::ReleaseMatrix(const std::string& handle, const CallOptions& options) {
  absl::Status status = RunRequest(options, {handle}, [&](const Route& route, const CallOptions& within) {
    return ReleaseOn(route, handle, within);
  });
  return status;
}

absl::Status Client::ReleaseOn(const Route& route, const std::string& handle,
                               const CallOptions& options) {
  v1::ReleaseMatrixRequest request;
  request.set_handle(handle);
  v1::ReleaseMatrixResponse response;
  absl::Status status = CallWithRetry(options, route, [&](grpc::ClientContext* ctx) {
    return route.replica->stub->ReleaseMatrix(ctx, request, &response);
  });
  if (status.ok() || status.code() == absl::StatusCode::kNotFound) {
    absl::MutexLock lock(&mu_);
    handle_keys_.erase(handle);
  }
  return status;
}

}  // namespace gemm
