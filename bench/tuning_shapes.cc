#include "bench/tuning_shapes.h"

#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gemm_bench {
namespace {

using gemm_kernels::DataType;
using gemm_kernels::Layout;

absl::Status Bad(int line, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("shapes line ", line, ": ", what));
}

bool Positive(const std::string& s, int64_t* out) {
  return absl::SimpleAtoi(s, out) && *out >= 1;
}

// A_FORMATxB_FORMAT/SCALES: e4m3xe4m3, e4m3xe5m2 or e5m2xe4m3, then tensor
// or channel; bf16 outputs.
bool ParseFp8(const std::string& v, TuningShape* s) {
  const std::vector<std::string> parts = absl::StrSplit(v, '/');
  if (parts.size() != 2) return false;
  if (parts[0] == "e4m3xe4m3") {
    s->dtype = s->b_dtype = DataType::kFp8E4m3;
  } else if (parts[0] == "e4m3xe5m2") {
    s->dtype = DataType::kFp8E4m3;
    s->b_dtype = DataType::kFp8E5m2;
  } else if (parts[0] == "e5m2xe4m3") {
    s->dtype = DataType::kFp8E5m2;
    s->b_dtype = DataType::kFp8E4m3;
  } else {
    return false;
  }
  if (parts[1] != "tensor" && parts[1] != "channel") return false;
  s->scales = parts[1] == "tensor" ? gemm_kernels::ScaleMode::kTensor
                                   : gemm_kernels::ScaleMode::kChannel;
  s->out_dtype = DataType::kBf16;
  return true;
}

}  // namespace

absl::StatusOr<std::vector<TuningShape>> ParseTuningShapes(const std::string& text) {
  std::vector<TuningShape> out;
  std::set<std::string> names;
  int line_no = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_no;
    std::vector<std::string> t = absl::StrSplit(raw, ' ', absl::SkipWhitespace());
    if (t.empty() || t[0][0] == '#') continue;
    TuningShape s;
    s.name = t[0];
    if (!names.insert(s.name).second) return Bad(line_no, absl::StrCat("name \"", s.name, "\" used twice"));
    if (t.size() < 3) return Bad(line_no, "expected NAME single|grouped DTYPE ...");
    if (t[1] != "single" && t[1] != "grouped") {
      return Bad(line_no, absl::StrCat("kind \"", t[1], "\" is not single or grouped"));
    }
    s.grouped = t[1] == "grouped";
    if (t[2] == "bf16" || t[2] == "fp16") {
      s.dtype = t[2] == "bf16" ? DataType::kBf16 : DataType::kFp16;
    } else if (t[2] == "tf32" || t[2] == "fp32") {
      s.dtype = DataType::kFp32;
      s.allow_tf32 = t[2] == "tf32";
    } else if (!ParseFp8(t[2], &s)) {
      return Bad(line_no, absl::StrCat("dtype \"", t[2],
                                       "\" is not bf16, fp16, tf32, fp32 or FP8 such as "
                                       "e4m3xe5m2/tensor"));
    }
    if (!::gemm::IsFp8(s.dtype)) {
      s.b_dtype = s.out_dtype = s.dtype;
    } else if (s.grouped) {
      return Bad(line_no, "FP8 shapes are single launches");
    }
    const char* names_single[] = {"M", "N", "K", "BATCH"};
    const char* names_grouped[] = {"COUNT", "M_LO", "M_HI", "N", "K", "SEED"};
    if (!s.grouped) {
      if (t.size() < 6 || t.size() > 8) return Bad(line_no, "expected NAME single DTYPE M N K [BATCH] [LAYOUT]");
      int64_t v[4] = {0, 0, 0, 1};
      size_t numbers = t.size() >= 7 && t[6].find_first_not_of("0123456789") == std::string::npos ? 4 : 3;
      for (size_t i = 0; i < numbers; ++i) {
        if (!Positive(t[3 + i], &v[i])) {
          return Bad(line_no, absl::StrCat(names_single[i], " \"", t[3 + i], "\" is not a positive integer"));
        }
      }
      s.m = v[0];
      s.n = v[1];
      s.k = v[2];
      s.batch = v[3];
      if (t.size() > 3 + numbers + 1) return Bad(line_no, "too many fields");
      if (t.size() == 3 + numbers + 1) {
        const std::string& l = t[3 + numbers];
        if (l.size() != 3 || l.find_first_not_of("RC") != std::string::npos) {
          return Bad(line_no, absl::StrCat("LAYOUT \"", l, "\" is not three letters R or C"));
        }
        Layout* fields[] = {&s.a, &s.b, &s.d};
        for (int i = 0; i < 3; ++i) *fields[i] = l[i] == 'R' ? Layout::kRowMajor : Layout::kColMajor;
        if (::gemm::IsFp8(s.dtype) && (s.a != Layout::kRowMajor || s.b != Layout::kColMajor))
          return Bad(line_no, "FP8 operands are K-major: LAYOUT RCR or RCC");
      }
    } else {
      if (t.size() != 9) return Bad(line_no, "expected NAME grouped DTYPE COUNT M_LO M_HI N K SEED");
      int64_t v[6];
      for (int i = 0; i < 6; ++i) {
        if (!Positive(t[3 + i], &v[i])) {
          return Bad(line_no, absl::StrCat(names_grouped[i], " \"", t[3 + i], "\" is not a positive integer"));
        }
      }
      if (v[1] > v[2]) return Bad(line_no, "M_LO is above M_HI");
      if (v[0] > 100000 || v[2] > INT32_MAX || v[3] > INT32_MAX || v[4] > INT32_MAX) {
        return Bad(line_no, "COUNT above 100000 or a size above 2^31 - 1");
      }
      if (s.dtype == DataType::kFp32) return Bad(line_no, "grouped lists take bf16 or fp16");
      s.count = static_cast<int>(v[0]);
      s.m_lo = static_cast<int>(v[1]);
      s.m_hi = static_cast<int>(v[2]);
      s.n = v[3];
      s.k = v[4];
      s.seed = static_cast<uint64_t>(v[5]);
    }
    out.push_back(s);
  }
  if (out.empty()) return absl::InvalidArgumentError("shapes: the list holds no shape");
  return out;
}

const char* DefaultTuningShapes() {
  return
      "dense_bf16_4096        single bf16 4096 4096 4096\n"
      "dense_bf16_8192        single bf16 8192 8192 8192\n"
      "dense_fp16_4096        single fp16 4096 4096 4096\n"
      "dense_tf32_4096        single tf32 4096 4096 4096\n"
      "sk_bf16_3072           single bf16 3072 3072 3072\n"
      "sk_bf16_4224           single bf16 4224 4224 4224\n"
      "sk_bf16_1920x1920x8192 single bf16 1920 1920 8192\n"
      "skinny_bf16_7x8192     single bf16 7 8192 8192\n"
      "batched_bf16_128_x1024 single bf16 128 128 128 1024\n"
      "grouped_bf16_32        grouped bf16 32 16 2048 4096 2048 20261130\n"
      "fp8_e4m3_tensor_4096   single e4m3xe4m3/tensor 4096 4096 4096\n"
      "fp8_e4m3_tensor_8192   single e4m3xe4m3/tensor 8192 8192 8192\n"
      "fp8_e4m3xe5m2_channel_4096 single e4m3xe5m2/channel 4096 4096 4096\n";
}

}  // namespace gemm_bench
