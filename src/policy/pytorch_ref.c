/* pytorch_ref.c: the slow reference of PyTorch's caching allocator
 * (pytorch_ref.h). Derived from the rules, not from pytorch_alloc.c: where
 * the two disagree, one of them misreads PyTorch.
 *
 * Data: one array of blocks, one array of segments (an expandable segment is
 * one entry covering its whole reservation, with a handle per page).
 *   - A block belongs to one segment; the live blocks of a segment tile it.
 *   - A block is "cached" (in PyTorch's pool.blocks) when live, not
 *     allocated and mapped; "unmapped" (pool.unmapped) when live and not
 *     mapped. A block taken for a request is marked allocated at once, as
 *     PyTorch erases it from the set before splitting.
 *   - Neighbours are found by address within the segment, by scanning.
 */
#include "policy/pytorch_ref.h"
#include "policy/pytorch_ref_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NIL (-1L)
enum { LARGE = 0, SMALL = 1 };

#define KMIN 512ull
#define KSMALL (1ull << 20)
#define KSMALLBUF (2ull << 20)
#define KLARGEBUF (20ull << 20)
#define KMINLARGE (10ull << 20)
#define KROUNDLARGE (2ull << 20)

/* ---- sizes ---- */

static int log2_floor(uint64_t x) {
  int k = -1;
  while (x) {
    x >>= 1;
    k++;
  }
  return k;
}

static uint64_t round_size(const hbm_pt_conf *c, uint64_t size) {
  if (size < KMIN) return KMIN;
  /* roundup_power2_divisions: intervals of powers of two from 1 MiB (index 0
   * holds everything up to 2 MiB), the last one open-ended. */
  int lg = log2_floor(size);
  int idx = lg > 20 ? lg - 20 : 0;
  if (idx > HBM_PT_ROUNDUP_INTERVALS - 1) idx = HBM_PT_ROUNDUP_INTERVALS - 1;
  uint64_t div = c->roundup_divisions[idx];
  if (div > 1 && size > KMIN * div) {
    uint64_t floor2 = 1ull << lg;
    if (floor2 == size) return size;
    uint64_t step = floor2 >> log2_floor(div);
    if (step == 0) return floor2 << 1;
    uint64_t down = size & ~(step - 1);
    return down == size ? size : down + step;
  }
  return (size + KMIN - 1) / KMIN * KMIN;
}

static uint64_t allocation_size(uint64_t rounded) {
  if (rounded <= KSMALL) return KSMALLBUF;
  if (rounded < KMINLARGE) return KLARGEBUF;
  return (rounded + KROUNDLARGE - 1) / KROUNDLARGE * KROUNDLARGE;
}

/* ---- blocks, neighbours, orders ---- */

/* A free slot, zeroed (not live until the caller fills it). */
static long new_block(hbm_ptref *r) {
  long i = 0;
  while (i < r->nb && r->b[i].live) i++;
  if (i == r->capb) {
    long cap = r->capb ? r->capb * 2 : 64;
    ref_block *nb = realloc(r->b, (size_t)cap * sizeof *nb);
    if (!nb) return NIL;
    r->b = nb;
    r->capb = cap;
  }
  if (i == r->nb) r->nb++;
  memset(&r->b[i], 0, sizeof r->b[i]);
  return i;
}

static long new_seg(hbm_ptref *r) {
  long i = 0;
  while (i < r->ns && r->s[i].live) i++;
  if (i == r->caps) {
    long cap = r->caps ? r->caps * 2 : 16;
    ref_seg *ns = realloc(r->s, (size_t)cap * sizeof *ns);
    if (!ns) return NIL;
    r->s = ns;
    r->caps = cap;
  }
  if (i == r->ns) r->ns++;
  memset(&r->s[i], 0, sizeof r->s[i]);
  return i;
}

static long prev_of(const hbm_ptref *r, long i) {
  for (long j = 0; j < r->nb; j++)
    if (r->b[j].live && r->b[j].seg == r->b[i].seg && r->b[j].addr + r->b[j].size == r->b[i].addr) return j;
  return NIL;
}

static long next_of(const hbm_ptref *r, long i) {
  for (long j = 0; j < r->nb; j++)
    if (r->b[j].live && r->b[j].seg == r->b[i].seg && r->b[j].addr == r->b[i].addr + r->b[i].size) return j;
  return NIL;
}

static int is_split(const hbm_ptref *r, long i) { return prev_of(r, i) != NIL || next_of(r, i) != NIL; }

static int cached(const hbm_ptref *r, long i) { return r->b[i].live && !r->b[i].allocated && r->b[i].mapped; }
static int unmapped(const hbm_ptref *r, long i) { return r->b[i].live && !r->b[i].mapped; }
static int expandable_block(const hbm_ptref *r, long i) { return r->s[r->b[i].seg].expandable; }

/* BlockComparatorSize: (stream, size, address). */
static int size_less(const ref_block *a, const ref_block *b) {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->addr < b->addr;
}

