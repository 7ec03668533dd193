/* test_compact_plan: what compaction moves, against slow references.
 *   1. The minimum (compactor.h): on small random layouts with random pins,
 *      hbm_compactor_min_moved equals a brute force over every window
 *      position; every partial plan moves at least it, opens the hole it
 *      promises once applied, keeps every block's size, and leaves the range's
 *      invariants whole. A partial plan is refused only when neither an
 *      evacuation nor a slide exists (checked by brute force too), and moves
 *      what a slow reference of compactor.h's rule moves.
 *   2. Partial vs full on random heaps (public API, dry runs, sim device):
 *      partial never moves more than full whenever full opens the hole, and
 *      moves strictly less on average; the mean ratio is printed.
 *   3. Ordered copies: chunked copies equal memmove on overlapping ranges. */
#include <sys/mman.h>

#include "core/compactor.h"
#include "core/util.h"
#include "hbm.h"
#include "testutil.h"

enum { UNIT = 512 };

/* ---- 1. the minimum and partial plans on small layouts ---------------------------- */
typedef struct pinset { uint64_t addr[64]; int n; } pinset;
static int pinned_q(void *arg, uint64_t addr) {
  const pinset *p = arg;
  for (int i = 0; i < p->n; i++)
    if (p->addr[i] == addr) return 1;
  return 0;
}

static uint64_t brute_min(const hbm_clayout *l, uint64_t need) {
  uint64_t best = UINT64_MAX;
  for (uint64_t a = l->base; a + need <= l->end; a += UNIT) {
    uint64_t cost = 0;
    int pinned = 0;
    for (size_t i = 0; i < l->n; i++) {
      const hbm_celem *e = &l->el[i];
      if (!e->live || e->addr >= a + need || e->addr + e->size <= a) continue;
      cost += e->size;
      pinned |= e->pinned;
    }
    if (!pinned && cost < best) best = cost;
  }
  return best;
}

/* What a partial plan moves, by compactor.h's rule, the slow way: the
 * cheapest slide (a pin-free run of elements from a hole whose holes add up
 * to need, the fewest live bytes); else, tried first and winning ties, the
 * windows at each element's start that meet no pin, cheapest (then lowest)
 * first, at most HBM_COMPACTOR_EVACUATE_TRIES of those no dearer than the
 * slide: the first whose live blocks all fit, largest first, each into the
 * smallest hole outside it (what is left of a hole staying a hole). Returns
 * UINT64_MAX where neither exists; *hole gets where the hole opens (the
 * window's start; for a slide, past the blocks slid down, the lowest such
 * run first). */
