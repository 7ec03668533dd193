/* range.c: the O(1) out-of-band range allocator (TLSF). See range.h for the
 * invariants; hbm_range_check() verifies each of them.
 *
 * Sizes are counted in units (the range's minimum block size), so one 64-bit
 * first-level bitmap covers any size up to 2^50 bytes. */
#include "core/range.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/addrmap.h"
#include "core/util.h"

/* ---- tuning: may change ------------------------------------------------------- */
enum { SL_LOG2 = 5 }; /* 32 linear subdivisions per power of two: <= 3% internal slack */
/* ---- do not change ----------------------------------------------------------- */
enum {
  SL_COUNT = 1 << SL_LOG2,
  FL_COUNT = 64 - SL_LOG2 + 1,
};
_Static_assert(SL_COUNT <= 32, "second-level bitmap is 32 bits");
_Static_assert(FL_COUNT <= 64, "first-level bitmap is 64 bits");

#define NIL UINT32_MAX

/* One block of the tiling. Invariant: addr + size == next.addr (I1); a free
 * block is linked in lists[fl][sl] of its size (I3); a live one is in the
 * address table (I5). */
typedef struct rblock {
  uint64_t addr, size;
  uint32_t prev_phys, next_phys; /* address-order neighbours */
  uint32_t prev_free, next_free; /* links in its free list (free blocks only) */
  uint32_t is_free;              /* 1 free, 0 live, 2 unused pool slot */
} rblock;

struct hbm_range {
  uint64_t base, size, unit;
  unsigned unit_shift;
  rblock *blocks;       /* pool; indices are stable */
  uint32_t nblocks, blocks_cap;
  uint32_t *spare;      /* recycled pool indices */
  uint32_t nspare;
  uint32_t head, tail;  /* lowest and highest block */
  uint64_t fl_bitmap;
  uint32_t sl_bitmap[FL_COUNT];
  uint32_t lists[FL_COUNT][SL_COUNT];
  hbm_addrmap live;     /* address of each live block -> its pool index (I5) */
  uint64_t free_bytes, live_bytes, live_blocks, free_blocks;
  uint64_t largest;     /* valid when !largest_stale (I6) */
  int largest_stale;
};

/* ---- size classes ---------------------------------------------------------- */
static inline int fls64(uint64_t v) { return 63 - __builtin_clzll(v); }

static inline void mapping_insert(uint64_t units, int *fl, int *sl) {
  if (units < SL_COUNT) {
    *fl = 0;
    *sl = (int)units;
  } else {
    int f = fls64(units);
    *fl = f - SL_LOG2 + 1;
    *sl = (int)((units >> (f - SL_LOG2)) - SL_COUNT);
  }
}

/* Rounds up to the next class boundary so that any block of the class found
 * is large enough (TLSF's good fit). */
static inline void mapping_search(uint64_t units, int *fl, int *sl) {
  if (units >= SL_COUNT) units += (1ull << (fls64(units) - SL_LOG2)) - 1;
  mapping_insert(units, fl, sl);
}

/* ---- block pool ------------------------------------------------------------ */
static uint32_t block_new(hbm_range *r) {
  if (r->nspare) return r->spare[--r->nspare];
  if (r->nblocks == r->blocks_cap) {
    uint32_t cap = r->blocks_cap ? r->blocks_cap * 2 : 256;
    rblock *b = realloc(r->blocks, cap * sizeof *b);
    if (!b) return NIL;
    uint32_t *s = realloc(r->spare, cap * sizeof *s);
    if (!s) { r->blocks = b; return NIL; }
    r->blocks = b;
    r->spare = s;
    r->blocks_cap = cap;
  }
  return r->nblocks++;
}
/* Makes sure n blocks can be taken without a host allocation, so an
 * operation that has started changing the structure cannot fail half-way. */
static int blocks_ensure(hbm_range *r, uint32_t n) {
  uint32_t taken[2], k = 0;
  if (r->nspare + (r->blocks_cap - r->nblocks) >= n) return HBM_OK;
  for (; k < n && k < 2; k++) {
    taken[k] = block_new(r);
    if (taken[k] == NIL) break;
  }
  for (uint32_t j = 0; j < k; j++) { r->blocks[taken[j]].is_free = 2; r->spare[r->nspare++] = taken[j]; }
  return k == n ? HBM_OK : HBM_EHOSTMEM;
}

static void block_recycle(hbm_range *r, uint32_t i) {
  r->blocks[i].is_free = 2;
  r->spare[r->nspare++] = i;
}

