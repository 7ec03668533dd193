/* test_host: the host device moves real bytes. Granules are mapped for real
 * (the same physical granule seen through two virtual addresses; stitching of
 * non-adjacent granules into one range), a heap on it keeps every block's
 * contents through 1e5 random operations (filled on alloc, verified on free),
 * PyTorch's expandable segments give back handle 0 as any other, and handles
 * and segments larger than any free run of the device's memory are made, and
 * mapped whole or in part. What the host holds for the device goes back: a
 * freed run's memory, a reservation's and an open's probe's address space,
 * and at close the segments and reservations a policy left. */
#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device/contract.h"
#include "device/device.h"
#include "hbm.h"
#include "policy/pytorch_alloc.h"
#include "policy/pytorch_ref.h"
#include "testutil.h"

static uint64_t word(uint64_t addr, uint64_t i) { return addr * 31 + i * 0x9E3779B97F4A7C15ull; }

/* The host device's first handle is 0, which sim's never is. PyTorch's
 * expandable segments, model and reference, keep it through an expansion the
 * device cannot finish: every page made is given back, handle 0 with them, and
 * the device refuses nothing. A 70 MiB request on 64 MiB makes three 20 MiB
 * pages and fails at the fourth. */
static void expandable_keeps_handle_zero(void) {
  hbm_device *dev;
  hbm_heap *h;
  uint64_t a;
  CHECK(hbm_device_open("host:64MiB", &dev) == HBM_OK);
  CHECK(hbm_heap_create(dev, "expandable", NULL, &h) == HBM_OK);
  CHECK(hbm_alloc(h, 70ull << 20, HBM_TAG_ACT, 0, &a) == HBM_ENOMEM);
  CHECK_EQ_U64(dev->ledger->refused, 0);
  CHECK_EQ_U64(dev->phys_used, 0);
  CHECK(hbm_alloc(h, 60ull << 20, HBM_TAG_ACT, 0, &a) == HBM_OK); /* every page, handle 0 too, can be made again */
  CHECK(hbm_free(h, a) == HBM_OK);
  CHECK(hbm_check(h) == HBM_OK);
  hbm_heap_destroy(h);
  CHECK_EQ_U64(dev->ledger->refused, 0);
  CHECK_EQ_U64(dev->phys_used, 0);
  hbm_device_close(dev);

  CHECK(hbm_device_open("host:64MiB", &dev) == HBM_OK);
  hbm_pt_conf conf;
  hbm_pt_conf_default(&conf, 1);
  hbm_ptref *ref;
  uint64_t block;
  CHECK(hbm_ptref_create(dev, &conf, &ref) == HBM_OK);
  CHECK(hbm_ptref_alloc(ref, 70ull << 20, 0, &a, &block) == HBM_ENOMEM);
  CHECK_EQ_U64(dev->ledger->refused, 0);
  CHECK_EQ_U64(dev->phys_used, 0);
  CHECK(hbm_ptref_alloc(ref, 60ull << 20, 0, &a, &block) == HBM_OK); /* kept: destroy gives its pages back */
  CHECK(hbm_ptref_check(ref, NULL, NULL) == HBM_OK);
  hbm_ptref_destroy(ref);
  CHECK_EQ_U64(dev->ledger->refused, 0);
  CHECK_EQ_U64(dev->phys_used, 0);
  hbm_device_close(dev);
}

static int dev_check(hbm_device *dev) { return hbm_device_check(dev, NULL, NULL); }

/* Device memory needs no physical contiguity, and neither does the host
 * device's: with its free granules scattered, a handle and a segment larger
 * than any free run are made of several runs, hold their bytes through every
 * mapping, and give every run back. caching then completes what it completes
 * on sim: 32 MiB in the two 16 MiB holes of host:64MiB. */
