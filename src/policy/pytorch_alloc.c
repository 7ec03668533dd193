/* pytorch_alloc.c: PyTorch's DeviceCachingAllocator, modelled faithfully for
 * one device (c10/cuda/CUDACachingAllocator.cpp, PyTorch 2.9; the placement
 * paths below are unchanged since 2.1 apart from max_non_split_rounding_mb,
 * added in 2.5 with the old constant as its default).
 *
 * Each function here is named after the PyTorch function it models and does
 * what that function does, in the same order, so the two can be read side by
 * side: malloc -> get_free_block -> garbage_collect_cached_blocks ->
 * alloc_block -> release_available_cached_blocks -> release_cached_blocks ->
 * alloc_found_block; free -> free_block -> try_merge_blocks; the expandable
 * path find_expandable_block -> try_allocate_expandable_block -> map_block,
 * and unmap_block / release_expandable_segment when releasing.
 *
 * Not modelled (docs/caching-model.md): CUDA graph private pools, cross-stream
 * frees that wait on events (a trace gives the completed free instead), the
 * free-memory callbacks, IPC.
 *
 * Data: blocks live in one array addressed by index. PyTorch's two BlockPools
 * (large, small) keep free blocks ordered (stream, size, address); here each
 * stream has its own set per pool ordered (size, address), which gives the
 * same lower_bound, since every lookup stays within one stream.
 *
 * Invariants (hbm_pt_check verifies each):
 *   P1 blocks of a segment tile it: next's address = address + size, links agree;
 *      a segment's blocks share stream, pool and expandable segment;
 *   P2 no two neighbours are both free with the same mapped state (merged at free);
 *   P3 every free mapped block is in its stream's set for its pool, keyed (size,
 *      address); every unmapped block in its unmapped set; nothing else is;
 *   P4 every allocated block is in the active map under its address; nothing else;
 *   P5 total_allocated_memory == segment bytes + mapped expandable bytes;
 *      allocated == sum of allocated blocks; releasable == recount;
 *   P6 an expandable segment's pages are mapped exactly where its mapped blocks lie;
 *   P7 sizes and addresses are multiples of 512; each ordered set passes its check;
 *   P8 every insert into a set was reserved by the operation that made it, and
 *      so was every expandable page it mapped (room for its handle).
 *
 * Host memory: every operation (malloc, free, a recorded segment release,
 * the seed of a starting state) first reserves all the host memory it may
 * need (block array, ordered sets, active map, scratch, expandable segment
 * slots), then changes the model with steps that cannot fail for host
 * memory. So HBM_EHOSTMEM from the model itself leaves it exactly as it was.
 * A device call that fails (out of memory, or the device's own bookkeeping)
 * leaves what the operation did before it, as PyTorch does after a failed
 * cudaMalloc: cached segments released on the way, a new expandable
 * reservation, pages mapped; the invariants hold either way.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/addrmap.h"
#include "core/ordset.h"
#include "core/util.h"
#include "policy/pytorch_alloc.h"
#include "policy/pytorch_state.h"


static inline pt_block *B(pt *m, uint32_t i) { return &m->blocks[i]; }

/* ==== blocks ============================================================== */

/* blk_reserve makes the next n blk_new calls unable to fail (pointers into
 * the block array are stale after it). HBM_OK or HBM_EHOSTMEM (nothing
 * changed). */
static int blk_grow(pt *m, uint64_t n, uint64_t have) {
  uint64_t want = (uint64_t)m->cap_blocks + (n - have), cap = m->cap_blocks ? m->cap_blocks : 256;
  while (cap < want) cap *= 2;
  if (cap >= NONE) return HBM_EHOSTMEM; /* block indices are 32-bit, NONE excluded */
  pt_block *nb = realloc(m->blocks, (size_t)cap * sizeof *nb);
  if (!nb) return HBM_EHOSTMEM;
  m->blocks = nb;
  m->cap_blocks = (uint32_t)cap;
  return HBM_OK;
}
static inline int blk_reserve(pt *m, uint64_t n) {
  uint64_t have = (uint64_t)m->nfree_list + (m->cap_blocks - m->nblocks);
  return n <= have ? HBM_OK : blk_grow(m, n, have);
}

/* A block from the free list or the array's reserved room (blk_reserve). */
static uint32_t blk_new(pt *m) {
  uint32_t i;
  if (m->free_list != NONE) {
    i = m->free_list;
    m->free_list = m->blocks[i].next;
    m->nfree_list--;
  } else {
    if (m->nblocks == m->cap_blocks && blk_reserve(m, 1) != HBM_OK) return NONE; /* unreserved: a bug */
    i = m->nblocks++;
  }
  memset(&m->blocks[i], 0, sizeof m->blocks[i]);
  m->blocks[i].prev = m->blocks[i].next = NONE;
  m->blocks[i].es = NONE;
  m->blocks[i].mapped = 1;
  m->blocks[i].in_use = 1;
  return i;
}

static void blk_release(pt *m, uint32_t i) {
  m->blocks[i].in_use = 0;
  m->blocks[i].next = m->free_list;
  m->free_list = i;
  m->nfree_list++;
}

static int is_split(const pt_block *b) { return b->prev != NONE || b->next != NONE; }

static int whole_segment(const pt_block *b) { return !is_split(b) && b->es == NONE; }

/* BlockPool::insert_into_blocks. Every insert below was reserved by the
 * operation before it changed anything (hbm_ordset_reserve), so it cannot
 * fail; were one to fail all the same (a bug), the block would be missing
 * from its set and hbm_pt_check says so (P3). Erases never fail for a block
 * that is in its set. */
static void free_insert(pt *m, uint32_t i) {
  pt_block *b = B(m, i);
  int pool = b->small ? SMALL : LARGE;
  b->gc_count_base = m->pool_calls[pool];
  if (m->streams[b->slot].promised[pool][0] != m->op) m->unpromised++;
  if (hbm_ordset_insert(m->streams[b->slot].free[pool], (hbm_okey){b->size, b->addr}, i) != HBM_OK) return;
  if (whole_segment(b)) m->releasable += b->size;
  if (m->largest_valid[pool] && b->size > m->largest[pool]) m->largest[pool] = b->size;
}

static void free_erase(pt *m, uint32_t i) {
  pt_block *b = B(m, i);
  int pool = b->small ? SMALL : LARGE;
  if (hbm_ordset_erase(m->streams[b->slot].free[pool], (hbm_okey){b->size, b->addr}) != HBM_OK) return;
  if (whole_segment(b)) m->releasable -= b->size;
  if (b->size >= m->largest[pool]) m->largest_valid[pool] = 0;
}

static void unmapped_insert(pt *m, uint32_t i) {
  pt_block *b = B(m, i);
  int pool = b->small ? SMALL : LARGE;
  if (m->streams[b->slot].promised[pool][1] != m->op) m->unpromised++;
  hbm_ordset_insert(m->streams[b->slot].unmapped[pool], (hbm_okey){b->addr, 0}, i);
}

static void unmapped_erase(pt *m, uint32_t i) {
  pt_block *b = B(m, i);
  hbm_ordset_erase(m->streams[b->slot].unmapped[b->small ? SMALL : LARGE], (hbm_okey){b->addr, 0});
}

/* Reserves n_free inserts in one stream's free set of a pool and n_unmapped
 * in its unmapped set. */
static int sets_reserve(pt *m, uint32_t slot, int pool, uint64_t n_free, uint64_t n_unmapped) {
  pt_stream *s = &m->streams[slot];
  if (n_free && hbm_ordset_reserve(s->free[pool], n_free) != HBM_OK) return HBM_EHOSTMEM;
  if (n_unmapped && hbm_ordset_reserve(s->unmapped[pool], n_unmapped) != HBM_OK) return HBM_EHOSTMEM;
  if (n_free) s->promised[pool][0] = m->op;
  if (n_unmapped) s->promised[pool][1] = m->op;
  return HBM_OK;
}

static int slot_of(pt *m, int stream, uint32_t *out) {
  if (m->last_slot < m->nstreams && m->streams[m->last_slot].stream == stream) {
    *out = m->last_slot;
    return HBM_OK;
  }
  for (uint32_t i = 0; i < m->nstreams; i++) {
    if (m->streams[i].stream == stream) {
      *out = m->last_slot = i;
      return HBM_OK;
    }
  }
  if (m->nstreams == m->cap_streams) {
    uint32_t cap = m->cap_streams ? m->cap_streams * 2 : 4;
    pt_stream *ns = realloc(m->streams, cap * sizeof *ns);
    if (!ns) return HBM_EHOSTMEM;
    m->streams = ns;
    m->cap_streams = cap;
  }
  pt_stream *s = &m->streams[m->nstreams];
  memset(s, 0, sizeof *s);
  s->stream = stream;
  for (int k = 0; k < 2; k++) {
    if (hbm_ordset_create(&s->free[k]) != HBM_OK || hbm_ordset_create(&s->unmapped[k]) != HBM_OK) {
      for (int j = 0; j < 2; j++) {
        hbm_ordset_destroy(s->free[j]);
        hbm_ordset_destroy(s->unmapped[j]);
      }
      return HBM_EHOSTMEM;
    }
  }
  *out = m->last_slot = m->nstreams++;
  return HBM_OK;
}

static void action(pt *m, hbm_pt_action a, uint64_t addr, uint64_t size, uint32_t slot, int small) {
  if (m->hooks.action) m->hooks.action(m->hooks.arg, a, addr, size, m->streams[slot].stream, small);
}

static size_t pool_count(const pt *m, int pool) {
  size_t n = 0;
  for (uint32_t s = 0; s < m->nstreams; s++) n += hbm_ordset_count(m->streams[s].free[pool]);
  return n;
}

/* Room in the scratch list for n blocks. */
static int scratch_reserve(pt *m, size_t n) {
  if (n <= m->cap_scratch) return HBM_OK;
  size_t cap = n < 64 ? 64 : n * 2;
  uint32_t *s = realloc(m->scratch, cap * sizeof *s);
  if (!s) return HBM_EHOSTMEM;
  m->scratch = s;
  m->cap_scratch = cap;
  return HBM_OK;
}

/* Copies the blocks of one pool's free sets (every stream), in PyTorch's set
 * order: (stream, size, address), into the scratch list (reserved for the
 * pool's count by the caller's operation). */