/* ---- free lists ------------------------------------------------------------- */
static void list_insert(hbm_range *r, uint32_t i) {
  rblock *b = &r->blocks[i];
  int fl, sl;
  mapping_insert(b->size >> r->unit_shift, &fl, &sl);
  uint32_t head = r->lists[fl][sl];
  b->prev_free = NIL;
  b->next_free = head;
  if (head != NIL) r->blocks[head].prev_free = i;
  r->lists[fl][sl] = i;
  r->fl_bitmap |= 1ull << fl;
  r->sl_bitmap[fl] |= 1u << sl;
  b->is_free = 1;
  r->free_bytes += b->size;
  r->free_blocks++;
  if (!r->largest_stale && b->size > r->largest) r->largest = b->size;
}

static void list_remove(hbm_range *r, uint32_t i) {
  rblock *b = &r->blocks[i];
  int fl, sl;
  mapping_insert(b->size >> r->unit_shift, &fl, &sl);
  if (b->prev_free != NIL) r->blocks[b->prev_free].next_free = b->next_free;
  else r->lists[fl][sl] = b->next_free;
  if (b->next_free != NIL) r->blocks[b->next_free].prev_free = b->prev_free;
  if (r->lists[fl][sl] == NIL) {
    r->sl_bitmap[fl] &= ~(1u << sl);
    if (!r->sl_bitmap[fl]) r->fl_bitmap &= ~(1ull << fl);
  }
  b->is_free = 0;
  r->free_bytes -= b->size;
  r->free_blocks--;
  if (b->size == r->largest) r->largest_stale = 1;
}

/* ---- create / destroy --------------------------------------------------------- */
int hbm_range_create(uint64_t base, uint64_t size, uint64_t unit, hbm_range **out) {
  if (!out || !hbm_is_pow2(unit) || size == 0 || size % unit || base % unit ||
      base + size < base)
    return HBM_EINVAL;
  hbm_range *r = calloc(1, sizeof *r);
  if (!r) return HBM_EHOSTMEM;
  r->base = base;
  r->size = size;
  r->unit = unit;
  r->unit_shift = (unsigned)fls64(unit);
  memset(r->lists, 0xff, sizeof r->lists);
  hbm_addrmap_init(&r->live);
  uint32_t i = block_new(r);
  if (i == NIL) {
    hbm_range_destroy(r);
    return HBM_EHOSTMEM;
  }
  r->blocks[i] = (rblock){base, size, NIL, NIL, NIL, NIL, 0};
  r->head = r->tail = i;
  list_insert(r, i);
  *out = r;
  return HBM_OK;
}

void hbm_range_destroy(hbm_range *r) {
  if (!r) return;
  free(r->blocks);
  free(r->spare);
  hbm_addrmap_release(&r->live);
  free(r);
}

int hbm_range_reserve(hbm_range *r, uint64_t blocks) {
  if (blocks > UINT32_MAX / 2) return HBM_EHOSTMEM;
  if (blocks > r->blocks_cap) {
    uint32_t cap = (uint32_t)blocks;
    rblock *b = realloc(r->blocks, cap * sizeof *b);
    if (!b) return HBM_EHOSTMEM;
    r->blocks = b;
    uint32_t *s = realloc(r->spare, cap * sizeof *s);
    if (!s) return HBM_EHOSTMEM; /* blocks grew, blocks_cap did not: harmless */
    r->spare = s;
    r->blocks_cap = cap;
  }
  return blocks > r->live.used ? hbm_addrmap_reserve(&r->live, blocks - r->live.used) : HBM_OK;
}

void hbm_range_clear(hbm_range *r) {
  memset(r->lists, 0xff, sizeof r->lists);
  memset(r->sl_bitmap, 0, sizeof r->sl_bitmap);
  r->fl_bitmap = 0;
  hbm_addrmap_clear(&r->live);
  r->nspare = 0;
  for (uint32_t i = r->nblocks; i-- > 1;) { r->blocks[i].is_free = 2; r->spare[r->nspare++] = i; }
  r->blocks[0] = (rblock){r->base, r->size, NIL, NIL, NIL, NIL, 0};
  r->head = r->tail = 0;
  r->free_bytes = r->live_bytes = r->live_blocks = r->free_blocks = 0;
  r->largest = 0;
  r->largest_stale = 0;
  list_insert(r, 0);
}

