/* test_heap_check: hbm_check()'s own recount of the heap, white-box: each
 * way the heap's figures can part from what it holds is reported.
 *   1. The counters against a recount of the live blocks: live, allocated,
 *      the block count, live per purpose; a block whose request is larger
 *      than the block the policy said it gave.
 *   2. The layout scan against the live blocks: a block the heap does not
 *      know, one shorter than its allocation, two that overlap, a live block
 *      left out.
 *   3. The figures hbm_heap_stats answers: reserved above the capacity,
 *      allocated above reserved, the largest free piece above the free total,
 *      each peak below its figure, and a heap holding more of the device than
 *      all its heaps.
 *   4. The compact policy's own checks that test_reloc_check leaves: a pin on
 *      no live block, a pin count of 0, sync points above passes, a minimum
 *      above the bytes moved; and its settings' length limit.
 * A counter is broken through hbm_heap_counters(), a policy's answer by
 * giving the heap's policy a class that wraps its own (a policy that
 * misreports); each break is undone and the heap must pass again. */
#include <string.h>

#include "core/reloc.h"
#include "device/device.h"
#include "hbm.h"
#include "policy/compact.h"
#include "policy/policy.h"
#include "check_says.h"
#include "testutil.h"

/* Every message the check reports, one after another. */
static hbm_policy *policy_of(hbm_heap *h) {
  hbm_reloc *r;
  hbm_policy *p = hbm_heap_enter(h, &r);
  hbm_heap_leave(h);
  return p;
}

/* ---- a policy that misreports: the real class, with usage, scan or alloc lying as `lie` says ---- */
enum { TRUTH, RESERVED_ABOVE, RESERVED_ZERO, LARGEST_HUGE, SCAN_EXTRA, SCAN_SHORT, SCAN_OVERLAP, SCAN_SKIP,
       BLOCK_SMALL };
static int lie;
static const hbm_policy_class *real;
static hbm_policy_class liar;

static void liar_usage(hbm_policy *p, hbm_policy_usage *out) {
  real->usage(p, out);
  if (lie == RESERVED_ABOVE) out->reserved = p->dev->caps.capacity + 512;
  if (lie == RESERVED_ZERO) out->reserved = 0;
  if (lie == LARGEST_HUGE) out->largest_free = p->dev->caps.capacity + 512;
}
static uint64_t liar_reserved(hbm_policy *p) {
  hbm_policy_usage u;
  liar_usage(p, &u);
  return u.reserved;
}

typedef struct scan_fwd { hbm_scan_fn *visit; void *arg; int n; } scan_fwd;
static int liar_visit(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  scan_fwd *f = arg;
  int first_live = live && f->n++ == 0;
  if (lie == SCAN_EXTRA && !live) live = 1; /* a hole shown as a block */
  if (lie == SCAN_SHORT && first_live) size = 512;
  if (lie == SCAN_SKIP && first_live) return 0;
  if (lie == SCAN_OVERLAP && first_live) {
    int stop = f->visit(f->arg, addr, size, live, tag);
    return stop ? stop : f->visit(f->arg, addr + size - 512, 512, 0, tag); /* a hole inside it */
  }
  return f->visit(f->arg, addr, size, live, tag);
}
static int liar_scan(hbm_policy *p, hbm_scan_fn *visit, void *arg) {
  scan_fwd f = {visit, arg, 0};
  return real->scan(p, liar_visit, &f);
}
static int liar_alloc(hbm_policy *p, uint64_t size, hbm_tag tag, int stream, uint64_t *addr, uint64_t *block) {
  int rc = real->alloc(p, size, tag, stream, addr, block);
  if (rc == HBM_OK && lie == BLOCK_SMALL) *block = 512; /* less than the request */
  return rc;
}

