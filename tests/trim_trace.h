/* trim_trace.h: the trace in which zoned trims (test_zoned with figures on the
 * sim device, test_zoned_host with real bytes).
 *
 * After a step mark (where the job marks one), A and X (60 MiB each) map
 * 120 MiB; A is freed and C (4 MiB) takes 2 of its 30 pages, so A's chunk
 * stays mapped, mostly unused, and is not idle: no move can take it. D
 * (60 MiB) fits no hole and needs 30 new pages past the device's high-water
 * mark, while partly used chunks hold 28 unused pages. Trimming re-chunks A's
 * chunk (C's 2 pages copied to a chunk of their own) before D is mapped: a
 * peak of 124 MiB instead of 180. */
#ifndef HBM_TEST_TRIM_TRACE_H
#define HBM_TEST_TRIM_TRACE_H

#include "hbm.h"
#include "trace/trace.h"

enum { TRIM_TRACE_BLOCKS = 4 };

/* The same with C of c_mib and D of d_mib MiB. With C 20 and D 50, re-chunking
 * A's chunk in place would map C's 10 pages before A's 30 go, above the
 * high-water mark (140 MiB) that D alone reaches (130): so that re-chunk goes
 * through host memory. With `marked`, one step mark first. NULL if host
 * memory ran out. */
static inline hbm_trace *trim_trace_sized(int marked, uint64_t c_mib, uint64_t d_mib) {
  const uint64_t mib = 1ull << 20;
  hbm_trace *t;
  if (hbm_trace_new("trim", &t) != HBM_OK) return NULL;
  if (marked) hbm_trace_step(t, 0);
  hbm_trace_alloc(t, 0, 60 * mib, HBM_TAG_ACT, 0);
  hbm_trace_alloc(t, 1, 60 * mib, HBM_TAG_ACT, 0);
  hbm_trace_free_id(t, 0);
  hbm_trace_alloc(t, 2, c_mib * mib, HBM_TAG_ACT, 0);
  hbm_trace_alloc(t, 3, d_mib * mib, HBM_TAG_ACT, 0);
  hbm_trace_free_id(t, 3);
  hbm_trace_free_id(t, 2);
  hbm_trace_free_id(t, 1);
  return t;
}

/* C 4 MiB, D 60 MiB: the trace above. */
static inline hbm_trace *trim_trace(int marked) { return trim_trace_sized(marked, 4, 60); }

#endif
