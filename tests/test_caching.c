/* test_caching.c: the PyTorch caching-allocator model, rule by rule: rounding
 * (with roundup_power2_divisions), configuration errors, pools and segment
 * sizes, split rules, best fit per stream, merging, max_split_size,
 * garbage_collection_threshold, release-and-retry, expandable segments,
 * seeding a recorded state and recorded releases, largest_free; then a
 * seedable randomized run of both policies with the invariant check after
 * every operation. */
#include "device/device.h"
#include "hbm.h"
#include "policy/policy.h"
#include "policy/pytorch_alloc.h"
#include "policy/pytorch_ref.h"
#include "replay/seg_hints.h"
#include "testutil.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)

typedef struct action_log {
  int n[4];
  uint64_t last_addr[4], last_size[4];
} action_log;

typedef struct env {
  hbm_device *dev;
  hbm_policy *p;
  const hbm_policy_class *cls;
  action_log log;
} env;

static void on_action(void *arg, hbm_pt_action a, uint64_t addr, uint64_t size, int stream, int small) {
  action_log *l = arg;
  l->n[a]++;
  l->last_addr[a] = addr;
  l->last_size[a] = size;
}

static void report(void *arg, const char *message) { fprintf(stderr, "check: %s\n", message); }

static void open_env(env *e, const char *policy, const char *conf, uint64_t capacity) {
  memset(e, 0, sizeof *e);
  CHECK(hbm_sim_open(capacity, 2 * MiB, &e->dev) == HBM_OK);
  e->cls = !strcmp(policy, "caching") ? &hbm_policy_caching : &hbm_policy_expandable;
  hbm_diag d = {0};
  int rc = e->cls->create(e->dev, conf, &e->p, &d);
  if (rc != HBM_OK) fprintf(stderr, "create %s '%s': %s\n", policy, conf ? conf : "", d.message);
  CHECK(rc == HBM_OK);
  hbm_pt_hooks h = {NULL, on_action, &e->log};
  CHECK(hbm_pt_set_hooks(e->p, &h) == HBM_OK);
}

static void close_env(env *e) {
  CHECK(e->cls->check(e->p, report, NULL) == 0);
  e->cls->destroy(e->p);
  CHECK_EQ_U64(e->dev->phys_used, 0); /* destroy gives every byte back */
  hbm_device_close(e->dev);
}

static uint64_t alloc_bs(env *e, uint64_t size, int stream, uint64_t *block) {
  uint64_t addr = 0, bs = 0;
  int rc = e->cls->alloc(e->p, size, HBM_TAG_OTHER, stream, &addr, &bs);
  if (rc != HBM_OK) fprintf(stderr, "alloc %llu on stream %d: %s\n", (unsigned long long)size, stream, hbm_strerror(rc));
  CHECK(rc == HBM_OK);
  CHECK(e->cls->check(e->p, report, NULL) == 0);
  if (block) *block = bs;
  return addr;
}
static uint64_t A(env *e, uint64_t size) { return alloc_bs(e, size, 0, NULL); }

static void F(env *e, uint64_t addr) {
  uint64_t bs;
  CHECK(e->cls->free(e->p, addr, &bs) == HBM_OK);
  CHECK(e->cls->check(e->p, report, NULL) == 0);
}

static hbm_pt_stats stats(env *e) {
  hbm_pt_stats s;
  CHECK(hbm_pt_get_stats(e->p, &s) == HBM_OK);
  return s;
}

/* ---- rounding and segment sizes ---- */

static void test_rounding(void) {
  hbm_pt_conf c;
  hbm_pt_conf_default(&c, 0);
  CHECK_EQ_U64(hbm_pt_round_size(&c, 1), 512);
  CHECK_EQ_U64(hbm_pt_round_size(&c, 512), 512);
  CHECK_EQ_U64(hbm_pt_round_size(&c, 513), 1024);
  CHECK_EQ_U64(hbm_pt_round_size(&c, MiB), MiB);
  CHECK_EQ_U64(hbm_pt_round_size(&c, MiB + 1), MiB + 512);

  CHECK(hbm_pt_conf_parse("roundup_power2_divisions:4", &c, NULL) == HBM_OK);
  CHECK_EQ_U64(hbm_pt_round_size(&c, 1200), 1536);       /* <= 512 x 4: plain 512 rounding */
  CHECK_EQ_U64(hbm_pt_round_size(&c, 5000), 5120);       /* 4096 + one quarter of 4096 */
  CHECK_EQ_U64(hbm_pt_round_size(&c, 4096), 4096);       /* a power of two stays */
  CHECK_EQ_U64(hbm_pt_round_size(&c, MiB + 1), MiB + 256 * KiB);
  CHECK_EQ_U64(hbm_pt_round_size(&c, 64 * GiB + 1), 80 * GiB); /* 64 GiB and up: the last interval's */

  hbm_pt_conf_default(&c, 0);
  CHECK(hbm_pt_conf_parse("roundup_power2_divisions:[256:8,>:2]", &c, NULL) == HBM_OK);
  CHECK_EQ_U64(c.roundup_divisions[0], 8);
  CHECK_EQ_U64(c.roundup_divisions[7], 8);
  CHECK_EQ_U64(c.roundup_divisions[8], 2); /* '>' fills from the last interval named, itself included */
  CHECK_EQ_U64(c.roundup_divisions[9], 2);
  CHECK_EQ_U64(hbm_pt_round_size(&c, 3 * MiB + 1), 3 * MiB + 256 * KiB);
  CHECK_EQ_U64(hbm_pt_round_size(&c, 300 * MiB + 1), 384 * MiB);

  CHECK_EQ_U64(hbm_pt_allocation_size(512), 2 * MiB);
  CHECK_EQ_U64(hbm_pt_allocation_size(MiB), 2 * MiB);
  CHECK_EQ_U64(hbm_pt_allocation_size(MiB + 512), 20 * MiB);
  CHECK_EQ_U64(hbm_pt_allocation_size(10 * MiB - 512), 20 * MiB);
  CHECK_EQ_U64(hbm_pt_allocation_size(10 * MiB), 10 * MiB);
  CHECK_EQ_U64(hbm_pt_allocation_size(11 * MiB), 12 * MiB);
}

static void expect_conf_error(const char *text, const char *needle, uint64_t offset) {
  hbm_pt_conf c, before;
  hbm_pt_conf_default(&c, 0);
  before = c;
  hbm_diag d = {0};
  CHECK(hbm_pt_conf_parse(text, &c, &d) == HBM_EINVAL);
  if (!strstr(d.message, needle)) fprintf(stderr, "conf '%s': message '%s' lacks '%s'\n", text, d.message, needle);
  CHECK(strstr(d.message, needle) != NULL);
  if (offset != UINT64_MAX) CHECK_EQ_U64(d.offset, offset);
  CHECK(!memcmp(&c, &before, sizeof c)); /* unchanged on error */
}

