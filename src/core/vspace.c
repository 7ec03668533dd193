/* vspace.c: best-fit placement in a virtual range. See vspace.h for the
 * invariants; hbm_vspace_check() verifies each of them. */
#include "core/vspace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/addrmap.h"
#include "core/ordset.h"
#include "core/util.h"

#define NIL UINT32_MAX

/* One block of the tiling. Invariant: addr + size == next.addr (V1); a free
 * block is in the free set under (size, addr) while that set is kept (V3)
 * and, when indexed, in the address index under (addr, 0) (V6); a live one
 * in the address table (V5). */
typedef struct vblock {
  uint64_t addr, size;
  uint32_t prev, next; /* address-order neighbours */
  uint32_t state;      /* 0 live, 1 free, 2 unused pool slot */
  uint32_t user;       /* the caller's value for a live block */
} vblock;

struct hbm_vspace {
  uint64_t base, size, unit;
  vblock *blocks; /* pool; indices are stable */
  uint32_t nblocks, cap;
  uint32_t *spare;
  uint32_t nspare;
  uint32_t head, tail;
  hbm_ordset *free_set; /* (size, addr) -> block; NULL once best fit is dropped */
  hbm_ordset *by_addr;  /* (addr, 0) -> free block; NULL until indexed */
  hbm_addrmap live;     /* addr -> block */
  uint64_t live_bytes, live_blocks, free_blocks;
};

/* Room for `n` more blocks from block_new: the check inline, the growth
 * out of line (every placement asks). */
static int blocks_grow(hbm_vspace *v, uint32_t n);
static inline int blocks_reserve(hbm_vspace *v, uint32_t n) {
  return v->nspare + (v->cap - v->nblocks) >= n ? HBM_OK : blocks_grow(v, n);
}

static int blocks_grow(hbm_vspace *v, uint32_t n) {
  uint32_t cap = v->cap ? v->cap : 16;
  while (v->nspare + (cap - v->nblocks) < n) cap *= 2;
  vblock *b = realloc(v->blocks, cap * sizeof *b);
  if (!b) return HBM_EHOSTMEM;
  v->blocks = b;
  uint32_t *sp = realloc(v->spare, cap * sizeof *sp);
  if (!sp) return HBM_EHOSTMEM;
  v->spare = sp;
  v->cap = cap;
  return HBM_OK;
}

static uint32_t block_new(hbm_vspace *v) {
  if (blocks_reserve(v, 1) != HBM_OK) return NIL;
  if (v->nspare) return v->spare[--v->nspare];
  return v->nblocks++;
}

static void block_recycle(hbm_vspace *v, uint32_t i) {
  v->blocks[i].state = 2;
  v->spare[v->nspare++] = i;
}

static hbm_okey size_key(uint64_t addr, uint64_t size) { return (hbm_okey){size, addr}; }
static hbm_okey addr_key(uint64_t addr) { return (hbm_okey){addr, 0}; }

int hbm_vspace_create(uint64_t base, uint64_t size, uint64_t unit, hbm_vspace **out) {
  if (!out || !hbm_is_pow2(unit) || size == 0 || size % unit || base % unit || base + size < base)
    return HBM_EINVAL;
  hbm_vspace *v = calloc(1, sizeof *v);
  if (!v) return HBM_EHOSTMEM;
  v->base = base;
  v->size = size;
  v->unit = unit;
  hbm_addrmap_init(&v->live);
  uint32_t i = block_new(v);
  if (i == NIL || hbm_ordset_create(&v->free_set) != HBM_OK ||
      hbm_ordset_insert(v->free_set, size_key(base, size), i) != HBM_OK) {
    hbm_vspace_destroy(v);
    return HBM_EHOSTMEM;
  }
  v->blocks[i] = (vblock){base, size, NIL, NIL, 1, 0};
  v->head = v->tail = i;
  v->free_blocks = 1;
  *out = v;
  return HBM_OK;
}

void hbm_vspace_destroy(hbm_vspace *v) {
  if (!v) return;
  hbm_ordset_destroy(v->free_set);
  hbm_ordset_destroy(v->by_addr);
  hbm_addrmap_release(&v->live);
  free(v->blocks);
  free(v->spare);
  free(v);
}

