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
typedef struct host_pieces { uint64_t n; host_piece p[]; } host_pieces;

/* Invariant (host_check; beyond the ledger's): the physical runs live in
 * `phys` are exactly the pieces of the ledger's handles (first offset = id,
 * their lengths summing to its size) and of its segments (first offset =
 * data, summing to its held bytes). An allocation of one run has no entry in
 * `pieces`; one of several has its list there, keyed by its first offset. */
typedef struct host_device {
  hbm_device base;
  hbm_ledger ledger;
  int fd;
  hbm_range *phys;     /* offsets in the memfd, unit = granule */
  hbm_addrmap pieces;  /* first offset -> host_pieces *, for allocations of several runs */
  uint64_t prepared;   /* the creates the last prepare made room for */
} host_device;

/* ---- the real work, once the ledger accepted a call ---------------------------- */

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
 * counted first, so that the only host memory it needs is asked for before
 * anything changes. */
static int pieces_create(host_device *h, uint64_t size, uint64_t *off) {
  gather_ctx g = {.need = size};
  hbm_range_walk(h->phys, gather_visit, &g);
  if (g.got < size) return HBM_ENOMEM; /* claimed, so not reached: the ledger would say */
  host_pieces *list = malloc(sizeof *list + g.n * sizeof list->p[0]);
  uint64_t blocks = 2 * (hbm_range_live_blocks(h->phys) + g.n + h->prepared) + 1; /* as host_prepare's, these runs too */
  if (!list || hbm_addrmap_reserve(&h->pieces, 1) != HBM_OK || hbm_range_reserve(h->phys, blocks) != HBM_OK) {
    free(list);
    return HBM_EHOSTMEM;
  }
  list->n = g.n;
  g = (gather_ctx){.need = size, .out = list->p};
  hbm_range_walk(h->phys, gather_visit, &g);
  for (uint64_t i = 0; i < list->n; i++) (void)hbm_range_alloc_at(h->phys, list->p[i].off, list->p[i].len); /* free: just walked */
  (void)hbm_addrmap_put(&h->pieces, list->p[0].off, (uint64_t)(uintptr_t)list); /* reserved */
  *off = list->p[0].off;
  return HBM_OK;
}

static int run_create(host_device *h, uint64_t size, uint64_t *off) {
  uint64_t got;
  if (hbm_device_claim(&h->base, size) != HBM_OK) return HBM_ENOMEM;
  int rc = hbm_range_alloc(h->phys, size, 0, off, &got);
  if (rc == HBM_ENOMEM) rc = pieces_create(h, size, off); /* free granules, but no run that long */
  if (rc != HBM_OK) {
    hbm_device_unclaim(&h->base, size);
    return rc;
  }
  return HBM_OK;
}

/* The pieces of the allocation whose first run is at off: its list, or one. */
static const host_piece *pieces_of(const host_device *h, uint64_t off, host_piece *one, uint64_t *n) {
  uint64_t v;
  if (hbm_addrmap_get(&h->pieces, off, &v)) {
    const host_pieces *list = (const host_pieces *)(uintptr_t)v;
    *n = list->n;
    return list->p;
  }
  *one = (host_piece){off, hbm_range_block_size(h->phys, off)};
  *n = 1;
  return one;
}

static void run_release(host_device *h, uint64_t off) {
  uint64_t v, got;
  host_pieces *list = hbm_addrmap_take(&h->pieces, off, &v) ? (host_pieces *)(uintptr_t)v : NULL;
  host_piece one = {off, 0};
  for (uint64_t i = 0, n = list ? list->n : 1; i < n; i++) {
    const host_piece *p = list ? &list->p[i] : &one;
    if (hbm_range_free(h->phys, p->off, &got) != HBM_OK) continue; /* the ledger vouched for it; host_check would say */
    (void)fallocate(h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)p->off, (off_t)got);
    hbm_device_unclaim(&h->base, got);
  }
  free(list);
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
 * first: piece by piece where it has several. */
static int range_map(host_device *h, uint64_t va, uint64_t size, uint64_t first, uint64_t offset) {
  host_piece one;
  uint64_t n, done = 0;
  const host_piece *p = pieces_of(h, first, &one, &n);
  for (uint64_t i = 0, at = 0; i < n && done < size; at += p[i].len, i++) {
    if (offset + done >= at + p[i].len) continue;
    uint64_t in = offset + done - at, len = p[i].len - in < size - done ? p[i].len - in : size - done;
    if (mmap((void *)(uintptr_t)(va + done), len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->fd,
             (off_t)(p[i].off + in)) == MAP_FAILED) {
      if (done) (void)range_unmap(va, done);
      return HBM_EHOSTMEM;
    }
    done += len;
  }
  return HBM_OK;
}

/* ---- the calls ------------------------------------------------------------------ */

/* The memory file's allocator: a tiling of L live runs has at most 2L + 1
 * blocks, so room for that many with `handles` more runs makes the next
 * creates need no host memory (hbm_dev_prepare). */
static int host_prepare(hbm_device *d, uint64_t handles) {
  host_device *h = (host_device *)d;
  h->prepared = handles;
  return hbm_range_reserve(h->phys, 2 * (hbm_range_live_blocks(h->phys) + handles) + 1);
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
  host_piece one;
  uint64_t n, got = 0;
  const host_piece *p = pieces_of(c->h, off, &one, &n);
  c->runs += n;
  c->bytes += size;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t run = hbm_range_block_size(c->h->phys, p[i].off);
    if (run != p[i].len)
      hbm_check_fail(&c->k, "%s at memfd offset %#llx: its piece at %#llx has %#llx bytes, its run %#llx", what,
                     (unsigned long long)off, (unsigned long long)p[i].off, (unsigned long long)p[i].len, (unsigned long long)run);
    got += p[i].len;
  }
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

static void free_pieces(void *arg, uint64_t first, uint64_t list) {
  (void)arg, (void)first;
  free((void *)(uintptr_t)list);
}

static void host_destroy(hbm_device *d) {
  host_device *h = (host_device *)d;
  /* What a policy left behind: the process's address space is given back. */
  for (size_t i = 0; i < h->ledger.nsegs; i++) munmap((void *)(uintptr_t)h->ledger.segs[i].addr, h->ledger.segs[i].held);
  for (size_t i = 0; i < h->ledger.nres; i++) munmap((void *)(uintptr_t)h->ledger.res[i].addr, h->ledger.res[i].size);
  hbm_ledger_release(&h->ledger);
  hbm_addrmap_each(&h->pieces, free_pieces, NULL);
  hbm_addrmap_release(&h->pieces);
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
  hbm_addrmap_init(&h->pieces);
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
