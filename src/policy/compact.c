/* compact.c: policy `compact`. One best-fit arena over the whole device (the
 * range allocator, as bestfit) whose live blocks may move:
 *   - a request that fails for fragmentation (free total >= request > largest
 *     free) runs a partial compaction for it, then is placed in the hole
 *     (conf on_failure:partial, the default; on_failure:full slides
 *     everything instead, unless pinned blocks would keep the hole short of
 *     the request; on_failure:off never moves on its own);
 *   - every_steps:N runs a full compaction at each multiple of N steps (the
 *     field report's every-500-steps pass between optimizer step and forward);
 *   - hbm_compact() runs one pass when the caller asks.
 * Plans and moves are core/compactor.c's; this file keeps the arena, pins,
 * hooks and the totals replay reports (moved_bytes, compactions, sync_points).
 *
 * Invariants (compact_check): the arena's own (range.h I1..I6); every pinned
 * address is a live block with a pin count >= 1; in stats, sync_points <=
 * compactions, min_moved_bytes <= moved_bytes, full_compactions +
 * partial_compactions == compactions, failed_compactions <= compactions,
 * moved_bytes a multiple of the unit, at least one unit per moved block and
 * 0 without one; the arena read as a
 * layout satisfies the layout invariants (compactor.h) and counts as many
 * pinned blocks as there are pins; the last pass's layout and plan, kept
 * until the next pass, pass hbm_clayout_check and hbm_cplan_check;
 * next_periodic is 0 without every_steps, else the first multiple of
 * every_steps above the highest step mark taken (every_steps itself before
 * any), or 0 where none is below 2^64. */
#include "policy/compact.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/addrmap.h"
#include "core/compactor.h"
#include "core/util.h"

enum { COMPACT_UNIT = 512 }; /* as bestfit: PyTorch's kMinBlockSize */
enum { ON_FAILURE_PARTIAL = 0, ON_FAILURE_FULL, ON_FAILURE_OFF };

typedef hbm_compact_policy compact;

/* ---- conf: "on_failure:partial|full|off,every_steps:N,ordered_copies:0|1" ---- */
/* The heap prefixes "policy compact: " to these messages. A known key with a
 * bad value names that key's limits, as zoned does. */
static int parse_conf(compact *c, const char *conf, hbm_diag *diag) {
  char buf[256];
  if (strlen(conf) >= sizeof buf) {
    hbm_diag_set(diag, "alloc-conf", 0, 0, "settings longer than %zu bytes", sizeof buf - 1);
    return HBM_EINVAL;
  }
  strcpy(buf, conf);
  char *save = NULL;
  /* Each setting once, as zoned's: a later value would silently replace an
   * earlier one. Items are at least two bytes apart. */
  const char *seen[sizeof buf / 2];
  unsigned nseen = 0;
  for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    while (*item == ' ') item++;
    char *colon = strchr(item, ':');
    const char *value = colon ? colon + 1 : "", *want = NULL;
    if (colon) *colon = 0;
    if (hbm_setting_repeated(seen, &nseen, item)) {
      hbm_diag_set(diag, "alloc-conf", 0, 0, "setting '%s' given twice (each setting once)", item);
      return HBM_EINVAL;
    }
    if (!strcmp(item, "on_failure")) {
      want = "on_failure:partial|full|off";
      if (!strcmp(value, "partial")) c->on_failure = ON_FAILURE_PARTIAL;
      else if (!strcmp(value, "full")) c->on_failure = ON_FAILURE_FULL;
      else if (!strcmp(value, "off")) c->on_failure = ON_FAILURE_OFF;
      else goto bad;
    } else if (!strcmp(item, "every_steps")) {
      /* strtoull saturates: a value past 2^64 - 1 would silently mean "never" */
      want = "every_steps:N with N a whole number from 0 (off) to 2^64 - 1";
      char *end = NULL;
      errno = 0;
      uint64_t n = strtoull(value, &end, 10);
      if (*value < '0' || *value > '9' || *end || errno == ERANGE) goto bad;
      c->every_steps = c->next_periodic = n;
    } else if (!strcmp(item, "ordered_copies")) {
      want = "ordered_copies:0|1";
      if (strcmp(value, "0") && strcmp(value, "1")) goto bad;
      c->ordered = *value == '1';
    } else {
      goto bad;
    }
    continue;
  bad:
    if (want)
      hbm_diag_set(diag, "alloc-conf", 0, 0, "bad setting '%s%s%s' (expected %s)", item, colon ? ":" : "", value,
                   want);
    else
      hbm_diag_set(diag, "alloc-conf", 0, 0,
                   "unknown setting '%s%s%s' (expected on_failure:partial|full|off, every_steps:N, "
                   "ordered_copies:0|1)", item, colon ? ":" : "", value);
    return HBM_EINVAL;
  }
  return HBM_OK;
}