/* ---- alloc / free ---------------------------------------------------------------- */
/* Carves [at, at + units) out of free block i (already off its list): the front
 * and back remainders go back as free blocks. Returns the live block's index. */
static uint32_t carve(hbm_range *r, uint32_t i, uint64_t at, uint64_t size) {
  rblock *b = &r->blocks[i];
  if (at > b->addr) { /* front remainder stays free, block i keeps it */
    uint32_t j = block_new(r);
    if (j == NIL) return NIL;
    b = &r->blocks[i];
    uint64_t front = at - b->addr;
    r->blocks[j] = (rblock){at, b->size - front, i, b->next_phys, NIL, NIL, 0};
    if (b->next_phys != NIL) r->blocks[b->next_phys].prev_phys = j;
    else r->tail = j;
    b->next_phys = j;
    b->size = front;
    list_insert(r, i);
    i = j;
    b = &r->blocks[i];
  }
  if (b->size > size) { /* back remainder */
    uint32_t j = block_new(r);
    if (j == NIL) return NIL;
    b = &r->blocks[i];
    r->blocks[j] = (rblock){b->addr + size, b->size - size, i, b->next_phys, NIL, NIL, 0};
    if (b->next_phys != NIL) r->blocks[b->next_phys].prev_phys = j;
    else r->tail = j;
    b->next_phys = j;
    b->size = size;
    list_insert(r, j);
  }
  b->is_free = 0;
  return i;
}

/* Finds a free block with at least `need` bytes: O(1) good fit through the
 * bitmaps, then, only if that finds nothing, the request's own class (whose
 * blocks may be smaller than need). */
static uint32_t find_free(hbm_range *r, uint64_t need) {
  uint64_t units = need >> r->unit_shift;
  int fl, sl;
  mapping_search(units, &fl, &sl);
  if (fl < FL_COUNT) {
    uint32_t sl_map = sl < SL_COUNT ? r->sl_bitmap[fl] & (~0u << sl) : 0;
    if (!sl_map) {
      uint64_t fl_map = fl + 1 < 64 ? r->fl_bitmap & (~0ull << (fl + 1)) : 0;
      if (fl_map) {
        fl = __builtin_ctzll(fl_map);
        sl_map = r->sl_bitmap[fl];
      }
    }
    if (sl_map) return r->lists[fl][__builtin_ctz(sl_map)];
  }
  mapping_insert(units, &fl, &sl);
  for (uint32_t i = r->lists[fl][sl]; i != NIL; i = r->blocks[i].next_free)
    if (r->blocks[i].size >= need) return i;
  return NIL;
}

int hbm_range_alloc(hbm_range *r, uint64_t size, uint64_t align, uint64_t *addr,
                    uint64_t *block_size) {
  if (!r || !addr || size == 0) return HBM_EINVAL;
  if (size > r->size) return HBM_ENOMEM;
  if (align && !hbm_is_pow2(align)) return HBM_EINVAL;
  if (align < r->unit) align = r->unit;
  size = hbm_align_up(size, r->unit);
  uint64_t need = size + (align > r->unit ? align - r->unit : 0);
  if (hbm_addrmap_reserve(&r->live, 1) != HBM_OK || blocks_ensure(r, 2) != HBM_OK) return HBM_EHOSTMEM;
  uint32_t i = find_free(r, need);
  if (i == NIL && align > r->unit) { /* exact fit of an aligned start, rarely needed */
    for (uint32_t k = r->head; k != NIL; k = r->blocks[k].next_phys) {
      rblock *b = &r->blocks[k];
      uint64_t at = hbm_align_up(b->addr, align);
      if (b->is_free == 1 && at + size <= b->addr + b->size) { i = k; break; }
    }
  }
  if (i == NIL) return HBM_ENOMEM;
  uint64_t at = hbm_align_up(r->blocks[i].addr, align);
  list_remove(r, i);
  uint32_t live = carve(r, i, at, size);
  if (live == NIL) return HBM_EHOSTMEM;
  hbm_addrmap_put(&r->live, at, live); /* cannot fail: room was made above */
  r->live_bytes += size;
  r->live_blocks++;
  *addr = at;
  if (block_size) *block_size = size;
  return HBM_OK;
}

