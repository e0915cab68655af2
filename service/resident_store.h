// ResidentStore: the matrices registered with RegisterMatrix, by handle.
//
// Handles are 128 random bits (32 hex digits) and belong to the caller
// identity that registered them (caller_identity.h): only that identity may
// use or release one; another gets PERMISSION_DENIED, an unknown handle
// NOT_FOUND. A byte budget bounds the total held; a matrix counts against it
// until it is freed, which for one released while requests still use it is
// when the last of them is done.
#ifndef GEMM_SERVICE_RESIDENT_STORE_H_
#define GEMM_SERVICE_RESIDENT_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/gemm_problem.h"
#include "service/resident_matrix.h"

namespace gemm {

class ResidentStore {
 public:
  // Makes the stored copy of a matrix (Executor::CreateResident in the server).
  using Allocator =
      std::function<absl::StatusOr<std::shared_ptr<ResidentMatrix>>(const MatrixRef& source)>;

  struct Options {
    // Bytes of all resident matrices together (ServiceLimits::max_resident_bytes).
    uint64_t max_bytes = uint64_t{8} << 30;  // 8 GiB
  };

  struct Registration {
    std::string handle;
    uint64_t bytes = 0;
  };

  ResidentStore(const Options& options, Allocator allocator);
  ~ResidentStore();

  // Copies `source` (dense host bytes) into a new resident matrix owned by
  // `owner`. RESOURCE_EXHAUSTED naming max_resident_bytes when it does not
  // fit in the budget; the allocator's error when allocation fails.
  absl::StatusOr<Registration> Register(absl::string_view owner, const MatrixRef& source);

  // Forgets `handle`; its memory is freed once no holder of Lookup's result
  // remains. NOT_FOUND / PERMISSION_DENIED as described above.
  absl::Status Release(absl::string_view owner, absl::string_view handle);

  // The matrix behind `handle`, kept alive while the result is held.
  absl::StatusOr<std::shared_ptr<const ResidentMatrix>> Lookup(absl::string_view owner,
                                                                absl::string_view handle) const;

  // Bytes held (registered, or released and still in use), and matrices
  // registered. Cheap; for the metrics.
  uint64_t bytes() const;
  size_t count() const;
  uint64_t max_bytes() const { return options_.max_bytes; }

  // Implementation details follow.
 private:
  struct Entry {
    std::string owner;
    std::shared_ptr<const ResidentMatrix> matrix;
  };
  // Byte accounting shared with the matrices' deleters, which may run after
  // the store is gone.
  struct Budget;

  const Options options_;
  const Allocator allocator_;
  const std::shared_ptr<Budget> budget_;

  mutable absl::Mutex mu_;
  absl::BitGen bitgen_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gemm

#endif  // GEMM_SERVICE_RESIDENT_STORE_H_