/* The heap's policy answers through `liar` while `l` holds. */
static void start_lying(hbm_heap *h, int l) {
  hbm_policy *p = policy_of(h);
  real = p->cls;
  liar = *real;
  liar.usage = liar_usage;
  liar.reserved = real->reserved ? liar_reserved : NULL;
  liar.scan = liar_scan;
  liar.alloc = liar_alloc;
  p->cls = &liar;
  lie = l;
}
static void stop_lying(hbm_heap *h) {
  policy_of(h)->cls = real;
  lie = TRUTH;
}

/* A heap of `policy` with three live blocks of two purposes (one freed between). */
static hbm_heap *small_heap(hbm_device *sim, const char *policy, uint64_t *a) {
  hbm_heap *h;
  if (hbm_heap_create(sim, policy, NULL, &h) != HBM_OK) return NULL;
  uint64_t gone;
  CHECK(hbm_alloc(h, 3 << 20, HBM_TAG_PARAM, 0, &a[0]) == HBM_OK);
  CHECK(hbm_alloc(h, 5000, HBM_TAG_ACT, 0, &gone) == HBM_OK);
  CHECK(hbm_alloc(h, 700, HBM_TAG_ACT, 0, &a[1]) == HBM_OK);
  CHECK(hbm_alloc(h, 1 << 20, HBM_TAG_ACT, 0, &a[2]) == HBM_OK);
  CHECK(hbm_free(h, gone) == HBM_OK);
  CHECK(hbm_check(h) == HBM_OK);
  return h;
}

static void free_all(hbm_heap *h, const uint64_t *a) {
  for (int i = 0; i < 3; i++) CHECK(hbm_free(h, a[i]) == HBM_OK);
  CHECK(hbm_check(h) == HBM_OK);
  hbm_heap_destroy(h);
}

/* ---- 1. the counters against a recount ---- */
static void counters(hbm_device *sim, const char *policy) {
  printf("%s: the counters against a recount\n", policy);
  uint64_t a[3];
  hbm_heap *h = small_heap(sim, policy, a);
  REQUIRE(h);
  hbm_stats *st = hbm_heap_counters(h), good = *st;
  char want[200];
  snprintf(want, sizeof want, "check: stats: live %llu allocated %llu blocks 3, recount %llu %llu 3",
           (unsigned long long)good.live + 1, (unsigned long long)good.allocated, (unsigned long long)good.live,
           (unsigned long long)good.allocated);
  st->live++;
  CHECK(check_says(h, want));
  *st = good;
  snprintf(want, sizeof want, "check: stats: live %llu allocated %llu blocks 3, recount %llu %llu 3",
           (unsigned long long)good.live, (unsigned long long)good.allocated - 512, (unsigned long long)good.live,
           (unsigned long long)good.allocated);
  st->allocated -= 512;
  CHECK(check_says(h, want));
  *st = good;
  st->live_blocks = 4;
  CHECK(check_says(h, "blocks 4, recount"));
  CHECK(check_says(h, "layout scan shows 3 live blocks, the heap holds 4"));
  *st = good;
  CHECK(hbm_check(h) == HBM_OK);
  /* live per purpose: moved from one purpose to another, the total holds */
  st->live_by_tag[HBM_TAG_ACT] -= 700;
  st->live_by_tag[HBM_TAG_GRAD] += 700;
  snprintf(want, sizeof want, "check: stats: live[%s] %llu, recount %llu", hbm_tag_name(HBM_TAG_ACT),
           (unsigned long long)good.live_by_tag[HBM_TAG_ACT] - 700,
           (unsigned long long)good.live_by_tag[HBM_TAG_ACT]);
  CHECK(check_says(h, want));
  snprintf(want, sizeof want, "check: stats: live[%s] 700, recount 0", hbm_tag_name(HBM_TAG_GRAD));
  CHECK(check_says(h, want));
  CHECK(!strstr(check_said, "stats: live ") && !strstr(check_said, "allocated ")); /* the totals agree */
  *st = good;
  CHECK(hbm_check(h) == HBM_OK);
  /* a policy that says the block is smaller than the request */
  uint64_t x;
  start_lying(h, BLOCK_SMALL);
  CHECK(hbm_alloc(h, 4096, HBM_TAG_TEMP, 0, &x) == HBM_OK);
  stop_lying(h);
  snprintf(want, sizeof want, "check: block at %#llx holds a request larger than itself", (unsigned long long)x);
  CHECK(check_says(h, want));
  CHECK(hbm_free(h, x) == HBM_OK);
  CHECK(hbm_check(h) == HBM_OK);
  free_all(h, a);
}

