/* test_compact: nothing is lost when blocks move. A seeded random run of
 * allocations (handles), frees, pins, unpins and explicit full and partial
 * compactions on the host device (real bytes, memmove) under policy compact,
 * tight enough that requests keep failing for fragmentation. After every
 * operation that moved anything:
 *   - every live block's contents match the checksum taken when it was filled;
 *   - every handle resolves to the address the `moved` hook last reported;
 *   - the hook fired exactly once per moved block (never for a pinned one),
 *     the pass totals agree with the hook, and before_move fired once per pass;
 *   - hbm_check() passes.
 * hbm_check() also runs after every fourth operation that moved nothing:
 * after each one it would add half the test's time. A failed allocation must
 * be one that no partial plan could serve. Runs once with memmove copies and
 * partial compaction on failure, once with ordered chunked copies and full
 * compaction on failure. Then threads share one heap
 * the way a framework would: a block is pinned while its bytes are touched
 * (a kernel using it), while other threads allocate, free and compact. */
#include <pthread.h>

#include "core/addrmap.h"
#include "core/reloc.h"
#include "core/util.h"
#include "hbm.h"
#include "testutil.h"

typedef struct block {
  hbm_handle handle;
  uint64_t request, addr, sum, seed;
  hbm_tag tag;
  int pins;
  int moved;                 /* hook calls since the last verification */
} block;

typedef struct model {
  block *b;
  size_t n, cap;
  hbm_addrmap by_addr;       /* current address -> index in b */
  uint64_t hook_calls, hook_bytes, before_calls, bad_hook;
  int veto;
} model;

/* Four independent FNV-1a lanes over 32-byte strides, then the tail bytes. */
static uint64_t checksum(uint64_t addr, uint64_t n) {
  const uint64_t *w = (const uint64_t *)(uintptr_t)addr;
  uint64_t h0 = 0xcbf29ce484222325ull, h1 = h0 ^ 1, h2 = h0 ^ 2, h3 = h0 ^ 3, i = 0;
  for (; i + 4 <= n / 8; i += 4) {
    h0 = (h0 ^ w[i]) * 0x100000001b3ull;
    h1 = (h1 ^ w[i + 1]) * 0x100000001b3ull;
    h2 = (h2 ^ w[i + 2]) * 0x100000001b3ull;
    h3 = (h3 ^ w[i + 3]) * 0x100000001b3ull;
  }
  for (; i < n / 8; i++) h0 = (h0 ^ w[i]) * 0x100000001b3ull;
  const unsigned char *t = (const unsigned char *)(uintptr_t)addr;
  for (i = n & ~7ull; i < n; i++) h1 = (h1 ^ t[i]) * 0x100000001b3ull;
  return h0 ^ (h1 * 3) ^ (h2 * 5) ^ (h3 * 7);
}

static void fill(uint64_t addr, uint64_t n, uint64_t seed) {
  uint64_t *w = (uint64_t *)(uintptr_t)addr, s = seed;
  for (uint64_t i = 0; i < n / 8; i++) w[i] = test_rand(&s);
  unsigned char *t = (unsigned char *)(uintptr_t)addr;
  for (uint64_t i = n & ~7ull; i < n; i++) t[i] = (unsigned char)test_rand(&s);
}

static void on_moved(void *arg, uint64_t old_addr, uint64_t new_addr, uint64_t size, hbm_tag tag) {
  model *m = arg;
  uint64_t i;
  m->hook_calls++;
  if (!hbm_addrmap_take(&m->by_addr, old_addr, &i)) { m->bad_hook++; return; }
  block *b = &m->b[i];
  if (b->request != size || b->tag != tag || b->pins) m->bad_hook++;
  b->moved++;
  b->addr = new_addr;
  m->hook_bytes += hbm_align_up(size, 512);
  if (hbm_addrmap_put(&m->by_addr, new_addr, i) != HBM_OK) m->bad_hook++;
}

static int before_move(void *arg, uint64_t bytes, uint64_t blocks) {
  model *m = arg;
  m->before_calls++;
  return m->veto;
}

static void drop(model *m, size_t k) {
  hbm_addrmap_take(&m->by_addr, m->b[k].addr, NULL);
  m->b[k] = m->b[--m->n];
  if (k < m->n) hbm_addrmap_put(&m->by_addr, m->b[k].addr, k);
}

/* Everything the header promises, checked for every live block. */
static int verify_all(hbm_heap *h, model *m, uint64_t op, uint64_t seed) {
  int bad = 0;
  for (size_t i = 0; i < m->n; i++) {
    block *b = &m->b[i];
    uint64_t a = 0;
    if (hbm_handle_addr(h, b->handle, &a) != HBM_OK || a != b->addr) {
      fprintf(stderr, "op %llu: handle of block %zu resolves to %#llx, hook said %#llx (seed %llu)\n",
              (unsigned long long)op, i, (unsigned long long)a, (unsigned long long)b->addr, (unsigned long long)seed);
      bad++;
    } else if (checksum(a, b->request) != b->sum) {
      fprintf(stderr, "op %llu: block %zu at %#llx lost its contents (seed %llu)\n", (unsigned long long)op, i,
              (unsigned long long)a, (unsigned long long)seed);
      bad++;
    }
    if (b->moved > 1) {
      fprintf(stderr, "op %llu: hook fired %d times for one block in one pass\n", (unsigned long long)op, b->moved);
      bad++;
    }
    b->moved = 0;
    if (bad > 5) break;
  }
  if (hbm_check(h) != HBM_OK) bad++;
  return bad;
}

