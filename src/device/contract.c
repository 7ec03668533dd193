/* contract.c: the ledger every device keeps of what it holds, and the rules
 * of device.h it enforces with it (contract.h; the rules in sim.c's opening
 * comment). */
#include "device/contract.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

#define NIL UINT64_MAX

int hbm_ledger_init(hbm_ledger *l, const char *kind, uint64_t granule) {
  memset(l, 0, sizeof *l);
  if (hbm_ordset_create(&l->maps) != HBM_OK) return HBM_EHOSTMEM;
  snprintf(l->kind, sizeof l->kind, "%s", kind);
  l->granule = granule;
  hbm_addrmap_init(&l->handles);
  l->free_handle = l->free_mapping = NIL;
  return HBM_OK;
}

void hbm_ledger_release(hbm_ledger *l) {
  free(l->segs);
  free(l->res);
  hbm_addrmap_release(&l->handles);
  free(l->hpool);
  hbm_ordset_destroy(l->maps);
  free(l->mpool);
  memset(l, 0, sizeof *l);
}

int hbm_ledger_refuse(hbm_ledger *l, const char *call, uint64_t a, uint64_t b, const char *why) {
  l->refused++;
  return hbm_report_error(HBM_EINVAL, "%s device: %s(%#llx, %#llx) refused: %s", l->kind, call, (unsigned long long)a,
                          (unsigned long long)b, why);
}

static int aligned(const hbm_ledger *l, uint64_t v) { return (v & (l->granule - 1)) == 0; }
/* [a, a+n) lies inside the address space. */
static int fits(uint64_t a, uint64_t n) { return a <= HBM_LEDGER_VA_END && n <= HBM_LEDGER_VA_END - a; }

/* ---- sorted spans (segments, reservations) ---------------------------------- */

static size_t span_lower_bound(const hbm_ledger_span *v, size_t n, uint64_t addr) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (v[mid].addr < addr) lo = mid + 1; else hi = mid;
  }
  return lo;
}

int hbm_ledger_seg_overlaps(const hbm_ledger *l, uint64_t addr, uint64_t size) {
  size_t i = span_lower_bound(l->segs, l->nsegs, addr);
  if (i < l->nsegs && l->segs[i].addr < addr + size) return 1;
  if (i > 0 && l->segs[i - 1].addr + l->segs[i - 1].size > addr) return 1;
  return 0;
}

/* The reservation holding all of [addr, addr+size), or SIZE_MAX. Reservations
 * may overlap (hbm_sim_reserve_next_at), so the walk goes back from the first
 * one past addr until none could reach it (max_res_size bounds that). */
static size_t res_holding(const hbm_ledger *l, uint64_t addr, uint64_t size) {
  for (size_t i = span_lower_bound(l->res, l->nres, addr + 1); i-- > 0;) {
    const hbm_ledger_span *r = &l->res[i];
    if (addr - r->addr >= l->max_res_size) break;
    if (size <= r->size && addr - r->addr <= r->size - size) return i;
  }
  return SIZE_MAX;
}

int hbm_ledger_res_overlaps(const hbm_ledger *l, uint64_t addr, uint64_t size) {
  for (size_t i = span_lower_bound(l->res, l->nres, addr + size); i-- > 0;) {
    const hbm_ledger_span *r = &l->res[i];
    if (r->addr + r->size > addr) return 1;
    if (r->addr <= addr && addr - r->addr >= l->max_res_size) break;
  }
  return 0;
}


/* ---- mappings and handles ---------------------------------------------------- */

static hbm_ledger_mapping *mapping_at(const hbm_ledger *l, uint64_t va) {
  uint32_t slot;
  return hbm_ordset_find(l->maps, (hbm_okey){va, 0}, &slot) ? &l->mpool[slot] : NULL;
}

/* The mapping that holds address a, or NULL. */
static hbm_ledger_mapping *mapping_holding(const hbm_ledger *l, uint64_t a) {
  uint32_t slot;
  if (a == UINT64_MAX) return NULL;
  if (!hbm_ordset_below(l->maps, (hbm_okey){a + 1, 0}, NULL, &slot)) return NULL;
  hbm_ledger_mapping *m = &l->mpool[slot];
  return a - m->va < m->size ? m : NULL;
}

static int mapping_overlaps(const hbm_ledger *l, uint64_t va, uint64_t size) {
  if (mapping_holding(l, va)) return 1;
  hbm_okey k;
  return hbm_ordset_lower_bound(l->maps, (hbm_okey){va, 0}, &k, NULL) && k.hi < va + size;
}

