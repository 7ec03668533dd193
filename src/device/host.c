/* host.c: a device made of real host memory with real granule mapping.
 *
 * Physical memory is one memfd of `capacity` bytes; a physical allocation is a
 * run of granules in that file (placed by the range allocator, so physical
 * runs are found in O(1)). Virtual ranges are PROT_NONE reservations; map puts
 * file pages at an address with mmap(MAP_FIXED | MAP_SHARED), so the same
 * physical granule can appear anywhere, exactly as cuMemMap does. This is
 * what lets policies stitch pages and move data for real in tests.
 *
 * Freed physical runs are punched out of the file (FALLOC_FL_PUNCH_HOLE), so a
 * long test does not keep memory it no longer uses.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/range.h"
#include "core/util.h"
#include "device/device.h"

/* A live segment: its reservation and the physical run behind it. */
typedef struct host_seg { uint64_t addr, handle, bytes; } host_seg;

typedef struct host_device {
  hbm_device base;
  int fd;
  hbm_range *phys; /* offsets in the memfd, unit = granule */
  host_seg *segs;  /* live segments (few: a linear search is enough) */
  size_t nsegs, segs_cap;
} host_device;

static int host_phys_create(hbm_device *d, uint64_t size, uint64_t *handle) {
  host_device *h = (host_device *)d;
  uint64_t off, got;
  if (hbm_device_claim(d, size) != HBM_OK) return HBM_ENOMEM;
  int rc = hbm_range_alloc(h->phys, size, 0, &off, &got);
  if (rc != HBM_OK) {
    hbm_device_unclaim(d, size);
    return HBM_ENOMEM;
  }
  *handle = off;
  return HBM_OK;
}

static int host_phys_release(hbm_device *d, uint64_t handle, uint64_t size) {
  host_device *h = (host_device *)d;
  uint64_t got;
  if (hbm_range_free(h->phys, handle, &got) != HBM_OK) return HBM_EINVAL;
  (void)fallocate(h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)handle, (off_t)got);
  hbm_device_unclaim(d, got);
  return HBM_OK;
}

static int host_reserve(hbm_device *d, uint64_t size, uint64_t *base) {
  void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return HBM_EHOSTMEM;
  *base = (uint64_t)(uintptr_t)p;
  return HBM_OK;
}

static int host_unreserve(hbm_device *d, uint64_t base, uint64_t size) {
  return munmap((void *)(uintptr_t)base, size) == 0 ? HBM_OK : HBM_EINVAL;
}

static int host_map(hbm_device *d, uint64_t va, uint64_t size, uint64_t handle, uint64_t offset) {
  host_device *h = (host_device *)d;
  void *p = mmap((void *)(uintptr_t)va, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->fd,
                 (off_t)(handle + offset));
  return p == MAP_FAILED ? HBM_EHOSTMEM : HBM_OK;
}

/* Unmapping keeps the reservation: the range becomes PROT_NONE again. */
static int host_unmap(hbm_device *d, uint64_t va, uint64_t size) {
  void *p = mmap((void *)(uintptr_t)va, size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? HBM_EHOSTMEM : HBM_OK;
}

/* A segment is a reservation backed by one physical run, mapped at once, as
 * cudaMalloc is. It counts as one backend call (the wrapper counted it). */
static int host_seg_alloc(hbm_device *d, uint64_t size, uint64_t hint, uint64_t *addr) {
  uint64_t g = d->caps.granule, bytes = hbm_align_up(size, g), va, handle;
  int rc = host_phys_create(d, bytes, &handle);
  if (rc != HBM_OK) return rc;
  if ((rc = host_reserve(d, bytes, &va)) != HBM_OK) {
    host_phys_release(d, handle, bytes);
    return rc;
  }
  host_device *h = (host_device *)d;
  if (h->nsegs == h->segs_cap) {
    size_t cap = h->segs_cap ? h->segs_cap * 2 : 16;
    host_seg *n = realloc(h->segs, cap * sizeof *n);
    if (!n) rc = HBM_EHOSTMEM; else { h->segs = n; h->segs_cap = cap; }
  }
  if (rc != HBM_OK || (rc = host_map(d, va, bytes, handle, 0)) != HBM_OK) {
    host_unreserve(d, va, bytes);
    host_phys_release(d, handle, bytes);
    return rc;
  }
  h->segs[h->nsegs++] = (host_seg){va, handle, bytes};
  *addr = va;
  return HBM_OK;
}

static int host_seg_free(hbm_device *d, uint64_t addr, uint64_t size) {
  host_device *h = (host_device *)d;
  for (size_t i = 0; i < h->nsegs; i++) {
    if (h->segs[i].addr != addr) continue;
    host_seg seg = h->segs[i];
    h->segs[i] = h->segs[--h->nsegs];
    host_unreserve(d, seg.addr, seg.bytes);
    return host_phys_release(d, seg.handle, seg.bytes);
  }
  return HBM_EINVAL;
}

static int host_copy(hbm_device *d, uint64_t dst, uint64_t src, uint64_t n) {
  memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  return HBM_OK;
}

static int host_to_host(hbm_device *d, void *dst, uint64_t src, uint64_t n) {
  (void)d;
  memcpy(dst, (const void *)(uintptr_t)src, n);
  return HBM_OK;
}

static int host_from_host(hbm_device *d, uint64_t dst, const void *src, uint64_t n) {
  (void)d;
  memcpy((void *)(uintptr_t)dst, src, n);
  return HBM_OK;
}

static void host_destroy(hbm_device *d) {
  host_device *h = (host_device *)d;
  for (size_t i = 0; i < h->nsegs; i++) host_unreserve(d, h->segs[i].addr, h->segs[i].bytes);
  free(h->segs);
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
    .phys_release = host_phys_release,
    .map = host_map,
    .unmap = host_unmap,
    .copy = host_copy,
    .to_host = host_to_host,
    .from_host = host_from_host,
    .destroy = host_destroy,
};

int hbm_host_open(uint64_t capacity, uint64_t granule, hbm_device **out) {
  long page = sysconf(_SC_PAGESIZE);
  if (granule % (uint64_t)page) return hbm_report_error(HBM_EINVAL, "host device: granule must be a multiple of the %ld-byte page", page);
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
  h->base.ops = &host_ops;
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
