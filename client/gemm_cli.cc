// gemm_cli: talks to a gemm.v1 server.
//
//   gemm_cli info                       server, devices, peak rates, limits
//   gemm_cli run   --m=512 --dtype=fp16  one request on random data, checked
//                                        against a float64 reference
//   gemm_cli bench --concurrency=16      load generator: requests/s, GFLOP/s,
//                                        MB/s, latency percentiles
//
// Exit status: 0 on success, 1 when a result is wrong, 2 on a usage error or
// a size over a limit (refused before anything is allocated or sent), 3 when
// a call to the server failed.
#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <thread>
#include <utility>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/gemm_client.h"
#include "client/cli/shared_requests.h"
#include "client/cli/size_check.h"
#include "client/matrix_view.h"
#include "common/dtype.h"
#include "common/reference_gemm.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, target, "localhost:50051",
          "Server: host:port; replicas: dns:///name:port (every address the name resolves "
          "to) or ipv4:host:port,host:port,... Each request's calls stay on one replica");
ABSL_FLAG(std::string, replica_policy, "least_outstanding",
          "How requests pick a replica: least_outstanding (fewest in flight) or round_robin");
ABSL_FLAG(bool, tls, false, "Speak TLS, verifying the server against the system's roots");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA bundle to verify the server with (implies --tls)");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate, for servers that require mTLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, token, "",
          "Bearer token sent with every call (visible in the process list: prefer --token_file)");
ABSL_FLAG(std::string, token_file, "", "File holding the bearer token (surrounding spaces dropped)");
ABSL_FLAG(int64_t, deadline_ms, 60000, "Deadline of each call, in ms");
ABSL_FLAG(int, max_attempts, 5, "Attempts per call on UNAVAILABLE/RESOURCE_EXHAUSTED");
ABSL_FLAG(uint64_t, m, 256, "Rows of op(A) and of the result");
ABSL_FLAG(uint64_t, n, 256, "Columns of op(B) and of the result");
ABSL_FLAG(uint64_t, k, 256, "Inner dimension");
ABSL_FLAG(std::string, dtype, "fp32", "Input type: fp32, fp16, bf16, fp8_e4m3 or fp8_e5m2");
ABSL_FLAG(std::string, b_dtype, "",
          "Type of B when it differs from --dtype (FP8 formats may mix: --dtype=fp8_e4m3 "
          "--b_dtype=fp8_e5m2); empty = --dtype");
ABSL_FLAG(std::string, scale, "tensor",
          "FP8 inputs: scale mode of both operands, tensor, channel or block (1 x 128 blocks of "
          "A, 128 x 128 of B; any K, the last block along K partial); the CLI quantizes its "
          "random data with these scales");
ABSL_FLAG(std::string, out_dtype, "",
          "Output type (fp32, fp16, bf16); empty = the input type, fp32 for FP8 inputs");
ABSL_FLAG(bool, transpose_a, false, "Use A^T (A stored K x M)");
ABSL_FLAG(bool, transpose_b, false, "Use B^T (B stored N x K)");
ABSL_FLAG(std::string, layout, "row", "Layout of A, B and C: row or col");
ABSL_FLAG(std::string, out_layout, "row", "Layout of the result: row or col");
ABSL_FLAG(double, alpha, 1.0, "alpha");
ABSL_FLAG(double, beta, 0.0, "beta; non-zero sends a random C");
ABSL_FLAG(bool, allow_tf32, false, "Let fp32 inputs run on TF32 tensor cores");
ABSL_FLAG(int, batch, 1, "Problems per request");
ABSL_FLAG(bool, deterministic, false,
          "run/bench: ask for batch-invariant results (GemmRequest.deterministic); run prints "
          "what fixed the bits");
ABSL_FLAG(uint64_t, seed, 42, "Seed of the random inputs");
ABSL_FLAG(int, concurrency, 8, "bench: requests in flight");
ABSL_FLAG(double, duration_s, 10.0, "bench: how long to run, unless --requests is set");
ABSL_FLAG(int64_t, requests, 0, "bench: stop after this many requests (0 = use --duration_s)");
ABSL_FLAG(bool, resident_b, false,
          "bench: register each problem's B on the server once (RegisterMatrix) and send only "
          "its handle");
ABSL_FLAG(int64_t, verify_every, 0, "bench: check every N-th response against the reference (0 = never)");
ABSL_FLAG(int64_t, max_consecutive_failures, 20,
          "bench: stop early after this many failed calls in a row (0 = never stop early)");
ABSL_FLAG(bool, stream, false,
          "bench: send the requests over one GemmStream (--concurrency in flight) instead of "
          "unary calls");
ABSL_FLAG(bool, shared_memory, false,
          "run, bench: operands and results in same-host shared memory instead of gRPC "
          "messages (the server on this host, reached over loopback or a Unix socket); the "
          "bytes go in messages when the server refuses the region");
ABSL_FLAG(bool, json, false, "bench: print one JSON document with the figures instead of text");
ABSL_FLAG(std::string, sizes, "",
          "bench: a sweep, comma-separated square sizes (--sizes=256,512,1024 runs M=N=K=256, "
          "then 512, ...); empty = one run of --m/--n/--k");
ABSL_FLAG(uint64_t, max_client_bytes, 0,
          "Most bytes of operands and references the CLI may allocate (0 = half of this "
          "machine's memory); larger shapes are refused before anything is allocated");

namespace gemm {
namespace {

constexpr int kExitMismatch = 1;
// Usage errors and sizes over a limit: nothing was sent.
constexpr int kExitError = 2;
// A call to the server failed.
constexpr int kExitRpc = 3;

// Library option names in errors read as the CLI flags that set them.
absl::Status FlagNames(const absl::Status& s) {
  if (s.ok()) return s;
  std::string m(s.message());
  m = absl::StrReplaceAll(m, {{"retry.max_attempts", "--max_attempts"},
                              {"default_timeout", "--deadline_ms"},
                              {"tls_root_certs_pem", "--tls_ca"},
                              {"tls_cert_chain_pem", "--tls_cert"},
                              {"tls_private_key_pem", "--tls_key"},
                              {"bearer_token", "--token"},
                              {"replica_policy", "--replica_policy"}});
  return absl::Status(s.code(), m);
}

absl::StatusOr<DType> ParseDType(const std::string& s) {
  if (s == "fp32") return DType::kFp32;
  if (s == "fp16") return DType::kFp16;
  if (s == "bf16") return DType::kBf16;
  if (s == "fp8_e4m3") return DType::kFp8E4m3;
  if (s == "fp8_e5m2") return DType::kFp8E5m2;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", s, "\" (fp32, fp16, bf16, fp8_e4m3, fp8_e5m2)"));
}

