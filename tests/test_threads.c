/* test_threads: four threads share one heap (alloc, write, verify, free);
 * then one thread per policy, each on a heap of its own over one shared
 * device. Run under ThreadSanitizer by `make check SANITIZE=thread`. */
#include <pthread.h>

#include "hbm.h"
#include "testutil.h"

enum { THREADS = 4 };
static uint64_t seed;
static int failed;

typedef struct job { hbm_heap *heap; hbm_device *dev; int id; } job;

static void *worker(void *arg) {
  const job *j = arg;
  uint64_t rng = seed + (uint64_t)j->id, addr[64];
  int n = 0;
  uint64_t ops = (uint64_t)(20000 * test_scale());
  for (uint64_t i = 0; i < ops; i++) {
    if (n < 64 && (n == 0 || test_rand_below(&rng, 2))) {
      uint64_t size = 64 + test_rand_below(&rng, 1 << 16);
      /* at most 64 blocks of 64 KiB per thread: the device always has room */
      if (hbm_alloc(j->heap, size, HBM_TAG_TEMP, j->id, &addr[n]) != HBM_OK) {
        __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
        continue;
      }
      *(volatile uint64_t *)(uintptr_t)addr[n] = addr[n];
      n++;
    } else {
      int k = (int)test_rand_below(&rng, (uint64_t)n);
      if (*(volatile uint64_t *)(uintptr_t)addr[k] != addr[k]) __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
      if (hbm_free(j->heap, addr[k]) != HBM_OK) __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
      addr[k] = addr[--n];
    }
    if (i % 1000 == 0) {
      hbm_stats st;
      hbm_heap_stats(j->heap, &st);
      (void)hbm_device_backend_calls(j->dev); /* counters read while other heaps count */
    }
  }
  while (n) hbm_free(j->heap, addr[--n]);
  return NULL;
}

static void drained(hbm_heap *heap) {
  hbm_stats st;
  CHECK(hbm_heap_stats(heap, &st) == HBM_OK);
  CHECK_EQ_U64(st.live, 0);
  CHECK(st.allocs > 0 && st.allocs == st.frees);
  CHECK(hbm_check(heap) == HBM_OK);
}

int main(void) {
  seed = test_seed("test_threads");
  hbm_device *dev;
  if (hbm_device_open("host:512MiB", &dev) != HBM_OK) {
    printf("test_threads: skipped: no memfd_create\n");
    return TEST_SKIP;
  }
  /* ---- four threads, one heap ---- */
  hbm_heap *heap;
  CHECK(hbm_heap_create(dev, "bestfit", NULL, &heap) == HBM_OK);
  pthread_t t[THREADS];
  job jobs[THREADS];
  for (int i = 0; i < THREADS; i++) {
    jobs[i] = (job){heap, dev, i};
    pthread_create(&t[i], NULL, worker, &jobs[i]);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  CHECK(!failed);
  drained(heap);
  hbm_heap_destroy(heap);
  hbm_device_close(dev);

  /* ---- one heap per policy over one device (its memory and counters
   * shared), each in its own thread ---- */
  /* (bestfit and compact take the whole device as they start) */
  static const char *const policies[] = {"caching", "expandable", "zoned"};
  enum { NPOL = sizeof policies / sizeof policies[0] };
  CHECK(hbm_device_open("host:1GiB", &dev) == HBM_OK);
  hbm_heap *heaps[NPOL];
  pthread_t tp[NPOL];
  job pj[NPOL];
  for (int i = 0; i < NPOL; i++) CHECK(hbm_heap_create(dev, policies[i], NULL, &heaps[i]) == HBM_OK);
  for (int i = 0; i < NPOL; i++) {
    pj[i] = (job){heaps[i], dev, i};
    pthread_create(&tp[i], NULL, worker, &pj[i]);
  }
  for (int i = 0; i < NPOL; i++) pthread_join(tp[i], NULL);
  CHECK(!failed);
  for (int i = 0; i < NPOL; i++) {
    drained(heaps[i]);
    hbm_heap_destroy(heaps[i]);
  }
  hbm_device_close(dev);
  return test_done("test_threads");
}
