/* pytorch_ref_state.h: the state of the slow reference (pytorch_ref.c),
 * which hbm_ptref_check verifies. Only pytorch_ref.c changes it; the
 * white-box test of the check (tests/test_caching_check.c) breaks one field
 * at a time to see each failure reported. */
#ifndef HBM_PYTORCH_REF_STATE_H
#define HBM_PYTORCH_REF_STATE_H

#include "policy/pytorch_ref.h"

typedef struct ref_block {
  uint64_t addr, size;
  int64_t gc_base; /* the pool's get_free_block count when it entered the set */
  int stream;
  long seg;
  uint8_t live, small, allocated, mapped;
} ref_block;

typedef struct ref_seg {
  uint64_t addr, size;
  int stream;
  uint8_t live, small, expandable;
  uint64_t page;     /* expandable: 2 MiB (small) or 20 MiB (large) */
  uint64_t npages;   /* expandable: size / page */
  uint64_t *handles; /* expandable: physical handle per page (page_handle), 0 when unmapped */
} ref_seg;

/* Invariant (hbm_ptref_check): the live blocks of each live segment tile it
 * and share its stream and pool; no free block has a free neighbour of the
 * same mapped state; in an expandable segment a page has a handle exactly
 * where a mapped block lies, and unmapped blocks are whole pages; reserved ==
 * sizes of the ordinary segments + mapped pages. */
struct hbm_ptref {
  hbm_device *dev;
  hbm_pt_conf conf;
  uint64_t allowed; /* allowed_memory_maximum */
  ref_block *b;
  long nb, capb;
  ref_seg *s;
  long ns, caps;
  int64_t free_calls[2]; /* get_free_blocks_call_count per pool */
  uint64_t reserved;     /* total_allocated_memory */
  hbm_pt_stats st;
  void (*action)(void *arg, hbm_pt_action a, uint64_t addr, uint64_t size, int stream, int small);
  void *action_arg;
  int host_failed;
};

#endif
