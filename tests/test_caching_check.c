/* test_caching_check: the caching model's invariant check (hbm_pt_check,
 * P1-P8 in pytorch_alloc.c), white-box: each failure it can report is
 * reported once the state is broken that way.
 *   1. caching: blocks off 512-byte units (P7), a next that does not tile or
 *      differs in pool (P1), a prev link that disagrees (P1), free neighbours
 *      not merged (P2), a free block missing from its pool (P3), the sets'
 *      counts (P3), an allocated block missing from the active map and the
 *      count of allocated blocks (P4), the reserved, allocated, releasable
 *      and largest-block figures (P5), an unmapped block in an ordinary
 *      segment (P6), an insert no operation reserved (P8) and a set's own
 *      check (P7).
 *   2. expandable, with a page unmapped between two mapped ones: an unmapped
 *      block missing from its set (P3), a block of a released segment, a
 *      mapped block over an unmapped page, an unmapped block over a mapped
 *      page or off the page grid (P6).
 *   3. the slow reference's check (hbm_ptref_check): a block outside its
 *      segment, of another stream, next to a free block while free, unmapped
 *      in an ordinary segment; a segment its blocks do not tile; reserved
 *      against its recount; in an expandable segment, an unmapped block off
 *      the page grid and a mapped block over an unmapped page.
 *   4. a starting state whose blocks in an expandable range are off the
 *      512-byte grid (no trace file gives one: the reader refuses it first)
 *      is refused; hooks
 *      set and removed, and refused by a policy that is not PyTorch's.
 * The state is broken through the heap's policy (hbm_heap_enter), or the
 * reference's own, one field at a time, and put back: the check must pass
 * again each time. */
#include <string.h>

#include "core/reloc.h"
#include "hbm.h"
#include "trace/trace.h"
#include "policy/pytorch_ref_state.h"
#include "policy/pytorch_state.h"
#include "check_says.h"
#include "testutil.h"

static pt *model_of(hbm_heap *h) {
  hbm_reloc *r;
  hbm_policy *p = hbm_heap_enter(h, &r);
  hbm_heap_leave(h);
  return hbm_pt_is_pytorch(p) ? (pt *)p : NULL;
}

/* The block at addr, or NONE. */
static uint32_t block_at(pt *m, uint64_t addr) {
  for (uint32_t i = 0; i < m->nblocks; i++)
    if (m->blocks[i].in_use && m->blocks[i].addr == addr) return i;
  return NONE;
}

/* The first block in use, not allocated, whose mapped state is `mapped`; or NONE. */
static uint32_t first_free(pt *m, int mapped) {
  for (uint32_t i = 0; i < m->nblocks; i++)
    if (m->blocks[i].in_use && !m->blocks[i].allocated && m->blocks[i].mapped == mapped) return i;
  return NONE;
}

static char want[256];
#define SAYS(h, ...) (snprintf(want, sizeof want, __VA_ARGS__), check_says(h, want))
#define ULL(x) ((unsigned long long)(x))
/* The last messages hold `text`, and say so. */
static int said_text(const char *text) {
  if (strstr(check_said, text)) {
    printf("  reported: %s\n", text);
    return 1;
  }
  fprintf(stderr, "messages:\n%sexpected one with \"%s\"\n", check_said, text);
  return 0;
}
#define SAYS_TEXT(text) said_text(text)

