#include "service/observe/metrics.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "service/observe/process_metrics.h"
#include "service/queue/tenants.h"

namespace gemm {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricsTest, ShapeClassesAreBounded) {
  GemmShape s;
  s.m = s.n = s.k = 64;
  EXPECT_STREQ(ShapeClass(s), "tiny");
  s.m = s.n = s.k = 200;
  EXPECT_STREQ(ShapeClass(s), "small");
  s.m = s.n = s.k = 1024;
  EXPECT_STREQ(ShapeClass(s), "medium");
  s.m = s.n = s.k = 4096;
  EXPECT_STREQ(ShapeClass(s), "large");
  s.m = s.n = s.k = 8192;
  EXPECT_STREQ(ShapeClass(s), "huge");
}

TEST(MetricsTest, Fp8ProblemsCountUnderOneFp8Dtype) {
  ServiceMetrics m;
  for (DType b : {DType::kFp8E4m3, DType::kFp8E5m2}) {
    GemmProblemRef p;
    p.shape.m = 2;
    p.shape.n = 3;
    p.shape.k = 4;
    p.shape.input_dtype = DType::kFp8E4m3;
    p.shape.input_dtype_b = b;
    p.shape.output_dtype = DType::kBf16;
    p.a = MatrixA(p.shape, nullptr);
    p.b = MatrixB(p.shape, nullptr);
    m.RecordProblem(p, "cuda");
  }
  EXPECT_THAT(m.Scrape(),
              HasSubstr(R"(gemm_floating_point_operations_total{backend="cuda",dtype="fp8",)"
                        R"(shape_class="tiny"} 96)"));
}

TEST(MetricsTest, RecordsRequestsWorkAndRoofline) {
  ServiceMetrics m;
  m.SetBuildInfo("1.2.3", "cpu");
  m.SetPeakRates({{"fp32", 1e11, "measured"}, {"memory", 2e10, "measured"}});
  m.RecordRequest("Gemm", 0, absl::Milliseconds(3));
  m.RecordRequest("Gemm", 3, absl::Microseconds(80));
  m.RecordQueueWait(absl::Microseconds(120));
  m.RecordBatch(2, 5);
  GemmProblemRef p;
  p.shape.m = 2;
  p.shape.n = 3;
  p.shape.k = 4;
  p.a = MatrixA(p.shape, nullptr);
  p.b = MatrixB(p.shape, nullptr);
  m.RecordProblem(p, "cpu");
  m.RecordLaunch("cpu", {"openblas_sgemm", absl::Milliseconds(2), 48});
  double queued = 7, bytes = 1024;
  m.SetQueueProbe([&] { return queued; }, [&] { return bytes; });

  const std::string text = m.Scrape();
  EXPECT_THAT(text, HasSubstr(R"(gemm_build_info{backend="cpu",version="1.2.3"} 1)"));
  EXPECT_THAT(text, HasSubstr(R"(gemm_requests_total{code="OK",method="Gemm"} 1)"));
  EXPECT_THAT(text, HasSubstr(R"(gemm_requests_total{code="INVALID_ARGUMENT",method="Gemm"} 1)"));
  EXPECT_THAT(text, HasSubstr("gemm_request_duration_seconds_bucket"));
  EXPECT_THAT(text, HasSubstr("gemm_queue_wait_seconds_count 1"));
  EXPECT_THAT(text, HasSubstr("gemm_batch_problems_sum 5"));
  // 2*M*N*K = 48; bytes (A 8 + B 12 + D 6 elements) * 4 = 104.
  EXPECT_THAT(text, HasSubstr(
      R"(gemm_floating_point_operations_total{backend="cpu",dtype="fp32",shape_class="tiny"} 48)"));
  EXPECT_THAT(text, HasSubstr(R"(gemm_algorithmic_bytes_total{backend="cpu",dtype="fp32"} 104)"));
  EXPECT_THAT(text, HasSubstr(R"(gemm_launches_total{backend="cpu",kernel_kind="openblas_sgemm"} 1)"));
  EXPECT_THAT(text, HasSubstr(
      R"(gemm_launch_floating_point_operations_total{backend="cpu",kernel_kind="openblas_sgemm"} 48)"));
  EXPECT_THAT(text, HasSubstr(R"(gemm_peak_flops_per_second{dtype="fp32",method="measured"})"));
  EXPECT_THAT(text, HasSubstr(R"(gemm_peak_memory_bytes_per_second{method="measured"})"));
  EXPECT_THAT(text, HasSubstr("gemm_queue_depth 7"));
  queued = 3;
  EXPECT_THAT(m.Scrape(), HasSubstr("gemm_queue_depth 3"));
  EXPECT_THAT(m.Scrape(), HasSubstr("gemm_inflight_bytes 1024"));
  EXPECT_THAT(text, Not(HasSubstr("request_id")));
  m.SetLimits(1024, 4096);
  m.AddProbe("gemm_device_memory_used_bytes", "help", {{"gpu", "0"}}, [] { return 5.0; });
  m.AddProbe("gemm_device_memory_used_bytes", "help", {{"gpu", "1"}}, [] { return 6.0; });
  const std::string more = m.Scrape();
  EXPECT_THAT(more, HasSubstr("gemm_queue_limit_requests 1024"));
  EXPECT_THAT(more, HasSubstr(R"(gemm_device_memory_used_bytes{gpu="0"} 5)"));
  EXPECT_THAT(more, HasSubstr(R"(gemm_device_memory_used_bytes{gpu="1"} 6)"));
}

