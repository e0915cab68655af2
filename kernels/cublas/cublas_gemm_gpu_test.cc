// GPU correctness test of the cuBLAS portfolio members (cublas_gemm.h)
// against a float64 CPU reference, on the shapes of kernels/gemm_gpu_test:
// sizes 1-1000 and a ragged 4097^3, every layout of A, B and D, bf16/fp16
// inputs into every output type cuBLAS writes, alpha/beta with C apart and
// in place, TF32 and strict fp32, strided-batched and broadcast B, grouped
// lists, and several cuBLASLt algorithms per shape.
//
// Each case draws random inputs, fills D (and the padding around it) with
// 0xFF bytes, which decode to NaN in bf16, fp16 and fp32, and checks the
// relative Frobenius error over the written elements, that none is NaN and
// that no byte outside the logical matrices changed. Without a usable CUDA
// device every test skips with the reason.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cublas/cublas_gemm.h"
#include "kernels/gemm.h"
#include "kernels/grouped_gemm.h"
#include "kernels/testing/fp8_host.h"
#include "kernels/testing/host_types.h"
#include "kernels/tuning/candidate.h"
#include "kernels/testing/gpu_skip.h"

namespace gemm_kernels {
namespace cublas {
namespace {

using gemm_kernels::testing::DecodeElement;
using gemm_kernels::testing::EncodeElement;
// One operand or output on the host (storage bytes and decoded values) and
// on the device.
struct Operand {
  DataType dtype = DataType::kBf16;
  Layout layout = Layout::kRowMajor;
  int64_t rows = 0, cols = 0, ld = 0, batch_stride = 0;
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  void* dev = nullptr;

  Operand() = default;
  Operand(const Operand&) = delete;
  Operand& operator=(const Operand&) = delete;
  ~Operand() { cudaFree(dev); }

  int64_t Index(int64_t b, int64_t i, int64_t j) const {
    return b * batch_stride + (layout == Layout::kRowMajor ? i * ld + j : i + j * ld);
  }
  MatrixDesc Desc() const { return {dev, dtype, layout, ld, batch_stride}; }
};

// rows x cols per member, `pad` extra elements per leading dimension and
// between members (pad 0: packed), random in [-1, 1] or 0xFF poison.
std::unique_ptr<Operand> MakeOperand(DataType dtype, Layout layout, int64_t rows, int64_t cols,
                                     int64_t batch, bool broadcast, int64_t pad, bool random,
                                     std::mt19937_64& rng) {
  auto m = std::make_unique<Operand>();
  m->dtype = dtype;
  m->layout = layout;
  m->rows = rows;
  m->cols = cols;
  const int64_t inner = layout == Layout::kRowMajor ? cols : rows;
  const int64_t outer = layout == Layout::kRowMajor ? rows : cols;
  m->ld = inner + pad;
  m->batch_stride = broadcast ? 0 : outer * m->ld + pad;
  const int64_t members = broadcast ? 1 : batch;
  const int64_t elems = (members - 1) * m->batch_stride + outer * m->ld;
  const size_t es = DataTypeSize(dtype);
  m->bytes.assign(elems * es, 0xFF);
  m->values.assign(elems, NAN);
  if (random) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int64_t i = 0; i < elems; ++i) {
      EncodeElement(dtype, dist(rng), &m->bytes[i * es]);
      m->values[i] = DecodeElement(dtype, &m->bytes[i * es]);
    }
  }
  if (cudaMalloc(&m->dev, m->bytes.size()) != cudaSuccess ||
      cudaMemcpy(m->dev, m->bytes.data(), m->bytes.size(), cudaMemcpyHostToDevice) !=
          cudaSuccess) {
    m->dev = nullptr;
  }
  return m;
}

struct Case {
  int64_t m, n, k, batch = 1;
  DataType in = DataType::kBf16, out = DataType::kBf16;
  Layout la = Layout::kRowMajor, lb = Layout::kColMajor, ld = Layout::kRowMajor;
  float alpha = 1.0f, beta = 0.0f;
  bool allow_tf32 = false;
  int64_t pad = 8;
  bool broadcast_b = false;
  bool in_place = false;