static void test_conf(void) {
  expect_conf_error("foo:1", "Unrecognized CachingAllocator option: foo", 0);
  expect_conf_error("max_split_size_mb:10", "too small", 18);
  expect_conf_error("max_split_size_mb", "expected :", UINT64_MAX);
  expect_conf_error("max_split_size_mb:abc", "integer", 18);
  expect_conf_error("garbage_collection_threshold:1.5", "(0.0, 1.0)", UINT64_MAX);
  expect_conf_error("garbage_collection_threshold:1.0", "(0.0, 1.0)", UINT64_MAX); /* an open interval */
  expect_conf_error("garbage_collection_threshold:0", "(0.0, 1.0)", UINT64_MAX);
  expect_conf_error("roundup_power2_divisions:3", "power of 2", UINT64_MAX);
  expect_conf_error("roundup_power2_divisions:[64:3]", "power of 2", UINT64_MAX);
  expect_conf_error("roundup_power2_divisions:[64:4", "]", UINT64_MAX);
  expect_conf_error("expandable_segments:yes", "True/False", UINT64_MAX);
  expect_conf_error("backend:cudaMallocAsync", "cudaMallocAsync", UINT64_MAX);
  expect_conf_error("expandable_segments:True;max_split_size_mb:40", "True/False", UINT64_MAX);
  expect_conf_error("per_process_memory_fraction:2", "[0.0, 1.0]", UINT64_MAX);
  expect_conf_error("pinned_reserve_segment_size_mb:0", "greater than 0", 31);
  /* A setting's words hold up to 63 bytes: 63 is read (and unknown), 64 is too long. */
  char longest[80];
  snprintf(longest, sizeof longest, "%063d:1", 0);
  expect_conf_error(longest, "Unrecognized CachingAllocator option", 0);
  snprintf(longest, sizeof longest, "%064d:1", 0);
  expect_conf_error(longest, "too long", 0);

  hbm_pt_conf c;
  hbm_pt_conf_default(&c, 0);
  CHECK(hbm_pt_conf_parse("max_split_size_mb:128, garbage_collection_threshold:0.6,expandable_segments:True,"
                          "roundup_power2_divisions:[64:8,>:4],release_lock_on_cudamalloc:True,"
                          "pinned_use_cuda_host_register:False,pinned_num_register_threads:8,"
                          "max_non_split_rounding_mb:30,per_process_memory_fraction:0.9,backend:native",
                          &c, NULL) == HBM_OK);
  CHECK_EQ_U64(c.max_split_size, 128 * MiB);
  CHECK_EQ_U64(c.max_non_split_rounding, 30 * MiB);
  CHECK(c.gc_threshold == 0.6 && c.expandable && c.set_fraction && c.memory_fraction == 0.9);
  CHECK_EQ_U64(c.roundup_divisions[5], 8);
  CHECK_EQ_U64(c.roundup_divisions[6], 4);
  CHECK_EQ_U64(c.roundup_divisions[7], 4);
  CHECK(hbm_pt_conf_parse("", &c, NULL) == HBM_OK && c.expandable); /* empty: unchanged */
  /* The edges of the closed [0.0, 1.0]: 0 caps at nothing, 1.0 sets no cap. */
  hbm_pt_conf_default(&c, 0);
  CHECK(hbm_pt_conf_parse("per_process_memory_fraction:0", &c, NULL) == HBM_OK);
  CHECK(c.set_fraction && c.memory_fraction == 0.0);
  CHECK(hbm_pt_conf_parse("per_process_memory_fraction:1.0", &c, NULL) == HBM_OK && !c.set_fraction);
  /* An interval of 64 GiB or more is the last one, as PyTorch clamps it. */
  hbm_pt_conf_default(&c, 0);
  CHECK(hbm_pt_conf_parse("roundup_power2_divisions:[65536:4]", &c, NULL) == HBM_OK);
  CHECK_EQ_U64(c.roundup_divisions[HBM_PT_ROUNDUP_INTERVALS - 1], 4);
  CHECK(!c.expandable);

  /* The policy refuses a bad conf with the message, and caching accepts
   * expandable_segments:True (the same allocator, as in PyTorch). */
  hbm_device *dev;
  CHECK(hbm_sim_open(GiB, 2 * MiB, &dev) == HBM_OK);
  hbm_policy *p = NULL;
  hbm_diag d = {0};
  CHECK(hbm_policy_caching.create(dev, "max_split_size_mb:1", &p, &d) == HBM_EINVAL);
  CHECK(strstr(d.message, "max_split_size_mb too small") != NULL);
  CHECK(hbm_policy_find("caching") == &hbm_policy_caching);
  CHECK(hbm_policy_find("expandable") == &hbm_policy_expandable);
  CHECK(hbm_policy_expandable.create(dev, NULL, &p, &d) == HBM_OK);
  hbm_pt_get_conf(p, &c);
  CHECK(c.expandable == 1);
  hbm_policy_expandable.destroy(p);
  hbm_device_close(dev);

  /* Pages larger than PyTorch's 2 MiB: each segment would hold memory the
   * model does not count. Refused, saying why; pages of 2 MiB or less are
   * taken. */
  CHECK(hbm_sim_open(GiB, 4 * MiB, &dev) == HBM_OK);
  CHECK(hbm_policy_caching.create(dev, NULL, &p, &d) == HBM_EUNSUPPORTED);
  CHECK(strstr(d.message, "sizes segments in 2 MiB, and this device's pages are larger") != NULL);
  CHECK(hbm_policy_expandable.create(dev, NULL, &p, &d) == HBM_EUNSUPPORTED);
  hbm_device_close(dev);
  for (uint64_t g = 4096; g <= 2 * MiB; g *= 8) {
    CHECK(hbm_sim_open(GiB, g, &dev) == HBM_OK);
    CHECK(hbm_policy_caching.create(dev, NULL, &p, &d) == HBM_OK);
    hbm_policy_caching.destroy(p);
    hbm_device_close(dev);
  }
}

/* ---- pools, segments, split rules ---- */

static void test_pools_and_splits(void) {
  env e;
  open_env(&e, "caching", NULL, GiB);
  uint64_t bs;
  uint64_t a1 = alloc_bs(&e, 1000, 0, &bs);
  CHECK_EQ_U64(bs, 1024);
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_ALLOC], 1);
  CHECK_EQ_U64(e.log.last_size[HBM_PT_SEGMENT_ALLOC], 2 * MiB); /* small pool: 2 MiB */
  uint64_t a2 = A(&e, 1000);
  CHECK_EQ_U64(a2, a1 + 1024); /* the remainder of the split, low end first */
  uint64_t b1 = A(&e, 1536 * KiB);
  CHECK_EQ_U64(e.log.last_size[HBM_PT_SEGMENT_ALLOC], 20 * MiB); /* 1-10 MiB: 20 MiB */
  uint64_t b2 = A(&e, 1536 * KiB);
  CHECK_EQ_U64(b2, b1 + 1536 * KiB);
  A(&e, 12 * MiB + 1); /* best fit: the 17 MiB remainder of b's segment */
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_ALLOC], 2);
  A(&e, 24 * MiB + 1);
  CHECK_EQ_U64(e.log.last_size[HBM_PT_SEGMENT_ALLOC], 26 * MiB); /* >= 10 MiB: rounded to 2 MiB */
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_ALLOC], 3);
  /* A freed small segment does not serve a large request. */
  F(&e, a1);
  F(&e, a2);
  uint64_t c = A(&e, 1200 * KiB); /* from the large pool: b's segment's remainder */
  CHECK(c < a1 || c >= a1 + 2 * MiB);
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_ALLOC], 3);
  close_env(&e);

  open_env(&e, "caching", NULL, GiB);
  /* Large: the remainder splits off only when it is more than 1 MiB. */
  alloc_bs(&e, 19 * MiB + 512 * KiB, 0, &bs);
  CHECK_EQ_U64(bs, 20 * MiB); /* 0.5 MiB left: unsplit slack */
  alloc_bs(&e, 19 * MiB, 0, &bs);
  CHECK_EQ_U64(bs, 20 * MiB); /* exactly 1 MiB left: still slack */
  uint64_t x = alloc_bs(&e, 18 * MiB + 1, 0, &bs);
  CHECK_EQ_U64(bs, 18 * MiB + 512); /* 2 MiB - 512 left: split */
  uint64_t y = A(&e, 1536 * KiB);
  CHECK_EQ_U64(y, x + 18 * MiB + 512); /* into the remainder, not a new segment */
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_ALLOC], 3);
  /* Small: any remainder of 512 bytes or more splits; a request that fills the rest is exact. */
  uint64_t s1 = A(&e, MiB), s2 = A(&e, MiB - 512), s3 = alloc_bs(&e, 512, 0, &bs);
  CHECK_EQ_U64(s2, s1 + MiB);
  CHECK_EQ_U64(s3, s2 + MiB - 512);
  CHECK_EQ_U64(bs, 512);
  close_env(&e);
}

