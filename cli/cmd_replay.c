/* hbm replay: replays a trace (or a PyTorch snapshot) through policies. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "report/html.h"
#include "report/json.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: hbm replay TRACE|SNAPSHOT [options]\n"
          "\n"
          "Replays every allocation of a trace (hbm text trace v1, or a PyTorch memory\n"
          "snapshot pickle) through allocator policies and reports peak reserved,\n"
          "efficiency, fragmentation and the first failed request with its cause.\n"
          "\n"
          "options:\n"
          "  --policy P[,Q...]|all   policies to compare, each once (default: bestfit); known: %s\n"
          "  --device SPEC           sim:96GiB (default: sim at the trace's capacity) or host:4GiB\n"
          "  --capacity SIZE         shorthand for --device sim:SIZE\n"
          "  --snapshot-device N     which device of a multi-device snapshot (default: the\n"
          "                          first with trace entries, else the first with\n"
          "                          segments)\n"
          "  --alloc-conf CONF       policy settings (PyTorch syntax for caching/expandable);\n"
          "                          POLICY=CONF for one policy, in place of the common CONF;\n"
          "                          repeatable\n"
          "  --every N               sample every N events (default: at each step boundary)\n"
          "  --samples               print the samples too: fragmentation, largest free,\n"
          "                          backend calls and allocations so far, live by purpose\n"
          "  --html FILE             write a self-contained report page (inline SVG) to FILE\n"
          "  --layout-at WHEN        print each policy's layout (live blocks and holes in\n"
          "                          address order): N, after the first N events (just\n"
          "                          before event N, counted from 0 as failures are; 0,\n"
          "                          the starting state alone);\n"
          "                          failure, at the first failed request; peak, when\n"
          "                          reserved first reached its peak; tightest, at the\n"
          "                          sample with the smallest largest free block (past\n"
          "                          steps 0 and 1 where the samples reach past them)\n"
          "  --verify                fill every block and verify it on free (host device)\n"
          "  --check N               the policy's invariants after every N events (slow;\n"
          "                          for bug reports): a broken one fails the replay\n"
          "  --json                  machine-readable output\n"
          "  -h, --help              this text\n"
          "\n"
          "exit: 0 replayed (even if requests failed: see oom), 1 replay error or an output\n"
          "(--html FILE, standard output) that could not be written (a page written without\n"
          "a layout it could not draw included), 2 bad input\n",
          hbm_policy_names());
}


/* The device's capacity, from the first run that opened it; the trace's
 * where none did. */
static uint64_t device_capacity(const hbm_trace *trace, const hbm_report_run *runs, int nruns) {
  for (int i = 0; i < nruns; i++)
    if (runs[i].result.capacity) return runs[i].result.capacity;
  return hbm_trace_capacity(trace);
}

/* The report page: runs that did not fail show their layout at the sampled
 * moment with the smallest largest free block (one more partial replay). */
static int write_html(const hbm_trace *trace, const char *path, const char *html_path,
                      hbm_report_run *runs, int nruns, const cli_confs *confs, const char *device, uint64_t every,
                      int json) {
  int undrawn = 0; /* layouts the page could not draw: the page is written, short of them (exit 1) */
  for (int i = 0; i < nruns; i++) {
    uint64_t at = runs[i].result.oom || runs[i].error ? HBM_REPORT_NO_MOMENT : hbm_report_tightest_event(&runs[i]);
    char label[48];
    snprintf(label, sizeof label, "%.31s: layout", runs[i].result.policy);
    int rc = at != HBM_REPORT_NO_MOMENT ? hbm_report_layout_at(trace, runs[i].result.policy, cli_conf_for(confs, runs[i].result.policy), device,
                                       at, json ? NULL : cli_progress_fn, label, &runs[i])
                : HBM_OK;
    cli_progress_end();
    undrawn += rc != HBM_OK;
    if (rc != HBM_OK) /* the page says so where the layout would be */
      cli_error("%s: %s's layout at event %llu is not drawn: %s", html_path, runs[i].result.policy,
                (unsigned long long)at, hbm_strerror(rc));
  }
  hbm_report rep = {.title = "hbm replay", .workload = path, .runs = runs, .nruns = nruns, .every = every,
                    .capacity = device_capacity(trace, runs, nruns)};
  if (hbm_report_trace_facts(trace, &rep) != HBM_OK) cli_error("out of host memory: live is drawn from samples");
  char *html = NULL;
  size_t len = 0;
  int rc = hbm_report_html(&rep, &html, &len);
  int out = rc == HBM_OK ? cli_write_output(html_path, html, len, &path, 1) : CLI_FAILED;
  if (rc != HBM_OK) cli_error("%s: could not render the report: %s", html_path, hbm_strerror(rc));
  free(html);
  hbm_report_release(&rep);
  return out == CLI_OK && undrawn ? CLI_FAILED : out;
}

