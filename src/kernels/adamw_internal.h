/* adamw_internal.h: the per-element AdamW arithmetic shared by every path.
 *
 * The scalar reference, the SIMD paths and the CUDA kernel all perform the
 * same sequence of IEEE-754 binary32 operations, each rounded once, in the
 * order of PyTorch's `_single_tensor_adamw` on FP32 tensors:
 *
 *   g  = float(grad_bf16) [/ grad_scale]
 *   w  = master [* (1 - lr*wd)]                      param.mul_(1 - lr*wd)
 *   m  = m + (1-b1)*(g - m)                          exp_avg.lerp_(g, 1-b1)  (weight < 0.5)
 *      = g - (g - m)*(1 - (1-b1))                                            (weight >= 0.5)
 *   v  = v*b2 + ((1-b2)*g)*g                         exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2)
 *   d  = sqrt(v) / sqrt(1 - b2^t) + eps              (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
 *   w  = w + ((-lr/(1 - b1^t)) * m) / d              param.addcdiv_(m, d, value=-step_size)
 *
 * Scalars are computed in double (as Python does) and rounded to float once,
 * as PyTorch does when it passes a Python float to a float tensor op.
 * Nothing here may be contracted into fused multiply-adds: the sources are
 * built with -ffp-contract=off (C) and --fmad=false (CUDA), so every path
 * agrees bit for bit. The SIMD paths spell each operation out with its own
 * intrinsic for the same reason.
 *
 * This header is included by C11 and by CUDA C++; HBM_HOSTDEV marks what both
 * the host and the device run. */
#ifndef HBM_ADAMW_INTERNAL_H
#define HBM_ADAMW_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "hbm.h"

/* GCC builds C11 without contraction; clang contracts within an expression
 * unless told not to. */
#if defined(__clang__) && !defined(__CUDACC__)
#pragma STDC FP_CONTRACT OFF
#endif

#ifdef __CUDACC__
#define HBM_HOSTDEV __host__ __device__ __forceinline__
#else
#define HBM_HOSTDEV static inline
#endif

/* Hyper-parameters as the element loop uses them: every value already
 * rounded to float exactly once. */
typedef struct adamw_scalars {
  float decay_factor;          /* 1 - lr*wd: multiplies the pre-update master */
  float lerp_weight;           /* 1 - beta1 */
  float lerp_weight_complement; /* 1 - lerp_weight, in float (PyTorch's large-weight lerp form) */
  int lerp_weight_small;       /* lerp_weight < 0.5: which of PyTorch's two lerp forms */
  float beta2;
  float one_minus_beta2;
  float bias_correction2_sqrt; /* sqrt(1 - beta2^step) */
  float neg_step_size;         /* -lr / (1 - beta1^step) */
  float eps;
  float grad_scale;            /* the gradient is divided by this; 1 means unscaled */
  int stochastic;              /* 1: stochastic rounding of the BF16 weight */
  uint64_t stochastic_key;     /* mixed from seed and step; tensors mix in their position */
} adamw_scalars;

/* ---- bit casts ------------------------------------------------------------------- */
HBM_HOSTDEV uint32_t adamw_float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}

HBM_HOSTDEV float adamw_bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}

/* BF16 is the top half of a binary32, so widening is exact. */
HBM_HOSTDEV float adamw_bf16_to_float(uint16_t h) { return adamw_bits_float((uint32_t)h << 16); }

/* Narrows to BF16 adding `addend` (< 2^16) below the kept bits, then truncating.
 * Round-to-nearest-even passes 0x7FFF + (lowest kept bit); stochastic rounding
 * passes 16 random bits. A NaN stays a NaN (quietened, sign and top payload
 * kept): adding to its bits could otherwise carry it into an infinity. */
HBM_HOSTDEV uint16_t adamw_bf16_narrow(uint32_t bits, uint32_t addend) {
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((bits >> 16) | 0x0040u);
  return (uint16_t)((bits + addend) >> 16);
}

HBM_HOSTDEV uint16_t adamw_bf16_round_nearest_even(float f) {
  uint32_t bits = adamw_float_bits(f);
  return adamw_bf16_narrow(bits, 0x7FFFu + ((bits >> 16) & 1u));
}

