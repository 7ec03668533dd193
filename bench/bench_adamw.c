/* bench_adamw.c: `hbm bench adamw`: the fused AdamW step against the same
 * step as separate passes, and against the machine's memcpy bandwidth, all
 * measured side by side in one run (rounds interleave the three; each figure
 * is the best round).
 *
 * The unfused sequence is what an eager framework runs for a BF16 model with
 * FP32 master weights, one pass per tensor op, in the order of PyTorch's
 * `_single_tensor_adamw`: convert the gradient, m (lerp), v (mul, addcmul),
 * update (decay, sqrt, div, add, addcdiv), cast. It performs the same
 * arithmetic as the fused step, so its results must match it bit for bit,
 * and the bench checks that. Its passes use the same threads; the compiler
 * vectorizes them (AVX2 where the CPU has it). A leaner five-pass sequence
 * (one loop per stage) is timed too, as the least an unfused step can cost.
 *
 * Traffic per parameter: fused 28 bytes (read grad 2, master 4, m 4, v 4;
 * write master 4, m 4, v 4, weight 2). copy_gbps counts bytes read plus
 * written per second by memcpy on as many threads as the step uses. */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "bench.h"
#include "cli.h"
#include "kernels/adamw_internal.h"
#include "report/json.h"

#define FUSED_BYTES_PER_PARAM 28.0
/* Host bytes per parameter: the fused state 16, the two unfused states 24
 * each (with their FP32 temporaries), and the copy's source and destination 28. */
#define HOST_BYTES_PER_PARAM (16.0 + 24.0 * 2 + FUSED_BYTES_PER_PARAM)

typedef struct adamw_state {
  uint64_t n;
  uint16_t *weight, *grad;
  float *master, *exp_avg, *exp_avg_sq;
  float *grad_f32, *denom; /* the unfused sequence's temporaries */
} adamw_state;

/* ---- the unfused sequence: one loop per tensor op ------------------------------------- */
/* The compiler vectorizes these loops; with GCC, ask for it (its -O2 will not
 * vectorize a loop that needs a remainder), and build AVX2 and baseline
 * clones chosen at load time. No contraction: the arithmetic must stay the
 * reference's. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define PASS __attribute__((optimize("O3", "fp-contract=off"), target_clones("avx2", "default"))) static
#elif defined(__clang__) && defined(__x86_64__)
#define PASS __attribute__((target_clones("avx2", "default"))) static
#else
#define PASS static
#endif

PASS void pass_convert(float *restrict out, const uint16_t *restrict in, uint64_t b, uint64_t e) {
  for (uint64_t i = b; i < e; i++) {
    uint32_t bits = (uint32_t)in[i] << 16;
    memcpy(&out[i], &bits, 4);
  }
}
PASS void pass_mul(float *restrict x, float c, uint64_t b, uint64_t e) {
  for (uint64_t i = b; i < e; i++) x[i] = x[i] * c;
}
PASS void pass_lerp(float *restrict m, const float *restrict g, float w, uint64_t b, uint64_t e) {
  for (uint64_t i = b; i < e; i++) m[i] = m[i] + w * (g[i] - m[i]);
}
PASS void pass_addcmul(float *restrict v, const float *restrict g, float c, uint64_t b, uint64_t e) {
  for (uint64_t i = b; i < e; i++) v[i] = v[i] + (c * g[i]) * g[i];
}
PASS void pass_sqrt(float *restrict out, const float *restrict in, uint64_t b, uint64_t e) {
  for (uint64_t i = b; i < e; i++) out[i] = __builtin_sqrtf(in[i]);
}
PASS void pass_div(float *restrict x, float c, uint64_t b, uint64_t e) {
  for (uint64_t i = b; i < e; i++) x[i] = x[i] / c;
}
PASS void pass_add(float *restrict x, float c, uint64_t b, uint64_t e) {
  for (uint64_t i = b; i < e; i++) x[i] = x[i] + c;
}
PASS void pass_addcdiv(float *restrict w, const float *restrict m, const float *restrict d, float c, uint64_t b,
                       uint64_t e) {
  for (uint64_t i = b; i < e; i++) w[i] = w[i] + (c * m[i]) / d[i];
}
PASS void pass_cast(uint16_t *restrict out, const float *restrict in, uint64_t b, uint64_t e) {
  for (uint64_t i = b; i < e; i++) {
    uint32_t bits;
    memcpy(&bits, &in[i], 4);
    uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    out[i] = (bits & 0x7FFFFFFFu) > 0x7F800000u ? (uint16_t)((bits >> 16) | 0x40u) : (uint16_t)rounded;
  }
}
/* The five-stage variant's middle stages, each one loop. */
PASS void pass_v(float *restrict v, const float *restrict g, float beta2, float c, uint64_t b, uint64_t e) {
  for (uint64_t i = b; i < e; i++) v[i] = v[i] * beta2 + (c * g[i]) * g[i];
}
PASS void pass_update(float *restrict w, const float *restrict m, const float *restrict v, float decay, float bc2,
                      float eps, float c, uint64_t b, uint64_t e) {
  for (uint64_t i = b; i < e; i++) {
    float d = __builtin_sqrtf(v[i]) / bc2 + eps;
    w[i] = w[i] * decay + (c * m[i]) / d;
  }
}

