/* contract.h: the device contract's ledger, shared by every backend.
 *
 * A ledger keeps what a device holds: segments, reservations, physical
 * handles (with the bytes of each mapped) and mappings. Each device call goes
 * through it in two steps around the backend's real work:
 *
 *   rc = hbm_ledger_X_ok(...);      validate: HBM_OK, or the call breaks the
 *                                   contract (HBM_EINVAL: counted, said once
 *                                   through the error handler) or host memory
 *                                   ran out (HBM_EHOSTMEM); nothing changed.
 *   ... the backend's own work ...  runs only once the ledger accepted the call;
 *                                   on its failure the ledger is left as it was.
 *   hbm_ledger_X_done(...);         record: cannot fail (the _ok step reserved
 *                                   the room), except map_done (see there).
 *
 * So every backend refuses exactly the same calls with the same messages; the
 * rules are listed in sim.c's opening comment and device.h. Addresses and
 * handle ids are the backend's: the ledger only checks and records them.
 *
 * Costs: segments and reservations are few (hundreds, tens) and live in sorted
 * arrays; mappings (thousands live, tens of thousands of calls) sit in an
 * ordered set keyed by address, handles in a hash map: each call is O(log n)
 * plus the few entries it touches. */
#ifndef HBM_DEVICE_CONTRACT_H
#define HBM_DEVICE_CONTRACT_H

#include <stddef.h>
#include <stdint.h>

#include "core/addrmap.h"
#include "core/ordset.h"
#include "device/device.h"

/* Every device's addresses lie below this: ranges that reach past it (or
 * wrap) are refused, and the sim device's bump pointer never wraps. */
#define HBM_LEDGER_VA_END (1ull << 63)

/* A segment or a reservation. For a segment, `held` is the physical bytes the
 * backend claimed for it (its size rounded as the backend rounds) and `data`
 * the backend's own (the host device's physical run); 0 for a reservation. */
typedef struct hbm_ledger_span { uint64_t addr, size, held, data; } hbm_ledger_span;

/* A physical handle. Invariant: mapped <= size, and mapped is the sum of the
 * sizes of the mappings that name it. A free pool slot has size 0 and chains
 * the next free slot through `mapped`. */
typedef struct hbm_ledger_handle { uint64_t id, size, mapped; } hbm_ledger_handle;

/* A mapping of [offset, offset+size) of handle `handle` at va. A free pool
 * slot has size 0 and chains the next free slot through `offset`. */
typedef struct hbm_ledger_mapping { uint64_t va, size, handle, offset; } hbm_ledger_mapping;

/* Invariants (hbm_ledger_check verifies each):
 *   L1 segs sorted by address, disjoint, non-empty, each holding at least its
 *      size (held >= size);
 *   L2 reservations sorted by (addr, size), each granule-aligned and non-empty,
 *      none overlapping a segment; max_res_size >= every reservation's size;
 *   L3 mappings: keyed by va in `maps`, disjoint, each inside one reservation
 *      and inside its handle, granule-aligned, naming a live handle;
 *   L4 each handle's `mapped` is the sum of its mappings' sizes;
 *   L5 the device's phys_used == sum of segments' held + sum of handle sizes. */
typedef struct hbm_ledger {
  char kind[16];       /* the device's kind, the first word of every message */
  uint64_t granule;
  hbm_ledger_span *segs;
  size_t nsegs, cap_segs;
  hbm_ledger_span *res; /* reservations */
  size_t nres, cap_res;
  uint64_t max_res_size;
  hbm_addrmap handles;  /* handle id -> slot in hpool */
  hbm_ledger_handle *hpool;
  uint64_t nhpool, cap_hpool, free_handle;
  hbm_ordset *maps;     /* (va, 0) -> slot in mpool */
  hbm_ledger_mapping *mpool;
  uint64_t nmpool, cap_mpool, free_mapping;
  uint64_t refused;     /* calls refused for breaking the contract */
  int maps_untracked;   /* handles, mappings and copies taken on trust (hbm_sim_track_mappings) */
} hbm_ledger;

