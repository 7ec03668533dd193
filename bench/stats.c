/* stats.c: order statistics over a benchmark's rounds (stats.h). */
#include "stats.h"

#include <stdlib.h>
#include <string.h>

static int dbl_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
double bench_quantile(const double *v, int n, double q) {
  if (n <= 0 || n > BENCH_MAX_ROUNDS) return 0;
  double s[BENCH_MAX_ROUNDS];
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, dbl_cmp);
  double at = q * (n - 1);
  int lo = (int)at;
  return lo + 1 < n ? s[lo] + (at - lo) * (s[lo + 1] - s[lo]) : s[n - 1];
}
double bench_median(const double *v, int n) { return bench_quantile(v, n, 0.5); }
double bench_ratio_quantile(const double *a, const double *b, int n, double q) {
  if (n <= 0 || n > BENCH_MAX_ROUNDS) return 0;
  double r[BENCH_MAX_ROUNDS];
  for (int i = 0; i < n; i++) r[i] = b[i] / a[i];
  return bench_quantile(r, n, q);
}
