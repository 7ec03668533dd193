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
          "usage: hbm mincap TRACE|SNAPSHOT [options]\n"
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
          "                         POLICY=CONF for one policy, in place of the common CONF;\n"
          "                         repeatable\n"
          "  --snapshot-device N    which device of a multi-device snapshot (default: the\n"
          "                         first with trace entries, else the first with segments)\n"
          "  --resolution SIZE      bisection step (default 16MiB; a multiple of 2MiB, at most\n"
          "                         1PiB and the limit)\n"
          "  --limit SIZE           largest capacity tried, rounded down to the resolution\n"
          "                         (default 8 x peak live, or 8 x the starting state's\n"
          "                         recorded segments if larger, + 1GiB; at least peak live,\n"
          "                         at most 1PiB)\n"
          "  --json                 machine-readable output: trace, events, peak_live,\n"
          "                         resolution, limit, policies (policy, alloc_conf,\n"
          "                         min_capacity, backend_calls, over_peak_live, below_fails,\n"
          "                         replays)\n"
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


/* The search must try one capacity at least: say up front why it could not
 * (else it would report "fails up to the limit" having replayed nothing). */
static int bounds_ok(const hbm_trace *t, const char *path, const hbm_mincap_options *mo, uint64_t peak,
                     const char *limit_text, uint64_t *resolution, uint64_t *first, uint64_t *limit) {
  if (hbm_mincap_bounds(t, mo, resolution, first, limit)) return 1;
  char a[32], b[32], d[32], rounded[96] = "";
  uint64_t given = mo->limit ? mo->limit : hbm_mincap_default_limit(t), typed;
  const char *which = mo->limit ? "--limit" : "the default limit";
  /* a --limit the granules rounded down is named as typed too */
  if (mo->limit && hbm_size_parse(limit_text, &typed) == HBM_OK && typed != given)
    snprintf(rounded, sizeof rounded, " ('%.40s' in whole 2 MiB granules)", limit_text);
  if (given < peak && !strcmp(cli_size(given, a), cli_size(peak, b))) /* the same when rounded: say bytes */
    cli_error("%s: %s %s (%llu B)%s is below the trace's peak live %llu B: nothing can complete there", path, which, a,
              (unsigned long long)given, rounded, (unsigned long long)peak);
  else if (given < peak)
    cli_error("%s: %s %s%s is below the trace's peak live %s: nothing can complete there", path, which,
              cli_size(given, a), rounded, cli_size(peak, b));
  else if (*resolution > given)
    cli_error("%s: --resolution %s is above %s %s%s: no capacity to try", path, cli_size(*resolution, a), which,
              cli_size(given, b), rounded);
  else
    cli_error("%s: %s %s%s leaves no capacity to try: the first is peak live %s rounded up to the resolution, %s",
              path, which, cli_size(given, a), rounded, cli_size(peak, b), cli_size(*first, d));
  return 0;
}

