// gemm_cli: talks to a gemm.v1 server.
//
//   gemm_cli info                       server, devices, peak rates, limits
//   gemm_cli run   --m=512 --dtype=fp16  one request on random data, checked
//                                        against a float64 reference
//   gemm_cli bench --concurrency=16      load generator: requests/s, GFLOP/s,
//                                        MB/s, latency percentiles
//
// Exit status: 0 on success, 1 when a result is wrong, 2 on a usage or RPC
// error.
#include <algorithm>
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
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/gemm_client.h"
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
ABSL_FLAG(std::string, dtype, "fp32", "Input type: fp32, fp16 or bf16");
ABSL_FLAG(std::string, out_dtype, "", "Output type (fp32, fp16, bf16); empty = input type");
ABSL_FLAG(bool, transpose_a, false, "Use A^T (A stored K x M)");
ABSL_FLAG(bool, transpose_b, false, "Use B^T (B stored N x K)");
ABSL_FLAG(std::string, layout, "row", "Layout of A, B and C: row or col");
ABSL_FLAG(std::string, out_layout, "row", "Layout of the result: row or col");
ABSL_FLAG(double, alpha, 1.0, "alpha");
ABSL_FLAG(double, beta, 0.0, "beta; non-zero sends a random C");
ABSL_FLAG(bool, allow_tf32, false, "Let fp32 inputs run on TF32 tensor cores");
ABSL_FLAG(int, batch, 1, "Problems per request");
ABSL_FLAG(uint64_t, seed, 42, "Seed of the random inputs");
ABSL_FLAG(int, concurrency, 8, "bench: requests in flight");
ABSL_FLAG(double, duration_s, 10.0, "bench: how long to run, unless --requests is set");
ABSL_FLAG(int64_t, requests, 0, "bench: stop after this many requests (0 = use --duration_s)");
ABSL_FLAG(bool, resident_b, false,
          "bench: register each problem's B on the server once (RegisterMatrix) and send only "
          "its handle");
ABSL_FLAG(int64_t, verify_every, 0, "bench: check every N-th response against the reference (0 = never)");

namespace gemm {
namespace {

constexpr int kExitMismatch = 1;
constexpr int kExitError = 2;

absl::StatusOr<DType> ParseDType(const std::string& s) {
  if (s == "fp32") return DType::kFp32;
  if (s == "fp16") return DType::kFp16;
  if (s == "bf16") return DType::kBf16;
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype \"", s, "\" (fp32, fp16, bf16)"));
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
  return Client::Create(options);
}

// ---------------------------------------------------------------------------
// Inputs