static int compact_create(hbm_device *dev, const char *conf, hbm_policy **out, hbm_diag *diag) {
  compact *c = calloc(1, sizeof *c);
  if (!c) return HBM_EHOSTMEM;
  c->base.dev = dev;
  if (conf && *conf && parse_conf(c, conf, diag) != HBM_OK) {
    free(c);
    return HBM_EINVAL;
  }
  c->seg_size = dev->caps.capacity & ~(uint64_t)(COMPACT_UNIT - 1);
  int rc = c->seg_size ? hbm_dev_seg_alloc(dev, c->seg_size, 0, &c->seg_addr) : HBM_EINVAL;
  if (rc == HBM_OK) rc = hbm_range_create(c->seg_addr, c->seg_size, COMPACT_UNIT, &c->arena);
  if (rc != HBM_OK) {
    if (c->seg_addr) hbm_dev_seg_free(dev, c->seg_addr, c->seg_size);
    free(c);
    return rc;
  }
  hbm_addrmap_init(&c->pins);
  /* A device whose copies cannot overlap gets ordered chunks. */
  if (!dev->caps.host_visible && strcmp(dev->caps.kind, "sim")) c->ordered = 1;
  *out = &c->base;
  return HBM_OK;
}

static void compact_destroy(hbm_policy *p) {
  compact *c = (compact *)p;
  hbm_range_destroy(c->arena);
  hbm_dev_seg_free(p->dev, c->seg_addr, c->seg_size);
  hbm_addrmap_release(&c->pins);
  hbm_clayout_release(&c->layout);
  hbm_cplan_release(&c->plan);
  free(c);
}

/* The first multiple of n (> 0) above step; 0 where none is below 2^64. */
static uint64_t next_multiple(uint64_t n, uint64_t step) {
  uint64_t q = step / n + 1;
  return q <= UINT64_MAX / n ? q * n : 0;
}

/* ---- one pass ---------------------------------------------------------------- */
static int is_pinned(void *arg, uint64_t addr) {
  uint64_t count;
  return hbm_addrmap_get(&((compact *)arg)->pins, addr, &count);
}

/* Counts a pass and its moves in the totals. */
static void count_pass(compact *c, uint64_t need, int failed, const hbm_cplan *plan, size_t moves) {
  c->st.compactions++;
  if (need) c->st.partial_compactions++; else c->st.full_compactions++;
  c->st.failed_compactions += failed != 0;
  if (plan->nmoves) c->st.sync_points++;
  for (size_t i = 0; i < moves; i++) c->st.moved_bytes += plan->moves[i].size;
  c->st.moved_blocks += moves;
  if (!failed) c->st.min_moved_bytes += plan->min_moved_bytes; /* a stopped pass opened nothing */
}

/* Counts a pass that failed before moving anything (no hole to open, or
 * before_move refused): no sync point, no bytes. */
static void count_unmoved_failure(compact *c, uint64_t need) {
  c->st.compactions++;
  if (need) c->st.partial_compactions++; else c->st.full_compactions++;
  c->st.failed_compactions++;
}

/* The before_move hook, as apply's before_copy: asked about the plan in hand. */
typedef struct refusal { compact *c; int refused; } refusal;
static int ask_before_move(void *arg) {
  refusal *a = arg;
  compact *c = a->c;
  a->refused = c->before_move(c->before_arg, c->plan.moved_bytes, c->plan.nmoves) != 0;
  return a->refused;
}

/* need 0: full. Fills r (never NULL). Counts the pass unless dry_run.
 * open: the full pass is run for a request of that many bytes (rounded):
 * one whose hole would be smaller fails before moving anything, as a partial
 * pass that cannot open its hole does (pinned walls keep the free space of
 * each run between them apart). */