absl::StatusOr<ScaleMode> ParseScale(const std::string& s) {
  if (s == "tensor") return ScaleMode::kTensor;
  if (s == "channel") return ScaleMode::kChannel;
  if (s == "block") return ScaleMode::kBlock;
  return absl::InvalidArgumentError(
      absl::StrCat("--scale: unknown scale mode \"", s, "\" (tensor, channel, block)"));
}

// The input types of the flags: A's, B's (--b_dtype, else A's) and the
// output's (--out_dtype, else the input type; fp32 for FP8 inputs).
struct FlagTypes {
  DType a, b, out;
};
absl::StatusOr<FlagTypes> ParseTypes() {
  FlagTypes t;
  GEMM_ASSIGN_OR_RETURN(t.a, ParseDType(absl::GetFlag(FLAGS_dtype)));
  t.b = t.a;
  if (!absl::GetFlag(FLAGS_b_dtype).empty()) {
    GEMM_ASSIGN_OR_RETURN(t.b, ParseDType(absl::GetFlag(FLAGS_b_dtype)));
  }
  if (IsFp8(t.a) != IsFp8(t.b) || (!IsFp8(t.a) && t.a != t.b))
    return absl::InvalidArgumentError(
        "--b_dtype: may differ from --dtype only between FP8 formats");
  t.out = IsFp8(t.a) ? DType::kFp32 : t.a;
  if (!absl::GetFlag(FLAGS_out_dtype).empty()) {
    GEMM_ASSIGN_OR_RETURN(t.out, ParseDType(absl::GetFlag(FLAGS_out_dtype)));
  }
  if (IsFp8(t.out))
    return absl::InvalidArgumentError("--out_dtype: FP8 outputs are not offered");
  return t;
}

absl::StatusOr<Layout> ParseLayout(const std::string& s) {
  if (s == "row") return Layout::kRowMajor;
  if (s == "col") return Layout::kColMajor;
  return absl::InvalidArgumentError(absl::StrCat("unknown layout \"", s, "\" (row, col)"));
}

std::string Name(DType t) { return std::string(DTypeName(t)); }
std::string Name(v1::DataType t) {
  absl::StatusOr<DType> d = FromProto(t);
  return d.ok() ? Name(*d) : "unspecified";
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// TLS and bearer-token settings from the flags.
absl::Status SetSecurityOptions(ClientOptions* options) {
  options->tls = absl::GetFlag(FLAGS_tls) || !absl::GetFlag(FLAGS_tls_ca).empty();
  if (const std::string ca = absl::GetFlag(FLAGS_tls_ca); !ca.empty()) {
    GEMM_ASSIGN_OR_RETURN(options->tls_root_certs_pem, ReadFile(ca));
  }
  if (const std::string cert = absl::GetFlag(FLAGS_tls_cert); !cert.empty()) {
    GEMM_ASSIGN_OR_RETURN(options->tls_cert_chain_pem, ReadFile(cert));
  }
  if (const std::string key = absl::GetFlag(FLAGS_tls_key); !key.empty()) {
    GEMM_ASSIGN_OR_RETURN(options->tls_private_key_pem, ReadFile(key));
  }
  options->bearer_token = absl::GetFlag(FLAGS_token);
  if (const std::string file = absl::GetFlag(FLAGS_token_file); !file.empty()) {
    GEMM_ASSIGN_OR_RETURN(std::string token, ReadFile(file));
    options->bearer_token = std::string(absl::StripAsciiWhitespace(token));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Client>> MakeClient() {
  if (absl::GetFlag(FLAGS_deadline_ms) <= 0) {
    return absl::InvalidArgumentError("--deadline_ms must be positive");
  }
  if (absl::GetFlag(FLAGS_max_attempts) < 1) {
    return absl::InvalidArgumentError("--max_attempts must be >= 1");
  }
  ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  GEMM_RETURN_IF_ERROR(SetSecurityOptions(&options));
  options.default_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_deadline_ms));
  options.retry.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  const std::string policy = absl::GetFlag(FLAGS_replica_policy);
  if (policy == "least_outstanding") {
    options.replica_policy = ClientOptions::ReplicaPolicy::kLeastOutstanding;
  } else if (policy == "round_robin") {
    options.replica_policy = ClientOptions::ReplicaPolicy::kRoundRobin;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--replica_policy must be least_outstanding or round_robin, got \"", policy, "\""));
  }
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  if (!client.ok()) return FlagNames(client.status());
  return client;
}

// The shape of the flags, with --m/--n/--k replaced by `m`, `n`, `k`.
absl::StatusOr<cli::Shape> FlagShape(uint64_t m, uint64_t n, uint64_t k, bool references) {
  const bool sweep = !absl::GetFlag(FLAGS_sizes).empty();
  GEMM_ASSIGN_OR_RETURN(const FlagTypes types, ParseTypes());
  const DType in = types.a, out = types.out;
  cli::Shape s;
  s.m = m;
  s.n = n;
  s.k = k;
  s.batch = absl::GetFlag(FLAGS_batch);
  s.in_bytes = SizeOf(in);
  s.out_bytes = SizeOf(out);
  s.with_c = absl::GetFlag(FLAGS_beta) != 0.0;
  s.references = references;
  if (sweep) s.m_flag = s.n_flag = s.k_flag = "--sizes";
  return s;
}

// The limits to check shapes against: the server's when GetServerInfo
// answers, else the local ones (and a note on stderr saying so).
struct CheckLimits {
  v1::Limits limits;
  bool from_server = false;
};
CheckLimits FetchLimits(Client* client) {
  CallOptions call;
  call.timeout = std::min(absl::Milliseconds(absl::GetFlag(FLAGS_deadline_ms)), absl::Seconds(10));
  absl::StatusOr<v1::ServerInfo> info = client->GetServerInfo(call);
  if (info.ok()) return {info->limits(), true};
  absl::FPrintF(stderr,
                "note: GetServerInfo failed (%s); sizes are checked against local limits only\n",
                info.status().ToString());
  return {cli::LocalLimits(), false};
}

absl::Status CheckSize(const cli::Shape& s, const CheckLimits& l) {
  uint64_t budget = absl::GetFlag(FLAGS_max_client_bytes);
  if (budget == 0) budget = cli::DefaultClientBudget();
  return cli::CheckShape(s, l.limits, budget, l.from_server);
}

// ---------------------------------------------------------------------------
// Inputs

