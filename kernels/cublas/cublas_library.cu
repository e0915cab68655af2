#include "kernels/cublas/cublas_library.h"

#include <dlfcn.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kernels/cublas/cublas_gemm.h"

namespace gemm_kernels {
namespace cublas {
namespace {

// Loads are serialized by `load_mu`; calls read `loaded` without a lock
// (it is written once, after the table is complete).
std::mutex load_mu;
std::atomic<const CublasApi*> loaded{nullptr};

}  // namespace

absl::StatusOr<const CublasApi*> OpenCublasApi(const std::string& library) {
  std::lock_guard<std::mutex> lock(load_mu);
  if (const CublasApi* api = loaded.load(std::memory_order_acquire)) {
    if (api->library == library) return api;
    return absl::FailedPreconditionError(absl::StrCat(
        "cuBLAS library ", library, ": this process already runs ", api->library));
  }
  // RTLD_LOCAL: the symbols serve this table only, not later lookups by
  // name elsewhere in the process. RTLD_NOW: a library missing one of its
  // own dependencies fails here, not in the middle of a request.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load cuBLAS library ", library, ": ", why ? why : "unknown error"));
  }
  auto api = std::make_unique<CublasApi>();
  api->library = library;
#define GEMM_CUBLAS_RESOLVE(symbol)                                                       \
  api->symbol = reinterpret_cast<decltype(api->symbol)>(dlsym(handle, #symbol));          \
  if (api->symbol == nullptr) {                                                           \
    dlclose(handle);                                                                      \
    return absl::FailedPreconditionError(                                                 \
        absl::StrCat("cuBLAS library ", library, " has no entry point " #symbol));        \
  }
  GEMM_CUBLAS_FUNCTIONS(GEMM_CUBLAS_RESOLVE)
#undef GEMM_CUBLAS_RESOLVE
  // Never closed: handles, algorithms and descriptors made through it live
  // as long as the process may use them.
  const CublasApi* ready = api.release();
  loaded.store(ready, std::memory_order_release);
  return ready;
}

const CublasApi& Api() { return *loaded.load(std::memory_order_acquire); }

std::string DefaultCublasLibrary() { return absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR); }

absl::Status LoadCublas(const std::string& library) {
  return OpenCublasApi(library).status();
}

bool CublasLoaded() { return loaded.load(std::memory_order_acquire) != nullptr; }

}  // namespace cublas
}  // namespace gemm_kernels
