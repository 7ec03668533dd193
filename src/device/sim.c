/* sim.c: the simulated device. Address arithmetic only: it touches no memory,
 * so a 96 GiB device replays on a 24 GiB machine. Physical use is counted
 * against capacity exactly as a real device would refuse it.
 *
 * The sim device is also the contract's referee: it keeps every segment,
 * reservation, physical handle and mapping, and refuses (HBM_EINVAL, nothing
 * changed, one message through the error handler) each call that breaks the
 * contract of device.h, so a policy that maps twice, unmaps what it never
 * mapped or releases memory still mapped fails its tests here rather than on
 * a real device. The rules, one per call:
 *
 *   seg_alloc(size, hint)  size > 0. The hint is honoured when [hint,
 *                          hint+size) lies below 2^63 (the device's address
 *                          space) and overlaps no live segment and no
 *                          reservation; otherwise (or hint 0) a fresh address
 *                          (HBM_ENOMEM if the address space is used up).
 *   seg_free(addr, size)   a live segment with exactly that address and size.
 *   reserve(size)          size > 0, a multiple of the granule. The address is
 *                          fresh, or the one hbm_sim_reserve_next_at named:
 *                          granule-aligned, below 2^63, overlapping no live
 *                          segment, but free to overlap other reservations.
 *   unreserve(base, size)  a live reservation with exactly that base and size,
 *                          whose removal leaves every mapping inside some
 *                          remaining reservation (in practice: none mapped).
 *   phys_create(size)      size > 0, a multiple of the granule.
 *   phys_release(h, size)  a live handle of exactly that size, with no byte of
 *                          it mapped. CUDA's cuMemRelease would accept a mapped
 *                          handle and free it at the last unmap; no policy
 *                          needs that, and refusing it catches a policy that
 *                          forgets a mapping (its memory would be counted free
 *                          while still in use).
 *   map(va, size, h, off)  size > 0; va, size, off multiples of the granule;
 *                          h live; [off, off+size) inside h; [va, va+size)
 *                          inside one reservation and overlapping no mapping.
 *   unmap(va, size)        size > 0; [va, va+size) exactly covered by whole
 *                          mappings, the first at va (no gap, no part of one).
 *   copy, to_host,         each device range lies inside one live segment or
 *   from_host              is exactly covered, without gaps, by mappings that
 *                          start at or before it (n == 0 is always accepted).
 *
 * Costs: segments and reservations are few (hundreds, tens) and live in sorted
 * arrays; mappings (thousands live, tens of thousands of calls) sit in an
 * ordered set keyed by address, handles in a hash map: each call is
 * O(log n) plus the few entries it touches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/addrmap.h"
#include "core/ordset.h"
#include "core/util.h"
#include "device/device.h"

/* An address range: a segment or a reservation. */
typedef struct sim_span { uint64_t addr, size; } sim_span;

/* A physical handle. Invariant: mapped <= size, and mapped is the sum of the
 * sizes of the mappings that name it. A free pool slot has size 0 and chains
 * the next free slot through `mapped`. */
typedef struct sim_handle { uint64_t id, size, mapped; } sim_handle;

/* A mapping of [offset, offset+size) of handle `handle` at va. A free pool
 * slot has size 0 and chains the next free slot through `offset`. */
typedef struct sim_mapping { uint64_t va, size, handle, offset; } sim_mapping;

#define SIM_NIL UINT64_MAX

/* Invariants (hbm_device_check runs sim_check, which verifies each):
 *   S1 segs sorted by address, disjoint: segs[i].addr + segs[i].size <= segs[i+1].addr;
 *   S2 reservations sorted by (addr, size), each granule-aligned and non-empty,
 *      none overlapping a segment; max_res_size >= every reservation's size;
 *   S3 mappings: keyed by va in `maps`, disjoint, each inside one reservation
 *      and inside its handle, granule-aligned, naming a live handle;
 *   S4 each handle's `mapped` is the sum of its mappings' sizes;
 *   S5 phys_used == sum of segment sizes + sum of handle sizes. */