static uint64_t draw_size(uint64_t *rng) {
  uint64_t r = test_rand_below(rng, 100);
  if (r < 70) return 1 + test_rand_below(rng, 32 << 10);
  if (r < 95) return (32 << 10) + test_rand_below(rng, 224 << 10);
  return (256 << 10) + test_rand_below(rng, 768 << 10);
}

typedef struct totals { uint64_t ops, compactions, moved_bytes, verified, alloc_failures, pinned_free; } totals;

static int run(const char *conf, uint64_t ops, uint64_t seed, totals *t) {
  hbm_device *dev;
  if (hbm_device_open("host:4MiB", &dev) != HBM_OK) return TEST_SKIP;
  hbm_heap *h;
  CHECK(hbm_heap_create(dev, "compact", conf, &h) == HBM_OK);
  model m = {0};
  hbm_addrmap_init(&m.by_addr);
  m.cap = 4096;
  m.b = calloc(m.cap, sizeof *m.b);
  hbm_relocation_hooks hooks = {on_moved, before_move, &m};
  CHECK(hbm_heap_set_relocation_hooks(h, &hooks) == HBM_OK);
  uint64_t rng = seed, capacity = 4ull << 20, npinned = 0;
  int failed = 0;
  for (uint64_t op = 0; op < ops && !failed; op++) {
    hbm_stats st;
    hbm_heap_stats(h, &st);
    hbm_compact_stats c0, c1;
    CHECK(hbm_compact_stats_get(h, &c0) == HBM_OK);
    uint64_t calls0 = m.hook_calls, bytes0 = m.hook_bytes, before0 = m.before_calls;
    int explicit_pass = 0;
    uint64_t r = test_rand_below(&rng, 100);
    int alloc_bias = st.live < capacity * 8 / 10 ? 60 : 45;
    if (r < (uint64_t)alloc_bias || m.n == 0) {
      uint64_t size = draw_size(&rng);
      hbm_tag tag = (hbm_tag)test_rand_below(&rng, HBM_TAG_COUNT);
      hbm_handle hd;
      int rc = hbm_alloc_handle(h, size, tag, 0, &hd);
      if (rc == HBM_OK) {
        CHECK(m.n < m.cap);
        block *b = &m.b[m.n];
        *b = (block){.handle = hd, .request = size, .tag = tag, .seed = test_rand(&rng)};
        CHECK(hbm_handle_addr(h, hd, &b->addr) == HBM_OK);
        fill(b->addr, size, b->seed);
        b->sum = checksum(b->addr, size);
        CHECK(hbm_addrmap_put(&m.by_addr, b->addr, m.n) == HBM_OK);
        m.n++;
      } else {
        CHECK(rc == HBM_ENOMEM);
        t->alloc_failures++;
        /* No partial plan exists for it (on_failure:full may fail where partial would not). */
        hbm_compact_options o = {.need = size, .dry_run = 1};
        if (!strstr(conf, "on_failure:full")) CHECK(hbm_compact(h, &o, NULL) == HBM_ENOMEM);
      }
    } else if (r < 85) {
      size_t k = (size_t)test_rand_below(&rng, m.n);
      block *b = &m.b[k];
      if (b->pins) {
        CHECK(hbm_free_handle(h, b->handle) == HBM_EBUSY);
        t->pinned_free++;
      } else {
        CHECK(checksum(b->addr, b->request) == b->sum);
        t->verified++;
        if (test_rand_below(&rng, 4) == 0) {
          CHECK(hbm_free(h, b->addr) == HBM_OK); /* by address: ends the handle too */
          uint64_t a;
          CHECK(hbm_handle_addr(h, b->handle, &a) == HBM_EINVAL);
        } else {
          CHECK(hbm_free_handle(h, b->handle) == HBM_OK);
        }
        CHECK(hbm_free_handle(h, b->handle) == HBM_EINVAL); /* stale */
        drop(&m, k);
      }
    } else if (r < 92) {
      size_t k = (size_t)test_rand_below(&rng, m.n);
      block *b = &m.b[k];
      if (b->pins && (npinned > 8 || test_rand_below(&rng, 2))) {
        CHECK(hbm_unpin(h, b->handle) == HBM_OK);
        b->pins--;
        if (!b->pins) npinned--;
      } else if (npinned <= 8 || b->pins) {
        CHECK(hbm_pin(h, b->handle) == HBM_OK);
        if (!b->pins) npinned++;
        b->pins++;
      } else {
        CHECK(hbm_unpin(h, b->handle) == HBM_EINVAL); /* not pinned */
      }
    } else if (r < 93) {
      hbm_compact_options o = {0}, dry = {.dry_run = 1};
      hbm_compact_result plan, done;
      CHECK(hbm_compact(h, &dry, &plan) == HBM_OK);
      CHECK(hbm_compact(h, &o, &done) == HBM_OK);
      CHECK_EQ_U64(plan.moved_bytes, done.moved_bytes);
      CHECK_EQ_U64(plan.hole_addr, done.hole_addr);
      CHECK_EQ_U64(plan.hole_size, done.hole_size);
      CHECK_EQ_U64(plan.largest_free_after, done.largest_free_after);
      CHECK(done.moved_bytes >= done.min_moved_bytes);
      CHECK(done.largest_free_after >= done.largest_free_before);
      explicit_pass = 1;
    } else if (r < 95) {
      hbm_stats s2;
      hbm_heap_stats(h, &s2);
      uint64_t free_b = capacity - s2.allocated;
      if (free_b > s2.largest_free + 512) {
        uint64_t need = s2.largest_free + 1 + test_rand_below(&rng, free_b - s2.largest_free);
        hbm_compact_options o = {.need = need}, dry = {.need = need, .dry_run = 1};
        hbm_compact_result plan, done;
        int rc1 = hbm_compact(h, &dry, &plan), rc2 = hbm_compact(h, &o, &done);
        CHECK(rc1 == rc2);
        if (rc2 == HBM_OK) {
          /* a dry run reports what the pass does: the hole is all the free
           * run it opens, and the largest free block after is what it leaves */
          hbm_stats s3;
          hbm_heap_stats(h, &s3);
          CHECK_EQ_U64(done.largest_free_after, s3.largest_free);
          CHECK(plan.kind == done.kind);
          CHECK_EQ_U64(plan.hole_addr, done.hole_addr);
          CHECK_EQ_U64(plan.hole_size, done.hole_size);
          CHECK_EQ_U64(plan.largest_free_after, done.largest_free_after);
          CHECK_EQ_U64(done.hole_size, s3.largest_free);
          CHECK_EQ_U64(plan.moved_bytes, done.moved_bytes);
          CHECK(done.moved_bytes >= done.min_moved_bytes);
          CHECK(done.largest_free_after >= need);
        } else {
          CHECK(rc2 == HBM_ENOMEM);
        }
        explicit_pass = 1;
      }
    } else {
      if (m.n) {
        size_t k = (size_t)test_rand_below(&rng, m.n);
        uint64_t a;
        CHECK(hbm_handle_addr(h, m.b[k].handle, &a) == HBM_OK && a == m.b[k].addr);
      }
    }
    if (m.bad_hook) {
      fprintf(stderr, "op %llu: the moved hook reported a block the model does not hold there, a pinned block, or the wrong size/tag (seed %llu)\n",
              (unsigned long long)op, (unsigned long long)seed);
      failed = 1;
    }
    CHECK(hbm_compact_stats_get(h, &c1) == HBM_OK);
    CHECK_EQ_U64(c1.moved_blocks - c0.moved_blocks, m.hook_calls - calls0);
    CHECK_EQ_U64(c1.moved_bytes - c0.moved_bytes, m.hook_bytes - bytes0);
    CHECK_EQ_U64(c1.sync_points - c0.sync_points, m.before_calls - before0);
    CHECK(c1.sync_points - c0.sync_points <= 1);
    t->compactions += c1.sync_points - c0.sync_points;
    t->moved_bytes += c1.moved_bytes - c0.moved_bytes;
    if (m.hook_calls != calls0 || explicit_pass || op % 4096 == 0) {
      if (verify_all(h, &m, op, seed)) failed = 1;
    } else if (op % 4 == 0 && hbm_check(h) != HBM_OK) {
      fprintf(stderr, "op %llu: hbm_check() failed (seed %llu)\n", (unsigned long long)op, (unsigned long long)seed);
      failed = 1;
    }
    if (test_failures_) failed = 1;
  }
  /* A refused pass moves nothing; an allocation that needed it fails. */
  m.veto = 1;
  hbm_compact_options full = {0};
  hbm_compact_result res;
  memset(&res, 0xa5, sizeof res);
  uint64_t calls0 = m.hook_calls;
  int rc = hbm_compact(h, &full, &res);
  CHECK(rc == HBM_OK || rc == HBM_EBUSY);
  if (rc == HBM_OK) CHECK_EQ_U64(res.moved_blocks, 0);
  else CHECK_EQ_U64(res.moved_blocks, 0xa5a5a5a5a5a5a5a5ull); /* refused: untouched, not the plan's figures */
  CHECK_EQ_U64(m.hook_calls, calls0);
  CHECK(verify_all(h, &m, ops, seed) == 0);
  m.veto = 0;
  for (size_t i = 0; i < m.n; i++)
    while (m.b[i].pins) { CHECK(hbm_unpin(h, m.b[i].handle) == HBM_OK); m.b[i].pins--; }
  CHECK(hbm_compact(h, &full, &res) == HBM_OK);
  CHECK_EQ_U64(res.pinned_blocks, 0);
  CHECK(verify_all(h, &m, ops, seed) == 0);
  hbm_stats st;
  hbm_heap_stats(h, &st);
  CHECK_EQ_U64(st.largest_free, capacity - st.allocated); /* fully compact: one hole */
  t->ops += ops;
  hbm_heap_destroy(h);
  hbm_device_close(dev);
  hbm_addrmap_release(&m.by_addr);
  free(m.b);
  return failed ? 1 : 0;
}