int hbm_range_alloc_at(hbm_range *r, uint64_t addr, uint64_t size) {
  if (!r || size == 0 || addr % r->unit || addr < r->base || addr - r->base > r->size) return HBM_EINVAL;
  size = hbm_align_up(size, r->unit);
  if (size > r->base + r->size - addr) return HBM_EINVAL;
  if (hbm_addrmap_reserve(&r->live, 1) != HBM_OK || blocks_ensure(r, 2) != HBM_OK) return HBM_EHOSTMEM;
  /* Seeding a recorded layout is rare: a walk is fine here. */
  for (uint32_t i = r->head; i != NIL; i = r->blocks[i].next_phys) {
    rblock *b = &r->blocks[i];
    if (addr >= b->addr + b->size) continue;
    if (b->is_free != 1 || addr + size > b->addr + b->size) return HBM_EINVAL;
    list_remove(r, i);
    uint32_t live = carve(r, i, addr, size);
    if (live == NIL) return HBM_EHOSTMEM;
    hbm_addrmap_put(&r->live, addr, live); /* cannot fail: room was made above */
    r->live_bytes += size;
    r->live_blocks++;
    return HBM_OK;
  }
  return HBM_EINVAL;
}

int hbm_range_free(hbm_range *r, uint64_t addr, uint64_t *block_size) {
  if (!r) return HBM_EINVAL;
  uint64_t found;
  if (!hbm_addrmap_take(&r->live, addr, &found)) return HBM_EINVAL;
  uint32_t i = (uint32_t)found;
  rblock *b = &r->blocks[i];
  if (block_size) *block_size = b->size;
  r->live_bytes -= b->size;
  r->live_blocks--;
  uint32_t prev = b->prev_phys, next = b->next_phys;
  if (prev != NIL && r->blocks[prev].is_free == 1) { /* absorb into prev */
    list_remove(r, prev);
    r->blocks[prev].size += b->size;
    r->blocks[prev].next_phys = next;
    if (next != NIL) r->blocks[next].prev_phys = prev;
    else r->tail = prev;
    block_recycle(r, i);
    i = prev;
    b = &r->blocks[i];
  }
  if (next != NIL && r->blocks[next].is_free == 1) { /* absorb next */
    list_remove(r, next);
    b->size += r->blocks[next].size;
    b->next_phys = r->blocks[next].next_phys;
    if (b->next_phys != NIL) r->blocks[b->next_phys].prev_phys = i;
    else r->tail = i;
    block_recycle(r, next);
  }
  list_insert(r, i);
  return HBM_OK;
}

uint64_t hbm_range_block_size(const hbm_range *r, uint64_t addr) {
  uint64_t i;
  return hbm_addrmap_get(&r->live, addr, &i) ? r->blocks[i].size : 0;
}

/* ---- queries --------------------------------------------------------------------- */
uint64_t hbm_range_base(const hbm_range *r) { return r->base; }
uint64_t hbm_range_size(const hbm_range *r) { return r->size; }
uint64_t hbm_range_free_bytes(const hbm_range *r) { return r->free_bytes; }
uint64_t hbm_range_live_bytes(const hbm_range *r) { return r->live_bytes; }
uint64_t hbm_range_live_blocks(const hbm_range *r) { return r->live_blocks; }

uint64_t hbm_range_largest_free(hbm_range *r) {
  if (!r->largest_stale) return r->largest;
  uint64_t best = 0;
  if (r->fl_bitmap) { /* the largest block is in the highest non-empty class */
    int fl = fls64(r->fl_bitmap);
    int sl = 31 - __builtin_clz(r->sl_bitmap[fl]);
    for (uint32_t i = r->lists[fl][sl]; i != NIL; i = r->blocks[i].next_free)
      if (r->blocks[i].size > best) best = r->blocks[i].size;
  }
  r->largest = best;
  r->largest_stale = 0;
  return best;
}

uint64_t hbm_range_top(const hbm_range *r) {
  const rblock *t = &r->blocks[r->tail];
  return t->is_free == 1 ? t->addr : r->base + r->size;
}

int hbm_range_walk(const hbm_range *r, hbm_range_visit_fn *visit, void *arg) {
  for (uint32_t i = r->head; i != NIL; i = r->blocks[i].next_phys) {
    int rc = visit(arg, r->blocks[i].addr, r->blocks[i].size, r->blocks[i].is_free == 0);
    if (rc) return rc;
  }
  return 0;
}

/* ---- invariants ------------------------------------------------------------------- */
#define FAIL(...)                                        \
  do {                                                   \
    char msg_[256];                                      \
    snprintf(msg_, sizeof msg_, "range: " __VA_ARGS__);  \
    if (report) report(arg, msg_);                       \
    failures++;                                          \
  } while (0)

