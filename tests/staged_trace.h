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

enum {
  STAGED_TRACE_BLOCKS = 4,
  RECHUNK_TRACE_R = 3,   /* R's id, after the fillers' (rechunk_trace_after) */
  RECHUNK_TRACE_IDS = 7, /* ids past the fillers' */
};

/* The same job after `fillers` blocks of 64 MiB (a chunk each, live to the
 * end; give the device 64 MiB more for each), and with `two_runs`, S as two
 * blocks of 16 MiB (S1 and S2, a freed 4 MiB gap between them): two runs of
 * used pages, so that the re-chunk makes two chunks. test_hostmem_failure sweeps the
 * fillers over the counts at which zoned's chunk records, or the device's
 * bookkeeping, are full just when the re-chunk asks for more. NULL if host
 * memory ran out. */
static inline hbm_trace *rechunk_trace_after(uint64_t r_mib, uint32_t fillers, int two_runs) {
  const uint64_t mib = 1ull << 20;
  const uint32_t first = fillers; /* ids 0..fillers-1: the fillers */
  hbm_trace *t;
  if (hbm_trace_new("re-chunk", &t) != HBM_OK) return NULL;
  for (uint32_t i = 0; i < fillers; i++) hbm_trace_alloc(t, i, 64 * mib, HBM_TAG_ACT, 0);
  hbm_trace_alloc(t, first + 0, 64 * mib, HBM_TAG_ACT, 0);
  hbm_trace_alloc(t, first + 1, 64 * mib, HBM_TAG_ACT, 0);
  hbm_trace_free_id(t, first + 0);
  if (two_runs) {
    hbm_trace_alloc(t, first + 2, 16 * mib, HBM_TAG_ACT, 0);
    hbm_trace_alloc(t, first + 5, 4 * mib, HBM_TAG_ACT, 0);
    hbm_trace_alloc(t, first + 6, 16 * mib, HBM_TAG_ACT, 0);
    hbm_trace_free_id(t, first + 5);
  } else {
    hbm_trace_alloc(t, first + 2, 40 * mib, HBM_TAG_ACT, 0);
  }
  hbm_trace_alloc(t, first + RECHUNK_TRACE_R, r_mib * mib, HBM_TAG_ACT, 0);
  hbm_trace_free_id(t, first + RECHUNK_TRACE_R);
  hbm_trace_free_id(t, first + 2);
  if (two_runs) hbm_trace_free_id(t, first + 6);
  hbm_trace_free_id(t, first + 1);
  for (uint32_t i = 0; i < fillers; i++) hbm_trace_free_id(t, i);
  return t;
}

/* The same job with R of r_mib MiB: with 46 (23 new pages) on a 168 MiB
 * device, 20 pages are free, room for S's pages twice, and X's chunk is
 * re-chunked in place instead (test_device_refusal). NULL if host memory
 * ran out. */
static inline hbm_trace *rechunk_trace(uint64_t r_mib) { return rechunk_trace_after(r_mib, 0, 0); }

/* NULL if host memory ran out. */
static inline hbm_trace *staged_trace(void) { return rechunk_trace(34); }

#endif