TEST(MetricsTest, DeviceHealthyPerGpu) {
  ServiceMetrics m;
  m.SetDeviceHealthy(0, true);
  m.SetDeviceHealthy(1, true);
  m.SetDeviceHealthy(1, false);
  const std::string text = m.Scrape();
  EXPECT_NE(text.find("gemm_device_healthy{gpu=\"0\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("gemm_device_healthy{gpu=\"1\"} 0"), std::string::npos) << text;
}

TEST(MetricsTest, CountsDeterministicRequestsByBackend) {
  ServiceMetrics m;
  m.RecordDeterministicRequest("cpu");
  m.RecordDeterministicRequest("cpu");
  m.RecordDeterministicRequest("cuda");
  const std::string text = m.Scrape();
  EXPECT_NE(text.find("gemm_deterministic_requests_total{backend=\"cpu\"} 2"), std::string::npos)
      << text;
  EXPECT_NE(text.find("gemm_deterministic_requests_total{backend=\"cuda\"} 1"),
            std::string::npos)
      << text;
}

TEST(MetricsTest, ExposerServesOnAFreePort) {
  ServiceMetrics m;
  ASSERT_TRUE(m.StartExposer("127.0.0.1:0").ok());
  EXPECT_GT(m.exposer_port(), 0);
}

// The value of the unlabelled series `name` in `text`, or -1.
double Value(const std::string& text, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const size_t at = text.find(key);
  return at == std::string::npos ? -1 : std::stod(text.substr(at + key.size()));
}

TEST(ProcessMetricsTest, ScrapeHasPlausibleProcessFigures) {
  ServiceMetrics m;
  const std::string text = m.Scrape();
  const double now = absl::ToUnixSeconds(absl::Now());
  EXPECT_GT(Value(text, "process_open_fds"), 0) << text;
  EXPECT_GT(Value(text, "process_max_fds"), 0);
  EXPECT_GT(Value(text, "process_resident_memory_bytes"), 0);
  EXPECT_GE(Value(text, "process_virtual_memory_bytes"),
            Value(text, "process_resident_memory_bytes"));
  EXPECT_GE(Value(text, "process_cpu_seconds_total"), 0);
  const double start = Value(text, "process_start_time_seconds");
  EXPECT_LE(start, now + 1);  // started before now, within the last hour
  EXPECT_GT(start, now - 3600);
  EXPECT_THAT(text, HasSubstr("# TYPE process_cpu_seconds_total counter"));
}

TEST(ProcessMetricsTest, CpuSecondsGrowWithWork) {
  const double before = ReadProcessSample().cpu_seconds;
  volatile double x = 0;
  const absl::Time until = absl::Now() + absl::Milliseconds(300);
  while (absl::Now() < until) x = x + 1;
  EXPECT_GT(ReadProcessSample().cpu_seconds, before);
}

TEST(ProcessMetricsTest, ParsesProcStatWithAwkwardCommNames) {
  // Fields 3.. of proc(5): state ppid pgrp session tty tpgid flags minflt
  // cminflt majflt cmajflt utime(14) stime(15) cutime cstime priority nice
  // threads itrealvalue starttime(22) vsize(23) rss(24).
  const std::string stat =
      "4242 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0 3 0 1000 8192000 300 rest";
  auto s = ParseProcStat(stat, 100, 4096, 1.7e9);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->cpu_seconds, 4.0);
  EXPECT_DOUBLE_EQ(s->start_time_seconds, 1.7e9 + 10);
  EXPECT_DOUBLE_EQ(s->virtual_bytes, 8192000);
  EXPECT_DOUBLE_EQ(s->resident_bytes, 300.0 * 4096);
  EXPECT_FALSE(ParseProcStat("1 (x) S 1 2", 100, 4096, 0).ok());
  EXPECT_FALSE(ParseProcStat("no parenthesis", 100, 4096, 0).ok());
}

