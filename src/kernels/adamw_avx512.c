/* adamw_avx512.c: the AdamW element loop, 16 elements per AVX-512 vector.
 *
 * Compiled for the baseline ISA; only these functions carry the avx512f
 * target, and adamw.c calls them after __builtin_cpu_supports("avx512f"). Each line of
 * adamw_update_element() maps to one intrinsic here, in the same order, with
 * no fused multiply-add, so results are bit-identical to the reference. */
#include "kernels/adamw_internal.h"

#ifdef HBM_ADAMW_X86
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define WIDTH 16

AVX512 static inline __m512 load_bf16(const uint16_t *p) {
  __m256i half = _mm256_loadu_si256((const __m256i *)p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

AVX512 static inline __m512i hash32(__m512i x) {
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x7FEB352D));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32((int)0x846CA68Bu));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  return x;
}

/* adamw_random16 for elements index..index+15 (the block does not straddle 2^32). */
AVX512 static inline __m512i random16(uint64_t tensor_key, uint64_t index) {
  __m512i lanes = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)index), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  uint32_t key_high = (uint32_t)(tensor_key >> 32) ^ (uint32_t)(index >> 32);
  __m512i r = hash32(_mm512_xor_si512(lanes, _mm512_set1_epi32((int)(uint32_t)tensor_key)));
  r = hash32(_mm512_add_epi32(r, _mm512_set1_epi32((int)key_high)));
  return _mm512_srli_epi32(r, 16);
}

/* adamw_bf16_narrow on 16 lanes, packed to 16 uint16. */
AVX512 static inline __m256i narrow_bf16(__m512 w, __m512i addend) {
  __m512i bits = _mm512_castps_si512(w);
  __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, addend), 16);
  __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x0040));
  __mmask16 is_nan = _mm512_cmp_ps_mask(w, w, _CMP_UNORD_Q);
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, quiet_nan));
}

AVX512 void hbm_adamw_range_avx512(const adamw_scalars *s, const hbm_adamw_tensor *t, uint64_t tensor_key,
                             uint64_t begin, uint64_t end) {
  const __m512 decay_factor = _mm512_set1_ps(s->decay_factor);
  const __m512 lerp_weight = _mm512_set1_ps(s->lerp_weight);
  const __m512 lerp_weight_complement = _mm512_set1_ps(s->lerp_weight_complement);
  const __m512 beta2 = _mm512_set1_ps(s->beta2);
  const __m512 one_minus_beta2 = _mm512_set1_ps(s->one_minus_beta2);
  const __m512 bias_correction2_sqrt = _mm512_set1_ps(s->bias_correction2_sqrt);
  const __m512 neg_step_size = _mm512_set1_ps(s->neg_step_size);
  const __m512 eps = _mm512_set1_ps(s->eps);
  const __m512 grad_scale = _mm512_set1_ps(s->grad_scale);
  const __m512i rne_bias = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1);
  const int scaled = s->grad_scale != 1.0f, decay = t->weight_decay != 0;
  const int small = s->lerp_weight_small, stochastic = s->stochastic;
  /* Local copies: stores through the arrays could otherwise alias *t and
   * force a reload of every pointer each iteration. */
  uint16_t *restrict weight = t->weight;
  const uint16_t *restrict grad = t->grad;
  float *restrict master = t->master, *restrict exp_avg = t->exp_avg, *restrict exp_avg_sq = t->exp_avg_sq;
  uint64_t i = begin;
  for (; i + WIDTH <= end; i += WIDTH) {
    __m512 g = load_bf16(grad + i);
    if (scaled) g = _mm512_div_ps(g, grad_scale);
    __m512 w = _mm512_loadu_ps(master + i);
    if (decay) w = _mm512_mul_ps(w, decay_factor);
    __m512 m = _mm512_loadu_ps(exp_avg + i);
    if (small) m = _mm512_add_ps(m, _mm512_mul_ps(lerp_weight, _mm512_sub_ps(g, m)));
    else m = _mm512_sub_ps(g, _mm512_mul_ps(_mm512_sub_ps(g, m), lerp_weight_complement));
    __m512 v = _mm512_loadu_ps(exp_avg_sq + i);
    v = _mm512_add_ps(_mm512_mul_ps(v, beta2), _mm512_mul_ps(_mm512_mul_ps(one_minus_beta2, g), g));
    __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), bias_correction2_sqrt), eps);
    w = _mm512_add_ps(w, _mm512_div_ps(_mm512_mul_ps(neg_step_size, m), denom));
    _mm512_storeu_ps(exp_avg + i, m);
    _mm512_storeu_ps(exp_avg_sq + i, v);
    _mm512_storeu_ps(master + i, w);
    __m512i addend;
    if (stochastic) {
      addend = random16(tensor_key, i);
    } else {
      __m512i lowest_kept = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(w), 16), one);
      addend = _mm512_add_epi32(rne_bias, lowest_kept);
    }
    _mm256_storeu_si256((__m256i *)(weight + i), narrow_bf16(w, addend));
  }
  hbm_adamw_range_scalar(s, t, tensor_key, i, end);
}

#endif
