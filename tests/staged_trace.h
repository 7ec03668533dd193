/* staged_trace.h: the trace that needs a re-chunk through host memory
 * (test_zoned on the sim device, test_zoned_host with real bytes).
 *
 * X and Y (64 MiB each, a chunk each) fill 128 MiB of a 140 MiB device; X is
 * freed and S (40 MiB) takes 20 of its 32 pages; R (34 MiB) fits no hole,
 * needs 17 new pages and only 6 are free. The 12 pages S leaves unused are
 * the rest: S's 20 pages must wait in host memory while X's chunk is given
 * back. */
#ifndef HBM_TEST_STAGED_TRACE_H
#define HBM_TEST_STAGED_TRACE_H

#include "hbm.h"
#include "trace/trace.h"

enum { STAGED_TRACE_BLOCKS = 4 };

/* The same job with R of r_mib MiB: with 46 (23 new pages) on a 168 MiB
 * device, 20 pages are free, room for S's pages twice, and X's chunk is
 * re-chunked in place instead (test_device_refusal). NULL if host memory
 * ran out. */
static inline hbm_trace *rechunk_trace(uint64_t r_mib) {
  const uint64_t mib = 1ull << 20;
  hbm_trace *t;
  if (hbm_trace_new("re-chunk", &t) != HBM_OK) return NULL;
  hbm_trace_alloc(t, 0, 64 * mib, HBM_TAG_ACT, 0);
  hbm_trace_alloc(t, 1, 64 * mib, HBM_TAG_ACT, 0);
  hbm_trace_free_id(t, 0);
  hbm_trace_alloc(t, 2, 40 * mib, HBM_TAG_ACT, 0);
  hbm_trace_alloc(t, 3, r_mib * mib, HBM_TAG_ACT, 0);
  hbm_trace_free_id(t, 3);
  hbm_trace_free_id(t, 2);
  hbm_trace_free_id(t, 1);
  return t;
}

/* NULL if host memory ran out. */
static inline hbm_trace *staged_trace(void) { return rechunk_trace(34); }

#endif
