/* hbm mincap: the smallest capacity at which each policy completes a trace. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "replay/mincap.h"
#include "report/json.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: hbm mincap TRACE|SNAPSHOT --policy P[,Q...]|all [options]\n"
          "\n"
          "Finds, for each policy, the smallest device capacity at which the trace (an\n"
          "hbm text trace or a PyTorch memory snapshot) completes with no failed request:\n"
          "how much memory the run needs under each allocator. Capacities are bisected on\n"
          "the sim device in steps of the resolution, starting at peak live; the answer\n"
          "is replayed again to re-check it and to count the backend calls (device\n"
          "runtime calls) the policy makes that close to the edge.\n"
          "\n"
          "options:\n"
          "  --policy P[,Q...]|all  policies to search, each once (default: all); known: %s\n"
          "  --alloc-conf CONF      policy settings (PyTorch syntax for caching/expandable);\n"
          "                         POLICY=CONF for one policy only; repeatable\n"
          "  --resolution SIZE      bisection step (default 16MiB; a multiple of 2MiB)\n"
          "  --limit SIZE           largest capacity tried (default 8 x peak live, or 8 x the\n"
          "                         starting state's recorded segments if larger, + 1GiB)\n"
          "  --json                 machine-readable output\n"
          "  -h, --help             this text\n"
          "\n"
          "exit: 0 searched (a policy that never completes is reported, not an error),\n"
          "      1 a replay failed to run, 2 bad input or usage\n",
          hbm_policy_names());
}


static void show_progress(const char *policy, int i, int n) {
  if (!cli_is_tty()) return;
  fprintf(stderr, "\rmincap: searching %s (%d of %d)...%20s", policy, i + 1, n, "");
}


int cmd_mincap(int argc, char **argv) {
  static const struct option opts[] = {
      {"policy", required_argument, 0, 'p'}, {"alloc-conf", required_argument, 0, 'a'},
      {"resolution", required_argument, 0, 'r'}, {"limit", required_argument, 0, 'l'},
      {"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  const char *policy_list = "all";
  hbm_mincap_options mo = {0};
  cli_confs confs = {0};
  int json = 0, c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
      case 'p': policy_list = optarg; break;
      case 'a':
        if (!cli_conf_add(&confs, optarg)) return CLI_BAD_INPUT;
        break;
      case 'r':
        if (!cli_parse_size("--resolution", optarg, &mo.resolution)) return CLI_BAD_INPUT;
        if (mo.resolution % (2ull << 20)) {
          cli_error("--resolution: expected a multiple of 2MiB (the device granule), got '%s'", optarg);
          return CLI_BAD_INPUT;
        }
        break;
      case 'l':
        if (!cli_parse_size("--limit", optarg, &mo.limit)) return CLI_BAD_INPUT;
        break;
      case 'j': json = 1; break;
      case 'h': usage(stdout); return CLI_OK;
      default: usage(stderr); return CLI_BAD_INPUT;
    }
  }
  const char *path = cli_one_input("mincap", "TRACE or SNAPSHOT file", argc, argv, usage);
  if (!path) return CLI_BAD_INPUT;
  char policies[16][32];
  int npolicies = cli_split_policies(policy_list, policies, 16);
  if (!npolicies) return CLI_BAD_INPUT;
  int rc = cli_check_policies(NULL, policies, npolicies, &confs);
  if (rc != CLI_OK) return rc;
  hbm_trace *trace;
  rc = cli_load_trace(path, &trace);
  if (rc != CLI_OK) return rc;

  hbm_mincap_result *results = calloc((size_t)npolicies, sizeof *results);
  if (!results) { cli_error("out of memory"); hbm_trace_free(trace); return CLI_FAILED; }
  int exit_code = CLI_OK, done = 0;
  for (int i = 0; i < npolicies; i++, done++) {
    show_progress(policies[i], i, npolicies);
    mo.conf = cli_conf_for(&confs, policies[i]);
    rc = hbm_mincap(trace, policies[i], &mo, &results[i]);
    if (rc != HBM_OK) {
      cli_progress_end();
      cli_error("mincap of %s through %s failed: %s", path, policies[i], hbm_strerror(rc));
      exit_code = cli_exit_code(rc) == CLI_BAD_INPUT ? CLI_BAD_INPUT : CLI_FAILED;
      break;
    }
  }
  if (cli_is_tty()) fprintf(stderr, "\r%70s\r", "");

  uint64_t peak_live = hbm_trace_peak_live(trace);
  if (json) {
    hbm_json j;
    hbm_json_init(&j);
    hbm_json_object_begin(&j);
    hbm_json_kv_string(&j, "trace", path);
    hbm_json_kv_u64(&j, "peak_live", peak_live);
    hbm_json_kv_u64(&j, "resolution", mo.resolution ? mo.resolution : 16ull << 20);
    hbm_json_key(&j, "policies");
    hbm_json_array_begin(&j);
    for (int i = 0; i < done; i++) {
      const hbm_mincap_result *r = &results[i];
      hbm_json_object_begin(&j);
      hbm_json_kv_string(&j, "policy", r->policy);
      hbm_json_key(&j, "alloc_conf");
      if (cli_conf_for(&confs, r->policy)) hbm_json_string(&j, cli_conf_for(&confs, r->policy)); else hbm_json_null(&j);
      hbm_json_key(&j, "min_capacity");
      if (r->found) hbm_json_u64(&j, r->min_capacity); else hbm_json_null(&j);
      hbm_json_key(&j, "backend_calls");
      if (r->found) hbm_json_u64(&j, r->backend_calls); else hbm_json_null(&j);
      hbm_json_key(&j, "over_peak_live");
      if (r->found && peak_live) hbm_json_double(&j, (double)r->min_capacity / (double)peak_live - 1.0);
      else hbm_json_null(&j);
      hbm_json_key(&j, "below_fails");
      hbm_json_bool(&j, r->below_fails);
      hbm_json_kv_u64(&j, "replays", r->replays);
      hbm_json_object_end(&j);
    }
    hbm_json_array_end(&j);
    hbm_json_object_end(&j);
    if (cli_print_json("mincap", &j) != CLI_OK) exit_code = CLI_FAILED;
  } else {
    char a[32], b[32];
    uint64_t events = hbm_trace_event_count(trace);
    printf("trace %s: %llu event%s, peak live %s\n\n", path, (unsigned long long)events, events == 1 ? "" : "s",
           cli_size(peak_live, a));
    printf("%-11s %14s %15s %14s %8s\n", "policy", "min capacity", "over peak live", "backend calls", "replays");
    for (int i = 0; i < done; i++) {
      const hbm_mincap_result *r = &results[i];
      if (!r->found) {
        printf("%-11s %14s %15s %14s %8llu  (fails up to the limit)\n", r->policy, "none", "-", "-",
               (unsigned long long)r->replays);
        continue;
      }
      if (peak_live) snprintf(b, sizeof b, "%+.2f%%", 100.0 * ((double)r->min_capacity / (double)peak_live - 1.0));
      else snprintf(b, sizeof b, "n/a"); /* as the JSON's null: nothing live to be over */
      printf("%-11s %14s %15s %14llu %8llu\n", r->policy, cli_size(r->min_capacity, a), b,
             (unsigned long long)r->backend_calls, (unsigned long long)r->replays);
    }
  }
  free(results);
  hbm_trace_free(trace);
  return exit_code;
}
