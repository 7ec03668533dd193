/* test_core_check: each failure branch of the core structures' checks fires.
 * A check never seen to fail may be unable to: so each test here builds a
 * sound structure, breaks exactly one field of it, requires the check to
 * report it with the expected message, puts the field back and requires the
 * check to pass again.
 *   1. hbm_vspace_check (V1..V7): the address chain (a cycle, an address, a
 *      size, a back link, a recycled slot, the end, the tail), free
 *      neighbours, the free set and the address index (a block missing, a
 *      count off, dropped without the index), the counters and the address
 *      table. Placements and frees that run out of host memory at each point
 *      change nothing and leave the vspace sound.
 *   2. hbm_ordset_check (O1..O5): a chunk emptied, keys out of order, a chunk
 *      listed twice, an index key, the count, the spare list.
 *   3. hbm_ledger_check (L1..L5), through hbm_device_check on a sim device:
 *      segments, reservations, handles, mappings, mapped counts, phys_used;
 *      and the check that cannot run for want of host memory says so.
 *   4. The sim device's own check: a segment past the next address, the next
 *      address past the address space's end; and a sim device asked to
 *      start its addresses there is refused (it used to open, and fail its
 *      check before a single call).
 * The vspace, the ordered set and the sim device keep their structs to their
 * .c files: this
 * program compiles those files into itself to reach them (it then defines
 * every function of theirs, so the library's copies are not linked). */
#include "core/ordset.c"
#include "core/vspace.c"
#include "device/sim.c"

#include "core/util.h"
#include "device/contract.h"
#include "device/device.h"
#include "check_says.h"
#include "testutil.h"

/* ---- what a check reported (check_seen, check_collect: check_says.h) ------------------ */
static int checks_fired;

/* The check's answer for the broken structure: failures, and `want` among
 * the messages. */
static void expect_fail(const char *what, int failures, const check_seen *s, const char *want) {
  int ok = failures > 0 && s->n == failures && strstr(s->all, want) != NULL;
  printf("  %-52s %s\n", what, ok ? "reported" : "NOT REPORTED");
  if (!ok) fprintf(stderr, "%s: %d failure(s), wanted \"%s\"; got:\n%s", what, failures, want, s->all);
  CHECK(ok);
  checks_fired += ok;
}

/* ---- host memory that runs out (linked with --wrap=malloc,calloc,realloc) --------------
 * calloc_fails: every calloc fails; alloc_fail_at = n >= 0: the next n
 * allocations succeed and the one after fails (once). */
static int calloc_fails;
static long alloc_fail_at = -1;
static int alloc_due(void) { return alloc_fail_at >= 0 && alloc_fail_at-- == 0; }
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size) { return calloc_fails || alloc_due() ? NULL : __real_calloc(n, size); }
void *__real_malloc(size_t size);
void *__wrap_malloc(size_t size);
void *__wrap_malloc(size_t size) { return alloc_due() ? NULL : __real_malloc(size); }
void *__real_realloc(void *p, size_t size);
void *__wrap_realloc(void *p, size_t size);
void *__wrap_realloc(void *p, size_t size) { return alloc_due() ? NULL : __real_realloc(p, size); }

/* ---- 1. vspace --------------------------------------------------------------------- */
static int vcheck(const hbm_vspace *v, check_seen *s) {
  memset(s, 0, sizeof *s);
  return hbm_vspace_check(v, check_collect, s);
}

#define V_BROKEN(what, want)                       \
  do {                                             \
    check_seen s_;                                       \
    int f_ = vcheck(v, &s_);                       \
    expect_fail("vspace: " what, f_, &s_, want);   \
  } while (0)
#define V_SOUND() CHECK(vcheck(v, &(check_seen){{0}, 0}) == 0)

/* The blocks in address order: [0] live, [1] free, [2] live, [3] live,
 * [4] the free top. */
static uint32_t vblock_at(const hbm_vspace *v, int k) {
  uint32_t i = v->head;
  while (k-- > 0) i = v->blocks[i].next;
  return i;
}

