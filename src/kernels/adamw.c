/* adamw.c: fused mixed-precision AdamW on the CPU: argument checks, the
 * scalar reference, run-time choice of the SIMD path, and threads.
 *
 * Work is split by element across threads; each thread walks the tensors its
 * share covers and calls the chosen range function on each piece. Shares
 * start at multiples of 64 elements of a tensor so that every SIMD block
 * starts on a multiple of its width (adamw_random16 relies on it). */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"
#include "kernels/adamw_internal.h"

/* Below this many elements per thread, starting a thread costs more than it saves. */
#define ADAMW_MIN_ELEMENTS_PER_THREAD (1u << 16)
#define ADAMW_MAX_THREADS 256
/* Share boundaries are multiples of this within a tensor (>= every SIMD width). */
#define ADAMW_SHARE_ALIGN 64u
/* Counts above this are absurd (and could overflow byte arithmetic). */
#define ADAMW_MAX_COUNT (1ull << 56)

/* ---- options and names ------------------------------------------------------------ */
void hbm_adamw_options_init(hbm_adamw_options *options) {
  if (!options) return;
  memset(options, 0, sizeof *options);
  options->lr = 1e-3;
  options->beta1 = 0.9;
  options->beta2 = 0.999;
  options->eps = 1e-8;
  options->weight_decay = 1e-2;
  options->step = 1;
  options->grad_scale = 1.0;
  options->rounding = HBM_ADAMW_ROUND_NEAREST_EVEN;
  options->seed = 0;
  options->threads = 0;
  options->impl = HBM_ADAMW_AUTO;
}

static const char *const impl_names[HBM_ADAMW_IMPL_COUNT] = {"auto", "reference", "scalar", "avx2",
                                                              "avx512"};

const char *hbm_adamw_impl_name(hbm_adamw_impl impl) {
  if ((int)impl < 0 || impl >= HBM_ADAMW_IMPL_COUNT) return NULL;
  return impl_names[impl];
}

int hbm_adamw_impl_parse(const char *name, hbm_adamw_impl *impl) {
  if (!name || !impl) return HBM_EINVAL;
  for (int i = 0; i < HBM_ADAMW_IMPL_COUNT; i++)
    if (!strcmp(name, impl_names[i])) {
      *impl = (hbm_adamw_impl)i;
      return HBM_OK;
    }
  return HBM_EINVAL;
}

int hbm_adamw_impl_available(hbm_adamw_impl impl) {
  switch (impl) {
    case HBM_ADAMW_AUTO:
    case HBM_ADAMW_REFERENCE:
    case HBM_ADAMW_SCALAR: return 1;
#ifdef HBM_ADAMW_X86
    /* __builtin_cpu_supports also checks that the OS saves the vector state. */
    case HBM_ADAMW_AVX2: return __builtin_cpu_supports("avx2") != 0;
    case HBM_ADAMW_AVX512: return __builtin_cpu_supports("avx512f") != 0;
#endif
    default: return 0;
  }
}

hbm_adamw_impl hbm_adamw_impl_best(void) {
  if (hbm_adamw_impl_available(HBM_ADAMW_AVX512)) return HBM_ADAMW_AVX512;
  if (hbm_adamw_impl_available(HBM_ADAMW_AVX2)) return HBM_ADAMW_AVX2;
  return HBM_ADAMW_SCALAR;
}

/* ---- argument checks ----------------------------------------------------------------- */
typedef struct byte_range {
  uintptr_t begin, end;
  int written;
  size_t tensor;
  const char *what;
} byte_range;

