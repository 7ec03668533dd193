/* replay_counter.h: a policy's named counter from a replay's result. */
#ifndef HBM_TEST_REPLAY_COUNTER_H
#define HBM_TEST_REPLAY_COUNTER_H

#include <string.h>

#include "hbm.h"

/* The counter's value, or -1 where the policy reports none of that name. */
static inline double replay_counter(const hbm_replay_result *r, const char *name) {
  for (int i = 0; i < r->ncounters; i++)
    if (!strcmp(r->counters[i].name, name)) return r->counters[i].value;
  return -1;
}

#endif
