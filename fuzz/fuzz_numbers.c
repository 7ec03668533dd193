/* fuzz_numbers.c: libFuzzer target for the number readers every text input
 * and command line goes through: hbm_count_parse() and hbm_size_parse() of
 * include/hbm.h.
 *
 * The input, NUL-terminated, goes to both. Properties: an accepted count
 * reads back the same from its plain digits; plain digits are read exactly
 * as strtoull reads them (refused past 2^64 - 1); a count in binary units
 * ("16Mi") is the size in the same units ("16MiB"). Seed corpus:
 * fuzz/corpus/numbers/. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"

static int all_digits(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (*s < '0' || *s > '9') return 0;
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 64) return 0; /* numbers, not texts */
  char text[65];
  memcpy(text, data, size);
  text[size] = 0;
  uint64_t count = 0, size_bytes = 0, again = 0;
  int count_rc = hbm_count_parse(text, &count), size_rc = hbm_size_parse(text, &size_bytes);
  if (count_rc != HBM_OK && count_rc != HBM_EINVAL) abort();
  if (size_rc != HBM_OK && size_rc != HBM_EINVAL) abort();
  if (count_rc == HBM_OK) {
    char plain[32];
    snprintf(plain, sizeof plain, "%llu", (unsigned long long)count);
    if (hbm_count_parse(plain, &again) != HBM_OK || again != count) abort();
  }
  if (all_digits(text)) {
    errno = 0;
    unsigned long long want = strtoull(text, NULL, 10);
    int fits = errno != ERANGE;
    if ((count_rc == HBM_OK) != fits || (size_rc == HBM_OK) != fits) abort();
    if (fits && (count != want || size_bytes != want)) abort();
  }
  /* A count in binary units is the size in the same units: "1.5Ki" = "1.5KiB". */
  size_t n = strlen(text);
  if (count_rc == HBM_OK && n >= 2 && text[n - 1] == 'i' && !strpbrk(text, "eE")) {
    char with_b[67];
    snprintf(with_b, sizeof with_b, "%sB", text);
    if (hbm_size_parse(with_b, &again) != HBM_OK || again != count) abort();
  }
  return 0;
}
