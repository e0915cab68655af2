// gemm::Client: a thin C++ client of gemm.v1.GemmService.
//
//   gemm::ClientOptions options;
//   options.target = "localhost:50051";
//   GEMM_ASSIGN_OR_RETURN(std::unique_ptr<gemm::Client> client, gemm::Client::Create(options));
//   gemm::v1::GemmRequest request;
//   GEMM_RETURN_IF_ERROR(gemm::AddProblem(&request, a_view, b_view));
//   GEMM_ASSIGN_OR_RETURN(gemm::v1::GemmResponse response, client->Gemm(request));
//   GEMM_ASSIGN_OR_RETURN(std::vector<float> d, gemm::ReadResult(response.results(0)));
//
// Every call has a deadline (CallOptions, else ClientOptions::default_timeout)
// and is retried on UNAVAILABLE and RESOURCE_EXHAUSTED with exponential backoff
// and jitter, waiting instead as long as the server's pushback asks
// (retry_policy.h). A retry never starts past the deadline; the deadline
// covers all attempts together. Statuses are absl::Status with gRPC's codes.
#ifndef GEMM_CLIENT_GEMM_CLIENT_H_
#define GEMM_CLIENT_GEMM_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/chunked_transfer.h"
#include "client/matrix_view.h"
#include "client/retry_policy.h"
#include "client/shared_memory.h"
#include "common/http2_tuning.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "gemm/v1/gemm.pb.h"

namespace gemm {

struct ClientOptions {
  // Required. One server ("host:port", "unix:path"), or replicas: an address
  // list ("ipv4:10.0.0.1:50051,10.0.0.2:50051", "ipv6:...") or a name whose
  // addresses are the replicas ("dns:///name:port", re-resolved every
  // resolve_interval and whenever a replica stops answering). A request's
  // calls all go to one replica (its uploads, Gemm, downloads and releases),
  // and a call naming a handle goes to the replica that issued it; requests
  // are spread over replicas by replica_policy. A plain "host:port" is one
  // server whatever it resolves to: use "dns:///" for replicas.
  std::string target;
  // How a request that names no handle picks its replica.
  enum class ReplicaPolicy {
    // The replica with the fewest of this client's requests in flight (ties
    // in turn): a slow or loaded replica gets less.
    kLeastOutstanding,
    // Each in turn.
    kRoundRobin,
  };
  ReplicaPolicy replica_policy = ReplicaPolicy::kLeastOutstanding;
  // How often a "dns:" target's addresses are looked up again.
  absl::Duration resolve_interval = absl::Seconds(30);
  // After a replica fails a request with UNAVAILABLE (it is draining, down
  // or gone), requests avoid it this long; a request that failed so, and
  // that names no handle of that replica, is retried on another replica
  // (within ClientOptions::retry's attempts and the deadline).
  absl::Duration replica_backoff = absl::Seconds(1);
  // Longest wait between gRPC's reconnection attempts to a replica that is
  // down, so one that comes back is used again soon.
  absl::Duration max_reconnect_backoff = absl::Seconds(2);
  // Every call carries "gemm-affinity: <key>", the same key for every call of
  // one request (and for later calls naming a handle it made), so that an L7
  // proxy in front of the replicas (Envoy, a cloud balancer) can send them
  // to one backend by hashing on the header (docs/replicas.md).
  bool affinity_header = true;
  // Deadline of a call whose CallOptions set none.
  absl::Duration default_timeout = absl::Seconds(30);
  // Largest message sent or received, in bytes. The default matches the
  // server's default limit of 1 GiB plus room for the message framing.
  int max_message_bytes = (1 << 30) + (16 << 20);
  RetryPolicy retry;
  // Channel credentials; null means the TLS settings below, or plaintext when
  // `tls` is false. Takes precedence over them when set.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // TLS: the server is verified against tls_root_certs_pem (PEM; empty = the
  // system's roots). tls_cert_chain_pem and tls_private_key_pem (both or
  // neither) are the client certificate for a server that requires mutual TLS.
  bool tls = false;
  std::string tls_root_certs_pem;
  std::string tls_cert_chain_pem;
  std::string tls_private_key_pem;
  // When non-empty, every call carries "authorization: Bearer <bearer_token>".
  // The client then keeps connections of its own (a local subchannel pool):
  // the server binds each connection to one caller (service/security/auth.h).
  std::string bearer_token;