// One request of --batch problems of the flags' shape, on uniform random data
// in [-1, 1).
absl::StatusOr<v1::GemmRequest> BuildRequest() {
  GEMM_ASSIGN_OR_RETURN(const DType in, ParseDType(absl::GetFlag(FLAGS_dtype)));
  DType out = in;
  if (!absl::GetFlag(FLAGS_out_dtype).empty()) {
    GEMM_ASSIGN_OR_RETURN(out, ParseDType(absl::GetFlag(FLAGS_out_dtype)));
  }
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
  shape.m = absl::GetFlag(FLAGS_m);
  shape.n = absl::GetFlag(FLAGS_n);
  shape.k = absl::GetFlag(FLAGS_k);
  shape.transpose_a = options.transpose_a;
  shape.transpose_b = options.transpose_b;

  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  // Random values stored as `t`; the storage outlives the views below only
  // until AddProblem has copied it into the request.
  struct Storage {
    std::vector<float> f32;
    std::vector<uint16_t> f16;
  };
  auto random_matrix = [&](Storage* s, DType t, uint64_t rows, uint64_t cols) {
    s->f32.resize(rows * cols);
    for (float& x : s->f32) x = dist(rng);
    if (t == DType::kFp32) return MatrixView(s->f32.data(), rows, cols, layout);
    s->f16.resize(s->f32.size());
    FromFloat(t, s->f32.data(), s->f16.data(), s->f32.size());
    return MatrixView(s->f16.data(), rows, cols, t, layout);
  };

  v1::GemmRequest request;
  request.set_request_id("gemm_cli");
  for (int i = 0; i < absl::GetFlag(FLAGS_batch); ++i) {
    Storage a, b, c;
    const MatrixView va = random_matrix(&a, in, shape.a_rows(), shape.a_cols());
    const MatrixView vb = random_matrix(&b, in, shape.b_rows(), shape.b_cols());
    if (options.beta != 0.0) options.c = random_matrix(&c, out, shape.m, shape.n);
    GEMM_RETURN_IF_ERROR(AddProblem(&request, va, vb, options));
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
  if (!info.ok()) return absl::FPrintF(stderr, "error: %s\n", info.status().ToString()), kExitError;

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

int Run() {
  absl::StatusOr<v1::GemmRequest> request = BuildRequest();
  if (!request.ok()) return absl::FPrintF(stderr, "error: %s\n", request.status().ToString()), kExitError;
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient();
  if (!client.ok()) return absl::FPrintF(stderr, "error: %s\n", client.status().ToString()), kExitError;

  const v1::GemmProblem& p0 = request->problems(0);
  absl::PrintF("problem   %dx%dx%d (MxNxK) %s -> %s, A %s%s, B %s%s, alpha %g beta %g%s, batch %d\n",
               p0.m(), p0.n(), p0.k(), Name(p0.input_dtype()), Name(p0.output_dtype()),
               absl::GetFlag(FLAGS_layout), p0.transpose_a() ? "^T" : "",
               absl::GetFlag(FLAGS_layout), p0.transpose_b() ? "^T" : "", p0.alpha(), p0.beta(),
               p0.allow_tf32() ? ", tf32 allowed" : "", request->problems_size());

  // Connect first so that the client time below is the call's alone.
  (*client)->channel()->WaitForConnected(
      absl::ToChronoTime(absl::Now() + absl::Milliseconds(absl::GetFlag(FLAGS_deadline_ms))));
  const absl::Time start = absl::Now();
  GemmResult response = (*client)->Gemm(*request);
  const absl::Duration wall = absl::Now() - start;
  if (!response.ok()) {
    absl::FPrintF(stderr, "error: %s\n", response.status().ToString());
    return kExitError;
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
    const MatrixView view =
        b.dtype == DType::kFp32
            ? MatrixView(static_cast<const float*>(b.data), b.rows, b.cols, b.layout)
            : MatrixView(static_cast<const uint16_t*>(b.data), b.rows, b.cols, b.dtype, b.layout);
    GEMM_ASSIGN_OR_RETURN(ResidentHandle handle, client->RegisterMatrix(view, "gemm_cli bench"));
    residents->push_back(handle);
    p.mutable_b()->set_handle(handle.handle);
  }
  return sent;
}

class Bench {
 public:
  // `checked` is `request` with every operand's bytes (they differ when B is
  // resident); checks read its shapes and types.
  Bench(Client* client, std::shared_ptr<const v1::GemmRequest> request,
        std::shared_ptr<const v1::GemmRequest> checked,
        std::vector<std::vector<double>> references)
      : client_(client), request_(std::move(request)), checked_(std::move(checked)),
        references_(std::move(references)), request_bytes_(request_->ByteSizeLong()),
        flops_(RequestFlops(*request_)) {}

  int Main() {
    const int concurrency = absl::GetFlag(FLAGS_concurrency);
    limit_ = absl::GetFlag(FLAGS_requests);
    verify_every_ = absl::GetFlag(FLAGS_verify_every);
    start_ = absl::Now();
    end_ = start_ + absl::Seconds(absl::GetFlag(FLAGS_duration_s));
    slots_ = concurrency;
    for (int i = 0; i < concurrency; ++i) Issue();
    while (!all_done_.WaitForNotificationWithTimeout(absl::Milliseconds(500))) Progress();
    Progress();
    absl::FPrintF(stderr, "\n");
    return Report();
  }

 private:
  // Starts the next request of this slot, or retires the slot.
  void Issue() {
    const bool more = limit_ > 0 ? issued_.fetch_add(1) < limit_ : absl::Now() < end_;
    if (!more) {
      if (--slots_ == 0) all_done_.Notify();
      return;
    }
    const absl::Time sent = absl::Now();
    client_->GemmAsync(request_, {}, [this, sent](GemmResult result) {
      Record(absl::Now() - sent, result);
      Issue();
    });
  }

  void Record(absl::Duration latency, const GemmResult& result) {
    int64_t n;
    {
      absl::MutexLock lock(&mu_);
      n = ++completed_;
      last_ = absl::Now();
      if (!result.ok()) {
        ++errors_[result.status().code()];
        return;
      }
      latencies_ms_.push_back(absl::ToDoubleMilliseconds(latency));
      response_bytes_ += result->ByteSizeLong();
    }
    if (verify_every_ > 0 && n % verify_every_ == 0) Verify(*result);
  }

  void Verify(const v1::GemmResponse& response) {
    bool ok = response.results_size() == request_->problems_size();
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

  int Report() {
    absl::MutexLock lock(&mu_);
    const double s = std::max(1e-9, absl::ToDoubleSeconds(last_ - start_));
    const int64_t ok = static_cast<int64_t>(latencies_ms_.size());
    std::sort(latencies_ms_.begin(), latencies_ms_.end());
    auto pct = [&](double q) {
      if (latencies_ms_.empty()) return 0.0;
      const size_t i = static_cast<size_t>(q * (latencies_ms_.size() - 1) + 0.5);
      return latencies_ms_[std::min(i, latencies_ms_.size() - 1)];
    };
    const double req_mb = static_cast<double>(request_bytes_) * ok / 1e6;
    const double resp_mb = static_cast<double>(response_bytes_) / 1e6;
    const v1::GemmProblem& p0 = request_->problems(0);
    absl::PrintF("workload      %dx%dx%d %s -> %s, batch %d, concurrency %d\n", p0.m(), p0.n(),
                 p0.k(), Name(p0.input_dtype()), Name(p0.output_dtype()),
                 request_->problems_size(), absl::GetFlag(FLAGS_concurrency));
    absl::PrintF("requests      %lld (ok %lld, errors %lld)\n",
                 static_cast<long long>(completed_), static_cast<long long>(ok),
                 static_cast<long long>(completed_ - ok));
    for (const auto& [code, count] : errors_) {
      absl::PrintF("  %-22s %lld\n", absl::StatusCodeToString(code), static_cast<long long>(count));
    }
    absl::PrintF("duration      %.2f s\n", s);
    absl::PrintF("requests/s    %.1f\n", ok / s);
    absl::PrintF("GFLOP/s       %.2f\n", flops_ * ok / s / 1e9);
    absl::PrintF("MB/s          %.1f (request %.1f + response %.1f)\n", (req_mb + resp_mb) / s,
                 req_mb / s, resp_mb / s);
    absl::PrintF("latency ms    p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n", pct(0.50), pct(0.90),
                 pct(0.99), latencies_ms_.empty() ? 0.0 : latencies_ms_.back());
    // How the requests were spread over the target's replicas (retries and
    // registrations included).
    const std::vector<Client::ReplicaStats> replicas = client_->Replicas();
    uint64_t sent = 0;
    for (const Client::ReplicaStats& r : replicas) sent += r.requests;
    absl::PrintF("replicas      %d (policy %s)\n", replicas.size(),
                 absl::GetFlag(FLAGS_replica_policy));
    for (const Client::ReplicaStats& r : replicas) {
      absl::PrintF("  %-30s instance %-16s %lld requests (%.1f%%), %lld failed over%s\n",
                   r.address, r.instance_id.empty() ? "?" : r.instance_id,
                   static_cast<long long>(r.requests),
                   sent == 0 ? 0.0 : 100.0 * static_cast<double>(r.requests) / sent,
                   static_cast<long long>(r.failed_over), r.active ? "" : " (left the set)");
    }
    if (verify_every_ > 0) {
      absl::PrintF("verified      %lld responses, %lld mismatches\n",
                   static_cast<long long>(verified_), static_cast<long long>(mismatches_));
    }
    if (mismatches_ > 0) return kExitMismatch;
    return completed_ > ok ? kExitError : 0;
  }

  Client* const client_;
  const std::shared_ptr<const v1::GemmRequest> request_;
  const std::shared_ptr<const v1::GemmRequest> checked_;
  const std::vector<std::vector<double>> references_;
  const size_t request_bytes_;
  const double flops_;
  int64_t limit_ = 0;
  int64_t verify_every_ = 0;
  absl::Time start_, end_;
  std::atomic<int64_t> issued_{0};
  std::atomic<int> slots_{0};
  absl::Notification all_done_;

  absl::Mutex mu_;
  int64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_ ABSL_GUARDED_BY(mu_);
  std::vector<double> latencies_ms_ ABSL_GUARDED_BY(mu_);
  std::map<absl::StatusCode, int64_t> errors_ ABSL_GUARDED_BY(mu_);
  uint64_t response_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t verified_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t mismatches_ ABSL_GUARDED_BY(mu_) = 0;
};

int RunBench() {
  if (absl::GetFlag(FLAGS_concurrency) < 1) {
    absl::FPrintF(stderr, "error: --concurrency must be >= 1\n");
    return kExitError;
  }
  absl::StatusOr<v1::GemmRequest> request = BuildRequest();
  if (!request.ok()) return absl::FPrintF(stderr, "error: %s\n", request.status().ToString()), kExitError;
  std::vector<std::vector<double>> refs;
  if (absl::GetFlag(FLAGS_verify_every) > 0) {
    absl::StatusOr<std::vector<std::vector<double>>> r = References(*request);
    if (!r.ok()) return absl::FPrintF(stderr, "error: %s\n", r.status().ToString()), kExitError;
    refs = std::move(*r);
  }
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient();
  if (!client.ok()) return absl::FPrintF(stderr, "error: %s\n", client.status().ToString()), kExitError;
  auto checked = std::make_shared<const v1::GemmRequest>(*std::move(request));
  auto sent = checked;
  std::vector<ResidentHandle> residents;
  if (absl::GetFlag(FLAGS_resident_b)) {
    absl::StatusOr<v1::GemmRequest> r = WithResidentB(client->get(), *checked, &residents);
    if (!r.ok()) return absl::FPrintF(stderr, "error: %s\n", r.status().ToString()), kExitError;
    sent = std::make_shared<const v1::GemmRequest>(*std::move(r));
  }
  Bench bench(client->get(), sent, checked, std::move(refs));
  const int exit_code = bench.Main();
  for (const ResidentHandle& h : residents) (*client)->ReleaseMatrix(h).IgnoreError();
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