static void test_vspace(void) {
  printf("vspace:\n");
  hbm_vspace *v;
  const uint64_t unit = 512, base = 1ull << 20;
  REQUIRE(hbm_vspace_create(base, 64 * unit, unit, &v) == HBM_OK);
  REQUIRE(hbm_vspace_index_addresses(v) == HBM_OK);
  uint64_t a[4];
  for (int k = 0; k < 4; k++) REQUIRE(hbm_vspace_alloc(v, unit * (k + 1), NULL, NULL, 0, (uint32_t)k, &a[k], NULL) == HBM_OK);
  REQUIRE(hbm_vspace_free(v, a[1], NULL, NULL) == HBM_OK);
  V_SOUND();
  CHECK(hbm_vspace_base(v) == base && hbm_vspace_size(v) == 64 * unit);
  uint32_t live0 = vblock_at(v, 0), free1 = vblock_at(v, 1), live2 = vblock_at(v, 2), top = vblock_at(v, 4);
  REQUIRE(v->blocks[live0].state == 0 && v->blocks[free1].state == 1 && v->blocks[top].state == 1 && v->tail == top);
  vblock *b = v->blocks;

  b[top].next = live0;
  V_BROKEN("V1 address chain with a cycle", "V1 address chain has a cycle");
  b[top].next = NIL;
  V_SOUND();

  b[live2].addr += unit;
  V_BROKEN("V1 block at the wrong address", "V1 block at 0x100800, expected 0x100600");
  b[live2].addr -= unit;
  V_SOUND();

  uint64_t sz = b[free1].size;
  b[free1].size = unit + 1;
  V_BROKEN("V1 block size not a multiple of the unit", "V1 block at 0x100200 has size 513");
  b[free1].size = sz;
  V_SOUND();

  b[live2].prev = live0;
  V_BROKEN("V1 back link broken", "V1 block at 0x100600: back link broken");
  b[live2].prev = free1;
  V_SOUND();

  b[live2].state = 2;
  V_BROKEN("V1 recycled slot in the chain", "V1 recycled slot in the address chain at 0x100600");
  b[live2].state = 0;
  V_SOUND();

  v->size += unit;
  V_BROKEN("V1 blocks end short of the range", "V1 blocks end at 0x108000, range ends at 0x108200");
  v->size -= unit;
  V_SOUND();

  v->tail = live0;
  V_BROKEN("V1 tail not the last block", "V1 tail is not the last block");
  v->tail = top;
  V_SOUND();

  /* a live block marked free next to a free one: V2 (and what follows) */
  b[live2].state = 1;
  V_BROKEN("V2 free neighbours", "V2 free neighbours at 0x100600");
  b[live2].state = 0;
  V_SOUND();

  hbm_okey k1 = size_key(b[free1].addr, b[free1].size);
  CHECK(hbm_ordset_erase(v->free_set, k1) == HBM_OK);
  V_BROKEN("V3 free block missing from the free set", "V3 free block at 0x100200 missing from the free set");
  CHECK(hbm_ordset_insert(v->free_set, k1, free1) == HBM_OK);
  V_SOUND();

  CHECK(hbm_ordset_insert(v->free_set, size_key(b[live0].addr, b[live0].size), live0) == HBM_OK);
  V_BROKEN("V3 free set holds a block too many", "V3 free set holds 3 blocks, the chain 2");
  CHECK(hbm_ordset_erase(v->free_set, size_key(b[live0].addr, b[live0].size)) == HBM_OK);
  V_SOUND();

  CHECK(hbm_ordset_erase(v->by_addr, addr_key(b[free1].addr)) == HBM_OK);
  V_BROKEN("V6 free block missing from the address index", "V6 free block at 0x100200 missing from the address index");
  CHECK(hbm_ordset_insert(v->by_addr, addr_key(b[free1].addr), free1) == HBM_OK);
  V_SOUND();

  CHECK(hbm_ordset_insert(v->by_addr, addr_key(b[live0].addr), live0) == HBM_OK);
  V_BROKEN("V6 address index holds a block too many", "V6 address index holds 3 blocks, the chain 2 free");
  CHECK(hbm_ordset_erase(v->by_addr, addr_key(b[live0].addr)) == HBM_OK);
  V_SOUND();

  v->free_blocks++;
  V_BROKEN("V4 free block count", "V4 3 free blocks counted, the chain 2");
  v->free_blocks--;
  V_SOUND();

  v->live_bytes += unit;
  V_BROKEN("V4 live bytes", "V4 counters: live 4096/4608");
  v->live_bytes -= unit;
  V_SOUND();

  v->live_blocks++;
  V_BROKEN("V4 live block count", "V4 counters");
  v->live_blocks--;
  V_SOUND();

  uint64_t at0;
  CHECK(hbm_addrmap_take(&v->live, b[live0].addr, &at0) && at0 == live0);
  V_BROKEN("V5 live block missing from the address table", "V5 live block at 0x100000 missing from the address table");
  CHECK(hbm_addrmap_put(&v->live, b[live0].addr, live0) == HBM_OK);
  V_SOUND();

  v->live.used++;
  V_BROKEN("V5 address table count", "V5 address table holds 4 entries for 3 live blocks");
  v->live.used--;
  V_SOUND();

  /* a structure of the ordered set's own, seen through the vspace's check */
  v->free_set->count++;
  V_BROKEN("the free set's own check", "ordset: O3 count 3 but chunks hold 2");
  v->free_set->count--;
  v->by_addr->count++;
  V_BROKEN("the address index's own check", "ordset: O3 count 3 but chunks hold 2");
  v->by_addr->count--;
  V_SOUND();

  /* V7: the free set gone, and the address index with it */
  hbm_ordset *fs = v->free_set, *ba = v->by_addr;
  v->free_set = NULL;
  V_SOUND(); /* dropped best fit with the index kept: sound */
  v->by_addr = NULL;
  V_BROKEN("V7 best fit dropped without the address index", "V7 best fit dropped without the address index");
  v->by_addr = ba;
  v->free_set = fs;
  V_SOUND();
  hbm_vspace_destroy(v);
}