int hbm_range_check(hbm_range *r, hbm_range_report_fn *report, void *arg) {
  int failures = 0;
  uint64_t expect = r->base, free_bytes = 0, live_bytes = 0, nfree = 0, nlive = 0, largest = 0;
  uint32_t prev = NIL, count = 0;
  for (uint32_t i = r->head; i != NIL; i = r->blocks[i].next_phys) {
    const rblock *b = &r->blocks[i];
    if (++count > r->nblocks) { FAIL("I1 address chain has a cycle"); return failures; }
    if (b->addr != expect) FAIL("I1 block at %#llx, expected %#llx (gap or overlap)", (unsigned long long)b->addr, (unsigned long long)expect);
    if (b->size == 0 || b->size % r->unit) FAIL("I1 block at %#llx has size %llu, not a positive multiple of the unit", (unsigned long long)b->addr, (unsigned long long)b->size);
    if (b->prev_phys != prev) FAIL("I1 block at %#llx: back link broken", (unsigned long long)b->addr);
    if (b->is_free > 1) FAIL("I1 recycled slot in the address chain at %#llx", (unsigned long long)b->addr);
    if (b->is_free == 1) {
      if (prev != NIL && r->blocks[prev].is_free == 1) FAIL("I2 free neighbours at %#llx", (unsigned long long)b->addr);
      free_bytes += b->size;
      nfree++;
      if (b->size > largest) largest = b->size;
    } else {
      live_bytes += b->size;
      nlive++;
      uint64_t found;
      if (!hbm_addrmap_get(&r->live, b->addr, &found) || found != i) FAIL("I5 live block at %#llx missing from the address table", (unsigned long long)b->addr);
    }
    expect = b->addr + b->size;
    prev = i;
  }
  if (expect != r->base + r->size) FAIL("I1 blocks end at %#llx, range ends at %#llx", (unsigned long long)expect, (unsigned long long)(r->base + r->size));
  if (prev != r->tail) FAIL("I1 tail is not the last block");
  uint64_t listed = 0;
  for (int fl = 0; fl < FL_COUNT; fl++) {
    int fl_bit = (int)((r->fl_bitmap >> fl) & 1);
    if (fl_bit != (r->sl_bitmap[fl] != 0)) FAIL("I3 first-level bit %d disagrees with second level", fl);
    for (int sl = 0; sl < SL_COUNT; sl++) {
      int sl_bit = (int)((r->sl_bitmap[fl] >> sl) & 1);
      if (sl_bit != (r->lists[fl][sl] != NIL)) FAIL("I3 bitmap bit (%d,%d) disagrees with its list", fl, sl);
      uint32_t back = NIL;
      for (uint32_t i = r->lists[fl][sl]; i != NIL; i = r->blocks[i].next_free) {
        const rblock *b = &r->blocks[i];
        int f, s;
        mapping_insert(b->size >> r->unit_shift, &f, &s);
        if (b->is_free != 1) FAIL("I3 non-free block at %#llx in a free list", (unsigned long long)b->addr);
        if (f != fl || s != sl) FAIL("I3 block of %llu bytes in list (%d,%d), maps to (%d,%d)", (unsigned long long)b->size, fl, sl, f, s);
        if (b->prev_free != back) FAIL("I3 free list back link broken at %#llx", (unsigned long long)b->addr);
        back = i;
        if (++listed > r->nblocks) { FAIL("I3 free list cycle"); return failures; }
      }
    }
  }
  if (listed != nfree) FAIL("I3 %llu blocks in free lists, %llu free in the chain", (unsigned long long)listed, (unsigned long long)nfree);
  if (free_bytes != r->free_bytes || live_bytes != r->live_bytes || free_bytes + live_bytes != r->size)
    FAIL("I4 counters: free %llu/%llu live %llu/%llu size %llu", (unsigned long long)free_bytes, (unsigned long long)r->free_bytes, (unsigned long long)live_bytes, (unsigned long long)r->live_bytes, (unsigned long long)r->size);
  if (nlive != r->live_blocks || nfree != r->free_blocks) FAIL("I4 block counts differ from a recount");
  if (r->live.used != nlive) FAIL("I5 address table holds %llu entries for %llu live blocks", (unsigned long long)r->live.used, (unsigned long long)nlive);
  if (!r->largest_stale && r->largest != largest) FAIL("I6 cached largest free %llu, recount %llu", (unsigned long long)r->largest, (unsigned long long)largest);
  return failures;
}
