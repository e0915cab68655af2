#include "bench/portfolio_runner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bench/bf16_data.h"
#include "common/status_macros.h"
#include "kernels/gemm.h"
#include "kernels/grouped_gemm.h"
#include "kernels/testing/host_types.h"
#include "service/version.h"

namespace gemm_bench {

using gemm_kernels::DataType;
using gemm_kernels::DataTypeSize;
using gemm_kernels::Gemm;
using gemm_kernels::GemmArguments;
using gemm_kernels::GroupedGemm;
using gemm_kernels::GroupedGemmArguments;
using gemm_kernels::Layout;
using gemm_kernels::MatrixDesc;
using gemm_kernels::cublas::CublasContext;
using gemm_kernels::cublas::CublasGemm;
using gemm_kernels::cublas::CublasGroupedGemm;
using gemm_kernels::cublas::CublasMethod;
using gemm_kernels::tuning::CandidateFamily;
using gemm_kernels::tuning::CandidateId;
using gemm_kernels::tuning::CandidateToString;

namespace {

absl::Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// Random values of `dtype` in device memory: bf16 bit patterns from the
// shared pool (bench/bf16_data). Read as fp16 they are finite values of
// magnitude below 2; read as fp32 each value takes a bf16 as its high half.
absl::StatusOr<void*> RandomBuffer(DataType dtype, int64_t elems, uint64_t seed) {
  const int64_t halves = elems * static_cast<int64_t>(DataTypeSize(dtype)) / 2;
  void* p = RandomBf16Buffer(halves, seed);
  if (p == nullptr) return absl::ResourceExhaustedError("random input buffer: cudaMalloc failed");
  return p;
}

// Random FP8 codes (e4m3 or e5m2) in device memory: uniform bytes with the
// exponent's top bit cleared, so every code is finite, of magnitude below 2.
absl::StatusOr<void*> RandomFp8Buffer(int64_t elems, uint64_t seed) {
  std::vector<uint8_t> host(static_cast<size_t>(elems));
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < host.size(); i += 8) {
    uint64_t bits = rng() & 0xBFBFBFBFBFBFBFBFull;
    std::memcpy(&host[i], &bits, std::min<size_t>(8, host.size() - i));
  }
  void* p = nullptr;
  if (cudaMalloc(&p, std::max<size_t>(host.size(), 16)) != cudaSuccess)
    return absl::ResourceExhaustedError("random FP8 buffer: cudaMalloc failed");
  if (cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice) != cudaSuccess) {
    cudaFree(p);
    return absl::InternalError("random FP8 buffer: cudaMemcpy failed");
  }
  return p;
}

// `count` fp32 scales in [0.5, 1.5) in device memory.
absl::StatusOr<void*> RandomScales(int64_t count, uint64_t seed) {
  std::vector<float> host(static_cast<size_t>(std::max<int64_t>(count, 1)));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (float& x : host) x = u(rng);
  void* p = nullptr;
  if (cudaMalloc(&p, host.size() * sizeof(float)) != cudaSuccess)
    return absl::ResourceExhaustedError("scales: cudaMalloc failed");
  if (cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) !=
      cudaSuccess) {
    cudaFree(p);
    return absl::InternalError("scales: cudaMemcpy failed");
  }
  return p;
}

absl::StatusOr<void*> RandomInput(DataType dtype, int64_t elems, uint64_t seed) {
  return ::gemm::IsFp8(dtype) ? RandomFp8Buffer(elems, seed) : RandomBuffer(dtype, elems, seed);
}

absl::StatusOr<void*> PoisonedBuffer(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, std::max<size_t>(bytes, 16)) != cudaSuccess) {
    return absl::ResourceExhaustedError(absl::StrCat("output buffer of ", bytes, " bytes"));
  }
  const cudaError_t e = cudaMemset(p, 0xFF, bytes);  // NaN in bf16, fp16 and fp32
  if (e != cudaSuccess) {
    cudaFree(p);
    return Cuda(e, "poisoning an output");
  }
  return p;
}

double Decode(DataType t, const uint8_t* p) {
  uint16_t h = 0;
  float f = 0;
  switch (t) {
    case DataType::kBf16:
      std::memcpy(&h, p, 2);
      return gemm_kernels::testing::Bf16ToFloat(h);
    case DataType::kFp16:
      std::memcpy(&h, p, 2);
      return gemm_kernels::testing::HalfToFloat(h);
    case DataType::kFp32:
      std::memcpy(&f, p, 4);
      return f;
    case DataType::kFp8E4m3:
    case DataType::kFp8E5m2:
      break;  // an input type only: FP8 shapes have bf16 outputs
  }
  return NAN;
}