static int byte_range_cmp(const void *a, const void *b) {
  const byte_range *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int finite_nonnegative(double x) { return isfinite(x) && x >= 0.0; }

static int validate_options(const hbm_adamw_options *o) {
  if (!finite_nonnegative(o->lr)) return hbm_report_error(HBM_EINVAL, "adamw: lr %g must be finite and >= 0", o->lr);
  if (!(o->beta1 >= 0.0 && o->beta1 < 1.0))
    return hbm_report_error(HBM_EINVAL, "adamw: beta1 %g must be in [0, 1)", o->beta1);
  if (!(o->beta2 >= 0.0 && o->beta2 < 1.0))
    return hbm_report_error(HBM_EINVAL, "adamw: beta2 %g must be in [0, 1)", o->beta2);
  if (!finite_nonnegative(o->eps)) return hbm_report_error(HBM_EINVAL, "adamw: eps %g must be finite and >= 0", o->eps);
  if (!finite_nonnegative(o->weight_decay))
    return hbm_report_error(HBM_EINVAL, "adamw: weight_decay %g must be finite and >= 0", o->weight_decay);
  if (o->step == 0) return hbm_report_error(HBM_EINVAL, "adamw: step must be >= 1 (1 on the first update)");
  /* The element loop divides by the float the scale rounds to: that must be
   * finite and > 0 too (1e-46 would become 0 and 1e39 Inf). */
  if (!(isfinite(o->grad_scale) && o->grad_scale > 0.0 && isfinite((float)o->grad_scale) &&
        (float)o->grad_scale > 0.0f))
    return hbm_report_error(HBM_EINVAL, "adamw: grad_scale %g must be finite and > 0 as a float (1 for none)",
                            o->grad_scale);
  if (o->rounding != HBM_ADAMW_ROUND_NEAREST_EVEN && o->rounding != HBM_ADAMW_ROUND_STOCHASTIC)
    return hbm_report_error(HBM_EINVAL, "adamw: unknown rounding mode %d", (int)o->rounding);
  if (o->threads < 0) return hbm_report_error(HBM_EINVAL, "adamw: threads %d must be >= 0", o->threads);
  if (!hbm_adamw_impl_name(o->impl)) return hbm_report_error(HBM_EINVAL, "adamw: unknown impl %d", (int)o->impl);
  return HBM_OK;
}

static int validate_tensor(const hbm_adamw_tensor *t, size_t i) {
  const struct { const void *p; const char *what; size_t align; } arrays[] = {
      {t->weight, "weight", 2}, {t->grad, "grad", 2}, {t->master, "master", 4},
      {t->exp_avg, "exp_avg", 4}, {t->exp_avg_sq, "exp_avg_sq", 4}};
  for (size_t a = 0; a < sizeof arrays / sizeof arrays[0]; a++) {
    if (!arrays[a].p) return hbm_report_error(HBM_EINVAL, "adamw: tensor %zu: %s is NULL", i, arrays[a].what);
    if ((uintptr_t)arrays[a].p % arrays[a].align)
      return hbm_report_error(HBM_EINVAL, "adamw: tensor %zu: %s %p is not aligned to its %zu-byte element",
                              i, arrays[a].what, arrays[a].p, arrays[a].align);
  }
  if (t->count == 0) return hbm_report_error(HBM_EINVAL, "adamw: tensor %zu: count is 0", i);
  if (t->count > ADAMW_MAX_COUNT)
    return hbm_report_error(HBM_EINVAL, "adamw: tensor %zu: count %llu is absurd", i,
                            (unsigned long long)t->count);
  return HBM_OK;
}

/* No array may overlap another that is written (reading one gradient twice is harmless). */
static int validate_no_overlap(const hbm_adamw_tensor *tensors, size_t ntensors) {
  size_t nranges = ntensors * 5;
  byte_range *ranges = malloc(nranges * sizeof *ranges);
  if (!ranges) return hbm_report_error(HBM_EHOSTMEM, "adamw: no host memory to check %zu tensors", ntensors);
  size_t n = 0;
  for (size_t i = 0; i < ntensors; i++) {
    const hbm_adamw_tensor *t = &tensors[i];
    uintptr_t c = (uintptr_t)t->count;
    ranges[n++] = (byte_range){(uintptr_t)t->weight, (uintptr_t)t->weight + 2 * c, 1, i, "weight"};
    ranges[n++] = (byte_range){(uintptr_t)t->grad, (uintptr_t)t->grad + 2 * c, 0, i, "grad"};
    ranges[n++] = (byte_range){(uintptr_t)t->master, (uintptr_t)t->master + 4 * c, 1, i, "master"};
    ranges[n++] = (byte_range){(uintptr_t)t->exp_avg, (uintptr_t)t->exp_avg + 4 * c, 1, i, "exp_avg"};
    ranges[n++] = (byte_range){(uintptr_t)t->exp_avg_sq, (uintptr_t)t->exp_avg_sq + 4 * c, 1, i, "exp_avg_sq"};
  }
  qsort(ranges, n, sizeof *ranges, byte_range_cmp);
  /* Sweep in address order, remembering the furthest end of any earlier range
   * and of any earlier written range. */
  const byte_range *furthest = NULL, *furthest_written = NULL;
  int rc = HBM_OK;
  for (size_t k = 0; k < n && rc == HBM_OK; k++) {
    const byte_range *r = &ranges[k];
    const byte_range *clash = NULL;
    if (furthest_written && r->begin < furthest_written->end) clash = furthest_written;
    else if (r->written && furthest && r->begin < furthest->end) clash = furthest;
    if (clash)
      rc = hbm_report_error(HBM_EINVAL, "adamw: tensor %zu %s overlaps tensor %zu %s", clash->tensor,
                            clash->what, r->tensor, r->what);
    if (!furthest || r->end > furthest->end) furthest = r;
    if (r->written && (!furthest_written || r->end > furthest_written->end)) furthest_written = r;
  }
  free(ranges);
  return rc;
}

int hbm_adamw_validate(const hbm_adamw_tensor *tensors, size_t ntensors, const hbm_adamw_options *options) {
  if (!options) return hbm_report_error(HBM_EINVAL, "adamw: options is NULL");
  if (!tensors) return hbm_report_error(HBM_EINVAL, "adamw: tensors is NULL");
  if (ntensors == 0) return hbm_report_error(HBM_EINVAL, "adamw: no tensors");
  if (ntensors > SIZE_MAX / (5 * sizeof(byte_range)))
    return hbm_report_error(HBM_EINVAL, "adamw: %zu tensors is absurd", ntensors);
  int rc = validate_options(options);
  uint64_t total = 0;
  for (size_t i = 0; i < ntensors && rc == HBM_OK; i++) {
    rc = validate_tensor(&tensors[i], i);
    total += rc == HBM_OK ? tensors[i].count : 0;
    if (rc == HBM_OK && total > ADAMW_MAX_COUNT)
      rc = hbm_report_error(HBM_EINVAL, "adamw: tensors 0 to %zu hold more than 2^56 elements in all", i);
  }
  if (rc == HBM_OK) rc = validate_no_overlap(tensors, ntensors);
  return rc;
}

/* ---- scalars ---------------------------------------------------------------------------- */
void hbm_adamw_scalars_init(adamw_scalars *s, const hbm_adamw_options *o) {
  /* In double, as Python computes them; each rounded to float once. */
  double step = (double)o->step;
  double bias_correction1 = 1.0 - pow(o->beta1, step);
  double bias_correction2 = 1.0 - pow(o->beta2, step);
  memset(s, 0, sizeof *s);
  s->decay_factor = (float)(1.0 - o->lr * o->weight_decay);
  s->lerp_weight = (float)(1.0 - o->beta1);
  s->lerp_weight_small = fabsf(s->lerp_weight) < 0.5f;
  s->lerp_weight_complement = 1.0f - s->lerp_weight;
  s->beta2 = (float)o->beta2;
  s->one_minus_beta2 = (float)(1.0 - o->beta2);
  s->bias_correction2_sqrt = (float)sqrt(bias_correction2);
  s->neg_step_size = (float)-(o->lr / bias_correction1);
  s->eps = (float)o->eps;
  s->grad_scale = (float)o->grad_scale;
  s->stochastic = o->rounding == HBM_ADAMW_ROUND_STOCHASTIC;
  s->stochastic_key = adamw_mix64(adamw_mix64(o->seed) ^ o->step);
}

/* ---- the scalar paths ------------------------------------------------------------------ */
void hbm_adamw_range_scalar(const adamw_scalars *s, const hbm_adamw_tensor *t, uint64_t tensor_key,
                        uint64_t begin, uint64_t end) {
  int decay = t->weight_decay != 0;
  for (uint64_t i = begin; i < end; i++)
    t->weight[i] = adamw_update_element(s, decay, tensor_key, i, t->grad[i], &t->master[i],
                                        &t->exp_avg[i], &t->exp_avg_sq[i]);
}

/* The oracle: every element of every tensor in order, on the calling thread. */
static void adamw_reference(const adamw_scalars *s, const hbm_adamw_tensor *tensors, size_t ntensors) {
  for (size_t k = 0; k < ntensors; k++) {
    const hbm_adamw_tensor *t = &tensors[k];
    uint64_t key = adamw_tensor_key(s->stochastic_key, k);
    for (uint64_t i = 0; i < t->count; i++)
      t->weight[i] = adamw_update_element(s, t->weight_decay != 0, key, i, t->grad[i], &t->master[i],
                                          &t->exp_avg[i], &t->exp_avg_sq[i]);
  }
}

/* ---- threads --------------------------------------------------------------------------- */
/* One thread's share: elements [begin, end) of the list seen as one array. */
typedef struct adamw_share {
  const adamw_scalars *scalars;
  const hbm_adamw_tensor *tensors;
  const uint64_t *tensor_start; /* tensor_start[k]: global index of tensor k's element 0 */
  size_t ntensors;
  adamw_range_fn *range;
  uint64_t begin, end;
} adamw_share;

/* The tensor that holds global element `index`: the last k with start <= index. */
static size_t tensor_of(const uint64_t *tensor_start, size_t ntensors, uint64_t index) {
  size_t lo = 0, hi = ntensors; /* answer in [lo, hi) */
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (tensor_start[mid] <= index) lo = mid;
    else hi = mid;
  }
  return lo;
}

