/* small_workload.h: a small generated training trace (4 layers, hidden 1024,
 * variable sequences, gradient accumulation, comm buckets) for tests that
 * need a realistic but quick replay. NULL (with the reason on stderr) if the
 * generator refuses. */
#ifndef HBM_TEST_SMALL_WORKLOAD_H
#define HBM_TEST_SMALL_WORKLOAD_H

#include <stdio.h>

#include "trace/gen_llm.h"
#include "trace/trace.h"

static inline hbm_trace *small_workload(uint64_t capacity, uint32_t steps) {
  hbm_gen_llm_config c;
  hbm_gen_llm_defaults(&c);
  c.layers = 4;
  c.hidden = 1024;
  c.heads = 8;
  c.seq_kind = HBM_SEQ_UNIFORM;
  c.seq_min = 256;
  c.seq_max = 2048;
  c.micro_batch = 2;
  c.grad_accum = 2;
  c.dp = 4;
  c.checkpoint_every = 2;
  c.bucket_bytes = 16ull << 20;
  c.steps = steps;
  c.capacity = capacity;
  hbm_trace *t = NULL;
  hbm_diag d;
  if (hbm_gen_llm(&c, &t, &d) != HBM_OK) {
    fprintf(stderr, "gen: %s\n", d.message);
    return NULL;
  }
  return t;
}

#endif
