/* adamw_gpu_check.c: validates hbm_adamw_step_cuda against the CPU reference
 * and measures it, on a machine with a CUDA GPU. Run by
 * tools/gpu_check_adamw.sh; not part of CI (CI has no GPU).
 *
 * Validation: 100 steps on random data, for each option set, through the
 * CPU reference (host copies) and the CUDA kernel (device copies) from the
 * same start and the same gradients; then every weight, master, m and v is
 * compared. Required: within 1 BF16 ulp (weights) and 1e-5 relative (master,
 * m, v); by design they are identical (any NaN equals any NaN), and a
 * difference is reported as a failure too. Tensors have odd lengths, some
 * arrays sit at odd offsets (the kernel's one-element path), others are
 * aligned (its four-element path); some receive NaN and Inf gradients; a
 * second list has 1000 small tensors (one launch for all of them).
 *
 * Speed: one step over --params parameters (default 512Mi: 8 GiB of state,
 * 14 GiB moved per step, 18 GiB of device memory at the peak, during the copy),
 * best and median of 20 after 3 warm-ups, timed with CUDA events, against a
 * device-to-device cudaMemcpy moving the same 28 bytes per parameter; and the
 * same step as 4096 tensors, and a small call's latency.
 *
 * Exit: 0 all agree, 1 a disagreement or a CUDA error, 77 no usable GPU. */
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"

#define STEPS 100

static uint64_t rng_state;
static uint64_t rng(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double uniform(void) { return (double)(rng() >> 11) * 0x1p-53; }

static uint16_t bf16_round(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

static uint16_t random_grad(int poisoned) {
  uint64_t r = rng() % 1000;
  if (r == 0) return 0x0000;
  if (poisoned && r < 12) {
    static const uint16_t specials[] = {0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81};
    return specials[rng() % 5];
  }
  double magnitude = ldexp(0.5 + uniform(), -(int)(rng() % 28) + 4);
  return bf16_round((float)((rng() & 1) ? -magnitude : magnitude));
}

#define CUDA_CHECK(call)                                                                          \
  do {                                                                                            \
    cudaError_t err_ = (call);                                                                    \
    if (err_ != cudaSuccess) {                                                                    \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_));   \
      exit(1);                                                                                    \
    }                                                                                             \
  } while (0)

static void on_error(int err, const char *message, void *arg) {
  (void)arg;
  fprintf(stderr, "hbm error %d: %s\n", err, message);
}

/* ---- a tensor list held twice: on the host (reference) and on the device ------------ */
typedef struct side {
  hbm_adamw_tensor *tensors;
  void **allocations; /* 5 per tensor */
} side;

typedef struct problem {
  size_t ntensors;
  uint64_t *counts;
  size_t *offsets; /* element offset of every array of tensor k (0: aligned) */
  int *poisoned;
  side host, device;
  uint16_t **grads; /* host gradients of the current step, per tensor */
} problem;

