/* test_mincap: the capacity search on traces with known answers: a single
 * block, a layout that fragments a flat arena but not zoned, the resolution,
 * a limit too small to complete, the re-check's backend calls, and errors. */
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
  /* A limit below the need: not found. */
  hbm_mincap_options low = {.limit = 64 * MiB};
  CHECK(hbm_mincap(one, "zoned", &low, &r) == HBM_OK);
  CHECK(!r.found);
  /* Errors: an unknown policy, a bad setting. */
  errors_seen = 0;
  CHECK(hbm_mincap(one, "nosuch", NULL, &r) == HBM_EINVAL);
  hbm_mincap_options bad = {.conf = "zones:maybe"};
  CHECK(hbm_mincap(one, "zoned", &bad, &r) == HBM_EINVAL);
  CHECK(errors_seen >= 2);
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
  hbm_trace_free(frag);
  return test_done("test_mincap");
}
