/* seeded_trace.h: a random recording that starts mid-run, for zoned's
 * starting state (test_zoned replays it with the policy's invariants checked
 * after every event; test_zoned_host verifies its bytes).
 *
 * Recorded segments (small ones of 2 MiB, large ones of 2-80 MiB) are tiled
 * with blocks of odd sizes, most of them live, so that zoned's tight packing
 * makes recorded blocks share pages; some blocks outgrow their request by an
 * unsplit remainder, as PyTorch's do. Then the recording runs: recorded blocks
 * die in a random order among new allocations and frees, with step marks. */
#ifndef HBM_TEST_SEEDED_TRACE_H
#define HBM_TEST_SEEDED_TRACE_H

#include "hbm.h"
#include "testutil.h"
#include "trace/trace.h"

/* A block size for a segment with `left` bytes untiled: a multiple of 512,
 * mostly under a granule in small segments, up to several in large ones. */
static inline uint64_t seeded_block_size(uint64_t *rng, uint64_t left, int small) {
  const uint64_t mib = 1ull << 20;
  uint64_t size;
  if (small || test_rand_below(rng, 4) == 0) size = 512 * (1 + test_rand_below(rng, 2048));
  else size = 512 * (1 + test_rand_below(rng, (uint64_t)(24 * mib / 512)));
  return size < left ? size : left;
}

/* NULL if host memory ran out. `events` new allocations and frees follow the
 * starting state; ids are dense. */
static inline hbm_trace *seeded_trace(uint64_t *rng, int events) {
  const uint64_t mib = 1ull << 20;
  hbm_trace *t;
  if (hbm_trace_new("seeded", &t) != HBM_OK) return NULL;
  uint32_t live[4096], nlive = 0, next_id = 0;
  int nseg = 1 + (int)test_rand_below(rng, 16);
  for (int k = 0; k < nseg; k++) {
    int small = test_rand_below(rng, 3) == 0;
    hbm_init_segment seg = {.addr = 0x100000000ull + (uint64_t)k * (1ull << 30),
                            .size = small ? 2 * mib : 2 * mib * (1 + test_rand_below(rng, 40)),
                            .stream = (int32_t)test_rand_below(rng, 2),
                            .small = (uint8_t)small};
    if (hbm_trace_add_init_segment(t, &seg) != HBM_OK) goto fail;
    for (uint64_t at = 0; at < seg.size;) {
      hbm_init_block b = {.addr = seg.addr + at, .size = seeded_block_size(rng, seg.size - at, small), .id = HBM_NO_ID};
      if (test_rand_below(rng, 5) != 0 && nlive < 4096) {
        b.id = next_id++;
        /* PyTorch leaves a remainder unsplit under 512 bytes in a small
         * segment and under 1 MiB in a large one: the block outgrows its
         * request by that much, and a policy that places the request need
         * not keep it */
        uint64_t unsplit = !small && test_rand_below(rng, 4) == 0 ? mib : 512;
        b.request = b.size - test_rand_below(rng, unsplit < b.size ? unsplit : b.size);
        if (b.request == 0) b.request = b.size;
        b.tag = (uint8_t)test_rand_below(rng, HBM_TAG_COUNT);
        live[nlive++] = b.id;
      }
      if (hbm_trace_add_init_block(t, &b) != HBM_OK) goto fail;
      at += b.size;
    }
  }
  for (int e = 0; e < events; e++) {
    uint64_t r = test_rand_below(rng, 100);
    if (r < 3) {
      if (hbm_trace_step(t, (uint64_t)e) != HBM_OK) goto fail;
    } else if (nlive && (r < 50 || nlive == 4096)) {
      uint32_t k = (uint32_t)test_rand_below(rng, nlive);
      if (hbm_trace_free_id(t, live[k]) != HBM_OK) goto fail;
      live[k] = live[--nlive];
    } else {
      uint64_t size = test_rand_below(rng, 2) ? 1 + test_rand_below(rng, 2 * mib)
                                               : 512 * (1 + test_rand_below(rng, (uint64_t)(40 * mib / 512)));
      if (hbm_trace_alloc(t, next_id, size, (hbm_tag)test_rand_below(rng, HBM_TAG_COUNT), (int)test_rand_below(rng, 2)) != HBM_OK)
        goto fail;
      live[nlive++] = next_id++;
    }
  }
  hbm_trace_reserve_ids(t, next_id);
  return t;
fail:
  hbm_trace_free(t);
  return NULL;
}

#endif