static int run_pass(compact *c, uint64_t need, uint64_t open, int dry_run, hbm_compact_result *r) {
  memset(r, 0, sizeof *r);
  c->planned = 0;
  int rc = hbm_clayout_read(&c->layout, c->arena, COMPACT_UNIT, is_pinned, c);
  if (rc != HBM_OK) return rc;
  if (hbm_clayout_check(&c->layout, NULL, NULL)) return HBM_ECORRUPT; /* O(n): cheap beside planning */
  r->largest_free_before = r->largest_free_after = c->layout.largest_free;
  r->pinned_blocks = c->layout.pinned_blocks;
  rc = need ? hbm_compactor_plan_partial(&c->layout, need, &c->plan)
            : hbm_compactor_plan_full(&c->layout, &c->plan);
  if (rc != HBM_OK) {
    if (rc == HBM_ENOMEM && !dry_run) count_unmoved_failure(c, need); /* only a partial plan finds no hole */
    return rc;
  }
  c->planned = 1;
  c->plan_need = need;
  const hbm_cplan *plan = &c->plan;
  if (open && plan->hole_size < open) {
    count_unmoved_failure(c, need);
    return HBM_ENOMEM;
  }
  static const hbm_compact_kind kinds[] = {HBM_COMPACT_NONE, HBM_COMPACT_FULL, HBM_COMPACT_EVACUATE, HBM_COMPACT_SLIDE};
  r->kind = kinds[plan->kind];
  r->moved_bytes = plan->moved_bytes;
  r->moved_blocks = plan->nmoves;
  r->min_moved_bytes = plan->min_moved_bytes;
  r->copies = hbm_compactor_device_copies(plan, c->ordered); /* ordered: chunks too */
  r->hole_addr = plan->hole_addr;
  r->hole_size = plan->hole_size;
  if (plan->hole_size > r->largest_free_after) r->largest_free_after = plan->hole_size;
  if (dry_run) return HBM_OK;
  /* before_move is called once the metadata for the new layout is built, so
   * that a pass it lets go ahead can fail only in a device copy. */
  size_t done = 0;
  refusal ask = {c, 0};
  rc = hbm_compactor_apply(&c->arena, c->base.dev, &c->layout, plan, c->ordered, c->before_move ? ask_before_move : NULL,
                           &ask, &done);
  if (ask.refused) {
    count_unmoved_failure(c, need);
    return HBM_EBUSY;
  }
  /* Host memory short, or a plan apply refuses: before any copy, nothing moved. */
  if (!done && (rc == HBM_EHOSTMEM || rc == HBM_ECORRUPT)) return rc;
  /* Every copy of the pass is done (or, after a device copy error, those of
   * the first `done` moves, which the arena now shows): report each of those
   * blocks once, in plan order (an address reported as new is never the old
   * address of a block not yet reported, so maps keyed by address can follow
   * one move at a time). */
  for (size_t i = 0; c->moved && i < done; i++)
    c->moved(c->moved_arg, plan->moves[i].src, plan->moves[i].dst, plan->moves[i].size);
  count_pass(c, need, rc != HBM_OK, plan, done);
  if (rc != HBM_OK) return rc; /* the copy's error */
  r->largest_free_after = hbm_range_largest_free(c->arena);
  return HBM_OK;
}

/* ---- the policy class ----------------------------------------------------------- */
static int compact_alloc(hbm_policy *p, uint64_t size, hbm_tag tag, int stream, uint64_t *addr,
                         uint64_t *block_size) {
  compact *c = (compact *)p;
  int rc = hbm_range_alloc(c->arena, size, 0, addr, block_size);
  if (rc != HBM_ENOMEM || c->on_failure == ON_FAILURE_OFF || size > c->seg_size) return rc;
  uint64_t need = hbm_align_up(size, COMPACT_UNIT);
  if (hbm_range_free_bytes(c->arena) < need) return HBM_ENOMEM; /* capacity: moving cannot help */
  hbm_compact_result r;
  rc = c->on_failure == ON_FAILURE_FULL ? run_pass(c, 0, need, 0, &r) : run_pass(c, need, 0, 0, &r);
  /* A refused pass (before_move) or a plan that cannot open the hole: the
   * request's own failure. Anything else (host memory, a device copy error)
   * is the pass's. */
  if (rc != HBM_OK) return rc == HBM_EBUSY ? HBM_ENOMEM : rc;
  return hbm_range_alloc(c->arena, size, 0, addr, block_size);
}

static int compact_free(hbm_policy *p, uint64_t addr, uint64_t *block_size) {
  compact *c = (compact *)p;
  uint64_t count;
  if (hbm_addrmap_get(&c->pins, addr, &count)) return HBM_EBUSY;
  return hbm_range_free(c->arena, addr, block_size);
}

