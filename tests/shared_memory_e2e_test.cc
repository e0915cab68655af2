// Same-host shared memory end to end (CPU backend, in-process server on
// loopback, driven through gemm::Client): operands read from and results
// written into a registered region give the bits the same problem gives with
// its bytes on the wire (itself checked against the float64 reference);
// requests mixing bytes and shared memory; the same on the CUDA backend with
// the regions page-locked (skipped without a GPU); and the errors, each
// naming its field: an offset past the region, an unknown or unregistered
// region, an output with keep_results, shared memory turned off.
#include <grpcpp/grpcpp.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "client/gemm_client.h"
#include "client/shared_memory.h"
#include "common/proto_enums.h"
#include "service/server.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

using ::testing::HasSubstr;

class SharedMemoryE2eTest : public ::testing::Test {
 protected:
  void Start(ServerOptions options = test::LoopbackCpuServerOptions()) {
    auto server = GemmServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ClientOptions o;
    o.target = absl::StrCat("127.0.0.1:", server_->port());
    o.default_timeout = absl::Seconds(60);
    auto client = Client::Create(o);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::Seconds(5));
  }

  void SharedMatchesTheWire(bool large);

  std::unique_ptr<GemmServer> server_;
  std::unique_ptr<Client> client_;
};

// Copies `bytes` into the region at `*offset` (kept 64-byte aligned) and
// returns where it went.
uint64_t Place(const SharedMemory& memory, const std::string& bytes, uint64_t* offset) {
  const uint64_t at = *offset;
  std::memcpy(memory.base() + at, bytes.data(), bytes.size());
  *offset += (bytes.size() + 63) / 64 * 64;
  return at;
}

// Each case sent twice, with its bytes on the wire and with its operands and
// output in a registered region: the same bits.
void SharedMemoryE2eTest::SharedMatchesTheWire(bool large) {
  auto memory = SharedMemory::Create(large ? (96 << 20) : (16 << 20));
  ASSERT_TRUE(memory.ok()) << memory.status();
  auto region = client_->RegisterSharedMemory(**memory, "test");
  ASSERT_TRUE(region.ok()) << region.status();

  std::mt19937 rng(5);
  uint64_t offset = SharedMemory::kFirstOffset;
  struct Case {
    test::ProblemSpec spec;
    bool a_shared, b_shared, c_shared;
  };
  std::vector<Case> cases;
  for (DType in : {DType::kFp32, DType::kBf16, DType::kFp16}) {
    test::ProblemSpec s;
    s.m = 37;
    s.n = 61;
    s.k = 45;
    s.input = in;
    s.output = DType::kFp32;
    s.layout_b = Layout::kColMajor;
    s.layout_d = in == DType::kBf16 ? Layout::kColMajor : Layout::kRowMajor;
    cases.push_back({s, true, true, false});
    s.alpha = 0.5;
    s.beta = -1.5;
    cases.push_back({s, true, false, true});  // A and C shared, B on the wire
    cases.push_back({s, false, true, false});
  }
  if (large) {
    test::ProblemSpec s;
    s.m = 1000;
    s.n = 1200;
    s.k = 700;
    s.input = DType::kBf16;
    s.output = DType::kBf16;
    s.beta = 1.0;
    cases.push_back({s, true, true, true});
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    const Case& c = cases[i];
    v1::GemmRequest wire;
    wire.set_request_id(absl::StrCat("wire-", i));
    *wire.add_problems() = test::MakeProblem(c.spec, &rng);
    auto wire_response = client_->Gemm(wire);
    ASSERT_TRUE(wire_response.ok()) << wire_response.status();
    ASSERT_TRUE(test::ResponseMatches(wire, *wire_response));

    v1::GemmRequest shared = wire;
    shared.set_request_id(absl::StrCat("shared-", i));
    v1::GemmProblem* p = shared.mutable_problems(0);
    for (auto [on, m] : {std::pair{c.a_shared, p->mutable_a()}, std::pair{c.b_shared, p->mutable_b()},
                         std::pair{c.c_shared, p->mutable_c()}}) {
      if (!on || m->data().empty()) continue;
      const uint64_t at = Place(**memory, m->data(), &offset);
      const v1::Layout layout = m->layout();
      *m = SharedMatrix(*region, at, *FromProto(layout));
    }
    const std::string& expected = wire_response->results(0).data();
    const uint64_t d_at = offset;
    offset += (expected.size() + 63) / 64 * 64;
    std::memset((*memory)->base() + d_at, 0xff, expected.size());  // poisoned
    *p->mutable_output() = SharedRef(*region, d_at);

    auto response = client_->Gemm(shared);
    ASSERT_TRUE(response.ok()) << response.status();
    ASSERT_EQ(response->results_size(), 1);
    EXPECT_TRUE(response->results(0).data().empty());
    EXPECT_EQ(response->results(0).shared().region(), *region);
    EXPECT_EQ(response->results(0).shared().offset(), d_at);
    EXPECT_EQ(response->results(0).rows(), c.spec.m);
    EXPECT_EQ(std::memcmp((*memory)->base() + d_at, expected.data(), expected.size()), 0)
        << "the result in shared memory differs from the one on the wire";
  }
  EXPECT_TRUE(client_->UnregisterSharedMemory(*region).ok());
}

