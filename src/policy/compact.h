/* compact.h: what the `compact` policy offers beyond the policy class, for the
 * heap's relocatable-allocation layer (core/reloc.c). Every call here is made
 * with the device's lock held. */
#ifndef HBM_POLICY_COMPACT_H
#define HBM_POLICY_COMPACT_H

#include "policy/policy.h"

extern const hbm_policy_class hbm_policy_compact;

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