/* ---- 1. caching ---- */
static void caching(hbm_device *sim) {
  printf("caching\n");
  hbm_heap *h;
  REQUIRE(hbm_heap_create(sim, "caching", NULL, &h) == HBM_OK);
  uint64_t a, b, gone, c;
  CHECK(hbm_alloc(h, 3 << 20, HBM_TAG_ACT, 0, &a) == HBM_OK);  /* a 20 MiB segment, split */
  CHECK(hbm_alloc(h, 4 << 20, HBM_TAG_ACT, 0, &gone) == HBM_OK);
  CHECK(hbm_alloc(h, 700, HBM_TAG_ACT, 0, &b) == HBM_OK);      /* a small segment */
  CHECK(hbm_alloc(h, 24 << 20, HBM_TAG_ACT, 0, &c) == HBM_OK); /* a segment of its own, whole */
  CHECK(hbm_free(h, gone) == HBM_OK);
  CHECK(hbm_free(h, c) == HBM_OK); /* cached, releasable */
  CHECK(hbm_check(h) == HBM_OK);
  pt *m = model_of(h);
  REQUIRE(m);
  uint32_t ia = block_at(m, a), ib = block_at(m, b), ic = block_at(m, c);
  REQUIRE(ia != NONE && ib != NONE && ic != NONE);
  uint32_t in = m->blocks[ia].next; /* the free rest of a's segment */
  REQUIRE(in != NONE && !m->blocks[in].allocated && m->blocks[ia].prev == NONE);
  pt_block saved = m->blocks[ia], saved_n = m->blocks[in];

  m->blocks[ia].size += 1;
  CHECK(SAYS(h, "caching: P7 block 0x%llx+%llu not in 512-byte units", ULL(a), ULL(saved.size + 1)));
  m->blocks[ia] = saved;
  m->blocks[in].prev = NONE;
  CHECK(SAYS(h, "caching: P1 block 0x%llx and its next do not tile", ULL(a)));
  m->blocks[in] = saved_n;
  m->blocks[in].small = 1;
  CHECK(SAYS(h, "caching: P1 block 0x%llx and its next differ in stream, pool or segment", ULL(a)));
  m->blocks[in] = saved_n;
  m->blocks[ia].prev = ib; /* b's next is not a */
  CHECK(SAYS(h, "caching: P1 block 0x%llx: prev link disagrees", ULL(a)));
  m->blocks[ia] = saved;
  m->blocks[ia].allocated = 0;
  CHECK(SAYS(h, "caching: P2 free neighbours 0x%llx and 0x%llx not merged", ULL(a), ULL(saved_n.addr)));
  m->blocks[ia] = saved;
  CHECK(hbm_check(h) == HBM_OK);

  /* P3: the rest of a's segment found under another block, then missing */
  hbm_ordset *set = m->streams[saved_n.slot].free[LARGE];
  hbm_okey key = {saved_n.size, saved_n.addr};
  CHECK(hbm_ordset_replace(set, key, key, ic) == HBM_OK);
  CHECK(SAYS(h, "caching: P3 free block 0x%llx+%llu not in its pool", ULL(saved_n.addr), ULL(saved_n.size)));
  CHECK(hbm_ordset_replace(set, key, key, in) == HBM_OK);
  CHECK(hbm_check(h) == HBM_OK);
  size_t cached = 0;
  for (uint32_t i = 0; i < m->nblocks; i++) cached += m->blocks[i].in_use && !m->blocks[i].allocated;
  CHECK(hbm_ordset_reserve(set, 1) == HBM_OK && hbm_ordset_erase(set, key) == HBM_OK);
  CHECK(SAYS(h, "caching: P3 sets hold %zu cached + 0 unmapped, blocks say %zu + 0", cached - 1, cached));
  CHECK(hbm_ordset_insert(set, key, in) == HBM_OK);
  CHECK(hbm_check(h) == HBM_OK);

  /* P4: a's entry in the active map names another block; one block too many counted */
  CHECK(hbm_addrmap_put(&m->active, a, ib) == HBM_OK);
  CHECK(SAYS(h, "caching: P4 allocated block 0x%llx not in the active map", ULL(a)));
  CHECK(hbm_addrmap_put(&m->active, a, ia) == HBM_OK);
  m->allocated_blocks++;
  CHECK(SAYS(h, "caching: P4 active map holds 2, 2 blocks allocated (counter 3)"));
  m->allocated_blocks--;
  CHECK(hbm_check(h) == HBM_OK);

  /* P5: each figure against its recount */
  uint64_t reserved = m->total_allocated_memory, allocated = m->allocated_bytes, releasable = m->releasable;
  CHECK(releasable == m->blocks[ic].size);
  m->total_allocated_memory += 512;
  CHECK(SAYS(h, "caching: P5 reserved %llu but segments and mapped pages add to %llu", ULL(reserved + 512),
             ULL(reserved)));
  m->total_allocated_memory = reserved;
  m->allocated_bytes -= 512;
  CHECK(SAYS(h, "caching: P5 allocated %llu but blocks add to %llu", ULL(allocated - 512), ULL(allocated)));
  m->allocated_bytes = allocated;
  m->releasable = 0;
  CHECK(SAYS(h, "caching: P5 releasable 0 but recount is %llu", ULL(releasable)));
  m->releasable = releasable;
  CHECK(hbm_check(h) == HBM_OK);
  hbm_policy_usage u;
  m->base.cls->usage(&m->base, &u); /* makes the cached largest blocks valid */
  CHECK(m->largest_valid[LARGE] && m->largest[LARGE] == m->blocks[ic].size);
  uint64_t largest = m->largest[LARGE];
  m->largest[LARGE] = largest + 512;
  CHECK(SAYS(h, "caching: P5 cached largest block %llu but the sets say %llu", ULL(largest + 512), ULL(largest)));
  m->largest[LARGE] = largest;
  CHECK(hbm_check(h) == HBM_OK);

  /* P6: an ordinary segment's cached block shown unmapped */
  m->blocks[ic].mapped = 0;
  CHECK(SAYS(h, "caching: P6 unmapped block outside an expandable segment"));
  m->blocks[ic].mapped = 1;
  /* P8: an insert its operation did not reserve */
  m->unpromised = 1;
  CHECK(SAYS(h, "caching: P8 1 insert(s) into a set or page map(s) its operation had not reserved"));
  m->unpromised = 0;
  /* P7: a set's own check (its spare chunks miscounted) */
  hbm_ordset_head *head = (hbm_ordset_head *)(void *)set;
  head->nspare++;
  CHECK(SAYS(h, "caching: P7 ordset: O5 "));
  head->nspare--;
  CHECK(hbm_check(h) == HBM_OK);

  CHECK(hbm_free(h, a) == HBM_OK && hbm_free(h, b) == HBM_OK);
  CHECK(hbm_check(h) == HBM_OK);
  hbm_heap_destroy(h);
}

