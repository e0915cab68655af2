// The standard process_* metrics (CPU seconds, memory, file descriptors,
// start time), read from /proc/self when scraped so they are never stale.
// prometheus-cpp 1.0 has no process collector of its own; this Collectable
// is registered on the exposer next to the service's registry.
#ifndef GEMM_SERVICE_OBSERVE_PROCESS_METRICS_H_
#define GEMM_SERVICE_OBSERVE_PROCESS_METRICS_H_

#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "absl/status/statusor.h"

namespace gemm {

// One reading of the process's figures. Fields that could not be read stay
// negative and are left out of the exposition rather than reported as 0.
struct ProcessSample {
  double cpu_seconds = -1;
  double resident_bytes = -1;
  double virtual_bytes = -1;
  double open_fds = -1;
  double max_fds = -1;
  double start_time_seconds = -1;  // since the Unix epoch
};

// Parses /proc/<pid>/stat text: utime and stime (fields 14, 15), starttime
// (22), vsize (23) and rss (24, in pages). The comm field may hold spaces and
// parentheses, so fields are counted from the last ')'.
absl::StatusOr<ProcessSample> ParseProcStat(const std::string& stat, double ticks_per_second,
                                            double page_bytes, double boot_time_seconds);
// The btime line of /proc/stat (boot time, seconds since the epoch).
absl::StatusOr<double> ParseBootTime(const std::string& proc_stat);
// The soft limit from the "Max open files" line of /proc/<pid>/limits.
absl::StatusOr<double> ParseMaxOpenFiles(const std::string& limits);

// Reads the calling process's sample from /proc/self.
ProcessSample ReadProcessSample();

class ProcessCollector : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace gemm

#endif  // GEMM_SERVICE_OBSERVE_PROCESS_METRICS_H_
