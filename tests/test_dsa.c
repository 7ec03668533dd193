/* test_dsa: the step planner (core/dsa.h) on seeded random instances, linear
 * and cyclic, checked by the slow pairwise conflict count; footprints are
 * never below the peak load; cases with a known optimum hit it; every
 * strategy alone gives a valid plan and the planner keeps the best; and the
 * plans are the slow planner's (dsa_ref.h), offset for offset. The fast
 * sweep check (hbm_dsa_first_conflict) agrees with the slow count on every
 * plan and on plans spoiled at random. */
#include "core/dsa.h"
#include "hbm.h"
#include "dsa_ref.h"
#include "testutil.h"

static uint64_t top_of(const hbm_dsa_block *b, size_t n, const uint64_t *off) {
  uint64_t top = 0;
  for (size_t i = 0; i < n; i++)
    if (off[i] + b[i].size > top) top = off[i] + b[i].size;
  return top;
}

static void fixed_cases(void) {
  hbm_dsa_block b[4];
  uint64_t off[4], fp;
  /* All live together: the sum (sizes aligned). */
  for (int i = 0; i < 4; i++) b[i] = (hbm_dsa_block){1000 + (uint64_t)i, 0, 10};
  CHECK(hbm_dsa_plan(b, 4, 0, 512, off, &fp) == HBM_OK);
  CHECK_EQ_U64(fp, 3 * 1024 + 1000); /* largest first: the smallest ends it */
  CHECK_EQ_U64(hbm_dsa_conflicts(b, 4, 0, off), 0);
  /* One after another: the largest. */
  for (int i = 0; i < 4; i++) b[i] = (hbm_dsa_block){(uint64_t)(i + 1) << 20, (uint64_t)i * 10, (uint64_t)i * 10 + 10};
  CHECK(hbm_dsa_plan(b, 4, 0, 512, off, &fp) == HBM_OK);
  CHECK_EQ_U64(fp, 4ull << 20);
  CHECK_EQ_U64(hbm_dsa_peak(b, 4, 0), 4ull << 20);
  /* Cyclic: a block born at 8 and freed at 2 of the next period overlaps
   * one live over [0, 3) but not one over [3, 7). */
  b[0] = (hbm_dsa_block){1 << 20, 8, 12};
  b[1] = (hbm_dsa_block){1 << 20, 0, 3};
  b[2] = (hbm_dsa_block){1 << 20, 3, 7};
  CHECK(hbm_dsa_plan(b, 3, 10, 512, off, &fp) == HBM_OK);
  CHECK_EQ_U64(fp, 2u << 20);
  CHECK_EQ_U64(hbm_dsa_conflicts(b, 3, 10, off), 0);
  CHECK_EQ_U64(hbm_dsa_peak(b, 3, 10), 2u << 20);
  CHECK(off[1] != off[0]);
  /* Without the period the same lifetimes do not wrap. */
  CHECK_EQ_U64(hbm_dsa_peak(b, 3, 0), 1u << 20);
  /* Malformed blocks. */
  b[0] = (hbm_dsa_block){0, 0, 1};
  CHECK(hbm_dsa_plan(b, 1, 0, 512, off, &fp) == HBM_EINVAL);
  b[0] = (hbm_dsa_block){1, 5, 5};
  CHECK(hbm_dsa_plan(b, 1, 0, 512, off, &fp) == HBM_EINVAL);
  b[0] = (hbm_dsa_block){1, 5, 16};
  CHECK(hbm_dsa_plan(b, 1, 10, 512, off, &fp) == HBM_EINVAL); /* longer than the period */
  b[0] = (hbm_dsa_block){1, 10, 12};
  CHECK(hbm_dsa_plan(b, 1, 10, 512, off, &fp) == HBM_EINVAL); /* starts outside it */
  CHECK(hbm_dsa_plan(b, 1, 10, 384, off, &fp) == HBM_EINVAL);
  CHECK(hbm_dsa_plan(NULL, 0, 0, 512, NULL, &fp) == HBM_OK && fp == 0);
  b[0] = (hbm_dsa_block){1, 0, 5};
  CHECK(hbm_dsa_plan(NULL, 1, 0, 512, off, &fp) == HBM_EINVAL); /* blocks without the array, or no room for offsets */
  CHECK(hbm_dsa_plan(b, 1, 0, 512, NULL, &fp) == HBM_EINVAL);
  CHECK(hbm_dsa_plan(b, 1, 0, 512, off, NULL) == HBM_EINVAL);
  CHECK(hbm_dsa_plan(b, 1, 0, 512, off, &fp) == HBM_OK);
  CHECK(hbm_dsa_plan_with(b, 1, 0, 512, HBM_DSA_STRATEGIES, off, &fp) == HBM_EINVAL);
}