static int count_before(void *arg, uint64_t bytes, uint64_t blocks) {
  (void)bytes, (void)blocks;
  ++*(uint64_t *)arg;
  return 0;
}

static int refuse_before(void *arg, uint64_t bytes, uint64_t blocks) {
  (void)arg, (void)bytes, (void)blocks;
  return 1;
}

static int count_refuse(void *arg, uint64_t bytes, uint64_t blocks) {
  (void)bytes, (void)blocks;
  ++*(uint64_t *)arg;
  return 1;
}

static char last_message[256];
static void keep_message(int err, const char *message, void *arg) {
  (void)err, (void)arg;
  snprintf(last_message, sizeof last_message, "%s", message);
}

static void count_moved(void *arg, uint64_t old_addr, uint64_t new_addr, uint64_t size, hbm_tag tag) {
  (void)old_addr, (void)new_addr, (void)size, (void)tag;
  ++*(uint64_t *)arg;
}

/* A freed handle stays refused after the next allocation reuses its slot
 * (with a new generation), and each refusal names the call and the handle;
 * hooks cleared with NULL are called no more. */
static void handle_reuse_and_hooks(hbm_device *sim) {
  hbm_heap *h;
  uint64_t a;
  char want[128];
  CHECK(hbm_heap_create(sim, "compact", "on_failure:off", &h) == HBM_OK);
  hbm_handle old = 0, reused = 0;
  CHECK(hbm_alloc_handle(h, 1 << 20, HBM_TAG_PARAM, 0, &old) == HBM_OK);
  CHECK(hbm_free_handle(h, old) == HBM_OK);
  /* never issued: the freed slot's next generation, and a slot far past those issued */
  CHECK(hbm_handle_addr(h, old + (1ull << 32), &a) == HBM_EINVAL);
  CHECK(hbm_handle_addr(h, (1ull << 32) | 0xfffffff0u, &a) == HBM_EINVAL);
  CHECK(hbm_alloc_handle(h, 1 << 20, HBM_TAG_PARAM, 0, &reused) == HBM_OK);
  CHECK((reused & 0xffffffffu) == (old & 0xffffffffu) && reused != old); /* the slot is reused */
  hbm_set_error_handler(keep_message, NULL);
  CHECK(hbm_handle_addr(h, old, &a) == HBM_EINVAL);
  snprintf(want, sizeof want, "handle_addr: handle %#llx is not live (freed, or never issued)", (unsigned long long)old);
  CHECK(!strcmp(last_message, want));
  CHECK(hbm_pin(h, old) == HBM_EINVAL);
  snprintf(want, sizeof want, "pin: handle %#llx is not live (freed, or never issued)", (unsigned long long)old);
  CHECK(!strcmp(last_message, want));
  CHECK(hbm_free_handle(h, old) == HBM_EINVAL);
  snprintf(want, sizeof want, "free_handle: handle %#llx is not live (freed, or never issued)", (unsigned long long)old);
  CHECK(!strcmp(last_message, want));
  CHECK(hbm_unpin(h, reused) == HBM_EINVAL);
  snprintf(want, sizeof want, "unpin: handle %#llx is not pinned", (unsigned long long)reused);
  CHECK(!strcmp(last_message, want));
  /* a pinned block's free says why it is refused, by handle and by address */
  CHECK(hbm_pin(h, reused) == HBM_OK);
  CHECK(hbm_handle_addr(h, reused, &a) == HBM_OK);
  CHECK(hbm_free_handle(h, reused) == HBM_EBUSY);
  snprintf(want, sizeof want, "free of %#llx: the block is pinned (unpin it first)", (unsigned long long)a);
  CHECK(!strcmp(last_message, want));
  last_message[0] = 0;
  CHECK(hbm_free(h, a) == HBM_EBUSY);
  CHECK(!strcmp(last_message, want));
  CHECK(hbm_unpin(h, reused) == HBM_OK);
  hbm_set_error_handler(NULL, NULL);
  CHECK(hbm_handle_addr(h, reused, &a) == HBM_OK);
  /* hooks set, then cleared: a pass that moves a block calls neither */
  uint64_t moved = 0;
  hbm_relocation_hooks hk = {count_moved, count_before, &moved};
  CHECK(hbm_heap_set_relocation_hooks(h, &hk) == HBM_OK);
  hbm_handle x[2];
  CHECK(hbm_alloc_handle(h, 1 << 20, HBM_TAG_ACT, 0, &x[0]) == HBM_OK);
  CHECK(hbm_alloc_handle(h, 1 << 20, HBM_TAG_ACT, 0, &x[1]) == HBM_OK);
  CHECK(hbm_free_handle(h, reused) == HBM_OK);
  hbm_compact_result r;
  CHECK(hbm_compact(h, NULL, &r) == HBM_OK && r.moved_blocks == 2);
  CHECK_EQ_U64(moved, 3); /* two moves, one before_move: both counted in `moved` */
  CHECK(hbm_heap_set_relocation_hooks(h, NULL) == HBM_OK);
  CHECK(hbm_free_handle(h, x[0]) == HBM_OK);
  CHECK(hbm_compact(h, NULL, &r) == HBM_OK && r.moved_blocks == 1);
  CHECK_EQ_U64(moved, 3);
  CHECK(hbm_check(h) == HBM_OK);
  hbm_heap_destroy(h);
  /* a policy that never moves blocks says so, naming the call */
  CHECK(hbm_heap_create(sim, "bestfit", NULL, &h) == HBM_OK);
  hbm_set_error_handler(keep_message, NULL);
  CHECK(hbm_compact(h, NULL, NULL) == HBM_EUNSUPPORTED);
  CHECK(!strcmp(last_message, "compact: policy bestfit never moves blocks (use policy compact)"));
  hbm_set_error_handler(NULL, NULL);
  hbm_heap_destroy(h);
}

