/* test_adamw.c: the fused AdamW step against its scalar reference.
 *
 * 1. The reference itself against an independent double-precision AdamW
 *    written from the paper's formulas (catches a wrong order of operations).
 * 2. Every fast path (scalar threaded, AVX2, AVX-512, auto), at several thread
 *    counts and option sets, against the reference after 100 steps (in a
 *    sanitizer build below HBM_TEST_SCALE 1: 100 x scale, at least 20) on
 *    random data: odd lengths, unaligned pointers and tails, zero weight decay, the
 *    per-tensor decay switch, loss scaling, NaN, Inf and zero gradients, and
 *    stochastic rounding with an explicit seed. Required: within 1 BF16 ulp on
 *    weights and 1e-5 relative on master, m and v; by design, and checked,
 *    they are identical (any NaN equals any NaN).
 * 3. BF16 write-back: nearest-even ties, NaN kept, Inf kept, overflow; and
 *    stochastic rounding that rounds up as often as the dropped fraction says.
 * 4. SIMD blocks that cross element index 2^32 draw the same random bits.
 * 5. Every bad argument is HBM_EINVAL, reported, and writes nothing. */
#include <math.h>
#include <stdint.h>

#include "kernels/adamw_internal.h"
#include "testutil.h"

#define STEPS 100     /* the plain build's, at any scale */
#define MIN_STEPS 20  /* a sanitizer build's, below scale 1 */
#define BF16_ULP_TOLERANCE 1
#define REL_TOLERANCE 1e-5

static uint64_t rng;

/* ---- helpers ---------------------------------------------------------------------- */
static float bits_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t float_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bf16_float(uint16_t h) { return bits_float((uint32_t)h << 16); }

/* Written here independently of the library: round to nearest even by
 * comparing the dropped half against the halfway point. */
static uint16_t bf16_nearest_even(float f) {
  uint32_t u = float_bits(f);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  uint32_t kept = u >> 16, dropped = u & 0xFFFF;
  if (dropped > 0x8000 || (dropped == 0x8000 && (kept & 1))) kept++;
  return (uint16_t)kept;
}

static double uniform(void) { return (double)(test_rand(&rng) >> 11) * 0x1p-53; }

/* A gradient with a wide dynamic range: magnitudes from 2^-24 to 2^4. */
static uint16_t random_grad(int poisoned) {
  uint64_t r = test_rand_below(&rng, 1000);
  if (r == 0) return 0x0000;
  if (r == 1) return 0x8000;
  if (poisoned && r < 12) {
    static const uint16_t specials[] = {0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0x7FFF};
    return specials[test_rand_below(&rng, sizeof specials / sizeof specials[0])];
  }
  double magnitude = ldexp(0.5 + uniform(), -(int)test_rand_below(&rng, 28) + 4);
  return bf16_nearest_even((float)((test_rand(&rng) & 1) ? -magnitude : magnitude));
}

/* ---- a problem: tensors placed at odd offsets in their own buffers ------------------ */
typedef struct problem {
  size_t ntensors;
  hbm_adamw_tensor *tensors;
  void **buffers; /* 5 per tensor, to free */
  int *poisoned;  /* tensor receives NaN/Inf gradients */
} problem;

static void *alloc_offset(size_t elements, size_t size, void **keep) {
  size_t offset = test_rand_below(&rng, 16); /* elements: breaks 32- and 64-byte alignment */
  char *base = malloc((elements + 16) * size);
  if (!base) { fprintf(stderr, "out of memory\n"); exit(1); }
  *keep = base;
  return base + offset * size;
}

static problem problem_make(const uint64_t *counts, size_t ntensors) {
  problem p = {ntensors, calloc(ntensors, sizeof(hbm_adamw_tensor)), calloc(ntensors * 5, sizeof(void *)),
               calloc(ntensors, sizeof(int))};
  for (size_t k = 0; k < ntensors; k++) {
    hbm_adamw_tensor *t = &p.tensors[k];
    uint64_t n = counts[k];
    t->count = n;
    t->weight = alloc_offset(n, 2, &p.buffers[5 * k]);
    t->grad = alloc_offset(n, 2, &p.buffers[5 * k + 1]);
    t->master = alloc_offset(n, 4, &p.buffers[5 * k + 2]);
    t->exp_avg = alloc_offset(n, 4, &p.buffers[5 * k + 3]);
    t->exp_avg_sq = alloc_offset(n, 4, &p.buffers[5 * k + 4]);
    t->weight_decay = k % 5 != 3; /* some tensors are biases or norms */
    p.poisoned[k] = k % 7 == 2;
    for (uint64_t i = 0; i < n; i++) {
      t->master[i] = (float)((uniform() * 2 - 1) * 0.2);
      t->weight[i] = bf16_nearest_even(t->master[i]);
      t->exp_avg[i] = 0.0f;
      t->exp_avg_sq[i] = 0.0f;
    }
  }
  return p;
}

/* A second problem with the same layout sizes and the same values. */
static problem problem_clone(const problem *src) {
  uint64_t *counts = malloc(src->ntensors * sizeof *counts);
  for (size_t k = 0; k < src->ntensors; k++) counts[k] = src->tensors[k].count;
  problem p = problem_make(counts, src->ntensors);
  free(counts);
  for (size_t k = 0; k < src->ntensors; k++) {
    const hbm_adamw_tensor *s = &src->tensors[k];
    hbm_adamw_tensor *t = &p.tensors[k];
    size_t n = s->count;
    memcpy(t->weight, s->weight, n * 2);
    memcpy((uint16_t *)t->grad, s->grad, n * 2);
    memcpy(t->master, s->master, n * 4);
    memcpy(t->exp_avg, s->exp_avg, n * 4);
    memcpy(t->exp_avg_sq, s->exp_avg_sq, n * 4);
    t->weight_decay = s->weight_decay;
    p.poisoned[k] = src->poisoned[k];
  }
  return p;
}

