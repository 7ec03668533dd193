/* hbm bench replay: events per second of each policy on the same trace, in
 * one run, on the sim device. Default input: the 910c-dense workload
 * (hbm gen llm --preset 910c-dense) shortened to --steps steps. Each policy
 * is replayed --rounds times and the fastest round is kept. Rounds take the
 * policies in turn, so that a spell of a busy machine falls on all of them
 * alike rather than on whichever was running; each round's time over the
 * first policy's in the same round gives a ratio per round, and their median
 * and quartiles say how far one run's ratio can be trusted. The sim device
 * takes handles, mappings and copies on trust here (untracked_mappings):
 * its ledger's bookkeeping of each backend call would otherwise be timed as
 * the policy's, and it is the simulator's work, not the allocator's. */
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
          "usage: hbm bench replay [--trace FILE [--snapshot-device N] | --preset NAME] [--steps N]\n"
          "                        [--policy P,Q|all] [--alloc-conf [POLICY=]CONF ...] [--device SPEC]\n"
          "                        [--rounds N] [--every N] [--json]\n\n"
          "Replay speed per policy on one trace, same run, sim device (no memory touched;\n"
          "the device takes mappings on trust, so the time is the policy's own).\n"
          "  --trace FILE    an hbm trace or PyTorch snapshot (default: a generated workload);\n"
          "                  a snapshot names no capacity: give --device sim:SIZE with it\n"
          "  --snapshot-device N  which device of a multi-device snapshot (default: the first\n"
          "                  with trace entries, else the first with segments)\n"
          "  --preset NAME   workload preset for the generated trace (default 910c-dense);\n"
          "                  not with --trace\n"
          "  --steps N       steps of the generated trace (default 20); not with --trace\n"
          "  --policy LIST   policies, each once (default all)\n"
          "  --alloc-conf C  policy settings, as for hbm replay; POLICY=C for one policy, in place\n"
          "                  of the common C (e.g. --alloc-conf zoned=moves:off,plan:off); repeatable\n"
          "  --device SPEC   device (default: sim at the trace's capacity)\n"
          "  --rounds N      replays per policy, the policies in turn; the fastest counts, and\n"
          "                  each round's ratio to the first policy's gives median and quartiles\n"
          "                  (default 3, at most 1000)\n"
          "  --every N       sample every N events, as hbm replay (default: at each step boundary,\n"
          "                  or every thousandth of a trace without steps); a sample asks the policy\n"
          "                  for its usage, so a large N times the allocator alone\n"
          "JSON keys: bench, trace, events, rounds, policies: [{policy, alloc_conf, events_per_s,\n"
          "ns_per_event, ratio_to_first, ratio_median, ratio_quartiles, failures}]; ns_per_event and\n"
          "ratio_to_first are the fastest rounds', ratio_median and ratio_quartiles [first, third]\n"
          "the per-round ratios'.\n"
          "exit: 0 timed (requests that failed are counted, not an error), 1 a policy could not\n"
          "run (its starting state included: a policy that replays no event has nothing to time;\n"
          "the others are still reported), 2 bad input or usage (a trace with no events included)\n");
}

