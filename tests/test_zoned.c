/* test_zoned: policy zoned under randomized load with hbm_check() after every
 * operation (every setting, and a device so small that every pressure path
 * runs: stitching idle chunks, unmapping, exhaustive placement, re-chunking),
 * the largest-free promise, the layout scan, the step-437 layout, settings
 * that are refused, the fixed-zone fallback without virtual memory, and a
 * periodic workload whose steady state makes no backend calls.
 * Data integrity on the host device is test_zoned_host. */
#include "device/device.h"
#include "hbm.h"
#include "trace/trace.h"
#include "staged_trace.h"
#include "testutil.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

static int errors_seen;
static void count_error(int err, const char *message, void *arg) {
  errors_seen++;
  if (getenv("HBM_VERBOSE")) fprintf(stderr, "  error: %s\n", message);
}

typedef struct scan_tally { uint64_t live_blocks, prev_end; int ordered; } scan_tally;
static int tally(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  scan_tally *t = arg;
  if (t->prev_end && addr < t->prev_end) t->ordered = 0;
  t->prev_end = addr + size;
  t->live_blocks += live;
  return 0;
}

/* A size drawn like a training job's: mostly small, some granule-sized,
 * some large, odd sizes included. */
static uint64_t draw_size(uint64_t *rng, uint64_t big) {
  switch (test_rand_below(rng, 8)) {
    case 0: case 1: case 2: return 1 + test_rand_below(rng, 64 << 10);
    case 3: return 512 * (1 + test_rand_below(rng, 4096));
    case 4: case 5: return (2 * MiB) * (1 + test_rand_below(rng, 8)) - test_rand_below(rng, 2) * 4096;
    default: return 1 + test_rand_below(rng, big);
  }
}

/* ops random operations on a zoned heap over `spec`; checks after each (or
 * every `check_every`). Returns the number of failed allocations. */
static uint64_t stress(const char *spec, const char *conf, uint64_t ops, uint64_t big, int check_every, uint64_t *rng) {
  hbm_device *dev;
  CHECK(hbm_device_open(spec, &dev) == HBM_OK);
  hbm_heap *h;
  CHECK(hbm_heap_create(dev, "zoned", conf, &h) == HBM_OK);
  enum { MAXLIVE = 512 };
  uint64_t addr[MAXLIVE], failed = 0;
  int n = 0;
  for (uint64_t op = 0; op < ops; op++) {
    if (n < MAXLIVE && (n == 0 || test_rand_below(rng, 100) < 55)) {
      uint64_t size = draw_size(rng, big);
      hbm_tag tag = (hbm_tag)test_rand_below(rng, HBM_TAG_COUNT);
      int stream = (int)test_rand_below(rng, 3);
      hbm_stats st;
      CHECK(hbm_heap_stats(h, &st) == HBM_OK);
      int rc = hbm_alloc(h, size, tag, stream, &addr[n]);
      if (rc == HBM_OK) n++;
      else {
        CHECK(rc == HBM_ENOMEM);
        /* The promise: anything up to largest_free would have succeeded. */
        CHECK(size > st.largest_free);
        if (size <= st.largest_free) fprintf(stderr, "  %s %s: request %llu failed, largest free %llu, live %llu\n", spec, conf ? conf : "default", (unsigned long long)size, (unsigned long long)st.largest_free, (unsigned long long)st.live);
        failed++;
      }
    } else {
      int k = (int)test_rand_below(rng, (uint64_t)n);
      CHECK(hbm_free(h, addr[k]) == HBM_OK);
      addr[k] = addr[--n];
    }
    if (check_every && op % (uint64_t)check_every == 0 && hbm_check(h) != HBM_OK) {
      fprintf(stderr, "check failed at op %llu (%s, %s)\n", (unsigned long long)op, spec, conf ? conf : "default");
      test_failures_++;
      break;
    }
  }
  /* largest_free is honest: a request of exactly that size succeeds */
  hbm_stats st;
  CHECK(hbm_heap_stats(h, &st) == HBM_OK);
  if (st.largest_free > 0 && n < MAXLIVE) {
    uint64_t a;
    int rc = hbm_alloc(h, st.largest_free, HBM_TAG_OTHER, 0, &a);
    CHECK(rc == HBM_OK);
    if (rc == HBM_OK) CHECK(hbm_free(h, a) == HBM_OK);
  }
  scan_tally t = {0, 0, 1};
  CHECK(hbm_heap_scan(h, tally, &t) == HBM_OK);
  CHECK(t.ordered);
  CHECK_EQ_U64(t.live_blocks, n);
  CHECK(hbm_check(h) == HBM_OK);
  while (n > 0) CHECK(hbm_free(h, addr[--n]) == HBM_OK);
  CHECK(hbm_check(h) == HBM_OK);
  CHECK(hbm_heap_stats(h, &st) == HBM_OK);
  CHECK_EQ_U64(st.live, 0);
  hbm_heap_destroy(h);
  CHECK_EQ_U64(dev->phys_used, 0); /* everything went back to the device */
  hbm_device_close(dev);
  return failed;
}

