/* hbm plan: hbm's step planner on a static-planning problem (MiniMalloc's
 * CSV), measured against the problem's peak load and any plan the file
 * already carries. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "core/dsa.h"
#include "report/json.h"
#include "trace/plan_csv.h"
#include "trace/trace.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: hbm plan PROBLEM.csv [options]\n"
          "\n"
          "Plans offsets for buffers whose lifetimes are known in advance (the dynamic\n"
          "storage allocation problem) with the planner zoned uses for the large blocks of\n"
          "a job whose steps repeat, and measures the plan: its footprint (the highest\n"
          "offset + size) against the peak load (the most units live at one time, which\n"
          "no plan can beat), checked to have no two live buffers overlap.\n"
          "\n"
          "PROBLEM.csv is MiniMalloc's CSV (docs/plan.md): a header naming id, lower,\n"
          "upper and size (any order; start/begin, end, buffer aliases as MiniMalloc\n"
          "reads them), then one buffer per line, live over [lower, upper). An alignment\n"
          "column aligns every buffer to the largest value in it. An offset column is a\n"
          "plan already made (a solver's output): it is checked and measured beside\n"
          "hbm's. Sizes and times are in the file's own units.\n"
          "\n"
          "options:\n"
          "  --align N          offsets a multiple of N, a power of two (default 1; the\n"
          "                     larger of N and the file's alignments)\n"
          "  --orders           also each greedy order alone, without the rounds that follow\n"
          "                     them in the planner (slower: every order runs twice)\n"
          "  --capacity N       the space there is, in the file's units: exit 1 when the\n"
          "                     plan does not fit, said on standard error (-o FILE is\n"
          "                     still written, to inspect)\n"
          "  -o, --output FILE  write the plan as MiniMalloc writes a solution\n"
          "                     (id,lower,upper,size[,alignment],offset), atomically and\n"
          "                     never over the input\n"
          "  --json             machine-readable output: problem, buffers, align, first_time,\n"
          "                     last_time, peak_load, plan {footprint, over_peak_load,\n"
          "                     seconds, valid}, orders [{order, footprint, over_peak_load,\n"
          "                     seconds}] (null without --orders), given {footprint,\n"
          "                     over_peak_load, valid, reason} (null without an offset\n"
          "                     column), capacity, fits, output\n"
          "  -h, --help         this text\n"
          "\n"
          "exit: 0 planned, 1 the plan does not fit --capacity, the file's own plan is\n"
          "      invalid (buffers that overlap while both are live, or an offset off its\n"
          "      buffer's alignment), or FILE (or standard output) could not be written,\n"
          "      2 bad input or usage (FILE the same file as the input included, by any\n"
          "      name or link: the input is left as it was)\n");
}

static double seconds_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

static double over(uint64_t footprint, uint64_t peak) {
  return peak ? (double)footprint / (double)peak - 1.0 : 0.0;
}

/* "over peak load" for the table: two decimals, or an exponent where a plan is
 * so far over that the column would not hold the digits. */
static const char *over_text(uint64_t footprint, uint64_t peak, char buf[32]) {
  double pct = 100.0 * over(footprint, peak);
  snprintf(buf, 32, pct < 1e9 ? "%+.2f%%" : "%+.2e%%", pct);
  return buf;
}

/* What the file's own offsets amount to. */
typedef struct given_plan {
  uint64_t footprint;
  int valid;
  size_t first, second; /* two overlapping buffers, when not valid */
  size_t misaligned;    /* a buffer off its alignment, when not valid and first == second */
} given_plan;

static int check_given(const hbm_plan_input *in, given_plan *g) {
  memset(g, 0, sizeof *g);
  g->valid = 1;
  for (size_t i = 0; i < in->n; i++) {
    if (in->offsets[i] + in->blocks[i].size > g->footprint) g->footprint = in->offsets[i] + in->blocks[i].size;
    if (g->valid && in->align_log2 && in->offsets[i] % (1ull << in->align_log2[i])) {
      g->valid = 0;
      g->misaligned = i;
    }
  }
  if (!g->valid) return HBM_OK;
  int rc = hbm_dsa_first_conflict(in->blocks, in->n, 0, in->offsets, &g->first, &g->second);
  if (rc < 0) return rc;
  g->valid = rc == 0;
  return HBM_OK;
}

