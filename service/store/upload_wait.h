// UploadWait: a Gemm request held until the unfinished uploads it names
// (Matrix.handle of a BeginUpload whose bytes are still arriving) are
// complete, so that a client may send the request beside its upload streams
// instead of after them (pipelined requests, docs/api.md).
//
// It registers one completion callback per upload with the resident store
// (ResidentStore::WhenUploaded) and runs its own callback once: OK when the
// last of them completes, or the first failure, named by the operand's
// field ("problems[0].a.handle: ..."), or Cancel's status. Nothing polls.
#ifndef GEMM_SERVICE_STORE_UPLOAD_WAIT_H_
#define GEMM_SERVICE_STORE_UPLOAD_WAIT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "gemm/v1/gemm.pb.h"
#include "service/store/resident_store.h"

namespace gemm {

class UploadWait : public std::enable_shared_from_this<UploadWait> {
 public:
  // One operand to wait for: its field ("problems[0].a.handle") and handle.
  struct Operand {
    std::string field;
    std::string handle;
  };
  using Done = std::function<void(const absl::Status&)>;

  // The operands of `request` given by handle that name an unfinished upload
  // of `owner` in `store` now.
  static std::vector<Operand> Unfinished(const ResidentStore& store, absl::string_view owner,
                                         const v1::GemmRequest& request);

  // A wait for `operands` (not empty) of `owner`. `done` runs once, on the
  // thread that settles the wait (a Transfer stream's, Cancel's caller's, or
  // Begin's caller's when an upload completed meanwhile), with no lock of the
  // wait or the store held. `store` must outlive the wait.
  UploadWait(ResidentStore* store, std::string owner, std::vector<Operand> operands, Done done);

  // Registers the callbacks with the store: the wait starts. `done` may run
  // before Begin returns.
  void Begin();

  // Ends the wait (if it has not ended) with `code` and a message naming the
  // first operand still unfinished: "<field>: <why> before the upload of
  // ... completed". Its callbacks leave the store.
  void Cancel(absl::StatusCode code, absl::string_view why);

  // Implementation details follow.
 private:
  // Operand `index`'s upload ended with `status`.
  void Settle(size_t index, const absl::Status& status);
  // Ends the wait with `status`, having taken `done_` and the tickets still
  // registered under the lock.
  void End(const absl::Status& status, Done done, std::vector<std::pair<size_t, uint64_t>> left);
  // Under the lock: marks the wait ended and takes what End needs.
  std::vector<std::pair<size_t, uint64_t>> TakeTickets() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ResidentStore* const store_;
  const std::string owner_;
  const std::vector<Operand> operands_;

  absl::Mutex mu_;
  Done done_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  // Per operand: the store's ticket while its callback is registered, else 0.
  std::vector<uint64_t> tickets_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> settled_ ABSL_GUARDED_BY(mu_);
  size_t remaining_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gemm

#endif  // GEMM_SERVICE_STORE_UPLOAD_WAIT_H_