typedef enum { SEQ_PYTORCH_OPS, SEQ_FIVE_PASSES, SEQ_COPY, SEQ_STREAM_COPY } sequence;

typedef struct worker {
  adamw_state *st;
  const adamw_scalars *s;
  sequence seq;
  int pass;
  uint64_t begin, end;
  const char *copy_src;
  char *copy_dst;
} worker;

/* Runs pass number `pass` of a sequence on [begin, end). */
static void run_pass(worker *w) {
  adamw_state *st = w->st;
  const adamw_scalars *s = w->s;
  uint64_t b = w->begin, e = w->end;
  if (w->seq == SEQ_COPY) {
    memcpy(w->copy_dst + b, w->copy_src + b, e - b);
    return;
  }
  if (w->seq == SEQ_STREAM_COPY) {
#if defined(__x86_64__)
    /* Non-temporal stores skip reading the destination first: the most a copy gets. */
    for (uint64_t i = b; i < e; i += 16)
      _mm_stream_si128((__m128i *)(w->copy_dst + i), _mm_load_si128((const __m128i *)(w->copy_src + i)));
    _mm_sfence();
#else
    memcpy(w->copy_dst + b, w->copy_src + b, e - b);
#endif
    return;
  }
  if (w->seq == SEQ_FIVE_PASSES) {
    switch (w->pass) {
      case 0: pass_convert(st->grad_f32, st->grad, b, e); break;
      case 1: pass_lerp(st->exp_avg, st->grad_f32, s->lerp_weight, b, e); break;
      case 2: pass_v(st->exp_avg_sq, st->grad_f32, s->beta2, s->one_minus_beta2, b, e); break;
      case 3:
        pass_update(st->master, st->exp_avg, st->exp_avg_sq, s->decay_factor, s->bias_correction2_sqrt, s->eps,
                    s->neg_step_size, b, e);
        break;
      case 4: pass_cast(st->weight, st->master, b, e); break;
    }
    return;
  }
  switch (w->pass) {
    case 0: pass_convert(st->grad_f32, st->grad, b, e); break;                       /* grad.float() */
    case 1: pass_mul(st->master, s->decay_factor, b, e); break;                       /* param.mul_ */
    case 2: pass_lerp(st->exp_avg, st->grad_f32, s->lerp_weight, b, e); break;        /* exp_avg.lerp_ */
    case 3: pass_mul(st->exp_avg_sq, s->beta2, b, e); break;                          /* exp_avg_sq.mul_ */
    case 4: pass_addcmul(st->exp_avg_sq, st->grad_f32, s->one_minus_beta2, b, e); break; /* .addcmul_ */
    case 5: pass_sqrt(st->denom, st->exp_avg_sq, b, e); break;                        /* sqrt() */
    case 6: pass_div(st->denom, s->bias_correction2_sqrt, b, e); break;               /* / bc2_sqrt */
    case 7: pass_add(st->denom, s->eps, b, e); break;                                 /* .add_(eps) */
    case 8: pass_addcdiv(st->master, st->exp_avg, st->denom, s->neg_step_size, b, e); break; /* addcdiv_ */
    case 9: pass_cast(st->weight, st->master, b, e); break;                           /* copy to BF16 */
  }
}