  std::string Describe() const {
    std::ostringstream os;
    auto L = [](Layout l) { return l == Layout::kRowMajor ? "R" : "C"; };
    os << m << "x" << n << "x" << k << " batch=" << batch << " " << DataTypeName(in) << "->"
       << DataTypeName(out) << " A" << L(la) << " B" << L(lb) << " D" << L(ld)
       << " alpha=" << alpha << " beta=" << beta << " tf32=" << allow_tf32 << " pad=" << pad
       << (broadcast_b ? " bcastB" : "") << (in_place ? " inplace" : "");
    return os.str();
  }
};

double Tolerance(const Case& c) {
  double tol = 1e-5;
  if (c.in != DataType::kFp32) tol = 1e-2;
  if (c.in == DataType::kFp32 && c.allow_tf32) tol = 2e-3;
  if (c.out == DataType::kBf16) tol = std::max(tol, 1e-2);
  if (c.out == DataType::kFp16) tol = std::max(tol, 2e-3);
  return tol;
}

// The problem's buffers, its arguments, and the check of D after a run.
struct Problem {
  Case c;
  std::unique_ptr<Operand> a, b, cm, d;
  std::vector<uint8_t> d_before;
  GemmArguments args;

  Problem(const Case& cs, std::mt19937_64& rng) : c(cs) {
    a = MakeOperand(c.in, c.la, c.m, c.k, c.batch, false, c.pad, true, rng);
    b = MakeOperand(c.in, c.lb, c.k, c.n, c.batch, c.broadcast_b, c.pad, true, rng);
    d = MakeOperand(c.out, c.ld, c.m, c.n, c.batch, false, c.pad, c.in_place, rng);
    cm = MakeOperand(c.out, c.ld, c.m, c.n, c.batch, false, c.pad, c.beta != 0 && !c.in_place,
                     rng);
    d_before = d->bytes;
    args.m = c.m;
    args.n = c.n;
    args.k = c.k;
    args.batch_count = c.batch;
    args.a = a->Desc();
    args.b = b->Desc();
    args.d = d->Desc();
    args.c = c.in_place ? d->Desc() : cm->Desc();
    args.alpha = c.alpha;
    args.beta = c.beta;
    args.allow_tf32 = c.allow_tf32;
  }
  bool ok() const { return a->dev && b->dev && cm->dev && d->dev; }

  // Poisons D again (keeping an in-place C's values) for another member.
  void Reset() {
    cudaMemcpy(d->dev, d_before.data(), d_before.size(), cudaMemcpyHostToDevice);
  }