static void test_best_fit_and_merge(void) {
  env e;
  open_env(&e, "caching", NULL, GiB);
  uint64_t x = A(&e, 12 * MiB), y = A(&e, 14 * MiB), z = A(&e, 12 * MiB);
  F(&e, x);
  F(&e, y);
  F(&e, z);
  uint64_t bs;
  /* Equal sizes: the lowest address first (sim hands out increasing addresses). */
  uint64_t lo = x < z ? x : z, hi = x < z ? z : x;
  CHECK_EQ_U64(A(&e, 12 * MiB), lo);
  CHECK_EQ_U64(A(&e, 12 * MiB), hi);
  /* The smallest block that fits: 14 MiB for 13 MiB, with 1 MiB of slack. */
  CHECK_EQ_U64(alloc_bs(&e, 13 * MiB, 0, &bs), y);
  CHECK_EQ_U64(bs, 14 * MiB);
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_ALLOC], 3);
  close_env(&e);

  open_env(&e, "caching", NULL, GiB);
  uint64_t p = A(&e, 4 * MiB), q = A(&e, 4 * MiB), r = A(&e, 4 * MiB);
  CHECK_EQ_U64(q, p + 4 * MiB);
  CHECK_EQ_U64(r, q + 4 * MiB);
  F(&e, q);
  CHECK_EQ_U64(stats(&e).free_blocks, 2); /* q alone, and the 8 MiB tail */
  F(&e, p);
  CHECK_EQ_U64(stats(&e).free_blocks, 2); /* p merged with q */
  F(&e, r);
  CHECK_EQ_U64(stats(&e).free_blocks, 1); /* the whole segment again */
  CHECK_EQ_U64(alloc_bs(&e, 19 * MiB + 512 * KiB, 0, &bs), p);
  CHECK_EQ_U64(bs, 20 * MiB);
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_ALLOC], 1);
  close_env(&e);
}

static void test_streams(void) {
  env e;
  open_env(&e, "caching", NULL, GiB);
  uint64_t a = alloc_bs(&e, 4 * MiB, 0, NULL);
  F(&e, a);
  uint64_t b = alloc_bs(&e, 4 * MiB, 7, NULL); /* another stream never takes stream 0's block */
  CHECK(b != a);
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_ALLOC], 2);
  CHECK_EQ_U64(alloc_bs(&e, 4 * MiB, 0, NULL), a);
  F(&e, b);
  CHECK_EQ_U64(alloc_bs(&e, 2 * MiB, 7, NULL), b); /* its own stream's block */
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_ALLOC], 2);
  close_env(&e);

  /* Releasing walks a pool in PyTorch's order, (stream, size, address): the
   * lower stream's segments go first, whatever stream was used first (found
   * by the differential test against the reference: the model used to walk
   * the streams in first-use order). */
  open_env(&e, "caching", NULL, 64 * MiB);
  uint64_t s5 = alloc_bs(&e, 20 * MiB, 5, NULL), s3 = alloc_bs(&e, 20 * MiB, 3, NULL);
  F(&e, s5);
  F(&e, s3);
  uint64_t addr = 0, bs = 0;
  CHECK(e.cls->alloc(e.p, 50 * MiB, HBM_TAG_OTHER, 0, &addr, &bs) == HBM_OK); /* after releasing both */
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_FREE], 2);
  CHECK_EQ_U64(e.log.last_addr[HBM_PT_SEGMENT_FREE], s5); /* stream 3's went first */
  close_env(&e);
}

/* ---- max_split_size, GC, release and retry ---- */

static void test_max_split(void) {
  env e;
  open_env(&e, "caching", "max_split_size_mb:40", 4 * GiB);
  uint64_t bs;
  uint64_t big = alloc_bs(&e, 60 * MiB, 0, &bs);
  CHECK_EQ_U64(bs, 60 * MiB);
  F(&e, big);
  /* Below max_split_size: never an oversize block; a new segment instead. */
  uint64_t small = A(&e, 30 * MiB);
  CHECK(small != big);
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_ALLOC], 2);
  /* At or above it: an oversize block within 20 MiB, taken whole, never split. */
  CHECK_EQ_U64(alloc_bs(&e, 50 * MiB, 0, &bs), big);
  CHECK_EQ_U64(bs, 60 * MiB);
  F(&e, big);
  CHECK_EQ_U64(alloc_bs(&e, 41 * MiB, 0, &bs), big); /* 60 < 41 + 20 */
  F(&e, big);
  uint64_t other = A(&e, 40 * MiB); /* 60 >= 40 + 20: not this block */
  CHECK(other != big);
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_ALLOC], 3);
  close_env(&e);

  open_env(&e, "caching", "max_split_size_mb:40,max_non_split_rounding_mb:30", 4 * GiB);
  big = A(&e, 60 * MiB);
  F(&e, big);
  CHECK_EQ_U64(A(&e, 40 * MiB), big); /* 60 < 40 + 30 */
  close_env(&e);

  /* release_available_cached_blocks: the smallest oversize block that covers the request. */
  open_env(&e, "caching", "max_split_size_mb:40", 200 * MiB);
  uint64_t a60 = A(&e, 60 * MiB), a120 = A(&e, 120 * MiB);
  F(&e, a60);
  F(&e, a120);
  uint64_t got = A(&e, 100 * MiB); /* 120 >= 100 + 20: not reused; 180 + 100 > 200: release 120 */
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_FREE], 1);
  CHECK_EQ_U64(e.log.last_size[HBM_PT_SEGMENT_FREE], 120 * MiB);
  CHECK_EQ_U64(stats(&e).num_alloc_retries, 0); /* this path is not a retry */
  CHECK_EQ_U64(stats(&e).reserved, 160 * MiB);
  F(&e, got);
  close_env(&e);

  /* ... else the largest first until enough is released. */
  open_env(&e, "caching", "max_split_size_mb:40", 200 * MiB);
  a60 = A(&e, 60 * MiB);
  uint64_t a70 = A(&e, 70 * MiB);
  F(&e, a60);
  F(&e, a70);
  got = A(&e, 100 * MiB);
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_FREE], 2);
  CHECK_EQ_U64(stats(&e).reserved, 100 * MiB);
  close_env(&e);

  /* ... and it stops as soon as the released total reaches the request
   * ("totalReleased < key.size"): 100 + 100 of 200, the 80 kept. */
  open_env(&e, "caching", "max_split_size_mb:40", 300 * MiB);
  uint64_t b1 = A(&e, 100 * MiB), b2 = A(&e, 100 * MiB), b3 = A(&e, 80 * MiB);
  F(&e, b1);
  F(&e, b2);
  F(&e, b3);
  got = A(&e, 200 * MiB);
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_FREE], 2);
  CHECK_EQ_U64(stats(&e).reserved, 280 * MiB);
  F(&e, got);
  close_env(&e);
}

/* release_available_cached_blocks never releases an expandable block (PyTorch:
 * "if (!(*cur)->expandable_segment_) release_block(...)", and a lower_bound
 * that lands on one takes the multi-block path): with expandable segments
 * the OOM path goes on to release_cached_blocks, which unmaps every free page
 * of both pools and counts a retry. */
static void test_release_available_expandable(void) {
  env e;
  open_env(&e, "expandable", "max_split_size_mb:40", 100 * MiB);
  uint64_t s = A(&e, 1000); /* one 2 MiB small page */
  F(&e, s);
  uint64_t a = A(&e, 60 * MiB); /* 3 large pages */
  A(&e, 20 * MiB);              /* 1 more: 82 MiB of 100 mapped */
  F(&e, a);                     /* 60 MiB free, oversize (>= 40) */
  const int unmaps = e.log.n[HBM_PT_SEGMENT_UNMAP];
  uint64_t c = A(&e, 30 * MiB); /* below max_split: not the oversize block; 2 pages do not fit */
  CHECK_EQ_U64(c, a);           /* the unmapped hole at the bottom is the lowest room */
  hbm_pt_stats st = stats(&e);
  CHECK_EQ_U64(st.num_alloc_retries, 1);                      /* release_cached_blocks ran */
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_UNMAP] - unmaps, 2);    /* the large hole and the small page */
  CHECK_EQ_U64(st.reserved, 60 * MiB);                        /* 2 pages for c + 1 for the 20 MiB */
  close_env(&e);
}

