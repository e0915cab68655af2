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

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>

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
#include "common/http2_tuning.h"
#include "client/retry_policy.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "gemm/v1/gemm.pb.h"

namespace gemm {

struct ClientOptions {
  // Required. "host:port" for one server, or "dns:///name:port" to spread calls
  // round-robin over every address the name resolves to (the channel's load
  // balancing policy is round_robin in both cases).
  std::string target;
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
  // the server binds each connection to one caller (service/auth.h).
  std::string bearer_token;

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
  // Frees a registered matrix once requests in flight are done with it.
  // NOT_FOUND if unknown or already released.
  absl::Status ReleaseMatrix(const ResidentHandle& matrix, const CallOptions& options = {});
  absl::Status ReleaseMatrix(const std::string& handle, const CallOptions& options = {});

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
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

  // Implementation details follow.
 private:
  class AsyncCall;
  class RetryTimer;

  Client(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options,
         std::function<std::shared_ptr<grpc::Channel>(int)> make_transfer_channel = nullptr);

  absl::Time DeadlineFor(const CallOptions& options) const;
  void PrepareContext(grpc::ClientContext* ctx, const CallOptions& options,
                      absl::Time deadline) const;
  // The delay before the next attempt, or nullopt to finish with `status`.
  std::optional<absl::Duration> RetryDelay(const CallOptions& options, int attempts_made,
                                           const absl::Status& status,
                                           const grpc::ClientContext& ctx, absl::Time deadline);
  // Runs `attempt` until it succeeds or RetryDelay says to stop, sleeping in
  // between.
  absl::Status CallWithRetry(const CallOptions& options,
                             const std::function<grpc::Status(grpc::ClientContext*)>& attempt);

  // Gemm through uploads, keep_results and downloads (see Gemm).
  GemmResult GemmChunked(const v1::GemmRequest& request, const CallOptions& options);
  bool NeedsChunks(const v1::GemmRequest& request) const;
  // BeginUpload for `matrix` (its bytes to follow through transfer()).
  absl::StatusOr<v1::RegisterMatrixResponse> BeginUpload(const MatrixView& matrix, bool transient,
                                                         absl::string_view label,
                                                         const CallOptions& options);
  // The transfer channel pool, made on first use.
  const ChunkedTransfer& transfer();

  void StartAttempt(const std::shared_ptr<AsyncCall>& call);
  void OnAttemptDone(const std::shared_ptr<AsyncCall>& call, const grpc::Status& status);
  void Register(const std::shared_ptr<AsyncCall>& call);
  void Unregister(AsyncCall* call);

  const ClientOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  // Makes transfer channel i; null when the client was made on an existing
  // channel (the pool is then that one channel).
  const std::function<std::shared_ptr<grpc::Channel>(int)> make_transfer_channel_;
  absl::Mutex transfer_mu_;
  std::unique_ptr<ChunkedTransfer> transfer_ ABSL_GUARDED_BY(transfer_mu_);
  const std::unique_ptr<v1::GemmService::Stub> stub_;
  std::unique_ptr<RetryTimer> timer_;

  absl::Mutex mu_;
  absl::BitGen bitgen_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<AsyncCall*, std::weak_ptr<AsyncCall>> calls_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
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