static void problem_free(problem *p) {
  for (size_t i = 0; i < p->ntensors * 5; i++) free(p->buffers[i]);
  free(p->buffers);
  free(p->tensors);
  free(p->poisoned);
}

/* The gradients of step `step`: a function of (seed, step) only, written to both problems. */
static void fill_grads(problem *a, problem *b, uint64_t seed, uint64_t step) {
  uint64_t saved = rng;
  rng = seed * 1000003u + step;
  for (size_t k = 0; k < a->ntensors; k++)
    for (uint64_t i = 0; i < a->tensors[k].count; i++) {
      uint16_t g = random_grad(a->poisoned[k]);
      ((uint16_t *)a->tensors[k].grad)[i] = g;
      ((uint16_t *)b->tensors[k].grad)[i] = g;
    }
  rng = saved;
}

/* ---- comparison -------------------------------------------------------------------- */
typedef struct agreement {
  uint64_t elements, differing; /* elements where any of the four values differ (NaN == NaN) */
  uint64_t nan_elements;
  int max_weight_ulps;
  double max_rel_master, max_rel_moments;
} agreement;

static int bf16_ulps(uint16_t a, uint16_t b) {
  int na = (a & 0x7FFF) > 0x7F80, nb = (b & 0x7FFF) > 0x7F80;
  if (na || nb) return na && nb ? 0 : 1 << 20;
  /* Map sign-magnitude to a monotonic integer line. */
  int ia = (a & 0x8000) ? -(int)(a & 0x7FFF) : (int)a;
  int ib = (b & 0x8000) ? -(int)(b & 0x7FFF) : (int)b;
  return abs(ia - ib);
}

static double rel_diff(float a, float b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0.0 : INFINITY;
  if (a == b) return 0.0;
  if (isinf(a) || isinf(b)) return INFINITY;
  return fabs((double)a - (double)b) / fmax(fabs((double)a), fabs((double)b));
}

static int same_float(float a, float b) { return (isnan(a) && isnan(b)) || float_bits(a) == float_bits(b); }

static agreement compare(const problem *ref, const problem *fast) {
  agreement ag = {0};
  for (size_t k = 0; k < ref->ntensors; k++) {
    const hbm_adamw_tensor *r = &ref->tensors[k], *f = &fast->tensors[k];
    for (uint64_t i = 0; i < r->count; i++) {
      int ulps = bf16_ulps(r->weight[i], f->weight[i]);
      double rm = rel_diff(r->master[i], f->master[i]);
      double r1 = rel_diff(r->exp_avg[i], f->exp_avg[i]);
      double r2 = rel_diff(r->exp_avg_sq[i], f->exp_avg_sq[i]);
      if (ulps > ag.max_weight_ulps) ag.max_weight_ulps = ulps;
      if (rm > ag.max_rel_master) ag.max_rel_master = rm;
      if (r1 > ag.max_rel_moments) ag.max_rel_moments = r1;
      if (r2 > ag.max_rel_moments) ag.max_rel_moments = r2;
      int same = ulps == 0 && same_float(r->master[i], f->master[i]) &&
                 same_float(r->exp_avg[i], f->exp_avg[i]) && same_float(r->exp_avg_sq[i], f->exp_avg_sq[i]);
      ag.differing += !same;
      ag.nan_elements += isnan(r->master[i]) != 0;
      ag.elements++;
    }
  }
  return ag;
}

/* ---- 1. the reference against double-precision AdamW from the paper ------------------ */
static void test_reference_against_double(void) {
  enum { N = 4096, NSTEPS = 20 };
  /* Large lr and weight decay, so that applying decay after the update, or a
   * bias correction in the wrong place, moves results far beyond float error. */
  hbm_adamw_options o;
  hbm_adamw_options_init(&o);
  o.lr = 0.05;
  o.weight_decay = 0.2;
  o.impl = HBM_ADAMW_REFERENCE;
  uint64_t counts[1] = {N};
  problem p = problem_make(counts, 1);
  p.tensors[0].weight_decay = 1;
  p.poisoned[0] = 0;
  double *w = malloc(N * sizeof *w), *m = calloc(N, sizeof *m), *v = calloc(N, sizeof *v);
  for (int i = 0; i < N; i++) w[i] = p.tensors[0].master[i];
  double worst = 0;
  for (int t = 1; t <= NSTEPS; t++) {
    for (int i = 0; i < N; i++) ((uint16_t *)p.tensors[0].grad)[i] = random_grad(0);
    o.step = (uint64_t)t;
    CHECK(hbm_adamw_step(p.tensors, 1, &o) == HBM_OK);
    for (int i = 0; i < N; i++) {
      /* Loshchilov & Hutter, Algorithm 2, with PyTorch's eps placement. */
      double g = bf16_float(p.tensors[0].grad[i]);
      w[i] *= 1.0 - o.lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
      double m_hat = m[i] / (1 - pow(o.beta1, t)), v_hat = v[i] / (1 - pow(o.beta2, t));
      w[i] -= o.lr * m_hat / (sqrt(v_hat) + o.eps);
      double scale = fmax(fabs(w[i]), 1e-2); /* weights near zero: compare absolutely */
      double err = fabs(p.tensors[0].master[i] - w[i]) / scale;
      if (err > worst) worst = err;
    }
  }
  printf("reference vs double-precision AdamW, %d steps, lr %g, wd %g: max error %.3g\n", NSTEPS,
         o.lr, o.weight_decay, worst);
  CHECK(worst < 1e-4);
  free(w); free(m); free(v);
  problem_free(&p);
}