TenantsConfig TwoTenants(absl::string_view text) {
  auto config = TenantsConfig::Parse(text, "tenants.txt");
  EXPECT_TRUE(config.ok()) << config.status();
  return *std::move(config);
}

TEST(MetricsTest, TenantSeriesCountRequestsWorkWaitsAndRejections) {
  ServiceMetrics m;
  const TenantsConfig config = TwoTenants("tenant a weight=3\ntenant b\n");
  m.SetTenants(&config);
  m.RecordTenantRequest("a", 0);
  m.RecordTenantRequest("a", 0);
  m.RecordTenantRequest("b", 8);
  m.RecordTenantWork("a", 2e9, absl::Milliseconds(250), absl::Microseconds(300));
  m.RecordTenantWork("a", 1e9, absl::Milliseconds(125), absl::Milliseconds(20));
  m.RecordTenantRejection("b", "tenant.max_inflight_bytes");
  m.RecordTenantRejection("b", "");

  const std::string text = m.Scrape();
  EXPECT_THAT(text, HasSubstr(R"(gemm_tenant_weight{tenant="a"} 3)"));
  EXPECT_THAT(text, HasSubstr(R"(gemm_tenant_weight{tenant="b"} 1)"));
  EXPECT_THAT(text, HasSubstr(R"(gemm_tenant_weight{tenant="other"} 1)"));
  EXPECT_THAT(text, HasSubstr(R"(gemm_tenant_requests_total{code="OK",tenant="a"} 2)"));
  EXPECT_THAT(text,
              HasSubstr(R"(gemm_tenant_requests_total{code="RESOURCE_EXHAUSTED",tenant="b"} 1)"));
  EXPECT_THAT(text,
              HasSubstr(R"(gemm_tenant_floating_point_operations_total{tenant="a"} 3000000000)"));
  EXPECT_THAT(text, HasSubstr(R"(gemm_tenant_device_seconds_total{tenant="a"} 0.375)"));
  EXPECT_THAT(text, HasSubstr(R"(gemm_tenant_queue_wait_seconds_count{tenant="a"} 2)"));
  // 300 us falls in the 500 us bucket, 20 ms in the 25 ms one.
  EXPECT_THAT(text,
              HasSubstr(R"(gemm_tenant_queue_wait_seconds_bucket{tenant="a",le="0.0005"} 1)"));
  EXPECT_THAT(text,
              HasSubstr(R"(gemm_tenant_queue_wait_seconds_bucket{tenant="a",le="0.025"} 2)"));
  EXPECT_THAT(text, HasSubstr(
      R"(gemm_tenant_rejections_total{limit="tenant.max_inflight_bytes",tenant="b"} 1)"));
  EXPECT_THAT(text, HasSubstr(R"(gemm_tenant_rejections_total{limit="unnamed",tenant="b"} 1)"));
  // Every configured tenant's own limits are exported before any refusal.
  EXPECT_THAT(text, HasSubstr(
      R"(gemm_tenant_rejections_total{limit="tenant.max_resident_bytes",tenant="a"} 0)"));
  EXPECT_THAT(text, HasSubstr(
      R"(gemm_tenant_rejections_total{limit="tenant.max_flops_per_s",tenant="other"} 0)"));
}

