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

static void usage_all(FILE *out) {
  fprintf(out, "usage: hbm bench all [--json]\n\n"
               "Runs every benchmark one after another, each with its defaults:\n ");
  for (int i = 0; i < nbenches; i++) fprintf(out, " %s", benches[i].name);
  fprintf(out, "\n"
               "  --json   each benchmark's JSON object, one per line, as hbm bench NAME --json\n"
               "           writes it (its keys: hbm bench NAME --help; \"bench\" names it)\n"
               "Every other option belongs to one benchmark: hbm bench NAME --help.\n"
               "exit: the highest of the benchmarks' exit codes\n");
}

int cmd_bench(int argc, char **argv) {
  if (argc < 2) {
    cli_error("bench: expected a benchmark NAME");
    usage(stderr);
    return CLI_BAD_INPUT;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) { usage(stdout); return CLI_OK; }
  if (!strcmp(argv[1], "all")) {
    /* --json is the only option every benchmark takes: anything else is refused
     * before any benchmark runs, not handed to some and choked on by others */
    for (int i = 2; i < argc; i++) {
      if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage_all(stdout); return CLI_OK; }
      if (strcmp(argv[i], "--json")) {
        cli_error("bench all: '%s' is not an option of every benchmark; all takes only --json "
                  "(give it to one: hbm bench NAME %s ...)", argv[i], argv[i]);
        return CLI_BAD_INPUT;
      }
    }
    int worst = CLI_OK;
    for (int i = 0; i < nbenches; i++) {
      char *sub[8] = {(char *)benches[i].name};
      int n = 1;
      for (int k = 2; k < argc && n < 7; k++) sub[n++] = argv[k];
      sub[n] = NULL;
      int rc = benches[i].run(n, sub);
      if (rc > worst) worst = rc;
    }
    return worst;
  }
  for (int i = 0; i < nbenches; i++)
    if (!strcmp(argv[1], benches[i].name)) return benches[i].run(argc - 1, argv + 1);
  cli_error("unknown benchmark '%s' (try: hbm bench --help)", argv[1]);
  return CLI_BAD_INPUT;
}
