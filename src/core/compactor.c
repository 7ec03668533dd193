/* compactor.c: layouts, plans and moves (see compactor.h for the plans and
 * the definition of the minimum). Every plan is computed on a copy of the
 * tiling read once, so planning never touches the range or the device. */
#include "core/compactor.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ordset.h"
#include "core/util.h"

/* ================================================================================ */
/* layout                                                                           */
/* ================================================================================ */
typedef struct read_ctx {
  hbm_clayout *l;
  hbm_cpinned_fn *pinned;
  void *arg;
  int failed;
} read_ctx;

static int read_one(void *arg, uint64_t addr, uint64_t size, int live) {
  read_ctx *c = arg;
  hbm_clayout *l = c->l;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 256;
    hbm_celem *e = realloc(l->el, cap * sizeof *e);
    if (!e) { c->failed = 1; return 1; }
    l->el = e;
    l->cap = cap;
  }
  hbm_celem e = {addr, size, (uint8_t)(live != 0), 0};
  if (live) {
    e.pinned = (uint8_t)(c->pinned && c->pinned(c->arg, addr));
    l->live_bytes += size;
    l->live_blocks++;
    l->pinned_blocks += e.pinned;
  } else {
    l->free_bytes += size;
    if (size > l->largest_free) l->largest_free = size;
  }
  l->el[l->n++] = e;
  return 0;
}

int hbm_clayout_read(hbm_clayout *l, const hbm_range *r, uint64_t unit, hbm_cpinned_fn *pinned,
                     void *arg) {
  l->n = 0;
  l->base = hbm_range_base(r);
  l->end = l->base + hbm_range_size(r);
  l->unit = unit;
  l->free_bytes = l->live_bytes = l->largest_free = l->live_blocks = l->pinned_blocks = 0;
  read_ctx c = {l, pinned, arg, 0};
  hbm_range_walk(r, read_one, &c);
  if (c.failed) {
    l->n = 0;
    return HBM_EHOSTMEM;
  }
  return HBM_OK;
}

void hbm_clayout_release(hbm_clayout *l) {
  free(l->el);
  memset(l, 0, sizeof *l);
}

/* ================================================================================ */
/* plans                                                                            */
/* ================================================================================ */
static void plan_reset(hbm_cplan *p) {
  p->kind = HBM_CPLAN_NONE;
  p->nmoves = 0;
  p->moved_bytes = p->min_moved_bytes = p->hole_addr = p->hole_size = p->copies = 0;
}

void hbm_cplan_release(hbm_cplan *p) {
  free(p->moves);
  memset(p, 0, sizeof *p);
}

static int plan_push(hbm_cplan *p, uint64_t src, uint64_t dst, uint64_t size) {
  if (p->nmoves == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 64;
    hbm_cmove *m = realloc(p->moves, cap * sizeof *m);
    if (!m) return HBM_EHOSTMEM;
    p->moves = m;
    p->cap = cap;
  }
  p->moves[p->nmoves++] = (hbm_cmove){src, dst, size};
  p->moved_bytes += size;
  return HBM_OK;
}

/* The run of moves from moves[*i] on that continue each other (same shift,
 * adjacent sources), joined into one copy as apply issues it; *i moves past
 * it. */
static void next_run(const hbm_cplan *p, size_t *i, uint64_t *src, uint64_t *dst, uint64_t *len) {
  *src = p->moves[*i].src, *dst = p->moves[*i].dst, *len = p->moves[*i].size;
  for (++*i; *i < p->nmoves && p->moves[*i].src == *src + *len && p->moves[*i].dst == *dst + *len; ++*i)
    *len += p->moves[*i].size;
}

/* Copies after joining moves that continue each other: what apply issues. */
static uint64_t count_copies(const hbm_cplan *p) {
  uint64_t copies = 0, src, dst, len;
  for (size_t i = 0; i < p->nmoves; copies++) next_run(p, &i, &src, &dst, &len);
  return copies;
}

/* ---- windows: every [a, a + need) with a at an element start, free of pins ---- */
typedef void window_fn(void *ctx, size_t first, size_t end, uint64_t cost);

/* Visits each window [el[i].addr, el[i].addr + need) that fits the range and
 * intersects no pinned block, with the elements it intersects (first..end-1)
 * and its cost: the live bytes among them. Two pointers: O(n). */
static void each_window(const hbm_clayout *l, uint64_t need, window_fn *visit, void *ctx) {
  uint64_t cost = 0, pins = 0;
  size_t j = 0;
  for (size_t i = 0; i < l->n; i++) {
    uint64_t a = l->el[i].addr;
    if (need > l->end - a) break;
    while (j < l->n && l->el[j].addr < a + need) {
      if (l->el[j].live) cost += l->el[j].size;
      pins += l->el[j].pinned;
      j++;
    }
    if (!pins) visit(ctx, i, j, cost);
    if (l->el[i].live) cost -= l->el[i].size;
    pins -= l->el[i].pinned;
  }
}

typedef struct min_ctx { uint64_t best, addr; const hbm_clayout *l; } min_ctx;
static void min_visit(void *ctx, size_t first, size_t end, uint64_t cost) {
  min_ctx *m = ctx;
  if (cost < m->best) { m->best = cost; m->addr = m->l->el[first].addr; }
}

