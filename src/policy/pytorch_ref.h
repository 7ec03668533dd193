/* pytorch_ref.h: a slow, second derivation of PyTorch's CUDA caching
 * allocator, written from the rules of c10/cuda/CUDACachingAllocator.cpp
 * (docs/caching-model.md) and not from pytorch_alloc.c, so that a randomized
 * differential test (tests/test_caching_reference.c) can hold the model to it.
 *
 * Plain arrays of blocks and segments; every lookup is a linear scan in
 * PyTorch's orders: free blocks (stream, size, address), unmapped blocks
 * (stream, address). No indexes, no caches: every figure is a recount.
 *
 * Scope: what a sequence of malloc/free on several streams can drive, with
 * max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions,
 * garbage_collection_threshold with per_process_memory_fraction, and
 * expandable_segments, from a recorded starting state, with recorded segment
 * releases. Not here: largest_free, tags, graph pools, events.
 */
#ifndef HBM_PYTORCH_REF_H
#define HBM_PYTORCH_REF_H

#include "device/device.h"
#include "policy/pytorch_alloc.h"

typedef struct hbm_ptref hbm_ptref;

/* A reference allocator on `dev` (which it alone uses) under `conf`.
 * HBM_EHOSTMEM when host memory fails. */
int hbm_ptref_create(hbm_device *dev, const hbm_pt_conf *conf, hbm_ptref **out);
/* Gives the device back every segment, page and reservation. */
void hbm_ptref_destroy(hbm_ptref *r);
/* Every segment action, reported as PyTorch records it (as hbm_pt_hooks.action). */
void hbm_ptref_set_action(hbm_ptref *r,
                          void (*action)(void *arg, hbm_pt_action a, uint64_t addr, uint64_t size,
                                         int stream, int small),
                          void *arg);

/* malloc: HBM_OK with the block's address and size, HBM_ENOMEM after the
 * release-and-retry path found nothing (the cache is then emptied),
 * HBM_EINVAL for size 0, HBM_EHOSTMEM when host memory fails. */
int hbm_ptref_alloc(hbm_ptref *r, uint64_t size, int stream, uint64_t *addr, uint64_t *block_size);
/* free: HBM_EINVAL if addr is not an allocated block's address. */
int hbm_ptref_free(hbm_ptref *r, uint64_t addr, uint64_t *block_size);
/* Seeds a recorded starting state (hbm_trace's init segments), as
 * hbm_pt_seed does: ordinary segments in the order recorded, each at its
 * recorded address where the device allows; then the expandable ranges, one
 * reservation per run of ranges of a (stream, pool) that fits in one, each
 * range where it was recorded relative to the run's first. A state larger
 * than the free device leaves out the segments that hold no live block. A
 * state is not an action: nothing is reported, no device allocation counted.
 * Writes each live block's address to id_addr[id] (when id_addr is not NULL).
 * HBM_EINVAL, with nothing done, for blocks that do not tile their segment in
 * 512-byte units or ranges that are not whole pages of one reservation;
 * HBM_ENOMEM when the device is full (what was seeded before stays). */
int hbm_ptref_seed(hbm_ptref *r, const hbm_trace *t, uint64_t *id_addr);
/* A segment release PyTorch recorded (cudaFree of a segment, or an unmap of
 * [addr, addr + size)), applied as hbm_pt_seg_released does: HBM_EINVAL when
 * no mapped block holds addr, HBM_EBUSY when that block is allocated, is not
 * the whole ordinary segment (addr, size), or holds no whole page of the
 * range. An expandable reservation left unmapped goes. */
int hbm_ptref_seg_released(hbm_ptref *r, uint64_t addr, uint64_t size);
/* The same statistics the model reports (hbm_pt_get_stats). */
void hbm_ptref_stats(const hbm_ptref *r, hbm_pt_stats *out);
/* Visits the mapped blocks in address order, as hbm_pt_scan does (tag
 * HBM_TAG_OTHER); stops when visit returns non-zero. */
int hbm_ptref_scan(const hbm_ptref *r, hbm_scan_fn *visit, void *arg);
/* Structural check: blocks tile their segments, mapped state matches the
 * pages, reserved equals a recount (allocated has no counter: every figure
 * of it is a recount), no two free neighbours of one mapped state. Returns
 * the number of failures, each reported. */
int hbm_ptref_check(const hbm_ptref *r, hbm_check_report_fn *report, void *arg);

#endif