  // GemmRequest.deterministic for every Gemm and GemmAsync request that
  // leaves it unset (batch-invariant results; docs/api.md); unset leaves
  // such requests to the server's default. A request that sets the field
  // keeps it. Applying it to a const request copies the request once, so
  // callers sending large requests set the field themselves.
  std::optional<bool> deterministic;

  // Large operands and results travel in chunks (gemm.v1.Transfer) instead
  // of inside one message: Gemm uploads each operand of at least
  // `chunked_threshold_bytes` as a transient resident matrix, asks the server
  // to keep the results when they are that large, downloads them, and
  // releases everything; RegisterMatrix uploads such a matrix in chunks.
  // This lifts protobuf's 2 GiB cap and the message limit, and is faster for
  // large payloads (bench/BASELINES.md has the measurements behind the
  // defaults). Requests that would not fit in max_message_bytes always go
  // this way; 0 sends everything as one message where it fits.
  uint64_t chunked_threshold_bytes = uint64_t{4} << 20;
  // Such a Gemm is sent while its operands are still uploading, with
  // Matrix.release_after_use on them (pipelined requests, docs/api.md): the
  // server holds it until the uploads complete and releases the operands
  // when it ends, so neither a wait for the uploads nor ReleaseMatrix calls
  // stand between the request and its answer. A server that does not wait
  // (FAILED_PRECONDITION: unfinished) gets the Gemm again once the uploads
  // are done. False: upload, then Gemm, then release, one after another.
  bool pipelined_uploads = true;
  // Bytes per chunk message.
  uint64_t chunk_bytes = uint64_t{1} << 20;
  // Connections (channels with distinct arguments, so gRPC does not share
  // one) that one matrix's chunks are striped over.
  int transfer_channels = 8;
  // HTTP/2 settings of the client's connections.
  Http2Tuning http2;
};

// Per-call settings.
struct CallOptions {
  // Absolute deadline; takes precedence over `timeout`.
  std::optional<absl::Time> deadline;
  // Deadline relative to the call's start; unset means
  // ClientOptions::default_timeout.
  std::optional<absl::Duration> timeout;
  // Retry per ClientOptions::retry; false makes exactly one attempt.
  bool retry = true;
  // Queue the call while the channel connects instead of failing fast with
  // UNAVAILABLE (gRPC's wait_for_ready).
  bool wait_for_ready = false;
};

using GemmResult = absl::StatusOr<v1::GemmResponse>;
using GemmCallback = std::function<void(GemmResult)>;

class GemmStreamSession;

class Client {
 public:
  // Validates `options` (InvalidArgument naming the field) and creates the
  // channel. Connecting is lazy: an unreachable server shows up as
  // UNAVAILABLE on the first call, not here.
  static absl::StatusOr<std::unique_ptr<Client>> Create(const ClientOptions& options);
  // The same over an existing channel (e.g. an in-process one); `options.target`
  // is then informational and may be empty.
  static absl::StatusOr<std::unique_ptr<Client>> CreateWithChannel(
      std::shared_ptr<grpc::Channel> channel, const ClientOptions& options);

  // Cancels asynchronous calls still running (their callbacks get CANCELLED)
  // and waits for their callbacks to return. Stream sessions must be
  // destroyed before their client.
  ~Client();

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Blocking unary Gemm, retries included. Large operands and results go in
  // chunks (ClientOptions::chunked_threshold_bytes); the response then looks
  // the same, results in their data fields (unless the request sets
  // keep_results: then its results stay on the server and come back as
  // handles, whatever their size). The asynchronous calls and
  // streams below send one message per request.
  GemmResult Gemm(const v1::GemmRequest& request, const CallOptions& options = {});
  // Whether Gemm sends `request` the chunked way: an operand or the results
  // at or over chunked_threshold_bytes, or the request over a message.
  bool NeedsChunks(const v1::GemmRequest& request) const;

