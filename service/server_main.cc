// gemm_server: the gemm.v1 gRPC service. Flags are listed by --help; the
// README explains each one.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <iterator>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "kernels/tuning/tuning_table.h"
#include "service/build_stamp.h"
#include "service/cuda/portfolio_policy.h"
#include "service/exec/calibration.h"
#include "service/observe/log_format.h"
#include "service/server.h"
#include "service/version.h"

namespace {
const gemm::ServerOptions kDefaults;
const gemm::ServiceLimits kLimits;

// The commit is "unknown" unless the build was stamped (--config=release).
std::string VersionString() {
#ifdef NDEBUG
  const char* build = "optimized";
#else
  const char* build = "debug (NDEBUG not defined)";
#endif
  return absl::StrCat("gemm_server ", gemm::kVersion, ", commit ", gemm::kBuildCommit, ", ", build,
                      " build\n");
}

// Whether `value` of --`flag` is one of `allowed`; if not, says so on stderr
// naming the flag and the allowed values.
template <size_t N>
bool OneOf(const char* flag, const std::string& value, const char* const (&allowed)[N]) {
  if (std::find(std::begin(allowed), std::end(allowed), value) != std::end(allowed)) return true;
  std::fprintf(stderr, "--%s: \"%s\" is not one of %s\n", flag, value.c_str(),
               absl::StrJoin(allowed, ", ").c_str());
  return false;
}

// Signals that reached a thread which does not block them: one a library
// started before main blocked them (OpenBLAS starts its workers when it is
// loaded). The handler records them for the main loop, which acts on them
// as on those it waits for, instead of the default action (SIGHUP, SIGTERM
// and SIGINT would end the process at once).
std::atomic<bool> stray_sighup{false};
std::atomic<int> stray_stop{0};  // SIGTERM or SIGINT, or 0

extern "C" void RecordStraySignal(int sig) {
  if (sig == SIGHUP) {
    stray_sighup.store(true);
  } else {
    stray_stop.store(sig);
  }
}

// A recorded stray signal (a stop before a SIGHUP), or 0.
int TakeStraySignal() {
  if (int sig = stray_stop.exchange(0); sig != 0) return sig;
  return stray_sighup.exchange(false) ? SIGHUP : 0;
}

// Whether a gRPC listen address only accepts connections from this host.
bool IsLoopbackAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
    return true;
  }
  absl::string_view host = address;
  if (absl::StartsWith(host, "[")) {
    host = host.substr(1, host.find(']') == absl::string_view::npos ? host.size() - 1
                                                                    : host.find(']') - 1);
  } else if (size_t colon = host.rfind(':'); colon != absl::string_view::npos) {
    host = host.substr(0, colon);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}
}  // namespace

ABSL_FLAG(std::string, listen, kDefaults.listen_address,
          "host:port for the gRPC service; port 0 picks a free one (see --port_file)");
ABSL_FLAG(std::string, port_file, "", "if set, the bound port is written to this file");
ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:9464",
          "host:port for Prometheus /metrics; empty turns it off; 127.0.0.1:PORT keeps it "
          "off the public interface");
ABSL_FLAG(std::string, health_listen, "",
          "host:port of a plaintext port serving grpc.health.v1 alone (no TLS, no tokens, no "
          "other service), reporting what the gRPC port does, for probes that cannot do TLS or "
          "tokens (Kubernetes' gRPC probes); empty turns it off; port 0 picks a free one");
ABSL_FLAG(std::string, health_port_file, "",
          "if set, the bound port of --health_listen is written to this file");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of the server; with --tls_key turns TLS on for the gRPC port");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle; clients must present a certificate it signed (mutual TLS)");
ABSL_FLAG(std::string, tenants_file, "",
          "tenants' weights and limits (service/queue/tenants.h, docs/operations.md), re-read on "
          "SIGHUP (a bad file is refused and the tenants in force kept); empty: none, the "
          "queue is shared fairly per caller");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "lines \"<caller-name> <token>\"; every call then needs \"authorization: Bearer "
          "<token>\" (UNAUTHENTICATED otherwise). Without TLS only loopback peers may connect");
ABSL_FLAG(std::string, backend, kDefaults.backend,
          "\"auto\" (CUDA when a GPU is visible, else the CPU), \"cuda\" or \"cpu\"");
ABSL_FLAG(std::vector<std::string>, cuda_devices, {},
          "CUDA backend: comma-separated device ordinals to serve on; empty = every visible GPU "
          "(one executor each, batches placed by predicted finish time)");
