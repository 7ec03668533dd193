/* range.h: the O(1) range allocator over [base, base + size), all metadata
 * out of band (host memory), never inside the managed range.
 *
 * Two-level segregated fit (TLSF, Masmano et al.; mattconte/tlsf): a first-
 * level bitmap of power-of-two classes, a second-level bitmap of
 * HBM_RANGE_SL_COUNT linear subdivisions each, one free list per (fl, sl).
 * Alloc and free are O(1); neighbours coalesce immediately; the address of a
 * live block is found through an open-addressing hash table.
 *
 * Invariants (hbm_range_check verifies each):
 *   I1 blocks tile [base, base + size): sorted by address, no gap, no overlap;
 *   I2 no two free blocks are neighbours (immediate coalescing);
 *   I3 each free block is in exactly the list its size maps to, and the
 *      bitmaps' bits are set exactly for the non-empty lists;
 *   I4 live_bytes + free_bytes == size; counts equal a recount;
 *   I5 every live block is in the address table, and nothing else is;
 *   I6 largest_free, when not stale, equals the largest free block.
 */
#ifndef HBM_RANGE_H
#define HBM_RANGE_H

#include "hbm.h"

typedef struct hbm_range hbm_range;

/* unit: the minimum block size and address granularity (a power of two,
 * e.g. 512). base and size must be multiples of unit. */
int hbm_range_create(uint64_t base, uint64_t size, uint64_t unit, hbm_range **out);
void hbm_range_destroy(hbm_range *r);

/* Allocates size bytes (rounded up to unit) aligned to align (a power of two,
 * 0 = unit). *block_size gets the rounded size. HBM_ENOMEM when no free block
 * can hold it; then nothing changed. Invariant: succeeds whenever
 * size rounded (plus alignment padding) <= hbm_range_largest_free(). */
int hbm_range_alloc(hbm_range *r, uint64_t size, uint64_t align, uint64_t *addr,
                    uint64_t *block_size);
/* Allocates exactly [addr, addr + size) if that range is free (seeding a
 * recorded layout). HBM_EINVAL if not. */
int hbm_range_alloc_at(hbm_range *r, uint64_t addr, uint64_t size);
/* HBM_EINVAL for an address that is not a live block (double free, unknown). */
int hbm_range_free(hbm_range *r, uint64_t addr, uint64_t *block_size);
/* Size of the live block at addr, or 0. */
uint64_t hbm_range_block_size(const hbm_range *r, uint64_t addr);

/* Makes room for a tiling of up to `blocks` blocks (live and free) holding up
 * to `blocks` live ones, so that later allocs, frees and hbm_range_clear
 * within those counts never need host memory. HBM_EHOSTMEM (nothing changed
 * that matters: capacity only). */
int hbm_range_reserve(hbm_range *r, uint64_t blocks);
/* Back to one free block over the whole range, keeping all capacity (never
 * allocates, never fails). */
void hbm_range_clear(hbm_range *r);

uint64_t hbm_range_base(const hbm_range *r);
uint64_t hbm_range_size(const hbm_range *r);
uint64_t hbm_range_free_bytes(const hbm_range *r);
uint64_t hbm_range_live_bytes(const hbm_range *r);
uint64_t hbm_range_live_blocks(const hbm_range *r);
/* Exact size of the largest free block. O(1) when cached; after the largest
 * block was taken only the highest non-empty size class is examined. */
uint64_t hbm_range_largest_free(hbm_range *r);
/* End address of the highest live block (base if none): the footprint. */
uint64_t hbm_range_top(const hbm_range *r);

/* Walks blocks in address order: live (1) or free (0). Non-zero from visit stops. */
typedef int hbm_range_visit_fn(void *arg, uint64_t addr, uint64_t size, int live);
int hbm_range_walk(const hbm_range *r, hbm_range_visit_fn *visit, void *arg);

/* Verifies I1..I6; returns the number of failures, each passed to report. */
typedef void hbm_range_report_fn(void *arg, const char *message);
int hbm_range_check(hbm_range *r, hbm_range_report_fn *report, void *arg);

#endif