/* A recording's segment address (seg_hints.h) goes to the request CUDA
 * placed: where the model's first try fails (the device full of cached
 * segments) and it retries after freeing them, the retry gets the address,
 * not the device's choice. */
static void test_hint_after_retry(void) {
  env e;
  open_env(&e, "caching", NULL, 60 * MiB);
  hbm_seg_hints h = {.dev = e.dev, .clear_only = 1};
  hbm_pt_hooks hooks = {hbm_seg_hints_take, NULL, &h};
  CHECK(hbm_pt_set_hooks(e.p, &hooks) == HBM_OK);
  const uint64_t X = 0x7f0000000000ull;
  uint64_t got[3];
  static const uint64_t size[3] = {20 * MiB, 20 * MiB, 40 * MiB}, at[3] = {0, 20 * MiB, 128 * MiB};
  for (int i = 0; i < 3; i++) {
    if (i == 2) {
      F(&e, got[0]);
      F(&e, got[1]);
    }
    CHECK(hbm_seg_hints_add(&h, X + at[i], size[i]) == HBM_OK);
    got[i] = A(&e, size[i]); /* the third: 40 MiB cached + 40 > 60, so it fails, frees, retries */
    hbm_seg_hints_clear(&h);
    CHECK_EQ_U64(got[i], X + at[i]);
  }
  CHECK_EQ_U64(stats(&e).num_alloc_retries, 1);
  hbm_seg_hints_release(&h);
  close_env(&e);
  /* A new expandable reservation takes the first recorded mapping's address:
   * PyTorch maps a fresh reservation from its start. */
  open_env(&e, "expandable", NULL, GiB);
  h = (hbm_seg_hints){.dev = e.dev, .clear_only = 1};
  CHECK(hbm_pt_set_hooks(e.p, &hooks) == HBM_OK);
  CHECK(hbm_seg_hints_add(&h, X + 64 * MiB, 20 * MiB) == HBM_OK);
  CHECK(hbm_seg_hints_add(&h, X + 84 * MiB, 20 * MiB) == HBM_OK);
  CHECK_EQ_U64(A(&e, 40 * MiB), X + 64 * MiB);
  hbm_seg_hints_clear(&h);
  /* A replay's layout may depart from the recording: a recorded address that
   * now lies inside a live reservation (here the small pool's first mapping
   * inside the large pool's range) is not taken; the device picks. */
  CHECK(hbm_seg_hints_add(&h, X + 128 * MiB, 2 * MiB) == HBM_OK);
  uint64_t small = A(&e, 1000);
  CHECK(small != X + 128 * MiB);
  hbm_seg_hints_release(&h);
  close_env(&e);
}

static void test_release_and_retry(void) {
  env e;
  open_env(&e, "caching", NULL, 64 * MiB);
  uint64_t x = A(&e, 40 * MiB);
  F(&e, x);
  A(&e, 50 * MiB); /* 40 + 50 > 64: release the cached segment, retry */
  hbm_pt_stats s = stats(&e);
  CHECK_EQ_U64(s.num_alloc_retries, 1);
  CHECK_EQ_U64(s.reserved, 50 * MiB);
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_FREE], 1);
  CHECK_EQ_U64(s.num_ooms, 0);
  uint64_t addr, bs;
  CHECK(e.cls->alloc(e.p, 30 * MiB, HBM_TAG_OTHER, 0, &addr, &bs) == HBM_ENOMEM);
  s = stats(&e);
  CHECK_EQ_U64(s.num_ooms, 1);
  CHECK_EQ_U64(s.num_alloc_retries, 2);
  CHECK(e.cls->check(e.p, report, NULL) == 0);
  close_env(&e);

  /* A segment split by a live block is not released. */
  open_env(&e, "caching", NULL, 64 * MiB);
  uint64_t keep = A(&e, 4 * MiB), gone = A(&e, 4 * MiB);
  F(&e, gone);
  CHECK(e.cls->alloc(e.p, 50 * MiB, HBM_TAG_OTHER, 0, &addr, &bs) == HBM_ENOMEM);
  CHECK_EQ_U64(stats(&e).reserved, 20 * MiB);
  F(&e, keep);
  close_env(&e);
}

static void test_gc(void) {
  /* garbage_collection_threshold acts only with a memory fraction, as in PyTorch. */
  for (int with_fraction = 0; with_fraction < 2; with_fraction++) {
    env e;
    open_env(&e, "caching",
             with_fraction ? "garbage_collection_threshold:0.5,per_process_memory_fraction:0.999"
                           : "garbage_collection_threshold:0.5",
             100 * MiB);
    uint64_t x1 = A(&e, 20 * MiB), x2 = A(&e, 20 * MiB);
    A(&e, 20 * MiB);
    F(&e, x1);
    F(&e, x2);
    A(&e, 30 * MiB); /* no cached fit; reserved 60 > 50: GC releases the aged blocks */
    hbm_pt_stats s = stats(&e);
    if (with_fraction) {
      CHECK_EQ_U64(s.num_gc_releases, 2);
      CHECK_EQ_U64(s.reserved, 50 * MiB);
    } else {
      CHECK_EQ_U64(s.num_gc_releases, 0);
      CHECK_EQ_U64(s.reserved, 90 * MiB);
    }
    close_env(&e);
  }
  /* per_process_memory_fraction:1.0 is no fraction at all: PyTorch's
   * setMemoryFraction leaves allowed_memory_maximum empty for a fraction of
   * 1.0, and GC runs only when it has a value. Reserved 60 MiB > 50 MiB, yet
   * nothing is collected. */
  {
    env e;
    open_env(&e, "caching", "garbage_collection_threshold:0.5,per_process_memory_fraction:1.0", 100 * MiB);
    uint64_t x1 = A(&e, 20 * MiB), x2 = A(&e, 20 * MiB);
    A(&e, 20 * MiB);
    F(&e, x1);
    F(&e, x2);
    A(&e, 30 * MiB);
    hbm_pt_stats s = stats(&e);
    CHECK_EQ_U64(s.num_gc_releases, 0);
    CHECK_EQ_U64(s.reserved, 90 * MiB);
    close_env(&e);
  }
  /* Collection stops once it has reclaimed the target ("gc_reclaimed <
   * target_size"), even with an aged block left. Allowed 100 MiB, threshold
   * 50 MiB, reserved 70 MiB: the target is 20 MiB, which the older cached
   * block makes exactly; the younger stays cached. */
  {
    env e;
    open_env(&e, "caching", "garbage_collection_threshold:0.5,per_process_memory_fraction:0.5", 200 * MiB);
    uint64_t a = A(&e, 20 * MiB), b = A(&e, 20 * MiB), c = A(&e, 30 * MiB);
    F(&e, a);
    for (int i = 0; i < 4; i++) { /* a ages: cache hits count as the pool's calls */
      F(&e, c);
      c = A(&e, 30 * MiB);
    }
    F(&e, b);
    A(&e, 30 * MiB); /* no cached fit: a (age 5) goes, b (age 1, under the mean) stays */
    hbm_pt_stats s = stats(&e);
    CHECK_EQ_U64(s.num_gc_releases, 1);
    CHECK_EQ_U64(s.reserved, 80 * MiB);
    close_env(&e);
  }
  /* The fraction also caps what the allocator may hold. */
  env e;
  open_env(&e, "caching", "per_process_memory_fraction:0.5", 100 * MiB);
  uint64_t addr, bs;
  CHECK(e.cls->alloc(e.p, 60 * MiB, HBM_TAG_OTHER, 0, &addr, &bs) == HBM_ENOMEM);
  A(&e, 40 * MiB);
  close_env(&e);
}

/* ---- expandable segments ---- */