uint64_t hbm_compactor_min_moved(const hbm_clayout *l, uint64_t need, uint64_t *window) {
  if (need > l->end - l->base) return UINT64_MAX;
  need = hbm_align_up(need, l->unit);
  if (need == 0 || need > l->end - l->base) return UINT64_MAX;
  min_ctx m = {UINT64_MAX, 0, l};
  each_window(l, need, min_visit, &m);
  if (window) *window = m.addr;
  return m.best;
}

/* ---- full: slide down, order kept, pinned blocks are walls ---- */
int hbm_compactor_plan_full(const hbm_clayout *l, hbm_cplan *p) {
  plan_reset(p);
  uint64_t cursor = l->base;
  for (size_t i = 0; i < l->n; i++) {
    const hbm_celem *e = &l->el[i];
    if (!e->live) continue;
    if (e->pinned) {
      if (e->addr - cursor > p->hole_size) { p->hole_size = e->addr - cursor; p->hole_addr = cursor; }
      cursor = e->addr + e->size;
      continue;
    }
    if (cursor != e->addr && plan_push(p, e->addr, cursor, e->size) != HBM_OK) return HBM_EHOSTMEM;
    cursor += e->size;
  }
  if (l->end - cursor > p->hole_size) { p->hole_size = l->end - cursor; p->hole_addr = cursor; }
  p->kind = p->nmoves ? HBM_CPLAN_FULL : HBM_CPLAN_NONE;
  uint64_t min = p->hole_size ? hbm_compactor_min_moved(l, p->hole_size, NULL) : 0;
  p->min_moved_bytes = min == UINT64_MAX ? 0 : min;
  p->copies = count_copies(p);
  return HBM_OK;
}

/* ---- partial: slide ---- */
/* The cheapest run el[i..k) that starts with a hole, holds no pinned block and
 * whose holes add up to need. Its live blocks all move (each lies above the
 * first hole); sliding them down joins the holes into one at the top. */
static uint64_t best_slide(const hbm_clayout *l, uint64_t need, size_t *first, size_t *end) {
  uint64_t best = UINT64_MAX;
  size_t s = 0;
  while (s < l->n) {
    size_t t = s; /* segment [s, t): no pinned element */
    while (t < l->n && !l->el[t].pinned) t++;
    uint64_t free_b = 0, live_b = 0;
    size_t k = s;
    for (size_t i = s; i < t; i++) {
      while (k < t && free_b < need) {
        if (l->el[k].live) live_b += l->el[k].size; else free_b += l->el[k].size;
        k++;
      }
      if (free_b >= need && !l->el[i].live && live_b < best) { best = live_b; *first = i; *end = k; }
      if (l->el[i].live) live_b -= l->el[i].size; else free_b -= l->el[i].size;
    }
    s = t + 1;
  }
  return best;
}

/* ---- partial: evacuate ---- */
typedef struct window { size_t first, end; uint64_t cost; } window;
static int window_cmp(const void *a, const void *b) {
  const window *x = a, *y = b;
  if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
  return x->first < y->first ? -1 : x->first > y->first;
}
/* The HBM_COMPACTOR_EVACUATE_TRIES cheapest windows with cost <= limit: a
 * max-heap on (cost, first), so each window costs O(log of that). */
typedef struct cand_ctx { window w[HBM_COMPACTOR_EVACUATE_TRIES]; size_t n; uint64_t limit; } cand_ctx;
static void cand_sift_down(cand_ctx *c, size_t i) {
  for (;;) {
    size_t big = i, l = 2 * i + 1, r = l + 1;
    if (l < c->n && window_cmp(&c->w[l], &c->w[big]) > 0) big = l;
    if (r < c->n && window_cmp(&c->w[r], &c->w[big]) > 0) big = r;
    if (big == i) return;
    window t = c->w[i];
    c->w[i] = c->w[big];
    c->w[big] = t;
    i = big;
  }
}
static void cand_visit(void *ctx, size_t first, size_t end, uint64_t cost) {
  cand_ctx *c = ctx;
  window w = {first, end, cost};
  if (cost > c->limit) return;
  if (c->n < HBM_COMPACTOR_EVACUATE_TRIES) {
    size_t i = c->n++;
    c->w[i] = w;
    while (i && window_cmp(&c->w[(i - 1) / 2], &c->w[i]) < 0) {
      window t = c->w[i];
      c->w[i] = c->w[(i - 1) / 2];
      c->w[(i - 1) / 2] = t;
      i = (i - 1) / 2;
    }
  } else if (window_cmp(&w, &c->w[0]) < 0) {
    c->w[0] = w;
    cand_sift_down(c, 0);
  }
}

typedef struct hole { uint64_t addr, size; size_t elem; } hole;
static int hole_cmp(const void *a, const void *b) {
  const hole *x = a, *y = b;
  if (x->size != y->size) return x->size < y->size ? -1 : 1;
  return x->addr < y->addr ? -1 : x->addr > y->addr;
}
static int block_size_desc(const void *a, const void *b) {
  const hbm_celem *x = a, *y = b;
  if (x->size != y->size) return x->size > y->size ? -1 : 1;
  return x->addr < y->addr ? -1 : x->addr > y->addr;
}
static int move_src_cmp(const void *a, const void *b) {
  const hbm_cmove *x = a, *y = b;
  return x->src < y->src ? -1 : x->src > y->src;
}