/* --verify writes every live byte, so the host device's memory becomes real
 * host memory: up to the trace's peak live, or the device's capacity where
 * that is less (the run fails there). Refused up front rather than left to
 * the OOM killer, which may pick another process. */
static int check_verify_memory(const hbm_trace *trace, const hbm_device_caps *caps, const char *path) {
  uint64_t need = hbm_trace_peak_live(trace);
  if (caps->capacity < need) need = caps->capacity;
  char what[PATH_MAX + 64];
  snprintf(what, sizeof what, "--verify on %s (every live byte written)", path);
  return cli_check_host_memory(what, need, "replay without --verify, or on a smaller trace");
}


/* ---- --layout-at: a policy's layout at a chosen moment ---- */
typedef enum layout_when { LAYOUT_NONE, LAYOUT_EVENT, LAYOUT_FAILURE, LAYOUT_PEAK, LAYOUT_TIGHTEST } layout_when;

static int parse_layout_at(const char *text, layout_when *when, uint64_t *event) {
  if (!strcmp(text, "failure")) *when = LAYOUT_FAILURE;
  else if (!strcmp(text, "peak")) *when = LAYOUT_PEAK;
  else if (!strcmp(text, "tightest")) *when = LAYOUT_TIGHTEST;
  else if (hbm_count_parse(text, event) == HBM_OK) *when = LAYOUT_EVENT;
  else {
    cli_error("--layout-at: expected a number of events (0 or more), failure, peak or tightest, got '%s'", text);
    return 0;
  }
  return 1;
}

/* One policy's layout for --layout-at: in `own` (a partial replay up to the
 * moment), or the one its run kept at the first failure. *why says why there
 * is none (layout NULL, HBM_OK); an error only where the replay up to the
 * moment could not run. */
typedef struct layout_pick {
  const hbm_report_run *run; /* the layout and its moment; NULL: none */
  const char *why;           /* why none */
} layout_pick;

static int pick_layout(const hbm_trace *trace, layout_when when, uint64_t event, hbm_report_run *run,
                       const char *conf, const char *device, int progress, hbm_report_run *own, layout_pick *out) {
  out->run = NULL;
  out->why = NULL;
  const hbm_replay_result *r = &run->result;
  if (r->oom && r->first_oom.cause == HBM_CAUSE_START) {
    out->why = "the starting state did not fit, and no event ran";
    return HBM_OK;
  }
  if (when == LAYOUT_FAILURE) {
    if (!r->oom) {
      out->why = "no request failed";
      return HBM_OK;
    }
    if (!run->layout_at_failure) {
      out->why = "the policy reported no layout at the failure";
      return HBM_OK;
    }
    hbm_report_failure_moment(run);
    out->run = run;
    return HBM_OK;
  }
  if (when == LAYOUT_TIGHTEST && (event = hbm_report_tightest_event(run)) == HBM_REPORT_NO_MOMENT) {
    out->why = "no sample was taken";
    return HBM_OK;
  }
  if (when == LAYOUT_PEAK) event = r->peak_reserved_event; /* 0: with the starting state */
  char label[48];
  snprintf(label, sizeof label, "%.31s: layout", r->policy);
  int rc = hbm_report_layout_at(trace, r->policy, conf, device, event, progress ? cli_progress_fn : NULL, label, own);
  cli_progress_end();
  if (rc == HBM_OK) out->run = own;
  return rc;
}

static const char *layout_moment(layout_when when, const hbm_report_run *run, char *buf, size_t len) {
  if (when == LAYOUT_FAILURE)
    snprintf(buf, len, "at its first failure (event %llu, step %llu)", (unsigned long long)run->layout_event,
             (unsigned long long)run->layout_step);
  else if (!run->layout_event)
    snprintf(buf, len, "after its starting state, before any event%s", when == LAYOUT_PEAK ? ", at peak reserved" : "");
  else
    snprintf(buf, len, "after %llu event%s%s (step %llu)", (unsigned long long)run->layout_event,
             run->layout_event == 1 ? "" : "s",
             when == LAYOUT_TIGHTEST ? ", the tightest sample" : when == LAYOUT_PEAK ? ", at peak reserved" : "",
             (unsigned long long)run->layout_step);
  return buf;
}

