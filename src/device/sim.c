/* sim.c: the simulated device. Address arithmetic only: it touches no memory,
 * so a 96 GiB device replays on a 24 GiB machine. Physical use is counted
 * against capacity exactly as a real device would refuse it.
 *
 * Like every device, it keeps a ledger (contract.h) of every segment,
 * reservation, physical handle and mapping, and refuses (HBM_EINVAL, nothing
 * changed, one message through the error handler) each call that breaks the
 * contract of device.h, so a policy that maps twice, unmaps what it never
 * mapped or releases memory still mapped fails its tests here rather than on
 * a real device. The rules, one per call (the ledger enforces them for every
 * device; the hint and reserve_next_at rules are the sim device's own):
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
 * Addresses: a bump pointer from the device's base, never reused; the
 * ledger's costs are in contract.h. */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "device/contract.h"
#include "device/device.h"

/* Invariant (beyond the ledger's): every range the ledger holds ends at or
 * below next_va, which is at most HBM_LEDGER_VA_END. */
typedef struct sim_device {
  hbm_device base;
  hbm_ledger ledger;
  uint64_t next_va;    /* bump pointer for new ranges; addresses are never reused */
  uint64_t next_handle;
  uint64_t reserve_at; /* the address the next reservation takes (0: any) */
} sim_device;

#define SIM_BASE 0x7f0000000000ull

static int aligned(const sim_device *s, uint64_t v) { return (v & (s->base.caps.granule - 1)) == 0; }
/* [a, a+n) lies inside the address space. */
static int fits(uint64_t a, uint64_t n) { return a <= HBM_LEDGER_VA_END && n <= HBM_LEDGER_VA_END - a; }

static uint64_t take_va(sim_device *s, uint64_t size) {
  uint64_t g = s->base.caps.granule;
  uint64_t addr = hbm_align_up(s->next_va, g);
  s->next_va = addr + hbm_align_up(size, g);
  return addr;
}

static int sim_seg_alloc(hbm_device *d, uint64_t size, uint64_t hint, uint64_t *addr) {
  sim_device *s = (sim_device *)d;
  hbm_ledger *l = &s->ledger;
  int rc = hbm_ledger_seg_alloc_ok(l, size, hint);
  if (rc != HBM_OK) return rc;
  if (size > HBM_MAX_SIZE) return HBM_ENOMEM;
  int honour = hint && fits(hint, size) && !hbm_ledger_seg_overlaps(l, hint, size) && !hbm_ledger_res_overlaps(l, hint, size);
  if (!honour && !fits(hbm_align_up(s->next_va, d->caps.granule), hbm_align_up(size, d->caps.granule)))
    return HBM_ENOMEM; /* the address space is used up */
  /* A segment holds whole granules of the device's memory, as the host
   * device's (and any device's pages) do: both devices refuse the same calls. */
  uint64_t held = hbm_align_up(size, d->caps.granule);
  if (hbm_device_claim(d, held) != HBM_OK) return HBM_ENOMEM;
  uint64_t a = honour ? hint : take_va(s, size);
  if (a + size > s->next_va) s->next_va = a + size;
  hbm_ledger_seg_alloc_done(l, a, size, held, 0);
  *addr = a;
  return HBM_OK;
}

static int sim_seg_free(hbm_device *d, uint64_t addr, uint64_t size) {
  sim_device *s = (sim_device *)d;
  uint64_t held, data;
  int rc = hbm_ledger_seg_free_ok(&s->ledger, addr, size, &held, &data);
  if (rc != HBM_OK) return rc;
  hbm_ledger_seg_free_done(&s->ledger, addr);
  hbm_device_unclaim(d, held);
  return HBM_OK;
}

static int sim_reserve(hbm_device *d, uint64_t size, uint64_t *base) {
  sim_device *s = (sim_device *)d;
  hbm_ledger *l = &s->ledger;
  uint64_t at = s->reserve_at;
  s->reserve_at = 0; /* named for this one call, whatever it returns */
  int rc = hbm_ledger_reserve_ok(l, size, at);
  if (rc != HBM_OK) return rc;
  if (!at && !fits(hbm_align_up(s->next_va, s->base.caps.granule), size))
    return hbm_ledger_refuse(l, "reserve", size, at, "past the end of the address space");
  if (at && (!aligned(s, at) || !fits(at, size)))
    return hbm_ledger_refuse(l, "reserve", size, at, "the address named by reserve_next_at is not granule-aligned or wraps");
  if (at && hbm_ledger_seg_overlaps(l, at, size))
    return hbm_ledger_refuse(l, "reserve", size, at, "the address named by reserve_next_at overlaps a live segment");
  if (!at) at = take_va(s, size);
  else if (at + size > s->next_va) s->next_va = at + size;
  hbm_ledger_reserve_done(l, at, size);
  *base = at;
  return HBM_OK;
}

/* The invariant above: a range past next_va could be handed out again. */
typedef struct sim_check_ctx {
  const sim_device *s;
  hbm_checker k;
} sim_check_ctx;
static void sim_check_visit(void *arg, hbm_device_obj kind, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  sim_check_ctx *x = arg;
  (void)c, (void)d;
  if (kind != HBM_DEV_SEGMENT && kind != HBM_DEV_RESERVATION) return;
  if (b > x->s->next_va || a > x->s->next_va - b)
    hbm_check_fail(&x->k, "%s [%#llx, +%#llx) ends past the next address handed out, %#llx",
                   kind == HBM_DEV_SEGMENT ? "segment" : "reservation", (unsigned long long)a, (unsigned long long)b,
                   (unsigned long long)x->s->next_va);
}
static int sim_check(const hbm_device *d, void (*report)(void *arg, const char *message), void *arg) {
  const sim_device *s = (const sim_device *)d;
  sim_check_ctx x = {.s = s, .k = {.report = report, .arg = arg, .prefix = "sim: "}};
  if (s->next_va > HBM_LEDGER_VA_END)
    hbm_check_fail(&x.k, "the next address handed out, %#llx, is past the address space's end",
                   (unsigned long long)s->next_va);
  hbm_ledger_each(&s->ledger, sim_check_visit, &x);
  return x.k.failures;
}