static void *adamw_share_run(void *arg) {
  const adamw_share *sh = arg;
  uint64_t at = sh->begin;
  size_t k = tensor_of(sh->tensor_start, sh->ntensors, at);
  while (at < sh->end && k < sh->ntensors) {
    const hbm_adamw_tensor *t = &sh->tensors[k];
    uint64_t start = sh->tensor_start[k];
    uint64_t stop = start + t->count < sh->end ? start + t->count : sh->end;
    if (stop > at)
      sh->range(sh->scalars, t, adamw_tensor_key(sh->scalars->stochastic_key, k), at - start, stop - start);
    at = stop > at ? stop : at;
    k++;
  }
  return NULL;
}

static int cpus_available(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

/* Asked for: that many, while each has a share. Automatic: one per CPU,
 * while each has enough work to repay starting it. */
static int thread_count(uint64_t total, int requested_threads) {
  uint64_t threads, useful;
  if (requested_threads > 0) {
    threads = (uint64_t)requested_threads;
    useful = total / ADAMW_SHARE_ALIGN + (total % ADAMW_SHARE_ALIGN != 0); /* shares begun; no wrap near 2^64 */
  } else {
    threads = (uint64_t)cpus_available();
    useful = total / ADAMW_MIN_ELEMENTS_PER_THREAD;
  }
  if (threads > useful) threads = useful ? useful : 1;
  if (threads > ADAMW_MAX_THREADS) threads = ADAMW_MAX_THREADS;
  return (int)threads;
}

int hbm_adamw_thread_count(uint64_t elements, int requested_threads, hbm_adamw_impl impl) {
  /* What the step refuses (validate_options, validate_tensor, its 2^56 in
   * all, an impl this CPU lacks) it runs on none. */
  if (requested_threads < 0 || !hbm_adamw_impl_name(impl) || !hbm_adamw_impl_available(impl) || elements == 0 ||
      elements > ADAMW_MAX_COUNT)
    return 0;
  if (impl == HBM_ADAMW_AUTO) impl = hbm_adamw_impl_best();
  return impl == HBM_ADAMW_REFERENCE ? 1 : thread_count(elements, requested_threads);
}

static int run_threaded(const adamw_scalars *s, const hbm_adamw_tensor *tensors, size_t ntensors,
                        adamw_range_fn *range, int requested_threads) {
  uint64_t *tensor_start = malloc(ntensors * sizeof *tensor_start);
  if (!tensor_start) return hbm_report_error(HBM_EHOSTMEM, "adamw: no host memory for %zu tensors", ntensors);
  uint64_t total = 0;
  for (size_t k = 0; k < ntensors; k++) {
    tensor_start[k] = total;
    total += tensors[k].count;
  }
  uint64_t threads = (uint64_t)thread_count(total, requested_threads);

  adamw_share shares[ADAMW_MAX_THREADS];
  pthread_t ids[ADAMW_MAX_THREADS];
  int started[ADAMW_MAX_THREADS] = {0};
  uint64_t begin = 0;
  for (uint64_t j = 0; j < threads; j++) {
    uint64_t end = total;
    if (j + 1 < threads) {
      /* An even split, moved down to a multiple of ADAMW_SHARE_ALIGN within its tensor. */
      uint64_t even = (uint64_t)((unsigned __int128)total * (j + 1) / threads);
      size_t k = tensor_of(tensor_start, ntensors, even);
      end = tensor_start[k] + ((even - tensor_start[k]) & ~(uint64_t)(ADAMW_SHARE_ALIGN - 1));
      if (end < begin) end = begin;
    }
    shares[j] = (adamw_share){s, tensors, tensor_start, ntensors, range, begin, end};
    begin = end;
  }
  /* The calling thread takes share 0; a share whose thread cannot start runs here too. */
  for (uint64_t j = 1; j < threads; j++)
    started[j] = pthread_create(&ids[j], NULL, adamw_share_run, &shares[j]) == 0;
  adamw_share_run(&shares[0]);
  for (uint64_t j = 1; j < threads; j++) {
    if (started[j]) pthread_join(ids[j], NULL);
    else adamw_share_run(&shares[j]);
  }
  free(tensor_start);
  return HBM_OK;
}

/* ---- entry point ------------------------------------------------------------------------ */
int hbm_adamw_step(const hbm_adamw_tensor *tensors, size_t ntensors, const hbm_adamw_options *options) {
  int rc = hbm_adamw_validate(tensors, ntensors, options);
  if (rc != HBM_OK) return rc;
  hbm_adamw_impl impl = options->impl == HBM_ADAMW_AUTO ? hbm_adamw_impl_best() : options->impl;
  if (!hbm_adamw_impl_available(impl))
    return hbm_report_error(HBM_EUNSUPPORTED, "adamw: impl %s is not available on this CPU",
                            hbm_adamw_impl_name(impl));
  adamw_scalars s;
  hbm_adamw_scalars_init(&s, options);
  adamw_range_fn *range = hbm_adamw_range_scalar;
  switch (impl) {
    case HBM_ADAMW_REFERENCE: adamw_reference(&s, tensors, ntensors); return HBM_OK;
#ifdef HBM_ADAMW_X86
    case HBM_ADAMW_AVX2: range = hbm_adamw_range_avx2; break;
    case HBM_ADAMW_AVX512: range = hbm_adamw_range_avx512; break;
#endif
    default: break;
  }
  return run_threaded(&s, tensors, ntensors, range, options->threads);
}