static void *worker_run(void *arg) {
  run_pass(arg);
  return NULL;
}

/* Runs one pass split over `threads` (the calling thread takes a share). */
static void run_split(worker proto, uint64_t total, int threads) {
  worker w[64];
  pthread_t ids[64];
  int started[64] = {0};
  if (threads > 64) threads = 64;
  for (int j = 0; j < threads; j++) {
    w[j] = proto;
    w[j].begin = total * (uint64_t)j / (uint64_t)threads & ~(uint64_t)63;
    w[j].end = j + 1 == threads ? total : total * (uint64_t)(j + 1) / (uint64_t)threads & ~(uint64_t)63;
  }
  for (int j = 1; j < threads; j++) started[j] = pthread_create(&ids[j], NULL, worker_run, &w[j]) == 0;
  run_pass(&w[0]);
  for (int j = 1; j < threads; j++) {
    if (started[j]) pthread_join(ids[j], NULL);
    else run_pass(&w[j]);
  }
}

static void run_sequence(adamw_state *st, const adamw_scalars *s, sequence seq, int threads) {
  int passes = seq == SEQ_PYTORCH_OPS ? 10 : 5;
  for (int p = 0; p < passes; p++) run_split((worker){st, s, seq, p, 0, 0, NULL, NULL}, st->n, threads);
}

/* ---- set-up ------------------------------------------------------------------------------ */
static void *alloc_touched(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 64, bytes ? bytes : 64)) return NULL;
  memset(p, 0, bytes); /* map every page before timing */
  return p;
}

static int state_alloc(adamw_state *st, uint64_t n, int with_temps) {
  memset(st, 0, sizeof *st);
  st->n = n;
  st->weight = alloc_touched(n * 2);
  st->grad = alloc_touched(n * 2);
  st->master = alloc_touched(n * 4);
  st->exp_avg = alloc_touched(n * 4);
  st->exp_avg_sq = alloc_touched(n * 4);
  if (with_temps) {
    st->grad_f32 = alloc_touched(n * 4);
    st->denom = alloc_touched(n * 4);
  }
  return st->weight && st->grad && st->master && st->exp_avg && st->exp_avg_sq &&
         (!with_temps || (st->grad_f32 && st->denom));
}

static void state_free(adamw_state *st) {
  free(st->weight); free(st->grad); free(st->master); free(st->exp_avg); free(st->exp_avg_sq);
  free(st->grad_f32); free(st->denom);
}

static void state_copy(adamw_state *dst, const adamw_state *src) {
  memcpy(dst->weight, src->weight, src->n * 2);
  memcpy(dst->grad, src->grad, src->n * 2);
  memcpy(dst->master, src->master, src->n * 4);
  memcpy(dst->exp_avg, src->exp_avg, src->n * 4);
  memcpy(dst->exp_avg_sq, src->exp_avg_sq, src->n * 4);
}

