/* test_threads: four threads share one heap (alloc, write, verify, free);
 * run under ThreadSanitizer by `make check SANITIZE=thread`. */
#include <pthread.h>

#include "hbm.h"
#include "testutil.h"

enum { THREADS = 4 };
static hbm_heap *heap;
static uint64_t seed;
static int failed;

static void *worker(void *arg) {
  uint64_t rng = seed + (uint64_t)(uintptr_t)arg, addr[64];
  int n = 0;
  uint64_t ops = (uint64_t)(20000 * test_scale());
  for (uint64_t i = 0; i < ops; i++) {
    if (n < 64 && (n == 0 || test_rand_below(&rng, 2))) {
      uint64_t size = 64 + test_rand_below(&rng, 1 << 16);
      if (hbm_alloc(heap, size, HBM_TAG_TEMP, (int)(uintptr_t)arg, &addr[n]) != HBM_OK) continue;
      *(volatile uint64_t *)(uintptr_t)addr[n] = addr[n];
      n++;
    } else {
      int k = (int)test_rand_below(&rng, (uint64_t)n);
      if (*(volatile uint64_t *)(uintptr_t)addr[k] != addr[k]) __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
      if (hbm_free(heap, addr[k]) != HBM_OK) __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
      addr[k] = addr[--n];
    }
    if (i % 1000 == 0) {
      hbm_stats st;
      hbm_heap_stats(heap, &st);
    }
  }
  while (n) hbm_free(heap, addr[--n]);
  return NULL;
}

int main(void) {
  seed = test_seed("test_threads");
  hbm_device *dev;
  if (hbm_device_open("host:512MiB", &dev) != HBM_OK) {
    printf("test_threads: skipped: no memfd_create\n");
    return TEST_SKIP;
  }
  CHECK(hbm_heap_create(dev, "bestfit", NULL, &heap) == HBM_OK);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  CHECK(!failed);
  hbm_stats st;
  CHECK(hbm_heap_stats(heap, &st) == HBM_OK);
  CHECK_EQ_U64(st.live, 0);
  CHECK(st.allocs == st.frees);
  CHECK(hbm_check(heap) == HBM_OK);
  hbm_heap_destroy(heap);
  hbm_device_close(dev);
  return test_done("test_threads");
}