/* A freed handle stays refused however often its slot is reused: a slot
 * whose 2^32 - 1 generations were all issued is retired, not wrapped round
 * to the generations of handles freed long before. The slot is aged here
 * rather than freed 2^32 times. */
static void handle_generations_end(hbm_device *sim) {
  hbm_heap *h;
  hbm_reloc *r = NULL;
  uint64_t a;
  CHECK(hbm_heap_create(sim, "compact", "on_failure:off", &h) == HBM_OK);
  hbm_handle first, last, next;
  CHECK(hbm_alloc_handle(h, 4096, HBM_TAG_TEMP, 0, &first) == HBM_OK);
  CHECK(hbm_free_handle(h, first) == HBM_OK);
  uint32_t slot = (uint32_t)first - 1;
  CHECK(hbm_heap_enter(h, &r) != NULL && r != NULL && slot < r->nslots);
  r->slots[slot].gen = UINT32_MAX; /* the next allocation takes the last generation */
  hbm_heap_leave(h);
  CHECK(hbm_alloc_handle(h, 4096, HBM_TAG_TEMP, 0, &last) == HBM_OK);
  CHECK(last == ((uint64_t)UINT32_MAX << 32 | (uint32_t)first));
  CHECK(hbm_free_handle(h, last) == HBM_OK);
  CHECK(hbm_check(h) == HBM_OK);
  for (int i = 0; i < 4; i++) {
    CHECK(hbm_alloc_handle(h, 4096, HBM_TAG_TEMP, 0, &next) == HBM_OK);
    CHECK((uint32_t)next != (uint32_t)first); /* another slot */
    CHECK(hbm_handle_addr(h, first, &a) == HBM_EINVAL && hbm_handle_addr(h, last, &a) == HBM_EINVAL);
    CHECK(hbm_check(h) == HBM_OK);
    CHECK(hbm_free_handle(h, next) == HBM_OK);
  }
  CHECK(hbm_check(h) == HBM_OK);
  hbm_heap_destroy(h);
}