/* The handle table is an address map, whose hash reads a key's bits above
 * 512 B (device addresses). sim's handle ids count 1, 2, 3, ..., which would
 * all share one probe run (every call a linear scan), so ids are kept
 * shifted up by those 9 bits. Ids are below 2^55 on every device (sim counts
 * calls; host's are offsets in its memory file); a larger one is no handle. */
#define HANDLE_ID_LIMIT (1ull << 55)
static inline uint64_t handle_key(uint64_t id) { return id << 9; }

static hbm_ledger_handle *handle_find(const hbm_ledger *l, uint64_t id) {
  uint64_t slot;
  return id < HANDLE_ID_LIMIT && hbm_addrmap_get(&l->handles, handle_key(id), &slot) ? &l->hpool[slot] : NULL;
}

/* [a, a+n) is device memory: inside one segment, or covered without gaps by
 * mappings. */
static int device_memory(const hbm_ledger *l, uint64_t a, uint64_t n) {
  if (n == 0) return 1;
  if (!fits(a, n)) return 0;
  size_t i = span_lower_bound(l->segs, l->nsegs, a + 1);
  if (i > 0 && a - l->segs[i - 1].addr < l->segs[i - 1].size && n <= l->segs[i - 1].addr + l->segs[i - 1].size - a)
    return 1;
  const hbm_ledger_mapping *m = mapping_holding(l, a);
  while (m) {
    uint64_t end = m->va + m->size;
    if (end >= a + n) return 1;
    m = mapping_at(l, end);
  }
  return 0;
}

/* ---- the calls ------------------------------------------------------------------ */

int hbm_ledger_seg_alloc_ok(hbm_ledger *l, uint64_t size, uint64_t hint) {
  if (size == 0) return hbm_ledger_refuse(l, "seg_alloc", size, hint, "size 0");
  return hbm_grow_array((void **)&l->segs, &l->cap_segs, l->nsegs, sizeof *l->segs);
}

void hbm_ledger_seg_alloc_done(hbm_ledger *l, uint64_t addr, uint64_t size, uint64_t held, uint64_t data) {
  size_t i = span_lower_bound(l->segs, l->nsegs, addr);
  memmove(l->segs + i + 1, l->segs + i, (l->nsegs - i) * sizeof *l->segs);
  l->segs[i] = (hbm_ledger_span){addr, size, held, data};
  l->nsegs++;
}

int hbm_ledger_seg_free_ok(hbm_ledger *l, uint64_t addr, uint64_t size, uint64_t *held, uint64_t *data) {
  size_t i = span_lower_bound(l->segs, l->nsegs, addr);
  if (i == l->nsegs || l->segs[i].addr != addr) return hbm_ledger_refuse(l, "seg_free", addr, size, "no segment starts there");
  if (l->segs[i].size != size) return hbm_ledger_refuse(l, "seg_free", addr, size, "not the segment's size");
  *held = l->segs[i].held;
  *data = l->segs[i].data;
  return HBM_OK;
}

void hbm_ledger_seg_free_done(hbm_ledger *l, uint64_t addr) {
  size_t i = span_lower_bound(l->segs, l->nsegs, addr);
  memmove(l->segs + i, l->segs + i + 1, (l->nsegs - i - 1) * sizeof *l->segs);
  l->nsegs--;
}

int hbm_ledger_reserve_ok(hbm_ledger *l, uint64_t size, uint64_t at) {
  if (size == 0 || !aligned(l, size))
    return hbm_ledger_refuse(l, "reserve", size, at, "size 0 or not a multiple of the granule");
  return hbm_grow_array((void **)&l->res, &l->cap_res, l->nres, sizeof *l->res);
}

void hbm_ledger_reserve_done(hbm_ledger *l, uint64_t base, uint64_t size) {
  size_t i = span_lower_bound(l->res, l->nres, base);
  while (i < l->nres && l->res[i].addr == base && l->res[i].size < size) i++;
  memmove(l->res + i + 1, l->res + i, (l->nres - i) * sizeof *l->res);
  l->res[i] = (hbm_ledger_span){base, size, 0, 0};
  l->nres++;
  if (size > l->max_res_size) l->max_res_size = size;
}

