// FP8 end to end on the CPU backend (in-process server on loopback, driven
// through gemm::Client): every format pair and scale mode against the
// float64 product of the dequantized operands; matrices quantized by the
// server on registration (whole and in chunks) with FP8 partners and with
// bf16/fp32 partners quantized per request (quantize_partner); the refusals
// by field; what the response says ran.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "client/gemm_client.h"
#include "client/matrix_view.h"
#include "common/dtype.h"
#include "common/fp8.h"
#include "common/reference_gemm.h"
#include "service/observe/metrics.h"
#include "service/server.h"
#include "tests/fp8_test_util.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

using ::testing::HasSubstr;

constexpr DType kFormats[] = {DType::kFp8E4m3, DType::kFp8E5m2};
constexpr ScaleMode kModes[] = {ScaleMode::kTensor, ScaleMode::kChannel, ScaleMode::kBlock};

using test::ErrorAgainst;
using test::Quantize;
using test::RandomFloats;
using test::ToBf16;

class Fp8ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o = test::LoopbackCpuServerOptions();
    o.limits.max_resident_bytes = 16 << 20;
    auto server = GemmServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = Connect();
  }

  std::unique_ptr<Client> Connect(uint64_t chunked_threshold_bytes = 0) {
    ClientOptions o;
    o.target = absl::StrCat("127.0.0.1:", server_->port());
    o.default_timeout = absl::Seconds(60);
    o.chunked_threshold_bytes = chunked_threshold_bytes;
    auto client = Client::Create(o);
    EXPECT_TRUE(client.ok()) << client.status();
    return std::move(*client);
  }

  void TearDown() override {
    client_.reset();
    if (server_) server_->Shutdown(absl::Seconds(5));
  }

  std::unique_ptr<GemmServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(Fp8ServerTest, ServerInfoListsTheFp8Types) {
  auto info = client_->GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_THAT(info->input_dtypes(), ::testing::Contains(v1::DATA_TYPE_FP8_E4M3));
  EXPECT_THAT(info->input_dtypes(), ::testing::Contains(v1::DATA_TYPE_FP8_E5M2));
}

TEST_F(Fp8ServerTest, EveryFormatPairAndScaleModeMatchesTheDequantizedProduct) {
  std::mt19937 rng(21);
  const uint64_t m = 33, n = 140, k = 256;
  v1::GemmRequest request;
  request.set_deterministic(true);
  std::vector<QuantizedMatrix> held;  // the views point into these
  int i = 0;
  for (DType fa : kFormats) {
    for (DType fb : kFormats) {
      for (ScaleMode mode : kModes) {
        ProblemOptions o;
        o.transpose_a = (i & 1) != 0;
        o.transpose_b = (i & 2) != 0;
        o.output_dtype = i % 3 == 0 ? DType::kBf16 : DType::kFp32;
        o.output_layout = i % 4 == 0 ? Layout::kColMajor : Layout::kRowMajor;
        o.alpha = 0.5;
        // A's mode differs from B's in every other problem.
        const ScaleMode mode_a = i % 2 == 0 ? mode : ScaleMode::kTensor;
        const std::vector<float> a = RandomFloats(m * k, &rng), b = RandomFloats(k * n, &rng);
        const MatrixView va(a.data(), o.transpose_a ? k : m, o.transpose_a ? m : k);
        const MatrixView vb(b.data(), o.transpose_b ? n : k, o.transpose_b ? k : n);
        held.push_back(Quantize(va, fa, mode_a, OperandRole::kA, o.transpose_a));
        held.push_back(Quantize(vb, fb, mode, OperandRole::kB, o.transpose_b));
        ASSERT_TRUE(AddProblem(&request, held[held.size() - 2].view(), held.back().view(), o).ok());
        ++i;
      }
    }
  }
  GemmResult r = client_->Gemm(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->kernel(), "openblas_sgemm_fp8");
  ASSERT_EQ(r->results_size(), request.problems_size());
  for (int j = 0; j < request.problems_size(); ++j) {
    const v1::GemmProblem& p = request.problems(j);
    const v1::GemmResult& res = r->results(j);
    const DType out = *FromProto(p.output_dtype());
    EXPECT_LT(ErrorAgainst(p, res), out == DType::kFp32 ? 1e-5 : 1e-2) << j;
    EXPECT_EQ(res.a_precision().dtype(), p.input_dtype());
    EXPECT_EQ(res.b_precision().dtype(), p.has_b_dtype() ? p.b_dtype() : p.input_dtype());
    EXPECT_EQ(res.a_precision().scale_mode(), p.a().scales().mode());
    EXPECT_EQ(res.b_precision().scale_mode(), p.b().scales().mode());
    EXPECT_FALSE(res.a_precision().quantized_by_server());
  }
  // Deterministic FP8 requests work and name what fixed their bits.
  ASSERT_TRUE(r->has_reproducibility());
  ASSERT_EQ(r->reproducibility().problems_size(), request.problems_size());
  EXPECT_EQ(r->reproducibility().problems(0).kernel(), "openblas_sgemm_fp8");
  GemmResult again = client_->Gemm(request);
  ASSERT_TRUE(again.ok());
  for (int j = 0; j < request.problems_size(); ++j)
    EXPECT_EQ(again->results(j).data(), r->results(j).data()) << j;
}