/* ---- 2. fast paths against the reference ------------------------------------------- */
typedef struct variant {
  const char *name;
  double weight_decay, grad_scale, beta1;
  hbm_adamw_rounding rounding;
  uint64_t seed;
} variant;

/* One fast path at one thread count, compared with the reference. */
typedef struct fast_run {
  hbm_adamw_impl impl;
  int threads;
} fast_run;
#define MAX_FAST_RUNS (2 * HBM_ADAMW_IMPL_COUNT)

/* Runs the reference and every fast run of one variant side by side, 100
 * steps on the same gradients: the reference's result depends only on the
 * variant and the seed, so it is computed once for all of them, and each fast
 * run is held to it as if it had its own. */
static void run_agreement(const uint64_t *counts, size_t ntensors, const variant *var, const fast_run *runs,
                          size_t nruns, int steps, uint64_t seed) {
  rng = seed ^ 0xABCDEF;
  problem ref = problem_make(counts, ntensors);
  problem fast[MAX_FAST_RUNS];
  for (size_t k = 0; k < nruns; k++) fast[k] = problem_clone(&ref);
  hbm_adamw_options o;
  hbm_adamw_options_init(&o);
  o.weight_decay = var->weight_decay;
  o.grad_scale = var->grad_scale;
  o.beta1 = var->beta1;
  o.rounding = var->rounding;
  o.seed = var->seed;
  for (uint64_t step = 1; step <= (uint64_t)steps; step++) {
    fill_grads(&ref, nruns ? &fast[0] : &ref, seed, step);
    for (size_t k = 1; k < nruns; k++)
      for (size_t t = 0; t < ntensors; t++)
        memcpy((uint16_t *)fast[k].tensors[t].grad, ref.tensors[t].grad, ref.tensors[t].count * 2);
    o.step = step;
    o.impl = HBM_ADAMW_REFERENCE;
    o.threads = 1;
    CHECK(hbm_adamw_step(ref.tensors, ntensors, &o) == HBM_OK);
    for (size_t k = 0; k < nruns; k++) {
      o.impl = runs[k].impl;
      o.threads = runs[k].threads;
      CHECK(hbm_adamw_step(fast[k].tensors, ntensors, &o) == HBM_OK);
    }
  }
  for (size_t k = 0; k < nruns; k++) {
    agreement ag = compare(&ref, &fast[k]);
    printf("  %-9s %-22s threads %d: %" PRIu64 " elements (%" PRIu64 " NaN), %" PRIu64
           " differ; max weight %d ulp, master rel %.3g, m/v rel %.3g\n",
           hbm_adamw_impl_name(runs[k].impl), var->name, runs[k].threads, ag.elements, ag.nan_elements, ag.differing,
           ag.max_weight_ulps, ag.max_rel_master, ag.max_rel_moments);
    CHECK(ag.max_weight_ulps <= BF16_ULP_TOLERANCE);
    CHECK(ag.max_rel_master <= REL_TOLERANCE);
    CHECK(ag.max_rel_moments <= REL_TOLERANCE);
    CHECK_EQ_U64(ag.differing, 0); /* the design's stronger claim: identical */
    CHECK(ag.nan_elements > 0 && ag.nan_elements < ag.elements / 4); /* NaNs exercised, not everywhere */
    problem_free(&fast[k]);
  }
  problem_free(&ref);
}

static void test_fast_paths(uint64_t seed) {
  double scale = test_scale();
  uint64_t big = (uint64_t)(300007 * scale) | 1, mid = (uint64_t)(65537 * scale) | 1;
  const uint64_t counts[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 127, 1000, 4097, mid, big, 5};
  /* Every step runs the same code over the same elements, tails and threads:
   * a sanitizer build (CI's, at scale 0.2) sees all of it in fewer steps; the
   * plain build runs all 100 at any scale. Twenty steps still leave hundreds
   * of NaN elements (run_agreement wants some). */
  int steps = !test_sanitized() || scale >= 1 ? STEPS
              : (int)(STEPS * scale) > MIN_STEPS ? (int)(STEPS * scale) : MIN_STEPS;
  size_t ntensors = sizeof counts / sizeof counts[0];
  const variant variants[] = {
      {"default", 1e-2, 1.0, 0.9, HBM_ADAMW_ROUND_NEAREST_EVEN, 0},
      {"no-weight-decay", 0.0, 1.0, 0.9, HBM_ADAMW_ROUND_NEAREST_EVEN, 0},
      /* a loss scale that is no power of two: dividing by it and multiplying by
       * its reciprocal round apart (with 1024 they agree to the bit) */
      {"grad-scale-1000,b1=0.3", 0.1, 1000.0, 0.3, HBM_ADAMW_ROUND_NEAREST_EVEN, 0},
      {"stochastic-seed-42", 1e-2, 1.0, 0.9, HBM_ADAMW_ROUND_STOCHASTIC, 42},
  };
  const hbm_adamw_impl impls[] = {HBM_ADAMW_SCALAR, HBM_ADAMW_AVX2, HBM_ADAMW_AVX512, HBM_ADAMW_AUTO};
  printf("fast paths vs reference after %d steps (auto = %s):\n", steps, hbm_adamw_impl_name(hbm_adamw_impl_best()));
  for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
    fast_run runs[MAX_FAST_RUNS];
    size_t nruns = 0;
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
      if (!hbm_adamw_impl_available(impls[k])) {
        if (v == 0) printf("  %-9s not available on this CPU: not tested\n", hbm_adamw_impl_name(impls[k]));
        continue;
      }
      /* Threads: one, the machine's default, and more than the cores. */
      int threads = v == 0 ? 1 : (v == 1 ? 0 : 3);
      runs[nruns++] = (fast_run){impls[k], threads};
      if (v == 0) runs[nruns++] = (fast_run){impls[k], 7};
    }
    run_agreement(counts, ntensors, &variants[v], runs, nruns, steps, seed + v);
  }
}