static void scattered_granules(void) {
  const uint64_t MiB = 1ull << 20;
  hbm_device *dev;
  CHECK(hbm_device_open("host:64MiB", &dev) == HBM_OK);
  uint64_t seg[4];
  for (int i = 0; i < 4; i++) CHECK(hbm_dev_seg_alloc(dev, 16 * MiB, 0, &seg[i]) == HBM_OK);
  CHECK(hbm_dev_seg_free(dev, seg[0], 16 * MiB) == HBM_OK);
  CHECK(hbm_dev_seg_free(dev, seg[2], 16 * MiB) == HBM_OK);
  uint64_t handle, va, big;
  CHECK(hbm_dev_phys_create(dev, 24 * MiB, &handle) == HBM_OK); /* 16 MiB + 8 MiB */
  CHECK(dev_check(dev) == 0);
  CHECK(hbm_dev_reserve(dev, 48 * MiB, &va) == HBM_OK);
  CHECK(hbm_dev_map(dev, va, 24 * MiB, handle, 0) == HBM_OK);
  CHECK(hbm_dev_map(dev, va + 24 * MiB, 12 * MiB, handle, 10 * MiB) == HBM_OK); /* across the pieces' seam */
  uint64_t *w = (uint64_t *)(uintptr_t)va;
  for (uint64_t i = 0; i < 24 * MiB / 8; i++) w[i] = word(handle, i);
  uint64_t bad = 0;
  for (uint64_t i = 0; i < 12 * MiB / 8; i++) bad += w[24 * MiB / 8 + i] != word(handle, 10 * MiB / 8 + i);
  CHECK_EQ_U64(bad, 0);
  /* within the first piece, and up to the seam: the second piece is not
   * reached */
  CHECK(hbm_dev_map(dev, va + 36 * MiB, 8 * MiB, handle, 0) == HBM_OK);
  CHECK(hbm_dev_map(dev, va + 44 * MiB, 4 * MiB, handle, 12 * MiB) == HBM_OK);
  for (uint64_t i = 0; i < 12 * MiB / 8; i++) /* handle bytes 0..8 MiB, then 12..16 MiB */
    bad += w[36 * MiB / 8 + i] != word(handle, i < MiB ? i : i + MiB / 2);
  CHECK_EQ_U64(bad, 0);
  CHECK(dev_check(dev) == 0);
  CHECK(hbm_dev_seg_alloc(dev, 8 * MiB, 0, &big) == HBM_OK); /* the last 8 MiB, in the second hole */
  CHECK(hbm_dev_seg_free(dev, big, 8 * MiB) == HBM_OK);
  CHECK(hbm_dev_unmap(dev, va, 48 * MiB) == HBM_OK);
  CHECK(hbm_dev_unreserve(dev, va, 48 * MiB) == HBM_OK);
  CHECK(hbm_dev_phys_release(dev, handle, 24 * MiB) == HBM_OK);
  CHECK(hbm_dev_seg_alloc(dev, 32 * MiB, 0, &big) == HBM_OK); /* a segment over both holes */
  CHECK(dev_check(dev) == 0);
  w = (uint64_t *)(uintptr_t)big;
  for (uint64_t i = 0; i < 32 * MiB / 8; i++) w[i] = word(big, i);
  bad = 0;
  for (uint64_t i = 0; i < 32 * MiB / 8; i++) bad += w[i] != word(big, i);
  CHECK_EQ_U64(bad, 0);
  CHECK(hbm_dev_seg_free(dev, big, 32 * MiB) == HBM_OK);
  CHECK(hbm_dev_seg_free(dev, seg[1], 16 * MiB) == HBM_OK);
  CHECK(hbm_dev_seg_free(dev, seg[3], 16 * MiB) == HBM_OK);
  CHECK(dev_check(dev) == 0);
  CHECK_EQ_U64(dev->ledger->refused, 0);
  CHECK_EQ_U64(dev->phys_used, 0);
  hbm_device_close(dev);

  hbm_heap *h;
  uint64_t a[4], b;
  CHECK(hbm_device_open("host:64MiB", &dev) == HBM_OK);
  CHECK(hbm_heap_create(dev, "caching", NULL, &h) == HBM_OK);
  for (int i = 0; i < 4; i++) CHECK(hbm_alloc(h, 16 * MiB, HBM_TAG_ACT, 0, &a[i]) == HBM_OK);
  CHECK(hbm_free(h, a[0]) == HBM_OK);
  CHECK(hbm_free(h, a[2]) == HBM_OK);
  CHECK(hbm_alloc(h, 32 * MiB, HBM_TAG_ACT, 0, &b) == HBM_OK); /* releases its cache and retries, as on sim */
  CHECK(hbm_check(h) == HBM_OK);
  hbm_heap_destroy(h);
  CHECK_EQ_U64(dev->phys_used, 0);
  hbm_device_close(dev);
}