/* An id as a terminal may show it (ids are the file's text; --json escapes
 * them instead). */
static const char *id_shown(const char *id, char buf[48]) { return hbm_plan_csv_quote(id, strlen(id), buf); }

/* What is wrong with the file's plan, for the text report; raw ids (the JSON's) when `raw`. */
static void say_given(const hbm_plan_input *in, const given_plan *g, int raw, char *buf, size_t cap) {
  char a[48], b[48];
  if (g->valid) {
    snprintf(buf, cap, "valid");
  } else if (g->first == g->second) {
    size_t m = g->misaligned;
    snprintf(buf, cap, "INVALID: buffer '%s' (line %u) at offset %llu, not a multiple of its alignment %llu",
             raw ? in->ids[m] : id_shown(in->ids[m], a), in->lines[m], (unsigned long long)in->offsets[m],
             1ull << in->align_log2[m]);
  } else {
    snprintf(buf, cap, "INVALID: buffers '%s' (line %u) and '%s' (line %u) overlap while both are live",
             raw ? in->ids[g->first] : id_shown(in->ids[g->first], a), in->lines[g->first],
             raw ? in->ids[g->second] : id_shown(in->ids[g->second], b), in->lines[g->second]);
  }
}

int cmd_plan(int argc, char **argv) {
  static const struct option opts[] = {{"align", required_argument, 0, 'a'},   {"orders", no_argument, 0, 'O'},
                                       {"capacity", required_argument, 0, 'c'}, {"output", required_argument, 0, 'o'},
                                       {"json", no_argument, 0, 'j'},          {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  uint64_t align = 1, capacity = 0;
  const char *output = NULL;
  int json = 0, orders = 0, has_capacity = 0, c;
  optind = 1;
  opterr = 0; /* cli_option_error says what is wrong */
  cli_seen seen = {0};
  while ((c = cli_getopt(argc, argv, ":o:h", opts, NULL, &seen)) != -1) {
    switch (c) {
      case 'a':
        if (!cli_parse_count("--align", optarg, 1, HBM_PLAN_MAX_ALIGN, &align)) return CLI_BAD_INPUT;
        if (align & (align - 1)) {
          cli_error("--align: expected a power of two, got '%s'", optarg);
          return CLI_BAD_INPUT;
        }
        break;
      case 'O': orders = 1; break;
      case 'c': /* in the file's units, as its sizes and the footprint are: no byte units */
        if (hbm_count_parse(optarg, &capacity) != HBM_OK || capacity == 0) {
          cli_error("--capacity: expected a whole number of at least 1 in the file's own units (as its sizes), "
                    "got '%s'", optarg);
          return CLI_BAD_INPUT;
        }
        has_capacity = 1;
        break;
      case 'o':
        if (!(output = cli_output_path("-o", optarg))) return CLI_BAD_INPUT;
        break;
      case 'j': json = 1; break;
      case 'h': usage(stdout); return CLI_OK;
      default: return cli_option_error("plan", argv, c);
    }
  }
  const char *path = cli_one_input("plan", "PROBLEM.csv file", argc, argv, usage);
  if (!path) return CLI_BAD_INPUT;

  char *data;
  size_t len;
  int rc = cli_read_input(path, &data, &len);
  if (rc != CLI_OK) return rc;
  hbm_diag diag = {0};
  hbm_plan_input in;
  rc = hbm_plan_csv_parse(data, len, path, &in, &diag);
  free(data);
  if (rc != HBM_OK) {
    cli_diag(&diag, rc, path);
    return cli_exit_code(rc);
  }
  if (output && (rc = cli_check_output(output, &path, 1)) != CLI_OK) {
    hbm_plan_input_free(&in);
    return rc;
  }
  if (in.align > align) align = in.align;

  int exit_code = CLI_OK;
  char *given_text = NULL; /* what the file's own plan is: valid, or why not */
  uint64_t *offsets = malloc((in.n ? in.n : 1) * sizeof *offsets);
  uint64_t *trial = orders ? malloc((in.n ? in.n : 1) * sizeof *trial) : NULL;
  uint64_t peak = hbm_dsa_peak(in.blocks, in.n, 0), footprint = 0;
  uint64_t order_fp[HBM_DSA_STRATEGIES] = {0};
  double order_s[HBM_DSA_STRATEGIES] = {0}, plan_s = 0;
  given_plan given = {0};
  if (!offsets || (orders && !trial) || (in.n && !peak)) {
    cli_error("%s: out of host memory planning %zu buffers", path, in.n);
    exit_code = CLI_FAILED;
    goto out;
  }
  if (cli_is_tty()) fprintf(stderr, "plan: %zu buffer%s...", in.n, in.n == 1 ? "" : "s");
  struct timespec t0;
  for (int s = 0; orders && s < HBM_DSA_STRATEGIES; s++) {
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = hbm_dsa_plan_with(in.blocks, in.n, 0, align, (hbm_dsa_strategy)s, trial, &order_fp[s]);
    order_s[s] = seconds_since(&t0);
    if (rc != HBM_OK) break;
  }
  if (rc == HBM_OK) {
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = hbm_dsa_plan(in.blocks, in.n, 0, align, offsets, &footprint);
    plan_s = seconds_since(&t0);
  }
  if (cli_is_tty()) fprintf(stderr, "\r%40s\r", "");
  if (rc != HBM_OK) {
    cli_error("%s: planning failed: %s", path, hbm_strerror(rc));
    exit_code = cli_exit_code(rc) == CLI_BAD_INPUT ? CLI_BAD_INPUT : CLI_FAILED;
    goto out;
  }
  size_t first, second;
  rc = hbm_dsa_first_conflict(in.blocks, in.n, 0, offsets, &first, &second);
  if (rc != 0) { /* the planner's own plan must hold: anything else is a bug to report */
    if (rc == 1)
      cli_error("%s: internal error: the plan overlaps buffers on lines %u and %u (please report it with the file)",
                path, in.lines[first], in.lines[second]);
    else cli_error("%s: checking the plan failed: %s", path, hbm_strerror(rc));
    exit_code = CLI_FAILED;
    goto out;
  }
  if (in.offsets && (rc = check_given(&in, &given)) != HBM_OK) {
    cli_error("%s: checking the file's plan failed: %s", path, hbm_strerror(rc));
    exit_code = CLI_FAILED;
    goto out;
  }
  int fits = !has_capacity || footprint <= capacity;

  if (output) {
    char *text;
    size_t text_len;
    if (hbm_plan_csv_render(&in, offsets, &text, &text_len) != HBM_OK) {
      cli_error("%s: out of host memory writing the plan", output);
      exit_code = CLI_FAILED;
      goto out;
    }
    const char *inputs[] = {path};
    int wrc = cli_write_output(output, text, text_len, inputs, 1);
    free(text);
    if (wrc != CLI_OK) {
      exit_code = wrc;
      goto out;
    }
    cli_summary_after_output(output);
  }

  uint64_t first_time = UINT64_MAX, last_time = 0;
  for (size_t i = 0; i < in.n; i++) {
    if (in.blocks[i].start < first_time) first_time = in.blocks[i].start;
    if (in.blocks[i].end > last_time) last_time = in.blocks[i].end;
  }
  if (!in.n) first_time = 0;
  if (in.offsets) { /* ids have no length limit: the text is sized to them */
    size_t cap = 256;
    if (!given.valid && given.first == given.second) cap += strlen(in.ids[given.misaligned]);
    else if (!given.valid) cap += strlen(in.ids[given.first]) + strlen(in.ids[given.second]);
    if (!(given_text = malloc(cap))) {
      cli_error("%s: out of host memory", path);
      exit_code = CLI_FAILED;
      goto out;
    }
    say_given(&in, &given, json, given_text, cap);
  }
  if (json) {
    hbm_json j;
    hbm_json_init(&j);
    hbm_json_object_begin(&j);
    hbm_json_kv_string(&j, "problem", path);
    hbm_json_kv_u64(&j, "buffers", in.n);
    hbm_json_kv_u64(&j, "align", align);
    hbm_json_kv_u64(&j, "first_time", first_time);
    hbm_json_kv_u64(&j, "last_time", last_time);
    hbm_json_kv_u64(&j, "peak_load", peak);
    hbm_json_key(&j, "plan");
    hbm_json_object_begin(&j);
    hbm_json_kv_u64(&j, "footprint", footprint);
    hbm_json_kv_double(&j, "over_peak_load", over(footprint, peak));
    hbm_json_kv_double(&j, "seconds", plan_s);
    hbm_json_key(&j, "valid");
    hbm_json_bool(&j, 1);
    hbm_json_object_end(&j);
    hbm_json_key(&j, "orders");
    if (orders) {
      hbm_json_array_begin(&j);
      for (int s = 0; s < HBM_DSA_STRATEGIES; s++) {
        hbm_json_object_begin(&j);
        hbm_json_kv_string(&j, "order", hbm_dsa_strategy_name((hbm_dsa_strategy)s));
        hbm_json_kv_u64(&j, "footprint", order_fp[s]);
        hbm_json_kv_double(&j, "over_peak_load", over(order_fp[s], peak));
        hbm_json_kv_double(&j, "seconds", order_s[s]);
        hbm_json_object_end(&j);
      }
      hbm_json_array_end(&j);
    } else hbm_json_null(&j);
    hbm_json_key(&j, "given");
    if (in.offsets) {
      hbm_json_object_begin(&j);
      hbm_json_kv_u64(&j, "footprint", given.footprint);
      hbm_json_kv_double(&j, "over_peak_load", over(given.footprint, peak));
      hbm_json_key(&j, "valid");
      hbm_json_bool(&j, given.valid);
      hbm_json_key(&j, "reason");
      if (given.valid) hbm_json_null(&j);
      else hbm_json_string(&j, given_text + strlen("INVALID: "));
      hbm_json_object_end(&j);
    } else hbm_json_null(&j);
    hbm_json_key(&j, "capacity");
    if (has_capacity) hbm_json_u64(&j, capacity); else hbm_json_null(&j);
    hbm_json_key(&j, "fits");
    if (has_capacity) hbm_json_bool(&j, fits); else hbm_json_null(&j);
    hbm_json_key(&j, "output");
    if (output) hbm_json_string(&j, output); else hbm_json_null(&j);
    hbm_json_object_end(&j);
    if (cli_print_json("plan", &j) != CLI_OK) exit_code = CLI_FAILED;
  } else {
    printf("problem %s: %zu buffer%s over times %llu..%llu, peak load %llu\n", path, in.n, in.n == 1 ? "" : "s",
           (unsigned long long)first_time, (unsigned long long)last_time, (unsigned long long)peak);
    if (align > 1) printf("offsets aligned to %llu\n", (unsigned long long)align);
    printf("\n");
    char pct[32];
    printf("%-22s %20s %15s %9s\n", "plan", "footprint", "over peak load", "seconds");
    for (int s = 0; orders && s < HBM_DSA_STRATEGIES; s++)
      printf("%-22s %20llu %15s %9.3f\n", hbm_dsa_strategy_name((hbm_dsa_strategy)s),
             (unsigned long long)order_fp[s], over_text(order_fp[s], peak, pct), order_s[s]);
    printf("%-22s %20llu %15s %9.3f  valid\n", "hbm (orders + rounds)", (unsigned long long)footprint,
           over_text(footprint, peak, pct), plan_s);
    if (in.offsets)
      printf("%-22s %20llu %15s %9s  %s\n", "the file's offsets", (unsigned long long)given.footprint,
             over_text(given.footprint, peak, pct), "-", given_text);
    if (has_capacity)
      printf("\ncapacity %llu: %s\n", (unsigned long long)capacity,
             fits ? "the plan fits" : "the plan does NOT fit");
    if (output) printf("\nwrote %s\n", output);
  }
  if (!fits) /* the exit status's reason where the report may not be read (--json, a file); the plan
               written all the same is worth a look: which buffers stand above the capacity */
    cli_error("%s: the plan does not fit --capacity %llu: its footprint is %llu, %llu over%s%s%s (exit 1)", path,
              (unsigned long long)capacity, (unsigned long long)footprint,
              (unsigned long long)(footprint - capacity), output ? "; " : "", output ? output : "",
              output ? " is written all the same, to inspect" : "");
  if (!fits || (in.offsets && !given.valid)) exit_code = CLI_FAILED;
out:
  free(given_text);
  free(offsets);
  free(trial);
  hbm_plan_input_free(&in);
  return exit_code;
}