// One request of --batch problems of the flags' shape, on uniform random data
// in [-1, 1).
absl::StatusOr<v1::GemmRequest> BuildRequest(uint64_t m, uint64_t n, uint64_t k) {
  GEMM_ASSIGN_OR_RETURN(const FlagTypes types, ParseTypes());
  const DType in = types.a, out = types.out;
  GEMM_ASSIGN_OR_RETURN(const ScaleMode scale, ParseScale(absl::GetFlag(FLAGS_scale)));
  GEMM_ASSIGN_OR_RETURN(const Layout layout, ParseLayout(absl::GetFlag(FLAGS_layout)));
  ProblemOptions options;
  GEMM_ASSIGN_OR_RETURN(options.output_layout, ParseLayout(absl::GetFlag(FLAGS_out_layout)));
  options.transpose_a = absl::GetFlag(FLAGS_transpose_a);
  options.transpose_b = absl::GetFlag(FLAGS_transpose_b);
  options.output_dtype = out;
  options.alpha = absl::GetFlag(FLAGS_alpha);
  options.beta = absl::GetFlag(FLAGS_beta);
  options.allow_tf32 = absl::GetFlag(FLAGS_allow_tf32);
  if (absl::GetFlag(FLAGS_batch) < 1) return absl::InvalidArgumentError("--batch must be >= 1");

  GemmShape shape;
  shape.m = m;
  shape.n = n;
  shape.k = k;
  shape.transpose_a = options.transpose_a;
  shape.transpose_b = options.transpose_b;

  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  // Random values stored as `t`; the storage outlives the views below only
  // until AddProblem has copied it into the request.
  struct Storage {
    std::vector<float> f32;
    std::vector<uint16_t> f16;
    QuantizedMatrix fp8;
  };
  auto random_matrix = [&](Storage* s, DType t, uint64_t rows, uint64_t cols) {
    s->f32.resize(rows * cols);
    for (float& x : s->f32) x = dist(rng);
    if (t == DType::kFp32) return MatrixView(s->f32.data(), rows, cols, layout);
    s->f16.resize(s->f32.size());
    FromFloat(t, s->f32.data(), s->f16.data(), s->f32.size());
    return MatrixView(s->f16.data(), rows, cols, t, layout);
  };
  // FP8 operands: random floats quantized on the client with --scale scales
  // laid out for their slot; the reference multiplies what they dequantize to.
  auto random_fp8 = [&](Storage* s, DType format, OperandRole role, bool transposed,
                        uint64_t rows, uint64_t cols) -> absl::StatusOr<MatrixView> {
    const MatrixView source = random_matrix(s, DType::kFp32, rows, cols);
    GEMM_ASSIGN_OR_RETURN(s->fp8,
                          QuantizeToFp8(source, Fp8Quantization{format, scale, role, transposed}));
    return s->fp8.view();
  };

  v1::GemmRequest request;
  if (absl::GetFlag(FLAGS_deterministic)) request.set_deterministic(true);
  request.set_request_id("gemm_cli");
  for (int i = 0; i < absl::GetFlag(FLAGS_batch); ++i) {
    Storage a, b, c;
    std::optional<MatrixView> va, vb;
    if (IsFp8(in)) {
      GEMM_ASSIGN_OR_RETURN(va, random_fp8(&a, in, OperandRole::kA, shape.transpose_a,
                                           shape.a_rows(), shape.a_cols()));
      GEMM_ASSIGN_OR_RETURN(vb, random_fp8(&b, types.b, OperandRole::kB, shape.transpose_b,
                                           shape.b_rows(), shape.b_cols()));
    } else {
      va = random_matrix(&a, in, shape.a_rows(), shape.a_cols());
      vb = random_matrix(&b, in, shape.b_rows(), shape.b_cols());
    }
    if (options.beta != 0.0) options.c = random_matrix(&c, out, shape.m, shape.n);
    GEMM_RETURN_IF_ERROR(AddProblem(&request, *va, *vb, options));
  }
  return request;
}

// The float64 reference of every problem in `request`, row-major.
absl::StatusOr<std::vector<std::vector<double>>> References(const v1::GemmRequest& request) {
  std::vector<std::vector<double>> refs;
  for (const v1::GemmProblem& p : request.problems()) {
    GEMM_ASSIGN_OR_RETURN(const GemmProblemRef ref, ViewProblem(p));
    refs.push_back(ReferenceGemm(ref));
  }
  return refs;
}

struct Check {
  double error = 0.0;
  double tolerance = 0.0;
  bool ok() const { return error <= tolerance; }
};

absl::StatusOr<Check> CheckResult(const v1::GemmProblem& problem, const v1::GemmResult& result,
                                  const std::vector<double>& reference) {
  GEMM_ASSIGN_OR_RETURN(const GemmProblemRef ref, ViewProblem(problem));
  GEMM_ASSIGN_OR_RETURN(const MatrixRef d, ViewResult(result));
  if (d.rows != ref.shape.m || d.cols != ref.shape.n) {
    return absl::DataLossError(absl::StrCat("result is ", d.rows, "x", d.cols, ", expected ",
                                            ref.shape.m, "x", ref.shape.n));
  }
  if (d.dtype != ref.shape.output_dtype) {
    return absl::DataLossError(absl::StrCat("result is ", Name(d.dtype), ", expected ",
                                            Name(ref.shape.output_dtype)));
  }
  Check c;
  c.error = RelativeError(ReadMatrix(d), reference);
  c.tolerance = Tolerance(ref.shape.input_dtype, ref.shape.output_dtype, ref.shape.allow_tf32);
  return c;
}

double Ms(uint64_t ns) { return static_cast<double>(ns) / 1e6; }

double RequestFlops(const v1::GemmRequest& request) {
  double flops = 0.0;
  for (const v1::GemmProblem& p : request.problems()) {
    flops += 2.0 * static_cast<double>(p.m()) * static_cast<double>(p.n()) *
             static_cast<double>(p.k());
  }
  return flops;
}

// ---------------------------------------------------------------------------
// info

