/* test_host_failure: the host device when the system calls behind it fail,
 * and its own check on a broken device.
 *   1. Open: memfd_create, ftruncate, and the probe of the address space
 *      fail: the open is refused with its error, no device and no file
 *      descriptor left behind.
 *   2. Each call whose mmap or munmap fails (linked with --wrap): a segment
 *      (its reservation, its first piece, a later piece), a reservation, a
 *      map (its first piece, a later piece), an unmap, an unreserve, a
 *      segment's free. Each answers HBM_EHOSTMEM and changes nothing: the
 *      ledger's objects, phys_used and the memfd's runs are as before,
 *      hbm_device_check passes, the bytes of what is mapped are still there,
 *      and the same call then succeeds (a handle's last run alone, too,
 *      mapped past its first two). A failed hole punch (fallocate) is not
 *      the device's concern: the release completes.
 *   3. The host device's check (its runs against the ledger) fires on each
 *      broken field: a segment's memfd offset, its held bytes, a run chain
 *      that loops, a run the ledger does not know.
 * The host device keeps its struct to host.c: this program compiles host.c
 * into itself to reach it (so the library's copy is not linked). */
#include "device/host.c"

#include <dirent.h>
#include <sys/stat.h>

#include "hbm.h"
#include "check_says.h"
#include "testutil.h"

/* ---- failing system calls ------------------------------------------------------------
 * fail_X = n >= 0: the next n calls of X succeed, the one after fails (once);
 * -1: none fails. */
static int fail_mmap = -1, fail_munmap = -1, fail_memfd = -1, fail_ftruncate = -1, fail_fallocate = -1;
static int calls_mmap, calls_munmap;

static int due(int *n) {
  if (*n < 0) return 0;
  if ((*n)-- > 0) return 0;
  return 1; /* *n is -1 now: fails once */
}

void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  calls_mmap++;
  if (due(&fail_mmap)) {
    errno = ENOMEM;
    return MAP_FAILED;
  }
  return __real_mmap(addr, len, prot, flags, fd, off);
}
int __real_munmap(void *addr, size_t len);
int __wrap_munmap(void *addr, size_t len);
int __wrap_munmap(void *addr, size_t len) {
  calls_munmap++;
  if (due(&fail_munmap)) {
    errno = EINVAL;
    return -1;
  }
  return __real_munmap(addr, len);
}
int __real_memfd_create(const char *name, unsigned flags);
int __wrap_memfd_create(const char *name, unsigned flags);
int __wrap_memfd_create(const char *name, unsigned flags) {
  if (due(&fail_memfd)) {
    errno = ENOSYS;
    return -1;
  }
  return __real_memfd_create(name, flags);
}
int __real_ftruncate(int fd, off_t len);
int __wrap_ftruncate(int fd, off_t len);
int __wrap_ftruncate(int fd, off_t len) {
  if (due(&fail_ftruncate)) {
    errno = ENOSPC;
    return -1;
  }
  return __real_ftruncate(fd, len);
}
int __real_fallocate(int fd, int mode, off_t off, off_t len);
int __wrap_fallocate(int fd, int mode, off_t off, off_t len);
int __wrap_fallocate(int fd, int mode, off_t off, off_t len) {
  if (due(&fail_fallocate)) {
    errno = EOPNOTSUPP;
    return -1;
  }
  return __real_fallocate(fd, mode, off, len);
}

/* The error handler's messages are expected here: kept quiet, counted. */
static int errors_said;
static void quiet(int code, const char *message, void *arg) {
  (void)arg, (void)code, (void)message;
  errors_said++;
}

static const uint64_t G = 2ull << 20; /* the granule */

/* ---- 1. open -------------------------------------------------------------------------- */
static void open_fails(void) {
  printf("open:\n");
  int fds = test_dir_entries("/proc/self/fd");
  hbm_device *d = NULL;
  fail_memfd = 0;
  int rc = hbm_host_open(16 * G, G, &d);
  printf("  memfd_create fails: %s\n", hbm_strerror(rc));
  CHECK(rc == HBM_EUNSUPPORTED && d == NULL && fail_memfd == -1);
  fail_ftruncate = 0;
  rc = hbm_host_open(16 * G, G, &d);
  printf("  ftruncate fails: %s\n", hbm_strerror(rc));
  CHECK(rc == HBM_EUNSUPPORTED && d == NULL && fail_ftruncate == -1);
  fail_mmap = 0;
  rc = hbm_host_open(16 * G, G, &d);
  printf("  the probe of the address space fails: %s\n", hbm_strerror(rc));
  CHECK(rc == HBM_EINVAL && d == NULL && fail_mmap == -1);
  CHECK(test_dir_entries("/proc/self/fd") == fds); /* the memfd was closed */
  REQUIRE(hbm_host_open(16 * G, G, &d) == HBM_OK);
  CHECK(hbm_device_check(d, NULL, NULL) == 0);
  hbm_device_close(d);
}