/* A vspace's blocks, as a number: equal before and after a call that failed. */
static int digest_visit(void *arg, uint64_t addr, uint64_t size, int live) {
  uint64_t *h = arg;
  *h = ((*h ^ addr) * 0x100000001b3ull ^ size) * 0x100000001b3ull ^ (uint64_t)live;
  return 0;
}
static uint64_t vdigest(const hbm_vspace *v) {
  uint64_t h = 0xcbf29ce484222325ull ^ v->live_bytes ^ v->live_blocks << 40 ^ v->free_blocks << 50;
  hbm_vspace_walk(v, digest_visit, &h);
  return h;
}

/* Placements and frees that meet a failed host allocation at each point in
 * turn (the carve's undo included: an address-index key put in, then the
 * free set's insert failing): each answers HBM_EHOSTMEM with the vspace as
 * it was and sound, until the call gets all it needs. Free blocks of 3
 * units, 200 of them, fill the ordered sets' chunks so that inserts split. */
enum { NB = 400 };
static void test_vspace_no_memory(void) {
  hbm_vspace *v;
  const uint64_t unit = 512, base = 1ull << 20;
  REQUIRE(hbm_vspace_create(base, 4 * NB * unit, unit, &v) == HBM_OK);
  REQUIRE(hbm_vspace_index_addresses(v) == HBM_OK);
  uint64_t a[NB];
  for (int k = 0; k < NB; k++) REQUIRE(hbm_vspace_alloc(v, 3 * unit, NULL, NULL, 0, 0, &a[k], NULL) == HBM_OK);
  for (int k = 0; k < NB; k += 2) REQUIRE(hbm_vspace_free(v, a[k], NULL, NULL) == HBM_OK);
  V_SOUND();
  uint64_t refused = 0, placed = 0, bad = 0, got[NB];
  /* the middle unit of each free block (the parts before and after stay
   * free), then best fits of one unit (each takes a part whole); kept, so
   * that the sets' chunks fill and split */
  for (int k = 0; k < NB; k++) {
    for (long n = 0;; n++) {
      uint64_t before = vdigest(v);
      alloc_fail_at = n;
      int rc = k < NB / 2 ? hbm_vspace_alloc_at(v, got[k] = a[2 * k] + unit, unit, 7, NULL)
                      : hbm_vspace_alloc(v, unit, NULL, NULL, 0, 7, &got[k], NULL);
      int armed = alloc_fail_at < 0;
      alloc_fail_at = -1;
      if (rc != HBM_EHOSTMEM) {
        placed += rc == HBM_OK;
        bad += rc != HBM_OK || vcheck(v, &(check_seen){{0}, 0}) != 0;
        break;
      }
      refused++;
      bad += vdigest(v) != before || vcheck(v, &(check_seen){{0}, 0}) != 0 || !armed;
    }
  }
  for (int k = 0; k < NB; k++) {
    for (long n = 0;; n++) {
      uint64_t before = vdigest(v);
      alloc_fail_at = n;
      int rc = hbm_vspace_free(v, got[k], NULL, NULL);
      alloc_fail_at = -1;
      if (rc != HBM_EHOSTMEM) {
        bad += rc != HBM_OK || vcheck(v, &(check_seen){{0}, 0}) != 0;
        break;
      }
      refused++;
      bad += vdigest(v) != before || vcheck(v, &(check_seen){{0}, 0}) != 0;
    }
  }
  V_SOUND();
  printf("  %-52s %llu refused, each with nothing changed; %llu placed\n", "vspace: host memory running out",
         (unsigned long long)refused, (unsigned long long)placed);
  CHECK(bad == 0 && refused > 0 && placed == NB);
  hbm_vspace_destroy(v);
}