static size_t collect_free(pt *m, int pool, uint32_t **out) {
  size_t n = pool_count(m, pool);
  uint32_t *list = m->scratch;
  if (n > m->cap_scratch) { /* unreserved: a bug; an empty walk changes nothing */
    *out = list;
    return 0;
  }
  /* PyTorch's pools order blocks by stream first (the cudaStream_t value,
   * whose order hbm stream numbers keep), so a walk over a pool visits the
   * streams in number order, not in the order they were first used. */
  size_t k = 0;
  int last = 0;
  for (uint32_t done = 0; done < m->nstreams; done++) {
    uint32_t s = NONE;
    for (uint32_t j = 0; j < m->nstreams; j++)
      if ((!done || m->streams[j].stream > last) && (s == NONE || m->streams[j].stream < m->streams[s].stream))
        s = j;
    last = m->streams[s].stream;
    hbm_okey key;
    uint32_t v;
    int more = hbm_ordset_first(m->streams[s].free[pool], &key, &v);
    while (more) {
      list[k++] = v;
      more = hbm_ordset_upper_bound(m->streams[s].free[pool], key, &key, &v);
    }
  }
  *out = list;
  return k;
}

/* ==== expandable segments ================================================= */

static uint64_t es_page_left(const pt_es *e, uint64_t addr) { return (addr - e->base) / e->page; }
static uint64_t es_page_right(const pt_es *e, uint64_t addr) {
  return (addr - e->base + e->page - 1) / e->page;
}

/* Room for the handles of pages [0, n). */
static int es_handles_reserve(pt_es *e, uint64_t n) {
  if (n <= e->cap) return HBM_OK;
  uint64_t cap = e->cap ? e->cap : 16;
  while (cap < n) cap *= 2;
  uint64_t *h = realloc(e->handles, cap * sizeof *h);
  if (!h) return HBM_EHOSTMEM;
  memset(h + e->cap, 0, (cap - e->cap) * sizeof *h);
  e->handles = h;
  e->cap = cap;
  return HBM_OK;
}

/* Page i's device handle: handles[] holds UINT64_MAX for handle 0, as 0 there
 * means unmapped. */
static uint64_t es_handle(const pt_es *e, uint64_t i) { return e->handles[i] == UINT64_MAX ? 0 : e->handles[i]; }

/* ExpandableSegment::map: physical pages for [begin, end), created first,
 * all or nothing, then mapped. HBM_ENOMEM when the device is full. */
static int es_map_pages(pt *m, pt_es *e, uint64_t begin, uint64_t end) {
  hbm_device *dev = m->base.dev;
  if (e->promised_op != m->op || end > e->promised_pages) m->unpromised++;
  int rc = es_handles_reserve(e, end);
  if (rc != HBM_OK) return rc;
  for (uint64_t i = begin; i < end; i++) {
    rc = hbm_dev_phys_create(dev, e->page, &e->handles[i]);
    if (rc != HBM_OK) {
      for (uint64_t j = begin; j < i; j++) {
        hbm_dev_phys_release(dev, es_handle(e, j), e->page);
        e->handles[j] = 0;
      }
      e->handles[i] = 0;
      return rc;
    }
    if (e->handles[i] == 0) e->handles[i] = UINT64_MAX; /* 0 means unmapped here */
  }
  for (uint64_t i = begin; i < end; i++) {
    rc = hbm_dev_map(dev, e->base + i * e->page, e->page, es_handle(e, i), 0);
    if (rc != HBM_OK) {
      for (uint64_t j = begin; j < end; j++) {
        if (j < i) hbm_dev_unmap(dev, e->base + j * e->page, e->page);
        hbm_dev_phys_release(dev, es_handle(e, j), e->page);
        e->handles[j] = 0;
      }
      return rc;
    }
  }
  if (end > e->nhandles) e->nhandles = end;
  return HBM_OK;
}

static void es_unmap_pages(pt *m, pt_es *e, uint64_t begin, uint64_t end) {
  hbm_device *dev = m->base.dev;
  for (uint64_t i = begin; i < end; i++) {
    hbm_dev_unmap(dev, e->base + i * e->page, e->page);
    hbm_dev_phys_release(dev, es_handle(e, i), e->page);
    e->handles[i] = 0;
  }
  while (e->nhandles && !e->handles[e->nhandles - 1]) e->nhandles--; /* trimHandles */
}

static uint64_t es_va_size(pt *m, uint64_t page) {
  /* address_space_size = totalGlobalMem + totalGlobalMem / 8, in whole pages. */
  uint64_t cap = m->base.dev->caps.capacity;
  uint64_t bytes = cap + cap / 8;
  return hbm_round_up(bytes, page);
}

/* es_handles_reserve on behalf of the operation under way (P8). */
static int es_handles_promise(pt *m, pt_es *e, uint64_t pages) {
  if (es_handles_reserve(e, pages) != HBM_OK) return HBM_EHOSTMEM;
  if (e->promised_op != m->op) e->promised_pages = 0;
  if (pages > e->promised_pages) e->promised_pages = pages;
  e->promised_op = m->op;
  return HBM_OK;
}

/* Makes the next k es_new calls unable to fail for host memory: k slots past
 * nes, each with room for the handles of its first `pages` pages. A handles
 * array stays with its slot until the segment goes. */
static int es_slots_reserve(pt *m, uint32_t k, uint64_t pages) {
  if (k > m->cap_es - m->nes) {
    uint32_t cap = m->cap_es ? m->cap_es : 4;
    while (cap - m->nes < k) cap *= 2;
    pt_es *ne = realloc(m->es, cap * sizeof *ne);
    if (!ne) return HBM_EHOSTMEM;
    memset(ne + m->cap_es, 0, (cap - m->cap_es) * sizeof *ne);
    m->es = ne;
    m->cap_es = cap;
  }
  for (uint32_t i = m->nes; i < m->nes + k; i++)
    if (es_handles_promise(m, &m->es[i], pages) != HBM_OK) return HBM_EHOSTMEM;
  return HBM_OK;
}

/* A new ExpandableSegment with its unmapped block (the whole reservation).
 * Host memory comes reserved: a slot (es_slots_reserve), a block, one insert
 * in the stream's unmapped set. */
static int es_new(pt *m, uint32_t slot, int small, uint64_t proposed, uint32_t *out_block) {
  if (es_slots_reserve(m, 1, 0) != HBM_OK) return HBM_EHOSTMEM; /* reserved: cannot fail */
  uint64_t page = small ? HBM_PT_SMALL_BUFFER : HBM_PT_LARGE_BUFFER;
  uint64_t va = es_va_size(m, page), base = 0;
  if (m->hooks.hint) m->hooks.hint(m->hooks.arg, 1, va, m->streams[slot].stream, small, proposed);
  int rc = hbm_dev_reserve(m->base.dev, va, &base);
  if (rc != HBM_OK) return rc;
  uint32_t bi = blk_new(m);
  if (bi == NONE) { /* reserved: cannot happen */
    hbm_dev_unreserve(m->base.dev, base, va);
    return HBM_EHOSTMEM;
  }
  uint32_t ei = m->nes++;
  pt_es *e = &m->es[ei];
  uint64_t *handles = e->handles, cap = e->cap; /* zeroed, from es_slots_reserve */
  uint64_t promised_op = e->promised_op, promised_pages = e->promised_pages;
  memset(e, 0, sizeof *e);
  e->handles = handles;
  e->cap = cap;
  e->promised_op = promised_op;
  e->promised_pages = promised_pages;
  m->live_es++;
  e->base = base;
  e->va_size = va;
  e->page = page;
  e->slot = slot;
  e->small = (uint8_t)small;
  e->live = 1;
  pt_block *b = B(m, bi);
  b->addr = base;
  b->size = va;
  b->slot = slot;
  b->small = (uint8_t)small;
  b->mapped = 0;
  b->es = ei;
  m->st.segments++;
  unmapped_insert(m, bi);
  *out_block = bi;
  return HBM_OK;
}

static int allocatable(pt *m, uint32_t i) { return i != NONE && !B(m, i)->allocated; }

/* find_expandable_block */
static int find_expandable_block(pt *m, uint32_t slot, int pool, uint64_t size, uint32_t *out) {
  hbm_ordset *set = m->streams[slot].unmapped[pool];
  hbm_okey k;
  uint32_t c;
  int more = hbm_ordset_first(set, &k, &c);
  while (more) {
    uint32_t cand = c;
    if (allocatable(m, B(m, c)->prev)) cand = B(m, c)->prev;
    uint64_t bytes = 0;
    for (uint32_t b = cand; bytes < size && allocatable(m, b); b = B(m, b)->next) bytes += B(m, b)->size;
    if (bytes >= size) {
      *out = cand;
      return HBM_OK;
    }
    more = hbm_ordset_upper_bound(set, k, &k, &c);
  }
  return es_new(m, slot, pool == SMALL, 0, out);
}

static uint64_t try_merge_blocks(pt *m, uint32_t dst, uint32_t src);

/* map_block: maps the pages under [to_map, to_map + size) and caches the block. */
static int map_block(pt *m, uint32_t ti, uint64_t size) {
  pt_block *t = B(m, ti);
  pt_es *e = &m->es[t->es];
  uint64_t begin = es_page_left(e, t->addr), end = es_page_right(e, t->addr + size);
  if (begin == end) return HBM_ENOMEM;
  int rc = es_map_pages(m, e, begin, end);
  if (rc != HBM_OK) return rc;
  uint64_t mapped_addr = t->addr, mapped_size = (end - begin) * e->page;
  unmapped_erase(m, ti);
  t->mapped = 1;
  if (mapped_size < t->size) {
    uint32_t ri = blk_new(m); /* reserved: cannot fail */
    t = B(m, ti);
    pt_block *r = B(m, ri);
    r->addr = t->addr + mapped_size;
    r->size = t->size - mapped_size;
    r->slot = t->slot;
    r->small = t->small;
    r->es = t->es;
    r->mapped = 0;
    r->prev = ti; /* remaining->splice(to_map, to_map->next) */
    r->next = t->next;
    if (t->next != NONE) B(m, t->next)->prev = ri;
    t->next = ri;
    unmapped_insert(m, ri);
    t->size = mapped_size;
  }
  try_merge_blocks(m, ti, B(m, ti)->prev);
  try_merge_blocks(m, ti, B(m, ti)->next);
  free_insert(m, ti);
  m->total_allocated_memory += mapped_size;
  m->st.num_device_alloc++;
  action(m, HBM_PT_SEGMENT_MAP, mapped_addr, mapped_size, B(m, ti)->slot, B(m, ti)->small);
  return HBM_OK;
}

/* try_allocate_expandable_block */
static int try_allocate_expandable_block(pt *m, uint32_t slot, int pool, uint64_t size, uint32_t *out) {
  uint32_t c;
  int rc = find_expandable_block(m, slot, pool, size, &c);
  if (rc != HBM_OK) return rc;
  if (!B(m, c)->mapped) {
    uint64_t want = B(m, c)->size < size ? B(m, c)->size : size;
    if ((rc = map_block(m, c, want)) != HBM_OK) return rc;
  }
  while (B(m, c)->size < size) {
    uint64_t remaining = size - B(m, c)->size;
    uint32_t nc = B(m, c)->next;
    if (nc == NONE || B(m, nc)->allocated) return HBM_ENOMEM; /* cannot happen: found room */
    uint64_t want = remaining < B(m, nc)->size ? remaining : B(m, nc)->size;
    if ((rc = map_block(m, nc, want)) != HBM_OK) return rc;
    c = nc;
  }
  free_erase(m, c);
  *out = c;
  return HBM_OK;
}

