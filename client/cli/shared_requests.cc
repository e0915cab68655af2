#include "client/cli/shared_requests.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/matrix_view.h"
#include "common/status_macros.h"

namespace gemm {
namespace cli {
namespace {

uint64_t AlignUp(uint64_t x) {
  return (x + SharedRequests::kAlignment - 1) / SharedRequests::kAlignment *
         SharedRequests::kAlignment;
}

// The operands of `p` given by data, in the order they are laid out.
std::vector<const v1::Matrix*> InlineOperands(const v1::GemmProblem& p) {
  std::vector<const v1::Matrix*> out;
  for (const v1::Matrix* m : {&p.a(), &p.b(), &p.c()})
    if (m->source_case() == v1::Matrix::kData) out.push_back(m);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedRequests>> SharedRequests::Create(
    Client* client, const v1::GemmRequest& request, int slots) {
  if (slots < 1) return absl::InvalidArgumentError("slots: must be at least 1");
  if (request.keep_results())
    return absl::InvalidArgumentError("keep_results: results cannot be both kept and shared");
  // The layout: every operand once, then each slot's outputs.
  uint64_t end = AlignUp(SharedMemory::kFirstOffset);
  std::vector<std::pair<uint64_t, const std::string*>> copies;
  for (const v1::GemmProblem& p : request.problems()) {
    for (const v1::Matrix* m : InlineOperands(p)) {
      copies.emplace_back(end, &m->data());
      end = AlignUp(end + m->data().size());
    }
  }
  std::vector<std::vector<Output>> outputs(slots);
  for (int s = 0; s < slots; ++s) {
    for (const v1::GemmProblem& p : request.problems()) {
      GEMM_ASSIGN_OR_RETURN(const GemmProblemRef ref, ViewProblem(p));
      outputs[s].push_back(Output{end, ref.d_bytes()});
      end = AlignUp(end + ref.d_bytes());
    }
  }
  GEMM_ASSIGN_OR_RETURN(std::unique_ptr<SharedMemory> memory,
                        SharedMemory::Create(end - SharedMemory::kFirstOffset));
  for (const auto& [offset, bytes] : copies)
    std::memcpy(memory->base() + offset, bytes->data(), bytes->size());
  std::unique_ptr<SharedRequests> out(new SharedRequests(client, std::move(memory)));
  GEMM_ASSIGN_OR_RETURN(out->region_, client->RegisterSharedMemory(*out->memory_, "gemm_cli"));

  // Each operand named by its place, in the order laid out above; its
  // scales (FP8) stay in the message.
  v1::GemmRequest shared = request;
  size_t next = 0;
  for (v1::GemmProblem& p : *shared.mutable_problems()) {
    // mutable_c() would add a C to a problem without one.
    for (v1::Matrix* m : {p.mutable_a(), p.mutable_b(), p.has_c() ? p.mutable_c() : nullptr}) {
      if (m == nullptr || m->source_case() != v1::Matrix::kData) continue;
      v1::Matrix named = SharedMatrix(out->region_, copies[next++].first,
                                      FromProto(m->layout()).value_or(Layout::kRowMajor));
      if (m->has_scales()) *named.mutable_scales() = m->scales();
      *m = std::move(named);
    }
  }
  for (int s = 0; s < slots; ++s) {
    auto slot = std::make_shared<v1::GemmRequest>(shared);
    for (int i = 0; i < slot->problems_size(); ++i)
      *slot->mutable_problems(i)->mutable_output() = SharedRef(out->region_, outputs[s][i].offset);
    out->requests_.push_back(std::move(slot));
  }
  out->outputs_ = std::move(outputs);
  return out;
}

SharedRequests::~SharedRequests() {
  if (!region_.empty()) client_->UnregisterSharedMemory(region_).IgnoreError();
}

absl::StatusOr<v1::GemmResponse> SharedRequests::WithResults(
    int slot, const v1::GemmResponse& response) const {
  v1::GemmResponse out = response;
  const std::vector<Output>& outputs = outputs_[slot];
  if (out.results_size() != static_cast<int>(outputs.size()))
    return absl::DataLossError(absl::StrCat(out.results_size(), " results for ", outputs.size(),
                                            " problems"));
  for (int i = 0; i < out.results_size(); ++i) {
    v1::GemmResult* r = out.mutable_results(i);
    if (r->shared().region() != region_ || r->shared().offset() != outputs[i].offset)
      return absl::DataLossError(absl::StrCat("results[", i,
                                              "]: does not name the output it was given in "
                                              "the shared-memory region"));
    r->set_data(memory_->base() + outputs[i].offset, outputs[i].bytes);
    r->clear_shared();
  }
  return out;
}

}  // namespace cli
}  // namespace gemm
