#include "client/chunked_transfer.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/chunk_wire.h"
#include "gemm/v1/gemm.pb.h"

namespace gemm {
namespace {

constexpr char kUploadMethod[] = "/gemm.v1.Transfer/Upload";
constexpr char kDownloadMethod[] = "/gemm.v1.Transfer/Download";
// A Download stream's trailing metadata key for release_after_download
// (gemm.v1.DownloadRequest).
constexpr char kReleaseAfterDownloadKey[] = "gemm-release-after-download";

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

// What both kinds of stripe share: the call's context, and how a stream ends:
// its result, prefixed with what it was moving, goes to the Outcome, and the
// stream deletes itself.
class StripeStream : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  void OnDone(const grpc::Status& status) final {
    absl::Status st = Result(status);
    if (!st.ok()) st = absl::Status(st.code(), absl::StrCat(what_, ": ", st.message()));
    Outcome* outcome = outcome_;
    delete this;
    outcome->Done(st);
  }

 protected:
  StripeStream(const char* what, Outcome* outcome) : what_(what), outcome_(outcome) {}

  // Sets up the call on `stub`; the caller starts its first operations and
  // then StartCall.
  void Prepare(grpc::GenericStub* stub, const char* method,
               const ChunkedTransfer::PrepareContext& prepare) {
    prepare(&context_);
    stub->PrepareBidiStreamingCall(&context_, method, grpc::StubOptions(), this);
  }

  // The stream's result once gRPC is done with it: by default the call's.
  virtual absl::Status Result(const grpc::Status& status) { return FromGrpcStatus(status); }

  grpc::ClientContext context_;

 private:
  const char* const what_;
  Outcome* const outcome_;
};

// Starts one stream per stripe, stripe i on channels[i % channels.size()]
// (`start(stub, i, outcome)` starts stripe i's), and waits for all of them:
// the first error, else OK.
absl::Status RunStripes(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                        size_t stripes,
                        const std::function<void(grpc::GenericStub*, size_t, Outcome*)>& start) {
  std::vector<grpc::GenericStub> stubs;
  stubs.reserve(stripes);
  for (size_t i = 0; i < stripes; ++i) stubs.emplace_back(channels[i % channels.size()]);
  Outcome outcome(static_cast<int>(stripes));
  for (size_t i = 0; i < stripes; ++i) start(&stubs[i], i, &outcome);
  return outcome.Wait();
}

}  // namespace

// One stripe of an upload: writes its chunks one after another (gRPC allows
// one write in flight per stream), then reads the summary.
class ChunkedTransfer::UploadStream final : public StripeStream {
 public:
  UploadStream(grpc::GenericStub* stub, const std::string& handle, const char* data, Range range,
               uint64_t chunk_bytes, const PrepareContext& prepare, Outcome* outcome)
      : StripeStream("upload", outcome),
        handle_(handle),
        data_(data),
        next_(range.begin),
        end_(range.end),
        chunk_bytes_(chunk_bytes) {
    Prepare(stub, kUploadMethod, prepare);
    StartRead(&summary_);
    WriteNext();
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    if (ok) WriteNext();  // else the call is over; OnDone has its status
  }
  void OnReadDone(bool) override {}

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

  const std::string handle_;
  const char* const data_;
  uint64_t next_;
  const uint64_t end_;
  const uint64_t chunk_bytes_;
  grpc::ByteBuffer out_;
  grpc::ByteBuffer summary_;
};

// One stripe of a download: sends its DownloadRequest and copies each chunk
// to its place as it arrives.
class ChunkedTransfer::DownloadStream final : public StripeStream {
 public:
  // With `uncounted` non-null the stream asks for release_after_download and
  // decrements *counted when the server says it counted the stream's bytes.
  DownloadStream(grpc::GenericStub* stub, const std::string& handle, char* dst, Range range,
                 uint64_t chunk_bytes, const PrepareContext& prepare, Outcome* outcome,
                 std::atomic<int>* uncounted)
      : StripeStream("download", outcome),
        dst_(dst),
        begin_(range.begin),
        next_(range.begin),
        end_(range.end),
        uncounted_(uncounted) {
    v1::DownloadRequest request;
    request.set_handle(handle);
    request.set_offset(range.begin);
    request.set_length(range.end - range.begin);
    request.set_chunk_bytes(chunk_bytes);
    request.set_release_after_download(uncounted != nullptr);
    bool own;
    grpc::SerializationTraits<v1::DownloadRequest>::Serialize(request, &request_, &own);
    Prepare(stub, kDownloadMethod, prepare);
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

 private:
  absl::Status Result(const grpc::Status& status) override {
    absl::Status st = error_;
    if (st.ok()) st = FromGrpcStatus(status);
    if (st.ok() && next_ != end_)
      st = absl::DataLossError(absl::StrCat("the download ended at byte ", next_, " of [", begin_,
                                            ", ", end_, ")"));
    if (st.ok() && uncounted_ != nullptr &&
        context_.GetServerTrailingMetadata().count(kReleaseAfterDownloadKey) > 0)
      uncounted_->fetch_sub(1);
    return st;
  }

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

  char* const dst_;
  const uint64_t begin_;  // this stripe's range is [begin_, end_)
  uint64_t next_;
  const uint64_t end_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer in_;
  absl::Status error_;  // set by a reaction before cancelling; read in OnDone
  std::atomic<int>* const uncounted_;
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
  return RunStripes(channels_, stripes.size(),
                    [&](grpc::GenericStub* stub, size_t i, Outcome* outcome) {
                      new UploadStream(stub, stripes[i].job->handle,
                                       static_cast<const char*>(stripes[i].job->data),
                                       stripes[i].range, options_.chunk_bytes, prepare, outcome);
                    });
}

absl::Status ChunkedTransfer::Download(const std::string& handle, void* dst, uint64_t bytes,
                                       const PrepareContext& prepare, bool* released) const {
  const std::vector<Range> ranges = Stripes(bytes, options_.chunk_bytes, options_.stripes);
  // Streams whose bytes the server has not (yet) said it counted.
  std::atomic<int> uncounted(static_cast<int>(ranges.size()));
  absl::Status st = RunStripes(channels_, ranges.size(),
                               [&](grpc::GenericStub* stub, size_t i, Outcome* outcome) {
                                 new DownloadStream(stub, handle, static_cast<char*>(dst),
                                                    ranges[i], options_.chunk_bytes, prepare,
                                                    outcome, released ? &uncounted : nullptr);
                               });
  if (released != nullptr) *released = st.ok() && !ranges.empty() && uncounted.load() == 0;
  return st;
}

}  // namespace gemm