/* The same seed and step reproduce the same bits; another seed or step does not. */
static void test_stochastic_seed(void) {
  const uint64_t counts[] = {777};
  rng = 99;
  problem a = problem_make(counts, 1), b = problem_clone(&a), c = problem_clone(&a);
  fill_grads(&a, &b, 5, 1);
  fill_grads(&c, &c, 5, 1);
  hbm_adamw_options o;
  hbm_adamw_options_init(&o);
  o.rounding = HBM_ADAMW_ROUND_STOCHASTIC;
  o.seed = 1234;
  CHECK(hbm_adamw_step(a.tensors, 1, &o) == HBM_OK);
  CHECK(hbm_adamw_step(b.tensors, 1, &o) == HBM_OK);
  o.seed = 1235;
  CHECK(hbm_adamw_step(c.tensors, 1, &o) == HBM_OK);
  CHECK(memcmp(a.tensors[0].weight, b.tensors[0].weight, 777 * 2) == 0);
  CHECK(memcmp(a.tensors[0].weight, c.tensors[0].weight, 777 * 2) != 0);
  CHECK(memcmp(a.tensors[0].master, c.tensors[0].master, 777 * 4) == 0); /* only rounding differs */
  /* Another step: with both betas 0 there is no bias correction, so steps 1
   * and 2 compute the same master weights and only the rounding can differ. */
  problem d = problem_make(counts, 1), e = problem_clone(&d);
  fill_grads(&d, &e, 5, 1);
  o.seed = 1234;
  o.beta1 = o.beta2 = 0;
  o.step = 1;
  CHECK(hbm_adamw_step(d.tensors, 1, &o) == HBM_OK);
  o.step = 2;
  CHECK(hbm_adamw_step(e.tensors, 1, &o) == HBM_OK);
  CHECK(memcmp(d.tensors[0].master, e.tensors[0].master, 777 * 4) == 0);
  CHECK(memcmp(d.tensors[0].weight, e.tensors[0].weight, 777 * 2) != 0);
  problem_free(&a); problem_free(&b); problem_free(&c); problem_free(&d); problem_free(&e);
}

/* ---- 3. BF16 write-back --------------------------------------------------------------- */
/* With lr 0 and no decay the master is unchanged, so the step only rounds it. */
static void write_back(float *master, uint16_t *weight, size_t n, hbm_adamw_impl impl, hbm_adamw_rounding rounding,
                       uint64_t seed) {
  uint16_t *grad = calloc(n, 2);
  float *m = calloc(n, 4), *v = calloc(n, 4);
  hbm_adamw_tensor t = {weight, grad, master, m, v, n, 0};
  hbm_adamw_options o;
  hbm_adamw_options_init(&o);
  o.lr = 0.0;
  o.impl = impl;
  o.rounding = rounding;
  o.seed = seed;
  CHECK(hbm_adamw_step(&t, 1, &o) == HBM_OK);
  free(grad); free(m); free(v);
}

