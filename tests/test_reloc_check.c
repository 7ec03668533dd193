/* test_reloc_check: the handle table of a compact heap (core/reloc.h) and the
 * compact policy's own state, white-box.
 *   1. The slot table grows by doubling up to HBM_RELOC_MAX_SLOTS and then
 *      refuses: the arithmetic at 2^31 and at the limit, and a heap whose
 *      table is made to look full answers hbm_alloc_handle with HBM_EHOSTMEM,
 *      counting a failed request and allocating nothing (2^32 slots are never
 *      really made: tens of GiB).
 *   2. hbm_check() reports a broken free-slot list: an entry past the slots,
 *      a live slot listed free, a slot listed twice, more entries than room;
 *      and an address map whose key is cut off from its hash slot (every
 *      count still agrees, but freeing that block would not find its handle).
 *   3. hbm_check() reports a periodic pass due at the wrong step, saying the
 *      highest step mark taken, or that none was.
 *   4. hbm_check() reports compaction totals that do not hold together.
 *   5. before_move is called only for a pass that goes on to move: a host
 *      allocation failing at each point of a pass comes before it.
 *   6. hbm_check() reports a before_move hook, or its argument, in the policy
 *      that is not the one the relocation layer holds as set: before any
 *      hooks, after hbm_heap_set_relocation_hooks and after clearing them.
 * A corruption is made through hbm_heap_enter(), which hands out the heap's
 * table; each is undone before the heap is destroyed. */
#include <string.h>

#include "core/reloc.h"
#include "policy/compact.h"
#include "core/util.h"
#include "hbm.h"
#include "testutil.h"

/* ---- the wrapped allocator: every allocation from the fail_from-th on fails ---- */
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
static unsigned long long host_calls, fail_from; /* fail_from 0: none fails */
static int host_fails(void) { return fail_from && ++host_calls >= fail_from; }
void *__wrap_malloc(size_t n) { return host_fails() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) { return host_fails() ? NULL : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t n) { return host_fails() ? NULL : __real_realloc(p, n); }

static char last_error[256];
static void keep_error(int err, const char *message, void *arg) {
  (void)arg, (void)err;
  snprintf(last_error, sizeof last_error, "%s", message);
}

static hbm_reloc *table_of(hbm_heap *h) {
  hbm_reloc *r = NULL;
  hbm_heap_enter(h, &r);
  hbm_heap_leave(h);
  return r;
}

/* ---- 1. growth ------------------------------------------------------------------ */
static void growth(hbm_device *sim) {
  CHECK_EQ_U64(hbm_reloc_grown_cap(0), 256);
  CHECK_EQ_U64(hbm_reloc_grown_cap(256), 512);
  CHECK_EQ_U64(hbm_reloc_grown_cap(1u << 30), 1u << 31);
  CHECK_EQ_U64(hbm_reloc_grown_cap(1u << 31), HBM_RELOC_MAX_SLOTS); /* not 2^32, wrapped to 0 */
  CHECK_EQ_U64(hbm_reloc_grown_cap(HBM_RELOC_MAX_SLOTS - 1), HBM_RELOC_MAX_SLOTS);
  CHECK_EQ_U64(hbm_reloc_grown_cap(HBM_RELOC_MAX_SLOTS), 0);
  if (hbm_reloc_grown_cap(HBM_RELOC_MAX_SLOTS) != 0) return; /* the heap below would ask for 64 GiB */
  hbm_heap *h;
  hbm_handle a, b = 7;
  CHECK(hbm_heap_create(sim, "compact", NULL, &h) == HBM_OK);
  CHECK(hbm_alloc_handle(h, 4096, HBM_TAG_ACT, 0, &a) == HBM_OK);
  hbm_reloc *r = table_of(h);
  hbm_reloc saved = *r;
  hbm_stats before, after;
  CHECK(hbm_heap_stats(h, &before) == HBM_OK);
  r->nslots = r->cap = HBM_RELOC_MAX_SLOTS; /* full, and no free slot */
  r->nspare = 0;
  hbm_set_error_handler(keep_error, NULL);
  CHECK(hbm_alloc_handle(h, 4096, HBM_TAG_ACT, 0, &b) == HBM_EHOSTMEM);
  hbm_set_error_handler(NULL, NULL);
  CHECK(b == 7);
  CHECK(strstr(last_error, "all 4294967295 handle slots taken") != NULL);
  CHECK(r->slots == saved.slots && r->spare == saved.spare); /* not reallocated */
  r->nslots = saved.nslots, r->cap = saved.cap, r->nspare = saved.nspare;
  CHECK(hbm_heap_stats(h, &after) == HBM_OK);
  CHECK_EQ_U64(after.live_blocks, before.live_blocks);
  CHECK_EQ_U64(after.failures, before.failures + 1);
  CHECK(hbm_check(h) == HBM_OK);
  CHECK(hbm_alloc_handle(h, 4096, HBM_TAG_ACT, 0, &b) == HBM_OK);
  CHECK(hbm_free_handle(h, a) == HBM_OK && hbm_free_handle(h, b) == HBM_OK);
  hbm_heap_destroy(h);
}

