/* hbm bench sweep: do zoned's goals hold beyond the gen presets? Draws N
 * random but realistic training jobs from the workload model (the model of
 * hbm gen llm, in memory), replays each through caching, expandable and zoned
 * on a sim device at the job's capacity (as hbm replay TRACE --policy
 * caching,expandable,zoned would), and reports per job and in total which of
 * zoned's goals hold. The draws come from a small seeded PRNG (splitmix64), so
 * a seed names a sweep and each row's command line regenerates its job.
 *
 * A draw the model rejects (a split that does not divide the shape, a static
 * state or a closed-form or generated peak live above the capacity: no
 * allocator could run it) is redrawn and counted. A job where a policy fails
 * (a request it could not place, or a replay error) is kept and reported;
 * where that policy is zoned, the job meets none of its goals.
 * It reports; it does not judge: exit 0 whatever the goals show. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "report/json.h"
#include "trace/gen_llm.h"
#include "trace/trace.h"

enum { NPOL = 3, ZONED = 2, MAX_DRAWS = 10000 };
static const char *const sweep_policies[NPOL] = {"caching", "expandable", "zoned"};

enum { G_RESERVE, G_NEVER_MORE, G_CALLS, G_CALLS_LATE, G_COMPLETES, NGOALS };
static const char *const goal_names[NGOALS] = {"reserve", "never_more", "calls_after_first_step",
                                               "calls_second_half", "completes"};
static const char *const goal_text[NGOALS] = {
    "zoned's peak reserved - peak live <= max(2% of peak live, 64 MiB)",
    "zoned's peak reserved <= caching's and expandable's",
    "zoned's backend calls after the first step <= 1% of allocations",
    "the same, over the second half of the steps only (what a long run pays)",
    "zoned places every request",
};

/* ---- the job space ---------------------------------------------------------- */
typedef struct sweep_shape {
  uint32_t layers, hidden, heads, kv_heads;
  int arch;
} sweep_shape;
static const sweep_shape shapes[] = {
    {24, 1024, 16, 16, HBM_ARCH_GPT},   {24, 2048, 16, 16, HBM_ARCH_GPT},
    {32, 4096, 32, 32, HBM_ARCH_GPT},   {32, 4096, 32, 32, HBM_ARCH_LLAMA},
    {40, 5120, 40, 40, HBM_ARCH_LLAMA}, {48, 6144, 48, 48, HBM_ARCH_GPT},
    {80, 8192, 64, 8, HBM_ARCH_LLAMA},
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))
static const uint32_t tps[] = {1, 2, 4, 8}, pps[] = {1, 2, 4}, mbs[] = {1, 2, 4}, gas[] = {1, 2, 4, 8};
static const uint32_t ckpts[] = {0, 0, 1, 2};
typedef struct sweep_seq { int kind; uint32_t min, max; const char *text; } sweep_seq;
static const sweep_seq seqs[] = {
    {HBM_SEQ_FIXED, 2048, 2048, "2048"},        {HBM_SEQ_FIXED, 4096, 4096, "4096"},
    {HBM_SEQ_FIXED, 8192, 8192, "8192"},        {HBM_SEQ_UNIFORM, 512, 2048, "512:2048"},
    {HBM_SEQ_UNIFORM, 1024, 4096, "1024:4096"},
};
#define PICK(rng, arr) ((arr)[sweep_below(rng, sizeof(arr) / sizeof((arr)[0]))])