/* The fast check against the slow count: the same verdict, and a pair it
 * names really meets and overlaps. */
static void check_fast(const hbm_dsa_block *b, size_t n, uint64_t period, const uint64_t *off) {
  size_t first = 0, second = 0;
  int rc = hbm_dsa_first_conflict(b, n, period, off, &first, &second);
  size_t slow = hbm_dsa_conflicts(b, n, period, off);
  CHECK(rc == (slow > 0));
  if (rc == 1) {
    CHECK(first < second && second < n);
    hbm_dsa_block pair[2] = {b[first], b[second]};
    uint64_t pair_off[2] = {off[first], off[second]};
    CHECK_EQ_U64(hbm_dsa_conflicts(pair, 2, period, pair_off), 1);
  }
}

/* A valid plan spoiled: one block moved onto another's offset, or anywhere
 * below the footprint (which may still be valid). */
static void check_fast_spoiled(const hbm_dsa_block *b, size_t n, uint64_t period, const uint64_t *off, uint64_t fp,
                               uint64_t *rng) {
  uint64_t *spoiled = malloc(n * sizeof *spoiled);
  for (int k = 0; k < 4; k++) {
    memcpy(spoiled, off, n * sizeof *off);
    size_t i = (size_t)test_rand_below(rng, n);
    spoiled[i] = k % 2 ? off[test_rand_below(rng, n)] : test_rand_below(rng, fp + 1);
    check_fast(b, n, period, spoiled);
  }
  free(spoiled);
}

static void fast_check_cases(void) {
  hbm_dsa_block b[3] = {{4, 0, 10}, {4, 5, 15}, {4, 10, 20}};
  uint64_t off[3] = {0, 2, 0};
  size_t first, second;
  CHECK(hbm_dsa_first_conflict(b, 3, 0, off, &first, &second) == 1 && first == 0 && second == 1);
  off[1] = 4; /* touching ranges, and a block born as another dies at its offset */
  CHECK(hbm_dsa_first_conflict(b, 3, 0, off, &first, &second) == 0);
  CHECK(hbm_dsa_first_conflict(b, 3, 18, off, &first, &second) == 1); /* [10, 20) wraps onto [0, 2) */
  off[2] = UINT64_MAX - 2;
  CHECK(hbm_dsa_first_conflict(b, 3, 0, off, &first, &second) == HBM_EINVAL);
  CHECK(hbm_dsa_first_conflict(NULL, 0, 0, NULL, &first, &second) == 0);
  CHECK(hbm_dsa_first_conflict(NULL, 3, 0, off, &first, &second) == HBM_EINVAL); /* blocks, or offsets, missing */
  CHECK(hbm_dsa_first_conflict(b, 3, 0, NULL, &first, &second) == HBM_EINVAL);
  CHECK_EQ_U64(strcmp(hbm_dsa_strategy_name(HBM_DSA_START_GAP), "start-gap"), 0);
  CHECK(hbm_dsa_strategy_name(HBM_DSA_STRATEGIES) == NULL);
}

/* Where largest-first places one block too high and another strategy reaches
 * the peak load: the planner keeps that one. */