/* hbm_check(h) fails with a message containing `want`. */
static int check_says(hbm_heap *h, const char *want) {
  last_error[0] = 0;
  hbm_set_error_handler(keep_error, NULL);
  int rc = hbm_check(h);
  hbm_set_error_handler(NULL, NULL);
  if (rc == HBM_ECORRUPT && strstr(last_error, want)) return 1;
  fprintf(stderr, "hbm_check: %d, last message \"%s\", expected one with \"%s\"\n", rc, last_error, want);
  return 0;
}

/* ---- 2. the free-slot list and the address map ------------------------------------ */
static void free_slots(hbm_device *sim) {
  hbm_heap *h;
  hbm_handle x[4];
  CHECK(hbm_heap_create(sim, "compact", NULL, &h) == HBM_OK);
  for (int i = 0; i < 4; i++) CHECK(hbm_alloc_handle(h, 4096, HBM_TAG_ACT, 0, &x[i]) == HBM_OK);
  CHECK(hbm_free_handle(h, x[1]) == HBM_OK && hbm_free_handle(h, x[3]) == HBM_OK);
  hbm_reloc *r = table_of(h);
  CHECK(r->nslots == 4 && r->nspare == 2);
  CHECK(hbm_check(h) == HBM_OK);
  uint32_t first = r->spare[0], second = r->spare[1], nspare = r->nspare;
  r->spare[0] = r->nslots;
  CHECK(check_says(h, "handles: free slot 4 (entry 0) is past the 4 slots"));
  r->spare[0] = 0; /* x[0]'s */
  CHECK(check_says(h, "handles: free slot 0 (entry 0) is live"));
  r->spare[0] = second;
  CHECK(check_says(h, "is listed twice (entry 1)"));
  r->spare[0] = first;
  r->nspare = r->cap + 1;
  CHECK(check_says(h, "free slots, room for"));
  r->nspare = nspare;
  CHECK(hbm_check(h) == HBM_OK);
  /* A retired slot (generation 0: every generation issued) is neither
   * spare nor live, and the count of them holds. */
  uint32_t gen = r->slots[first].gen;
  r->slots[first].gen = 0;
  CHECK(check_says(h, "(entry 0) is retired"));
  r->slots[first].gen = gen;
  r->retired = 1;
  CHECK(check_says(h, "0 slots of generation 0, 1 counted retired"));
  r->retired = 0;
  gen = r->slots[0].gen; /* x[0]'s, live */
  r->slots[0].gen = 0;
  CHECK(check_says(h, "slot 0 is retired (generation 0) and live"));
  r->slots[0].gen = gen;
  CHECK(hbm_check(h) == HBM_OK);
  /* The address map: x[0]'s key moved past an empty slot. */
  uint64_t a0, at = UINT64_MAX, to = UINT64_MAX;
  CHECK(hbm_handle_addr(h, x[0], &a0) == HBM_OK);
  hbm_addrmap *m = &r->by_addr;
  for (uint64_t i = 0; i < m->cap; i++)
    if (m->keys[i] == a0) at = i;
  CHECK(at != UINT64_MAX);
  for (uint64_t j = (at + 1) & (m->cap - 1); at != UINT64_MAX && j != at && to == UINT64_MAX; j = (j + 1) & (m->cap - 1))
    if (m->keys[j] == UINT64_MAX) to = j; /* UINT64_MAX: an empty slot */
  CHECK(to != UINT64_MAX);
  if (to != UINT64_MAX) {
    m->keys[to] = m->keys[at], m->vals[to] = m->vals[at], m->keys[at] = UINT64_MAX;
    CHECK(check_says(h, "handles: addrmap: key"));
    m->keys[at] = m->keys[to], m->vals[at] = m->vals[to], m->keys[to] = UINT64_MAX;
  }
  CHECK(hbm_check(h) == HBM_OK);
  CHECK(hbm_free_handle(h, x[0]) == HBM_OK && hbm_free_handle(h, x[2]) == HBM_OK);
  CHECK(hbm_check(h) == HBM_OK);
  hbm_heap_destroy(h);
}