  // Non-blocking Gemm. `done` runs exactly once, on a gRPC or retry thread, so
  // it must not block for long. The request is shared, not copied: the same
  // request may be sent many times concurrently.
  void GemmAsync(std::shared_ptr<const v1::GemmRequest> request, const CallOptions& options,
                 GemmCallback done);
  void GemmAsync(v1::GemmRequest request, const CallOptions& options, GemmCallback done);
  std::future<GemmResult> GemmFuture(std::shared_ptr<const v1::GemmRequest> request,
                                     const CallOptions& options = {});
  std::future<GemmResult> GemmFuture(v1::GemmRequest request, const CallOptions& options = {});

  absl::StatusOr<v1::ServerInfo> GetServerInfo(const CallOptions& options = {});

  // Stores `matrix` on the server (in GPU memory on a GPU backend); problems
  // then name the returned handle instead of sending the bytes (Operand in
  // matrix_view.h). The handle works only for this client's identity (its
  // bearer token). RESOURCE_EXHAUSTED past the server's max_resident_bytes
  // is not retried. `label` is free text for the server's logs.
  absl::StatusOr<ResidentHandle> RegisterMatrix(const MatrixView& matrix,
                                                absl::string_view label = "",
                                                const CallOptions& options = {});
  // RegisterMatrix of a bf16 or fp32 matrix that the server keeps as FP8
  // (gemm.v1 Quantization): it computes the scales by common/fp8.h's rule
  // for `quantize` (format, scale mode, and the operand and transpose the
  // matrix will serve as) and stores the codes and scales. The handle's
  // dtype is quantize.format; problems name it without scales. Large
  // matrices go in chunks (BeginUpload with Quantization) as RegisterMatrix
  // sends them. Backends that do not quantize (a GPU older than Hopper, or
  // a CUDA server started with --cuda_quantize_fp8=false) answer
  // UNIMPLEMENTED naming "quantize".
  absl::StatusOr<ResidentHandle> RegisterQuantized(const MatrixView& matrix,
                                                   const Fp8Quantization& quantize,
                                                   absl::string_view label = "",
                                                   const CallOptions& options = {});
  // Frees a registered matrix once requests in flight are done with it.
  // NOT_FOUND if unknown or already released.
  absl::Status ReleaseMatrix(const ResidentHandle& matrix, const CallOptions& options = {});
  absl::Status ReleaseMatrix(const std::string& handle, const CallOptions& options = {});

  // Same-host shared memory (client/shared_memory.h): maps `memory` into the
  // server; the region id names it in requests (SharedMatrix, SharedRef),
  // which then go to the replica that mapped it. PERMISSION_DENIED from a
  // server on another host (or reached over a non-loopback address).
  absl::StatusOr<std::string> RegisterSharedMemory(const SharedMemory& memory,
                                                   absl::string_view label = "",
                                                   const CallOptions& options = {});
  absl::Status UnregisterSharedMemory(const std::string& region, const CallOptions& options = {});

  // RegisterMatrix in chunks over the transfer channels, whatever the size
  // (RegisterMatrix does this by itself above chunked_threshold_bytes). A
  // transient matrix is freed by the server after its idle timeout unused.
  absl::StatusOr<ResidentHandle> UploadMatrix(const MatrixView& matrix, bool transient = false,
                                              absl::string_view label = "",
                                              const CallOptions& options = {});
  // Reads bytes [0, bytes) of a resident matrix of this caller (e.g. a result
  // kept with GemmRequest.keep_results) into `dst`, in chunks.
  absl::Status DownloadMatrix(const std::string& handle, void* dst, uint64_t bytes,
                              const CallOptions& options = {});