static void strategy_cases(void) {
  static const struct {
    hbm_dsa_strategy wins;
    uint64_t peak_mib, largest_first_mib;
    hbm_dsa_block b[5];
  } cases[] = {
      {HBM_DSA_START_GAP, 6, 7, {{3 << 20, 2, 7}, {2 << 20, 7, 10}, {1 << 20, 2, 5}, {4 << 20, 9, 10}, {2 << 20, 3, 9}}},
      {HBM_DSA_LENGTH_LOWEST, 5, 6, {{3 << 20, 9, 13}, {2 << 20, 4, 9}, {2 << 20, 5, 11}, {4 << 20, 0, 4}, {1 << 20, 2, 6}}},
      /* only the most contended blocks first reach the peak here: the four orders before it give 12 or 13 */
      {HBM_DSA_BREADTH_LOWEST, 10, 12, {{4 << 20, 9, 10}, {4 << 20, 1, 5}, {3 << 20, 6, 11}, {2 << 20, 1, 7}, {3 << 20, 5, 10}}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    uint64_t off[5], fp;
    CHECK_EQ_U64(hbm_dsa_peak(cases[k].b, 5, 0), cases[k].peak_mib << 20);
    CHECK(hbm_dsa_plan_with(cases[k].b, 5, 0, 512, HBM_DSA_SIZE_LOWEST, off, &fp) == HBM_OK);
    CHECK_EQ_U64(fp, cases[k].largest_first_mib << 20);
    CHECK(hbm_dsa_plan_with(cases[k].b, 5, 0, 512, cases[k].wins, off, &fp) == HBM_OK);
    CHECK_EQ_U64(fp, cases[k].peak_mib << 20);
    CHECK(hbm_dsa_plan(cases[k].b, 5, 0, 512, off, &fp) == HBM_OK);
    CHECK_EQ_U64(fp, cases[k].peak_mib << 20);
    CHECK_EQ_U64(hbm_dsa_conflicts(cases[k].b, 5, 0, off), 0);
  }
}

/* Where every order places the last block too high: each order's plan is
 * 9 MiB, and a round that places that block first reaches the peak load. */
static void squeaky_case(void) {
  const hbm_dsa_block b[4] = {{4 << 20, 9, 12}, {3 << 20, 8, 14}, {4 << 20, 4, 7}, {2 << 20, 3, 9}};
  uint64_t off[4], fp;
  CHECK_EQ_U64(hbm_dsa_peak(b, 4, 0), 7u << 20);
  for (int k = 0; k < HBM_DSA_STRATEGIES; k++) {
    CHECK(hbm_dsa_plan_with(b, 4, 0, 512, (hbm_dsa_strategy)k, off, &fp) == HBM_OK);
    CHECK_EQ_U64(fp, 9u << 20);
  }
  CHECK(hbm_dsa_plan(b, 4, 0, 512, off, &fp) == HBM_OK);
  CHECK_EQ_U64(fp, 7u << 20);
  CHECK_EQ_U64(hbm_dsa_conflicts(b, 4, 0, off), 0);
}

/* Hundreds of blocks all live together: each is placed on top of every
 * block before it, so the offsets are the running sum of the sizes (each
 * aligned up), largest first (ties: the lower index). Long lists of placed
 * blocks are what the planner sorts by radix, over wide offsets (up to 2^50)
 * and narrow ones, with and without alignment. */
static void stacked_cases(uint64_t *rng) {
  enum { N = 700 };
  static hbm_dsa_block b[N];
  static uint64_t off[N], want[N];
  static uint32_t order[N];
  for (int k = 0; k < 6; k++) {
    uint64_t align = k % 3 == 0 ? 1 : k % 3 == 1 ? 512 : 1ull << 16;
    uint64_t most = k < 3 ? 1ull << 20 : 1ull << 40;
    for (size_t i = 0; i < N; i++) b[i] = (hbm_dsa_block){1 + test_rand_below(rng, most), 0, 10};
    ref_order(HBM_DSA_SIZE_LOWEST, b, N, NULL, order);
    uint64_t top = 0;
    for (size_t r = 0; r < N; r++) {
      want[order[r]] = top;
      top = (top + b[order[r]].size + align - 1) / align * align;
    }
    for (int s = HBM_DSA_SIZE_LOWEST; s <= HBM_DSA_SIZE_GAP; s++) {
      uint64_t fp;
      CHECK(hbm_dsa_plan_with(b, N, 0, align, (hbm_dsa_strategy)s, off, &fp) == HBM_OK);
      size_t wrong = 0;
      for (size_t i = 0; i < N; i++) wrong += off[i] != want[i];
      CHECK_EQ_U64(wrong, 0);
      CHECK_EQ_U64(hbm_dsa_conflicts(b, N, 0, off), 0);
    }
  }
}

/* hbm_dsa_breadth against the slow way: the load at every time point, and
 * each block's highest over the times it is live. */
static void check_breadth(const hbm_dsa_block *b, size_t n, uint64_t period, uint64_t horizon) {
  uint64_t *load = calloc(horizon, sizeof *load), *fast = malloc(n * sizeof *fast);
  CHECK(load && fast);
  if (load && fast && hbm_dsa_breadth(b, n, period, fast) == HBM_OK) {
    for (uint64_t t = 0; t < horizon; t++)
      for (size_t j = 0; j < n; j++)
        if (ref_live_at(&b[j], period, t)) load[t] += b[j].size;
    for (size_t i = 0; i < n; i++) {
      uint64_t most = 0;
      for (uint64_t t = 0; t < horizon; t++)
        if (ref_live_at(&b[i], period, t) && load[t] > most) most = load[t];
      CHECK_EQ_U64(fast[i], most);
    }
    uint64_t *slow = malloc(n * sizeof *slow); /* and the slow planner's breadth, from load rises only */
    CHECK(slow && ref_breadth(b, n, period, slow));
    for (size_t i = 0; slow && i < n; i++) CHECK_EQ_U64(slow[i], fast[i]);
    free(slow);
  } else {
    CHECK(0);
  }
  free(load);
  free(fast);
}

/* Random lifetimes shaped like training steps: a few long blocks and many
 * short ones, sizes from a few KiB to many MiB, some equal. */
static void random_cases(uint64_t *rng, int rounds, int *improved) {
  for (int round = 0; round < rounds; round++) {
    size_t n = 1 + (size_t)test_rand_below(rng, round % 10 == 9 ? 3000 : 300);
    uint64_t period = round % 2 ? 0 : 50 + test_rand_below(rng, 5000);
    uint64_t horizon = period ? period : 50 + test_rand_below(rng, 5000);
    hbm_dsa_block *b = malloc(n * sizeof *b);
    uint64_t *off = malloc(n * sizeof *off), fp;
    for (size_t i = 0; i < n; i++) {
      uint64_t size = test_rand_below(rng, 4) == 0 ? (1 + test_rand_below(rng, 8)) << 20
                                                   : 1 + test_rand_below(rng, 64ull << 20);
      uint64_t start = test_rand_below(rng, horizon);
      uint64_t most = period ? period : horizon - start;
      uint64_t len = test_rand_below(rng, 8) == 0 ? 1 + test_rand_below(rng, most) : 1 + test_rand_below(rng, most / 20 + 1);
      if (len > most) len = most;
      b[i] = (hbm_dsa_block){size, start, start + len};
    }
    uint64_t align = 1ull << test_rand_below(rng, 12);
    int rc = hbm_dsa_plan(b, n, period, align, off, &fp);
    CHECK(rc == HBM_OK);
    if (rc != HBM_OK) { free(b); free(off); continue; }
    CHECK_EQ_U64(hbm_dsa_conflicts(b, n, period, off), 0);
    CHECK_EQ_U64(fp, top_of(b, n, off));
    if (n <= 300) { /* offset for offset, as the slow planner */
      uint64_t *ref = malloc(n * sizeof *ref);
      CHECK_EQ_U64(ref_plan_full(b, n, period, align, ref), fp);
      size_t wrong = 0;
      for (size_t i = 0; i < n; i++) wrong += ref[i] != off[i];
      CHECK_EQ_U64(wrong, 0);
      free(ref);
    }
    check_fast(b, n, period, off);
    check_fast_spoiled(b, n, period, off, fp, rng);
    uint64_t peak = hbm_dsa_peak(b, n, period), best = UINT64_MAX;
    CHECK(fp >= peak);
    if (n <= 300) CHECK_EQ_U64(peak, ref_peak(b, n, period));
    for (size_t i = 0; i < n; i++) CHECK(off[i] % align == 0);
    /* Each strategy alone: valid, and never better than the planner, whose
     * squeaky-wheel rounds start from every order's plan. */
    for (int k = 0; k < HBM_DSA_STRATEGIES && n <= 300; k++) {
      uint64_t fk;
      CHECK(hbm_dsa_plan_with(b, n, period, align, (hbm_dsa_strategy)k, off, &fk) == HBM_OK);
      CHECK_EQ_U64(hbm_dsa_conflicts(b, n, period, off), 0);
      CHECK_EQ_U64(fk, top_of(b, n, off));
      if (fk < best) best = fk;
      if (k == HBM_DSA_SIZE_LOWEST || k == HBM_DSA_SIZE_GAP) { /* offset for offset, as the slow reference */
        uint64_t *ref = malloc(n * sizeof *ref);
        ref_plan_by_size(b, n, period, align, k == HBM_DSA_SIZE_GAP, ref);
        size_t wrong = 0;
        for (size_t i = 0; i < n; i++) wrong += ref[i] != off[i];
        CHECK_EQ_U64(wrong, 0);
        free(ref);
      }
    }
    if (n <= 300) {
      CHECK(fp <= best);
      *improved += fp < best;
    }
    if (n <= 300) check_breadth(b, n, period, horizon);
    free(b);
    free(off);
  }
}

int main(void) {
  uint64_t rng = test_seed("test_dsa");
  fixed_cases();
  strategy_cases();
  squeaky_case();
  stacked_cases(&rng);
  fast_check_cases();
  int rounds = (int)(400 * test_scale());
  int improved = 0;
  random_cases(&rng, rounds < 10 ? 10 : rounds, &improved);
  printf("test_dsa: the rounds after the orders lowered %d of the random plans\n", improved);
  return test_done("test_dsa");
}