ABSL_FLAG(int, cuda_streams, kDefaults.cuda.streams,
          "CUDA backend: streams, i.e. batches in flight at once");
ABSL_FLAG(bool, cuda_grouped_launches, kDefaults.cuda.grouped_launches,
          "CUDA backend: mixed shapes of one type share one grouped launch (sm_90)");
ABSL_FLAG(bool, cuda_reducing_schedules, kDefaults.cuda.reducing_schedules,
          "CUDA backend: stream-K / split-K for problems of at least --large_problem_flops "
          "where the kernel's heuristic prefers them (run one at a time)");
ABSL_FLAG(bool, cuda_copy_unaligned_operands, kDefaults.cuda.copy_unaligned_operands,
          "CUDA backend: bf16/fp16 operands with rows off the 16-byte grid (a leading "
          "dimension not a multiple of 8) are copied aligned and run on the tensor cores "
          "where that is predicted faster than the portable SIMT kernel at the calibrated "
          "rates (tiny problems stay on the SIMT kernel; without calibration, and for "
          "deterministic requests, they are copied wherever copies apply); false runs them "
          "all on the SIMT kernel");
ABSL_FLAG(bool, cuda_quantize_fp8, kDefaults.cuda.quantize_fp8,
          "CUDA backend on Hopper: quantize to FP8 on the GPU (RegisterMatrix / BeginUpload "
          "with quantize, and quantize_partner), with the host rule's codes; false refuses "
          "both UNIMPLEMENTED");
ABSL_FLAG(bool, cuda_pin_shared_memory, kDefaults.cuda.pin_shared_memory,
          "CUDA backend: page-lock same-host clients' shared-memory regions and copy operands "
          "and results straight between them and the GPU (no staging copy)");
ABSL_FLAG(std::string, tuning_table, "",
          "CUDA backend: kernel portfolio tuning tables, comma-separated (bench/gpu.sh run tune "
          "makes one; kernels/tuning/tables/ holds the committed ones); each GPU uses the first "
          "made for its model; a malformed file refuses start naming its line; a table made for "
          "another driver, CUDA, cuBLAS or build, or none for the GPU's model, is ignored with a "
          "warning naming the field, and the heuristic runs");
ABSL_FLAG(std::string, kernel_policy, "table",
          "CUDA backend: which kernel each launch runs: 'table' (the --tuning_table's choice "
          "for its shape class, our heuristic where it has none), 'heuristic' (our kernels "
          "alone) or 'cublas' (every launch through cuBLAS); deterministic requests keep their "
          "deterministic plan under every policy");
ABSL_FLAG(std::string, cublas_library, "",
          "CUDA backend: the cuBLAS library to open (a name the dynamic loader resolves, or a "
          "path); empty: the libcublas.so of the CUDA major version the server was built "
          "with. Opened only when --kernel_policy=cublas or a tuning table that applies "
          "chooses a cuBLAS member; if it cannot be, the table is not used (one WARN) and "
          "the heuristic runs, and --kernel_policy=cublas refuses start");
ABSL_FLAG(absl::Duration, gpu_watchdog, kDefaults.cuda.watchdog,
          "CUDA backend: a batch still running this long after its predicted end takes its "
          "GPU out of service (its requests answered UNAVAILABLE); 0 turns it off");
ABSL_FLAG(std::string, on_gpu_loss, "exit",
          "CUDA backend, once no GPU is left in service after faults: 'exit' (drain for at "
          "most 10 s, then exit with status 3 so the orchestrator restarts the process) or "
          "'stay' (keep running NOT_SERVING, answering UNAVAILABLE, until signalled)");
ABSL_FLAG(absl::Duration, max_queue_delay, kDefaults.batcher.max_queue_delay,
          "while the backend is busy, how long a request may wait for its batch to fill");
ABSL_FLAG(bool, dispatch_when_idle, kDefaults.batcher.dispatch_when_idle,
          "an idle backend gets queued requests at once instead of after max_queue_delay");
ABSL_FLAG(bool, dispatch_on_arrival, kDefaults.batcher.dispatch_on_arrival,
          "an idle backend that runs batches on the calling thread (CPU) gets a request from "
          "the thread that received it, not through the batching thread");
