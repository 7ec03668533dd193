/* dsa.h: offsets for blocks whose lifetimes are known in advance (the
 * dynamic storage allocation problem, which MiniMalloc and TelaMalloc solve
 * for compilers' static memory plans).
 *
 * zoned learns one step of a job whose steps repeat and plans its large
 * blocks with this: a step's footprint then comes from a plan made with the
 * whole step in view instead of from placements made one request at a time.
 * Lifetimes may be cyclic: a block born late in one step and freed early in
 * the next occupies the end and the start of the period.
 *
 * The planner is greedy: blocks in one order, each placed clear of every
 * block already placed whose lifetime overlaps its own. No one order wins
 * everywhere (docs/zoned.md, "Step plans"), so hbm_dsa_plan() tries the
 * strategies below in turn, then a few squeaky-wheel rounds from each
 * order's plan (the blocks it put above the peak load go first in the
 * next), and keeps the lowest footprint, stopping early at the peak load,
 * which no plan beats. On the modelled 70B step (14,136 large blocks) the
 * first order reaches the peak load exactly; the footprint is never below
 * hbm_dsa_peak(), and hbm_dsa_conflicts() is the slow, obviously correct
 * check of a plan. */
#ifndef HBM_DSA_H
#define HBM_DSA_H

#include <stddef.h>
#include <stdint.h>

/* Live over [start, end). With a period P: start < P, start < end <= start
 * + P, and a block with end > P is live over [start, P) and [0, end - P). */
typedef struct hbm_dsa_block {
  uint64_t size;
  uint64_t start, end;
} hbm_dsa_block;

/* Plans offsets (multiples of align, a power of two) for n blocks; period 0:
 * lifetimes are not cyclic. offsets[i] is block i's; *footprint the highest
 * end. Never above the best single strategy's (ties: the earlier plan).
 * HBM_EINVAL for a malformed block, HBM_EHOSTMEM (never a worse plan for
 * want of host memory: the same blocks always get the same offsets). */
int hbm_dsa_plan(const hbm_dsa_block *b, size_t n, uint64_t period, uint64_t align, uint64_t *offsets,
                 uint64_t *footprint);

/* The greedy strategies: placement order (ties: larger, then earlier start,
 * then lower index) and where a block goes among the placed blocks it meets. */
typedef enum hbm_dsa_strategy {
  HBM_DSA_SIZE_LOWEST = 0, /* largest first, lowest offset clear of them */
  HBM_DSA_SIZE_GAP,        /* largest first, the smallest gap that holds it, else the top */
  HBM_DSA_LENGTH_LOWEST,   /* longest-lived first, lowest offset */
  HBM_DSA_START_GAP,       /* earliest born first, smallest gap */
  HBM_DSA_BREADTH_LOWEST,  /* most live bytes around it first, lowest offset */
  HBM_DSA_BREADTH_GAP,     /* most live bytes around it first, smallest gap */
  HBM_DSA_STRATEGIES
} hbm_dsa_strategy;

/* One strategy alone, same contract as hbm_dsa_plan(); HBM_EINVAL for an
 * unknown strategy. */
int hbm_dsa_plan_with(const hbm_dsa_block *b, size_t n, uint64_t period, uint64_t align,
                      hbm_dsa_strategy strategy, uint64_t *offsets, uint64_t *footprint);

/* breadth[i]: the most bytes live at one time while block i is (what the
 * BREADTH orders sort by). HBM_EHOSTMEM. */
int hbm_dsa_breadth(const hbm_dsa_block *b, size_t n, uint64_t period, uint64_t *breadth);

/* The most bytes live at one time: no plan's footprint is lower. 0 also when
 * host memory ran out (blocks of positive size never peak at 0). */
uint64_t hbm_dsa_peak(const hbm_dsa_block *b, size_t n, uint64_t period);

/* Pairs of blocks live at the same time whose [offset, offset + size)
 * overlap: 0 for a valid plan. O(n^2): the slow, obviously correct check,
 * for tests. */
size_t hbm_dsa_conflicts(const hbm_dsa_block *b, size_t n, uint64_t period, const uint64_t *offsets);

/* The same check in O(n log n), for plans of any size: a sweep through time
 * keeping the live blocks by offset, each new one compared with its two
 * neighbours there. 0: valid. 1: not, and *first, *second are two blocks that
 * are live together and overlap (the first such meeting in time). HBM_EINVAL
 * for a malformed block or an offset + size past 2^64, HBM_EHOSTMEM. */
int hbm_dsa_first_conflict(const hbm_dsa_block *b, size_t n, uint64_t period, const uint64_t *offsets,
                           size_t *first, size_t *second);

/* The strategy's name ("size-lowest", ...), NULL for an unknown one. */
const char *hbm_dsa_strategy_name(hbm_dsa_strategy strategy);

#endif