typedef struct ref_window { uint64_t cost; size_t first, end; } ref_window;
static int ref_window_cmp(const void *a, const void *b) {
  const ref_window *x = a, *y = b;
  if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
  return x->first < y->first ? -1 : x->first > y->first;
}
static int ref_size_desc(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x > y ? -1 : x < y;
}
static int ref_evacuates(const hbm_clayout *l, uint64_t need, const ref_window *w) {
  static uint64_t holes[8192], blocks[8192];
  size_t nh = 0, nb = 0;
  const uint64_t a_end = l->el[w->first].addr + need;
  for (size_t i = 0; i < l->n; i++) {
    const hbm_celem *e = &l->el[i];
    int inside = i >= w->first && i < w->end;
    if (e->live && inside) blocks[nb++] = e->size;
    else if (!e->live && !inside) holes[nh++] = e->size;
    else if (!e->live && e->addr + e->size > a_end) holes[nh++] = e->addr + e->size - a_end; /* the part past it */
  }
  qsort(blocks, nb, sizeof *blocks, ref_size_desc);
  for (size_t b = 0; b < nb; b++) {
    size_t best = nh;
    for (size_t h = 0; h < nh; h++)
      if (holes[h] >= blocks[b] && (best == nh || holes[h] < holes[best])) best = h;
    if (best == nh) return 0;
    holes[best] -= blocks[b];
  }
  return 1;
}
static int ref_heap_full; /* the last call had more candidate windows than are tried */
static uint64_t ref_partial_moved(const hbm_clayout *l, uint64_t need, uint64_t *hole) {
  uint64_t slide = UINT64_MAX;
  for (size_t i = 0; i < l->n; i++) {
    if (l->el[i].live) continue; /* a slide starts at a hole */
    uint64_t free_b = 0, live_b = 0;
    for (size_t k = i; k < l->n && !l->el[k].pinned && free_b < need; k++)
      *(l->el[k].live ? &live_b : &free_b) += l->el[k].size;
    if (free_b >= need && live_b < slide) {
      slide = live_b;
      *hole = l->el[i].addr + live_b;
    }
  }
  static ref_window w[8192];
  size_t nw = 0;
  for (size_t i = 0; i < l->n && need <= l->end - l->el[i].addr; i++) {
    ref_window x = {0, i, i};
    int pinned = 0;
    for (; x.end < l->n && l->el[x.end].addr < l->el[i].addr + need; x.end++) {
      if (l->el[x.end].live) x.cost += l->el[x.end].size;
      pinned |= l->el[x.end].pinned;
    }
    if (!pinned && x.cost <= slide) w[nw++] = x;
  }
  qsort(w, nw, sizeof *w, ref_window_cmp);
  ref_heap_full = nw > HBM_COMPACTOR_EVACUATE_TRIES;
  for (size_t t = 0; t < nw && t < HBM_COMPACTOR_EVACUATE_TRIES; t++)
    if (ref_evacuates(l, need, &w[t])) {
      *hole = l->el[w[t].first].addr;
      return w[t].cost;
    }
  return slide;
}

typedef struct collect { uint64_t addr[4096], size[4096]; int n; } collect;
static int collect_live(void *arg, uint64_t addr, uint64_t size, int live) {
  collect *c = arg;
  if (live && c->n < 4096) { c->addr[c->n] = addr; c->size[c->n] = size; c->n++; }
  return 0;
}

/* Layouts of `units` + up to `spread` units of 512 B, blocks of 1 to
 * `max_block` units (most small), or with `big_pct` set, that share of
 * blocks up to `max_block` and the rest of 1 to 3 units; requests of up to
 * 1 / `need_div` of the layout (past the largest hole, where need_div > 1). */
