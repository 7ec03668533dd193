/* sim.c: the simulated device. Address arithmetic only: it touches no memory,
 * so a 96 GiB device replays on a 24 GiB machine. Physical use is counted
 * against capacity exactly as a real device would refuse it. */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "device/device.h"

/* Live segments, sorted by address, so a hinted address is honoured only
 * when it does not overlap one. Invariant: segs[i].addr + segs[i].size <=
 * segs[i+1].addr. Segments are few (hundreds), so a sorted array is enough. */
typedef struct sim_seg { uint64_t addr, size; } sim_seg;
typedef struct sim_device {
  hbm_device base;
  uint64_t next_va;   /* bump pointer for new ranges; addresses are never reused */
  sim_seg *segs;
  size_t nsegs, cap;
  uint64_t next_handle;
  uint64_t reserve_at; /* the address the next reservation takes (0: any) */
} sim_device;

#define SIM_BASE 0x7f0000000000ull

static size_t seg_lower_bound(const sim_device *s, uint64_t addr) {
  size_t lo = 0, hi = s->nsegs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (s->segs[mid].addr < addr) lo = mid + 1; else hi = mid;
  }
  return lo;
}

static int overlaps(const sim_device *s, uint64_t addr, uint64_t size) {
  size_t i = seg_lower_bound(s, addr);
  if (i < s->nsegs && s->segs[i].addr < addr + size) return 1;
  if (i > 0 && s->segs[i - 1].addr + s->segs[i - 1].size > addr) return 1;
  return 0;
}

static uint64_t take_va(sim_device *s, uint64_t size) {
  uint64_t g = s->base.caps.granule;
  uint64_t addr = hbm_align_up(s->next_va, g);
  s->next_va = addr + hbm_align_up(size, g);
  return addr;
}

static int sim_seg_alloc(hbm_device *d, uint64_t size, uint64_t hint, uint64_t *addr) {
  sim_device *s = (sim_device *)d;
  if (size == 0) return HBM_EINVAL;
  if (hbm_device_claim(d, size) != HBM_OK) return HBM_ENOMEM;
  if (s->nsegs == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    sim_seg *n = realloc(s->segs, cap * sizeof *n);
    if (!n) { hbm_device_unclaim(d, size); return HBM_EHOSTMEM; }
    s->segs = n;
    s->cap = cap;
  }
  uint64_t a = (hint && !overlaps(s, hint, size)) ? hint : take_va(s, size);
  if (a + size > s->next_va) s->next_va = a + size;
  size_t i = seg_lower_bound(s, a);
  memmove(s->segs + i + 1, s->segs + i, (s->nsegs - i) * sizeof *s->segs);
  s->segs[i] = (sim_seg){a, size};
  s->nsegs++;
  *addr = a;
  return HBM_OK;
}

static int sim_seg_free(hbm_device *d, uint64_t addr, uint64_t size) {
  sim_device *s = (sim_device *)d;
  size_t i = seg_lower_bound(s, addr);
  if (i == s->nsegs || s->segs[i].addr != addr || s->segs[i].size != size) return HBM_EINVAL;
  memmove(s->segs + i, s->segs + i + 1, (s->nsegs - i - 1) * sizeof *s->segs);
  s->nsegs--;
  hbm_device_unclaim(d, size);
  return HBM_OK;
}

static int sim_reserve(hbm_device *d, uint64_t size, uint64_t *base) {
  sim_device *s = (sim_device *)d;
  *base = s->reserve_at ? s->reserve_at : take_va(s, size);
  s->reserve_at = 0;
  return HBM_OK;
}
static int sim_unreserve(hbm_device *d, uint64_t base, uint64_t size) { return HBM_OK; }
static int sim_phys_create(hbm_device *d, uint64_t size, uint64_t *handle) {
  if (hbm_device_claim(d, size) != HBM_OK) return HBM_ENOMEM;
  *handle = ++((sim_device *)d)->next_handle;
  return HBM_OK;
}
static int sim_phys_release(hbm_device *d, uint64_t handle, uint64_t size) {
  hbm_device_unclaim(d, size);
  return HBM_OK;
}
static int sim_map(hbm_device *d, uint64_t va, uint64_t size, uint64_t h, uint64_t off) { return HBM_OK; }
static int sim_unmap(hbm_device *d, uint64_t va, uint64_t size) { return HBM_OK; }
/* The simulated device models a copy's existence, not its bytes. */
static int sim_copy(hbm_device *d, uint64_t dst, uint64_t src, uint64_t n) { return HBM_OK; }
static int sim_to_host(hbm_device *d, void *dst, uint64_t src, uint64_t n) { return HBM_OK; }
static int sim_from_host(hbm_device *d, uint64_t dst, const void *src, uint64_t n) { return HBM_OK; }
static void sim_destroy(hbm_device *d) {
  sim_device *s = (sim_device *)d;
  pthread_mutex_destroy(&d->lock);
  free(s->segs);
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
    .destroy = sim_destroy,
};

int hbm_sim_reserve_next_at(hbm_device *dev, uint64_t addr) {
  if (!dev || dev->ops != &sim_ops) return HBM_EINVAL;
  ((sim_device *)dev)->reserve_at = addr;
  return HBM_OK;
}

int hbm_sim_open(uint64_t capacity, uint64_t granule, hbm_device **out) {
  return hbm_sim_open_at(capacity, granule, SIM_BASE, out);
}

int hbm_sim_open_at(uint64_t capacity, uint64_t granule, uint64_t base, hbm_device **out) {
  sim_device *s = calloc(1, sizeof *s);
  if (!s) return HBM_EHOSTMEM;
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
