// Client's chunked path: large operands uploaded as transient resident
// matrices, large results kept on the server and downloaded (gemm_client.h,
// ClientOptions::chunked_threshold_bytes).
#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/gemm_client.h"
#include "common/grpc_status.h"
#include "common/proto_enums.h"

namespace gemm {
namespace {

// An operand of `p` as stored: shape, type and layout, or nullopt when the
// problem's fields are not valid (the server then names the fault).
std::optional<MatrixRef> StoredShape(const v1::GemmProblem& p, char which) {
  auto in = FromProto(p.input_dtype());
  auto out = p.output_dtype() == v1::DATA_TYPE_UNSPECIFIED ? in : FromProto(p.output_dtype());
  const v1::Matrix& m = which == 'a' ? p.a() : which == 'b' ? p.b() : p.c();
  auto layout = FromProto(m.layout());
  if (!in.ok() || !out.ok() || !layout.ok()) return std::nullopt;
  MatrixRef ref;
  ref.layout = *layout;
  if (which == 'a') {
    ref.rows = p.transpose_a() ? p.k() : p.m();
    ref.cols = p.transpose_a() ? p.m() : p.k();
    ref.dtype = *in;
  } else if (which == 'b') {
    ref.rows = p.transpose_b() ? p.n() : p.k();
    ref.cols = p.transpose_b() ? p.k() : p.n();
    auto b = p.has_b_dtype() ? FromProto(p.b_dtype()) : in;
    if (!b.ok()) return std::nullopt;
    ref.dtype = *b;
  } else {
    ref.rows = p.m();
    ref.cols = p.n();
    ref.dtype = *out;
  }
  if (ref.rows == 0 || ref.cols == 0 || ref.bytes() != m.data().size()) return std::nullopt;
  return ref;
}

uint64_t ResultBytes(const v1::GemmProblem& p) {
  auto dtype = FromProto(p.output_dtype() == v1::DATA_TYPE_UNSPECIFIED ? p.input_dtype()
                                                                        : p.output_dtype());
  return dtype.ok() ? p.m() * p.n() * SizeOf(*dtype) : 0;
}

// `p` without its operands' bytes (which the caller fills in or replaces).
v1::GemmProblem ShapeOnly(const v1::GemmProblem& p) {
  v1::GemmProblem out;
  out.set_m(p.m());
  out.set_n(p.n());
  out.set_k(p.k());
  out.set_input_dtype(p.input_dtype());
  if (p.has_b_dtype()) out.set_b_dtype(p.b_dtype());
  out.set_quantize_partner(p.quantize_partner());
  out.set_output_dtype(p.output_dtype());
  out.set_transpose_a(p.transpose_a());
  out.set_transpose_b(p.transpose_b());
  out.set_allow_tf32(p.allow_tf32());
  if (p.has_alpha()) out.set_alpha(p.alpha());
  if (p.has_beta()) out.set_beta(p.beta());
  out.set_output_layout(p.output_layout());
  return out;
}

}  // namespace

bool Client::NeedsChunks(const v1::GemmRequest& request) const {
  if (request.ByteSizeLong() + 4096 > static_cast<uint64_t>(options_.max_message_bytes))
    return true;
  const uint64_t threshold = options_.chunked_threshold_bytes;
  if (threshold == 0) return false;
  uint64_t results = 0;
  for (const v1::GemmProblem& p : request.problems()) {
    for (const v1::Matrix* m : {&p.a(), &p.b(), &p.c()})
      if (m->data().size() >= threshold) return true;
    results += ResultBytes(p);
  }
  // Results the caller asked the server to keep do not travel.
  return !request.keep_results() && results >= threshold;
}

absl::StatusOr<v1::RegisterMatrixResponse> Client::BeginUpload(
    const Route& route, const MatrixView& matrix, bool transient, absl::string_view label,
    const CallOptions& options, bool fail_over, const Fp8Quantization* quantize) {
  v1::BeginUploadRequest begin;
  if (quantize != nullptr) *begin.mutable_quantize() = ToProto(*quantize);
  begin.set_dtype(ToProto(matrix.dtype()));
  begin.set_rows(matrix.rows());
  begin.set_cols(matrix.cols());
  begin.set_layout(ToProto(matrix.layout()));
  begin.set_transient(transient);
  if (!label.empty()) begin.set_label(std::string(label));
  v1::RegisterMatrixResponse registered;
  absl::Status status = CallWithRetry(
      options, route,
      [&](grpc::ClientContext* ctx) {
        return route.replica->stub->BeginUpload(ctx, begin, &registered);
      },
      fail_over);
  if (!status.ok()) return status;
  NoteHandle(route, registered.handle());
  return registered;
}

absl::StatusOr<ResidentHandle> Client::UploadMatrix(const MatrixView& matrix, bool transient,
                                                    absl::string_view label,
                                                    const CallOptions& options) {
  if (absl::Status s = matrix.Validate("matrix"); !s.ok()) return s;
  absl::StatusOr<ResidentHandle> result = absl::UnknownError("no attempt");
  absl::Status status = RunRequest(options, {}, [&](const Route& route, const CallOptions& within) {
    result = UploadMatrixOn(route, matrix, transient, label, within, /*fail_over=*/true);
    return result.status();
  });
  if (!status.ok()) return status;
  return result;
}

absl::StatusOr<ResidentHandle> Client::UploadMatrixOn(const Route& route,
                                                      const MatrixView& matrix, bool transient,
                                                      absl::string_view label,
                                                      const CallOptions& options,
                                                      bool fail_over,
                                                      const Fp8Quantization* quantize) {
  const absl::Time deadline = DeadlineFor(options);
  CallOptions within = options;
  within.deadline = deadline;
  auto registered = BeginUpload(route, matrix, transient, label, within, fail_over, quantize);
  if (!registered.ok()) return registered.status();
  absl::Status status = route.replica->transfer().Upload(
      registered->handle(), matrix.data(), matrix.ref().bytes(),
      [&](grpc::ClientContext* ctx) { PrepareContext(ctx, within, deadline, route.key); });
  if (!status.ok()) {
    // Best effort: the server also frees unfinished uploads when idle.
    CallOptions once = within;
    once.retry = false;
    ReleaseOn(route, registered->handle(), once).IgnoreError();
    return status;
  }
  return ResidentHandle{registered->handle(), matrix.rows(), matrix.cols(), matrix.layout(),
                        quantize != nullptr ? quantize->format : matrix.dtype(),
                        registered->bytes()};
}

absl::Status Client::DownloadMatrix(const std::string& handle, void* dst, uint64_t bytes,
                                    const CallOptions& options) {
  return RunRequest(options, {handle}, [&](const Route& route, const CallOptions& within) {
    return DownloadOn(route, handle, dst, bytes, within);
  });
}

absl::Status Client::DownloadOn(const Route& route, const std::string& handle, void* dst,
                                uint64_t bytes, const CallOptions& options, bool* released) {
  const absl::Time deadline = DeadlineFor(options);
  return route.replica->transfer().Download(
      handle, dst, bytes,
      [&](grpc::ClientContext* ctx) { PrepareContext(ctx, options, deadline, route.key); },
      released);
}

GemmResult Client::GemmChunked(const Route& route, const v1::GemmRequest& request,
                               const CallOptions& options) {
  const absl::Time deadline = DeadlineFor(options);
  CallOptions within = options;
  within.deadline = deadline;
  // Everything uploaded or kept for this request is released at the end,
  // whatever happens (and expires on the server if this process dies).
  std::vector<std::string> handles;
  // A handle the server released itself: not released here.
  const auto forget = [&handles](const std::string& h) {
    handles.erase(std::remove(handles.begin(), handles.end(), h), handles.end());
  };
  auto release = absl::MakeCleanup([&] {
    CallOptions once = within;
    once.retry = false;
    once.deadline = std::max(deadline, absl::Now() + absl::Seconds(5));
    for (const std::string& h : handles) ReleaseOn(route, h, once).IgnoreError();
  });

  // Operands go as chunks when they are large, or when the whole request
  // would not fit in one message otherwise.
  const bool too_big =
      request.ByteSizeLong() + 4096 > static_cast<uint64_t>(options_.max_message_bytes);
  const uint64_t threshold = options_.chunked_threshold_bytes == 0
                                 ? std::numeric_limits<uint64_t>::max()
                                 : options_.chunked_threshold_bytes;
  std::vector<ChunkedTransfer::UploadJob> uploads;
  int request_handles = 0;
  for (const v1::GemmProblem& p : request.problems())
    for (const v1::Matrix* m : {&p.a(), &p.b(), &p.c()})
      request_handles += m->source_case() == v1::Matrix::kHandle ? 1 : 0;
  v1::GemmRequest light;
  light.set_request_id(request.request_id());
  light.set_priority(request.priority());
  if (request.has_deterministic()) light.set_deterministic(request.deterministic());
  uint64_t result_bytes = 0;
  for (const v1::GemmProblem& p : request.problems()) {
    v1::GemmProblem* lp = light.add_problems();
    *lp = ShapeOnly(p);
    result_bytes += ResultBytes(p);
    const std::pair<char, v1::Matrix*> operands[] = {
        {'a', lp->mutable_a()}, {'b', lp->mutable_b()}, {'c', lp->mutable_c()}};
    for (auto [which, out] : operands) {
      const v1::Matrix& in = which == 'a' ? p.a() : which == 'b' ? p.b() : p.c();
      if (which == 'c' && !p.has_c()) {
        lp->clear_c();
        continue;
      }
      out->set_layout(in.layout());
      if (in.has_scales()) *out->mutable_scales() = in.scales();
      std::optional<MatrixRef> shape = StoredShape(p, which);
      // A resident C must be stored in the output layout; one that is not
      // stays inline (the server converts it).
      const Layout output_layout = FromProto(p.output_layout()).value_or(Layout::kRowMajor);
      const bool c_layout_ok = which != 'c' || (shape && shape->layout == output_layout);
      const uint64_t size = in.data().size();
      const bool chunk = in.source_case() == v1::Matrix::kData && shape.has_value() &&
                         c_layout_ok && (size >= threshold || (too_big && size > 4096));
      if (!chunk) {
        *out = in;
        continue;
      }
      // The bytes only: an FP8 operand's scales stay in the message.
      const char* bytes = in.data().data();
      MatrixView view =
          shape->dtype == DType::kFp32
              ? MatrixView(reinterpret_cast<const float*>(bytes), shape->rows, shape->cols,
                           shape->layout)
          : IsFp8(shape->dtype)
              ? MatrixView(reinterpret_cast<const uint8_t*>(bytes), shape->rows, shape->cols,
                           shape->dtype, Fp8Scales{}, shape->layout)
              : MatrixView(reinterpret_cast<const uint16_t*>(bytes), shape->rows, shape->cols,
                           shape->dtype, shape->layout);
      if (absl::Status s = view.Validate("operand"); !s.ok()) return s;
      // A request that names no handle of its own may still go elsewhere
      // when this replica refuses new work (draining): nothing is lost yet.
      auto registered = BeginUpload(route, view, /*transient=*/true, "", within,
                                    /*fail_over=*/request_handles == 0);
      if (!registered.ok())
        return absl::Status(registered.status().code(),
                            absl::StrCat("problems[", light.problems_size() - 1, "].",
                                         std::string(1, which), ": ",
                                         registered.status().message()));
      handles.push_back(registered->handle());
      out->set_handle(registered->handle());
      out->set_release_after_use(options_.pipelined_uploads);
      uploads.push_back({registered->handle(), in.data().data(), in.data().size()});
    }
  }
  const ChunkedTransfer::PrepareContext prepare = [&](grpc::ClientContext* ctx) {
    PrepareContext(ctx, within, deadline, route.key);
  };
  // Kept because the caller asked (the handles are theirs: returned as they
  // are), or because they are large (downloaded and released here).
  const bool caller_keeps = request.keep_results();
  const bool keep = caller_keeps || result_bytes >= threshold ||
                    result_bytes + 4096 * request.problems_size() >
                        static_cast<uint64_t>(options_.max_message_bytes);
  light.set_keep_results(keep);

  v1::GemmResponse response;
  // Its operands are on this replica now: no failing over from here (the
  // request as a whole may still run again elsewhere, see RunRequest).
  const auto gemm = [&] {
    return CallWithRetry(within, route, [&](grpc::ClientContext* ctx) {
      return route.replica->stub->Gemm(ctx, light, &response);
    });
  };
  absl::Status status;
  if (!options_.pipelined_uploads || uploads.empty()) {
    // Every operand's chunks at once, over all the transfer channels.
    if (absl::Status st = route.replica->transfer().UploadAll(uploads, prepare); !st.ok())
      return st;
    status = gemm();
  } else {
    absl::Status uploaded;
    std::thread uploader([&] {
      uploaded = route.replica->transfer().UploadAll(uploads, prepare);
      // The Gemm may be held on these: releasing them ends it (ABORTED)
      // now rather than at its deadline.
      if (!uploaded.ok()) {
        CallOptions once = within;
        once.retry = false;
        for (const ChunkedTransfer::UploadJob& u : uploads)
          ReleaseOn(route, u.handle, once).IgnoreError();
      }
    });
    // The first attempt is sent once, outside the retry loop: a server that
    // held it and then refused it (its queue full when the uploads were
    // done) has released the operands with it (release_after_use), so a
    // plain retry would only find them gone.
    grpc::ClientContext first;
    PrepareContext(&first, within, deadline, route.key);
    status = FromGrpcStatus(route.replica->stub->Gemm(&first, light, &response));
    uploader.join();
    if (!uploaded.ok()) return uploaded;
    // A server that does not hold requests for uploads refused it before
    // they were done; they are now.
    const bool waited = !(status.code() == absl::StatusCode::kFailedPrecondition &&
                          absl::StrContains(status.message(), "is unfinished"));
    // Whether the server released the operands with the request
    // (release_after_use). One that did not wait may predate the field:
    // those are released here.
    bool released = false;
    if (!waited) {
      status = gemm();
    } else if (!status.ok()) {
      // Refused at the door the operands are intact and a retry (after the
      // server's pushback) may pass; refused after the hold they are gone,
      // and the refusal is the answer.
      const std::optional<absl::Duration> delay =
          RetryDelay(within, 1, status, first, deadline, /*fail_over=*/false);
      if (delay.has_value()) {
        absl::SleepFor(*delay);
        absl::Status again = gemm();
        released = again.code() == absl::StatusCode::kNotFound;  // with the held request
        if (!released) status = std::move(again);
      }
    }
    if (released || (status.ok() && waited))
      for (const ChunkedTransfer::UploadJob& u : uploads) forget(u.handle);
  }
  if (!status.ok()) return status;
  if (caller_keeps)
    for (const v1::GemmResult& r : response.results())
      if (!r.handle().empty()) NoteHandle(route, r.handle());
  if (keep && !caller_keeps) {
    for (const v1::GemmResult& r : response.results())
      if (!r.handle().empty()) handles.push_back(r.handle());
    for (v1::GemmResult& r : *response.mutable_results()) {
      auto dtype = FromProto(r.dtype());
      if (!dtype.ok() || r.handle().empty())
        return absl::DataLossError("keep_results: a result came back without its handle");
      std::string* data = r.mutable_data();
      data->resize(r.rows() * r.cols() * SizeOf(*dtype));
      // Released by the server as it is read (release_after_download); one
      // that does not is released below.
      bool released = false;
      status = DownloadOn(route, r.handle(), data->data(), data->size(), within, &released);
      if (!status.ok()) return status;
      if (released) forget(r.handle());
      r.clear_handle();
    }
  }
  return response;
}

}  // namespace gemm
