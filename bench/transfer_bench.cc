// transfer_bench: how fast one client moves large operands to and from the
// service (gemm.v1.Transfer through gemm::Client, chunked and striped over
// several connections), beside a plain gRPC unary echo carrying the same
// payloads, in one run on loopback. Also one large GEMM end to end: wall time
// per request beside the server's kernel time and the bytes/wall rate.
//
// Cases (all medians of repeated transfers of random bytes):
//   single   one transfer at a time of each --sizes_mib payload: upload and
//            download GB/s for each (chunk size, channels) of the sweep; the
//            echo's rate is payload / call time over one connection.
//   parallel --parallel_mib payloads, --parallel in flight from one client
//            (uploads then downloads); the echo uses as many connections.
//   gemm     --gemm_sizes^3 bf16 through Client::Gemm: chunked with the
//            pipelined protocol (default options: the Gemm sent beside its
//            uploads, operands released with it, results with their
//            download), chunked step after step (pipelined_uploads off: the
//            older clients' order), and as one message; each with the
//            response's timing and its wall time over moving the same bytes
//            alone (two uploads and a download, measured in the same run);
//            the four interleaved round by round.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/gemm_client.h"
#include "common/dtype.h"
#include "echo/echo_server.h"
#include "echo/v1/echo.grpc.pb.h"
#include "service/server.h"

ABSL_FLAG(std::string, sizes_mib, "1,16,64", "single-transfer payload sizes, MiB");
ABSL_FLAG(std::string, chunk_mib, "1,4,16", "chunk sizes to sweep, MiB");
ABSL_FLAG(std::string, channels, "1,2,4,8,16", "transfer channel counts to sweep");
ABSL_FLAG(int, repeats, 7, "transfers per measurement (after one warm-up); medians");
ABSL_FLAG(int, parallel, 16, "transfers in flight in the parallel case");
ABSL_FLAG(std::string, parallel_settings, "1:4,1:8,4:4",
          "chunk MiB:channels settings of the parallel case");
ABSL_FLAG(int, parallel_mib, 16, "payload of each parallel transfer, MiB");
ABSL_FLAG(double, parallel_seconds, 3.0, "measured time of the parallel case");
ABSL_FLAG(std::string, gemm_sizes, "1024,2048,4096", "sizes of the end-to-end bf16 GEMMs");
ABSL_FLAG(std::string, backend, "auto", "in-process server: auto, cuda or cpu");
ABSL_FLAG(int, max_frame_bytes, 0, "HTTP/2 max frame size, both sides (0 = default)");
ABSL_FLAG(int, stream_window_bytes, 0, "HTTP/2 initial stream window, both sides (0 = default)");
ABSL_FLAG(int, write_buffer_bytes, 0, "gRPC write buffer per call, both sides (0 = default)");

namespace gemm {
namespace {

using bench::echo::v1::EchoReply;
using bench::echo::v1::EchoRequest;
using bench::echo::v1::EchoService;

constexpr int kMaxMessage = (1 << 30) + (16 << 20);

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::vector<int> Ints(const std::string& list) {
  std::vector<int> out;
  for (absl::string_view s : absl::StrSplit(list, ',')) out.push_back(std::stoi(std::string(s)));
  return out;
}

std::string RandomBytes(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  return s;
}

Http2Tuning TuningFromFlags() {
  Http2Tuning t;
  t.max_frame_bytes = absl::GetFlag(FLAGS_max_frame_bytes);
  t.stream_window_bytes = absl::GetFlag(FLAGS_stream_window_bytes);
  t.write_buffer_bytes = absl::GetFlag(FLAGS_write_buffer_bytes);
  return t;
}

std::shared_ptr<grpc::Channel> EchoChannel(int port, int index) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessage);
  args.SetMaxSendMessageSize(kMaxMessage);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("gemm.bench_channel", index);
  for (const auto& [name, value] : TuningFromFlags().ChannelArgs()) args.SetInt(name, value);
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials(), args);
}

// Seconds of one echo call moving `bytes` each way.
double EchoOnce(EchoService::Stub* stub, const EchoRequest& request) {
  EchoReply reply;
  grpc::ClientContext ctx;
  const absl::Time t0 = absl::Now();
  grpc::Status st = stub->Echo(&ctx, request, &reply);
  const double s = absl::ToDoubleSeconds(absl::Now() - t0);
  if (!st.ok() || reply.payload().size() != request.reply_bytes()) {
    std::fprintf(stderr, "echo failed: %s\n", st.error_message().c_str());
    std::exit(1);
  }
  return s;
}