static void test_round_nearest_even(void) {
  static const struct { uint32_t in; uint16_t out; } cases[] = {
      {0x3F800000, 0x3F80}, /* 1.0 */
      {0x3F808000, 0x3F80}, /* halfway, kept bit even: down */
      {0x3F818000, 0x3F82}, /* halfway, kept bit odd: up */
      {0x3F808001, 0x3F81}, /* just above halfway: up */
      {0x3F807FFF, 0x3F80}, /* just below: down */
      {0x80000000, 0x8000}, /* -0 */
      {0x00000001, 0x0000}, /* smallest subnormal: down to 0 */
      {0x00018000, 0x0002}, /* subnormal halfway, odd: up */
      {0x7F7FFFFF, 0x7F80}, /* largest float rounds to +Inf */
      {0x7F800000, 0x7F80}, /* +Inf */
      {0xFF800000, 0xFF80}, /* -Inf */
      {0x7FC00000, 0x7FC0}, /* quiet NaN */
      {0x7F800001, 0x7FC0}, /* NaN with payload only in dropped bits: still NaN */
      {0xFFFFFFFF, 0xFFFF}, /* negative NaN, all payload: no carry into Inf or sign */
  };
  enum { NC = sizeof cases / sizeof cases[0] };
  const hbm_adamw_impl impls[] = {HBM_ADAMW_REFERENCE, HBM_ADAMW_AVX2, HBM_ADAMW_AVX512};
  for (size_t k = 0; k < 3; k++) {
    if (!hbm_adamw_impl_available(impls[k])) continue;
    /* Enough copies that the SIMD loop, not only its scalar tail, sees each case. */
    enum { COPIES = 40, N = NC * COPIES };
    float master[N];
    uint16_t weight[N];
    for (int i = 0; i < N; i++) master[i] = bits_float(cases[i % NC].in);
    write_back(master, weight, N, impls[k], HBM_ADAMW_ROUND_NEAREST_EVEN, 0);
    int bad = 0;
    for (int i = 0; i < N; i++) {
      uint16_t want = cases[i % NC].out, got = weight[i];
      int nan_ok = (want & 0x7FFF) > 0x7F80 && (got & 0x7FFF) > 0x7F80 && (got & 0x8000) == (want & 0x8000);
      if (got != want && !nan_ok && bad++ < 5)
        fprintf(stderr, "%s: 0x%08x rounded to 0x%04x, want 0x%04x\n", hbm_adamw_impl_name(impls[k]),
                cases[i % NC].in, got, want);
      CHECK(got == want || nan_ok);
    }
    /* and the independent test rounding agrees on random values */
    for (int i = 0; i < N; i++) master[i] = bits_float((uint32_t)test_rand(&rng));
    write_back(master, weight, N, impls[k], HBM_ADAMW_ROUND_NEAREST_EVEN, 0);
    for (int i = 0; i < N; i++) {
      uint16_t want = bf16_nearest_even(master[i]);
      CHECK(weight[i] == want || (isnan(master[i]) && (weight[i] & 0x7FFF) > 0x7F80));
    }
  }
}

/* A value 1/4 of the way between two BF16 neighbours rounds up a quarter of the time. */
static void test_stochastic_unbiased(void) {
  enum { N = 1 << 16 };
  static float master[N];
  static uint16_t weight[N];
  const double fractions[] = {0.25, 0.5, 0.9, 1.0 / 65536};
  for (size_t f = 0; f < sizeof fractions / sizeof fractions[0]; f++) {
    uint32_t dropped = (uint32_t)(fractions[f] * 65536);
    for (int i = 0; i < N; i++) master[i] = bits_float(0x3F810000u + dropped); /* 1.0078125 + fraction */
    write_back(master, weight, N, HBM_ADAMW_AUTO, HBM_ADAMW_ROUND_STOCHASTIC, 7 + f);
    uint64_t up = 0;
    for (int i = 0; i < N; i++) {
      CHECK(weight[i] == 0x3F81 || weight[i] == 0x3F82);
      up += weight[i] == 0x3F82;
    }
    double p = dropped / 65536.0, expected = p * N, sigma = sqrt(N * p * (1 - p));
    printf("stochastic rounding, dropped fraction %.6f: rounded up %" PRIu64 " of %d (expected %.1f)\n", p,
           up, N, expected);
    CHECK(fabs((double)up - expected) <= 5 * sigma + 1);
  }
}

/* ---- 4. element indices past 2^32 in the SIMD paths ------------------------------------- */
static void test_index_past_4g(void) {
  enum { N = 96 };
  const uint64_t begin = (1ull << 32) - 48, end = begin + N; /* 48 elements on each side */
  adamw_scalars s;
  hbm_adamw_options o;
  hbm_adamw_options_init(&o);
  o.rounding = HBM_ADAMW_ROUND_STOCHASTIC;
  o.seed = 3;
  hbm_adamw_scalars_init(&s, &o);
  uint16_t grad[N], weight[2][N];
  float initial[N], master[2][N], m[2][N], v[2][N];
  for (int i = 0; i < N; i++) {
    grad[i] = random_grad(0);
    initial[i] = (float)(uniform() - 0.5);
  }
#ifdef HBM_ADAMW_X86
  adamw_range_fn *fns[] = {hbm_adamw_range_avx2, hbm_adamw_range_avx512};
  const hbm_adamw_impl fn_impl[] = {HBM_ADAMW_AVX2, HBM_ADAMW_AVX512};
  for (size_t f = 0; f < sizeof fns / sizeof fns[0]; f++) {
    if (!hbm_adamw_impl_available(fn_impl[f])) continue;
    hbm_adamw_tensor t[2];
    for (int c = 0; c < 2; c++) {
      memcpy(master[c], initial, sizeof initial);
      memset(m[c], 0, sizeof m[c]);
      memset(v[c], 0, sizeof v[c]);
      /* Pointers moved back so that element `begin` is the first of each
       * array; only elements [begin, end) are touched. */
      t[c] = (hbm_adamw_tensor){(uint16_t *)((uintptr_t)weight[c] - begin * 2),
                                (const uint16_t *)((uintptr_t)grad - begin * 2),
                                (float *)((uintptr_t)master[c] - begin * 4),
                                (float *)((uintptr_t)m[c] - begin * 4),
                                (float *)((uintptr_t)v[c] - begin * 4), end, 1};
    }
    hbm_adamw_range_scalar(&s, &t[0], 0x1234567890ABCDEFull, begin, end);
    fns[f](&s, &t[1], 0x1234567890ABCDEFull, begin, end);
    CHECK(memcmp(weight[0], weight[1], sizeof weight[0]) == 0);
    CHECK(memcmp(master[0], master[1], sizeof master[0]) == 0);
  }
#else
  (void)s;
  (void)weight;
  (void)master;
  (void)m;
  (void)v;
#endif
}