/* ---- 2. the calls ----------------------------------------------------------------------- */
/* What the device holds, to compare before and after a failed call. */
typedef struct state {
  uint64_t phys_used, nsegs, nres, handles, maps, runs, run_bytes, refused;
  uint64_t digest; /* of hbm_device_each's visits */
} state;

static void digest_visit(void *arg, hbm_device_obj kind, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t *h = arg;
  uint64_t v[5] = {kind, a, b, c, d};
  for (int i = 0; i < 5; i++) *h = (*h ^ v[i]) * 0x100000001b3ull;
}

static state state_of(hbm_device *dev) {
  host_device *h = (host_device *)dev;
  state s = {dev->phys_used, h->ledger.nsegs, h->ledger.nres, h->ledger.handles.used, hbm_ordset_count(h->ledger.maps),
             hbm_range_live_blocks(h->phys), hbm_range_live_bytes(h->phys), h->ledger.refused, 0xcbf29ce484222325ull};
  hbm_device_each(dev, digest_visit, &s.digest);
  return s;
}

static uint64_t word(uint64_t at, uint64_t i) { return at * 31 + i * 0x9E3779B97F4A7C15ull; }
static void fill(uint64_t va, uint64_t n, uint64_t seed) {
  uint64_t *w = (uint64_t *)(uintptr_t)va;
  for (uint64_t i = 0; i < n / 8; i++) w[i] = word(seed, i);
}
static uint64_t wrong(uint64_t va, uint64_t n, uint64_t seed) {
  const uint64_t *w = (const uint64_t *)(uintptr_t)va;
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n / 8; i++) bad += w[i] != word(seed, i);
  return bad;
}

/* A failed call: its answer, nothing changed, the device sound. */
static void failed(const char *what, hbm_device *dev, const state *before, int rc, int *left) {
  state after = state_of(dev);
  int same = !memcmp(before, &after, sizeof after);
  int sound = hbm_device_check(dev, NULL, NULL) == 0;
  int ok = rc == HBM_EHOSTMEM && same && sound && *left == -1;
  printf("  %-44s %s, %s, %s\n", what, hbm_strerror(rc), same ? "nothing changed" : "CHANGED",
         sound ? "check passes" : "CHECK FAILS");
  CHECK(ok);
  *left = -1;
}

