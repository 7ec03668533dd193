/* compactor.h: planning and moving live blocks of one range (docs/design.md §3,
 * docs/compaction.md). Used by the `compact` policy; independent of it.
 *
 * A layout is the range's tiling read once (live blocks and holes in address
 * order, each live block marked pinned or not). A plan is a list of moves
 * (src, dst, size), one per block, in the order the copies must run. Applying
 * a plan rebuilds the range for the new layout first (so a host allocation
 * failure leaves everything untouched; room to describe a pass stopped by a
 * failed copy is taken then too), asks the caller whether to go ahead, then
 * copies, then swaps the range.
 *
 * Plans
 *   full      slide every movable block down, order kept; a pinned block is a
 *             wall: blocks above it slide down to its end, never across it.
 *   partial   open one hole of at least `need` bytes moving as few bytes as it
 *             can, choosing the cheaper of
 *               evacuate: a window of `need` bytes whose live blocks are
 *                 moved into holes outside it (best fit, largest first);
 *               slide: a run of blocks between holes slid down so that its
 *                 holes join into one.
 *
 * The minimum (min_moved): for a request of R bytes (rounded to the range's
 * unit), the least bytes any plan must copy to leave R contiguous free bytes:
 *   min over a in [base, end - R] of sum{ size(b) : b live, b intersects [a, a+R) }
 * taken over the windows [a, a+R) that intersect no pinned block. Any plan
 * whose final free interval is [a, a+R) has moved every block that intersected
 * it (a block moves whole), so this bounds every plan from below. The minimum
 * over all a is attained at a = the start of some element of the tiling (slide
 * a window down until its start meets a live block's end: it only sheds
 * blocks), so it is found in one pass over the layout.
 *
 * Invariants of a layout (hbm_clayout_check): elements tile [base, end) in
 * address order, each a positive multiple of the unit (a power of two); no
 * two holes are neighbours; free_bytes == sum of hole sizes, live_bytes ==
 * sum of live sizes, largest_free == the largest hole, live_blocks and
 * pinned_blocks count live and pinned elements; live elements only may be
 * pinned. Invariants of a plan: hbm_cplan_check below.
 */
#ifndef HBM_COMPACTOR_H
#define HBM_COMPACTOR_H

#include "core/range.h"
#include "device/device.h"

/* Evacuation windows tried, cheapest first, before settling for a slide
 * (tuning: may change). */
enum { HBM_COMPACTOR_EVACUATE_TRIES = 256 };

typedef struct hbm_celem {
  uint64_t addr, size;
  uint8_t live, pinned;
} hbm_celem;

typedef struct hbm_clayout {
  hbm_celem *el;
  size_t n, cap;
  uint64_t base, end, unit;
  uint64_t free_bytes, live_bytes, largest_free;
  uint64_t live_blocks, pinned_blocks;
} hbm_clayout;

typedef struct hbm_cmove {
  uint64_t src, dst, size;
} hbm_cmove;

enum {
  HBM_CPLAN_NONE = 0, /* nothing to move */
  HBM_CPLAN_FULL,
  HBM_CPLAN_EVACUATE,
  HBM_CPLAN_SLIDE,
};

typedef struct hbm_cplan {
  int kind;
  hbm_cmove *moves; /* execution order */
  size_t nmoves, cap;
  uint64_t moved_bytes;
  uint64_t min_moved_bytes; /* the minimum above for the hole this plan opens */
  uint64_t hole_addr, hole_size; /* the hole it opens (partial) or the largest after (full):
                                  * a whole free run of the layout after the moves */
  uint64_t copies;               /* device copies after joining adjacent moves */
} hbm_cplan;

/* Pinned query for a live block; NULL: nothing pinned. */
typedef int hbm_cpinned_fn(void *arg, uint64_t addr);

/* Reads the range's tiling; unit is the range's unit (its minimum block).
 * HBM_EHOSTMEM on failure (layout then empty). */
int hbm_clayout_read(hbm_clayout *l, const hbm_range *r, uint64_t unit, hbm_cpinned_fn *pinned,
                     void *arg);
void hbm_clayout_release(hbm_clayout *l);

/* The minimum defined above for `need` bytes (rounded up to the unit), and
 * the start of a window attaining it. UINT64_MAX when no window of `need`
 * bytes avoids every pinned block (or need exceeds the range). */
uint64_t hbm_compactor_min_moved(const hbm_clayout *l, uint64_t need, uint64_t *window);