static void api_edges(void) {
  hbm_device *sim;
  hbm_heap *h;
  CHECK(hbm_device_open("sim:1GiB", &sim) == HBM_OK);
  /* Policies that never move blocks say so. */
  hbm_handle hd = 0;
  static const char *const unmoving[] = {"bestfit", "caching", "expandable", "zoned"};
  for (size_t i = 0; i < sizeof unmoving / sizeof unmoving[0]; i++) {
    CHECK(hbm_heap_create(sim, unmoving[i], NULL, &h) == HBM_OK);
    CHECK(hbm_alloc_handle(h, 4096, HBM_TAG_ACT, 0, &hd) == HBM_EUNSUPPORTED && hd == 0);
    CHECK(hbm_compact(h, NULL, NULL) == HBM_EUNSUPPORTED);
    CHECK(hbm_heap_set_relocation_hooks(h, NULL) == HBM_EUNSUPPORTED);
    hbm_heap_destroy(h);
  }
  /* Bad settings are refused with a message. */
  CHECK(hbm_heap_create(sim, "compact", "every_steps:x", &h) == HBM_EINVAL);
  CHECK(hbm_heap_create(sim, "compact", "on_failure:sometimes", &h) == HBM_EINVAL);
  CHECK(hbm_heap_create(sim, "compact", "every_steps:18446744073709551616", &h) == HBM_EINVAL); /* not "never" */
  static const char *const bad_steps[] = {"every_steps:", "every_steps:+1", "every_steps:-1", "every_steps: 1", "every_steps:1x"};
  for (size_t i = 0; i < sizeof bad_steps / sizeof bad_steps[0]; i++)
    CHECK(hbm_heap_create(sim, "compact", bad_steps[i], &h) == HBM_EINVAL);
  static const char *const good_steps[] = {"every_steps:0", "every_steps:9", "every_steps:18446744073709551615"};
  for (size_t i = 0; i < sizeof good_steps / sizeof good_steps[0]; i++) {
    CHECK(hbm_heap_create(sim, "compact", good_steps[i], &h) == HBM_OK);
    hbm_heap_destroy(h);
  }
  /* A pass at each multiple of N only, also where the next multiple lies
   * past 2^64 - 1: N above 2^63 has one multiple, and N = 1000 none after
   * 18446744073709551000 (the next one wrapped to a small number once, and
   * every later mark ran a pass). */
  static const struct { const char *conf; uint64_t first; } last_multiple[] = {
      {"every_steps:9223372036854775809", 9223372036854775809ull}, {"every_steps:1000", 18446744073709551000ull}};
  for (size_t i = 0; i < sizeof last_multiple / sizeof last_multiple[0]; i++) {
    CHECK(hbm_heap_create(sim, "compact", last_multiple[i].conf, &h) == HBM_OK);
    hbm_compact_stats cs;
    for (uint64_t s = last_multiple[i].first; s < last_multiple[i].first + 4; s++) CHECK(hbm_heap_step(h, s) == HBM_OK);
    CHECK(hbm_compact_stats_get(h, &cs) == HBM_OK);
    CHECK_EQ_U64(cs.full_compactions, 1);
    hbm_heap_destroy(h);
  }
  CHECK(hbm_heap_create(sim, "compact", "every_steps:500,on_failure:off", &h) == HBM_OK);
  /* Handles: 0, stale and foreign handles are refused. */
  uint64_t a;
  CHECK(hbm_handle_addr(h, 0, &a) == HBM_EINVAL);
  CHECK(hbm_alloc_handle(h, 1 << 20, HBM_TAG_PARAM, 0, &hd) == HBM_OK && hd != 0);
  CHECK(hbm_handle_addr(h, hd + (1ull << 32), &a) == HBM_EINVAL);
  CHECK(hbm_handle_addr(h, hd + 1, &a) == HBM_EINVAL);
  CHECK(hbm_unpin(h, hd) == HBM_EINVAL);
  CHECK(hbm_pin(h, hd) == HBM_OK && hbm_pin(h, hd) == HBM_OK);
  CHECK(hbm_free_handle(h, hd) == HBM_EBUSY);
  CHECK(hbm_unpin(h, hd) == HBM_OK);
  CHECK(hbm_free_handle(h, hd) == HBM_EBUSY);
  CHECK(hbm_unpin(h, hd) == HBM_OK);
  CHECK(hbm_free_handle(h, hd) == HBM_OK);
  CHECK(hbm_free_handle(h, hd) == HBM_EINVAL);
  /* on_failure:off: a fragmented request fails, an explicit partial pass serves it. */
  hbm_handle x[3];
  CHECK(hbm_alloc_handle(h, 256 << 20, HBM_TAG_ACT, 0, &x[0]) == HBM_OK);
  CHECK(hbm_alloc_handle(h, 256 << 20, HBM_TAG_ACT, 0, &x[1]) == HBM_OK);
  CHECK(hbm_alloc_handle(h, 256 << 20, HBM_TAG_ACT, 0, &x[2]) == HBM_OK);
  CHECK(hbm_free_handle(h, x[1]) == HBM_OK); /* holes: 256 MiB between, 256 MiB on top */
  CHECK(hbm_alloc(h, 384 << 20, HBM_TAG_COMM, 0, &a) == HBM_ENOMEM);
  hbm_compact_options o = {.need = 384 << 20};
  hbm_compact_result r;
  CHECK(hbm_compact(h, &o, &r) == HBM_OK);
  CHECK_EQ_U64(r.moved_bytes, 256 << 20);
  CHECK_EQ_U64(r.min_moved_bytes, 256 << 20);
  CHECK_EQ_U64(r.moved_blocks, 1);
  CHECK(hbm_alloc(h, 384 << 20, HBM_TAG_COMM, 0, &a) == HBM_OK);
  /* Capacity is not fragmentation: no pass can serve it, however large. */
  o.need = 600 << 20;
  CHECK(hbm_compact(h, &o, &r) == HBM_ENOMEM);
  CHECK_EQ_U64(r.moved_bytes, 256 << 20); /* untouched on error */
  o.need = UINT64_MAX;
  CHECK(hbm_compact(h, &o, &r) == HBM_ENOMEM);
  o.dry_run = 1;
  CHECK(hbm_compact(h, &o, &r) == HBM_ENOMEM);
  CHECK(hbm_check(h) == HBM_OK);
  hbm_compact_stats s;
  CHECK(hbm_compact_stats_get(h, &s) == HBM_OK);
  CHECK_EQ_U64(s.sync_points, 1);
  CHECK_EQ_U64(s.failed_compactions, 2); /* dry runs are not counted */
  hbm_heap_destroy(h);
  /* every_steps:N moves blocks inside hbm_heap_step (hbm.h lists it among the
   * calls that may move): one sync point, handles follow. */
  CHECK(hbm_heap_create(sim, "compact", "every_steps:2", &h) == HBM_OK);
  uint64_t before_calls = 0, a0, a1;
  hbm_relocation_hooks hk = {NULL, count_before, &before_calls};
  CHECK(hbm_heap_set_relocation_hooks(h, &hk) == HBM_OK);
  CHECK(hbm_alloc_handle(h, 1 << 20, HBM_TAG_ACT, 0, &x[0]) == HBM_OK);
  CHECK(hbm_alloc_handle(h, 1 << 20, HBM_TAG_ACT, 0, &x[1]) == HBM_OK);
  CHECK(hbm_handle_addr(h, x[1], &a0) == HBM_OK && hbm_free_handle(h, x[0]) == HBM_OK);
  CHECK(hbm_heap_step(h, 1) == HBM_OK && before_calls == 0);
  CHECK(hbm_heap_step(h, 2) == HBM_OK && before_calls == 1);
  CHECK(hbm_handle_addr(h, x[1], &a1) == HBM_OK && a1 == a0 - (1 << 20));
  CHECK(hbm_compact_stats_get(h, &s) == HBM_OK);
  CHECK_EQ_U64(s.full_compactions, 1);
  /* The next pass is due at the next multiple of N: steps 4 and 6, not 3 or
   * 5; a mark that skips ahead (11) is due at once, and the one after is the
   * next multiple (12). */
  static const struct { uint64_t step, passes; } due[] = {{3, 1}, {4, 2}, {5, 2}, {6, 3}, {11, 4}, {12, 5}, {13, 5}};
  for (size_t i = 0; i < sizeof due / sizeof due[0]; i++) {
    CHECK(hbm_heap_step(h, due[i].step) == HBM_OK);
    CHECK(hbm_compact_stats_get(h, &s) == HBM_OK);
    CHECK_EQ_U64(s.full_compactions, due[i].passes);
  }
  /* A number that goes back, or comes again, is refused and runs no pass,
   * even where it is a multiple of N (hbm.h: numbers only go forward). */
  CHECK(hbm_heap_step(h, 4) == HBM_EINVAL && hbm_heap_step(h, 13) == HBM_EINVAL);
  CHECK(hbm_compact_stats_get(h, &s) == HBM_OK);
  CHECK_EQ_U64(s.full_compactions, 5);
  CHECK(hbm_heap_step(h, 14) == HBM_OK);
  CHECK(hbm_compact_stats_get(h, &s) == HBM_OK);
  CHECK_EQ_U64(s.full_compactions, 6);
  /* A periodic pass before_move refuses is skipped: the mark is taken
   * (HBM_OK), nothing moves, and the next pass is due at the next multiple. */
  hbm_handle y0;
  uint64_t y_at, y_now;
  CHECK(hbm_alloc_handle(h, 1 << 20, HBM_TAG_ACT, 0, &y0) == HBM_OK);
  CHECK(hbm_alloc_handle(h, 1 << 20, HBM_TAG_ACT, 0, &x[0]) == HBM_OK);
  CHECK(hbm_handle_addr(h, x[0], &y_at) == HBM_OK && hbm_free_handle(h, y0) == HBM_OK);
  uint64_t refusals = 0;
  hbm_relocation_hooks no = {NULL, count_refuse, &refusals};
  CHECK(hbm_heap_set_relocation_hooks(h, &no) == HBM_OK);
  CHECK(hbm_heap_step(h, 16) == HBM_OK && refusals == 1);
  CHECK(hbm_heap_step(h, 16) == HBM_EINVAL); /* the mark was taken */
  CHECK(hbm_handle_addr(h, x[0], &y_now) == HBM_OK && y_now == y_at);
  CHECK(hbm_heap_step(h, 17) == HBM_OK && refusals == 1);
  CHECK(hbm_heap_set_relocation_hooks(h, &hk) == HBM_OK);
  CHECK(hbm_heap_step(h, 18) == HBM_OK);
  CHECK(hbm_handle_addr(h, x[0], &y_now) == HBM_OK && y_now < y_at);
  CHECK(hbm_free_handle(h, x[0]) == HBM_OK);
  CHECK(hbm_compact_stats_get(h, &s) == HBM_OK);
  CHECK_EQ_U64(s.full_compactions, 8); /* the refused pass counts as run, and failed */
  CHECK(hbm_check(h) == HBM_OK);
  hbm_heap_destroy(h);
  /* A request as large as all the free bytes together is compacted for (the
   * holes of blocks 1 and 3 open into one). When the blocks that would move
   * are pinned, or before_move refuses the pass, it fails as the request's own
   * failure, HBM_ENOMEM. */
  hbm_handle y[4];
  enum { GO, PINNED, REFUSED };
  for (int how = GO; how <= REFUSED; how++) {
    CHECK(hbm_heap_create(sim, "compact", NULL, &h) == HBM_OK);
    hbm_relocation_hooks refuse = {NULL, refuse_before, NULL};
    if (how == REFUSED) CHECK(hbm_heap_set_relocation_hooks(h, &refuse) == HBM_OK);
    for (int i = 0; i < 4; i++) CHECK(hbm_alloc_handle(h, 256 << 20, HBM_TAG_ACT, 0, &y[i]) == HBM_OK);
    CHECK(hbm_free_handle(h, y[1]) == HBM_OK && hbm_free_handle(h, y[3]) == HBM_OK);
    if (how == PINNED) CHECK(hbm_pin(h, y[0]) == HBM_OK && hbm_pin(h, y[2]) == HBM_OK);
    CHECK(hbm_alloc(h, 512 << 20, HBM_TAG_COMM, 0, &a) == (how == GO ? HBM_OK : HBM_ENOMEM));
    CHECK(hbm_compact_stats_get(h, &s) == HBM_OK);
    CHECK_EQ_U64(s.moved_blocks, how == GO);
    CHECK_EQ_U64(s.compactions, 1);
    CHECK_EQ_U64(s.partial_compactions, 1);
    CHECK_EQ_U64(s.sync_points, how == GO);
    CHECK_EQ_U64(s.failed_compactions, how != GO); /* a refused pass too (hbm.h) */
    CHECK(hbm_check(h) == HBM_OK);
    if (how == REFUSED) { /* and one hbm_compact asked for */
      CHECK(hbm_compact(h, NULL, NULL) == HBM_EBUSY);
      CHECK(hbm_compact_stats_get(h, &s) == HBM_OK);
      CHECK(s.compactions == 2 && s.full_compactions == 1 && s.failed_compactions == 2 && s.sync_points == 0);
      CHECK_EQ_U64(s.moved_bytes, 0);
      CHECK_EQ_U64(s.min_moved_bytes, 0);
      CHECK(hbm_check(h) == HBM_OK);
    }
    if (how == PINNED) CHECK(hbm_unpin(h, y[0]) == HBM_OK && hbm_unpin(h, y[2]) == HBM_OK);
    hbm_heap_destroy(h);
  }
  /* on_failure:full behind a pinned wall: sliding the one movable block down
   * would leave 256 MiB on each side of the pin, short of 384 MiB. The request
   * fails as the heap was (hbm_alloc: unchanged on HBM_ENOMEM), with no sync
   * point and nothing moved, a failed pass. */
  CHECK(hbm_heap_create(sim, "compact", "on_failure:full", &h) == HBM_OK);
  uint64_t moved_calls = 0;
  for (int i = 0; i < 4; i++) CHECK(hbm_alloc_handle(h, 256 << 20, HBM_TAG_ACT, 0, &y[i]) == HBM_OK);
  CHECK(hbm_free_handle(h, y[0]) == HBM_OK && hbm_free_handle(h, y[3]) == HBM_OK && hbm_pin(h, y[2]) == HBM_OK);
  hbm_relocation_hooks moved_only = {count_moved, NULL, &moved_calls};
  CHECK(hbm_heap_set_relocation_hooks(h, &moved_only) == HBM_OK);
  CHECK(hbm_handle_addr(h, y[1], &a0) == HBM_OK);
  CHECK(hbm_alloc(h, 384 << 20, HBM_TAG_COMM, 0, &a) == HBM_ENOMEM);
  CHECK(hbm_handle_addr(h, y[1], &a1) == HBM_OK && a1 == a0);
  CHECK_EQ_U64(moved_calls, 0);
  CHECK(hbm_compact_stats_get(h, &s) == HBM_OK);
  CHECK_EQ_U64(s.moved_blocks, 0);
  CHECK_EQ_U64(s.sync_points, 0);
  CHECK_EQ_U64(s.full_compactions, 1);
  CHECK_EQ_U64(s.failed_compactions, 1);
  CHECK(hbm_check(h) == HBM_OK);
  CHECK(hbm_unpin(h, y[2]) == HBM_OK);
  hbm_heap_destroy(h);
  handle_reuse_and_hooks(sim);
  handle_generations_end(sim);
  hbm_device_close(sim);
}