typedef struct frag_log { double max_at_boundary; uint64_t samples; } frag_log;
static void on_sample(const hbm_sample *s, void *arg) {
  frag_log *f = arg;
  f->samples++;
  if (s->fragmentation > f->max_at_boundary) f->max_at_boundary = s->fragmentation;
}

/* A periodic job: static state, then steps of activations that come and go
 * in the same order each time. */
static hbm_trace *periodic_trace(int steps) {
  hbm_trace *t;
  CHECK(hbm_trace_new("periodic", &t) == HBM_OK);
  uint32_t id = 0;
  for (int i = 0; i < 20; i++) hbm_trace_alloc(t, id++, 37 * MiB + 4096 * (uint64_t)i, HBM_TAG_PARAM, 0);
  uint32_t first_act = id;
  for (int s = 1; s <= steps; s++) {
    hbm_trace_step(t, (uint64_t)s);
    id = first_act;
    for (int l = 0; l < 24; l++) {
      hbm_trace_alloc(t, id++, 96 * MiB + 512 * (uint64_t)l, HBM_TAG_ACT, 0);
      hbm_trace_alloc(t, id, 24 * MiB + 1000, HBM_TAG_TEMP, 0);
      hbm_trace_alloc(t, id + 1, 300 << 10, HBM_TAG_TEMP, 0);
      hbm_trace_free_id(t, id);
      hbm_trace_free_id(t, id + 1);
    }
    hbm_trace_alloc(t, id + 2, 512 * MiB, HBM_TAG_COMM, 1);
    for (uint32_t k = id - 1; k + 1 > first_act; k--) hbm_trace_free_id(t, k);
    hbm_trace_free_id(t, id + 2);
  }
  return t;
}