static void compact_usage(hbm_policy *p, hbm_policy_usage *u) {
  compact *c = (compact *)p;
  u->reserved = hbm_range_top(c->arena) - c->seg_addr;
  u->largest_free = hbm_range_largest_free(c->arena);
  u->limit = UINT64_MAX;
}

typedef struct scan_ctx { hbm_scan_fn *visit; void *arg; } scan_ctx;
static int scan_one(void *arg, uint64_t addr, uint64_t size, int live) {
  scan_ctx *s = arg;
  return s->visit(s->arg, addr, size, live, HBM_TAG_OTHER);
}
static int compact_scan(hbm_policy *p, hbm_scan_fn *visit, void *arg) {
  scan_ctx s = {visit, arg};
  return hbm_range_walk(((compact *)p)->arena, scan_one, &s);
}

typedef struct check_ctx { compact *c; hbm_check_report_fn *report; void *arg; int failures; } check_ctx;
static void check_pin(void *arg, uint64_t addr, uint64_t count) {
  check_ctx *k = arg;
  char m[160];
  if (count == 0 || hbm_range_block_size(k->c->arena, addr) == 0) {
    snprintf(m, sizeof m, "compact: pin (count %llu) on %#llx, which is not a live block",
             (unsigned long long)count, (unsigned long long)addr);
    k->report(k->arg, m);
    k->failures++;
  }
}
static int compact_check(hbm_policy *p, hbm_check_report_fn *report, void *arg) {
  compact *c = (compact *)p;
  check_ctx k = {c, report, arg, 0};
  k.failures = hbm_range_check(c->arena, report, arg);
  hbm_addrmap_each(&c->pins, check_pin, &k);
  const hbm_compact_stats *st = &c->st;
  if (st->sync_points > st->compactions || st->min_moved_bytes > st->moved_bytes) {
    report(arg, "compact: totals disagree (sync points above passes, or minimum above moved)");
    k.failures++;
  }
  /* Every pass is full or partial; a failed one is a pass; a moved block is
   * whole units, so the bytes are units and at least one per block, and none
   * without a block. */
  if (st->full_compactions + st->partial_compactions != st->compactions || st->failed_compactions > st->compactions ||
      st->moved_bytes % COMPACT_UNIT || st->moved_bytes / COMPACT_UNIT < st->moved_blocks ||
      (st->moved_bytes && !st->moved_blocks)) {
    char m[300];
    snprintf(m, sizeof m, "compact: totals disagree: %llu passes, %llu full, %llu partial, %llu failed; "
             "%llu bytes moved in %llu blocks", (unsigned long long)st->compactions,
             (unsigned long long)st->full_compactions, (unsigned long long)st->partial_compactions,
             (unsigned long long)st->failed_compactions, (unsigned long long)st->moved_bytes,
             (unsigned long long)st->moved_blocks);
    report(arg, m);
    k.failures++;
  }
  /* The arena as a layout now (skipped when host memory is short: that is
   * no inconsistency, and says so). */
  hbm_clayout now = {0};
  int read = hbm_clayout_read(&now, c->arena, COMPACT_UNIT, is_pinned, c);
  if (read == HBM_EHOSTMEM) report(arg, hbm_check_no_memory_message);
  if (read == HBM_OK) {
    int f = hbm_clayout_check(&now, report, arg);
    k.failures += f > 0 ? f : 0;
    if (now.pinned_blocks != c->pins.used || now.live_bytes != hbm_range_live_bytes(c->arena)) {
      report(arg, "compact: the arena's layout disagrees with the pins or the arena's live bytes");
      k.failures++;
    }
  }
  hbm_clayout_release(&now);
  /* The periodic passes' schedule (a replay's steps may come in any order:
   * only the highest one taken counts). */
  uint64_t due = !c->every_steps ? 0 : !c->stepped ? c->every_steps : next_multiple(c->every_steps, c->highest_step);
  if (c->next_periodic != due) {
    char m[200], highest[64] = "no step mark taken yet";
    if (c->stepped) snprintf(highest, sizeof highest, "highest step %llu", (unsigned long long)c->highest_step);
    snprintf(m, sizeof m, "compact: next periodic pass at step %llu, expected %llu (every %llu steps, %s)",
             (unsigned long long)c->next_periodic, (unsigned long long)due, (unsigned long long)c->every_steps,
             highest);
    report(arg, m);
    k.failures++;
  }
  /* The last pass's layout and plan. */
  if (c->planned) {
    int f = hbm_clayout_check(&c->layout, report, arg);
    if (f == 0) f = hbm_cplan_check(&c->layout, &c->plan, c->plan_need, report, arg);
    k.failures += f > 0 ? f : 0;
  }
  return k.failures;
}