/* ---- 5. bad arguments ------------------------------------------------------------------ */
static int last_error;
static char last_message[512];
static void on_error(int err, const char *message, void *arg) {
  (void)arg;
  last_error = err;
  snprintf(last_message, sizeof last_message, "%s", message);
}

/* Refused with `want` and a message that holds `words` (what is wrong, and where). */
static void expect_rejected(const char *what, const hbm_adamw_tensor *t, size_t n, const hbm_adamw_options *o,
                            int want, const char *words) {
  last_error = 0;
  last_message[0] = 0;
  int rc = hbm_adamw_step(t, n, o);
  if (rc != want) fprintf(stderr, "%s: got %d, want %d\n", what, rc, want);
  CHECK(rc == want);
  CHECK(last_error == want && last_message[0]); /* reported with a message */
  if (!strstr(last_message, words)) fprintf(stderr, "%s: message '%s' lacks '%s'\n", what, last_message, words);
  CHECK(strstr(last_message, words) != NULL);
}

static void test_bad_arguments(void) {
  hbm_set_error_handler(on_error, NULL);
  enum { N = 64 };
  static uint16_t weight[2 * N], grad[2 * N];
  static float master[2 * N], m[2 * N], v[2 * N];
  for (int i = 0; i < 2 * N; i++) master[i] = 1.0f;
  hbm_adamw_tensor good[2] = {{weight, grad, master, m, v, N, 1}, {weight + N, grad + N, master + N, m + N, v + N, N, 1}};
  hbm_adamw_options o;
  hbm_adamw_options_init(&o);
  hbm_adamw_tensor t[2];

  expect_rejected("NULL tensors", NULL, 1, &o, HBM_EINVAL, "adamw: tensors is NULL");
  expect_rejected("no tensors", good, 0, &o, HBM_EINVAL, "adamw: no tensors");
  expect_rejected("NULL options", good, 2, NULL, HBM_EINVAL, "adamw: options is NULL");
#define BAD_TENSOR(what, field, value, words) \
  memcpy(t, good, sizeof t);                  \
  t[1].field = value;                         \
  expect_rejected(what, t, 2, &o, HBM_EINVAL, words)
  BAD_TENSOR("NULL weight", weight, NULL, "tensor 1: weight is NULL");
  BAD_TENSOR("NULL grad", grad, NULL, "tensor 1: grad is NULL");
  BAD_TENSOR("NULL master", master, NULL, "tensor 1: master is NULL");
  BAD_TENSOR("NULL exp_avg", exp_avg, NULL, "tensor 1: exp_avg is NULL");
  BAD_TENSOR("NULL exp_avg_sq", exp_avg_sq, NULL, "tensor 1: exp_avg_sq is NULL");
  BAD_TENSOR("zero count", count, 0, "tensor 1: count is 0");
  BAD_TENSOR("absurd count", count, UINT64_MAX / 2, "tensor 1: count 9223372036854775807 is absurd");
  BAD_TENSOR("misaligned master", master, (float *)((char *)(master + N) + 1), "is not aligned to its 4-byte element");
  BAD_TENSOR("misaligned exp_avg", exp_avg, (float *)((char *)(m + N) + 2), "tensor 1: exp_avg");
  BAD_TENSOR("misaligned weight", weight, (uint16_t *)((char *)(weight + N) + 1), "is not aligned to its 2-byte element");
  BAD_TENSOR("m is v", exp_avg, v + N, "overlaps tensor 1 exp_avg");
  BAD_TENSOR("master overlaps the other tensor's master", master, master + N / 2, "tensor 0 master overlaps tensor 1 master");
  BAD_TENSOR("weight overlaps the other tensor's grad", weight, (uint16_t *)grad + 10, "tensor 0 grad overlaps tensor 1 weight");
  BAD_TENSOR("master overlaps a grad", master, (float *)(void *)grad, " overlaps tensor ");
#undef BAD_TENSOR
  /* each count is allowed, their sum is not (rejected before anything is touched) */
  hbm_adamw_tensor huge[3];
  for (int k = 0; k < 3; k++) {
    huge[k] = good[0];
    huge[k].count = 1ull << 55;
  }
  expect_rejected("absurd total", huge, 3, &o, HBM_EINVAL, "tensors 0 to 2 hold more than 2^56 elements");
#define BAD_OPTION(what, field, value, words) \
  hbm_adamw_options_init(&o);            \
  o.field = value;                       \
  expect_rejected(what, good, 2, &o, HBM_EINVAL, words)
  BAD_OPTION("negative lr", lr, -1e-3, "lr -0.001 must be");
  BAD_OPTION("NaN lr", lr, NAN, "adamw: lr ");
  BAD_OPTION("beta1 1", beta1, 1.0, "beta1 1 must be in [0, 1)");
  BAD_OPTION("beta1 negative", beta1, -0.1, "beta1 -0.1 must be");
  BAD_OPTION("beta2 NaN", beta2, NAN, "adamw: beta2 ");
  BAD_OPTION("beta2 above 1", beta2, 1.5, "beta2 1.5 must be in [0, 1)");
  BAD_OPTION("negative eps", eps, -1e-8, "eps -1e-08 must be");
  BAD_OPTION("infinite eps", eps, INFINITY, "adamw: eps inf");
  BAD_OPTION("negative weight decay", weight_decay, -0.1, "weight_decay -0.1 must be");
  BAD_OPTION("infinite weight decay", weight_decay, INFINITY, "weight_decay inf");
  BAD_OPTION("step 0", step, 0, "step must be >= 1");
  BAD_OPTION("grad_scale 0", grad_scale, 0.0, "grad_scale 0 must be");
  BAD_OPTION("grad_scale negative", grad_scale, -2.0, "grad_scale -2 must be");
  BAD_OPTION("grad_scale infinite", grad_scale, INFINITY, "grad_scale inf");
  BAD_OPTION("grad_scale that rounds to float 0", grad_scale, 1e-46, "grad_scale 1e-46 must be finite and > 0 as a float");
  BAD_OPTION("grad_scale that rounds to float Inf", grad_scale, 1e39, "grad_scale 1e+39");
  BAD_OPTION("unknown rounding", rounding, (hbm_adamw_rounding)7, "unknown rounding mode 7");
  BAD_OPTION("negative threads", threads, -1, "threads -1 must be >= 0");
  BAD_OPTION("unknown impl", impl, (hbm_adamw_impl)99, "unknown impl 99");
#undef BAD_OPTION
  /* nothing was written by any rejected call */
  for (int i = 0; i < 2 * N; i++) CHECK(master[i] == 1.0f && weight[i] == 0 && m[i] == 0.0f && v[i] == 0.0f);

  /* Two tensors may read one gradient (read-only overlap is harmless). */
  hbm_adamw_options_init(&o);
  memcpy(t, good, sizeof t);
  t[1].grad = grad;
  CHECK(hbm_adamw_step(t, 2, &o) == HBM_OK);
  for (int i = 0; i < HBM_ADAMW_IMPL_COUNT; i++)
    if (!hbm_adamw_impl_available((hbm_adamw_impl)i)) {
      o.impl = (hbm_adamw_impl)i;
      char words[64];
      snprintf(words, sizeof words, "impl %s is not available", hbm_adamw_impl_name((hbm_adamw_impl)i));
      expect_rejected("unavailable impl", good, 2, &o, HBM_EUNSUPPORTED, words);
    }
  hbm_set_error_handler(NULL, NULL);

  /* names */
  for (int i = 0; i < HBM_ADAMW_IMPL_COUNT; i++) {
    hbm_adamw_impl parsed;
    CHECK(hbm_adamw_impl_parse(hbm_adamw_impl_name((hbm_adamw_impl)i), &parsed) == HBM_OK && parsed == (hbm_adamw_impl)i);
  }
  hbm_adamw_impl parsed;
  CHECK(hbm_adamw_impl_parse("avx3", &parsed) == HBM_EINVAL);
  CHECK(hbm_adamw_impl_name(HBM_ADAMW_IMPL_COUNT) == NULL);
  CHECK(hbm_adamw_impl_available(HBM_ADAMW_AUTO) && hbm_adamw_impl_available(HBM_ADAMW_REFERENCE));
}

