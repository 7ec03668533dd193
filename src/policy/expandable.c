/* expandable.c: policy `expandable`, PyTorch's caching allocator with
 * expandable_segments:True: one address reservation per (stream, pool),
 * pages of 2 MiB (small pool) or 20 MiB (large pool) mapped at the end of
 * the used range on demand and unmapped only when releasing cached memory.
 * The model is pytorch_alloc.c; conf may add any other PyTorch setting. */
#include "policy/pytorch_alloc.h"

static int expandable_create(hbm_device *dev, const char *conf, hbm_policy **out, hbm_diag *diag) {
  return hbm_pt_create(dev, conf, 1, out, diag);
}

const hbm_policy_class hbm_policy_expandable = {
    .name = "expandable",
    .summary = "PyTorch's caching allocator with expandable_segments:True (pages mapped on demand)",
    .create = expandable_create,
    .destroy = hbm_pt_destroy,
    .alloc = hbm_pt_alloc,
    .free = hbm_pt_free,
    .usage = hbm_pt_usage,
    .reserved = hbm_pt_reserved,
    .scan = hbm_pt_scan,
    .check = hbm_pt_check,
    .seed = hbm_pt_seed,
    .seg_released = hbm_pt_seg_released,
    .counters = hbm_pt_counters,
    .free_pieces = hbm_pt_free_pieces,
};
