#include "service/observe/process_metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace gemm {
namespace {

bool ReadFile(const char* path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

double CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  double n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the descriptor opendir itself holds
}

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type,
                                double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(m);
  return f;
}

}  // namespace

absl::StatusOr<ProcessSample> ParseProcStat(const std::string& stat, double ticks_per_second,
                                            double page_bytes, double boot_time_seconds) {
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return absl::InvalidArgumentError("stat: no ')' after comm");
  // Fields after comm start at field 3 (state).
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::string_view(stat).substr(close + 1), ' ', absl::SkipEmpty());
  auto field = [&](int n, double* out) {  // n is the 1-based field number of proc(5)
    const size_t i = static_cast<size_t>(n - 3);
    return i < f.size() && absl::SimpleAtod(absl::StripAsciiWhitespace(f[i]), out);
  };
  double utime, stime, start, vsize, rss;
  if (!field(14, &utime) || !field(15, &stime) || !field(22, &start) || !field(23, &vsize) ||
      !field(24, &rss)) {
    return absl::InvalidArgumentError("stat: too few or non-numeric fields");
  }
  if (ticks_per_second <= 0) return absl::InvalidArgumentError("stat: bad clock tick rate");
  ProcessSample s;
  s.cpu_seconds = (utime + stime) / ticks_per_second;
  s.virtual_bytes = vsize;
  s.resident_bytes = rss * page_bytes;
  if (boot_time_seconds >= 0) s.start_time_seconds = boot_time_seconds + start / ticks_per_second;
  return s;
}

absl::StatusOr<double> ParseBootTime(const std::string& proc_stat) {
  for (absl::string_view line : absl::StrSplit(proc_stat, '\n')) {
    if (absl::ConsumePrefix(&line, "btime ")) {
      double v;
      if (absl::SimpleAtod(absl::StripAsciiWhitespace(line), &v)) return v;
    }
  }
  return absl::NotFoundError("/proc/stat: no btime line");
}

absl::StatusOr<double> ParseMaxOpenFiles(const std::string& limits) {
  for (absl::string_view line : absl::StrSplit(limits, '\n')) {
    if (!absl::ConsumePrefix(&line, "Max open files")) continue;
    std::vector<absl::string_view> w = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (w.empty()) break;
    if (w[0] == "unlimited") return -1;
    double v;
    if (absl::SimpleAtod(w[0], &v)) return v;
    break;
  }
  return absl::NotFoundError("limits: no \"Max open files\" line");
}

ProcessSample ReadProcessSample() {
  ProcessSample s;
  std::string text;
  double boot = -1;
  if (ReadFile("/proc/stat", &text)) {
    if (auto b = ParseBootTime(text); b.ok()) boot = *b;
  }
  if (ReadFile("/proc/self/stat", &text)) {
    auto parsed = ParseProcStat(text, static_cast<double>(sysconf(_SC_CLK_TCK)),
                                static_cast<double>(sysconf(_SC_PAGESIZE)), boot);
    if (parsed.ok()) s = *parsed;
  }
  if (ReadFile("/proc/self/limits", &text)) {
    if (auto m = ParseMaxOpenFiles(text); m.ok()) s.max_fds = *m;
  }
  s.open_fds = CountOpenFds();
  return s;
}

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  const ProcessSample s = ReadProcessSample();
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  auto add = [&](const char* name, const char* help, MetricType type, double v) {
    if (v >= 0) out.push_back(Family(name, help, type, v));
  };
  add("process_cpu_seconds_total", "User and system CPU time spent, in seconds.",
      MetricType::Counter, s.cpu_seconds);
  add("process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::Gauge,
      s.resident_bytes);
  add("process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricType::Gauge,
      s.virtual_bytes);
  add("process_open_fds", "Number of open file descriptors.", MetricType::Gauge, s.open_fds);
  add("process_max_fds", "Maximum number of open file descriptors.", MetricType::Gauge,
      s.max_fds);
  add("process_start_time_seconds", "Start time of the process since the Unix epoch, in seconds.",
      MetricType::Gauge, s.start_time_seconds);
  return out;
}

}  // namespace gemm
