// The GemmService and Transfer service in-process on loopback, without a
// batcher: the test takes admitted work from the queue itself (Dispatch) and
// hands it to a FakeExecutor, so every request's place (refused, queued,
// running, answered) is decided by the test. The queue and resident store run
// on a FakeClock. With tokens, callers are told apart by bearer token (two
// callers: kAlice and kBob), as the server binary does with --auth_tokens_file.
#ifndef GEMM_SERVICE_TESTING_SERVICE_HARNESS_H_
#define GEMM_SERVICE_TESTING_SERVICE_HARNESS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/base/clock.h"
#include "service/base/limits.h"
#include "service/observe/metrics.h"
#include "service/queue/request_queue.h"
#include "service/rpc/gemm_service.h"
#include "service/rpc/transfer_service.h"
#include "service/security/auth.h"
#include "service/store/resident_store.h"
#include "service/testing/fake_executor.h"

namespace gemm {
namespace fake {

inline constexpr char kAliceToken[] = "alice-token-0123456789";
inline constexpr char kBobToken[] = "bob-token-0123456789ab";

// Small limits so that tests reach them with small messages.
inline ServiceLimits SmallLimits() {
  ServiceLimits l;
  l.max_message_bytes = 1 << 20;
  l.max_dimension = 64;
  l.max_matrix_bytes = 64 * 64 * 4;
  l.max_problems_per_request = 4;
  l.max_queued_requests = 2;
  l.max_inflight_bytes = 1 << 20;
  l.max_stream_inflight = 8;
  l.max_resident_bytes = 4096;
  return l;
}

class ServiceHarness {
 public:
  // Starts serving on 127.0.0.1:0. With `tokens`, every call needs a bearer
  // token (Context(kAliceToken) or Context(kBobToken)).
  explicit ServiceHarness(const ServiceLimits& limits = SmallLimits(), bool tokens = false)
      : limits_(limits) {
    RequestQueue::Options q;
    q.max_queued_requests = limits.max_queued_requests;
    q.max_inflight_bytes = limits.max_inflight_bytes;
    queue_ = std::make_unique<RequestQueue>(q, &clock_);
    ResidentStore::Options r;
    r.max_bytes = limits.max_resident_bytes;
    residents_ = std::make_unique<ResidentStore>(
        r, [this](const MatrixRef& m) { return executor_.CreateResident(m); },
        [this](const MatrixRef& m) { return executor_.AllocateResident(m); }, &clock_);
    service_ = std::make_unique<GemmServiceImpl>(limits, queue_.get(), &executor_, &metrics_,
                                                 &clock_, residents_.get());
    transfer_ = std::make_unique<TransferService>(limits, residents_.get(), &metrics_, &clock_);
    std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
    if (tokens) {
      auto authenticator = TokenAuthenticator::FromText(
          absl::StrCat("alice ", kAliceToken, "\nbob ", kBobToken, "\n"));
      creds = grpc::experimental::LocalServerCredentials(LOCAL_TCP);
      creds->SetAuthMetadataProcessor(std::make_shared<BearerTokenProcessor>(*authenticator));
    }
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", creds, &port_);
    builder.RegisterService(service_.get());
    builder.RegisterCallbackGenericService(transfer_.get());
    server_ = builder.BuildAndStart();
  }

  ~ServiceHarness() {
    // Calls still open are cancelled (their queued items leave the queue),
    // then whatever is left is answered before the service goes.
    executor_.Open();
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
    queue_->Abandon(absl::UnavailableError("the test is over"));
  }

  bool started() const { return server_ != nullptr && port_ != 0; }
  std::string target() const { return absl::StrCat("127.0.0.1:", port_); }

  // A channel of its own (one connection per caller: the server ties a
  // connection to the first token it sees).
  std::shared_ptr<grpc::Channel> NewChannel() const {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxReceiveMessageSize(static_cast<int>(limits_.max_message_bytes));
    return grpc::CreateCustomChannel(target(), grpc::InsecureChannelCredentials(), args);
  }

  // A context with a 30 s deadline and, if given, a bearer token.
  static std::unique_ptr<grpc::ClientContext> Context(const std::string& token = "") {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (!token.empty()) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token));
    return ctx;
  }

  // Takes at least `n` admitted items from the queue (waiting for them as
  // they arrive) and runs them on the executor, one batch per Pop. Returns
  // how many it ran.
  size_t Dispatch(size_t n = 1) {
    size_t ran = 0;
    while (ran < n) {
      // An unbounded wait on the fake clock ends only when work arrives.
      std::vector<std::shared_ptr<WorkItem>> items = queue_->Pop(64, absl::InfiniteDuration());
      if (items.empty()) break;  // closed
      ran += items.size();
      Batch batch;
      batch.items = std::move(items);
      executor_.Execute(std::move(batch));
    }
    return ran;
  }

  const ServiceLimits limits_;
  FakeClock clock_;
  ServiceMetrics metrics_;
  FakeExecutor executor_;
  std::unique_ptr<RequestQueue> queue_;
  std::unique_ptr<ResidentStore> residents_;
  std::unique_ptr<GemmServiceImpl> service_;
  std::unique_ptr<TransferService> transfer_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace fake
}  // namespace gemm

#endif  // GEMM_SERVICE_TESTING_SERVICE_HARNESS_H_