std::unique_ptr<Client> MakeClient(int port, uint64_t chunk_bytes, int channels) {
  ClientOptions o;
  o.target = absl::StrCat("127.0.0.1:", port);
  o.chunk_bytes = chunk_bytes;
  o.transfer_channels = channels;
  o.http2 = TuningFromFlags();
  o.default_timeout = absl::Minutes(5);
  auto client = Client::Create(o);
  if (!client.ok()) {
    std::fprintf(stderr, "client: %s\n", client.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*client);
}

struct UpDown {
  double up_s = 0;
  double down_s = 0;
};

// One upload of `payload` as a transient matrix, one download of it back.
UpDown TransferOnce(Client* client, const std::string& payload, std::string* back) {
  const uint64_t cols = payload.size() / 4 / 1024;
  MatrixView view(reinterpret_cast<const float*>(payload.data()), 1024, cols);
  UpDown t;
  absl::Time t0 = absl::Now();
  auto handle = client->UploadMatrix(view, /*transient=*/true);
  t.up_s = absl::ToDoubleSeconds(absl::Now() - t0);
  if (!handle.ok()) {
    std::fprintf(stderr, "upload: %s\n", handle.status().ToString().c_str());
    std::exit(1);
  }
  t0 = absl::Now();
  absl::Status st = client->DownloadMatrix(handle->handle, back->data(), back->size());
  t.down_s = absl::ToDoubleSeconds(absl::Now() - t0);
  if (!st.ok()) {
    std::fprintf(stderr, "download: %s\n", st.ToString().c_str());
    std::exit(1);
  }
  client->ReleaseMatrix(*handle).IgnoreError();
  return t;
}

void SingleCase(int gemm_port, int echo_port) {
  const int repeats = absl::GetFlag(FLAGS_repeats);
  auto echo_stub = EchoService::NewStub(EchoChannel(echo_port, 0));
  std::printf("\n== single: one transfer at a time (GB/s = payload / time; median of %d)\n",
              repeats);
  std::printf("%8s %6s %5s | %9s %9s | %9s | %7s %7s\n", "payload", "chunk", "chan", "up GB/s",
              "down GB/s", "echo GB/s", "up/echo", "dn/echo");
  for (int mib : Ints(absl::GetFlag(FLAGS_sizes_mib))) {
    const size_t bytes = size_t(mib) << 20;
    const std::string payload = RandomBytes(bytes, mib);
    std::string back(bytes, '\0');
    EchoRequest echo_request;
    *echo_request.mutable_payload() = payload;
    echo_request.set_reply_bytes(bytes);
    std::vector<double> echo_s;
    EchoOnce(echo_stub.get(), echo_request);
    for (int r = 0; r < repeats; ++r) echo_s.push_back(EchoOnce(echo_stub.get(), echo_request));
    const double echo_gbs = bytes / Median(echo_s) / 1e9;
    for (int chunk_mib : Ints(absl::GetFlag(FLAGS_chunk_mib))) {
      if (size_t(chunk_mib) << 20 > bytes && chunk_mib != 1) continue;
      for (int channels : Ints(absl::GetFlag(FLAGS_channels))) {
        auto client = MakeClient(gemm_port, uint64_t(chunk_mib) << 20, channels);
        TransferOnce(client.get(), payload, &back);  // warm-up: connections, pools
        std::vector<double> up, down;
        for (int r = 0; r < repeats; ++r) {
          std::fill(back.begin(), back.begin() + 64, '\xff');  // poison
          UpDown t = TransferOnce(client.get(), payload, &back);
          if (back != payload) {
            std::fprintf(stderr, "download differs from upload\n");
            std::exit(1);
          }
          up.push_back(t.up_s);
          down.push_back(t.down_s);
        }
        const double up_gbs = bytes / Median(up) / 1e9;
        const double down_gbs = bytes / Median(down) / 1e9;
        std::printf("%5d MiB %3d MiB %5d | %9.2f %9.2f | %9.2f | %7.2f %7.2f\n", mib, chunk_mib,
                    channels, up_gbs, down_gbs, echo_gbs, up_gbs / echo_gbs,
                    down_gbs / echo_gbs);
        std::fflush(stdout);
      }
    }
  }
}

void ParallelCase(int gemm_port, int echo_port) {
  const int n = absl::GetFlag(FLAGS_parallel);
  const size_t bytes = size_t(absl::GetFlag(FLAGS_parallel_mib)) << 20;
  const double seconds = absl::GetFlag(FLAGS_parallel_seconds);
  const std::string payload = RandomBytes(bytes, 99);
  std::printf("\n== parallel: %d transfers of %zu MiB in flight from one client, %.1f s\n", n,
              bytes >> 20, seconds);

  // Echo: n connections, one call in flight on each.
  std::atomic<uint64_t> echo_bytes{0};
  {
    EchoRequest request;
    *request.mutable_payload() = payload;
    request.set_reply_bytes(bytes);
    std::vector<std::unique_ptr<EchoService::Stub>> stubs;
    for (int i = 0; i < n; ++i) stubs.push_back(EchoService::NewStub(EchoChannel(echo_port, i)));
    for (auto& s : stubs) EchoOnce(s.get(), request);
    const absl::Time end = absl::Now() + absl::Seconds(seconds);
    const absl::Time t0 = absl::Now();
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i)
      threads.emplace_back([&, i] {
        while (absl::Now() < end) {
          EchoOnce(stubs[i].get(), request);
          echo_bytes += bytes;
        }
      });
    for (auto& t : threads) t.join();
    const double s = absl::ToDoubleSeconds(absl::Now() - t0);
    std::printf("echo (%d connections):      %8.0f MB/s each way\n", n, echo_bytes / s / 1e6);
    echo_bytes = static_cast<uint64_t>(echo_bytes / s);
  }
  // Ours: one client, n threads, for each setting.
  for (absl::string_view setting : absl::StrSplit(absl::GetFlag(FLAGS_parallel_settings), ',')) {
    std::vector<std::string> parts = absl::StrSplit(setting, ':');
    const uint64_t chunk = uint64_t(std::stoi(parts[0])) << 20;
    const int channels = std::stoi(parts[1]);
    auto client = MakeClient(gemm_port, chunk, channels);
    std::atomic<uint64_t> up_bytes{0};
    {
      std::string warm(bytes, '\0');
      TransferOnce(client.get(), payload, &warm);
    }
    const absl::Time end = absl::Now() + absl::Seconds(seconds);
    const absl::Time t0 = absl::Now();
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i)
      threads.emplace_back([&] {
        std::string back(bytes, '\0');
        while (absl::Now() < end) {
          TransferOnce(client.get(), payload, &back);
          up_bytes += bytes;
        }
      });
    for (auto& t : threads) t.join();
    const double s = absl::ToDoubleSeconds(absl::Now() - t0);
    const double ours = up_bytes / s / 1e6;
    std::printf("ours (one client, %2d MiB chunks, %2d chan): %8.0f MB/s each way   ratio %.2f\n",
                int(chunk >> 20), channels, ours, ours / (echo_bytes / 1e6));
  }
}