int cmd_mincap(int argc, char **argv) {
  static const struct option opts[] = {
      {"policy", required_argument, 0, 'p'}, {"alloc-conf", required_argument, 0, 'a'},
      {"resolution", required_argument, 0, 'r'}, {"limit", required_argument, 0, 'l'},
      {"snapshot-device", required_argument, 0, 'D'}, {"json", no_argument, 0, 'j'},
      {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  const char *policy_list = "all";
  int snapshot_device = -1; /* not given */
  hbm_mincap_options mo = {0};
  cli_confs confs = {0};
  int json = 0, c;
  optind = 1;
  opterr = 0; /* cli_option_error says what is wrong */
  cli_seen seen = {0};
  const char *limit_text = "";
  while ((c = cli_getopt(argc, argv, ":h", opts, "alloc-conf", &seen)) != -1) {
    switch (c) {
      case 'p': policy_list = optarg; break;
      case 'D':
        if (!cli_parse_snapshot_device("--snapshot-device", optarg, &snapshot_device)) return CLI_BAD_INPUT;
        break;
      case 'a':
        if (!cli_conf_add(&confs, optarg)) return CLI_BAD_INPUT;
        break;
      case 'r':
        if (!cli_parse_size("--resolution", optarg, &mo.resolution)) return CLI_BAD_INPUT;
        if (mo.resolution % (2ull << 20) || mo.resolution > (1ull << 50)) {
          cli_error("--resolution: expected a multiple of 2MiB (the device granule) up to 1PiB, got '%s'", optarg);
          return CLI_BAD_INPUT;
        }
        break;
      case 'l':
        if (!cli_parse_capacity("--limit", optarg, &mo.limit)) return CLI_BAD_INPUT;
        limit_text = optarg;
        break;
      case 'j': json = 1; break;
      case 'h': usage(stdout); return CLI_OK;
      default: return cli_option_error("mincap", argv, c);
    }
  }
  const char *path = cli_one_input("mincap", "TRACE or SNAPSHOT file", argc, argv, usage);
  if (!path) return CLI_BAD_INPUT;
  if (mo.resolution && mo.limit && mo.resolution > mo.limit) {
    char a[32], b[32];
    cli_error("--resolution %s is above --limit %s: no capacity to try", cli_size(mo.resolution, a),
              cli_size(mo.limit, b));
    return CLI_BAD_INPUT;
  }
  char policies[16][32];
  int npolicies = cli_split_policies(policy_list, policies, 16);
  if (!npolicies) return CLI_BAD_INPUT;
  int rc = cli_check_policies(NULL, policies, npolicies, &confs, NULL);
  if (rc != CLI_OK) return rc;
  hbm_trace *trace;
  rc = cli_load_trace(path, snapshot_device, &trace);
  if (rc != CLI_OK) return rc;
  uint64_t peak_live = hbm_trace_peak_live(trace), resolution, first, limit;
  if (!bounds_ok(trace, path, &mo, peak_live, limit_text, &resolution, &first, &limit)) {
    hbm_trace_free(trace);
    return CLI_BAD_INPUT;
  }

  hbm_mincap_result *results = calloc((size_t)npolicies, sizeof *results);
  if (!results) { cli_error("out of memory"); hbm_trace_free(trace); return CLI_FAILED; }
  int exit_code = CLI_OK, done = 0;
  int *errors = calloc((size_t)npolicies, sizeof *errors); /* HBM_OK, or why that policy's search could not go on */
  if (!errors) { cli_error("out of memory"); free(results); hbm_trace_free(trace); return CLI_FAILED; }
  for (int i = 0; i < npolicies; i++, done++) {
    if (!json) show_progress(policies[i], i, npolicies);
    mo.conf = cli_conf_for(&confs, policies[i]);
    rc = hbm_mincap(trace, policies[i], &mo, &results[i]);
    if (rc != HBM_OK) {
      cli_progress_end();
      if (cli_policy_failed("mincap", path, policies[i], rc, &exit_code)) break;
      errors[i] = rc;
      snprintf(results[i].policy, sizeof results[i].policy, "%.31s", policies[i]); /* both 32 bytes */
    }
  }
  if (!json && cli_is_tty()) fprintf(stderr, "\r%70s\r", "");
  if (exit_code == CLI_BAD_INPUT) { /* every policy would say the same: no report, as replay */
    free(errors);
    free(results);
    hbm_trace_free(trace);
    return exit_code;
  }

  uint64_t events = hbm_trace_event_count(trace);
  if (json) {
    hbm_json j;
    hbm_json_init(&j);
    hbm_json_object_begin(&j);
    hbm_json_kv_string(&j, "trace", path);
    hbm_json_kv_u64(&j, "events", events);
    hbm_json_kv_u64(&j, "peak_live", peak_live);
    hbm_json_kv_u64(&j, "resolution", resolution);
    hbm_json_kv_u64(&j, "limit", limit);
    hbm_json_key(&j, "policies");
    hbm_json_array_begin(&j);
    for (int i = 0; i < done; i++) {
      const hbm_mincap_result *r = &results[i];
      if (cli_json_policy_begin(&j, r->policy, cli_conf_for(&confs, r->policy), errors[i])) continue;
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
    char a[32], b[32], d[32];
    printf("trace %s: %llu event%s, peak live %s\n", path, (unsigned long long)events, events == 1 ? "" : "s",
           cli_size(peak_live, a));
    printf("search %s to %s in steps of %s\n\n", cli_size(first, a), cli_size(limit, b), cli_size(resolution, d));
    printf("%-11s %14s %15s %14s %8s\n", "policy", "min capacity", "over peak live", "backend calls", "replays");
    for (int i = 0; i < done; i++) {
      const hbm_mincap_result *r = &results[i];
      const char *conf = cli_conf_for(&confs, r->policy); /* as the JSON's alloc_conf, under the row */
      if (errors[i] != HBM_OK) {
        printf("%-11s error: %s\n", r->policy, hbm_strerror(errors[i]));
        cli_print_settings(conf);
        continue;
      }
      if (!r->found) {
        printf("%-11s %14s %15s %14s %8llu  (fails up to the limit, %s)\n", r->policy, "none", "-", "-",
               (unsigned long long)r->replays, cli_size(limit, a));
        cli_print_settings(conf);
        continue;
      }
      if (peak_live) snprintf(b, sizeof b, "%+.2f%%", 100.0 * ((double)r->min_capacity / (double)peak_live - 1.0));
      else snprintf(b, sizeof b, "n/a"); /* as the JSON's null: nothing live to be over */
      printf("%-11s %14s %15s %14llu %8llu\n", r->policy, cli_size(r->min_capacity, a), b,
             (unsigned long long)r->backend_calls, (unsigned long long)r->replays);
      cli_print_settings(conf);
    }
  }
  free(errors);
  free(results);
  hbm_trace_free(trace);
  return exit_code;
}