/* ---- 3. the periodic passes' schedule ---------------------------------------------------- */
static hbm_compact_policy *policy_of(hbm_heap *h) {
  hbm_reloc *r;
  hbm_policy *p = hbm_heap_enter(h, &r);
  hbm_heap_leave(h);
  return hbm_policy_is_compact(p) ? (hbm_compact_policy *)p : NULL;
}

/* next_periodic set to `bad` is reported, with the schedule it breaks (the
 * highest step taken, or that none was), and the heap is sound again after. */
static int schedule_refused(hbm_heap *h, uint64_t bad) {
  hbm_compact_policy *c = policy_of(h);
  uint64_t good = c->next_periodic;
  c->next_periodic = bad;
  char want[200];
  if (c->stepped)
    snprintf(want, sizeof want, "compact: next periodic pass at step %llu, expected %llu (every %llu steps, highest "
             "step %llu)", (unsigned long long)bad, (unsigned long long)good, (unsigned long long)c->every_steps,
             (unsigned long long)c->highest_step);
  else
    snprintf(want, sizeof want, "compact: next periodic pass at step %llu, expected %llu (every %llu steps, no step "
             "mark taken yet)", (unsigned long long)bad, (unsigned long long)good, (unsigned long long)c->every_steps);
  int said = check_says(h, want);
  c->next_periodic = good;
  return said && hbm_check(h) == HBM_OK;
}

static void schedule(hbm_device *sim) {
  hbm_heap *h;
  CHECK(hbm_heap_create(sim, "compact", "every_steps:4", &h) == HBM_OK);
  CHECK(policy_of(h) && policy_of(h)->next_periodic == 4);
  CHECK(hbm_check(h) == HBM_OK);
  CHECK(schedule_refused(h, 8)); /* before any step: the first multiple */
  CHECK(schedule_refused(h, 0));
  for (uint64_t s = 1; s <= 5; s++) CHECK(hbm_heap_step(h, s) == HBM_OK && hbm_check(h) == HBM_OK);
  CHECK_EQ_U64(policy_of(h)->next_periodic, 8);
  CHECK(schedule_refused(h, 6));  /* not a multiple */
  CHECK(schedule_refused(h, 12)); /* skips 8 */
  CHECK(schedule_refused(h, 4));  /* not above step 5 */
  CHECK(schedule_refused(h, 0));  /* multiples are left */
  hbm_heap_destroy(h);
  CHECK(hbm_heap_create(sim, "compact", NULL, &h) == HBM_OK);
  CHECK(schedule_refused(h, 5)); /* no every_steps: none */
  CHECK(hbm_heap_step(h, 10) == HBM_OK);
  CHECK(schedule_refused(h, 10));
  hbm_heap_destroy(h);
  /* The last multiple below 2^64 taken: none left, 0 is right. */
  CHECK(hbm_heap_create(sim, "compact", "every_steps:18446744073709551615", &h) == HBM_OK);
  CHECK(hbm_heap_step(h, UINT64_MAX - 1) == HBM_OK && hbm_check(h) == HBM_OK);
  CHECK(schedule_refused(h, 0));
  CHECK(hbm_heap_step(h, UINT64_MAX) == HBM_OK && hbm_check(h) == HBM_OK);
  CHECK_EQ_U64(policy_of(h)->next_periodic, 0);
  CHECK(schedule_refused(h, UINT64_MAX));
  hbm_heap_destroy(h);
}