  // Checks D against the float64 reference over all rows (or a random
  // subset of rows, with the first and last, where that is too costly).
  void Check(const std::string& member, std::mt19937_64& rng) {
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint8_t> got(d->bytes.size());
    ASSERT_EQ(cudaMemcpy(got.data(), d->dev, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    const size_t es = DataTypeSize(c.out);
    std::vector<char> inside(got.size() / es, 0);
    for (int64_t bb = 0; bb < c.batch; ++bb)
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) inside[d->Index(bb, i, j)] = 1;
    int64_t stray = 0;
    for (size_t e = 0; e < inside.size(); ++e) {
      if (!inside[e] && std::memcmp(&got[e * es], &d_before[e * es], es) != 0) ++stray;
    }
    EXPECT_EQ(stray, 0) << member << ": elements outside D were written";
    const double budget = 5e7;
    std::vector<int64_t> rows;
    if (double(c.m) * c.n * c.k * c.batch <= budget) {
      for (int64_t i = 0; i < c.m; ++i) rows.push_back(i);
    } else {
      rows = {0, c.m - 1};
      std::uniform_int_distribution<int64_t> pick(0, c.m - 1);
      const int64_t extra = std::max<int64_t>(1, int64_t(budget / (double(c.n) * c.k * c.batch)));
      for (int64_t t = 0; t < extra; ++t) rows.push_back(pick(rng));
    }
    const Operand& cref = c.in_place ? *d : *cm;
    double e2 = 0, r2 = 0;
    int64_t nans = 0;
    for (int64_t bb = 0; bb < c.batch; ++bb) {
      for (int64_t i : rows) {
        for (int64_t j = 0; j < c.n; ++j) {
          double acc = 0;
          for (int64_t kk = 0; kk < c.k; ++kk) {
            acc += double(a->values[a->Index(bb, i, kk)]) * b->values[b->Index(bb, kk, j)];
          }
          double ref = double(c.alpha) * acc;
          if (c.beta != 0) ref += double(c.beta) * cref.values[cref.Index(bb, i, j)];
          const double v = DecodeElement(c.out, &got[d->Index(bb, i, j) * es]);
          if (!std::isfinite(v)) {
            ++nans;
            continue;
          }
          e2 += (v - ref) * (v - ref);
          r2 += ref * ref;
        }
      }
    }
    EXPECT_EQ(nans, 0) << member << ": non-finite outputs (unwritten or NaN)";
    const double rel = r2 > 0 ? std::sqrt(e2 / r2) : std::sqrt(e2);
    EXPECT_LE(rel, Tolerance(c)) << member;
    std::printf("  %-80s %-60s rel_err %.2e\n", c.Describe().c_str(), member.c_str(), rel);
  }
};

class CublasGemmGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = testing::NoGpuReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    absl::StatusOr<std::unique_ptr<CublasContext>> ctx =
        CublasContext::Create(stream_, CublasContextOptions{});
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = *std::move(ctx);
  }
  void TearDown() override {
    ctx_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  // Runs every single-launch member that takes the case (GemmEx for batch
  // 1, strided-batched, cuBLASLt's first `lt_algorithms` algorithms) and
  // checks each.
  void RunMembers(const Case& c, int lt_algorithms = 2) {
    SCOPED_TRACE(c.Describe());
    Problem p(c, rng_);
    ASSERT_TRUE(p.ok()) << "cudaMalloc failed";
    std::vector<CublasMethod> methods = {CublasMethod::kStridedBatched};
    if (c.batch == 1) methods.push_back(CublasMethod::kGemmEx);
    for (CublasMethod method : methods) {
      ASSERT_TRUE(CublasGemm::CanImplement(method, p.args).ok())
          << CublasGemm::CanImplement(method, p.args);
      CublasGemm g;
      const absl::Status init = g.Initialize(ctx_.get(), method, p.args);
      ASSERT_TRUE(init.ok()) << init;
      p.Reset();
      const absl::Status run = g.Run();
      ASSERT_TRUE(run.ok()) << run;
      p.Check(g.kernel_name(), rng_);
    }
    absl::StatusOr<std::vector<tuning::LtAlgoConfig>> algos =
        CublasGemm::LtAlgorithms(*ctx_, p.args, lt_algorithms);
    ASSERT_TRUE(algos.ok()) << algos.status();
    ASSERT_FALSE(algos->empty()) << "cuBLASLt offers no algorithm";
    for (const tuning::LtAlgoConfig& algo : *algos) {
      CublasGemm g;
      const absl::Status init = g.Initialize(ctx_.get(), CublasMethod::kLt, p.args, &algo);
      ASSERT_TRUE(init.ok()) << init;
      p.Reset();
      const absl::Status run = g.Run();
      ASSERT_TRUE(run.ok()) << run;
      p.Check(g.kernel_name(), rng_);
      // The configuration rebuilds the same algorithm from its text form.
      tuning::CandidateId id;
      id.family = tuning::CandidateFamily::kCublasLt;
      id.lt = algo;
      EXPECT_EQ(g.kernel_name(), tuning::CandidateToString(id));
    }
  }

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CublasContext> ctx_;
  std::mt19937_64 rng_{std::random_device{}()};
};

const Layout kLayouts[] = {Layout::kRowMajor, Layout::kColMajor};

TEST_F(CublasGemmGpuTest, SizesLayoutsAnd16BitTypes) {
  for (int64_t s : {1, 7, 64, 127, 129, 1000}) {
    for (DataType t : {DataType::kBf16, DataType::kFp16}) {
      for (Layout la : kLayouts) {
        for (Layout lb : kLayouts) {
          for (Layout ld : kLayouts) {
            Case c{s, s, s};
            c.in = c.out = t;
            c.la = la;
            c.lb = lb;
            c.ld = ld;
            RunMembers(c, 1);
          }
        }
      }
    }
  }
}

TEST_F(CublasGemmGpuTest, TightLeadingDimensions) {
  for (int64_t s : {1, 7, 127, 129}) {
    Case c{s, s + 2, s + 1};
    c.pad = 0;
    RunMembers(c);
  }
}

TEST_F(CublasGemmGpuTest, LargeRagged4097) {
  Case c{4097, 4097, 4097};
  RunMembers(c, 3);
}

TEST_F(CublasGemmGpuTest, OutputTypesAndAlphaBeta) {
  const std::pair<float, float> ab[] = {{1.0f, 0.0f}, {0.5f, -1.5f}, {-2.0f, 1.0f}, {0.0f, 1.0f}};
  for (DataType in : {DataType::kBf16, DataType::kFp16}) {
    for (DataType out : {in, DataType::kFp32}) {
      for (auto [alpha, beta] : ab) {
        for (Layout ld : kLayouts) {
          Case c{200, 136, 300};
          c.in = in;
          c.out = out;
          c.alpha = alpha;
          c.beta = beta;
          c.ld = ld;
          RunMembers(c);
        }
      }
    }
  }
  Case in_place{129, 257, 64};
  in_place.beta = 0.75f;
  in_place.in_place = true;
  RunMembers(in_place);
}

TEST_F(CublasGemmGpuTest, Tf32AndStrictFp32) {
  for (int64_t s : {1, 7, 129, 1000}) {
    for (bool tf32 : {false, true}) {
      for (Layout la : kLayouts) {
        for (Layout lb : kLayouts) {
          Case c{s, s + 8, s};
          c.in = c.out = DataType::kFp32;
          c.allow_tf32 = tf32;
          c.la = la;
          c.lb = lb;
          RunMembers(c, 1);
        }
      }
    }
  }
}

TEST_F(CublasGemmGpuTest, StridedBatchedAndBroadcastB) {
  struct B {
    int64_t batch, m, n, k;
  };
  for (B bt : {B{2, 129, 65, 200}, B{17, 64, 48, 40}, B{256, 16, 16, 16}, B{1024, 8, 8, 8},
               B{64, 100, 300, 72}}) {
    for (Layout ld : kLayouts) {
      Case c{bt.m, bt.n, bt.k, bt.batch};
      c.ld = ld;
      RunMembers(c);
    }
  }
  Case bcast{96, 80, 64, 33};
  bcast.broadcast_b = true;
  bcast.beta = 0.5f;
  RunMembers(bcast);
}

TEST_F(CublasGemmGpuTest, CanImplementRefusesWhatCublasCannotRun) {
  Case c{64, 64, 64, 4};
  Problem p(c, rng_);
  ASSERT_TRUE(p.ok());
  absl::Status s = CublasGemm::CanImplement(CublasMethod::kGemmEx, p.args);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("batch_count"), std::string::npos) << s;
  GemmArguments bad = p.args;
  bad.d.dtype = DataType::kFp16;  // bf16 inputs into fp16
  bad.c.dtype = DataType::kFp16;
  s = CublasGemm::CanImplement(CublasMethod::kStridedBatched, bad);
  EXPECT_NE(std::string(s.message()).find("d.dtype"), std::string::npos) << s;
  // An algorithm id cuBLASLt does not have is refused at Initialize.
  tuning::LtAlgoConfig none;
  none.algo_id = 1 << 30;
  CublasGemm g;
  EXPECT_FALSE(g.Initialize(ctx_.get(), CublasMethod::kLt, p.args, &none).ok());
}