typedef struct sim_device {
  hbm_device base;
  uint64_t next_va;   /* bump pointer for new ranges; addresses are never reused */
  sim_span *segs;
  size_t nsegs, cap;
  sim_span *res;      /* reservations */
  size_t nres, cap_res;
  uint64_t max_res_size;
  hbm_addrmap handles; /* handle id -> slot in hpool */
  sim_handle *hpool;
  uint64_t nhpool, cap_hpool, free_handle;
  hbm_ordset *maps;   /* (va, 0) -> slot in mpool */
  sim_mapping *mpool;
  uint64_t nmpool, cap_mpool, free_mapping;
  uint64_t next_handle;
  uint64_t reserve_at; /* the address the next reservation takes (0: any) */
  uint64_t refused;    /* calls refused for breaking the contract */
} sim_device;

#define SIM_BASE 0x7f0000000000ull

/* Refuses a call: counted, said once through the error handler, HBM_EINVAL. */
static int refuse(sim_device *s, const char *call, uint64_t a, uint64_t b, const char *why) {
  s->refused++;
  return hbm_report_error(HBM_EINVAL, "sim device: %s(%#llx, %#llx) refused: %s", call, (unsigned long long)a,
                          (unsigned long long)b, why);
}

/* The device's address space ends here: every range it holds lies below, so
 * the bump pointer never wraps however high a hint or a replayed reservation
 * lands. */
#define SIM_VA_END (1ull << 63)

static int aligned(const sim_device *s, uint64_t v) { return (v & (s->base.caps.granule - 1)) == 0; }
/* [a, a+n) lies inside the address space. */
static int fits(uint64_t a, uint64_t n) { return a <= SIM_VA_END && n <= SIM_VA_END - a; }

/* ---- sorted spans (segments, reservations) ---------------------------------- */

static size_t span_lower_bound(const sim_span *v, size_t n, uint64_t addr) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (v[mid].addr < addr) lo = mid + 1; else hi = mid;
  }
  return lo;
}

static int seg_overlaps(const sim_device *s, uint64_t addr, uint64_t size) {
  size_t i = span_lower_bound(s->segs, s->nsegs, addr);
  if (i < s->nsegs && s->segs[i].addr < addr + size) return 1;
  if (i > 0 && s->segs[i - 1].addr + s->segs[i - 1].size > addr) return 1;
  return 0;
}

/* The reservation holding all of [addr, addr+size), or SIZE_MAX. Reservations
 * may overlap (hbm_sim_reserve_next_at), so the walk goes back from the first
 * one past addr until none could reach it (max_res_size bounds that). */
static size_t res_holding(const sim_device *s, uint64_t addr, uint64_t size) {
  for (size_t i = span_lower_bound(s->res, s->nres, addr + 1); i-- > 0;) {
    const sim_span *r = &s->res[i];
    if (addr - r->addr >= s->max_res_size) break;
    if (size <= r->size && addr - r->addr <= r->size - size) return i;
  }
  return SIZE_MAX;
}

static int res_overlaps(const sim_device *s, uint64_t addr, uint64_t size) {
  for (size_t i = span_lower_bound(s->res, s->nres, addr + size); i-- > 0;) {
    const sim_span *r = &s->res[i];
    if (r->addr + r->size > addr) return 1;
    if (r->addr <= addr && addr - r->addr >= s->max_res_size) break;
  }
  return 0;
}

static int span_grow(sim_span **v, size_t *cap, size_t n) {
  if (n < *cap) return HBM_OK;
  size_t ncap = *cap ? *cap * 2 : 64;
  sim_span *nv = realloc(*v, ncap * sizeof *nv);
  if (!nv) return HBM_EHOSTMEM;
  *v = nv;
  *cap = ncap;
  return HBM_OK;
}

/* ---- mappings and handles ---------------------------------------------------- */

static sim_mapping *mapping_at(const sim_device *s, uint64_t va) {
  uint32_t slot;
  return hbm_ordset_find(s->maps, (hbm_okey){va, 0}, &slot) ? &s->mpool[slot] : NULL;
}

/* The mapping that holds address a, or NULL. */
static sim_mapping *mapping_holding(const sim_device *s, uint64_t a) {
  uint32_t slot;
  if (a == UINT64_MAX) return NULL;
  if (!hbm_ordset_below(s->maps, (hbm_okey){a + 1, 0}, NULL, &slot)) return NULL;
  sim_mapping *m = &s->mpool[slot];
  return a - m->va < m->size ? m : NULL;
}

static int mapping_overlaps(const sim_device *s, uint64_t va, uint64_t size) {
  if (mapping_holding(s, va)) return 1;
  hbm_okey k;
  return hbm_ordset_lower_bound(s->maps, (hbm_okey){va, 0}, &k, NULL) && k.hi < va + size;
}