/* The holes outside a window, as an ordered set keyed (size, address): best
 * fit is lower_bound(size). A try changes it and undoes its changes after,
 * so one set serves every window: O((holes in the window + blocks) log h). */
typedef struct undo { hbm_okey key; uint32_t value; uint32_t inserted; } undo;
typedef struct holeset { hbm_ordset *set; undo *log; size_t nlog; } holeset;

static int hs_insert(holeset *hs, uint64_t addr, uint64_t size, uint32_t elem) {
  hbm_okey k = {size, addr};
  if (hbm_ordset_insert(hs->set, k, elem) != HBM_OK) return HBM_EHOSTMEM;
  hs->log[hs->nlog++] = (undo){k, elem, 1};
  return HBM_OK;
}
static void hs_erase(holeset *hs, hbm_okey k, uint32_t elem) {
  hbm_ordset_erase(hs->set, k);
  hs->log[hs->nlog++] = (undo){k, elem, 0};
}
/* Undoes every change since the log was empty (erasing never allocates;
 * re-inserting an erased key reuses room the set had). */
static int hs_undo(holeset *hs) {
  int rc = HBM_OK;
  while (hs->nlog) {
    undo *u = &hs->log[--hs->nlog];
    if (u->inserted) hbm_ordset_erase(hs->set, u->key);
    else if (hbm_ordset_insert(hs->set, u->key, u->value) != HBM_OK) rc = HBM_EHOSTMEM;
  }
  return rc;
}

/* The end of the blocks the plan places in [lo, hi), lo if none. */
static uint64_t filled_to(const hbm_cplan *p, uint64_t lo, uint64_t hi) {
  uint64_t to = lo;
  for (size_t i = 0; i < p->nmoves; i++)
    if (p->moves[i].dst >= lo && p->moves[i].dst < hi && p->moves[i].dst + p->moves[i].size > to)
      to = p->moves[i].dst + p->moves[i].size;
  return to;
}

/* Tries to place every live block of window w into holes outside it (best fit,
 * largest block first). On success the moves are in p (sorted by source).
 * The hole set is as it was on return, whatever happened. */
static int try_evacuate(const hbm_clayout *l, uint64_t need, const window *w, const hole *holes,
                        size_t nholes, holeset *hs, hbm_celem *evac, hbm_cplan *p) {
  uint64_t a = l->el[w->first].addr, a_end = a + need, biggest = 0;
  size_t nevac = 0;
  const hbm_celem *last = &l->el[w->end - 1];
  /* Cheap refusal first: the largest block must fit the largest hole outside
   * (holes[] is sorted by size; those inside the window are skipped). */
  for (size_t i = w->first; i < w->end; i++)
    if (l->el[i].live && l->el[i].size > biggest) biggest = l->el[i].size;
  uint64_t cut = !last->live && last->addr + last->size > a_end ? last->addr + last->size - a_end : 0;
  uint64_t outside = cut;
  for (size_t h = nholes; h-- > 0;)
    if (holes[h].elem < w->first || holes[h].elem >= w->end) {
      if (holes[h].size > outside) outside = holes[h].size;
      break;
    }
  if (biggest > outside) return HBM_ENOMEM;
  int rc = HBM_OK;
  for (size_t i = w->first; i < w->end; i++) {
    if (l->el[i].live) evac[nevac++] = l->el[i];
    else hs_erase(hs, (hbm_okey){l->el[i].size, l->el[i].addr}, (uint32_t)i);
  }
  if (cut) rc = hs_insert(hs, a_end, cut, (uint32_t)(w->end - 1));
  qsort(evac, nevac, sizeof *evac, block_size_desc);
  plan_reset(p);
  for (size_t i = 0; i < nevac && rc == HBM_OK; i++) {
    hbm_okey found;
    uint32_t elem;
    if (!hbm_ordset_lower_bound(hs->set, (hbm_okey){evac[i].size, 0}, &found, &elem)) { rc = HBM_ENOMEM; break; }
    if ((rc = plan_push(p, evac[i].addr, found.lo, evac[i].size)) != HBM_OK) break;
    hs_erase(hs, found, elem);
    if (found.hi > evac[i].size) rc = hs_insert(hs, found.lo + evac[i].size, found.hi - evac[i].size, elem);
  }
  int undo_rc = hs_undo(hs);
  if (rc == HBM_OK) rc = undo_rc;
  if (rc != HBM_OK) return rc;
  qsort(p->moves, p->nmoves, sizeof *p->moves, move_src_cmp);
  p->kind = HBM_CPLAN_EVACUATE;
  /* The hole is the whole free run the window ends up in, as a full pass's
   * and a slide's are (a dry run reports what the pass will leave). A block
   * placed in a hole takes its bottom, and the next one the bottom of what is
   * left, so the hole below the window still reaches it unless filled; a
   * hole at or past its top joins it only if nothing was placed in it; the
   * space of a live last element past the top is freed with it. */
  const hbm_celem *next = w->end < l->n && last->live && !l->el[w->end].live ? &l->el[w->end] : NULL;
  uint64_t bottom = a, top = last->addr + last->size;
  if (w->first && !l->el[w->first - 1].live) bottom = filled_to(p, l->el[w->first - 1].addr, a);
  if (!last->live && filled_to(p, a_end, top) > a_end) top = a_end;
  if (next) top = filled_to(p, next->addr, next->addr + next->size) > next->addr ? next->addr : next->addr + next->size;
  p->hole_addr = bottom;
  p->hole_size = top - bottom;
  return HBM_OK;
}

