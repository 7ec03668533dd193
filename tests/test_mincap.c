/* test_mincap: the capacity search on traces with known answers: a single
 * block, a layout that fragments a flat arena but not zoned, the resolution,
 * a limit too small to complete, the re-check's backend calls, errors, and a
 * recorded starting state that does not fit (its cause, and not completing). */
#include "hbm.h"
#include "replay/mincap.h"
#include "testutil.h"
#include "trace/trace.h"

#define MiB (1ull << 20)

static int errors_seen;
static void count_error(int err, const char *message, void *arg) { errors_seen++; }

int main(void) {
  hbm_set_error_handler(count_error, NULL);
  hbm_mincap_result r;

  /* One 100 MiB block: every policy needs 100 MiB, so 112 MiB at 16 MiB steps. */
  hbm_trace *one;
  CHECK(hbm_trace_new("one", &one) == HBM_OK);
  hbm_trace_alloc(one, 0, 100 * MiB, HBM_TAG_ACT, 0);
  hbm_trace_free_id(one, 0);
  const char *policies[] = {"bestfit", "zoned", "caching", "expandable"};
  for (int i = 0; i < 4; i++) {
    CHECK(hbm_mincap(one, policies[i], NULL, &r) == HBM_OK);
    printf("test_mincap: one block, %s: %llu (%llu replays, %llu calls)\n", policies[i],
           (unsigned long long)r.min_capacity, (unsigned long long)r.replays, (unsigned long long)r.backend_calls);
    CHECK(r.found);
    CHECK_EQ_U64(r.peak_live, 100 * MiB);
    CHECK_EQ_U64(r.min_capacity, 112 * MiB);
    CHECK(r.below_fails == 0); /* 96 MiB is below peak live: certain, not replayed */
    CHECK_EQ_U64(r.backend_calls, r.at_min.backend_calls);
    CHECK(r.at_min.oom == 0);
  }
  /* A finer resolution lands on the exact need. */
  hbm_mincap_options fine = {.resolution = 2 * MiB};
  CHECK(hbm_mincap(one, "zoned", &fine, &r) == HBM_OK);
  CHECK(r.found && r.min_capacity == 100 * MiB);
  CHECK_EQ_U64(r.resolution, 2 * MiB);
  CHECK_EQ_U64(r.limit, 8 * 100 * MiB + 1024 * MiB); /* the default, as used */
  /* Errors: an unknown policy, a bad setting. */
  errors_seen = 0;
  CHECK(hbm_mincap(one, "nosuch", NULL, &r) == HBM_EINVAL);
  hbm_mincap_options bad = {.conf = "zones:maybe"};
  CHECK(hbm_mincap(one, "zoned", &bad, &r) == HBM_EINVAL);
  CHECK(errors_seen >= 2);
  /* Options under which nothing would be tried are refused, not reported as
   * "fails up to the limit" after 0 replays: a limit below peak live, a
   * resolution above the limit (given or default) or above 1 PiB, a
   * resolution off the 2 MiB granule, a limit that rounds below the first
   * capacity. */
  static const hbm_mincap_options none[] = {
      {.limit = 64 * MiB}, {.resolution = 1ull << 50}, {.resolution = 2ull << 50, .limit = 1ull << 50},
      {.resolution = 64 * MiB, .limit = 32 * MiB}, {.resolution = 3 * MiB}, {.limit = 100 * MiB},
      {.limit = 2ull << 50}};
  for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
    errors_seen = 0;
    r.replays = 99;
    CHECK(!hbm_mincap_bounds(one, &none[i], NULL, NULL, NULL));
    CHECK(hbm_mincap(one, "zoned", &none[i], &r) == HBM_EINVAL);
    CHECK(errors_seen == 1 && r.replays == 0 && !r.found);
  }
  /* A peak live past 1 PiB (16,384 live blocks of 1 PiB: the sum stops at
   * 2^64 - 1) has no capacity to try either; rounding it up to the
   * resolution wrapped to 0, and the search "ran" with no replay. */
  hbm_trace *huge;
  CHECK(hbm_trace_new("huge", &huge) == HBM_OK);
  for (uint32_t i = 0; i < 16384; i++) hbm_trace_alloc(huge, i, 1ull << 50, HBM_TAG_ACT, 0);
  CHECK_EQ_U64(hbm_trace_peak_live(huge), UINT64_MAX);
  CHECK(!hbm_mincap_bounds(huge, NULL, NULL, NULL, NULL));
  errors_seen = 0;
  r.replays = 99;
  CHECK(hbm_mincap(huge, "bestfit", NULL, &r) == HBM_EINVAL);
  CHECK(errors_seen == 1 && r.replays == 0 && !r.found);
  hbm_trace_free(huge);
  uint64_t res, first, lim;
  CHECK(hbm_mincap_bounds(one, &(hbm_mincap_options){.limit = 112 * MiB}, &res, &first, &lim));
  CHECK(res == 16 * MiB && first == 112 * MiB && lim == 112 * MiB);
  /* 1 PiB itself is allowed, as a limit and as a resolution. */
  CHECK(hbm_mincap_bounds(one, &(hbm_mincap_options){.limit = 1ull << 50}, &res, &first, &lim));
  CHECK(res == 16 * MiB && first == 112 * MiB && lim == 1ull << 50);
  CHECK(hbm_mincap_bounds(one, &(hbm_mincap_options){.resolution = 1ull << 50, .limit = 1ull << 50}, &res,
                          &first, &lim));
  CHECK(res == 1ull << 50 && first == 1ull << 50 && lim == 1ull << 50);
  /* A resolution that is no power of two: the first capacity is peak live
   * rounded up to a multiple of it (a mask made 6 MiB steps start at 104 MiB,
   * 100 MiB ones at 132), and the answer lies on that grid. */
  CHECK(hbm_mincap_bounds(one, &(hbm_mincap_options){.resolution = 6 * MiB}, &res, &first, &lim));
  CHECK_EQ_U64(first, 102 * MiB);
  CHECK(hbm_mincap_bounds(one, &(hbm_mincap_options){.resolution = 100 * MiB}, &res, &first, &lim));
  CHECK_EQ_U64(first, 100 * MiB);
  CHECK(hbm_mincap(one, "zoned", &(hbm_mincap_options){.resolution = 6 * MiB}, &r) == HBM_OK);
  CHECK(r.found && r.min_capacity == 102 * MiB);
  hbm_trace_free(one);

  /* The field report in miniature: 48 MiB blocks alternate with 32 MiB ones;
   * the 32s are freed, then a 160 MiB block comes. A flat arena needs it
   * contiguous above everything; zoned stitches it from the holes. */
  hbm_trace *frag;
  CHECK(hbm_trace_new("frag", &frag) == HBM_OK);
  uint32_t id = 0;
  for (int i = 0; i < 8; i++) {
    hbm_trace_alloc(frag, id++, 48 * MiB, HBM_TAG_PARAM, 0);
    hbm_trace_alloc(frag, id++, 32 * MiB, HBM_TAG_ACT, 0);
  }
  for (uint32_t k = 1; k < id; k += 2) hbm_trace_free_id(frag, k);
  hbm_trace_alloc(frag, id, 160 * MiB, HBM_TAG_COMM, 0);
  uint64_t peak = hbm_trace_peak_live(frag); /* 640 MiB: before the frees */
  CHECK_EQ_U64(peak, 640 * MiB);
  hbm_mincap_result flat, zoned;
  CHECK(hbm_mincap(frag, "bestfit", NULL, &flat) == HBM_OK);
  CHECK(hbm_mincap(frag, "zoned", NULL, &zoned) == HBM_OK);
  printf("test_mincap: fragmenting layout, peak live %llu: bestfit %llu, zoned %llu (%llu calls)\n",
         (unsigned long long)peak, (unsigned long long)flat.min_capacity, (unsigned long long)zoned.min_capacity,
         (unsigned long long)zoned.backend_calls);
  CHECK(flat.found && zoned.found);
  CHECK_EQ_U64(flat.min_capacity, 8 * 48 * MiB + 7 * 32 * MiB + 160 * MiB); /* 768: the block above the last param */
  CHECK_EQ_U64(zoned.min_capacity, 640 * MiB);
  CHECK(flat.below_fails);
  /* A limit between peak live and the need: tried, and not found. */
  hbm_mincap_options low = {.limit = 704 * MiB};
  CHECK(hbm_mincap(frag, "bestfit", &low, &r) == HBM_OK);
  CHECK(!r.found && r.replays > 0 && r.limit == 704 * MiB);
  /* A limit the doubling steps pass over (640, 656, 688, 752, then 880 MiB)
   * is tried itself: the need at the limit, or under it, is found. */
  for (uint64_t mib = 768; mib <= 784; mib += 16) {
    hbm_mincap_options at = {.limit = mib * MiB};
    CHECK(hbm_mincap(frag, "bestfit", &at, &r) == HBM_OK);
    CHECK(r.found && r.below_fails);
    CHECK_EQ_U64(r.min_capacity, 768 * MiB);
  }
  hbm_trace_free(frag);

  /* A starting state that does not fit as recorded: 100 B live in a 1 GiB
   * segment on a 512 MiB device. The live bytes would fit, so the cause is
   * the starting state, not fragmentation; live bytes over the capacity are
   * the starting state too, whatever the policy, not a request at event 0
   * with a made-up ratio. Either way the run fails before event 0, nothing
   * is replayed, and mincap goes on. */
  static const char unfit_text[] = "hbm-trace 1\ninit-seg 0x0 1GiB 0 large\ninit-blk 0x0 1GiB b0 100\na x 10\n";
  static const char over_text[] = "hbm-trace 1\ninit-seg 0x0 1GiB 0 large\ninit-blk 0x0 1GiB b0 600MiB\na x 10\n";
  hbm_trace *unfit, *over;
  hbm_diag d = {0};
  CHECK(hbm_trace_parse_text(unfit_text, sizeof unfit_text - 1, "unfit", &unfit, &d) == HBM_OK);
  CHECK(hbm_trace_parse_text(over_text, sizeof over_text - 1, "over", &over, &d) == HBM_OK);
  for (int i = 2; i < 4; i++) { /* caching, expandable: the policies that take a recorded state */
    hbm_replay_options ro = {.policy = policies[i], .device = "sim:512MiB"};
    hbm_replay_result rr;
    CHECK(hbm_replay(unfit, &ro, &rr) == HBM_OK);
    printf("test_mincap: unfit starting state, %s: cause %s, request %llu\n", policies[i],
           hbm_oom_cause_name(rr.first_oom.cause), (unsigned long long)rr.first_oom.request);
    CHECK(rr.oom && rr.first_oom.cause == HBM_CAUSE_START && rr.first_oom.event == 0);
    CHECK_EQ_U64(rr.first_oom.request, 100);
    CHECK(rr.max_frag == 0); /* no sample of a run that never started has a ratio */
    CHECK(!strcmp(hbm_oom_cause_name(rr.first_oom.cause), "start"));
    CHECK(hbm_replay(over, &ro, &rr) == HBM_OK);
    CHECK(rr.oom && rr.first_oom.cause == HBM_CAUSE_START);
    ro.device = "sim:2GiB";
    CHECK(hbm_replay(unfit, &ro, &rr) == HBM_OK && !rr.oom);
  }
  for (int i = 0; i < 4; i++) { /* seeded or placing the blocks as requests */
    hbm_replay_options ro = {.policy = policies[i], .device = "sim:512MiB"};
    hbm_replay_result rr;
    CHECK(hbm_replay(over, &ro, &rr) == HBM_OK);
    printf("test_mincap: starting state over the capacity, %s: cause %s, event %llu, max_frag %g\n", policies[i],
           hbm_oom_cause_name(rr.first_oom.cause), (unsigned long long)rr.first_oom.event, rr.max_frag);
    CHECK(rr.oom && rr.first_oom.cause == HBM_CAUSE_START && rr.first_oom.event == 0);
    CHECK_EQ_U64(rr.first_oom.request, 600 * MiB);
    CHECK_EQ_U64(rr.failures, 1);
    CHECK_EQ_U64(rr.alloc_events, 0);
    CHECK(rr.max_frag == 0);
  }
  hbm_mincap_options wide = {.limit = 4ull << 30};
  CHECK(hbm_mincap(unfit, "caching", &wide, &r) == HBM_OK);
  CHECK(r.found && r.min_capacity > (1ull << 30) && r.below_fails);
  /* The default limit makes room for the recorded segments (1 GiB here),
   * not only for 8 x the 100 B live. */
  CHECK(hbm_mincap(unfit, "caching", NULL, &r) == HBM_OK);
  CHECK(r.found && r.min_capacity > (1ull << 30) && r.below_fails);
  hbm_trace_free(unfit);
  hbm_trace_free(over);
  return test_done("test_mincap");
}