/* Plans. Each resets `plan` first. full: always HBM_OK (kind NONE when the
 * layout is already compact). partial: HBM_OK with kind NONE when a hole of
 * `need` exists already; HBM_ENOMEM when no evacuation or slide can open one
 * (free bytes short, or pinned blocks in the way); HBM_EHOSTMEM. */
int hbm_compactor_plan_full(const hbm_clayout *l, hbm_cplan *plan);
int hbm_compactor_plan_partial(const hbm_clayout *l, uint64_t need, hbm_cplan *plan);
void hbm_cplan_release(hbm_cplan *plan);

/* Rebuilds *arena for the planned layout, then calls before_copy (may be
 * NULL) once, the last moment at which the pass can still not happen, then
 * copies every block on `dev`, and replaces *arena. Nothing of this (rebuild,
 * before_copy, copies) happens for a plan without moves. *moves_done (may be
 * NULL) gets how many moves, a prefix of the plan, really happened.
 *   HBM_OK: all of them; *arena holds the planned layout.
 *   HBM_EHOSTMEM (or HBM_ECORRUPT for a plan that overlaps itself): before
 *     before_copy and any copy; nothing changed, *moves_done = 0.
 *   HBM_EBUSY: before_copy returned non-zero; nothing changed, no copy,
 *     *moves_done = 0.
 *   A device copy error: the pass stops at the failed copy. The moves whose
 *     copies completed are kept (their blocks really moved), the rest did not
 *     happen: *arena holds exactly that layout, and the error is returned.
 *     Every block not in the failed copy holds its bytes; the blocks of the
 *     failed copy (moves joined into it) stay at their old addresses. Their
 *     bytes are intact when that copy did not overlap its own source, or the
 *     device wrote nothing of it. `ordered`: the chunks of the failed copy
 *     that completed are copied back, which restores its source exactly
 *     (unless that copying back fails too). Unordered (memmove) copy that
 *     overlapped itself and wrote part before failing: undefined.
 * Needs no host memory once copying starts. `ordered`: split every
 * overlapping move into non-overlapping chunks issued in order (for copy
 * engines without memmove semantics); 0 lets the device's copy handle overlap
 * (host: memmove). */
int hbm_compactor_apply(hbm_range **arena, hbm_device *dev, const hbm_clayout *l,
                        const hbm_cplan *plan, int ordered, int (*before_copy)(void *arg), void *arg,
                        size_t *moves_done);

/* ---- checks: each returns the number of failures, each passed to report
 * (may be NULL), or HBM_EHOSTMEM (< 0) when it could not allocate. ---- */
/* The layout invariants above, the alignment of every element to the unit,
 * and the counters (free_bytes, live_bytes, largest_free, live_blocks,
 * pinned_blocks) against a recount. O(n). */
int hbm_clayout_check(const hbm_clayout *l, hbm_range_report_fn *report, void *arg);
/* `plan` against the layout it was planned on; need 0: a full plan, else the
 * partial plan for `need` bytes. Every move takes a whole live unpinned
 * block, once, somewhere else; destinations lie in the range aligned to the
 * unit; the final layout has no overlap; in plan order no copy overwrites a
 * block that has not moved yet (memmove over its own source is fine); the
 * totals (moved_bytes, copies, min_moved_bytes) agree with the moves. Full:
 * every movable block at the end of the block (or wall) below it, order kept,
 * hole_size the largest free run after, and the hole is that run. Partial:
 * the promised hole, of at least `need` (rounded), is a whole free run after
 * the moves, every block that intersected it moved, and moved_bytes >=
 * min_moved_bytes. O(n log n). */
int hbm_cplan_check(const hbm_clayout *l, const hbm_cplan *plan, uint64_t need,
                    hbm_range_report_fn *report, void *arg);

/* The device copies applying `plan` issues: one per run of moves joined
 * (plan->copies), and with `ordered` as many as hbm_compactor_copy_ordered
 * splits an overlapping one into. */
uint64_t hbm_compactor_device_copies(const hbm_cplan *plan, int ordered);

/* One overlapping-safe copy made of non-overlapping device copies issued in
 * order: front to back when moving down, back to front when moving up, each
 * at most |dst - src| bytes. Returns the number of copies through *ncopies. */
int hbm_compactor_copy_ordered(hbm_device *dev, uint64_t dst, uint64_t src, uint64_t n,
                               uint64_t *ncopies);

#endif