static int compact_step(hbm_policy *p, uint64_t step) {
  compact *c = (compact *)p;
  int rc = HBM_OK;
  if (c->every_steps && c->next_periodic && step >= c->next_periodic) {
    uint64_t due = c->next_periodic;
    /* 0 where none is left: steps only grow, no pass comes again. */
    c->next_periodic = next_multiple(c->every_steps, step);
    hbm_compact_result r;
    /* Host memory short before any copy moved nothing: the mark is not taken,
     * so that marking it again runs the same pass and the layout never depends
     * on host memory. A pass the hooks refuse is skipped (the heap as it was,
     * HBM_OK). A copy that fails stopped the pass as far as the copies went:
     * the mark is taken (blocks moved, the pass is counted) and the copy's
     * error is the step's answer, as it is hbm_compact()'s. */
    rc = run_pass(c, 0, 0, 0, &r);
    if (rc == HBM_EHOSTMEM) {
      c->next_periodic = due;
      return HBM_EHOSTMEM;
    }
    if (rc == HBM_EBUSY) rc = HBM_OK;
  }
  if (!c->stepped || step > c->highest_step) c->highest_step = step;
  c->stepped = 1;
  return rc;
}

static int compact_counters(hbm_policy *p, hbm_counter *out, int max) {
  const hbm_compact_stats *s = &((compact *)p)->st;
  const hbm_counter all[] = {
      {"moved_bytes", (double)s->moved_bytes},
      {"compactions", (double)s->compactions},
      {"sync_points", (double)s->sync_points},
      {"min_moved_bytes", (double)s->min_moved_bytes},
      {"moved_blocks", (double)s->moved_blocks},
      {"partial_compactions", (double)s->partial_compactions},
      {"full_compactions", (double)s->full_compactions},
      {"failed_compactions", (double)s->failed_compactions},
  };
  int n = (int)(sizeof all / sizeof all[0]);
  if (n > max) n = max;
  memcpy(out, all, (size_t)n * sizeof *out);
  return n;
}

static void compact_set_relocation_callback(hbm_policy *p,
                                            void (*fn)(void *arg, uint64_t old_addr, uint64_t new_addr,
                                                       uint64_t size),
                                            void *arg) {
  compact *c = (compact *)p;
  c->moved = fn;
  c->moved_arg = arg;
}

/* ---- for core/reloc.c ------------------------------------------------------------ */
int hbm_compact_policy_pin(hbm_policy *p, uint64_t addr, int delta) {
  compact *c = (compact *)p;
  uint64_t count = 0;
  int pinned = hbm_addrmap_get(&c->pins, addr, &count);
  if (!pinned && hbm_range_block_size(c->arena, addr) == 0) return HBM_EINVAL;
  if (delta < 0) {
    if (!pinned) return HBM_EINVAL;
    if (count == 1) hbm_addrmap_take(&c->pins, addr, NULL);
    else hbm_addrmap_put(&c->pins, addr, count - 1); /* replaces: cannot fail */
    return HBM_OK;
  }
  return hbm_addrmap_put(&c->pins, addr, count + 1);
}

void hbm_compact_policy_set_before_move(hbm_policy *p, hbm_before_move_fn *fn, void *arg) {
  compact *c = (compact *)p;
  c->before_move = fn;
  c->before_arg = arg;
}

int hbm_compact_policy_run(hbm_policy *p, const hbm_compact_options *o, hbm_compact_result *r) {
  /* The result only on success (hbm.h: outputs untouched on error): a refused
   * pass would otherwise read as having moved its plan's bytes. */
  hbm_compact_result local;
  int rc = run_pass((compact *)p, o ? o->need : 0, 0, o ? o->dry_run : 0, &local);
  if (rc == HBM_OK && r) *r = local;
  return rc;
}

void hbm_compact_policy_stats(hbm_policy *p, hbm_compact_stats *out) { *out = ((compact *)p)->st; }

const hbm_policy_class hbm_policy_compact = {
    .name = "compact",
    .summary = "best fit whose blocks move: partial compaction on a fragmentation failure, full every N steps",
    .create = compact_create,
    .destroy = compact_destroy,
    .alloc = compact_alloc,
    .free = compact_free,
    .usage = compact_usage,
    .scan = compact_scan,
    .check = compact_check,
    .step = compact_step,
    .counters = compact_counters,
    .set_relocation_callback = compact_set_relocation_callback,
};
