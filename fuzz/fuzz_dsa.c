/* fuzz_dsa.c: libFuzzer target for the step planner (core/dsa.h), held to
 * the slow planner of tests/dsa_ref.h offset for offset.
 *
 * `fuzz_plan_csv` reaches the planner through MiniMalloc's CSV, at most 64
 * buffers; the planner's radix sort takes lists of 128 neighbours and more,
 * and its early stops act only where squeaky-wheel rounds or several orders
 * run. Here any bytes are a problem of up to 300 blocks:
 *   byte 0: bit 0 cyclic; bits 1-4 the alignment's log2; bits 5-7 pick the
 *           sizes' shift (0, 5, 9, 12, 20, 24, 30 or 36 bits);
 *   bytes 1-2: the period less one (cyclic), little-endian;
 *   then 6 bytes a block: size less one, start, length less one (16 bits
 *           each, little-endian); a cyclic block's start and length are
 *           taken modulo the period.
 * The plan must be valid (the slow pairwise count), aligned, its footprint
 * its top and never below the peak load; the peak, the breadths and the
 * plan itself must be the slow planner's. Sizes stay below 2^53, so no sum
 * of 300 of them wraps. Seed corpus: fuzz/corpus/dsa/ (fuzz/seed_dsa_corpus.py). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/dsa_ref.h"
#include "core/dsa.h"
#include "hbm.h"

enum { MAX_BLOCKS = 300, BLOCK_BYTES = 6 };

static uint64_t le16(const uint8_t *p) { return (uint64_t)p[0] | (uint64_t)p[1] << 8; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const unsigned shifts[8] = {0, 5, 9, 12, 20, 24, 30, 36};
  if (size < 3) return 0;
  int cyclic = data[0] & 1;
  uint64_t align = 1ull << ((data[0] >> 1) & 15), period = cyclic ? le16(data + 1) + 1 : 0;
  unsigned shift = shifts[data[0] >> 5];
  size_t n = (size - 3) / BLOCK_BYTES;
  if (n > MAX_BLOCKS) n = MAX_BLOCKS;
  if (!n) return 0;
  hbm_dsa_block *b = malloc(n * sizeof *b);
  uint64_t *off = malloc(n * sizeof *off), *ref = malloc(n * sizeof *ref), *fast = malloc(n * sizeof *fast),
           *slow = malloc(n * sizeof *slow);
  if (!b || !off || !ref || !fast || !slow) goto out;
  for (size_t i = 0; i < n; i++) {
    const uint8_t *p = data + 3 + i * BLOCK_BYTES;
    uint64_t start = le16(p + 2), len = le16(p + 4) + 1;
    if (cyclic) start %= period, len = 1 + (len - 1) % period;
    b[i] = (hbm_dsa_block){(le16(p) + 1) << shift, start, start + len};
  }
  uint64_t footprint;
  int rc = hbm_dsa_plan(b, n, period, align, off, &footprint);
  if (rc == HBM_EHOSTMEM) goto out;
  if (rc != HBM_OK) abort(); /* every block is well formed */
  uint64_t top = 0;
  for (size_t i = 0; i < n; i++) {
    if (off[i] % align) abort();
    if (off[i] + b[i].size > top) top = off[i] + b[i].size;
  }
  if (top != footprint || hbm_dsa_conflicts(b, n, period, off)) abort();
  uint64_t peak = hbm_dsa_peak(b, n, period), slow_peak = ref_peak(b, n, period);
  if (!peak || !slow_peak) goto out; /* host memory */
  if (peak != slow_peak || footprint < peak) abort();
  if (hbm_dsa_breadth(b, n, period, fast) == HBM_OK && ref_breadth(b, n, period, slow))
    for (size_t i = 0; i < n; i++)
      if (fast[i] != slow[i]) abort();
  uint64_t slow_footprint = ref_plan_full(b, n, period, align, ref);
  if (slow_footprint && (slow_footprint != footprint || memcmp(ref, off, n * sizeof *off))) abort();
out:
  free(b);
  free(off);
  free(ref);
  free(fast);
  free(slow);
  return 0;
}
