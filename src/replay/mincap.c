/* mincap.c: see mincap.h. */
#include "replay/mincap.h"

#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "trace/trace.h"

#define MINCAP_DEFAULT_RESOLUTION (16ull << 20)
#define MINCAP_GRANULE (2ull << 20) /* the sim device's */

/* Replays at one capacity: 1 completed, 0 a request failed, < 0 an error. */
static int try_capacity(const hbm_trace *t, const char *policy, const char *conf, uint64_t capacity,
                        hbm_replay_result *res, uint64_t *replays) {
  char device[64];
  snprintf(device, sizeof device, "sim:%llu", (unsigned long long)capacity);
  hbm_replay_options o = {.policy = policy, .conf = conf, .device = device};
  int rc = hbm_replay(t, &o, res);
  (*replays)++;
  if (rc == HBM_ENOMEM) return 0; /* the starting state itself does not fit */
  if (rc != HBM_OK) return rc;
  return res->oom ? 0 : 1;
}

uint64_t hbm_mincap_default_limit(const hbm_trace *t) {
  uint64_t peak = hbm_trace_peak_live(t);
  /* A recorded starting state is rebuilt as recorded, its segments whole, so
   * a trace with one needs room for them however little of them is live. */
  uint64_t recorded = 0;
  for (uint32_t k = 0; k < t->ninit_segments; k++) recorded += t->init_segments[k].size;
  uint64_t base = recorded > peak ? recorded : peak;
  if (base >= HBM_MAX_SIZE / 8) return HBM_MAX_SIZE; /* and no overflow */
  uint64_t lim = 8 * base + (1ull << 30);
  return lim > HBM_MAX_SIZE ? HBM_MAX_SIZE : lim;
}

int hbm_mincap_bounds(const hbm_trace *t, const hbm_mincap_options *options, uint64_t *resolution,
                      uint64_t *first, uint64_t *limit) {
  hbm_mincap_options o = options ? *options : (hbm_mincap_options){0};
  uint64_t step = o.resolution ? o.resolution : MINCAP_DEFAULT_RESOLUTION;
  uint64_t peak = hbm_trace_peak_live(t);
  uint64_t lim = o.limit ? o.limit : hbm_mincap_default_limit(t);
  /* A peak live over 1 PiB fits no capacity tried, and rounding it up could wrap. */
  int valid = step % MINCAP_GRANULE == 0 && step <= HBM_MAX_SIZE && lim <= HBM_MAX_SIZE && peak <= HBM_MAX_SIZE;
  lim = lim / step * step;
  /* A resolution is any multiple of 2 MiB, not a power of two: hbm_align_up's
   * mask would land off the grid (96 GiB at 96 GiB steps: 160). */
  uint64_t lo = valid ? hbm_round_up(peak ? peak : 1, step) : 0;
  if (resolution) *resolution = step;
  if (first) *first = lo;
  if (limit) *limit = lim;
  return valid && lo <= lim;
}

int hbm_mincap(const hbm_trace *t, const char *policy, const hbm_mincap_options *options,
               hbm_mincap_result *out) {
  if (!t || !policy || !out) return HBM_EINVAL;
  hbm_mincap_options o = options ? *options : (hbm_mincap_options){0};
  memset(out, 0, sizeof *out);
  snprintf(out->policy, sizeof out->policy, "%s", policy);
  uint64_t peak = hbm_trace_peak_live(t);
  out->peak_live = peak;
  uint64_t step, first, limit;
  if (!hbm_mincap_bounds(t, &o, &step, &first, &limit)) /* "fails up to the limit" having tried nothing */
    return hbm_report_error(HBM_EINVAL, "mincap: no capacity to try with resolution %llu and limit %llu "
                            "(peak live %llu): a resolution is a multiple of 2 MiB, and resolution and limit "
                            "at most 1 PiB and at least peak live", (unsigned long long)step,
                            (unsigned long long)(o.limit ? o.limit : limit), (unsigned long long)peak);
  out->resolution = step;
  out->limit = limit;
  hbm_replay_result res;

  /* Nothing completes below peak live: `fail` is the largest capacity known
   * (or, below peak live, certain) to fail; `ok` the smallest seen to complete. */
  uint64_t fail = first - step, ok = 0, probe = first, gap = step;
  int fail_seen = 0;
  while (!ok) {
    if (fail >= limit) return HBM_OK; /* found stays 0 */
    if (probe > limit) probe = limit; /* the limit itself is tried: "none" means it failed there */
    int rc = try_capacity(t, policy, o.conf, probe, &res, &out->replays);
    if (rc < 0) return rc;
    if (rc) {
      ok = probe;
    } else {
      fail = probe;
      fail_seen = 1;
      probe = fail + gap;
      gap *= 2;
    }
  }
  while (ok - fail > step) {
    uint64_t mid = fail + (ok - fail) / 2 / step * step;
    int rc = try_capacity(t, policy, o.conf, mid, &res, &out->replays);
    if (rc < 0) return rc;
    if (rc) ok = mid;
    else { fail = mid; fail_seen = 1; }
  }
  /* The answer, re-checked: it must complete again, and this replay's
   * backend calls are the price of living at the edge. */
  int rc = try_capacity(t, policy, o.conf, ok, &out->at_min, &out->replays);
  if (rc < 0) return rc;
  if (!rc) return hbm_report_error(HBM_ECORRUPT, "mincap: %s completed at %llu bytes once, then failed there", policy, (unsigned long long)ok);
  out->found = 1;
  out->min_capacity = ok;
  out->backend_calls = out->at_min.backend_calls;
  out->below_fails = fail_seen && fail == ok - step;
  return HBM_OK;
}
