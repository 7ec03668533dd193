/* stats.h: order statistics over the rounds of a benchmark (n at most
 * BENCH_MAX_ROUNDS; the values are left as they were). No dependency on the
 * rest of the tool, so tests/test_bench_stats.c checks them alone. */
#ifndef HBM_BENCH_STATS_H
#define HBM_BENCH_STATS_H

enum { BENCH_MAX_ROUNDS = 1000 };
/* The q-quantile (0 <= q <= 1) of v[0..n): linear between the two nearest
 * of the sorted values (q = 0.5 is the median). 0 for n outside 1..BENCH_MAX_ROUNDS. */
double bench_quantile(const double *v, int n, double q);
double bench_median(const double *v, int n);
/* The q-quantile over rounds of b[i] / a[i]: the two were measured moments
 * apart, so a spell of a busy machine shifts both, and their ratio less. */
double bench_ratio_quantile(const double *a, const double *b, int n, double q);

#endif