/* ---- threads: pin while touching, move freely otherwise ---- */
typedef struct shared { hbm_heap *heap; uint64_t seed, ops; int bad; uint64_t passes; } shared;
typedef struct worker_arg { shared *sh; int id; } worker_arg;

static void *worker(void *p) {
  worker_arg *w = p;
  shared *sh = w->sh;
  uint64_t rng = sh->seed + (uint64_t)w->id * 0x9E3779B97F4A7C15ull;
  enum { MAX = 48 };
  hbm_handle h[MAX];
  uint64_t size[MAX], sum[MAX];
  int n = 0;
  for (uint64_t op = 0; op < sh->ops; op++) {
    uint64_t r = test_rand_below(&rng, 100), a;
    if (w->id == 0 && r < 3) { /* one thread also compacts on purpose */
      hbm_compact_options o = {.need = r == 0 ? 0 : 64 << 10};
      int rc = hbm_compact(sh->heap, &o, NULL);
      if (rc != HBM_OK && rc != HBM_ENOMEM) sh->bad++;
      continue;
    }
    if (n < MAX && (n == 0 || r < 55)) {
      uint64_t s = 1 + test_rand_below(&rng, 64 << 10);
      if (hbm_alloc_handle(sh->heap, s, HBM_TAG_ACT, 0, &h[n]) != HBM_OK) continue;
      if (hbm_pin(sh->heap, h[n]) != HBM_OK || hbm_handle_addr(sh->heap, h[n], &a) != HBM_OK) { sh->bad++; continue; }
      fill(a, s, rng);
      sum[n] = checksum(a, s);
      hbm_unpin(sh->heap, h[n]);
      size[n++] = s;
    } else {
      int k = (int)test_rand_below(&rng, (uint64_t)n);
      if (hbm_pin(sh->heap, h[k]) != HBM_OK || hbm_handle_addr(sh->heap, h[k], &a) != HBM_OK) { sh->bad++; continue; }
      if (checksum(a, size[k]) != sum[k]) sh->bad++;
      if (hbm_free_handle(sh->heap, h[k]) != HBM_EBUSY) sh->bad++; /* pinned */
      hbm_unpin(sh->heap, h[k]);
      if (hbm_free_handle(sh->heap, h[k]) != HBM_OK) sh->bad++;
      h[k] = h[--n];
      size[k] = size[n];
      sum[k] = sum[n];
    }
  }
  for (int k = 0; k < n; k++) {
    uint64_t a;
    hbm_pin(sh->heap, h[k]);
    if (hbm_handle_addr(sh->heap, h[k], &a) != HBM_OK || checksum(a, size[k]) != sum[k]) sh->bad++;
    hbm_unpin(sh->heap, h[k]);
    hbm_free_handle(sh->heap, h[k]);
  }
  return NULL;
}