/* unmap_block, limited to [lo, hi): unmaps the whole pages of a cached block. */
static void unmap_block_range(pt *m, uint32_t bi, uint64_t lo, uint64_t hi) {
  pt_block *b = B(m, bi);
  pt_es *e = &m->es[b->es];
  if (lo < b->addr) lo = b->addr;
  if (hi > b->addr + b->size) hi = b->addr + b->size;
  if (hi <= lo) return;
  uint64_t begin = es_page_right(e, lo), end = es_page_left(e, hi);
  if (begin >= end) return;
  es_unmap_pages(m, e, begin, end);
  free_erase(m, bi);
  uint64_t uptr = e->base + begin * e->page, usize = (end - begin) * e->page;
  b = B(m, bi);
  uint64_t before = uptr - b->addr, after = b->size - (before + usize);
  if (before > 0) {
    uint32_t fi = blk_new(m); /* reserved: cannot fail */
    b = B(m, bi);
    pt_block *f = B(m, fi);
    f->addr = b->addr;
    f->size = before;
    f->slot = b->slot;
    f->small = b->small;
    f->es = b->es;
    f->prev = b->prev; /* before_free->splice(block->prev, block) */
    f->next = bi;
    if (b->prev != NONE) B(m, b->prev)->next = fi;
    b->prev = fi;
    free_insert(m, fi);
  }
  if (after > 0) {
    uint32_t ai = blk_new(m); /* reserved: cannot fail */
    b = B(m, bi);
    pt_block *a = B(m, ai);
    a->addr = uptr + usize;
    a->size = after;
    a->slot = b->slot;
    a->small = b->small;
    a->es = b->es;
    a->prev = bi; /* after_free->splice(block, block->next) */
    a->next = b->next;
    if (b->next != NONE) B(m, b->next)->prev = ai;
    b->next = ai;
    free_insert(m, ai);
  }
  b = B(m, bi);
  b->addr = uptr;
  b->size = usize;
  b->mapped = 0;
  try_merge_blocks(m, bi, B(m, bi)->prev);
  try_merge_blocks(m, bi, B(m, bi)->next);
  unmapped_insert(m, bi);
  m->total_allocated_memory -= usize;
  m->st.num_device_free++;
  action(m, HBM_PT_SEGMENT_UNMAP, uptr, usize, B(m, bi)->slot, B(m, bi)->small);
}

static void unmap_block(pt *m, uint32_t bi) {
  unmap_block_range(m, bi, B(m, bi)->addr, B(m, bi)->addr + B(m, bi)->size);
}

/* release_expandable_segment: the whole reservation is one unmapped block. */
static void release_expandable_segment(pt *m, uint32_t bi) {
  pt_block *b = B(m, bi);
  pt_es *e = &m->es[b->es];
  unmapped_erase(m, bi);
  hbm_dev_unreserve(m->base.dev, e->base, e->va_size);
  free(e->handles);
  e->handles = NULL;
  e->nhandles = e->cap = 0;
  e->live = 0;
  m->live_es--;
  m->st.segments--;
  blk_release(m, bi);
}

/* ==== the allocator ======================================================== */

/* release_block: cudaFree of a cached, unsplit segment. */
static void release_block(pt *m, uint32_t bi) {
  pt_block *b = B(m, bi);
  if (b->es != NONE) { /* PyTorch asserts here; no caller passes one (defensive) */
    unmap_block(m, bi);
    if (!B(m, bi)->mapped && !is_split(B(m, bi))) release_expandable_segment(m, bi);
    return;
  }
  m->st.num_device_free++;
  action(m, HBM_PT_SEGMENT_FREE, b->addr, b->size, b->slot, b->small);
  hbm_dev_seg_free(m->base.dev, b->addr, b->size);
  m->total_allocated_memory -= b->size;
  m->st.segments--;
  free_erase(m, bi);
  blk_release(m, bi);
}

/* try_merge_blocks: returns the size subsumed, 0 if src cannot merge. */
static uint64_t try_merge_blocks(pt *m, uint32_t dst, uint32_t src) {
  if (src == NONE) return 0;
  pt_block *d = B(m, dst), *s = B(m, src);
  if (s->allocated || d->mapped != s->mapped) return 0;
  if (s->mapped) free_erase(m, src); else unmapped_erase(m, src);
  d = B(m, dst);
  s = B(m, src);
  if (d->prev == src) {
    d->addr = s->addr;
    d->prev = s->prev;
    if (d->prev != NONE) B(m, d->prev)->next = dst;
  } else {
    d->next = s->next;
    if (d->next != NONE) B(m, d->next)->prev = dst;
  }
  uint64_t subsumed = s->size;
  d->size += subsumed;
  blk_release(m, src);
  return subsumed;
}

static uint64_t expandable_size(pt *m, uint32_t i) {
  pt_block *b = B(m, i);
  uint64_t extra = (b->next != NONE && !B(m, b->next)->mapped) ? B(m, b->next)->size : 0;
  return b->size + extra;
}

/* The block get_free_block takes for a request of rounded `size`, without
 * taking it (NONE: none). */
static uint32_t find_free_block(pt *m, uint32_t slot, int pool, uint64_t size) {
  hbm_ordset *set = m->streams[slot].free[pool];
  hbm_okey k;
  uint32_t b;
  if (!hbm_ordset_lower_bound(set, (hbm_okey){size, 0}, &k, &b)) return NONE;
  if (B(m, b)->es != NONE) {
    if (m->conf.expandable) {
      /* Best fit counts what a block next to unmapped space can grow to. */
      hbm_okey nk;
      uint32_t nb;
      while (B(m, b)->es != NONE && hbm_ordset_upper_bound(set, k, &nk, &nb) &&
             expandable_size(m, nb) < expandable_size(m, b)) {
        b = nb;
        k = nk;
      }
    } else {
      /* expandable_segments turned off later: only ordinary blocks qualify. */
      do {
        if (!hbm_ordset_upper_bound(set, k, &k, &b)) return NONE;
      } while (B(m, b)->es != NONE);
    }
  }
  uint64_t max_split = m->conf.max_split_size;
  if (size < max_split && B(m, b)->size >= max_split) return NONE;
  if (size >= max_split && B(m, b)->size >= size + m->conf.max_non_split_rounding) return NONE;
  return b;
}

/* get_free_block */
static uint32_t get_free_block(pt *m, uint32_t slot, int pool, uint64_t size) {
  if (m->conf.set_fraction && m->conf.gc_threshold > 0.0) m->pool_calls[pool]++;
  uint32_t b = find_free_block(m, slot, pool, size);
  if (b != NONE) free_erase(m, b);
  return b;
}

/* garbage_collect_cached_blocks (large pool only, as in PyTorch) */
static void garbage_collect_cached_blocks(pt *m) {
  uint64_t gc_threshold = (uint64_t)(m->conf.gc_threshold * (double)m->allowed_memory_maximum);
  if (m->total_allocated_memory <= gc_threshold) return;
  uint64_t target = m->total_allocated_memory - gc_threshold, reclaimed = 0;
  uint64_t total_age = 0;
  int64_t freeable = 0;
  uint32_t *list;
  size_t n = collect_free(m, LARGE, &list);
  for (size_t i = 0; i < n; i++) {
    pt_block *b = B(m, list[i]);
    if (whole_segment(b)) {
      total_age += (uint64_t)(int)(m->pool_calls[LARGE] - b->gc_count_base);
      freeable++;
    }
  }
  if (freeable == 0) return;
  int block_freed = 1;
  while (reclaimed < target && block_freed && freeable > 0) {
    double age_threshold = (double)total_age / (double)freeable;
    block_freed = 0;
    n = collect_free(m, LARGE, &list);
    for (size_t i = 0; i < n; i++) {
      pt_block *b = B(m, list[i]);
      uint64_t age = (uint64_t)(int)(m->pool_calls[LARGE] - b->gc_count_base);
      if (whole_segment(b) && (double)age >= age_threshold) {
        block_freed = 1;
        reclaimed += b->size;
        total_age -= age;
        freeable--;
        m->st.num_gc_releases++;
        release_block(m, list[i]);
      }
    }
  }
}

/* alloc_block: a new segment (or mapped pages) for the request. */
static int alloc_block(pt *m, uint32_t slot, int pool, uint64_t size, uint64_t alloc_size, int retry,
                       uint32_t *out) {
  if (retry) m->st.num_alloc_retries++;
  if (m->conf.set_fraction && m->total_allocated_memory + alloc_size > m->allowed_memory_maximum)
    return HBM_ENOMEM;
  if (m->conf.expandable) return try_allocate_expandable_block(m, slot, pool, size, out);
  uint64_t hint = 0, ptr = 0;
  if (m->hooks.hint)
    hint = m->hooks.hint(m->hooks.arg, 0, alloc_size, m->streams[slot].stream, pool == SMALL, 0);
  int rc = hbm_dev_seg_alloc(m->base.dev, alloc_size, hint, &ptr);
  if (rc != HBM_OK) return rc;
  uint32_t bi = blk_new(m);
  if (bi == NONE) { /* reserved: cannot happen */
    hbm_dev_seg_free(m->base.dev, ptr, alloc_size);
    return HBM_EHOSTMEM;
  }
  pt_block *b = B(m, bi);
  b->addr = ptr;
  b->size = alloc_size;
  b->slot = slot;
  b->small = pool == SMALL;
  m->total_allocated_memory += alloc_size;
  m->st.segments++;
  m->st.num_device_alloc++;
  action(m, HBM_PT_SEGMENT_ALLOC, ptr, alloc_size, slot, pool == SMALL);
  *out = bi;
  return HBM_OK;
}

/* release_available_cached_blocks: frees oversize cached blocks (only with
 * max_split_size set), the smallest that covers the request, else largest first.
 * Expandable blocks are never released here: a lower_bound that lands on one
 * takes the largest-first path from the block below it, and that path skips
 * them (and does not count them). Nor is a block that is part of a split
 * segment, the same way: PyTorch never splits an oversize block, but a
 * starting state recorded under other settings holds such blocks, and
 * PyTorch's release_block would pass cudaFree a pointer that is not a whole
 * allocation (docs/caching-model.md, "What is not modelled"). */