static sim_handle *handle_find(const sim_device *s, uint64_t id) {
  uint64_t slot;
  return id != UINT64_MAX && hbm_addrmap_get(&s->handles, id, &slot) ? &s->hpool[slot] : NULL;
}

/* [a, a+n) is device memory: inside one segment, or covered without gaps by
 * mappings. */
static int device_memory(const sim_device *s, uint64_t a, uint64_t n) {
  if (n == 0) return 1;
  if (!fits(a, n)) return 0;
  size_t i = span_lower_bound(s->segs, s->nsegs, a + 1);
  if (i > 0 && a - s->segs[i - 1].addr < s->segs[i - 1].size && n <= s->segs[i - 1].addr + s->segs[i - 1].size - a)
    return 1;
  const sim_mapping *m = mapping_holding(s, a);
  while (m) {
    uint64_t end = m->va + m->size;
    if (end >= a + n) return 1;
    m = mapping_at(s, end);
  }
  return 0;
}

/* ---- the calls ------------------------------------------------------------------ */

static uint64_t take_va(sim_device *s, uint64_t size) {
  uint64_t g = s->base.caps.granule;
  uint64_t addr = hbm_align_up(s->next_va, g);
  s->next_va = addr + hbm_align_up(size, g);
  return addr;
}

static int sim_seg_alloc(hbm_device *d, uint64_t size, uint64_t hint, uint64_t *addr) {
  sim_device *s = (sim_device *)d;
  if (size == 0) return refuse(s, "seg_alloc", size, hint, "size 0");
  if (size > HBM_MAX_SIZE) return HBM_ENOMEM;
  if (span_grow(&s->segs, &s->cap, s->nsegs) != HBM_OK) return HBM_EHOSTMEM;
  int honour = hint && fits(hint, size) && !seg_overlaps(s, hint, size) && !res_overlaps(s, hint, size);
  if (!honour && !fits(hbm_align_up(s->next_va, d->caps.granule), hbm_align_up(size, d->caps.granule)))
    return HBM_ENOMEM; /* the address space is used up */
  if (hbm_device_claim(d, size) != HBM_OK) return HBM_ENOMEM;
  uint64_t a = honour ? hint : take_va(s, size);
  if (a + size > s->next_va) s->next_va = a + size;
  size_t i = span_lower_bound(s->segs, s->nsegs, a);
  memmove(s->segs + i + 1, s->segs + i, (s->nsegs - i) * sizeof *s->segs);
  s->segs[i] = (sim_span){a, size};
  s->nsegs++;
  *addr = a;
  return HBM_OK;
}

static int sim_seg_free(hbm_device *d, uint64_t addr, uint64_t size) {
  sim_device *s = (sim_device *)d;
  size_t i = span_lower_bound(s->segs, s->nsegs, addr);
  if (i == s->nsegs || s->segs[i].addr != addr) return refuse(s, "seg_free", addr, size, "no segment starts there");
  if (s->segs[i].size != size) return refuse(s, "seg_free", addr, size, "not the segment's size");
  memmove(s->segs + i, s->segs + i + 1, (s->nsegs - i - 1) * sizeof *s->segs);
  s->nsegs--;
  hbm_device_unclaim(d, size);
  return HBM_OK;
}

static int sim_reserve(hbm_device *d, uint64_t size, uint64_t *base) {
  sim_device *s = (sim_device *)d;
  uint64_t at = s->reserve_at;
  s->reserve_at = 0; /* named for this one call, whatever it returns */
  if (size == 0 || !aligned(s, size)) return refuse(s, "reserve", size, at, "size 0 or not a multiple of the granule");
  if (!at && !fits(hbm_align_up(s->next_va, s->base.caps.granule), size))
    return refuse(s, "reserve", size, at, "past the end of the address space");
  if (at && (!aligned(s, at) || !fits(at, size)))
    return refuse(s, "reserve", size, at, "the address named by reserve_next_at is not granule-aligned or wraps");
  if (at && seg_overlaps(s, at, size))
    return refuse(s, "reserve", size, at, "the address named by reserve_next_at overlaps a live segment");
  if (span_grow(&s->res, &s->cap_res, s->nres) != HBM_OK) return HBM_EHOSTMEM;
  if (!at) at = take_va(s, size);
  else if (at + size > s->next_va) s->next_va = at + size;
  size_t i = span_lower_bound(s->res, s->nres, at);
  while (i < s->nres && s->res[i].addr == at && s->res[i].size < size) i++;
  memmove(s->res + i + 1, s->res + i, (s->nres - i) * sizeof *s->res);
  s->res[i] = (sim_span){at, size};
  s->nres++;
  if (size > s->max_res_size) s->max_res_size = size;
  *base = at;
  return HBM_OK;
}

