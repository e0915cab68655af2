#include "service/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
  m.RecordLaunch("cpu", "openblas_sgemm", absl::Milliseconds(2));
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

TEST(MetricsTest, ExposerServesOnAFreePort) {
  ServiceMetrics m;
  ASSERT_TRUE(m.StartExposer("127.0.0.1:0").ok());
  EXPECT_GT(m.exposer_port(), 0);
}

}  // namespace
}  // namespace gemm
