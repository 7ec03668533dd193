/* device.h: the contract every backend implements (docs/design.md §3).
 *
 * A backend hands out two things: address ranges (virtual space, costless) and
 * physical memory (what capacity counts). Backends with virtual-memory mapping
 * (vmm) let physical granules be mapped anywhere in a reserved range; those
 * without offer only seg_alloc: physical memory at an address of their choosing.
 *
 * Preconditions stated once, for every function below:
 *   - sizes and offsets passed to reserve/create/map are multiples of granule;
 *   - map targets lie inside a range returned by reserve and are unmapped;
 *   - every call that reaches the device runtime counts one backend call.
 * Errors: HBM_ENOMEM when physical capacity would be exceeded, HBM_EUNSUPPORTED
 * when the backend lacks the capability, HBM_EINVAL for a call that breaks
 * the contract (where the backend can tell); on error nothing changed.
 *
 * The full contract, as every device enforces it call by call through its
 * ledger (contract.h; sim.c's opening comment lists the rules): a map lies
 * inside one reservation, over no other mapping, inside its handle; an unmap
 * covers whole mappings; a reservation is freed whole and with nothing mapped
 * in it; a handle is released whole and unmapped; a segment is freed at its
 * address and size; copies touch only device memory (a segment, or
 * mappings). The sim and host devices share that one ledger, so both refuse
 * the same calls with the same messages; the host device does its mmap,
 * munmap and fallocate only for a call the ledger accepted, so a broken call
 * never touches the process's memory.
 */
#ifndef HBM_DEVICE_H
#define HBM_DEVICE_H

#include <pthread.h>

#include "hbm.h"

typedef struct hbm_device_ops {
  const char *kind;
  /* Physical memory at an address the backend picks (cudaMalloc-like).
   * `hint`, when non-zero, asks for that address (replay of recorded segments);
   * the backend honours it when the range is unused, else picks another. */
  int (*seg_alloc)(hbm_device *dev, uint64_t size, uint64_t hint, uint64_t *addr);
  int (*seg_free)(hbm_device *dev, uint64_t addr, uint64_t size);
  /* Virtual-memory mapping (vmm devices only). */
  int (*reserve)(hbm_device *dev, uint64_t size, uint64_t *base);
  int (*unreserve)(hbm_device *dev, uint64_t base, uint64_t size);
  int (*phys_create)(hbm_device *dev, uint64_t size, uint64_t *handle);
  int (*phys_release)(hbm_device *dev, uint64_t handle, uint64_t size);
  int (*map)(hbm_device *dev, uint64_t va, uint64_t size, uint64_t handle, uint64_t offset);
  int (*unmap)(hbm_device *dev, uint64_t va, uint64_t size);
  /* Copies n bytes, overlapping ranges allowed (memmove semantics). */
  int (*copy)(hbm_device *dev, uint64_t dst, uint64_t src, uint64_t n);
  /* Copies n bytes between device memory and host memory (cudaMemcpy D2H,
   * H2D): data can wait in host memory while its device memory is freed. */
  int (*to_host)(hbm_device *dev, void *dst, uint64_t src, uint64_t n);
  int (*from_host)(hbm_device *dev, uint64_t dst, const void *src, uint64_t n);
  /* Room in the backend's own bookkeeping (beyond the ledger's) for the next
   * `handles` phys_create calls (hbm_dev_prepare). NULL: it needs none. */
  int (*prepare)(hbm_device *dev, uint64_t handles);
  /* Verifies the backend's own bookkeeping; returns the number of failures,
   * each passed to report. NULL: the backend keeps none worth checking. */
  int (*check)(const hbm_device *dev, void (*report)(void *arg, const char *message), void *arg);
  void (*destroy)(hbm_device *dev);
} hbm_device_ops;

/* Invariant: 0 <= phys_used <= caps.capacity; phys_used is the sum of live
 * seg_alloc sizes and live phys_create sizes. */
struct hbm_device {
  const hbm_device_ops *ops;
  hbm_device_caps caps;
  uint64_t phys_used;     /* physical bytes held by all clients */
  uint64_t peak_phys_used;
  uint64_t backend_calls;
  pthread_mutex_t lock;   /* held through every heap call on this device: heaps that share it take turns */
  uint64_t *holder;       /* while a heap's call runs, its count of the physical bytes it holds: claims add, unclaims take */
  void *impl;             /* backend private state */
  struct hbm_ledger *ledger; /* what the device holds, and the contract's rules (contract.h); every backend keeps one */
};

/* Sets up dev->lock as each backend's open must: recursive, so a hook called
 * under it (a relocation callback, a scan visitor) may still read the
 * device's counters or call another heap on the device. */
void hbm_device_lock_init(hbm_device *dev);

int hbm_sim_open(uint64_t capacity, uint64_t granule, hbm_device **out);
/* A sim device whose own addresses start at `base` (replaying a recording
 * keeps them clear of the recorded ones). HBM_EINVAL for a base past the
 * address space's end (HBM_LEDGER_VA_END). */
int hbm_sim_open_at(uint64_t capacity, uint64_t granule, uint64_t base, hbm_device **out);
/* Replaying a recording: the next reserve() on this sim device returns addr,
 * as the recording shows, even over another reservation (a recorded
 * reservation's unused tail may reach over later recorded addresses).
 * Allowed: that reservation may overlap other reservations (a mapping must
 * still lie inside one of them, and mappings stay disjoint); later plain
 * reservations stay clear of it. Refused (HBM_EINVAL): an address that is not
 * granule-aligned, a range reaching past 2^63 (the sim address space), or one
 * overlapping a live segment. The next reserve uses addr up, whether it
 * succeeds or not. HBM_EINVAL for a device that is not sim. */
