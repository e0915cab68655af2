// ResidentStore: the matrices registered with RegisterMatrix, by handle.
//
// Besides whole matrices (Register), a matrix can arrive in chunks
// (BeginUpload, then ClaimUpload/FinishUploadRange per chunk, possibly from
// several streams at once): it is usable by requests only once every byte has
// arrived. Requests with keep_results leave their results here (Adopt).
// Transient matrices (the client library's per-request uploads, kept results)
// and unfinished uploads are freed after an idle timeout (ExpireIdle), so a
// client that goes away leaves nothing behind.
//
// Handles are 128 random bits (32 hex digits), prefixed by the server's
// instance id and a '-' when the store has one (Options::instance_id), and
// belong to the caller identity that registered them (caller_identity.h):
// only that identity may use or release one; another gets PERMISSION_DENIED,
// an unknown handle NOT_FOUND, and a handle with another instance's prefix
// FAILED_PRECONDITION saying that it belongs to another server. A byte
// budget bounds the total held, and with tenants (SetTenants) each tenant's
// max_resident_bytes bounds what its callers hold; a matrix counts against
// them until it is freed, which for one released while requests still use
// it is when the last of them is done.
#ifndef GEMM_SERVICE_STORE_RESIDENT_STORE_H_
#define GEMM_SERVICE_STORE_RESIDENT_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/gemm_problem.h"
#include "service/base/clock.h"
#include "service/queue/tenants.h"
#include "service/store/resident_matrix.h"

namespace gemm {

// The instance id a handle names ("<16 hex>-<32 hex>"), or empty for a
// handle without one.
absl::string_view HandleInstance(absl::string_view handle);

class ResidentStore {
 public:
  // Makes the stored copy of a matrix (Executor::CreateResident in the server).
  using Allocator =
      std::function<absl::StatusOr<std::shared_ptr<ResidentMatrix>>(const MatrixRef& source)>;
  // Makes the stored FP8 matrix of a bf16/fp32 one the server quantizes
  // (Executor::QuantizeResident in the server).
  using Quantizer = std::function<absl::StatusOr<std::shared_ptr<ResidentMatrix>>(
      const MatrixRef& source, const Fp8Quantization& q)>;

  struct Options {
    // Bytes of all resident matrices together (ServiceLimits::max_resident_bytes).
    uint64_t max_bytes = uint64_t{8} << 30;  // 8 GiB
    // Transient matrices and unfinished uploads unused for this long are
    // freed by ExpireIdle.
    absl::Duration idle_timeout = absl::Seconds(60);
    // 16 lowercase hex digits naming this server (GemmServer makes one at
    // start), or empty for bare 32-digit handles.
    std::string instance_id;
  };

  struct Registration {
    std::string handle;
    uint64_t bytes = 0;
  };

  // `upload_allocator` makes the (uninitialized) matrix of BeginUpload from a
  // shape; `clock` times idleness; `quantizer` makes the matrices of
  // RegisterQuantized and of uploads with `quantize`.
  ResidentStore(const Options& options, Allocator allocator,
                Allocator upload_allocator = MakeHostResidentUninitialized,
                const Clock* clock = Clock::Real(),
                Quantizer quantizer = QuantizeToHostResident);
  ~ResidentStore();

  // Resolves owners to tenants (tenants.h) for each tenant's
  // max_resident_bytes; null (the default): no per-tenant limit. Matrices
  // already held stay counted against the tenant they were reserved for
  // until freed; new ones resolve through `tenants`.
  void SetTenants(std::shared_ptr<const TenantsConfig> tenants);

  // Whether `bytes` more for `owner` would fit now: OK, or the
  // RESOURCE_EXHAUSTED a registration of them would get (naming the tenant
  // and its max_resident_bytes, or the server's). Reserves nothing: for a
  // request that keeps its results, checked before it runs.
  absl::Status CheckRoom(absl::string_view owner, uint64_t bytes) const;

  // Copies `source` (dense host bytes) into a new resident matrix owned by
  // `owner`. RESOURCE_EXHAUSTED naming max_resident_bytes when it does not
  // fit in the budget, or naming the tenant and its max_resident_bytes when
  // it does not fit in the owner's tenant's (limit payload, limits.h:
  // "max_resident_bytes" or "tenant.max_resident_bytes"); the allocator's
  // error when allocation fails.
  absl::StatusOr<Registration> Register(absl::string_view owner, const MatrixRef& source);
  // The same for a matrix the server quantizes on registration: `source`
  // (bf16/fp32) through the store's quantizer, held at QuantizedBytes
  // against the budget (reserved before the quantizer runs). The
  // quantizer's INVALID_ARGUMENT for a non-finite element comes back as it
  // is.
  absl::StatusOr<Registration> RegisterQuantized(absl::string_view owner,
                                                 const MatrixRef& source,
                                                 const Fp8Quantization& q);