TEST_F(CublasGemmGpuTest, GroupedLists) {
  std::uniform_int_distribution<int64_t> ext(1, 300);
  for (int count : {1, 3, 32}) {
    for (DataType t : {DataType::kBf16, DataType::kFp16}) {
      std::vector<std::unique_ptr<Problem>> problems;
      GroupedGemmArguments args;
      for (int i = 0; i < count; ++i) {
        Case c{ext(rng_), ext(rng_), ext(rng_)};
        c.in = c.out = t;
        c.la = i % 2 ? Layout::kColMajor : Layout::kRowMajor;
        c.ld = i % 3 ? Layout::kRowMajor : Layout::kColMajor;
        c.beta = i % 4 == 1 ? 0.5f : 0.0f;
        c.alpha = 1.0f + 0.25f * (i % 3);
        problems.push_back(std::make_unique<Problem>(c, rng_));
        ASSERT_TRUE(problems.back()->ok());
        args.problems.push_back(GroupedMemberOf(problems.back()->args));
      }
      ASSERT_TRUE(CublasGroupedGemm::CanImplement(args).ok())
          << CublasGroupedGemm::CanImplement(args);
      void* workspace = nullptr;
      ASSERT_EQ(cudaMalloc(&workspace, CublasGroupedGemm::WorkspaceSize(count)), cudaSuccess);
      CublasGroupedGemm g;
      const absl::Status init = g.Initialize(ctx_.get(), args, workspace);
      ASSERT_TRUE(init.ok()) << init;
      const absl::Status run = g.Run();
      ASSERT_TRUE(run.ok()) << run;
      for (auto& p : problems) {
        SCOPED_TRACE(p->c.Describe());
        p->Check(g.kernel_name() + " of " + std::to_string(count), rng_);
      }
      cudaFree(workspace);
    }
  }
  GroupedGemmArguments mixed;
  Case a{8, 8, 8}, b{8, 8, 8};
  b.out = DataType::kFp32;
  Problem pa(a, rng_), pb(b, rng_);
  mixed.problems = {GroupedMemberOf(pa.args), GroupedMemberOf(pb.args)};
  const absl::Status s = CublasGroupedGemm::CanImplement(mixed);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("problems[1].d.dtype"), std::string::npos) << s;
}

}  // namespace
}  // namespace cublas
}  // namespace gemm_kernels

