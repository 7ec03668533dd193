/* hbm demo: the story of docs/design.md §1 end to end, with no input files.
 * Generates the 910c-dense workload from its shapes, replays it through every
 * policy at the device's capacity, prints the table and writes report.html. */
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "report/html.h"
#include "report/json.h"
#include "trace/gen_llm.h"
#include "trace/trace.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: hbm demo [options]\n"
          "\n"
          "Generates the 910c-dense workload (docs/design.md §1: a 98B dense model on 1024 NPUs\n"
          "of 96 GiB, BF16/FP32 mixed precision, sequences up to 8192 tokens, 4.2 GB\n"
          "AllReduce buckets, 500 steps) from its shapes, replays it through every\n"
          "policy at the device's capacity, prints a table and writes an HTML report.\n"
          "Needs no input files.\n"
          "\n"
          "options:\n"
          "  --html FILE       where to write the report (default: report.html)\n"
          "  --json            the table as JSON on stdout\n"
          "  --preset NAME     another workload (default: 910c-dense; hbm gen llm --list-presets)\n"
          "  --steps N         steps to generate (default: the preset's, 500 for 910c-dense);\n"
          "                    the trace is held in memory, about 1.8 MB per step of\n"
          "                    910c-dense: more steps than the host can hold are refused\n"
          "  --seed N          sequence-length draws (default: 1)\n"
          "  --policy P[,Q]    policies, each once (default: all: %s)\n"
          "  --capacity SIZE   device capacity (default: the preset's, 96GiB for 910c-dense)\n"
          "  --jobs N          replays at a time (default: 2)\n"
          "  -h, --help        this text\n"
          "\n"
          "exit: 0 done (whether or not requests failed: that is the finding), 1 a replay\n"
          "could not run or an output (--html FILE, standard output) could not be written\n"
          "(a page written without a layout it could not draw included), 2 bad options\n",
          hbm_policy_names());
}


/* ---- replays, a few at a time ---- */

typedef struct job {
  const hbm_trace *t;
  const char *device;
  uint64_t every;
  char (*names)[32];
  hbm_report_run *runs;
  int nruns, next;
  uint64_t *done;      /* per run */
  uint64_t total;
  int quiet;           /* no progress bar (--json) */
  int undrawn;         /* layouts the page could not draw: it is written short of them (exit 1, as replay) */
  pthread_mutex_t lock;
} job;

typedef struct progress_arg { job *j; int index; } progress_arg;

static void on_progress(uint64_t done, uint64_t total, void *arg) {
  progress_arg *p = arg;
  job *j = p->j;
  pthread_mutex_lock(&j->lock);
  j->done[p->index] = done;
  uint64_t sum = 0;
  for (int i = 0; i < j->nruns; i++) sum += j->done[i];
  cli_progress("replaying", sum, j->total);
  pthread_mutex_unlock(&j->lock);
  (void)total;
}

static void *worker(void *arg) {
  job *j = arg;
  for (;;) {
    pthread_mutex_lock(&j->lock);
    int i = j->next < j->nruns ? j->next++ : -1;
    pthread_mutex_unlock(&j->lock);
    if (i < 0) return NULL;
    progress_arg p = {j, i};
    hbm_report_run *run = &j->runs[i];
    int rc = hbm_report_run_policy(j->t, j->names[i], NULL, j->device, j->every, j->quiet ? NULL : on_progress, &p,
                                   run);
    /* nothing failed: show the layout at the tightest sampled moment instead */
    uint64_t at = rc == HBM_OK && !run->result.oom ? hbm_report_tightest_event(run) : HBM_REPORT_NO_MOMENT;
    if (at != HBM_REPORT_NO_MOMENT && (rc = hbm_report_layout_at(j->t, j->names[i], NULL, j->device, at, NULL, NULL, run)) != HBM_OK) {
      cli_error("%s's layout at event %llu is not drawn: %s", j->names[i], (unsigned long long)at, hbm_strerror(rc));
      pthread_mutex_lock(&j->lock);
      j->undrawn++;
      pthread_mutex_unlock(&j->lock);
    }
  }
}


