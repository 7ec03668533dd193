/* random_trace.h: a random job that keeps live below `limit`, with mixed
 * sizes (small ones, multiples of 512 B, a few granules, and up to `big`),
 * three streams and a step mark every `step_every` events (test_zoned_host,
 * test_device_refusal). */
#ifndef HBM_TEST_RANDOM_TRACE_H
#define HBM_TEST_RANDOM_TRACE_H

#include "hbm.h"
#include "testutil.h"
#include "trace/trace.h"

/* NULL if host memory ran out. */
static inline hbm_trace *random_trace(uint64_t *rng, uint64_t events, uint64_t limit, uint64_t big,
                                      uint64_t step_every) {
  const uint64_t mib = 1ull << 20;
  hbm_trace *t;
  if (hbm_trace_new("random", &t) != HBM_OK) return NULL;
  enum { MAXLIVE = 400 };
  uint32_t ids[MAXLIVE];
  uint64_t sizes[MAXLIVE], live = 0, next_id = 0;
  int n = 0;
  for (uint64_t e = 0; e < events; e++) {
    if (e % step_every == 0) hbm_trace_step(t, e / step_every + 1);
    uint64_t size;
    switch (test_rand_below(rng, 6)) {
      case 0: case 1: size = 8 + test_rand_below(rng, 256 << 10); break;
      case 2: size = 512 * (1 + test_rand_below(rng, 4000)); break;
      case 3: size = 2 * mib * (1 + test_rand_below(rng, 6)) + test_rand_below(rng, 3) * 4096; break;
      default: size = 8 + test_rand_below(rng, big); break;
    }
    if (n < MAXLIVE && live + size <= limit && (n == 0 || test_rand_below(rng, 100) < 52)) {
      ids[n] = (uint32_t)next_id++;
      sizes[n] = size;
      hbm_trace_alloc(t, ids[n], size, (hbm_tag)test_rand_below(rng, HBM_TAG_COUNT), (int)test_rand_below(rng, 3));
      live += size;
      n++;
    } else if (n > 0) {
      int k = (int)test_rand_below(rng, (uint64_t)n);
      hbm_trace_free_id(t, ids[k]);
      live -= sizes[k];
      ids[k] = ids[--n];
      sizes[k] = sizes[n];
    }
  }
  return t;
}

#endif
