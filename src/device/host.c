/* host.c: a device made of real host memory with real granule mapping.
 *
 * Physical memory is one memfd of `capacity` bytes; a physical allocation is a
 * run of granules in that file (placed by the range allocator, so physical
 * runs are found in O(1)), or, when no free run is that long, several runs
 * ("pieces", taken in address order): device memory needs no physical
 * contiguity, and neither does a handle or a segment here, so the host device
 * fails a create or a segment exactly when the sim device does, for want of
 * free granules, not of a long enough piece of its file.
 *
 * Virtual ranges are PROT_NONE reservations; map puts
 * file pages at an address with mmap(MAP_FIXED | MAP_SHARED), so the same
 * physical granule can appear anywhere, exactly as cuMemMap does. This is
 * what lets policies stitch pages and move data for real in tests.
 *
 * Freed physical runs are punched out of the file (FALLOC_FL_PUNCH_HOLE), so a
 * long test does not keep memory it no longer uses.
 *
 * Every call goes through the device's ledger (contract.h) first, so the host
 * device refuses exactly what the sim device refuses: the mmap, munmap and
 * fallocate behind a call run only once the ledger accepted it, and a map
 * outside a reservation never reaches mmap(MAP_FIXED) (which would replace
 * whatever the process has there), nor does a release of a mapped handle
 * punch out memory still in use. Handle ids are the offsets of their (first)
 * runs in the memfd; a segment's is kept in its ledger entry.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/addrmap.h"
#include "core/range.h"
#include "core/util.h"
#include "device/contract.h"
#include "device/device.h"

/* One piece of a physical allocation: a run of the memfd. */
typedef struct host_piece { uint64_t off, len; } host_piece;
#define LAST_PIECE UINT64_MAX /* `next`'s value for an allocation's last run */

/* Invariant (host_check; beyond the ledger's): the physical runs live in
 * `phys` are exactly the pieces of the ledger's handles (first offset = id,
 * their lengths summing to its size) and of its segments (first offset =
 * data, summing to its held bytes). An allocation of one run has no entry in
 * `next`; one of several has its runs chained there, each to the next, the
 * last to LAST_PIECE. */
typedef struct host_device {
  hbm_device base;
  hbm_ledger ledger;
  int fd;
  hbm_range *phys;       /* offsets in the memfd, unit = granule */
  hbm_addrmap next;      /* run offset -> the allocation's next run offset, for allocations of several */
  host_piece *scratch;   /* a create's pieces while it gathers them */
  uint64_t scratch_cap;
} host_device;

/* ---- the real work, once the ledger accepted a call ---------------------------- */

static int scratch_reserve(host_device *h, uint64_t n) {
  if (n <= h->scratch_cap) return HBM_OK;
  host_piece *p = realloc(h->scratch, n * sizeof *p);
  if (!p) return HBM_EHOSTMEM;
  h->scratch = p;
  h->scratch_cap = n;
  return HBM_OK;
}

typedef struct gather_ctx {
  uint64_t need, got, n; /* bytes asked, bytes found, pieces found */
  host_piece *out;       /* NULL: count only */
} gather_ctx;

static int gather_visit(void *arg, uint64_t addr, uint64_t size, int live) {
  gather_ctx *g = arg;
  if (live) return 0;
  uint64_t take = size < g->need - g->got ? size : g->need - g->got;
  if (g->out) g->out[g->n] = (host_piece){addr, take};
  g->n++;
  g->got += take;
  return g->got == g->need;
}

/* size bytes from several free runs, in address order (no run is that long):
 * counted first, so that what host memory it needs is asked for before
 * anything changes; after host_prepare, none (its room covers this). */