// A bf16 weight matrix B (K x N) quantized by the server, and the same
// quantization done here: the server's codes and scales must be these.
struct Weights {
  uint64_t k, n;
  std::vector<float> values;
  std::vector<uint16_t> bf16;
  Fp8Quantization how;
  QuantizedMatrix local;

  Weights(uint64_t rows, uint64_t cols, DType format, ScaleMode mode, std::mt19937* rng)
      : k(rows), n(cols), values(RandomFloats(rows * cols, rng)), bf16(ToBf16(values)) {
    how = Fp8Quantization{format, mode, OperandRole::kB, false};
    local = Quantize(view(), format, mode, OperandRole::kB, false);
  }
  MatrixView view() const { return MatrixView(bf16.data(), k, n, DType::kBf16); }
};

TEST_F(Fp8ServerTest, AMatrixQuantizedOnRegistrationServesWithAnFp8Partner) {
  std::mt19937 rng(22);
  for (ScaleMode mode : kModes) {
    for (uint64_t threshold : {uint64_t{0}, uint64_t{4096}}) {  // whole, then in chunks
      for (uint64_t k : {uint64_t{256}, uint64_t{1000}}) {  // 1000: a partial last block
        std::unique_ptr<Client> client = Connect(threshold);
        const Weights w(k, 200, DType::kFp8E4m3, mode, &rng);
        auto handle = client->RegisterQuantized(w.view(), w.how, "fp8 weights");
        ASSERT_TRUE(handle.ok()) << handle.status();
        EXPECT_EQ(handle->dtype, DType::kFp8E4m3);
        // Whole: the FP8 bytes and scales it holds; in chunks: what BeginUpload
        // reserved for the bf16 bytes arriving (the larger here).
        EXPECT_EQ(handle->bytes, threshold == 0
                                     ? w.local.codes.size() + w.local.scales.size() * sizeof(float)
                                     : w.bf16.size() * sizeof(uint16_t));
        // The server's codes are the client helper's, bit for bit.
        std::vector<uint8_t> codes(w.local.codes.size());
        ASSERT_TRUE(client->DownloadMatrix(handle->handle, codes.data(), codes.size()).ok());
        EXPECT_EQ(codes, w.local.codes) << ScaleModeName(mode);

        const std::vector<float> a = RandomFloats(40 * k, &rng);
        const QuantizedMatrix qa = Quantize(MatrixView(a.data(), 40, k), DType::kFp8E5m2, mode,
                                            OperandRole::kA, false);
        ProblemOptions o;
        o.output_dtype = DType::kFp32;
        v1::GemmRequest sent, checked;
        ASSERT_TRUE(AddProblem(&sent, qa.view(), *handle, o).ok());
        ASSERT_TRUE(AddProblem(&checked, qa.view(), w.local.view(), o).ok());
        GemmResult r = client->Gemm(sent);
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_LT(ErrorAgainst(checked.problems(0), r->results(0)), 1e-5) << ScaleModeName(mode);
        EXPECT_TRUE(r->results(0).b_precision().quantized_by_server());
        EXPECT_EQ(r->results(0).b_precision().scale_mode(), ToProto(mode));
        ASSERT_TRUE(client->ReleaseMatrix(*handle).ok());
      }
    }
  }
}

TEST_F(Fp8ServerTest, ABf16PartnerIsQuantizedPerRequestWhenAsked) {
  std::mt19937 rng(23);
  for (ScaleMode mode : kModes) {
    const Weights w(128, 96, DType::kFp8E5m2, mode, &rng);
    auto handle = client_->RegisterQuantized(w.view(), w.how);
    ASSERT_TRUE(handle.ok()) << handle.status();
    const std::vector<float> a = RandomFloats(50 * 128, &rng);
    const std::vector<uint16_t> a16 = ToBf16(a);
    const MatrixView va(a16.data(), 50, 128, DType::kBf16);
    ProblemOptions o;
    o.output_dtype = DType::kFp32;
    // Without the opt-in the mixed pair is refused by field.
    v1::GemmRequest refused;
    EXPECT_FALSE(AddProblem(&refused, va, *handle, o).ok());  // the client refuses it too
    refused.clear_problems();
    v1::GemmProblem raw;
    raw.set_m(50);
    raw.set_n(96);
    raw.set_k(128);
    raw.set_input_dtype(v1::DATA_TYPE_BF16);
    raw.set_b_dtype(v1::DATA_TYPE_FP8_E5M2);
    raw.set_output_dtype(v1::DATA_TYPE_FP32);
    raw.mutable_a()->set_data(reinterpret_cast<const char*>(a16.data()), a16.size() * 2);
    raw.mutable_b()->set_handle(handle->handle);
    *refused.add_problems() = raw;
    GemmResult no = client_->Gemm(refused);
    EXPECT_EQ(no.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(no.status().message()), HasSubstr("problems[0].quantize_partner"));

    o.quantize_partner = true;
    v1::GemmRequest sent, checked;
    ASSERT_TRUE(AddProblem(&sent, va, *handle, o).ok());
    // The reference: A quantized here as the server must, like B.
    const QuantizedMatrix qa = Quantize(va, DType::kFp8E5m2, mode, OperandRole::kA, false);
    ProblemOptions plain = o;
    plain.quantize_partner = false;
    ASSERT_TRUE(AddProblem(&checked, qa.view(), w.local.view(), plain).ok());
    GemmResult r = client_->Gemm(sent);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LT(ErrorAgainst(checked.problems(0), r->results(0)), 1e-5) << ScaleModeName(mode);
    const v1::OperandPrecision& pa = r->results(0).a_precision();
    EXPECT_EQ(pa.dtype(), v1::DATA_TYPE_FP8_E5M2);
    EXPECT_EQ(pa.scale_mode(), ToProto(mode));
    EXPECT_TRUE(pa.quantized_by_server());
  }
}

