#include <cstdint>
#include <limits>
#include <type_traits>

#define OVL_LIKELY(x) __builtin_expect(!!(x), 1)
#define OVL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define OVL_EXPORT extern "C" __attribute__((visibility("default")))
#define OVL_FN static inline
#define OVL_COLD __attribute__((cold, noinline)) static

// The first fault of one worker (C++: of one call of ovl_run, one contiguous chunk of workers).
// The caller passes a zeroed struct; code 0: no fault, 1: index out of bounds, 2: non-positive
// range step, 3: a while loop ran past OVL_WHILE_LIMIT iterations.
#ifndef OVL_WHILE_LIMIT
#define OVL_WHILE_LIMIT 4294967296ULL  // ovl_ir::limits::WHILE_ITERATIONS; 0: no bound
#endif
struct ovl_status {
  int32_t code;
  int32_t expression;   // the READ/WRITE or RANGE expression
  int32_t tensor_kind;  // ir::TensorKind: 1 input, 2 output, 3 local
  int32_t tensor_index;
  int32_t axis;
  int32_t index_signed; // 1: index_bits holds an int64_t, 0: a uint64_t
  uint64_t index_bits;
  uint64_t size;        // the size of the dimension (code 3: the bound)
  int64_t worker;       // row-major flattened worker index
  int64_t step;         // the RANGE step
};

