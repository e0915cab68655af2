#include "bench/interleaved_timing.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

namespace gemm_bench {
namespace {

bool Ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Owns the two events of a timing run.
struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Events() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
};

}  // namespace

bool TimeInterleaved(const std::vector<Launcher>& impls, int sets, const TimingPlan& plan,
                     std::vector<double>* ms) {
  Events ev;
  if (!Ok(cudaEventCreate(&ev.start), "cudaEventCreate") ||
      !Ok(cudaEventCreate(&ev.stop), "cudaEventCreate"))
    return false;
  for (const Launcher& launch : impls)
    for (int i = 0; i < plan.warmup; ++i)
      if (!launch(i % sets)) return false;
  if (!Ok(cudaDeviceSynchronize(), "warm-up")) return false;
  std::vector<std::vector<double>> samples(impls.size());
  int next = 0;
  for (int s = 0; s < plan.samples; ++s) {
    for (size_t i = 0; i < impls.size(); ++i) {
      if (!Ok(cudaEventRecord(ev.start), "cudaEventRecord")) return false;
      for (int r = 0; r < plan.runs_per_sample; ++r) {
        if (!impls[i](next)) return false;
        next = (next + 1) % sets;
      }
      float t = 0;
      if (!Ok(cudaEventRecord(ev.stop), "cudaEventRecord") ||
          !Ok(cudaEventSynchronize(ev.stop), "sample") ||
          !Ok(cudaEventElapsedTime(&t, ev.start, ev.stop), "cudaEventElapsedTime"))
        return false;
      samples[i].push_back(double(t) / plan.runs_per_sample);
    }
  }
  if (!Ok(cudaGetLastError(), "launches")) return false;
  ms->clear();
  for (auto& v : samples) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    ms->push_back(v[v.size() / 2]);
  }
  return true;
}

}  // namespace gemm_bench