/* The cached blocks of one pool in PyTorch's order (all streams). */
static long sorted_pool(hbm_ptref *r, int pool, long **out) {
  long *v = malloc((size_t)(r->nb + 1) * sizeof *v), n = 0;
  if (!v) {
    r->host_failed = 1;
    *out = NULL;
    return 0;
  }
  for (long i = 0; i < r->nb; i++)
    if (cached(r, i) && r->b[i].small == pool) v[n++] = i;
  for (long i = 1; i < n; i++) /* insertion sort: slow is the point */
    for (long j = i; j > 0 && size_less(&r->b[v[j]], &r->b[v[j - 1]]); j--) {
      long t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  *out = v;
  return n;
}

/* lower_bound of (stream, size, address 0) in a sorted pool. */
static long lower_bound(const hbm_ptref *r, const long *v, long n, int stream, uint64_t size) {
  long k = 0;
  while (k < n) {
    const ref_block *x = &r->b[v[k]];
    if (x->stream > stream || (x->stream == stream && x->size >= size)) break;
    k++;
  }
  return k;
}

static void report_action(hbm_ptref *r, hbm_pt_action a, uint64_t addr, uint64_t size, int stream, int small) {
  if (r->action) r->action(r->action_arg, a, addr, size, stream, small);
}

/* insert_into_blocks: entering the set restarts the block's age. */
static void to_cache(hbm_ptref *r, long i) {
  r->b[i].allocated = 0;
  r->b[i].gc_base = r->free_calls[r->b[i].small];
}

/* try_merge_blocks: dst absorbs src when src is free with dst's mapped state. */
static void try_merge(hbm_ptref *r, long dst, long src) {
  if (src == NIL || r->b[src].allocated || r->b[src].mapped != r->b[dst].mapped) return;
  if (r->b[src].addr < r->b[dst].addr) r->b[dst].addr = r->b[src].addr;
  r->b[dst].size += r->b[src].size;
  r->b[src].live = 0;
}

/* ---- expandable segments ---- */

static uint64_t es_size(const hbm_ptref *r, long i) {
  long n = next_of(r, i);
  return r->b[i].size + (n != NIL && !r->b[n].mapped ? r->b[n].size : 0);
}

/* Page k's device handle: handles[] holds UINT64_MAX for handle 0 (the host
 * device's first), as 0 there means the page is not mapped. */
static uint64_t page_handle(const ref_seg *s, uint64_t k) { return s->handles[k] == UINT64_MAX ? 0 : s->handles[k]; }

/* ExpandableSegment::map of [addr, addr + size): every page is created
 * first, then mapped; a failed create releases the ones made. Returns the
 * mapped size (whole pages), 0 on failure. */
static uint64_t es_map(hbm_ptref *r, ref_seg *s, uint64_t addr, uint64_t size) {
  uint64_t first = (addr - s->addr) / s->page;
  uint64_t end = (addr + size - s->addr + s->page - 1) / s->page;
  for (uint64_t k = first; k < end; k++) {
    uint64_t h;
    int rc = hbm_dev_phys_create(r->dev, s->page, &h);
    if (rc != HBM_OK) {
      for (uint64_t j = first; j < k; j++) {
        hbm_dev_phys_release(r->dev, page_handle(s, j), s->page);
        s->handles[j] = 0;
      }
      return 0;
    }
    s->handles[k] = h ? h : UINT64_MAX;
  }
  for (uint64_t k = first; k < end; k++) hbm_dev_map(r->dev, s->addr + k * s->page, s->page, page_handle(s, k), 0);
  return (end - first) * s->page;
}

/* map_block */
static int map_block(hbm_ptref *r, long i, uint64_t size) {
  ref_seg *s = &r->s[r->b[i].seg];
  uint64_t mapped = es_map(r, s, r->b[i].addr, size);
  if (!mapped) return 0;
  uint64_t at = r->b[i].addr;
  if (mapped < r->b[i].size) {
    long rest = new_block(r);
    if (rest == NIL) {
      r->host_failed = 1;
      return 0;
    }
    r->b[rest] = r->b[i];
    r->b[rest].addr = at + mapped;
    r->b[rest].size = r->b[i].size - mapped;
    r->b[rest].mapped = 0;
    r->b[rest].allocated = 0;
    r->b[i].size = mapped;
  }
  r->b[i].mapped = 1;
  long p = prev_of(r, i), n = next_of(r, i);
  try_merge(r, i, p);
  try_merge(r, i, n);
  to_cache(r, i);
  r->reserved += mapped;
  r->st.num_device_alloc++;
  report_action(r, HBM_PT_SEGMENT_MAP, at, mapped, r->b[i].stream, r->b[i].small);
  return 1;
}

/* unmap_block_range: the whole pages of [lo, hi) inside a cached block go
 * back (the whole block for unmap_block, a recorded range for a recorded
 * release). */
static void unmap_range(hbm_ptref *r, long i, uint64_t lo, uint64_t hi) {
  ref_seg *s = &r->s[r->b[i].seg];
  uint64_t blo = r->b[i].addr, bhi = blo + r->b[i].size;
  if (lo < blo) lo = blo;
  if (hi > bhi) hi = bhi;
  if (hi <= lo) return;
  uint64_t first = (lo - s->addr + s->page - 1) / s->page, end = (hi - s->addr) / s->page;
  if (first >= end) return;
  for (uint64_t k = first; k < end; k++) {
    hbm_dev_unmap(r->dev, s->addr + k * s->page, s->page);
    hbm_dev_phys_release(r->dev, page_handle(s, k), s->page);
    s->handles[k] = 0;
  }
  uint64_t ulo = s->addr + first * s->page, uhi = s->addr + end * s->page;
  /* what is left of the block on either side stays cached as blocks of its own */
  if (ulo > blo) {
    long part = new_block(r);
    if (part == NIL) {
      r->host_failed = 1;
      return;
    }
    r->b[part] = r->b[i];
    r->b[part].size = ulo - blo;
    to_cache(r, part);
  }
  if (uhi < bhi) {
    long part = new_block(r);
    if (part == NIL) {
      r->host_failed = 1;
      return;
    }
    r->b[part] = r->b[i];
    r->b[part].addr = uhi;
    r->b[part].size = bhi - uhi;
    to_cache(r, part);
  }
  r->b[i].addr = ulo;
  r->b[i].size = uhi - ulo;
  r->b[i].mapped = 0;
  long p = prev_of(r, i), n = next_of(r, i);
  try_merge(r, i, p);
  try_merge(r, i, n);
  r->reserved -= uhi - ulo;
  r->st.num_device_free++;
  report_action(r, HBM_PT_SEGMENT_UNMAP, ulo, uhi - ulo, r->b[i].stream, r->b[i].small);
}

static void unmap_block(hbm_ptref *r, long i) { unmap_range(r, i, r->b[i].addr, r->b[i].addr + r->b[i].size); }

/* An expandable segment reserves 1.125 x the device, in whole pages. */
static uint64_t reservation_size(const hbm_ptref *r, uint64_t page) {
  uint64_t cap = r->dev->caps.capacity;
  return (cap + cap / 8 + page - 1) / page * page;
}

/* find_expandable_block: the lowest unmapped block of the stream (with the
 * free block before it) that has `size` bytes of free address space ahead;
 * else a new reservation. */
static long find_expandable_block(hbm_ptref *r, int stream, int pool, uint64_t size) {
  uint64_t last = 0;
  int have_last = 0;
  for (;;) {
    long c = NIL;
    for (long i = 0; i < r->nb; i++) { /* the next unmapped block in address order */
      if (!unmapped(r, i) || r->b[i].stream != stream || r->b[i].small != pool) continue;
      if (have_last && r->b[i].addr <= last) continue;
      if (c == NIL || r->b[i].addr < r->b[c].addr) c = i;
    }
    if (c == NIL) break;
    last = r->b[c].addr;
    have_last = 1;
    long p = prev_of(r, c);
    if (p != NIL && !r->b[p].allocated) c = p;
    uint64_t bytes = 0;
    for (long x = c; bytes < size && x != NIL && !r->b[x].allocated; x = next_of(r, x)) bytes += r->b[x].size;
    if (bytes >= size) return c;
  }
  uint64_t page = pool == SMALL ? KSMALLBUF : KLARGEBUF, va = reservation_size(r, page);
  long si = new_seg(r), bi = si == NIL ? NIL : new_block(r);
  uint64_t *handles = calloc(va / page, sizeof *handles);
  uint64_t base;
  if (si == NIL || bi == NIL || !handles || hbm_dev_reserve(r->dev, va, &base) != HBM_OK) {
    free(handles);
    r->host_failed = 1;
    return NIL;
  }
  r->s[si] = (ref_seg){base, va, stream, 1, (uint8_t)pool, 1, page, va / page, handles};
  r->b[bi] = (ref_block){base, va, 0, stream, si, 1, (uint8_t)pool, 0, 0};
  r->st.segments++;
  return bi;
}

/* try_allocate_expandable_block */
static long try_allocate_expandable_block(hbm_ptref *r, int stream, int pool, uint64_t size) {
  long c = find_expandable_block(r, stream, pool, size);
  if (c == NIL) return NIL;
  if (!r->b[c].mapped && !map_block(r, c, r->b[c].size < size ? r->b[c].size : size)) return NIL;
  while (r->b[c].size < size) {
    uint64_t remaining = size - r->b[c].size;
    long n = next_of(r, c);
    if (!map_block(r, n, remaining < r->b[n].size ? remaining : r->b[n].size)) return NIL;
    c = n; /* n absorbed c */
  }
  r->b[c].allocated = 1; /* out of the set */
  return c;
}

/* release_expandable_segment: the reservation is one unmapped block. */
static void release_expandable_segment(hbm_ptref *r, long i) {
  ref_seg *s = &r->s[r->b[i].seg];
  hbm_dev_unreserve(r->dev, s->addr, s->size);
  free(s->handles);
  s->handles = NULL;
  s->live = 0;
  r->b[i].live = 0;
  r->st.segments--;
}

/* ---- the allocator ---- */

/* release_block: cudaFree of a cached block that is a whole segment. */
static void release_block(hbm_ptref *r, long i) {
  ref_seg *s = &r->s[r->b[i].seg];
  report_action(r, HBM_PT_SEGMENT_FREE, s->addr, s->size, s->stream, s->small);
  hbm_dev_seg_free(r->dev, s->addr, s->size);
  r->reserved -= s->size;
  s->live = 0;
  r->b[i].live = 0;
  r->st.segments--;
  r->st.num_device_free++;
}

static int gc_on(const hbm_ptref *r) { return r->conf.set_fraction && r->conf.gc_threshold > 0.0; }

/* get_free_block: best fit, lowest address among equals, own stream. */
static long get_free_block(hbm_ptref *r, int stream, int pool, uint64_t size) {
  if (gc_on(r)) r->free_calls[pool]++;
  long *v, n = sorted_pool(r, pool, &v);
  if (!v) return NIL;
  long k = lower_bound(r, v, n, stream, size), found = NIL;
  if (k < n && r->b[v[k]].stream == stream) {
    if (expandable_block(r, v[k]) && r->conf.expandable) {
      /* best fit counts what a block before unmapped space can grow to */
      while (expandable_block(r, v[k]) && k + 1 < n && r->b[v[k + 1]].stream == stream &&
             es_size(r, v[k + 1]) < es_size(r, v[k]))
        k++;
    } else if (expandable_block(r, v[k])) {
      do k++;
      while (k < n && expandable_block(r, v[k]) && r->b[v[k]].stream == stream);
      if (k == n || r->b[v[k]].stream != stream) k = -1;
    }
    if (k >= 0) {
      uint64_t have = r->b[v[k]].size, msplit = r->conf.max_split_size;
      if (!(size < msplit && have >= msplit) &&
          !(size >= msplit && have >= size + r->conf.max_non_split_rounding))
        found = v[k];
    }
  }
  free(v);
  if (found != NIL) r->b[found].allocated = 1; /* out of the set */
  return found;
}

/* garbage_collect_cached_blocks: large pool, oldest first by rounds. */
static void garbage_collect(hbm_ptref *r) {
  uint64_t threshold = (uint64_t)(r->conf.gc_threshold * (double)r->allowed);
  if (r->reserved <= threshold) return;
  uint64_t target = r->reserved - threshold, reclaimed = 0;
  uint64_t total_age = 0;
  long freeable = 0;
  for (long i = 0; i < r->nb; i++)
    if (cached(r, i) && r->b[i].small == LARGE && !is_split(r, i)) {
      total_age += (uint64_t)(r->free_calls[LARGE] - r->b[i].gc_base);
      freeable++;
    }
  if (!freeable) return;
  int freed = 1;
  while (reclaimed < target && freed && freeable > 0) {
    double age_threshold = (double)total_age / (double)freeable;
    freed = 0;
    long *v, n = sorted_pool(r, LARGE, &v);
    if (!v) return;
    for (long k = 0; k < n; k++) {
      long i = v[k];
      uint64_t age = (uint64_t)(r->free_calls[LARGE] - r->b[i].gc_base);
      if (!is_split(r, i) && !expandable_block(r, i) && (double)age >= age_threshold) {
        freed = 1;
        reclaimed += r->b[i].size;
        total_age -= age;
        freeable--;
        release_block(r, i);
        r->st.num_gc_releases++;
      }
    }
    free(v);
  }
}

/* alloc_block: a new segment, or mapped pages of an expandable one. */
static long alloc_block(hbm_ptref *r, int stream, int pool, uint64_t size, uint64_t alloc_size, int retry) {
  if (retry) r->st.num_alloc_retries++;
  if (r->conf.set_fraction && r->reserved + alloc_size > r->allowed) return NIL;
  if (r->conf.expandable) return try_allocate_expandable_block(r, stream, pool, size);
  uint64_t addr;
  int rc = hbm_dev_seg_alloc(r->dev, alloc_size, 0, &addr);
  if (rc != HBM_OK) {
    if (rc != HBM_ENOMEM) r->host_failed = 1;
    return NIL;
  }
  long si = new_seg(r), bi = si == NIL ? NIL : new_block(r);
  if (bi == NIL) {
    hbm_dev_seg_free(r->dev, addr, alloc_size);
    r->host_failed = 1;
    return NIL;
  }
  r->s[si] = (ref_seg){addr, alloc_size, stream, 1, (uint8_t)pool, 0, 0, 0, NULL};
  r->b[bi] = (ref_block){addr, alloc_size, 0, stream, si, 1, (uint8_t)pool, 1, 1};
  r->reserved += alloc_size;
  r->st.segments++;
  r->st.num_device_alloc++;
  report_action(r, HBM_PT_SEGMENT_ALLOC, addr, alloc_size, stream, pool);
  return bi;
}

/* A cached block release_block can cudaFree: a whole ordinary segment. */
static int whole_segment(const hbm_ptref *r, long i) { return !expandable_block(r, i) && !is_split(r, i); }

/* release_available_cached_blocks: with max_split_size, the smallest
 * oversize block of the stream that covers the request, else oversize blocks
 * from the largest down until their sizes add up to it. Blocks release_block
 * cannot take (expandable ones; part of a split segment, which only a state
 * recorded under other settings holds) are passed over and not counted. */
static int release_available(hbm_ptref *r, int stream, int pool, uint64_t size) {
  uint64_t msplit = r->conf.max_split_size;
  if (msplit == UINT64_MAX) return 0;
  uint64_t key = size < msplit ? msplit : size;
  long *v, n = sorted_pool(r, pool, &v);
  if (!v) return 0;
  long k = lower_bound(r, v, n, stream, key);
  int ok = 1;
  if (k == n || r->b[v[k]].stream != stream || !whole_segment(r, v[k])) {
    if (k == 0) {
      ok = 0;
    } else {
      uint64_t released = 0;
      k--;
      while (released < key && r->b[v[k]].size >= msplit && r->b[v[k]].stream == stream) {
        long cur = v[k];
        int first = k == 0;
        if (!first) k--;
        if (whole_segment(r, cur)) {
          released += r->b[cur].size;
          release_block(r, cur);
        }
        if (first) break;
      }
      ok = released >= key;
    }
  } else {
    release_block(r, v[k]);
  }
  free(v);
  return ok;
}

/* release_blocks of one pool, in the pool's order: whole ordinary segments
 * are freed; expandable blocks lose their whole pages afterwards, and a
 * reservation left as one unmapped block goes. */
static void release_pool(hbm_ptref *r, int pool) {
  long *v, n = sorted_pool(r, pool, &v);
  if (!v) return;
  long nu = 0;
  for (long k = 0; k < n; k++) {
    long i = v[k];
    if (expandable_block(r, i))
      v[nu++] = i; /* to unmap, in order; reuses the list */
    else if (!is_split(r, i))
      release_block(r, i);
  }
  for (long k = 0; k < nu; k++) {
    long i = v[k];
    unmap_block(r, i);
    if (!is_split(r, i)) release_expandable_segment(r, i);
  }
  free(v);
}

/* release_cached_blocks (empty_cache) */
static void release_cached(hbm_ptref *r) {
  release_pool(r, LARGE);
  release_pool(r, SMALL);
}

int hbm_ptref_alloc(hbm_ptref *r, uint64_t orig, int stream, uint64_t *addr, uint64_t *block_size) {
  if (orig == 0) return HBM_EINVAL;
  uint64_t size = round_size(&r->conf, orig);
  int pool = size <= KSMALL ? SMALL : LARGE;
  uint64_t alloc_size = allocation_size(size);
  long b = get_free_block(r, stream, pool, size);
  if (b == NIL) {
    if (gc_on(r)) garbage_collect(r);
    b = alloc_block(r, stream, pool, size, alloc_size, 0);
    if (b == NIL && release_available(r, stream, pool, size)) b = alloc_block(r, stream, pool, size, alloc_size, 0);
    if (b == NIL) {
      release_cached(r);
      b = alloc_block(r, stream, pool, size, alloc_size, 1);
    }
    if (b == NIL) {
      if (r->host_failed) return HBM_EHOSTMEM;
      r->st.num_ooms++;
      return HBM_ENOMEM;
    }
  }
  /* should_split */
  uint64_t remaining = r->b[b].size - size;
  int split = (pool == SMALL || r->conf.expandable) ? remaining >= KMIN
                                                    : size < r->conf.max_split_size && remaining > KSMALL;
  if (split) {
    long rest = new_block(r);
    if (rest == NIL) return HBM_EHOSTMEM;
    r->b[rest] = r->b[b];
    r->b[rest].addr += size;
    r->b[rest].size = remaining;
    to_cache(r, rest);
    r->b[b].size = size;
  }
  r->b[b].allocated = 1;
  *addr = r->b[b].addr;
  if (block_size) *block_size = r->b[b].size;
  return r->host_failed ? HBM_EHOSTMEM : HBM_OK;
}

int hbm_ptref_free(hbm_ptref *r, uint64_t addr, uint64_t *block_size) {
  long i = NIL;
  for (long j = 0; j < r->nb; j++)
    if (r->b[j].live && r->b[j].allocated && r->b[j].addr == addr) i = j;
  if (i == NIL) return HBM_EINVAL;
  if (block_size) *block_size = r->b[i].size;
  r->b[i].allocated = 0;
  long p = prev_of(r, i), n = next_of(r, i);
  try_merge(r, i, p);
  try_merge(r, i, n);
  to_cache(r, i);
  return HBM_OK;
}

void hbm_ptref_stats(const hbm_ptref *r, hbm_pt_stats *out) {
  *out = r->st;
  out->reserved = r->reserved;
  out->allocated = 0;
  out->free_blocks = 0;
  for (long i = 0; i < r->nb; i++) {
    if (r->b[i].live && r->b[i].allocated) out->allocated += r->b[i].size;
    if (cached(r, i)) out->free_blocks++;
  }
}

/* ---- a recorded starting state, recorded releases ---- */

/* Free blocks of one mapped state side by side become one, as frees do (a
 * recorded state may list a free block after a free block). */
static void merge_free_runs(hbm_ptref *r, long si) {
  for (int merged = 1; merged;) {
    merged = 0;
    for (long i = 0; i < r->nb; i++) {
      if (!r->b[i].live || r->b[i].seg != si || r->b[i].allocated) continue;
      long n = next_of(r, i);
      if (n != NIL && !r->b[n].allocated && r->b[n].mapped == r->b[i].mapped) {
        try_merge(r, i, n);
        merged = 1;
      }
    }
  }
}

/* The recorded blocks of one segment as blocks of segment si, delta bytes
 * from where they were recorded. */
static int add_recorded_blocks(hbm_ptref *r, const hbm_trace *t, const hbm_init_segment *s, long si, int64_t delta,
                               uint64_t *id_addr) {
  for (uint32_t k = 0; k < s->nblocks; k++) {
    const hbm_init_block *ib = &t->init_blocks[s->first_block + k];
    long bi = new_block(r);
    if (bi == NIL) return HBM_EHOSTMEM;
    int live = ib->id != HBM_NO_ID;
    r->b[bi] = (ref_block){(uint64_t)((int64_t)ib->addr + delta), ib->size, r->free_calls[s->small], s->stream, si,
                           1, s->small, (uint8_t)live, 1};
    if (live && id_addr && ib->id < t->nids) id_addr[ib->id] = r->b[bi].addr;
  }
  return HBM_OK;
}

/* Blocks that tile their segment in 512-byte units. */
static int tiles(const hbm_trace *t, const hbm_init_segment *s) {
  if (s->size == 0 || s->size % KMIN) return 0;
  uint64_t at = s->addr;
  for (uint32_t k = 0; k < s->nblocks; k++) {
    const hbm_init_block *ib = &t->init_blocks[s->first_block + k];
    if (ib->addr != at || ib->size == 0 || ib->size % KMIN || ib->addr % KMIN) return 0;
    at += ib->size;
  }
  return at == s->addr + s->size;
}

static int holds_live(const hbm_trace *t, const hbm_init_segment *s) {
  for (uint32_t k = 0; k < s->nblocks; k++)
    if (t->init_blocks[s->first_block + k].id != HBM_NO_ID) return 1;
  return 0;
}

/* Expandable ranges recorded in one reservation: those of the first one's
 * stream and pool, in address order, that fit in a reservation starting at
 * it. Returns how many of order[k..n) (0: the first alone does not fit). */
static long same_reservation(const hbm_ptref *r, const hbm_trace *t, const uint32_t *order, long n, long k) {
  const hbm_init_segment *s0 = &t->init_segments[order[k]];
  uint64_t end = s0->addr + reservation_size(r, s0->small ? KSMALLBUF : KLARGEBUF), at = s0->addr;
  long count = 0;
  for (; k < n; k++, count++) {
    const hbm_init_segment *s = &t->init_segments[order[k]];
    if (s->stream != s0->stream || s->small != s0->small || s->addr < at || s->addr + s->size > end) break;
    at = s->addr + s->size;
  }
  return count;
}

/* One reservation for the ranges order[k..k+count): each range mapped where
 * it was recorded relative to the first, the rest of the reservation
 * unmapped. A full device leaves the ranges from the one it refused unmapped. */
static int seed_reservation(hbm_ptref *r, const hbm_trace *t, const uint32_t *order, long k, long count,
                            uint64_t *id_addr) {
  const hbm_init_segment *s0 = &t->init_segments[order[k]];
  uint64_t page = s0->small ? KSMALLBUF : KLARGEBUF, va = reservation_size(r, page), base;
  long si = new_seg(r);
  uint64_t *handles = calloc(va / page, sizeof *handles);
  if (si == NIL || !handles) {
    free(handles);
    return HBM_EHOSTMEM;
  }
  int rc = hbm_dev_reserve(r->dev, va, &base);
  if (rc != HBM_OK) {
    free(handles);
    return rc;
  }
  r->s[si] = (ref_seg){base, va, s0->stream, 1, s0->small, 1, page, va / page, handles};
  r->st.segments++;
  int64_t delta = (int64_t)(base - s0->addr);
  for (long j = k; j < k + count && rc == HBM_OK; j++) {
    const hbm_init_segment *s = &t->init_segments[order[j]];
    uint64_t at = (uint64_t)((int64_t)s->addr + delta);
    if (!es_map(r, &r->s[si], at, s->size)) rc = HBM_ENOMEM;
    else if ((rc = add_recorded_blocks(r, t, s, si, delta, id_addr)) == HBM_OK) r->reserved += s->size;
  }
  for (uint64_t at = base; at < base + va;) { /* unmapped blocks over what no range covers */
    uint64_t next = base + va;
    int covered = 0;
    for (long i = 0; i < r->nb && !covered; i++) {
      if (!r->b[i].live || r->b[i].seg != si) continue;
      if (r->b[i].addr == at) {
        at += r->b[i].size;
        covered = 1;
      } else if (r->b[i].addr > at && r->b[i].addr < next) {
        next = r->b[i].addr;
      }
    }
    if (covered) continue;
    long gi = new_block(r);
    if (gi == NIL) return HBM_EHOSTMEM;
    r->b[gi] = (ref_block){at, next - at, 0, s0->stream, si, 1, s0->small, 0, 0};
    at = next;
  }
  merge_free_runs(r, si);
  return rc;
}

int hbm_ptref_seed(hbm_ptref *r, const hbm_trace *t, uint64_t *id_addr) {
  uint32_t n = t->ninit_segments;
  /* A state larger than the device starts without its cache: PyTorch, out of
   * memory, would have released every segment that holds no live block. */
  uint64_t need = 0;
  for (uint32_t i = 0; i < n; i++) need += t->init_segments[i].size;
  int drop_cache = need > r->dev->caps.capacity - r->dev->phys_used;
  uint32_t *order = malloc(((size_t)n + 1) * sizeof *order);
  if (!order) return HBM_EHOSTMEM;
  long nexp = 0;
  int rc = HBM_OK, too_long = 0;
  for (uint32_t i = 0; i < n && rc == HBM_OK; i++) {
    const hbm_init_segment *s = &t->init_segments[i];
    if (drop_cache && !holds_live(t, s)) continue;
    if (!tiles(t, s)) rc = HBM_EINVAL;
    if (s->expandable) {
      long j = nexp++; /* insertion by (stream, pool, address) */
      for (; j > 0; j--) {
        const hbm_init_segment *o = &t->init_segments[order[j - 1]];
        if (o->stream < s->stream || (o->stream == s->stream && (o->small < s->small ||
                                      (o->small == s->small && o->addr < s->addr))))
          break;
        order[j] = order[j - 1];
      }
      order[j] = i;
    }
  }
  for (long k = 0; k < nexp && rc == HBM_OK;) { /* every range in whole pages of a reservation */
    const hbm_init_segment *s0 = &t->init_segments[order[k]];
    uint64_t page = s0->small ? KSMALLBUF : KLARGEBUF;
    long count = same_reservation(r, t, order, nexp, k);
    if (!count) { /* longer than a reservation here: it does not fit this device */
      if (s0->size % page) rc = HBM_EINVAL;
      too_long = 1;
      k++;
      continue;
    }
    for (long j = k; j < k + count; j++) {
      const hbm_init_segment *s = &t->init_segments[order[j]];
      if ((s->addr - s0->addr) % page || s->size % page) rc = HBM_EINVAL;
    }
    k += count;
  }
  if (rc == HBM_OK && too_long) rc = HBM_ENOMEM;
  /* Ordinary segments in the order recorded, at their recorded addresses
   * where the device allows; then the expandable ranges. */
  for (uint32_t i = 0; i < n && rc == HBM_OK; i++) {
    const hbm_init_segment *s = &t->init_segments[i];
    if ((drop_cache && !holds_live(t, s)) || s->expandable) continue;
    uint64_t got;
    long si = new_seg(r);
    if (si == NIL) rc = HBM_EHOSTMEM;
    else if ((rc = hbm_dev_seg_alloc(r->dev, s->size, s->addr, &got)) == HBM_OK) {
      r->s[si] = (ref_seg){got, s->size, s->stream, 1, s->small, 0, 0, 0, NULL};
      r->reserved += s->size;
      r->st.segments++;
      rc = add_recorded_blocks(r, t, s, si, (int64_t)(got - s->addr), id_addr);
      merge_free_runs(r, si);
    }
  }
  for (long k = 0; k < nexp && rc == HBM_OK;) {
    long count = same_reservation(r, t, order, nexp, k);
    rc = seed_reservation(r, t, order, k, count, id_addr);
    k += count;
  }
  free(order);
  return rc;
}

int hbm_ptref_seg_released(hbm_ptref *r, uint64_t addr, uint64_t size) {
  for (long i = 0; i < r->nb; i++) {
    if (!r->b[i].live || !r->b[i].mapped || addr < r->b[i].addr || addr >= r->b[i].addr + r->b[i].size) continue;
    if (r->b[i].allocated) return HBM_EBUSY;
    if (!expandable_block(r, i)) { /* cudaFree: the whole segment, unsplit */
      if (r->b[i].addr != addr || r->b[i].size != size || is_split(r, i)) return HBM_EBUSY;
      release_block(r, i);
      return HBM_OK;
    }
    uint64_t before = r->reserved;
    unmap_range(r, i, addr, addr + size);
    if (r->reserved == before) return HBM_EBUSY; /* not a whole page inside */
    if (!is_split(r, i)) release_expandable_segment(r, i);
    return r->host_failed ? HBM_EHOSTMEM : HBM_OK;
  }
  return HBM_EINVAL;
}

/* ---- life ---- */

int hbm_ptref_create(hbm_device *dev, const hbm_pt_conf *conf, hbm_ptref **out) {
  hbm_ptref *r = calloc(1, sizeof *r);
  if (!r) return HBM_EHOSTMEM;
  r->dev = dev;
  r->conf = *conf;
  r->allowed = conf->set_fraction ? (uint64_t)(conf->memory_fraction * (double)dev->caps.capacity)
                                  : dev->caps.capacity;
  *out = r;
  return HBM_OK;
}

void hbm_ptref_set_action(hbm_ptref *r,
                          void (*action)(void *arg, hbm_pt_action a, uint64_t addr, uint64_t size,
                                         int stream, int small),
                          void *arg) {
  r->action = action;
  r->action_arg = arg;
}

void hbm_ptref_destroy(hbm_ptref *r) {
  if (!r) return;
  for (long i = 0; i < r->ns; i++) {
    ref_seg *s = &r->s[i];
    if (!s->live) continue;
    if (!s->expandable) {
      hbm_dev_seg_free(r->dev, s->addr, s->size);
      continue;
    }
    for (uint64_t k = 0; k < s->npages; k++) {
      if (!s->handles[k]) continue;
      hbm_dev_unmap(r->dev, s->addr + k * s->page, s->page);
      hbm_dev_phys_release(r->dev, page_handle(s, k), s->page);
    }
    hbm_dev_unreserve(r->dev, s->addr, s->size);
    free(s->handles);
  }
  free(r->b);
  free(r->s);
  free(r);
}

static void fail(int *n, hbm_check_report_fn *report, void *arg, const char *fmt, long i) {
  char msg[160];
  snprintf(msg, sizeof msg, fmt, i);
  if (report) report(arg, msg);
  (*n)++;
}

int hbm_ptref_check(const hbm_ptref *r, hbm_check_report_fn *report, void *arg) {
  int bad = 0;
  uint64_t reserved = 0;
  for (long si = 0; si < r->ns; si++) {
    const ref_seg *s = &r->s[si];
    if (!s->live) continue;
    uint64_t covered = 0, mapped_pages = 0;
    for (long i = 0; i < r->nb; i++) {
      const ref_block *b = &r->b[i];
      if (!b->live || b->seg != si) continue;
      covered += b->size;
      if (b->addr < s->addr || b->addr + b->size > s->addr + s->size)
        fail(&bad, report, arg, "reference: block %ld outside its segment", i);
      if (b->stream != s->stream || b->small != s->small)
        fail(&bad, report, arg, "reference: block %ld differs from its segment in stream or pool", i);
      if (!b->allocated) {
        long n = next_of(r, i);
        if (n != NIL && !r->b[n].allocated && r->b[n].mapped == b->mapped)
          fail(&bad, report, arg, "reference: free block %ld has a free neighbour of its mapped state", i);
      }
      if (s->expandable) {
        /* a mapped block lies on mapped pages; an unmapped one is whole unmapped pages */
        uint64_t first = (b->addr - s->addr) / s->page, last = (b->addr + b->size - 1 - s->addr) / s->page;
        if (!b->mapped && ((b->addr - s->addr) % s->page || b->size % s->page))
          fail(&bad, report, arg, "reference: unmapped block %ld not whole pages", i);
        for (uint64_t k = first; k <= last && k < s->npages; k++)
          if ((s->handles[k] != 0) != (b->mapped != 0)) {
            fail(&bad, report, arg, "reference: block %ld's mapped state differs from its pages", i);
            break;
          }
      } else if (!b->mapped)
        fail(&bad, report, arg, "reference: block %ld of an ordinary segment unmapped", i);
    }
    if (covered != s->size) fail(&bad, report, arg, "reference: segment %ld not tiled by its blocks", si);
    if (s->expandable) {
      for (uint64_t k = 0; k < s->npages; k++)
        if (s->handles[k]) mapped_pages++;
      reserved += mapped_pages * s->page;
    } else {
      reserved += s->size;
    }
  }
  if (reserved != r->reserved) {
    char msg[160];
    snprintf(msg, sizeof msg, "reference: reserved %llu but segments and mapped pages add to %llu",
             (unsigned long long)r->reserved, (unsigned long long)reserved);
    if (report) report(arg, msg);
    bad++;
  }
  return bad;
}

int hbm_ptref_scan(const hbm_ptref *r, hbm_scan_fn *visit, void *arg) {
  uint64_t last = 0;
  int have_last = 0;
  for (;;) { /* mapped blocks in address order, one scan per block */
    long c = NIL;
    for (long i = 0; i < r->nb; i++) {
      if (!r->b[i].live || !r->b[i].mapped || (have_last && r->b[i].addr <= last)) continue;
      if (c == NIL || r->b[i].addr < r->b[c].addr) c = i;
    }
    if (c == NIL) return HBM_OK;
    last = r->b[c].addr;
    have_last = 1;
    if (visit(arg, r->b[c].addr, r->b[c].size, r->b[c].allocated, HBM_TAG_OTHER)) return HBM_OK;
  }
}