int hbm_vspace_index_addresses(hbm_vspace *v) {
  if (!v) return HBM_EINVAL;
  if (v->by_addr) return HBM_OK;
  hbm_ordset *s;
  if (hbm_ordset_create(&s) != HBM_OK) return HBM_EHOSTMEM;
  for (uint32_t i = v->head; i != NIL; i = v->blocks[i].next)
    if (v->blocks[i].state == 1 && hbm_ordset_insert(s, addr_key(v->blocks[i].addr), i) != HBM_OK) {
      hbm_ordset_destroy(s);
      return HBM_EHOSTMEM;
    }
  v->by_addr = s;
  return HBM_OK;
}

int hbm_vspace_indexed(const hbm_vspace *v) { return v->by_addr != NULL; }

int hbm_vspace_drop_best_fit(hbm_vspace *v) {
  if (!v) return HBM_EINVAL;
  if (!v->by_addr) return HBM_EUNSUPPORTED;
  hbm_ordset_destroy(v->free_set);
  v->free_set = NULL;
  return HBM_OK;
}

/* Carves the live block [at, at + size) out of the free block f; what lies
 * before and after stays free (f keeps the part before, so its address key
 * stands). Every step that can fail comes before any that cannot and before
 * the chain changes, so when host memory runs out everything is undone and
 * nothing changed. In the free set f's key gives way, in one step, to the
 * part left free before the block, else to the part after it. Inlined in
 * hbm_vspace_alloc, where the block always starts its hole (low is 0) and
 * fpos is known, so most branches fold away (select_n_b: about 4% of
 * zoned's time per event on an AVX2 EPYC); hbm_vspace_alloc_at calls it,
 * where inlined it made 70b-zero3-64's planned placements slower. */
static inline __attribute__((always_inline)) int carve_inline(hbm_vspace *v, uint32_t f, const hbm_ordpos *fpos,
                                                             uint64_t at, uint64_t size, uint32_t user) {
  uint64_t fa = v->blocks[f].addr, fs = v->blocks[f].size;
  uint64_t low = at - fa, high = fa + fs - at - size;
  uint32_t mid = f, rest = NIL;
  if (low && (mid = block_new(v)) == NIL) return HBM_EHOSTMEM;
  if (high && (rest = block_new(v)) == NIL) goto no_rest;
  if (hbm_addrmap_put(&v->live, at, mid) != HBM_OK) goto no_live;
  if (v->by_addr && high && hbm_ordset_insert(v->by_addr, addr_key(at + size), rest) != HBM_OK) goto no_index;
  if (v->free_set && low && high && hbm_ordset_insert(v->free_set, size_key(at + size, high), rest) != HBM_OK)
    goto no_free;
  /* f's place in the free set, where the caller found it, stands until the
   * set changes: with no part before the block nothing has changed it. */
  if (!v->free_set) {
    /* best fit dropped: the address index alone */
  } else if (low || high) {
    hbm_okey left = low ? size_key(fa, low) : size_key(at + size, high);
    int rc = fpos && !low ? hbm_ordset_replace_at(v->free_set, fpos, left, rest)
                          : hbm_ordset_replace(v->free_set, size_key(fa, fs), left, low ? f : rest);
    if (rc != HBM_OK) goto no_left;
  } else if (fpos) {
    hbm_ordset_erase_at(v->free_set, fpos);
  } else {
    hbm_ordset_erase(v->free_set, size_key(fa, fs));
  }
  /* Room taken: nothing below fails. */
  if (v->by_addr && !low) hbm_ordset_erase(v->by_addr, addr_key(fa));
  vblock *b = v->blocks; /* stable now: block_new is done */
  uint32_t next = b[f].next;
  if (low) {
    b[f].size = low;
    b[f].next = mid;
    b[mid].prev = f;
  } else {
    v->free_blocks--;
  }
  b[mid].addr = at;
  b[mid].size = size;
  b[mid].state = 0;
  b[mid].user = user;
  b[mid].next = next;
  if (high) {
    b[rest] = (vblock){at + size, high, mid, next, 1, 0};
    b[mid].next = rest;
    v->free_blocks++;
  }
  uint32_t last = high ? rest : mid;
  if (next != NIL) b[next].prev = last;
  else v->tail = last;
  v->live_bytes += size;
  v->live_blocks++;
  return HBM_OK;
no_left:
  if (low && high) hbm_ordset_erase(v->free_set, size_key(at + size, high));
no_free:
  if (v->by_addr && high) hbm_ordset_erase(v->by_addr, addr_key(at + size));
no_index:
  hbm_addrmap_take(&v->live, at, NULL);
no_live:
  if (high) block_recycle(v, rest);
no_rest:
  if (low) block_recycle(v, mid);
  return HBM_EHOSTMEM;
}
static int carve(hbm_vspace *v, uint32_t f, const hbm_ordpos *fpos, uint64_t at, uint64_t size, uint32_t user) {
  return carve_inline(v, f, fpos, at, size, user);
}