static int sim_unreserve(hbm_device *d, uint64_t base, uint64_t size) {
  sim_device *s = (sim_device *)d;
  size_t i = span_lower_bound(s->res, s->nres, base);
  while (i < s->nres && s->res[i].addr == base && s->res[i].size != size) i++;
  if (i == s->nres || s->res[i].addr != base) return refuse(s, "unreserve", base, size, "no reservation with that base and size");
  /* Every mapping in [base, base+size) must stay inside another reservation:
   * look with this one taken out, put back if one would not. */
  sim_span gone = s->res[i];
  memmove(s->res + i, s->res + i + 1, (s->nres - i - 1) * sizeof *s->res);
  s->nres--;
  const sim_mapping *m = mapping_holding(s, base);
  uint32_t slot;
  if (!m && hbm_ordset_lower_bound(s->maps, (hbm_okey){base, 0}, NULL, &slot)) m = &s->mpool[slot];
  for (; m && m->va < base + size; m = hbm_ordset_upper_bound(s->maps, (hbm_okey){m->va, 0}, NULL, &slot) ? &s->mpool[slot] : NULL) {
    if (res_holding(s, m->va, m->size) == SIZE_MAX) {
      memmove(s->res + i + 1, s->res + i, (s->nres - i) * sizeof *s->res);
      s->res[i] = gone;
      s->nres++;
      return refuse(s, "unreserve", base, size, "a mapping in it would be left outside every reservation");
    }
  }
  return HBM_OK;
}

static int sim_phys_create(hbm_device *d, uint64_t size, uint64_t *handle) {
  sim_device *s = (sim_device *)d;
  if (size == 0 || !aligned(s, size)) return refuse(s, "phys_create", size, 0, "size 0 or not a multiple of the granule");
  if (size > HBM_MAX_SIZE) return HBM_ENOMEM;
  if (s->free_handle == SIM_NIL && s->nhpool == s->cap_hpool) {
    uint64_t cap = s->cap_hpool ? s->cap_hpool * 2 : 64;
    sim_handle *n = realloc(s->hpool, cap * sizeof *n);
    if (!n) return HBM_EHOSTMEM;
    s->hpool = n;
    s->cap_hpool = cap;
  }
  if (hbm_addrmap_reserve(&s->handles, 1) != HBM_OK) return HBM_EHOSTMEM;
  if (hbm_device_claim(d, size) != HBM_OK) return HBM_ENOMEM;
  uint64_t slot = s->free_handle;
  if (slot != SIM_NIL) s->free_handle = s->hpool[slot].mapped;
  else slot = s->nhpool++;
  uint64_t id = ++s->next_handle;
  s->hpool[slot] = (sim_handle){id, size, 0};
  hbm_addrmap_put(&s->handles, id, slot); /* cannot fail: reserved above */
  *handle = id;
  return HBM_OK;
}

static int sim_phys_release(hbm_device *d, uint64_t handle, uint64_t size) {
  sim_device *s = (sim_device *)d;
  sim_handle *h = handle_find(s, handle);
  if (!h) return refuse(s, "phys_release", handle, size, "no such handle");
  if (h->size != size) return refuse(s, "phys_release", handle, size, "not the handle's size");
  if (h->mapped) return refuse(s, "phys_release", handle, size, "still mapped");
  uint64_t slot;
  hbm_addrmap_take(&s->handles, handle, &slot);
  s->hpool[slot] = (sim_handle){0, 0, s->free_handle};
  s->free_handle = slot;
  hbm_device_unclaim(d, size);
  return HBM_OK;
}

