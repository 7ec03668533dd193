/* test_zoned_check: every failure zoned's invariant check (zoned_check, the
 * invariants Z1-Z9 written beside it in src/policy/zoned.c) can report, made
 * to fire, white-box.
 *   1. A heap on a full device: large blocks with chunks of their own, one
 *      freed and its chunk stitched into a small zone's page (the hole it
 *      left has an unmapped page below the top), a small block with a
 *      lifetime record. One field at a time is broken and hbm_check() must
 *      answer HBM_ECORRUPT with the invariant's message, figures included:
 *      Z1 page entries, chunk records, the Fenwick tree and the placement
 *      cost's counts; Z2 edge counts and touched pages mapped; Z3 touched
 *      counts and idle bits; Z4 the totals and their peaks; Z5 lifetime
 *      records and the lifetime rule; Z7 largest free against its walk page
 *      by page; Z8 the ranges' order and sizes and the small zones
 *      remembered; Z9 the layout scan's order and sums.
 *   2. A job whose steps repeat, on its plan: Z6 (the plan's range, its
 *      address index and its spans) and Z3 (a free chunk record marked idle:
 *      the chunks the plan replaced are given back).
 *   3. small:off: a block under a granule with no lifetime record (Z5).
 *   4. Fixed zones (vmm:off): lifetime records against live blocks and the
 *      free list (Z5).
 *   5. Host memory running out inside the check is no verdict: HBM_EHOSTMEM,
 *      never HBM_ECORRUPT, at each allocation the check makes.
 *   6. (between 1 and 2 in the run) A Fenwick tree that cannot grow for want
 *      of host memory is dropped, and the heap is sound without it.
 * After each break the field is put back and hbm_check() must pass again.
 * Not made to fire: Z9's two holes side by side, which no state of zoned's
 * shows (scan_one joins chunks side by side into one run, and vspace keeps
 * holes a live block apart): it guards scan_one's joining.
 *
 * zoned's state is private to zoned.c, so this test compiles zoned.c itself
 * (the #include below): the program's zoned policy is this copy (the
 * library's object, which defines nothing else, is then not linked in), and
 * the test reads and writes its struct and calls its functions directly. */
#include "policy/zoned.c"

#include "core/reloc.h"
#include "hbm.h"
#include "testutil.h"

#define MiB (1ull << 20)

/* ---- the wrapped calloc: the fail_at-th call from the count's start fails ---- */
void *__real_calloc(size_t n, size_t size);
static unsigned long long calloc_calls, fail_at; /* fail_at 0: none fails */
void *__wrap_calloc(size_t n, size_t size) {
  if (fail_at && ++calloc_calls == fail_at) return NULL;
  return __real_calloc(n, size);
}

/* Every message of the last check, one a line. */
static char said[16384];
static size_t said_len;
static void keep_error(int err, const char *message, void *arg) {
  (void)arg, (void)err;
  if (said_len < sizeof said - 1) said_len += (size_t)snprintf(said + said_len, sizeof said - said_len, "%s\n", message);
  if (said_len > sizeof said - 1) said_len = sizeof said - 1;
}

static int run_check(hbm_heap *h) {
  said[0] = 0, said_len = 0;
  hbm_set_error_handler(keep_error, NULL);
  int rc = hbm_check(h);
  hbm_set_error_handler(NULL, NULL);
  return rc;
}

static unsigned shown;

/* hbm_check(h) fails, and one of its messages holds `want`. */
static int check_says(hbm_heap *h, const char *want) {
  int rc = run_check(h);
  if (rc == HBM_ECORRUPT && strstr(said, want)) {
    printf("  reported: %s\n", want);
    shown++;
    return 1;
  }
  fprintf(stderr, "hbm_check: %d, expected HBM_ECORRUPT with \"%s\"; it said:\n%s", rc, want, said);
  return 0;
}