/* ---- 2. ordset --------------------------------------------------------------------- */
static int ocheck(const hbm_ordset *s, check_seen *x) {
  memset(x, 0, sizeof *x);
  return hbm_ordset_check(s, check_collect, x);
}

#define O_BROKEN(what, want)                        \
  do {                                              \
    check_seen x_;                                        \
    int f_ = ocheck(s, &x_);                        \
    expect_fail("ordset: " what, f_, &x_, want);    \
  } while (0)
#define O_SOUND() CHECK(ocheck(s, &(check_seen){{0}, 0}) == 0)

static void test_ordset(void) {
  printf("ordset:\n");
  hbm_ordset *s;
  REQUIRE(hbm_ordset_create(&s) == HBM_OK);
  for (uint32_t i = 0; i < 4 * CHUNK; i++) REQUIRE(hbm_ordset_insert(s, (hbm_okey){i, 0}, i) == HBM_OK);
  REQUIRE(s->nchunks >= 3);
  O_SOUND();

  chunk *c1 = s->chunks[1];
  uint32_t n1 = c1->n;
  c1->n = 0;
  O_BROKEN("O2 an empty chunk", "ordset: O2 chunk 1 holds 0 keys (1..32)");
  c1->n = CHUNK + 1;
  O_BROKEN("O2 an overfull chunk", "ordset: O2 chunk 1 holds 33 keys (1..32)");
  c1->n = n1;
  O_SOUND();

  hbm_okey k2 = c1->e[2].key;
  c1->e[2].key = c1->e[0].key;
  O_BROKEN("O1 keys out of order", "ordset: O1 keys out of order in chunk 1 at 2");
  c1->e[2].key = k2;
  O_SOUND();

  chunk *c2 = s->chunks[2];
  s->chunks[2] = s->chunks[0];
  O_BROKEN("O4 a chunk listed twice", "ordset: O4 chunk 2 listed twice (at 0 too)");
  s->chunks[2] = c2;
  O_SOUND();

  s->maxkey[1].lo++;
  O_BROKEN("O2 an index key not its chunk's largest", "ordset: O2 index key of chunk 1 is not its largest");
  s->maxkey[1].lo--;
  O_SOUND();

  s->count++;
  O_BROKEN("O3 the count", "ordset: O3 count 129 but chunks hold 128");
  s->count--;
  O_SOUND();

  s->head.nspare++;
  O_BROKEN("O5 the spare count", "ordset: O5");
  s->head.nspare--;
  O_SOUND();

  size_t front = s->front;
  s->front = s->cap;
  O_BROKEN("O5 the index past its room", "ordset: O5");
  s->front = front;
  O_SOUND();

  hbm_ordset_destroy(s);
}

/* ---- 3. the device ledger, 4. the sim device --------------------------------------- */
static int dcheck(const hbm_device *d, check_seen *x) {
  memset(x, 0, sizeof *x);
  return hbm_device_check(d, check_collect, x);
}

#define D_BROKEN(what, want)                        \
  do {                                              \
    check_seen x_;                                        \
    int f_ = dcheck(d, &x_);                        \
    expect_fail("ledger: " what, f_, &x_, want);    \
  } while (0)
#define D_SOUND() CHECK(dcheck(d, &(check_seen){{0}, 0}) == 0)


