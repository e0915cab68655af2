#include "client/targets.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gemm {
namespace client_internal {

std::vector<std::string> SplitAddressList(const std::string& target) {
  for (const char* scheme : {"ipv4:", "ipv6:"}) {
    if (target.rfind(scheme, 0) != 0) continue;
    std::vector<std::string> out;
    for (absl::string_view a : absl::StrSplit(target.substr(5), ',', absl::SkipEmpty()))
      out.push_back(absl::StrCat(scheme, a));
    return out;
  }
  return {target};
}

bool ParseDnsTarget(const std::string& target, std::string* name, std::string* port) {
  if (target.rfind("dns:", 0) != 0) return false;
  std::string rest = target.substr(4);
  if (rest.rfind("//", 0) == 0) {
    const size_t slash = rest.find('/', 2);
    if (slash == std::string::npos) return false;
    rest = rest.substr(slash + 1);
  }
  const size_t colon = rest.rfind(':');
  if (rest.empty()) return false;
  if (colon == std::string::npos || rest.back() == ']') {
    *name = rest;
    *port = "443";
  } else {
    *name = rest.substr(0, colon);
    *port = rest.substr(colon + 1);
  }
  if (name->size() >= 2 && name->front() == '[' && name->back() == ']')
    *name = name->substr(1, name->size() - 2);
  return !name->empty();
}

absl::StatusOr<std::vector<std::string>> ResolveName(const std::string& name,
                                                     const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(name.c_str(), port.c_str(), &hints, &found); rc != 0)
    return absl::UnavailableError(
        absl::StrCat("resolving \"", name, "\": ", gai_strerror(rc)));
  std::vector<std::string> out;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char host[NI_MAXHOST];
    if (getnameinfo(a->ai_addr, a->ai_addrlen, host, sizeof(host), nullptr, 0,
                    NI_NUMERICHOST) != 0)
      continue;
    out.push_back(a->ai_family == AF_INET6 ? absl::StrCat("ipv6:[", host, "]:", port)
                                           : absl::StrCat("ipv4:", host, ":", port));
  }
  freeaddrinfo(found);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty()) return absl::UnavailableError(absl::StrCat("\"", name, "\" has no address"));
  return out;
}

std::string_view HandleInstance(std::string_view handle) {
  auto hex = [](std::string_view s) {
    for (char c : s)
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    return true;
  };
  if (handle.size() != 49 || handle[16] != '-') return {};
  if (!hex(handle.substr(0, 16)) || !hex(handle.substr(17))) return {};
  return handle.substr(0, 16);
}

}  // namespace client_internal
}  // namespace gemm