int Info() {
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient();
  if (!client.ok()) return absl::FPrintF(stderr, "error: %s\n", client.status().ToString()), kExitError;
  absl::StatusOr<v1::ServerInfo> info = (*client)->GetServerInfo();
  if (!info.ok()) return absl::FPrintF(stderr, "error: %s\n", info.status().ToString()), kExitRpc;

  absl::PrintF("server        %s\n", absl::GetFlag(FLAGS_target));
  absl::PrintF("version       %s\n", info->version());
  absl::PrintF("instance      %s\n", info->instance_id().empty() ? "(not reported)" : info->instance_id());
  absl::PrintF("backend       %s\n", info->backend());
  std::vector<std::string> dtypes;
  for (int t : info->input_dtypes()) dtypes.push_back(Name(static_cast<v1::DataType>(t)));
  absl::PrintF("input dtypes  %s\n", absl::StrJoin(dtypes, ", "));
  absl::PrintF("kernels       %s\n", info->kernels().empty() ? "-" : absl::StrJoin(info->kernels(), ", "));
  absl::PrintF("devices\n");
  for (int i = 0; i < info->devices_size(); ++i) {
    const v1::DeviceInfo& d = info->devices(i);
    absl::PrintF("  [%d] %s", i, d.name());
    if (!d.compute_capability().empty()) absl::PrintF("  sm_%s", d.compute_capability());
    if (d.multiprocessors() > 0) absl::PrintF("  %u SMs", d.multiprocessors());
    if (d.memory_bytes() > 0) absl::PrintF("  %.1f GiB", d.memory_bytes() / double(1ull << 30));
    if (d.threads() > 0) absl::PrintF("  %u threads", d.threads());
    absl::PrintF("\n");
  }
  absl::PrintF("peak rates\n");
  for (const v1::PeakRate& r : info->peak_rates()) {
    const bool memory = r.kind() == "memory";
    absl::PrintF("  %-7s %10.1f %-8s %s\n", r.kind(), r.per_second() / 1e9,
                 memory ? "GB/s" : "GFLOP/s", r.method().empty() ? "" : "(" + r.method() + ")");
  }
  const v1::Limits& l = info->limits();
  absl::PrintF("limits\n");
  absl::PrintF("  max message bytes        %u (%.1f MiB)\n", l.max_message_bytes(),
               l.max_message_bytes() / double(1 << 20));
  absl::PrintF("  max dimension            %u\n", l.max_dimension());
  absl::PrintF("  max problem bytes        %u\n", l.max_problem_bytes());
  absl::PrintF("  max problems per request %u\n", l.max_problems_per_request());
  absl::PrintF("  max queued requests      %u\n", l.max_queued_requests());
  absl::PrintF("  max queued bytes         %u\n", l.max_queued_bytes());
  return 0;
}

// ---------------------------------------------------------------------------
// run

// With --shared_memory, `request` placed in a new shared-memory region with
// `slots` copies (one per request in flight); null without the flag, or
// after saying why on stderr when the region could not be set up (the
// bytes then go in messages).
std::unique_ptr<cli::SharedRequests> SharedOrNull(Client* client, const v1::GemmRequest& request,
                                                  int slots) {
  if (!absl::GetFlag(FLAGS_shared_memory)) return nullptr;
  absl::StatusOr<std::unique_ptr<cli::SharedRequests>> shared =
      cli::SharedRequests::Create(client, request, slots);
  if (!shared.ok()) {
    absl::FPrintF(stderr, "note: shared memory not used (%s); sending the bytes in messages\n",
                  shared.status().ToString());
    return nullptr;
  }
  return std::move(*shared);
}

int Run() {
  const uint64_t m = absl::GetFlag(FLAGS_m), n = absl::GetFlag(FLAGS_n), k = absl::GetFlag(FLAGS_k);
  absl::StatusOr<cli::Shape> shape = FlagShape(m, n, k, /*references=*/true);
  if (!shape.ok()) return absl::FPrintF(stderr, "error: %s\n", shape.status().ToString()), kExitError;
  // Checks that need no server first, so that a zero or absurd size fails at once.
  if (absl::Status s = CheckSize(*shape, {cli::LocalLimits(), false}); !s.ok()) {
    return absl::FPrintF(stderr, "error: %s\n", s.ToString()), kExitError;
  }
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient();
  if (!client.ok()) return absl::FPrintF(stderr, "error: %s\n", client.status().ToString()), kExitError;
  if (absl::Status s = CheckSize(*shape, FetchLimits(client->get())); !s.ok()) {
    return absl::FPrintF(stderr, "error: %s\n", s.ToString()), kExitError;
  }
  absl::StatusOr<v1::GemmRequest> request = BuildRequest(m, n, k);
  if (!request.ok()) return absl::FPrintF(stderr, "error: %s\n", request.status().ToString()), kExitError;

  const v1::GemmProblem& p0 = request->problems(0);
  absl::PrintF("problem   %dx%dx%d (MxNxK) %s -> %s, A %s%s, B %s%s, alpha %g beta %g%s, batch %d\n",
               p0.m(), p0.n(), p0.k(), Name(p0.input_dtype()), Name(p0.output_dtype()),
               absl::GetFlag(FLAGS_layout), p0.transpose_a() ? "^T" : "",
               absl::GetFlag(FLAGS_layout), p0.transpose_b() ? "^T" : "", p0.alpha(), p0.beta(),
               p0.allow_tf32() ? ", tf32 allowed" : "", request->problems_size());

  // Connect first so that the client time below is the call's alone.
  (*client)->channel()->WaitForConnected(
      absl::ToChronoTime(absl::Now() + absl::Milliseconds(absl::GetFlag(FLAGS_deadline_ms))));
  std::unique_ptr<cli::SharedRequests> shared = SharedOrNull(client->get(), *request, 1);
  if (shared != nullptr)
    absl::PrintF("transport shared memory, one region of %d bytes\n", shared->bytes());
  const absl::Time start = absl::Now();
  GemmResult response = (*client)->Gemm(shared != nullptr ? *shared->request(0) : *request);
  const absl::Duration wall = absl::Now() - start;
  if (!response.ok()) {
    absl::FPrintF(stderr, "error: %s\n", FlagNames(response.status()).ToString());
    return kExitRpc;
  }
  if (shared != nullptr) response = shared->WithResults(0, *response);
  if (!response.ok()) {
    absl::FPrintF(stderr, "error: %s\n", response.status().ToString());
    return kExitMismatch;
  }
  if (response->results_size() != request->problems_size()) {
    absl::FPrintF(stderr, "error: %d results for %d problems\n", response->results_size(),
                  request->problems_size());
    return kExitMismatch;
  }
  const v1::Timing& t = response->timing();
  const double flops = RequestFlops(*request);
  absl::PrintF("server    %s, backend %s, kernel %s\n", absl::GetFlag(FLAGS_target),
               response->backend(), response->kernel());
  if (response->has_reproducibility()) {
    const v1::Reproducibility& r = response->reproducibility();
    absl::PrintF("bits      fixed by %s on %s, build %s\n", r.backend(), r.device_model(),
                 r.build());
    for (int i = 0; i < r.problems_size(); ++i) {
      const v1::ProblemReproducibility& p = r.problems(i);
      absl::PrintF("          problem %d: %s tile %s, %u split(s): %s\n", i, p.kernel(),
                   p.tile().empty() ? "-" : p.tile(), p.splits(), p.reduction_order());
    }
  }
  if (response->results_size() > 0 && response->results(0).has_a_precision()) {
    const v1::GemmResult& r0 = response->results(0);
    auto precision = [](const v1::OperandPrecision& p) {
      return absl::StrCat(Name(p.dtype()), " ",
                          ScaleModeName(FromProto(p.scale_mode()).value_or(ScaleMode::kNone)),
                          " scales", p.quantized_by_server() ? " (quantized by the server)" : "");
    };
    absl::PrintF("precision A %s, B %s, accumulated in fp32\n", precision(r0.a_precision()),
                 precision(r0.b_precision()));
  }
  absl::PrintF("time      client %.3f ms | server %.3f ms = queue %.3f + transfer %.3f + compute %.3f (+ other)\n",
               absl::ToDoubleMilliseconds(wall), Ms(t.total_ns()), Ms(t.queue_ns()),
               Ms(t.transfer_ns()), Ms(t.compute_ns()));
  absl::PrintF("rate      %.2f GFLOP/s over compute, %.2f GFLOP/s over client time\n",
               t.compute_ns() > 0 ? flops / t.compute_ns() : 0.0,
               flops / absl::ToDoubleNanoseconds(wall));

  absl::StatusOr<std::vector<std::vector<double>>> refs = References(*request);
  if (!refs.ok()) return absl::FPrintF(stderr, "error: %s\n", refs.status().ToString()), kExitError;
  bool all_ok = true;
  for (int i = 0; i < request->problems_size(); ++i) {
    absl::StatusOr<Check> check = CheckResult(request->problems(i), response->results(i), (*refs)[i]);
    if (!check.ok()) {
      absl::PrintF("check [%d] FAILED: %s\n", i, check.status().ToString());
      all_ok = false;
      continue;
    }
    absl::PrintF("check [%d] relative error %.3g, tolerance %.1g: %s\n", i, check->error,
                 check->tolerance, check->ok() ? "OK" : "MISMATCH");
    all_ok = all_ok && check->ok();
  }
  return all_ok ? 0 : kExitMismatch;
}