static int pieces_create(host_device *h, uint64_t size, uint64_t *off) {
  gather_ctx g = {.need = size};
  hbm_range_walk(h->phys, gather_visit, &g);
  if (g.got < size) return HBM_ENOMEM; /* the capacity was checked: not reached */
  uint64_t live_after = hbm_range_live_blocks(h->phys) + g.n;
  if (scratch_reserve(h, g.n) != HBM_OK || hbm_addrmap_reserve(&h->next, g.n) != HBM_OK ||
      hbm_range_reserve(h->phys, 2 * live_after + 1) != HBM_OK)
    return HBM_EHOSTMEM;
  g = (gather_ctx){.need = size, .out = h->scratch};
  hbm_range_walk(h->phys, gather_visit, &g);
  for (uint64_t i = 0; i < g.n; i++) {
    (void)hbm_range_alloc_at(h->phys, h->scratch[i].off, h->scratch[i].len); /* free: just walked */
    (void)hbm_addrmap_put(&h->next, h->scratch[i].off, i + 1 < g.n ? h->scratch[i + 1].off : LAST_PIECE); /* reserved */
  }
  *off = h->scratch[0].off;
  return HBM_OK;
}

/* Claimed once made: a create that fails for host memory leaves no trace in
 * the device's peak. */
static int run_create(host_device *h, uint64_t size, uint64_t *off) {
  uint64_t got, cap = h->base.caps.capacity;
  if (size > cap || h->base.phys_used > cap - size) return HBM_ENOMEM;
  int rc = hbm_range_alloc(h->phys, size, 0, off, &got);
  if (rc == HBM_ENOMEM) rc = pieces_create(h, size, off); /* free granules, but no run that long */
  if (rc != HBM_OK) return rc;
  return hbm_device_claim(&h->base, size); /* checked above: cannot fail */
}

/* The run after `off` in its allocation, or LAST_PIECE. */
static uint64_t next_piece(const host_device *h, uint64_t off) {
  uint64_t v;
  return hbm_addrmap_get(&h->next, off, &v) ? v : LAST_PIECE;
}

static void run_release(host_device *h, uint64_t off) {
  uint64_t got, next;
  for (; off != LAST_PIECE; off = next) {
    if (!hbm_addrmap_take(&h->next, off, &next)) next = LAST_PIECE;
    if (hbm_range_free(h->phys, off, &got) != HBM_OK) continue; /* the ledger vouched for it; host_check would say */
    (void)fallocate(h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)got);
    hbm_device_unclaim(&h->base, got);
  }
}

/* A range at a granule boundary, as the contract has reservations (and as
 * cuMemAddressReserve aligns them): mmap aligns only to a page, so one more
 * granule is taken and the unaligned head and the tail are given back. */
static int range_reserve(uint64_t size, uint64_t granule, uint64_t *base) {
  if (size > UINT64_MAX - granule) return HBM_EHOSTMEM;
  uint64_t span = size + granule;
  void *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return HBM_EHOSTMEM;
  uint64_t at = (uint64_t)(uintptr_t)p, start = hbm_align_up(at, granule), end = start + size;
  if (start > at) munmap(p, start - at);
  if (at + span > end) munmap((void *)(uintptr_t)end, at + span - end);
  *base = start;
  return HBM_OK;
}