void GemmCase(int gemm_port, int size) {
  std::printf("\n== gemm: %d^3 bf16 through Client::Gemm (median of %d)\n", size,
              absl::GetFlag(FLAGS_repeats));
  std::mt19937 rng(5);
  auto bf16_bytes = [&](uint64_t n) {
    std::string s(n * 2, '\0');
    std::uniform_real_distribution<float> u(-1, 1);
    uint16_t* p = reinterpret_cast<uint16_t*>(s.data());
    for (uint64_t i = 0; i < n; ++i) p[i] = FloatToBf16(u(rng));
    return s;
  };
  v1::GemmRequest request;
  v1::GemmProblem* p = request.add_problems();
  p->set_m(size);
  p->set_n(size);
  p->set_k(size);
  p->set_input_dtype(v1::DATA_TYPE_BF16);
  *p->mutable_a()->mutable_data() = bf16_bytes(uint64_t(size) * size);
  *p->mutable_b()->mutable_data() = bf16_bytes(uint64_t(size) * size);
  const double bytes = 3.0 * size * size * 2;
  // The bytes alone (A and B up, a matrix of D's size down) and the three
  // paths, interleaved round by round (alone, pipelined, step by step, one
  // message; a warm-up round first) so that the box's drift between rounds
  // falls on all of them alike.
  auto alone_client =
      MakeClient(gemm_port, ClientOptions().chunk_bytes, ClientOptions().transfer_channels);
  auto bytes_alone = [&]() -> double {
    const std::string& a = p->a().data();
    const std::string& b = p->b().data();
    std::string d(a.size(), '\0');
    const absl::Time t0 = absl::Now();
    auto ha = alone_client->UploadMatrix(
        MatrixView(reinterpret_cast<const uint16_t*>(a.data()), size, size, DType::kBf16), true);
    auto hb = alone_client->UploadMatrix(
        MatrixView(reinterpret_cast<const uint16_t*>(b.data()), size, size, DType::kBf16), true);
    absl::Status st = ha.ok() && hb.ok()
                          ? alone_client->DownloadMatrix(ha->handle, d.data(), d.size())
                          : (ha.ok() ? hb.status() : ha.status());
    const double t = absl::ToDoubleSeconds(absl::Now() - t0);
    if (!st.ok()) {
      std::fprintf(stderr, "bytes alone: %s\n", st.ToString().c_str());
      std::exit(1);
    }
    for (const auto* h : {&ha, &hb}) alone_client->ReleaseMatrix((*h)->handle).IgnoreError();
    return t;
  };
  enum class Path { kPipelined, kSequential, kOneMessage };
  constexpr Path kPaths[] = {Path::kPipelined, Path::kSequential, Path::kOneMessage};
  struct Samples {
    std::unique_ptr<Client> client;
    std::vector<double> wall, kernel, copy, queue;
  };
  Samples samples[3];
  for (int i = 0; i < 3; ++i) {
    ClientOptions o;
    o.target = absl::StrCat("127.0.0.1:", gemm_port);
    o.default_timeout = absl::Minutes(5);
    o.http2 = TuningFromFlags();
    if (kPaths[i] == Path::kOneMessage) o.chunked_threshold_bytes = 0;
    if (kPaths[i] == Path::kSequential) o.pipelined_uploads = false;
    auto client = Client::Create(o);
    if (!client.ok()) {
      std::fprintf(stderr, "client: %s\n", client.status().ToString().c_str());
      std::exit(1);
    }
    samples[i].client = std::move(*client);
  }
  std::vector<double> alone;
  for (int r = 0; r <= absl::GetFlag(FLAGS_repeats); ++r) {
    const double t = bytes_alone();
    if (r > 0) alone.push_back(t);  // the first round warms up
    for (Samples& path : samples) {
      const absl::Time t0 = absl::Now();
      auto response = path.client->Gemm(request);
      const double s = absl::ToDoubleSeconds(absl::Now() - t0);
      if (!response.ok()) {
        std::fprintf(stderr, "gemm: %s\n", response.status().ToString().c_str());
        std::exit(1);
      }
      if (r == 0) continue;
      path.wall.push_back(s);
      path.kernel.push_back(response->timing().compute_ns() / 1e9);
      path.copy.push_back(response->timing().transfer_ns() / 1e9);
      path.queue.push_back(response->timing().queue_ns() / 1e9);
    }
  }
  const double alone_s = Median(alone);
  std::printf("%-22s %10.2f ms (two uploads and a download of the same sizes)\n", "bytes alone",
              alone_s * 1e3);
  std::printf("%-22s %10s %10s %10s %10s %9s %9s %10s\n", "path", "wall ms", "kernel ms", "copy ms",
              "queue ms", "GB/s wall", "in GB/s", "wall/alone");
  for (int i = 0; i < 3; ++i) {
    const Samples& path = samples[i];
    // "GB/s wall" counts A, B and D; "in GB/s" the operands sent (A, B).
    const char* name = kPaths[i] == Path::kPipelined    ? "chunked, pipelined"
                       : kPaths[i] == Path::kSequential ? "chunked, step by step"
                                                        : "one message";
    std::printf("%-22s %10.2f %10.3f %10.3f %10.3f %9.2f %9.2f %10.2f\n", name,
                Median(path.wall) * 1e3, Median(path.kernel) * 1e3, Median(path.copy) * 1e3,
                Median(path.queue) * 1e3, bytes / Median(path.wall) / 1e9,
                bytes * 2 / 3 / Median(path.wall) / 1e9, Median(path.wall) / alone_s);
  }
}

