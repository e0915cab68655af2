// The GPU's FP8 quantization against the host's QuantizeFp8: for every
// format, scale mode, operand role, transpose and layout, on odd shapes with
// partial blocks, fp32 and bf16 inputs, the codes and scales must be
// identical bit for bit; a non-finite value is reported at the host's index.
// Skips with the reason on a machine without a CUDA GPU.
#include "kernels/quantize/fp8_quantize.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/fp8.h"
#include "gtest/gtest.h"
#include "kernels/testing/gpu_skip.h"

namespace gemm_kernels {
namespace {

using gemm::DType;
using gemm::Fp8Operand;
using gemm::Layout;
using gemm::OperandRole;
using gemm::ScaleMode;

// Device memory freed at scope exit.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&ptr, bytes > 0 ? bytes : 1), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(ptr); }
  void* ptr = nullptr;
};

struct Outcome {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  uint64_t first_bad = 0;
};

// Quantizes `values` (fp32, stored as `type` on the device) on the GPU.
Outcome QuantizeOnGpu(const std::vector<float>& values, DType type, const Fp8Operand& g,
                      DType format) {
  const uint64_t n = values.size(), count = gemm::ScaleCount(g);
  std::vector<unsigned char> stored(n * gemm::SizeOf(type));
  if (type == DType::kFp32)
    std::memcpy(stored.data(), values.data(), n * sizeof(float));
  else
    gemm::FromFloat(type, values.data(), stored.data(), n);
  DeviceBuffer in(stored.size()), codes(n), scales(count * sizeof(float)), bad(sizeof(uint64_t)),
      work(Fp8QuantizeWorkspaceBytes(g));
  EXPECT_EQ(cudaMemcpy(in.ptr, stored.data(), stored.size(), cudaMemcpyHostToDevice), cudaSuccess);
  Fp8QuantizeArgs args;
  args.values = in.ptr;
  args.values_type = type;
  args.geometry = g;
  args.format = format;
  args.codes = static_cast<uint8_t*>(codes.ptr);
  args.scales = static_cast<float*>(scales.ptr);
  args.first_non_finite = static_cast<uint64_t*>(bad.ptr);
  args.workspace = work.ptr;
  EXPECT_EQ(LaunchFp8Quantize(args, nullptr), "");
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Outcome out;
  out.codes.resize(n);
  out.scales.resize(count);
  EXPECT_EQ(cudaMemcpy(out.codes.data(), codes.ptr, n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(out.scales.data(), scales.ptr, count * sizeof(float),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(cudaMemcpy(&out.first_bad, bad.ptr, sizeof(uint64_t), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return out;
}

// Values as the device holds them (bf16 rounds), so the host quantizes the
// same numbers.
std::vector<float> AsStored(const std::vector<float>& values, DType type) {
  if (type == DType::kFp32) return values;
  std::vector<unsigned char> stored(values.size() * gemm::SizeOf(type));
  gemm::FromFloat(type, values.data(), stored.data(), values.size());
  std::vector<float> out(values.size());
  gemm::ToFloat(type, stored.data(), out.data(), values.size());
  return out;
}

// Random values over many magnitudes, with exact zeros, a zero group's worth
// of tiny values and ties of the rounding.
std::vector<float> RandomValues(uint64_t n, std::mt19937* rng) {
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 20);
  std::vector<float> v(n);
  for (uint64_t i = 0; i < n; ++i) {
    const int kind = static_cast<int>((*rng)() % 16);
    if (kind == 0) v[i] = 0.0f;
    else if (kind == 1) v[i] = std::ldexp(1.0f + 0.0625f * ((*rng)() % 16), exponent(*rng));
    else v[i] = std::ldexp(unit(*rng), exponent(*rng) / 4);
  }
  return v;
}

class Fp8QuantizeGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = testing::NoGpuReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
};

TEST_F(Fp8QuantizeGpuTest, CodesAndScalesMatchTheHostBitForBit) {
  std::mt19937 rng(7);
  const struct {
    uint64_t rows, cols;
  } shapes[] = {{1, 1}, {3, 5}, {77, 300}, {129, 257}, {256, 1000}, {1000, 33}, {2, 4099}};
  int cases = 0;
  for (const auto& shape : shapes)
    for (DType format : {DType::kFp8E4m3, DType::kFp8E5m2})
      for (ScaleMode mode : {ScaleMode::kTensor, ScaleMode::kChannel, ScaleMode::kBlock})
        for (OperandRole role : {OperandRole::kA, OperandRole::kB})
          for (bool transposed : {false, true})
            for (Layout layout : {Layout::kRowMajor, Layout::kColMajor})
              for (DType type : {DType::kFp32, DType::kBf16}) {
                const Fp8Operand g{shape.rows, shape.cols, layout, role, transposed, mode};
                const std::vector<float> values =
                    AsStored(RandomValues(shape.rows * shape.cols, &rng), type);
                std::vector<uint8_t> codes(values.size());
                std::vector<float> scales(gemm::ScaleCount(g));
                ASSERT_EQ(gemm::QuantizeFp8(values.data(), g, format, codes.data(), scales.data()),
                          gemm::kQuantizeOk);
                const Outcome gpu = QuantizeOnGpu(values, type, g, format);
                const std::string what = std::to_string(shape.rows) + "x" +
                                         std::to_string(shape.cols) + " " +
                                         gemm::DTypeName(format) + " " +
                                         gemm::ScaleModeName(mode) + " " +
                                         gemm::OperandName(role) + (transposed ? " T" : "") +
                                         (layout == Layout::kRowMajor ? " row" : " col") + " " +
                                         gemm::DTypeName(type);
                ASSERT_EQ(gpu.first_bad, gemm::kQuantizeOk) << what;
                ASSERT_EQ(std::memcmp(gpu.scales.data(), scales.data(),
                                      scales.size() * sizeof(float)),
                          0)
                    << what;
                ASSERT_EQ(gpu.codes, codes) << what;
                ++cases;
              }
  EXPECT_EQ(cases, 7 * 2 * 3 * 2 * 2 * 2 * 2);
}

// Every FP8 code's value and the midpoints between neighbours (the ties),
// with scale 1: each format's whole rounding table agrees.
TEST_F(Fp8QuantizeGpuTest, EveryCodeAndEveryTieRoundsAsOnTheHost) {
  for (DType format : {DType::kFp8E4m3, DType::kFp8E5m2}) {
    std::vector<float> values;
    for (int c = 0; c < 256; ++c) {
      const float v = gemm::Fp8ToFloat(static_cast<uint8_t>(c), format);
      if (!std::isfinite(v)) continue;
      values.push_back(v);
      const float next = gemm::Fp8ToFloat(static_cast<uint8_t>(c + 1), format);
      if (c != 127 && c != 255 && std::isfinite(next)) values.push_back(0.5f * (v + next));
    }
    // The largest magnitude makes the tensor's scale exactly 1.
    values.push_back(gemm::Fp8Max(format));
    const Fp8Operand g{1, values.size(), Layout::kRowMajor, OperandRole::kA, false,
                       ScaleMode::kTensor};
    std::vector<uint8_t> codes(values.size());
    float scale = 0;
    ASSERT_EQ(gemm::QuantizeFp8(values.data(), g, format, codes.data(), &scale), gemm::kQuantizeOk);
    ASSERT_EQ(scale, 1.0f);
    const Outcome gpu = QuantizeOnGpu(values, DType::kFp32, g, format);
    EXPECT_EQ(gpu.scales[0], 1.0f);
    EXPECT_EQ(gpu.codes, codes) << gemm::DTypeName(format);
  }
}

TEST_F(Fp8QuantizeGpuTest, AllZeroGroupsGetScaleOne) {
  const Fp8Operand g{256, 300, Layout::kRowMajor, OperandRole::kA, false, ScaleMode::kBlock};
  const std::vector<float> zeros(256 * 300, 0.0f);
  const Outcome gpu = QuantizeOnGpu(zeros, DType::kFp32, g, DType::kFp8E4m3);
  for (float s : gpu.scales) EXPECT_EQ(s, 1.0f);
  for (uint8_t c : gpu.codes) EXPECT_EQ(c, 0);
}

TEST_F(Fp8QuantizeGpuTest, TheFirstNonFiniteValueIsReportedAtTheHostsIndex) {
  std::mt19937 rng(3);
  const Fp8Operand g{300, 500, Layout::kColMajor, OperandRole::kB, false, ScaleMode::kChannel};
  std::vector<float> values = RandomValues(300 * 500, &rng);
  values[123457] = std::numeric_limits<float>::infinity();
  values[70001] = std::numeric_limits<float>::quiet_NaN();
  values[140000] = -std::numeric_limits<float>::infinity();
  std::vector<uint8_t> codes(values.size());
  std::vector<float> scales(gemm::ScaleCount(g));
  const uint64_t host = gemm::QuantizeFp8(values.data(), g, DType::kFp8E5m2, codes.data(),
                                          scales.data());
  ASSERT_EQ(host, 70001u);
  EXPECT_EQ(QuantizeOnGpu(values, DType::kFp32, g, DType::kFp8E5m2).first_bad, host);
}

TEST_F(Fp8QuantizeGpuTest, ALargeMatrixInBf16MatchesTheHost) {
  // 4096 x 4096 (16 M values): the many-warp paths of the amax pass.
  std::mt19937 rng(11);
  const uint64_t n = 4096;
  const std::vector<float> values = AsStored(RandomValues(n * n, &rng), DType::kBf16);
  for (ScaleMode mode : {ScaleMode::kTensor, ScaleMode::kChannel, ScaleMode::kBlock}) {
    const Fp8Operand g{n, n, Layout::kRowMajor, OperandRole::kB, false, mode};
    std::vector<uint8_t> codes(values.size());
    std::vector<float> scales(gemm::ScaleCount(g));
    ASSERT_EQ(gemm::QuantizeFp8(values.data(), g, DType::kFp8E4m3, codes.data(), scales.data()),
              gemm::kQuantizeOk);
    const Outcome gpu = QuantizeOnGpu(values, DType::kBf16, g, DType::kFp8E4m3);
    EXPECT_EQ(std::memcmp(gpu.scales.data(), scales.data(), scales.size() * sizeof(float)), 0)
        << gemm::ScaleModeName(mode);
    EXPECT_EQ(gpu.codes, codes) << gemm::ScaleModeName(mode);
  }
}

TEST(Fp8QuantizeArgs, BadArgumentsAreRefusedBeforeAnyLaunch) {
  Fp8QuantizeArgs args;
  args.geometry = Fp8Operand{0, 4, Layout::kRowMajor, OperandRole::kA, false, ScaleMode::kTensor};
  EXPECT_NE(LaunchFp8Quantize(args, nullptr), "");
  args.geometry.rows = 4;
  args.format = DType::kBf16;
  EXPECT_NE(LaunchFp8Quantize(args, nullptr).find("format"), std::string::npos);
  args.format = DType::kFp8E4m3;
  args.values_type = DType::kFp8E5m2;
  EXPECT_NE(LaunchFp8Quantize(args, nullptr).find("values"), std::string::npos);
}

}  // namespace
}  // namespace gemm_kernels
