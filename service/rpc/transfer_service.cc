#include "service/rpc/transfer_service.h"

#include <algorithm>
#include <memory>
#include <string>

#include <grpcpp/impl/codegen/proto_utils.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/chunk_wire.h"
#include "common/grpc_status.h"
#include "gemm/v1/gemm.pb.h"
#include "service/security/caller_identity.h"

namespace gemm {
namespace {

// What both Transfer calls share: who calls, since when, and how a call ends
// (recorded in the request metrics under `method`).
class TransferCall : public grpc::ServerGenericBidiReactor {
 public:
  void OnDone() override {
    TransferService* service = service_;
    delete this;
    service->active_.fetch_sub(1);
  }

 protected:
  TransferCall(TransferService* service, grpc::GenericCallbackServerContext* context,
               const char* method)
      : service_(service),
        context_(context),
        caller_(CallerIdentity(*context)),
        started_(service->clock()->Now()),
        method_(method) {
    service->active_.fetch_add(1);
  }

  void End(const absl::Status& st) {
    service_->metrics()->RecordRequest(method_, static_cast<int>(st.code()),
                                       service_->clock()->Now() - started_);
    if (!st.ok() && service_->call_log() != nullptr)
      service_->call_log()->Failed(method_, caller_, st);
    Finish(ToGrpcStatus(st));
  }

  TransferService* const service_;
  grpc::GenericCallbackServerContext* const context_;
  const std::string caller_;
  const absl::Time started_;
  const char* const method_;
  grpc::ByteBuffer in_;
  grpc::ByteBuffer out_;
};

// Transfer.Upload: writes each chunk into its matrix as it arrives, then
// answers with an UploadSummary when the client closes its side.
class UploadCall final : public TransferCall {
 public:
  UploadCall(TransferService* service, grpc::GenericCallbackServerContext* context)
      : TransferCall(service, context, "Upload") {
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed its side (or went away): summarize
      v1::UploadSummary summary;
      summary.set_bytes_received(bytes_);
      summary.set_chunks(chunks_);
      bool own_buffer;
      grpc::SerializationTraits<v1::UploadSummary>::Serialize(summary, &out_, &own_buffer);
      StartWrite(&out_);
      return;
    }
    absl::Status st = Take();
    in_.Clear();
    if (!st.ok()) {
      // A refused chunk takes no range: the client, told why, may send it
      // again on another stream, so its uploads stay.
      End(st);
      return;
    }
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Abandon(absl::CancelledError("the client went away"));
      return;
    }
    End(absl::OkStatus());
  }


 private:
  absl::Status Take() {
    ChunkReader chunk;
    if (absl::Status st = chunk.Parse(in_); !st.ok()) return st;
    if (chunk.handle().empty())
      return absl::InvalidArgumentError("handle: required on every chunk");
    touched_.insert(std::string(chunk.handle()));
    // Within one stream a matrix's chunks run contiguously: that is how a
    // client stripes a matrix over streams, and a gap here means a lost or
    // reordered chunk.
    auto expected = next_offset_.find(chunk.handle());
    if (expected != next_offset_.end() && expected->second != chunk.offset())
      return absl::InvalidArgumentError(absl::StrCat(
          "offset: chunk out of order: this stream's previous chunk of \"", chunk.handle(),
          "\" ended at byte ", expected->second, ", this one starts at ", chunk.offset()));
    ResidentStore* store = service_->residents();
    auto matrix = store->ClaimUpload(caller_, chunk.handle(), chunk.offset(), chunk.size());
    if (!matrix.ok()) return matrix.status();
    absl::Status written;
    uint64_t at = chunk.offset();
    chunk.ForEachDataPiece([&](const char* piece, size_t n) {
      if (written.ok()) written = (*matrix)->Write(at, piece, n);
      at += n;
    });
    const absl::Status finished =
        store->FinishUploadRange(chunk.handle(), chunk.offset(), chunk.size(), written.ok());
    if (!written.ok()) return written;
    if (!finished.ok()) return finished;
    next_offset_[chunk.handle()] = chunk.offset() + chunk.size();
    bytes_ += chunk.size();
    ++chunks_;
    service_->metrics()->AddChunkBytes("upload", static_cast<double>(chunk.size()));
    return absl::OkStatus();
  }

  // A stream whose client went away takes with it the unfinished uploads it
  // carried chunks of: nobody is left to send their missing bytes, and a
  // Gemm waiting on one must hear it now rather than at the idle timeout.
  void Abandon(const absl::Status& st) {
    for (const std::string& handle : touched_)
      service_->residents()->AbandonUpload(caller_, handle, st);
    End(st);
  }

  absl::flat_hash_map<std::string, uint64_t> next_offset_;
  // Handles this stream has sent chunks of (or tried to).
  absl::flat_hash_set<std::string> touched_;
  uint64_t bytes_ = 0;
  uint64_t chunks_ = 0;
};