static int release_available_cached_blocks(pt *m, uint32_t slot, int pool, uint64_t size) {
  uint64_t max_split = m->conf.max_split_size;
  if (max_split == UINT64_MAX) return 0;
  hbm_ordset *set = m->streams[slot].free[pool];
  uint64_t key_size = size < max_split ? max_split : size;
  hbm_okey k;
  uint32_t b;
  int found = hbm_ordset_lower_bound(set, (hbm_okey){key_size, 0}, &k, &b);
  if (found && whole_segment(B(m, b))) {
    release_block(m, b);
    return 1;
  }
  if (found ? !hbm_ordset_below(set, k, &k, &b) : !hbm_ordset_last(set, &k, &b)) return 0;
  uint64_t released = 0;
  while (released < key_size && B(m, b)->size >= max_split) {
    uint32_t cur = b;
    int more = hbm_ordset_below(set, k, &k, &b);
    if (whole_segment(B(m, cur))) {
      released += B(m, cur)->size;
      release_block(m, cur);
    }
    if (!more) break;
  }
  return released >= key_size;
}

/* release_blocks: every unsplit cached segment of a pool; expandable blocks
 * give back their whole free pages. */
static void release_blocks(pt *m, int pool) {
  uint32_t *list; /* scratch: nothing below collects again, so it stays ours */
  size_t n = collect_free(m, pool, &list);
  size_t nunmap = 0;
  for (size_t i = 0; i < n; i++) {
    pt_block *b = B(m, list[i]);
    if (b->es != NONE) list[nunmap++] = list[i]; /* to_unmap, kept in order */
    else if (!is_split(b)) release_block(m, list[i]);
  }
  for (size_t i = 0; i < nunmap; i++) {
    unmap_block(m, list[i]);
    pt_block *b = B(m, list[i]);
    if (!b->mapped && !is_split(b)) release_expandable_segment(m, list[i]);
  }
}

/* release_cached_blocks (empty_cache) */
static void release_cached_blocks(pt *m) {
  release_blocks(m, LARGE);
  release_blocks(m, SMALL);
}

/* should_split */
static int should_split(pt *m, uint32_t bi, uint64_t size) {
  pt_block *b = B(m, bi);
  uint64_t remaining = b->size - size;
  if (b->small || m->conf.expandable) return remaining >= HBM_PT_MIN_BLOCK;
  return size < m->conf.max_split_size && remaining > HBM_PT_SMALL_SIZE;
}

/* alloc_found_block: the low end of the block serves the request. */
static int alloc_found_block(pt *m, uint32_t bi, uint64_t size, uint64_t orig, hbm_tag tag, int split,
                             uint64_t *addr, uint64_t *block_size) {
  if (split) {
    uint32_t ni = blk_new(m); /* reserved: cannot fail */
    pt_block *rem = B(m, bi), *b = B(m, ni);
    b->addr = rem->addr;
    b->size = size;
    b->slot = rem->slot;
    b->small = rem->small;
    b->es = rem->es;
    b->prev = rem->prev;
    if (b->prev != NONE) B(m, b->prev)->next = ni;
    b->next = bi;
    rem->prev = ni;
    rem->addr += size;
    rem->size -= size;
    free_insert(m, bi);
    bi = ni;
  }
  pt_block *b = B(m, bi);
  b->allocated = 1;
  b->requested = orig;
  b->tag = (uint8_t)tag;
  hbm_addrmap_put(&m->active, b->addr, bi); /* reserved: cannot fail */
  m->allocated_bytes += b->size;
  m->allocated_blocks++;
  *addr = b->addr;
  *block_size = b->size;
  return HBM_OK;
}

/* Host memory for a malloc that finds a cached block: the split's block and
 * its remainder's insert, the active map's entry. */
static int reserve_found(pt *m, uint32_t slot, int pool) {
  if (blk_reserve(m, 1) != HBM_OK) return HBM_EHOSTMEM;
  if ((m->active.used + 1) * 2 > m->active.cap && hbm_addrmap_reserve(&m->active, 1) != HBM_OK) return HBM_EHOSTMEM;
  return sets_reserve(m, slot, pool, 1, 0);
}

/* Host memory for a malloc that found no cached block, for every path it may
 * take, with generous bounds (reservations are kept, so O(1) amortized):
 *   - garbage_collect_cached_blocks, release_blocks: the scratch list;
 *   - alloc_block, expandable, up to three calls: each may make a segment
 *     (a slot, a block, an unmapped insert) and calls map_block on distinct
 *     unmapped blocks of the stream's pool (a free insert each, at most one
 *     remainder: a block and an unmapped insert). With x = the set's cached
 *     and unmapped blocks + 8, the first two calls map at most x each;
 *   - release_cached_blocks, where expandable segments exist: each cached
 *     expandable block may be unmapped into two cached pieces around an
 *     unmapped range (2 blocks, 2 free inserts, 1 unmapped insert). The
 *     stream's pool then holds at most 3x cached blocks, and after it at
 *     most 4x unmapped ones, which bounds the third call's maps;
 *   - alloc_block otherwise: a segment's block; alloc_found_block's split:
 *     a block and the remainder's insert. */
static int reserve_miss(pt *m, uint32_t slot, int pool, uint64_t size) {
  size_t large = pool_count(m, LARGE), small = pool_count(m, SMALL);
  if (scratch_reserve(m, (large > small ? large : small) + 1) != HBM_OK) return HBM_EHOSTMEM;
  int expandable = m->conf.expandable != 0, unmaps = expandable || m->live_es;
  uint64_t x = hbm_ordset_count(m->streams[slot].free[pool]) + hbm_ordset_count(m->streams[slot].unmapped[pool]) + 8;
  uint64_t blocks = 2, n_free = 1, n_unmapped = 0;
  for (uint32_t s = 0; s < m->nstreams && unmaps; s++) {
    for (int k = 0; k < 2; k++) {
      uint64_t cached = s == slot && k == pool && expandable ? 3 * x : hbm_ordset_count(m->streams[s].free[k]);
      blocks += 2 * cached;
      if (s == slot && k == pool) { /* below, with the rest of its needs */
        n_free += 2 * cached;
        n_unmapped += cached;
      } else if (sets_reserve(m, s, k, 2 * cached, cached) != HBM_OK) {
        return HBM_EHOSTMEM;
      }
    }
  }
  if (expandable) {
    n_free += x + x + 4 * x;
    n_unmapped += 3 * 2;
    blocks += 3 * 2;
    /* A map starts at an unmapped block, which starts at or below page
     * nhandles (the first after the last mapped one), and spans at most the
     * request: each call maps below nhandles + p, p its pages plus one. */
    uint64_t page = pool == SMALL ? HBM_PT_SMALL_BUFFER : HBM_PT_LARGE_BUFFER;
    uint64_t p = size / page + 2, va_pages = es_va_size(m, page) / page;
    for (uint32_t e = 0; e < m->nes; e++) {
      pt_es *es = &m->es[e];
      if (!es->live || es->slot != slot || es->small != (pool == SMALL)) continue;
      uint64_t want = es->nhandles + 3 * p;
      if (es_handles_promise(m, es, want < va_pages ? want : va_pages) != HBM_OK) return HBM_EHOSTMEM;
    }
    if (es_slots_reserve(m, 3, 3 * p < va_pages ? 3 * p : va_pages) != HBM_OK) return HBM_EHOSTMEM;
  }
  if (blk_reserve(m, blocks) != HBM_OK) return HBM_EHOSTMEM;
  return sets_reserve(m, slot, pool, n_free, n_unmapped);
}

/* malloc */
int hbm_pt_alloc(hbm_policy *p, uint64_t orig, hbm_tag tag, int stream, uint64_t *addr,
                 uint64_t *block_size) {
  pt *m = (pt *)p;
  if (orig == 0 || orig > HBM_MAX_SIZE) return HBM_EINVAL;
  m->op++;
  uint32_t slot;
  int rc = slot_of(m, stream, &slot);
  if (rc != HBM_OK) return rc;
  uint64_t size = hbm_pt_round_size(&m->conf, orig);
  int pool = size <= HBM_PT_SMALL_SIZE ? SMALL : LARGE;
  uint64_t alloc_size = hbm_pt_allocation_size(size);
  if (reserve_found(m, slot, pool) != HBM_OK) return HBM_EHOSTMEM;
  int64_t calls = m->pool_calls[pool];
  uint32_t b = get_free_block(m, slot, pool, size);
  if (b == NONE) {
    if (reserve_miss(m, slot, pool, size) != HBM_OK) {
      m->pool_calls[pool] = calls; /* get_free_block's count: the call did not happen */
      return HBM_EHOSTMEM;
    }
    if (m->conf.set_fraction && m->conf.gc_threshold > 0.0) garbage_collect_cached_blocks(m);
    rc = alloc_block(m, slot, pool, size, alloc_size, 0, &b);
    if (rc == HBM_ENOMEM && release_available_cached_blocks(m, slot, pool, size))
      rc = alloc_block(m, slot, pool, size, alloc_size, 0, &b);
    if (rc == HBM_ENOMEM) {
      release_cached_blocks(m);
      rc = alloc_block(m, slot, pool, size, alloc_size, 1, &b);
    }
    if (rc != HBM_OK) {
      if (rc == HBM_ENOMEM) m->st.num_ooms++;
      return rc;
    }
  }
  return alloc_found_block(m, b, size, orig, tag, should_split(m, b, size), addr, block_size);
}

/* free -> free_block */
int hbm_pt_free(hbm_policy *p, uint64_t addr, uint64_t *block_size) {
  pt *m = (pt *)p;
  uint64_t v;
  m->op++;
  if (!hbm_addrmap_take(&m->active, addr, &v)) return HBM_EINVAL;
  uint32_t bi = (uint32_t)v;
  /* Merging only erases; the one insert is reserved first. Without it the
   * block goes back to the map, into the room it just left (cannot fail). */
  if (sets_reserve(m, B(m, bi)->slot, B(m, bi)->small ? SMALL : LARGE, 1, 0) != HBM_OK) {
    hbm_addrmap_put(&m->active, addr, bi);
    return HBM_EHOSTMEM;
  }
  pt_block *b = B(m, bi);
  b->allocated = 0;
  m->allocated_bytes -= b->size;
  m->allocated_blocks--;
  if (block_size) *block_size = b->size;
  uint32_t prev = b->prev, next = b->next; /* merge_candidates, taken before merging */
  try_merge_blocks(m, bi, prev);
  try_merge_blocks(m, bi, next);
  free_insert(m, bi);
  return HBM_OK;
}

/* ==== creation ============================================================== */