TEST_F(SharedMemoryE2eTest, SharedOperandsAndOutputsGiveTheBitsOfTheWire) {
  Start();
  SharedMatchesTheWire(/*large=*/false);
}

// The CUDA backend with the regions page-locked: operands are copied by DMA
// from the region and results into it (no staging copy), with the same bits
// as the wire; a case of 6.4 MiB of operands and C among them.
TEST_F(SharedMemoryE2eTest, PinnedRegionsOnTheGpuGiveTheBitsOfTheWire) {
  if (CudaExecutor::DeviceCount() == 0)
    GTEST_SKIP() << "no CUDA device visible: the CUDA executor is tested on the GPU box";
  ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.backend = "cuda";
  o.cuda.calibrate = false;
  o.cuda.pin_shared_memory = true;
  Start(o);
  SharedMatchesTheWire(/*large=*/true);
}

TEST_F(SharedMemoryE2eTest, BadReferencesAreRefusedNamingTheField) {
  Start();
  auto memory = SharedMemory::Create(1 << 16);
  ASSERT_TRUE(memory.ok()) << memory.status();
  auto region = client_->RegisterSharedMemory(**memory);
  ASSERT_TRUE(region.ok()) << region.status();
  std::mt19937 rng(6);
  test::ProblemSpec s;
  s.m = s.n = s.k = 64;
  v1::GemmRequest request;
  *request.add_problems() = test::MakeProblem(s, &rng);
  auto with = [&](auto edit) {
    v1::GemmRequest r = request;
    edit(r.mutable_problems(0));
    return client_->Gemm(r).status();
  };
  // 64 x 64 fp32 is 16 KiB: at 60000 it passes the end of the 64 KiB region.
  absl::Status st = with([&](v1::GemmProblem* p) {
    *p->mutable_a() = SharedMatrix(*region, 60000, Layout::kRowMajor);
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("problems[0].a.shared.offset"));
  st = with([&](v1::GemmProblem* p) { *p->mutable_output() = SharedRef(*region, uint64_t{1} << 62); });
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("problems[0].output.offset"));
  const std::string unknown = absl::StrCat(server_->instance_id(), "-0123456789abcdef0123456789abcdef");
  st = with([&](v1::GemmProblem* p) {
    *p->mutable_b() = SharedMatrix(unknown, SharedMemory::kFirstOffset, Layout::kRowMajor);
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(st.message()), HasSubstr("problems[0].b.shared.region"));
  {
    v1::GemmRequest r = request;
    r.set_keep_results(true);
    *r.mutable_problems(0)->mutable_output() = SharedRef(*region, SharedMemory::kFirstOffset);
    st = client_->Gemm(r).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(st.message()), HasSubstr("problems[0].output"));
  }
  // Unregistered: requests naming it fail; so does a second unregister.
  ASSERT_TRUE(client_->UnregisterSharedMemory(*region).ok());
  st = with([&](v1::GemmProblem* p) {
    *p->mutable_a() = SharedMatrix(*region, SharedMemory::kFirstOffset, Layout::kRowMajor);
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->UnregisterSharedMemory(*region).code(), absl::StatusCode::kNotFound);
  // The server still serves the same request with its bytes.
  EXPECT_TRUE(client_->Gemm(request).ok());
}

TEST_F(SharedMemoryE2eTest, ServerInfoSaysTheLimitsAndZeroRegionsTurnsItOff) {
  ServerOptions o = test::LoopbackCpuServerOptions();
  o.limits.max_shared_memory_regions = 0;
  Start(o);
  auto info = client_->GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->limits().max_shared_memory_regions(), 0u);
  auto memory = SharedMemory::Create(4096);
  ASSERT_TRUE(memory.ok()) << memory.status();
  const absl::StatusOr<std::string> region = client_->RegisterSharedMemory(**memory);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(region.status().message()), HasSubstr("max_shared_memory_regions"));
}

}  // namespace
}  // namespace gemm
