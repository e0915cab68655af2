// The server's explicit limits. Every one is a flag of the server binary
// (server_main.cc) and is reported to clients by GetServerInfo, except
// max_receive_buffer_bytes (a property of the transport, not of requests).
#ifndef GEMM_SERVICE_BASE_LIMITS_H_
#define GEMM_SERVICE_BASE_LIMITS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gemm {

struct ServiceLimits {
  // Largest gRPC message, either direction. gRPC's own default is 4 MiB; one
  // 8192^2 fp32 operand alone is 256 MiB.
  uint64_t max_message_bytes = uint64_t{1} << 30;  // 1 GiB
  // Memory gRPC may hold for all the server's connections together (its
  // resource quota), mostly messages still arriving; 0 (the default) leaves
  // it unbounded, as gRPC does. gRPC 1.51 reads a message up to the length
  // its 5-byte prefix declares before checking it against max_message_bytes,
  // so max_message_bytes does not bound what a client can make the server
  // buffer; this can, loosely. Past it gRPC reclaims memory: it closes idle
  // connections (GOAWAY) and resets a stream of whichever connection it
  // reclaims from first, which may be another client's (UNAVAILABLE or
  // RESOURCE_EXHAUSTED; gemm::Client retries both); and a message arriving
  // fast may still arrive in full before that runs. When set, at least
  // max_message_bytes, so that one message of the largest size fits.
  uint64_t max_receive_buffer_bytes = 0;
  // Largest M, N or K of one problem.
  uint64_t max_dimension = uint64_t{1} << 20;
  // Largest single operand or result, in bytes.
  uint64_t max_matrix_bytes = uint64_t{1} << 30;  // 1 GiB
  // Most problems in one request.
  uint32_t max_problems_per_request = 4096;
  // Requests waiting in the queue (not yet running); beyond this new requests
  // are rejected with RESOURCE_EXHAUSTED at once.
  uint32_t max_queued_requests = 1024;
  // Bytes held by admitted requests (operands and results) from admission to
  // completion, queued or running. Bounds the server's memory.
  uint64_t max_inflight_bytes = uint64_t{4} << 30;  // 4 GiB
  // Requests one GemmStream may have admitted and unanswered at once; the
  // stream stops reading until some complete (flow control, not an error).
  uint32_t max_stream_inflight = 64;
  // Gemm and GemmStream requests held at once waiting for uploads they name to
  // complete (pipelined requests, docs/api.md); past it such a request is
  // RESOURCE_EXHAUSTED at once. Each holds its parsed request (at most
  // max_message_bytes) and nothing else: the uploads' bytes count against
  // max_resident_bytes. 0: requests never wait, and an unfinished upload is
  // FAILED_PRECONDITION.
  uint32_t max_waiting_requests = 256;
  // Bytes of all matrices stored with RegisterMatrix together (device memory
  // on the CUDA backend); registering past it is RESOURCE_EXHAUSTED. 0 turns
  // resident operands off.
  uint64_t max_resident_bytes = uint64_t{8} << 30;  // 8 GiB
  // Same-host clients' shared-memory regions mapped at once, and their
  // bytes together (the clients' memory; this bounds the server's address
  // space). 0 regions turns shared memory off.
  uint32_t max_shared_memory_regions = 256;
  uint64_t max_shared_memory_bytes = uint64_t{1} << 40;  // 1 TiB

  // InvalidArgument naming the first bad field, or OK.
  absl::Status Validate() const;
};

// The status payload naming the server limit a refusal ran into (e.g.
// "max_queued_requests"); the server's log writes it as `limit`
// (call_log.h). Clients do not see it.
inline constexpr char kLimitPayloadUrl[] = "type.gemm.dev/limit";
// `status` with its limit payload set to `limit`.
absl::Status WithLimit(absl::Status status, absl::string_view limit);

}  // namespace gemm

#endif  // GEMM_SERVICE_BASE_LIMITS_H_