static void print_layout(const char *policy, layout_when when, const layout_pick *pick) {
  char a[32], b[32], moment[96];
  if (!pick->run) {
    printf("\nlayout of %s: none (%s)\n", policy, pick->why);
    return;
  }
  const hbm_report_run *run = pick->run;
  hbm_layout_summary s;
  hbm_layout_summarize(run->layout, run->nlayout, &s);
  printf("\nlayout of %s %s: live %s; %llu %s %s as placed; ", policy,
         layout_moment(when, run, moment, sizeof moment), cli_size(run->layout_live, a),
         (unsigned long long)s.live_blocks, s.live_blocks == 1 ? "block holds" : "blocks hold", cli_size(s.live_bytes, b));
  if (when != LAYOUT_FAILURE) printf("reserved %s; ", cli_size(run->layout_reserved, a)); /* not reported there */
  /* at the failure, its free figures told apart from the request as the table's line gives them:
   * "largest free 5.00 MiB" under "request 5.00 MiB" would read as a contradiction (elsewhere
   * there is no request: a request of 0 rounds alike with nothing) */
  char said[4][32];
  uint64_t request = when == LAYOUT_FAILURE ? run->result.first_oom.request : 0;
  hbm_report_sizes_apart((const uint64_t[]){request, s.hole_bytes, s.largest_hole, run->layout_largest_free}, 4,
                         said);
  printf("%llu hole%s, %s in all, the largest %s; largest free %s\n", (unsigned long long)s.holes,
         s.holes == 1 ? "" : "s", said[1], said[2], said[3]);
  printf("  placed by purpose:");
  for (int t = 0; t < HBM_TAG_COUNT; t++)
    if (s.live_by_tag[t]) printf(" %s %s", hbm_tag_name((hbm_tag)t), cli_size(s.live_by_tag[t], a));
  printf("%s\n", s.live_blocks ? "" : " none");
  printf("  %llu range%s spanning %s\n", (unsigned long long)s.ranges, s.ranges == 1 ? "" : "s",
         cli_size(s.span, a));
  printf("  %-18s %16s %11s  %s\n", "address", "bytes", "size", "what");
  for (size_t i = 0; i < run->nlayout; i++) {
    const hbm_layout_run *l = &run->layout[i];
    printf("  %#018llx %16llu %11s  %s\n", (unsigned long long)l->addr, (unsigned long long)l->size,
           cli_size(l->size, a), l->live ? hbm_tag_name((hbm_tag)l->tag) : "hole");
  }
}

static void json_layout(hbm_json *j, layout_when when, const layout_pick *pick) {
  hbm_json_key(j, "layout");
  if (!pick->run) {
    hbm_json_null(j);
    hbm_json_kv_string(j, "layout_note", pick->why);
    return;
  }
  const hbm_report_run *run = pick->run;
  hbm_layout_summary s;
  hbm_layout_summarize(run->layout, run->nlayout, &s);
  hbm_json_object_begin(j);
  static const char *const at[] = {"", "event", "failure", "peak", "tightest"};
  hbm_json_kv_string(j, "at", at[when]);
  hbm_json_kv_u64(j, "event", run->layout_event);
  hbm_json_kv_u64(j, "step", run->layout_step);
  hbm_json_kv_u64(j, "live", run->layout_live);
  hbm_json_kv_u64(j, "live_blocks", s.live_blocks);
  hbm_json_kv_u64(j, "placed", s.live_bytes);
  hbm_json_key(j, "reserved"); /* not reported at a failure */
  if (when != LAYOUT_FAILURE) hbm_json_u64(j, run->layout_reserved);
  else hbm_json_null(j);
  hbm_json_kv_u64(j, "holes", s.holes);
  hbm_json_kv_u64(j, "hole_bytes", s.hole_bytes);
  hbm_json_kv_u64(j, "largest_hole", s.largest_hole);
  hbm_json_kv_u64(j, "largest_free", run->layout_largest_free);
  hbm_json_kv_u64(j, "ranges", s.ranges);
  hbm_json_kv_u64(j, "span", s.span);
  hbm_json_key(j, "placed_by_purpose");
  hbm_json_object_begin(j);
  for (int t = 0; t < HBM_TAG_COUNT; t++)
    if (s.live_by_tag[t]) hbm_json_kv_u64(j, hbm_tag_name((hbm_tag)t), s.live_by_tag[t]);
  hbm_json_object_end(j);
  hbm_json_key(j, "runs");
  hbm_json_array_begin(j);
  for (size_t i = 0; i < run->nlayout; i++) {
    const hbm_layout_run *l = &run->layout[i];
    hbm_json_object_begin(j);
    hbm_json_kv_u64(j, "addr", l->addr);
    hbm_json_kv_u64(j, "size", l->size);
    hbm_json_kv_string(j, "what", l->live ? hbm_tag_name((hbm_tag)l->tag) : "hole");
    hbm_json_object_end(j);
  }
  hbm_json_array_end(j);
  hbm_json_object_end(j);
}

