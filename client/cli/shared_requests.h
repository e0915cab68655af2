// gemm_cli --shared_memory: a request's operands copied once into a
// same-host shared-memory region (client/shared_memory.h) and named there,
// with its results written into the region, so that neither travels in gRPC
// messages. Each of `slots` copies of the request (one per request in
// flight) has its own outputs: a request writing D must not share it with
// another one running at the same time.
#ifndef GEMM_CLIENT_CLI_SHARED_REQUESTS_H_
#define GEMM_CLIENT_CLI_SHARED_REQUESTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/gemm_client.h"
#include "client/shared_memory.h"
#include "gemm/v1/gemm.pb.h"

namespace gemm {
namespace cli {

class SharedRequests {
 public:
  // Operands and outputs start on this grid in the region.
  static constexpr uint64_t kAlignment = 256;

  // Copies the operands of `request` (given by data) into a new region,
  // registers it with `client` and builds `slots` requests naming it. The
  // server's refusal of the region (another host, its region limits) is
  // returned as is: the caller may send the bytes instead.
  static absl::StatusOr<std::unique_ptr<SharedRequests>> Create(Client* client,
                                                                const v1::GemmRequest& request,
                                                                int slots);
  // Unregisters the region.
  ~SharedRequests();

  const std::shared_ptr<const v1::GemmRequest>& request(int slot) const {
    return requests_[slot];
  }
  // `response` to request(slot) with each result's bytes read from the
  // region into its data, as if they had come in the message. DATA_LOSS if a
  // result does not name the output it was given.
  absl::StatusOr<v1::GemmResponse> WithResults(int slot, const v1::GemmResponse& response) const;
  // Bytes of the region (token included).
  uint64_t bytes() const { return memory_->bytes(); }

 private:
  struct Output {
    uint64_t offset = 0;
    uint64_t bytes = 0;
  };
  SharedRequests(Client* client, std::unique_ptr<SharedMemory> memory)
      : client_(client), memory_(std::move(memory)) {}

  Client* const client_;
  const std::unique_ptr<SharedMemory> memory_;
  std::string region_;
  std::vector<std::shared_ptr<const v1::GemmRequest>> requests_;
  std::vector<std::vector<Output>> outputs_;  // [slot][problem]
};

}  // namespace cli
}  // namespace gemm

#endif  // GEMM_CLIENT_CLI_SHARED_REQUESTS_H_
