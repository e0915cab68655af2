// One executor per device behind the Executor interface: every GPU of the
// host serves one server.
//
// A batch goes to the device with the least predicted finish time (work
// handed to it and not yet done, in seconds: FLOPs over the device's measured
// rate plus bytes over the host link), except that requests naming resident
// operands in device memory go where those operands live; when they live on
// several devices, to the one holding most of their bytes, the others copied
// there through host memory. Launch groups split by device (a strided launch
// whose members run on two devices becomes one per device). Resident
// matrices are placed on the device holding the fewest resident bytes.
// Tested on the CPU with fake children; on a GPU host the children are
// CudaExecutors, one per device.
//
// Each device's parts of a batch are handed to it by a thread of its own, in
// order: a child's Execute may wait for a free lane, and that wait must hold
// up neither the batcher nor the other devices. (It did: with every lane of
// GPU 0 busy, the batcher waited there while GPU 1's lanes went idle.)
#ifndef GEMM_SERVICE_EXEC_MULTI_DEVICE_EXECUTOR_H_
#define GEMM_SERVICE_EXEC_MULTI_DEVICE_EXECUTOR_H_

#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "service/exec/executor.h"

namespace gemm {

class MultiDeviceExecutor : public Executor {
 public:
  struct Options {
    // Host<->device bandwidth used to predict transfer time, bytes/s.
    double link_bytes_per_second = 50e9;
  };

  // `children[i]` serves device i. At least one; all of one backend.
  static absl::StatusOr<std::unique_ptr<MultiDeviceExecutor>> Create(
      std::vector<std::unique_ptr<Executor>> children, const Options& options);
  static absl::StatusOr<std::unique_ptr<MultiDeviceExecutor>> Create(
      std::vector<std::unique_ptr<Executor>> children) {
    return Create(std::move(children), Options());
  }
  // Hands over what is still queued for the devices, then stops their threads.
  ~MultiDeviceExecutor() override;

  const BackendInfo& info() const override { return info_; }
  // Every device's rates, their method prefixed "device D: ".
  std::vector<PeakRate> peak_rates() const override;
  // Each healthy device in turn, so that the others serve meanwhile;
  // UNAVAILABLE naming the devices that could not be measured.
  absl::Status RemeasurePeaks() override;
  int max_concurrent_batches() const override;
  void Execute(Batch batch) override;
  // The prediction of the device the item would run on: its resident
  // operands' device, else the device that predicts the shortest time. Zero
  // when that device has no prediction.
  absl::Duration PredictRunTime(const WorkItem& item) const override;
  // Every device's units together.
  int parallel_units() const override;
  // A batch's launches may land on any device: grouped only if all have it.
  bool supports_grouped() const override;
  // FP8 only where every device runs it.
  Fp8Support fp8_support() const override;
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> CreateResident(
      const MatrixRef& source) const override;
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> AllocateResident(
      const MatrixRef& shape) const override;
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> QuantizeResident(
      const MatrixRef& source, const Fp8Quantization& q) const override;
  // One page-locking serves every device (it is portable): the first's.
  std::shared_ptr<void> PinHostMemory(void* base, uint64_t bytes) const override;

  // Healthy while one device is: requests go only to healthy devices (those
  // pinned to a device out of service, and everything once none is left, are
  // answered UNAVAILABLE). The listener hears each device that goes out.
  bool healthy() const override;
  void SetHealthListener(HealthListener listener) override;

  int devices() const { return static_cast<int>(children_.size()); }
  // Predicted seconds of work handed to each device and not yet done.
  std::vector<double> outstanding_seconds() const;
  // Waits until every part given to Execute so far has been passed to its
  // device's Execute (which has returned). For tests.
  void WaitHandedOver();

  // Implementation details follow.
  // Predicted seconds `item` takes on device `d`.
  double Cost(const WorkItem& item, int d) const;

 private:
  MultiDeviceExecutor(std::vector<std::unique_ptr<Executor>> children, const Options& options);
  // The device with the least outstanding work.
  int LeastLoaded() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers every item of `part` with `why` and reports it done.
  static void Refuse(Batch part, const absl::Status& why);

  const Options options_;
  std::vector<std::unique_ptr<Executor>> children_;
  BackendInfo info_;

  // Makes a resident matrix of `bytes` with `make` on the device holding the
  // fewest resident bytes, and keeps that count.
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> PlaceResident(
      uint64_t bytes,
      const std::function<absl::StatusOr<std::shared_ptr<ResidentMatrix>>(const Executor&)>& make)
      const;

  mutable absl::Mutex mu_;
  std::vector<double> outstanding_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<uint64_t> resident_bytes_ ABSL_GUARDED_BY(mu_);

  // The parts waiting to be handed to one device, and its thread.
  struct HandOver {
    absl::Mutex mu;
    std::deque<Batch> parts ABSL_GUARDED_BY(mu);
    bool busy ABSL_GUARDED_BY(mu) = false;  // in the child's Execute
    bool stopping ABSL_GUARDED_BY(mu) = false;
    std::thread thread;
  };
  void HandOverLoop(int device);
  // After children_: the threads stop before the children go.
  std::vector<std::unique_ptr<HandOver>> hand_over_;
};

}  // namespace gemm

#endif  // GEMM_SERVICE_EXEC_MULTI_DEVICE_EXECUTOR_H_