static void calls_fail(void) {
  printf("calls:\n");
  hbm_device *dev;
  REQUIRE(hbm_host_open(16 * G, G, &dev) == HBM_OK);
  /* scatter the free granules: handles of one granule, every other one
   * released, so that what follows takes several runs */
  uint64_t one[16];
  for (int i = 0; i < 16; i++) REQUIRE(hbm_dev_phys_create(dev, G, &one[i]) == HBM_OK);
  for (int i = 0; i < 16; i += 2) REQUIRE(hbm_dev_phys_release(dev, one[i], G) == HBM_OK);
  /* free: granules 0, 2, 4, .., 14 */
  uint64_t seg, va, hnd;
  state s = state_of(dev);

  /* a segment of three granules: runs 0, 2, 4; mmap 1 reserves, 2.. map each run */
  fail_mmap = 0;
  failed("segment: its reservation's mmap fails", dev, &s, hbm_dev_seg_alloc(dev, 3 * G, 0, &seg), &fail_mmap);
  fail_mmap = 1;
  failed("segment: its first run's mmap fails", dev, &s, hbm_dev_seg_alloc(dev, 3 * G, 0, &seg), &fail_mmap);
  fail_mmap = 3;
  failed("segment: its third run's mmap fails", dev, &s, hbm_dev_seg_alloc(dev, 3 * G, 0, &seg), &fail_mmap);
  REQUIRE(hbm_dev_seg_alloc(dev, 3 * G, 0, &seg) == HBM_OK);
  fill(seg, 3 * G, seg);
  s = state_of(dev);
  fail_munmap = 0;
  failed("segment: its free's munmap fails", dev, &s, hbm_dev_seg_free(dev, seg, 3 * G), &fail_munmap);
  CHECK_EQ_U64(wrong(seg, 3 * G, seg), 0);

  /* a handle of three granules: runs 6, 8, 10 */
  REQUIRE(hbm_dev_phys_create(dev, 3 * G, &hnd) == HBM_OK);
  s = state_of(dev);
  fail_mmap = 0;
  int said = errors_said;
  failed("reserve: its mmap fails", dev, &s, hbm_dev_reserve(dev, 8 * G, &va), &fail_mmap);
  CHECK(errors_said == said + 1); /* and says so */
  REQUIRE(hbm_dev_reserve(dev, 8 * G, &va) == HBM_OK);
  s = state_of(dev);
  fail_mmap = 0;
  failed("map: its first run's mmap fails", dev, &s, hbm_dev_map(dev, va, 3 * G, hnd, 0), &fail_mmap);
  fail_mmap = 1;
  failed("map: its second run's mmap fails", dev, &s, hbm_dev_map(dev, va, 3 * G, hnd, 0), &fail_mmap);
  REQUIRE(hbm_dev_map(dev, va, 3 * G, hnd, 0) == HBM_OK);
  fill(va, 3 * G, hnd);
  s = state_of(dev);
  fail_mmap = 0;
  failed("unmap: its mmap fails", dev, &s, hbm_dev_unmap(dev, va, 3 * G), &fail_mmap);
  CHECK_EQ_U64(wrong(va, 3 * G, hnd), 0); /* still mapped, bytes and all */
  REQUIRE(hbm_dev_unmap(dev, va, 3 * G) == HBM_OK);
  s = state_of(dev);
  fail_munmap = 0;
  failed("unreserve: its munmap fails", dev, &s, hbm_dev_unreserve(dev, va, 8 * G), &fail_munmap);
  REQUIRE(hbm_dev_unreserve(dev, va, 8 * G) == HBM_OK);

  /* the bytes of the handle are still its own: mapped again */
  REQUIRE(hbm_dev_reserve(dev, 4 * G, &va) == HBM_OK);
  REQUIRE(hbm_dev_map(dev, va, 3 * G, hnd, 0) == HBM_OK);
  CHECK_EQ_U64(wrong(va, 3 * G, hnd), 0);
  /* and its third run alone, mapped past the first two */
  REQUIRE(hbm_dev_map(dev, va + 3 * G, G, hnd, 2 * G) == HBM_OK);
  CHECK(!memcmp((const void *)(uintptr_t)(va + 3 * G), (const void *)(uintptr_t)(va + 2 * G), G));
  REQUIRE(hbm_dev_unmap(dev, va + 3 * G, G) == HBM_OK);
  REQUIRE(hbm_dev_unmap(dev, va, 3 * G) == HBM_OK);
  REQUIRE(hbm_dev_unreserve(dev, va, 4 * G) == HBM_OK);

  /* a failed hole punch: the release completes all the same */
  fail_fallocate = 0;
  int rc = hbm_dev_phys_release(dev, hnd, 3 * G);
  printf("  %-44s %s\n", "release: its fallocate fails", hbm_strerror(rc));
  CHECK(rc == HBM_OK && fail_fallocate == -1 && hbm_device_check(dev, NULL, NULL) == 0);
  REQUIRE(hbm_dev_seg_free(dev, seg, 3 * G) == HBM_OK);
  for (int i = 1; i < 16; i += 2) REQUIRE(hbm_dev_phys_release(dev, one[i], G) == HBM_OK);
  CHECK_EQ_U64(dev->phys_used, 0);
  CHECK_EQ_U64(dev->ledger->refused, 0);
  CHECK(hbm_device_check(dev, NULL, NULL) == 0);
  hbm_device_close(dev);
}

/* ---- 3. the host's own check --------------------------------------------------------- */