// ---------------------------------------------------------------------------
// bench

// `request` with each problem's B registered on the server and named by
// handle; the handles are appended to `residents`.
absl::StatusOr<v1::GemmRequest> WithResidentB(Client* client, const v1::GemmRequest& request,
                                              std::vector<ResidentHandle>* residents) {
  v1::GemmRequest sent = request;
  for (v1::GemmProblem& p : *sent.mutable_problems()) {
    GEMM_ASSIGN_OR_RETURN(const GemmProblemRef ref, ViewProblem(p));
    const MatrixRef& b = ref.b;
    // An FP8 B is registered as its codes; its scales stay in the problem.
    const MatrixView view =
        b.dtype == DType::kFp32
            ? MatrixView(static_cast<const float*>(b.data), b.rows, b.cols, b.layout)
        : IsFp8(b.dtype)
            ? MatrixView(static_cast<const uint8_t*>(b.data), b.rows, b.cols, b.dtype,
                         Fp8Scales{}, b.layout)
            : MatrixView(static_cast<const uint16_t*>(b.data), b.rows, b.cols, b.dtype, b.layout);
    GEMM_ASSIGN_OR_RETURN(ResidentHandle handle, client->RegisterMatrix(view, "gemm_cli bench"));
    residents->push_back(handle);
    p.mutable_b()->set_handle(handle.handle);
  }
  return sent;
}

// Escapes `s` for a JSON string.
std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// A finite number for JSON (NaN and infinities have no JSON spelling).
std::string JsonNumber(double x) {
  if (!std::isfinite(x)) return "null";
  return absl::StrFormat("%.6g", x);
}

// How bench sends its requests.
enum class Transport {
  kAsync,    // GemmAsync: one message per request
  kChunked,  // blocking Gemm on --concurrency threads: large operands in chunks, as `run`
  kStream,   // one GemmStream (GemmStreamSession), --concurrency requests in flight
};

const char* TransportName(Transport t) {
  switch (t) {
    case Transport::kAsync: return "unary";
    case Transport::kChunked: return "unary-chunked";
    case Transport::kStream: return "stream";
  }
  return "?";
}

// What one bench run measured.
struct Figures {
  std::string workload;
  uint64_t m = 0, n = 0, k = 0;
  int batch = 0;
  std::string transport;
  int64_t requests = 0, ok = 0;
  // (code, message) -> count.
  std::map<std::pair<absl::StatusCode, std::string>, int64_t> failures;
  std::string stopped_early;  // why, when it stopped before its duration/count
  double seconds = 0, requests_per_s = 0, gflops = 0, mb_per_s = 0, request_mb_per_s = 0,
         response_mb_per_s = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0;
  int64_t verified = 0, mismatches = 0;
};

class Bench {
 public:
  // `checked` is `request` with every operand's bytes (they differ when B is
  // resident); checks read its shapes and types. With `shared`, slot i sends
  // shared->request(i) instead of `request`.
  Bench(Client* client, std::shared_ptr<const v1::GemmRequest> request,
        std::shared_ptr<const v1::GemmRequest> checked,
        std::vector<std::vector<double>> references, Transport transport,
        const cli::SharedRequests* shared = nullptr)
      : client_(client), request_(std::move(request)), checked_(std::move(checked)),
        references_(std::move(references)), transport_(transport), shared_(shared),
        request_bytes_(shared_ != nullptr ? shared_->request(0)->ByteSizeLong()
                                          : request_->ByteSizeLong()),
        flops_(RequestFlops(*request_)) {
    const int slots = absl::GetFlag(FLAGS_concurrency);
    for (int i = 0; i < slots; ++i)
      slot_requests_.push_back(shared_ != nullptr ? shared_->request(i) : request_);
  }