static int sim_map(hbm_device *d, uint64_t va, uint64_t size, uint64_t handle, uint64_t off) {
  sim_device *s = (sim_device *)d;
  if (size == 0 || !aligned(s, va) || !aligned(s, size) || !aligned(s, off) || !fits(va, size))
    return refuse(s, "map", va, size, "size 0, or address, size or offset not a multiple of the granule");
  sim_handle *h = handle_find(s, handle);
  if (!h) return refuse(s, "map", va, size, "no such handle");
  if (off > h->size || size > h->size - off) return refuse(s, "map", va, size, "past the end of the handle");
  if (res_holding(s, va, size) == SIZE_MAX) return refuse(s, "map", va, size, "not inside one reservation");
  if (mapping_overlaps(s, va, size)) return refuse(s, "map", va, size, "overlaps a mapping");
  uint64_t slot = s->free_mapping;
  if (slot == SIM_NIL) {
    if (s->nmpool == s->cap_mpool) {
      uint64_t cap = s->cap_mpool ? s->cap_mpool * 2 : 64;
      if (cap > UINT32_MAX) return HBM_EHOSTMEM;
      sim_mapping *n = realloc(s->mpool, cap * sizeof *n);
      if (!n) return HBM_EHOSTMEM;
      s->mpool = n;
      s->cap_mpool = cap;
    }
    slot = s->nmpool;
  }
  if (hbm_ordset_insert(s->maps, (hbm_okey){va, 0}, (uint32_t)slot) != HBM_OK) return HBM_EHOSTMEM;
  if (slot == s->free_mapping) s->free_mapping = s->mpool[slot].offset;
  else s->nmpool++;
  s->mpool[slot] = (sim_mapping){va, size, handle, off};
  h->mapped += size;
  return HBM_OK;
}

static int sim_unmap(hbm_device *d, uint64_t va, uint64_t size) {
  sim_device *s = (sim_device *)d;
  if (size == 0 || !fits(va, size)) return refuse(s, "unmap", va, size, "size 0 or wraps");
  /* Checked whole first, so that a refusal changes nothing. */
  uint64_t at = va;
  while (at - va < size) {
    const sim_mapping *m = mapping_at(s, at);
    if (!m) return refuse(s, "unmap", va, size, at == va ? "no mapping starts there" : "a gap between mappings");
    if (m->size > size - (at - va)) return refuse(s, "unmap", va, size, "would unmap part of a mapping");
    at += m->size;
  }
  for (at = va; at - va < size;) {
    uint32_t slot;
    hbm_ordset_find(s->maps, (hbm_okey){at, 0}, &slot);
    hbm_ordset_erase(s->maps, (hbm_okey){at, 0});
    sim_mapping *m = &s->mpool[slot];
    handle_find(s, m->handle)->mapped -= m->size;
    at += m->size;
    *m = (sim_mapping){0, 0, 0, s->free_mapping};
    s->free_mapping = slot;
  }
  return HBM_OK;
}

/* The simulated device models a copy's existence, not its bytes; it checks
 * that both ends are device memory. */
static int sim_copy(hbm_device *d, uint64_t dst, uint64_t src, uint64_t n) {
  sim_device *s = (sim_device *)d;
  if (!device_memory(s, dst, n)) return refuse(s, "copy", dst, n, "destination is not device memory");
  if (!device_memory(s, src, n)) return refuse(s, "copy", src, n, "source is not device memory");
  return HBM_OK;
}
static int sim_to_host(hbm_device *d, void *dst, uint64_t src, uint64_t n) {
  sim_device *s = (sim_device *)d;
  return device_memory(s, src, n) ? HBM_OK : refuse(s, "to_host", src, n, "source is not device memory");
}
static int sim_from_host(hbm_device *d, uint64_t dst, const void *src, uint64_t n) {
  sim_device *s = (sim_device *)d;
  return device_memory(s, dst, n) ? HBM_OK : refuse(s, "from_host", dst, n, "destination is not device memory");
}

/* ---- the check -------------------------------------------------------------------- */

typedef struct sim_check_ctx {
  const sim_device *s;
  void (*report)(void *arg, const char *message);
  void *arg;
  int failures;
  uint64_t handle_bytes, handles_seen, *mapped; /* mapped: recount per handle slot */
} sim_check_ctx;

static void fail(sim_check_ctx *c, const char *fmt, unsigned long long a, unsigned long long b) {
  char m[200];
  snprintf(m, sizeof m, fmt, a, b);
  c->failures++;
  if (c->report) c->report(c->arg, m);
}

