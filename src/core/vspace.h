/* vspace.h: best-fit placement in one virtual address range, all metadata out
 * of band (host memory).
 *
 * zoned places blocks tightly (unit 512 B) in reservations several times the
 * device's capacity, where the range's top is a huge free "wilderness". A
 * good-fit allocator (TLSF, range.h) rounds the search up to the next size
 * class and so often skips a cached hole that fits and takes the wilderness,
 * whose pages must then be mapped. Best fit (the smallest hole that holds the
 * request, the lowest address among equals; PyTorch's lookup) reuses holes
 * first and touches the wilderness last. Free blocks sit in an ordered set
 * keyed (size, address): O(log n) per operation.
 *
 * A placement may also ask the caller which of the first few candidate holes
 * is cheapest (hbm_vspace_cost_fn): zoned prefers a hole whose pages are
 * already mapped over a slightly tighter one that would need new ones.
 *
 * zoned also places planned blocks at fixed addresses (hbm_vspace_alloc_at).
 * Finding the free block around an address needs a second ordered set of the
 * free blocks keyed by address; it is kept only once a vspace asks for it
 * (hbm_vspace_index_addresses), so vspaces that never place at an address
 * pay one predictable branch per operation and nothing more. A vspace whose
 * blocks all go to planned addresses drops the size-keyed set
 * (hbm_vspace_drop_best_fit): each placement and free then changes one
 * ordered set, not two (zoned's step plans: on one job that follows a plan
 * for 497 steps, a third of zoned's time went to the two sets).
 *
 * Invariants (hbm_vspace_check verifies each):
 *   V1 blocks tile [base, base + size): address order, no gap, no overlap;
 *   V2 no two free blocks are neighbours (immediate coalescing);
 *   V3 while kept, the free set holds exactly the free blocks, keyed (size,
 *      address);
 *   V4 live_bytes + free_bytes == size; block counts equal a recount;
 *   V5 every live block is in the address table, and nothing else is;
 *   V6 when indexed, the address index holds exactly the free blocks, each
 *      keyed (address, 0) with its block;
 *   V7 the free set is dropped only where the address index is kept.
 */
#ifndef HBM_VSPACE_H
#define HBM_VSPACE_H

#include "hbm.h"

typedef struct hbm_vspace hbm_vspace;

/* unit: minimum block size and address granularity (a power of two); base
 * and size are multiples of it. HBM_EINVAL, HBM_EHOSTMEM. */
int hbm_vspace_create(uint64_t base, uint64_t size, uint64_t unit, hbm_vspace **out);
void hbm_vspace_destroy(hbm_vspace *v);

/* Cost of placing `size` bytes at the start of the free block [hole, hole +
 * hole_size): any number, lower is better, 0 is perfect (the search stops). */
typedef uint64_t hbm_vspace_cost_fn(void *arg, uint64_t hole, uint64_t hole_size, uint64_t size);

/* Places size bytes (rounded up to unit) at the start of a free block: the
 * best fit, or with `cost` the cheapest of the first `probes` candidates in
 * best-fit order (ties: the earlier). *block_size gets the rounded size;
 * `user` is kept with the block for the caller. HBM_ENOMEM when no free
 * block holds it, HBM_EHOSTMEM when host memory runs out, HBM_EUNSUPPORTED
 * once best fit is dropped; then nothing changed. */
int hbm_vspace_alloc(hbm_vspace *v, uint64_t size, hbm_vspace_cost_fn *cost, void *arg,
                     int probes, uint32_t user, uint64_t *addr, uint64_t *block_size);
/* Makes room so that the next placement (hbm_vspace_alloc or _alloc_at),
 * and freeing that block again right after, cannot fail for host memory:
 * a caller that places a block and may have to take it back (its pages
 * could not be backed) reserves first. HBM_OK or HBM_EHOSTMEM (then the
 * blocks are unchanged). */
int hbm_vspace_reserve(hbm_vspace *v);
/* Frees the live block at addr; *block_size and *user (either may be NULL)
 * get what it held. HBM_EINVAL for an address that is not a live block,
 * HBM_EHOSTMEM when host memory runs out; then nothing changed. */
int hbm_vspace_free(hbm_vspace *v, uint64_t addr, uint64_t *block_size, uint32_t *user);

/* Starts keeping the address index that hbm_vspace_alloc_at needs, built
 * from the current free blocks; from then on every operation maintains it.
 * Idempotent. HBM_OK, or HBM_EHOSTMEM (then nothing changed). */
int hbm_vspace_index_addresses(hbm_vspace *v);
/* 1 once hbm_vspace_index_addresses has run: hbm_vspace_alloc_at places. */
int hbm_vspace_indexed(const hbm_vspace *v);
/* Stops keeping the size-keyed free set, for good: from then on only
 * hbm_vspace_alloc_at places (hbm_vspace_alloc answers HBM_EUNSUPPORTED and
 * changes nothing), and hbm_vspace_largest_free walks the blocks. Placements
 * and frees are otherwise the same. HBM_EUNSUPPORTED when the vspace is not
 * indexed (hbm_vspace_index_addresses); HBM_OK, also when already dropped. */
int hbm_vspace_drop_best_fit(hbm_vspace *v);
/* Places size bytes (rounded up to unit) exactly at addr, when [addr, addr +
 * rounded) lies inside one free block; what is left of that block before and
 * after stays free. *block_size (may be NULL) gets the rounded size; `user`
 * as for hbm_vspace_alloc. HBM_EUNSUPPORTED when the vspace was never
 * indexed; HBM_EINVAL for size 0, an addr that is not a multiple of unit, or
 * a span outside the range; HBM_ENOMEM when the span is not entirely free;
 * HBM_EHOSTMEM when host memory runs out; then nothing changed. */
int hbm_vspace_alloc_at(hbm_vspace *v, uint64_t addr, uint64_t size, uint32_t user, uint64_t *block_size);
/* Size of the live block at addr (and its user value), or 0. */
uint64_t hbm_vspace_block_size(const hbm_vspace *v, uint64_t addr, uint32_t *user);

uint64_t hbm_vspace_base(const hbm_vspace *v);
uint64_t hbm_vspace_size(const hbm_vspace *v);
uint64_t hbm_vspace_live_bytes(const hbm_vspace *v);
uint64_t hbm_vspace_live_blocks(const hbm_vspace *v);
uint64_t hbm_vspace_largest_free(const hbm_vspace *v);
/* End of the highest live block (base if none). */
uint64_t hbm_vspace_top(const hbm_vspace *v);

/* Walks blocks in address order: live (1) or free (0). Non-zero from visit stops. */
typedef int hbm_vspace_visit_fn(void *arg, uint64_t addr, uint64_t size, int live);
int hbm_vspace_walk(const hbm_vspace *v, hbm_vspace_visit_fn *visit, void *arg);

/* Verifies V1..V7; returns the number of failures, each passed to report. */
typedef void hbm_vspace_report_fn(void *arg, const char *message);
int hbm_vspace_check(const hbm_vspace *v, hbm_vspace_report_fn *report, void *arg);

#endif
