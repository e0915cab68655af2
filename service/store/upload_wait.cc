#include "service/store/upload_wait.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gemm {

std::vector<UploadWait::Operand> UploadWait::Unfinished(const ResidentStore& store,
                                                        absl::string_view owner,
                                                        const v1::GemmRequest& request) {
  std::vector<Operand> out;
  for (int i = 0; i < request.problems_size(); ++i) {
    const v1::GemmProblem& p = request.problems(i);
    const std::pair<const char*, const v1::Matrix*> operands[] = {
        {"a", &p.a()}, {"b", &p.b()}, {"c", &p.c()}};
    for (const auto& [name, m] : operands) {
      if (m->source_case() != v1::Matrix::kHandle) continue;
      if (!store.UploadPending(owner, m->handle())) continue;
      out.push_back({absl::StrCat("problems[", i, "].", name, ".handle"), m->handle()});
    }
  }
  return out;
}

UploadWait::UploadWait(ResidentStore* store, std::string owner, std::vector<Operand> operands,
                       Done done)
    : store_(store),
      owner_(std::move(owner)),
      operands_(std::move(operands)),
      done_(std::move(done)),
      tickets_(operands_.size(), 0),
      settled_(operands_.size(), false),
      remaining_(operands_.size()) {}

void UploadWait::Begin() {
  std::shared_ptr<UploadWait> self = shared_from_this();
  for (size_t i = 0; i < operands_.size(); ++i) {
    // The callback keeps the wait alive while the store holds it.
    const uint64_t ticket = store_->WhenUploaded(
        owner_, operands_[i].handle,
        [self, i](const absl::Status& status) { self->Settle(i, status); });
    if (ticket == 0) {
      // Completed since Unfinished looked (or gone: admission's lookup then
      // says why).
      Settle(i, absl::OkStatus());
      continue;
    }
    bool ended;
    {
      absl::MutexLock lock(&mu_);
      ended = ended_;
      if (!ended && !settled_[i]) tickets_[i] = ticket;
    }
    if (ended) store_->CancelWait(operands_[i].handle, ticket);
  }
}

std::vector<std::pair<size_t, uint64_t>> UploadWait::TakeTickets() {
  ended_ = true;
  std::vector<std::pair<size_t, uint64_t>> left;
  for (size_t i = 0; i < tickets_.size(); ++i)
    if (tickets_[i] != 0) left.emplace_back(i, std::exchange(tickets_[i], 0));
  return left;
}

void UploadWait::Settle(size_t index, const absl::Status& status) {
  Done done;
  std::vector<std::pair<size_t, uint64_t>> left;
  {
    absl::MutexLock lock(&mu_);
    if (ended_ || settled_[index]) return;
    settled_[index] = true;
    tickets_[index] = 0;
    if (status.ok() && --remaining_ > 0) return;
    left = TakeTickets();
    done = std::move(done_);
  }
  End(status.ok() ? status
                  : absl::Status(status.code(), absl::StrCat(operands_[index].field, ": ",
                                                             status.message())),
      std::move(done), std::move(left));
}

void UploadWait::Cancel(absl::StatusCode code, absl::string_view why) {
  Done done;
  std::vector<std::pair<size_t, uint64_t>> left;
  size_t first = 0;
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    while (first + 1 < settled_.size() && settled_[first]) ++first;
    left = TakeTickets();
    done = std::move(done_);
  }
  const Operand& o = operands_[first];
  End(absl::Status(code, absl::StrCat(o.field, ": ", why, " before the upload of \"", o.handle,
                                      "\" completed")),
      std::move(done), std::move(left));
}

void UploadWait::End(const absl::Status& status, Done done,
                     std::vector<std::pair<size_t, uint64_t>> left) {
  for (const auto& [index, ticket] : left) store_->CancelWait(operands_[index].handle, ticket);
  if (done) done(status);
}

}  // namespace gemm