static void small_layouts(uint64_t *rng, int rounds, uint64_t units_at_least, uint64_t spread, uint64_t max_block,
                          int big_pct, uint64_t need_div) {
  hbm_device *sim;
  CHECK(hbm_device_open("sim:1GiB", &sim) == HBM_OK);
  hbm_clayout l = {0};
  hbm_cplan plan = {0};
  int plans = 0, refused = 0, optimal = 0, heap_full = 0;
  for (int round = 0; round < rounds; round++) {
    /* The layout lives in a segment of the device: the compactor's copies
     * must land in device memory (the sim device refuses others). */
    uint64_t units = units_at_least + test_rand_below(rng, spread), base;
    CHECK(hbm_dev_seg_alloc(sim, units * UNIT, 0, &base) == HBM_OK);
    hbm_range *r;
    CHECK(hbm_range_create(base, units * UNIT, UNIT, &r) == HBM_OK);
    static uint64_t live_addr[4096];
    int nlive = 0;
    for (int k = 0; k < 6000 && nlive < 4096; k++) { /* fill, then punch holes */
      uint64_t a, bs;
      uint64_t size = big_pct ? (test_rand_below(rng, 100) < (uint64_t)big_pct ? 1 + test_rand_below(rng, max_block)
                                                                               : 1 + test_rand_below(rng, 3))
                              : 1 + test_rand_below(rng, 1 + test_rand_below(rng, max_block));
      if (hbm_range_alloc(r, size * UNIT, 0, &a, &bs) == HBM_OK)
        live_addr[nlive++] = a;
    }
    for (int k = 0; k < nlive;) {
      if (test_rand_below(rng, 100) < 40) {
        uint64_t bs;
        CHECK(hbm_range_free(r, live_addr[k], &bs) == HBM_OK);
        live_addr[k] = live_addr[--nlive];
      } else {
        k++;
      }
    }
    pinset pins = {.n = 0};
    for (int k = 0; k < nlive && pins.n < 64; k++)
      if (test_rand_below(rng, 100) < 6) pins.addr[pins.n++] = live_addr[k];
    CHECK(hbm_clayout_read(&l, r, UNIT, pinned_q, &pins) == HBM_OK);
    uint64_t need = (1 + test_rand_below(rng, units / need_div)) * UNIT;
    if (need_div > 1) need += l.largest_free; /* always something to move */
    uint64_t window, min = hbm_compactor_min_moved(&l, need, &window);
    CHECK_EQ_U64(min, brute_min(&l, need));
    int rc = hbm_compactor_plan_partial(&l, need, &plan);
    uint64_t hole = 0;
    uint64_t want = l.largest_free >= need ? 0 : l.free_bytes < need ? UINT64_MAX : ref_partial_moved(&l, need, &hole);
    CHECK_EQ_U64(rc == HBM_OK ? plan.moved_bytes : UINT64_MAX, want);
    /* the reference's hole is the window, or the slide's run; the plan's is
     * all the free run it ends up in */
    if (want && want != UINT64_MAX)
      CHECK(plan.hole_addr <= hole && hole - plan.hole_addr + hbm_align_up(need, UNIT) <= plan.hole_size);
    heap_full += want && want != UINT64_MAX && ref_heap_full;
    if (l.largest_free >= need) {
      CHECK(rc == HBM_OK && plan.kind == HBM_CPLAN_NONE && plan.nmoves == 0);
    } else if (rc == HBM_ENOMEM) {
      refused++;
      /* Refused: free bytes short, or no pin-free run of holes adds up to need
       * (then no slide); evacuation was tried too. */
      if (l.free_bytes >= need && min != UINT64_MAX) {
        uint64_t run_free = 0, best_run = 0;
        for (size_t i = 0; i < l.n; i++) {
          if (l.el[i].pinned) run_free = 0;
          else if (!l.el[i].live) run_free += l.el[i].size;
          if (run_free > best_run) best_run = run_free;
        }
        CHECK(best_run < need);
      }
    } else {
      CHECK(rc == HBM_OK);
      plans++;
      CHECK(plan.moved_bytes >= min);
      CHECK_EQ_U64(plan.min_moved_bytes, min);
      if (plan.moved_bytes == min) optimal++;
      collect before = {.n = 0}, after = {.n = 0};
      hbm_range_walk(r, collect_live, &before);
      CHECK(hbm_compactor_apply(&r, sim, &l, &plan, 0, NULL, NULL, NULL) == HBM_OK);
      CHECK(hbm_range_check(r, NULL, NULL) == 0);
      CHECK(hbm_range_largest_free(r) >= hbm_align_up(need, UNIT));
      hbm_range_walk(r, collect_live, &after);
      CHECK(before.n == after.n);
      for (int i = 0; i < before.n; i++) { /* each block where the plan said, same size */
        uint64_t at = before.addr[i];
        for (size_t m = 0; m < plan.nmoves; m++)
          if (plan.moves[m].src == at) at = plan.moves[m].dst;
        CHECK_EQ_U64(hbm_range_block_size(r, at), before.size[i]);
        if (pinned_q(&pins, before.addr[i])) CHECK(at == before.addr[i]);
      }
    }
    /* Full: pinned blocks stay, order kept, never more than partial's hole
     * would need when it opens one. */
    CHECK(hbm_clayout_read(&l, r, UNIT, pinned_q, &pins) == HBM_OK);
    CHECK(hbm_compactor_plan_full(&l, &plan) == HBM_OK);
    for (size_t m = 1; m < plan.nmoves; m++) CHECK(plan.moves[m].src > plan.moves[m - 1].src && plan.moves[m].dst > plan.moves[m - 1].dst);
    for (size_t m = 0; m < plan.nmoves; m++) CHECK(plan.moves[m].dst < plan.moves[m].src && !pinned_q(&pins, plan.moves[m].src));
    CHECK(hbm_compactor_apply(&r, sim, &l, &plan, 0, NULL, NULL, NULL) == HBM_OK);
    CHECK(hbm_range_check(r, NULL, NULL) == 0);
    if (!pins.n) CHECK_EQ_U64(hbm_range_largest_free(r), hbm_range_free_bytes(r));
    hbm_range_destroy(r);
    CHECK(hbm_dev_seg_free(sim, base, units * UNIT) == HBM_OK);
  }
  printf("test_compact_plan: %d layouts of %llu to %llu units: %d partial plans (%d moved exactly the minimum, %d chose "
         "among more windows than are tried), %d refused\n",
         rounds, (unsigned long long)units_at_least, (unsigned long long)(units_at_least + spread - 1), plans, optimal,
         heap_full, refused);
  CHECK(plans > rounds / 10);
  hbm_clayout_release(&l);
  hbm_cplan_release(&plan);
  hbm_device_close(sim);
}