static void check_handle(void *arg, uint64_t id, uint64_t slot) {
  sim_check_ctx *c = arg;
  c->handles_seen++;
  if (slot >= c->s->nhpool || c->s->hpool[slot].id != id || c->s->hpool[slot].size == 0) {
    fail(c, "sim: handle %llu points at slot %llu, which does not hold it", id, slot);
    return;
  }
  const sim_handle *h = &c->s->hpool[slot];
  c->handle_bytes += h->size;
  if (!aligned(c->s, h->size)) fail(c, "sim: handle %llu size %#llx not a multiple of the granule", id, h->size);
}

static int sim_check(const hbm_device *d, void (*report)(void *arg, const char *message), void *arg) {
  const sim_device *s = (const sim_device *)d;
  sim_check_ctx c = {s, report, arg, 0, 0, 0, NULL};
  uint64_t seg_bytes = 0;
  for (size_t i = 0; i < s->nsegs; i++) {
    seg_bytes += s->segs[i].size;
    if (s->segs[i].size == 0) fail(&c, "sim: segment %llu at %#llx is empty", i, s->segs[i].addr);
    if (i + 1 < s->nsegs && s->segs[i].addr + s->segs[i].size > s->segs[i + 1].addr)
      fail(&c, "sim: segment at %#llx overlaps or precedes the one at %#llx", s->segs[i].addr, s->segs[i + 1].addr);
  }
  for (size_t i = 0; i < s->nres; i++) {
    const sim_span *r = &s->res[i];
    if (r->size == 0 || !aligned(s, r->addr) || !aligned(s, r->size))
      fail(&c, "sim: reservation at %#llx size %#llx empty or not granule-aligned", r->addr, r->size);
    if (r->size > s->max_res_size) fail(&c, "sim: reservation at %#llx larger than max_res_size %#llx", r->addr, s->max_res_size);
    if (i + 1 < s->nres && (r->addr > s->res[i + 1].addr || (r->addr == s->res[i + 1].addr && r->size > s->res[i + 1].size)))
      fail(&c, "sim: reservations at %#llx and %#llx out of order", r->addr, s->res[i + 1].addr);
    if (seg_overlaps(s, r->addr, r->size)) fail(&c, "sim: reservation at %#llx size %#llx overlaps a segment", r->addr, r->size);
  }
  c.failures += hbm_addrmap_check(&s->handles, report, arg);
  hbm_addrmap_each(&s->handles, check_handle, &c);
  if (c.handles_seen != s->handles.used) fail(&c, "sim: %llu handles visited, %llu held", c.handles_seen, s->handles.used);
  c.mapped = calloc(s->nhpool ? s->nhpool : 1, sizeof *c.mapped);
  if (!c.mapped) {
    fail(&c, "sim: no host memory to recount %llu handles%.0llu", s->nhpool, 0);
    return c.failures;
  }
  c.failures += hbm_ordset_check(s->maps, report, arg);
  hbm_okey k;
  uint32_t slot;
  uint64_t prev_end = 0, nmaps = 0;
  for (int more = hbm_ordset_first(s->maps, &k, &slot); more; more = hbm_ordset_upper_bound(s->maps, k, &k, &slot)) {
    nmaps++;
    if (slot >= s->nmpool) { fail(&c, "sim: mapping at %#llx in slot %llu past the pool", k.hi, slot); continue; }
    const sim_mapping *m = &s->mpool[slot];
    if (m->va != k.hi || k.lo != 0 || m->size == 0) fail(&c, "sim: mapping key %#llx names slot %llu, which holds another", k.hi, slot);
    if (nmaps > 1 && m->va < prev_end) fail(&c, "sim: mapping at %#llx overlaps the one before (ends %#llx)", m->va, prev_end);
    prev_end = m->va + m->size;
    if (!aligned(s, m->va) || !aligned(s, m->size) || !aligned(s, m->offset))
      fail(&c, "sim: mapping at %#llx size %#llx not granule-aligned", m->va, m->size);
    if (res_holding(s, m->va, m->size) == SIZE_MAX) fail(&c, "sim: mapping at %#llx size %#llx outside every reservation", m->va, m->size);
    uint64_t hs;
    if (m->handle == UINT64_MAX || !hbm_addrmap_get(&s->handles, m->handle, &hs) || hs >= s->nhpool) {
      fail(&c, "sim: mapping at %#llx names handle %llu, which is not live", m->va, m->handle);
      continue;
    }
    if (m->offset > s->hpool[hs].size || m->size > s->hpool[hs].size - m->offset)
      fail(&c, "sim: mapping at %#llx reaches past the end of handle %llu", m->va, m->handle);
    c.mapped[hs] += m->size;
  }
  if (nmaps != hbm_ordset_count(s->maps)) fail(&c, "sim: %llu mappings walked, %llu held", nmaps, hbm_ordset_count(s->maps));
  for (uint64_t i = 0; i < s->nhpool; i++)
    if (c.mapped[i] != (s->hpool[i].size ? s->hpool[i].mapped : 0))
      fail(&c, "sim: handle slot %llu counts %#llx bytes mapped", i, s->hpool[i].mapped);
  free(c.mapped);
  if (s->base.phys_used != seg_bytes + c.handle_bytes)
    fail(&c, "sim: phys_used %#llx, segments and handles hold %#llx", s->base.phys_used, seg_bytes + c.handle_bytes);
  return c.failures;
}