/* HBM_OK or HBM_EHOSTMEM. The granule is a power of two. */
int hbm_ledger_init(hbm_ledger *l, const char *kind, uint64_t granule);
void hbm_ledger_release(hbm_ledger *l);

/* Refuses a call: counted, said once through the error handler
 * ("KIND device: CALL(a, b) refused: WHY"), HBM_EINVAL. For a backend's own
 * rules (the sim device's named reservation addresses). */
int hbm_ledger_refuse(hbm_ledger *l, const char *call, uint64_t a, uint64_t b, const char *why);

/* Queries for a backend placing a range. */
int hbm_ledger_seg_overlaps(const hbm_ledger *l, uint64_t addr, uint64_t size);
int hbm_ledger_res_overlaps(const hbm_ledger *l, uint64_t addr, uint64_t size);

int hbm_ledger_seg_alloc_ok(hbm_ledger *l, uint64_t size, uint64_t hint);
void hbm_ledger_seg_alloc_done(hbm_ledger *l, uint64_t addr, uint64_t size, uint64_t held, uint64_t data);
/* On HBM_OK, *held and *data are the segment's (what its backend needs to free it). */
int hbm_ledger_seg_free_ok(hbm_ledger *l, uint64_t addr, uint64_t size, uint64_t *held, uint64_t *data);
void hbm_ledger_seg_free_done(hbm_ledger *l, uint64_t addr);
/* `at` is the address the backend was asked for (0: any), only for the message. */
int hbm_ledger_reserve_ok(hbm_ledger *l, uint64_t size, uint64_t at);
void hbm_ledger_reserve_done(hbm_ledger *l, uint64_t base, uint64_t size);
int hbm_ledger_unreserve_ok(hbm_ledger *l, uint64_t base, uint64_t size);
void hbm_ledger_unreserve_done(hbm_ledger *l, uint64_t base, uint64_t size);
/* Makes room so that the next `handles` phys_create and `maps` map calls
 * (with releases and unmaps between them) cannot fail for host memory:
 * only a broken contract or a full device can refuse them then. HBM_OK or
 * HBM_EHOSTMEM (then nothing the ledger records changed). */
int hbm_ledger_prepare(hbm_ledger *l, uint64_t handles, uint64_t maps);
int hbm_ledger_phys_create_ok(hbm_ledger *l, uint64_t size);
/* `id` is the backend's: live handles' ids are distinct and never UINT64_MAX. */
void hbm_ledger_phys_create_done(hbm_ledger *l, uint64_t id, uint64_t size);
int hbm_ledger_phys_release_ok(hbm_ledger *l, uint64_t id, uint64_t size);
void hbm_ledger_phys_release_done(hbm_ledger *l, uint64_t id);
int hbm_ledger_map_ok(hbm_ledger *l, uint64_t va, uint64_t size, uint64_t handle, uint64_t offset);
/* HBM_OK, or HBM_EHOSTMEM with the ledger unchanged (the ordered set could not
 * grow): the backend then undoes its mapping. */
int hbm_ledger_map_done(hbm_ledger *l, uint64_t va, uint64_t size, uint64_t handle, uint64_t offset);
int hbm_ledger_unmap_ok(hbm_ledger *l, uint64_t va, uint64_t size);
void hbm_ledger_unmap_done(hbm_ledger *l, uint64_t va, uint64_t size);
/* Copies: each device range is device memory (one segment, or mappings
 * without a gap); n == 0 is always accepted. Nothing to record. */
int hbm_ledger_copy_ok(hbm_ledger *l, uint64_t dst, uint64_t src, uint64_t n);
int hbm_ledger_to_host_ok(hbm_ledger *l, uint64_t src, uint64_t n);
int hbm_ledger_from_host_ok(hbm_ledger *l, uint64_t dst, uint64_t n);

/* Verifies L1-L5 (phys_used: the device's); the number of failures, each
 * passed to report as "KIND: ...". */
int hbm_ledger_check(const hbm_ledger *l, uint64_t phys_used, void (*report)(void *arg, const char *message), void *arg);
/* Visits the ledger in hbm_device_each's order (device.h). */
void hbm_ledger_each(const hbm_ledger *l, hbm_device_visit_fn *visit, void *arg);

#endif
