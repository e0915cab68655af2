#include "client/chunked_transfer.h"

#include <algorithm>
#include <cstring>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/grpc_status.h"
#include "common/chunk_wire.h"
#include "gemm/v1/gemm.pb.h"

namespace gemm {
namespace {

constexpr char kUploadMethod[] = "/gemm.v1.Transfer/Upload";
constexpr char kDownloadMethod[] = "/gemm.v1.Transfer/Download";

// Waits for a set of streams and keeps the first error.
class Outcome {
 public:
  explicit Outcome(int streams) : left_(streams) {}
  void Done(const absl::Status& status) {
    absl::MutexLock lock(&mu_);
    if (first_error_.ok() && !status.ok()) first_error_ = status;
    --left_;
  }
  absl::Status Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* left) { return *left == 0; }, &left_));
    return first_error_;
  }

 private:
  absl::Mutex mu_;
  int left_ ABSL_GUARDED_BY(mu_);
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

// One stripe of an upload: writes its chunks one after another (gRPC allows
// one write in flight per stream), then reads the summary.
class ChunkedTransfer::UploadStream final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  UploadStream(grpc::GenericStub* stub, const std::string& handle, const char* data, Range range,
               uint64_t chunk_bytes, const PrepareContext& prepare, Outcome* outcome)
      : handle_(handle),
        data_(data),
        next_(range.begin),
        end_(range.end),
        chunk_bytes_(chunk_bytes),
        outcome_(outcome) {
    prepare(&context_);
    stub->PrepareBidiStreamingCall(&context_, kUploadMethod, grpc::StubOptions(), this);
    StartRead(&summary_);
    WriteNext();
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    if (ok) WriteNext();  // else the call is over; OnDone has its status
  }
  void OnReadDone(bool) override {}
  void OnDone(const grpc::Status& status) override {
    absl::Status st = FromGrpcStatus(status);
    if (!st.ok()) st = absl::Status(st.code(), absl::StrCat("upload: ", st.message()));
    Outcome* outcome = outcome_;
    delete this;
    outcome->Done(st);
  }

 private:
  void WriteNext() {
    if (next_ >= end_) {
      StartWritesDone();
      return;
    }
    const uint64_t n = std::min(chunk_bytes_, end_ - next_);
    out_ = EncodeChunk(handle_, next_, data_ + next_, n);
    next_ += n;
    StartWrite(&out_);
  }

  grpc::ClientContext context_;
  const std::string handle_;
  const char* const data_;
  uint64_t next_;
  const uint64_t end_;
  const uint64_t chunk_bytes_;
  Outcome* const outcome_;
  grpc::ByteBuffer out_;
  grpc::ByteBuffer summary_;
};

// One stripe of a download: sends its DownloadRequest and copies each chunk
// to its place as it arrives.
class ChunkedTransfer::DownloadStream final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  DownloadStream(grpc::GenericStub* stub, const std::string& handle, char* dst, Range range,
                 uint64_t chunk_bytes, const PrepareContext& prepare, Outcome* outcome)
      : dst_(dst), next_(range.begin), end_(range.end), outcome_(outcome) {
    v1::DownloadRequest request;
    request.set_handle(handle);
    request.set_offset(range.begin);
    request.set_length(range.end - range.begin);
    request.set_chunk_bytes(chunk_bytes);
    bool own;
    grpc::SerializationTraits<v1::DownloadRequest>::Serialize(request, &request_, &own);
    prepare(&context_);
    stub->PrepareBidiStreamingCall(&context_, kDownloadMethod, grpc::StubOptions(), this);
    StartWriteLast(&request_, grpc::WriteOptions());
    StartRead(&in_);
    StartCall();
  }

  void OnWriteDone(bool) override {}
  void OnReadDone(bool ok) override {
    if (!ok) return;  // end of stream; OnDone follows
    absl::Status st = Take();
    in_.Clear();
    if (!st.ok()) {
      error_ = st;
      context_.TryCancel();
      return;
    }
    StartRead(&in_);
  }
  void OnDone(const grpc::Status& status) override {
    absl::Status st = error_;
    if (st.ok()) st = FromGrpcStatus(status);
    if (st.ok() && next_ != end_)
      st = absl::DataLossError(absl::StrCat("the download ended at byte ", next_, " of [", next_,
                                            ", ", end_, ")"));
    if (!st.ok()) st = absl::Status(st.code(), absl::StrCat("download: ", st.message()));
    Outcome* outcome = outcome_;
    delete this;
    outcome->Done(st);
  }

 private:
  absl::Status Take() {
    ChunkReader chunk;
    if (absl::Status st = chunk.Parse(in_); !st.ok())
      return absl::DataLossError(st.message());
    if (chunk.offset() != next_ || chunk.size() > end_ - next_ || chunk.size() == 0)
      return absl::DataLossError(absl::StrCat("chunk of bytes [", chunk.offset(), ", ",
                                              chunk.offset() + chunk.size(),
                                              ") where bytes from ", next_, " were expected"));
    chunk.CopyDataTo(dst_ + next_);
    next_ += chunk.size();
    return absl::OkStatus();
  }

  grpc::ClientContext context_;
  char* const dst_;
  uint64_t next_;
  const uint64_t end_;
  Outcome* const outcome_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer in_;
  absl::Status error_;  // set by a reaction before cancelling; read in OnDone
};