  // Reserves and allocates a matrix of `shape` (its data ignored) whose bytes
  // arrive later by ClaimUpload / FinishUploadRange: in host memory when
  // `transient`, else from the upload allocator (the executor's memory). Until all have arrived,
  // Lookup answers FAILED_PRECONDITION. Budget errors as for Register.
  //
  // With `quantize`, the bytes arrive as `shape` describes them (bf16 or
  // fp32, into host memory) and the chunk that completes the upload
  // quantizes them (the store's quantizer) on its caller's thread; the
  // matrix is usable once that is done. It reserves the larger of the two
  // sizes until then and the quantized size afterwards.
  absl::StatusOr<Registration> BeginUpload(absl::string_view owner, const MatrixRef& shape,
                                           bool transient,
                                           std::optional<Fp8Quantization> quantize = std::nullopt);

  // Claims bytes [offset, offset + size) of an unfinished upload for one
  // chunk and returns the matrix to Write them into. Fails with NOT_FOUND /
  // PERMISSION_DENIED for the handle, FAILED_PRECONDITION when the matrix is
  // not an unfinished upload, INVALID_ARGUMENT (naming "offset" or "data")
  // for a range past the end or overlapping bytes already claimed. Each
  // successful claim must be followed by FinishUploadRange.
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> ClaimUpload(absl::string_view owner,
                                                              absl::string_view handle,
                                                              uint64_t offset, uint64_t size);
  // Ends a claim: `written` says whether the bytes were written (if not, the
  // range may be claimed again). The last byte of a matrix completes it. An
  // error only from a quantized upload whose quantization failed (a NaN or
  // infinity: INVALID_ARGUMENT naming "data"); the matrix is then released.
  absl::Status FinishUploadRange(absl::string_view handle, uint64_t offset, uint64_t size,
                                 bool written);

  // Registers an existing matrix (a request's kept result) for `owner`.
  // RESOURCE_EXHAUSTED over the budget, as for Register.
  absl::StatusOr<Registration> Adopt(absl::string_view owner,
                                     std::shared_ptr<ResidentMatrix> matrix, bool transient);

  // Completion of an unfinished upload, for a request that names it before
  // all its bytes have arrived: `done` runs once, with OK when the last byte
  // (and any quantization) is in, or with the reason the upload will never
  // complete (ABORTED when it was released, expired idle or abandoned; the
  // quantization's error). It runs on the thread that ended the upload, with
  // no lock of the store held, so it may call the store.
  using UploadWaiter = std::function<void(const absl::Status&)>;
  // Whether `handle` names an unfinished upload of `owner`.
  bool UploadPending(absl::string_view owner, absl::string_view handle) const;
  // Registers `done` for the unfinished upload `handle` of `owner` and
  // returns a ticket for CancelWait (never 0). Returns 0, and never calls
  // `done`, when `handle` names no unfinished upload of `owner` (a complete
  // matrix, or one Lookup refuses: Lookup then says why).
  uint64_t WhenUploaded(absl::string_view owner, absl::string_view handle, UploadWaiter done);
  // Waiters still registered when the store is destroyed are dropped without
  // running: the server has cancelled the calls they belong to by then.
  //
  // Forgets the waiter of `ticket` (no-op if it has run or gone).
  void CancelWait(absl::string_view handle, uint64_t ticket);
  // Releases the unfinished upload `handle` of `owner` whose bytes will not
  // all arrive (the client of a stream carrying them went away); its
  // waiters get ABORTED saying so, with `why`. No-op for a complete matrix, or one not owner's.
  void AbandonUpload(absl::string_view owner, absl::string_view handle, const absl::Status& why);

  // Frees transient matrices and unfinished uploads that have not been used
  // (looked up, written, adopted) for Options::idle_timeout; returns how many.
  // An owner's transient matrices are kept while any upload of that owner
  // is still receiving chunks.
  size_t ExpireIdle();

