// Where a batch's operands and results sit in a CUDA lane's buffers, and the
// host copies into and out of them. Plain C++ (no CUDA runtime), so the
// layout is tested on the CPU.
//
// A lane has one pinned staging buffer and one device buffer of the same
// layout: the input region (staged operands, then any grouped launch's
// descriptors) and, after it, the output region (results). One H2D copy moves
// the input region, one D2H copy the output region. Operand starts are
// aligned to kOperandAlign. Members of a strided-batched launch sit at a
// fixed stride per operand (all A, then all B, then all C, then the FP8
// scales of all A and of all B, back to back), so one launch covers them; a
// resident operand is not staged, the kernel reads its device copy (the
// scales of an FP8 operand come with each request and are staged always).
#ifndef GEMM_SERVICE_CUDA_BATCH_LAYOUT_H_
#define GEMM_SERVICE_CUDA_BATCH_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/gemm_problem.h"
#include "service/queue/launch_plan.h"
#include "service/queue/work_item.h"

namespace gemm {
namespace gpu {

// Operand starts are aligned for TMA (16 bytes) and for full DRAM bursts.
inline constexpr size_t kOperandAlign = 256;
// LaunchLayout::descriptors of a launch without descriptors in the input
// region.
inline constexpr size_t kNoDescriptors = SIZE_MAX;

// Where one problem's operands sit. The offset of a resident operand is not
// read (the kernel reads its device copy).
struct Placement {
  size_t a = 0, b = 0, c = 0;  // offsets in the input region
  size_t d = 0;                // offset in the output region
  bool has_c = false;          // C is read: beta != 0 and C is present
  // The fp32 scales of FP8 operands (ScaleMode other than kNone), in the
  // input region. The members of a strided-batched launch have theirs back
  // to back, as the kernel reads them.
  size_t a_scales = 0, b_scales = 0;
};

// Which of a problem's host matrices lie in a page-locked shared-memory
// region (SharedMemoryRegion::pinned): the lane copies those by DMA straight
// between the region and the device buffer, and neither StageInputs nor
// CopyOutResults touches them. A C stored in another layout than D is
// always staged (it is transposed on the way).
struct DirectCopies {
  bool a = false, b = false, c = false, d = false;
  bool any() const { return a || b || c || d; }
};

struct ProblemLayout {
  const GemmProblemRef* problem = nullptr;
  size_t item = 0;  // its item's index in the batch
  Placement placement;
  DirectCopies direct;
};

struct LaunchLayout {
  // Its problems: BatchLayout::problems[first, first + count), in plan order.
  size_t first = 0;
  size_t count = 0;
  // The item of its first problem, whose report lists the launch.
  size_t owner = 0;
  // A grouped launch's descriptors: their offset in the input region.
  size_t descriptors = kNoDescriptors;
};

struct BatchLayout {
  std::vector<ProblemLayout> problems;  // launch by launch
  std::vector<LaunchLayout> launches;   // one per planned launch, in plan order
  size_t input_bytes = 0;   // a multiple of kOperandAlign
  size_t output_bytes = 0;  // the output region starts at input_bytes
  size_t staging_bytes() const { return input_bytes + output_bytes; }

  const ProblemLayout& problem(size_t launch, size_t member) const {
    return problems[launches[launch].first + member];
  }
};

struct BatchLayoutOptions {
  // Bytes of a grouped launch's descriptors for that many problems, carried
  // in the input region (0: none there). Empty: no grouped launch has any.
  std::function<size_t(size_t problems)> grouped_descriptor_bytes;
};

// Lays out `batch`. INVALID_ARGUMENT for a launch without problems or one
// naming a problem that is not in the batch's items.
absl::StatusOr<BatchLayout> LayOutBatch(const Batch& batch, const BatchLayoutOptions& options);

// Each item's part of the launches' device time: launch i's `launch_ms[i]`
// split among the items of its problems by their FLOPs (evenly where they
// have none). `items` is the batch's item count; the result has that size.
std::vector<double> DeviceShareMs(const BatchLayout& layout, const std::vector<float>& launch_ms,
                                  size_t items);

// The device copy of a resident operand, or nullptr for one that is staged.
const void* ResidentData(const MatrixRef& m);

// The one host copy on the way in: every staged operand from its request
// into `staging` (layout.staging_bytes() long). The kernel reads C in D's
// layout, so a C stored otherwise is transposed on the way.
void StageInputs(const BatchLayout& layout, unsigned char* staging);

// The one host copy on the way out: every result from the output region of
// `staging` into its response, for the problems of the items whose
// `item_status` is OK.
void CopyOutResults(const BatchLayout& layout, const unsigned char* staging,
                    const std::vector<absl::Status>& item_status);

// Bytes a request moves between host and device when it runs: its staged
// operands (not the resident ones) in, every result out.
struct TransferBytes {
  double in = 0;
  double out = 0;
};
TransferBytes StagedBytes(const WorkItem& item);

}  // namespace gpu
}  // namespace gemm

#endif  // GEMM_SERVICE_CUDA_BATCH_LAYOUT_H_
