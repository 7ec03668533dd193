/* replay.h: internal pieces of replay shared with fidelity and mincap. */
#ifndef HBM_REPLAY_H
#define HBM_REPLAY_H

#include "policy/policy.h"

/* Opens the device (device_spec, or "sim:<trace capacity>") and creates the
 * policy over it. On error nothing is left open and the reason was reported. */
int hbm_replay_open_policy(const hbm_trace *t, const char *policy, const char *conf,
                           const char *device_spec, hbm_device **dev, hbm_policy **p);

/* The sampling interval a replay asked for `every` (0: at step boundaries)
 * uses: `every`, or in a trace of `nevents` without step marks a sample every
 * thousandth of it. 0: at step boundaries. */
uint64_t hbm_replay_sample_every(uint64_t every, int has_steps, uint64_t nevents);

#endif