// ||x - y|| / ||y|| over every `stride`-th element of two device arrays;
// NaN where x holds a non-finite value (an element never written).
absl::StatusOr<double> RelDiff(DataType t, const void* x, const void* y, int64_t elems) {
  const size_t es = DataTypeSize(t);
  std::vector<uint8_t> a(elems * es), b(elems * es);
  absl::Status s = Cuda(cudaMemcpy(a.data(), x, a.size(), cudaMemcpyDeviceToHost), "reading D");
  if (s.ok()) s = Cuda(cudaMemcpy(b.data(), y, b.size(), cudaMemcpyDeviceToHost), "reading D");
  if (!s.ok()) return s;
  const int64_t stride = std::max<int64_t>(1, elems / (int64_t{1} << 22));
  double e2 = 0, r2 = 0;
  for (int64_t i = 0; i < elems; i += stride) {
    const double u = Decode(t, &a[i * es]), v = Decode(t, &b[i * es]);
    if (!std::isfinite(u)) return NAN;
    e2 += (u - v) * (u - v);
    r2 += v * v;
  }
  return r2 > 0 ? std::sqrt(e2 / r2) : std::sqrt(e2);
}

// Agreement demanded of a member with cuBLAS: both round differently
// (accumulation order, tf32 truncation, output rounding).
double Tolerance(const TuningShape& s) {
  if (s.out_dtype == DataType::kFp32) return s.allow_tf32 ? 1e-2 : 1e-4;
  return 3e-2;
}

struct Dims {
  int64_t lda, ldb, ldd, a_elems, b_elems, d_elems;
};

Dims DimsOf(const TuningShape& s, int64_t m) {
  Dims d;
  d.lda = s.a == Layout::kRowMajor ? s.k : m;
  d.ldb = s.b == Layout::kRowMajor ? s.n : s.k;
  d.ldd = s.d == Layout::kRowMajor ? s.n : m;
  d.a_elems = m * s.k;
  d.b_elems = s.k * s.n;
  d.d_elems = m * s.n;
  return d;
}

}  // namespace

struct PortfolioRunner::Data {
  TuningShape shape;
  int sets = 1;
  std::vector<int> rows;                    // grouped: each member's M
  std::vector<GemmArguments> single;        // [set]
  std::vector<GroupedGemmArguments> group;  // [set]
  // cuBLAS's output for set 0: one buffer (single) or one per member.
  std::vector<void*> reference;
  std::vector<void*> allocations;
  cudaEvent_t start = nullptr, stop = nullptr;
  int next_set = 0;

  ~Data() {
    cudaDeviceSynchronize();
    for (void* p : allocations) cudaFree(p);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
  absl::StatusOr<void*> Keep(absl::StatusOr<void*> p) {
    if (p.ok()) allocations.push_back(*p);
    return p;
  }
};

struct PortfolioRunner::Member {
  CandidateId id;
  std::string kernel;
  std::vector<std::unique_ptr<Gemm>> ours;  // [set], the same for the others
  std::vector<std::unique_ptr<GroupedGemm>> ours_grouped;
  std::vector<std::unique_ptr<CublasGemm>> cublas;
  std::vector<std::unique_ptr<CublasGroupedGemm>> cublas_grouped;
  std::vector<void*> buffers;
  ~Member() {
    cudaDeviceSynchronize();
    for (void* p : buffers) cudaFree(p);
  }
  absl::StatusOr<void*> Alloc(size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, std::max<size_t>(bytes, 256)) != cudaSuccess) {
      return absl::ResourceExhaustedError(absl::StrCat("workspace of ", bytes, " bytes"));
    }
    buffers.push_back(p);
    return p;
  }
};

PortfolioRunner::~PortfolioRunner() {
  members_.clear();
  data_.reset();
}

