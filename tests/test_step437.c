/* test_step437: the field report's layout, replayed. The 4.2 GiB AllReduce
 * buffer must fail for fragmentation with 14 GiB free in holes of at most
 * 3 GiB: fragmentation ratio 14/3 - 1 = 3.67. */
#include "hbm.h"
#include "testutil.h"

/* The layout at the failure: bytes per tag among live blocks, and in holes. */
typedef struct layout { uint64_t live[HBM_TAG_COUNT], holes; } layout;
static int add_to_layout(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  layout *l = arg;
  (void)addr;
  if (!live) l->holes += size;
  else if ((unsigned)tag < HBM_TAG_COUNT) l->live[tag] += size;
  return 0;
}

/* The last sample, and whether every sample's live split by purpose summed to its live. */
typedef struct last_sample { hbm_sample s; int n, sums_differ; } last_sample;
static char last_message[256];
static void keep_message(int err, const char *message, void *arg) {
  (void)err, (void)arg;
  snprintf(last_message, sizeof last_message, "%s", message);
}

static void keep_last(const hbm_sample *s, void *arg) {
  last_sample *l = arg;
  uint64_t sum = 0;
  for (int t = 0; t < HBM_TAG_COUNT; t++) sum += s->live_by_tag[t];
  l->sums_differ |= sum != s->live;
  l->s = *s;
  l->n++;
}

