/* fuzz_device.c: libFuzzer target for the device spec reader (`--device`,
 * hbm_device_open() of include/hbm.h: KIND:CAPACITY[,granule=SIZE]).
 *
 * The input, NUL-terminated, is the spec. A device that opens has a sane
 * capacity (above zero, whole granules, at most 1 PiB), a power-of-two
 * granule of 4 KiB or more, the kind the spec names, and gives a heap one
 * granule that hbm_check() accepts; a refusal is HBM_EINVAL or
 * HBM_EUNSUPPORTED, explained through the error handler (or HBM_EHOSTMEM).
 * Host devices above 256 MiB are not opened: they are real memory.
 * Seed corpus: fuzz/corpus/device/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"

static int explained;
static void on_error(int code, const char *message, void *arg) {
  (void)arg;
  (void)code;
  if (message && message[0]) explained = 1;
}

/* A host spec asking for more than 256 MiB (or one this cannot tell). */
static int large_host(const char *spec) {
  if (strncmp(spec, "host:", 5) != 0) return 0;
  char size[128];
  size_t n = strcspn(spec + 5, ",");
  if (n >= sizeof size) return 1;
  memcpy(size, spec + 5, n);
  size[n] = 0;
  uint64_t bytes;
  return hbm_size_parse(size, &bytes) == HBM_OK && bytes > (256ull << 20);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hbm_set_error_handler(on_error, NULL);
  char *spec = malloc(size + 1);
  if (!spec) return 0;
  memcpy(spec, data, size);
  spec[size] = 0;
  if (large_host(spec)) {
    free(spec);
    return 0;
  }
  hbm_device *dev = NULL;
  explained = 0;
  int rc = hbm_device_open(spec, &dev);
  if (rc == HBM_OK) {
    hbm_device_caps caps;
    if (hbm_device_get_caps(dev, &caps) != HBM_OK) abort();
    uint64_t g = caps.granule;
    if (g < 4096 || (g & (g - 1)) || !caps.capacity || caps.capacity % g || caps.capacity > (1ull << 50)) abort();
    size_t kl = strlen(caps.kind);
    if (strncmp(spec, caps.kind, kl) != 0 || spec[kl] != ':') abort();
    hbm_heap *heap = NULL;
    if (hbm_heap_create(dev, "bestfit", NULL, &heap) == HBM_OK) {
      uint64_t a;
      if (hbm_alloc(heap, g, HBM_TAG_ACT, 0, &a) != HBM_OK) abort(); /* a whole device has one granule */
      if (hbm_check(heap) != HBM_OK || hbm_free(heap, a) != HBM_OK) abort();
      hbm_heap_destroy(heap);
    }
    hbm_device_close(dev);
  } else {
    if (dev) abort(); /* nothing handed out on a refusal */
    if (rc != HBM_EINVAL && rc != HBM_EUNSUPPORTED && rc != HBM_EHOSTMEM) abort();
    if (rc != HBM_EHOSTMEM && !explained) abort(); /* a bad spec is explained */
  }
  free(spec);
  return 0;
}