static void test_ledger(void) {
  printf("device ledger:\n");
  const uint64_t g = 2ull << 20;
  hbm_device *d;
  REQUIRE(hbm_sim_open(64 * g, g, &d) == HBM_OK);
  uint64_t s0, s1, r0, r1, h, h2;
  REQUIRE(hbm_dev_seg_alloc(d, 2 * g, 0, &s0) == HBM_OK);
  REQUIRE(hbm_dev_seg_alloc(d, g, 0, &s1) == HBM_OK);
  REQUIRE(hbm_dev_reserve(d, 8 * g, &r0) == HBM_OK);
  REQUIRE(hbm_dev_reserve(d, 4 * g, &r1) == HBM_OK);
  REQUIRE(hbm_dev_phys_create(d, 4 * g, &h) == HBM_OK);
  REQUIRE(hbm_dev_phys_create(d, 2 * g, &h2) == HBM_OK);
  REQUIRE(hbm_dev_map(d, r0, 2 * g, h, 0) == HBM_OK);
  REQUIRE(hbm_dev_map(d, r0 + 2 * g, 2 * g, h, 2 * g) == HBM_OK);
  D_SOUND();
  hbm_ledger *l = d->ledger;
  REQUIRE(l->nsegs == 2 && l->nres == 2 && l->handles.used == 2 && hbm_ordset_count(l->maps) == 2);
  REQUIRE(l->segs[0].addr < l->segs[1].addr && l->res[0].addr == r0 && s0 < s1);
  uint64_t hs;
  REQUIRE(hbm_addrmap_get(&l->handles, h << 9, &hs));
  uint32_t m0, m1;
  REQUIRE(hbm_ordset_find(l->maps, (hbm_okey){r0, 0}, &m0) && hbm_ordset_find(l->maps, (hbm_okey){r0 + 2 * g, 0}, &m1));
  char want[200];

  /* L1 segments */
  l->segs[0].held = g;
  D_BROKEN("L1 a segment holding less than its size", "holds less than its size 0x400000");
  l->segs[0].held = 2 * g;
  D_SOUND();
  l->segs[0].size = s1 - s0 + g;
  snprintf(want, sizeof want, "segment at %#llx overlaps or precedes the one at %#llx", (unsigned long long)s0,
           (unsigned long long)s1);
  D_BROKEN("L1 segments overlapping", want);
  l->segs[0].size = 2 * g;
  D_SOUND();

  /* L2 reservations */
  l->res[1].size = 0;
  D_BROKEN("L2 an empty reservation", "empty or not granule-aligned");
  l->res[1].size = 4 * g;
  l->max_res_size = 4 * g;
  D_BROKEN("L2 a reservation past max_res_size", "larger than max_res_size 0x800000");
  l->max_res_size = 8 * g;
  D_SOUND();
  l->res[0].addr = r1 + g;
  D_BROKEN("L2 reservations out of order", "out of order");
  l->res[0].addr = r0;
  D_SOUND();
  l->res[1].addr = s1;
  snprintf(want, sizeof want, "reservation at %#llx size 0x800000 overlaps a segment", (unsigned long long)s1);
  D_BROKEN("L2 a reservation over a segment", want);
  l->res[1].addr = r1;
  D_SOUND();

  /* handles */
  l->hpool[hs].id++;
  D_BROKEN("a handle in the wrong slot", "which does not hold it");
  l->hpool[hs].id--;
  D_SOUND();
  l->hpool[hs].size += 4096;
  D_BROKEN("a handle size off the granule", "not a multiple of the granule");
  l->hpool[hs].size -= 4096;
  D_SOUND();
  l->handles.used++;
  D_BROKEN("handles visited and held", "2 handles visited, 3 held");
  l->handles.used--;
  D_SOUND();

  /* L3 mappings */
  uint64_t nm = l->nmpool;
  l->nmpool = m0 < m1 ? m1 : m0;
  D_BROKEN("L3 a mapping past the pool", "past the pool");
  l->nmpool = nm;
  D_SOUND();
  l->mpool[m1].va += g;
  D_BROKEN("L3 a mapping key naming another's slot", "which holds another");
  l->mpool[m1].va -= g;
  D_SOUND();
  l->mpool[m0].size = 3 * g;
  D_BROKEN("L3 mappings overlapping", "overlaps the one before");
  l->mpool[m0].size = 2 * g;
  D_SOUND();
  l->mpool[m1].offset += 4096;
  D_BROKEN("L3 a mapping off the granule", "not granule-aligned");
  l->mpool[m1].offset -= 4096;
  D_SOUND();
  size_t nres = l->nres;
  l->nres = 0;
  D_BROKEN("L3 a mapping outside every reservation", "outside every reservation");
  l->nres = nres;
  D_SOUND();
  l->mpool[m1].handle = h2 + 1000;
  D_BROKEN("L3 a mapping naming a handle not live", "which is not live");
  l->mpool[m1].handle = h;
  D_SOUND();
  l->mpool[m1].offset = 4 * g;
  D_BROKEN("L3 a mapping past its handle's end", "reaches past the end of handle");
  l->mpool[m1].offset = 2 * g;
  D_SOUND();
  l->maps->count++;
  D_BROKEN("L3 mappings walked and held", "2 mappings walked, 3 held");
  l->maps->count--;
  D_SOUND();

  /* L4, L5 */
  l->hpool[hs].mapped -= g;
  D_BROKEN("L4 a handle's mapped count", "counts 0x600000 bytes mapped");
  l->hpool[hs].mapped += g;
  D_SOUND();
  d->phys_used += g;
  snprintf(want, sizeof want, "sim: phys_used %#llx, segments and handles hold %#llx", (unsigned long long)d->phys_used,
           (unsigned long long)(d->phys_used - g));
  D_BROKEN("L5 phys_used", want);
  d->phys_used -= g;
  D_SOUND();

  /* the sim device's own check: a segment past the next address it hands out */
  uint64_t a1 = l->segs[1].addr;
  l->segs[1].addr = r1 + 64 * g; /* above every reservation, past what the sim handed out */
  snprintf(want, sizeof want, "sim: segment [%#llx, +0x200000) ends past the next address handed out",
           (unsigned long long)(r1 + 64 * g));
  D_BROKEN("sim: a segment past the next address", want);
  l->segs[1].addr = a1;
  D_SOUND();

  sim_device *sd = (sim_device *)d;
  uint64_t next = sd->next_va;
  sd->next_va = HBM_LEDGER_VA_END + g;
  snprintf(want, sizeof want, "sim: the next address handed out, %#llx, is past the address space's end",
           (unsigned long long)(HBM_LEDGER_VA_END + g));
  D_BROKEN("sim: the next address past the end", want);
  sd->next_va = next;
  D_SOUND();

  /* no host memory for the check: said, not counted as a failure */
  check_seen x = {{0}, 0};
  calloc_fails = 1;
  int f = hbm_device_check(d, check_collect, &x);
  calloc_fails = 0;
  int said = f == 0 && x.n == 1 && strstr(x.all, hbm_check_no_memory_message) != NULL;
  printf("  %-52s %s\n", "ledger: no host memory for the recount", said ? "said" : "NOT SAID");
  CHECK(said);
  D_SOUND();
  hbm_device_close(d);
}

