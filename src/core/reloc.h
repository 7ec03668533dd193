/* reloc.h: the heap's relocatable-allocation layer (handles, hooks, and the
 * public compaction calls of hbm.h), for heaps whose policy moves blocks.
 *
 * The heap (heap.c) owns one hbm_reloc when its policy can move blocks, calls
 * hbm_reloc_moved() for every move after updating its own address map and
 * hbm_reloc_freed() for every free, and lends reloc.c its lock and its
 * unlocked alloc/free (declared below, defined in heap.c). Every function here
 * runs with the device's lock held.
 *
 * The structs are shown here, not in reloc.c, so that tests can break each
 * invariant and see hbm_check() report it; nothing outside reloc.c writes them.
 */
#ifndef HBM_RELOC_H
#define HBM_RELOC_H

#include "core/addrmap.h"
#include "policy/policy.h"

typedef struct hbm_handle_slot {
  uint64_t addr; /* current address while live */
  uint32_t gen;  /* generation of the handle issued last (from 1); 0: retired */
  uint32_t live; /* 0 or 1 */
} hbm_handle_slot;

/* Invariants (hbm_reloc_check):
 *   nslots <= cap, nspare <= cap (spare has room for cap entries);
 *   by_addr satisfies the address map's own invariant (addrmap.h);
 *   each live slot holds the address of a live heap block, and `by_addr`
 *   maps exactly those addresses to their slots (a bijection);
 *   live_handles == live slots == by_addr.used == nslots - nspare - retired;
 *   a slot of generation 0 issued every generation and is retired: never
 *   live, never spare, and there are `retired` of them;
 *   spare lists each other slot below nslots that is not live, once;
 *   the compact policy's before_move and its argument are hooks.before_move
 *   and hooks.arg (hbm_heap_set_relocation_hooks sets both together): a pass
 *   asks the hook the caller set last, with that hook's argument. */
typedef struct hbm_reloc {
  hbm_addrmap by_addr; /* address of a block that has a handle -> slot */
  hbm_handle_slot *slots;
  uint32_t nslots, cap;
  uint32_t *spare;     /* free slots, reused last in first out */
  uint32_t nspare;
  uint32_t retired;    /* slots whose every generation was issued: never reused */
  uint64_t live_handles;
  hbm_relocation_hooks hooks;
} hbm_reloc;

/* The most slots a table holds: a handle's low 32 bits are slot + 1, and 0
 * there is never a handle. */
#define HBM_RELOC_MAX_SLOTS UINT32_MAX
/* The capacity the slot table grows to from `cap`: 256 first, then twice as
 * many, at most HBM_RELOC_MAX_SLOTS (and at most what a size_t can count in
 * bytes); 0 when `cap` is already the most, so the table cannot grow. */
uint32_t hbm_reloc_grown_cap(uint32_t cap);

int hbm_reloc_create(hbm_reloc **out);
void hbm_reloc_destroy(hbm_reloc *r);
/* A block moved: follow it, then tell the framework (request size and tag). */
void hbm_reloc_moved(hbm_reloc *r, uint64_t old_addr, uint64_t new_addr, uint64_t request, hbm_tag tag);
/* A block was freed: its handle, if any, ends. */
void hbm_reloc_freed(hbm_reloc *r, uint64_t addr);
/* Failures found, each passed to report. `live` is the heap's address map,
 * `p` its policy. */
int hbm_reloc_check(const hbm_reloc *r, const hbm_policy *p, const hbm_addrmap *live, hbm_check_report_fn *report,
                    void *arg);

/* ---- defined in heap.c, for reloc.c ---- */
/* Takes the heap's device's lock; returns its policy and relocation layer (NULL when
 * the policy never moves blocks). */
hbm_policy *hbm_heap_enter(hbm_heap *h, hbm_reloc **reloc);
void hbm_heap_leave(hbm_heap *h);
/* hbm_alloc / hbm_free with the lock already held. */
int hbm_heap_alloc_locked(hbm_heap *h, uint64_t size, hbm_tag tag, int stream, uint64_t *addr);
int hbm_heap_free_locked(hbm_heap *h, uint64_t addr);
/* A request that failed before reaching hbm_heap_alloc_locked, counted in its stats. */
void hbm_heap_count_failure(hbm_heap *h);
/* The counters hbm_check recounts (live, allocated, blocks, per tag, peaks), for tests. */
hbm_stats *hbm_heap_counters(hbm_heap *h);

#endif