static void threaded(uint64_t seed, uint64_t ops) {
  enum { THREADS = 4 };
  hbm_device *dev;
  if (hbm_device_open("host:4MiB", &dev) != HBM_OK) return;
  shared sh = {.seed = seed, .ops = ops};
  CHECK(hbm_heap_create(dev, "compact", NULL, &sh.heap) == HBM_OK);
  pthread_t t[THREADS];
  worker_arg args[THREADS];
  for (int i = 0; i < THREADS; i++) {
    args[i] = (worker_arg){&sh, i};
    pthread_create(&t[i], NULL, worker, &args[i]);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  hbm_compact_stats st;
  CHECK(hbm_compact_stats_get(sh.heap, &st) == HBM_OK);
  printf("test_compact: %d threads, %llu operations each: %llu passes moved data, %d failures\n", THREADS,
         (unsigned long long)ops, (unsigned long long)st.sync_points, sh.bad);
  CHECK(sh.bad == 0);
  CHECK(st.sync_points > 0);
  CHECK(hbm_check(sh.heap) == HBM_OK);
  hbm_heap_destroy(sh.heap);
  hbm_device_close(dev);
}

int main(void) {
  uint64_t seed = test_seed("test_compact");
  api_edges();
  uint64_t ops = (uint64_t)(100000 * test_scale());
  if (ops < 1000) ops = 1000;
  totals t = {0};
  int rc = run("", ops, seed, &t);
  if (rc == TEST_SKIP) {
    printf("test_compact: skipped: this kernel has no memfd_create\n");
    return TEST_SKIP;
  }
  if (rc == 0) rc = run("ordered_copies:1,on_failure:full", ops / 4 + 1, seed ^ 0x5bd1e995, &t);
  printf("test_compact: %llu operations, %llu passes moved %llu bytes, %llu allocations failed, %llu blocks "
         "verified on free, %llu frees of pinned blocks refused\n",
         (unsigned long long)t.ops, (unsigned long long)t.compactions, (unsigned long long)t.moved_bytes,
         (unsigned long long)t.alloc_failures, (unsigned long long)t.verified, (unsigned long long)t.pinned_free);
  CHECK(rc == 0);
  CHECK(t.compactions > 100);
  threaded(seed, ops / 8 + 100);
  return test_done("test_compact");
}