int hbm_ledger_unreserve_ok(hbm_ledger *l, uint64_t base, uint64_t size) {
  size_t i = span_lower_bound(l->res, l->nres, base);
  while (i < l->nres && l->res[i].addr == base && l->res[i].size != size) i++;
  if (i == l->nres || l->res[i].addr != base)
    return hbm_ledger_refuse(l, "unreserve", base, size, "no reservation with that base and size");
  /* Every mapping in [base, base+size) must stay inside another reservation:
   * look with this one taken out, then put it back. */
  hbm_ledger_span gone = l->res[i];
  memmove(l->res + i, l->res + i + 1, (l->nres - i - 1) * sizeof *l->res);
  l->nres--;
  int stranded = 0;
  const hbm_ledger_mapping *m = mapping_holding(l, base);
  uint32_t slot;
  if (!m && hbm_ordset_lower_bound(l->maps, (hbm_okey){base, 0}, NULL, &slot)) m = &l->mpool[slot];
  for (; m && m->va < base + size && !stranded;
       m = hbm_ordset_upper_bound(l->maps, (hbm_okey){m->va, 0}, NULL, &slot) ? &l->mpool[slot] : NULL)
    stranded = res_holding(l, m->va, m->size) == SIZE_MAX;
  memmove(l->res + i + 1, l->res + i, (l->nres - i) * sizeof *l->res);
  l->res[i] = gone;
  l->nres++;
  if (stranded) return hbm_ledger_refuse(l, "unreserve", base, size, "a mapping in it would be left outside every reservation");
  return HBM_OK;
}

void hbm_ledger_unreserve_done(hbm_ledger *l, uint64_t base, uint64_t size) {
  size_t i = span_lower_bound(l->res, l->nres, base);
  while (i < l->nres && l->res[i].addr == base && l->res[i].size != size) i++;
  memmove(l->res + i, l->res + i + 1, (l->nres - i - 1) * sizeof *l->res);
  l->nres--;
}

int hbm_ledger_prepare(hbm_ledger *l, uint64_t handles, uint64_t maps) {
  if (l->maps_untracked) return HBM_OK;
  uint64_t free_handles = 0, free_maps = 0; /* free slots on the lists, counted up to what is asked */
  for (uint64_t k = l->free_handle; k != NIL && free_handles < handles; k = l->hpool[k].mapped) free_handles++;
  for (uint64_t k = l->free_mapping; k != NIL && free_maps < maps; k = l->mpool[k].offset) free_maps++;
  if (l->cap_hpool - l->nhpool + free_handles < handles) {
    uint64_t cap = l->cap_hpool ? l->cap_hpool : 64;
    while (cap - l->nhpool + free_handles < handles) cap *= 2;
    hbm_ledger_handle *n = realloc(l->hpool, cap * sizeof *n);
    if (!n) return HBM_EHOSTMEM;
    l->hpool = n;
    l->cap_hpool = cap;
  }
  if (l->cap_mpool - l->nmpool + free_maps < maps) {
    uint64_t cap = l->cap_mpool ? l->cap_mpool : 64;
    while (cap - l->nmpool + free_maps < maps) cap *= 2;
    if (cap > UINT32_MAX) return HBM_EHOSTMEM;
    hbm_ledger_mapping *n = realloc(l->mpool, cap * sizeof *n);
    if (!n) return HBM_EHOSTMEM;
    l->mpool = n;
    l->cap_mpool = cap;
  }
  if (hbm_addrmap_reserve(&l->handles, handles) != HBM_OK || hbm_ordset_reserve(l->maps, maps) != HBM_OK)
    return HBM_EHOSTMEM;
  return HBM_OK;
}

int hbm_ledger_phys_create_ok(hbm_ledger *l, uint64_t size) {
  if (size == 0 || !aligned(l, size)) return hbm_ledger_refuse(l, "phys_create", size, 0, "size 0 or not a multiple of the granule");
  if (l->maps_untracked) return HBM_OK;
  if (l->free_handle == NIL && l->nhpool == l->cap_hpool) {
    uint64_t cap = l->cap_hpool ? l->cap_hpool * 2 : 64;
    hbm_ledger_handle *n = realloc(l->hpool, cap * sizeof *n);
    if (!n) return HBM_EHOSTMEM;
    l->hpool = n;
    l->cap_hpool = cap;
  }
  return hbm_addrmap_reserve(&l->handles, 1) == HBM_OK ? HBM_OK : HBM_EHOSTMEM;
}