TEST_F(Fp8ServerTest, AnFp32PartnerWithANaNFailsNamingItsData) {
  std::mt19937 rng(24);
  const Weights w(128, 16, DType::kFp8E4m3, ScaleMode::kTensor, &rng);
  auto handle = client_->RegisterQuantized(w.view(), w.how);
  ASSERT_TRUE(handle.ok()) << handle.status();
  std::vector<float> a = RandomFloats(8 * 128, &rng);
  a[77] = std::numeric_limits<float>::quiet_NaN();
  ProblemOptions o;
  o.output_dtype = DType::kFp32;
  o.quantize_partner = true;
  v1::GemmRequest request;
  ASSERT_TRUE(AddProblem(&request, MatrixView(a.data(), 8, 128), *handle, o).ok());
  GemmResult r = client_->Gemm(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("problems[0].a.data"));
}

TEST_F(Fp8ServerTest, QuantizeOnRegistrationRefusesWhatItCannotKeep) {
  std::vector<float> nan(256 * 4, 1.0f);
  nan[300] = std::numeric_limits<float>::quiet_NaN();
  const Fp8Quantization block_b{DType::kFp8E4m3, ScaleMode::kBlock, OperandRole::kB, false};
  for (uint64_t threshold : {uint64_t{0}, uint64_t{1024}}) {
    std::unique_ptr<Client> client = Connect(threshold);
    auto r = client->RegisterQuantized(MatrixView(nan.data(), 256, 4), block_b);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << threshold;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("data"));
  }
  // Block scales of B take any K (its rows): 100 rows are one partial block.
  std::vector<float> ok(100 * 4, 1.0f);
  auto k = client_->RegisterQuantized(MatrixView(ok.data(), 100, 4), block_b);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->bytes, 100u * 4 + 1 * sizeof(float));
  ASSERT_TRUE(client_->ReleaseMatrix(*k).ok());
  // Only bf16 and fp32 quantize.
  std::vector<uint16_t> half(16, 0x3c00);
  auto f16 = client_->RegisterQuantized(MatrixView(half.data(), 4, 4, DType::kFp16),
                                        Fp8Quantization{});
  EXPECT_EQ(f16.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(f16.status().message()), HasSubstr("dtype"));
  // Nothing stays held after the refusals.
  EXPECT_EQ(test::MetricValue(server_->metrics()->Scrape(), "gemm_resident_bytes"), 0.0);
}

TEST_F(Fp8ServerTest, ScaleErrorsNameTheField) {
  std::mt19937 rng(25);
  const std::vector<float> a = RandomFloats(4 * 128, &rng), b = RandomFloats(128 * 4, &rng);
  const QuantizedMatrix qa = Quantize(MatrixView(a.data(), 4, 128), DType::kFp8E4m3,
                                      ScaleMode::kChannel, OperandRole::kA, false);
  const QuantizedMatrix qb = Quantize(MatrixView(b.data(), 128, 4), DType::kFp8E4m3,
                                      ScaleMode::kTensor, OperandRole::kB, false);
  ProblemOptions o;
  o.output_dtype = DType::kFp32;
  v1::GemmRequest request;
  ASSERT_TRUE(AddProblem(&request, qa.view(), qb.view(), o).ok());
  v1::GemmRequest bad = request;
  const float negative = -1.0f;
  bad.mutable_problems(0)->mutable_b()->mutable_scales()->set_data(
      reinterpret_cast<const char*>(&negative), sizeof negative);
  GemmResult r = client_->Gemm(bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("problems[0].b.scales.data"));
  bad = request;
  bad.mutable_problems(0)->mutable_a()->mutable_scales()->mutable_data()->resize(12);
  r = client_->Gemm(bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("problems[0].a.scales.data"));
  bad = request;
  bad.mutable_problems(0)->clear_output_dtype();
  r = client_->Gemm(bad);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("problems[0].output_dtype"));
  EXPECT_TRUE(client_->Gemm(request).ok());
}

}  // namespace
}  // namespace gemm
