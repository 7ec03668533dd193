/* test_bench_stats: the order statistics hbm bench reports its rounds with
 * (bench/stats.h), on values whose quantiles are known by hand: odd and even
 * counts, the ends, interpolation between neighbours, ratios per round, the
 * input left unsorted, and counts out of range. */
#include <math.h>
#include <string.h>

#include "stats.h"
#include "testutil.h"

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * (fabs(a) + fabs(b) + 1); }

int main(void) {
  const double odd[3] = {5, 1, 3};
  CHECK(near(bench_median(odd, 3), 3));
  CHECK(near(bench_quantile(odd, 3, 0), 1));
  CHECK(near(bench_quantile(odd, 3, 1), 5));
  CHECK(near(bench_quantile(odd, 3, 0.25), 2)); /* halfway between 1 and 3 */
  CHECK(near(bench_quantile(odd, 3, 0.75), 4));
  CHECK(odd[0] == 5 && odd[1] == 1 && odd[2] == 3); /* sorted a copy */

  const double even[4] = {4, 2, 1, 3};
  CHECK(near(bench_median(even, 4), 2.5));
  CHECK(near(bench_quantile(even, 4, 0.25), 1.75));
  CHECK(near(bench_quantile(even, 4, 0.75), 3.25));

  const double one[1] = {7};
  CHECK(near(bench_median(one, 1), 7) && near(bench_quantile(one, 1, 0.25), 7) && near(bench_quantile(one, 1, 1), 7));

  /* per-round ratios b / a: 2, 1, 0.5, 4, 3 */
  const double a[5] = {1, 2, 4, 1, 1}, b[5] = {2, 2, 2, 4, 3};
  CHECK(near(bench_ratio_quantile(a, b, 5, 0.5), 2));
  CHECK(near(bench_ratio_quantile(a, b, 5, 0.25), 1));
  CHECK(near(bench_ratio_quantile(a, b, 5, 0.75), 3));
  CHECK(near(bench_ratio_quantile(a, b, 5, 0), 0.5) && near(bench_ratio_quantile(a, b, 5, 1), 4));

  /* counts out of range give 0, not a read past the values */
  CHECK(bench_median(odd, 0) == 0 && bench_ratio_quantile(a, b, 0, 0.5) == 0);
  static double many[BENCH_MAX_ROUNDS + 1];
  for (int i = 0; i <= BENCH_MAX_ROUNDS; i++) many[i] = BENCH_MAX_ROUNDS - i; /* descending */
  CHECK(near(bench_median(many, BENCH_MAX_ROUNDS), (BENCH_MAX_ROUNDS + 1) / 2.0));
  CHECK(bench_median(many, BENCH_MAX_ROUNDS + 1) == 0);
  CHECK(near(bench_quantile(many, BENCH_MAX_ROUNDS, 1), BENCH_MAX_ROUNDS)); /* the top, with no value past it */
  /* ratios over the most rounds, and one more (ASan sees a read or write past the arrays) */
  static double ones[BENCH_MAX_ROUNDS];
  for (int i = 0; i < BENCH_MAX_ROUNDS; i++) ones[i] = 1;
  CHECK(near(bench_ratio_quantile(ones, many, BENCH_MAX_ROUNDS, 0.5), (BENCH_MAX_ROUNDS + 1) / 2.0));
  CHECK(near(bench_ratio_quantile(ones, many, BENCH_MAX_ROUNDS, 1), BENCH_MAX_ROUNDS));
  CHECK(bench_ratio_quantile(many, many, BENCH_MAX_ROUNDS + 1, 0.5) == 0);
  printf("test_bench_stats: quantiles of known values checked\n");
  return test_done("test_bench_stats");
}