int cmd_replay(int argc, char **argv) {
  static const struct option opts[] = {
      {"policy", required_argument, 0, 'p'}, {"device", required_argument, 0, 'd'},
      {"snapshot-device", required_argument, 0, 'D'},
      {"capacity", required_argument, 0, 'c'}, {"alloc-conf", required_argument, 0, 'a'},
      {"every", required_argument, 0, 'e'}, {"samples", no_argument, 0, 's'},
      {"verify", no_argument, 0, 'v'}, {"check", required_argument, 0, 'C'}, {"json", no_argument, 0, 'j'}, {"html", required_argument, 0, 'H'},
      {"layout-at", required_argument, 0, 'L'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  const char *policy_list = "bestfit", *device = NULL, *html_path = NULL;
  cli_confs confs = {0};
  char device_buf[64];
  int json = 0, show_samples = 0, verify_data = 0, c;
  uint64_t every = 0, check_every = 0, layout_event = 0;
  layout_when layout_at = LAYOUT_NONE;
  int snapshot_device = -1; /* not given */
  optind = 1;
  opterr = 0; /* cli_option_error says what is wrong */
  cli_seen seen = {0};
  while ((c = cli_getopt(argc, argv, ":h", opts, "alloc-conf", &seen)) != -1) {
    switch (c) {
      case 'p': policy_list = optarg; break;
      case 'D':
        if (!cli_parse_snapshot_device("--snapshot-device", optarg, &snapshot_device)) return CLI_BAD_INPUT;
        break;
      case 'd':
      case 'c': {
        if (device) { /* both: which would win is a guess (one twice: cli_getopt) */
          cli_error("--capacity and --device each name the device: give one of them, once (a second: '%s')", optarg);
          return CLI_BAD_INPUT;
        }
        if (c == 'd') {
          device = optarg;
          break;
        }
        uint64_t cap;
        if (!cli_parse_capacity("--capacity", optarg, &cap)) return CLI_BAD_INPUT;
        snprintf(device_buf, sizeof device_buf, "sim:%llu", (unsigned long long)cap);
        device = device_buf;
        break;
      }
      case 'a':
        if (!cli_conf_add(&confs, optarg)) return CLI_BAD_INPUT;
        break;
      case 'e':
        if (!cli_parse_count("--every", optarg, 1, UINT64_MAX, &every)) return CLI_BAD_INPUT;
        break;
      case 'C':
        if (!cli_parse_count("--check", optarg, 1, UINT64_MAX, &check_every)) return CLI_BAD_INPUT;
        break;
      case 's': show_samples = 1; break;
      case 'v': verify_data = 1; break;
      case 'j': json = 1; break;
      case 'H':
        if (!(html_path = cli_output_path("--html", optarg))) return CLI_BAD_INPUT;
        break;
      case 'L':
        if (!parse_layout_at(optarg, &layout_at, &layout_event)) return CLI_BAD_INPUT;
        break;
      case 'h': usage(stdout); return CLI_OK;
      default: return cli_option_error("replay", argv, c);
    }
  }
  const char *path = cli_one_input("replay", "TRACE or SNAPSHOT file", argc, argv, usage);
  if (!path) return CLI_BAD_INPUT;
  char policies[16][32];
  int npolicies = cli_split_policies(policy_list, policies, 16);
  if (!npolicies) return CLI_BAD_INPUT;
  hbm_device_caps caps = {0}; /* of the device the replays run on (a sim one where none is given) */
  int rc = cli_check_policies(device, policies, npolicies, &confs, &caps);
  if (rc != CLI_OK) return rc;
  if (verify_data && !caps.host_visible) {
    cli_error("--verify fills and checks real memory: it needs the host device (e.g. --device host:4GiB)");
    return CLI_BAD_INPUT;
  }

  hbm_trace *trace;
  rc = cli_load_trace(path, snapshot_device, &trace);
  if (rc != CLI_OK) return rc;
  if (html_path && (rc = cli_check_output(html_path, &path, 1)) != CLI_OK) {
    hbm_trace_free(trace);
    return rc;
  }
  if (!device && !hbm_trace_capacity(trace)) { /* snapshots name none: say how to give one */
    cli_error("%s names no device capacity: pass --capacity SIZE (e.g. --capacity 80GiB) or --device SPEC", path);
    hbm_trace_free(trace);
    return CLI_BAD_INPUT;
  }
  if (layout_at == LAYOUT_EVENT && layout_event > hbm_trace_event_count(trace)) {
    cli_error("--layout-at: %s has %llu events: expected 0..%llu, failure, peak or tightest, got %llu", path,
              (unsigned long long)hbm_trace_event_count(trace), (unsigned long long)hbm_trace_event_count(trace),
              (unsigned long long)layout_event);
    hbm_trace_free(trace);
    return CLI_BAD_INPUT;
  }
  if (verify_data && (rc = check_verify_memory(trace, &caps, path)) != CLI_OK) {
    hbm_trace_free(trace);
    return rc;
  }

  hbm_replay_result results[16];
  hbm_report_run runs[16]; /* samples and the layout at the first failure, per policy */
  memset(runs, 0, sizeof runs);
  int exit_code = CLI_OK;
  for (int i = 0; i < npolicies; i++) {
    hbm_replay_options o = {.policy = policies[i], .conf = cli_conf_for(&confs, policies[i]), .device = device, .every = every,
                            .verify_data = verify_data, .on_progress = json ? NULL : cli_progress_fn,
                            .progress_arg = policies[i], .check_every = check_every};
    rc = hbm_report_run_hooks(trace, &runs[i], &o);
    if (rc == HBM_OK) rc = hbm_replay(trace, &o, &results[i]);
    else memset(&results[i], 0, sizeof results[i]);
    /* a sample the run could not keep (no host memory): its samples, page and
     * layouts would lack it unsaid, so the run is an error, as the library's */
    if (rc == HBM_OK && runs[i].error != HBM_OK) rc = runs[i].error;
    cli_progress_end();
    if (!results[i].policy[0]) /* cleared where the policy could not open */
      snprintf(results[i].policy, sizeof results[i].policy, "%s", policies[i]);
    runs[i].result = results[i];
    runs[i].conf = o.conf;
    runs[i].error = rc;
    if (rc != HBM_OK && cli_policy_failed("replay", path, policies[i], rc, &exit_code)) {
      npolicies = i;
      break;
    }
  }

  /* The page first: where it goes to standard output, the table then goes to
   * standard error, so the page reaches its reader alone. */
  int html_written = 0;
  if (html_path && exit_code != CLI_BAD_INPUT && npolicies) { /* a run that could not go on shows its error there */
    int rc_html = write_html(trace, path, html_path, runs, npolicies, &confs, device, every, json);
    if (rc_html != CLI_OK) exit_code = rc_html;
    else html_written = 1, cli_summary_after_output(html_path);
  }
  /* The layouts asked for: each policy's moment, replayed again up to it
   * (the page's layouts stay the page's). */
  hbm_report_run own[16];
  layout_pick picks[16];
  memset(own, 0, sizeof own);
  memset(picks, 0, sizeof picks);
  for (int i = 0; layout_at != LAYOUT_NONE && i < npolicies; i++) {
    if (runs[i].error != HBM_OK) continue;
    rc = pick_layout(trace, layout_at, layout_event, &runs[i], cli_conf_for(&confs, policies[i]), device, !json,
                     &own[i], &picks[i]);
    if (rc != HBM_OK) {
      cli_error("%s: %s's layout could not be taken: %s", path, policies[i], hbm_strerror(rc));
      picks[i].why = "it could not be taken";
      exit_code = CLI_FAILED;
    }
  }
  uint64_t peak_live = hbm_trace_peak_live(trace);
  uint64_t capacity = device_capacity(trace, runs, npolicies);
  if (!npolicies) {
    /* the first policy failed: its error is the whole report */
  } else if (json) {
    hbm_json j;
    hbm_json_init(&j);
    hbm_json_object_begin(&j);
    hbm_json_kv_string(&j, "trace", path);
    hbm_json_kv_u64(&j, "events", hbm_trace_event_count(trace));
    hbm_json_kv_u64(&j, "capacity", capacity);
    hbm_json_kv_u64(&j, "peak_live", peak_live);
    hbm_json_key(&j, "policies");
    hbm_json_array_begin(&j);
    for (int i = 0; i < npolicies; i++) {
      const hbm_replay_result *r = &results[i];
      if (cli_json_policy_begin(&j, r->policy, cli_conf_for(&confs, r->policy), runs[i].error)) continue;
      hbm_json_kv_u64(&j, "peak_reserved", r->peak_reserved);
      hbm_json_kv_u64(&j, "peak_reserved_event", r->peak_reserved_event);
      hbm_json_kv_u64(&j, "peak_device", r->peak_device);
      hbm_json_kv_u64(&j, "peak_allocated", r->peak_allocated);
      hbm_json_kv_u64(&j, "peak_live", r->peak_live);
      cli_json_efficiency(&j, r);
      hbm_json_kv_double(&j, "max_frag", r->max_frag);
      hbm_json_kv_u64(&j, "backend_calls", r->backend_calls);
      hbm_json_kv_u64(&j, "backend_calls_after_first_step", r->backend_calls_after_first_step);
      hbm_json_kv_u64(&j, "alloc_events", r->alloc_events);
      hbm_json_kv_double(&j, "ns_per_event", r->ns_per_event);
      hbm_json_kv_u64(&j, "failures", r->failures);
      hbm_json_kv_u64(&j, "refused_requests", r->refused_requests);
      hbm_json_kv_u64(&j, "refused_placed", r->refused_placed);
      for (int k = 0; k < r->ncounters; k++) { /* whole counts (bytes, passes) exactly, others as doubles */
        double v = r->counters[k].value;
        if (v >= 0 && v < 9007199254740992.0 && v == (double)(uint64_t)v) hbm_json_kv_u64(&j, r->counters[k].name, (uint64_t)v);
        else hbm_json_kv_double(&j, r->counters[k].name, v);
      }
      if (verify_data) hbm_json_kv_u64(&j, "verified_blocks", r->verified_blocks);
      cli_json_oom(&j, r);
      if (show_samples) {
        hbm_json_key(&j, "samples");
        hbm_json_array_begin(&j);
        for (size_t k = 0; k < runs[i].nsamples; k++) {
          const hbm_sample *s = &runs[i].samples[k];
          hbm_json_object_begin(&j);
          hbm_json_kv_u64(&j, "event", s->event);
          hbm_json_kv_u64(&j, "step", s->step);
          hbm_json_kv_u64(&j, "live", s->live);
          hbm_json_kv_u64(&j, "allocated", s->allocated);
          hbm_json_kv_u64(&j, "reserved", s->reserved);
          hbm_json_kv_u64(&j, "free_total", s->free_total);
          hbm_json_kv_u64(&j, "largest_free", s->largest_free);
          hbm_json_kv_double(&j, "fragmentation", s->fragmentation);
          hbm_json_kv_u64(&j, "backend_calls", s->backend_calls);
          hbm_json_kv_u64(&j, "alloc_events", s->alloc_events);
          hbm_json_key(&j, "live_by_purpose"); /* tags with none left out, as placed_by_purpose */
          hbm_json_object_begin(&j);
          for (int t = 0; t < HBM_TAG_COUNT; t++)
            if (s->live_by_tag[t]) hbm_json_kv_u64(&j, hbm_tag_name((hbm_tag)t), s->live_by_tag[t]);
          hbm_json_object_end(&j);
          hbm_json_object_end(&j);
        }
        hbm_json_array_end(&j);
      }
      if (layout_at != LAYOUT_NONE) json_layout(&j, layout_at, &picks[i]);
      hbm_json_object_end(&j);
    }
    hbm_json_array_end(&j);
    hbm_json_object_end(&j);
    if (cli_print_json("replay", &j) != CLI_OK) exit_code = CLI_FAILED;
  } else {
    char a[32], b[32], d[32], e[32], f[32];
    uint64_t events = hbm_trace_event_count(trace);
    printf("trace %s: %llu event%s, capacity %s, peak live %s\n\n", path, (unsigned long long)events,
           events == 1 ? "" : "s", cli_size(capacity, a), cli_size(peak_live, b));
    printf("%-11s %12s %10s %9s %8s  %s\n", "policy", "peak reserv.", "efficiency", "max frag", "backend", "first failure");
    for (int i = 0; i < npolicies; i++) {
      const hbm_replay_result *r = &results[i];
      const char *conf = cli_conf_for(&confs, r->policy);
      if (runs[i].error != HBM_OK) {
        printf("%-11s replay error: %s\n", r->policy, hbm_strerror(runs[i].error));
        cli_print_settings(conf);
        continue;
      }
      char eff[32];
      printf("%-11s %12s %10s %9s %8llu  ", r->policy, cli_size(r->peak_reserved, a),
             hbm_report_efficiency_text(r, eff), cli_frag(r->max_frag, 3, f), (unsigned long long)r->backend_calls);
      if (!r->oom) {
        printf("none\n");
      } else if (r->first_oom.cause == HBM_CAUSE_START && r->first_oom.request > r->capacity) {
        printf("before event 0: the starting state does not fit (%s live, more than the capacity %s): start\n",
               cli_size(r->first_oom.request, a), cli_size(r->capacity, b));
      } else if (r->first_oom.cause == HBM_CAUSE_START) {
        printf("before event 0: the starting state does not fit as recorded (%s live, free total %s, "
               "largest free %s): start\n", cli_size(r->first_oom.request, a), cli_size(r->first_oom.free_total, b),
               cli_size(r->first_oom.largest_free, d));
      } else {
        const hbm_oom_report *o = &r->first_oom;
        char said[3][32];
        hbm_report_sizes_apart((const uint64_t[]){o->request, o->free_total, o->largest_free}, 3, said);
        printf("step %llu (event %llu): request %s, free total %s, largest free %s, ratio %s: %s%s\n",
               (unsigned long long)r->first_oom.step, (unsigned long long)r->first_oom.event, said[0], said[1], said[2],
               cli_frag(hbm_fragmentation_ratio(r->first_oom.free_total, r->first_oom.largest_free), 2, f),
               hbm_oom_cause_name(r->first_oom.cause), o->refused ? " (PyTorch refused it too)" : "");
      }
      cli_print_settings(conf);
      /* The question a recording of a failed run asks: would this policy have placed it? */
      if (r->refused_placed && r->refused_requests == 1)
        printf("%-11s   placed the request PyTorch refused (what the run would have asked next is not recorded)\n", "");
      else if (r->refused_placed)
        printf("%-11s   placed %llu of the %llu requests PyTorch refused (what the run would have asked next is "
               "not recorded)\n", "", (unsigned long long)r->refused_placed, (unsigned long long)r->refused_requests);
      for (int k = 0; k < r->ncounters; k++) printf("%-11s   %s = %.15g\n", "", r->counters[k].name, r->counters[k].value);
      if (verify_data) printf("%-11s   verified_blocks = %llu\n", "", (unsigned long long)r->verified_blocks);
      if (show_samples)
        for (size_t k = 0; k < runs[i].nsamples; k++) {
          const hbm_sample *s = &runs[i].samples[k];
          printf("%-11s   step %llu event %llu: live %s, largest free %s, ratio %s, calls %llu, allocs %llu", "",
                 (unsigned long long)s->step, (unsigned long long)s->event, cli_size(s->live, a),
                 cli_size(s->largest_free, e), cli_frag(s->fragmentation, 3, f),
                 (unsigned long long)s->backend_calls, (unsigned long long)s->alloc_events);
          const char *sep = "; live by purpose:";
          for (int t = 0; t < HBM_TAG_COUNT; t++)
            if (s->live_by_tag[t]) printf("%s %s %s", sep, hbm_tag_name((hbm_tag)t), cli_size(s->live_by_tag[t], a)), sep = "";
          printf("\n");
        }
    }
    for (int i = 0; layout_at != LAYOUT_NONE && i < npolicies; i++)
      if (runs[i].error == HBM_OK) print_layout(results[i].policy, layout_at, &picks[i]);
  }
  if (html_written && !json) printf("\nreport: %s\n", html_path);
  for (int i = 0; i < 16; i++) {
    hbm_report_run_release(&runs[i]);
    hbm_report_run_release(&own[i]);
  }
  hbm_trace_free(trace);
  return exit_code;
}
