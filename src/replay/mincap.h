/* mincap.h: the smallest device capacity at which a policy completes a trace
 * ("how much memory does my run need under this allocator, and what does it
 * cost to live that close to the edge?").
 *
 * Capacities are tried on the sim device in multiples of `resolution`
 * (default 16 MiB). Below peak live nothing can complete, so the search
 * starts there: it grows an upper bound until the trace completes, bisects
 * between the last failure and the first success, then replays the answer
 * once more, both to re-check it and to measure the backend calls the policy
 * makes at that capacity. Bisection assumes that a policy which completes at
 * some capacity completes at every larger one; the re-check confirms the
 * answer itself completes, and `below_fails` says whether one resolution step
 * less was seen to fail.
 */
#ifndef HBM_MINCAP_H
#define HBM_MINCAP_H

#include "hbm.h"

typedef struct hbm_mincap_options {
  const char *conf;      /* policy settings, or NULL */
  uint64_t resolution;   /* 0: 16 MiB; a multiple of the granule (2 MiB), at most 1 PiB */
  uint64_t limit;        /* largest capacity tried, at most 1 PiB; 0: 8 x the larger of peak
                            live and the starting state's recorded segments, + 1 GiB (at most
                            1 PiB). Rounded down to the resolution */
} hbm_mincap_options;

/* The capacities the search tries: from `first` (peak live rounded up to the
 * resolution) to `limit` (rounded down), in steps of `resolution`. Any out
 * may be NULL. 1 when there is one at least and the options are valid, 0
 * when the search could try none (a resolution off the granule or over
 * 1 PiB, a limit over 1 PiB, or first > limit: a limit below peak live, or
 * a resolution above it): hbm_mincap then refuses them. */
int hbm_mincap_bounds(const hbm_trace *trace, const hbm_mincap_options *options, uint64_t *resolution,
                      uint64_t *first, uint64_t *limit);
/* The limit when options give none, before rounding to the resolution. */
uint64_t hbm_mincap_default_limit(const hbm_trace *trace);

typedef struct hbm_mincap_result {
  char policy[32];
  int found;              /* 0: it did not complete even at `limit` */
  uint64_t peak_live;
  uint64_t resolution, limit; /* the search's, as used (hbm_mincap_bounds) */
  uint64_t min_capacity;  /* when found */
  uint64_t backend_calls; /* replaying at min_capacity */
  int below_fails;        /* min_capacity - resolution was replayed and failed */
  uint64_t replays;       /* replays the search ran */
  hbm_replay_result at_min; /* the re-check replay */
} hbm_mincap_result;

/* Runs the search for one policy. HBM_OK with result->found 0 or 1 (0 only
 * after replaying at the limit); HBM_EINVAL (reported) for options under
 * which it could try nothing (hbm_mincap_bounds); an error code when a
 * replay itself could not run (unknown policy, bad conf). */
int hbm_mincap(const hbm_trace *trace, const char *policy, const hbm_mincap_options *options,
               hbm_mincap_result *result);

#endif
