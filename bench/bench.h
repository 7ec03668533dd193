/* bench.h: `hbm bench NAME [--json]`. Every benchmark compares side by side in
 * one run and reports ratios; absolute times on shared machines are noise. */
#ifndef HBM_BENCH_H
#define HBM_BENCH_H

#include "stats.h"

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

#endif