static int plan_evacuate(const hbm_clayout *l, uint64_t need, uint64_t limit, hbm_cplan *p) {
  cand_ctx *c = malloc(sizeof *c);
  if (!c) return HBM_EHOSTMEM;
  c->n = 0;
  c->limit = limit;
  each_window(l, need, cand_visit, c);
  if (!c->n) { free(c); return HBM_ENOMEM; }
  qsort(c->w, c->n, sizeof *c->w, window_cmp);
  size_t nholes = l->n - l->live_blocks;
  hole *holes = malloc((nholes + 1) * sizeof *holes);
  hbm_celem *evac = malloc((l->live_blocks + 1) * sizeof *evac);
  holeset hs = {NULL, malloc((nholes + 2 * l->live_blocks + 4) * sizeof *hs.log), 0};
  int rc = HBM_ENOMEM;
  if (!holes || !evac || !hs.log || hbm_ordset_create(&hs.set) != HBM_OK) rc = HBM_EHOSTMEM;
  else {
    size_t h = 0;
    for (size_t i = 0; i < l->n; i++)
      if (!l->el[i].live) {
        holes[h++] = (hole){l->el[i].addr, l->el[i].size, i};
        if (hbm_ordset_insert(hs.set, (hbm_okey){l->el[i].size, l->el[i].addr}, (uint32_t)i) != HBM_OK) rc = HBM_EHOSTMEM;
      }
    qsort(holes, nholes, sizeof *holes, hole_cmp);
    for (size_t t = 0; t < c->n && rc == HBM_ENOMEM; t++)
      rc = try_evacuate(l, need, &c->w[t], holes, nholes, &hs, evac, p);
  }
  if (hs.set) hbm_ordset_destroy(hs.set);
  free(hs.log);
  free(holes);
  free(evac);
  free(c);
  if (rc != HBM_OK) plan_reset(p);
  return rc;
}

int hbm_compactor_plan_partial(const hbm_clayout *l, uint64_t need, hbm_cplan *p) {
  plan_reset(p);
  if (need > l->end - l->base) return HBM_ENOMEM; /* before rounding: no overflow */
  need = hbm_align_up(need, l->unit);
  if (need == 0) return HBM_OK;
  if (l->largest_free >= need) { /* nothing to move: point at the largest hole */
    for (size_t i = 0; i < l->n; i++)
      if (!l->el[i].live && l->el[i].size == l->largest_free) {
        p->hole_addr = l->el[i].addr;
        p->hole_size = l->el[i].size;
        break;
      }
    return HBM_OK;
  }
  if (l->free_bytes < need) return HBM_ENOMEM;
  uint64_t min = hbm_compactor_min_moved(l, need, NULL);
  if (min == UINT64_MAX) return HBM_ENOMEM;
  size_t first = 0, end = 0;
  uint64_t slide = best_slide(l, need, &first, &end);
  /* An evacuation as cheap as the slide wins: it fills holes elsewhere. */
  int rc = plan_evacuate(l, need, slide, p);
  if (rc == HBM_EHOSTMEM) return rc;
  if (rc != HBM_OK) {
    if (slide == UINT64_MAX) return HBM_ENOMEM;
    plan_reset(p);
    uint64_t cursor = l->el[first].addr;
    for (size_t i = first; i < end; i++) {
      const hbm_celem *e = &l->el[i];
      if (!e->live) continue;
      if (plan_push(p, e->addr, cursor, e->size) != HBM_OK) return HBM_EHOSTMEM;
      cursor += e->size;
    }
    p->kind = HBM_CPLAN_SLIDE;
    p->hole_addr = cursor;
    p->hole_size = l->el[end - 1].addr + l->el[end - 1].size - cursor;
  }
  p->min_moved_bytes = min;
  p->copies = count_copies(p);
  return HBM_OK;
}

/* ================================================================================ */
/* moving                                                                           */
/* ================================================================================ */
/* As hbm_compactor_copy_ordered; *done gets the bytes whose chunks completed:
 * a prefix when moving down, a suffix when moving up. */
static int copy_ordered(hbm_device *dev, uint64_t dst, uint64_t src, uint64_t n, uint64_t *ncopies,
                        uint64_t *done) {
  *done = 0;
  if (dst == src || n == 0) { *done = n; return HBM_OK; }
  uint64_t shift = dst < src ? src - dst : dst - src;
  int rc = HBM_OK;
  if (shift >= n) {
    (*ncopies)++;
    rc = hbm_dev_copy(dev, dst, src, n);
    if (rc == HBM_OK) *done = n;
    return rc;
  }
  if (dst < src) { /* front to back: each chunk's source is read before it is overwritten */
    for (uint64_t off = 0; off < n && rc == HBM_OK; (*ncopies)++) {
      uint64_t c = n - off < shift ? n - off : shift;
      if ((rc = hbm_dev_copy(dev, dst + off, src + off, c)) == HBM_OK) off += c, *done = off;
    }
  } else { /* back to front */
    for (uint64_t off = n; off > 0 && rc == HBM_OK; (*ncopies)++) {
      uint64_t c = off < shift ? off : shift;
      if ((rc = hbm_dev_copy(dev, dst + off - c, src + off - c, c)) == HBM_OK) off -= c, *done = n - off;
    }
  }
  return rc;
}