int cmd_demo(int argc, char **argv) {
  static const struct option opts[] = {
      {"html", required_argument, 0, 'H'}, {"json", no_argument, 0, 'j'},
      {"preset", required_argument, 0, 'p'}, {"steps", required_argument, 0, 's'},
      {"seed", required_argument, 0, 'S'}, {"policy", required_argument, 0, 'P'},
      {"capacity", required_argument, 0, 'c'}, {"jobs", required_argument, 0, 'J'},
      {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  const char *html_path = "report.html", *preset = "910c-dense", *policy_list = "all";
  int json = 0, jobs = 2;
  long steps = 0;
  unsigned long long seed = 0;
  int seed_given = 0;
  uint64_t capacity = 0;
  optind = 1;
  opterr = 0;
  int opt;
  uint64_t v;
  cli_seen seen = {0};
  while ((opt = cli_getopt(argc, argv, ":h", opts, NULL, &seen)) != -1) {
    switch (opt) {
      case 'H':
        if (!(html_path = cli_output_path("--html", optarg))) return CLI_BAD_INPUT;
        break;
      case 'j': json = 1; break;
      case 'p': preset = optarg; break;
      case 's':
        if (!cli_parse_count("--steps", optarg, 1, 1000000, &v)) return CLI_BAD_INPUT;
        steps = (long)v;
        break;
      case 'S':
        if (!cli_parse_count("--seed", optarg, 0, UINT64_MAX, &v)) return CLI_BAD_INPUT;
        seed = v;
        seed_given = 1;
        break;
      case 'P': policy_list = optarg; break;
      case 'c':
        if (!cli_parse_capacity("--capacity", optarg, &capacity)) return CLI_BAD_INPUT;
        break;
      case 'J':
        if (!cli_parse_count("--jobs", optarg, 1, 64, &v)) return CLI_BAD_INPUT;
        jobs = (int)v;
        break;
      case 'h': usage(stdout); return CLI_OK;
      default: return cli_option_error("demo", argv, opt);
    }
  }
  if (optind < argc) {
    cli_error("unexpected argument '%s': hbm demo takes no input files (try: hbm demo --help)", argv[optind]);
    return CLI_BAD_INPUT;
  }
  char names[16][32];
  int npol = cli_split_policies(policy_list, names, 16);
  if (npol == 0) return CLI_BAD_INPUT;
  int out_rc = cli_check_output(html_path, NULL, 0);
  if (out_rc != CLI_OK) return out_rc;

  /* 1. the workload, from shapes */
  hbm_gen_llm_config c;
  if (hbm_gen_llm_preset(preset, &c) != HBM_OK) {
    cli_unknown_preset("--preset", preset);
    return CLI_BAD_INPUT;
  }
  if (steps) c.steps = (uint32_t)steps;
  if (seed_given) c.seed = seed;
  if (capacity) c.capacity = capacity;
  hbm_diag diag;
  memset(&diag, 0, sizeof diag);
  /* the whole trace is held in memory while every policy replays it: said
   * before the closed form, which walks every step */
  int rc = cli_check_trace_memory("demo", &c, sizeof(hbm_event));
  if (rc != CLI_OK) return rc;
  hbm_gen_llm_estimate est;
  rc = hbm_gen_llm_estimate_peak(&c, &est, &diag);
  if (rc == HBM_OK && est.static_bytes > c.capacity) {
    /* the generator's remedy names gen llm's options; demo has none of them */
    char need[32], cap[32];
    cli_error("demo: %s's weights, gradients and optimizer state need %s per device, more than --capacity %s: "
              "give a larger --capacity, or split the model with hbm gen llm --preset %s (--tp, --pp, --zero "
              "with --dp, --offload) -o TRACE and replay it with hbm replay TRACE",
              preset, cli_size(est.static_bytes, need), cli_size(c.capacity, cap), preset);
    return CLI_BAD_INPUT;
  }
  hbm_trace *t = NULL;
  if (rc == HBM_OK) {
    c.on_progress = json ? NULL : cli_progress_fn;
    c.progress_arg = "generating";
    rc = hbm_gen_llm(&c, &t, &diag);
    cli_progress_end();
  }
  if (rc != HBM_OK) {
    if (rc == HBM_EINVAL && diag.message[0]) cli_error("%s", diag.message);
    else cli_error("cannot generate the workload: %s", hbm_strerror(rc));
    return cli_exit_code(rc);
  }

  /* 2. replay it through every policy */
  hbm_report_run *runs = calloc((size_t)npol, sizeof *runs);
  uint64_t *done = calloc((size_t)npol, sizeof *done);
  if (!runs || !done) {
    cli_error("out of host memory");
    hbm_trace_free(t);
    free(runs);
    free(done);
    return CLI_FAILED;
  }
  char device[64];
  snprintf(device, sizeof device, "sim:%llu", (unsigned long long)c.capacity);
  job j = {.t = t, .device = device, .names = names, .runs = runs, .nruns = npol, .done = done, .quiet = json};
  j.every = t->nevents / 20000 > 0 ? t->nevents / 20000 : 1; /* ~20000 samples per policy */
  j.total = t->nevents * (uint64_t)npol;
  pthread_mutex_init(&j.lock, NULL);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus > 0 && jobs > cpus) jobs = (int)cpus;
  if (jobs > npol) jobs = npol;
  pthread_t threads[64];
  int started = 0;
  for (int i = 1; i < jobs; i++)
    if (pthread_create(&threads[started], NULL, worker, &j) == 0) started++;
  worker(&j);
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
  cli_progress_end();
  pthread_mutex_destroy(&j.lock);

  /* 3. the report */
  char desc[512], title[128], notes[768], cap[32], pk[32], bd[32];
  hbm_gen_llm_describe(&c, desc, sizeof desc);
  snprintf(title, sizeof title, "hbm demo: %s at %s", preset, cli_size(c.capacity, cap));
  snprintf(notes, sizeof notes,
           "The workload is derived from the model's shapes (docs/workload.md): closed-form peak live %s "
           "(%s), %s with every sequence at its maximum length. Whether and when a policy fails below "
           "comes from the replay alone, on the simulated device: it grants a new segment whenever "
           "enough capacity is unreserved (the driver maps any free pages, as CUDA's does).",
           cli_size(est.peak, pk), est.peak_phase, cli_size(est.at_seq_max, bd));
  char command[256];
  size_t cl = (size_t)snprintf(command, sizeof command, "hbm demo");
  if (strcmp(preset, "910c-dense") && cl < sizeof command)
    cl += (size_t)snprintf(command + cl, sizeof command - cl, " --preset %s", preset);
  if (steps && cl < sizeof command) cl += (size_t)snprintf(command + cl, sizeof command - cl, " --steps %ld", steps);
  if (seed_given && cl < sizeof command) cl += (size_t)snprintf(command + cl, sizeof command - cl, " --seed %llu", seed);
  if (capacity && cl < sizeof command)
    cl += (size_t)snprintf(command + cl, sizeof command - cl, " --capacity %llu", (unsigned long long)capacity);
  if (strcmp(policy_list, "all") && cl < sizeof command)
    snprintf(command + cl, sizeof command - cl, " --policy %s", policy_list);
  hbm_report rep;
  memset(&rep, 0, sizeof rep);
  rep.title = title;
  rep.workload = desc;
  rep.command = command;
  rep.capacity = c.capacity;
  rep.notes = notes;
  rep.every = j.every;
  rep.runs = runs;
  rep.nruns = npol;
  if (hbm_report_trace_facts(t, &rep) != HBM_OK) cli_error("out of host memory: live is drawn from samples");
  char *html = NULL;
  size_t html_len = 0;
  int exit_code = CLI_OK, written = 0;
  rc = hbm_report_html(&rep, &html, &html_len);
  if (rc != HBM_OK) {
    cli_error("cannot build the report: %s", hbm_strerror(rc));
    exit_code = CLI_FAILED;
  } else {
    int wrc = cli_write_output(html_path, html, html_len, NULL, 0);
    if (wrc != CLI_OK) exit_code = wrc;
    else written = 1, cli_summary_after_output(html_path); /* a page on stdout goes alone */
  }
  free(html);
  char where[PATH_MAX];
  const char *shown = html_path;
  if (written && realpath(html_path, where)) shown = where;

  /* 4. the table */
  for (int i = 0; i < npol; i++)
    if (runs[i].error) exit_code = exit_code ? exit_code : CLI_FAILED;
  if (j.undrawn && exit_code == CLI_OK) exit_code = CLI_FAILED; /* said above, and on the page */
  if (json) {
    hbm_json js;
    hbm_json_init(&js);
    hbm_json_object_begin(&js);
    hbm_json_kv_string(&js, "workload", desc);
    hbm_json_kv_u64(&js, "capacity", c.capacity);
    hbm_json_kv_u64(&js, "events", rep.events);
    hbm_json_kv_u64(&js, "steps", rep.steps);
    hbm_json_kv_u64(&js, "peak_live", rep.peak_live);
    hbm_json_kv_u64(&js, "peak_estimate", est.peak);
    hbm_json_kv_u64(&js, "largest_comm_request", rep.largest_comm_request);
    hbm_json_key(&js, "policies");
    hbm_json_array_begin(&js);
    for (int i = 0; i < npol; i++) {
      const hbm_replay_result *r = &runs[i].result;
      hbm_json_object_begin(&js);
      hbm_json_kv_string(&js, "policy", names[i]);
      hbm_json_key(&js, "error"); /* null, or why the replay could not go on (then no figures), as in hbm replay */
      if (runs[i].error) {
        hbm_json_string(&js, hbm_strerror(runs[i].error));
        hbm_json_object_end(&js);
        continue;
      }
      hbm_json_null(&js);
      hbm_json_kv_u64(&js, "peak_reserved", r->peak_reserved);
      hbm_json_kv_u64(&js, "peak_live", r->peak_live);
      cli_json_efficiency(&js, r);
      hbm_json_kv_double(&js, "max_frag", r->max_frag);
      hbm_json_kv_u64(&js, "failures", r->failures);
      cli_json_oom(&js, r);
      char text[2048];
      hbm_report_diagnosis(&rep, &runs[i], text, sizeof text);
      hbm_json_kv_string(&js, "diagnosis", text);
      hbm_json_object_end(&js);
    }
    hbm_json_array_end(&js);
    hbm_json_key(&js, "report"); /* the page, written even where a replay failed; null if not */
    if (written) hbm_json_string(&js, shown); else hbm_json_null(&js);
    hbm_json_object_end(&js);
    if (cli_print_json("demo", &js) != CLI_OK && exit_code == CLI_OK) exit_code = CLI_FAILED;
  } else {
    printf("%s\n", desc);
    char a[32];
    printf("capacity %s, %llu event%s, %llu step%s, peak live %s (closed form %s)\n\n", cli_size(c.capacity, cap),
           (unsigned long long)rep.events, rep.events == 1 ? "" : "s", (unsigned long long)rep.steps,
           rep.steps == 1 ? "" : "s", cli_size(rep.peak_live, a),
           cli_size(est.peak, pk));
    printf("%-11s %13s %10s %9s | %-14s %11s %11s %12s  %s\n", "policy", "peak reserved", "efficiency",
           "max frag", "first failure", "request", "free total", "largest free", "cause");
    for (int i = 0; i < npol; i++) {
      const hbm_replay_result *r = &runs[i].result;
      if (runs[i].error) {
        printf("%-11s replay error: %s\n", names[i], hbm_strerror(runs[i].error));
        continue;
      }
      char s1[32], s5[32], stepb[32], eff[32];
      if (r->first_oom.cause == HBM_CAUSE_START) snprintf(stepb, sizeof stepb, "before event 0");
      else snprintf(stepb, sizeof stepb, "step %llu", (unsigned long long)r->first_oom.step);
      /* as replay's failure line and the page's table: in bytes where one would round to the
       * request's text ("request 1.09 GiB ... largest free 1.09 GiB" of a request that failed) */
      const hbm_oom_report *o = &r->first_oom;
      char said[3][32];
      hbm_report_sizes_apart((const uint64_t[]){o->request, o->free_total, o->largest_free}, 3, said);
      printf("%-11s %13s %10s %9s | %-14s %11s %11s %12s  %s\n", names[i], cli_size(r->peak_reserved, s1),
             hbm_report_efficiency_text(r, eff), cli_frag(r->max_frag, 3, s5), r->oom ? stepb : "none", r->oom ? said[0] : "-",
             r->oom ? said[1] : "-", r->oom ? said[2] : "-", r->oom ? hbm_oom_cause_name(o->cause) : "-");
    }
    printf("\n");
    for (int i = 0; i < npol; i++) {
      char text[2048];
      hbm_report_diagnosis(&rep, &runs[i], text, sizeof text);
      printf("%s: %s\n", names[i], text);
    }
    if (written) printf("\nreport: %s\n", shown);
  }
  for (int i = 0; i < npol; i++) hbm_report_run_release(&runs[i]);
  hbm_report_release(&rep);
  free(runs);
  free(done);
  hbm_trace_free(t);
  return exit_code;
}
