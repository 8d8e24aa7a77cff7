typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;

#define OVL_LIKELY(x) __builtin_expect(!!(x), 1)
#define OVL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define OVL_FN __device__ __forceinline__
#define OVL_COLD __device__ __noinline__

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

// The launch's status in device memory, zeroed before the launch: the fault of the first
// faulting worker in row-major order, guarded by a spin lock (taken only on the fault path).
struct ovl_cuda_status {
  ovl_status first;
  uint32_t lock;
  uint32_t pad;
};

namespace ovl {

template <class T> struct traits;
#define OVL_TRAITS(T, U, S, LO, HI)                 \
  template <> struct traits<T> {                     \
    typedef U uw;                                    \
    static constexpr bool is_signed = S;             \
    static constexpr T lo = LO;                      \
    static constexpr T hi = HI;                      \
  };
OVL_TRAITS(int8_t, uint32_t, true, (int8_t)-128, (int8_t)127)
OVL_TRAITS(int16_t, uint32_t, true, (int16_t)-32768, (int16_t)32767)
OVL_TRAITS(int32_t, uint32_t, true, (int32_t)(-2147483647 - 1), (int32_t)2147483647)
OVL_TRAITS(int64_t, uint64_t, true, (int64_t)(-9223372036854775807LL - 1), (int64_t)9223372036854775807LL)
OVL_TRAITS(uint8_t, uint32_t, false, (uint8_t)0, (uint8_t)255)
OVL_TRAITS(uint16_t, uint32_t, false, (uint16_t)0, (uint16_t)65535)
OVL_TRAITS(uint32_t, uint32_t, false, 0u, 4294967295u)
OVL_TRAITS(uint64_t, uint64_t, false, 0ull, 18446744073709551615ull)

// `c ? y : x` on floats (the C++ dialect selects on the bits so that loops vectorize).
template <class F> OVL_FN F pick(bool c, F y, F x) { return c ? y : x; }

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

__device__ __forceinline__ float f32_bits(uint32_t b) { return __int_as_float((int)b); }
__device__ __forceinline__ double f64_bits(uint64_t b) { return __longlong_as_double((long long)b); }
__device__ __forceinline__ uint32_t f32_to_bits(float f) { return (uint32_t)__float_as_int(f); }

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


#define OVL_MATH1(name)                                                           \
  __device__ __forceinline__ float name(float x) { return ::name##f(x); }         \
  __device__ __forceinline__ double name(double x) { return ::name(x); }
#define OVL_MATH2(name)                                                                  \
  __device__ __forceinline__ float name(float x, float y) { return ::name##f(x, y); }    \
  __device__ __forceinline__ double name(double x, double y) { return ::name(x, y); }
OVL_MATH1(fabs) OVL_MATH1(sqrt) OVL_MATH1(exp) OVL_MATH1(exp2) OVL_MATH1(expm1)
OVL_MATH1(log) OVL_MATH1(log2) OVL_MATH1(log10) OVL_MATH1(log1p)
OVL_MATH1(sin) OVL_MATH1(cos) OVL_MATH1(asin) OVL_MATH1(acos) OVL_MATH1(atan)
OVL_MATH1(sinh) OVL_MATH1(cosh) OVL_MATH1(tanh) OVL_MATH1(erf)
OVL_MATH1(ceil) OVL_MATH1(floor) OVL_MATH1(round)
OVL_MATH2(fmod)
__device__ __forceinline__ float tan(float x) { return (float)::tan((double)x); }
__device__ __forceinline__ double tan(double x) { return ::tan(x); }
__device__ __forceinline__ float pow(float x, float y) { return (float)::pow((double)x, (double)y); }
__device__ __forceinline__ double pow(double x, double y) { return ::pow(x, y); }
__device__ __forceinline__ float atan2(float y, float x) { return (float)::atan2((double)y, (double)x); }
__device__ __forceinline__ double atan2(double y, double x) { return ::atan2(y, x); }
__device__ __forceinline__ float fma(float a, float b, float c) { return ::fmaf(a, b, c); }
__device__ __forceinline__ double fma(double a, double b, double c) { return ::fma(a, b, c); }
template <class F> __device__ __forceinline__ bool isnan(F x) { return x != x; }
__device__ __forceinline__ bool isinf(float x) { return ::fabsf(x) == f32_bits(0x7f800000u); }
__device__ __forceinline__ bool isinf(double x) { return ::fabs(x) == f64_bits(0x7ff0000000000000ull); }
__device__ __forceinline__ bool isfinite(float x) { return ::fabsf(x) < f32_bits(0x7f800000u); }
__device__ __forceinline__ bool isfinite(double x) { return ::fabs(x) < f64_bits(0x7ff0000000000000ull); }
template <class F> __device__ __forceinline__ F rsqrt(F x) { return (F)1 / sqrt(x); }
template <class F> __device__ __forceinline__ F sigmoid(F x) { return (F)1 / ((F)1 + exp(-x)); }

template <class T> __device__ __forceinline__ void zero(T* p, int64_t n) { for (int64_t i = 0; i < n; ++i) p[i] = (T)0; }
__device__ __forceinline__ void zero(f16* p, int64_t n) { for (int64_t i = 0; i < n; ++i) p[i] = f16{0}; }
__device__ __forceinline__ void zero(bf16* p, int64_t n) { for (int64_t i = 0; i < n; ++i) p[i] = bf16{0}; }

// Four 4-byte elements moved as one 16-byte access (vector lanes: the address is 16-byte
// aligned, which the kernel checks before it takes that path).
template <class T> struct alignas(16) vec4 { T v[4]; };
template <class T> __device__ __forceinline__ vec4<T> ld4(const T* p) { return *reinterpret_cast<const vec4<T>*>(p); }
template <class T> __device__ __forceinline__ void st4(T* p, const vec4<T>& x) { *reinterpret_cast<vec4<T>*>(p) = x; }

// A whole warp's shuffles (cooperative rows: every lane of the warp takes part), for each dtype
// an accumulator can have (a half value is a float); 8- and 16-bit values travel in an int.
#define OVL_SHFL(T, W)                                                                         \
  __device__ __forceinline__ T shfl_down(T v, unsigned o) { return (T)__shfl_down_sync(0xffffffffu, (W)v, o); } \
  __device__ __forceinline__ T shfl(T v, int from) { return (T)__shfl_sync(0xffffffffu, (W)v, from); }
OVL_SHFL(float, float) OVL_SHFL(double, double)
OVL_SHFL(int8_t, int) OVL_SHFL(int16_t, int) OVL_SHFL(int32_t, int) OVL_SHFL(int64_t, long long)
OVL_SHFL(uint8_t, unsigned) OVL_SHFL(uint16_t, unsigned) OVL_SHFL(uint32_t, unsigned)
OVL_SHFL(uint64_t, unsigned long long)

// Publishes a thread's first fault if its worker precedes the one recorded so far. The lock is
// only contended on the fault path; independent thread scheduling (sm_70 and later) makes
// spinning inside a warp safe.
__device__ __noinline__ void report(ovl_cuda_status* g, const ovl_status* l) {
  while (atomicCAS(&g->lock, 0u, 1u) != 0u) {
  }
  __threadfence();
  volatile ovl_status* f = &g->first;
  if (f->code == 0 || l->worker < f->worker) {
    f->code = l->code;
    f->expression = l->expression;
    f->tensor_kind = l->tensor_kind;
    f->tensor_index = l->tensor_index;
    f->axis = l->axis;
    f->index_signed = l->index_signed;
    f->index_bits = l->index_bits;
    f->size = l->size;
    f->worker = l->worker;
    f->step = l->step;
  }
  __threadfence();
  atomicExch(&g->lock, 0u);
}

}  // namespace ovl
