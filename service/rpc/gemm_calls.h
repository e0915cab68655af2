// The reactors of GemmService's two compute methods, and the message
// handling they share. A reactor parses its request, holds it while its
// uploads are unfinished (upload_wait.h), admits it through
// GemmServiceImpl::Admit and answers when its work item completes.
#ifndef GEMM_SERVICE_RPC_GEMM_CALLS_H_
#define GEMM_SERVICE_RPC_GEMM_CALLS_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.grpc.pb.h"

namespace gemm {

class GemmServiceImpl;

namespace rpc {

// One unary Gemm call (gemm_service.h: `request` and `response` are the
// serialized messages); it deletes itself when done.
grpc::ServerUnaryReactor* StartUnaryGemm(GemmServiceImpl* service,
                                         grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response);

// One GemmStream; it deletes itself when done.
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartGemmStream(
    GemmServiceImpl* service, grpc::CallbackServerContext* context);

// The call's deadline (InfiniteFuture when the client set none).
absl::Time DeadlineOf(const grpc::CallbackServerContext& context);

// The raw methods (gemm_service.h says why) parse and serialize here, the
// same way gRPC's generated handlers would. gRPC owns the request's bytes
// until the call ends; ParseRequest clears them once parsed, as the
// generated handler does, so a large request is held once, not twice.
absl::Status ParseRequest(const grpc::ByteBuffer* bytes, v1::GemmRequest* request);
grpc::Status SerializeResponse(const v1::GemmResponse& response, grpc::ByteBuffer* bytes);

}  // namespace rpc
}  // namespace gemm

#endif  // GEMM_SERVICE_RPC_GEMM_CALLS_H_
