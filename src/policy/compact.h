/* compact.h: what the `compact` policy offers beyond the policy class, for the
 * heap's relocatable-allocation layer (core/reloc.c). Every call here is made
 * with the device's lock held. */
#ifndef HBM_POLICY_COMPACT_H
#define HBM_POLICY_COMPACT_H

#include "core/addrmap.h"
#include "core/compactor.h"
#include "policy/policy.h"

extern const hbm_policy_class hbm_policy_compact;

/* The policy's state (its invariants: compact.c, compact_check), shown here so
 * that tests can break one at a time and see hbm_check() report it; nothing
 * outside compact.c writes it. */
typedef struct hbm_compact_policy {
  hbm_policy base;
  hbm_range *arena;
  uint64_t seg_addr, seg_size;
  hbm_addrmap pins;            /* live block address -> pin count (>= 1) */
  int on_failure;              /* ON_FAILURE_* */
  int ordered;                 /* split overlapping copies into ordered chunks */
  uint64_t every_steps, next_periodic; /* next_periodic: the next multiple of every_steps, 0 once none is left below 2^64 */
  uint64_t highest_step;       /* the highest step mark taken, once `stepped` */
  int stepped;
  hbm_clayout layout;          /* reused by every pass */
  hbm_cplan plan;
  int planned;                 /* layout and plan are the last pass's, for plan_need (0: full) */
  uint64_t plan_need;
  void (*moved)(void *arg, uint64_t old_addr, uint64_t new_addr, uint64_t size);
  void *moved_arg;
  hbm_before_move_fn *before_move;
  void *before_arg;
  hbm_compact_stats st;
} hbm_compact_policy;

static inline int hbm_policy_is_compact(const hbm_policy *p) { return p->cls == &hbm_policy_compact; }

/* Adds delta (+1 or -1) to the pin count of the live block at addr.
 * HBM_EINVAL for an address that is not a live block or an unpin of an
 * unpinned block; HBM_EHOSTMEM. */
int hbm_compact_policy_pin(hbm_policy *p, uint64_t addr, int delta);
void hbm_compact_policy_set_before_move(hbm_policy *p, hbm_before_move_fn *fn, void *arg);
/* One pass (hbm_compact()). */
int hbm_compact_policy_run(hbm_policy *p, const hbm_compact_options *o, hbm_compact_result *r);
void hbm_compact_policy_stats(hbm_policy *p, hbm_compact_stats *out);

#endif