/* ---- 2. partial vs full on random heaps ------------------------------------------- */
static void partial_vs_full(uint64_t *rng, int heaps) {
  hbm_device *sim;
  CHECK(hbm_device_open("sim:16GiB", &sim) == HBM_OK);
  double ratio_sum = 0, min_ratio_sum = 0;
  int compared = 0, strictly_less = 0, at_min = 0;
  for (int k = 0; k < heaps; k++) {
    hbm_heap *h;
    CHECK(hbm_heap_create(sim, "compact", "on_failure:off", &h) == HBM_OK);
    hbm_handle hd[2048];
    int n = 0;
    uint64_t cap = 16ull << 30;
    hbm_stats st;
    for (;;) { /* fill to ~95% with LLM-like sizes, then free 30-50% at random */
      uint64_t r = test_rand_below(rng, 100), size;
      if (r < 60) size = (1 + test_rand_below(rng, 64)) << 20;
      else if (r < 95) size = (64 + test_rand_below(rng, 448)) << 20;
      else size = (512 + test_rand_below(rng, 1024)) << 20;
      hbm_heap_stats(h, &st);
      if (n == 2048 || st.allocated + size > cap * 95 / 100) break;
      if (hbm_alloc_handle(h, size, HBM_TAG_ACT, 0, &hd[n]) != HBM_OK) break;
      n++;
    }
    int pct = 30 + (int)test_rand_below(rng, 21);
    for (int i = 0; i < n; i++)
      if ((int)test_rand_below(rng, 100) < pct) CHECK(hbm_free_handle(h, hd[i]) == HBM_OK);
    if (k % 4 == 3) /* some heaps with pins */
      for (int i = 0; i < n; i++) {
        uint64_t a;
        if (hbm_handle_addr(h, hd[i], &a) == HBM_OK && test_rand_below(rng, 100) < 3) CHECK(hbm_pin(h, hd[i]) == HBM_OK);
      }
    hbm_heap_stats(h, &st);
    uint64_t free_b = cap - st.allocated;
    if (free_b <= st.largest_free + (1 << 20)) { hbm_heap_destroy(h); continue; }
    /* A request that fails for fragmentation: largest free < need <= free total. */
    uint64_t need = st.largest_free + 1 + test_rand_below(rng, free_b - st.largest_free);
    hbm_compact_options po = {.need = need, .dry_run = 1}, fo = {.dry_run = 1};
    hbm_compact_result pr, fr;
    int prc = hbm_compact(h, &po, &pr);
    CHECK(hbm_compact(h, &fo, &fr) == HBM_OK);
    if (fr.hole_size >= need) {
      CHECK(prc == HBM_OK); /* full opens it, so a slide does too */
      if (prc == HBM_OK) {
        CHECK(pr.moved_bytes <= fr.moved_bytes);
        CHECK(pr.moved_bytes >= pr.min_moved_bytes);
        at_min += pr.moved_bytes == pr.min_moved_bytes;
        ratio_sum += (double)pr.moved_bytes / (double)fr.moved_bytes;
        min_ratio_sum += pr.min_moved_bytes ? (double)pr.moved_bytes / (double)pr.min_moved_bytes : 1.0;
        strictly_less += pr.moved_bytes < fr.moved_bytes;
        compared++;
        /* The real pass moves what the dry run said and opens the hole. */
        po.dry_run = 0;
        hbm_compact_result done;
        CHECK(hbm_compact(h, &po, &done) == HBM_OK);
        CHECK_EQ_U64(done.moved_bytes, pr.moved_bytes);
        uint64_t a;
        CHECK(hbm_alloc(h, need, HBM_TAG_COMM, 0, &a) == HBM_OK);
        CHECK(hbm_check(h) == HBM_OK);
      }
    }
    hbm_heap_destroy(h);
  }
  double mean = compared ? ratio_sum / compared : 1.0;
  printf("test_compact_plan: %d random heaps compared: mean partial/full moved ratio %.4f, partial moved "
         "less in %d, exactly the minimum in %d, mean moved/minimum %.4f\n",
         compared, mean, strictly_less, at_min, compared ? min_ratio_sum / compared : 1.0);
  CHECK(compared >= heaps / 2);
  CHECK(mean < 1.0);
  hbm_device_close(sim);
}