int bench_replay(int argc, char **argv) {
  static const struct option opts[] = {
      {"trace", required_argument, 0, 't'}, {"preset", required_argument, 0, 'p'},
      {"steps", required_argument, 0, 's'}, {"policy", required_argument, 0, 'P'},
      {"device", required_argument, 0, 'd'}, {"rounds", required_argument, 0, 'r'},
      {"alloc-conf", required_argument, 0, 'a'}, {"every", required_argument, 0, 'e'},
      {"json", no_argument, 0, 'j'},           {"help", no_argument, 0, 'h'},
      {"snapshot-device", required_argument, 0, 'S'}, {0, 0, 0, 0}};
  const char *trace_path = NULL, *preset = "910c-dense", *policy_list = "all", *device = NULL;
  uint64_t steps = 20, rounds = 3, every = 0;
  int json = 0, preset_given = 0, steps_given = 0, snapshot_device = -1, c;
  cli_confs confs = {0};
  optind = 1;
  opterr = 0; /* cli_option_error says what is wrong */
  cli_seen seen = {.command = "bench replay"};
  while ((c = cli_getopt(argc, argv, ":h", opts, "alloc-conf", &seen)) != -1) {
    int ok = 1;
    switch (c) {
      case 't': trace_path = optarg; break;
      case 'S': ok = cli_parse_snapshot_device("bench replay: --snapshot-device", optarg, &snapshot_device); break;
      case 'p': preset = optarg; preset_given = 1; break;
      case 's':
        ok = cli_parse_count("bench replay: --steps", optarg, 1, 1000000, &steps);
        steps_given = 1;
        break;
      case 'P': policy_list = optarg; break;
      case 'd': device = optarg; break;
      case 'r': ok = cli_parse_count("bench replay: --rounds", optarg, 1, BENCH_MAX_ROUNDS, &rounds); break;
      case 'e': ok = cli_parse_count("bench replay: --every", optarg, 1, UINT64_MAX, &every); break;
      case 'a':
        if (!cli_conf_add(&confs, optarg)) return CLI_BAD_INPUT;
        break;
      case 'j': json = 1; break;
      case 'h': usage(stdout); return CLI_OK;
      default: return cli_option_error("bench replay", argv, c);
    }
    if (!ok) return CLI_BAD_INPUT;
  }
  if (optind < argc) { /* else ignored: a bare trace name would measure the defaults */
    cli_error("bench replay: unexpected argument '%s' (try: hbm bench replay --help)", argv[optind]);
    return CLI_BAD_INPUT;
  }
  enum { MAX_POLICIES = 16 };
  char policies[MAX_POLICIES][32];
  int npolicies = cli_split_policies(policy_list, policies, MAX_POLICIES);
  if (!npolicies) return CLI_BAD_INPUT;
  if (!trace_path && snapshot_device >= 0) {
    cli_error("bench replay: --snapshot-device picks a device of a --trace snapshot; give --trace with it");
    return CLI_BAD_INPUT;
  }
  if (trace_path && (preset_given || steps_given)) {
    cli_error("bench replay: %s shapes the generated workload, not a --trace file; give one or the other",
              preset_given ? "--preset" : "--steps");
    return CLI_BAD_INPUT;
  }
  int drc = cli_check_policies(device, policies, npolicies, &confs, NULL);
  if (drc != CLI_OK) return drc;
  hbm_trace *t = NULL;
  hbm_diag d = {0};
  char name[128];
  int rc;
  if (trace_path) {
    rc = hbm_trace_load_device(trace_path, snapshot_device, &t, &d);
    if (rc == HBM_OK) cli_note_private_pools(trace_path, t);
    snprintf(name, sizeof name, "%s", trace_path);
  } else {
    hbm_gen_llm_config cfg;
    hbm_gen_llm_defaults(&cfg);
    rc = hbm_gen_llm_preset(preset, &cfg);
    if (rc != HBM_OK) {
      cli_unknown_preset("bench replay: --preset", preset);
      return CLI_BAD_INPUT;
    }
    cfg.steps = (uint32_t)steps;
    int mrc = cli_check_trace_memory("bench replay", &cfg, sizeof(hbm_event));
    if (mrc != CLI_OK) return mrc;
    rc = hbm_gen_llm(&cfg, &t, &d);
    snprintf(name, sizeof name, "generated %s, %llu step%s", preset, (unsigned long long)steps,
             steps == 1 ? "" : "s");
  }
  if (rc != HBM_OK) {
    cli_diag(&d, rc, name);
    return cli_exit_code(rc);
  }
  if (!hbm_trace_event_count(t)) {
    cli_error("bench replay: %s has no events to time", name);
    hbm_trace_free(t);
    return CLI_BAD_INPUT;
  }
  if (!device && !hbm_trace_capacity(t)) {
    cli_error("bench replay: %s names no capacity: give --device sim:SIZE (e.g. sim:80GiB)", name);
    hbm_trace_free(t);
    return CLI_BAD_INPUT;
  }
  /* Every round first, then the report: settings a policy refuses (bad input)
   * end the run before anything is printed. */
  double best[MAX_POLICIES] = {0};
  static double round_ns[MAX_POLICIES][BENCH_MAX_ROUNDS];
  hbm_replay_result res[MAX_POLICIES];
  int err[MAX_POLICIES] = {0};
  int unfit[MAX_POLICIES] = {0};
  for (uint64_t k = 0; k < rounds; k++)
    for (int i = 0; i < npolicies; i++) {
      if (err[i]) continue;
      hbm_replay_options o = {.policy = policies[i], .conf = cli_conf_for(&confs, policies[i]), .device = device, .every = every,
                              .untracked_mappings = 1};
      if ((err[i] = hbm_replay(t, &o, &res[i])) != HBM_OK) continue;
      if (res[i].oom && res[i].first_oom.cause == HBM_CAUSE_START) { /* no event ran: nothing to time */
        unfit[i] = 1;
        err[i] = HBM_ENOMEM;
        continue;
      }
      round_ns[i][k] = res[i].ns_per_event;
      if (best[i] == 0 || res[i].ns_per_event < best[i]) best[i] = res[i].ns_per_event;
    }
  int exit_code = CLI_OK;
  for (int i = 0; i < npolicies; i++) {
    const char *p = policies[i], *conf = cli_conf_for(&confs, p);
    if (err[i] == HBM_OK) continue; /* bad settings are bad input; anything else a failed run */
    if (unfit[i]) {
      cli_error("bench replay: %s%s%s: the trace's starting state does not fit on the device, so no event ran "
                "(hbm replay says why)", p, conf ? " with " : "", conf ? conf : "");
      if (exit_code == CLI_OK) exit_code = CLI_FAILED;
      continue;
    }
    cli_error("bench replay: %s%s%s: %s", p, conf ? " with " : "", conf ? conf : "", hbm_strerror(err[i]));
    if (cli_exit_code(err[i]) == CLI_BAD_INPUT) exit_code = CLI_BAD_INPUT;
    else if (exit_code == CLI_OK) exit_code = CLI_FAILED;
  }
  if (exit_code == CLI_BAD_INPUT) {
    hbm_trace_free(t);
    return exit_code;
  }
  hbm_json j;
  hbm_json_init(&j);
  hbm_json_object_begin(&j);
  hbm_json_kv_string(&j, "bench", "replay");
  hbm_json_kv_string(&j, "trace", name);
  hbm_json_kv_u64(&j, "events", hbm_trace_event_count(t));
  hbm_json_kv_u64(&j, "rounds", rounds);
  hbm_json_key(&j, "policies");
  hbm_json_array_begin(&j);
  int timed = 0; /* policies with a row: none, and the text's heading would head nothing */
  for (int i = 0; i < npolicies; i++) timed += err[i] == HBM_OK;
  if (!json && timed)
    printf("replay speed on %s (%llu event%s), fastest of %llu round%s\n", name,
           (unsigned long long)hbm_trace_event_count(t), hbm_trace_event_count(t) == 1 ? "" : "s",
           (unsigned long long)rounds, rounds == 1 ? "" : "s");
  double first = 0;
  int first_i = -1, n = (int)rounds;
  for (int i = 0; i < npolicies; i++) {
    const char *p = policies[i], *conf = cli_conf_for(&confs, p);
    if (err[i] != HBM_OK) continue; /* said above */
    if (first_i < 0) first_i = i, first = best[i];
    double eps = best[i] > 0 ? 1e9 / best[i] : 0;
    double med = bench_ratio_quantile(round_ns[first_i], round_ns[i], n, 0.5);
    double q1 = bench_ratio_quantile(round_ns[first_i], round_ns[i], n, 0.25);
    double q3 = bench_ratio_quantile(round_ns[first_i], round_ns[i], n, 0.75);
    hbm_json_object_begin(&j);
    hbm_json_kv_string(&j, "policy", p);
    hbm_json_key(&j, "alloc_conf");
    if (conf) hbm_json_string(&j, conf); else hbm_json_null(&j);
    hbm_json_kv_double(&j, "events_per_s", eps);
    hbm_json_kv_double(&j, "ns_per_event", best[i]);
    hbm_json_kv_double(&j, "ratio_to_first", best[i] / first);
    hbm_json_kv_double(&j, "ratio_median", med);
    hbm_json_key(&j, "ratio_quartiles");
    hbm_json_array_begin(&j);
    hbm_json_double(&j, q1);
    hbm_json_double(&j, q3);
    hbm_json_array_end(&j);
    hbm_json_kv_u64(&j, "failures", res[i].failures);
    hbm_json_object_end(&j);
    if (json) continue;
    printf("  %-11s %10.2f M events/s  %7.1f ns/event  %5.2fx the first", p, eps / 1e6, best[i], best[i] / first);
    if (i != first_i && n > 1) printf(" (per round: median %.2fx, middle half %.2f-%.2fx)", med, q1, q3);
    printf("  (%llu failed request%s)%s%s\n", (unsigned long long)res[i].failures, res[i].failures == 1 ? "" : "s",
           conf ? "  settings " : "", conf ? conf : "");
  }
  hbm_json_array_end(&j);
  hbm_json_object_end(&j);
  if (!json) hbm_json_release(&j);
  else if (cli_print_json("bench replay", &j) != CLI_OK) exit_code = CLI_FAILED;
  hbm_trace_free(t);
  return exit_code;
}