  // Opens a GemmStream: see GemmStreamSession. The stream's deadline (from
  // `options`) bounds the whole stream; streams are not retried.
  std::unique_ptr<GemmStreamSession> OpenStream(const CallOptions& options = {});

  const ClientOptions& options() const { return options_; }
  // A channel to the whole target (gRPC's own round-robin), for waiting until
  // it connects; requests go through the per-replica channels.
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

  // How this client's requests were spread over the replicas.
  struct ReplicaStats {
    std::string address;
    // The server's GetServerInfo.instance_id, once learned (from a handle it
    // issued or a GetServerInfo); empty before.
    std::string instance_id;
    // Requests (and calls naming its handles) sent there, retries included.
    uint64_t requests = 0;
    // Requests that failed there retryably and were retried on another one.
    uint64_t failed_over = 0;
    // In the target's current address set.
    bool active = true;
  };
  std::vector<ReplicaStats> Replicas() const;
  // Retries made, over all calls and replicas (per-call retries and
  // requests retried on another replica).
  uint64_t retries() const { return retries_.load(); }

  // Implementation details follow.
  class Replica;

 private:
  class AsyncCall;
  class RetryTimer;

  // Makes the replica whose channel target is `address`.
  using ReplicaFactory = std::function<std::shared_ptr<Replica>(const std::string& address)>;
  Client(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options,
         ReplicaFactory make_replica, std::vector<std::string> addresses, std::string dns_name,
         std::string dns_port);
  Client(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options);

  // What one request (all its calls) runs with: the replica, and the
  // affinity key its calls carry.
  struct Route {
    std::shared_ptr<Replica> replica;
    std::string key;
  };

  absl::Time DeadlineFor(const CallOptions& options) const;
  void PrepareContext(grpc::ClientContext* ctx, const CallOptions& options, absl::Time deadline,
                      const std::string& affinity_key = "") const;
  // The delay before the next attempt, or nullopt to finish with `status`.
  // With `fail_over`, UNAVAILABLE ends the call at once when other replicas
  // could take the request instead.
  std::optional<absl::Duration> RetryDelay(const CallOptions& options, int attempts_made,
                                           const absl::Status& status,
                                           const grpc::ClientContext& ctx, absl::Time deadline,
                                           bool fail_over = false);
  // Runs `attempt` until it succeeds or RetryDelay says to stop, sleeping in
  // between.
  absl::Status CallWithRetry(const CallOptions& options, const Route& route,
                             const std::function<grpc::Status(grpc::ClientContext*)>& attempt,
                             bool fail_over = false);

  // Runs one request's calls (`body`) on one replica: the owner of `handles`
  // when it names any, else one chosen by replica_policy; a request that
  // names none and fails with UNAVAILABLE there runs again on another.
  absl::Status RunRequest(const CallOptions& options, const std::vector<std::string>& handles,
                          const std::function<absl::Status(const Route&, const CallOptions&)>& body);
  // The replica for a request naming no handle, avoiding `avoid`.
  absl::StatusOr<std::shared_ptr<Replica>> PickReplica(const Replica* avoid);
  // The replica that issued every handle in `handles`.
  absl::StatusOr<std::shared_ptr<Replica>> OwnerOf(const std::vector<std::string>& handles,
                                                   const CallOptions& options);
  absl::StatusOr<Route> RouteForHandle(const std::string& handle, const CallOptions& options);
  // Records that `handle` was issued by `route`'s replica (its instance, and
  // the affinity key later calls naming it carry).
  void NoteHandle(const Route& route, const std::string& handle);
  std::string NewAffinityKey();
  // Looks the "dns:" target up again and updates the replica set.
  void Resolve();
  void ResolverLoop();
  size_t UsableReplicas(const Replica* except) const;
  size_t ActiveReplicas() const;

