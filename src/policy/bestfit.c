/* bestfit.c: one arena over the whole device, TLSF good fit (within 1/32 of
 * the best size class), immediate coalescing, no caching. The simplest
 * allocator that fragments exactly as a flat address space does.
 *
 * reserved is the arena's footprint: the end of the highest live block. A
 * device smaller than the footprint would have failed, so that is what the
 * layout costs. */
#include <stdlib.h>

#include "core/range.h"
#include "core/util.h"
#include "policy/policy.h"

enum { BESTFIT_UNIT = 512 }; /* PyTorch's kMinBlockSize: the same granularity */

typedef struct bestfit {
  hbm_policy base;
  hbm_range *arena;
  uint64_t seg_addr, seg_size;
} bestfit;

static int bestfit_create(hbm_device *dev, const char *conf, hbm_policy **out, hbm_diag *diag) {
  if (conf && *conf) {
    hbm_diag_set(diag, "alloc-conf", 0, 0, "takes no settings (got '%s')", conf);
    return HBM_EINVAL;
  }
  bestfit *b = calloc(1, sizeof *b);
  if (!b) return HBM_EHOSTMEM;
  b->base.dev = dev;
  b->seg_size = dev->caps.capacity;
  int rc = hbm_dev_seg_alloc(dev, b->seg_size, 0, &b->seg_addr);
  if (rc == HBM_OK) rc = hbm_range_create(b->seg_addr, b->seg_size, BESTFIT_UNIT, &b->arena);
  if (rc != HBM_OK) {
    if (b->seg_addr) hbm_dev_seg_free(dev, b->seg_addr, b->seg_size);
    free(b);
    return rc;
  }
  *out = &b->base;
  return HBM_OK;
}

static void bestfit_destroy(hbm_policy *p) {
  bestfit *b = (bestfit *)p;
  hbm_range_destroy(b->arena);
  hbm_dev_seg_free(p->dev, b->seg_addr, b->seg_size);
  free(b);
}

static int bestfit_alloc(hbm_policy *p, uint64_t size, hbm_tag tag, int stream, uint64_t *addr,
                         uint64_t *block_size) {
  return hbm_range_alloc(((bestfit *)p)->arena, size, 0, addr, block_size);
}

static int bestfit_free(hbm_policy *p, uint64_t addr, uint64_t *block_size) {
  return hbm_range_free(((bestfit *)p)->arena, addr, block_size);
}

static void bestfit_usage(hbm_policy *p, hbm_policy_usage *u) {
  bestfit *b = (bestfit *)p;
  u->reserved = hbm_range_top(b->arena) - b->seg_addr;
  u->largest_free = hbm_range_largest_free(b->arena);
  u->limit = UINT64_MAX;
}

typedef struct scan_ctx { hbm_scan_fn *visit; void *arg; } scan_ctx;
static int scan_one(void *arg, uint64_t addr, uint64_t size, int live) {
  scan_ctx *c = arg;
  return c->visit(c->arg, addr, size, live, HBM_TAG_OTHER);
}
static int bestfit_scan(hbm_policy *p, hbm_scan_fn *visit, void *arg) {
  scan_ctx c = {visit, arg};
  return hbm_range_walk(((bestfit *)p)->arena, scan_one, &c);
}

static int bestfit_check(hbm_policy *p, hbm_check_report_fn *report, void *arg) {
  return hbm_range_check(((bestfit *)p)->arena, report, arg);
}


const hbm_policy_class hbm_policy_bestfit = {
    .name = "bestfit",
    .summary = "one arena, best fit (TLSF classes), immediate coalescing, no caching",
    .create = bestfit_create,
    .destroy = bestfit_destroy,
    .alloc = bestfit_alloc,
    .free = bestfit_free,
    .usage = bestfit_usage,
    .scan = bestfit_scan,
    .check = bestfit_check,
};