// The chunked path of one GEMM step by step with the public API (what
// Client::Gemm does above its threshold), timing each step: where the wall
// time of a large request goes.
void GemmBreakdown(int gemm_port, int size) {
  auto client = MakeClient(gemm_port, ClientOptions().chunk_bytes, ClientOptions().transfer_channels);
  std::mt19937 rng(6);
  std::vector<uint16_t> a(uint64_t(size) * size), b(a.size());
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto* v : {&a, &b})
    for (uint16_t& x : *v) x = FloatToBf16(u(rng));
  const uint64_t d_bytes = uint64_t(size) * size * 2;
  std::vector<double> up_s, gemm_s, down_s, release_s, total_s, server_total_s;
  std::string d(d_bytes, '\0');
  for (int r = 0; r <= absl::GetFlag(FLAGS_repeats); ++r) {
    const absl::Time t0 = absl::Now();
    auto ha = client->UploadMatrix(MatrixView(a.data(), size, size, DType::kBf16), true);
    auto hb = client->UploadMatrix(MatrixView(b.data(), size, size, DType::kBf16), true);
    const absl::Time t1 = absl::Now();
    if (!ha.ok() || !hb.ok()) {
      std::fprintf(stderr, "upload: %s\n", (ha.ok() ? hb : ha).status().ToString().c_str());
      std::exit(1);
    }
    v1::GemmRequest request;
    if (absl::Status st = AddProblem(&request, *ha, *hb); !st.ok()) {
      std::fprintf(stderr, "AddProblem: %s\n", st.ToString().c_str());
      std::exit(1);
    }
    request.set_keep_results(true);
    auto response = client->Gemm(request);
    const absl::Time t2 = absl::Now();
    if (!response.ok()) {
      std::fprintf(stderr, "gemm: %s\n", response.status().ToString().c_str());
      std::exit(1);
    }
    const std::string handle = response->results(0).handle();
    absl::Status st = client->DownloadMatrix(handle, d.data(), d.size());
    const absl::Time t3 = absl::Now();
    for (const std::string& h : {ha->handle, hb->handle, handle})
      client->ReleaseMatrix(h).IgnoreError();
    const absl::Time t4 = absl::Now();
    if (!st.ok()) {
      std::fprintf(stderr, "download: %s\n", st.ToString().c_str());
      std::exit(1);
    }
    if (r == 0) continue;
    up_s.push_back(absl::ToDoubleSeconds(t1 - t0));
    gemm_s.push_back(absl::ToDoubleSeconds(t2 - t1));
    down_s.push_back(absl::ToDoubleSeconds(t3 - t2));
    release_s.push_back(absl::ToDoubleSeconds(t4 - t3));
    total_s.push_back(absl::ToDoubleSeconds(t4 - t0));
    server_total_s.push_back(response->timing().total_ns() / 1e9);
  }
  std::printf("breakdown %d^3 (ms, medians): upload A+B (one after the other) %.2f | Gemm call "
              "%.2f (server total %.2f) | download D %.2f | 3 releases %.2f | sum %.2f\n",
              size, Median(up_s) * 1e3, Median(gemm_s) * 1e3, Median(server_total_s) * 1e3,
              Median(down_s) * 1e3, Median(release_s) * 1e3, Median(total_s) * 1e3);
}

int Main() {
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.backend = absl::GetFlag(FLAGS_backend);
  options.limits.max_matrix_bytes = uint64_t{4} << 30;
  options.limits.max_resident_bytes = uint64_t{32} << 30;
  options.limits.max_inflight_bytes = uint64_t{16} << 30;
  options.http2 = TuningFromFlags();
  auto server = GemmServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  bench::EchoServer echo(kMaxMessage, TuningFromFlags().ChannelArgs());
  std::printf("transfer_bench: backend %s, loopback, %u hardware threads, http2 frame %d "
              "window %d write buffer %d (0 = gRPC default)\n",
              (*server)->backend().backend.c_str(), std::thread::hardware_concurrency(),
              options.http2.max_frame_bytes, options.http2.stream_window_bytes,
              options.http2.write_buffer_bytes);
  SingleCase((*server)->port(), echo.port());
  ParallelCase((*server)->port(), echo.port());
  for (int size : Ints(absl::GetFlag(FLAGS_gemm_sizes))) {
    GemmCase((*server)->port(), size);
    GemmBreakdown((*server)->port(), size);
  }
  return 0;
}

}  // namespace
}  // namespace gemm

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gemm::Main();
}