void hbm_ledger_phys_create_done(hbm_ledger *l, uint64_t id, uint64_t size) {
  if (l->maps_untracked) return;
  uint64_t slot = l->free_handle;
  if (slot != NIL) l->free_handle = l->hpool[slot].mapped;
  else slot = l->nhpool++;
  l->hpool[slot] = (hbm_ledger_handle){id, size, 0};
  hbm_addrmap_put(&l->handles, handle_key(id), slot); /* cannot fail: reserved by phys_create_ok */
}

int hbm_ledger_phys_release_ok(hbm_ledger *l, uint64_t id, uint64_t size) {
  if (l->maps_untracked) return HBM_OK;
  const hbm_ledger_handle *h = handle_find(l, id);
  if (!h) return hbm_ledger_refuse(l, "phys_release", id, size, "no such handle");
  if (h->size != size) return hbm_ledger_refuse(l, "phys_release", id, size, "not the handle's size");
  if (h->mapped) return hbm_ledger_refuse(l, "phys_release", id, size, "still mapped");
  return HBM_OK;
}

void hbm_ledger_phys_release_done(hbm_ledger *l, uint64_t id) {
  if (l->maps_untracked) return;
  uint64_t slot;
  hbm_addrmap_take(&l->handles, handle_key(id), &slot);
  l->hpool[slot] = (hbm_ledger_handle){0, 0, l->free_handle};
  l->free_handle = slot;
}

int hbm_ledger_map_ok(hbm_ledger *l, uint64_t va, uint64_t size, uint64_t handle, uint64_t off) {
  if (size == 0 || !aligned(l, va) || !aligned(l, size) || !aligned(l, off) || !fits(va, size))
    return hbm_ledger_refuse(l, "map", va, size, "size 0, or address, size or offset not a multiple of the granule");
  if (l->maps_untracked) return HBM_OK;
  const hbm_ledger_handle *h = handle_find(l, handle);
  if (!h) return hbm_ledger_refuse(l, "map", va, size, "no such handle");
  if (off > h->size || size > h->size - off) return hbm_ledger_refuse(l, "map", va, size, "past the end of the handle");
  if (res_holding(l, va, size) == SIZE_MAX) return hbm_ledger_refuse(l, "map", va, size, "not inside one reservation");
  if (mapping_overlaps(l, va, size)) return hbm_ledger_refuse(l, "map", va, size, "overlaps a mapping");
  if (l->free_mapping == NIL && l->nmpool == l->cap_mpool) {
    uint64_t cap = l->cap_mpool ? l->cap_mpool * 2 : 64;
    if (cap > UINT32_MAX) return HBM_EHOSTMEM;
    hbm_ledger_mapping *n = realloc(l->mpool, cap * sizeof *n);
    if (!n) return HBM_EHOSTMEM;
    l->mpool = n;
    l->cap_mpool = cap;
  }
  return HBM_OK;
}

int hbm_ledger_map_done(hbm_ledger *l, uint64_t va, uint64_t size, uint64_t handle, uint64_t off) {
  if (l->maps_untracked) return HBM_OK;
  uint64_t slot = l->free_mapping != NIL ? l->free_mapping : l->nmpool;
  if (hbm_ordset_insert(l->maps, (hbm_okey){va, 0}, (uint32_t)slot) != HBM_OK) return HBM_EHOSTMEM;
  if (slot == l->free_mapping) l->free_mapping = l->mpool[slot].offset;
  else l->nmpool++;
  l->mpool[slot] = (hbm_ledger_mapping){va, size, handle, off};
  handle_find(l, handle)->mapped += size;
  return HBM_OK;
}

int hbm_ledger_unmap_ok(hbm_ledger *l, uint64_t va, uint64_t size) {
  if (size == 0 || !fits(va, size)) return hbm_ledger_refuse(l, "unmap", va, size, "size 0 or wraps");
  if (l->maps_untracked) return HBM_OK;
  for (uint64_t at = va; at - va < size;) {
    const hbm_ledger_mapping *m = mapping_at(l, at);
    if (!m) return hbm_ledger_refuse(l, "unmap", va, size, at == va ? "no mapping starts there" : "a gap between mappings");
    if (m->size > size - (at - va)) return hbm_ledger_refuse(l, "unmap", va, size, "would unmap part of a mapping");
    at += m->size;
  }
  return HBM_OK;
}