int hbm_pt_create(hbm_device *dev, const char *conf, int expandable_default, hbm_policy **out,
                  hbm_diag *diag) {
  hbm_pt_conf c;
  hbm_pt_conf_default(&c, expandable_default);
  int rc = hbm_pt_conf_parse(conf, &c, diag);
  if (rc != HBM_OK) return rc;
  /* The policy's name says which allocator ran: a setting that turns caching
   * into expandable (or back) would report one under the other's name. */
  if (c.expandable != (expandable_default != 0)) {
    if (diag) {
      memset(diag, 0, sizeof *diag);
      snprintf(diag->file, sizeof diag->file, "alloc-conf");
      snprintf(diag->message, sizeof diag->message,
               "expandable_segments:%s contradicts policy %s: PyTorch's allocator %s expandable segments "
               "is policy %s", c.expandable ? "True" : "False", expandable_default ? "expandable" : "caching",
               c.expandable ? "with" : "without", c.expandable ? "expandable" : "caching");
    }
    return HBM_EINVAL;
  }
  /* PyTorch sizes segments in 2 MiB (kRoundLarge, kSmallBuffer): the device's
   * pages must divide that, or every segment would hold memory the model
   * does not count (in its largest free, among others); expandable segments
   * map pages of 2 MiB besides. */
  int pages_too_large = !c.expandable && dev->caps.granule > HBM_PT_ROUND_LARGE;
  if (pages_too_large ||
      (c.expandable && (!dev->caps.vmm || !dev->caps.granule || HBM_PT_SMALL_BUFFER % dev->caps.granule))) {
    if (diag) {
      memset(diag, 0, sizeof *diag);
      snprintf(diag->file, sizeof diag->file, "alloc-conf");
      snprintf(diag->message, sizeof diag->message,
               pages_too_large ? "PyTorch's allocator sizes segments in 2 MiB, and this device's pages are larger "
                                 "(%s, granule %llu)"
                               : "expandable_segments:True needs a device that maps pages of 2 MiB (this one: %s, "
                                 "granule %llu)",
               dev->caps.kind, (unsigned long long)dev->caps.granule);
    }
    return HBM_EUNSUPPORTED;
  }
  pt *m = calloc(1, sizeof *m);
  if (!m) return HBM_EHOSTMEM;
  m->base.dev = dev;
  m->base.cls = expandable_default ? &hbm_policy_expandable : &hbm_policy_caching;
  m->conf = c;
  m->free_list = NONE;
  m->allowed_memory_maximum = c.set_fraction
      ? (uint64_t)(c.memory_fraction * (double)dev->caps.capacity)
      : dev->caps.capacity;
  hbm_addrmap_init(&m->active);
  *out = &m->base;
  return HBM_OK;
}

void hbm_pt_destroy(hbm_policy *p) {
  pt *m = (pt *)p;
  if (!m) return;
  /* Give the device back what the model holds: segments, pages, reservations. */
  for (uint32_t i = 0; i < m->nblocks; i++) {
    pt_block *b = &m->blocks[i];
    if (!b->in_use || b->prev != NONE || b->es != NONE) continue;
    uint64_t size = 0;
    for (uint32_t j = i; j != NONE; j = m->blocks[j].next) size += m->blocks[j].size;
    hbm_dev_seg_free(p->dev, b->addr, size);
  }
  for (uint32_t e = 0; e < m->cap_es; e++) {
    pt_es *es = &m->es[e];
    if (e < m->nes && es->live) {
      for (uint64_t k = 0; k < es->nhandles; k++)
        if (es->handles[k]) es_unmap_pages(m, es, k, k + 1);
      hbm_dev_unreserve(p->dev, es->base, es->va_size);
    }
    free(es->handles); /* a live segment's, or a reserved slot's */
  }
  for (uint32_t s = 0; s < m->nstreams; s++) {
    for (int k = 0; k < 2; k++) {
      hbm_ordset_destroy(m->streams[s].free[k]);
      hbm_ordset_destroy(m->streams[s].unmapped[k]);
    }
  }
  hbm_addrmap_release(&m->active);
  free(m->streams);
  free(m->es);
  free(m->blocks);
  free(m->scratch);
  free(m);
}

/* ==== usage, scan, counters ================================================= */

static uint64_t largest_cached(pt *m, int pool) {
  if (!m->largest_valid[pool]) {
    uint64_t best = 0;
    for (uint32_t s = 0; s < m->nstreams; s++) {
      hbm_okey k;
      if (hbm_ordset_last(m->streams[s].free[pool], &k, NULL) && k.hi > best) best = k.hi;
    }
    m->largest[pool] = best;
    m->largest_valid[pool] = 1;
  }
  return m->largest[pool];
}

/* The largest request whose rounded size is at most `bytes` (0 if none).
 * Rounding is monotone, so a binary search finds it: with
 * roundup_power2_divisions a 700 MiB block serves requests up to 640 MiB at
 * 8 divisions, not 700 MiB. */
static uint64_t largest_request_within(const hbm_pt_conf *c, uint64_t bytes) {
  if (bytes < HBM_PT_MIN_BLOCK) return 0;
  uint64_t lo = 1, hi = bytes; /* hbm_pt_round_size(c, 1) = 512 <= bytes */
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo + 1) / 2;
    if (hbm_pt_round_size(c, mid) <= bytes) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* The largest request whose rounded size fits a cached block and falls in
 * its pool (0: none); *rounded gets its rounded size. */
static uint64_t request_within_block(const pt *m, const pt_block *b, uint64_t *rounded) {
  uint64_t size = b->small && b->size > HBM_PT_SMALL_SIZE ? HBM_PT_SMALL_SIZE : b->size;
  uint64_t x = largest_request_within(&m->conf, size);
  *rounded = hbm_pt_round_size(&m->conf, x);
  if (!b->small && *rounded <= HBM_PT_SMALL_SIZE) return 0; /* a small request */
  return x;
}

/* The largest request any stream's cached blocks of a pool serve now: from
 * each stream's largest block down, the largest request that fits a block,
 * kept where get_free_block would give that request a block (best fit's
 * walk over expandable blocks, max_split_size and max_non_split_rounding
 * decide), until no smaller block can serve more. What an expandable block
 * could grow to is largest_by_growth's. */
static uint64_t largest_from_cache(pt *m, int pool) {
  uint64_t best = 0;
  if (largest_cached(m, pool) == 0) return 0;
  for (uint32_t s = 0; s < m->nstreams; s++) {
    hbm_okey k;
    uint32_t b;
    int more = hbm_ordset_last(m->streams[s].free[pool], &k, &b);
    while (more && k.hi > best) {
      uint64_t rounded, x = request_within_block(m, B(m, b), &rounded);
      if (x > best && find_free_block(m, s, pool, rounded) != NONE) best = x;
      more = hbm_ordset_below(m->streams[s].free[pool], k, &k, &b);
    }
  }
  return best;
}

/* Growth: a request that no cached block serves goes to
 * find_expandable_block, which gives it the first run of free space (free
 * and unmapped blocks between allocated ones or the segment's ends) in
 * address order, on its stream, long enough to hold it and holding an
 * unmapped block; try_allocate_expandable_block then maps, from the run's
 * start, the pages the request reaches. Counted here as the run stands after
 * malloc's retry (release_cached_blocks): every cached block's whole pages
 * unmapped and their pages free, a segment emptied by that released. A
 * request the run serves before the retry it serves after it too, since the
 * retry frees at least the pages of the run's cached blocks that the first
 * try did not need to map; so the first try adds nothing to the figure.
 * Nothing here allocates: usage cannot fail, and a figure that host memory
 * made smaller would be a different answer. */
typedef struct growth_run {
  uint64_t len, serves; /* serves: the largest block the run gives after the retry, 0 if none */
  uint32_t next;        /* the block after the run */
  int candidate;        /* find_expandable_block considers it after the retry (it holds an unmapped page) */
} growth_run;

/* The run starting at block i, with `pages` device pages free after the
 * retry. The run's first and last partial pages stay mapped (an allocated
 * neighbour holds them); the request maps whole pages from there on. */
static growth_run growth_run_at(pt *m, uint32_t i, uint64_t pages) {
  const pt_es *e = &m->es[B(m, i)->es];
  growth_run g = {0, 0, NONE, 0};
  int mapped = 0;
  uint32_t j = i;
  for (; j != NONE && !B(m, j)->allocated; j = B(m, j)->next) {
    g.len += B(m, j)->size;
    mapped |= B(m, j)->mapped;
  }
  g.next = j;
  /* release_blocks unmaps a free segment's cached blocks and then releases
   * it; one whose blocks were all unmapped already is never visited, and stays. */
  int released = B(m, i)->prev == NONE && j == NONE && mapped;
  uint64_t addr = B(m, i)->addr, first = es_page_right(e, addr), end = es_page_left(e, addr + g.len);
  if (!released && end > first) {
    g.candidate = 1;
    uint64_t head = e->base + first * e->page - addr;
    g.serves = end - first <= pages ? g.len : head + pages * e->page;
  }
  return g;
}

/* The live large-pool segment of a stream with the lowest base above `above`
 * (any, when `first`), or NONE. */
static uint32_t next_segment(const pt *m, uint32_t slot, int first, uint64_t above) {
  uint32_t best = NONE;
  for (uint32_t k = 0; k < m->nes; k++) {
    const pt_es *e = &m->es[k];
    if (!e->live || e->slot != slot || e->small || (!first && e->base <= above)) continue;
    if (best == NONE || e->base < m->es[best].base) best = k;
  }
  return best;
}

/* The block at a segment's base. */
static uint32_t segment_head(const pt *m, uint32_t ei) {
  for (uint32_t i = 0; i < m->nblocks; i++) {
    const pt_block *b = &m->blocks[i];
    if (b->in_use && b->es == ei && b->prev == NONE) return i;
  }
  return NONE; /* cannot happen: a live segment has blocks (P1) */
}

/* The largest large-pool request growth serves after the retry, with
 * `free_bytes` on the device then and `held` bytes still allocated from it
 * (per_process_memory_fraction's check). A run serves only requests longer
 * than every run before it on its stream. A small request is at most 1 MiB,
 * which the caller covers. */
static uint64_t largest_by_growth(pt *m, uint64_t free_bytes, uint64_t held) {
  uint64_t best = 0;
  for (uint32_t slot = 0; slot < m->nstreams; slot++) {
    uint64_t longest = 0;
    for (uint32_t ei = next_segment(m, slot, 1, 0); ei != NONE; ei = next_segment(m, slot, 0, m->es[ei].base)) {
      uint64_t pages = free_bytes / m->es[ei].page;
      for (uint32_t i = segment_head(m, ei); i != NONE;) {
        if (B(m, i)->allocated) {
          i = B(m, i)->next;
          continue;
        }
        growth_run g = growth_run_at(m, i, pages);
        i = g.next;
        /* A run that serves nothing still takes the requests it is long
         * enough for, ahead of every run after it: find_expandable_block
         * picks it by length, and mapping its pages then fails. */
        if (!g.candidate) continue;
        if (g.serves) {
          uint64_t x = largest_request_within(&m->conf, g.serves), r = hbm_pt_round_size(&m->conf, x);
          int fits = !m->conf.set_fraction || held + hbm_pt_allocation_size(r) <= m->allowed_memory_maximum;
          if (r > HBM_PT_SMALL_SIZE && r > longest && fits && x > best) best = x;
        }
        if (g.len > longest) longest = g.len;
      }
    }
  }
  return best;
}