/* ---- 4. the totals ---------------------------------------------------------------------- */
static void totals(hbm_device *sim) {
  hbm_heap *h;
  hbm_handle x[4];
  CHECK(hbm_heap_create(sim, "compact", NULL, &h) == HBM_OK);
  for (int i = 0; i < 4; i++) CHECK(hbm_alloc_handle(h, 1 << 20, HBM_TAG_ACT, 0, &x[i]) == HBM_OK);
  CHECK(hbm_free_handle(h, x[0]) == HBM_OK && hbm_free_handle(h, x[2]) == HBM_OK);
  CHECK(hbm_compact(h, NULL, NULL) == HBM_OK);
  hbm_compact_options part = {.need = 2ull << 30}; /* more than the free bytes */
  CHECK(hbm_compact(h, &part, NULL) == HBM_ENOMEM); /* a failed partial pass */
  hbm_compact_policy *c = policy_of(h);
  hbm_compact_stats good = c->st;
  CHECK(good.compactions == 2 && good.full_compactions == 1 && good.partial_compactions == 1 &&
        good.failed_compactions == 1 && good.moved_blocks == 2 && good.moved_bytes == 2 << 20);
  CHECK(hbm_check(h) == HBM_OK);
  static const char *const what[] = {"a pass neither full nor partial", "a full pass not counted as a pass",
                                     "more failed than passes", "bytes not whole units",
                                     "fewer bytes than a unit per block", "bytes moved with no block"};
  for (int i = 0; i < 6; i++) {
    c->st = good;
    switch (i) {
      case 0: c->st.compactions++; c->st.sync_points++; break;
      case 1: c->st.full_compactions++; break;
      case 2: c->st.failed_compactions = 3; break;
      case 3: c->st.moved_bytes += 1; break;
      case 4: c->st.moved_blocks = (2 << 20) / 512 + 1; break;
      default: c->st.moved_blocks = 0; break;
    }
    int said = check_says(h, "compact: totals disagree: ");
    if (!said) fprintf(stderr, "not reported: %s\n", what[i]);
    CHECK(said);
    c->st = good;
  }
  CHECK(hbm_check(h) == HBM_OK);
  hbm_heap_destroy(h);
}

/* ---- 5. before_move only for a pass that moves ------------------------------------------ */
typedef struct hook_log { uint64_t before, moved; } hook_log;
static int log_before(void *arg, uint64_t bytes, uint64_t blocks) {
  (void)bytes, (void)blocks;
  ((hook_log *)arg)->before++;
  return 0;
}
static void log_moved(void *arg, uint64_t old_addr, uint64_t new_addr, uint64_t size, hbm_tag tag) {
  (void)old_addr, (void)new_addr, (void)size, (void)tag;
  ((hook_log *)arg)->moved++;
}

