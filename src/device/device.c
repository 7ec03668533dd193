/* device.c: opening a device from its spec string, and shared accounting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "device/contract.h"
#include "device/device.h"

#define DEFAULT_GRANULE (2ull << 20) /* CUDA's and CANN's mapping granule */

int hbm_device_claim(hbm_device *dev, uint64_t size) {
  if (size > dev->caps.capacity || dev->phys_used > dev->caps.capacity - size) return HBM_ENOMEM;
  dev->phys_used += size;
  if (dev->phys_used > dev->peak_phys_used) dev->peak_phys_used = dev->phys_used;
  if (dev->holder) *dev->holder += size;
  return HBM_OK;
}

void hbm_device_unclaim(hbm_device *dev, uint64_t size) {
  dev->phys_used = size <= dev->phys_used ? dev->phys_used - size : 0;
  if (dev->holder) *dev->holder = size <= *dev->holder ? *dev->holder - size : 0;
}

int hbm_dev_prepare(hbm_device *d, uint64_t handles, uint64_t maps) {
  int rc = d->ledger ? hbm_ledger_prepare(d->ledger, handles, maps) : HBM_OK;
  return rc == HBM_OK && d->ops->prepare ? d->ops->prepare(d, handles) : rc;
}

/* spec: KIND:CAPACITY[,granule=SIZE] */
int hbm_device_open(const char *spec, hbm_device **out) {
  if (!spec || !out) return HBM_EINVAL;
  char kind[16], rest[128];
  const char *colon = strchr(spec, ':');
  if (!colon || strlen(colon + 1) >= sizeof rest)
    return hbm_report_error(HBM_EINVAL, "device '%s': expected KIND:CAPACITY, e.g. sim:96GiB or host:4GiB", spec);
  if ((size_t)(colon - spec) >= sizeof kind) /* longer than any kind there is */
    return hbm_report_error(HBM_EUNSUPPORTED, "device '%s': unknown kind '%.*s' (known: sim, host)", spec,
                            (int)(colon - spec), spec);
  memcpy(kind, spec, (size_t)(colon - spec));
  kind[colon - spec] = 0;
  /* The kind first: 'cuda:0' is a device this build cannot open, whatever
   * follows the colon, not a bad capacity. */
  if (strcmp(kind, "sim") && strcmp(kind, "host"))
    return hbm_report_error(HBM_EUNSUPPORTED, "device '%s': unknown kind '%s' (known: sim, host)", spec, kind);
  strcpy(rest, colon + 1);
  uint64_t granule = DEFAULT_GRANULE, capacity;
  char *opt = strchr(rest, ',');
  if (opt) {
    *opt++ = 0;
    if (strncmp(opt, "granule=", 8) != 0 || hbm_size_parse(opt + 8, &granule) != HBM_OK ||
        !hbm_is_pow2(granule) || granule < 4096)
      return hbm_report_error(HBM_EINVAL, "device '%s': expected ,granule=SIZE (a power of two >= 4KiB)", spec);
  }
  if (hbm_size_parse(rest, &capacity) != HBM_OK || capacity == 0 || capacity > HBM_MAX_SIZE)
    return hbm_report_error(HBM_EINVAL, "device '%s': capacity '%s' is not a size between one granule (%llu B) and 1 PiB",
                            spec, rest, (unsigned long long)granule); /* the least a device has, as below */
  capacity = capacity / granule * granule;
  if (capacity == 0)
    return hbm_report_error(HBM_EINVAL, "device '%s': capacity '%s' is smaller than one granule (%llu B)", spec,
                            rest, (unsigned long long)granule);
  return !strcmp(kind, "sim") ? hbm_sim_open(capacity, granule, out) : hbm_host_open(capacity, granule, out);
}

void hbm_device_close(hbm_device *dev) {
  if (dev) dev->ops->destroy(dev);
}

int hbm_device_get_caps(const hbm_device *dev, hbm_device_caps *caps) {
  if (!dev || !caps) return HBM_EINVAL;
  *caps = dev->caps;
  return HBM_OK;
}

int hbm_device_check(const hbm_device *dev, void (*report)(void *arg, const char *message), void *arg) {
  if (!dev) return 0;
  int failures = dev->ledger ? hbm_ledger_check(dev->ledger, dev->phys_used, report, arg) : 0;
  return failures + (dev->ops->check ? dev->ops->check(dev, report, arg) : 0);
}

uint64_t hbm_device_refused(const hbm_device *dev) { return dev && dev->ledger ? dev->ledger->refused : 0; }

int hbm_device_each(const hbm_device *dev, hbm_device_visit_fn *visit, void *arg) {
  if (!dev || !dev->ledger || !visit) return HBM_EINVAL;
  hbm_ledger_each(dev->ledger, visit, arg);
  return HBM_OK;
}

void hbm_device_lock_init(hbm_device *dev) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&dev->lock, &attr);
  pthread_mutexattr_destroy(&attr);
}

/* Read under the device's lock: another thread's heap may be counting. */
static uint64_t read_locked(const hbm_device *dev, const uint64_t *field) {
  pthread_mutex_t *lock = &((hbm_device *)dev)->lock;
  pthread_mutex_lock(lock);
  uint64_t v = *field;
  pthread_mutex_unlock(lock);
  return v;
}
uint64_t hbm_device_backend_calls(const hbm_device *dev) { return dev ? read_locked(dev, &dev->backend_calls) : 0; }
uint64_t hbm_device_peak_used(const hbm_device *dev) { return dev ? read_locked(dev, &dev->peak_phys_used) : 0; }