ABSL_FLAG(absl::Duration, run_on_arrival_max, kDefaults.batcher.run_on_arrival_max,
          "with --dispatch_on_arrival, a batch predicted to take at most this long runs on "
          "the receiving thread where the backend can (CPU); 0 never");
ABSL_FLAG(uint32_t, batch_max_requests, kDefaults.batcher.budget.max_requests,
          "most requests in one batch");
ABSL_FLAG(double, batch_max_flops, kDefaults.batcher.budget.max_flops,
          "most floating-point operations (2MNK summed) in one batch");
ABSL_FLAG(uint64_t, batch_max_bytes, kDefaults.batcher.budget.max_bytes,
          "most operand and result bytes in one batch");
ABSL_FLAG(double, large_problem_flops, kDefaults.batcher.plan.large_problem_flops,
          "problems with at least this many FLOPs get a launch of their own");
ABSL_FLAG(bool, deterministic_by_default, false,
          "requests that leave GemmRequest.deterministic unset get batch-invariant results "
          "(bits depend only on the problem, the build and the device model; slower where "
          "stream-K or split-K would run)");
ABSL_FLAG(bool, reject_predicted_late, kDefaults.admission.reject_predicted_late,
          "refuse at once (RESOURCE_EXHAUSTED with a retry pushback) a request whose predicted "
          "completion, after the work running and queued ahead of it, is past its deadline");
ABSL_FLAG(double, deadline_safety_factor, kDefaults.admission.safety_factor,
          "multiplies predicted run times before they are weighed against deadlines; above 1 "
          "refuses earlier, below 1 later");
ABSL_FLAG(int, cpu_concurrency, kDefaults.cpu.concurrent_requests,
          "CPU backend: requests computed at once");
ABSL_FLAG(int, blas_threads, kDefaults.cpu.blas_threads,
          "CPU backend: OpenBLAS threads per GEMM; 0 = one per core");
ABSL_FLAG(std::string, peak_tflops, "",
          "peak compute rates in TFLOP/s per dtype, e.g. bf16=700,fp16=700,fp32=60, used "
          "instead of the start-up measurement for those dtypes (ServerInfo and the "
          "gemm_peak_flops_per_second gauge then say method=\"flag\"); every backend, "
          "every GPU; they stay when SIGHUP re-measures the others");
ABSL_FLAG(std::string, peak_memory_gbps, "",
          "memory bandwidth in GB/s (bytes read plus written) used instead of the start-up "
          "measurement; every backend, every GPU");
ABSL_FLAG(absl::Duration, calibration_budget, kDefaults.cpu.calibration_budget,
          "CPU backend: time the sgemm measurement (at start-up and on SIGHUP) may take to "
          "reach the peak");
ABSL_FLAG(uint64_t, max_message_bytes, kLimits.max_message_bytes,
          "largest gRPC message in either direction (at most 2^31-1)");
ABSL_FLAG(uint64_t, max_receive_buffer_bytes, kLimits.max_receive_buffer_bytes,
          "memory gRPC may hold for all connections together, mostly messages still "
          "arriving (gRPC reads a message in full before its size check); past it gRPC closes "
          "idle connections and resets streams, possibly other clients' (retryable). 0 = "
          "unbounded; else at least max_message_bytes");
ABSL_FLAG(uint64_t, max_dimension, kLimits.max_dimension, "largest M, N or K");
ABSL_FLAG(uint64_t, max_matrix_bytes, kLimits.max_matrix_bytes,
          "largest single operand or result, in bytes");
ABSL_FLAG(uint32_t, max_problems_per_request, kLimits.max_problems_per_request,
          "most problems in one request");
ABSL_FLAG(uint32_t, max_queued_requests, kLimits.max_queued_requests,
          "requests waiting to run before new ones get RESOURCE_EXHAUSTED");