static void sim_destroy(hbm_device *d) {
  sim_device *s = (sim_device *)d;
  pthread_mutex_destroy(&d->lock);
  free(s->segs);
  free(s->res);
  hbm_addrmap_release(&s->handles);
  free(s->hpool);
  hbm_ordset_destroy(s->maps);
  free(s->mpool);
  free(s);
}

static const hbm_device_ops sim_ops = {
    .kind = "sim",
    .seg_alloc = sim_seg_alloc,
    .seg_free = sim_seg_free,
    .reserve = sim_reserve,
    .unreserve = sim_unreserve,
    .phys_create = sim_phys_create,
    .phys_release = sim_phys_release,
    .map = sim_map,
    .unmap = sim_unmap,
    .copy = sim_copy,
    .to_host = sim_to_host,
    .from_host = sim_from_host,
    .check = sim_check,
    .destroy = sim_destroy,
};

int hbm_sim_reserve_next_at(hbm_device *dev, uint64_t addr) {
  if (!dev || dev->ops != &sim_ops) return HBM_EINVAL;
  ((sim_device *)dev)->reserve_at = addr;
  return HBM_OK;
}

uint64_t hbm_sim_refused(const hbm_device *dev) {
  return dev && dev->ops == &sim_ops ? ((const sim_device *)dev)->refused : 0;
}

int hbm_sim_each(const hbm_device *dev, hbm_sim_visit_fn *visit, void *arg) {
  if (!dev || dev->ops != &sim_ops || !visit) return HBM_EINVAL;
  const sim_device *s = (const sim_device *)dev;
  for (size_t i = 0; i < s->nsegs; i++) visit(arg, HBM_SIM_SEGMENT, s->segs[i].addr, s->segs[i].size, 0, 0);
  for (size_t i = 0; i < s->nres; i++) visit(arg, HBM_SIM_RESERVATION, s->res[i].addr, s->res[i].size, 0, 0);
  for (uint64_t i = 0; i < s->nhpool; i++)
    if (s->hpool[i].size) visit(arg, HBM_SIM_HANDLE, s->hpool[i].id, s->hpool[i].size, s->hpool[i].mapped, 0);
  hbm_okey k;
  uint32_t slot;
  for (int more = hbm_ordset_first(s->maps, &k, &slot); more; more = hbm_ordset_upper_bound(s->maps, k, &k, &slot)) {
    const sim_mapping *m = &s->mpool[slot];
    visit(arg, HBM_SIM_MAPPING, m->va, m->size, m->handle, m->offset);
  }
  return HBM_OK;
}

int hbm_sim_open(uint64_t capacity, uint64_t granule, hbm_device **out) {
  return hbm_sim_open_at(capacity, granule, SIM_BASE, out);
}

int hbm_sim_open_at(uint64_t capacity, uint64_t granule, uint64_t base, hbm_device **out) {
  sim_device *s = calloc(1, sizeof *s);
  if (!s) return HBM_EHOSTMEM;
  if (hbm_ordset_create(&s->maps) != HBM_OK) {
    free(s);
    return HBM_EHOSTMEM;
  }
  hbm_addrmap_init(&s->handles);
  s->free_handle = s->free_mapping = SIM_NIL;
  s->base.ops = &sim_ops;
  strcpy(s->base.caps.kind, "sim");
  s->base.caps.capacity = capacity;
  s->base.caps.granule = granule;
  s->base.caps.vmm = 1;
  s->base.caps.d2d_copy = 1;
  s->base.caps.host_visible = 0;
  s->next_va = base;
  hbm_device_lock_init(&s->base);
  *out = &s->base;
  return HBM_OK;
}
