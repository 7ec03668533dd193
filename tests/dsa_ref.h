/* dsa_ref.h: the step planner (core/dsa.h) the slow, obviously correct way,
 * for test_dsa and fuzz_dsa to hold the fast one to, offset for offset.
 *
 * No time windows, no radix: each block is placed against every placed
 * block it meets, found pair by pair, sorted with qsort. The peak load and
 * each block's breadth are taken at the times loads rise (a span's start),
 * pair by pair. Orders are insertion sorts from their stated keys. What
 * docs/plan.md states, written plainly; nothing here is fast. Functions
 * that allocate return 0 when host memory ran out. */
#ifndef HBM_DSA_REF_H
#define HBM_DSA_REF_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/dsa.h"

typedef struct ref_span {
  uint64_t lo, hi;
} ref_span;

static inline int ref_by_lo(const void *a, const void *b) {
  const ref_span *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Whether block x is live at time t (t < the period, when there is one). */
static inline int ref_live_at(const hbm_dsa_block *x, uint64_t period, uint64_t t) {
  if (period && x->end > period) return t >= x->start || t < x->end - period;
  return t >= x->start && t < x->end;
}

/* Whether x and y are live at some time together: their spans (a block that
 * runs past the period wraps to 0) overlap, half-open. */
static inline int ref_meet(const hbm_dsa_block *x, const hbm_dsa_block *y, uint64_t period) {
  uint64_t a[4] = {x->start, x->end, 1, 0}, c[4] = {y->start, y->end, 1, 0};
  if (period && x->end > period) a[1] = period, a[2] = 0, a[3] = x->end - period;
  if (period && y->end > period) c[1] = period, c[2] = 0, c[3] = y->end - period;
  for (int i = 0; i < 4; i += 2)
    for (int j = 0; j < 4; j += 2)
      if (a[i] < a[i + 1] && c[j] < c[j + 1] && a[i] < c[j + 1] && c[j] < a[i + 1]) return 1;
  return 0;
}

/* The load is highest at a time some span starts: a block's start, or 0
 * where a block wraps. The times, and the load at each (times[k], load[k]);
 * returns how many, 0 if host memory ran out. */
static inline size_t ref_loads(const hbm_dsa_block *b, size_t n, uint64_t period, uint64_t **times, uint64_t **load) {
  size_t nt = 0;
  *times = malloc((n + 1) * sizeof **times);
  *load = calloc(n + 1, sizeof **load);
  if (!*times || !*load) {
    free(*times);
    free(*load);
    return 0;
  }
  for (size_t i = 0; i < n; i++) (*times)[nt++] = b[i].start;
  if (period) (*times)[nt++] = 0;
  for (size_t k = 0; k < nt; k++)
    for (size_t j = 0; j < n; j++)
      if (ref_live_at(&b[j], period, (*times)[k])) (*load)[k] += b[j].size;
  return nt;
}

/* The peak load, 0 if host memory ran out (or n is 0). */
static inline uint64_t ref_peak(const hbm_dsa_block *b, size_t n, uint64_t period) {
  uint64_t *times, *load, peak = 0;
  size_t nt = n ? ref_loads(b, n, period, &times, &load) : 0;
  if (!nt) return 0;
  for (size_t k = 0; k < nt; k++)
    if (load[k] > peak) peak = load[k];
  free(times);
  free(load);
  return peak;
}

/* Each block's breadth: the highest load while it is live. 1, or 0 if host
 * memory ran out. */
static inline int ref_breadth(const hbm_dsa_block *b, size_t n, uint64_t period, uint64_t *breadth) {
  uint64_t *times, *load;
  size_t nt = ref_loads(b, n, period, &times, &load);
  if (!nt) return 0;
  for (size_t i = 0; i < n; i++) {
    breadth[i] = 0;
    for (size_t k = 0; k < nt; k++)
      if (ref_live_at(&b[i], period, times[k]) && load[k] > breadth[i]) breadth[i] = load[k];
  }
  free(times);
  free(load);
  return 1;
}

/* Places the blocks in the order given, each against every placed block it
 * meets (sorted by offset), at the lowest offset clear of them or in the
 * smallest gap that holds it (else the top). Returns the footprint, 0 if
 * host memory ran out. */
static inline uint64_t ref_place(const hbm_dsa_block *b, size_t n, uint64_t period, uint64_t align, const uint32_t *order,
                          int smallest_gap, uint64_t *off) {
  char *placed = calloc(n ? n : 1, 1);
  ref_span *cand = malloc((n ? n : 1) * sizeof *cand);
  uint64_t top = 0;
  for (size_t r = 0; placed && cand && r < n; r++) {
    uint32_t i = order[r];
    size_t nc = 0;
    for (size_t j = 0; j < n; j++)
      if (placed[j] && ref_meet(&b[i], &b[j], period)) cand[nc++] = (ref_span){off[j], off[j] + b[j].size};
    qsort(cand, nc, sizeof *cand, ref_by_lo);
    uint64_t at = 0, size = b[i].size, best = UINT64_MAX, best_at = 0;
    for (size_t k = 0; k < nc; k++) {
      if (!smallest_gap && cand[k].lo >= at + size) break;
      if (smallest_gap && cand[k].lo >= at + size && cand[k].lo - at < best) {
        best = cand[k].lo - at;
        best_at = at;
      }
      if (cand[k].hi > at) at = (cand[k].hi + align - 1) / align * align;
    }
    off[i] = smallest_gap && best != UINT64_MAX ? best_at : at;
    if (off[i] + size > top) top = off[i] + size;
    placed[i] = 1;
  }
  if (!placed || !cand) top = 0;
  free(placed);
  free(cand);
  return top;
}

/* Whether block x goes before block y in a strategy's order: the
 * strategy's own key (longest-lived, earliest born, or the most bytes live
 * around it first; none for the largest-first two), then largest first,
 * earlier born, lower index. */
static inline int ref_goes_before(int strategy, const hbm_dsa_block *b, const uint64_t *breadth, uint32_t x, uint32_t y) {
  const hbm_dsa_block *p = &b[x], *q = &b[y];
  uint64_t px = 0, qx = 0; /* larger first (start: earlier first) */
  if (strategy == HBM_DSA_LENGTH_LOWEST) px = p->end - p->start, qx = q->end - q->start;
  if (strategy == HBM_DSA_START_GAP) px = UINT64_MAX - p->start, qx = UINT64_MAX - q->start;
  if (strategy == HBM_DSA_BREADTH_LOWEST || strategy == HBM_DSA_BREADTH_GAP) px = breadth[x], qx = breadth[y];
  if (px != qx) return px > qx;
  if (p->size != q->size) return p->size > q->size;
  if (p->start != q->start) return p->start < q->start;
  return x < y;
}

/* A strategy's order (insertion: the order is total, so any sort gives it). */
static inline void ref_order(int strategy, const hbm_dsa_block *b, size_t n, const uint64_t *breadth, uint32_t *order) {
  for (size_t i = 0; i < n; i++) {
    size_t j = i;
    for (; j > 0 && ref_goes_before(strategy, b, breadth, (uint32_t)i, order[j - 1]); j--) order[j] = order[j - 1];
    order[j] = (uint32_t)i;
  }
}

/* One largest-first strategy alone (hbm_dsa_plan_with's SIZE_LOWEST or,
 * with smallest_gap, SIZE_GAP). Returns the footprint, 0 if host memory ran
 * out. */
static inline uint64_t ref_plan_by_size(const hbm_dsa_block *b, size_t n, uint64_t period, uint64_t align,
                                 int smallest_gap, uint64_t *off) {
  uint32_t *order = malloc((n ? n : 1) * sizeof *order);
  if (!order) return 0;
  ref_order(HBM_DSA_SIZE_LOWEST, b, n, NULL, order);
  uint64_t fp = ref_place(b, n, period, align, order, smallest_gap, off);
  free(order);
  return fp;
}

/* The whole planner (hbm_dsa_plan), as docs/plan.md states it: the six
 * orders, stopping once one reaches the peak load; then, from each order's
 * plan, the lowest first (ties: the order tried first), up to four
 * squeaky-wheel rounds (the blocks the last plan put above the peak load
 * first, each part in the order it had), an order's rounds ending after two
 * in a row that do not lower its best, and none once the best is within 1%
 * of the peak load. Every plan is placed whole. Returns the footprint (0 if
 * host memory ran out, or n is 0); off: the plan. */
static inline uint64_t ref_plan_full(const hbm_dsa_block *b, size_t n, uint64_t period, uint64_t align, uint64_t *off) {
  enum { S = HBM_DSA_STRATEGIES };
  if (!n) return 0;
  uint64_t *breadth = malloc(n * sizeof *breadth), *plan[S] = {0}, fp[S], best = UINT64_MAX;
  uint32_t *order[S] = {0}, *next = malloc(n * sizeof *next);
  uint64_t peak = ref_peak(b, n, period);
  int tried = 0, rank[S], ok = breadth && next && peak && ref_breadth(b, n, period, breadth);
  for (int s = 0; ok && s < S && (s == 0 || best > peak); s++, tried++) {
    order[s] = malloc(n * sizeof *order[s]);
    plan[s] = malloc(n * sizeof *plan[s]);
    if (!order[s] || !plan[s]) {
      ok = 0;
      tried++; /* freed below */
      break;
    }
    ref_order(s, b, n, breadth, order[s]);
    if (!(fp[s] = ref_place(b, n, period, align, order[s], s % 2, plan[s]))) ok = 0;
    if (fp[s] < best) {
      best = fp[s];
      memcpy(off, plan[s], n * sizeof *off);
    }
  }
  for (int k = 0; ok && k < tried; k++) { /* by footprint, ties in the order tried */
    int j = k;
    for (; j > 0 && fp[rank[j - 1]] > fp[k]; j--) rank[j] = rank[j - 1];
    rank[j] = k;
  }
  for (int k = 0; ok && k < tried && best > peak && best - peak > peak / 100; k++) {
    int s = rank[k], stalled = 0;
    uint64_t own = fp[s];
    for (int round = 0; ok && round < 4 && stalled < 2 && best > peak; round++) {
      size_t m = 0;
      for (size_t r = 0; r < n; r++)
        if (plan[s][order[s][r]] + b[order[s][r]].size > peak) next[m++] = order[s][r];
      for (size_t r = 0; r < n; r++)
        if (plan[s][order[s][r]] + b[order[s][r]].size <= peak) next[m++] = order[s][r];
      memcpy(order[s], next, n * sizeof *next);
      uint64_t f = ref_place(b, n, period, align, order[s], s % 2, plan[s]);
      if (!f) ok = 0;
      stalled = f < own ? 0 : stalled + 1;
      if (f < own) own = f;
      if (f < best) {
        best = f;
        memcpy(off, plan[s], n * sizeof *off);
      }
    }
  }
  for (int s = 0; s < tried && s < S; s++) {
    free(order[s]);
    free(plan[s]);
  }
  free(breadth);
  free(next);
  return ok ? best : 0;
}

#endif