void hbm_ledger_unmap_done(hbm_ledger *l, uint64_t va, uint64_t size) {
  if (l->maps_untracked) return;
  for (uint64_t at = va; at - va < size;) {
    uint32_t slot;
    hbm_ordset_find(l->maps, (hbm_okey){at, 0}, &slot);
    hbm_ordset_erase(l->maps, (hbm_okey){at, 0});
    hbm_ledger_mapping *m = &l->mpool[slot];
    handle_find(l, m->handle)->mapped -= m->size;
    at += m->size;
    *m = (hbm_ledger_mapping){0, 0, 0, l->free_mapping};
    l->free_mapping = slot;
  }
}

int hbm_ledger_copy_ok(hbm_ledger *l, uint64_t dst, uint64_t src, uint64_t n) {
  if (l->maps_untracked) return HBM_OK;
  if (!device_memory(l, dst, n)) return hbm_ledger_refuse(l, "copy", dst, n, "destination is not device memory");
  if (!device_memory(l, src, n)) return hbm_ledger_refuse(l, "copy", src, n, "source is not device memory");
  return HBM_OK;
}
int hbm_ledger_to_host_ok(hbm_ledger *l, uint64_t src, uint64_t n) {
  if (l->maps_untracked) return HBM_OK;
  return device_memory(l, src, n) ? HBM_OK : hbm_ledger_refuse(l, "to_host", src, n, "source is not device memory");
}
int hbm_ledger_from_host_ok(hbm_ledger *l, uint64_t dst, uint64_t n) {
  if (l->maps_untracked) return HBM_OK;
  return device_memory(l, dst, n) ? HBM_OK : hbm_ledger_refuse(l, "from_host", dst, n, "destination is not device memory");
}

/* ---- the check -------------------------------------------------------------------- */

typedef struct check_ctx {
  const hbm_ledger *l;
  hbm_checker k; /* prefix: the device's kind */
  char prefix[24];
  uint64_t handle_bytes, handles_seen, *mapped; /* mapped: recount per handle slot */
} check_ctx;

/* Two numbers per message, converted here so that call sites need no casts. */
static void fail(check_ctx *c, const char *fmt, unsigned long long a, unsigned long long b) {
  hbm_check_fail(&c->k, fmt, a, b);
}

static void check_handle(void *arg, uint64_t key, uint64_t slot) {
  check_ctx *c = arg;
  uint64_t id = key >> 9;
  c->handles_seen++;
  if (slot >= c->l->nhpool || c->l->hpool[slot].id != id || c->l->hpool[slot].size == 0) {
    fail(c, "handle %llu points at slot %llu, which does not hold it", id, slot);
    return;
  }
  const hbm_ledger_handle *h = &c->l->hpool[slot];
  c->handle_bytes += h->size;
  if (!aligned(c->l, h->size)) fail(c, "handle %llu size %#llx not a multiple of the granule", id, h->size);
}