/* The device's memory file (a memfd), found among the process's open files;
 * -1 where /proc cannot say. */
static int memory_file(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  for (struct dirent *e; found < 0 && (e = readdir(d));) {
    char path[300], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = 0;
    if (strstr(target, "memfd:hbm-host-device")) found = atoi(e->d_name);
  }
  closedir(d);
  return found;
}

/* What the host itself holds for a device: a freed run's memory goes back
 * to it (punched out of the memory file); a reservation is address space the
 * process owns to its last byte, and all of it goes back when unreserved;
 * opening a device gives back the address space it probed for; and a granule
 * that is not a multiple of the page is refused. */
static void host_resources(void) {
  const uint64_t MiB = 1ull << 20;
  hbm_device *dev;
  CHECK(hbm_device_open("host:64MiB", &dev) == HBM_OK);
  int fd = memory_file();
  uint64_t seg;
  CHECK(hbm_dev_seg_alloc(dev, 32 * MiB, 0, &seg) == HBM_OK);
  memset((void *)(uintptr_t)seg, 0x5a, 32 * MiB);
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0) {
    CHECK((uint64_t)st.st_blocks * 512 >= 32 * MiB);
    CHECK(hbm_dev_seg_free(dev, seg, 32 * MiB) == HBM_OK);
    CHECK(fstat(fd, &st) == 0);
    CHECK((uint64_t)st.st_blocks * 512 < MiB); /* punched out */
  } else {
    printf("test_host: the memory file is not in /proc/self/fd: its punched runs go unchecked\n");
    CHECK(hbm_dev_seg_free(dev, seg, 32 * MiB) == HBM_OK);
  }
  const uint64_t g = dev->caps.granule, page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t kept; /* a segment left at close: its mapping goes with the device */
  CHECK(hbm_dev_seg_alloc(dev, 16 * MiB, 0, &kept) == HBM_OK);
  memset((void *)(uintptr_t)kept, 0x5a, 16 * MiB);
  hbm_device_close(dev);
  void *p = mmap((void *)(uintptr_t)kept, 16 * MiB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  CHECK(p != MAP_FAILED);
  if (p != MAP_FAILED) munmap(p, 16 * MiB);
  /* Every page of a reservation is the process's: none can be mapped anew.
   * With 8 MiB granules, since the kernel aligns large mappings to 2 MiB
   * itself: most of mmap's addresses need the extra granule's room. */
  CHECK(hbm_device_open("host:64MiB,granule=8MiB", &dev) == HBM_OK);
  const uint64_t big_g = dev->caps.granule;
  for (uint64_t k = 1; k <= 8; k++) {
    void *offset = mmap(NULL, k * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); /* moves mmap's next address */
    uint64_t va;
    CHECK(hbm_dev_reserve(dev, k * big_g, &va) == HBM_OK);
    for (uint64_t at = va; at < va + k * big_g; at += big_g / 2) {
      p = mmap((void *)(uintptr_t)at, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (p != MAP_FAILED && p != (void *)(uintptr_t)at) { /* a kernel before 4.17 took the flag as a hint */
        munmap(p, page);
        continue;
      }
      if (p != MAP_FAILED) {
        fprintf(stderr, "reservation at %#llx: its page at %#llx was free\n", (unsigned long long)va,
                (unsigned long long)at);
        CHECK(0);
        munmap(p, page);
      }
    }
    void *last = (void *)(uintptr_t)(va + k * big_g - page);
    p = mmap(last, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    CHECK(p != last); /* the last page too */
    if (p != MAP_FAILED) munmap(p, page);
    CHECK(hbm_dev_unreserve(dev, va, k * big_g) == HBM_OK);
    p = mmap((void *)(uintptr_t)va, k * big_g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    CHECK(p != MAP_FAILED); /* given back whole */
    if (p != MAP_FAILED) munmap(p, k * big_g);
    if (offset != MAP_FAILED) munmap(offset, k * page);
  }
  hbm_device_close(dev);
  CHECK(hbm_host_open(64 * MiB, page / 2, &dev) == HBM_EINVAL);
  CHECK(hbm_host_open(64 * MiB, g + page / 2, &dev) == HBM_EINVAL);
  /* A host with 128 TiB of address space fits one 48 TiB device's probe,
   * not three: each open must give its probe back, and each close the 40 TiB
   * reservation left behind. (Where the first open fails, as under valgrind,
   * there is nothing to see.) */
  if (hbm_device_open("host:48TiB", &dev) == HBM_OK) {
    hbm_device_close(dev);
    for (int i = 0; i < 3; i++) {
      int r = hbm_device_open("host:48TiB", &dev);
      CHECK(r == HBM_OK);
      if (r != HBM_OK) break;
      uint64_t left;
      CHECK(hbm_dev_reserve(dev, 40ull << 40, &left) == HBM_OK);
      hbm_device_close(dev);
    }
  }
}

int main(void) {
  uint64_t seed = test_seed("test_host"), rng = seed;
  hbm_device *dev;
  if (hbm_device_open("host:256MiB", &dev) != HBM_OK) {
    printf("test_host: skipped: this kernel has no memfd_create\n");
    return TEST_SKIP;
  }
  const uint64_t g = dev->caps.granule;
  CHECK(dev->caps.host_visible && dev->caps.vmm && dev->caps.d2d_copy);
  CHECK(!strcmp(dev->caps.kind, "host")); /* replay names recorded addresses only to sim */

  /* Reservations start at a granule boundary, as the contract's maps need,
   * whatever mmap hands out: after a page-sized mapping too (the kernel may
   * align large mappings itself; valgrind's does not). */
  void *page = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  uint64_t odd[3];
  for (int i = 0; i < 3; i++) {
    CHECK(hbm_dev_reserve(dev, (uint64_t)(i + 1) * g, &odd[i]) == HBM_OK);
    CHECK(odd[i] % g == 0);
  }
  for (int i = 0; i < 3; i++) CHECK(hbm_dev_unreserve(dev, odd[i], (uint64_t)(i + 1) * g) == HBM_OK);
  if (page != MAP_FAILED) munmap(page, 4096);

  /* Stitching: granules 0 and 2 of physical memory mapped back to back. */
  uint64_t va, p1, p2, p3;
  CHECK(hbm_dev_reserve(dev, 4 * g, &va) == HBM_OK);
  CHECK(hbm_dev_phys_create(dev, g, &p1) == HBM_OK);
  CHECK(hbm_dev_phys_create(dev, g, &p2) == HBM_OK);
  CHECK(hbm_dev_phys_create(dev, g, &p3) == HBM_OK);
  CHECK(hbm_dev_map(dev, va, g, p1, 0) == HBM_OK);
  CHECK(hbm_dev_map(dev, va + g, g, p3, 0) == HBM_OK);
  memset((void *)(uintptr_t)va, 0xab, 2 * g); /* one write across the seam */
  CHECK(((unsigned char *)(uintptr_t)va)[2 * g - 1] == 0xab);
  /* The same physical granule seen at a second address holds the same bytes. */
  CHECK(hbm_dev_map(dev, va + 2 * g, g, p3, 0) == HBM_OK);
  CHECK(((unsigned char *)(uintptr_t)(va + 2 * g))[17] == 0xab);
  ((unsigned char *)(uintptr_t)(va + 2 * g))[17] = 0x11;
  CHECK(((unsigned char *)(uintptr_t)(va + g))[17] == 0x11);
  CHECK(hbm_dev_unmap(dev, va, 3 * g) == HBM_OK);
  /* unmapped, the range is bare reservation again: none of its pages resident */
  unsigned char resident[3 * 512];
  if (3 * g / (uint64_t)sysconf(_SC_PAGESIZE) <= sizeof resident && mincore((void *)(uintptr_t)va, 3 * g, resident) == 0)
    for (uint64_t i = 0; i < 3 * g / (uint64_t)sysconf(_SC_PAGESIZE); i++) CHECK(!(resident[i] & 1));
  CHECK(dev->phys_used == 3 * g);
  CHECK(hbm_dev_phys_release(dev, p1, g) == HBM_OK);
  CHECK(hbm_dev_phys_release(dev, p2, g) == HBM_OK);
  CHECK(hbm_dev_phys_release(dev, p3, g) == HBM_OK);
  CHECK(hbm_dev_unreserve(dev, va, 4 * g) == HBM_OK);
  CHECK(dev->phys_used == 0);
  /* Capacity is enforced. */
  uint64_t big;
  CHECK(hbm_dev_phys_create(dev, 512ull << 20, &big) == HBM_ENOMEM);

  /* Data integrity through a heap on the device. */
  hbm_heap *h;
  CHECK(hbm_heap_create(dev, "bestfit", NULL, &h) == HBM_OK);
  enum { MAXLIVE = 256 };
  uint64_t addr[MAXLIVE], size[MAXLIVE], verified = 0, ops = (uint64_t)(100000 * test_scale());
  int n = 0;
  for (uint64_t op = 0; op < ops; op++) {
    if (n < MAXLIVE && (n == 0 || test_rand_below(&rng, 100) < 52)) {
      uint64_t s = 8 + test_rand_below(&rng, test_rand_below(&rng, 8) ? 64 << 10 : 4 << 20);
      if (hbm_alloc(h, s, HBM_TAG_ACT, 0, &addr[n]) != HBM_OK) continue;
      size[n] = s;
      uint64_t *w = (uint64_t *)(uintptr_t)addr[n];
      for (uint64_t i = 0; i < s / 8; i++) w[i] = word(addr[n], i);
      n++;
    } else {
      int k = (int)test_rand_below(&rng, (uint64_t)n);
      const uint64_t *w = (const uint64_t *)(uintptr_t)addr[k];
      for (uint64_t i = 0; i < size[k] / 8; i++)
        if (w[i] != word(addr[k], i)) {
          fprintf(stderr, "block at %#llx lost its contents at word %llu (op %llu, seed %llu)\n",
                  (unsigned long long)addr[k], (unsigned long long)i, (unsigned long long)op, (unsigned long long)seed);
          return 1;
        }
      verified++;
      CHECK(hbm_free(h, addr[k]) == HBM_OK);
      addr[k] = addr[--n];
      size[k] = size[n];
    }
  }
  CHECK(hbm_check(h) == HBM_OK);
  hbm_heap_destroy(h);
  hbm_device_close(dev);
  expandable_keeps_handle_zero();
  scattered_granules();
  host_resources();
  printf("test_host: %llu operations, %llu blocks verified on free\n", (unsigned long long)ops, (unsigned long long)verified);
  return test_done("test_host");
}