static void test_expandable(void) {
  env e;
  open_env(&e, "expandable", NULL, GiB);
  uint64_t a = A(&e, 1000);
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_MAP], 1);
  CHECK_EQ_U64(e.log.last_size[HBM_PT_SEGMENT_MAP], 2 * MiB); /* small pool: 2 MiB pages */
  CHECK_EQ_U64(e.log.last_addr[HBM_PT_SEGMENT_MAP], a);
  uint64_t b = A(&e, 30 * MiB);
  CHECK_EQ_U64(e.log.last_size[HBM_PT_SEGMENT_MAP], 40 * MiB); /* large pool: 20 MiB pages */
  CHECK_EQ_U64(e.log.last_addr[HBM_PT_SEGMENT_MAP], b);
  uint64_t c = A(&e, 10 * MiB);
  CHECK_EQ_U64(c, b + 30 * MiB); /* the mapped tail */
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_MAP], 2);
  uint64_t d = A(&e, 25 * MiB);
  CHECK_EQ_U64(d, b + 40 * MiB); /* the segment grows at its end */
  CHECK_EQ_U64(e.log.last_addr[HBM_PT_SEGMENT_MAP], b + 40 * MiB);
  CHECK_EQ_U64(stats(&e).reserved, 82 * MiB);
  F(&e, b);
  /* Best fit counts what a block next to unmapped space can grow to: the
   * 15 MiB tail could grow, the 30 MiB hole cannot, so the hole serves. */
  uint64_t bs;
  CHECK_EQ_U64(alloc_bs(&e, 12 * MiB, 0, &bs), b);
  /* Any remainder of 512 bytes or more splits with expandable segments (the
   * 18 MiB rest of the hole; caching would keep the 512 bytes as slack). */
  uint64_t f = alloc_bs(&e, 18 * MiB - 512, 0, &bs);
  CHECK_EQ_U64(f, b + 12 * MiB);
  CHECK_EQ_U64(bs, 18 * MiB - 512);
  F(&e, f);
  F(&e, b);
  F(&e, c);
  F(&e, d);
  F(&e, a);
  /* Out of memory (1 GiB needs 52 pages of 20 MiB): release_cached_blocks
   * unmaps every free page and releases the emptied reservations; the retry
   * makes a new reservation, fails to map, and (as in PyTorch) keeps it. */
  uint64_t addr;
  CHECK(e.cls->alloc(e.p, GiB, HBM_TAG_OTHER, 0, &addr, &bs) == HBM_ENOMEM);
  hbm_pt_stats s = stats(&e);
  CHECK_EQ_U64(s.reserved, 0);
  CHECK_EQ_U64(s.segments, 1);
  CHECK(e.log.n[HBM_PT_SEGMENT_UNMAP] >= 2);
  CHECK_EQ_U64(s.num_ooms, 1);
  A(&e, 5 * MiB);
  CHECK_EQ_U64(e.log.last_size[HBM_PT_SEGMENT_MAP], 20 * MiB);
  close_env(&e);
}

/* ---- bad calls ---- */

static void test_invalid(void) {
  env e;
  open_env(&e, "caching", NULL, GiB);
  uint64_t addr, bs;
  CHECK(e.cls->alloc(e.p, 0, HBM_TAG_OTHER, 0, &addr, &bs) == HBM_EINVAL);
  CHECK(e.cls->alloc(e.p, (1ull << 50) + 1, HBM_TAG_OTHER, 0, &addr, &bs) == HBM_EINVAL);
  uint64_t a = A(&e, 4096);
  CHECK(e.cls->free(e.p, a + 512, &bs) == HBM_EINVAL);
  F(&e, a);
  CHECK(e.cls->free(e.p, a, &bs) == HBM_EINVAL); /* double free */
  CHECK(e.cls->check(e.p, report, NULL) == 0);
  CHECK(e.cls->seg_released(e.p, 0x1234000, 512) == HBM_EINVAL);
  close_env(&e);
}

/* ---- seeding a recorded state, recorded releases ---- */

static void test_seeding(void) {
  hbm_trace *t;
  CHECK(hbm_trace_new("seed", &t) == HBM_OK);
  const uint64_t base = 0x7f0000000000ull, small = 0x7f0001400000ull, exp = 0x7f1000000000ull;
  hbm_init_segment s1 = {.addr = base, .size = 20 * MiB, .stream = 0, .small = 0};
  CHECK(hbm_trace_add_init_segment(t, &s1) == HBM_OK);
  hbm_init_block b0 = {.addr = base, .size = 4 * MiB, .request = 4 * MiB - 100, .id = 0};
  hbm_init_block f0 = {.addr = base + 4 * MiB, .size = 16 * MiB, .id = HBM_NO_ID};
  CHECK(hbm_trace_add_init_block(t, &b0) == HBM_OK && hbm_trace_add_init_block(t, &f0) == HBM_OK);
  hbm_init_segment s2 = {.addr = small, .size = 2 * MiB, .stream = 0, .small = 1};
  hbm_init_block f1 = {.addr = small, .size = 2 * MiB, .id = HBM_NO_ID};
  CHECK(hbm_trace_add_init_segment(t, &s2) == HBM_OK && hbm_trace_add_init_block(t, &f1) == HBM_OK);
  hbm_init_segment s3 = {.addr = exp, .size = 40 * MiB, .stream = 0, .small = 0, .expandable = 1};
  hbm_init_block b1 = {.addr = exp, .size = 30 * MiB, .request = 30 * MiB, .id = 1};
  hbm_init_block f2 = {.addr = exp + 30 * MiB, .size = 10 * MiB, .id = HBM_NO_ID};
  CHECK(hbm_trace_add_init_segment(t, &s3) == HBM_OK);
  CHECK(hbm_trace_add_init_block(t, &b1) == HBM_OK && hbm_trace_add_init_block(t, &f2) == HBM_OK);

  env e;
  open_env(&e, "caching", NULL, GiB);
  uint64_t ids[2] = {HBM_NO_ADDR, HBM_NO_ADDR};
  CHECK(e.cls->seed(e.p, t, ids, NULL) == HBM_OK);
  const uint64_t seed_calls = e.dev->backend_calls;
  CHECK(e.cls->check(e.p, report, NULL) == 0);
  CHECK_EQ_U64(ids[0], base); /* sim honours the recorded address */
  CHECK(ids[1] != HBM_NO_ADDR);
  CHECK_EQ_U64(stats(&e).reserved, 62 * MiB);
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_ALLOC] + e.log.n[HBM_PT_SEGMENT_MAP], 0); /* seeding is not replay */
  uint64_t bs;
  CHECK_EQ_U64(alloc_bs(&e, 16 * MiB, 0, &bs), base + 4 * MiB);
  CHECK_EQ_U64(bs, 16 * MiB);
  /* Recorded releases: applied when the model holds the memory free. */
  CHECK(e.cls->seg_released(e.p, small, 2 * MiB) == HBM_OK);
  CHECK_EQ_U64(stats(&e).reserved, 60 * MiB);
  CHECK(e.cls->seg_released(e.p, base, 20 * MiB) == HBM_EBUSY);
  F(&e, ids[1]); /* the expandable range is all free now: 40 MiB */
  CHECK(e.cls->seg_released(e.p, ids[1], 40 * MiB) == HBM_OK);
  CHECK_EQ_U64(stats(&e).reserved, 20 * MiB);
  CHECK_EQ_U64(stats(&e).segments, 1);
  F(&e, ids[0]);
  F(&e, base + 4 * MiB);
  close_env(&e);

  /* A device without room for the whole recorded state: the segment that
   * holds no live block is cache PyTorch would have released there. */
  open_env(&e, "caching", NULL, 61 * MiB);
  CHECK(e.cls->seed(e.p, t, ids, NULL) == HBM_OK);
  CHECK(e.cls->check(e.p, report, NULL) == 0);
  CHECK_EQ_U64(stats(&e).reserved, 60 * MiB);
  CHECK_EQ_U64(stats(&e).segments, 2);
  CHECK_EQ_U64(e.dev->backend_calls, seed_calls - 1); /* the cached segment's */
  CHECK_EQ_U64(alloc_bs(&e, 16 * MiB, 0, &bs), base + 4 * MiB); /* the free part of a live segment stays */
  close_env(&e);
  /* Even without the cache it does not fit: the seed says so. */
  open_env(&e, "caching", NULL, 59 * MiB);
  CHECK(e.cls->seed(e.p, t, ids, NULL) == HBM_ENOMEM);
  close_env(&e);
  hbm_trace_free(t);
}

