// RegisterMatrix, BeginUpload and ReleaseMatrix: resident matrices
// (resident_store.h); their bytes move through Transfer (transfer_service.h).
#include <string>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "service/rpc/gemm_service.h"
#include "service/rpc/request_validation.h"
#include "service/security/caller_identity.h"

namespace gemm {

grpc::ServerUnaryReactor* GemmServiceImpl::RegisterMatrix(
    grpc::CallbackServerContext* context, const v1::RegisterMatrixRequest* request,
    v1::RegisterMatrixResponse* response) {
  const absl::Time received = clock_->Now();
  absl::Status st;
  if (residents_ == nullptr) {
    st = absl::UnimplementedError("this server keeps no resident matrices");
  } else if (draining()) {
    st = RefuseDraining("RegisterMatrix");
  } else if (auto source = ValidateRegisterMatrix(*request, limits()); !source.ok()) {
    st = source.status();
  } else if (auto quantize = ValidateQuantization(request->has_quantize(), request->quantize(),
                                                  *source, features());
             !quantize.ok()) {
    st = quantize.status();
  } else {
    const std::string caller = CallerIdentity(*context);
    // A quantized matrix is made by the executor (on the GPU where there is
    // one) and held at its FP8 size plus scales.
    auto registered = quantize->has_value()
                          ? residents_->RegisterQuantized(caller, *source, **quantize)
                          : residents_->Register(caller, *source);
    if (registered.ok()) {
      response->set_handle(registered->handle);
      response->set_bytes(registered->bytes);
      spdlog::debug("registered a resident {} x {} matrix ({} bytes, label \"{}\") for \"{}\"",
                    source->rows, source->cols, registered->bytes, request->label(), caller);
    }
    st = registered.status();
  }
  return FinishUnary(context, "RegisterMatrix", st, received);
}

grpc::ServerUnaryReactor* GemmServiceImpl::BeginUpload(grpc::CallbackServerContext* context,
                                                       const v1::BeginUploadRequest* request,
                                                       v1::RegisterMatrixResponse* response) {
  const absl::Time received = clock_->Now();
  absl::Status st;
  if (residents_ == nullptr) {
    st = absl::UnimplementedError("this server keeps no resident matrices");
  } else if (draining()) {
    st = RefuseDraining("BeginUpload");
  } else if (auto shape = ValidateBeginUpload(*request, limits()); !shape.ok()) {
    st = shape.status();
  } else if (auto quantize = ValidateQuantization(request->has_quantize(), request->quantize(),
                                                  *shape, features());
             !quantize.ok()) {
    st = quantize.status();
  } else {
    auto registered = residents_->BeginUpload(CallerIdentity(*context), *shape,
                                              request->transient(), *quantize);
    if (registered.ok()) {
      response->set_handle(registered->handle);
      response->set_bytes(registered->bytes);
    }
    st = registered.status();
  }
  return FinishUnary(context, "BeginUpload", st, received);
}

grpc::ServerUnaryReactor* GemmServiceImpl::ReleaseMatrix(grpc::CallbackServerContext* context,
                                                         const v1::ReleaseMatrixRequest* request,
                                                         v1::ReleaseMatrixResponse*) {
  const absl::Time received = clock_->Now();
  absl::Status st = absl::UnimplementedError("this server keeps no resident matrices");
  if (residents_ != nullptr) {
    st = residents_->Release(CallerIdentity(*context), request->handle());
    if (!st.ok()) st = absl::Status(st.code(), absl::StrCat("handle: ", st.message()));
  }
  return FinishUnary(context, "ReleaseMatrix", st, received);
}

}  // namespace gemm
