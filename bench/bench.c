/* bench.c: the `hbm bench` dispatcher. */
#include "bench.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static const bench_entry benches[] = {
    {"alloc", "range allocator vs glibc malloc vs mimalloc, alloc+free pairs", bench_alloc},
    {"replay", "replay speed (events/s) of every policy on one trace", bench_replay},
    {"adamw", "fused AdamW step vs unfused passes vs memcpy bandwidth", bench_adamw},
    {"gen", "workload model (gen llm) events per second vs the trace builder alone", bench_gen},
    {"compact", "compaction of a fragmented host heap vs memmove of the same copies; partial vs minimum", bench_compact},
    {"sweep", "zoned's goals on random training jobs from the workload model, vs caching and expandable", bench_sweep},
};
static const int nbenches = (int)(sizeof benches / sizeof benches[0]);

double bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void usage(FILE *out) {
  fprintf(out, "usage: hbm bench NAME [--json] [options]   (hbm bench NAME --help)\n\nbenchmarks:\n");
  for (int i = 0; i < nbenches; i++) fprintf(out, "  %-10s %s\n", benches[i].name, benches[i].summary);
  fprintf(out, "  %-10s every benchmark above, one after another\n", "all");
}

int cmd_bench(int argc, char **argv) {
  if (argc < 2) { usage(stderr); return CLI_BAD_INPUT; }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) { usage(stdout); return CLI_OK; }
  if (!strcmp(argv[1], "all")) {
    int worst = CLI_OK;
    for (int i = 0; i < nbenches; i++) {
      char *sub[] = {(char *)benches[i].name, argc > 2 ? argv[2] : NULL, NULL};
      int rc = benches[i].run(argc > 2 ? 2 : 1, sub);
      if (rc > worst) worst = rc;
    }
    return worst;
  }
  for (int i = 0; i < nbenches; i++)
    if (!strcmp(argv[1], benches[i].name)) return benches[i].run(argc - 1, argv + 1);
  cli_error("unknown benchmark '%s' (try: hbm bench --help)", argv[1]);
  return CLI_BAD_INPUT;
}