int hbm_ledger_check(const hbm_ledger *l, uint64_t phys_used, void (*report)(void *arg, const char *message), void *arg) {
  check_ctx c = {.l = l, .k = {.report = report, .arg = arg}};
  snprintf(c.prefix, sizeof c.prefix, "%s: ", l->kind);
  c.k.prefix = c.prefix;
  uint64_t seg_bytes = 0;
  for (size_t i = 0; i < l->nsegs; i++) {
    seg_bytes += l->segs[i].held;
    if (l->segs[i].size == 0 || l->segs[i].held < l->segs[i].size)
      fail(&c, "segment at %#llx is empty or holds less than its size %#llx", l->segs[i].addr, l->segs[i].size);
    if (i + 1 < l->nsegs && l->segs[i].addr + l->segs[i].size > l->segs[i + 1].addr)
      fail(&c, "segment at %#llx overlaps or precedes the one at %#llx", l->segs[i].addr, l->segs[i + 1].addr);
  }
  for (size_t i = 0; i < l->nres; i++) {
    const hbm_ledger_span *r = &l->res[i];
    if (r->size == 0 || !aligned(l, r->addr) || !aligned(l, r->size))
      fail(&c, "reservation at %#llx size %#llx empty or not granule-aligned", r->addr, r->size);
    if (r->size > l->max_res_size) fail(&c, "reservation at %#llx larger than max_res_size %#llx", r->addr, l->max_res_size);
    if (i + 1 < l->nres && (r->addr > l->res[i + 1].addr || (r->addr == l->res[i + 1].addr && r->size > l->res[i + 1].size)))
      fail(&c, "reservations at %#llx and %#llx out of order", r->addr, l->res[i + 1].addr);
    if (hbm_ledger_seg_overlaps(l, r->addr, r->size)) fail(&c, "reservation at %#llx size %#llx overlaps a segment", r->addr, r->size);
  }
  c.k.failures += hbm_addrmap_check(&l->handles, report, arg);
  hbm_addrmap_each(&l->handles, check_handle, &c);
  if (c.handles_seen != l->handles.used) fail(&c, "%llu handles visited, %llu held", c.handles_seen, l->handles.used);
  c.mapped = calloc(l->nhpool ? l->nhpool : 1, sizeof *c.mapped);
  if (!c.mapped) {
    hbm_check_no_memory(&c.k);
    return c.k.failures;
  }
  c.k.failures += hbm_ordset_check(l->maps, report, arg);
  hbm_okey k;
  uint32_t slot;
  uint64_t prev_end = 0, nmaps = 0;
  for (int more = hbm_ordset_first(l->maps, &k, &slot); more; more = hbm_ordset_upper_bound(l->maps, k, &k, &slot)) {
    nmaps++;
    if (slot >= l->nmpool) { fail(&c, "mapping at %#llx in slot %llu past the pool", k.hi, slot); continue; }
    const hbm_ledger_mapping *m = &l->mpool[slot];
    if (m->va != k.hi || k.lo != 0 || m->size == 0) fail(&c, "mapping key %#llx names slot %llu, which holds another", k.hi, slot);
    if (nmaps > 1 && m->va < prev_end) fail(&c, "mapping at %#llx overlaps the one before (ends %#llx)", m->va, prev_end);
    prev_end = m->va + m->size;
    if (!aligned(l, m->va) || !aligned(l, m->size) || !aligned(l, m->offset))
      fail(&c, "mapping at %#llx size %#llx not granule-aligned", m->va, m->size);
    if (res_holding(l, m->va, m->size) == SIZE_MAX) fail(&c, "mapping at %#llx size %#llx outside every reservation", m->va, m->size);
    uint64_t hs;
    if (m->handle >= HANDLE_ID_LIMIT || !hbm_addrmap_get(&l->handles, handle_key(m->handle), &hs) || hs >= l->nhpool) {
      fail(&c, "mapping at %#llx names handle %llu, which is not live", m->va, m->handle);
      continue;
    }
    if (m->offset > l->hpool[hs].size || m->size > l->hpool[hs].size - m->offset)
      fail(&c, "mapping at %#llx reaches past the end of handle %llu", m->va, m->handle);
    c.mapped[hs] += m->size;
  }
  if (nmaps != hbm_ordset_count(l->maps)) fail(&c, "%llu mappings walked, %llu held", nmaps, hbm_ordset_count(l->maps));
  for (uint64_t i = 0; i < l->nhpool; i++)
    if (c.mapped[i] != (l->hpool[i].size ? l->hpool[i].mapped : 0))
      fail(&c, "handle slot %llu counts %#llx bytes mapped", i, l->hpool[i].mapped);
  free(c.mapped);
  if (!l->maps_untracked && phys_used != seg_bytes + c.handle_bytes)
    fail(&c, "phys_used %#llx, segments and handles hold %#llx", phys_used, seg_bytes + c.handle_bytes);
  return c.k.failures;
}

void hbm_ledger_each(const hbm_ledger *l, hbm_device_visit_fn *visit, void *arg) {
  for (size_t i = 0; i < l->nsegs; i++) visit(arg, HBM_DEV_SEGMENT, l->segs[i].addr, l->segs[i].size, 0, 0);
  for (size_t i = 0; i < l->nres; i++) visit(arg, HBM_DEV_RESERVATION, l->res[i].addr, l->res[i].size, 0, 0);
  for (uint64_t i = 0; i < l->nhpool; i++)
    if (l->hpool[i].size) visit(arg, HBM_DEV_HANDLE, l->hpool[i].id, l->hpool[i].size, l->hpool[i].mapped, 0);
  hbm_okey k;
  uint32_t slot;
  for (int more = hbm_ordset_first(l->maps, &k, &slot); more; more = hbm_ordset_upper_bound(l->maps, k, &k, &slot)) {
    const hbm_ledger_mapping *m = &l->mpool[slot];
    visit(arg, HBM_DEV_MAPPING, m->va, m->size, m->handle, m->offset);
  }
}