  Figures Main() {
    const int concurrency = absl::GetFlag(FLAGS_concurrency);
    limit_ = absl::GetFlag(FLAGS_requests);
    verify_every_ = absl::GetFlag(FLAGS_verify_every);
    max_consecutive_ = absl::GetFlag(FLAGS_max_consecutive_failures);
    start_ = absl::Now();
    end_ = start_ + absl::Seconds(absl::GetFlag(FLAGS_duration_s));
    {
      absl::MutexLock lock(&mu_);
      last_ = start_;
    }
    slots_ = concurrency;
    std::vector<std::thread> threads;
    if (transport_ == Transport::kChunked) {
      for (int i = 0; i < concurrency; ++i) threads.emplace_back([this, i] { BlockingSlot(i); });
    } else {
      if (transport_ == Transport::kStream) {
        CallOptions stream_options;
        // The stream's deadline bounds the whole run: its duration, or with
        // --requests one --deadline_ms per round of --concurrency requests.
        const absl::Duration per_call = absl::Milliseconds(absl::GetFlag(FLAGS_deadline_ms));
        stream_options.deadline =
            limit_ > 0 ? start_ + per_call * (limit_ / concurrency + 1) : end_ + per_call;
        stream_ = client_->OpenStream(stream_options);
        // The session fills in unique ids; a fixed one would collide.
        for (std::shared_ptr<const v1::GemmRequest>& r : slot_requests_) {
          auto copy = std::make_shared<v1::GemmRequest>(*r);
          copy->clear_request_id();
          r = std::move(copy);
        }
      }
      for (int i = 0; i < concurrency; ++i) Issue(i);
    }
    while (!all_done_.WaitForNotificationWithTimeout(absl::Milliseconds(500))) Progress();
    for (std::thread& t : threads) t.join();
    if (stream_ != nullptr) {
      stream_->CloseSend();
      stream_->Finish().IgnoreError();  // failures were counted per request
      stream_.reset();
    }
    Progress();
    absl::FPrintF(stderr, "\n");
    return Report();
  }

 private:
  // Whether a slot should send another request.
  bool More() {
    if (stop_.load()) return false;
    return limit_ > 0 ? issued_.fetch_add(1) < limit_ : absl::Now() < end_;
  }

  void Retire() {
    if (--slots_ == 0) all_done_.Notify();
  }

  // Starts the next request of `slot`, or retires the slot. A slot sends its
  // next request only once its previous one is recorded (its shared-memory
  // outputs read).
  void Issue(int slot) {
    if (!More()) return Retire();
    const absl::Time sent = absl::Now();
    auto done = [this, sent, slot](GemmResult result) {
      Record(absl::Now() - sent, result, slot);
      Issue(slot);
    };
    if (transport_ == Transport::kAsync) {
      client_->GemmAsync(slot_requests_[slot], {}, std::move(done));
      return;
    }
    absl::Status s = stream_->Send(*slot_requests_[slot], std::move(done));
    if (!s.ok()) {
      // The stream has ended (its failure was counted per request) or
      // refused the request: this slot is done.
      Record(absl::Now() - sent, GemmResult(s), slot);
      Retire();
    }
  }

  // One --concurrency slot of the chunked transport.
  void BlockingSlot(int slot) {
    while (More()) {
      const absl::Time sent = absl::Now();
      GemmResult result = client_->Gemm(*slot_requests_[slot]);
      Record(absl::Now() - sent, result, slot);
    }
    Retire();
  }

  void Record(absl::Duration latency, const GemmResult& result, int slot) {
    int64_t n;
    {
      absl::MutexLock lock(&mu_);
      n = ++completed_;
      last_ = absl::Now();
      if (!result.ok()) {
        ++errors_[{result.status().code(), std::string(result.status().message())}];
        ++consecutive_failures_;
        if (max_consecutive_ > 0 && consecutive_failures_ >= max_consecutive_ && !stop_.load()) {
          stopped_early_ = absl::StrCat(consecutive_failures_,
                                        " consecutive failures (--max_consecutive_failures=",
                                        max_consecutive_, ")");
          stop_ = true;
        }
        return;
      }
      consecutive_failures_ = 0;
      latencies_ms_.push_back(absl::ToDoubleMilliseconds(latency));
      response_bytes_ += result->ByteSizeLong();
    }
    if (verify_every_ > 0 && n % verify_every_ == 0) Verify(*result, slot);
  }

  void Verify(const v1::GemmResponse& received, int slot) {
    // Results written into shared memory are read from there; others are
    // checked where they are, without a copy.
    GemmResult read;
    if (shared_ != nullptr) read = shared_->WithResults(slot, received);
    const v1::GemmResponse& response = shared_ != nullptr && read.ok() ? *read : received;
    bool ok = (shared_ == nullptr || read.ok()) &&
              response.results_size() == request_->problems_size();
    for (int i = 0; ok && i < response.results_size(); ++i) {
      absl::StatusOr<Check> c = CheckResult(checked_->problems(i), response.results(i), references_[i]);
      ok = c.ok() && c->ok();
    }
    absl::MutexLock lock(&mu_);
    ++verified_;
    if (!ok) ++mismatches_;
  }

  void Progress() {
    absl::MutexLock lock(&mu_);
    const double s = absl::ToDoubleSeconds(absl::Now() - start_);
    int64_t errors = 0;
    for (const auto& [code, count] : errors_) errors += count;
    absl::FPrintF(stderr, "\r[%6.1f s] %lld requests, %.1f req/s, %lld errors   ", s,
                  static_cast<long long>(completed_), s > 0 ? completed_ / s : 0.0,
                  static_cast<long long>(errors));
  }

  Figures Report() {
    absl::MutexLock lock(&mu_);
    Figures f;
    f.seconds = std::max(1e-9, absl::ToDoubleSeconds(last_ - start_));
    f.requests = completed_;
    f.ok = static_cast<int64_t>(latencies_ms_.size());
    f.failures = errors_;
    f.stopped_early = stopped_early_;
    std::sort(latencies_ms_.begin(), latencies_ms_.end());
    auto pct = [&](double q) {
      if (latencies_ms_.empty()) return 0.0;
      const size_t i = static_cast<size_t>(q * (latencies_ms_.size() - 1) + 0.5);
      return latencies_ms_[std::min(i, latencies_ms_.size() - 1)];
    };
    const double req_mb = static_cast<double>(request_bytes_) * f.ok / 1e6;
    const double resp_mb = static_cast<double>(response_bytes_) / 1e6;
    const v1::GemmProblem& p0 = request_->problems(0);
    f.m = p0.m();
    f.n = p0.n();
    f.k = p0.k();
    f.batch = request_->problems_size();
    f.workload = absl::StrFormat("%dx%dx%d %s -> %s, batch %d, concurrency %d", p0.m(), p0.n(),
                                 p0.k(), Name(p0.input_dtype()), Name(p0.output_dtype()),
                                 request_->problems_size(), absl::GetFlag(FLAGS_concurrency));
    f.transport =
        absl::StrCat(TransportName(transport_), shared_ != nullptr ? " + shared memory" : "");
    f.requests_per_s = f.ok / f.seconds;
    f.gflops = flops_ * f.ok / f.seconds / 1e9;
    f.request_mb_per_s = req_mb / f.seconds;
    f.response_mb_per_s = resp_mb / f.seconds;
    f.mb_per_s = f.request_mb_per_s + f.response_mb_per_s;
    f.p50 = pct(0.50);
    f.p90 = pct(0.90);
    f.p99 = pct(0.99);
    f.max = latencies_ms_.empty() ? 0.0 : latencies_ms_.back();
    f.verified = verified_;
    f.mismatches = mismatches_;
    return f;
  }