/* The defaults are PyTorch's torch.optim.AdamW (hbm.h), whatever the struct held. */
static void test_defaults(void) {
  hbm_adamw_options o;
  memset(&o, 0xA5, sizeof o);
  hbm_adamw_options_init(&o);
  CHECK(o.lr == 1e-3 && o.beta1 == 0.9 && o.beta2 == 0.999 && o.eps == 1e-8 && o.weight_decay == 1e-2);
  CHECK(o.step == 1 && o.grad_scale == 1.0 && o.rounding == HBM_ADAMW_ROUND_NEAREST_EVEN && o.seed == 0);
  CHECK(o.threads == 0 && o.impl == HBM_ADAMW_AUTO);
  hbm_adamw_options_init(NULL); /* does nothing */
}

/* Edges: a total of exactly 2^56 elements is allowed, one more is not
 * (validated only: the pointers are far apart and never read); names
 * parsed from NULL; PyTorch's large-weight lerp form at exactly 1 - beta1 =
 * 0.5; the most threads a step takes. */
static void test_edges(void) {
  hbm_adamw_options o;
  hbm_adamw_options_init(&o);
  hbm_adamw_tensor far[2];
  for (int k = 0; k < 2; k++) {
    uintptr_t base = (uintptr_t)(5 * k + 1) << 58; /* arrays 2^58 bytes apart */
    far[k] = (hbm_adamw_tensor){(uint16_t *)base, (const uint16_t *)(base + (1ull << 58)),
                                (float *)(base + (2ull << 58)), (float *)(base + (3ull << 58)),
                                (float *)(base + (4ull << 58)), 1ull << 55, 1};
  }
  CHECK(hbm_adamw_validate(far, 2, &o) == HBM_OK);
  hbm_set_error_handler(on_error, NULL);
  far[1].count++;
  expect_rejected("one past 2^56 in all", far, 2, &o, HBM_EINVAL, "tensors 0 to 1 hold more than 2^56 elements in all");
  hbm_set_error_handler(NULL, NULL);
  hbm_adamw_impl parsed = HBM_ADAMW_AVX2;
  CHECK(hbm_adamw_impl_parse(NULL, &parsed) == HBM_EINVAL && parsed == HBM_ADAMW_AVX2);
  CHECK(hbm_adamw_impl_parse("scalar", NULL) == HBM_EINVAL);
  /* auto is the widest path the CPU has */
  CHECK(hbm_adamw_impl_best() == (hbm_adamw_impl_available(HBM_ADAMW_AVX512) ? HBM_ADAMW_AVX512
                                  : hbm_adamw_impl_available(HBM_ADAMW_AVX2) ? HBM_ADAMW_AVX2
                                                                             : HBM_ADAMW_SCALAR));

  /* beta1 0.5: m = g - (g - m) * 0.5, which here differs from m + 0.5 * (g - m) */
  const hbm_adamw_impl impls[] = {HBM_ADAMW_REFERENCE, HBM_ADAMW_SCALAR, HBM_ADAMW_AVX2, HBM_ADAMW_AVX512};
  enum { N = 40 };
  for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
    if (!hbm_adamw_impl_available(impls[k])) continue;
    uint16_t weight[N], grad[N];
    float master[N], m[N], v[N];
    for (int i = 0; i < N; i++) {
      weight[i] = 0;
      grad[i] = 0x3300; /* 2^-25 */
      master[i] = 0.0f;
      m[i] = bits_float(0x3F800001); /* 1 + 2^-23 */
      v[i] = 0.0f;
    }
    hbm_adamw_tensor t = {weight, grad, master, m, v, N, 0};
    hbm_adamw_options_init(&o);
    o.lr = 0.0;
    o.beta1 = 0.5;
    o.impl = impls[k];
    CHECK(hbm_adamw_step(&t, 1, &o) == HBM_OK);
    for (int i = 0; i < N; i++) CHECK(float_bits(m[i]) == 0x3F000002); /* the other form: 0x3F000001 */
  }

  /* 256 threads, each with a share, against the reference */
  uint64_t counts[1] = {256 * 64 + 3};
  rng = 77;
  problem ref = problem_make(counts, 1), many = problem_clone(&ref);
  ref.poisoned[0] = many.poisoned[0] = 0;
  fill_grads(&ref, &many, 9, 1);
  hbm_adamw_options_init(&o);
  o.impl = HBM_ADAMW_REFERENCE;
  CHECK(hbm_adamw_step(ref.tensors, 1, &o) == HBM_OK);
  o.impl = HBM_ADAMW_SCALAR;
  o.threads = 256;
  CHECK(hbm_adamw_thread_count(counts[0], 256, HBM_ADAMW_SCALAR) == 256);
  CHECK(hbm_adamw_step(many.tensors, 1, &o) == HBM_OK);
  agreement ag = compare(&ref, &many);
  CHECK_EQ_U64(ag.differing, 0);
  problem_free(&ref);
  problem_free(&many);
}

