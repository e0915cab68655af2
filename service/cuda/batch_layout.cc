#include "service/cuda/batch_layout.h"

#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/parallel_copy.h"
#include "service/store/resident_matrix.h"
#include "service/store/shared_memory_region.h"

namespace gemm {
namespace gpu {
namespace {

size_t RoundUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

size_t Aligned(uint64_t bytes) { return RoundUp(bytes, kOperandAlign); }

// Appends one region of `bytes` at `*end`; returns its offset.
size_t Take(size_t* end, uint64_t bytes) {
  const size_t at = *end;
  *end += Aligned(bytes);
  return at;
}

// Bytes of an operand's FP8 scales (0 for other operands).
uint64_t ScaleBytes(const MatrixRef& m) {
  return m.scales.mode == ScaleMode::kNone ? 0 : m.scales.count * sizeof(float);
}

// Each problem of a single or grouped launch: its own staged operands, one
// after the other.
void PlaceEach(std::vector<ProblemLayout>& members, size_t* in, size_t* out) {
  for (ProblemLayout& m : members) {
    const GemmProblemRef& p = *m.problem;
    Placement& pl = m.placement;
    if (!ResidentData(p.a)) pl.a = Take(in, p.a.bytes());
    if (!ResidentData(p.b)) pl.b = Take(in, p.b.bytes());
    if (pl.has_c && !ResidentData(p.c)) pl.c = Take(in, p.d_bytes());
    if (const uint64_t s = ScaleBytes(p.a); s > 0) pl.a_scales = Take(in, s);
    if (const uint64_t s = ScaleBytes(p.b); s > 0) pl.b_scales = Take(in, s);
    pl.d = Take(out, p.d_bytes());
  }
}

// The members of a strided-batched launch: each operand at a fixed stride,
// sized by the first member. Members share each resident operand (the plan's
// batch key includes it): one device copy read by every member, stride 0.
void PlaceStrided(std::vector<ProblemLayout>& members, size_t* in, size_t* out) {
  const GemmProblemRef& first = *members.front().problem;
  const size_t count = members.size();
  const size_t d_stride = Aligned(first.shape.m * first.shape.n * SizeOf(first.shape.output_dtype));
  const size_t a_step = ResidentData(first.a) ? 0 : Aligned(first.a.bytes());
  const size_t b_step = ResidentData(first.b) ? 0 : Aligned(first.b.bytes());
  const bool has_c = members.front().placement.has_c;
  const size_t c_step = has_c && !ResidentData(first.c) ? d_stride : 0;
  // Scales back to back, unpadded: the kernel reads member i's at
  // i * ScaleCount from the first's.
  const size_t as_step = ScaleBytes(first.a), bs_step = ScaleBytes(first.b);
  const size_t a0 = *in, b0 = a0 + count * a_step, c0 = b0 + count * b_step;
  const size_t as0 = c0 + count * c_step, bs0 = as0 + Aligned(count * as_step);
  *in = bs0 + Aligned(count * bs_step);
  for (size_t i = 0; i < count; ++i) {
    Placement& pl = members[i].placement;
    pl.a = a0 + i * a_step;
    pl.b = b0 + i * b_step;
    pl.c = c0 + i * c_step;
    pl.a_scales = as0 + i * as_step;
    pl.b_scales = bs0 + i * bs_step;
    pl.d = *out + i * d_stride;
  }
  *out += count * d_stride;
}

// Which item each problem of `batch` belongs to.
std::map<const GemmProblemRef*, size_t> ItemOfProblem(const Batch& batch) {
  std::map<const GemmProblemRef*, size_t> item_of;
  for (size_t i = 0; i < batch.items.size(); ++i)
    for (const GemmProblemRef& p : batch.items[i]->problems) item_of[&p] = i;
  return item_of;
}

// The members of launch `li`, with their items; placements not yet set.
absl::StatusOr<std::vector<ProblemLayout>> Members(
    const LaunchGroup& g, size_t li, const std::map<const GemmProblemRef*, size_t>& item_of) {
  if (g.problems.empty()) return absl::InvalidArgumentError(absl::StrCat("launch ", li, " is empty"));
  std::vector<ProblemLayout> members;
  members.reserve(g.problems.size());
  for (const GemmProblemRef* p : g.problems) {
    auto it = item_of.find(p);
    if (it == item_of.end())
      return absl::InvalidArgumentError(
          absl::StrCat("launch ", li, " names a problem of no item of the batch"));
    ProblemLayout m;
    m.problem = p;
    m.item = it->second;
    m.placement.has_c = p->beta != 0.0 && p->c.present();
    members.push_back(m);
  }
  return members;
}

// C as staged: C's shape and type in D's layout.
void StageTransposedC(const GemmProblemRef& p, unsigned char* dst) {
  const MatrixRef to{nullptr, p.c.rows, p.c.cols, p.shape.layout_d, p.c.dtype};
  const size_t e = SizeOf(p.c.dtype);
  const auto* src = static_cast<const unsigned char*>(p.c.data);
  for (uint64_t r = 0; r < p.c.rows; ++r)
    for (uint64_t c = 0; c < p.c.cols; ++c) std::memcpy(dst + to.offset(r, c), src + p.c.offset(r, c), e);
}

// The DirectCopies of `p`, one of `item`'s problems.
DirectCopies DirectCopiesOf(const GemmProblemRef& p, const WorkItem& item) {
  DirectCopies direct;
  if (item.shared_regions.empty()) return direct;
  auto pinned = [&item](const void* data, uint64_t bytes) {
    if (data == nullptr) return false;
    for (const auto& region : item.shared_regions)
      if (region->pinned() && region->Contains(data, bytes)) return true;
    return false;
  };
  direct.a = !ResidentData(p.a) && pinned(p.a.data, p.a.bytes());
  direct.b = !ResidentData(p.b) && pinned(p.b.data, p.b.bytes());
  direct.c = p.beta != 0.0 && p.c.present() && !ResidentData(p.c) &&
             p.c.layout == p.shape.layout_d && pinned(p.c.data, p.c.bytes());
  direct.d = pinned(p.d, p.d_bytes());
  return direct;
}

}  // namespace

const void* ResidentData(const MatrixRef& m) {
  return m.resident != nullptr ? m.resident->device_data() : nullptr;
}

std::vector<double> DeviceShareMs(const BatchLayout& layout, const std::vector<float>& launch_ms,
                                  size_t items) {
  std::vector<double> share(items, 0.0);
  for (size_t li = 0; li < layout.launches.size() && li < launch_ms.size(); ++li) {
    const LaunchLayout& launch = layout.launches[li];
    double total = 0;
    for (size_t j = 0; j < launch.count; ++j) total += layout.problem(li, j).problem->shape.flops();
    for (size_t j = 0; j < launch.count; ++j) {
      const ProblemLayout& p = layout.problem(li, j);
      if (p.item >= items) continue;
      const double part = total > 0 ? p.problem->shape.flops() / total : 1.0 / launch.count;
      share[p.item] += launch_ms[li] * part;
    }
  }
  return share;
}

absl::StatusOr<BatchLayout> LayOutBatch(const Batch& batch, const BatchLayoutOptions& options) {
  const std::map<const GemmProblemRef*, size_t> item_of = ItemOfProblem(batch);
  BatchLayout layout;
  layout.launches.resize(batch.launches.size());
  size_t in = 0, out = 0;
  for (size_t li = 0; li < batch.launches.size(); ++li) {
    const LaunchGroup& g = batch.launches[li];
    auto members = Members(g, li, item_of);
    if (!members.ok()) return members.status();
    if (g.kind == LaunchGroup::Kind::kStridedBatched) {
      PlaceStrided(*members, &in, &out);
    } else {
      PlaceEach(*members, &in, &out);
    }
    LaunchLayout& launch = layout.launches[li];
    launch.first = layout.problems.size();
    launch.count = members->size();
    launch.owner = members->front().item;
    // The descriptors follow the launch's operands, so the one H2D copy
    // carries them too.
    if (g.kind == LaunchGroup::Kind::kGrouped && options.grouped_descriptor_bytes) {
      if (const size_t bytes = options.grouped_descriptor_bytes(g.problems.size()); bytes > 0)
        launch.descriptors = Take(&in, bytes);
    }
    for (ProblemLayout& m : *members) m.direct = DirectCopiesOf(*m.problem, *batch.items[m.item]);
    layout.problems.insert(layout.problems.end(), members->begin(), members->end());
  }
  layout.input_bytes = Aligned(in);
  layout.output_bytes = out;
  return layout;
}

void StageInputs(const BatchLayout& layout, unsigned char* staging) {
  for (const ProblemLayout& m : layout.problems) {
    const GemmProblemRef& p = *m.problem;
    const Placement& pl = m.placement;
    if (!ResidentData(p.a) && !m.direct.a) ParallelCopy(staging + pl.a, p.a.data, p.a.bytes());
    if (!ResidentData(p.b) && !m.direct.b) ParallelCopy(staging + pl.b, p.b.data, p.b.bytes());
    if (const uint64_t s = ScaleBytes(p.a); s > 0) std::memcpy(staging + pl.a_scales, p.a.scales.data, s);
    if (const uint64_t s = ScaleBytes(p.b); s > 0) std::memcpy(staging + pl.b_scales, p.b.scales.data, s);
    // A resident C is in D's layout already (request validation checks it).
    if (!pl.has_c || ResidentData(p.c) || m.direct.c) continue;
    if (p.c.layout == p.shape.layout_d) {
      ParallelCopy(staging + pl.c, p.c.data, p.c.bytes());
    } else {
      StageTransposedC(p, staging + pl.c);
    }
  }
}

void CopyOutResults(const BatchLayout& layout, const unsigned char* staging,
                    const std::vector<absl::Status>& item_status) {
  const unsigned char* results = staging + layout.input_bytes;
  for (const ProblemLayout& m : layout.problems) {
    if (!item_status[m.item].ok() || m.direct.d) continue;
    ParallelCopy(m.problem->d, results + m.placement.d, m.problem->d_bytes());
  }
}

TransferBytes StagedBytes(const WorkItem& item) {
  TransferBytes bytes;
  for (const GemmProblemRef& p : item.problems) {
    if (!ResidentData(p.a)) bytes.in += p.a.bytes();
    if (!ResidentData(p.b)) bytes.in += p.b.bytes();
    bytes.in += ScaleBytes(p.a) + ScaleBytes(p.b);
    if (p.beta != 0.0 && p.c.present() && !ResidentData(p.c)) bytes.in += p.c.bytes();
    bytes.out += p.d_bytes();
  }
  return bytes;
}

}  // namespace gpu
}  // namespace gemm