ChunkedTransfer::ChunkedTransfer(std::vector<std::shared_ptr<grpc::Channel>> channels,
                                 const Options& options)
    : channels_(std::move(channels)), options_(options) {}

std::vector<ChunkedTransfer::Range> ChunkedTransfer::Stripes(uint64_t bytes,
                                                             uint64_t chunk_bytes, int stripes) {
  std::vector<Range> out;
  if (bytes == 0) return out;
  chunk_bytes = std::max<uint64_t>(chunk_bytes, 1);
  const uint64_t chunks = (bytes + chunk_bytes - 1) / chunk_bytes;
  const uint64_t n = std::min<uint64_t>(chunks, static_cast<uint64_t>(std::max(stripes, 1)));
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t first = chunks * i / n;
    const uint64_t last = chunks * (i + 1) / n;
    out.push_back(Range{first * chunk_bytes, std::min(bytes, last * chunk_bytes)});
  }
  return out;
}

absl::Status ChunkedTransfer::Upload(const std::string& handle, const void* data, uint64_t bytes,
                                     const PrepareContext& prepare) const {
  return UploadAll({UploadJob{handle, data, bytes}}, prepare);
}

absl::Status ChunkedTransfer::UploadAll(const std::vector<UploadJob>& jobs,
                                        const PrepareContext& prepare) const {
  struct Stripe {
    const UploadJob* job;
    Range range;
  };
  std::vector<Stripe> stripes;
  for (const UploadJob& job : jobs)
    for (const Range& r : Stripes(job.bytes, options_.chunk_bytes, options_.stripes))
      stripes.push_back(Stripe{&job, r});
  std::vector<grpc::GenericStub> stubs;
  stubs.reserve(stripes.size());
  for (size_t i = 0; i < stripes.size(); ++i) stubs.emplace_back(channels_[i % channels_.size()]);
  Outcome outcome(static_cast<int>(stripes.size()));
  for (size_t i = 0; i < stripes.size(); ++i)
    new UploadStream(&stubs[i], stripes[i].job->handle,
                     static_cast<const char*>(stripes[i].job->data), stripes[i].range,
                     options_.chunk_bytes, prepare, &outcome);
  return outcome.Wait();
}

absl::Status ChunkedTransfer::Download(const std::string& handle, void* dst, uint64_t bytes,
                                       const PrepareContext& prepare) const {
  const std::vector<Range> ranges = Stripes(bytes, options_.chunk_bytes, options_.stripes);
  std::vector<grpc::GenericStub> stubs;
  stubs.reserve(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) stubs.emplace_back(channels_[i % channels_.size()]);
  Outcome outcome(static_cast<int>(ranges.size()));
  for (size_t i = 0; i < ranges.size(); ++i)
    new DownloadStream(&stubs[i], handle, static_cast<char*>(dst), ranges[i],
                       options_.chunk_bytes, prepare, &outcome);
  return outcome.Wait();
}

}  // namespace gemm
