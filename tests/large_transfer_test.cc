// Operands and results past protobuf's 2 GiB message cap, end to end through
// the CPU backend: gemm::Client sends them in chunks on its own (no option
// set beyond the defaults). Tagged "large": it moves 3 GiB each way and needs
// about 7 GiB of memory at its peak.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "client/gemm_client.h"
#include "service/server.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

constexpr uint64_t kRows = 768;
constexpr uint64_t kLong = uint64_t{1} << 20;  // 768 x 2^20 fp32 = 3 GiB

class LargeTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options = test::LoopbackCpuServerOptions(1);
    options.limits.max_matrix_bytes = uint64_t{4} << 30;
    options.limits.max_resident_bytes = uint64_t{8} << 30;
    options.limits.max_inflight_bytes = uint64_t{8} << 30;
    auto server = GemmServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ClientOptions o;
    o.target = absl::StrCat("127.0.0.1:", server_->port());
    auto client = Client::Create(o);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  // Small integers, so that every sum is exact in fp32 and the check is
  // equality.
  static float A(uint64_t i, uint64_t k) { return static_cast<float>((i + k) % 3) - 1.0f; }
  static float B(uint64_t k, uint64_t j) { return static_cast<float>((k * 7 + j) % 5) - 2.0f; }

  static v1::GemmProblem Shape(uint64_t m, uint64_t n, uint64_t k) {
    v1::GemmProblem p;
    p.set_m(m);
    p.set_n(n);
    p.set_k(k);
    p.set_input_dtype(v1::DATA_TYPE_FP32);
    return p;
  }
  static void Fill(std::string* bytes, uint64_t rows, uint64_t cols, float (*f)(uint64_t,
                                                                               uint64_t)) {
    bytes->resize(rows * cols * sizeof(float));
    float* out = reinterpret_cast<float*>(bytes->data());
    for (uint64_t r = 0; r < rows; ++r)
      for (uint64_t c = 0; c < cols; ++c) out[r * cols + c] = f(r, c);
  }

  std::unique_ptr<GemmServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(LargeTransferTest, ThreeGibOperand) {
  v1::GemmRequest request;
  v1::GemmProblem* p = request.add_problems();
  *p = Shape(kRows, 1, kLong);  // A: 768 x 2^20 (3 GiB), B: 2^20 x 1
  Fill(p->mutable_a()->mutable_data(), kRows, kLong, &A);
  Fill(p->mutable_b()->mutable_data(), kLong, 1, &B);
  ASSERT_EQ(p->a().data().size(), uint64_t{3} << 30);
  CallOptions options;
  options.timeout = absl::Minutes(10);
  auto response = client_->Gemm(request, options);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->results(0).data().size(), kRows * sizeof(float));
  const float* d = reinterpret_cast<const float*>(response->results(0).data().data());
  for (uint64_t i = 0; i < kRows; ++i) {
    int64_t want = 0;
    for (uint64_t k = 0; k < kLong; ++k)
      want += static_cast<int64_t>(A(i, k)) * static_cast<int64_t>(B(k, 0));
    ASSERT_EQ(d[i], static_cast<float>(want)) << "row " << i;
  }
}

TEST_F(LargeTransferTest, ThreeGibResult) {
  v1::GemmRequest request;
  v1::GemmProblem* p = request.add_problems();
  *p = Shape(kRows, kLong, 1);  // D: 768 x 2^20 fp32 = 3 GiB
  Fill(p->mutable_a()->mutable_data(), kRows, 1, &A);
  Fill(p->mutable_b()->mutable_data(), 1, kLong, &B);
  CallOptions options;
  options.timeout = absl::Minutes(10);
  auto response = client_->Gemm(request, options);
  ASSERT_TRUE(response.ok()) << response.status();
  const std::string& bytes = response->results(0).data();
  ASSERT_EQ(bytes.size(), kRows * kLong * sizeof(float));
  const float* d = reinterpret_cast<const float*>(bytes.data());
  for (uint64_t i = 0; i < kRows; ++i)
    for (uint64_t j = 0; j < kLong; ++j)
      ASSERT_EQ(d[i * kLong + j], A(i, 0) * B(0, j)) << i << ", " << j;
}

}  // namespace
}  // namespace gemm