int main(void) {
  char path[4096];
  const char *root = getenv("HBM_ROOT");
  snprintf(path, sizeof path, "%s/tests/fixtures/step437.trace", root ? root : ".");
  hbm_trace *t;
  hbm_diag d = {0};
  if (hbm_trace_load(path, &t, &d) != HBM_OK) {
    fprintf(stderr, "%s:%llu: %s\n", d.file, (unsigned long long)d.line, d.message);
    return 1;
  }
  layout at_oom = {.holes = 0};
  last_sample last = {.n = 0};
  hbm_replay_options o = {.policy = "bestfit", .device = "sim:96GiB", .on_oom_layout = add_to_layout,
                          .oom_layout_arg = &at_oom, .on_sample = keep_last, .sample_arg = &last};
  hbm_replay_result r;
  CHECK(hbm_replay(t, &o, &r) == HBM_OK);
  /* Every live block with the tag its trace line gave it: 20 GiB of BF16
   * weights, 40 GiB of optimizer state, 22 GiB of activations, no
   * communication buffer; the 14 GiB free, all in holes. */
  CHECK_EQ_U64(at_oom.live[HBM_TAG_PARAM], 20ull << 30);
  CHECK_EQ_U64(at_oom.live[HBM_TAG_OPTIM], 40ull << 30);
  CHECK_EQ_U64(at_oom.live[HBM_TAG_ACT], 22ull << 30);
  CHECK_EQ_U64(at_oom.live[HBM_TAG_COMM], 0);
  CHECK_EQ_U64(at_oom.holes, 14ull << 30);
  CHECK(r.oom == 1);
  CHECK(r.first_oom.cause == HBM_CAUSE_FRAGMENTATION);
  CHECK_EQ_U64(r.first_oom.step, 437);
  CHECK_EQ_U64(r.first_oom.request, 4509715661ull); /* 4.2 GiB */
  CHECK_EQ_U64(r.first_oom.free_total, 14ull << 30);
  CHECK_EQ_U64(r.first_oom.largest_free, 3ull << 30);
  double ratio = hbm_fragmentation_ratio(r.first_oom.free_total, r.first_oom.largest_free);
  printf("step437: cause %s, free total %llu, largest free %llu, ratio %.2f\n", hbm_oom_cause_name(r.first_oom.cause),
         (unsigned long long)r.first_oom.free_total, (unsigned long long)r.first_oom.largest_free, ratio);
  CHECK(ratio > 3.665 && ratio < 3.675);
  CHECK(r.max_frag >= ratio - 1e-9);
  CHECK_EQ_U64(r.peak_live, 96ull << 30); /* full before the AllReduce buffers were freed */
  /* Live by purpose at the last sample (step 437): the failed buffer is not
   * live, so no comm; every sample's purposes sum to its live. */
  CHECK(last.n == 3 && !last.sums_differ && last.s.step == 437);
  CHECK_EQ_U64(last.s.live_by_tag[HBM_TAG_PARAM], 20ull << 30);
  CHECK_EQ_U64(last.s.live_by_tag[HBM_TAG_OPTIM], 40ull << 30);
  CHECK_EQ_U64(last.s.live_by_tag[HBM_TAG_ACT], 22ull << 30);
  CHECK_EQ_U64(last.s.live_by_tag[HBM_TAG_COMM], 0);
  /* where the buffer fits (zoned), it is live at step 437, as comm */
  last = (last_sample){.n = 0};
  hbm_replay_options z = {.policy = "zoned", .device = "sim:96GiB", .on_sample = keep_last, .sample_arg = &last};
  CHECK(hbm_replay(t, &z, &r) == HBM_OK && !r.oom);
  CHECK(!last.sums_differ && last.s.step == 437);
  CHECK_EQ_U64(last.s.live_by_tag[HBM_TAG_COMM], 4509715661ull);
  /* With 10 GiB more capacity the same request is a capacity question no more. */
  hbm_replay_options big = {.policy = "bestfit", .device = "sim:106GiB"};
  CHECK(hbm_replay(t, &big, &r) == HBM_OK);
  CHECK(r.oom == 0);
  /* With less capacity than live + request: capacity. */
  hbm_replay_options small = {.policy = "bestfit", .device = "sim:84GiB"};
  CHECK(hbm_replay(t, &small, &r) == HBM_OK);
  CHECK(r.oom == 1 && r.first_oom.cause == HBM_CAUSE_CAPACITY);
  /* Arguments refused: the result is cleared all the same, as the header says. */
  hbm_replay_options none = {.policy = NULL};
  CHECK(hbm_replay(t, &none, &r) == HBM_EINVAL && r.oom == 0 && r.events == 0 && r.peak_live == 0);
  CHECK(hbm_replay(t, &small, &r) == HBM_OK && r.oom == 1);
  CHECK(hbm_replay(NULL, &small, &r) == HBM_EINVAL && r.oom == 0 && r.events == 0);
  CHECK(hbm_replay(t, NULL, NULL) == HBM_EINVAL);
  /* a live band: at most a slice per event, and somewhere to put it */
  uint64_t lo[64], hi[64];
  uint64_t n = hbm_trace_event_count(t);
  CHECK(n < 64);
  hbm_replay_options band = {.policy = "bestfit", .live_buckets = n + 1, .live_min = lo, .live_max = hi};
  hbm_set_error_handler(keep_message, NULL);
  CHECK(hbm_replay(t, &band, &r) == HBM_EINVAL);
  CHECK(strstr(last_message, "live_buckets 22 is more than the trace's 21 events") != NULL); /* reported, as the header promises */
  /* Data verification needs real memory: refused on a sim device, in the
   * words of the API (the option and the device spec), not of the CLI. */
  hbm_replay_options verify = {.policy = "bestfit", .device = "sim:96GiB", .verify_data = 1};
  last_message[0] = 0;
  CHECK(hbm_replay(t, &verify, &r) == HBM_EUNSUPPORTED);
  CHECK(strstr(last_message, "verify_data needs the host device") != NULL && !strstr(last_message, "--"));
  hbm_set_error_handler(NULL, NULL);
  band.live_buckets = n;
  band.live_max = NULL;
  CHECK(hbm_replay(t, &band, &r) == HBM_EINVAL);
  band.live_max = hi;
  CHECK(hbm_replay(t, &band, &r) == HBM_OK && r.oom);
  uint64_t top = 0;
  for (uint64_t k = 0; k < n; k++) top = hi[k] > top ? hi[k] : top;
  CHECK_EQ_U64(top, r.peak_live);
  hbm_trace_free(t);
  return test_done("test_step437");
}
