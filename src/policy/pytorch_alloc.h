/* pytorch_alloc.h: the model of PyTorch's CUDA caching allocator behind the
 * `caching` and `expandable` policies (docs/caching-model.md).
 *
 * One engine, as in PyTorch: DeviceCachingAllocator with
 * expandable_segments off (policy `caching`) or on (policy `expandable`).
 * Configuration uses PyTorch's own PYTORCH_CUDA_ALLOC_CONF syntax, parsed
 * the way c10's AllocatorConfig::parseArgs parses it.
 */
#ifndef HBM_PYTORCH_ALLOC_H
#define HBM_PYTORCH_ALLOC_H

#include "policy/policy.h"

/* PyTorch's constants (c10/cuda/CUDACachingAllocator.cpp). */
#define HBM_PT_MIN_BLOCK (512ull)              /* kMinBlockSize */
#define HBM_PT_SMALL_SIZE (1ull << 20)         /* kSmallSize: largest small request */
#define HBM_PT_SMALL_BUFFER (2ull << 20)       /* kSmallBuffer: small segment / page */
#define HBM_PT_LARGE_BUFFER (20ull << 20)      /* kLargeBuffer: 1-10 MiB segment / large page */
#define HBM_PT_MIN_LARGE_ALLOC (10ull << 20)   /* kMinLargeAlloc */
#define HBM_PT_ROUND_LARGE (2ull << 20)        /* kRoundLarge */
#define HBM_PT_ROUNDUP_INTERVALS 16            /* kRoundUpPowerOfTwoIntervals: 1 MiB .. 64 GiB */

/* ---- configuration ---- */
typedef struct hbm_pt_conf {
  uint64_t max_split_size;          /* UINT64_MAX: unlimited (PyTorch's default) */
  uint64_t max_non_split_rounding;  /* default kLargeBuffer */
  double gc_threshold;              /* garbage_collection_threshold; 0 = off */
  uint32_t roundup_divisions[HBM_PT_ROUNDUP_INTERVALS]; /* per power-of-two interval from 1 MiB */
  int expandable;                   /* expandable_segments */
  int set_fraction;                 /* per_process_memory_fraction below 1.0 was given */
  double memory_fraction;           /* of the device capacity; 1.0 by default */
} hbm_pt_conf;

/* PyTorch's defaults, with expandable_segments as given. */
void hbm_pt_conf_default(hbm_pt_conf *conf, int expandable);
/* Parses `text` (NULL or "" keep *conf) on top of *conf. Errors: HBM_EINVAL
 * with PyTorch's message in diag->message (diag->offset = byte in text);
 * *conf is then unchanged. Accepted keys: every key PyTorch 2.9 accepts;
 * those without an effect on placement (pinned memory, locking) are checked
 * and ignored. backend:cudaMallocAsync is refused: it is not this allocator. */
int hbm_pt_conf_parse(const char *text, hbm_pt_conf *conf, hbm_diag *diag);
/* The policy that models the allocator `text` (a recording's settings) names:
 * "expandable" with expandable_segments:True, else "caching". Errors as
 * hbm_pt_conf_parse's. */
int hbm_pt_conf_policy(const char *text, const char **policy, hbm_diag *diag);

/* round_size: request -> block size before slack (512-multiple or power-of-two division). */
uint64_t hbm_pt_round_size(const hbm_pt_conf *conf, uint64_t size);
/* get_allocation_size: rounded size -> new segment size. */
uint64_t hbm_pt_allocation_size(uint64_t rounded);

/* ---- the policy classes (caching.c, expandable.c) ---- */
extern const hbm_policy_class hbm_policy_caching;
extern const hbm_policy_class hbm_policy_expandable;

/* 1 if p is one of the two PyTorch policies. */
int hbm_pt_is_pytorch(const hbm_policy *p);

/* Shared implementations the two classes list. */
int hbm_pt_create(hbm_device *dev, const char *conf, int expandable_default, hbm_policy **out,
                  hbm_diag *diag);
