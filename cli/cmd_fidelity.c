/* hbm fidelity: how faithfully the caching model reproduces a recording. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "replay/fidelity.h"
#include "report/json.h"
#include "trace/trace.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: hbm fidelity SNAPSHOT.pickle|TRACE [options]\n"
          "\n"
          "Replays the requests of a PyTorch memory snapshot (or of a trace with recorded\n"
          "addresses) through the model of PyTorch's caching allocator, from the state\n"
          "reconstructed at the first recorded event, and compares with what PyTorch did:\n"
          "the share of allocations placed at PyTorch's address, the segment allocations\n"
          "on both sides, peak reserved on both sides, and the first allocation placed\n"
          "elsewhere. The model never looks at recorded addresses to place a block; a new\n"
          "segment takes the address PyTorch's matching segment got, and recorded segment\n"
          "releases (empty_cache, release before retry) are applied where they happened.\n"
          "\n"
          "options:\n"
          "  --policy caching|expandable  the model (default: expandable when the recorded\n"
          "                       settings have expandable_segments:True, else caching)\n"
          "  --alloc-conf CONF    settings in PYTORCH_CUDA_ALLOC_CONF syntax, once (or\n"
          "                       POLICY=CONF, which picks the policy) (default: the\n"
          "                       recorded ones, their expandable_segments turned to the\n"
          "                       --policy asked for)\n"
          "  --device N           which device of a multi-device snapshot (default: the first\n"
          "                       with trace entries, else the first with segments); also\n"
          "                       --snapshot-device N, as in replay\n"
          "  --check              exit 1 unless address match >= 0.99, segment allocations are\n"
          "                       the same in number and sizes, peak reserved is within 0.5%%,\n"
          "                       no request PyTorch placed fails in the model, and every\n"
          "                       recorded segment release applies to the model (what failed\n"
          "                       is said on standard error: of releases, how many did not\n"
          "                       apply and the first)\n"
          "  --json               one JSON object: trace, policy, streams, alloc_events, unrecorded,\n"
          "                       refused, address_matches, address_match, segment_allocs_real,\n"
          "                       segment_allocs_model, segment_sizes_equal,\n"
          "                       segment_frees_real, segment_frees_applied,\n"
          "                       peak_reserved_real, peak_reserved_model, peak_reserved_diff,\n"
          "                       failures, invariant_failures, first_mismatch (null or\n"
          "                       {event, where, real, model}), check (null without --check,\n"
          "                       else {passed, failed: [what failed]})\n"
          "  -h, --help           this text\n"
          "\n"
          "A trace with no allocations at recorded addresses has nothing to compare: exit 2.\n"
          "Allocations without a recorded address are placed, not compared (unrecorded).\n"
          "Requests PyTorch refused (a snapshot's oom entries) are not placed (refused):\n"
          "the model runs without PyTorch's memory limit.\n"
          "Where PyTorch's peak reserved is 0 B the difference prints n/a (and --check\n"
          "needs the model's to be 0 B too).\n"
          "\n"
          "exit: 0 compared (a request that fails in the model is reported: see --check), 1 the\n"
          "model could not run or broke its invariants (or --check failed), 2 bad input or usage\n");
}


static void json_addr(hbm_json *j, const char *key, uint64_t addr) {
  hbm_json_key(j, key);
  if (addr == HBM_NO_ADDR) hbm_json_null(j);
  else hbm_json_u64(j, addr);
}

/* num / den in units of 1 / scale, rounded down (up: rounded up), exactly
 * (den > 0). The figures printed are rounded away from what would flatter the
 * model: a share of allocations down, a difference in peak reserved up, so that
 * 19999 of 20000 never reads 100.00%, nor a peak 0.502% off "+0.50%, beyond 0.5%". */
static uint64_t scaled(uint64_t num, uint64_t den, uint64_t scale, int up) {
  unsigned __int128 n = (unsigned __int128)num * scale + (up ? den - 1 : 0);
  return (uint64_t)(n / den);
}

/* the share of compared allocations at PyTorch's address, "98.99%" (rounded down) */
static const char *match_percent(const hbm_fidelity_result *r, char out[32]) {
  uint64_t compared = r->allocs - r->unrecorded;
  uint64_t v = compared ? scaled(r->address_matches, compared, 10000, 0) : 10000;
  snprintf(out, 32, "%llu.%02llu%%", (unsigned long long)(v / 100), (unsigned long long)(v % 100));
  return out;
}