/* ---- an expandable reservation recorded as two mapped ranges ----
 * A snapshot lists each mapped range of an expandable segment as a segment
 * of its own, in no promised order. Both ranges are one reservation: seeded
 * in either order, the blocks keep their distance and the unmapped pages
 * between them cost nothing. */
/* An expandable policy on 1 GiB seeded with t's two live blocks (ids). */
static void open_seeded(env *e, const hbm_trace *t, uint64_t ids[2]) {
  open_env(e, "expandable", NULL, GiB);
  ids[0] = ids[1] = HBM_NO_ADDR;
  CHECK(e->cls->seed(e->p, t, ids, NULL) == HBM_OK);
  CHECK(e->cls->check(e->p, report, NULL) == 0);
}

static void test_seeding_ranges(void) {
  const uint64_t exp = 0x7f1000000000ull;
  for (int descending = 0; descending <= 1; descending++) {
    hbm_trace *t;
    CHECK(hbm_trace_new("ranges", &t) == HBM_OK);
    for (int k = 0; k < 2; k++) {
      int r = descending ? 1 - k : k;
      const uint64_t at = exp + (uint64_t)r * 40 * MiB;
      hbm_init_segment s = {.addr = at, .size = 20 * MiB, .stream = 0, .small = 0, .expandable = 1};
      hbm_init_block live = {.addr = at, .size = 12 * MiB, .request = 12 * MiB, .id = (uint32_t)r};
      hbm_init_block rest = {.addr = at + 12 * MiB, .size = 8 * MiB, .id = HBM_NO_ID};
      CHECK(hbm_trace_add_init_segment(t, &s) == HBM_OK);
      CHECK(hbm_trace_add_init_block(t, &live) == HBM_OK && hbm_trace_add_init_block(t, &rest) == HBM_OK);
    }
    env e;
    uint64_t ids[2];
    open_seeded(&e, t, ids);
    CHECK(ids[0] != HBM_NO_ADDR && ids[1] != HBM_NO_ADDR);
    CHECK_EQ_U64(ids[1] - ids[0], 40 * MiB);
    CHECK_EQ_U64(stats(&e).reserved, 40 * MiB);
    CHECK_EQ_U64(stats(&e).segments, 1);
    printf("test_caching: an expandable reservation recorded as two ranges (%s): one reservation, blocks 40 MiB "
           "apart\n", descending ? "highest first" : "lowest first");
    close_env(&e);
    hbm_trace_free(t);
  }
  /* A reservation from the first range reaches 1.125 GiB in 20 MiB pages
   * (1160 MiB on a 1 GiB device): a range that ends exactly there is in it,
   * with no unmapped block after it; one page further is the next one. */
  const uint64_t va = 1160 * MiB;
  for (int beyond = 0; beyond <= 1; beyond++) {
    hbm_trace *t;
    CHECK(hbm_trace_new("ranges at the edge", &t) == HBM_OK);
    const uint64_t at[2] = {exp, exp + va - 20 * MiB + (uint64_t)beyond * 20 * MiB};
    for (int k = 0; k < 2; k++) {
      hbm_init_segment s = {.addr = at[k], .size = 20 * MiB, .stream = 0, .small = 0, .expandable = 1};
      hbm_init_block live = {.addr = at[k], .size = 20 * MiB, .request = 20 * MiB, .id = (uint32_t)k};
      CHECK(hbm_trace_add_init_segment(t, &s) == HBM_OK && hbm_trace_add_init_block(t, &live) == HBM_OK);
    }
    env e;
    uint64_t ids[2];
    open_seeded(&e, t, ids);
    CHECK_EQ_U64(stats(&e).segments, beyond ? 2 : 1);
    CHECK_EQ_U64(stats(&e).reserved, 40 * MiB);
    if (!beyond) CHECK_EQ_U64(ids[1] - ids[0], va - 20 * MiB);
    F(&e, ids[0]);
    F(&e, ids[1]);
    printf("test_caching: a recorded range ending %s the first range's reservation: %s\n",
           beyond ? "one page past" : "exactly at the end of", beyond ? "a second reservation" : "the same one");
    close_env(&e);
    hbm_trace_free(t);
  }
}

/* ---- a recorded state with free blocks side by side ----
 * PyTorch merges free neighbours, so a state it recorded has none; the trace
 * format allows them. The seed merges them: the invariants hold, and one
 * request as large as both lands where the first began. */
static void test_seeding_unmerged(void) {
  const uint64_t base = 0x7f0000000000ull, exp = 0x7f1000000000ull;
  for (int expandable = 0; expandable <= 1; expandable++) {
    hbm_trace *t;
    CHECK(hbm_trace_new("unmerged", &t) == HBM_OK);
    const uint64_t at = expandable ? exp : base;
    hbm_init_segment s = {.addr = at, .size = 20 * MiB, .stream = 0, .small = 0, .expandable = expandable};
    hbm_init_block b0 = {.addr = at, .size = 4 * MiB, .request = 4 * MiB, .id = 0};
    hbm_init_block f0 = {.addr = at + 4 * MiB, .size = 6 * MiB, .id = HBM_NO_ID};
    hbm_init_block f1 = {.addr = at + 10 * MiB, .size = 8 * MiB, .id = HBM_NO_ID};
    hbm_init_block f2 = {.addr = at + 18 * MiB, .size = 2 * MiB, .id = HBM_NO_ID};
    CHECK(hbm_trace_add_init_segment(t, &s) == HBM_OK && hbm_trace_add_init_block(t, &b0) == HBM_OK);
    CHECK(hbm_trace_add_init_block(t, &f0) == HBM_OK && hbm_trace_add_init_block(t, &f1) == HBM_OK);
    CHECK(hbm_trace_add_init_block(t, &f2) == HBM_OK);
    env e;
    open_env(&e, expandable ? "expandable" : "caching", NULL, GiB);
    uint64_t ids[1] = {HBM_NO_ADDR}, bs;
    CHECK(e.cls->seed(e.p, t, ids, NULL) == HBM_OK);
    CHECK(e.cls->check(e.p, report, NULL) == 0);
    const uint64_t calls = e.dev->backend_calls;
    CHECK_EQ_U64(alloc_bs(&e, 16 * MiB, 0, &bs), ids[0] + 4 * MiB);
    CHECK_EQ_U64(bs, 16 * MiB);
    CHECK_EQ_U64(e.dev->backend_calls, calls); /* from the cache: no new segment */
    CHECK(e.cls->check(e.p, report, NULL) == 0);
    printf("test_caching: %s starting state with three free blocks side by side: merged, a 16 MiB request at "
           "+4 MiB\n",
           expandable ? "expandable" : "caching");
    close_env(&e);
    hbm_trace_free(t);
  }
}

/* A recorded ordinary large-pool segment that is one free block. */
static void add_free_segment(hbm_trace *t, uint64_t addr, uint64_t size) {
  hbm_init_segment s = {.addr = addr, .size = size, .stream = 0, .small = 0};
  hbm_init_block f = {.addr = addr, .size = size, .id = HBM_NO_ID};
  CHECK(hbm_trace_add_init_segment(t, &s) == HBM_OK && hbm_trace_add_init_block(t, &f) == HBM_OK);
}

/* ---- a recorded oversize block inside a split segment ----
 * PyTorch never splits a block of max_split_size or more, so under that
 * setting an oversize cached block is a whole segment, and
 * release_available_cached_blocks frees it. A state recorded without the
 * setting can hold one that is not (58 MiB free before a live 2 MiB block):
 * cudaFree of it would not free a whole allocation. The model passes it
 * over, frees what it can, and the device and its statistics still agree. */