absl::StatusOr<std::unique_ptr<PortfolioRunner>> PortfolioRunner::Create(const TuningShape& shape,
                                                                         CublasContext* ctx) {
  std::unique_ptr<PortfolioRunner> r(new PortfolioRunner());
  r->ctx_ = ctx;
  r->data_ = std::make_unique<Data>();
  Data& d = *r->data_;
  d.shape = shape;
  absl::Status s = Cuda(cudaEventCreate(&d.start), "cudaEventCreate");
  if (s.ok()) s = Cuda(cudaEventCreate(&d.stop), "cudaEventCreate");
  if (!s.ok()) return s;
  int device = 0;
  cudaDeviceProp prop;
  s = Cuda(cudaGetDevice(&device), "cudaGetDevice");
  if (s.ok()) s = Cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  if (!s.ok()) return s;
  const size_t in_es = DataTypeSize(shape.dtype);
  if (!shape.grouped) {
    const Dims dims = DimsOf(shape, shape.m);
    const size_t a_es = DataTypeSize(shape.dtype), b_es = DataTypeSize(shape.b_dtype);
    const size_t out_es = DataTypeSize(shape.out_dtype);
    const size_t set_bytes =
        (dims.a_elems * a_es + dims.b_elems * b_es + dims.d_elems * out_es) * shape.batch;
    d.sets = RotatingSets(set_bytes, prop.l2CacheSize);
    for (int set = 0; set < d.sets; ++set) {
      GemmArguments g;
      g.m = shape.m;
      g.n = shape.n;
      g.k = shape.k;
      g.batch_count = shape.batch;
      g.allow_tf32 = shape.allow_tf32;
      absl::StatusOr<void*> a =
          d.Keep(RandomInput(shape.dtype, dims.a_elems * shape.batch, 11 + set));
      if (!a.ok()) return a.status();
      absl::StatusOr<void*> b =
          d.Keep(RandomInput(shape.b_dtype, dims.b_elems * shape.batch, 101 + set));
      if (!b.ok()) return b.status();
      absl::StatusOr<void*> out = d.Keep(PoisonedBuffer(dims.d_elems * shape.batch * out_es));
      if (!out.ok()) return out.status();
      const int64_t batched = shape.batch > 1 ? 1 : 0;
      g.a = MatrixDesc{*a, shape.dtype, shape.a, dims.lda, batched * dims.a_elems};
      g.b = MatrixDesc{*b, shape.b_dtype, shape.b, dims.ldb, batched * dims.b_elems};
      g.d = MatrixDesc{*out, shape.out_dtype, shape.d, dims.ldd, batched * dims.d_elems};
      g.c = g.d;
      if (shape.scales != gemm_kernels::ScaleMode::kNone) {
        g.a_scale.mode = g.b_scale.mode = shape.scales;
        absl::StatusOr<void*> sa =
            d.Keep(RandomScales(Gemm::ScaleCount(g, g.a_scale, true) * shape.batch, 7 + set));
        if (!sa.ok()) return sa.status();
        absl::StatusOr<void*> sb =
            d.Keep(RandomScales(Gemm::ScaleCount(g, g.b_scale, false) * shape.batch, 77 + set));
        if (!sb.ok()) return sb.status();
        g.a_scale.ptr = static_cast<const float*>(*sa);
        g.b_scale.ptr = static_cast<const float*>(*sb);
      }
      d.single.push_back(g);
    }
    absl::StatusOr<void*> ref = d.Keep(PoisonedBuffer(dims.d_elems * shape.batch * out_es));
    if (!ref.ok()) return ref.status();
    d.reference.push_back(*ref);
    GemmArguments g = d.single[0];
    g.d.ptr = *ref;
    g.c = g.d;
    CublasGemm reference;
    // FP8 runs in cuBLAS only through cuBLASLt (its heuristic's algorithm).
    s = reference.Initialize(
        ctx, ::gemm::IsFp8(shape.dtype) ? CublasMethod::kLt : CublasMethod::kStridedBatched, g);
    if (s.ok()) s = reference.Run();
    if (s.ok()) s = Cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(ctx->stream())), "reference");
    if (!s.ok()) return absl::InternalError(absl::StrCat("the cuBLAS reference failed: ", s.message()));
    return r;
  }
  d.rows = GroupedRows(shape.count, shape.m_lo, shape.m_hi, shape.seed);
  size_t set_bytes = 0;
  for (int m : d.rows) {
    const Dims dims = DimsOf(shape, m);
    set_bytes += (dims.a_elems + dims.b_elems + dims.d_elems) * in_es;
  }
  d.sets = RotatingSets(set_bytes, prop.l2CacheSize);
  for (int set = 0; set < d.sets; ++set) {
    GroupedGemmArguments group;
    group.allow_tf32 = shape.allow_tf32;
    for (size_t i = 0; i < d.rows.size(); ++i) {
      const Dims dims = DimsOf(shape, d.rows[i]);
      absl::StatusOr<void*> a = d.Keep(RandomBuffer(shape.dtype, dims.a_elems, 1000 * set + 2 * i));
      if (!a.ok()) return a.status();
      absl::StatusOr<void*> b =
          d.Keep(RandomBuffer(shape.dtype, dims.b_elems, 1000 * set + 2 * i + 1));
      if (!b.ok()) return b.status();
      absl::StatusOr<void*> out = d.Keep(PoisonedBuffer(dims.d_elems * in_es));
      if (!out.ok()) return out.status();
      gemm_kernels::GroupedProblemArguments p;
      p.m = d.rows[i];
      p.n = shape.n;
      p.k = shape.k;
      p.a = MatrixDesc{*a, shape.dtype, shape.a, dims.lda, 0};
      p.b = MatrixDesc{*b, shape.dtype, shape.b, dims.ldb, 0};
      p.d = MatrixDesc{*out, shape.dtype, shape.d, dims.ldd, 0};
      p.c = p.d;
      group.problems.push_back(p);
    }
    d.group.push_back(group);
  }
  GroupedGemmArguments ref_args = d.group[0];
  for (size_t i = 0; i < d.rows.size(); ++i) {
    absl::StatusOr<void*> ref =
        d.Keep(PoisonedBuffer(DimsOf(shape, d.rows[i]).d_elems * in_es));
    if (!ref.ok()) return ref.status();
    d.reference.push_back(*ref);
    ref_args.problems[i].d.ptr = *ref;
    ref_args.problems[i].c = ref_args.problems[i].d;
  }
  absl::StatusOr<void*> ptrs = d.Keep(PoisonedBuffer(CublasGroupedGemm::WorkspaceSize(d.rows.size())));
  if (!ptrs.ok()) return ptrs.status();
  CublasGroupedGemm reference;
  s = reference.Initialize(ctx, ref_args, *ptrs);
  if (s.ok()) s = reference.Run();
  if (s.ok()) s = Cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(ctx->stream())), "reference");
  if (!s.ok()) return absl::InternalError(absl::StrCat("the cuBLAS reference failed: ", s.message()));
  return r;
}