/* The threads a step runs on, as reports give them: the rule hbm.h states. */
static void test_thread_count(void) {
  CHECK(hbm_adamw_thread_count(1ull << 30, 5, HBM_ADAMW_SCALAR) == 5);
  CHECK(hbm_adamw_thread_count(100, 64, HBM_ADAMW_SCALAR) == 2);   /* at most one per 64 elements */
  CHECK(hbm_adamw_thread_count(64, 64, HBM_ADAMW_SCALAR) == 1);
  CHECK(hbm_adamw_thread_count(1ull << 56, 256, HBM_ADAMW_SCALAR) == 256); /* the most a step takes */
  CHECK(hbm_adamw_thread_count((1ull << 56) - 62, 256, HBM_ADAMW_SCALAR) == 256);
  CHECK(hbm_adamw_thread_count(1ull << 40, 100000, HBM_ADAMW_SCALAR) == 256);
  CHECK(hbm_adamw_thread_count(1ull << 30, 8, HBM_ADAMW_REFERENCE) == 1); /* single-threaded */
  CHECK(hbm_adamw_thread_count(1ull << 30, -3, HBM_ADAMW_SCALAR) == 0); /* the step refuses it */
  CHECK(hbm_adamw_thread_count(1ull << 30, -1, HBM_ADAMW_REFERENCE) == 0);
  /* Whatever else the step refuses, it runs on none: an impl number it does
   * not know, one this CPU lacks, no elements, more than 2^56. */
  CHECK(hbm_adamw_thread_count(1000, 4, (hbm_adamw_impl)99) == 0);
  CHECK(hbm_adamw_thread_count(1000, 4, HBM_ADAMW_IMPL_COUNT) == 0);
  CHECK(hbm_adamw_thread_count(1000, 4, (hbm_adamw_impl)-1) == 0);
  for (int i = 0; i < HBM_ADAMW_IMPL_COUNT; i++)
    CHECK((hbm_adamw_thread_count(1000, 4, (hbm_adamw_impl)i) > 0) == hbm_adamw_impl_available((hbm_adamw_impl)i));
  CHECK(hbm_adamw_thread_count(0, 4, HBM_ADAMW_SCALAR) == 0);
  CHECK(hbm_adamw_thread_count(0, 0, HBM_ADAMW_REFERENCE) == 0);
  CHECK(hbm_adamw_thread_count((1ull << 56) + 1, 4, HBM_ADAMW_SCALAR) == 0);
  CHECK(hbm_adamw_thread_count(UINT64_MAX, 256, HBM_ADAMW_SCALAR) == 0);
  CHECK(hbm_adamw_thread_count(32768, 0, HBM_ADAMW_AUTO) == 1);   /* automatic: too little work to share */
  int cpus = hbm_adamw_thread_count(1ull << 40, 0, HBM_ADAMW_SCALAR);
  CHECK(cpus >= 1 && cpus <= 256);
}

int main(void) {
  uint64_t seed = test_seed("test_adamw");
  rng = seed;
  test_defaults();
  test_bad_arguments();
  test_reference_against_double();
  test_round_nearest_even();
  test_stochastic_unbiased();
  test_stochastic_seed();
  test_index_past_4g();
  test_fast_paths(seed);
  test_thread_count();
  test_edges();
  return test_done("test_adamw");
}
