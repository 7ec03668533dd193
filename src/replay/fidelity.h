/* fidelity.h: how faithfully the `caching` / `expandable` policies reproduce
 * what PyTorch did in a recording (a snapshot, or any trace with @ADDR).
 *
 * The model starts from the trace's starting state (init-seg/init-blk) and
 * replays its requests; it places them by its own rules, never looking at the
 * recorded addresses. The recording is used for three things only: the
 * starting state, the address a new segment (or expandable reservation)
 * takes when the model allocates one of the size PyTorch allocated at that
 * point (as cudaMalloc would have returned it), and the segment releases
 * PyTorch recorded (empty_cache, release before retry), applied where they
 * happened. Then each allocation's address is compared with the recorded one.
 */
#ifndef HBM_FIDELITY_H
#define HBM_FIDELITY_H

#include "hbm.h"
#include "trace/trace.h"

typedef struct hbm_fidelity_options {
  const char *policy; /* NULL: "expandable" if the trace's conf enables expandable_segments, else "caching" */
  const char *conf;   /* NULL: the trace's conf, its expandable_segments turned to the
                       * policy's (settings that contradict the policy are refused) */
  uint64_t capacity;  /* device capacity for the model; 0: 1 PiB (recorded releases are
                       * applied as recorded, so the model needs none to follow an OOM) */
} hbm_fidelity_options;

typedef struct hbm_fidelity_result {
  char policy[32];
  uint64_t events;                 /* events replayed */
  uint64_t streams;                /* distinct streams in the trace */
  uint64_t allocs;                 /* allocation events */
  uint64_t unrecorded;             /* of those, with no recorded address: placed, not compared */
  uint64_t refused;                /* requests PyTorch refused (a snapshot's oom entries): not
                                    * placed, since the model runs without PyTorch's limit, and
                                    * not counted in allocs */
  uint64_t address_matches;        /* placed at exactly the recorded address */
  double address_match;            /* address_matches / (allocs - unrecorded), never 0 / 0 */
  uint64_t segment_allocs_real;    /* recorded segment_alloc + segment_map */
  uint64_t segment_allocs_model;   /* the model's cudaMalloc + map calls */
  int segment_sizes_equal;         /* the two lists hold the same sizes, in the same order */
  uint64_t segment_frees_real;     /* recorded segment_free + segment_unmap */
  uint64_t segment_frees_applied;  /* of those, the model held the memory free and released it */
  int has_unapplied;               /* first recorded release the model could not apply: */
  uint64_t unapplied_event;        /*   its 0-based event index in the trace */
  uint64_t unapplied_addr, unapplied_size;
  char unapplied_where[48];        /*   its entry or line, named as mismatch_where is */
  uint64_t peak_reserved_real;     /* starting segments + recorded segment events, at its highest */
  uint64_t peak_reserved_model;
  uint64_t failed_allocs;          /* requests the model could not place (should be 0) */
  int check_failures;              /* the model's invariant check at the end */
  int has_mismatch;                /* first recorded allocation placed elsewhere: */
  uint64_t mismatch_event;         /*   its 0-based event index in the trace */
  uint64_t mismatch_real, mismatch_model;
  uint32_t mismatch_line;          /*   the event's line (a snapshot: device trace entry + 1) */
  char mismatch_where[48];         /*   that named: "line N", or "device_traces[D][I]" as the importer
                                    *   names entries; "" when the trace has no lines */
} hbm_fidelity_result;

/* HBM_OK with *result filled. HBM_EINVAL (diag says why) when the trace has
 * no allocations PyTorch placed (refused ones do not count), or none of them
 * with a recorded address (nothing to compare), names
 * an unknown policy, or the conf is bad;
 * HBM_EPARSE when the trace's starting state does not fit the model. */
int hbm_fidelity(const hbm_trace *trace, const hbm_fidelity_options *options,
                 hbm_fidelity_result *result, hbm_diag *diag);

#endif