gemm_kernels::tuning::ShapeClass PortfolioRunner::Class(int buckets_per_octave) const {
  if (!data_->shape.grouped) return gemm_kernels::tuning::ClassOf(data_->single[0], buckets_per_octave);
  std::vector<GemmArguments> members;
  for (const gemm_kernels::GroupedProblemArguments& p : data_->group[0].problems) {
    GemmArguments g;
    g.m = p.m;
    g.n = p.n;
    g.k = p.k;
    g.a = p.a;
    g.b = p.b;
    g.d = p.d;
    g.allow_tf32 = data_->group[0].allow_tf32;
    members.push_back(g);
  }
  return *gemm_kernels::tuning::GroupedClassOf(members, buckets_per_octave);
}

std::vector<CandidateId> PortfolioRunner::Candidates(int lt_algorithms) const {
  std::vector<CandidateId> out = gemm_kernels::tuning::BasePortfolio(Class(4));
  if (data_->shape.grouped || lt_algorithms < 1) return out;
  absl::StatusOr<std::vector<gemm_kernels::tuning::LtAlgoConfig>> algos =
      CublasGemm::LtAlgorithms(*ctx_, data_->single[0], lt_algorithms);
  // Where cuBLASLt's heuristic fails the list goes on without its members;
  // cuBLAS's own calls stay in it.
  if (!algos.ok()) return out;
  for (const gemm_kernels::tuning::LtAlgoConfig& a : *algos) {
    CandidateId c;
    c.family = CandidateFamily::kCublasLt;
    c.lt = a;
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

double PortfolioRunner::Flops() const {
  const TuningShape& s = data_->shape;
  if (!s.grouped) return 2.0 * s.m * s.n * s.k * s.batch;
  double f = 0;
  for (int m : data_->rows) f += 2.0 * m * s.n * s.k;
  return f;
}

absl::StatusOr<PortfolioRunner::Member*> PortfolioRunner::Find(const CandidateId& c) {
  auto it = members_.find(CandidateToString(c));
  if (it == members_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(CandidateToString(c), " was not prepared"));
  }
  return it->second.get();
}

absl::Status PortfolioRunner::Launch(Member& m, int set) {
  void* stream = ctx_->stream();
  if (!m.ours.empty()) return m.ours[set]->Run(stream);
  if (!m.ours_grouped.empty()) return m.ours_grouped[set]->Run(stream);
  if (!m.cublas.empty()) return m.cublas[set]->Run();
  return m.cublas_grouped[set]->Run();
}

absl::Status PortfolioRunner::Prepare(const CandidateId& c) {
  Data& d = *data_;
  auto m = std::make_unique<Member>();
  m->id = c;
  switch (c.family) {
    case CandidateFamily::kOurs: {
      const GemmArguments& g0 = d.single[0];
      GEMM_RETURN_IF_ERROR(Gemm::CanImplement(g0));
      const size_t ws_bytes = Gemm::WorkspaceSize(g0, c.tile, c.schedule);
      const size_t copy_bytes = Gemm::OperandCopyBytes(g0);
      void* ws = nullptr;
      void* copies = nullptr;
      if (ws_bytes > 0) {
        GEMM_ASSIGN_OR_RETURN(ws, m->Alloc(ws_bytes));
      }
      if (copy_bytes > 0) {
        GEMM_ASSIGN_OR_RETURN(copies, m->Alloc(copy_bytes));
      }
      for (int set = 0; set < d.sets; ++set) {
        auto g = std::make_unique<Gemm>();
        GEMM_RETURN_IF_ERROR(g->Initialize(d.single[set], ws, c.tile, c.schedule, copies));
        m->kernel = g->kernel_name();
        m->ours.push_back(std::move(g));
      }
      break;
    }
    case CandidateFamily::kOursGrouped: {
      GEMM_RETURN_IF_ERROR(GroupedGemm::CanImplement(d.group[0]));
      for (int set = 0; set < d.sets; ++set) {
        void* ws = nullptr;
        GEMM_ASSIGN_OR_RETURN(ws, m->Alloc(GroupedGemm::WorkspaceSize(d.group[set])));
        auto g = std::make_unique<GroupedGemm>();
        GEMM_RETURN_IF_ERROR(g->Initialize(d.group[set], ws, c.tile));
        m->kernel = g->kernel_name();
        m->ours_grouped.push_back(std::move(g));
      }
      break;
    }
    case CandidateFamily::kCublasGemmEx:
    case CandidateFamily::kCublasStridedBatched:
    case CandidateFamily::kCublasLt: {
      const CublasMethod method = c.family == CandidateFamily::kCublasGemmEx ? CublasMethod::kGemmEx
                                  : c.family == CandidateFamily::kCublasLt
                                      ? CublasMethod::kLt
                                      : CublasMethod::kStridedBatched;
      GEMM_RETURN_IF_ERROR(CublasGemm::CanImplement(method, d.single[0]));
      for (int set = 0; set < d.sets; ++set) {
        auto g = std::make_unique<CublasGemm>();
        const bool configured =
            method == CublasMethod::kLt && c != CandidateId::CublasLtHeuristic();
        GEMM_RETURN_IF_ERROR(g->Initialize(ctx_, method, d.single[set], configured ? &c.lt : nullptr));
        m->kernel = g->kernel_name();
        m->cublas.push_back(std::move(g));
      }
      break;
    }
    case CandidateFamily::kCublasGrouped: {
      GEMM_RETURN_IF_ERROR(CublasGroupedGemm::CanImplement(d.group[0]));
      for (int set = 0; set < d.sets; ++set) {
        void* ws = nullptr;
        GEMM_ASSIGN_OR_RETURN(ws, m->Alloc(CublasGroupedGemm::WorkspaceSize(d.rows.size())));
        auto g = std::make_unique<CublasGroupedGemm>();
        GEMM_RETURN_IF_ERROR(g->Initialize(ctx_, d.group[set], ws));
        m->kernel = g->kernel_name();
        m->cublas_grouped.push_back(std::move(g));
      }
      break;
    }
  }
  // One run on set 0 into a poisoned D, checked against cuBLAS.
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx_->stream());
  const size_t es = DataTypeSize(d.shape.out_dtype);
  std::vector<std::pair<void*, int64_t>> outputs;  // D of set 0, elements
  if (!d.shape.grouped) {
    outputs.push_back({const_cast<void*>(d.single[0].d.ptr),
                       DimsOf(d.shape, d.shape.m).d_elems * d.shape.batch});
  } else {
    for (size_t i = 0; i < d.rows.size(); ++i) {
      outputs.push_back({const_cast<void*>(d.group[0].problems[i].d.ptr),
                         DimsOf(d.shape, d.rows[i]).d_elems});
    }
  }
  for (const auto& [ptr, elems] : outputs) {
    GEMM_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(ptr, 0xFF, elems * es, stream), "poisoning D"));
  }
  GEMM_RETURN_IF_ERROR(Launch(*m, 0));
  GEMM_RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(stream), m->kernel.c_str()));
  for (size_t i = 0; i < outputs.size(); ++i) {
    absl::StatusOr<double> diff =
        RelDiff(d.shape.out_dtype, outputs[i].first, d.reference[i], outputs[i].second);
    if (!diff.ok()) return diff.status();
    if (!(*diff <= Tolerance(d.shape))) {
      return absl::InternalError(absl::StrCat(m->kernel, " disagrees with cuBLAS: relative difference ",
                                              *diff, " (member ", i, ")"));
    }
  }
  members_[CandidateToString(c)] = std::move(m);
  return absl::OkStatus();
}

