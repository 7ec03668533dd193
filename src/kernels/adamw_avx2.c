/* adamw_avx2.c: the AdamW element loop, 8 elements per AVX2 vector.
 *
 * Compiled for the baseline ISA; only these functions carry the avx2 target,
 * and adamw.c calls them after __builtin_cpu_supports("avx2"). Each line of
 * adamw_update_element() maps to one intrinsic here, in the same order, with
 * no fused multiply-add, so results are bit-identical to the reference. */
#include "kernels/adamw_internal.h"

#ifdef HBM_ADAMW_X86
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))
#define WIDTH 8

AVX2 static inline __m256 load_bf16(const uint16_t *p) {
  __m128i half = _mm_loadu_si128((const __m128i *)p);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}

AVX2 static inline __m256i hash32(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7FEB352D));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x846CA68Bu));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  return x;
}

/* adamw_random16 for elements index..index+7 (the block does not straddle 2^32). */
AVX2 static inline __m256i random16(uint64_t tensor_key, uint64_t index) {
  __m256i lanes = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)index), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  uint32_t key_high = (uint32_t)(tensor_key >> 32) ^ (uint32_t)(index >> 32);
  __m256i r = hash32(_mm256_xor_si256(lanes, _mm256_set1_epi32((int)(uint32_t)tensor_key)));
  r = hash32(_mm256_add_epi32(r, _mm256_set1_epi32((int)key_high)));
  return _mm256_srli_epi32(r, 16);
}

/* adamw_bf16_narrow on 8 lanes, packed to 8 uint16. */
AVX2 static inline __m128i narrow_bf16(__m256 w, __m256i addend) {
  __m256i bits = _mm256_castps_si256(w);
  __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, addend), 16);
  __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x0040));
  __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(w, w, _CMP_UNORD_Q));
  __m256i out = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
  /* Every lane is <= 0xFFFF, so unsigned saturation packs exactly. */
  return _mm_packus_epi32(_mm256_castsi256_si128(out), _mm256_extracti128_si256(out, 1));
}

AVX2 void hbm_adamw_range_avx2(const adamw_scalars *s, const hbm_adamw_tensor *t, uint64_t tensor_key,
                           uint64_t begin, uint64_t end) {
  const __m256 decay_factor = _mm256_set1_ps(s->decay_factor);
  const __m256 lerp_weight = _mm256_set1_ps(s->lerp_weight);
  const __m256 lerp_weight_complement = _mm256_set1_ps(s->lerp_weight_complement);
  const __m256 beta2 = _mm256_set1_ps(s->beta2);
  const __m256 one_minus_beta2 = _mm256_set1_ps(s->one_minus_beta2);
  const __m256 bias_correction2_sqrt = _mm256_set1_ps(s->bias_correction2_sqrt);
  const __m256 neg_step_size = _mm256_set1_ps(s->neg_step_size);
  const __m256 eps = _mm256_set1_ps(s->eps);
  const __m256 grad_scale = _mm256_set1_ps(s->grad_scale);
  const __m256i rne_bias = _mm256_set1_epi32(0x7FFF), one = _mm256_set1_epi32(1);
  const int scaled = s->grad_scale != 1.0f, decay = t->weight_decay != 0;
  const int small = s->lerp_weight_small, stochastic = s->stochastic;
  /* Local copies: stores through the arrays could otherwise alias *t and
   * force a reload of every pointer each iteration. */
  uint16_t *restrict weight = t->weight;
  const uint16_t *restrict grad = t->grad;
  float *restrict master = t->master, *restrict exp_avg = t->exp_avg, *restrict exp_avg_sq = t->exp_avg_sq;
  uint64_t i = begin;
  for (; i + WIDTH <= end; i += WIDTH) {
    __m256 g = load_bf16(grad + i);
    if (scaled) g = _mm256_div_ps(g, grad_scale);
    __m256 w = _mm256_loadu_ps(master + i);
    if (decay) w = _mm256_mul_ps(w, decay_factor);
    __m256 m = _mm256_loadu_ps(exp_avg + i);
    if (small) m = _mm256_add_ps(m, _mm256_mul_ps(lerp_weight, _mm256_sub_ps(g, m)));
    else m = _mm256_sub_ps(g, _mm256_mul_ps(_mm256_sub_ps(g, m), lerp_weight_complement));
    __m256 v = _mm256_loadu_ps(exp_avg_sq + i);
    v = _mm256_add_ps(_mm256_mul_ps(v, beta2), _mm256_mul_ps(_mm256_mul_ps(one_minus_beta2, g), g));
    __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bias_correction2_sqrt), eps);
    w = _mm256_add_ps(w, _mm256_div_ps(_mm256_mul_ps(neg_step_size, m), denom));
    _mm256_storeu_ps(exp_avg + i, m);
    _mm256_storeu_ps(exp_avg_sq + i, v);
    _mm256_storeu_ps(master + i, w);
    __m256i addend;
    if (stochastic) {
      addend = random16(tensor_key, i);
    } else {
      __m256i lowest_kept = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(w), 16), one);
      addend = _mm256_add_epi32(rne_bias, lowest_kept);
    }
    _mm_storeu_si128((__m128i *)(weight + i), narrow_bf16(w, addend));
  }
  hbm_adamw_range_scalar(s, t, tensor_key, i, end);
}

#endif