/* largest_free: the largest request that succeeds now without moving data,
 * on the stream best placed for it (test_largest_free and
 * test_caching_reference request it). From the cache: largest_from_cache.
 * From the device: a new segment, for a request whose rounded size fits,
 * after malloc's retry released every unsplit cached segment and unmapped
 * the whole free pages of expandable ones. For an expandable policy, new
 * pages map in whole large pages (20 MiB), and a request may also grow into
 * a segment's free space: largest_by_growth. Exact, but a lower bound
 * where blocks outside expandable segments (only a recorded starting state
 * holds them) are freed before the retry (release_available_cached_blocks
 * under max_split_size, garbage collection), and under
 * per_process_memory_fraction, whose check drops a run's figure where a
 * shorter request would pass. */
void hbm_pt_usage(hbm_policy *p, hbm_policy_usage *out) {
  pt *m = (pt *)p;
  hbm_device *dev = p->dev;
  out->reserved = m->total_allocated_memory;
  out->limit = m->conf.set_fraction ? m->allowed_memory_maximum : UINT64_MAX;
  uint64_t best = largest_from_cache(m, LARGE);
  uint64_t small = largest_from_cache(m, SMALL);
  if (small > best) best = small;
  uint64_t device_free = dev->caps.capacity > dev->phys_used ? dev->caps.capacity - dev->phys_used : 0;
  uint64_t unmappable = 0; /* whole pages of cached expandable blocks: release unmaps them */
  for (uint32_t i = 0; m->live_es && i < m->nblocks; i++) {
    const pt_block *b = &m->blocks[i];
    if (!b->in_use || b->allocated || !b->mapped || b->es == NONE) continue;
    const pt_es *e = &m->es[b->es];
    uint64_t lo = es_page_right(e, b->addr), hi = es_page_left(e, b->addr + b->size);
    if (hi > lo) unmappable += (hi - lo) * e->page;
  }
  /* after malloc's retry: what the device then has free, and what is still held */
  uint64_t released_free = device_free + m->releasable + unmappable;
  uint64_t held = m->total_allocated_memory - m->releasable - unmappable;
  uint64_t avail = released_free;
  uint64_t room = m->allowed_memory_maximum > held ? m->allowed_memory_maximum - held : 0;
  if (m->conf.set_fraction && room < avail) avail = room;
  uint64_t fresh = 0;
  if (m->conf.expandable) {
    /* The device maps whole large pages; the fraction's check (alloc_block)
     * weighs the request's allocation size, in 2 MiB, not the pages. */
    uint64_t bound = released_free / HBM_PT_LARGE_BUFFER * HBM_PT_LARGE_BUFFER;
    if (m->conf.set_fraction && room / HBM_PT_ROUND_LARGE * HBM_PT_ROUND_LARGE < bound)
      bound = room / HBM_PT_ROUND_LARGE * HBM_PT_ROUND_LARGE;
    fresh = largest_request_within(&m->conf, bound);
    /* a rounded size below kMinLargeAlloc is allocated as a whole large page */
    if (hbm_pt_round_size(&m->conf, fresh) < HBM_PT_MIN_LARGE_ALLOC && bound < HBM_PT_LARGE_BUFFER) fresh = 0;
  } else if (avail >= HBM_PT_MIN_LARGE_ALLOC) {
    fresh = largest_request_within(&m->conf, avail / HBM_PT_ROUND_LARGE * HBM_PT_ROUND_LARGE);
    /* a rounded size below kMinLargeAlloc takes a whole kLargeBuffer segment */
    if (hbm_pt_round_size(&m->conf, fresh) < HBM_PT_MIN_LARGE_ALLOC && avail < HBM_PT_LARGE_BUFFER) fresh = 0;
  }
  if (fresh < HBM_PT_SMALL_SIZE && avail >= HBM_PT_SMALL_BUFFER) fresh = HBM_PT_SMALL_SIZE; /* a small segment */
  if (m->conf.expandable && m->live_es) {
    uint64_t grown = largest_by_growth(m, released_free, held);
    if (grown > best) best = grown;
  }
  out->largest_free = fresh > best ? fresh : best;
}

uint64_t hbm_pt_reserved(hbm_policy *p) { return ((pt *)p)->total_allocated_memory; }

typedef struct head { uint64_t addr; uint32_t block; } head;
static int head_cmp(const void *a, const void *b) {
  uint64_t x = ((const head *)a)->addr, y = ((const head *)b)->addr;
  return x < y ? -1 : x > y;
}

int hbm_pt_scan(hbm_policy *p, hbm_scan_fn *visit, void *arg) {
  pt *m = (pt *)p;
  size_t n = 0;
  for (uint32_t i = 0; i < m->nblocks; i++)
    if (m->blocks[i].in_use && m->blocks[i].prev == NONE) n++;
  head *h = malloc((n + 1) * sizeof *h);
  if (!h) return HBM_EHOSTMEM;
  n = 0;
  for (uint32_t i = 0; i < m->nblocks; i++)
    if (m->blocks[i].in_use && m->blocks[i].prev == NONE) h[n++] = (head){m->blocks[i].addr, i};
  qsort(h, n, sizeof *h, head_cmp);
  int stop = 0;
  for (size_t k = 0; k < n && !stop; k++) {
    for (uint32_t j = h[k].block; j != NONE && !stop; j = m->blocks[j].next) {
      pt_block *b = &m->blocks[j];
      if (!b->mapped) continue;
      stop = visit(arg, b->addr, b->size, b->allocated, b->allocated ? (hbm_tag)b->tag : HBM_TAG_OTHER);
    }
  }
  free(h);
  return HBM_OK;
}

uint64_t hbm_pt_free_pieces(hbm_policy *p, int room) {
  pt *m = (pt *)p;
  uint64_t holes = 0, tails = 0;
  for (uint32_t i = 0; i < m->nblocks; i++) {
    const pt_block *b = &m->blocks[i];
    if (!b->in_use || b->allocated || !b->mapped) continue;
    if (b->next != NONE && !m->blocks[b->next].mapped) tails++;
    else holes++;
  }
  /* A tail is what the segment's last page leaves past its last block (the
   * retry before a failure unmapped whole free pages): the pages' granularity,
   * one piece with the room its segment grows into, not a hole between blocks. */
  return holes + (uint64_t)(room || tails);
}

int hbm_pt_counters(hbm_policy *p, hbm_counter *out, int max) {
  pt *m = (pt *)p;
  hbm_counter all[] = {
      {"segment_allocs", (double)m->st.num_device_alloc},
      {"segment_frees", (double)m->st.num_device_free},
      {"alloc_retries", (double)m->st.num_alloc_retries},
      {"gc_releases", (double)m->st.num_gc_releases},
  };
  int n = 0;
  for (size_t i = 0; i < sizeof all / sizeof all[0] && n < max; i++) out[n++] = all[i];
  return n;
}

int hbm_pt_is_pytorch(const hbm_policy *p) {
  return p && (p->cls == &hbm_policy_caching || p->cls == &hbm_policy_expandable);
}

int hbm_pt_set_hooks(hbm_policy *p, const hbm_pt_hooks *hooks) {
  if (!hbm_pt_is_pytorch(p)) return HBM_EINVAL;
  pt *m = (pt *)p;
  if (hooks) m->hooks = *hooks;
  else memset(&m->hooks, 0, sizeof m->hooks);
  return HBM_OK;
}

int hbm_pt_get_stats(hbm_policy *p, hbm_pt_stats *out) {
  if (!hbm_pt_is_pytorch(p)) return HBM_EINVAL;
  pt *m = (pt *)p;
  *out = m->st;
  out->reserved = m->total_allocated_memory;
  out->allocated = m->allocated_bytes;
  out->free_blocks = 0;
  for (uint32_t s = 0; s < m->nstreams; s++)
    out->free_blocks += hbm_ordset_count(m->streams[s].free[0]) + hbm_ordset_count(m->streams[s].free[1]);
  return HBM_OK;
}

int hbm_pt_get_conf(hbm_policy *p, hbm_pt_conf *out) {
  if (!hbm_pt_is_pytorch(p)) return HBM_EINVAL;
  *out = ((pt *)p)->conf;
  return HBM_OK;
}

/* ==== recorded segment releases and the starting state ====================== */

int hbm_pt_seg_released(hbm_policy *p, uint64_t addr, uint64_t size) {
  pt *m = (pt *)p;
  m->op++;
  for (uint32_t i = 0; i < m->nblocks; i++) {
    pt_block *b = &m->blocks[i];
    /* Unmapped address space is skipped: a model reservation (1.125 x its
     * device) may reach over addresses the recording used elsewhere. */
    if (!b->in_use || !b->mapped || addr < b->addr || addr >= b->addr + b->size) continue;
    if (b->allocated) return HBM_EBUSY;
    if (b->es == NONE) {
      if (b->addr != addr || is_split(b) || b->size != size) return HBM_EBUSY;
      release_block(m, i);
      return HBM_OK;
    }
    /* unmap_block_range: two cached pieces around the unmapped range. */
    if (blk_reserve(m, 2) != HBM_OK || sets_reserve(m, b->slot, b->small ? SMALL : LARGE, 2, 1) != HBM_OK)
      return HBM_EHOSTMEM;
    uint64_t before = m->total_allocated_memory;
    unmap_block_range(m, i, addr, addr + size);
    if (m->total_allocated_memory == before) return HBM_EBUSY;
    /* Block i is now the unmapped range, merged with unmapped neighbours:
     * when it spans the whole reservation, the segment goes (release_blocks). */
    if (!B(m, i)->mapped && !is_split(B(m, i))) release_expandable_segment(m, i);
    return HBM_OK;
  }
  return HBM_EINVAL;
}

static int seed_fail(const char *what, uint64_t addr) {
  return hbm_report_error(HBM_EINVAL, "caching: starting state: %s at 0x%llx", what,
                          (unsigned long long)addr);
}

/* A seed is checked and its host memory reserved before the first device
 * call (seed_plan), so it fails for a bad state or host memory having changed
 * nothing. Only a device call can fail once it runs: then what was seeded
 * before stays (the replay reports the state as not fitting), each segment
 * whole and consistent. */

/* The init blocks of a segment tile it in 512-byte units. */
static int seed_check_blocks(const hbm_trace *t, const hbm_init_segment *s) {
  uint64_t at = s->addr;
  for (uint32_t k = 0; k < s->nblocks; k++) {
    const hbm_init_block *ib = &t->init_blocks[s->first_block + k];
    if (ib->addr != at || ib->size == 0 || ib->size % HBM_PT_MIN_BLOCK || ib->addr % HBM_PT_MIN_BLOCK)
      return seed_fail("blocks must tile the segment in 512-byte units", ib->addr);
    at += ib->size;
  }
  if (at != s->addr + s->size) return seed_fail("blocks do not cover the segment", s->addr);
  return HBM_OK;
}

