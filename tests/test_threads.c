/* test_threads: four threads share one heap (alloc, write, verify, free);
 * then one thread per policy, each on a heap of its own over one shared
 * device; then errors reported on two threads while a third swaps the
 * handler. Run under ThreadSanitizer by `make check SANITIZE=thread`. */
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

/* Each handler is set with its own argument: one called with the other's
 * argument saw a pair torn by a set on another thread. */
typedef struct handler_arg { int who; long calls; } handler_arg;
static void handler_one(int err, const char *message, void *arg) {
  handler_arg *h = arg;
  if (h->who != 1 || err != HBM_EINVAL || !message[0]) __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&h->calls, 1, __ATOMIC_RELAXED);
}
static void handler_two(int err, const char *message, void *arg) {
  handler_arg *h = arg;
  if (h->who != 2 || err != HBM_EINVAL || !message[0]) __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&h->calls, 1, __ATOMIC_RELAXED);
}
static handler_arg arg_one = {1, 0}, arg_two = {2, 0};
static int setting;

static void *swap_handlers(void *arg) {
  (void)arg;
  while (__atomic_load_n(&setting, __ATOMIC_ACQUIRE)) {
    hbm_set_error_handler(handler_one, &arg_one);
    hbm_set_error_handler(handler_two, &arg_two);
    hbm_set_output_handler(NULL, NULL);
  }
  return NULL;
}

static void *report_errors(void *arg) {
  hbm_heap *heap = arg;
  uint64_t ops = (uint64_t)(20000 * test_scale());
  for (uint64_t i = 0; i < ops; i++) /* a free of no block: HBM_EINVAL, reported */
    if (hbm_free(heap, 0x1000 + i) != HBM_EINVAL) __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
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

  /* ---- errors reported on two threads while a third swaps the handler ---- */
  CHECK(hbm_device_open("sim:1GiB", &dev) == HBM_OK);
  CHECK(hbm_heap_create(dev, "bestfit", NULL, &heap) == HBM_OK);
  hbm_set_error_handler(handler_one, &arg_one);
  setting = 1;
  pthread_t swapper, reporters[2];
  pthread_create(&swapper, NULL, swap_handlers, NULL);
  for (int i = 0; i < 2; i++) pthread_create(&reporters[i], NULL, report_errors, heap);
  for (int i = 0; i < 2; i++) pthread_join(reporters[i], NULL);
  __atomic_store_n(&setting, 0, __ATOMIC_RELEASE);
  pthread_join(swapper, NULL);
  hbm_set_error_handler(NULL, NULL);
  CHECK(!failed);
  CHECK_EQ_U64((uint64_t)(arg_one.calls + arg_two.calls), 2 * (uint64_t)(20000 * test_scale()));
  hbm_heap_destroy(heap);
  hbm_device_close(dev);
  return test_done("test_threads");
}