/* ---- 2. expandable ---- */
static void expandable(hbm_device *sim) {
  printf("expandable\n");
  hbm_heap *h;
  REQUIRE(hbm_heap_create(sim, "expandable", NULL, &h) == HBM_OK);
  uint64_t x[3], big;
  for (int i = 0; i < 3; i++) CHECK(hbm_alloc(h, 20 << 20, HBM_TAG_ACT, 0, &x[i]) == HBM_OK); /* a page each */
  CHECK(hbm_free(h, x[1]) == HBM_OK);
  CHECK(hbm_alloc(h, 2ull << 30, HBM_TAG_ACT, 0, &big) == HBM_ENOMEM); /* the cache released: x[1]'s page unmapped */
  CHECK(hbm_check(h) == HBM_OK);
  pt *m = model_of(h);
  REQUIRE(m);
  uint32_t i0 = block_at(m, x[0]), iu = block_at(m, x[1]);
  REQUIRE(i0 != NONE && iu != NONE && !m->blocks[iu].mapped && m->blocks[iu].es != NONE);
  REQUIRE(first_free(m, 0) != NONE);
  pt_block *u = &m->blocks[iu];
  pt_es *e = &m->es[u->es];
  uint64_t page = (u->addr - e->base) / e->page; /* 1 */
  REQUIRE(page < e->nhandles && e->handles[page] == 0 && e->handles[0] != 0);

  hbm_ordset *set = m->streams[u->slot].unmapped[LARGE];
  hbm_okey key = {u->addr, 0};
  CHECK(hbm_ordset_replace(set, key, key, i0) == HBM_OK);
  CHECK(SAYS(h, "caching: P3 unmapped block 0x%llx not in its set", ULL(x[1])));
  CHECK(hbm_ordset_replace(set, key, key, iu) == HBM_OK);
  CHECK(hbm_check(h) == HBM_OK);

  e->live = 0;
  CHECK(SAYS(h, "caching: P6 block 0x%llx in a released expandable segment", ULL(x[0])));
  e->live = 1;
  uint64_t handle = e->handles[0];
  e->handles[0] = 0;
  CHECK(SAYS(h, "caching: P6 mapped block 0x%llx over an unmapped page", ULL(x[0])));
  e->handles[0] = handle;
  e->handles[page] = handle;
  CHECK(SAYS(h, "caching: P6 unmapped block 0x%llx over a mapped page", ULL(x[1])));
  e->handles[page] = 0;
  e->base += 512;
  CHECK(SAYS(h, "caching: P6 unmapped block 0x%llx not page aligned", ULL(x[1])));
  e->base -= 512;
  CHECK(hbm_check(h) == HBM_OK);

  CHECK(hbm_free(h, x[0]) == HBM_OK && hbm_free(h, x[2]) == HBM_OK);
  CHECK(hbm_check(h) == HBM_OK);
  hbm_heap_destroy(h);
}