/* Builds the blocks of one init segment at address delta (checked and
 * reserved by seed_plan); returns the first and last block indices. */
static void seed_blocks(pt *m, const hbm_trace *t, const hbm_init_segment *s, uint32_t slot, uint32_t es,
                        int64_t delta, uint64_t *id_addr, uint32_t *first, uint32_t *last) {
  uint32_t prev = NONE;
  *first = NONE;
  for (uint32_t k = 0; k < s->nblocks; k++) {
    const hbm_init_block *ib = &t->init_blocks[s->first_block + k];
    uint32_t bi = blk_new(m); /* reserved: cannot fail */
    pt_block *b = B(m, bi);
    b->addr = (uint64_t)((int64_t)ib->addr + delta);
    b->size = ib->size;
    b->slot = slot;
    b->small = s->small;
    b->es = es;
    b->prev = prev;
    if (prev != NONE) B(m, prev)->next = bi;
    if (*first == NONE) *first = bi;
    prev = bi;
    if (ib->id != HBM_NO_ID) {
      b->allocated = 1;
      b->requested = ib->request ? ib->request : ib->size;
      b->tag = ib->tag;
      hbm_addrmap_put(&m->active, b->addr, bi); /* reserved: cannot fail */
      m->allocated_bytes += b->size;
      m->allocated_blocks++;
      if (id_addr && ib->id < t->nids) id_addr[ib->id] = b->addr;
    }
  }
  *last = prev;
}

/* After linking: caches the free blocks of a chain in address order, each
 * merged with a free neighbour before it of the same mapped state, as a free
 * does (P2: a state PyTorch recorded has none, but the trace format allows a
 * free block after a free block). */
static void seed_cache(pt *m, uint32_t first) {
  for (uint32_t j = first; j != NONE; j = B(m, j)->next) {
    if (B(m, j)->allocated) continue;
    try_merge_blocks(m, j, B(m, j)->prev); /* the one before is cached already */
    if (B(m, j)->mapped) free_insert(m, j);
    else unmapped_insert(m, j);
  }
}

static int seed_plain(pt *m, const hbm_trace *t, const hbm_init_segment *s, uint64_t *id_addr) {
  uint32_t slot;
  int rc = slot_of(m, s->stream, &slot); /* made by seed_plan */
  if (rc != HBM_OK) return rc;
  uint64_t got = 0;
  rc = hbm_dev_seg_alloc(m->base.dev, s->size, s->addr, &got);
  if (rc != HBM_OK) return rc;
  uint32_t first, last;
  seed_blocks(m, t, s, slot, NONE, (int64_t)(got - s->addr), id_addr, &first, &last);
  m->total_allocated_memory += s->size;
  m->st.segments++;
  seed_cache(m, first);
  return HBM_OK;
}

/* Expandable: the mapped ranges of one (stream, pool) in address order share
 * a reservation that starts at the first range, as long as they fit in one. */
typedef struct seg_ref {
  int stream;
  uint8_t small;
  uint64_t addr;
  uint32_t index;
} seg_ref;