uint64_t hbm_compactor_device_copies(const hbm_cplan *p, int ordered) {
  uint64_t copies = 0, src, dst, len;
  for (size_t i = 0; i < p->nmoves;) { /* the runs apply joins */
    next_run(p, &i, &src, &dst, &len);
    uint64_t shift = dst < src ? src - dst : dst - src;
    if (!ordered || shift >= len) copies++;
    else if (shift) copies += len / shift + (len % shift != 0); /* copy_ordered's chunks */
  }
  return copies;
}

int hbm_compactor_copy_ordered(hbm_device *dev, uint64_t dst, uint64_t src, uint64_t n,
                               uint64_t *ncopies) {
  uint64_t done;
  return copy_ordered(dev, dst, src, n, ncopies, &done);
}

/* An ordered copy failed after `done` bytes: move them back the same way, so
 * that the source holds all its bytes again. Each completed chunk overwrote
 * only source bytes already copied, and the failed chunk only such bytes or
 * free space, so the way back restores the source exactly. */
static int copy_ordered_undo(hbm_device *dev, uint64_t dst, uint64_t src, uint64_t n, uint64_t done) {
  uint64_t ncopies = 0, back;
  if (!done) return HBM_OK;
  if (dst < src) return copy_ordered(dev, src, dst, done, &ncopies, &back);
  return copy_ordered(dev, src + n - done, dst + n - done, done, &ncopies, &back);
}