void hbm_pt_destroy(hbm_policy *p);
int hbm_pt_alloc(hbm_policy *p, uint64_t size, hbm_tag tag, int stream, uint64_t *addr,
                 uint64_t *block_size);
int hbm_pt_free(hbm_policy *p, uint64_t addr, uint64_t *block_size);
void hbm_pt_usage(hbm_policy *p, hbm_policy_usage *out);
uint64_t hbm_pt_reserved(hbm_policy *p);
int hbm_pt_scan(hbm_policy *p, hbm_scan_fn *visit, void *arg);
int hbm_pt_check(hbm_policy *p, hbm_check_report_fn *report, void *arg);
int hbm_pt_seed(hbm_policy *p, const hbm_trace *t, uint64_t *id_addr, uint64_t *id_block);
int hbm_pt_seg_released(hbm_policy *p, uint64_t addr, uint64_t size);
int hbm_pt_counters(hbm_policy *p, hbm_counter *out, int max);
/* The class's free_pieces: each cached mapped block a piece, but blocks
 * followed by unmapped pages of their segment (expandable's tails) one piece
 * with the room. */
uint64_t hbm_pt_free_pieces(hbm_policy *p, int room);

/* ---- observing the model (fidelity) ----
 * What PyTorch records as trace actions, reported as the model does them,
 * and a way to give new device memory the address the recording shows. */
typedef enum hbm_pt_action {
  HBM_PT_SEGMENT_ALLOC = 0, /* cudaMalloc of a segment */
  HBM_PT_SEGMENT_FREE,      /* cudaFree of a segment */
  HBM_PT_SEGMENT_MAP,       /* expandable: pages mapped */
  HBM_PT_SEGMENT_UNMAP,     /* expandable: pages unmapped */
} hbm_pt_action;

typedef struct hbm_pt_hooks {
  /* Asked before a new segment (reservation = 0) or a new expandable address
   * reservation (reservation = 1) of `size` bytes. `proposed` is the address
   * the model wants (the recorded one while seeding a starting state), else 0.
   * For a segment, the return value is the hint passed to seg_alloc (0: the
   * device's choice). The device contract has no reservation hint, so for a
   * reservation the return value is ignored: a device that honours one (the
   * fidelity device) learns it here. May be NULL. */
  uint64_t (*hint)(void *arg, int reservation, uint64_t size, int stream, int small,
                   uint64_t proposed);
  /* Every segment action, with PyTorch's (addr, size). May be NULL. */
  void (*action)(void *arg, hbm_pt_action action, uint64_t addr, uint64_t size, int stream,
                 int small);
  void *arg;
} hbm_pt_hooks;
/* HBM_EINVAL if p is not a PyTorch policy. hooks NULL removes them. */
int hbm_pt_set_hooks(hbm_policy *p, const hbm_pt_hooks *hooks);

/* PyTorch's own statistics (DeviceStats), for tests and reports. */
typedef struct hbm_pt_stats {
  uint64_t reserved;          /* total_allocated_memory: segments + mapped pages */
  uint64_t allocated;         /* bytes in allocated blocks */
  uint64_t segments;          /* non-expandable segments + expandable reservations */
  uint64_t free_blocks;       /* cached (inactive, mapped) blocks */
  uint64_t num_alloc_retries; /* release_cached_blocks + retry happened */
  uint64_t num_ooms;
  uint64_t num_device_alloc;  /* cudaMalloc + map calls */
  uint64_t num_device_free;   /* cudaFree + unmap calls */
  uint64_t num_gc_releases;   /* segments freed by garbage_collect_cached_blocks */
} hbm_pt_stats;
int hbm_pt_get_stats(hbm_policy *p, hbm_pt_stats *out);
/* The effective configuration. */
int hbm_pt_get_conf(hbm_policy *p, hbm_pt_conf *out);

#endif