static int seg_ref_cmp(const void *a, const void *b) {
  const seg_ref *x = a, *y = b;
  if (x->stream != y->stream) return x->stream < y->stream ? -1 : 1;
  if (x->small != y->small) return x->small < y->small ? -1 : 1;
  return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static void seed_gap(pt *m, uint32_t slot, int small, uint32_t es, uint64_t addr, uint64_t size,
                     uint32_t *chain_first, uint32_t *chain_last) {
  uint32_t g = blk_new(m); /* reserved: cannot fail */
  pt_block *gb = B(m, g);
  gb->addr = addr;
  gb->size = size;
  gb->slot = slot;
  gb->small = (uint8_t)small;
  gb->es = es;
  gb->mapped = 0;
  gb->prev = *chain_last;
  if (*chain_last != NONE) B(m, *chain_last)->next = g;
  if (*chain_first == NONE) *chain_first = g;
  *chain_last = g;
}

/* The ranges refs[k..] that share one reservation with refs[k]: returns how
 * many (0: refs[k] alone is larger than a reservation). */
static uint32_t seed_group(pt *m, const hbm_trace *t, const seg_ref *refs, uint32_t n, uint32_t k) {
  const hbm_init_segment *s0 = &t->init_segments[refs[k].index];
  uint64_t page = s0->small ? HBM_PT_SMALL_BUFFER : HBM_PT_LARGE_BUFFER;
  uint64_t va = es_va_size(m, page), at = s0->addr;
  uint32_t count = 0;
  for (; k < n; k++, count++) {
    const hbm_init_segment *s = &t->init_segments[refs[k].index];
    if (s->stream != s0->stream || s->small != s0->small) break;
    if (s->addr < at || s->addr + s->size > s0->addr + va) break; /* the next reservation */
    at = s->addr + s->size;
  }
  return count;
}

/* Expandable: the mapped ranges of one (stream, pool) in address order share
 * a reservation that starts at the first range, as long as they fit in one
 * (PyTorch reports each contiguous mapped range of a reservation as a
 * segment; the reservation's own start is not recorded). */
static int seed_expandable(pt *m, const hbm_trace *t, const seg_ref *refs, uint32_t n, uint64_t *id_addr) {
  uint32_t k = 0;
  while (k < n) {
    const hbm_init_segment *s0 = &t->init_segments[refs[k].index];
    uint32_t slot, tail, group = seed_group(m, t, refs, n, k);
    int rc = slot_of(m, s0->stream, &slot); /* made by seed_plan */
    if (rc != HBM_OK) return rc;
    rc = es_new(m, slot, s0->small, s0->addr, &tail);
    if (rc != HBM_OK) return rc;
    uint32_t ei = B(m, tail)->es;
    int64_t delta = (int64_t)(m->es[ei].base - s0->addr);
    uint64_t rec_base = s0->addr, page = m->es[ei].page, va = m->es[ei].va_size;
    unmapped_erase(m, tail);
    blk_release(m, tail);
    uint32_t chain_last = NONE, chain_first = NONE;
    uint64_t at = rec_base; /* recorded coordinates */
    for (uint32_t end = k + group; k < end; k++) {
      const hbm_init_segment *s = &t->init_segments[refs[k].index];
      if (s->addr > at) {
        seed_gap(m, slot, s->small, ei, (uint64_t)((int64_t)at + delta), s->addr - at, &chain_first, &chain_last);
        at = s->addr;
      }
      rc = es_map_pages(m, &m->es[ei], (s->addr - rec_base) / page, (s->addr + s->size - rec_base) / page);
      if (rc != HBM_OK) break; /* the device is full: the rest stays unmapped (merged into one gap) */
      uint32_t first, last;
      seed_blocks(m, t, s, slot, ei, delta, id_addr, &first, &last);
      B(m, first)->prev = chain_last;
      if (chain_last != NONE) B(m, chain_last)->next = first;
      if (chain_first == NONE) chain_first = first;
      chain_last = last;
      m->total_allocated_memory += s->size;
      at = s->addr + s->size;
    }
    if (at < rec_base + va) seed_gap(m, slot, s0->small, ei, (uint64_t)((int64_t)at + delta), rec_base + va - at, &chain_first, &chain_last);
    seed_cache(m, chain_first);
    if (rc != HBM_OK) return rc;
  }
  return HBM_OK;
}

static int segment_holds_live(const hbm_trace *t, const hbm_init_segment *s) {
  for (uint32_t k = 0; k < s->nblocks; k++)
    if (t->init_blocks[s->first_block + k].id != HBM_NO_ID) return 1;
  return 0;
}

/* A recorded state larger than the device cannot have existed there: out of
 * memory, PyTorch releases every cached segment that holds no live block and
 * retries (release_cached_blocks), so such a state starts without them.
 * Seeding them and releasing at the first failure would count calls the run
 * on that device never made. */
static int seed_drops_cache(const pt *m, const hbm_trace *t) {
  uint64_t need = 0;
  for (uint32_t i = 0; i < t->ninit_segments; i++) need += t->init_segments[i].size;
  const hbm_device *d = m->base.dev;
  return need > d->caps.capacity - d->phys_used;
}

/* Counts one segment's blocks into the seed's needs: blocks, live blocks,
 * free blocks per (stream slot, pool). */
static int seed_count(pt *m, const hbm_trace *t, const hbm_init_segment *s, uint64_t *blocks, uint64_t *live,
                      uint64_t **per_set, size_t *cap_sets) {
  uint32_t slot;
  int rc = slot_of(m, s->stream, &slot);
  if (rc != HBM_OK) return rc;
  if (2 * (size_t)m->nstreams > *cap_sets) {
    size_t cap = 4 * (size_t)m->nstreams; /* free, unmapped for each of (slot, pool) */
    uint64_t *n = realloc(*per_set, 2 * cap * sizeof *n);
    if (!n) return HBM_EHOSTMEM;
    memset(n + 2 * *cap_sets, 0, 2 * (cap - *cap_sets) * sizeof *n);
    *per_set = n;
    *cap_sets = cap;
  }
  uint64_t *set = *per_set + 2 * (2 * (size_t)slot + (s->small ? SMALL : LARGE));
  *blocks += s->nblocks;
  for (uint32_t k = 0; k < s->nblocks; k++) {
    if (t->init_blocks[s->first_block + k].id != HBM_NO_ID) (*live)++;
    else set[0]++;
  }
  if (s->expandable) set[1] += 2; /* a gap before it, the one after the last */
  return HBM_OK;
}

/* Checks the whole state and reserves everything the seed will need. */
static int seed_plan(pt *m, const hbm_trace *t, int drop_cache, seg_ref *exp, uint32_t *nexp_out) {
  uint32_t n = t->ninit_segments, nexp = 0;
  uint64_t blocks = 0, live = 0, *per_set = NULL;
  size_t cap_sets = 0;
  int rc = HBM_OK, too_long = 0;
  /* Streams in the order the seed meets them: plain segments, then ranges. */
  for (uint32_t i = 0; i < n && rc == HBM_OK; i++) {
    const hbm_init_segment *s = &t->init_segments[i];
    if (drop_cache && !segment_holds_live(t, s)) continue;
    if (s->expandable) {
      exp[nexp++] = (seg_ref){s->stream, s->small, s->addr, i};
      continue;
    }
    if (s->size == 0 || s->size % HBM_PT_MIN_BLOCK) rc = seed_fail("segment size", s->addr);
    else if ((rc = seed_check_blocks(t, s)) == HBM_OK) rc = seed_count(m, t, s, &blocks, &live, &per_set, &cap_sets);
  }
  if (rc == HBM_OK && nexp) qsort(exp, nexp, sizeof *exp, seg_ref_cmp);
  uint32_t groups = 0;
  uint64_t pages = 0; /* handles each reservation needs: to its last range's end */
  for (uint32_t k = 0; k < nexp && rc == HBM_OK; groups++) {
    const hbm_init_segment *s0 = &t->init_segments[exp[k].index];
    uint32_t group = seed_group(m, t, exp, nexp, k);
    uint64_t page = s0->small ? HBM_PT_SMALL_BUFFER : HBM_PT_LARGE_BUFFER;
    if (!group) {
      /* The range alone is longer than a reservation on this device (9/8 of
       * its memory): recorded on a larger one, it cannot lie here as
       * recorded. The state does not fit, as one larger than the memory does
       * not (HBM_ENOMEM, before any device call), once the rest is sound. */
      if (s0->size % page || !s0->size) rc = seed_fail("expandable range not in whole pages", s0->addr);
      else rc = seed_check_blocks(t, s0);
      too_long = 1;
      k++;
      continue;
    }
    blocks += 1 + 1; /* es_new's block (released at once), the gap at the end */
    for (uint32_t end = k + group; k < end && rc == HBM_OK; k++) {
      const hbm_init_segment *s = &t->init_segments[exp[k].index];
      if ((s->addr - s0->addr) % page || s->size % page || !s->size)
        rc = seed_fail("expandable range not in whole pages", s->addr);
      else if ((rc = seed_check_blocks(t, s)) == HBM_OK)
        rc = seed_count(m, t, s, &blocks, &live, &per_set, &cap_sets);
      blocks++; /* the gap before it */
      if ((s->addr + s->size - s0->addr) / page > pages) pages = (s->addr + s->size - s0->addr) / page;
    }
  }
  if (rc == HBM_OK && too_long) rc = HBM_ENOMEM;
  if (rc == HBM_OK && (blk_reserve(m, blocks) != HBM_OK || hbm_addrmap_reserve(&m->active, live) != HBM_OK ||
                       es_slots_reserve(m, groups, pages) != HBM_OK))
    rc = HBM_EHOSTMEM;
  for (uint32_t slot = 0; slot < m->nstreams && rc == HBM_OK && per_set; slot++)
    for (int pool = 0; pool < 2 && rc == HBM_OK; pool++) {
      const uint64_t *set = per_set + 2 * (2 * (size_t)slot + pool);
      if (2 * (size_t)slot + pool < cap_sets) rc = sets_reserve(m, slot, pool, set[0], set[1]);
    }
  free(per_set);
  *nexp_out = nexp;
  return rc;
}

int hbm_pt_seed(hbm_policy *p, const hbm_trace *t, uint64_t *id_addr, uint64_t *id_block) {
  pt *m = (pt *)p;
  m->op++;
  uint32_t n = t->ninit_segments, nexp = 0;
  seg_ref *exp = malloc(((size_t)n + 1) * sizeof *exp);
  if (!exp) return HBM_EHOSTMEM;
  int drop_cache = seed_drops_cache(m, t);
  int rc = seed_plan(m, t, drop_cache, exp, &nexp);
  for (uint32_t i = 0; i < n && rc == HBM_OK; i++) {
    const hbm_init_segment *s = &t->init_segments[i];
    if (drop_cache && !segment_holds_live(t, s)) continue;
    if (!s->expandable) rc = seed_plain(m, t, s, id_addr);
  }
  if (rc == HBM_OK && nexp) rc = seed_expandable(m, t, exp, nexp, id_addr);
  free(exp);
  /* the model keeps the recorded blocks */
  for (uint32_t i = 0; rc == HBM_OK && id_block && i < t->ninit_blocks; i++)
    if (t->init_blocks[i].id != HBM_NO_ID && t->init_blocks[i].id < t->nids)
      id_block[t->init_blocks[i].id] = t->init_blocks[i].size;
  return rc;
}

/* ==== invariants ============================================================ */

static void ordset_report(void *arg, const char *message) {
  hbm_check_fail(arg, "caching: P7 %s", message);
}

int hbm_pt_check(hbm_policy *p, hbm_check_report_fn *report, void *arg) {
  pt *m = (pt *)p;
  hbm_checker c = {.report = report, .arg = arg, .limit = 50};
  uint64_t reserved = 0, allocated = 0, allocated_blocks = 0, releasable = 0;
  size_t cached = 0, unmapped = 0;
  for (uint32_t i = 0; i < m->nblocks; i++) {
    pt_block *b = &m->blocks[i];
    if (!b->in_use) continue;
    if (b->size == 0 || b->size % HBM_PT_MIN_BLOCK || b->addr % HBM_PT_MIN_BLOCK)
      hbm_check_fail(&c, "caching: P7 block 0x%llx+%llu not in 512-byte units", (unsigned long long)b->addr,
          (unsigned long long)b->size);
    if (b->next != NONE) {
      pt_block *n = &m->blocks[b->next];
      if (!n->in_use || n->prev != i || n->addr != b->addr + b->size)
        hbm_check_fail(&c, "caching: P1 block 0x%llx and its next do not tile", (unsigned long long)b->addr);
      else if (n->slot != b->slot || n->small != b->small || n->es != b->es)
        hbm_check_fail(&c, "caching: P1 block 0x%llx and its next differ in stream, pool or segment",
            (unsigned long long)b->addr);
      else if (!b->allocated && !n->allocated && b->mapped == n->mapped)
        hbm_check_fail(&c, "caching: P2 free neighbours 0x%llx and 0x%llx not merged", (unsigned long long)b->addr,
            (unsigned long long)n->addr);
    }
    if (b->prev != NONE && (!m->blocks[b->prev].in_use || m->blocks[b->prev].next != i))
      hbm_check_fail(&c, "caching: P1 block 0x%llx: prev link disagrees", (unsigned long long)b->addr);
    if (b->mapped) {
      if (b->es == NONE && b->prev == NONE) {
        for (uint32_t j = i; j != NONE && m->blocks[j].in_use; j = m->blocks[j].next) reserved += m->blocks[j].size;
      } else if (b->es != NONE) {
        reserved += b->size;
      }
    }
    uint32_t v;
    if (b->allocated) {
      allocated += b->size;
      allocated_blocks++;
      uint64_t got;
      if (!hbm_addrmap_get(&m->active, b->addr, &got) || got != i)
        hbm_check_fail(&c, "caching: P4 allocated block 0x%llx not in the active map", (unsigned long long)b->addr);
    } else if (b->mapped) {
      cached++;
      if (whole_segment(b)) releasable += b->size;
      int pool = b->small ? SMALL : LARGE;
      if (!hbm_ordset_find(m->streams[b->slot].free[pool], (hbm_okey){b->size, b->addr}, &v) || v != i)
        hbm_check_fail(&c, "caching: P3 free block 0x%llx+%llu not in its pool", (unsigned long long)b->addr,
            (unsigned long long)b->size);
    } else {
      unmapped++;
      if (b->es == NONE) hbm_check_fail(&c, "caching: P6 unmapped block outside an expandable segment");
      else if (!hbm_ordset_find(m->streams[b->slot].unmapped[b->small ? SMALL : LARGE], (hbm_okey){b->addr, 0}, &v) || v != i)
        hbm_check_fail(&c, "caching: P3 unmapped block 0x%llx not in its set", (unsigned long long)b->addr);
    }
    if (b->es != NONE) {
      pt_es *e = &m->es[b->es];
      if (!e->live) {
        hbm_check_fail(&c, "caching: P6 block 0x%llx in a released expandable segment", (unsigned long long)b->addr);
      } else if (b->mapped) {
        uint64_t lo = es_page_left(e, b->addr), hi = es_page_right(e, b->addr + b->size);
        for (uint64_t k = lo; k < hi; k++) {
          if (k >= e->nhandles || !e->handles[k]) {
            hbm_check_fail(&c, "caching: P6 mapped block 0x%llx over an unmapped page", (unsigned long long)b->addr);
            break;
          }
        }
      } else if ((b->addr - e->base) % e->page || b->size % e->page) {
        hbm_check_fail(&c, "caching: P6 unmapped block 0x%llx not page aligned", (unsigned long long)b->addr);
      } else {
        uint64_t lo = es_page_left(e, b->addr), hi = es_page_left(e, b->addr + b->size);
        for (uint64_t k = lo; k < hi && k < e->nhandles; k++) {
          if (e->handles[k]) {
            hbm_check_fail(&c, "caching: P6 unmapped block 0x%llx over a mapped page", (unsigned long long)b->addr);
            break;
          }
        }
      }
    }
  }
  size_t set_cached = 0, set_unmapped = 0;
  for (uint32_t s = 0; s < m->nstreams; s++) {
    for (int k = 0; k < 2; k++) {
      set_cached += hbm_ordset_count(m->streams[s].free[k]);
      set_unmapped += hbm_ordset_count(m->streams[s].unmapped[k]);
      hbm_ordset_check(m->streams[s].free[k], ordset_report, &c);
      hbm_ordset_check(m->streams[s].unmapped[k], ordset_report, &c);
    }
  }
  if (m->unpromised)
    hbm_check_fail(&c, "caching: P8 %llu insert(s) into a set or page map(s) its operation had not reserved",
        (unsigned long long)m->unpromised);
  if (set_cached != cached || set_unmapped != unmapped)
    hbm_check_fail(&c, "caching: P3 sets hold %zu cached + %zu unmapped, blocks say %zu + %zu", set_cached,
        set_unmapped, cached, unmapped);
  if (m->active.used != allocated_blocks || allocated_blocks != m->allocated_blocks)
    hbm_check_fail(&c, "caching: P4 active map holds %llu, %llu blocks allocated (counter %llu)",
        (unsigned long long)m->active.used, (unsigned long long)allocated_blocks,
        (unsigned long long)m->allocated_blocks);
  if (reserved != m->total_allocated_memory)
    hbm_check_fail(&c, "caching: P5 reserved %llu but segments and mapped pages add to %llu",
        (unsigned long long)m->total_allocated_memory, (unsigned long long)reserved);
  if (allocated != m->allocated_bytes)
    hbm_check_fail(&c, "caching: P5 allocated %llu but blocks add to %llu", (unsigned long long)m->allocated_bytes,
        (unsigned long long)allocated);
  if (releasable != m->releasable)
    hbm_check_fail(&c, "caching: P5 releasable %llu but recount is %llu", (unsigned long long)m->releasable,
        (unsigned long long)releasable);
  for (int k = 0; k < 2; k++) {
    if (!m->largest_valid[k]) continue;
    uint64_t best = 0;
    for (uint32_t s = 0; s < m->nstreams; s++) {
      hbm_okey key;
      if (hbm_ordset_last(m->streams[s].free[k], &key, NULL) && key.hi > best) best = key.hi;
    }
    if (best != m->largest[k])
      hbm_check_fail(&c, "caching: P5 cached largest block %llu but the sets say %llu",
          (unsigned long long)m->largest[k], (unsigned long long)best);
  }
  return c.failures;
}