static void expect_fail(const char *what, hbm_device *dev, const char *want) {
  check_seen s = {{0}, 0};
  int failures = hbm_device_check(dev, check_collect, &s);
  int ok = failures > 0 && strstr(s.all, want) != NULL;
  printf("  %-44s %s\n", what, ok ? "reported" : "NOT REPORTED");
  if (!ok) fprintf(stderr, "%s: %d failure(s), wanted \"%s\"; got:\n%s", what, failures, want, s.all);
  CHECK(ok);
}

static void host_check_fires(void) {
  printf("the host's check:\n");
  hbm_device *dev;
  REQUIRE(hbm_host_open(16 * G, G, &dev) == HBM_OK);
  host_device *h = (host_device *)dev;
  uint64_t one[16], seg, hnd;
  for (int i = 0; i < 16; i++) REQUIRE(hbm_dev_phys_create(dev, G, &one[i]) == HBM_OK);
  for (int i = 0; i <= 4; i += 2) REQUIRE(hbm_dev_phys_release(dev, one[i], G) == HBM_OK);
  REQUIRE(hbm_dev_seg_alloc(dev, G, 0, &seg) == HBM_OK);    /* one of granules 0, 2, 4 */
  REQUIRE(hbm_dev_phys_create(dev, 2 * G, &hnd) == HBM_OK); /* the other two: two runs */
  REQUIRE(hbm_dev_phys_release(dev, one[15], G) == HBM_OK); /* granule 15 free */
  uint64_t sdata = h->ledger.segs[0].data;
  REQUIRE(h->ledger.nsegs == 1 && sdata < 6 * G && hnd < 6 * G && hbm_addrmap_get(&h->next, hnd, &(uint64_t){0}));
  CHECK(hbm_device_check(dev, NULL, NULL) == 0);
  char want[160];

  h->ledger.segs[0].data = 15 * G; /* a free granule */
  expect_fail("a segment's run not live", dev, "host: segment at memfd offset 0x1e00000: its piece at 0x1e00000 is not a live run");
  h->ledger.segs[0].data = sdata;
  CHECK(hbm_device_check(dev, NULL, NULL) == 0);

  h->ledger.segs[0].held = 2 * G;
  snprintf(want, sizeof want, "host: segment at memfd offset %#llx: 0x400000 bytes, its runs hold 0x200000",
           (unsigned long long)sdata);
  expect_fail("a segment's runs shorter than it holds", dev, want);
  h->ledger.segs[0].held = G;
  CHECK(hbm_device_check(dev, NULL, NULL) == 0);

  uint64_t second;
  REQUIRE(hbm_addrmap_get(&h->next, hnd, &second) && second < 6 * G && second != hnd);
  REQUIRE(hbm_addrmap_put(&h->next, second, hnd) == HBM_OK); /* the second run leads back to the first */
  snprintf(want, sizeof want, "host: handle at memfd offset %#llx: its piece at %#llx is not a live run",
           (unsigned long long)hnd, (unsigned long long)second); /* the 16th piece, past the 15 runs live */
  expect_fail("a handle's run chain that loops", dev, want);
  uint64_t v;
  REQUIRE(hbm_addrmap_take(&h->next, second, &v));
  CHECK(hbm_device_check(dev, NULL, NULL) == 0);

  uint64_t off, got;
  REQUIRE(hbm_range_alloc(h->phys, G, 0, &off, &got) == HBM_OK); /* granule 15, a run no one holds */
  expect_fail("a run the ledger does not know", dev,
              "host: 16 runs of 0x2000000 bytes live in the memfd, the ledger holds 15 of 0x1e00000");
  REQUIRE(hbm_range_free(h->phys, off, &got) == HBM_OK);
  CHECK(hbm_device_check(dev, NULL, NULL) == 0);

  REQUIRE(hbm_dev_phys_release(dev, hnd, 2 * G) == HBM_OK);
  REQUIRE(hbm_dev_seg_free(dev, seg, G) == HBM_OK);
  for (int i = 1; i < 15; i += 1 + (i > 4 ? 0 : 1)) REQUIRE(hbm_dev_phys_release(dev, one[i], G) == HBM_OK);
  CHECK(hbm_device_check(dev, NULL, NULL) == 0);
  hbm_device_close(dev);
}

int main(void) {
  hbm_set_error_handler(quiet, NULL);
  open_fails();
  calls_fail();
  host_check_fires();
  printf("test_host_failure: %d messages to the error handler\n", errors_said);
  return test_done("test_host_failure");
}