/* ---- 3. ordered copies --------------------------------------------------------------- */
static void ordered_copies(uint64_t *rng, int rounds) {
  hbm_device *dev;
  if (hbm_device_open("host:4MiB", &dev) != HBM_OK) return;
  uint64_t seg;
  CHECK(hbm_dev_seg_alloc(dev, 2 << 20, 0, &seg) == HBM_OK);
  unsigned char *mem = (unsigned char *)(uintptr_t)seg, *ref = malloc(2 << 20);
  for (int round = 0; round < rounds; round++) {
    for (int i = 0; i < (2 << 20); i++) mem[i] = ref[i] = (unsigned char)test_rand(rng);
    uint64_t n = 1 + test_rand_below(rng, 1 << 20), src = test_rand_below(rng, (2 << 20) - n);
    uint64_t dst = test_rand_below(rng, 4) ? src + test_rand_below(rng, 2 * n + 1) - n : test_rand_below(rng, (2 << 20) - n);
    if (dst > (2 << 20) - n) dst = (2 << 20) - n;
    uint64_t copies = 0;
    CHECK(hbm_compactor_copy_ordered(dev, seg + dst, seg + src, n, &copies) == HBM_OK);
    memmove(ref + dst, ref + src, n);
    CHECK(memcmp(mem, ref, 2 << 20) == 0);
  }
  free(ref);
  hbm_dev_seg_free(dev, seg, 2 << 20);
  hbm_device_close(dev);
}

int main(void) {
  uint64_t seed = test_seed("test_compact_plan"), rng = seed;
  double scale = test_scale();
  small_layouts(&rng, (int)(3000 * scale) + 50, 16, 240, 12, 0, 1);
  /* larger layouts, each request past the largest hole: more windows than
   * the planner tries (its shortlist of the cheapest decides), and with a
   * few big blocks, windows that cannot be evacuated */
  small_layouts(&rng, (int)(250 * scale) + 10, 3000, 1000, 3, 0, 16);
  small_layouts(&rng, (int)(250 * scale) + 10, 3000, 1000, 80, 4, 16);
  partial_vs_full(&rng, (int)(200 * scale) + 20);
  ordered_copies(&rng, (int)(60 * scale) + 5);
  return test_done("test_compact_plan");
}