/* A sim device's addresses start where it is told, but only inside the
 * address space: past its end the device would fail its own check before
 * any call. */
static void test_sim_base(void) {
  printf("sim device's base:\n");
  const uint64_t g = 2ull << 20;
  hbm_device *d = NULL;
  int rc = hbm_sim_open_at(64 * g, g, HBM_LEDGER_VA_END + g, &d);
  printf("  %-52s %s\n", "a base past the address space's end", rc == HBM_EINVAL ? "refused" : "NOT REFUSED");
  CHECK(rc == HBM_EINVAL && d == NULL);
  if (d) hbm_device_close(d);
  REQUIRE(hbm_sim_open_at(64 * g, g, HBM_LEDGER_VA_END - 64 * g, &d) == HBM_OK); /* the last room there is */
  uint64_t a;
  CHECK(hbm_dev_seg_alloc(d, 64 * g, 0, &a) == HBM_OK && a == HBM_LEDGER_VA_END - 64 * g);
  D_SOUND();
  CHECK(hbm_dev_seg_free(d, a, 64 * g) == HBM_OK);
  hbm_device_close(d);
}

int main(void) {
  test_vspace();
  test_vspace_no_memory();
  test_ordset();
  test_ledger();
  test_sim_base();
  printf("test_core_check: %d broken fields reported, each passing again once put back\n", checks_fired);
  return test_done("test_core_check");
}