  // Forgets `handle`; its memory is freed once no holder of Lookup's result
  // remains. NOT_FOUND / PERMISSION_DENIED as described above.
  absl::Status Release(absl::string_view owner, absl::string_view handle);

  // Counts `bytes` of `handle` read by a Download that asked for
  // release_after_download; once the bytes counted reach the matrix's size
  // the matrix is released (as by Release) and this returns true. NOT_FOUND
  // / PERMISSION_DENIED as for Release.
  absl::StatusOr<bool> CountDownloaded(absl::string_view owner, absl::string_view handle,
                                       uint64_t bytes);

  // The matrix behind `handle`, kept alive while the result is held.
  absl::StatusOr<std::shared_ptr<const ResidentMatrix>> Lookup(absl::string_view owner,
                                                                absl::string_view handle) const;

  // Bytes held (registered, or released and still in use), and matrices
  // registered. Cheap; for the metrics.
  uint64_t bytes() const;
  size_t count() const;
  uint64_t max_bytes() const { return options_.max_bytes; }
  // Bytes held for tenant `tenant` (0 without tenants).
  uint64_t tenant_bytes(absl::string_view tenant) const;
  // Transient matrices and unfinished uploads held: work of requests still
  // under way (a drain waits for them).
  size_t transient_count() const;
  // WhenUploaded callbacks registered and not yet run or cancelled.
  size_t upload_waiters() const;

  // Implementation details follow.
 private:
  // An upload in progress: byte ranges claimed so far (start -> end), and
  // how many bytes of them have been written.
  struct Upload {
    std::shared_ptr<ResidentMatrix> writable;
    std::map<uint64_t, uint64_t> claimed;
    uint64_t written = 0;
    // Set for an upload kept as FP8 once complete.
    std::optional<Fp8Quantization> quantize;
    // WhenUploaded's callbacks, by ticket.
    std::map<uint64_t, UploadWaiter> waiters;
  };
  struct Entry {
    std::string owner;
    std::string tenant;  // whose budget holds its bytes; "" without tenants
    std::shared_ptr<const ResidentMatrix> matrix;
    bool transient = false;
    mutable absl::Time last_used;  // Lookup (const) refreshes it
    uint64_t downloaded = 0;  // CountDownloaded's tally
    std::unique_ptr<Upload> upload;  // set while bytes are still arriving
  };

  // Wraps `made` so that `bytes`, reserved for `tenant`, come back to the
  // budget when the matrix is freed.
  absl::StatusOr<std::shared_ptr<const ResidentMatrix>> Account(
      std::shared_ptr<ResidentMatrix> made, uint64_t bytes, const std::string& tenant);
  // Register's work with `make` in place of the allocator, holding `bytes`.
  absl::StatusOr<Registration> Register(absl::string_view owner, const MatrixRef& source,
                                        const Allocator& make, uint64_t bytes);
  // Takes `bytes` from the budget and from `owner`'s tenant's; returns the
  // tenant ("" without tenants) or RESOURCE_EXHAUSTED. With `reserve`
  // false takes nothing and answers the same (CheckRoom).
  absl::StatusOr<std::string> Reserve(absl::string_view owner, uint64_t bytes,
                                      bool reserve = true) const;
  // The status for a handle that is not in the store.
  absl::Status NotFound(absl::string_view handle) const;
  // Files `entry` under a new handle.
  Registration Insert(Entry entry, uint64_t bytes);
  // The waiters of an upload entry about to end, taken out to run after the
  // lock is released (RunWaiters).
  static std::vector<UploadWaiter> TakeWaiters(Entry& entry);
  // The matrices an ending entry dropped, released outside the lock.
  using Dropped = std::vector<std::shared_ptr<const ResidentMatrix>>;
  // Frees `dropped`, then runs `waiters` with `status`: a waiter's caller
  // answers its client, which must find the memory already given back.
  static void RunWaiters(Dropped dropped, std::vector<UploadWaiter> waiters,
                         const absl::Status& status);
  // Byte accounting shared with the matrices' deleters, which may run after
  // the store is gone.
  struct Budget;

  const Options options_;
  const Allocator allocator_;
  const Allocator upload_allocator_;
  const Clock* const clock_;
  const Quantizer quantizer_;
  const std::shared_ptr<Budget> budget_;

  mutable absl::Mutex mu_;
  absl::BitGen bitgen_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  std::shared_ptr<const TenantsConfig> tenants_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gemm

#endif  // GEMM_SERVICE_STORE_RESIDENT_STORE_H_