typedef struct placed { uint64_t addr, size; } placed;
static int placed_cmp(const void *a, const void *b) {
  const placed *x = a, *y = b;
  return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Where every live block is once the first `done` moves happened (the others
 * not), sorted by address, into target (room for live_blocks). Moves are
 * sorted by source, as live blocks are. HBM_ECORRUPT for a move that does not
 * take a whole live unpinned block. */
static int place_blocks(const hbm_clayout *l, const hbm_cplan *p, size_t done, placed *target, size_t *count) {
  size_t n = 0, k = 0;
  int sorted = 1;
  for (size_t i = 0; i < l->n; i++) {
    const hbm_celem *e = &l->el[i];
    if (!e->live) continue;
    uint64_t at = e->addr;
    if (k < p->nmoves && p->moves[k].src == e->addr) {
      if (p->moves[k].size != e->size || e->pinned) return HBM_ECORRUPT;
      if (k < done) at = p->moves[k].dst;
      k++;
    }
    if (n && at < target[n - 1].addr) sorted = 0;
    target[n++] = (placed){at, e->size};
  }
  if (k != p->nmoves) return HBM_ECORRUPT;
  if (!sorted) qsort(target, n, sizeof *target, placed_cmp);
  *count = n;
  return HBM_OK;
}

/* Fills an empty range with exactly the blocks in `target` (sorted,
 * disjoint). Each allocation of an empty range is carved from the start of
 * its only free block, the top; gaps are held by fillers (room for n + 1),
 * freed at the end. O(n). Needs no host memory when the range has room
 * (hbm_range_reserve) for 2n + 2 blocks. */
static int fill_range(hbm_range *r, const placed *target, size_t n, uint64_t *fillers) {
  uint64_t top = hbm_range_base(r), got, bs;
  size_t nfill = 0;
  int rc = HBM_OK;
  for (size_t i = 0; i < n && rc == HBM_OK; i++) {
    if (target[i].addr < top) { rc = HBM_ECORRUPT; break; }
    if (target[i].addr > top) {
      if ((rc = hbm_range_alloc(r, target[i].addr - top, 0, &got, &bs)) != HBM_OK) break;
      if (got != top) { rc = HBM_ECORRUPT; break; }
      fillers[nfill++] = got;
    }
    if ((rc = hbm_range_alloc(r, target[i].size, 0, &got, &bs)) != HBM_OK) break;
    if (got != target[i].addr || bs != target[i].size) { rc = HBM_ECORRUPT; break; }
    top = got + bs;
  }
  if (rc == HBM_ENOMEM) rc = HBM_ECORRUPT; /* the target did not fit the range */
  for (size_t i = 0; i < nfill && rc == HBM_OK; i++) rc = hbm_range_free(r, fillers[i], &bs);
  return rc;
}

int hbm_compactor_apply(hbm_range **arena, hbm_device *dev, const hbm_clayout *l,
                        const hbm_cplan *p, int ordered, int (*before_copy)(void *arg), void *arg,
                        size_t *moves_done) {
  if (moves_done) *moves_done = 0;
  if (!p->nmoves) return HBM_OK;
  /* Everything a failed copy needs is taken now, before the first copy: the
   * target and filler arrays, and room in the fresh range for any layout of
   * these blocks, so that describing a partial pass cannot fail. */
  placed *target = malloc((l->live_blocks + 1) * sizeof *target);
  uint64_t *fillers = malloc((l->live_blocks + 1) * sizeof *fillers);
  hbm_range *fresh = NULL;
  size_t n = 0;
  int rc = target && fillers ? place_blocks(l, p, p->nmoves, target, &n) : HBM_EHOSTMEM;
  if (rc == HBM_OK) rc = hbm_range_create(l->base, l->end - l->base, l->unit, &fresh);
  if (rc == HBM_OK) rc = hbm_range_reserve(fresh, 2 * (uint64_t)n + 2);
  if (rc == HBM_OK) rc = fill_range(fresh, target, n, fillers);
  /* Nothing can stop the pass now but a failed copy: the caller's last word. */
  if (rc == HBM_OK && before_copy && before_copy(arg)) rc = HBM_EBUSY;
  if (rc != HBM_OK) {
    hbm_range_destroy(fresh);
    free(target);
    free(fillers);
    return rc;
  }
  /* Copies in plan order, joining moves that continue each other; `done`
   * counts the moves whose copy completed. */
  uint64_t ncopies = 0;
  size_t done = 0;
  for (size_t i = 0; i < p->nmoves && rc == HBM_OK;) {
    uint64_t src, dst, len;
    next_run(p, &i, &src, &dst, &len);
    if (ordered) {
      uint64_t copied;
      rc = copy_ordered(dev, dst, src, len, &ncopies, &copied);
      if (rc != HBM_OK) copy_ordered_undo(dev, dst, src, len, copied); /* if this fails too: see the header */
    } else {
      rc = hbm_dev_copy(dev, dst, src, len);
    }
    if (rc == HBM_OK) done = i;
  }
  if (rc != HBM_OK) { /* describe what happened: the first `done` moves */
    hbm_range_clear(fresh);
    int frc = place_blocks(l, p, done, target, &n);
    if (frc == HBM_OK) frc = fill_range(fresh, target, n, fillers);
    if (frc != HBM_OK) { /* only a plan whose copies overwrite unmoved blocks gets here */
      hbm_range_destroy(fresh);
      free(target);
      free(fillers);
      return HBM_ECORRUPT;
    }
  }
  free(target);
  free(fillers);
  hbm_range_destroy(*arena);
  *arena = fresh;
  if (moves_done) *moves_done = done;
  return rc;
}

/* ================================================================================ */
/* checks                                                                           */
/* ================================================================================ */
#define X(v) ((unsigned long long)(v))

int hbm_clayout_check(const hbm_clayout *l, hbm_range_report_fn *report, void *arg) {
  hbm_checker k = {.report = report, .arg = arg};
  if (!hbm_is_pow2(l->unit)) { hbm_check_fail(&k, "layout: unit %llu is not a power of two", X(l->unit)); return k.failures; }
  if (l->base % l->unit || l->end % l->unit || l->end < l->base)
    hbm_check_fail(&k, "layout: range [%#llx, %#llx) not aligned to its unit %llu", X(l->base), X(l->end), X(l->unit));
  if (l->n > l->cap) hbm_check_fail(&k, "layout: %zu elements, room for %zu", l->n, l->cap);
  uint64_t at = l->base, free_b = 0, live_b = 0, largest = 0, live = 0, pinned = 0;
  for (size_t i = 0; i < l->n; i++) {
    const hbm_celem *e = &l->el[i];
    if (e->addr != at) hbm_check_fail(&k, "layout: element %zu at %#llx, expected %#llx (gap or overlap)", i, X(e->addr), X(at));
    if (e->size == 0 || e->size % l->unit || e->addr % l->unit || e->size > l->end - e->addr)
      hbm_check_fail(&k, "layout: element %zu [%#llx, +%llu) not a positive multiple of the unit inside the range", i,
           X(e->addr), X(e->size));
    if (e->live > 1 || e->pinned > 1) hbm_check_fail(&k, "layout: element %zu has flags live %u pinned %u", i, e->live, e->pinned);
    if (e->pinned && !e->live) hbm_check_fail(&k, "layout: hole at %#llx is pinned", X(e->addr));
    if (!e->live && i && !l->el[i - 1].live) hbm_check_fail(&k, "layout: holes at %#llx and %#llx are neighbours", X(l->el[i - 1].addr), X(e->addr));
    if (e->live) { live_b += e->size; live++; pinned += e->pinned != 0; }
    else { free_b += e->size; if (e->size > largest) largest = e->size; }
    at = e->addr + e->size;
  }
  if (at != l->end) hbm_check_fail(&k, "layout: elements end at %#llx, range ends at %#llx", X(at), X(l->end));
  if (free_b != l->free_bytes) hbm_check_fail(&k, "layout: free_bytes %llu, holes add up to %llu", X(l->free_bytes), X(free_b));
  if (live_b != l->live_bytes) hbm_check_fail(&k, "layout: live_bytes %llu, live blocks add up to %llu", X(l->live_bytes), X(live_b));
  if (largest != l->largest_free) hbm_check_fail(&k, "layout: largest_free %llu, largest hole %llu", X(l->largest_free), X(largest));
  if (live != l->live_blocks) hbm_check_fail(&k, "layout: live_blocks %llu, counted %llu", X(l->live_blocks), X(live));
  if (pinned != l->pinned_blocks) hbm_check_fail(&k, "layout: pinned_blocks %llu, counted %llu", X(l->pinned_blocks), X(pinned));
  return k.failures;
}

/* The first element ending above addr (binary search). */
static size_t elem_first_above(const hbm_clayout *l, uint64_t addr) {
  size_t lo = 0, hi = l->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (l->el[mid].addr + l->el[mid].size <= addr) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
/* The element starting at addr, or l->n. */
static size_t elem_at(const hbm_clayout *l, uint64_t addr) {
  size_t i = elem_first_above(l, addr);
  return i < l->n && l->el[i].addr == addr ? i : l->n;
}

typedef struct fblock { uint64_t addr, size; size_t elem; } fblock;
static int fblock_cmp(const void *a, const void *b) {
  const fblock *x = a, *y = b;
  return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* 1 if [h, h_end) is free in the final layout fin (sorted by address) and a
 * whole free run: a block or the range's edge on either side. O(n). */
static int whole_free_run(const hbm_clayout *l, const fblock *fin, size_t nfin, uint64_t h, uint64_t h_end) {
  int below = h == l->base, above = h_end == l->end;
  for (size_t i = 0; i < nfin; i++) {
    if (fin[i].addr < h_end && fin[i].addr + fin[i].size > h) return 0;
    below |= fin[i].addr + fin[i].size == h;
    above |= fin[i].addr == h_end;
  }
  return below && above;
}

int hbm_cplan_check(const hbm_clayout *l, const hbm_cplan *p, uint64_t need,
                    hbm_range_report_fn *report, void *arg) {
  hbm_checker k = {.report = report, .arg = arg};
  const hbm_cmove *mv = p->moves;
  int full = need == 0;
  if (full ? p->kind != HBM_CPLAN_NONE && p->kind != HBM_CPLAN_FULL
           : p->kind != HBM_CPLAN_NONE && p->kind != HBM_CPLAN_EVACUATE && p->kind != HBM_CPLAN_SLIDE)
    hbm_check_fail(&k, "plan: kind %d for a %s plan", p->kind, full ? "full" : "partial");
  if ((p->kind == HBM_CPLAN_NONE) != (p->nmoves == 0)) hbm_check_fail(&k, "plan: kind %d with %zu moves", p->kind, p->nmoves);
  if (p->nmoves > p->cap) { hbm_check_fail(&k, "plan: %zu moves, room for %zu", p->nmoves, p->cap); return k.failures; }
  size_t *move_of = malloc((l->n + 1) * sizeof *move_of); /* element -> its move, or SIZE_MAX */
  fblock *fin = malloc((l->live_blocks + 1) * sizeof *fin);
  if (!move_of || !fin) { free(move_of); free(fin); return HBM_EHOSTMEM; }
  for (size_t i = 0; i < l->n; i++) move_of[i] = SIZE_MAX;

  /* Each move: a whole live unpinned block, once, to an aligned place in the range. */
  uint64_t bytes = 0;
  int sound = 1; /* every move names a block: the simulation below can run */
  for (size_t i = 0; i < p->nmoves; i++) {
    const hbm_cmove *m = &mv[i];
    size_t e = elem_at(l, m->src);
    bytes += m->size;
    if (i && m->src <= mv[i - 1].src) hbm_check_fail(&k, "plan: move %zu (from %#llx) out of source order", i, X(m->src));
    if (e == l->n || !l->el[e].live || l->el[e].size != m->size) {
      hbm_check_fail(&k, "plan: move %zu [%#llx, +%llu) is not a whole live block", i, X(m->src), X(m->size));
      sound = 0;
      continue;
    }
    if (l->el[e].pinned) hbm_check_fail(&k, "plan: move %zu moves the pinned block at %#llx", i, X(m->src));
    if (move_of[e] != SIZE_MAX) { hbm_check_fail(&k, "plan: block at %#llx moves twice", X(m->src)); sound = 0; }
    move_of[e] = i;
    if (m->dst == m->src) hbm_check_fail(&k, "plan: move %zu goes nowhere (%#llx)", i, X(m->src));
    if (m->dst % l->unit || m->dst < l->base || m->dst > l->end || m->size > l->end - m->dst) {
      hbm_check_fail(&k, "plan: move %zu to [%#llx, +%llu): outside the range or off its unit", i, X(m->dst), X(m->size));
      sound = 0;
    }
  }
  if (bytes != p->moved_bytes) hbm_check_fail(&k, "plan: moved_bytes %llu, moves add up to %llu", X(p->moved_bytes), X(bytes));
  uint64_t copies = 0; /* recounted here, not with count_copies: the check stands apart from the planner */
  for (size_t i = 0; i < p->nmoves; i++)
    copies += !(i && mv[i].src == mv[i - 1].src + mv[i - 1].size && mv[i].dst == mv[i - 1].dst + mv[i - 1].size);
  if (p->copies != copies) hbm_check_fail(&k, "plan: copies %llu, joined moves make %llu", X(p->copies), X(copies));

  /* The final layout: no two blocks overlap. */
  size_t nfin = 0;
  for (size_t i = 0; i < l->n; i++)
    if (l->el[i].live && nfin < l->live_blocks)
      fin[nfin++] = (fblock){move_of[i] != SIZE_MAX ? mv[move_of[i]].dst : l->el[i].addr, l->el[i].size, i};
  qsort(fin, nfin, sizeof *fin, fblock_cmp);
  for (size_t i = 1; i < nfin; i++)
    if (fin[i - 1].addr + fin[i - 1].size > fin[i].addr) {
      hbm_check_fail(&k, "plan: blocks end up overlapping at %#llx and %#llx", X(fin[i - 1].addr), X(fin[i].addr));
      sound = 0;
    }

  /* Plan order: a move's destination may cover only its own source and the
   * old places of blocks that moved before it. Destinations are disjoint and
   * so are sources, so all the pairs met are O(n) together. */
  for (size_t i = 0; sound && i < p->nmoves; i++) {
    uint64_t d = mv[i].dst, d_end = d + mv[i].size;
    for (size_t e = elem_first_above(l, d); e < l->n && l->el[e].addr < d_end; e++) {
      if (!l->el[e].live || l->el[e].addr == mv[i].src) continue;
      if (move_of[e] == SIZE_MAX || move_of[e] > i)
        hbm_check_fail(&k, "plan: move %zu (%#llx -> %#llx) overwrites the block at %#llx before it %s", i, X(mv[i].src), X(d),
             X(l->el[e].addr), move_of[e] == SIZE_MAX ? "(it never moves)" : "moved");
    }
  }

  /* The largest free run after the moves. */
  uint64_t largest = 0, at = l->base;
  for (size_t i = 0; i <= nfin; i++) {
    uint64_t next = i < nfin ? fin[i].addr : l->end;
    if (next > at && next - at > largest) largest = next - at;
    if (i < nfin && fin[i].addr + fin[i].size > at) at = fin[i].addr + fin[i].size;
  }

  if (full) {
    /* Order kept, each movable block at the end of the one (or the wall) below. */
    uint64_t cursor = l->base;
    for (size_t i = 0; i < l->n; i++) {
      const hbm_celem *e = &l->el[i];
      if (!e->live) continue;
      uint64_t want = e->pinned ? e->addr : cursor, got = move_of[i] != SIZE_MAX ? mv[move_of[i]].dst : e->addr;
      if (got != want) hbm_check_fail(&k, "plan (full): block from %#llx ends at %#llx, expected %#llx", X(e->addr), X(got), X(want));
      cursor = want + e->size;
    }
    if (p->hole_size != largest) hbm_check_fail(&k, "plan (full): hole_size %llu, largest free run after %llu", X(p->hole_size), X(largest));
    else if (largest && (p->hole_addr < l->base || p->hole_addr > l->end - largest ||
                         !whole_free_run(l, fin, nfin, p->hole_addr, p->hole_addr + largest)))
      hbm_check_fail(&k, "plan (full): hole [%#llx, +%llu) is not a free run after the moves", X(p->hole_addr), X(largest));
    uint64_t min = p->hole_size ? hbm_compactor_min_moved(l, p->hole_size, NULL) : 0;
    if (min == UINT64_MAX) min = 0;
    if (p->min_moved_bytes != min) hbm_check_fail(&k, "plan (full): min_moved_bytes %llu, minimum %llu", X(p->min_moved_bytes), X(min));
  } else {
    uint64_t want = need > l->end - l->base ? UINT64_MAX : hbm_align_up(need, l->unit);
    uint64_t h = p->hole_addr, h_end = h + p->hole_size;
    if (p->hole_size < want || h < l->base || h > l->end || p->hole_size > l->end - h) {
      hbm_check_fail(&k, "plan (partial): hole [%#llx, +%llu) is not one of %llu bytes in the range", X(h), X(p->hole_size), X(want));
    } else {
      for (size_t i = 0; i < nfin; i++)
        if (fin[i].addr < h_end && fin[i].addr + fin[i].size > h)
          hbm_check_fail(&k, "plan (partial): the block at %#llx lies in the hole [%#llx, +%llu)", X(fin[i].addr), X(h), X(p->hole_size));
      /* every block that intersected the hole at the start has moved */
      for (size_t e = elem_first_above(l, h); e < l->n && l->el[e].addr < h_end; e++)
        if (l->el[e].live && move_of[e] == SIZE_MAX)
          hbm_check_fail(&k, "plan (partial): the block at %#llx intersects the hole and never moves", X(l->el[e].addr));
      /* all of it: what a dry run reports is what the pass leaves */
      if (!whole_free_run(l, fin, nfin, h, h_end))
        hbm_check_fail(&k, "plan (partial): the hole [%#llx, +%llu) is part of a larger free run", X(h), X(p->hole_size));
    }
    if (p->nmoves) {
      uint64_t min = hbm_compactor_min_moved(l, need, NULL);
      if (p->min_moved_bytes != min) hbm_check_fail(&k, "plan (partial): min_moved_bytes %llu, minimum %llu", X(p->min_moved_bytes), X(min));
      if (p->moved_bytes < p->min_moved_bytes)
        hbm_check_fail(&k, "plan (partial): moves %llu bytes, below the minimum %llu", X(p->moved_bytes), X(p->min_moved_bytes));
    } else if (l->largest_free < want) {
      hbm_check_fail(&k, "plan (partial): moves nothing, yet no hole of %llu bytes exists", X(want));
    }
  }
  free(move_of);
  free(fin);
  return k.failures;
}