  Client* const client_;
  std::shared_ptr<const v1::GemmRequest> request_;
  const std::shared_ptr<const v1::GemmRequest> checked_;
  const std::vector<std::vector<double>> references_;
  const Transport transport_;
  const cli::SharedRequests* const shared_;
  std::vector<std::shared_ptr<const v1::GemmRequest>> slot_requests_;
  const size_t request_bytes_;
  const double flops_;
  std::unique_ptr<GemmStreamSession> stream_;
  int64_t limit_ = 0;
  int64_t verify_every_ = 0;
  int64_t max_consecutive_ = 0;
  absl::Time start_, end_;
  std::atomic<int64_t> issued_{0};
  std::atomic<int> slots_{0};
  std::atomic<bool> stop_{false};
  absl::Notification all_done_;

  absl::Mutex mu_;
  int64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t consecutive_failures_ ABSL_GUARDED_BY(mu_) = 0;
  std::string stopped_early_ ABSL_GUARDED_BY(mu_);
  absl::Time last_ ABSL_GUARDED_BY(mu_);
  std::vector<double> latencies_ms_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<absl::StatusCode, std::string>, int64_t> errors_ ABSL_GUARDED_BY(mu_);
  uint64_t response_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t verified_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t mismatches_ ABSL_GUARDED_BY(mu_) = 0;
};

void PrintText(const Figures& f, Client* client) {
  absl::PrintF("workload      %s\n", f.workload);
  absl::PrintF("transport     %s\n", f.transport);
  absl::PrintF("requests      %lld (ok %lld, errors %lld)\n", static_cast<long long>(f.requests),
               static_cast<long long>(f.ok), static_cast<long long>(f.requests - f.ok));
  // One line per (code, message): the code and count first, so that scripts
  // can match them, then the server's message.
  for (const auto& [key, count] : f.failures) {
    absl::PrintF("  %-22s %lld  %s\n", absl::StatusCodeToString(key.first),
                 static_cast<long long>(count), key.second);
  }
  if (!f.stopped_early.empty()) absl::PrintF("stopped early %s\n", f.stopped_early);
  absl::PrintF("duration      %.2f s\n", f.seconds);
  absl::PrintF("requests/s    %.1f\n", f.requests_per_s);
  absl::PrintF("GFLOP/s       %.2f\n", f.gflops);
  absl::PrintF("MB/s          %.1f (request %.1f + response %.1f)\n", f.mb_per_s,
               f.request_mb_per_s, f.response_mb_per_s);
  absl::PrintF("latency ms    p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n", f.p50, f.p90, f.p99,
               f.max);
  // How the requests were spread over the target's replicas (retries and
  // registrations included).
  const std::vector<Client::ReplicaStats> replicas = client->Replicas();
  uint64_t sent = 0;
  for (const Client::ReplicaStats& r : replicas) sent += r.requests;
  absl::PrintF("replicas      %d (policy %s)\n", replicas.size(),
               absl::GetFlag(FLAGS_replica_policy));
  for (const Client::ReplicaStats& r : replicas) {
    absl::PrintF("  %-30s instance %-16s %lld requests (%.1f%%), %lld failed over%s\n", r.address,
                 r.instance_id.empty() ? "?" : r.instance_id, static_cast<long long>(r.requests),
                 sent == 0 ? 0.0 : 100.0 * static_cast<double>(r.requests) / sent,
                 static_cast<long long>(r.failed_over), r.active ? "" : " (left the set)");
  }
  if (absl::GetFlag(FLAGS_verify_every) > 0) {
    absl::PrintF("verified      %lld responses, %lld mismatches\n",
                 static_cast<long long>(f.verified), static_cast<long long>(f.mismatches));
  }
}

std::string Json(const Figures& f) {
  std::vector<std::string> failures;
  for (const auto& [key, count] : f.failures) {
    failures.push_back(absl::StrCat("{\"code\": ", JsonString(absl::StatusCodeToString(key.first)),
                                    ", \"message\": ", JsonString(key.second),
                                    ", \"count\": ", count, "}"));
  }
  return absl::StrCat(
      "{\"m\": ", f.m, ", \"n\": ", f.n, ", \"k\": ", f.k, ", \"batch\": ", f.batch,
      ", \"workload\": ", JsonString(f.workload), ", \"transport\": ", JsonString(f.transport),
      ", \"requests\": ", f.requests, ", \"ok\": ", f.ok, ", \"errors\": ", f.requests - f.ok,
      ", \"failures\": [", absl::StrJoin(failures, ", "), "]",
      ", \"stopped_early\": ", f.stopped_early.empty() ? "null" : JsonString(f.stopped_early),
      ", \"duration_s\": ", JsonNumber(f.seconds),
      ", \"requests_per_s\": ", JsonNumber(f.requests_per_s),
      ", \"gflop_per_s\": ", JsonNumber(f.gflops), ", \"mb_per_s\": ", JsonNumber(f.mb_per_s),
      ", \"request_mb_per_s\": ", JsonNumber(f.request_mb_per_s),
      ", \"response_mb_per_s\": ", JsonNumber(f.response_mb_per_s),
      ", \"latency_ms\": {\"p50\": ", JsonNumber(f.p50), ", \"p90\": ", JsonNumber(f.p90),
      ", \"p99\": ", JsonNumber(f.p99), ", \"max\": ", JsonNumber(f.max), "}",
      ", \"verified\": ", f.verified, ", \"mismatches\": ", f.mismatches, "}");
}

// The (m, n, k) of each bench run: --sizes, else the flags' one shape.
absl::StatusOr<std::vector<std::array<uint64_t, 3>>> BenchShapes() {
  const std::string sizes = absl::GetFlag(FLAGS_sizes);
  if (sizes.empty()) {
    return std::vector<std::array<uint64_t, 3>>{
        {absl::GetFlag(FLAGS_m), absl::GetFlag(FLAGS_n), absl::GetFlag(FLAGS_k)}};
  }
  std::vector<std::array<uint64_t, 3>> shapes;
  for (absl::string_view part : absl::StrSplit(sizes, ',')) {
    uint64_t v;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sizes: \"", part, "\" is not a size (e.g. --sizes=256,512,1024)"));
    }
    shapes.push_back({v, v, v});
  }
  return shapes;
}