/* ---- 3. the reference ---- */
static void ref_report(void *arg, const char *message) { check_keep_error(0, message, arg); }

/* hbm_ptref_check(r) fails, one of its messages containing `want`. */
static int ref_says(const hbm_ptref *r, const char *what) {
  check_said[0] = 0;
  int n = hbm_ptref_check(r, ref_report, NULL);
  if (n > 0 && strstr(check_said, what)) {
    printf("  reported: %s\n", what);
    return 1;
  }
  fprintf(stderr, "hbm_ptref_check: %d, messages:\n%sexpected one with \"%s\"\n", n, check_said, what);
  return 0;
}
#define REF_SAYS(r, ...) (snprintf(want, sizeof want, __VA_ARGS__), ref_says(r, want))

static long ref_block_at(const hbm_ptref *r, uint64_t addr) {
  for (long i = 0; i < r->nb; i++)
    if (r->b[i].live && r->b[i].addr == addr) return i;
  return -1;
}

static void reference(int expandable) {
  printf("reference%s\n", expandable ? ", expandable" : "");
  hbm_device *dev;
  hbm_ptref *r;
  hbm_pt_conf conf;
  hbm_pt_conf_default(&conf, expandable);
  REQUIRE(hbm_device_open("sim:1GiB", &dev) == HBM_OK);
  if (hbm_ptref_create(dev, &conf, &r) != HBM_OK) {
    CHECK(0);
    hbm_device_close(dev);
    return;
  }
  uint64_t x[3], bs, big;
  /* plain: x[0] splits a segment, x[1] a whole one, x[2] a small one; expandable: a page each */
  static const uint64_t size[2][3] = {{3 << 20, 24 << 20, 700}, {20 << 20, 20 << 20, 20 << 20}};
  for (int i = 0; i < 3; i++) CHECK(hbm_ptref_alloc(r, size[expandable][i], 0, &x[i], &bs) == HBM_OK);
  CHECK(hbm_ptref_free(r, x[1], &bs) == HBM_OK);
  if (expandable) CHECK(hbm_ptref_alloc(r, 2ull << 30, 0, &big, &bs) == HBM_ENOMEM); /* x[1]'s pages unmapped */
  CHECK(hbm_ptref_check(r, NULL, NULL) == 0);
  long i0 = ref_block_at(r, x[0]), i1 = ref_block_at(r, x[1]);
  if (i0 < 0 || i1 < 0) {
    CHECK(i0 >= 0 && i1 >= 0);
    hbm_ptref_destroy(r);
    hbm_device_close(dev);
    return;
  }
  ref_block b0 = r->b[i0], b1 = r->b[i1];
  ref_seg *s0 = &r->s[b0.seg];
  r->b[i0].addr = s0->addr + s0->size;
  CHECK(REF_SAYS(r, "reference: block %ld outside its segment", i0));
  r->b[i0] = b0;
  r->b[i0].stream = 1;
  CHECK(REF_SAYS(r, "reference: block %ld differs from its segment in stream or pool", i0));
  r->b[i0] = b0;
  r->b[i1].size += 512;
  CHECK(REF_SAYS(r, "reference: segment %ld not tiled by its blocks", b1.seg));
  r->b[i1] = b1;
  uint64_t reserved = r->reserved;
  r->reserved += 512;
  CHECK(REF_SAYS(r, "reference: reserved %llu but segments and mapped pages add to %llu", ULL(reserved + 512),
                 ULL(reserved)));
  r->reserved = reserved;
  CHECK(hbm_ptref_check(r, NULL, NULL) == 0);
  if (!expandable) {
    r->b[i1].mapped = 0; /* x[1]'s segment, cached whole */
    CHECK(REF_SAYS(r, "reference: block %ld of an ordinary segment unmapped", i1));
    r->b[i1] = b1;
    long in = -1; /* x[0]'s free rest */
    for (long i = 0; i < r->nb; i++)
      if (r->b[i].live && r->b[i].seg == b0.seg && r->b[i].addr == b0.addr + b0.size) in = i;
    CHECK(in >= 0 && !r->b[in].allocated);
    r->b[i0].allocated = 0;
    CHECK(REF_SAYS(r, "reference: free block %ld has a free neighbour of its mapped state", i0));
    r->b[i0] = b0;
  } else {
    CHECK(!b1.mapped && r->s[b1.seg].expandable);
    ref_seg *s1 = &r->s[b1.seg];
    r->b[i1].addr += 512, r->b[i1].size -= 512;
    CHECK(REF_SAYS(r, "reference: unmapped block %ld not whole pages", i1));
    r->b[i1] = b1;
    uint64_t k = (b0.addr - s1->addr) / s1->page, handle = s1->handles[k];
    CHECK(b0.seg == b1.seg && handle != 0);
    s1->handles[k] = 0;
    CHECK(REF_SAYS(r, "reference: block %ld's mapped state differs from its pages", i0));
    s1->handles[k] = handle;
  }
  CHECK(hbm_ptref_check(r, NULL, NULL) == 0);
  CHECK(hbm_ptref_free(r, x[0], &bs) == HBM_OK && hbm_ptref_free(r, x[2], &bs) == HBM_OK);
  CHECK(hbm_ptref_check(r, NULL, NULL) == 0);
  hbm_ptref_destroy(r);
  hbm_device_close(dev);
}

