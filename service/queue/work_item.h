// One admitted request on its way through the queue and an executor.
#ifndef GEMM_SERVICE_QUEUE_WORK_ITEM_H_
#define GEMM_SERVICE_QUEUE_WORK_ITEM_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/gemm_problem.h"

namespace gemm {

class SharedMemoryRegion;  // service/store/shared_memory_region.h

// What fixed one deterministic problem's result bits, for
// GemmResponse.reproducibility: two results are comparable bit for bit when
// these, the backend, the device model and the build agree.
struct ProblemReproducibility {
  std::string kernel_family;    // "sm90_wgmma", "portable_simt", "openblas_sgemm"
  std::string kernel;           // the kernel's full name
  std::string tile;             // output tile of the kernel as it ran ("128x256")
  int splits = 1;               // k-ranges per output tile (1: K is never split)
  std::string reduction_order;  // how each element's k-sum is ordered
};

// One kernel launch (BLAS call on the CPU) as the metrics count it.
struct LaunchRecord {
  std::string kernel_kind;  // the metrics' label: which path ran it
  absl::Duration time;
  double flops = 0;  // 2*M*N*K over the launch's problems
};

// What an executor reports about how it ran a request.
struct ExecutionReport {
  absl::Duration queue_wait;
  absl::Duration transfer;  // staging: host<->device copies, dtype conversion
  // The batch's host-to-device and device-to-host copies alone (GPU
  // backends; their sum is `transfer`), for the staging benchmark.
  absl::Duration h2d, d2h;
  absl::Duration compute;
  std::string backend;
  std::string kernel;
  // Which device ran it, for the metrics' gpu label; -1 on the CPU.
  int device = -1;
  // Kernel launches (BLAS calls on the CPU) attributed to this request, by
  // kernel kind. A launch shared by several requests is listed on one.
  std::vector<LaunchRecord> launches;
  // This request's part of the device time (BLAS time on the CPU): each
  // launch's time split among the requests whose problems it ran, by their
  // FLOPs in it. What the per-tenant device seconds count, so a launch
  // shared by two tenants is charged to both.
  absl::Duration device_share;
  // Bytes copied host-to-device and back for this request's batch, listed on
  // one request of the batch (GPU backends only).
  uint64_t h2d_bytes = 0;
  uint64_t d2h_bytes = 0;
  // Deterministic requests only: the device model the bits depend on
  // ("NVIDIA H200 (sm_90)"; the CPU and BLAS build on the CPU) and, per
  // problem in request order, what fixed them.
  std::string device_model;
  std::vector<ProblemReproducibility> reproducibility;
};

struct WorkItem {
  // Problems point into the request and response that the RPC layer owns;
  // they stay valid until `done` has been called.
  std::vector<GemmProblemRef> problems;
  int priority = 0;
  // Who sent it (authenticated caller, else the peer address): requests of
  // one priority and deadline are interleaved across clients.
  std::string client;
  // The tenant the queue charged it to, set when it was queued ("" without
  // tenants), so its metrics follow the queue's accounting across reloads.
  std::string tenant;
  absl::Time deadline = absl::InfiniteFuture();
  // The request asked for batch-invariant results (GemmRequest.deterministic,
  // or the server's default): its problems share launches only with other
  // deterministic ones and run their deterministic plans (launch_plan.h).
  bool deterministic = false;
  absl::Time received;
  absl::Time enqueued;
  // Real-time stamps (absl::Now, whatever clock `received` and the deadlines
  // follow) of the request's way through the server, for the per-stage
  // latency histograms (gemm_request_stage_seconds): queued, taken into a
  // batch, handed to the executor, and completed (before `done` runs). Each
  // is written before the next stage begins, by the thread that ends the
  // previous one.
  struct Stamps {
    absl::Time queued, dispatched, executing, executed;
  } stamps;
  uint64_t bytes = 0;  // operands + results, counted against in-flight limits
  // Resident matrices the problems read (MatrixRef::resident), kept alive
  // until the item completes, even if released meanwhile.
  std::vector<std::shared_ptr<const ResidentMatrix>> residents;
  // Shared-memory regions the problems read or write, kept mapped until the
  // item completes, even if unregistered meanwhile.
  std::vector<std::shared_ptr<const SharedMemoryRegion>> shared_regions;
  // Host copies of resident operands that live on another device than the
  // one the item runs on (MultiDeviceExecutor); problems point into them.
  std::vector<std::shared_ptr<std::string>> host_copies;
  std::atomic<bool> cancelled{false};
  ExecutionReport report;

  // Called exactly once, by whoever finishes the item (queue or executor).
  std::function<void(const absl::Status&, const ExecutionReport&)> done;

  // Runs `done` the first time only; later calls are ignored. Whoever
  // completes an item has stopped reading its operands, so the item lets go
  // of them first: the RPC layer may keep the item until the call is torn
  // down, well after the client has its answer, and a matrix the client
  // releases on that answer must then be freed (and leave the resident
  // budget) at once, not when the call object goes.
  void Complete(const absl::Status& status) {
    if (completed_.exchange(true)) return;
    stamps.executed = absl::Now();
    residents.clear();
    shared_regions.clear();
    host_copies.clear();
    done(status, report);
  }
  bool completed() const { return completed_.load(); }

  double flops() const {
    double f = 0;
    for (const GemmProblemRef& p : problems) f += p.shape.flops();
    return f;
  }

 private:
  std::atomic<bool> completed_{false};
};

}  // namespace gemm

#endif  // GEMM_SERVICE_QUEUE_WORK_ITEM_H_