/* Unmapping keeps the reservation: the range becomes PROT_NONE again. */
static int range_unmap(uint64_t va, uint64_t size) {
  void *p = mmap((void *)(uintptr_t)va, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? HBM_EHOSTMEM : HBM_OK;
}

/* Maps size bytes from offset within the allocation whose first run is at
 * first: run by run where it has several. */
static int range_map(host_device *h, uint64_t va, uint64_t size, uint64_t first, uint64_t offset) {
  uint64_t done = 0;
  for (uint64_t off = first, at = 0; off != LAST_PIECE && done < size; off = next_piece(h, off)) {
    uint64_t len = hbm_range_block_size(h->phys, off);
    if (offset + done >= at + len) {
      at += len;
      continue;
    }
    uint64_t in = offset + done - at, n = len - in < size - done ? len - in : size - done;
    if (mmap((void *)(uintptr_t)(va + done), n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->fd,
             (off_t)(off + in)) == MAP_FAILED) {
      if (done) (void)range_unmap(va, done);
      return HBM_EHOSTMEM;
    }
    done += n;
    at += len;
  }
  return HBM_OK;
}

/* ---- the calls ------------------------------------------------------------------ */

/* The memory file's allocator: a tiling of L live runs has at most 2L + 1
 * blocks, so room for that many, with the runs the next `handles` creates may
 * take (several each where no free run is long enough), makes those creates
 * need no host memory (hbm_dev_prepare). */
static int host_prepare(hbm_device *d, uint64_t handles) {
  host_device *h = (host_device *)d;
  uint64_t live = hbm_range_live_blocks(h->phys);
  if (!handles) return hbm_range_reserve(h->phys, 2 * live + 1);
  /* Creates of several runs take whole free runs: at most the F <= L + 1 free
   * now, plus one per run released meanwhile (R), plus a part of one each.
   * So no more than L - R + (L + 1 + R + handles) runs are ever live before
   * the next prepare, each chained at most once, none gathered more. */
  uint64_t most = 2 * live + handles + 1;
  if (hbm_range_reserve(h->phys, 2 * most + 1) != HBM_OK || hbm_addrmap_reserve(&h->next, most) != HBM_OK ||
      scratch_reserve(h, most) != HBM_OK)
    return HBM_EHOSTMEM;
  return HBM_OK;
}

static int host_phys_create(hbm_device *d, uint64_t size, uint64_t *handle) {
  host_device *h = (host_device *)d;
  int rc = hbm_ledger_phys_create_ok(&h->ledger, size);
  if (rc != HBM_OK) return rc;
  uint64_t off;
  if ((rc = run_create(h, size, &off)) != HBM_OK) return rc;
  hbm_ledger_phys_create_done(&h->ledger, off, size);
  *handle = off;
  return HBM_OK;
}

static int host_phys_release(hbm_device *d, uint64_t handle, uint64_t size) {
  host_device *h = (host_device *)d;
  int rc = hbm_ledger_phys_release_ok(&h->ledger, handle, size);
  if (rc != HBM_OK) return rc;
  run_release(h, handle);
  hbm_ledger_phys_release_done(&h->ledger, handle);
  return HBM_OK;
}

static int host_reserve(hbm_device *d, uint64_t size, uint64_t *base) {
  host_device *h = (host_device *)d;
  int rc = hbm_ledger_reserve_ok(&h->ledger, size, 0);
  if (rc != HBM_OK) return rc;
  if ((rc = range_reserve(size, d->caps.granule, base)) != HBM_OK) {
    char b[32];
    return hbm_report_error(rc, "host device: the host cannot reserve %s of address space", hbm_size_format(size, b, sizeof b));
  }
  hbm_ledger_reserve_done(&h->ledger, *base, size);
  return HBM_OK;
}

static int host_unreserve(hbm_device *d, uint64_t base, uint64_t size) {
  host_device *h = (host_device *)d;
  int rc = hbm_ledger_unreserve_ok(&h->ledger, base, size);
  if (rc != HBM_OK) return rc;
  if (munmap((void *)(uintptr_t)base, size) != 0) return HBM_EHOSTMEM;
  hbm_ledger_unreserve_done(&h->ledger, base, size);
  return HBM_OK;
}

static int host_map(hbm_device *d, uint64_t va, uint64_t size, uint64_t handle, uint64_t offset) {
  host_device *h = (host_device *)d;
  int rc = hbm_ledger_map_ok(&h->ledger, va, size, handle, offset);
  if (rc != HBM_OK) return rc;
  if ((rc = range_map(h, va, size, handle, offset)) != HBM_OK) return rc;
  if ((rc = hbm_ledger_map_done(&h->ledger, va, size, handle, offset)) != HBM_OK) (void)range_unmap(va, size);
  return rc;
}

static int host_unmap(hbm_device *d, uint64_t va, uint64_t size) {
  host_device *h = (host_device *)d;
  int rc = hbm_ledger_unmap_ok(&h->ledger, va, size);
  if (rc != HBM_OK) return rc;
  if ((rc = range_unmap(va, size)) != HBM_OK) return rc;
  hbm_ledger_unmap_done(&h->ledger, va, size);
  return HBM_OK;
}

/* A segment is a reservation backed by physical runs (one where a free run
 * is long enough), mapped at once, as cudaMalloc is; the hint is not honoured
 * (the kernel picks addresses). It counts as one backend call (the wrapper
 * counted it). */
static int host_seg_alloc(hbm_device *d, uint64_t size, uint64_t hint, uint64_t *addr) {
  host_device *h = (host_device *)d;
  int rc = hbm_ledger_seg_alloc_ok(&h->ledger, size, hint);
  if (rc != HBM_OK) return rc;
  if (size > HBM_MAX_SIZE) return HBM_ENOMEM;
  uint64_t bytes = hbm_align_up(size, d->caps.granule), va, off;
  if ((rc = run_create(h, bytes, &off)) != HBM_OK) return rc;
  if ((rc = range_reserve(bytes, d->caps.granule, &va)) != HBM_OK) {
    run_release(h, off);
    return rc;
  }
  if ((rc = range_map(h, va, bytes, off, 0)) != HBM_OK) {
    munmap((void *)(uintptr_t)va, bytes);
    run_release(h, off);
    return rc;
  }
  hbm_ledger_seg_alloc_done(&h->ledger, va, size, bytes, off);
  *addr = va;
  return HBM_OK;
}

static int host_seg_free(hbm_device *d, uint64_t addr, uint64_t size) {
  host_device *h = (host_device *)d;
  uint64_t bytes, off;
  int rc = hbm_ledger_seg_free_ok(&h->ledger, addr, size, &bytes, &off);
  if (rc != HBM_OK) return rc;
  if (munmap((void *)(uintptr_t)addr, bytes) != 0) return HBM_EHOSTMEM;
  run_release(h, off);
  hbm_ledger_seg_free_done(&h->ledger, addr);
  return HBM_OK;
}

static int host_copy(hbm_device *d, uint64_t dst, uint64_t src, uint64_t n) {
  int rc = hbm_ledger_copy_ok(&((host_device *)d)->ledger, dst, src, n);
  if (rc == HBM_OK) memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  return rc;
}

static int host_to_host(hbm_device *d, void *dst, uint64_t src, uint64_t n) {
  int rc = hbm_ledger_to_host_ok(&((host_device *)d)->ledger, src, n);
  if (rc == HBM_OK) memcpy(dst, (const void *)(uintptr_t)src, n);
  return rc;
}

static int host_from_host(hbm_device *d, uint64_t dst, const void *src, uint64_t n) {
  int rc = hbm_ledger_from_host_ok(&((host_device *)d)->ledger, dst, n);
  if (rc == HBM_OK) memcpy((void *)(uintptr_t)dst, src, n);
  return rc;
}

/* ---- the host's own check: its physical runs against the ledger ---------------- */

typedef struct host_check_ctx {
  const host_device *h;
  hbm_checker k; /* prefix "host: " */
  uint64_t runs, bytes; /* what the ledger says is live in phys */
} host_check_ctx;

static void run_expected(host_check_ctx *c, const char *what, uint64_t off, uint64_t size) {
  uint64_t got = 0, first = off;
  c->bytes += size;
  for (uint64_t n = 0; off != LAST_PIECE; off = next_piece(c->h, off)) {
    uint64_t run = hbm_range_block_size(c->h->phys, off);
    if (!run || ++n > hbm_range_live_blocks(c->h->phys)) { /* not live, or a chain that loops */
      hbm_check_fail(&c->k, "%s at memfd offset %#llx: its piece at %#llx is not a live run", what,
                     (unsigned long long)first, (unsigned long long)off);
      break;
    }
    c->runs++;
    got += run;
  }
  off = first;
  if (got != size)
    hbm_check_fail(&c->k, "%s at memfd offset %#llx: %#llx bytes, its runs hold %#llx", what, (unsigned long long)off,
                   (unsigned long long)size, (unsigned long long)got);
}

static void host_check_visit(void *arg, hbm_device_obj kind, uint64_t a, uint64_t b, uint64_t cc, uint64_t d) {
  if (kind == HBM_DEV_HANDLE) run_expected(arg, "handle", a, b);
}

static int host_check(const hbm_device *d, void (*report)(void *arg, const char *message), void *arg) {
  const host_device *h = (const host_device *)d;
  host_check_ctx c = {.h = h, .k = {.report = report, .arg = arg, .prefix = "host: "}};
  c.k.failures += hbm_range_check(h->phys, report, arg);
  hbm_ledger_each(&h->ledger, host_check_visit, &c);
  for (size_t i = 0; i < h->ledger.nsegs; i++) run_expected(&c, "segment", h->ledger.segs[i].data, h->ledger.segs[i].held);
  if (hbm_range_live_blocks(h->phys) != c.runs || hbm_range_live_bytes(h->phys) != c.bytes)
    hbm_check_fail(&c.k, "%llu runs of %#llx bytes live in the memfd, the ledger holds %llu of %#llx",
                   (unsigned long long)hbm_range_live_blocks(h->phys), (unsigned long long)hbm_range_live_bytes(h->phys),
                   (unsigned long long)c.runs, (unsigned long long)c.bytes);
  return c.k.failures;
}

static void host_destroy(hbm_device *d) {
  host_device *h = (host_device *)d;
  /* What a policy left behind: the process's address space is given back. */
  for (size_t i = 0; i < h->ledger.nsegs; i++) munmap((void *)(uintptr_t)h->ledger.segs[i].addr, h->ledger.segs[i].held);
  for (size_t i = 0; i < h->ledger.nres; i++) munmap((void *)(uintptr_t)h->ledger.res[i].addr, h->ledger.res[i].size);
  hbm_ledger_release(&h->ledger);
  hbm_addrmap_release(&h->next);
  free(h->scratch);
  hbm_range_destroy(h->phys);
  close(h->fd);
  pthread_mutex_destroy(&d->lock);
  free(h);
}

static const hbm_device_ops host_ops = {
    .kind = "host",
    .seg_alloc = host_seg_alloc,
    .seg_free = host_seg_free,
    .reserve = host_reserve,
    .unreserve = host_unreserve,
    .phys_create = host_phys_create,
    .prepare = host_prepare,
    .phys_release = host_phys_release,
    .map = host_map,
    .unmap = host_unmap,
    .copy = host_copy,
    .to_host = host_to_host,
    .from_host = host_from_host,
    .check = host_check,
    .destroy = host_destroy,
};

int hbm_host_open(uint64_t capacity, uint64_t granule, hbm_device **out) {
  long page = sysconf(_SC_PAGESIZE);
  if (granule % (uint64_t)page) return hbm_report_error(HBM_EINVAL, "host device: granule must be a multiple of the %ld-byte page", page);
  /* A capacity this host cannot even reserve address space for is a spec to
   * refuse now, not a heap that fails later with no word of why. */
  uint64_t probe;
  if (range_reserve(capacity, granule, &probe) != HBM_OK) {
    char b[32];
    return hbm_report_error(HBM_EINVAL, "host device: the host cannot reserve %s of address space for its "
                            "capacity (a host device's memory is the host's own)", hbm_size_format(capacity, b, sizeof b));
  }
  munmap((void *)(uintptr_t)probe, capacity);
  host_device *h = calloc(1, sizeof *h);
  if (!h) return HBM_EHOSTMEM;
  h->fd = memfd_create("hbm-host-device", MFD_CLOEXEC);
  if (h->fd < 0 || ftruncate(h->fd, (off_t)capacity) != 0) {
    int e = errno;
    if (h->fd >= 0) close(h->fd);
    free(h);
    return hbm_report_error(HBM_EUNSUPPORTED, "host device: memfd of %llu bytes: %s",
                            (unsigned long long)capacity, strerror(e));
  }
  if (hbm_range_create(0, capacity, granule, &h->phys) != HBM_OK) {
    close(h->fd);
    free(h);
    return HBM_EHOSTMEM;
  }
  hbm_addrmap_init(&h->next);
  if (hbm_ledger_init(&h->ledger, "host", granule) != HBM_OK) {
    hbm_range_destroy(h->phys);
    close(h->fd);
    free(h);
    return HBM_EHOSTMEM;
  }
  h->base.ops = &host_ops;
  h->base.ledger = &h->ledger;
  strcpy(h->base.caps.kind, "host");
  h->base.caps.capacity = capacity;
  h->base.caps.granule = granule;
  h->base.caps.vmm = 1;
  h->base.caps.d2d_copy = 1;
  h->base.caps.host_visible = 1;
  hbm_device_lock_init(&h->base);
  *out = &h->base;
  return HBM_OK;
}