/* the same share as a fraction, "0.989999" (rounded down to 6 decimals, no trailing zeros) */
static const char *match_fraction(const hbm_fidelity_result *r, char out[32]) {
  uint64_t compared = r->allocs - r->unrecorded;
  uint64_t v = compared ? scaled(r->address_matches, compared, 1000000, 0) : 1000000;
  if (v >= 1000000) return strcpy(out, "1");
  if (v == 0) return strcpy(out, "0");
  snprintf(out, 32, "0.%06llu", (unsigned long long)v);
  for (size_t k = strlen(out); out[k - 1] == '0'; k--) out[k - 1] = '\0';
  return out;
}

/* the model's peak reserved against PyTorch's, "+0.51%" (its size rounded up;
 * PyTorch's peak is not 0) */
static const char *peak_percent(const hbm_fidelity_result *r, char out[32]) {
  uint64_t real = r->peak_reserved_real, model = r->peak_reserved_model;
  uint64_t v = scaled(model > real ? model - real : real - model, real, 10000, 1);
  snprintf(out, 32, "%c%llu.%02llu%%", model < real ? '-' : '+', (unsigned long long)(v / 100),
           (unsigned long long)(v % 100));
  return out;
}

/* What --check finds wrong, one phrase each (none: it passes). */
static int check_reasons(const hbm_fidelity_result *r, int peak_close, char why[5][192]) {
  int n = 0;
  char a[32], b[32];
  uint64_t compared = r->allocs - r->unrecorded;
  if ((unsigned __int128)r->address_matches * 100 < (unsigned __int128)compared * 99)
    snprintf(why[n++], 192, "address match %s (%llu of %llu), below 0.99", match_fraction(r, a),
             (unsigned long long)r->address_matches, (unsigned long long)compared);
  if (r->segment_allocs_real != r->segment_allocs_model)
    snprintf(why[n++], 192, "segment allocations: PyTorch %llu, model %llu", (unsigned long long)r->segment_allocs_real,
             (unsigned long long)r->segment_allocs_model);
  else if (!r->segment_sizes_equal)
    snprintf(why[n++], 192, "segment allocation sizes differ");
  if (!peak_close) {
    if (r->peak_reserved_real)
      snprintf(why[n++], 192, "peak reserved %s, beyond 0.5%%", peak_percent(r, a));
    else
      snprintf(why[n++], 192, "peak reserved: PyTorch %s, model %s (needs 0 B)", cli_size(r->peak_reserved_real, a),
               cli_size(r->peak_reserved_model, b));
  }
  if (r->failed_allocs) /* the model ran out where PyTorch placed the request */
    snprintf(why[n++], 192, "%llu request%s failed in the model that PyTorch placed", (unsigned long long)r->failed_allocs,
             r->failed_allocs == 1 ? "" : "s");
  /* A release the model could not apply: it held that memory otherwise
   * (a block live, or the segment split or elsewhere) where PyTorch had it
   * free and whole, so the two have parted, whatever the figures say. */
  if (r->segment_frees_applied < r->segment_frees_real && r->has_unapplied)
    snprintf(why[n++], 192, "%llu of %llu recorded segment releases not applied to the model, the first at event "
             "%llu%s%s%s: [0x%llx, 0x%llx)", (unsigned long long)(r->segment_frees_real - r->segment_frees_applied),
             (unsigned long long)r->segment_frees_real, (unsigned long long)r->unapplied_event,
             r->unapplied_where[0] ? " (" : "", r->unapplied_where, r->unapplied_where[0] ? ")" : "",
             (unsigned long long)r->unapplied_addr, (unsigned long long)(r->unapplied_addr + r->unapplied_size));
  return n;
}