ABSL_FLAG(uint64_t, max_inflight_bytes, kLimits.max_inflight_bytes,
          "operand and result bytes held by admitted requests before new ones get "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(uint32_t, max_stream_inflight, kLimits.max_stream_inflight,
          "unanswered requests one GemmStream may hold before the server stops reading it");
ABSL_FLAG(uint32_t, max_waiting_requests, kLimits.max_waiting_requests,
          "Gemm requests held at once waiting for the uploads they name to complete; past it "
          "RESOURCE_EXHAUSTED; 0: requests never wait");
ABSL_FLAG(uint64_t, max_resident_bytes, kLimits.max_resident_bytes,
          "bytes of all matrices stored with RegisterMatrix (GPU memory on the CUDA backend); "
          "0 turns resident operands off");
ABSL_FLAG(uint32_t, max_shared_memory_regions, kLimits.max_shared_memory_regions,
          "same-host clients' shared-memory regions (RegisterSharedMemory) mapped at once; "
          "0 turns shared memory off");
ABSL_FLAG(uint64_t, max_shared_memory_bytes, kLimits.max_shared_memory_bytes,
          "bytes of those regions together (the clients' memory, mapped into the server)");
ABSL_FLAG(absl::Duration, transient_idle_timeout, kDefaults.transient_idle_timeout,
          "transient resident matrices (per-request uploads, kept results) and unfinished "
          "uploads unused this long are freed");
ABSL_FLAG(int, http2_max_frame_bytes, kDefaults.http2.max_frame_bytes,
          "largest HTTP/2 frame accepted (0 = gRPC's default)");
ABSL_FLAG(int, http2_stream_window_bytes, kDefaults.http2.stream_window_bytes,
          "initial HTTP/2 stream receive window (0 = gRPC's default)");
ABSL_FLAG(int, http2_write_buffer_bytes, kDefaults.http2.write_buffer_bytes,
          "bytes gRPC may buffer for writing per call (0 = gRPC's default)");
ABSL_FLAG(bool, http2_bdp_probe, kDefaults.http2.bdp_probe,
          "gRPC's bandwidth-delay probe that grows flow-control windows");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "on SIGTERM/SIGINT: health turns NOT_SERVING and new work gets UNAVAILABLE, while "
          "requests already admitted (their uploads, downloads and releases included) get up to "
          "this long to finish; what still runs then is cancelled");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error, critical or off");
ABSL_FLAG(std::string, log_format, "text",
          "\"text\" (one line per event, fields as key=value) or \"json\" (one JSON object per "
          "line: time, level, logger, message and the event's fields)");
ABSL_FLAG(double, log_lines_per_second, kDefaults.log_rate.lines_per_second,
          "log lines of refused calls and auth failures each (method, code) or auth reason may "
          "write per second once --log_burst is spent; the rest are counted and summarized "
          "(\"suppressed K similar lines\") about once a second");
ABSL_FLAG(uint32_t, log_burst, kDefaults.log_rate.burst,
          "log lines of one (method, code) or auth reason that may be written back to back");
ABSL_FLAG(bool, allow_insecure_tokens, false,
          "allow --auth_tokens_file without TLS on a non-loopback --listen address (tokens then "
          "travel in clear, and gRPC clients do not send call credentials over an insecure "
          "channel unless told to)");