int main(void) {
  uint64_t seed = test_seed("test_zoned"), rng = seed;
  hbm_set_error_handler(count_error, NULL);
  double scale = test_scale();
  uint64_t ops = (uint64_t)(20000 * scale) + 200;

  /* ---- randomized, hbm_check() after every operation, each setting ---- */
  const char *confs[] = {NULL, "zones:off", "zones:tags", "small:off", "streams:off", "large_life:on",
                         "chunk:2MiB", "chunk:1GiB", "slack:5%", "slack:32MiB,probes:1", "moves:on",
                         "moves:on,chunk:8MiB", "moves:on,slack:1%", "vmm:off", "vmm:off,split:0.2"};
  for (size_t i = 0; i < sizeof confs / sizeof confs[0]; i++) {
    uint64_t failed = stress("sim:4GiB", confs[i], ops, 200 * MiB, 1, &rng);
    printf("test_zoned: sim:4GiB %-22s %llu ops, %llu failed allocations\n", confs[i] ? confs[i] : "(default)",
           (unsigned long long)ops, (unsigned long long)failed);
  }
  /* A device far smaller than the load: every pressure path runs. */
  uint64_t failed = stress("sim:512MiB", NULL, ops, 96 * MiB, 1, &rng);
  printf("test_zoned: sim:512MiB under pressure: %llu failed allocations\n", (unsigned long long)failed);
  CHECK(failed > 0);
  failed = stress("sim:512MiB", "chunk:1GiB", ops, 96 * MiB, 1, &rng);
  printf("test_zoned: sim:512MiB, one-stripe chunks, under pressure: %llu failed\n", (unsigned long long)failed);
  failed = stress("sim:512MiB", "moves:on", ops, 96 * MiB, 1, &rng);
  printf("test_zoned: sim:512MiB, cache held at its bound, under pressure: %llu failed\n", (unsigned long long)failed);
  failed = stress("sim:256MiB,granule=64KiB", NULL, ops, 32 * MiB, 1, &rng);
  printf("test_zoned: 64 KiB granules under pressure: %llu failed\n", (unsigned long long)failed);

  /* ---- settings that are refused ---- */
  hbm_device *dev;
  CHECK(hbm_device_open("sim:1GiB", &dev) == HBM_OK);
  hbm_heap *h;
  errors_seen = 0;
  const char *bad[] = {"zones:maybe", "chunk:3MiB", "chunk:1KiB", "probes:0", "slack:-1%", "nosuch:1", "zones", "va:0", "split:1",
                       "moves:maybe"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(hbm_heap_create(dev, "zoned", bad[i], &h) == HBM_EINVAL);
  CHECK(errors_seen >= (int)(sizeof bad / sizeof bad[0]));
  /* edges through the public API */
  CHECK(hbm_heap_create(dev, "zoned", NULL, &h) == HBM_OK);
  uint64_t a, b;
  CHECK(hbm_alloc(h, 2 * GiB, HBM_TAG_ACT, 0, &a) == HBM_ENOMEM);
  CHECK(hbm_alloc(h, 1 * GiB, HBM_TAG_ACT, 0, &a) == HBM_OK); /* the whole device, one request */
  CHECK(hbm_alloc(h, 1, HBM_TAG_ACT, 0, &b) == HBM_ENOMEM);
  CHECK(hbm_free(h, a + 512) == HBM_EINVAL);
  CHECK(hbm_free(h, a) == HBM_OK);
  CHECK(hbm_free(h, a) == HBM_EINVAL);
  CHECK(hbm_free(h, 12345) == HBM_EINVAL);
  CHECK(hbm_check(h) == HBM_OK);
  hbm_heap_destroy(h);
  hbm_device_close(dev);

  /* ---- the field report's layout: completes, no fragmentation at any boundary ---- */
  char path[4096];
  const char *root = getenv("HBM_ROOT");
  snprintf(path, sizeof path, "%s/tests/fixtures/step437.trace", root ? root : ".");
  hbm_trace *t;
  hbm_diag d = {0};
  CHECK(hbm_trace_load(path, &t, &d) == HBM_OK);
  frag_log fl = {0, 0};
  hbm_replay_options o = {.policy = "zoned", .device = "sim:96GiB", .on_sample = on_sample, .sample_arg = &fl};
  hbm_replay_result r;
  CHECK(hbm_replay(t, &o, &r) == HBM_OK);
  printf("test_zoned: step437: oom %d, %llu boundaries, max fragmentation %.4f, peak reserved %llu\n", r.oom,
         (unsigned long long)fl.samples, fl.max_at_boundary, (unsigned long long)r.peak_reserved);
  CHECK(r.oom == 0);
  CHECK(fl.samples >= 2);
  CHECK(fl.max_at_boundary <= 0.05);
  CHECK(r.max_frag <= 0.05);
  CHECK(r.peak_reserved - r.peak_live <= 64 * MiB);
  hbm_trace_free(t);

  /* ---- a periodic job: after the first step, (almost) no backend calls ---- */
  t = periodic_trace(12);
  o = (hbm_replay_options){.policy = "zoned", .device = "sim:8GiB"};
  CHECK(hbm_replay(t, &o, &r) == HBM_OK);
  printf("test_zoned: periodic: %llu backend calls, %llu after the first step, %llu allocations, peak reserved - live %llu\n",
         (unsigned long long)r.backend_calls, (unsigned long long)r.backend_calls_after_first_step,
         (unsigned long long)r.alloc_events, (unsigned long long)(r.peak_reserved - r.peak_live));
  CHECK(r.oom == 0);
  CHECK(r.backend_calls_after_first_step * 100 <= r.alloc_events);
  CHECK(r.peak_reserved - r.peak_live <= 64 * MiB);
  /* and at a capacity just above its peak it still completes */
  char spec[64];
  snprintf(spec, sizeof spec, "sim:%llu", (unsigned long long)(r.peak_live + 64 * MiB));
  o.device = spec;
  CHECK(hbm_replay(t, &o, &r) == HBM_OK);
  CHECK(r.oom == 0);
  hbm_trace_free(t);

  /* ---- moves:on holds the cache at the touched high-water mark ----
   * Three 128 MiB blocks, the outer two freed: idle chunks in a hole a
   * 192 MiB request does not fit, so it goes where the last one was and
   * needs 64 MiB more. By default those are new pages (peak reserved
   * 448 MiB); with moves the first block's idle chunks are stitched there
   * instead and the peak stays at what was ever touched (384 MiB). */
  t = NULL;
  CHECK(hbm_trace_new("holes", &t) == HBM_OK);
  for (uint32_t i = 0; i < 3; i++) hbm_trace_alloc(t, i, 128 * MiB, HBM_TAG_ACT, 0);
  hbm_trace_free_id(t, 0);
  hbm_trace_free_id(t, 2);
  hbm_trace_alloc(t, 3, 192 * MiB, HBM_TAG_ACT, 0);
  hbm_trace_free_id(t, 1);
  hbm_trace_free_id(t, 3);
  uint64_t reserved[2], moves[2];
  for (int m = 0; m < 2; m++) {
    o = (hbm_replay_options){.policy = "zoned", .conf = m ? "moves:on" : NULL, .device = "sim:8GiB"};
    CHECK(hbm_replay(t, &o, &r) == HBM_OK);
    CHECK(r.oom == 0);
    reserved[m] = r.peak_reserved;
    moves[m] = 0;
    for (int k = 0; k < r.ncounters; k++)
      if (!strcmp(r.counters[k].name, "bound_moves")) moves[m] = (uint64_t)r.counters[k].value;
  }
  printf("test_zoned: holes: peak reserved %llu MiB by default, %llu MiB with moves:on (%llu chunks moved)\n",
         (unsigned long long)(reserved[0] / MiB), (unsigned long long)(reserved[1] / MiB), (unsigned long long)moves[1]);
  CHECK_EQ_U64(reserved[0], 448 * MiB);
  CHECK_EQ_U64(reserved[1], 384 * MiB);
  CHECK_EQ_U64(moves[0], 0);
  CHECK(moves[1] > 0);
  hbm_trace_free(t);

  /* ---- without step marks, a chunk is cold once twice the peak live bytes
   * were allocated after it went idle: large blocks count too ----
   * A and B (128 MiB each); A freed; C (200 MiB) comes and goes five times
   * above B; then D (300 MiB) needs new pages past the high-water mark, and
   * A's chunks, idle while 1000 MiB were allocated (peak live 328 MiB), go. */
  CHECK(hbm_trace_new("cold", &t) == HBM_OK);
  hbm_trace_alloc(t, 0, 128 * MiB, HBM_TAG_ACT, 0);
  hbm_trace_alloc(t, 1, 128 * MiB, HBM_TAG_ACT, 0);
  hbm_trace_free_id(t, 0);
  for (int i = 0; i < 5; i++) {
    hbm_trace_alloc(t, 2, 200 * MiB, HBM_TAG_ACT, 0);
    hbm_trace_free_id(t, 2);
  }
  hbm_trace_alloc(t, 3, 300 * MiB, HBM_TAG_ACT, 0);
  hbm_trace_free_id(t, 3);
  hbm_trace_free_id(t, 1);
  o = (hbm_replay_options){.policy = "zoned", .device = "sim:8GiB"};
  CHECK(hbm_replay(t, &o, &r) == HBM_OK);
  double cold = -1;
  for (int k = 0; k < r.ncounters; k++)
    if (!strcmp(r.counters[k].name, "cold_releases")) cold = r.counters[k].value;
  printf("test_zoned: cold: %.0f idle chunks released as cold, peak reserved %llu MiB\n", cold,
         (unsigned long long)(r.peak_reserved / MiB));
  CHECK(cold >= 1);
  hbm_trace_free(t);

  /* ---- staged re-chunking: the request succeeds with no room to spare ---- */
  t = staged_trace();
  CHECK(t != NULL);
  o = (hbm_replay_options){.policy = "zoned", .device = "sim:140MiB"};
  CHECK(hbm_replay(t, &o, &r) == HBM_OK);
  double staged = -1;
  for (int k = 0; k < r.ncounters; k++)
    if (!strcmp(r.counters[k].name, "staged_rechunks")) staged = r.counters[k].value;
  printf("test_zoned: staged: oom %d, %.0f re-chunked through host memory\n", r.oom, staged);
  CHECK(r.oom == 0);
  CHECK(staged == 1);
  hbm_trace_free(t);

  return test_done("test_zoned");
}