absl::StatusOr<double> PortfolioRunner::RunBurst(const CandidateId& c, int launches) {
  return TimeBackToBack(c, launches);
}

absl::StatusOr<double> PortfolioRunner::RunSustained(const CandidateId& c, double seconds) {
  // Launch count from a short burst, then that many back to back.
  double estimate_us = 0;
  GEMM_ASSIGN_OR_RETURN(estimate_us, RunBurst(c, 8));
  const int64_t launches =
      std::max<int64_t>(1, static_cast<int64_t>(seconds * 1e6 / std::max(estimate_us, 0.1)));
  return TimeBackToBack(c, launches);
}

absl::StatusOr<double> PortfolioRunner::TimeBackToBack(const CandidateId& c, int64_t launches) {
  // Every launch between two events: the host only enqueues, so the GPU
  // never idles between them.
  Member* m = nullptr;
  GEMM_ASSIGN_OR_RETURN(m, Find(c));
  Data& d = *data_;
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx_->stream());
  GEMM_RETURN_IF_ERROR(Cuda(cudaEventRecord(d.start, stream), "cudaEventRecord"));
  for (int64_t i = 0; i < launches; ++i) {
    GEMM_RETURN_IF_ERROR(Launch(*m, d.next_set));
    d.next_set = (d.next_set + 1) % d.sets;
  }
  GEMM_RETURN_IF_ERROR(Cuda(cudaEventRecord(d.stop, stream), "cudaEventRecord"));
  GEMM_RETURN_IF_ERROR(Cuda(cudaEventSynchronize(d.stop), m->kernel.c_str()));
  float ms = 0;
  GEMM_RETURN_IF_ERROR(Cuda(cudaEventElapsedTime(&ms, d.start, d.stop), "cudaEventElapsedTime"));
  return 1000.0 * ms / static_cast<double>(launches);
}

std::string PortfolioRunner::KernelName(const CandidateId& c) const {
  auto it = members_.find(CandidateToString(c));
  return it == members_.end() ? "" : it->second->kernel;
}

absl::StatusOr<gemm_kernels::tuning::TableKey> CurrentTableKey(const CublasContext& ctx) {
  int device = 0, driver = 0, runtime = 0;
  cudaDeviceProp prop;
  GEMM_RETURN_IF_ERROR(Cuda(cudaGetDevice(&device), "cudaGetDevice"));
  GEMM_RETURN_IF_ERROR(Cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties"));
  GEMM_RETURN_IF_ERROR(Cuda(cudaDriverGetVersion(&driver), "cudaDriverGetVersion"));
  GEMM_RETURN_IF_ERROR(Cuda(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion"));
  gemm_kernels::tuning::TableKey key;
  key.gpu = prop.name;
  key.driver = std::to_string(driver);
  key.cuda_runtime = std::to_string(runtime);
  key.cublas = std::to_string(ctx.version());
  key.build = gemm::kVersion;
  return key;
}

}  // namespace gemm_bench