/* ---- 2. the layout scan ---- */
static void scan(hbm_device *sim, const char *policy) {
  printf("%s: the layout scan against the live blocks\n", policy);
  uint64_t a[3];
  hbm_heap *h = small_heap(sim, policy, a);
  REQUIRE(h);
  static const struct { int lie; const char *want; } cases[] = {
    {SCAN_EXTRA, "unknown to the heap"},
    {SCAN_SHORT, "shorter than its allocation"},
    {SCAN_OVERLAP, "overlaps the previous one"},
    {SCAN_SKIP, "layout scan shows 2 live blocks, the heap holds 3"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    start_lying(h, cases[i].lie);
    CHECK(check_says(h, cases[i].want));
    stop_lying(h);
    CHECK(hbm_check(h) == HBM_OK);
  }
  free_all(h, a);
}

/* ---- 3. the figures hbm_heap_stats answers ---- */
static void figures(hbm_device *sim, const char *policy) {
  printf("%s: the figures hbm_heap_stats answers\n", policy);
  uint64_t a[3];
  hbm_heap *h = small_heap(sim, policy, a);
  REQUIRE(h);
  hbm_stats *st = hbm_heap_counters(h), good = *st, now;
  CHECK(hbm_heap_stats(h, &now) == HBM_OK);
  char want[300];
  start_lying(h, RESERVED_ABOVE);
  snprintf(want, sizeof want, "check: reserved %llu exceeds capacity %llu", (unsigned long long)now.capacity + 512,
           (unsigned long long)now.capacity);
  CHECK(check_says(h, want));
  stop_lying(h);
  start_lying(h, RESERVED_ZERO);
  snprintf(want, sizeof want, "check: allocated %llu exceeds reserved 0", (unsigned long long)now.allocated);
  CHECK(check_says(h, want));
  stop_lying(h);
  start_lying(h, LARGEST_HUGE);
  snprintf(want, sizeof want, "check: largest free %llu exceeds the free total %llu",
           (unsigned long long)now.capacity + 512, (unsigned long long)now.free_total);
  CHECK(check_says(h, want));
  stop_lying(h);
  CHECK(hbm_check(h) == HBM_OK);
  /* each peak below its figure */
  for (int k = 0; k < 3; k++) {
    if (k == 0) st->peak_reserved = now.reserved - 512;
    if (k == 1) st->peak_live = now.live - 1;
    if (k == 2) st->peak_allocated = now.allocated - 512;
    snprintf(want, sizeof want, "check: a peak below its figure: reserved %llu (peak %llu), live %llu (%llu), "
             "allocated %llu (%llu)", (unsigned long long)now.reserved, (unsigned long long)st->peak_reserved,
             (unsigned long long)now.live, (unsigned long long)st->peak_live, (unsigned long long)now.allocated,
             (unsigned long long)st->peak_allocated);
    CHECK(check_says(h, want));
    *st = good;
    CHECK(hbm_check(h) == HBM_OK);
  }
  /* the device says its heaps hold less than this one */
  uint64_t used = sim->phys_used;
  sim->phys_used = used - 512;
  snprintf(want, sizeof want, "check: holds %llu B of the device, more than all its heaps hold (%llu B)",
           (unsigned long long)used, (unsigned long long)used - 512);
  CHECK(check_says(h, want));
  sim->phys_used = used;
  CHECK(hbm_check(h) == HBM_OK);
  free_all(h, a);
}

/* ---- 4. the compact policy's own checks ---- */
static void compact_checks(hbm_device *sim) {
  printf("compact: pins and totals\n");
  hbm_heap *h;
  hbm_handle x[3];
  CHECK(hbm_heap_create(sim, "compact", NULL, &h) == HBM_OK);
  for (int i = 0; i < 3; i++) CHECK(hbm_alloc_handle(h, 1 << 20, HBM_TAG_ACT, 0, &x[i]) == HBM_OK);
  CHECK(hbm_free_handle(h, x[0]) == HBM_OK);
  CHECK(hbm_pin(h, x[2]) == HBM_OK);
  CHECK(hbm_compact(h, NULL, NULL) == HBM_OK);
  hbm_compact_policy *c = (hbm_compact_policy *)policy_of(h);
  REQUIRE(hbm_policy_is_compact(&c->base));
  CHECK(hbm_check(h) == HBM_OK);
  uint64_t pinned, one;
  CHECK(hbm_handle_addr(h, x[2], &pinned) == HBM_OK);
  CHECK(hbm_addrmap_get(&c->pins, pinned, &one) && one == 1);
  /* a pin on an address that is no block, which the layout does not show either */
  uint64_t nowhere = pinned + 512;
  CHECK(hbm_addrmap_put(&c->pins, nowhere, 1) == HBM_OK);
  char want[200];
  snprintf(want, sizeof want, "compact: pin (count 1) on %#llx, which is not a live block", (unsigned long long)nowhere);
  CHECK(check_says(h, want));
  CHECK(check_says(h, "compact: the arena's layout disagrees with the pins or the arena's live bytes"));
  CHECK(hbm_addrmap_take(&c->pins, nowhere, NULL));
  CHECK(hbm_check(h) == HBM_OK);
  /* a pin count of 0 on the live block */
  CHECK(hbm_addrmap_put(&c->pins, pinned, 0) == HBM_OK);
  snprintf(want, sizeof want, "compact: pin (count 0) on %#llx, which is not a live block", (unsigned long long)pinned);
  CHECK(check_says(h, want));
  CHECK(hbm_addrmap_put(&c->pins, pinned, 1) == HBM_OK);
  CHECK(hbm_check(h) == HBM_OK);
  /* the totals: sync points above passes, a minimum above what moved */
  hbm_compact_stats good = c->st;
  CHECK(good.compactions == 1 && good.moved_bytes > 0);
  c->st.sync_points = good.compactions + 1;
  CHECK(check_says(h, "compact: totals disagree (sync points above passes, or minimum above moved)"));
  c->st = good;
  c->st.min_moved_bytes = good.moved_bytes + 512;
  CHECK(check_says(h, "compact: totals disagree (sync points above passes, or minimum above moved)"));
  c->st = good;
  CHECK(hbm_check(h) == HBM_OK);
  CHECK(hbm_unpin(h, x[2]) == HBM_OK);
  CHECK(hbm_free_handle(h, x[1]) == HBM_OK && hbm_free_handle(h, x[2]) == HBM_OK);
  hbm_heap_destroy(h);
  /* settings longer than its buffer are refused, not cut */
  char conf[300];
  memset(conf, 'x', sizeof conf - 1);
  conf[sizeof conf - 1] = 0;
  check_said[0] = 0;
  hbm_set_error_handler(check_keep_error, NULL);
  h = NULL;
  CHECK(hbm_heap_create(sim, "compact", conf, &h) == HBM_EINVAL && h == NULL);
  hbm_set_error_handler(NULL, NULL);
  CHECK(strstr(check_said, "settings longer than 255 bytes") != NULL);
}

int main(void) {
  hbm_device *sim;
  CHECK(hbm_device_open("sim:1GiB", &sim) == HBM_OK);
  static const char *const policies[] = {"caching", "expandable", "bestfit", "compact"};
  for (int i = 0; i < 4; i++) {
    counters(sim, policies[i]);
    scan(sim, policies[i]);
    figures(sim, policies[i]);
  }
  compact_checks(sim);
  hbm_device_close(sim);
  return test_done("test_heap_check");
}