static void test_seeding_oversize_split(void) {
  const uint64_t base = 0x7f0000000000ull, whole = 0x7f0010000000ull;
  hbm_trace *t;
  CHECK(hbm_trace_new("oversize split", &t) == HBM_OK);
  hbm_init_segment s1 = {.addr = base, .size = 60 * MiB, .stream = 0, .small = 0};
  hbm_init_block f0 = {.addr = base, .size = 58 * MiB, .id = HBM_NO_ID};
  hbm_init_block b0 = {.addr = base + 58 * MiB, .size = 2 * MiB, .request = 2 * MiB, .id = 0};
  CHECK(hbm_trace_add_init_segment(t, &s1) == HBM_OK);
  CHECK(hbm_trace_add_init_block(t, &f0) == HBM_OK && hbm_trace_add_init_block(t, &b0) == HBM_OK);
  add_free_segment(t, whole, 40 * MiB);
  env e;
  open_env(&e, "caching", "max_split_size_mb:32", 100 * MiB);
  uint64_t ids[1] = {HBM_NO_ADDR}, addr = 0, bs = 0;
  CHECK(e.cls->seed(e.p, t, ids, NULL) == HBM_OK);
  CHECK_EQ_U64(ids[0], base + 58 * MiB);
  /* 70 MiB: no cached block covers it and the device is full. The 40 MiB
   * segment goes, the 58 MiB block stays: still no room. */
  CHECK(e.cls->alloc(e.p, 70 * MiB, HBM_TAG_OTHER, 0, &addr, &bs) == HBM_ENOMEM);
  CHECK(e.cls->check(e.p, report, NULL) == 0);
  CHECK_EQ_U64(stats(&e).reserved, 60 * MiB);
  CHECK_EQ_U64(e.dev->phys_used, 60 * MiB); /* the device agrees: nothing it refused */
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_FREE], 1);
  /* Once the live block goes, the segment is whole and free: released, and
   * a 70 MiB segment fits. */
  F(&e, ids[0]);
  addr = alloc_bs(&e, 70 * MiB, 0, &bs);
  CHECK_EQ_U64(bs, 70 * MiB);
  CHECK_EQ_U64(e.log.n[HBM_PT_SEGMENT_FREE], 2);
  CHECK_EQ_U64(stats(&e).reserved, 70 * MiB);
  CHECK_EQ_U64(e.dev->phys_used, 70 * MiB);
  F(&e, addr);
  printf("test_caching: an oversize block inside a recorded split segment: passed over by "
         "release_available_cached_blocks, the device and the statistics agree\n");
  close_env(&e);
  hbm_trace_free(t);
}

/* ---- an expandable range longer than a reservation on this device ----
 * A reservation is 9/8 of the device's memory, in whole pages: on a 48 MiB
 * device 60 MiB. An 80 MiB range recorded on a larger device, holding one
 * live 1 MiB block, cannot lie here as recorded: the state does not fit
 * (HBM_ENOMEM, the replay's `start`), it is not a broken one (HBM_EINVAL,
 * which stopped the replay and every capacity `hbm mincap` tried). The
 * reference says the same; neither touches the device. */
static void test_seeding_range_past_reservation(void) {
  const uint64_t base = 0x7f0000000000ull;
  hbm_trace *t;
  CHECK(hbm_trace_new("long range", &t) == HBM_OK);
  hbm_init_segment s = {.addr = base, .size = 80 * MiB, .stream = 0, .small = 0, .expandable = 1};
  hbm_init_block b0 = {.addr = base, .size = 1 * MiB, .request = 1000, .id = 0};
  hbm_init_block f1 = {.addr = base + 1 * MiB, .size = 79 * MiB, .id = HBM_NO_ID};
  CHECK(hbm_trace_add_init_segment(t, &s) == HBM_OK);
  CHECK(hbm_trace_add_init_block(t, &b0) == HBM_OK && hbm_trace_add_init_block(t, &f1) == HBM_OK);
  const char *pol[2] = {"caching", "expandable"};
  for (int k = 0; k < 2; k++) {
    env e;
    open_env(&e, pol[k], NULL, 48 * MiB);
    uint64_t ids[1] = {HBM_NO_ADDR};
    CHECK(e.cls->seed(e.p, t, ids, NULL) == HBM_ENOMEM);
    CHECK_EQ_U64(e.dev->backend_calls, 0);
    CHECK_EQ_U64(ids[0], HBM_NO_ADDR);
    CHECK(e.cls->check(e.p, report, NULL) == 0);
    F(&e, A(&e, 1000)); /* the model runs on from an empty state */
    close_env(&e);
    hbm_device *dev;
    hbm_pt_conf conf;
    hbm_ptref *ref;
    CHECK(hbm_sim_open(48 * MiB, 2 * MiB, &dev) == HBM_OK);
    hbm_pt_conf_default(&conf, 0);
    CHECK(hbm_pt_conf_parse(k ? "expandable_segments:True" : "", &conf, NULL) == HBM_OK);
    CHECK(hbm_ptref_create(dev, &conf, &ref) == HBM_OK);
    ids[0] = HBM_NO_ADDR;
    CHECK(hbm_ptref_seed(ref, t, ids) == HBM_ENOMEM);
    CHECK_EQ_U64(dev->backend_calls, 0);
    hbm_ptref_destroy(ref);
    hbm_device_close(dev);
  }
  /* On a 64 MiB device a reservation is 80 MiB: the range lies in one, and
   * still does not fit the memory (mapped whole, as recorded). */
  env e;
  open_env(&e, "expandable", NULL, 64 * MiB);
  CHECK(e.cls->seed(e.p, t, NULL, NULL) == HBM_ENOMEM);
  close_env(&e);
  printf("test_caching: an expandable range longer than a reservation on the device does not fit it "
         "(model and reference), no device call\n");
  hbm_trace_free(t);
}

/* ---- largest_free keeps its promise ----
 * largest_free is the largest request that succeeds now. Two cases where
 * the largest cached block is not that request: with
 * roundup_power2_divisions:8 a 700 MiB block serves up to 640 MiB (a larger
 * request rounds to 704 MiB); with expandable segments the free pages of two
 * 60 MiB blocks, which release unmaps, map again as one 120 MiB block. */
static uint64_t largest_free(env *e) {
  hbm_policy_usage u;
  e->cls->usage(e->p, &u);
  return u.largest_free;
}

static void test_largest_free_promise(void) {
  const uint64_t base = 0x7f0000000000ull, exp = 0x7f1000000000ull;
  hbm_trace *t;
  CHECK(hbm_trace_new("one free segment", &t) == HBM_OK);
  add_free_segment(t, base, 700 * MiB);
  env e;
  open_env(&e, "caching", "roundup_power2_divisions:8", 700 * MiB);
  CHECK(e.cls->seed(e.p, t, NULL, NULL) == HBM_OK);
  CHECK_EQ_U64(largest_free(&e), 640 * MiB);
  uint64_t addr, bs;
  CHECK(e.cls->alloc(e.p, 640 * MiB + 512, HBM_TAG_OTHER, 0, &addr, &bs) == HBM_ENOMEM);
  F(&e, A(&e, 640 * MiB));
  close_env(&e);
  hbm_trace_free(t);

  CHECK(hbm_trace_new("two free runs", &t) == HBM_OK);
  hbm_init_segment r = {.addr = exp, .size = 200 * MiB, .stream = 0, .small = 0, .expandable = 1};
  CHECK(hbm_trace_add_init_segment(t, &r) == HBM_OK);
  const uint64_t sizes[4] = {60 * MiB, 20 * MiB, 60 * MiB, 60 * MiB};
  uint64_t at = exp;
  for (uint32_t k = 0; k < 4; k++) {
    hbm_init_block b = {.addr = at, .size = sizes[k], .request = sizes[k], .id = k % 2 ? k / 2 : HBM_NO_ID};
    CHECK(hbm_trace_add_init_block(t, &b) == HBM_OK);
    at += sizes[k];
  }
  open_env(&e, "expandable", NULL, 200 * MiB);
  uint64_t ids[2];
  CHECK(e.cls->seed(e.p, t, ids, NULL) == HBM_OK);
  CHECK_EQ_U64(largest_free(&e), 120 * MiB);
  uint64_t big = A(&e, 120 * MiB);
  CHECK(big != 0);
  F(&e, big);
  F(&e, ids[0]);
  F(&e, ids[1]);
  printf("test_caching: largest_free is a request that succeeds: 640 MiB of a 700 MiB block at 8 divisions, "
         "120 MiB from two free 60 MiB expandable runs\n");
  close_env(&e);
  hbm_trace_free(t);
}