int hbm_vspace_reserve(hbm_vspace *v) {
  /* A placement takes up to two blocks, a live entry, and two inserts in the
   * free set and one in the address index; freeing it again one insert in
   * each. Three each covers both. */
  if (blocks_reserve(v, 2) != HBM_OK || hbm_addrmap_reserve(&v->live, 1) != HBM_OK ||
      (v->free_set && hbm_ordset_reserve(v->free_set, 3) != HBM_OK) ||
      (v->by_addr && hbm_ordset_reserve(v->by_addr, 3) != HBM_OK))
    return HBM_EHOSTMEM;
  return HBM_OK;
}

int hbm_vspace_alloc(hbm_vspace *v, uint64_t size, hbm_vspace_cost_fn *cost, void *arg,
                     int probes, uint32_t user, uint64_t *addr, uint64_t *block_size) {
  if (!v || !addr) return HBM_EINVAL;
  if (!v->free_set) return HBM_EUNSUPPORTED;
  if (size == 0) return HBM_EINVAL;
  if (size > v->size) return HBM_ENOMEM;
  size = hbm_align_up(size, v->unit);
  hbm_okey key;
  hbm_ordpos pos, best_pos;
  uint32_t i, best;
  if (!hbm_ordset_seek(v->free_set, (hbm_okey){size, 0}, &pos, &key, &i)) return HBM_ENOMEM;
  best = i; /* the best fit, also when every candidate costs UINT64_MAX (ties: the earlier) */
  best_pos = pos;
  if (cost && probes >= 2) {
    uint64_t best_cost = UINT64_MAX;
    for (int k = 0; k < probes; k++) {
      uint64_t c = cost(arg, key.lo, key.hi, size);
      if (c < best_cost || k == 0) { best_cost = c; best = i; best_pos = pos; }
      if (c == 0 || !hbm_ordset_next(v->free_set, &pos, &key, &i)) break;
    }
  }
  uint64_t at = v->blocks[best].addr;
  int rc = carve_inline(v, best, &best_pos, at, size, user);
  if (rc != HBM_OK) return rc;
  *addr = at;
  if (block_size) *block_size = size;
  return HBM_OK;
}

int hbm_vspace_alloc_at(hbm_vspace *v, uint64_t addr, uint64_t size, uint32_t user, uint64_t *block_size) {
  if (!v) return HBM_EINVAL;
  if (!v->by_addr) return HBM_EUNSUPPORTED;
  uint64_t end = v->base + v->size; /* create checked that this does not wrap */
  if (size == 0 || addr % v->unit || addr < v->base || addr >= end || size > end - addr) return HBM_EINVAL;
  size = hbm_align_up(size, v->unit); /* still <= end - addr: both are multiples of unit */
  hbm_okey key;
  uint32_t f;
  /* the free block that starts at or below addr: the largest key below (addr, 1) */
  if (!hbm_ordset_below(v->by_addr, (hbm_okey){addr, 1}, &key, &f)) return HBM_ENOMEM;
  if (v->blocks[f].addr + v->blocks[f].size < addr + size) return HBM_ENOMEM; /* ends short of the span */
  int rc = carve(v, f, NULL, addr, size, user);
  if (rc == HBM_OK && block_size) *block_size = size;
  return rc;
}