static uint64_t splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Plausible training values: weights ~0.05, gradients ~1e-3, moments from earlier steps. */
static void state_fill(adamw_state *st, uint64_t seed) {
  for (uint64_t i = 0; i < st->n; i++) {
    uint64_t r = splitmix(&seed);
    double u1 = (double)(r & 0xFFFFF) / 0xFFFFF - 0.5, u2 = (double)((r >> 20) & 0xFFFFF) / 0xFFFFF - 0.5;
    double u3 = (double)((r >> 40) & 0xFFFFF) / 0xFFFFF;
    st->master[i] = (float)(u1 * 0.1);
    st->weight[i] = adamw_bf16_round_nearest_even(st->master[i]);
    st->grad[i] = adamw_bf16_round_nearest_even((float)(u2 * 2e-3));
    st->exp_avg[i] = (float)(u2 * 1e-3);
    st->exp_avg_sq[i] = (float)(u3 * 1e-6);
  }
}

/* Largest relative difference, NaN equal to NaN; the count of differing bits patterns in *differ. */
static double max_rel_diff(const float *a, const float *b, uint64_t n, uint64_t *differ) {
  double worst = 0;
  for (uint64_t i = 0; i < n; i++) {
    if (isnan(a[i]) && isnan(b[i])) continue;
    if (memcmp(&a[i], &b[i], 4)) ++*differ;
    if (a[i] == b[i]) continue;
    double d = fabs((double)a[i] - (double)b[i]) / fmax(fabs((double)a[i]), fabs((double)b[i]));
    if (isnan(d)) d = INFINITY; /* NaN against a number: infinitely far */
    if (d > worst) worst = d;
  }
  return worst;
}

static uint64_t count_differ_u16(const uint16_t *a, const uint16_t *b, uint64_t n) {
  uint64_t d = 0;
  for (uint64_t i = 0; i < n; i++) d += a[i] != b[i];
  return d;
}

/* ---- the benchmark ---------------------------------------------------------------------- */
static void usage(FILE *out) {
  fprintf(out,
          "usage: hbm bench adamw [--json] [--params N] [--reps N] [--threads N] [--impl NAME]\n\n"
          "One fused AdamW step (BF16 weight and gradient, FP32 master, m, v: 28 bytes per\n"
          "parameter) against the same step as separate passes and against memcpy, side by side.\n\n"
          "  --params N   parameters, well past the caches (default 16Mi = 16777216; K/M/G/Ki/Mi/Gi suffixes)\n"
          "  --reps N     interleaved rounds; each figure is the best round (default 5)\n"
          "  --threads N  threads for every sequence and the copy (default 0: one per CPU this\n"
          "               process may run on, at most one per 65,536 parameters, so that fewer\n"
          "               than 131,072 take 1, and at most 64); N > 0: at most one per 64\n"
          "               parameters begun (65 take 2); one for --impl reference (printed:\n"
          "               those used)\n"
          "  --impl NAME  auto, reference, scalar, avx2, avx512 (default auto)\n"
          "  --json       one JSON object\n"
          "JSON keys: bench, params, fused_ms, unfused_ms, fused_gbps, copy_gbps, max_rel_err\n"
          "(master weights vs the reference after 10 steps), fused_vs_copy, stream_copy_gbps\n"
          "(the non-temporal copy), fused_vs_stream_copy, unfused_vs_fused, unfused_five_pass_ms,\n"
          "five_pass_vs_fused, unfused_mismatches, reference_mismatches, impl, threads, reps.\n");
}

