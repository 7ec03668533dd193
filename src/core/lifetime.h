/* lifetime.h: online lifetime classes for allocations that carry no tag
 * (PyTorch snapshots have none). zoned keeps long-lived blocks (weights,
 * optimizer state, gradient buffers) apart from short-lived ones
 * (activations, temporaries, communication buffers) so a long-lived block
 * does not pin a granule amid short-lived ones.
 *
 * The rule (docs/zoned.md "Lifetime classes" says why):
 *   1. Build phase: until the first free, every allocation is static. A job
 *      builds its model and optimizer before it frees anything, and a
 *      recording that starts mid-run begins with the blocks that already
 *      existed, which are mostly weights and optimizer state.
 *   2. Otherwise the class is predicted from the history of the same key
 *      (request rounded to 512 B, and stream): the same tensor shape comes
 *      back at the same point of every step. Each key has a 2-bit
 *      saturating counter (as branch predictors keep): a block of the key
 *      that turned out long-lived counts up, a short-lived one counts down;
 *      2 and 3 predict static. Keys first seen in the build phase start at
 *      3; a key's first observed block sets it to 2 (long) or 0 (short);
 *      keys never seen predict transient (after the build phase most new
 *      shapes are activations of a new sequence length).
 *   3. Long-lived means: once a step mark has been seen, a step mark passed
 *      while it was live (marks are counted, not compared by number: a job
 *      may start at step 0 or mark one number twice); before any mark, it
 *      stayed live while more than twice the peak live bytes seen so far were
 *      allocated after it (a whole working set came and went).
 *
 * Invariants: live_bytes == sum of sizes of stamps predicted and neither
 * observed nor forgotten (zoned's check verifies it against its records);
 * every counter is in 0..3. tests/test_zoned_lifetime.c checks both, and
 * every prediction, against a slow reference written from the rule.
 */
#ifndef HBM_LIFETIME_H
#define HBM_LIFETIME_H

#include <stdint.h>

#include "core/addrmap.h"

typedef enum hbm_life { HBM_LIFE_TRANSIENT = 0, HBM_LIFE_STATIC = 1 } hbm_life;

/* What a block must carry from its prediction to its free. */
typedef struct hbm_life_stamp {
  uint64_t key;
  uint64_t birth_clock; /* bytes allocated before it */
  uint64_t birth_marks; /* step marks seen before it */
  uint64_t size;
} hbm_life_stamp;

typedef struct hbm_lifetime {
  hbm_addrmap counters; /* key -> 2-bit counter */
  uint64_t clock;       /* bytes allocated so far */
  uint64_t live_bytes, peak_live_bytes;
  uint64_t steps_seen;  /* step marks */
  int freed;            /* a free has been observed: the build phase is over */
  /* What the latest prediction changed, so that forget undoes it all. */
  uint64_t last_peak;   /* peak_live_bytes before it */
  int last_added_key;   /* it added its key (build phase) */
  hbm_life last_life;
  uint64_t predicted_static, predicted_transient, observed_long, observed_short;
} hbm_lifetime;

void hbm_lifetime_init(hbm_lifetime *l);
void hbm_lifetime_release(hbm_lifetime *l);
/* Makes room for one more key, so that the next predict or observe cannot
 * meet a full table: a caller whose placement must not change with host
 * memory (zoned) reserves before each, and fails the request instead.
 * HBM_OK or HBM_EHOSTMEM (then nothing changed). */
static inline int hbm_lifetime_reserve(hbm_lifetime *l) { return hbm_addrmap_reserve(&l->counters, 1); }
/* Predicts the class of a new allocation and fills *stamp. Never fails: a
 * key the table cannot hold (host memory, without hbm_lifetime_reserve)
 * predicts transient. */
hbm_life hbm_lifetime_predict(hbm_lifetime *l, uint64_t size, int stream, hbm_life_stamp *stamp);
/* The block predicted with stamp was freed: learns from its lifetime.
 * Returns 1 if it was long-lived. A key the table cannot hold (host memory,
 * without hbm_lifetime_reserve) is not learnt. */
int hbm_lifetime_observe(hbm_lifetime *l, const hbm_life_stamp *stamp);
/* The block of the latest prediction (stamp) was never placed: undoes all
 * that prediction did (live bytes, clock, peak, the key it added, the
 * prediction count) and learns nothing. Only the latest prediction can be
 * forgotten. */
void hbm_lifetime_forget(hbm_lifetime *l, const hbm_life_stamp *stamp);
/* A step mark passed. The number is not used: only the count of marks is. */
void hbm_lifetime_step(hbm_lifetime *l, uint64_t step);
/* The counter of a key (0..3), or -1 if never seen (tests). */
int hbm_lifetime_counter(const hbm_lifetime *l, uint64_t size, int stream);

#endif