/* ---- 4. a starting state off the grid; the hooks ---- */
static uint64_t no_hint(void *arg, int reservation, uint64_t size, int stream, int small, uint64_t proposed) {
  (void)arg, (void)reservation, (void)size, (void)stream, (void)small;
  return proposed;
}

static void seed_and_hooks(hbm_device *sim) {
  printf("a starting state off the grid; the hooks\n");
  static const char text[] = "hbm-trace 1\ninit-seg 0x7f0000000000 40MiB 0 large expandable\n"
                             "init-blk 0x7f0000000000 20MiB b0 20MiB act\ninit-blk 0x7f0001400000 20MiB -\n";
  hbm_trace *t = NULL;
  hbm_diag d = {0};
  CHECK(hbm_trace_parse_text(text, sizeof text - 1, "grid", &t, &d) == HBM_OK);
  REQUIRE(t && t->ninit_blocks == 2);
  for (int bad = 0; bad <= 1; bad++) {
    hbm_policy *p = NULL;
    REQUIRE(hbm_policy_expandable.create(sim, NULL, &p, &d) == HBM_OK);
    p->dev = sim;
    uint64_t id_addr[4] = {0};
    if (bad) t->init_blocks[1].size -= 100, t->init_blocks[0].size += 100; /* still tiles, off the grid */
    check_said[0] = 0;
    hbm_set_error_handler(check_keep_error, NULL);
    int rc = hbm_pt_seed(p, t, id_addr, NULL);
    hbm_set_error_handler(NULL, NULL);
    if (!bad) {
      CHECK(rc == HBM_OK && id_addr[0] != 0);
    } else {
      CHECK(rc == HBM_EINVAL);
      CHECK(SAYS_TEXT("caching: starting state: blocks must tile the segment in 512-byte units at 0x7f0000000000"));
      t->init_blocks[1].size += 100, t->init_blocks[0].size -= 100;
    }
    CHECK(hbm_pt_check(p, NULL, NULL) == 0);
    hbm_policy_expandable.destroy(p);
  }
  hbm_trace_free(t);

  hbm_heap *h;
  REQUIRE(hbm_heap_create(sim, "caching", NULL, &h) == HBM_OK);
  pt *m = model_of(h);
  hbm_pt_hooks hooks = {no_hint, NULL, &hooks};
  CHECK(m && hbm_pt_set_hooks(&m->base, &hooks) == HBM_OK && m->hooks.hint == no_hint && m->hooks.arg == &hooks);
  CHECK(m && hbm_pt_set_hooks(&m->base, NULL) == HBM_OK && !m->hooks.hint && !m->hooks.action && !m->hooks.arg);
  hbm_heap_destroy(h);
  REQUIRE(hbm_heap_create(sim, "bestfit", NULL, &h) == HBM_OK);
  hbm_reloc *r;
  hbm_policy *p = hbm_heap_enter(h, &r);
  hbm_heap_leave(h);
  CHECK(hbm_pt_set_hooks(p, &hooks) == HBM_EINVAL);
  hbm_heap_destroy(h);
}

int main(void) {
  hbm_device *sim;
  CHECK(hbm_device_open("sim:1GiB", &sim) == HBM_OK);
  caching(sim);
  expandable(sim);
  seed_and_hooks(sim);
  hbm_device_close(sim);
  reference(0);
  reference(1);
  return test_done("test_caching_check");
}
