#include "common/dtype_x86.h"

#include <cstdint>
#include <cstring>

#include "common/dtype.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GEMM_DTYPE_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace gemm::dtype_internal {

#if GEMM_DTYPE_X86

// Only these functions use AVX2/F16C instructions; the attribute lets the
// compiler emit them without -mavx2 for the whole binary.
#define GEMM_AVX2_F16C __attribute__((target("avx2,f16c")))

bool X86ConversionsSupported() {
  // F16C is read from CPUID leaf 1 (ECX bit 29) rather than through
  // __builtin_cpu_supports, whose "f16c" name clang 14 does not know.
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool f16c = (ecx & (1u << 29)) != 0;
  return f16c && __builtin_cpu_supports("avx2");
}

namespace {

// Scalar conversion of the elements [i, n) that do not fill a vector.
void HalfTail(const unsigned char* src, float* dst, size_t i, size_t n) {
  for (; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, src + 2 * i, 2);
    dst[i] = HalfToFloat(v);
  }
}

void Bf16Tail(const unsigned char* src, float* dst, size_t i, size_t n) {
  for (; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, src + 2 * i, 2);
    dst[i] = Bf16ToFloat(v);
  }
}

template <uint16_t (*Convert)(float)>
void NarrowTail(const float* src, unsigned char* dst, size_t i, size_t n) {
  for (; i < n; ++i) {
    const uint16_t v = Convert(src[i]);
    std::memcpy(dst + 2 * i, &v, 2);
  }
}

// Eight 32-bit lanes, each holding a value below 2^16, packed in order into
// eight 16-bit lanes.
GEMM_AVX2_F16C inline __m128i Pack32To16(__m256i v) {
  const __m256i packed = _mm256_packus_epi32(v, v);  // [0..3 0..3 | 4..7 4..7]
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

}  // namespace

GEMM_AVX2_F16C void HalfToFloatX86(const void* src, float* dst, size_t n) {
  const auto* bytes = static_cast<const unsigned char*>(src);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fff);
  const __m256i inf_half = _mm256_set1_epi32(0x7c00);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + 2 * i));
    __m256 f = _mm256_cvtph_ps(h);
    // vcvtph2ps sets the quiet bit of a signaling NaN; the scalar conversion
    // (and the GPU) keep the payload as it is. NaNs are rare: fix them up
    // only when there is one.
    const __m256i wide = _mm256_cvtepu16_epi32(h);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(wide, abs_mask), inf_half);
    if (!_mm256_testz_si256(nan, nan)) {
      const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(wide, _mm256_set1_epi32(0x8000)), 16);
      const __m256i man = _mm256_slli_epi32(_mm256_and_si256(wide, _mm256_set1_epi32(0x3ff)), 13);
      const __m256i bits =
          _mm256_or_si256(_mm256_or_si256(sign, man), _mm256_set1_epi32(0x7f800000));
      f = _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(nan));
    }
    _mm256_storeu_ps(dst + i, f);
  }
  HalfTail(bytes, dst, i, n);
}

GEMM_AVX2_F16C void FloatToHalfX86(const float* src, void* dst, size_t n) {
  auto* bytes = static_cast<unsigned char*>(dst);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_loadu_ps(src + i);
    // Immediate rounding mode: nearest even, whatever MXCSR says.
    __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT);
    // vcvtps2ph keeps the top of a NaN's payload; the scalar conversion
    // returns the canonical quiet NaN with the sign kept.
    const __m256i u = _mm256_castps_si256(f);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    if (!_mm256_testz_si256(nan, nan)) {
      const __m256i canonical = _mm256_or_si256(
          _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000)),
          _mm256_set1_epi32(0x7e00));
      h = Pack32To16(_mm256_blendv_epi8(_mm256_cvtepu16_epi32(h), canonical, nan));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes + 2 * i), h);
  }
  NarrowTail<FloatToHalf>(src, bytes, i, n);
}

GEMM_AVX2_F16C void Bf16ToFloatX86(const void* src, float* dst, size_t n) {
  const auto* bytes = static_cast<const unsigned char*>(src);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + 2 * i));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + 2 * i + 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_slli_epi32(_mm256_cvtepu16_epi32(lo), 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 8),
                        _mm256_slli_epi32(_mm256_cvtepu16_epi32(hi), 16));
  }
  Bf16Tail(bytes, dst, i, n);
}

namespace {

// Eight fp32 values as bf16 in the low halves of 32-bit lanes: round to
// nearest even by adding 0x7fff plus the lowest kept bit, and a NaN becomes
// its top half with the quiet bit set (adding could carry it into infinity).
GEMM_AVX2_F16C inline __m256i FloatToBf16Lanes(__m256i u) {
  const __m256i top = _mm256_srli_epi32(u, 16);
  const __m256i lsb = _mm256_and_si256(top, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(top, _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

}  // namespace

GEMM_AVX2_F16C void FloatToBf16X86(const float* src, void* dst, size_t n) {
  auto* bytes = static_cast<unsigned char*>(dst);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = FloatToBf16Lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m256i b =
        FloatToBf16Lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
    // packus interleaves 128-bit halves: [a0..3 b0..3 | a4..7 b4..7].
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bytes + 2 * i), packed);
  }
  NarrowTail<FloatToBf16>(src, bytes, i, n);
}

#else  // !GEMM_DTYPE_X86

bool X86ConversionsSupported() { return false; }
// Never called (X86ConversionsSupported() is false); defined so that the
// library links on every architecture.
void HalfToFloatX86(const void*, float*, size_t) {}
void FloatToHalfX86(const float*, void*, size_t) {}
void Bf16ToFloatX86(const void*, float*, size_t) {}
void FloatToBf16X86(const float*, void*, size_t) {}

#endif  // GEMM_DTYPE_X86

}  // namespace gemm::dtype_internal
