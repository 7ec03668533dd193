/* bench.h: `hbm bench NAME [--json]`. Every benchmark compares side by side in
 * one run and reports ratios; absolute times on shared machines are noise. */
#ifndef HBM_BENCH_H
#define HBM_BENCH_H

typedef struct bench_entry {
  const char *name;
  const char *summary;
  int (*run)(int argc, char **argv); /* argv[0] is the benchmark name */
} bench_entry;

int bench_alloc(int argc, char **argv);
int bench_replay(int argc, char **argv);
int bench_adamw(int argc, char **argv);
int bench_gen(int argc, char **argv);
int bench_compact(int argc, char **argv);
int bench_sweep(int argc, char **argv);

/* Monotonic clock in nanoseconds. */
double bench_now_ns(void);

/* Order statistics over the rounds of a benchmark (n <= BENCH_MAX_ROUNDS,
 * v left as it was): the q-quantile (0 <= q <= 1, linear between the two
 * nearest values; q = 0.5 is the median). */
enum { BENCH_MAX_ROUNDS = 1000 };
double bench_quantile(const double *v, int n, double q);
double bench_median(const double *v, int n);
/* The q-quantile over rounds of b[i] / a[i]: the two were measured moments
 * apart, so a spell of a busy machine shifts both, and their ratio less. */
double bench_ratio_quantile(const double *a, const double *b, int n, double q);

#endif
