/* stepped_trace.h: a random job whose steps repeat, for zoned's step plan
 * (test_zoned drives a heap with it, hbm_check() after every operation, and
 * replays it for the plan's counters; test_zoned_host verifies its bytes).
 *
 * One random step script is drawn: `nblocks` allocations (most a granule or
 * more) and their frees in a random order, about a tenth of the blocks
 * carried into the next step and freed early there, a few never freed. Every
 * step replays the script; with probability deviate_pct a step deviates
 * once: one allocation grows by half, or two neighbouring frees swap. */
#ifndef HBM_TEST_STEPPED_TRACE_H
#define HBM_TEST_STEPPED_TRACE_H

#include <stdlib.h>

#include "hbm.h"
#include "testutil.h"
#include "trace/trace.h"

typedef enum { STEP_ALLOC, STEP_FREE, STEP_MARK } stepped_kind;
typedef struct stepped_op {
  stepped_kind kind;
  uint32_t id;   /* unique while live */
  uint64_t size; /* STEP_ALLOC */
} stepped_op;

enum { SCRIPT_ALLOC, SCRIPT_FREE, SCRIPT_FREE_PREV };
typedef struct script_entry {
  int what;
  uint32_t j;
} script_entry;

/* The operations of `steps` steps; *n gets their count, *deviated the steps
 * that deviated. NULL if host memory ran out. */
static inline stepped_op *stepped_ops(uint64_t *rng, int steps, int deviate_pct, uint32_t nblocks, uint64_t big,
                                      size_t *n, int *deviated) {
  uint64_t *size = malloc(nblocks * sizeof *size);
  int *carried = calloc(nblocks, sizeof *carried);
  script_entry *script = malloc(3 * nblocks * sizeof *script);
  size_t cap = (size_t)(steps + 1) * (3 * nblocks + 1) + nblocks, len = 0, ns = 0;
  stepped_op *ops = malloc(cap * sizeof *ops);
  uint32_t *live = malloc(nblocks * sizeof *live);
  if (!size || !carried || !script || !ops || !live) {
    free(size); free(carried); free(script); free(ops); free(live);
    return NULL;
  }
  for (uint32_t j = 0; j < nblocks; j++) {
    uint64_t r = test_rand_below(rng, 10);
    size[j] = r < 2 ? 1 + test_rand_below(rng, 1 << 20) : (2u << 20) + test_rand_below(rng, big);
    carried[j] = r == 9 ? 1 : test_rand_below(rng, 50) == 0 ? 2 : 0; /* 2: never freed */
  }
  /* The script: allocations in order, frees of live blocks interleaved. */
  uint32_t next = 0, nlive = 0;
  while (next < nblocks || nlive) {
    if (next < nblocks && (!nlive || test_rand_below(rng, 100) < 55)) {
      script[ns++] = (script_entry){SCRIPT_ALLOC, next};
      if (!carried[next]) live[nlive++] = next;
      next++;
    } else {
      uint32_t k = (uint32_t)test_rand_below(rng, nlive);
      script[ns++] = (script_entry){SCRIPT_FREE, live[k]};
      live[k] = live[--nlive];
    }
  }
  for (uint32_t j = 0; j < nblocks; j++) /* carried blocks: freed early in the next step */
    if (carried[j] == 1) {
      size_t at = (size_t)test_rand_below(rng, ns / 3 + 1);
      memmove(script + at + 1, script + at, (ns - at) * sizeof *script);
      script[at] = (script_entry){SCRIPT_FREE_PREV, j};
      ns++;
    }
  *deviated = 0;
  for (int k = 0; k < steps; k++) {
    uint32_t cur = (uint32_t)(k % 2) * nblocks, prev = (uint32_t)((k + 1) % 2) * nblocks;
    ops[len++] = (stepped_op){STEP_MARK, 0, (uint64_t)k + 1};
    size_t grow = SIZE_MAX, swap = SIZE_MAX;
    if (k > 0 && test_rand_below(rng, 100) < (uint64_t)deviate_pct) {
      (*deviated)++;
      size_t at = (size_t)test_rand_below(rng, ns);
      if (test_rand_below(rng, 2)) grow = at;
      else swap = at;
    }
    size_t first = len;
    for (size_t e = 0; e < ns; e++) {
      const script_entry *s = &script[e];
      if (s->what == SCRIPT_ALLOC) {
        uint64_t bytes = e == grow ? size[s->j] + size[s->j] / 2 : size[s->j];
        if (carried[s->j] == 2) { /* never freed: an id of its own */
          ops[len++] = (stepped_op){STEP_ALLOC, 2 * nblocks + (uint32_t)k * nblocks + s->j, bytes};
          continue;
        }
        ops[len++] = (stepped_op){STEP_ALLOC, cur + s->j, bytes};
      } else if (s->what == SCRIPT_FREE) {
        ops[len++] = (stepped_op){STEP_FREE, cur + s->j, 0};
      } else if (k > 0) {
        ops[len++] = (stepped_op){STEP_FREE, prev + s->j, 0};
      }
    }
    if (swap != SIZE_MAX) { /* two neighbouring frees of this step trade places */
      for (size_t i = first + swap % (len - first); i + 1 < len; i++)
        if (ops[i].kind == STEP_FREE && ops[i + 1].kind == STEP_FREE) {
          stepped_op tmp = ops[i];
          ops[i] = ops[i + 1];
          ops[i + 1] = tmp;
          break;
        }
    }
  }
  uint32_t last = (uint32_t)((steps - 1) % 2) * nblocks;
  for (uint32_t j = 0; j < nblocks; j++)
    if (carried[j] == 1 && steps > 0) ops[len++] = (stepped_op){STEP_FREE, last + j, 0};
  *n = len;
  free(size); free(carried); free(script); free(live);
  return ops;
}

/* The operations as a trace (ids as they are). NULL if host memory ran out. */
static inline hbm_trace *stepped_to_trace(const stepped_op *ops, size_t n) {
  hbm_trace *t;
  if (hbm_trace_new("stepped", &t) != HBM_OK) return NULL;
  for (size_t i = 0; i < n; i++) {
    int rc = ops[i].kind == STEP_MARK    ? hbm_trace_step(t, ops[i].size)
             : ops[i].kind == STEP_ALLOC ? hbm_trace_alloc(t, ops[i].id, ops[i].size, HBM_TAG_ACT, 0)
                                         : hbm_trace_free_id(t, ops[i].id);
    if (rc != HBM_OK) {
      hbm_trace_free(t);
      return NULL;
    }
  }
  return t;
}

#endif