namespace ovl {

// Facts about an integer type, as the CUDA dialect (which has no standard headers) defines
// them too: the unsigned type its arithmetic wraps in (at least as wide as `unsigned`, so
// 8/16-bit types do not promote to a signed int), signedness and range.
template <class T> struct traits {
  typedef typename std::conditional<(sizeof(T) < sizeof(unsigned)), unsigned,
                                    typename std::make_unsigned<T>::type>::type uw;
  static constexpr bool is_signed = std::is_signed<T>::value;
  static constexpr T lo = std::numeric_limits<T>::min();
  static constexpr T hi = std::numeric_limits<T>::max();
};

// `c ? y : x` on floats, without control flow. GCC (with -ftrapping-math, the default) does not
// if-convert a branch on a float comparison, so a `?:` on floats inside a loop keeps the loop
// from vectorizing; a select on the bits does not (it compiles to a compare and a blend).
template <class F> OVL_FN F pick(bool c, F y, F x) {
  typedef typename std::conditional<sizeof(F) == 4, uint32_t, uint64_t>::type U;
  U by, bx;
  __builtin_memcpy(&by, &y, sizeof by);
  __builtin_memcpy(&bx, &x, sizeof bx);
  const U m = (U)0 - (U)c;
  const U r = (by & m) | (bx & ~m);
  F f;
  __builtin_memcpy(&f, &r, sizeof f);
  return f;
}

// Integer arithmetic wraps (two's complement): it is done in traits<T>::uw and converted back
// modulo 2^N, so nothing depends on -fwrapv.
template <class T> using uw = typename traits<T>::uw;

template <class T> OVL_FN T add(T a, T b) { return (T)((uw<T>)a + (uw<T>)b); }
template <class T> OVL_FN T sub(T a, T b) { return (T)((uw<T>)a - (uw<T>)b); }
template <class T> OVL_FN T mul(T a, T b) { return (T)((uw<T>)a * (uw<T>)b); }
template <class T> OVL_FN T neg(T a) { return (T)((uw<T>)0 - (uw<T>)a); }
template <class T> OVL_FN T bnot(T a) { return (T)(~(uw<T>)a); }
template <class T> OVL_FN T band(T a, T b) { return (T)((uw<T>)a & (uw<T>)b); }
template <class T> OVL_FN T bor(T a, T b) { return (T)((uw<T>)a | (uw<T>)b); }
template <class T> OVL_FN T bxor(T a, T b) { return (T)((uw<T>)a ^ (uw<T>)b); }
// Shifts by the count modulo the width (its low bits); SHR is arithmetic on signed types (the
// sign fills: `>>` on a negative value, arithmetic in C++20 and in GCC, Clang and NVCC before).
template <class T> OVL_FN T shl(T a, T n) {
  return (T)((uw<T>)a << ((unsigned)n & (unsigned)(sizeof(T) * 8 - 1)));
}
template <class T> OVL_FN T shr(T a, T n) {
  const unsigned k = (unsigned)n & (unsigned)(sizeof(T) * 8 - 1);
  if constexpr (traits<T>::is_signed) {
    return (T)(a >> k);
  } else {
    return (T)((uw<T>)a >> k);
  }
}
template <class T> OVL_FN T iabs(T a) { return a < 0 ? neg(a) : a; }

// x / 0 == 0, x % 0 == 0, MIN / -1 == MIN, MIN % -1 == 0; otherwise C's (truncating) / and %.
template <class T> OVL_FN T div(T a, T b) {
  if (b == 0) return 0;
  if constexpr (traits<T>::is_signed) {
    if (b == (T)-1) return neg(a);
  }
  return (T)(a / b);
}
template <class T> OVL_FN T rem(T a, T b) {
  if (b == 0) return 0;
  if constexpr (traits<T>::is_signed) {
    if (b == (T)-1) return 0;
  }
  return (T)(a % b);
}
template <class T> OVL_FN T imin(T a, T b) { return b < a ? b : a; }
template <class T> OVL_FN T imax(T a, T b) { return b > a ? b : a; }

// min/max of floats ignore a NaN operand (C's fmin/fmax, Rust's f32::min/max); equal operands
// (+0 and -0) give the first one, as Rust's min/max do on x86-64.
// (b when a is NaN or b is smaller; a when b is NaN: a comparison with NaN is false.)
template <class F> OVL_FN F fmin(F a, F b) { return pick((a != a) | (b < a), b, a); }
template <class F> OVL_FN F fmax(F a, F b) { return pick((a != a) | (b > a), b, a); }
// The update of a MIN/MAX reduction lane: the same as fmin/fmax when the lane `a` is not NaN,
// which a lane never is (it starts at +-inf and takes only a value that compares smaller or
// larger). Written as a conditional so that the compiler uses the CPU's min/max instruction
// (x86 minps/maxps return their second operand on a tie or NaN, exactly this): the loop-carried
// chain is one instruction instead of two compares, an or and a blend.
template <class F> OVL_FN F lane_min(F a, F b) { return b < a ? b : a; }
template <class F> OVL_FN F lane_max(F a, F b) { return b > a ? b : a; }

// Rust's `as` from a float to an integer: saturating, NaN -> 0.
template <class I, class F> OVL_FN I f2i(F x) {
  constexpr F lo = (F)traits<I>::lo;
  constexpr F hi = traits<I>::is_signed ? -(F)traits<I>::lo
                                        : (F)2 * (F)((traits<I>::hi >> 1) + 1);
  if (x != x) return 0;
  if (x >= hi) return traits<I>::hi;
  if (x <= lo) return traits<I>::lo;
  return (I)x;
}

template <class T> OVL_FN void fill(T* p, int64_t n, T v) { for (int64_t i = 0; i < n; ++i) p[i] = v; }

// Whether index i lies in [0, n): one unsigned comparison for any integer index type.
template <class I> OVL_FN bool inb(I i, uint64_t n) {
  if constexpr (traits<I>::is_signed) {
    return (uint64_t)(int64_t)i < n;
  } else {
    return (uint64_t)i < n;
  }
}

template <class I>
OVL_COLD void oob(ovl_status* s, int32_t e, int32_t kind, int32_t t, int32_t axis, I i,
                  uint64_t size, int64_t w) {
  if (s->code != 0) return;
  s->code = 1;
  s->expression = e;
  s->tensor_kind = kind;
  s->tensor_index = t;
  s->axis = axis;
  if constexpr (traits<I>::is_signed) {
    s->index_signed = 1;
    s->index_bits = (uint64_t)(int64_t)i;
  } else {
    s->index_signed = 0;
    s->index_bits = (uint64_t)i;
  }
  s->size = size;
  s->worker = w;
}

OVL_COLD void bad_step(ovl_status* s, int32_t e, int64_t step, int64_t w) {
  if (s->code != 0) return;
  s->code = 2;
  s->expression = e;
  s->step = step;
  s->worker = w;
}

OVL_COLD void while_limit(ovl_status* s, int32_t e, int64_t w) {
  if (s->code != 0) return;
  s->code = 3;
  s->expression = e;
  s->size = OVL_WHILE_LIMIT;
  s->worker = w;
}

// Math functions: f32 math is computed in f32 (sinf, ...), f64 in f64, by the C library (or
// inline instructions for sqrt, fabs, ceil, floor, round, fma) exactly as std::sin etc. do;
// except f32 exp, tanh and sigmoid, defined below so that they vectorize.
#define OVL_MATH1(name)                                                   \
  static inline float name(float x) { return __builtin_##name##f(x); }   \
  static inline double name(double x) { return __builtin_##name(x); }
#define OVL_MATH2(name)                                                            \
  static inline float name(float x, float y) { return __builtin_##name##f(x, y); } \
  static inline double name(double x, double y) { return __builtin_##name(x, y); }
OVL_MATH1(fabs) OVL_MATH1(sqrt) OVL_MATH1(exp2) OVL_MATH1(expm1)
OVL_MATH1(log) OVL_MATH1(log2) OVL_MATH1(log10) OVL_MATH1(log1p)
OVL_MATH1(sin) OVL_MATH1(cos) OVL_MATH1(tan) OVL_MATH1(asin) OVL_MATH1(acos) OVL_MATH1(atan)
OVL_MATH1(sinh) OVL_MATH1(cosh) OVL_MATH1(erf)
OVL_MATH1(ceil) OVL_MATH1(floor) OVL_MATH1(round)
OVL_MATH2(pow) OVL_MATH2(atan2) OVL_MATH2(fmod)
// Vectorizable f32 exp, tanh and sigmoid: the C library's expf and tanhf are scalar calls that
// GCC cannot vectorize, which made fused elementwise kernels compute-bound. These are branch-free,
// and NaN passes through their clamps (a comparison with NaN is false, so `pick(x < lo, lo, x)`
// keeps x). Rounding to an integer adds and subtracts 1.5 * 2^23 and reads n from the low bits of the
// sum, so no float is ever converted to an int (undefined in C++ for NaN).
//   exp: the classic Cephes reduction by n*ln2 (ln2 split in two) and polynomial (Horner steps
//     as explicit FMAs), scaled by two powers of two so that subnormal and infinite results come
//     out right. At most 1 ulp from the correctly rounded value.
//   tanh: an odd rational minimax approximation x*P(x^2)/Q(x^2) (degrees 4 and 4 in x^2) on
//     |x| <= 9.02, beyond which tanh rounds to +-1; coefficients fitted in f32 by
//     ovl-codegen/tools/fit_tanh.py. At most 6 ulp from the correctly rounded value over every
//     f32 (exhaustive check), and about three times faster than an exp-based tanh.
//   sigmoid: 1/(1 + e^-x) with e^-x computed where it matters: below -87 it is under 2^-125 and
//     1 + it rounds to 1; from 88.72 up it overflows to inf and the result is 0, as the f32
//     formula gives. At most 4 ulp from the f32 formula with the C library's expf (exhaustive).
static constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23
static inline uint32_t f32_to_bits(float f) { uint32_t b; __builtin_memcpy(&b, &f, sizeof b); return b; }
static inline float pow2_bits(uint32_t biased) {  // 2^(biased - 127) for biased in [1, 254]; 0 for 0
  uint32_t bits = biased << 23;
  float s;
  __builtin_memcpy(&s, &bits, sizeof s);
  return s;
}
// e^r for |r| <= ln2/2 (Cephes' expf polynomial).
static inline float exp_reduced(float r) {
  float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = __builtin_fmaf(p, r, 1.3981999507e-3f);
  p = __builtin_fmaf(p, r, 8.3334519073e-3f);
  p = __builtin_fmaf(p, r, 4.1665795894e-2f);
  p = __builtin_fmaf(p, r, 1.6666665459e-1f);
  p = __builtin_fmaf(p, r, 5.0000001201e-1f);
  p = __builtin_fmaf(p, r2, r);
  return p + 1.0f;
}
static inline float exp(float x) {
  float xc = pick(x < -104.0f, -104.0f, x);
  xc = pick(xc > 89.0f, 89.0f, xc);
  float k = xc * 1.44269504088896341f + kRoundMagic;  // n = round(x / ln2) in the low bits
  float n = k - kRoundMagic;
  float r = __builtin_fmaf(n, -0.693359375f, xc);
  r = __builtin_fmaf(n, 2.12194440e-4f, r);
  int32_t ni = (int32_t)(f32_to_bits(k) - f32_to_bits(kRoundMagic));  // in [-150, 129]
  int32_t half = ni >> 1;  // two factors keep each in range, so results may be subnormal or inf
  return exp_reduced(r) * pow2_bits((uint32_t)(half + 127)) * pow2_bits((uint32_t)(ni - half + 127));
}
static inline float tanh(float x) {
  float a = pick(x > 9.02f, 9.02f, x);
  a = pick(a < -9.02f, -9.02f, a);
  float t = a * a;
  float p = 1.338452638e-08f;
  p = __builtin_fmaf(p, t, 2.063600004e-05f);
  p = __builtin_fmaf(p, t, 3.497468773e-03f);
  p = __builtin_fmaf(p, t, 1.338269711e-01f);
  p = __builtin_fmaf(p, t, 1.0f);
  float q = 7.790347922e-07f;
  q = __builtin_fmaf(q, t, 3.288535227e-04f);
  q = __builtin_fmaf(q, t, 2.588440478e-02f);
  q = __builtin_fmaf(q, t, 4.671601653e-01f);
  q = __builtin_fmaf(q, t, 1.0f);
  return a * p / q;
}
static inline float sigmoid(float x) {
  float t = -x;
  t = pick(t < -87.0f, -87.0f, t);
  t = pick(t > 89.0f, 89.0f, t);
  float k = t * 1.44269504088896341f + kRoundMagic;
  float n = k - kRoundMagic;
  float r = __builtin_fmaf(n, -0.693359375f, t);
  r = __builtin_fmaf(n, 2.12194440e-4f, r);
  uint32_t n1 = f32_to_bits(k) - f32_to_bits(kRoundMagic) + 126u;  // n - 1 + 127: 0 (e = 0) to 254
  float e = (exp_reduced(r) * 2.0f) * pow2_bits(n1);
  return 1.0f / (1.0f + e);
}
static inline double exp(double x) { return __builtin_exp(x); }
static inline double tanh(double x) { return __builtin_tanh(x); }
static inline float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
static inline double fma(double a, double b, double c) { return __builtin_fma(a, b, c); }
template <class F> static inline bool isnan(F x) { return __builtin_isnan(x); }
template <class F> static inline bool isinf(F x) { return __builtin_isinf(x) != 0; }
template <class F> static inline bool isfinite(F x) { return __builtin_isfinite(x); }
template <class F> static inline F rsqrt(F x) { return (F)1 / sqrt(x); }
static inline double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static inline float f32_bits(uint32_t b) { float f; __builtin_memcpy(&f, &b, sizeof f); return f; }
static inline double f64_bits(uint64_t b) { double f; __builtin_memcpy(&f, &b, sizeof f); return f; }

// The half types (`proto/ovl.proto`, "Half types"): an element in memory is 2 bytes of bits
// (`f16`, `bf16`; layout-compatible with CUDA's __half and __nv_bfloat16); a value in the
// generated code is the f32 holding it exactly, so operations chain in f32 registers:
// `*_value` widens bits (exact; a NaN gets its quiet bit), `round_*` rounds an f32 once to
// nearest even to a half value (subnormals kept, -0 kept, overflow to +-inf, a NaN keeps its sign
// and upper payload bits with the quiet bit set: ovl_ir::half_float, the `half` crate's
// conversions, bit for bit), `*_bits` gives the bits of a half value. The GPU converts f16 with
// its cvt instructions (NaNs by bits); the CPU converts by bits and masks, branch-free on 32-bit
// lanes, which GCC vectorizes for AVX-512 and AVX2 alike (its F16C forms for _Float16 stay
// scalar); bf16 converts by bits everywhere (x86's VCVTNEPS2BF16 flushes subnormals to zero,
// which the semantics do not allow).
struct f16 { uint16_t bits; };
struct bf16 { uint16_t bits; };
// f16 widening scales the bits by 2^112 (exact, subnormals included); rounding to f16 bits
// follows the three cases (overflow and NaN, subnormal by an f32 addition that rounds to nearest
// even, normal by integer rounding) selected by masks.
OVL_FN float widen_f16_bits(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, em = h & 0x7fffu;
  const uint32_t scaled = f32_to_bits(f32_bits(em << 13) * f32_bits(0x77800000u));
  const uint32_t special = 0x7f800000u | ((em & 0x3ffu) << 13) | ((uint32_t)(em > 0x7c00u) << 22);
  return f32_bits(sign | (em >= 0x7c00u ? special : scaled));
}
OVL_FN uint16_t narrow_f16_bits(float v) {
  const uint32_t u = f32_to_bits(v), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  const uint32_t special = a > 0x7f800000u ? 0x7e00u | ((a & 0x7fffffu) >> 13) : 0x7c00u;
  const uint32_t sub = f32_to_bits(f32_bits(a) + f32_bits(0x3f000000u)) - 0x3f000000u;
  const uint32_t norm = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
  return (uint16_t)(sign | (a >= 0x47800000u ? special : (a < 0x38800000u ? sub : norm)));
}
#if defined(__CUDA_ARCH__)
OVL_FN float f16_value(uint16_t h) {
  if ((h & 0x7fffu) > 0x7c00u) return widen_f16_bits(h);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
OVL_FN uint16_t f16_bits(float v) {
  if (v != v) return narrow_f16_bits(v);
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}
OVL_FN float round_f16(float v) { return f16_value(f16_bits(v)); }
#else
#if defined(__AVX512F__)
OVL_FN float f16_value(uint16_t h) { return widen_f16_bits(h); }
#else
// Without AVX-512 GCC's blend of the scaled product above ran 3 times slower than this integer
// form: a normal value rebiases its exponent (+112), a subnormal one is its integer times 2^-24.
OVL_FN float f16_value(uint16_t h) {
  const uint32_t sign = ((uint32_t)h & 0x8000u) << 16, em = h & 0x7fffu;
  const uint32_t norm = (em << 13) + 0x38000000u;
  const uint32_t sub = f32_to_bits((float)(int32_t)em * 0x1p-24f);
  const uint32_t special = 0x7f800000u | ((em & 0x3ffu) << 13) | ((uint32_t)(em > 0x7c00u) << 22);
  const uint32_t is_special = 0u - (uint32_t)(em >= 0x7c00u), is_sub = 0u - (uint32_t)(em < 0x400u);
  return f32_bits(sign | (special & is_special) | (((sub & is_sub) | (norm & ~is_sub)) & ~is_special));
}
#endif
// The bits of an f16 value (exact in f16, as every half value is: no rounding left to do): a
// normal one rebiases its exponent (-112), a subnormal one counts its steps of 2^-24 by an f32
// addition of 0.5 (exact), infinities and NaNs (already quiet) keep their upper fraction bits.
OVL_FN uint16_t f16_bits(float v) {
  const uint32_t u = f32_to_bits(v), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  const uint32_t norm = (a - 0x38000000u) >> 13;
  const uint32_t sub = f32_to_bits(f32_bits(a) + 0.5f) - 0x3f000000u;
  const uint32_t special = 0x7c00u | ((a & 0x7fffffu) >> 13);
  return (uint16_t)(sign | (a >= 0x7f800000u ? special : (a < 0x38800000u ? sub : norm)));
}
// f16_value(f16_bits(v)) without leaving 32-bit lanes: a normal result rounds the f32 bits at
// bit 13 (integer rounding; a carry into the exponent is right, and at 65520 it reaches the
// overflow test), a subnormal one is (|v| + 0.5) - 0.5 in f32 (a multiple of 2^-24, rounded to
// nearest even by the addition), a NaN keeps its upper 10 fraction bits and gets its quiet bit.
OVL_FN float round_f16(float v) {
  const uint32_t u = f32_to_bits(v), sign = u & 0x80000000u, a = u & 0x7fffffffu;
  const uint32_t norm = (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u;
  const uint32_t sub = f32_to_bits((f32_bits(a) + 0.5f) - 0.5f);
  const uint32_t is_sub = 0u - (uint32_t)(a < 0x38800000u);
  const uint32_t is_inf = 0u - (uint32_t)(norm >= 0x47800000u);
  const uint32_t is_nan = 0u - (uint32_t)(a > 0x7f800000u);
  const uint32_t finite = (sub & is_sub) | (((norm & ~is_inf) | (0x7f800000u & is_inf)) & ~is_sub);
  return f32_bits(sign | (((a | 0x400000u) & 0xffffe000u & is_nan) | (finite & ~is_nan)));
}
#endif
// bf16 is the upper half of an f32: widening is a shift (and the quiet bit of a NaN), rounding an
// add of 0x7fff plus the lowest kept bit, the bits of a bf16 value its f32's upper half.
OVL_FN float bf16_value(uint16_t b) {
  const uint32_t nan = (uint32_t)((b & 0x7fffu) > 0x7f80u);
  return f32_bits(((uint32_t)b << 16) | (nan << 22));
}
OVL_FN uint16_t bf16_bits(float v) { return (uint16_t)(f32_to_bits(v) >> 16); }
OVL_FN float round_bf16(float v) {
  const uint32_t x = f32_to_bits(v);
  const uint32_t nan = 0u - (uint32_t)((x & 0x7fffffffu) > 0x7f800000u);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) & 0xffff0000u;
  return f32_bits((((x | 0x400000u) & 0xffff0000u) & nan) | (rounded & ~nan));
}


}  // namespace ovl
