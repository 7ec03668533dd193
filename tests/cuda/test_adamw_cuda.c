/* test_adamw_cuda.c: hbm_adamw_step_cuda in CI (built only where nvcc is).
 * Without a GPU: bad arguments are still HBM_EINVAL before any CUDA call, and
 * a valid call is HBM_EUNSUPPORTED with the CUDA error reported; then it
 * skips. With a GPU: 20 steps of a list of 40 tensors (the table copied to the
 * device) and of its first 4 (the table in the launch parameters) through the
 * kernel and the CPU reference must agree bit for bit, weight, master, m and
 * v, one tensor one element off the 16-byte alignment the vector path needs
 * (tools/gpu_check_adamw.sh does it at size). */
#include <cuda_runtime_api.h>
#include <math.h>

#include "hbm.h"
#include "testutil.h"

static int last_error;
static char last_message[512];
static void on_error(int err, const char *message, void *arg) {
  (void)arg;
  last_error = err;
  snprintf(last_message, sizeof last_message, "%s", message);
}

static uint16_t bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

int main(void) {
  uint64_t seed = test_seed("test_adamw_cuda"), rng = seed;
  hbm_set_error_handler(on_error, NULL);
  hbm_adamw_options o;
  hbm_adamw_options_init(&o);

  /* Argument checks come first and need no device. */
  static uint16_t w[8], g[8];
  static float master[8], m[8], v[8];
  hbm_adamw_tensor bad = {w, g, master, m, v, 0, 1};
  CHECK(hbm_adamw_step_cuda(&bad, 1, &o, NULL) == HBM_EINVAL && last_error == HBM_EINVAL);
  bad.count = 8;
  o.beta2 = 1.0;
  CHECK(hbm_adamw_step_cuda(&bad, 1, &o, NULL) == HBM_EINVAL);
  hbm_adamw_options_init(&o);

  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    last_error = 0;
    last_message[0] = 0;
    /* Host pointers: never touched, the call fails before the launch. */
    int rc = hbm_adamw_step_cuda(&bad, 1, &o, NULL);
    CHECK(rc == HBM_EUNSUPPORTED && last_error == HBM_EUNSUPPORTED && last_message[0]);
    printf("reported: %s\n", last_message);
    if (test_done("test_adamw_cuda")) return 1;
    printf("skip: no usable CUDA device (%s); argument checks passed\n",
           err != cudaSuccess ? cudaGetErrorString(err) : "none found");
    return TEST_SKIP;
  }

  /* 40 tensors: the whole list goes through the tensor table copied to the
   * device; the first 4 alone (every other step) through the launch's own
   * parameters. */
  enum { NT = 40, NT_SHORT = 4 };
  uint64_t counts[NT] = {1, 4097, 100003, 4099};
  for (int k = NT_SHORT; k < NT; k++) counts[k] = 1 + 97 * (uint64_t)k;
  hbm_adamw_tensor host[NT], dev[NT];
  void *alloc[NT][5];
  for (int k = 0; k < NT; k++) {
    uint64_t n = counts[k], skew = k == 3; /* the last tensor starts one element in: the scalar path */
    host[k] = (hbm_adamw_tensor){malloc(n * 2), malloc(n * 2), malloc(n * 4), calloc(n, 4), calloc(n, 4), n, k != 1};
    char *p[5];
    for (int a = 0; a < 5; a++) {
      CHECK(cudaMalloc(&alloc[k][a], (n + skew) * (a < 2 ? 2 : 4)) == cudaSuccess);
      p[a] = (char *)alloc[k][a] + skew * (a < 2 ? 2 : 4);
    }
    dev[k] = (hbm_adamw_tensor){(uint16_t *)p[0], (uint16_t *)p[1], (float *)p[2], (float *)p[3], (float *)p[4], n, k != 1};
    for (uint64_t i = 0; i < n; i++) {
      host[k].master[i] = (float)((double)(test_rand(&rng) >> 11) * 0x1p-53 - 0.5);
      host[k].weight[i] = bf16(host[k].master[i]);
    }
    CHECK(cudaMemcpy(dev[k].master, host[k].master, n * 4, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cudaMemset(dev[k].exp_avg, 0, n * 4) == cudaSuccess);
    CHECK(cudaMemset(dev[k].exp_avg_sq, 0, n * 4) == cudaSuccess);
  }
  o.rounding = HBM_ADAMW_ROUND_STOCHASTIC;
  o.seed = seed;
  for (uint64_t step = 1; step <= 20; step++) {
    for (int k = 0; k < NT; k++) {
      uint16_t *grad = (uint16_t *)host[k].grad;
      for (uint64_t i = 0; i < counts[k]; i++)
        grad[i] = bf16((float)(((double)(test_rand(&rng) >> 11) * 0x1p-53 - 0.5) * 1e-2));
      CHECK(cudaMemcpy((void *)dev[k].grad, grad, counts[k] * 2, cudaMemcpyHostToDevice) == cudaSuccess);
    }
    o.step = step;
    o.impl = HBM_ADAMW_REFERENCE;
    size_t n = step % 2 ? NT : NT_SHORT;
    CHECK(hbm_adamw_step(host, n, &o) == HBM_OK);
    CHECK(hbm_adamw_step_cuda(dev, n, &o, NULL) == HBM_OK);
  }
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  for (int k = 0; k < NT; k++) {
    uint64_t n = counts[k];
    uint16_t *wd = malloc(n * 2);
    float *fd = malloc(n * 4);
    CHECK(cudaMemcpy(wd, dev[k].weight, n * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
    if (memcmp(wd, host[k].weight, n * 2)) printf("tensor %d: weight differs\n", k);
    CHECK(memcmp(wd, host[k].weight, n * 2) == 0);
    const float *sides[3][2] = {{dev[k].master, host[k].master}, {dev[k].exp_avg, host[k].exp_avg},
                                {dev[k].exp_avg_sq, host[k].exp_avg_sq}};
    static const char *const names[3] = {"master", "exp_avg", "exp_avg_sq"};
    for (int s = 0; s < 3; s++) {
      CHECK(cudaMemcpy(fd, sides[s][0], n * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
      if (memcmp(fd, sides[s][1], n * 4)) printf("tensor %d: %s differs\n", k, names[s]);
      CHECK(memcmp(fd, sides[s][1], n * 4) == 0);
    }
    free(wd);
    free(fd);
    for (int a = 0; a < 5; a++) cudaFree(alloc[k][a]);
    free(host[k].weight);
    free((void *)host[k].grad);
    free(host[k].master);
    free(host[k].exp_avg);
    free(host[k].exp_avg_sq);
  }
  return test_done("test_adamw_cuda");
}