int bench_adamw(int argc, char **argv) {
  uint64_t params = 16ull << 20, reps = 5;
  int json = 0;
  hbm_adamw_options o;
  hbm_adamw_options_init(&o);
  /* getopt_long, as every other command: --params=1Mi as well as --params 1Mi */
  static const struct option opts[] = {{"json", no_argument, 0, 'j'},          {"params", required_argument, 0, 'p'},
                                       {"reps", required_argument, 0, 'r'},    {"threads", required_argument, 0, 't'},
                                       {"impl", required_argument, 0, 'i'},    {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  int c;
  uint64_t t;
  optind = 1;
  opterr = 0;
  cli_seen seen = {.command = "bench adamw"};
  while ((c = cli_getopt(argc, argv, ":h", opts, NULL, &seen)) != -1) {
    switch (c) {
      case 'h': usage(stdout); return CLI_OK;
      case 'j': json = 1; break;
      case 'p':
        if (!cli_parse_count("bench adamw: --params", optarg, 1, 1000000000000ull, &params)) return CLI_BAD_INPUT;
        break;
      case 'r':
        if (!cli_parse_count("bench adamw: --reps", optarg, 1, 1000, &reps)) return CLI_BAD_INPUT;
        break;
      case 't':
        if (!cli_parse_count("bench adamw: --threads (0: automatic)", optarg, 0, 64, &t)) return CLI_BAD_INPUT;
        o.threads = (int)t;
        break;
      case 'i':
        if (hbm_adamw_impl_parse(optarg, &o.impl) != HBM_OK) {
          cli_error("bench adamw: --impl '%s': expected auto, reference, scalar, avx2 or avx512", optarg);
          return CLI_BAD_INPUT;
        }
        if (!hbm_adamw_impl_available(o.impl)) {
          cli_error("bench adamw: --impl %s is not available on this CPU", optarg);
          return CLI_BAD_INPUT;
        }
        break;
      default: return cli_option_error("bench adamw", argv, c);
    }
  }
  if (optind < argc) {
    cli_error("bench adamw: unexpected argument '%s' (try: hbm bench adamw --help)", argv[optind]);
    return CLI_BAD_INPUT;
  }
  /* Refused up front: the buffers are touched page by page, so an overcommitted
   * allocation would succeed and the OOM killer end the run instead. */
  char what[96];
  snprintf(what, sizeof what, "bench adamw: --params %" PRIu64 " (%.0f bytes per parameter)", params,
           HOST_BYTES_PER_PARAM);
  int mem_rc = cli_check_host_memory(what, (uint64_t)(params * HOST_BYTES_PER_PARAM), "give fewer --params");
  if (mem_rc != CLI_OK) return mem_rc;
  hbm_adamw_impl impl = o.impl == HBM_ADAMW_AUTO ? hbm_adamw_impl_best() : o.impl;
  /* The threads the fused step runs on, which the passes and the copy use too. */
  int threads = hbm_adamw_thread_count(params, o.threads, impl);
  if (threads > 64) threads = 64;
  o.threads = threads;

  /* Three states from one seed: fused, unfused (PyTorch ops), unfused (five passes). */
  /* zeroed: when one state_alloc fails, && skips the rest, and state_free frees all three */
  adamw_state fused = {0}, unfused = {0}, five = {0};
  /* read + written = 28 B/param; whole 64-byte lines for the non-temporal copy */
  size_t copy_bytes = (size_t)(params * FUSED_BYTES_PER_PARAM / 2) & ~(size_t)63;
  if (copy_bytes == 0) copy_bytes = 64;
  char *copy_src = NULL, *copy_dst = NULL;
  int ok = state_alloc(&fused, params, 0) && state_alloc(&unfused, params, 1) && state_alloc(&five, params, 1);
  if (ok) {
    copy_src = alloc_touched(copy_bytes);
    copy_dst = alloc_touched(copy_bytes);
    ok = copy_src && copy_dst;
  }
  if (!ok) {
    cli_error("bench adamw: cannot allocate %.0f MiB for %" PRIu64 " parameters (try --params)",
              params * HOST_BYTES_PER_PARAM / 1048576.0, params);
    state_free(&fused); state_free(&unfused); state_free(&five);
    free(copy_src); free(copy_dst);
    return CLI_FAILED;
  }
  state_fill(&fused, 1);
  state_copy(&unfused, &fused);
  state_copy(&five, &fused);
  memset(copy_src, 0x5A, copy_bytes);

  hbm_adamw_tensor tensor = {fused.weight, fused.grad, fused.master, fused.exp_avg, fused.exp_avg_sq, params, 1};
  double best_fused = INFINITY, best_unfused = INFINITY, best_five = INFINITY;
  double best_copy = INFINITY, best_stream = INFINITY;
  int rc = HBM_OK;
  /* Round 0 warms up and is not counted. */
  for (uint64_t round = 0; round <= reps && rc == HBM_OK; round++) {
    o.step = round + 1;
    adamw_scalars s;
    hbm_adamw_scalars_init(&s, &o);
    double t0 = bench_now_ns();
    rc = hbm_adamw_step(&tensor, 1, &o);
    double t1 = bench_now_ns();
    run_sequence(&unfused, &s, SEQ_PYTORCH_OPS, threads);
    double t2 = bench_now_ns();
    run_sequence(&five, &s, SEQ_FIVE_PASSES, threads);
    double t3 = bench_now_ns();
    run_split((worker){NULL, NULL, SEQ_COPY, 0, 0, 0, copy_src, copy_dst}, copy_bytes, threads);
    double t4 = bench_now_ns();
    run_split((worker){NULL, NULL, SEQ_STREAM_COPY, 0, 0, 0, copy_src, copy_dst}, copy_bytes, threads);
    double t5 = bench_now_ns();
    if (round == 0) continue;
    best_stream = fmin(best_stream, t5 - t4);
    best_fused = fmin(best_fused, t1 - t0);
    best_unfused = fmin(best_unfused, t2 - t1);
    best_five = fmin(best_five, t3 - t2);
    best_copy = fmin(best_copy, t4 - t3);
  }
  if (rc != HBM_OK) {
    cli_error("bench adamw: the fused step failed: %s", hbm_strerror(rc));
    state_free(&fused); state_free(&unfused); state_free(&five);
    free(copy_src); free(copy_dst);
    return CLI_FAILED;
  }
  /* The PyTorch-op sequence performs the same arithmetic: weight, master, m
   * and v must match bit for bit. */
  uint64_t unfused_differ = 0;
  for (int k = 0; k < 2; k++) {
    const adamw_state *other = k ? &five : &unfused;
    unfused_differ += count_differ_u16(fused.weight, other->weight, params);
    max_rel_diff(fused.master, other->master, params, &unfused_differ);
    max_rel_diff(fused.exp_avg, other->exp_avg, params, &unfused_differ);
    max_rel_diff(fused.exp_avg_sq, other->exp_avg_sq, params, &unfused_differ);
  }

  /* Agreement: 10 more steps through the chosen path and through the
   * reference, from the same state. `unfused` becomes the reference's copy. */
  state_copy(&unfused, &fused);
  hbm_adamw_tensor reference = {unfused.weight, unfused.grad, unfused.master, unfused.exp_avg,
                                unfused.exp_avg_sq, params, 1};
  hbm_adamw_options ro = o;
  ro.impl = HBM_ADAMW_REFERENCE;
  for (int k = 0; k < 10 && rc == HBM_OK; k++) {
    o.step = ro.step = reps + 2 + (uint64_t)k;
    rc = hbm_adamw_step(&tensor, 1, &o);
    if (rc == HBM_OK) rc = hbm_adamw_step(&reference, 1, &ro);
  }
  uint64_t reference_differ = count_differ_u16(fused.weight, unfused.weight, params);
  double max_rel_err = max_rel_diff(fused.master, unfused.master, params, &reference_differ);
  max_rel_diff(fused.exp_avg, unfused.exp_avg, params, &reference_differ); /* counted, as the test compares them */
  max_rel_diff(fused.exp_avg_sq, unfused.exp_avg_sq, params, &reference_differ);
  state_free(&fused); state_free(&unfused); state_free(&five);
  free(copy_src); free(copy_dst);
  if (rc != HBM_OK) {
    cli_error("bench adamw: a step failed: %s", hbm_strerror(rc));
    return CLI_FAILED;
  }

  double fused_ms = best_fused / 1e6, unfused_ms = best_unfused / 1e6, five_ms = best_five / 1e6;
  double fused_gbps = params * FUSED_BYTES_PER_PARAM / best_fused; /* bytes per ns = GB/s */
  double copy_gbps = 2.0 * (double)copy_bytes / best_copy;
  double stream_gbps = 2.0 * (double)copy_bytes / best_stream;
  double unfused_gbps = params * FUSED_BYTES_PER_PARAM / best_unfused;
  if (json) {
    hbm_json j;
    hbm_json_init(&j);
    hbm_json_object_begin(&j);
    hbm_json_kv_string(&j, "bench", "adamw");
    hbm_json_kv_u64(&j, "params", params);
    hbm_json_kv_double(&j, "fused_ms", fused_ms);
    hbm_json_kv_double(&j, "unfused_ms", unfused_ms);
    hbm_json_kv_double(&j, "fused_gbps", fused_gbps);
    hbm_json_kv_double(&j, "copy_gbps", copy_gbps);
    hbm_json_kv_double(&j, "max_rel_err", max_rel_err);
    hbm_json_kv_double(&j, "fused_vs_copy", fused_gbps / copy_gbps);
    hbm_json_kv_double(&j, "stream_copy_gbps", stream_gbps);
    hbm_json_kv_double(&j, "fused_vs_stream_copy", fused_gbps / stream_gbps);
    hbm_json_kv_double(&j, "unfused_vs_fused", unfused_ms / fused_ms);
    hbm_json_kv_double(&j, "unfused_five_pass_ms", five_ms);
    hbm_json_kv_double(&j, "five_pass_vs_fused", five_ms / fused_ms);
    hbm_json_kv_u64(&j, "unfused_mismatches", unfused_differ);
    hbm_json_kv_u64(&j, "reference_mismatches", reference_differ);
    hbm_json_kv_string(&j, "impl", hbm_adamw_impl_name(impl));
    hbm_json_kv_u64(&j, "threads", (uint64_t)threads);
    hbm_json_kv_u64(&j, "reps", reps);
    hbm_json_object_end(&j);
    if (cli_print_json("bench adamw", &j) != CLI_OK) return CLI_FAILED;
  } else {
    printf("adamw: %" PRIu64 " parameter%s, impl %s, %d thread%s, best of %" PRIu64 " interleaved round%s\n", params,
           params == 1 ? "" : "s", hbm_adamw_impl_name(impl), threads, threads == 1 ? "" : "s", reps,
           reps == 1 ? "" : "s");
    printf("  %-34s %9.3f ms  %7.2f GB/s (28 B/param)\n", "fused step", fused_ms, fused_gbps);
    printf("  %-34s %9.3f ms  %7.2f GB/s-equivalent  %.2fx the fused time\n", "unfused: PyTorch's 10 ops",
           unfused_ms, unfused_gbps, unfused_ms / fused_ms);
    printf("  %-34s %9.3f ms  %7.2f GB/s-equivalent  %.2fx the fused time\n", "unfused: 5 passes, one per stage",
           five_ms, params * FUSED_BYTES_PER_PARAM / best_five, five_ms / fused_ms);
    printf("  %-34s %9.3f ms  %7.2f GB/s (read + written)\n", "memcpy of 28 B/param", best_copy / 1e6, copy_gbps);
    printf("  %-34s %9.3f ms  %7.2f GB/s (read + written)\n", "non-temporal copy of 28 B/param", best_stream / 1e6,
           stream_gbps);
    printf("  fused / memcpy bandwidth %.2f (goal >= 0.7), fused / non-temporal copy %.2f; unfused / fused time %.2f"
           " (goal >= 2)\n",
           fused_gbps / copy_gbps, fused_gbps / stream_gbps, unfused_ms / fused_ms);
    printf("  after 10 more steps vs the reference: max relative error of master %.3g, %" PRIu64
           " values differ; unfused vs fused: %" PRIu64 " differ\n",
           max_rel_err, reference_differ, unfused_differ);
  }
  /* Disagreement is a failed check; speed never is (shared machines are noisy). */
  return reference_differ || unfused_differ || max_rel_err > 1e-5 ? CLI_FAILED : CLI_OK;
}