int cmd_fidelity(int argc, char **argv) {
  static const struct option opts[] = {{"policy", required_argument, 0, 'p'},
                                       {"alloc-conf", required_argument, 0, 'a'},
                                       {"device", required_argument, 0, 'd'}, {"snapshot-device", required_argument, 0, 'D'},
                                       {"check", no_argument, 0, 'c'},
                                       {"json", no_argument, 0, 'j'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  hbm_fidelity_options fo = {0};
  int json = 0, check = 0, device = -1, c;
  cli_confs confs = {0};
  optind = 1;
  opterr = 0; /* cli_option_error says what is wrong */
  cli_seen seen = {0};
  while ((c = cli_getopt(argc, argv, ":h", opts, "alloc-conf", &seen)) != -1) {
    switch (c) {
      case 'p':
        if (strcmp(optarg, "caching") && strcmp(optarg, "expandable")) {
          cli_error("--policy: fidelity models PyTorch's allocator: caching or expandable, got '%s'", optarg);
          return CLI_BAD_INPUT;
        }
        fo.policy = optarg;
        break;
      case 'a':
        if (!cli_conf_add(&confs, optarg)) return CLI_BAD_INPUT;
        break;
      case 'd':
      case 'D':
        if (!cli_parse_snapshot_device(c == 'd' ? "--device" : "--snapshot-device", optarg, &device)) return CLI_BAD_INPUT;
        break;
      case 'c': check = 1; break;
      case 'j': json = 1; break;
      case 'h': usage(stdout); return CLI_OK;
      default: return cli_option_error("fidelity", argv, c);
    }
  }
  /* One model runs: its settings once, as SETTINGS or as POLICY=SETTINGS
   * (which picks the policy, as in replay). */
  if (confs.n + (confs.all != NULL) > 1) {
    cli_error("--alloc-conf: fidelity runs one policy: give its settings once");
    return CLI_BAD_INPUT;
  }
  fo.conf = confs.all;
  if (confs.n == 1) {
    const char *named = confs.one[0].policy;
    if (strcmp(named, "caching") && strcmp(named, "expandable")) {
      cli_error("--alloc-conf: settings for %s: fidelity models caching or expandable", named);
      return CLI_BAD_INPUT;
    }
    if (fo.policy && strcmp(fo.policy, named)) {
      cli_error("--alloc-conf: settings for %s, but --policy %s", named, fo.policy);
      return CLI_BAD_INPUT;
    }
    fo.policy = named;
    fo.conf = confs.one[0].conf;
  }
  const char *path = cli_one_input("fidelity", "SNAPSHOT.pickle or TRACE", argc, argv, usage);
  if (!path) return CLI_BAD_INPUT;
  hbm_diag diag = {0};
  hbm_trace *t = NULL;
  int rc = cli_load_trace(path, device, &t);
  if (rc != CLI_OK) return rc;
  hbm_fidelity_result r;
  rc = hbm_fidelity(t, &fo, &r, &diag);
  hbm_trace_free(t);
  if (rc != HBM_OK) {
    if (diag.message[0]) cli_diag(&diag, rc, path);
    else cli_error("%s: fidelity failed: %s", path, hbm_strerror(rc));
    return cli_exit_code(rc);
  }
  /* Against a recorded peak of 0 there is no relative difference: only equal
   * peaks pass, and the text says n/a. */
  double peak_diff = r.peak_reserved_real
      ? ((double)r.peak_reserved_model - (double)r.peak_reserved_real) / (double)r.peak_reserved_real
      : 0.0;
  uint64_t peak_off = r.peak_reserved_model > r.peak_reserved_real ? r.peak_reserved_model - r.peak_reserved_real
                                                                   : r.peak_reserved_real - r.peak_reserved_model;
  int peak_close = r.peak_reserved_real ? (unsigned __int128)peak_off * 200 <= r.peak_reserved_real /* 0.5% */
                                        : r.peak_reserved_model == 0;
  char why[5][192];
  int nwhy = check_reasons(&r, peak_close, why);
  if (json) {
    hbm_json j;
    hbm_json_init(&j);
    hbm_json_object_begin(&j);
    hbm_json_kv_string(&j, "trace", path);
    hbm_json_kv_string(&j, "policy", r.policy);
    hbm_json_kv_u64(&j, "streams", r.streams);
    hbm_json_kv_u64(&j, "alloc_events", r.allocs + r.refused); /* requests, refused ones too, as replay counts */
    hbm_json_kv_u64(&j, "unrecorded", r.unrecorded);
    hbm_json_kv_u64(&j, "refused", r.refused);
    hbm_json_kv_u64(&j, "address_matches", r.address_matches);
    hbm_json_kv_double(&j, "address_match", r.address_match);
    hbm_json_kv_u64(&j, "segment_allocs_real", r.segment_allocs_real);
    hbm_json_kv_u64(&j, "segment_allocs_model", r.segment_allocs_model);
    hbm_json_key(&j, "segment_sizes_equal");
    hbm_json_bool(&j, r.segment_sizes_equal);
    hbm_json_kv_u64(&j, "segment_frees_real", r.segment_frees_real);
    hbm_json_kv_u64(&j, "segment_frees_applied", r.segment_frees_applied);
    hbm_json_kv_u64(&j, "peak_reserved_real", r.peak_reserved_real);
    hbm_json_kv_u64(&j, "peak_reserved_model", r.peak_reserved_model);
    hbm_json_key(&j, "peak_reserved_diff"); /* relative; none against a recorded 0 */
    if (r.peak_reserved_real) hbm_json_double(&j, peak_diff);
    else hbm_json_null(&j);
    hbm_json_kv_u64(&j, "failures", r.failed_allocs); /* as replay names failed requests */
    hbm_json_kv_u64(&j, "invariant_failures", (uint64_t)r.check_failures);
    hbm_json_key(&j, "first_mismatch");
    if (!r.has_mismatch) {
      hbm_json_null(&j);
    } else {
      hbm_json_object_begin(&j);
      hbm_json_kv_u64(&j, "event", r.mismatch_event);
      hbm_json_key(&j, "where");
      if (r.mismatch_where[0]) hbm_json_string(&j, r.mismatch_where);
      else hbm_json_null(&j);
      json_addr(&j, "real", r.mismatch_real);
      json_addr(&j, "model", r.mismatch_model);
      hbm_json_object_end(&j);
    }
    hbm_json_key(&j, "check"); /* null without --check */
    if (!check) {
      hbm_json_null(&j);
    } else {
      hbm_json_object_begin(&j);
      hbm_json_key(&j, "passed");
      hbm_json_bool(&j, nwhy == 0);
      hbm_json_key(&j, "failed");
      hbm_json_array_begin(&j);
      for (int k = 0; k < nwhy; k++) hbm_json_string(&j, why[k]);
      hbm_json_array_end(&j);
      hbm_json_object_end(&j);
    }
    hbm_json_object_end(&j);
    if (cli_print_json("fidelity", &j) != CLI_OK) return CLI_FAILED;
  } else {
    char a[32], b[32], pct[32], share[32];
    if (r.peak_reserved_real) peak_percent(&r, pct);
    else snprintf(pct, sizeof pct, "n/a");
    printf("fidelity of %s on %s (%llu stream%s)\n", r.policy, path, (unsigned long long)r.streams,
           r.streams == 1 ? "" : "s");
    printf("  allocations          %llu, at PyTorch's address: %llu", (unsigned long long)r.allocs,
           (unsigned long long)r.address_matches);
    if (r.unrecorded)
      printf(" of %llu compared (%s); %llu without a recorded address, not compared\n",
             (unsigned long long)(r.allocs - r.unrecorded), match_percent(&r, share), (unsigned long long)r.unrecorded);
    else
      printf(" (%s)\n", match_percent(&r, share));
    const char *how = r.segment_sizes_equal ? "same sizes in the same order"
                      : r.segment_allocs_real != r.segment_allocs_model ? "counts differ" : "sizes differ";
    printf("  segment allocations  PyTorch %llu, model %llu (%s)\n", (unsigned long long)r.segment_allocs_real,
           (unsigned long long)r.segment_allocs_model, how);
    printf("  segment releases     %llu recorded, %llu applied to the model\n",
           (unsigned long long)r.segment_frees_real, (unsigned long long)r.segment_frees_applied);
    printf("  peak reserved        PyTorch %s, model %s (%s)\n", cli_size(r.peak_reserved_real, a),
           cli_size(r.peak_reserved_model, b), pct);
    if (r.refused) printf("  refused requests     %llu: PyTorch ran out of memory there; not placed, since the model "
                          "runs without PyTorch's limit\n", (unsigned long long)r.refused);
    if (r.failed_allocs) printf("  failed requests      %llu (the model ran out where PyTorch did not)\n",
                                (unsigned long long)r.failed_allocs);
    if (r.has_mismatch) {
      printf("  first mismatch       event %llu", (unsigned long long)r.mismatch_event);
      if (r.mismatch_where[0]) printf(" (%s)", r.mismatch_where);
      printf(": PyTorch 0x%llx, model ", (unsigned long long)r.mismatch_real);
      if (r.mismatch_model == HBM_NO_ADDR) printf("failed\n");
      else printf("0x%llx\n", (unsigned long long)r.mismatch_model);
    } else {
      printf("  first mismatch       none\n");
    }
    if (r.check_failures) printf("  model invariants     %d failure(s)\n", r.check_failures);
  }
  /* exit 1 says why on stderr, whatever the output format */
  if (r.check_failures)
    cli_error("%s: the %s model broke its invariants (%d failure%s)", path, r.policy, r.check_failures,
              r.check_failures == 1 ? "" : "s");
  if (check && nwhy) {
    char line[5 * 192 + 16] = "";
    for (int k = 0; k < nwhy; k++) {
      strcat(line, k ? "; " : "");
      strcat(line, why[k]);
    }
    cli_error("%s: check failed: %s", path, line);
  }
  return r.check_failures || (check && nwhy) ? CLI_FAILED : CLI_OK;
}