TEST(MetricsTest, TenantLabelIsBoundedToConfiguredTenantsAndOther) {
  ServiceMetrics m;
  const TenantsConfig first = TwoTenants("tenant a weight=2\ntenant b caller=bob\n");
  m.SetTenants(&first);
  EXPECT_EQ(m.TenantLabel("a"), "a");
  EXPECT_EQ(m.TenantLabel("b"), "b");
  // A caller's name, or a peer address, is not a tenant: it counts as other.
  EXPECT_EQ(m.TenantLabel("bob"), "other");
  EXPECT_EQ(m.TenantLabel("ipv4:127.0.0.1:5555"), "other");
  m.RecordTenantRequest("ipv4:127.0.0.1:5555", 0);
  m.RecordTenantRequest("ipv4:127.0.0.1:6666", 0);
  EXPECT_THAT(m.Scrape(), HasSubstr(R"(gemm_tenant_requests_total{code="OK",tenant="other"} 2)"));
  EXPECT_THAT(m.Scrape(), Not(HasSubstr("127.0.0.1")));

  // A reload that drops b: b's weight series goes, and b's late answers
  // count as other; a's weight follows the new file.
  const TenantsConfig second = TwoTenants("tenant a weight=5\ndefault a\n");
  m.SetTenants(&second);
  m.RecordTenantRequest("b", 0);
  const std::string text = m.Scrape();
  EXPECT_THAT(text, HasSubstr(R"(gemm_tenant_weight{tenant="a"} 5)"));
  EXPECT_THAT(text, Not(HasSubstr(R"(gemm_tenant_weight{tenant="b"})")));
  EXPECT_THAT(text, Not(HasSubstr(R"(gemm_tenant_weight{tenant="other"})")));
  EXPECT_THAT(text, HasSubstr(R"(gemm_tenant_requests_total{code="OK",tenant="other"} 3)"));

  // Without tenants nothing is recorded per tenant.
  m.SetTenants(nullptr);
  m.RecordTenantWork("", 1e9, absl::Seconds(1), absl::Seconds(1));
  EXPECT_THAT(m.Scrape(), Not(HasSubstr("gemm_tenant_weight{")));
  EXPECT_THAT(m.Scrape(), Not(HasSubstr("gemm_tenant_floating_point_operations_total{")));
}

TEST(ProcessMetricsTest, ParsesBootTimeAndOpenFileLimit) {
  auto b = ParseBootTime("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, 1700000000);
  EXPECT_FALSE(ParseBootTime("cpu 1 2 3\n").ok());
  auto m = ParseMaxOpenFiles(
      "Limit                     Soft Limit           Hard Limit           Units\n"
      "Max open files            1024                 524288               files\n");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*m, 1024);
  EXPECT_FALSE(ParseMaxOpenFiles("Max processes 10 10\n").ok());
}

}  // namespace
}  // namespace gemm