  // Gemm through uploads, keep_results and downloads (see Gemm).
  GemmResult GemmChunked(const Route& route, const v1::GemmRequest& request,
                         const CallOptions& options);
  GemmResult GemmOnce(const Route& route, const v1::GemmRequest& request,
                      const CallOptions& options, bool fail_over);
  // BeginUpload for `matrix` (its bytes to follow through the replica's
  // transfer pool).
  // transfer pool), kept as FP8 when `quantize` is set.
  absl::StatusOr<v1::RegisterMatrixResponse> BeginUpload(
      const Route& route, const MatrixView& matrix, bool transient, absl::string_view label,
      const CallOptions& options, bool fail_over, const Fp8Quantization* quantize = nullptr);
  absl::StatusOr<ResidentHandle> UploadMatrixOn(const Route& route, const MatrixView& matrix,
                                                bool transient, absl::string_view label,
                                                const CallOptions& options, bool fail_over,
                                                const Fp8Quantization* quantize = nullptr);
  // RegisterMatrix and RegisterQuantized (`quantize` null or not).
  absl::StatusOr<ResidentHandle> RegisterAs(const MatrixView& matrix,
                                            const Fp8Quantization* quantize,
                                            absl::string_view label, const CallOptions& options);
  absl::Status ReleaseOn(const Route& route, const std::string& handle,
                         const CallOptions& options);
  // With `released` non-null, asks the server to release the matrix once
  // read (ChunkedTransfer::Download) and says whether it did.
  absl::Status DownloadOn(const Route& route, const std::string& handle, void* dst,
                          uint64_t bytes, const CallOptions& options,
                          bool* released = nullptr);

  void StartAttempt(const std::shared_ptr<AsyncCall>& call);
  void OnAttemptDone(const std::shared_ptr<AsyncCall>& call, const grpc::Status& status);
  void Register(const std::shared_ptr<AsyncCall>& call);
  void Unregister(AsyncCall* call);

  const ClientOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  const ReplicaFactory make_replica_;
  // Set for a "dns:" target: what Resolve looks up.
  const std::string dns_name_;
  const std::string dns_port_;
  std::unique_ptr<RetryTimer> timer_;
  std::atomic<uint64_t> retries_{0};

  // Every replica the target has named since the client was made (those that
  // left the set stay, inactive: calls in flight or streams may hold them).
  mutable absl::Mutex replicas_mu_;
  std::vector<std::shared_ptr<Replica>> replicas_ ABSL_GUARDED_BY(replicas_mu_);
  uint64_t next_replica_ ABSL_GUARDED_BY(replicas_mu_) = 0;
  std::string resolve_error_ ABSL_GUARDED_BY(replicas_mu_);
  bool resolve_now_ ABSL_GUARDED_BY(replicas_mu_) = false;
  bool stop_resolver_ ABSL_GUARDED_BY(replicas_mu_) = false;
  std::thread resolver_;

  absl::Mutex mu_;
  absl::BitGen bitgen_ ABSL_GUARDED_BY(mu_);
  // Affinity keys of the handles this client's requests made, for the later
  // calls that name them (dropped on release).
  absl::flat_hash_map<std::string, std::string> handle_keys_ ABSL_GUARDED_BY(mu_);
  // OpenStream's stub on channel_ when no replica is known.
  std::unique_ptr<v1::GemmService::Stub> fallback_stub_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<AsyncCall*, std::weak_ptr<AsyncCall>> calls_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

// Implementation detail of Client. One replica: its channel and stub, its
// transfer channel pool (made on first use), and what the client knows of it.
class Client::Replica {
 public:
  using ChannelFactory = std::function<std::shared_ptr<grpc::Channel>(int)>;
  Replica(std::string address, std::shared_ptr<grpc::Channel> channel,
          ChannelFactory make_transfer_channel, const ClientOptions& options)
      : address(std::move(address)),
        channel(std::move(channel)),
        stub(v1::GemmService::NewStub(this->channel)),
        make_transfer_channel_(std::move(make_transfer_channel)),
        transfer_channels_(options.transfer_channels),
        chunk_bytes_(options.chunk_bytes) {}