static void before_move_only_when_moving(hbm_device *sim) {
  unsigned long long n, refused = 0;
  for (n = 1; n < 10000; n++) {
    hbm_heap *h;
    hbm_handle x[8];
    uint64_t addr[8], after;
    CHECK(hbm_heap_create(sim, "compact", NULL, &h) == HBM_OK);
    for (int i = 0; i < 8; i++) CHECK(hbm_alloc_handle(h, 1 << 20, HBM_TAG_ACT, 0, &x[i]) == HBM_OK);
    for (int i = 0; i < 8; i += 2) CHECK(hbm_free_handle(h, x[i]) == HBM_OK);
    for (int i = 1; i < 8; i += 2) CHECK(hbm_handle_addr(h, x[i], &addr[i]) == HBM_OK);
    hook_log log = {0, 0};
    hbm_relocation_hooks hooks = {log_moved, log_before, &log};
    CHECK(hbm_heap_set_relocation_hooks(h, &hooks) == HBM_OK);
    host_calls = 0, fail_from = n;
    int rc = hbm_compact(h, NULL, NULL);
    fail_from = 0;
    int done = host_calls < n; /* nothing failed: the pass as it runs */
    if (done) {
      CHECK(rc == HBM_OK);
      CHECK_EQ_U64(log.before, 1);
      CHECK_EQ_U64(log.moved, 4);
    } else {
      CHECK(rc == HBM_EHOSTMEM);
      if (log.before || log.moved)
        fprintf(stderr, "allocation %llu failing: the pass failed after before_move (%llu calls) and moved %llu\n", n,
                (unsigned long long)log.before, (unsigned long long)log.moved);
      CHECK(log.before == 0 && log.moved == 0);
      for (int i = 1; i < 8; i += 2) CHECK(hbm_handle_addr(h, x[i], &after) == HBM_OK && after == addr[i]);
      refused++;
    }
    CHECK(hbm_check(h) == HBM_OK);
    hbm_heap_destroy(h);
    if (done) break;
  }
  CHECK(n < 10000 && refused >= 3); /* the layout, the plan and the rebuild each met a failure */
}

/* ---- 6. the hooks' two copies ----------------------------------------------------------- */
static int other_before(void *arg, uint64_t bytes, uint64_t blocks) {
  (void)arg, (void)bytes, (void)blocks;
  return 1;
}

/* Each way the policy's copy can part from the layer's is reported, and the
 * heap is sound again once it is put back. */
static void hooks_disagree(hbm_heap *h) {
  hbm_compact_policy *c = policy_of(h);
  hbm_before_move_fn *fn = c->before_move;
  void *arg = c->before_arg;
  c->before_move = fn ? NULL : other_before;
  CHECK(check_says(h, "handles: the policy asks a before_move hook other than the one set"));
  c->before_move = fn == log_before ? other_before : fn;
  if (fn) CHECK(check_says(h, "handles: the policy asks a before_move hook other than the one set"));
  c->before_move = fn;
  CHECK(hbm_check(h) == HBM_OK);
  static int elsewhere;
  c->before_arg = &elsewhere;
  CHECK(check_says(h, "handles: the policy passes before_move the argument"));
  c->before_arg = arg;
  CHECK(hbm_check(h) == HBM_OK);
}

static void hooks_agree(hbm_device *sim) {
  hbm_heap *h;
  CHECK(hbm_heap_create(sim, "compact", NULL, &h) == HBM_OK);
  hooks_disagree(h); /* none set */
  hook_log log = {0, 0};
  hbm_relocation_hooks hooks = {log_moved, log_before, &log};
  CHECK(hbm_heap_set_relocation_hooks(h, &hooks) == HBM_OK);
  CHECK(policy_of(h)->before_move == log_before && policy_of(h)->before_arg == &log);
  hooks_disagree(h);
  hbm_relocation_hooks moved_only = {log_moved, NULL, &log}; /* an argument, no before_move */
  CHECK(hbm_heap_set_relocation_hooks(h, &moved_only) == HBM_OK && hbm_check(h) == HBM_OK);
  hooks_disagree(h);
  CHECK(hbm_heap_set_relocation_hooks(h, NULL) == HBM_OK);
  CHECK(policy_of(h)->before_move == NULL && policy_of(h)->before_arg == NULL);
  hooks_disagree(h);
  hbm_heap_destroy(h);
}

int main(void) {
  hbm_device *sim;
  CHECK(hbm_device_open("sim:1GiB", &sim) == HBM_OK);
  growth(sim);
  free_slots(sim);
  schedule(sim);
  totals(sim);
  before_move_only_when_moving(sim);
  hooks_agree(sim);
  hbm_device_close(sim);
  return test_done("test_reloc_check");
}