/* The same, with the message made from a format. */
static int check_saysf(hbm_heap *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int check_saysf(hbm_heap *h, const char *fmt, ...) {
  char want[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(want, sizeof want, fmt, ap);
  va_end(ap);
  return check_says(h, want);
}

/* hbm_check(h) passes: after a break is put back, and before any. */
static int sound(hbm_heap *h) {
  int rc = run_check(h);
  if (rc == HBM_OK) return 1;
  fprintf(stderr, "hbm_check: %d on a sound heap; it said:\n%s", rc, said);
  return 0;
}

static zoned *zoned_of(hbm_heap *h) {
  hbm_reloc *r;
  hbm_policy *p = hbm_heap_enter(h, &r);
  hbm_heap_leave(h);
  return p->cls == &hbm_policy_zoned ? (zoned *)p : NULL;
}

static int idle_bit(const zoned *z, uint32_t c) { return (int)(z->idle_bits[c / 64] >> (c % 64) & 1); }
static void flip_idle_bit(zoned *z, uint32_t c) { z->idle_bits[c / 64] ^= 1ull << (c % 64); }

/* A field broken, hbm_check() made to say `want`, the field put back and
 * the heap sound again. */
#define BREAK(h, field, bad, ...)                \
  do {                                           \
    __typeof__(field) good_ = (field);           \
    (field) = (bad);                             \
    CHECK(check_saysf((h), __VA_ARGS__));        \
    (field) = good_;                             \
    CHECK(sound(h));                             \
  } while (0)

/* ---- 1. a full device ---------------------------------------------------------------------- */
static void full_device(void) {
  printf("a full device (sim:16MiB, eight 2 MiB pages):\n");
  hbm_device *sim;
  hbm_heap *h;
  REQUIRE(hbm_device_open("sim:16MiB", &sim) == HBM_OK);
  REQUIRE(hbm_heap_create(sim, "zoned", NULL, &h) == HBM_OK);
  /* a0 pages 0-2 (page 2 in part), a1 pages 2-3, a2 pages 4-5, a3 pages 6-7:
   * the device is full. a1 freed leaves page 3 in an idle chunk of its own,
   * which the small block s, with no page left on the device, takes: its
   * chunk is stitched into the small zone's range. */
  static const uint64_t size[4] = {5 * MiB, 3 * MiB, 4 * MiB, 4 * MiB};
  uint64_t a[4], s;
  for (int i = 0; i < 4; i++) CHECK(hbm_alloc(h, size[i], HBM_TAG_ACT, 0, &a[i]) == HBM_OK);
  CHECK(hbm_free(h, a[1]) == HBM_OK);
  CHECK(hbm_alloc(h, 4096, HBM_TAG_ACT, 0, &s) == HBM_OK);
  zoned *z = zoned_of(h);
  REQUIRE(z && z->nranges == 2 && z->nchunks == 4);
  zrange *r0 = &z->ranges[0], *r1 = &z->ranges[1];
  /* The layout the checks below name figures of. */
  REQUIRE(r0->base == a[0] && r1->base == s && z->zones[r0->zone].small == 0 && z->zones[r1->zone].small == 1);
  REQUIRE(z->chunks[0].range == 0 && z->chunks[0].first == 0 && z->chunks[0].npages == 3);
  REQUIRE(z->chunks[1].range == 1 && z->chunks[1].first == 0 && z->chunks[1].npages == 1);
  REQUIRE(z->chunks[2].range == 0 && z->chunks[2].first == 4 && z->chunks[2].npages == 2);
  REQUIRE(z->chunks[3].range == 0 && z->chunks[3].first == 6 && z->chunks[3].npages == 2);
  REQUIRE(r0->top == 8 && r0->cover == 16 && r0->npages == 16 && r0->mapped == 7 && !r0->page[3].chunk);
  REQUIRE(z->mapped_pages == 8 && z->touched_pages == 8 && z->idle_pages == 0 && z->idle_chunks == 0);
  REQUIRE(z->nrecs == 1 && z->free_rec == NIL && r0->edge[2] == 1);
  CHECK(sound(h));

  printf(" Z1, page entries and chunk records:\n");
  BREAK(h, r0->top, r0->cover + 1, "Z1 range 0: pages mapped up to 17, page entries only to 16");
  BREAK(h, r0->top, 7, "Z1 range 0: page 7 mapped above the recorded top 7");
  BREAK(h, r0->page[4].chunk, 1, "Z1 range 0 page 4 names chunk 0, which does not cover it");
  BREAK(h, r0->page[4].chunk, 5, "Z1 range 0 page 4 names chunk 4, which does not cover it"); /* no such record */
  BREAK(h, r0->page[5].end, 7, "Z1 range 0 page 5: its chunk ends at 6, recorded 7");
  BREAK(h, r0->mapped, 8, "Z1 range 0 counts 8 mapped pages, recount 7");
  BREAK(h, z->chunks[3].first, 15, "Z1 chunk 3 lies outside its range");
  BREAK(h, z->chunks[3].range, 2, "Z1 chunk 3 lies outside its range");
  printf(" Z1, the Fenwick tree (built as a long run builds it) and the placement cost's counts:\n");
  REQUIRE(fenwick_build(r0) && r0->fenwick_n == 16);
  CHECK(sound(h));
  BREAK(h, r0->fenwick_n, 7, "Z1 range 0: pages mapped up to 8, the Fenwick tree covers only 7");
  BREAK(h, r0->fenwick[6], r0->fenwick[6] + 1, "Z1 range 0: Fenwick node 6 counts 3 mapped pages in (4, 6], recount 2");
  /* node 1 is all that the count of page 0 reads from the tree: 1 - 2 pages unmapped */
  BREAK(h, r0->fenwick[1], 2, "Z1 range 0 pages 0-0: 0 unmapped, counted 0, tree 18446744073709551615, from the top 0");
  printf(" Z2:\n");
  BREAK(h, r0->edge[2], 2, "Z2 range 0 page 2: edge count 2, recount 1");
  BREAK(h, r0->edge[3], 1, "Z2 range 0 page 3: edge count 1, recount 0");
  BREAK(h, r0->page[5].chunk, 0, "Z2 range 0 page 5 is touched by a live block but not mapped");
  printf(" Z3:\n");
  BREAK(h, z->chunks[0].touched, 2, "Z3 chunk 0 counts 2 touched pages, recount 3");
  flip_idle_bit(z, 0);
  CHECK(check_says(h, "Z3 chunk 0: idle bit 1 with 3 touched pages"));
  flip_idle_bit(z, 0);
  CHECK(sound(h));
  BREAK(h, z->idle_chunks, 1, "Z3 0 idle chunks, 1 counted");
  printf(" Z4:\n");
  BREAK(h, z->idle_pages, 1, "Z4 pages: mapped 8/8 touched 8/8 idle 1/0 (counted/recount)");
  BREAK(h, z->touched_pages, 9, "Z4 pages: mapped 8/8 touched 9/8 idle 0/0 (counted/recount)");
  BREAK(h, z->peak_touched_pages, 7, "Z4 touched pages above their recorded peak");
  BREAK(h, z->peak_mapped_pages, 7, "Z4 mapped pages above their recorded peak, or the peak's touched pages above it");
  BREAK(h, z->peak_mapped_touched, z->peak_mapped_pages + 1,
        "Z4 mapped pages above their recorded peak, or the peak's touched pages above it");
  BREAK(h, z->mapped_pages, 9, "Z4 more pages mapped than the device holds");
  printf(" Z5:\n");
  BREAK(h, z->nrecs, 0, "Z5 block at %#llx names record 0 of 0", (unsigned long long)s);
  BREAK(h, z->nrecs, 2, "Z5 1 tracked blocks and 0 free records, 2 records");
  uint64_t rule = z->life.live_bytes, stamp = z->recs[0].stamp.size;
  BREAK(h, z->life.live_bytes, rule + 512, "Z5 lifetime rule counts %llu live bytes, the live blocks' stamps %llu",
        (unsigned long long)rule + 512, (unsigned long long)stamp);
  uint64_t slot = UINT64_MAX; /* a lifetime counter's slot */
  for (uint64_t i = 0; i < z->life.counters.cap && slot == UINT64_MAX; i++)
    if (z->life.counters.keys[i] != UINT64_MAX) slot = i;
  REQUIRE(slot != UINT64_MAX);
  BREAK(h, z->life.counters.vals[slot], 4, "Z5 lifetime counter 4 (0..3) for key %#llx",
        (unsigned long long)z->life.counters.keys[slot]);
  printf(" Z7: largest free against its walk page by page:\n");
  /* The hole a1 left: page 2 (a0's chunk, in use), page 3 (unmapped, and no
   * room on the device): 1 MiB. A chunk end past page 3 hides the unmapped
   * page from the walk a chunk at a time, which then reaches the hole's end. */
  BREAK(h, r0->page[2].end, 4, "Z7 largest free 3145728, page by page 1048576");
  printf(" Z8:\n");
  BREAK(h, z->order_base[1], z->order_base[1] + 512, "Z8 range order broken at 1 (range 1)");
  BREAK(h, z->order_base[0], z->order_base[1], "Z8 range order broken at 0 (range 0)");
  BREAK(h, z->order[1], 2, "Z8 range order broken at 1 (range 2)"); /* no range 2: not walked */
  BREAK(h, z->range_size, 64 * MiB, "Z8 ranges of 67108864 bytes, 33554432 from the device and settings");
  BREAK(h, z->ranges[1].size, 16 * MiB, "Z8 range 1 of 16777216 bytes, not 33554432");
  int life = z->small_last[0].zone != NIL ? 0 : 1;
  REQUIRE(z->small_last[life].zone == 1 && z->small_last[!life].zone == NIL);
  BREAK(h, z->small_last[life].stream, 1, "Z8 the small zone remembered for life %d is zone 1, not one of that life and stream", life);
  BREAK(h, z->small_last[!life].zone, 1, "Z8 the small zone remembered for life %d is zone 1, not one of that life and stream", !life);
  BREAK(h, z->small_last[life].zone, 0, "Z8 the small zone remembered for life %d is zone 0, not one of that life and stream", life);
  BREAK(h, z->small_last[life].zone, 2, "Z8 the small zone remembered for life %d is zone 2, not one of that life and stream", life);
  printf(" Z9, the layout scan:\n");
  BREAK(h, z->order[1], 0, "Z9 the layout scan goes back in address order");
  BREAK(h, z->live_bytes, z->live_bytes + 512, "Z9 the layout scan visits %llu live bytes and %llu in holes: live %llu, mapped %llu",
        (unsigned long long)(13 * MiB + 4096), (unsigned long long)(16 * MiB - 13 * MiB - 4096),
        (unsigned long long)(13 * MiB + 4096 + 512), (unsigned long long)(16 * MiB));
  CHECK(hbm_free(h, a[3]) == HBM_OK); /* an idle chunk */
  REQUIRE(z->chunks[3].touched == 0 && idle_bit(z, 3));
  flip_idle_bit(z, 3);
  CHECK(check_says(h, "Z3 chunk 3: idle bit 0 with 0 touched pages"));
  flip_idle_bit(z, 3);
  CHECK(sound(h));
  for (int i = 0; i < 3; i += 2) CHECK(hbm_free(h, a[i]) == HBM_OK);
  CHECK(hbm_free(h, s) == HBM_OK);
  CHECK(sound(h));
  /* s's record, now the one free, made to follow itself: the walk of the
   * free records stops at one more than there are records, and says so */
  REQUIRE(z->nrecs == 1 && z->free_rec == 0 && z->recs[0].next_free == NIL);
  BREAK(h, z->recs[0].next_free, 0, "Z5 0 tracked blocks and 2 free records, 1 records");
  hbm_heap_destroy(h);
  hbm_device_close(sim);
}

/* ---- 2. a step plan followed ----------------------------------------------------------------- */
/* Step 1 also makes and frees a 64 MiB block: memory the plan does not need,
 * given back once a step has run on the plan. */
static void one_step(hbm_heap *h, uint64_t step, int whole) {
  uint64_t x, y, w, big = 0, big2 = 0;
  CHECK(hbm_heap_step(h, step) == HBM_OK);
  if (step == 1) CHECK(hbm_alloc(h, 64 * MiB, HBM_TAG_ACT, 0, &big) == HBM_OK && hbm_alloc(h, 32 * MiB, HBM_TAG_ACT, 0, &big2) == HBM_OK);
  CHECK(hbm_alloc(h, 8 * MiB, HBM_TAG_ACT, 0, &x) == HBM_OK);
  CHECK(hbm_alloc(h, 16 * MiB, HBM_TAG_ACT, 0, &y) == HBM_OK);
  if (!whole) return;
  CHECK(hbm_free(h, x) == HBM_OK);
  CHECK(hbm_alloc(h, 4 * MiB, HBM_TAG_ACT, 0, &w) == HBM_OK);
  CHECK(hbm_free(h, y) == HBM_OK);
  CHECK(hbm_free(h, w) == HBM_OK);
  if (big) CHECK(hbm_free(h, big) == HBM_OK && hbm_free(h, big2) == HBM_OK);
}

static void plan(void) {
  printf("a job whose steps repeat, on its plan (plan:always):\n");
  hbm_device *sim;
  hbm_heap *h;
  REQUIRE(hbm_device_open("sim:1GiB", &sim) == HBM_OK);
  REQUIRE(hbm_heap_create(sim, "zoned", "plan:always", &h) == HBM_OK);
  zoned *z = zoned_of(h);
  REQUIRE(z);
  uint64_t step = 1;
  for (; step < 12 && !(z->following && z->plan_steps); step++) one_step(h, step, 1);
  REQUIRE(z->following && z->plan_steps && z->plan_n == 3);
  one_step(h, step, 0); /* two planned blocks live */
  CHECK(sound(h));
  REQUIRE(z->plan_range < z->nranges && z->large_zone != NIL && z->zones[z->large_zone].nranges);
  const zrange *pr = &z->ranges[z->plan_range];
  uint32_t large = z->zones[z->large_zone].ranges[0];
  printf(" Z6:\n");
  BREAK(h, z->plan_range, z->nranges, "Z6 the plan's range %u is not a planned range", z->nranges);
  BREAK(h, z->plan_range, large, "Z6 the plan's range %u is not a planned range", large);
  hbm_vspace *bare; /* the plan's range as it was before it was indexed */
  REQUIRE(hbm_vspace_create(pr->base, pr->size, ZONED_UNIT, &bare) == HBM_OK);
  BREAK(h, z->ranges[z->plan_range].vs, bare, "Z6 the plan's range %u is not indexed by address", z->plan_range);
  hbm_vspace_destroy(bare);
  REQUIRE(z->plan_addr[1]);
  BREAK(h, z->plan_addr[1], pr->base + pr->size - z->plan_size[1] + 512, "Z6 planned block 1 lies outside the plan's range");
  BREAK(h, z->plan_addr[1], pr->base - 512, "Z6 planned block 1 lies outside the plan's range");
  /* A whole step on the plan gave back the chunks of the layout it replaced:
   * their records are free. */
  uint32_t free_record = NIL;
  for (uint32_t c = 0; c < z->nchunks && free_record == NIL; c++)
    if (!z->chunks[c].npages) free_record = c;
  REQUIRE(free_record != NIL && z->cold_releases);
  printf(" Z3, a free record:\n");
  flip_idle_bit(z, free_record);
  CHECK(check_saysf(h, "Z3 free record %u marked idle", free_record));
  flip_idle_bit(z, free_record);
  CHECK(sound(h));
  hbm_heap_destroy(h);
  hbm_device_close(sim);
}

/* ---- 3. small:off --------------------------------------------------------------------------- */
static void small_off(void) {
  printf("small:off, a block under a granule in the large zone:\n");
  hbm_device *sim;
  hbm_heap *h;
  uint64_t a;
  REQUIRE(hbm_device_open("sim:1GiB", &sim) == HBM_OK);
  REQUIRE(hbm_heap_create(sim, "zoned", "small:off", &h) == HBM_OK);
  CHECK(hbm_alloc(h, 4096, HBM_TAG_ACT, 0, &a) == HBM_OK);
  zoned *z = zoned_of(h);
  REQUIRE(z && z->nrecs == 0);
  CHECK(sound(h));
  /* with small:on a block this size would have had a record */
  BREAK(h, z->conf.small, 1, "Z5 small block at %#llx has no lifetime record", (unsigned long long)a);
  CHECK(hbm_free(h, a) == HBM_OK);
  hbm_heap_destroy(h);
  hbm_device_close(sim);
}

/* ---- 4. fixed zones ------------------------------------------------------------------------- */
static void fixed(void) {
  printf("fixed zones (vmm:off):\n");
  hbm_device *sim;
  hbm_heap *h;
  uint64_t a[3];
  REQUIRE(hbm_device_open("sim:1GiB", &sim) == HBM_OK);
  REQUIRE(hbm_heap_create(sim, "zoned", "vmm:off", &h) == HBM_OK);
  for (int i = 0; i < 3; i++) CHECK(hbm_alloc(h, (uint64_t)(i + 1) * MiB, HBM_TAG_ACT, 0, &a[i]) == HBM_OK);
  CHECK(hbm_free(h, a[1]) == HBM_OK);
  zoned *z = zoned_of(h);
  REQUIRE(z && z->fallback && z->fixed_live.used == 2);
  CHECK(sound(h));
  BREAK(h, z->fixed_live.used, 3, "Z5 3 records for 2 live blocks");
  REQUIRE(z->nrecs == 3 && z->free_rec == 1); /* a[1]'s record */
  BREAK(h, z->nrecs, 4, "Z5 2 tracked blocks and 1 free records, 4 records");
  BREAK(h, z->nrecs, 2, "Z5 fixed block at %#llx names record 2 of 2", (unsigned long long)a[2]);
  uint64_t stamped = 0, rule = z->life.live_bytes, rec;
  for (int i = 0; i < 3; i += 2)
    if (hbm_addrmap_get(&z->fixed_live, a[i], &rec) && rec != NIL) stamped += z->recs[rec].stamp.size;
  REQUIRE(stamped == rule);
  BREAK(h, z->life.live_bytes, rule + 512, "Z5 lifetime rule counts %llu live bytes, the live blocks' stamps %llu",
        (unsigned long long)rule + 512, (unsigned long long)stamped);
  for (int i = 0; i < 3; i += 2) CHECK(hbm_free(h, a[i]) == HBM_OK);
  hbm_heap_destroy(h);
  hbm_device_close(sim);
}

/* ---- 5. no host memory for the check --------------------------------------------------------- */
static void no_host_memory(void) {
  printf("host memory running out inside the check:\n");
  hbm_device *sim;
  hbm_heap *h;
  uint64_t a, s;
  REQUIRE(hbm_device_open("sim:1GiB", &sim) == HBM_OK);
  REQUIRE(hbm_heap_create(sim, "zoned", NULL, &h) == HBM_OK);
  CHECK(hbm_alloc(h, 5 * MiB, HBM_TAG_ACT, 0, &a) == HBM_OK);
  CHECK(hbm_alloc(h, 4096, HBM_TAG_ACT, 0, &s) == HBM_OK);
  unsigned long long n, refused = 0;
  for (n = 1; n < 1000; n++) {
    calloc_calls = 0, fail_at = n;
    int rc = run_check(h);
    fail_at = 0;
    if (calloc_calls < n) { /* no call failed */
      CHECK(rc == HBM_OK);
      break;
    }
    if (rc != HBM_EHOSTMEM) fprintf(stderr, "calloc %llu of the check failing: %d; it said:\n%s", n, rc, said);
    CHECK(rc == HBM_EHOSTMEM);
    refused++;
  }
  /* per range: the chunks' touched counts (once), the edge and touched
   * recounts, the mapped pages below each page */
  printf("  each of the check's %llu allocations failing: no verdict (HBM_EHOSTMEM)\n", refused);
  CHECK(n < 1000 && refused >= 7);
  CHECK(sound(h));
  CHECK(hbm_free(h, a) == HBM_OK && hbm_free(h, s) == HBM_OK);
  hbm_heap_destroy(h);
  hbm_device_close(sim);
}

/* The tree cannot grow past the pages it covers for want of host memory: it
 * is dropped, and the pages are counted one by one (sound all the same). */
static void tree_dropped(void) {
  printf("the Fenwick tree dropped where it cannot grow:\n");
  hbm_device *sim;
  hbm_heap *h;
  uint64_t a, b;
  REQUIRE(hbm_device_open("sim:4GiB", &sim) == HBM_OK);
  REQUIRE(hbm_heap_create(sim, "zoned", NULL, &h) == HBM_OK);
  CHECK(hbm_alloc(h, 2048 * MiB, HBM_TAG_ACT, 0, &a) == HBM_OK);
  zoned *z = zoned_of(h);
  REQUIRE(z && z->nranges == 1);
  zrange *r = &z->ranges[0];
  REQUIRE(r->top == 1024 && fenwick_build(r) && r->fenwick_n == 1024); /* the least it covers */
  CHECK(sound(h));
  calloc_calls = 0, fail_at = 1;
  int rc = hbm_alloc(h, 4 * MiB, HBM_TAG_ACT, 0, &b); /* pages 1024-1025: the tree would grow */
  fail_at = 0;
  CHECK(rc == HBM_OK && calloc_calls >= 1);
  CHECK(r->top == 1026 && !r->fenwick && !r->fenwick_n);
  printf("  a block past the tree's pages, its growth failing: tree dropped, heap sound\n");
  CHECK(sound(h));
  CHECK(hbm_free(h, a) == HBM_OK && hbm_free(h, b) == HBM_OK);
  CHECK(sound(h));
  hbm_heap_destroy(h);
  hbm_device_close(sim);
}

int main(void) {
  full_device();
  tree_dropped();
  plan();
  small_off();
  fixed();
  no_host_memory();
  printf("%u failures reported as expected\n", shown);
  return test_done("test_zoned_check");
}