int hbm_vspace_free(hbm_vspace *v, uint64_t addr, uint64_t *block_size, uint32_t *user) {
  uint64_t val;
  if (!v || !hbm_addrmap_take(&v->live, addr, &val)) return HBM_EINVAL;
  uint32_t i = (uint32_t)val;
  vblock *b = v->blocks;
  uint32_t prev = b[i].prev, next = b[i].next;
  int join_prev = prev != NIL && b[prev].state == 1, join_next = next != NIL && b[next].state == 1;
  uint32_t keep = join_prev ? prev : i; /* the merged block; its address key stands if it is prev */
  uint64_t at = b[keep].addr;
  uint64_t size = b[i].size + (join_prev ? b[prev].size : 0) + (join_next ? b[next].size : 0);
  /* The steps that can fail first, so that running out of host memory
   * changes nothing: the merged block's key replaces its free neighbour's,
   * or goes in. */
  if (v->by_addr && !join_prev && hbm_ordset_insert(v->by_addr, addr_key(at), keep) != HBM_OK) goto undo;
  hbm_okey merged = size_key(at, size);
  int rc = !v->free_set ? HBM_OK
           : join_prev  ? hbm_ordset_replace(v->free_set, size_key(b[prev].addr, b[prev].size), merged, keep)
           : join_next  ? hbm_ordset_replace(v->free_set, size_key(b[next].addr, b[next].size), merged, keep)
                        : hbm_ordset_insert(v->free_set, merged, keep);
  if (rc != HBM_OK) {
    if (v->by_addr && !join_prev) hbm_ordset_erase(v->by_addr, addr_key(at));
    goto undo;
  }
  if (block_size) *block_size = b[i].size;
  if (user) *user = b[i].user;
  v->live_bytes -= b[i].size;
  v->live_blocks--;
  v->free_blocks++;
  if (join_prev) { /* absorbed into prev */
    block_recycle(v, i);
    v->free_blocks--;
  }
  uint32_t after = next;
  if (join_next) { /* absorbs next */
    if (join_prev && v->free_set) hbm_ordset_erase(v->free_set, size_key(b[next].addr, b[next].size)); /* else replaced */
    if (v->by_addr) hbm_ordset_erase(v->by_addr, addr_key(b[next].addr));
    after = b[next].next;
    block_recycle(v, next);
    v->free_blocks--;
  }
  b[keep].size = size;
  b[keep].state = 1;
  b[keep].next = after;
  if (after != NIL) b[after].prev = keep;
  else v->tail = keep;
  return HBM_OK;
undo: /* cannot fail: the take just left the table the room it had */
  hbm_addrmap_put(&v->live, addr, i);
  return HBM_EHOSTMEM;
}

uint64_t hbm_vspace_block_size(const hbm_vspace *v, uint64_t addr, uint32_t *user) {
  uint64_t val;
  if (!hbm_addrmap_get(&v->live, addr, &val)) return 0;
  if (user) *user = v->blocks[val].user;
  return v->blocks[val].size;
}

uint64_t hbm_vspace_base(const hbm_vspace *v) { return v->base; }
uint64_t hbm_vspace_size(const hbm_vspace *v) { return v->size; }
uint64_t hbm_vspace_live_bytes(const hbm_vspace *v) { return v->live_bytes; }
uint64_t hbm_vspace_live_blocks(const hbm_vspace *v) { return v->live_blocks; }

uint64_t hbm_vspace_largest_free(const hbm_vspace *v) {
  hbm_okey k;
  if (v->free_set) return hbm_ordset_last(v->free_set, &k, NULL) ? k.hi : 0;
  uint64_t largest = 0; /* best fit dropped: a walk */
  for (uint32_t i = v->head; i != NIL; i = v->blocks[i].next)
    if (v->blocks[i].state == 1 && v->blocks[i].size > largest) largest = v->blocks[i].size;
  return largest;
}

uint64_t hbm_vspace_top(const hbm_vspace *v) {
  const vblock *t = &v->blocks[v->tail];
  return t->state == 1 ? t->addr : v->base + v->size;
}

int hbm_vspace_walk(const hbm_vspace *v, hbm_vspace_visit_fn *visit, void *arg) {
  for (uint32_t i = v->head; i != NIL; i = v->blocks[i].next) {
    int rc = visit(arg, v->blocks[i].addr, v->blocks[i].size, v->blocks[i].state == 0);
    if (rc) return rc;
  }
  return 0;
}