int hbm_sim_reserve_next_at(hbm_device *dev, uint64_t addr);
/* 1 if a reserve of `size` at addr named so would be taken now (aligned, inside
 * the address space, over no live segment); 0 otherwise or not a sim device. */
int hbm_sim_reserve_can_take(const hbm_device *dev, uint64_t addr, uint64_t size);
/* The same, and over no live reservation either. */
int hbm_sim_reserve_is_clear(const hbm_device *dev, uint64_t addr, uint64_t size);
/* on = 0: this sim device's ledger takes handles, mappings and copies on
 * trust (segments and reservations stay tracked, with every rule on them):
 * no call is refused for them and no check sees them. For timing a policy
 * alone: the ledger's bookkeeping of each call costs as much as a policy's
 * own work on a trace that makes a call every few events, and a real device
 * keeps its own. Only before the device has created a handle (HBM_EINVAL
 * then, or for a device that is not sim). */
int hbm_sim_track_mappings(hbm_device *dev, int on);
/* Calls the device refused for breaking the contract (0 for a device that
 * keeps no ledger): each also went to the error handler with its reason. */
uint64_t hbm_device_refused(const hbm_device *dev);
/* Visits the device's ledger (contract.h) in order: segments by address,
 * reservations by (address, size), handles (a = id, b = size, c = bytes
 * mapped) in no set order, mappings by address (c = handle, d = offset).
 * HBM_EINVAL for a device that keeps no ledger. Tests compare it with a
 * reference; replay checks that a destroyed policy left nothing. */
typedef enum { HBM_DEV_SEGMENT, HBM_DEV_RESERVATION, HBM_DEV_HANDLE, HBM_DEV_MAPPING } hbm_device_obj;
typedef void hbm_device_visit_fn(void *arg, hbm_device_obj kind, uint64_t a, uint64_t b, uint64_t c, uint64_t d);
int hbm_device_each(const hbm_device *dev, hbm_device_visit_fn *visit, void *arg);
int hbm_host_open(uint64_t capacity, uint64_t granule, hbm_device **out);

/* Runs the device's checks: its ledger's (contract.h), then the backend's own
 * (ops->check); the number of failures, each passed to report. The caller
 * holds dev->lock. */
int hbm_device_check(const hbm_device *dev, void (*report)(void *arg, const char *message), void *arg);

/* Accounting helpers used by backends: claim fails with HBM_ENOMEM when the
 * capacity would be exceeded. */
int hbm_device_claim(hbm_device *dev, uint64_t size);
void hbm_device_unclaim(hbm_device *dev, uint64_t size);

/* Makes room in the device's bookkeeping (host memory) so that the next
 * `handles` phys_create and `maps` map calls cannot fail for host memory:
 * a policy that must not stop half way through a remap (re-chunking, a
 * stitch) prepares first, while a failure still changes nothing. Not a
 * backend call. HBM_OK or HBM_EHOSTMEM. */
int hbm_dev_prepare(hbm_device *d, uint64_t handles, uint64_t maps);

/* Convenience wrappers that check the capability and count the call. */
static inline int hbm_dev_seg_alloc(hbm_device *d, uint64_t size, uint64_t hint, uint64_t *addr) {
  d->backend_calls++;
  return d->ops->seg_alloc(d, size, hint, addr);
}
static inline int hbm_dev_seg_free(hbm_device *d, uint64_t addr, uint64_t size) {
  d->backend_calls++;
  return d->ops->seg_free(d, addr, size);
}
static inline int hbm_dev_reserve(hbm_device *d, uint64_t size, uint64_t *base) {
  if (!d->ops->reserve) return HBM_EUNSUPPORTED;
  d->backend_calls++;
  return d->ops->reserve(d, size, base);
}
static inline int hbm_dev_unreserve(hbm_device *d, uint64_t base, uint64_t size) {
  if (!d->ops->unreserve) return HBM_EUNSUPPORTED;
  d->backend_calls++;
  return d->ops->unreserve(d, base, size);
}
static inline int hbm_dev_phys_create(hbm_device *d, uint64_t size, uint64_t *handle) {
  if (!d->ops->phys_create) return HBM_EUNSUPPORTED;
  d->backend_calls++;
  return d->ops->phys_create(d, size, handle);
}
static inline int hbm_dev_phys_release(hbm_device *d, uint64_t handle, uint64_t size) {
  if (!d->ops->phys_release) return HBM_EUNSUPPORTED;
  d->backend_calls++;
  return d->ops->phys_release(d, handle, size);
}
static inline int hbm_dev_map(hbm_device *d, uint64_t va, uint64_t size, uint64_t handle,
                              uint64_t offset) {
  if (!d->ops->map) return HBM_EUNSUPPORTED;
  d->backend_calls++;
  return d->ops->map(d, va, size, handle, offset);
}
static inline int hbm_dev_unmap(hbm_device *d, uint64_t va, uint64_t size) {
  if (!d->ops->unmap) return HBM_EUNSUPPORTED;
  d->backend_calls++;
  return d->ops->unmap(d, va, size);
}
static inline int hbm_dev_copy(hbm_device *d, uint64_t dst, uint64_t src, uint64_t n) {
  if (!d->ops->copy) return HBM_EUNSUPPORTED;
  return d->ops->copy(d, dst, src, n);
}
static inline int hbm_dev_to_host(hbm_device *d, void *dst, uint64_t src, uint64_t n) {
  if (!d->ops->to_host) return HBM_EUNSUPPORTED;
  return d->ops->to_host(d, dst, src, n);
}
static inline int hbm_dev_from_host(hbm_device *d, uint64_t dst, const void *src, uint64_t n) {
  if (!d->ops->from_host) return HBM_EUNSUPPORTED;
  return d->ops->from_host(d, dst, src, n);
}

#endif