namespace {

// The flags mapped onto the server's options, one concern at a time. Each
// returns INVALID_ARGUMENT naming the flag when a value is refused; main
// logs it and exits with status 2 before anything starts.

absl::Status SetListeners(gemm::ServerOptions* options) {
  options->listen_address = absl::GetFlag(FLAGS_listen);
  options->backend = absl::GetFlag(FLAGS_backend);
  options->metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options->health_listen = absl::GetFlag(FLAGS_health_listen);
  if (!absl::GetFlag(FLAGS_health_port_file).empty() && options->health_listen.empty())
    return absl::InvalidArgumentError("--health_port_file needs --health_listen");
  return absl::OkStatus();
}

absl::Status SetSecurity(gemm::ServerOptions* options) {
  gemm::SecurityOptions& s = options->security;
  s.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  s.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  s.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  s.auth_tokens_file = absl::GetFlag(FLAGS_auth_tokens_file);
  if (!s.auth_tokens_file.empty() && s.tls_cert_file.empty() &&
      !IsLoopbackAddress(options->listen_address) && !absl::GetFlag(FLAGS_allow_insecure_tokens))
    return absl::InvalidArgumentError(absl::StrCat(
        "--auth_tokens_file without --tls_cert/--tls_key on non-loopback --listen ",
        options->listen_address,
        ": tokens would travel in clear and gRPC clients will not send them over an insecure "
        "channel; turn TLS on, listen on loopback, or pass --allow_insecure_tokens"));
  return absl::OkStatus();
}

absl::Status SetTenants(gemm::ServerOptions* options) {
  const std::string path = absl::GetFlag(FLAGS_tenants_file);
  if (path.empty()) return absl::OkStatus();
  auto tenants = gemm::TenantsConfig::Load(path);
  if (!tenants.ok())
    return absl::InvalidArgumentError(absl::StrCat("--tenants_file: ", tenants.status().message()));
  spdlog::info("tenants from {}: {}", path, tenants->Summary());
  options->tenants = std::make_shared<const gemm::TenantsConfig>(*std::move(tenants));
  return absl::OkStatus();
}

absl::Status SetBatching(gemm::ServerOptions* options) {
  gemm::BatcherOptions& b = options->batcher;
  b.max_queue_delay = absl::GetFlag(FLAGS_max_queue_delay);
  b.dispatch_when_idle = absl::GetFlag(FLAGS_dispatch_when_idle);
  b.dispatch_on_arrival = absl::GetFlag(FLAGS_dispatch_on_arrival);
  b.run_on_arrival_max = absl::GetFlag(FLAGS_run_on_arrival_max);
  b.budget.max_requests = absl::GetFlag(FLAGS_batch_max_requests);
  b.budget.max_flops = absl::GetFlag(FLAGS_batch_max_flops);
  b.budget.max_bytes = absl::GetFlag(FLAGS_batch_max_bytes);
  b.plan.large_problem_flops = absl::GetFlag(FLAGS_large_problem_flops);
  options->deterministic_by_default = absl::GetFlag(FLAGS_deterministic_by_default);
  options->admission.reject_predicted_late = absl::GetFlag(FLAGS_reject_predicted_late);
  options->admission.safety_factor = absl::GetFlag(FLAGS_deadline_safety_factor);
  return absl::OkStatus();
}

// The tables of --tuning_table, parsed here so that a bad file stops the
// start; each CUDA executor, which knows its device, picks the table of its
// model and compares the rest of the key with the process's.
absl::Status SetTuningTables(gemm::gpu::PortfolioSettings* portfolio) {
  for (absl::string_view listed :
       absl::StrSplit(absl::GetFlag(FLAGS_tuning_table), ',', absl::SkipEmpty())) {
    const std::string path(listed);
    auto table = gemm_kernels::tuning::ReadTuningTable(path);
    if (!table.ok())
      return absl::InvalidArgumentError(absl::StrCat("--tuning_table: ", table.status().message()));
    auto shared = std::make_shared<const gemm_kernels::tuning::TuningTable>(*std::move(table));
    if (portfolio->table == nullptr) {
      portfolio->table = shared;
      portfolio->table_path = path;
    }
    portfolio->tables.emplace_back(path, shared);
  }
  return absl::OkStatus();
}

absl::Status SetCuda(gemm::ServerOptions* options) {
  for (const std::string& d : absl::GetFlag(FLAGS_cuda_devices)) {
    int device;
    if (!absl::SimpleAtoi(d, &device) || device < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("--cuda_devices: \"", d, "\" is not a device ordinal"));
    options->cuda_devices.push_back(device);
  }
  gemm::CudaExecutor::Options& c = options->cuda;
  c.streams = absl::GetFlag(FLAGS_cuda_streams);
  c.grouped_launches = absl::GetFlag(FLAGS_cuda_grouped_launches);
  c.reducing_schedules = absl::GetFlag(FLAGS_cuda_reducing_schedules);
  c.copy_unaligned_operands = absl::GetFlag(FLAGS_cuda_copy_unaligned_operands);
  c.pin_shared_memory = absl::GetFlag(FLAGS_cuda_pin_shared_memory);
  c.quantize_fp8 = absl::GetFlag(FLAGS_cuda_quantize_fp8);
  c.reducing_min_flops = absl::GetFlag(FLAGS_large_problem_flops);
  // Checked with the enumerated flags, before logging was set up.
  c.portfolio.policy =
      *gemm::gpu::ParseKernelPolicy(absl::GetFlag(FLAGS_kernel_policy), "kernel_policy");
  c.portfolio.cublas_library = absl::GetFlag(FLAGS_cublas_library);
  if (absl::Status st = SetTuningTables(&c.portfolio); !st.ok()) return st;
  c.watchdog = absl::GetFlag(FLAGS_gpu_watchdog);
  if (c.watchdog < absl::ZeroDuration())
    return absl::InvalidArgumentError("--gpu_watchdog: must be 0 (off) or positive");
  if (const std::string loss = absl::GetFlag(FLAGS_on_gpu_loss); loss != "exit" && loss != "stay")
    return absl::InvalidArgumentError(
        absl::StrCat("--on_gpu_loss: \"", loss, "\" is not one of exit, stay"));
  return absl::OkStatus();
}

absl::Status SetCpuAndPeaks(gemm::ServerOptions* options) {
  options->cpu.concurrent_requests = absl::GetFlag(FLAGS_cpu_concurrency);
  options->cpu.blas_threads = absl::GetFlag(FLAGS_blas_threads);
  options->cpu.calibration_budget = absl::GetFlag(FLAGS_calibration_budget);
  if (options->cpu.calibration_budget <= absl::ZeroDuration() ||
      options->cpu.calibration_budget > absl::Minutes(5))
    return absl::InvalidArgumentError("--calibration_budget: must be in (0, 5m]");
  auto tflops = gemm::ParsePeakTflops(absl::GetFlag(FLAGS_peak_tflops), "peak_tflops");
  auto gbps = gemm::ParsePeakMemoryGbps(absl::GetFlag(FLAGS_peak_memory_gbps), "peak_memory_gbps");
  for (const absl::Status& st : {tflops.status(), gbps.status()})
    if (!st.ok()) return st;
  options->cpu.peak_overrides = *tflops;
  options->cpu.peak_overrides.insert(options->cpu.peak_overrides.end(), gbps->begin(),
                                     gbps->end());
  // On several GPUs every device takes the same figures.
  options->cuda.peak_overrides = options->cpu.peak_overrides;
  return absl::OkStatus();
}

absl::Status SetLimits(gemm::ServerOptions* options) {
  gemm::ServiceLimits& l = options->limits;
  l.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  l.max_receive_buffer_bytes = absl::GetFlag(FLAGS_max_receive_buffer_bytes);
  l.max_dimension = absl::GetFlag(FLAGS_max_dimension);
  l.max_matrix_bytes = absl::GetFlag(FLAGS_max_matrix_bytes);
  l.max_problems_per_request = absl::GetFlag(FLAGS_max_problems_per_request);
  l.max_queued_requests = absl::GetFlag(FLAGS_max_queued_requests);
  l.max_inflight_bytes = absl::GetFlag(FLAGS_max_inflight_bytes);
  l.max_stream_inflight = absl::GetFlag(FLAGS_max_stream_inflight);
  l.max_waiting_requests = absl::GetFlag(FLAGS_max_waiting_requests);
  l.max_resident_bytes = absl::GetFlag(FLAGS_max_resident_bytes);
  l.max_shared_memory_regions = absl::GetFlag(FLAGS_max_shared_memory_regions);
  l.max_shared_memory_bytes = absl::GetFlag(FLAGS_max_shared_memory_bytes);
  options->transient_idle_timeout = absl::GetFlag(FLAGS_transient_idle_timeout);
  options->http2.max_frame_bytes = absl::GetFlag(FLAGS_http2_max_frame_bytes);
  options->http2.stream_window_bytes = absl::GetFlag(FLAGS_http2_stream_window_bytes);
  options->http2.write_buffer_bytes = absl::GetFlag(FLAGS_http2_write_buffer_bytes);
  options->http2.bdp_probe = absl::GetFlag(FLAGS_http2_bdp_probe);
  options->log_rate.lines_per_second = absl::GetFlag(FLAGS_log_lines_per_second);
  options->log_rate.burst = absl::GetFlag(FLAGS_log_burst);
  if (absl::Status st = options->log_rate.Validate(); !st.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("--log_lines_per_second/--log_burst: ", st.message()));
  return absl::OkStatus();
}

// The server's options from the flags, concern by concern, in the order
// their refusals were always reported.
absl::StatusOr<gemm::ServerOptions> OptionsFromFlags() {
  gemm::ServerOptions options;
  for (absl::Status (*set)(gemm::ServerOptions*) : {SetListeners, SetSecurity, SetTenants,
                                                    SetBatching, SetCuda, SetCpuAndPeaks,
                                                    SetLimits}) {
    if (absl::Status st = set(&options); !st.ok()) return st;
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  // The shutdown signals and SIGHUP (re-read --tenants_file, re-measure the
  // peak rates) are blocked here, first, so that every thread started from
  // now on inherits the mask and main waits for them below; threads that
  // were already running hand them to RecordStraySignal.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  {
    struct sigaction action = {};
    action.sa_handler = RecordStraySignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &action, nullptr);
  }
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::SetProgramUsageMessage("gemm_server: batched GEMM offload over gRPC (gemm.v1)");
  absl::FlagsUsageConfig usage;
  // Abseil's default --help lists only flags of a file named after the
  // program (gemm_server.cc); ours live in server_main.cc, so list them all.
  usage.contains_help_flags = [](absl::string_view) { return true; };
  usage.contains_helpshort_flags = [](absl::string_view) { return true; };
  usage.version_string = VersionString;
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
  {
    // The enumerated flags, refused before anything starts. spdlog's
    // from_str maps an unknown level name to "off", hence the check.
    static constexpr const char* kLevels[] = {"trace", "debug", "info", "warn",
                                              "error", "critical", "off"};
    static constexpr const char* kFormats[] = {"text", "json"};
    static constexpr const char* kBackends[] = {"auto", "cuda", "cpu"};
    const std::string level = absl::GetFlag(FLAGS_log_level);
    const std::string format = absl::GetFlag(FLAGS_log_format);
    if (!OneOf("log_level", level, kLevels) || !OneOf("log_format", format, kFormats) ||
        !OneOf("backend", absl::GetFlag(FLAGS_backend), kBackends))
      return 2;
    if (absl::Status policy =
            gemm::gpu::ParseKernelPolicy(absl::GetFlag(FLAGS_kernel_policy), "--kernel_policy")
                .status();
        !policy.ok()) {
      std::fprintf(stderr, "%s\n", std::string(policy.message()).c_str());
      return 2;
    }
    gemm::ConfigureLogging(*gemm::ParseLogFormat(format, "log_format"), "gemm_server");
    spdlog::set_level(spdlog::level::from_str(level));
  }

