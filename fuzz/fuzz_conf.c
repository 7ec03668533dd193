/* fuzz_conf.c: libFuzzer target for the policies' settings parsers (the
 * `--alloc-conf` text), through the public hbm_heap_create() of
 * include/hbm.h.
 *
 * The first byte picks the policy (hbm_policy_names() order), the rest is
 * the settings text. A heap that is created must work: four steps of the
 * same allocations and frees, hbm_check() in each; a refusal must be HBM_EINVAL (bad settings) or
 * HBM_EHOSTMEM, and must be explained through the error handler. Notes (a
 * setting the heap will not read) come only with a heap that was created,
 * each a whole line of text.
 * Seed corpus: fuzz/corpus/conf/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_policies.h"
#include "hbm.h"

static int explained;
static void on_error(int code, const char *message, void *arg) {
  (void)arg;
  (void)code;
  if (message && message[0]) explained = 1;
}

static int noted;
static void on_note(const char *message, void *arg) {
  (void)arg;
  size_t len = strlen(message);
  if (!len || len >= 511 || strchr(message, '\n')) abort(); /* 511 bytes: cut short to the library's buffer */
  noted = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *const *policies;
  int npolicies = fuzz_policies(&policies);
  hbm_set_error_handler(on_error, NULL);
  hbm_set_output_handler(on_note, NULL);
  if (size == 0) return 0;
  const char *policy = policies[data[0] % npolicies];
  char *conf = malloc(size);
  if (!conf) return 0;
  memcpy(conf, data + 1, size - 1);
  conf[size - 1] = 0;
  hbm_device *dev;
  if (hbm_device_open("sim:1GiB", &dev) != HBM_OK) abort();
  hbm_heap *heap = NULL;
  explained = noted = 0;
  int rc = hbm_heap_create(dev, policy, size > 1 ? conf : NULL, &heap);
  if (noted && rc != HBM_OK) abort(); /* a refused text is an error, not a note */
  if (rc == HBM_OK) {
    for (uint64_t step = 1; step <= 4; step++) { /* steps that repeat: zoned plans them */
      uint64_t a[8];
      int n = 0;
      if (hbm_heap_step(heap, step) != HBM_OK) abort();
      for (int i = 0; i < 8; i++)
        if (hbm_alloc(heap, (uint64_t)(i + 1) * 37 << 20, HBM_TAG_ACT, i % 2, &a[n]) == HBM_OK) n++;
      for (int i = 0; i < n; i += 2) hbm_free(heap, a[i]);
      if (hbm_check(heap) != HBM_OK) abort();
      for (int i = 1; i < n; i += 2) hbm_free(heap, a[i]);
    }
    hbm_heap_destroy(heap);
  } else {
    if (rc != HBM_EINVAL && rc != HBM_EHOSTMEM) abort();
    if (rc == HBM_EINVAL && !explained) abort(); /* bad settings must be explained */
  }
  hbm_device_close(dev);
  free(conf);
  return 0;
}