/* ---- invariants ------------------------------------------------------------ */
#define FAIL(...)                                         \
  do {                                                    \
    char msg_[256];                                       \
    snprintf(msg_, sizeof msg_, "vspace: " __VA_ARGS__);  \
    if (report) report(arg, msg_);                        \
    failures++;                                           \
  } while (0)

int hbm_vspace_check(const hbm_vspace *v, hbm_vspace_report_fn *report, void *arg) {
  int failures = 0;
  uint64_t expect = v->base, live_bytes = 0, free_bytes = 0, nlive = 0, nfree = 0;
  uint32_t prev = NIL, count = 0;
  for (uint32_t i = v->head; i != NIL; i = v->blocks[i].next) {
    const vblock *b = &v->blocks[i];
    if (++count > v->nblocks) { FAIL("V1 address chain has a cycle"); return failures; }
    if (b->addr != expect) FAIL("V1 block at %#llx, expected %#llx", (unsigned long long)b->addr, (unsigned long long)expect);
    if (b->size == 0 || b->size % v->unit) FAIL("V1 block at %#llx has size %llu", (unsigned long long)b->addr, (unsigned long long)b->size);
    if (b->prev != prev) FAIL("V1 block at %#llx: back link broken", (unsigned long long)b->addr);
    uint32_t val;
    uint64_t lv;
    if (b->state == 1) {
      if (prev != NIL && v->blocks[prev].state == 1) FAIL("V2 free neighbours at %#llx", (unsigned long long)b->addr);
      if (v->free_set && (!hbm_ordset_find(v->free_set, size_key(b->addr, b->size), &val) || val != i))
        FAIL("V3 free block at %#llx missing from the free set", (unsigned long long)b->addr);
      if (v->by_addr && (!hbm_ordset_find(v->by_addr, addr_key(b->addr), &val) || val != i))
        FAIL("V6 free block at %#llx missing from the address index", (unsigned long long)b->addr);
      free_bytes += b->size;
      nfree++;
    } else if (b->state == 0) {
      if (!hbm_addrmap_get(&v->live, b->addr, &lv) || lv != i)
        FAIL("V5 live block at %#llx missing from the address table", (unsigned long long)b->addr);
      live_bytes += b->size;
      nlive++;
    } else {
      FAIL("V1 recycled slot in the address chain at %#llx", (unsigned long long)b->addr);
    }
    expect = b->addr + b->size;
    prev = i;
  }
  if (expect != v->base + v->size) FAIL("V1 blocks end at %#llx, range ends at %#llx", (unsigned long long)expect, (unsigned long long)(v->base + v->size));
  if (prev != v->tail) FAIL("V1 tail is not the last block");
  if (v->free_blocks != nfree)
    FAIL("V4 %llu free blocks counted, the chain %llu", (unsigned long long)v->free_blocks, (unsigned long long)nfree);
  if (v->free_set) {
    if (hbm_ordset_count(v->free_set) != nfree)
      FAIL("V3 free set holds %llu blocks, the chain %llu", (unsigned long long)hbm_ordset_count(v->free_set), (unsigned long long)nfree);
    failures += hbm_ordset_check(v->free_set, report, arg);
  } else if (!v->by_addr) {
    FAIL("V7 best fit dropped without the address index");
  }
  if (v->by_addr) {
    if (hbm_ordset_count(v->by_addr) != nfree)
      FAIL("V6 address index holds %llu blocks, the chain %llu free", (unsigned long long)hbm_ordset_count(v->by_addr), (unsigned long long)nfree);
    failures += hbm_ordset_check(v->by_addr, report, arg);
  }
  if (live_bytes != v->live_bytes || live_bytes + free_bytes != v->size || nlive != v->live_blocks)
    FAIL("V4 counters: live %llu/%llu free %llu size %llu", (unsigned long long)live_bytes, (unsigned long long)v->live_bytes, (unsigned long long)free_bytes, (unsigned long long)v->size);
  if (v->live.used != nlive) FAIL("V5 address table holds %llu entries for %llu live blocks", (unsigned long long)v->live.used, (unsigned long long)nlive);
  return failures;
}
