/* hbm bench gen: events per second of the workload model (hbm gen llm), in
 * memory, side by side with the trace builder alone (the same number of
 * alloc/free events pushed with no model behind them): the ratio says what the
 * model costs over storing its events. Best of 3 rounds. Goal: >= 10M events/s. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "report/json.h"
#include "trace/gen_llm.h"
#include "trace/trace.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: hbm bench gen [--json] [--preset NAME] [--steps N]\n\n"
          "Generates a preset's trace in memory (no text) three times and reports the\n"
          "best events per second, next to the trace builder pushing as many events.\n"
          "  --preset NAME   workload (default 910c-dense)\n"
          "  --steps N       steps per round (default 40)\n"
          "JSON keys: bench, preset, steps, events, gen_events_per_s, builder_events_per_s,\n"
          "ratio_gen_builder, goal_events_per_s (10000000), meets_goal.\n"
          "It reports; it does not judge: exit 0 whatever the rate (an absolute rate on a\n"
          "shared machine is noise: the ratio is the figure to compare).\n");
}

int bench_gen(int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, 0, 'j'},
                                       {"preset", required_argument, 0, 'p'},
                                       {"steps", required_argument, 0, 's'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  int json = 0, opt;
  const char *preset = "910c-dense";
  uint64_t steps = 40;
  optind = 1;
  opterr = 0;
  cli_seen seen = {.command = "bench gen"};
  while ((opt = cli_getopt(argc, argv, ":h", opts, NULL, &seen)) != -1) {
    switch (opt) {
      case 'j': json = 1; break;
      case 'p': preset = optarg; break;
      case 's':
        if (!cli_parse_count("bench gen: --steps", optarg, 1, 100000, &steps)) return CLI_BAD_INPUT;
        break;
      case 'h': usage(stdout); return CLI_OK;
      default: return cli_option_error("bench gen", argv, opt);
    }
  }
  if (optind < argc) { /* else ignored: a bare trace name would measure the defaults */
    cli_error("bench gen: unexpected argument '%s' (try: hbm bench gen --help)", argv[optind]);
    return CLI_BAD_INPUT;
  }
  hbm_gen_llm_config c;
  if (hbm_gen_llm_preset(preset, &c) != HBM_OK) {
    cli_unknown_preset("bench gen: --preset", preset);
    return CLI_BAD_INPUT;
  }
  c.steps = (uint32_t)steps;
  int mrc = cli_check_trace_memory("bench gen", &c, sizeof(hbm_event));
  if (mrc != CLI_OK) return mrc;
  double best_gen = 0, best_builder = 0;
  uint64_t events = 0;
  for (int round = 0; round < 3; round++) {
    hbm_trace *t = NULL;
    hbm_diag diag;
    double t0 = bench_now_ns();
    int rc = hbm_gen_llm(&c, &t, &diag);
    double ns = bench_now_ns() - t0;
    if (rc != HBM_OK) {
      cli_error("bench gen: %s", rc == HBM_EINVAL && diag.message[0] ? diag.message : hbm_strerror(rc));
      return CLI_FAILED;
    }
    events = t->nevents;
    double rate = (double)events / (ns * 1e-9);
    if (rate > best_gen) best_gen = rate;
    hbm_trace_free(t);

    /* the builder alone: alloc/free pairs over a small ring of ids */
    if (hbm_trace_new("builder", &t) != HBM_OK) return CLI_FAILED;
    t->events = malloc(events * sizeof *t->events); /* sized up front, as the model does */
    t->events_cap = t->events ? events : 0;
    t0 = bench_now_ns();
    uint64_t pairs = events / 2;
    for (uint64_t i = 0; i < pairs; i++) {
      uint32_t id = (uint32_t)(i & 1023);
      if (i >= 1024) hbm_trace_free_id(t, id);
      hbm_trace_alloc(t, id, 4096 + (i & 4095) * 512, HBM_TAG_ACT, 0);
    }
    ns = bench_now_ns() - t0;
    rate = (double)t->nevents / (ns * 1e-9);
    if (rate > best_builder) best_builder = rate;
    hbm_trace_free(t);
  }
  const double goal = 10e6;
  if (json) {
    hbm_json j;
    hbm_json_init(&j);
    hbm_json_object_begin(&j);
    hbm_json_kv_string(&j, "bench", "gen");
    hbm_json_kv_string(&j, "preset", preset);
    hbm_json_kv_u64(&j, "steps", (uint64_t)steps);
    hbm_json_kv_u64(&j, "events", events);
    hbm_json_kv_double(&j, "gen_events_per_s", best_gen);
    hbm_json_kv_double(&j, "builder_events_per_s", best_builder);
    hbm_json_kv_double(&j, "ratio_gen_builder", best_builder > 0 ? best_gen / best_builder : 0);
    hbm_json_kv_double(&j, "goal_events_per_s", goal);
    hbm_json_key(&j, "meets_goal");
    hbm_json_bool(&j, best_gen >= goal);
    hbm_json_object_end(&j);
    if (cli_print_json("bench gen", &j) != CLI_OK) return CLI_FAILED;
  } else {
    printf("gen llm --preset %s, %llu step%s: %llu events per round, best of 3\n", preset, (unsigned long long)steps,
           steps == 1 ? "" : "s", (unsigned long long)events);
    printf("  workload model   %7.1f M events/s\n", best_gen / 1e6);
    printf("  builder alone    %7.1f M events/s\n", best_builder / 1e6);
    printf("  ratio            %7.2f (model / builder); goal >= 10 M events/s: %s\n",
           best_builder > 0 ? best_gen / best_builder : 0, best_gen >= goal ? "met" : "NOT met");
  }
  return CLI_OK;
}