// Transfer.Download: reads one DownloadRequest, then writes the range in
// chunks that point into the matrix (kept alive by each chunk until gRPC has
// sent it).
class DownloadCall final : public TransferCall {
 public:
  DownloadCall(TransferService* service, grpc::GenericCallbackServerContext* context)
      : TransferCall(service, context, "Download") {
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      End(absl::InvalidArgumentError("the stream closed before a DownloadRequest"));
      return;
    }
    absl::Status st = Begin();
    if (!st.ok()) {
      End(st);
      return;
    }
    WriteNext();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      End(absl::CancelledError("the client went away"));
      return;
    }
    WriteNext();
  }


 private:
  absl::Status Begin() {
    v1::DownloadRequest request;
    grpc::Status parsed =
        grpc::SerializationTraits<v1::DownloadRequest>::Deserialize(&in_, &request);
    if (!parsed.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("not a DownloadRequest: ", parsed.error_message()));
    if (request.handle().empty()) return absl::InvalidArgumentError("handle: required");
    auto matrix = service_->residents()->Lookup(caller_, request.handle());
    if (!matrix.ok()) return matrix.status();
    matrix_ = *matrix;
    const uint64_t size = matrix_->bytes();
    if (request.offset() > size)
      return absl::InvalidArgumentError(absl::StrCat("offset: ", request.offset(),
                                                     " is past the matrix's ", size, " bytes"));
    end_ = request.length() == 0 ? size : request.offset() + request.length();
    if (request.length() > size - request.offset())
      return absl::InvalidArgumentError(
          absl::StrCat("length: bytes [", request.offset(), ", ", request.offset() + request.length(),
                       ") run past the matrix's ", size, " bytes"));
    position_ = request.offset();
    if (request.release_after_download()) {
      release_handle_ = request.handle();
      release_bytes_ = end_ - position_;
    }
    const uint64_t max_chunk = MaxChunkBytes(service_->limits());
    chunk_bytes_ = request.chunk_bytes() == 0
                       ? std::min(TransferService::kDefaultDownloadChunkBytes, max_chunk)
                       : std::min<uint64_t>(request.chunk_bytes(), max_chunk);
    return absl::OkStatus();
  }

  void WriteNext() {
    if (position_ >= end_) {
      // Let go of the matrix before the client hears OK: a release it sends
      // straight away must find the matrix unused (the last chunk's buffer
      // holds it too).
      out_.Clear();
      matrix_.reset();
      End(CountForRelease());
      return;
    }
    const uint64_t n = std::min(chunk_bytes_, end_ - position_);
    const void* host = matrix_->view().data;
    if (host != nullptr) {
      out_ = EncodeChunk("", position_, static_cast<const char*>(host) + position_, n, matrix_);
    } else {  // device memory: one bounce through a host buffer per chunk
      auto bounce = std::make_shared<std::string>(n, '\0');
      absl::Status st = matrix_->Read(position_, bounce->data(), n);
      if (!st.ok()) {
        End(st);
        return;
      }
      out_ = EncodeChunk("", position_, bounce->data(), n, bounce);
    }
    position_ += n;
    service_->metrics()->AddChunkBytes("download", static_cast<double>(n));
    StartWrite(&out_);
  }

  // release_after_download: this stream's bytes count toward the release,
  // and the trailing metadata says the request was honoured.
  absl::Status CountForRelease() {
    if (release_handle_.empty()) return absl::OkStatus();
    absl::StatusOr<bool> released =
        service_->residents()->CountDownloaded(caller_, release_handle_, release_bytes_);
    // Released by the client meanwhile: the bytes were sent all the same.
    if (!released.ok() && released.status().code() != absl::StatusCode::kNotFound)
      return released.status();
    context_->AddTrailingMetadata(TransferService::kReleaseAfterDownloadKey,
                                  released.ok() && *released ? "released" : "counted");
    return absl::OkStatus();
  }

  std::shared_ptr<const ResidentMatrix> matrix_;
  std::string release_handle_;  // set when the request asked for release_after_download
  uint64_t release_bytes_ = 0;
  uint64_t position_ = 0;
  uint64_t end_ = 0;
  uint64_t chunk_bytes_ = 0;
};

// Any other method, or no resident store: answered at once.
class Refusal final : public grpc::ServerGenericBidiReactor {
 public:
  explicit Refusal(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

TransferService::TransferService(const ServiceLimits& limits, ResidentStore* residents,
                                 ServiceMetrics* metrics, const Clock* clock)
    : limits_(limits), residents_(residents), metrics_(metrics), clock_(clock) {}

grpc::ServerGenericBidiReactor* TransferService::CreateReactor(
    grpc::GenericCallbackServerContext* context) {
  const std::string& method = context->method();
  const bool upload = method == kUploadMethod;
  if (!upload && method != kDownloadMethod)
    return new Refusal(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                    absl::StrCat("unknown method ", method)));
  if (residents_ == nullptr)
    return new Refusal(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                    "this server keeps no resident matrices"));
  if (upload) return new UploadCall(this, context);
  return new DownloadCall(this, context);
}

}  // namespace gemm