// One bench run of shape (m, n, k); nullopt (after printing why) when it
// could not start, with the exit code in `*exit_code`.
std::optional<Figures> BenchOne(Client* client, const CheckLimits& limits, uint64_t m, uint64_t n,
                                uint64_t k, int* exit_code) {
  const bool verify = absl::GetFlag(FLAGS_verify_every) > 0;
  absl::StatusOr<cli::Shape> shape = FlagShape(m, n, k, verify);
  absl::Status checked = shape.ok() ? CheckSize(*shape, limits) : shape.status();
  if (!checked.ok()) {
    absl::FPrintF(stderr, "error: %s\n", checked.ToString());
    *exit_code = kExitError;
    return std::nullopt;
  }
  absl::StatusOr<v1::GemmRequest> request = BuildRequest(m, n, k);
  if (!request.ok()) {
    absl::FPrintF(stderr, "error: %s\n", request.status().ToString());
    *exit_code = kExitError;
    return std::nullopt;
  }
  std::vector<std::vector<double>> refs;
  if (verify) {
    absl::StatusOr<std::vector<std::vector<double>>> r = References(*request);
    if (!r.ok()) {
      absl::FPrintF(stderr, "error: %s\n", r.status().ToString());
      *exit_code = kExitError;
      return std::nullopt;
    }
    refs = std::move(*r);
  }
  auto full = std::make_shared<const v1::GemmRequest>(*std::move(request));
  auto sent = full;
  std::vector<ResidentHandle> residents;
  if (absl::GetFlag(FLAGS_resident_b)) {
    absl::StatusOr<v1::GemmRequest> r = WithResidentB(client, *full, &residents);
    if (!r.ok()) {
      absl::FPrintF(stderr, "error: %s\n", FlagNames(r.status()).ToString());
      for (const ResidentHandle& h : residents) client->ReleaseMatrix(h).IgnoreError();
      *exit_code = kExitRpc;
      return std::nullopt;
    }
    sent = std::make_shared<const v1::GemmRequest>(*std::move(r));
  }
  // The transfer path of `run`: what Client::Gemm would send in chunks goes
  // through it.
  Transport transport = absl::GetFlag(FLAGS_stream) ? Transport::kStream : Transport::kAsync;
  std::unique_ptr<cli::SharedRequests> shared =
      SharedOrNull(client, *sent, absl::GetFlag(FLAGS_concurrency));
  if (shared == nullptr && transport == Transport::kAsync && client->NeedsChunks(*sent))
    transport = Transport::kChunked;
  Bench bench(client, sent, full, std::move(refs), transport, shared.get());
  Figures f = bench.Main();
  for (const ResidentHandle& h : residents) client->ReleaseMatrix(h).IgnoreError();
  return f;
}

int RunBench() {
  if (absl::GetFlag(FLAGS_concurrency) < 1) {
    absl::FPrintF(stderr, "error: --concurrency must be >= 1\n");
    return kExitError;
  }
  if (absl::GetFlag(FLAGS_max_consecutive_failures) < 0) {
    absl::FPrintF(stderr, "error: --max_consecutive_failures must be >= 0\n");
    return kExitError;
  }
  absl::StatusOr<std::vector<std::array<uint64_t, 3>>> shapes = BenchShapes();
  if (!shapes.ok()) return absl::FPrintF(stderr, "error: %s\n", shapes.status().ToString()), kExitError;
  const bool verify = absl::GetFlag(FLAGS_verify_every) > 0;
  // Every shape of the sweep is checked locally before any connection.
  for (const auto& [m, n, k] : *shapes) {
    absl::StatusOr<cli::Shape> shape = FlagShape(m, n, k, verify);
    absl::Status s = shape.ok() ? CheckSize(*shape, {cli::LocalLimits(), false}) : shape.status();
    if (!s.ok()) return absl::FPrintF(stderr, "error: %s\n", s.ToString()), kExitError;
  }
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient();
  if (!client.ok()) return absl::FPrintF(stderr, "error: %s\n", client.status().ToString()), kExitError;
  const CheckLimits limits = FetchLimits(client->get());
  for (const auto& [m, n, k] : *shapes) {
    absl::StatusOr<cli::Shape> shape = FlagShape(m, n, k, verify);
    absl::Status s = shape.ok() ? CheckSize(*shape, limits) : shape.status();
    if (!s.ok()) return absl::FPrintF(stderr, "error: %s\n", s.ToString()), kExitError;
  }
  const bool json = absl::GetFlag(FLAGS_json);
  std::vector<std::string> runs;
  int exit_code = 0;
  for (size_t i = 0; i < shapes->size(); ++i) {
    const auto& [m, n, k] = (*shapes)[i];
    int failed_code = 0;
    std::optional<Figures> f = BenchOne(client->get(), limits, m, n, k, &failed_code);
    if (!f.has_value()) {
      exit_code = std::max(exit_code, failed_code);
      break;
    }
    if (json) {
      runs.push_back(Json(*f));
    } else {
      if (i > 0) absl::PrintF("\n");
      PrintText(*f, client->get());
    }
    int code = 0;
    if (f->mismatches > 0) {
      code = kExitMismatch;
    } else if (f->requests > f->ok) {
      code = kExitRpc;
    }
    // A wrong result outranks failed calls.
    if (code == kExitMismatch || (code == kExitRpc && exit_code == 0)) exit_code = code;
    if (!f->stopped_early.empty()) break;  // the next sizes would fail the same way
  }
  if (json) {
    absl::PrintF("{\"target\": %s, \"runs\": [%s], \"exit_code\": %d}\n",
                 JsonString(absl::GetFlag(FLAGS_target)), absl::StrJoin(runs, ", "), exit_code);
  }
  return exit_code;
}

}  // namespace
}  // namespace gemm

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gemm_cli info|run|bench [flags]\n"
      "  info   prints the server's backend, devices, peak rates and limits\n"
      "  run    one request on random data, checked against a float64 reference\n"
      "  bench  a load generator with --concurrency requests in flight");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const std::string command = args.size() >= 2 ? args[1] : "";
  if (args.size() > 2) {
    absl::FPrintF(stderr, "unexpected argument \"%s\"\n", args[2]);
    return gemm::kExitError;
  }
  if (command == "info") return gemm::Info();
  if (command == "run") return gemm::Run();
  if (command == "bench") return gemm::RunBench();
  absl::FPrintF(stderr, "%s\n", absl::ProgramUsageMessage());
  return gemm::kExitError;
}
