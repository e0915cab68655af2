// GetServerInfo: the backend, its devices and peak rates, the limits a
// client sizes its requests by, and the input types served.
#include <string>

#include "service/rpc/gemm_service.h"
#include "service/rpc/transfer_service.h"
#include "service/version.h"

namespace gemm {

grpc::ServerUnaryReactor* GemmServiceImpl::GetServerInfo(grpc::CallbackServerContext* context,
                                                         const v1::GetServerInfoRequest*,
                                                         v1::ServerInfo* out) {
  const absl::Time received = clock_->Now();
  const BackendInfo& info = executor_->info();
  out->set_version(kVersion);
  out->set_backend(info.backend);
  out->set_instance_id(instance_id_);
  for (const DeviceDescription& d : info.devices) {
    v1::DeviceInfo* di = out->add_devices();
    di->set_name(d.name);
    di->set_compute_capability(d.compute_capability);
    di->set_multiprocessors(d.multiprocessors);
    di->set_memory_bytes(d.memory_bytes);
    di->set_threads(d.threads);
  }
  for (const PeakRate& r : executor_->peak_rates()) {
    v1::PeakRate* pr = out->add_peak_rates();
    pr->set_kind(r.kind);
    pr->set_per_second(r.per_second);
    pr->set_method(r.method);
  }
  v1::Limits* l = out->mutable_limits();
  l->set_max_message_bytes(limits().max_message_bytes);
  l->set_max_dimension(limits().max_dimension);
  l->set_max_problem_bytes(limits().max_matrix_bytes);
  l->set_max_problems_per_request(limits().max_problems_per_request);
  l->set_max_queued_requests(limits().max_queued_requests);
  l->set_max_queued_bytes(limits().max_inflight_bytes);
  l->set_max_resident_bytes(residents_ != nullptr ? limits().max_resident_bytes : 0);
  l->set_max_chunk_bytes(MaxChunkBytes(limits()));
  l->set_max_waiting_requests(residents_ != nullptr ? limits().max_waiting_requests : 0);
  l->set_max_shared_memory_regions(shared_memory() != nullptr ? limits().max_shared_memory_regions
                                                             : 0);
  l->set_max_shared_memory_bytes(shared_memory() != nullptr ? limits().max_shared_memory_bytes : 0);
  for (const std::string& k : info.kernels) out->add_kernels(k);
  for (auto t : {v1::DATA_TYPE_FP32, v1::DATA_TYPE_FP16, v1::DATA_TYPE_BF16})
    out->add_input_dtypes(t);
  if (features().fp8)
    for (auto t : {v1::DATA_TYPE_FP8_E4M3, v1::DATA_TYPE_FP8_E5M2}) out->add_input_dtypes(t);
  // The time it took, like every other RPC (it was recorded as zero).
  metrics_->RecordRequest("GetServerInfo", 0, clock_->Now() - received);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace gemm
