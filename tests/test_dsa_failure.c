/* test_dsa_failure: the step planner when host memory runs out.
 * hbm_dsa_plan promises never a worse plan for want of host memory: the same
 * blocks always get the same offsets, or HBM_EHOSTMEM. Every host allocation
 * passes through counters here (linked with --wrap): for each call (the
 * planner, each strategy alone, the breadths, the peak, the sweep check), on
 * a linear and a cyclic instance, the Nth allocation fails for N = 0, 1, ..
 * until the call needs no more; each answer is HBM_EHOSTMEM (the peak: 0,
 * as dsa.h says), or, once it gets all it asks, exactly what it answers with
 * memory to spare. */
#include "core/dsa.h"
#include "hbm.h"
#include "testutil.h"

static long fail_at = -1; /* the next fail_at allocations succeed, the one after fails */
static long allocs;
static int due(void) {
  allocs++;
  return fail_at >= 0 && fail_at-- == 0;
}
void *__real_malloc(size_t size);
void *__wrap_malloc(size_t size);
void *__wrap_malloc(size_t size) { return due() ? NULL : __real_malloc(size); }
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size) { return due() ? NULL : __real_calloc(n, size); }
void *__real_realloc(void *p, size_t size);
void *__wrap_realloc(void *p, size_t size);
void *__wrap_realloc(void *p, size_t size) { return due() ? NULL : __real_realloc(p, size); }

enum { N = 48, CALLS = HBM_DSA_STRATEGIES + 4 };

/* Call k on the blocks: its return code, and what it answered in out[]. */
static int call(int k, const hbm_dsa_block *b, uint64_t period, uint64_t *out) {
  size_t first = 0, second = 0;
  if (k < HBM_DSA_STRATEGIES) return hbm_dsa_plan_with(b, N, period, 512, (hbm_dsa_strategy)k, out, &out[N]);
  switch (k - HBM_DSA_STRATEGIES) {
  case 0: return hbm_dsa_plan(b, N, period, 512, out, &out[N]);
  case 1: return hbm_dsa_breadth(b, N, period, out);
  case 2: out[0] = hbm_dsa_peak(b, N, period); return out[0] ? HBM_OK : HBM_EHOSTMEM;
  default: {
    uint64_t off[N];
    for (int i = 0; i < N; i++) off[i] = (uint64_t)i << 20; /* disjoint: no conflict */
    off[N - 1] = off[N - 2];                                 /* but the last two share */
    int rc = hbm_dsa_first_conflict(b, N, period, off, &first, &second);
    out[0] = first, out[1] = second;
    return rc;
  }
  }
}

static const char *call_name(int k) {
  static const char *more[] = {"hbm_dsa_plan", "hbm_dsa_breadth", "hbm_dsa_peak", "hbm_dsa_first_conflict"};
  return k < HBM_DSA_STRATEGIES ? hbm_dsa_strategy_name((hbm_dsa_strategy)k) : more[k - HBM_DSA_STRATEGIES];
}

int main(void) {
  uint64_t rng = 0x5eed0d5a;
  for (int cyclic = 0; cyclic < 2; cyclic++) {
    const uint64_t period = cyclic ? 1000 : 0;
    hbm_dsa_block b[N];
    for (int i = 0; i < N; i++) {
      uint64_t start = test_rand_below(&rng, 900), len = 1 + test_rand_below(&rng, cyclic ? 1000 : 300);
      b[i] = (hbm_dsa_block){512 * (1 + test_rand_below(&rng, 64)), start, start + len};
    }
    b[N - 1].start = b[N - 2].start, b[N - 1].end = b[N - 2].end; /* live together: the sweep's conflict */
    for (int k = 0; k < CALLS; k++) {
      uint64_t want[N + 1] = {0}, got[N + 1];
      allocs = 0;
      int rc = call(k, b, period, want);
      long needed = allocs;
      CHECK(rc == (k == CALLS - 1 ? 1 : HBM_OK));
      long refused = 0, wrong = 0;
      for (long n = 0;; n++) {
        memset(got, 0, sizeof got);
        fail_at = n;
        int r2 = call(k, b, period, got);
        int failed = fail_at < 0;
        fail_at = -1;
        if (!failed) { /* got all it asked for */
          wrong += r2 != rc || memcmp(got, want, sizeof got) != 0;
          break;
        }
        refused++;
        wrong += r2 != HBM_EHOSTMEM;
        if (n > needed + 1000) { wrong++; break; }
      }
      printf("test_dsa_failure: %s, %s: %ld allocations, %ld refused at each in turn: %s\n", call_name(k),
             cyclic ? "cyclic" : "linear", needed, refused, wrong ? "WRONG ANSWERS" : "HBM_EHOSTMEM each, then the same answer");
      CHECK(wrong == 0 && refused > 0);
    }
  }
  return test_done("test_dsa_failure");
}