namespace gemm_kernels {
namespace cublas {
namespace {

// Device memory holding `bytes`, freed at scope exit.
struct DeviceCopy {
  void* ptr = nullptr;
  explicit DeviceCopy(const void* host, size_t bytes) {
    if (cudaMalloc(&ptr, bytes) != cudaSuccess ||
        cudaMemcpy(ptr, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
      ptr = nullptr;
  }
  ~DeviceCopy() { cudaFree(ptr); }
};

struct Fp8Case {
  int64_t m, n, k;
  bool a_e4m3, b_e4m3;
  ScaleMode mode;
  DataType out;
  Layout d_layout;
  float alpha, beta;
};

// FP8 through cuBLASLt (its own heuristic's algorithm): every format pair,
// tensor and channel scales, each output type, row- and column-major D,
// alpha and beta with C; against float64 of the dequantized operands.
TEST_F(CublasGemmGpuTest, Fp8ThroughCublasLt) {
  const Fp8Case cases[] = {
      {256, 256, 256, true, true, ScaleMode::kTensor, DataType::kBf16, Layout::kRowMajor, 1, 0},
      {129, 80, 1024, true, false, ScaleMode::kTensor, DataType::kFp16, Layout::kRowMajor, 0.5f, 0},
      {100, 200, 64, false, true, ScaleMode::kTensor, DataType::kFp32, Layout::kColMajor, 1, 0.5f},
      {300, 128, 512, true, true, ScaleMode::kChannel, DataType::kBf16, Layout::kRowMajor, 1, 0},
      {64, 333, 256, true, false, ScaleMode::kChannel, DataType::kFp32, Layout::kColMajor, 2, 1},
      {1, 4096, 4096, true, true, ScaleMode::kTensor, DataType::kBf16, Layout::kRowMajor, 1, 0},
  };
  std::uniform_real_distribution<float> value(-1.0f, 1.0f), spread(0.25f, 4.0f);
  for (const Fp8Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.m << "x" << c.n << "x" << c.k << " "
                                    << (c.a_e4m3 ? "e4m3" : "e5m2") << "x"
                                    << (c.b_e4m3 ? "e4m3" : "e5m2") << " "
                                    << ScaleModeName(c.mode) << " -> " << DataTypeName(c.out)
                                    << (c.d_layout == Layout::kRowMajor ? " D row" : " D col"));
    const bool channel = c.mode == ScaleMode::kChannel;
    // A row-major m x k and B column-major k x n: both K-major, ld = k.
    std::vector<float> sa(channel ? c.m : 1), sb(channel ? c.n : 1);
    for (float& x : sa) x = spread(rng_) / testing::Fp8Max(c.a_e4m3);
    for (float& x : sb) x = spread(rng_) / testing::Fp8Max(c.b_e4m3);
    std::vector<uint8_t> qa(c.m * c.k), qb(c.n * c.k);
    std::vector<double> da(qa.size()), db(qb.size());
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t kk = 0; kk < c.k; ++kk) {
        const float s = sa[channel ? i : 0];
        const uint8_t q = testing::FloatToFp8(value(rng_) * testing::Fp8Max(c.a_e4m3), c.a_e4m3);
        qa[i * c.k + kk] = q;
        da[i * c.k + kk] = double(testing::Fp8ToFloat(q, c.a_e4m3)) * s;
      }
    for (int64_t j = 0; j < c.n; ++j)
      for (int64_t kk = 0; kk < c.k; ++kk) {
        const float s = sb[channel ? j : 0];
        const uint8_t q = testing::FloatToFp8(value(rng_) * testing::Fp8Max(c.b_e4m3), c.b_e4m3);
        qb[j * c.k + kk] = q;
        db[j * c.k + kk] = double(testing::Fp8ToFloat(q, c.b_e4m3)) * s;
      }
    const size_t es = DataTypeSize(c.out);
    const bool row = c.d_layout == Layout::kRowMajor;
    const int64_t ldd = row ? c.n : c.m;
    auto at = [&](int64_t i, int64_t j) { return row ? i * ldd + j : i + j * ldd; };
    std::vector<uint8_t> cbytes(c.m * c.n * es), poison(c.m * c.n * es, 0xFF);
    std::vector<double> cvals(c.m * c.n);
    for (int64_t e = 0; e < c.m * c.n; ++e) {
      EncodeElement(c.out, value(rng_), &cbytes[e * es]);
      cvals[e] = DecodeElement(c.out, &cbytes[e * es]);
    }
    DeviceCopy a_dev(qa.data(), qa.size()), b_dev(qb.data(), qb.size());
    DeviceCopy sa_dev(sa.data(), sa.size() * 4), sb_dev(sb.data(), sb.size() * 4);
    DeviceCopy c_dev(cbytes.data(), cbytes.size()), d_dev(poison.data(), poison.size());
    ASSERT_TRUE(a_dev.ptr && b_dev.ptr && sa_dev.ptr && sb_dev.ptr && c_dev.ptr && d_dev.ptr);
    GemmArguments args;
    args.m = c.m;
    args.n = c.n;
    args.k = c.k;
    args.a = {a_dev.ptr, testing::Fp8Format(c.a_e4m3), Layout::kRowMajor, c.k, 0};
    args.b = {b_dev.ptr, testing::Fp8Format(c.b_e4m3), Layout::kColMajor, c.k, 0};
    args.c = {c_dev.ptr, c.out, c.d_layout, ldd, 0};
    args.d = {d_dev.ptr, c.out, c.d_layout, ldd, 0};
    args.alpha = c.alpha;
    args.beta = c.beta;
    args.a_scale = {c.mode, static_cast<const float*>(sa_dev.ptr)};
    args.b_scale = {c.mode, static_cast<const float*>(sb_dev.ptr)};
    ASSERT_TRUE(CublasGemm::CanImplement(CublasMethod::kLt, args).ok())
        << CublasGemm::CanImplement(CublasMethod::kLt, args);
    CublasGemm g;
    const absl::Status init = g.Initialize(ctx_.get(), CublasMethod::kLt, args);
    ASSERT_TRUE(init.ok()) << init;
    const absl::Status run = g.Run();
    ASSERT_TRUE(run.ok()) << run;
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    std::vector<uint8_t> got(poison.size());
    ASSERT_EQ(cudaMemcpy(got.data(), d_dev.ptr, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    double e2 = 0, r2 = 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double acc = 0;
        for (int64_t kk = 0; kk < c.k; ++kk) acc += da[i * c.k + kk] * db[j * c.k + kk];
        const double ref = c.alpha * acc + c.beta * cvals[at(i, j)];
        const double v = DecodeElement(c.out, &got[at(i, j) * es]);
        if (!std::isfinite(v)) {
          ++bad;
          continue;
        }
        e2 += (v - ref) * (v - ref);
        r2 += ref * ref;
      }
    EXPECT_EQ(bad, 0) << "non-finite outputs";
    const double rel = std::sqrt(e2 / std::max(r2, 1e-30));
    const double tol = c.out == DataType::kBf16 ? 1e-2 : c.out == DataType::kFp16 ? 2e-3 : 1e-4;
    EXPECT_LE(rel, tol) << g.kernel_name();
    std::printf("  fp8 %s rel_err %.2e\n", g.kernel_name().c_str(), rel);
  }
}

}  // namespace
}  // namespace cublas
}  // namespace gemm_kernels