static uint64_t sweep_next(uint64_t *state) { /* splitmix64 */
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static uint64_t sweep_below(uint64_t *state, uint64_t n) { return sweep_next(state) % n; }

/* Writes a size the way hbm_size_parse reads it back exactly. */
static const char *exact_size(uint64_t v, char buf[32]) {
  static const char *const units[] = {"TiB", "GiB", "MiB", "KiB"};
  for (int i = 0; i < 4; i++) {
    uint64_t unit = 1ull << (10 * (4 - i));
    if (v % unit == 0) { snprintf(buf, 32, "%llu%s", (unsigned long long)(v / unit), units[i]); return buf; }
  }
  snprintf(buf, 32, "%llu", (unsigned long long)v);
  return buf;
}

/* One draw: a config from defaults plus the drawn dimensions, and the
 * `hbm gen llm` command line that makes the same config. */
static void draw_job(uint64_t *rng, uint32_t steps, uint64_t capacity, hbm_gen_llm_config *c, char *cmd,
                     size_t cmdlen) {
  hbm_gen_llm_defaults(c);
  const sweep_shape *s = &shapes[sweep_below(rng, NSHAPES)];
  c->arch = s->arch;
  c->layers = s->layers;
  c->hidden = s->hidden;
  c->heads = s->heads;
  c->kv_heads = s->kv_heads;
  c->tp = PICK(rng, tps);
  c->pp = PICK(rng, pps);
  c->pp_stage = (uint32_t)sweep_below(rng, c->pp);
  c->zero = (int)sweep_below(rng, 4);
  const sweep_seq *q = &PICK(rng, seqs);
  c->seq_kind = q->kind;
  c->seq_min = q->min;
  c->seq_max = q->max;
  c->micro_batch = PICK(rng, mbs);
  c->grad_accum = PICK(rng, gas);
  c->checkpoint_every = PICK(rng, ckpts);
  c->fused_optimizer = (int)sweep_below(rng, 2);
  c->attention = sweep_below(rng, 5) == 0 ? HBM_ATTN_EAGER : HBM_ATTN_FLASH;
  c->seed = sweep_below(rng, 100);
  c->steps = steps;
  c->capacity = capacity;
  char cap[32];
  snprintf(cmd, cmdlen,
           "hbm gen llm --arch %s --layers %u --hidden %u --heads %u --kv-heads %u --tp %u --pp %u --stage %u "
           "--zero %d --seq %s --micro-batch %u --grad-accum %u --checkpoint-every %u --optimizer %s "
           "--attention %s --steps %u --seed %llu --capacity %s",
           c->arch == HBM_ARCH_LLAMA ? "llama" : "gpt", c->layers, c->hidden, c->heads, c->kv_heads, c->tp, c->pp,
           c->pp_stage, c->zero, q->text, c->micro_batch, c->grad_accum, c->checkpoint_every,
           c->fused_optimizer ? "fused" : "unfused", c->attention == HBM_ATTN_EAGER ? "eager" : "flash", c->steps,
           (unsigned long long)c->seed, exact_size(c->capacity, cap));
}

/* ---- one job ------------------------------------------------------------------ */
typedef struct sweep_run {
  int error;               /* hbm_replay's return: HBM_OK, or the replay could not run */
  hbm_replay_result r;
  uint64_t last_reserved;  /* reserved at the last sample: the end of the last step */
  uint64_t last_live;      /* live then */
  int sampled;
  /* The second half of the steps: samples fall at each step mark (the
   * first after the build phase) and at the end, steps + 1 in all, sample k
   * at the end of step k. So it runs from sample steps / 2, the end of step
   * steps / 2, to the last (of 5 steps, the last 3). Calls and allocations
   * so far at those two, then between them. */
  uint64_t nsamples, half;
  uint64_t half_calls, half_allocs, late_calls, late_allocs;
} sweep_run;

typedef struct sweep_job {
  char command[512];
  char workload[512];
  uint64_t events, peak_live, allowance;
  sweep_run run[NPOL];
  int goal[NGOALS];
} sweep_job;

static void keep_sample(const hbm_sample *s, void *arg) {
  sweep_run *run = arg;
  run->last_reserved = s->reserved;
  run->last_live = s->live;
  run->sampled = 1;
  if (run->nsamples++ == run->half) {
    run->half_calls = s->backend_calls;
    run->half_allocs = s->alloc_events;
  }
  if (run->nsamples > run->half) {
    run->late_calls = s->backend_calls - run->half_calls;
    run->late_allocs = s->alloc_events - run->half_allocs;
  }
}

static int completes(const sweep_run *run) { return run->error == HBM_OK && !run->r.oom; }

static double over_live(uint64_t reserved, uint64_t live) {
  return live ? ((double)reserved - (double)live) / (double)live : 0;
}

/* What a policy held at its peak: caching, expandable and zoned hold from the
 * device exactly what they reserve, so the device's high-water mark counts
 * too (it also sees a moment inside one request where new memory was mapped
 * before old memory went; the replay's samples fall between requests). */
static uint64_t held(const hbm_replay_result *r) {
  return r->peak_device > r->peak_reserved ? r->peak_device : r->peak_reserved;
}

static double calls_share(const hbm_replay_result *r) {
  return r->alloc_events ? (double)r->backend_calls_after_first_step / (double)r->alloc_events : 0;
}

static double late_share(const sweep_run *run) {
  return run->late_allocs ? (double)run->late_calls / (double)run->late_allocs : 0;
}

static void judge(sweep_job *j) {
  const sweep_run *z = &j->run[ZONED];
  const uint64_t min_allowance = 64ull << 20;
  j->allowance = j->peak_live / 50 > min_allowance ? j->peak_live / 50 : min_allowance;
  memset(j->goal, 0, sizeof j->goal);
  j->goal[G_COMPLETES] = completes(z);
  /* A zoned run that did not place every request never reached the job's
   * peak: its reserve and calls are not the job's, so no goal is met. */
  if (!completes(z)) return;
  j->goal[G_RESERVE] = held(&z->r) <= j->peak_live + j->allowance;
  /* A policy that could not place a request needed more than the device, so
   * more than zoned reserved; one whose replay did not run says nothing. */
  int never_more = 1;
  for (int i = 0; i < NPOL; i++) {
    const sweep_run *o = &j->run[i];
    if (i == ZONED || (o->error == HBM_OK && o->r.oom)) continue;
    if (o->error != HBM_OK || held(&z->r) > held(&o->r)) never_more = 0;
  }
  j->goal[G_NEVER_MORE] = never_more;
  j->goal[G_CALLS] = (double)z->r.backend_calls_after_first_step <= 0.01 * (double)z->r.alloc_events;
  j->goal[G_CALLS_LATE] = (double)z->late_calls <= 0.01 * (double)z->late_allocs;
}

/* ---- output ------------------------------------------------------------------- */
static void usage(FILE *out) {
  fprintf(out,
          "usage: hbm bench sweep [--jobs N] [--seed N] [--steps N] [--capacity SIZE]\n"
          "                       [--alloc-conf [POLICY=]CONF ...] [--json]\n\n"
          "Draws N random training jobs from the workload model (hbm gen llm, in memory:\n"
          "shape, tp, pp, stage, zero, sequences, micro-batch, grad-accum, checkpointing,\n"
          "optimizer, attention, the model's seed), replays each through caching,\n"
          "expandable and zoned on a sim device at --capacity, and reports which of\n"
          "zoned's goals hold per job and in total: reserve (peak reserved - peak live <=\n"
          "max(2%% of peak live, 64 MiB)), never_more (peak reserved <= caching's and\n"
          "expandable's), calls_after_first_step (backend calls after the first step <= 1%%\n"
          "of allocations), calls_second_half (the same over the second half of the\n"
          "steps: what a long run keeps paying once its layout is learnt), completes\n"
          "(every request placed). A job zoned does not complete meets none of them (its\n"
          "figures are not the job's; its row shows - for them). A draw the model rejects\n"
          "(split, or static state or peak live over the capacity) is redrawn and counted.\n"
          "Each row's command regenerates its job (add -o TRACE). Exit 0 whatever the\n"
          "goals show; 1 when a replay could not run, 2 for bad options or a job whose\n"
          "trace would not fit in host memory (said before it is generated).\n"
          "  --jobs N        jobs to draw (default 40)\n"
          "  --seed N        the draws' seed; the same seed, the same jobs (default 1)\n"
          "  --steps N       steps per job, at least 2 (default 50)\n"
          "  --capacity SIZE device capacity of every job (default 141GiB)\n"
          "  --alloc-conf C  policy settings, as for hbm replay; POLICY=C for one policy, in place\n"
          "                  of the common C (e.g. --alloc-conf zoned=chunk:16MiB); repeatable\n"
          "  --json          machine-readable output\n"
          "JSON keys: bench, seed, steps, capacity, policies, alloc_conf, jobs: [{index,\n"
          "command, workload, events, peak_live, allowance, policies: [{policy, completes,\n"
          "error, peak_reserved, peak_device, over_live, backend_calls,\n"
          "backend_calls_after_first_step, alloc_events, backend_calls_second_half,\n"
          "alloc_events_second_half, failures, last_step_reserved, last_step_live, oom}],\n"
          "goals: {reserve, never_more, calls_after_first_step, calls_second_half,\n"
          "completes}}], redraws, redraw_reasons: {invalid, static_over_capacity,\n"
          "peak_over_capacity}, summary: {GOAL: {met, total}}, policy_failures: {POLICY:\n"
          "count}.\n");
}

static void json_job(hbm_json *j, int index, const sweep_job *job) {
  hbm_json_object_begin(j);
  hbm_json_kv_u64(j, "index", (uint64_t)index);
  hbm_json_kv_string(j, "command", job->command);
  hbm_json_kv_string(j, "workload", job->workload);
  hbm_json_kv_u64(j, "events", job->events);
  hbm_json_kv_u64(j, "peak_live", job->peak_live);
  hbm_json_kv_u64(j, "allowance", job->allowance);
  hbm_json_key(j, "policies");
  hbm_json_array_begin(j);
  for (int i = 0; i < NPOL; i++) {
    const sweep_run *run = &job->run[i];
    const hbm_replay_result *r = &run->r;
    hbm_json_object_begin(j);
    hbm_json_kv_string(j, "policy", sweep_policies[i]);
    hbm_json_key(j, "completes");
    hbm_json_bool(j, completes(run));
    hbm_json_key(j, "error");
    if (run->error == HBM_OK) hbm_json_null(j); else hbm_json_string(j, hbm_strerror(run->error));
    if (run->error == HBM_OK) {
      hbm_json_kv_u64(j, "peak_reserved", r->peak_reserved);
      hbm_json_kv_u64(j, "peak_device", r->peak_device);
      hbm_json_kv_double(j, "over_live", over_live(held(r), job->peak_live));
      hbm_json_kv_u64(j, "backend_calls", r->backend_calls);
      hbm_json_kv_u64(j, "backend_calls_after_first_step", r->backend_calls_after_first_step);
      hbm_json_kv_u64(j, "alloc_events", r->alloc_events);
      hbm_json_kv_u64(j, "backend_calls_second_half", run->late_calls);
      hbm_json_kv_u64(j, "alloc_events_second_half", run->late_allocs);
      hbm_json_kv_u64(j, "failures", r->failures);
      hbm_json_key(j, "last_step_reserved");
      if (run->sampled) hbm_json_u64(j, run->last_reserved); else hbm_json_null(j);
      hbm_json_key(j, "last_step_live");
      if (run->sampled) hbm_json_u64(j, run->last_live); else hbm_json_null(j);
      cli_json_oom(j, r);
    }
    hbm_json_object_end(j);
  }
  hbm_json_array_end(j);
  hbm_json_key(j, "goals");
  hbm_json_object_begin(j);
  for (int g = 0; g < NGOALS; g++) {
    hbm_json_key(j, goal_names[g]);
    hbm_json_bool(j, job->goal[g]);
  }
  hbm_json_object_end(j);
  hbm_json_object_end(j);
}

/* One table row: index, peak live, the three reserves over live, zoned's
 * calls after the first step and over the second half, missed goals, then
 * the command. */
static void text_row(int index, const sweep_job *job) {
  char live[32], col[NPOL][16], end[16], calls[16], late[16], miss[160] = "";
  for (int i = 0; i < NPOL; i++) {
    const sweep_run *run = &job->run[i];
    if (run->error != HBM_OK) snprintf(col[i], sizeof col[i], "error");
    else if (run->r.oom) snprintf(col[i], sizeof col[i], "oom");
    else snprintf(col[i], sizeof col[i], "%.2f%%", 100 * over_live(held(&run->r), job->peak_live));
  }
  /* zoned's figures only where it completed, as its goals are judged. */
  const sweep_run *z = &job->run[ZONED];
  int judged = completes(z);
  if (!judged || !z->sampled) snprintf(end, sizeof end, "-");
  else snprintf(end, sizeof end, "%.2f%%", 100 * over_live(z->last_reserved, job->peak_live));
  if (!judged) snprintf(calls, sizeof calls, "-");
  else snprintf(calls, sizeof calls, "%.3f%%", 100 * calls_share(&z->r));
  if (!judged) snprintf(late, sizeof late, "-");
  else snprintf(late, sizeof late, "%.3f%%", 100 * late_share(z));
  for (int g = 0; g < NGOALS; g++)
    if (!job->goal[g]) {
      size_t n = strlen(miss);
      snprintf(miss + n, sizeof miss - n, "%s%s", n ? "," : "", goal_names[g]);
    }
  printf("%4d %11s %9s %10s %8s %9s %9s %9s  %-41s %s\n", index, cli_size(job->peak_live, live), col[0], col[1],
         col[2], end, calls, late, miss[0] ? miss : "-", job->command);
}

/* ---- the sweep ------------------------------------------------------------------ */
int bench_sweep(int argc, char **argv) {
  static const struct option opts[] = {
      {"jobs", required_argument, 0, 'n'},     {"seed", required_argument, 0, 'S'},
      {"steps", required_argument, 0, 's'},    {"capacity", required_argument, 0, 'c'},
      {"alloc-conf", required_argument, 0, 'a'}, {"json", no_argument, 0, 'j'},
      {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
  uint64_t njobs = 40, seed = 1, steps = 50, capacity = 141ull << 30;
  int json = 0, c;
  cli_confs confs = {0};
  optind = 1;
  opterr = 0;
  cli_seen seen = {.command = "bench sweep"};
  while ((c = cli_getopt(argc, argv, ":h", opts, "alloc-conf", &seen)) != -1) {
    int ok = 1;
    switch (c) {
      case 'n': ok = cli_parse_count("bench sweep: --jobs", optarg, 1, 100000, &njobs); break;
      case 'S': ok = cli_parse_count("bench sweep: --seed", optarg, 0, UINT64_MAX, &seed); break;
      case 's': ok = cli_parse_count("bench sweep: --steps", optarg, 2, 1000000, &steps); break;
      case 'c': ok = cli_parse_capacity("bench sweep: --capacity", optarg, &capacity); break;
      case 'a': ok = cli_conf_add(&confs, optarg); break;
      case 'j': json = 1; break;
      case 'h': usage(stdout); return CLI_OK;
      default: return cli_option_error("bench sweep", argv, c);
    }
    if (!ok) return CLI_BAD_INPUT;
  }
  if (optind < argc) {
    cli_error("bench sweep: unexpected argument '%s' (try: hbm bench sweep --help)", argv[optind]);
    return CLI_BAD_INPUT;
  }
  /* Settings are checked once, up front: a bad one, or one for a policy the
   * sweep does not run, is bad input, not a failed job. */
  char names[NPOL][32];
  for (int i = 0; i < NPOL; i++) snprintf(names[i], sizeof names[i], "%s", sweep_policies[i]);
  char spec[64];
  snprintf(spec, sizeof spec, "sim:%llu", (unsigned long long)capacity);
  int check_rc = cli_check_policies(spec, names, NPOL, &confs, NULL);
  if (check_rc != CLI_OK) return check_rc;

  sweep_job *jobs = calloc(njobs, sizeof *jobs);
  if (!jobs) { cli_error("bench sweep: out of host memory"); return CLI_FAILED; }
  uint64_t rng = seed;
  uint64_t redraw_invalid = 0, redraw_static = 0, redraw_peak = 0;
  int progress = cli_is_tty() && !json, exit_code = CLI_OK;
  double t0 = bench_now_ns();
  for (uint64_t k = 0; k < njobs; k++) {
    sweep_job *job = &jobs[k];
    hbm_trace *t = NULL;
    if (progress) fprintf(stderr, "\rjob %llu/%llu ", (unsigned long long)k + 1, (unsigned long long)njobs);
    for (int tries = 0; !t; tries++) {
      if (tries == MAX_DRAWS) {
        char cap[32];
        if (progress) fprintf(stderr, "\n");
        cli_error("bench sweep: %d draws in a row rejected: no job of the space fits --capacity %s", MAX_DRAWS,
                  cli_size(capacity, cap));
        free(jobs);
        return CLI_BAD_INPUT;
      }
      hbm_gen_llm_config cfg;
      draw_job(&rng, (uint32_t)steps, capacity, &cfg, job->command, sizeof job->command);
      hbm_diag d;
      memset(&d, 0, sizeof d);
      if (hbm_gen_llm_resolve(&cfg, &d) != HBM_OK) {
        redraw_invalid++;
        continue;
      }
      /* Refused before generating, as bench replay does: a trace past host
       * memory would be grown until the OOM killer ends the run. Asked before
       * the estimate too, which walks every step's sequences: with --steps in
       * the millions that walk alone took half a minute before the refusal. */
      char what[64];
      snprintf(what, sizeof what, "bench sweep: job %llu", (unsigned long long)k + 1);
      int mrc = cli_check_trace_memory(what, &cfg, sizeof(hbm_event));
      if (mrc != CLI_OK) {
        if (progress) fprintf(stderr, "\n");
        free(jobs);
        return mrc;
      }
      hbm_gen_llm_estimate est;
      if (hbm_gen_llm_estimate_peak(&cfg, &est, &d) != HBM_OK) {
        redraw_invalid++;
        continue;
      }
      if (est.static_bytes > capacity) { redraw_static++; continue; }
      if (est.peak > capacity) { redraw_peak++; continue; }
      int rc = hbm_gen_llm(&cfg, &t, &d);
      if (rc == HBM_EINVAL) { redraw_invalid++; t = NULL; continue; }
      if (rc != HBM_OK) {
        if (progress) fprintf(stderr, "\n");
        cli_error("bench sweep: job %llu (%s): cannot generate: %s", (unsigned long long)k + 1, job->command,
                  hbm_strerror(rc));
        free(jobs);
        return CLI_FAILED;
      }
      if (hbm_trace_peak_live(t) > capacity) { redraw_peak++; hbm_trace_free(t); t = NULL; continue; }
    }
    snprintf(job->workload, sizeof job->workload, "%s", hbm_trace_name(t));
    job->events = hbm_trace_event_count(t);
    job->peak_live = hbm_trace_peak_live(t);
    for (int i = 0; i < NPOL; i++) {
      sweep_run *run = &job->run[i];
      hbm_replay_options o = {.policy = sweep_policies[i], .conf = cli_conf_for(&confs, sweep_policies[i]),
                              .on_sample = keep_sample, .sample_arg = run};
      run->half = steps / 2;
      run->error = hbm_replay(t, &o, &run->r);
      if (run->error != HBM_OK) {
        if (progress) fprintf(stderr, "\n");
        cli_error("bench sweep: job %llu: replay through %s failed: %s", (unsigned long long)k + 1,
                  sweep_policies[i], hbm_strerror(run->error));
        exit_code = CLI_FAILED;
      }
    }
    hbm_trace_free(t);
    judge(job);
  }
  double secs = (bench_now_ns() - t0) * 1e-9;
  if (progress) fprintf(stderr, "\r%30s\r", "");

  uint64_t met[NGOALS] = {0}, failed[NPOL] = {0};
  for (uint64_t k = 0; k < njobs; k++) {
    for (int g = 0; g < NGOALS; g++) met[g] += jobs[k].goal[g] != 0;
    for (int i = 0; i < NPOL; i++) failed[i] += !completes(&jobs[k].run[i]);
  }
  uint64_t redraws = redraw_invalid + redraw_static + redraw_peak;
  if (json) {
    hbm_json j;
    hbm_json_init(&j);
    hbm_json_object_begin(&j);
    hbm_json_kv_string(&j, "bench", "sweep");
    hbm_json_kv_u64(&j, "seed", seed);
    hbm_json_kv_u64(&j, "steps", steps);
    hbm_json_kv_u64(&j, "capacity", capacity);
    hbm_json_key(&j, "policies");
    hbm_json_array_begin(&j);
    for (int i = 0; i < NPOL; i++) hbm_json_string(&j, sweep_policies[i]);
    hbm_json_array_end(&j);
    hbm_json_key(&j, "alloc_conf");
    hbm_json_object_begin(&j);
    for (int i = 0; i < NPOL; i++) {
      const char *conf = cli_conf_for(&confs, sweep_policies[i]);
      hbm_json_key(&j, sweep_policies[i]);
      if (conf) hbm_json_string(&j, conf); else hbm_json_null(&j);
    }
    hbm_json_object_end(&j);
    hbm_json_key(&j, "jobs");
    hbm_json_array_begin(&j);
    for (uint64_t k = 0; k < njobs; k++) json_job(&j, (int)k + 1, &jobs[k]);
    hbm_json_array_end(&j);
    hbm_json_kv_u64(&j, "redraws", redraws);
    hbm_json_key(&j, "redraw_reasons");
    hbm_json_object_begin(&j);
    hbm_json_kv_u64(&j, "invalid", redraw_invalid);
    hbm_json_kv_u64(&j, "static_over_capacity", redraw_static);
    hbm_json_kv_u64(&j, "peak_over_capacity", redraw_peak);
    hbm_json_object_end(&j);
    hbm_json_key(&j, "summary");
    hbm_json_object_begin(&j);
    for (int g = 0; g < NGOALS; g++) {
      hbm_json_key(&j, goal_names[g]);
      hbm_json_object_begin(&j);
      hbm_json_kv_u64(&j, "met", met[g]);
      hbm_json_kv_u64(&j, "total", njobs);
      hbm_json_object_end(&j);
    }
    hbm_json_object_end(&j);
    hbm_json_key(&j, "policy_failures");
    hbm_json_object_begin(&j);
    for (int i = 0; i < NPOL; i++) hbm_json_kv_u64(&j, sweep_policies[i], failed[i]);
    hbm_json_object_end(&j);
    hbm_json_object_end(&j);
    if (cli_print_json("bench sweep", &j) != CLI_OK) exit_code = CLI_FAILED;
  } else {
    char cap[32];
    printf("sweep: %llu random job%s from the workload model, seed %llu, %llu steps each, sim device %s\n",
           (unsigned long long)njobs, njobs == 1 ? "" : "s", (unsigned long long)seed, (unsigned long long)steps,
           cli_size(capacity, cap));
    for (int i = 0; i < NPOL; i++) {
      const char *conf = cli_conf_for(&confs, sweep_policies[i]);
      if (conf) printf("  %s settings: %s\n", sweep_policies[i], conf);
    }
    printf("caching, expandable, zoned: (peak reserved - peak live) / peak live; at end: zoned's reserved at the\n"
           "end of the last step, over peak live; calls: zoned's backend calls after the first step per\n"
           "allocation; 2nd half: the same over the second half of the steps; oom: a request the policy\n"
           "could not place; misses: zoned's goals not met\n\n");
    printf("%4s %11s %9s %10s %8s %9s %9s %9s  %-41s %s\n", "job", "peak live", "caching", "expandable", "zoned",
           "at end", "calls", "2nd half", "misses", "command (add -o TRACE)");
    for (uint64_t k = 0; k < njobs; k++) text_row((int)k + 1, &jobs[k]);
    printf("\nredraws: %llu (%llu invalid split, %llu static state over capacity, %llu peak live over capacity)\n",
           (unsigned long long)redraws, (unsigned long long)redraw_invalid, (unsigned long long)redraw_static,
           (unsigned long long)redraw_peak);
    printf("jobs a policy did not complete: caching %llu, expandable %llu, zoned %llu\n",
           (unsigned long long)failed[0], (unsigned long long)failed[1], (unsigned long long)failed[2]);
    for (int g = 0; g < NGOALS; g++)
      printf("%-22s %4llu/%llu jobs  %s\n", goal_names[g], (unsigned long long)met[g], (unsigned long long)njobs,
             goal_text[g]);
    printf("elapsed %.1f s\n", secs);
  }
  free(jobs);
  return exit_code;
}
