/* replay.h: internal pieces of replay shared with fidelity and mincap. */
#ifndef HBM_REPLAY_H
#define HBM_REPLAY_H

#include "policy/policy.h"

/* The sampling interval a replay asked for `every` (0: at step boundaries)
 * uses: `every`, or in a trace of `nevents` without step marks a sample every
 * thousandth of it. 0: at step boundaries. */
uint64_t hbm_replay_sample_every(uint64_t every, int has_steps, uint64_t nevents);

#endif
