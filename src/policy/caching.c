/* caching.c: policy `caching`, PyTorch's CUDA caching allocator as users run
 * it by default (expandable_segments:False). The model itself is shared with
 * `expandable` in pytorch_alloc.c, as PyTorch shares one allocator between
 * the two settings; conf is PYTORCH_CUDA_ALLOC_CONF syntax. */
#include "policy/pytorch_alloc.h"

static int caching_create(hbm_device *dev, const char *conf, hbm_policy **out, hbm_diag *diag) {
  return hbm_pt_create(dev, conf, 0, out, diag);
}

const hbm_policy_class hbm_policy_caching = {
    .name = "caching",
    .summary = "PyTorch's CUDA caching allocator (PYTORCH_CUDA_ALLOC_CONF syntax), modelled faithfully",
    .create = caching_create,
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