  absl::StatusOr<gemm::ServerOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    spdlog::critical("{}", std::string(options.status().message()));
    return 2;
  }
  const std::string tenants_file = absl::GetFlag(FLAGS_tenants_file);
  const std::string on_gpu_loss = absl::GetFlag(FLAGS_on_gpu_loss);

  auto server = gemm::GemmServer::Start(*options);
  if (!server.ok()) {
    spdlog::critical("cannot start: {}", server.status().ToString());
    return 2;
  }
  // The health port first: a script that waits for --port_file finds both.
  if (const std::string path = absl::GetFlag(FLAGS_health_port_file); !path.empty()) {
    std::ofstream(path) << (*server)->health_port() << "\n";
  }
  if (const std::string path = absl::GetFlag(FLAGS_port_file); !path.empty()) {
    std::ofstream(path) << (*server)->port() << "\n";
  }

  // A signal, or (with --on_gpu_loss=exit) the loss of the last GPU, ends
  // the process; the wait wakes four times a second to look for the latter.
  const timespec tick{0, 250 * 1000 * 1000};
  while (true) {
    int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig <= 0) sig = TakeStraySignal();
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::info("received {}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      (*server)->Shutdown(absl::GetFlag(FLAGS_drain_timeout));
      return 0;
    }
    // Here, not on a thread of its own: a SIGTERM that comes meanwhile waits
    // for it (the batches running, then about a second), and the server is
    // never destroyed under it. The result is logged by the call.
    if (sig == SIGHUP) {
      spdlog::info("received SIGHUP");
      // A bad file is refused (logged, naming its line) and the tenants in
      // force stay; requests are neither dropped nor paused by a reload.
      if (!tenants_file.empty()) (*server)->ReloadTenants(tenants_file).IgnoreError();
      (*server)->RemeasurePeaks().IgnoreError();
    }
    if (on_gpu_loss == "exit" && (*server)->no_device_left().HasBeenNotified()) {
      spdlog::critical("no GPU is left in service: exiting with status 3 (--on_gpu_loss=exit)");
      // A hung GPU can hold a thread of the server in a CUDA call for good,
      // and then the orderly shutdown never ends: it gets a bounded time, and
      // the process exits without it after that.
      const absl::Duration drain = std::min(absl::GetFlag(FLAGS_drain_timeout), absl::Seconds(10));
      auto done = std::make_shared<absl::Notification>();
      std::thread([server = server->get(), drain, done] {
        server->Shutdown(drain);
        done->Notify();
      }).detach();
      if (!done->WaitForNotificationWithTimeout(drain + absl::Seconds(5))) {
        spdlog::critical("the shutdown did not finish in {}; exiting without it",
                         absl::FormatDuration(drain + absl::Seconds(5)));
        spdlog::shutdown();
        std::_Exit(3);
      }
      return 3;
    }
  }
}