  const ChunkedTransfer& transfer() {
    absl::MutexLock lock(&transfer_mu_);
    if (transfer_ == nullptr) {
      std::vector<std::shared_ptr<grpc::Channel>> pool;
      if (make_transfer_channel_ == nullptr) {
        pool.push_back(channel);
      } else {
        for (int i = 0; i < transfer_channels_; ++i) pool.push_back(make_transfer_channel_(i));
      }
      ChunkedTransfer::Options o;
      o.chunk_bytes = chunk_bytes_;
      o.stripes = transfer_channels_;
      transfer_ = std::make_unique<ChunkedTransfer>(std::move(pool), o);
    }
    return *transfer_;
  }

  // Not known down: in the set, not failed lately, and its channel not in
  // TRANSIENT_FAILURE (gRPC could not connect).
  bool Usable(absl::Time now) {
    if (!active.load()) return false;
    {
      absl::MutexLock lock(&mu);
      if (down_until > now) return false;
    }
    return channel->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_TRANSIENT_FAILURE;
  }

  void MarkDown(absl::Time until) {
    absl::MutexLock lock(&mu);
    down_until = std::max(down_until, until);
  }

  void SetInstance(std::string_view id) {
    if (id.empty()) return;
    absl::MutexLock lock(&mu);
    instance_id = std::string(id);
  }
  std::string instance() {
    absl::MutexLock lock(&mu);
    return instance_id;
  }

  const std::string address;
  const std::shared_ptr<grpc::Channel> channel;
  const std::unique_ptr<v1::GemmService::Stub> stub;
  std::atomic<bool> active{true};
  std::atomic<int> outstanding{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> failed_over{0};

 private:
  const ChannelFactory make_transfer_channel_;
  const int transfer_channels_;
  const uint64_t chunk_bytes_;
  absl::Mutex transfer_mu_;
  std::unique_ptr<ChunkedTransfer> transfer_ ABSL_GUARDED_BY(transfer_mu_);
  absl::Mutex mu;
  std::string instance_id ABSL_GUARDED_BY(mu);
  absl::Time down_until ABSL_GUARDED_BY(mu) = absl::InfinitePast();
};

// Many requests pipelined on one GemmStream. Send() may be called from any
// thread; responses arrive in completion order and each is handed to the
// callback given with its request (matched by request_id). A request that
// fails on the server gets its own error (the response's status_code) without
// ending the stream; if the stream itself ends, every request still waiting
// gets the stream's status.
class GemmStreamSession {
 public:
  // Cancels the stream if still open and waits for it to end. Neither this
  // nor Finish() may run inside one of the session's own callbacks: both wait
  // for the stream's reactor, which waits for that callback to return.
  ~GemmStreamSession();

  GemmStreamSession(const GemmStreamSession&) = delete;
  GemmStreamSession& operator=(const GemmStreamSession&) = delete;

  // Queues `request` for sending. An empty request_id is filled with a unique
  // one. Fails (and does not call `done`) after CloseSend(), once the stream
  // has ended, or when another request with the same id is still waiting.
  absl::Status Send(v1::GemmRequest request, GemmCallback done);
  absl::StatusOr<std::future<GemmResult>> Send(v1::GemmRequest request);

  // No more requests; responses to those sent keep arriving.
  void CloseSend();
  // Ends the stream now; waiting requests get CANCELLED.
  void Cancel();
  // Waits for the stream to end (call CloseSend() first) and returns its status.
  absl::Status Finish();

  // Requests sent and not yet answered.
  size_t pending() const;

  // Implementation details follow.
 private:
  friend class Client;
  class Reactor;

  GemmStreamSession(v1::GemmService::Stub* stub, std::unique_ptr<grpc::ClientContext> ctx);

  std::shared_ptr<Reactor> reactor_;
};

}  // namespace gemm

#endif  // GEMM_CLIENT_GEMM_CLIENT_H_