static void problem_make(problem *p, const uint64_t *counts, size_t ntensors) {
  memset(p, 0, sizeof *p);
  p->ntensors = ntensors;
  p->counts = malloc(ntensors * sizeof *p->counts);
  p->offsets = malloc(ntensors * sizeof *p->offsets);
  p->poisoned = malloc(ntensors * sizeof *p->poisoned);
  p->grads = malloc(ntensors * sizeof *p->grads);
  p->host.tensors = calloc(ntensors, sizeof(hbm_adamw_tensor));
  p->device.tensors = calloc(ntensors, sizeof(hbm_adamw_tensor));
  p->host.allocations = calloc(ntensors * 5, sizeof(void *));
  p->device.allocations = calloc(ntensors * 5, sizeof(void *));
  for (size_t k = 0; k < ntensors; k++) {
    uint64_t n = counts[k];
    p->counts[k] = n;
    p->offsets[k] = k % 3 == 1 ? 1 + rng() % 3 : 0; /* a third of the tensors are misaligned */
    p->poisoned[k] = k % 7 == 2;
    size_t off = p->offsets[k];
    size_t sizes[5] = {2, 2, 4, 4, 4};
    void *host_ptr[5], *device_ptr[5];
    for (int a = 0; a < 5; a++) {
      size_t bytes = (n + 4) * sizes[a];
      p->host.allocations[5 * k + a] = calloc(1, bytes);
      CUDA_CHECK(cudaMalloc(&p->device.allocations[5 * k + a], bytes));
      host_ptr[a] = (char *)p->host.allocations[5 * k + a] + off * sizes[a];
      device_ptr[a] = (char *)p->device.allocations[5 * k + a] + off * sizes[a];
    }
    hbm_adamw_tensor h = {host_ptr[0], host_ptr[1], host_ptr[2], host_ptr[3], host_ptr[4], n, k % 5 != 3};
    hbm_adamw_tensor d = {device_ptr[0], device_ptr[1], device_ptr[2], device_ptr[3], device_ptr[4], n, k % 5 != 3};
    p->host.tensors[k] = h;
    p->device.tensors[k] = d;
    for (uint64_t i = 0; i < n; i++) {
      h.master[i] = (float)((uniform() * 2 - 1) * 0.2);
      h.weight[i] = bf16_round(h.master[i]);
    }
    CUDA_CHECK(cudaMemcpy(d.master, h.master, n * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d.weight, h.weight, n * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(d.exp_avg, 0, n * 4));
    CUDA_CHECK(cudaMemset(d.exp_avg_sq, 0, n * 4));
    p->grads[k] = (uint16_t *)h.grad;
  }
}

static void problem_free(problem *p) {
  for (size_t i = 0; i < p->ntensors * 5; i++) {
    free(p->host.allocations[i]);
    cudaFree(p->device.allocations[i]);
  }
  free(p->counts); free(p->offsets); free(p->poisoned); free(p->grads);
  free(p->host.tensors); free(p->device.tensors); free(p->host.allocations); free(p->device.allocations);
}

static int bf16_ulps(uint16_t a, uint16_t b) {
  int na = (a & 0x7FFF) > 0x7F80, nb = (b & 0x7FFF) > 0x7F80;
  if (na || nb) return na && nb ? 0 : 1 << 20;
  int ia = (a & 0x8000) ? -(int)(a & 0x7FFF) : (int)a, ib = (b & 0x8000) ? -(int)(b & 0x7FFF) : (int)b;
  return abs(ia - ib);
}
static double rel_diff(float a, float b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0.0 : INFINITY;
  if (a == b) return 0.0;
  if (isinf(a) || isinf(b)) return INFINITY;
  return fabs((double)a - (double)b) / fmax(fabs((double)a), fabs((double)b));
}
static int same(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0; }

/* Runs STEPS steps on both sides and compares. Returns 1 if within the tolerance and identical. */
static int validate(const char *name, const uint64_t *counts, size_t ntensors, hbm_adamw_options o) {
  problem p;
  problem_make(&p, counts, ntensors);
  for (uint64_t step = 1; step <= STEPS; step++) {
    for (size_t k = 0; k < ntensors; k++) {
      for (uint64_t i = 0; i < counts[k]; i++) p.grads[k][i] = random_grad(p.poisoned[k]);
      CUDA_CHECK(cudaMemcpy((void *)p.device.tensors[k].grad, p.grads[k], counts[k] * 2, cudaMemcpyHostToDevice));
    }
    o.step = step;
    o.impl = HBM_ADAMW_REFERENCE;
    if (hbm_adamw_step(p.host.tensors, ntensors, &o) != HBM_OK) exit(1);
    if (hbm_adamw_step_cuda(p.device.tensors, ntensors, &o, NULL) != HBM_OK) exit(1);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  uint64_t elements = 0, differing = 0, nans = 0;
  int max_ulps = 0;
  double max_rel = 0;
  for (size_t k = 0; k < ntensors; k++) {
    uint64_t n = counts[k];
    const hbm_adamw_tensor *h = &p.host.tensors[k], *d = &p.device.tensors[k];
    uint16_t *weight = malloc(n * 2);
    float *master = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
    CUDA_CHECK(cudaMemcpy(weight, d->weight, n * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(master, d->master, n * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(m, d->exp_avg, n * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(v, d->exp_avg_sq, n * 4, cudaMemcpyDeviceToHost));
    for (uint64_t i = 0; i < n; i++) {
      int ulps = bf16_ulps(h->weight[i], weight[i]);
      double r = fmax(rel_diff(h->master[i], master[i]),
                      fmax(rel_diff(h->exp_avg[i], m[i]), rel_diff(h->exp_avg_sq[i], v[i])));
      if (ulps > max_ulps) max_ulps = ulps;
      if (r > max_rel) max_rel = r;
      differing += !(ulps == 0 && same(h->master[i], master[i]) && same(h->exp_avg[i], m[i]) &&
                     same(h->exp_avg_sq[i], v[i]));
      nans += isnan(h->master[i]) != 0;
      elements++;
    }
    free(weight); free(master); free(m); free(v);
  }
  problem_free(&p);
  int ok = max_ulps <= 1 && max_rel <= 1e-5 && differing == 0;
  printf("%s %-26s %zu tensors, %" PRIu64 " elements (%" PRIu64 " NaN) after %d steps: %" PRIu64
         " differ; max weight %d ulp, max rel %.3g\n",
         ok ? "PASS" : "FAIL", name, ntensors, elements, nans, STEPS, differing, max_ulps, max_rel);
  return ok;
}

/* ---- speed ------------------------------------------------------------------------------- */
static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

typedef struct timing { float best_ms, median_ms; } timing;

/* Times `reps` calls of one step (or of the copy when tensors is NULL). */
static timing time_steps(const hbm_adamw_tensor *tensors, size_t ntensors, void *copy_dst, const void *copy_src,
                         size_t copy_bytes, int reps) {
  enum { WARMUP = 3, MAX_REPS = 64 };
  float ms[MAX_REPS];
  if (reps > MAX_REPS) reps = MAX_REPS;
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  hbm_adamw_options o;
  hbm_adamw_options_init(&o);
  for (int r = -WARMUP; r < reps; r++) {
    o.step = (uint64_t)(r + WARMUP + 1);
    CUDA_CHECK(cudaEventRecord(start, NULL));
    if (tensors) {
      if (hbm_adamw_step_cuda(tensors, ntensors, &o, NULL) != HBM_OK) exit(1);
    } else {
      CUDA_CHECK(cudaMemcpyAsync(copy_dst, copy_src, copy_bytes, cudaMemcpyDeviceToDevice, NULL));
    }
    CUDA_CHECK(cudaEventRecord(stop, NULL));
    CUDA_CHECK(cudaEventSynchronize(stop));
    if (r >= 0) CUDA_CHECK(cudaEventElapsedTime(&ms[r], start, stop));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  qsort(ms, (size_t)reps, sizeof ms[0], cmp_float);
  return (timing){ms[0], ms[reps / 2]};
}

static void bench(uint64_t params) {
  /* One allocation per array; 4096-tensor view of the same memory for the list case. */
  uint16_t *weight, *grad;
  float *master, *m, *v;
  CUDA_CHECK(cudaMalloc((void **)&weight, params * 2));
  CUDA_CHECK(cudaMalloc((void **)&grad, params * 2));
  CUDA_CHECK(cudaMalloc((void **)&master, params * 4));
  CUDA_CHECK(cudaMalloc((void **)&m, params * 4));
  CUDA_CHECK(cudaMalloc((void **)&v, params * 4));
  CUDA_CHECK(cudaMemset(grad, 0x3A, params * 2));   /* BF16 0x3A3A: 7.1e-4 */
  CUDA_CHECK(cudaMemset(master, 0x3C, params * 4)); /* 0.0115 */
  CUDA_CHECK(cudaMemset(m, 0, params * 4));
  CUDA_CHECK(cudaMemset(v, 0, params * 4));
  hbm_adamw_tensor one = {weight, grad, master, m, v, params, 1};
  timing fused = time_steps(&one, 1, NULL, NULL, 0, 20);

  enum { LIST = 4096 };
  static hbm_adamw_tensor list[LIST];
  uint64_t per = params / LIST;
  for (uint64_t k = 0; k < LIST; k++)
    list[k] = (hbm_adamw_tensor){weight + k * per, grad + k * per, master + k * per, m + k * per, v + k * per,
                                 per, (int)(k % 5 != 3)};
  timing listed = time_steps(list, LIST, NULL, NULL, 0, 20);

  hbm_adamw_tensor small = {weight, grad, master, m, v, 1 << 16, 1};
  timing small_call = time_steps(&small, 1, NULL, NULL, 0, 20);

  /* The copy moves the same bytes: 14 read + 14 written per parameter. */
  size_t copy_bytes = (size_t)params * 14;
  void *src, *dst;
  CUDA_CHECK(cudaFree(m)); /* make room: the copy reuses the moments' memory */
  CUDA_CHECK(cudaFree(v));
  CUDA_CHECK(cudaMalloc(&src, copy_bytes));
  CUDA_CHECK(cudaMalloc(&dst, copy_bytes));
  timing copy = time_steps(NULL, 0, dst, src, copy_bytes, 20);
  cudaFree(src); cudaFree(dst);
  cudaFree(weight); cudaFree(grad); cudaFree(master);

  double fused_gbps = params * 28.0 / (fused.best_ms * 1e6);
  double list_gbps = (double)per * LIST * 28.0 / (listed.best_ms * 1e6);
  double copy_gbps = 2.0 * (double)copy_bytes / (copy.best_ms * 1e6);
  printf("speed: %" PRIu64 " params: fused %.3f ms (median %.3f) %.0f GB/s; as %d tensors %.3f ms %.0f GB/s; "
         "D2D copy %.3f ms %.0f GB/s; fused/copy %.2f; 65536-param call %.1f us\n",
         params, fused.best_ms, fused.median_ms, fused_gbps, LIST, listed.best_ms, list_gbps, copy.best_ms, copy_gbps,
         fused_gbps / copy_gbps, small_call.best_ms * 1e3);
  printf("{\"params\": %" PRIu64 ", \"fused_ms\": %.4f, \"fused_median_ms\": %.4f, \"fused_gbps\": %.1f, "
         "\"list_tensors\": %d, \"list_ms\": %.4f, \"list_gbps\": %.1f, \"copy_gbps\": %.1f, "
         "\"fused_vs_copy\": %.3f, \"small_call_us\": %.2f}\n",
         params, fused.best_ms, fused.median_ms, fused_gbps, LIST, listed.best_ms, list_gbps, copy_gbps,
         fused_gbps / copy_gbps, small_call.best_ms * 1e3);
}

int main(int argc, char **argv) {
  uint64_t params = 512ull << 20;
  int quick = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--params") && i + 1 < argc) params = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--quick")) quick = 1;
    else {
      fprintf(stderr, "usage: hbm_adamw_gpu_check [--params N] [--quick]\n"
                      "  --params N  parameters for the speed run (default 536870912: 8 GiB of state;\n"
                      "              the copy needs 36 bytes of device memory per parameter at the peak)\n"
                      "  --quick     validation only, no speed run\n");
      return 2;
    }
  }
  if (params < 4096) params = 4096;
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    printf("no usable CUDA device: %s\n", err != cudaSuccess ? cudaGetErrorString(err) : "none found");
    return 77;
  }
  struct cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s, %d SMs, %.1f GiB, compute capability %d.%d\n", prop.name, prop.multiProcessorCount,
         prop.totalGlobalMem / 1073741824.0, prop.major, prop.minor);
  hbm_set_error_handler(on_error, NULL);
  rng_state = 20241129;

  const uint64_t counts[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 127, 1000, 4095, 4096, 4097,
                             8193, 65537, 1000003, 5};
  size_t ntensors = sizeof counts / sizeof counts[0];
  uint64_t many[1000];
  for (int k = 0; k < 1000; k++) many[k] = 1 + rng() % 5000;

  int ok = 1;
  hbm_adamw_options o;
  hbm_adamw_options_init(&o);
  ok &= validate("default", counts, ntensors, o);
  o.weight_decay = 0.0;
  ok &= validate("no-weight-decay", counts, ntensors, o);
  hbm_adamw_options_init(&o);
  o.grad_scale = 1024.0;
  o.beta1 = 0.3;
  o.weight_decay = 0.1;
  ok &= validate("grad-scale-1024,beta1=0.3", counts, ntensors, o);
  hbm_adamw_options_init(&o);
  o.rounding = HBM_ADAMW_ROUND_STOCHASTIC;
  o.seed = 42;
  ok &= validate("stochastic-seed-42", counts, ntensors, o);
  hbm_adamw_options_init(&o);
  ok &= validate("1000-small-tensors", many, 1000, o);

  if (!quick) bench(params);
  printf("%s\n", ok ? "adamw gpu check: all agree with the CPU reference" : "adamw gpu check: FAILED");
  return ok ? 0 : 1;
}