/* ---- counter-based randomness for stochastic rounding ----------------------------- */
/* A 32-bit integer hash with good avalanche (Wellons' lowbias32): two rounds
 * make each element's bits a function of (key, index) alone, so results do
 * not depend on thread count, SIMD width or device. */
HBM_HOSTDEV uint32_t adamw_hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

HBM_HOSTDEV uint64_t adamw_mix64(uint64_t z) { /* splitmix64's finalizer */
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Key of one tensor for one step: seed, step and the tensor's position. */
HBM_HOSTDEV uint64_t adamw_tensor_key(uint64_t stochastic_key, uint64_t tensor_index) {
  return adamw_mix64(stochastic_key ^ adamw_mix64(tensor_index));
}

/* 16 random bits for element `index` of a tensor. The high half of the index
 * is folded into the second round's key: SIMD blocks never straddle a 2^32
 * boundary, so they compute it once per block. */
HBM_HOSTDEV uint32_t adamw_random16(uint64_t tensor_key, uint64_t index) {
  uint32_t key_low = (uint32_t)tensor_key;
  uint32_t key_high = (uint32_t)(tensor_key >> 32) ^ (uint32_t)(index >> 32);
  uint32_t r = adamw_hash32((uint32_t)index ^ key_low);
  r = adamw_hash32(r + key_high);
  return r >> 16;
}

/* ---- one element -------------------------------------------------------------------- */
/* Updates m, v and the master weight of one element in place and returns the
 * BF16 weight to store. `decay` is the tensor's weight-decay switch. */
HBM_HOSTDEV uint16_t adamw_update_element(const adamw_scalars *s, int decay, uint64_t tensor_key,
                                          uint64_t index, uint16_t grad_bf16, float *master,
                                          float *exp_avg, float *exp_avg_sq) {
  float g = adamw_bf16_to_float(grad_bf16);
  if (s->grad_scale != 1.0f) g = g / s->grad_scale;
  float w = *master;
  if (decay) w = w * s->decay_factor;
  float m = *exp_avg;
  if (s->lerp_weight_small)
    m = m + s->lerp_weight * (g - m);
  else
    m = g - (g - m) * s->lerp_weight_complement;
  float v = *exp_avg_sq;
  v = v * s->beta2 + (s->one_minus_beta2 * g) * g;
#ifdef __CUDA_ARCH__
  float root = __fsqrt_rn(v);
#else
  float root = __builtin_sqrtf(v);
#endif
  float denom = root / s->bias_correction2_sqrt + s->eps;
  w = w + (s->neg_step_size * m) / denom;
  *exp_avg = m;
  *exp_avg_sq = v;
  *master = w;
  uint32_t bits = adamw_float_bits(w);
  if (s->stochastic) return adamw_bf16_narrow(bits, adamw_random16(tensor_key, index));
  return adamw_bf16_narrow(bits, 0x7FFFu + ((bits >> 16) & 1u));
}

#ifdef __cplusplus
extern "C" {
#endif

/* ---- shared by the CPU and CUDA entry points (adamw.c) ------------------------------- */
/* Checks every argument; reports and returns HBM_EINVAL on the first bad one. */
int hbm_adamw_validate(const hbm_adamw_tensor *tensors, size_t ntensors,
                   const hbm_adamw_options *options);
/* Rounds the hyper-parameters to the floats the element loop uses. */
void hbm_adamw_scalars_init(adamw_scalars *s, const hbm_adamw_options *options);

/* ---- SIMD bodies (adamw_avx2.c, adamw_avx512.c) ------------------------------------- */
/* Updates elements [begin, end) of one tensor. `begin` must be a multiple of
 * the vector width so blocks stay aligned to the element index (see
 * adamw_random16); the scalar element function finishes any tail. */
typedef void adamw_range_fn(const adamw_scalars *s, const hbm_adamw_tensor *t, uint64_t tensor_key,
                            uint64_t begin, uint64_t end);
adamw_range_fn hbm_adamw_range_scalar;
#if defined(__x86_64__) || defined(__i386__)
#define HBM_ADAMW_X86 1
adamw_range_fn hbm_adamw_range_avx2;
adamw_range_fn hbm_adamw_range_avx512;
#endif

#ifdef __cplusplus
}
#endif
#endif