/* Expandable's largest_free counts what a request grows to at a segment's
 * free tail (200 MiB device, 20 MiB pages, figures worked by hand). A, B, C
 * are allocated in turn from one segment and B is freed:
 *   - A 30, B 15, C 30 MiB: pages [0, 80) are mapped, C ends at 75, and the
 *     device has 6 pages free. A request starting at 75 takes the free 5 MiB
 *     there and maps 6 pages: 125 MiB, not the 120 MiB of 6 fresh pages.
 *   - A 30, B 40, C 25 MiB: 5 pages free now, and B's whole page [40, 60)
 *     comes free when malloc's retry releases the cache: 6 pages after the
 *     free 5 MiB at C's end, 125 MiB again, only after the release. B's run
 *     (40 MiB) comes first but is too short, so the tail's serves. */
static void open_grown(env *e, const uint64_t sizes[3]) {
  open_env(e, "expandable", NULL, 200 * MiB);
  uint64_t a = A(e, sizes[0]), b = A(e, sizes[1]), c = A(e, sizes[2]);
  CHECK_EQ_U64(b, a + sizes[0]);
  CHECK_EQ_U64(c, b + sizes[1]);
  F(e, b);
}

static void test_largest_free_growth(void) {
  const uint64_t layouts[2][3] = {{30 * MiB, 15 * MiB, 30 * MiB}, {30 * MiB, 40 * MiB, 25 * MiB}};
  for (int k = 0; k < 2; k++) {
    env e;
    open_grown(&e, layouts[k]);
    CHECK_EQ_U64(largest_free(&e), 125 * MiB);
    uint64_t addr, bs;
    CHECK(e.cls->alloc(e.p, 125 * MiB + 512, HBM_TAG_OTHER, 0, &addr, &bs) == HBM_ENOMEM);
    close_env(&e);
    open_grown(&e, layouts[k]);
    F(&e, A(&e, 125 * MiB));
    close_env(&e);
  }
  printf("test_caching: expandable's largest_free grows a free tail: 125 MiB where 6 fresh pages give 120\n");
}

/* ---- usage and scan ---- */

static int sum_visit(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  uint64_t *s = arg;
  if (addr < s[2]) s[3] = 1; /* out of order */
  s[2] = addr + size;
  s[live ? 0 : 1] += size;
  return 0;
}

static void test_usage_scan(void) {
  env e;
  open_env(&e, "caching", NULL, GiB);
  hbm_policy_usage u;
  e.cls->usage(e.p, &u);
  CHECK_EQ_U64(u.reserved, 0);
  CHECK_EQ_U64(u.largest_free, GiB);
  uint64_t a = A(&e, 100 * MiB);
  e.cls->usage(e.p, &u);
  CHECK_EQ_U64(u.reserved, 100 * MiB);
  CHECK_EQ_U64(u.largest_free, GiB - 100 * MiB);
  F(&e, a);
  e.cls->usage(e.p, &u); /* the cached segment would be released on pressure */
  CHECK_EQ_U64(u.largest_free, GiB);
  uint64_t k = A(&e, 4 * MiB);
  A(&e, 1000);
  e.cls->usage(e.p, &u);
  CHECK_EQ_U64(u.largest_free, GiB - 100 * MiB - 2 * MiB); /* the split 100 MiB segment stays */
  uint64_t s[4] = {0, 0, 0, 0};
  CHECK(e.cls->scan(e.p, sum_visit, s) == HBM_OK);
  CHECK_EQ_U64(s[0], 4 * MiB + 1024);
  CHECK_EQ_U64(s[0] + s[1], 102 * MiB);
  CHECK(!s[3]);
  F(&e, k);
  close_env(&e);
  /* Where little is left: 10 MiB is the smallest large segment, so 10 MiB
   * free serves a 10 MiB request; below that, down to one small segment's
   * 2 MiB, only requests of up to 1 MiB (the small pool's) are served. */
  static const struct { uint64_t capacity, largest; } edge[] = {
      {10 * MiB, 10 * MiB}, {8 * MiB, MiB}, {2 * MiB, MiB}};
  for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
    open_env(&e, "caching", NULL, edge[i].capacity);
    e.cls->usage(e.p, &u);
    CHECK_EQ_U64(u.largest_free, edge[i].largest);
    close_env(&e);
  }
}

/* ---- randomized: both policies, several settings, invariants after every step ---- */

static void test_random(uint64_t seed, double scale) {
  static const char *confs[] = {
      NULL,
      "max_split_size_mb:40",
      "roundup_power2_divisions:4",
      "garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
      "max_split_size_mb:64,roundup_power2_divisions:[1:2,64:8,>:1]",
  };
  uint64_t rng = seed;
  for (int pol = 0; pol < 2; pol++) {
    for (size_t ci = 0; ci < sizeof confs / sizeof confs[0]; ci++) {
      env e;
      open_env(&e, pol ? "expandable" : "caching", confs[ci], 512 * MiB);
      enum { N = 400 };
      uint64_t live[N] = {0};
      int ops = (int)(3000 * scale) + 100, fails = 0;
      for (int i = 0; i < ops; i++) {
        int slot = (int)test_rand_below(&rng, N);
        uint64_t bs;
        if (live[slot]) {
          CHECK(e.cls->free(e.p, live[slot], &bs) == HBM_OK);
          live[slot] = 0;
        } else {
          /* log-uniform sizes, 1 B .. 64 MiB, a few at exactly 512-byte multiples */
          uint64_t size = 1ull << test_rand_below(&rng, 27);
          size += test_rand_below(&rng, size);
          if (test_rand_below(&rng, 4) == 0) size = (size + 511) & ~511ull;
          int stream = (int)test_rand_below(&rng, 3);
          int rc = e.cls->alloc(e.p, size, HBM_TAG_ACT, stream, &live[slot], &bs);
          CHECK(rc == HBM_OK || rc == HBM_ENOMEM);
          if (rc != HBM_OK) {
            live[slot] = 0;
            fails++;
          } else {
            CHECK(bs >= size && bs % 512 == 0);
          }
        }
        if (e.cls->check(e.p, report, NULL) != 0) {
          fprintf(stderr, "random: policy %d conf %zu failed at op %d\n", pol, ci, i);
          CHECK(0);
          break;
        }
        hbm_policy_usage u;
        e.cls->usage(e.p, &u);
        CHECK(u.reserved <= 512 * MiB);
      }
      for (int k = 0; k < N; k++) {
        uint64_t bs;
        if (live[k]) CHECK(e.cls->free(e.p, live[k], &bs) == HBM_OK);
      }
      close_env(&e);
    }
  }
}

int main(void) {
  uint64_t seed = test_seed("test_caching");
  test_rounding();
  test_conf();
  test_pools_and_splits();
  test_best_fit_and_merge();
  test_streams();
  test_max_split();
  test_release_available_expandable();
  test_release_and_retry();
  test_hint_after_retry();
  test_gc();
  test_expandable();
  test_invalid();
  test_seeding();
  test_seeding_unmerged();
  test_seeding_ranges();
  test_seeding_oversize_split();
  test_seeding_range_past_reservation();
  test_largest_free_promise();
  test_largest_free_growth();
  test_usage_scan();
  test_random(seed, test_scale());
  return test_done("test_caching");
}