static int sim_unreserve(hbm_device *d, uint64_t base, uint64_t size) {
  sim_device *s = (sim_device *)d;
  int rc = hbm_ledger_unreserve_ok(&s->ledger, base, size);
  if (rc == HBM_OK) hbm_ledger_unreserve_done(&s->ledger, base, size);
  return rc;
}

static int sim_phys_create(hbm_device *d, uint64_t size, uint64_t *handle) {
  sim_device *s = (sim_device *)d;
  int rc = hbm_ledger_phys_create_ok(&s->ledger, size);
  if (rc != HBM_OK) return rc;
  if (size > HBM_MAX_SIZE) return HBM_ENOMEM;
  if (hbm_device_claim(d, size) != HBM_OK) return HBM_ENOMEM;
  uint64_t id = ++s->next_handle;
  hbm_ledger_phys_create_done(&s->ledger, id, size);
  *handle = id;
  return HBM_OK;
}

static int sim_phys_release(hbm_device *d, uint64_t handle, uint64_t size) {
  sim_device *s = (sim_device *)d;
  int rc = hbm_ledger_phys_release_ok(&s->ledger, handle, size);
  if (rc != HBM_OK) return rc;
  hbm_ledger_phys_release_done(&s->ledger, handle);
  hbm_device_unclaim(d, size);
  return HBM_OK;
}

static int sim_map(hbm_device *d, uint64_t va, uint64_t size, uint64_t handle, uint64_t off) {
  sim_device *s = (sim_device *)d;
  int rc = hbm_ledger_map_ok(&s->ledger, va, size, handle, off);
  return rc != HBM_OK ? rc : hbm_ledger_map_done(&s->ledger, va, size, handle, off);
}

static int sim_unmap(hbm_device *d, uint64_t va, uint64_t size) {
  sim_device *s = (sim_device *)d;
  int rc = hbm_ledger_unmap_ok(&s->ledger, va, size);
  if (rc == HBM_OK) hbm_ledger_unmap_done(&s->ledger, va, size);
  return rc;
}

/* The simulated device models a copy's existence, not its bytes; the ledger
 * checks that both ends are device memory. */
static int sim_copy(hbm_device *d, uint64_t dst, uint64_t src, uint64_t n) {
  return hbm_ledger_copy_ok(&((sim_device *)d)->ledger, dst, src, n);
}
static int sim_to_host(hbm_device *d, void *dst, uint64_t src, uint64_t n) {
  return hbm_ledger_to_host_ok(&((sim_device *)d)->ledger, src, n);
}
static int sim_from_host(hbm_device *d, uint64_t dst, const void *src, uint64_t n) {
  return hbm_ledger_from_host_ok(&((sim_device *)d)->ledger, dst, n);
}

static void sim_destroy(hbm_device *d) {
  sim_device *s = (sim_device *)d;
  pthread_mutex_destroy(&d->lock);
  hbm_ledger_release(&s->ledger);
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
    .check = sim_check,
};

int hbm_sim_reserve_next_at(hbm_device *dev, uint64_t addr) {
  if (!dev || dev->ops != &sim_ops) return HBM_EINVAL;
  ((sim_device *)dev)->reserve_at = addr;
  return HBM_OK;
}

int hbm_sim_reserve_can_take(const hbm_device *dev, uint64_t addr, uint64_t size) {
  if (!dev || dev->ops != &sim_ops || !size) return 0;
  const sim_device *s = (const sim_device *)dev;
  return aligned(s, addr) && fits(addr, size) && !hbm_ledger_seg_overlaps(&s->ledger, addr, size);
}

int hbm_sim_reserve_is_clear(const hbm_device *dev, uint64_t addr, uint64_t size) {
  return hbm_sim_reserve_can_take(dev, addr, size) &&
         !hbm_ledger_res_overlaps(&((const sim_device *)dev)->ledger, addr, size);
}

int hbm_sim_track_mappings(hbm_device *dev, int on) {
  if (!dev || dev->ops != &sim_ops) return HBM_EINVAL;
  hbm_ledger *l = &((sim_device *)dev)->ledger;
  if (l->handles.used || hbm_ordset_count(l->maps)) return HBM_EINVAL; /* too late: calls already tracked */
  l->maps_untracked = !on;
  return HBM_OK;
}

int hbm_sim_open(uint64_t capacity, uint64_t granule, hbm_device **out) {
  return hbm_sim_open_at(capacity, granule, SIM_BASE, out);
}

int hbm_sim_open_at(uint64_t capacity, uint64_t granule, uint64_t base, hbm_device **out) {
  /* Past the address space's end every range it handed out would break the
   * contract, and its check (next_va) would fail before the first call. */
  if (base > HBM_LEDGER_VA_END)
    return hbm_report_error(HBM_EINVAL, "sim device: base %#llx is past the address space's end %#llx",
                            (unsigned long long)base, (unsigned long long)HBM_LEDGER_VA_END);
  sim_device *s = calloc(1, sizeof *s);
  if (!s) return HBM_EHOSTMEM;
  if (hbm_ledger_init(&s->ledger, "sim", granule) != HBM_OK) {
    free(s);
    return HBM_EHOSTMEM;
  }
  s->base.ops = &sim_ops;
  s->base.ledger = &s->ledger;
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
