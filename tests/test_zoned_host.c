/* test_zoned_host: nothing is lost on the host device (real memory, real
 * granule mapping). Replays fill every allocation with a pattern and verify
 * it on free, through page stitching (a block backed by chunks from anywhere
 * in physical memory), idle chunks moved under pressure, re-chunking (pages
 * copied into new chunks behind live blocks), page reuse, and blocks placed by
 * a step plan (steps that repeat, some that leave it), recordings that start
 * mid-run (the recorded blocks too); a heap run on
 * the same device fills and verifies every block itself. hbm_check() runs
 * after every replayed event and every heap operation: beside the bytes
 * filled and verified its cost does not show in the test's time. */
#include "hbm.h"
#include "trace/trace.h"
#include "seeded_trace.h"
#include "staged_trace.h"
#include "trim_trace.h"
#include "stepped_trace.h"
#include "random_trace.h"
#include "replay_counter.h"
#include "testutil.h"

#define MiB (1ull << 20)

static uint64_t word(uint64_t addr, uint64_t i) { return addr * 0x9E3779B97F4A7C15ull ^ (i + 1) * 0xD1B54A32D192ED03ull; }

int main(void) {
  uint64_t seed = test_seed("test_zoned_host"), rng = seed;
  hbm_device *probe;
  if (hbm_device_open("host:64MiB", &probe) != HBM_OK) {
    printf("test_zoned_host: skipped: this kernel has no memfd_create\n");
    return TEST_SKIP;
  }
  hbm_device_close(probe);
  double scale = test_scale();
  /* Every event moves megabytes through host memory (filled on alloc,
   * verified on free: those bytes are this test's time). A run reaches its
   * limit within some fifty events and repeats from there; at 520 events
   * (scale 0.2) every run that can moved chunks and re-chunked some through
   * host memory, at least 3 of each, in each of 30 seeds. */
  uint64_t events = (uint64_t)(600 * scale) + 400;

  /* ---- replays with --verify semantics ---- */
  struct { const char *device, *conf; uint64_t limit, big; } runs[] = {
      {"host:512MiB", NULL, 300 * MiB, 48 * MiB},          /* roomy: the cache serves, pages reused */
      {"host:192MiB", NULL, 180 * MiB, 40 * MiB},          /* tight: stitching, unmapping, re-chunking */
      {"host:192MiB", "chunk:16MiB", 180 * MiB, 40 * MiB}, /* smaller stripes */
      {"host:192MiB", "small:off,zones:off", 180 * MiB, 40 * MiB},
      {"host:512MiB", "moves:on", 300 * MiB, 48 * MiB},    /* roomy, the cache held at its bound */
      {"host:128MiB", "vmm:off", 100 * MiB, 24 * MiB},     /* the fixed-zone fallback */
  };
  double moved = 0, rechunked = 0, staged = 0;
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    hbm_trace *t = random_trace(&rng, events, runs[i].limit, runs[i].big, 997);
    CHECK(t != NULL);
    if (!t) break;
    hbm_replay_options o = {.policy = "zoned", .conf = runs[i].conf, .device = runs[i].device, .verify_data = 1, .check_every = 1};
    hbm_replay_result r;
    int rc = hbm_replay(t, &o, &r);
    CHECK(rc == HBM_OK);
    printf("test_zoned_host: %s %-20s %llu allocations, %llu verified, %llu failed, moved %.0f, re-chunked %.0f "
           "(%.0f through host memory), calls %llu\n",
           runs[i].device, runs[i].conf ? runs[i].conf : "(default)", (unsigned long long)r.alloc_events,
           (unsigned long long)r.verified_blocks, (unsigned long long)r.failures, replay_counter(&r, "chunks_moved"),
           replay_counter(&r, "rechunks"), replay_counter(&r, "staged_rechunks"), (unsigned long long)r.backend_calls);
    CHECK(r.verified_blocks + r.failures >= r.alloc_events);
    if (replay_counter(&r, "chunks_moved") > 0) moved += replay_counter(&r, "chunks_moved");
    if (replay_counter(&r, "rechunks") > 0) rechunked += replay_counter(&r, "rechunks");
    if (replay_counter(&r, "staged_rechunks") > 0) staged += replay_counter(&r, "staged_rechunks");
    hbm_trace_free(t);
  }
  /* The pressure paths really ran with data behind them (seed-dependent
   * counts, but a tight device at this load always stitches). */
  CHECK(moved > 0);
  CHECK(staged > 0); /* and partly used chunks were given back through host memory */
  printf("test_zoned_host: %.0f chunks moved and %.0f re-chunked (%.0f through host memory) with every block verified\n",
         moved, rechunked, staged);

  /* ---- staged re-chunking on real memory: S's bytes survive the trip ---- */
  {
    hbm_trace *t = staged_trace();
    CHECK(t != NULL);
    hbm_replay_options o = {.policy = "zoned", .device = "host:140MiB", .verify_data = 1, .check_every = 1};
    hbm_replay_result r;
    CHECK(hbm_replay(t, &o, &r) == HBM_OK);
    printf("test_zoned_host: staged: %llu failed, %llu verified, %.0f re-chunked through host memory\n",
           (unsigned long long)r.failures, (unsigned long long)r.verified_blocks, replay_counter(&r, "staged_rechunks"));
    CHECK(r.failures == 0);
    CHECK(r.verified_blocks == STAGED_TRACE_BLOCKS);
    CHECK(replay_counter(&r, "staged_rechunks") == 1);
    hbm_trace_free(t);
  }

  /* ---- trimming on real memory: C's bytes survive its chunk being remade,
   * in a job that marks steps and in one that marks none ---- */
  for (int marked = 1; marked >= 0; marked--) {
    hbm_trace *t = trim_trace(marked);
    CHECK(t != NULL);
    hbm_replay_options o = {.policy = "zoned", .device = "host:256MiB", .verify_data = 1, .check_every = 1};
    hbm_replay_result r;
    CHECK(t && hbm_replay(t, &o, &r) == HBM_OK);
    printf("test_zoned_host: trim%s: %llu failed, %llu verified, %.0f trims\n", marked ? ", steps marked" : "",
           (unsigned long long)r.failures, (unsigned long long)r.verified_blocks, replay_counter(&r, "trims"));
    CHECK(r.failures == 0);
    CHECK(r.verified_blocks == TRIM_TRACE_BLOCKS);
    CHECK(replay_counter(&r, "trims") == 1);
    hbm_trace_free(t);
  }

  /* ---- steps that repeat: blocks at planned addresses, and steps that leave the plan ---- */
  for (int dev_pct = 0; dev_pct <= 20; dev_pct += 20) {
    size_t n;
    int deviated;
    /* Few steps (each fills and verifies some 450 MiB); the deviating job is
     * drawn again until a step does leave the plan, at any scale. */
    stepped_op *ops = NULL;
    for (int tries = 0; tries < 100; tries++) {
      free(ops);
      ops = stepped_ops(&rng, (int)(6 * scale) + 6, dev_pct, 40, 24 * MiB, &n, &deviated);
      if (!ops || !dev_pct || deviated) break;
    }
    CHECK(ops != NULL);
    hbm_trace *t = ops ? stepped_to_trace(ops, n) : NULL;
    CHECK(t != NULL);
    if (!t) break;
    /* Room for the job: blocks never freed pile up over the steps, and a
     * deviating step grows one block by half, so some seeds need more than
     * 2 GiB (one reached 2.17 GiB live, more than any policy can place). */
    uint64_t live = hbm_trace_peak_live(t), cap = 2ull << 30;
    if (live + live / 4 > cap) cap = (live + live / 4 + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    char device[48];
    snprintf(device, sizeof device, "host:%llu", (unsigned long long)cap);
    hbm_replay_options o = {.policy = "zoned", .conf = "plan:always", .device = device, .verify_data = 1, .check_every = 1};
    hbm_replay_result r;
    CHECK(hbm_replay(t, &o, &r) == HBM_OK);
    printf("test_zoned_host: stepped (%d of the steps deviate) on %s: %llu allocations, %llu verified, %llu failed, "
           "%.0f steps on a plan, %.0f misses\n", deviated, device, (unsigned long long)r.alloc_events,
           (unsigned long long)r.verified_blocks, (unsigned long long)r.failures, replay_counter(&r, "plan_steps"),
           replay_counter(&r, "plan_misses"));
    CHECK(r.failures == 0);
    CHECK(r.verified_blocks >= r.alloc_events); /* every block, live ones at the end too */
    if (!deviated) CHECK(replay_counter(&r, "plan_steps") > 0);
    hbm_trace_free(t);
    free(ops);
  }

  /* ---- recordings that start mid-run: recorded blocks filled when seeded,
   * verified when they die, on a device with little to spare ---- */
  for (int i = 0; i < (int)(2 * scale) + 1; i++) {
    hbm_trace *t = seeded_trace(&rng, 300);
    CHECK(t != NULL);
    if (!t) break;
    char spec[64];
    snprintf(spec, sizeof spec, "host:%llu", (unsigned long long)((hbm_trace_peak_live(t) / 20 * 21 + 16 * MiB) / (2 * MiB) * (2 * MiB)));
    hbm_replay_options o = {.policy = "zoned", .device = spec, .verify_data = 1, .check_every = 1};
    hbm_replay_result r;
    CHECK(hbm_replay(t, &o, &r) == HBM_OK);
    printf("test_zoned_host: seeded on %s: %llu verified, oom %d, %.0f chunks moved, %.0f re-chunked\n", spec,
           (unsigned long long)r.verified_blocks, r.oom, replay_counter(&r, "chunks_moved"), replay_counter(&r, "rechunks"));
    CHECK(r.oom || r.verified_blocks > 0);
    hbm_trace_free(t);
  }

  /* ---- a heap that fills and verifies each block itself ---- */
  hbm_device *dev;
  CHECK(hbm_device_open("host:160MiB", &dev) == HBM_OK);
  hbm_heap *h;
  CHECK(hbm_heap_create(dev, "zoned", NULL, &h) == HBM_OK);
  enum { MAXLIVE = 256 };
  uint64_t addr[MAXLIVE], size[MAXLIVE], verified = 0, refused = 0, ops = (uint64_t)(3000 * scale) + 1000;
  int n = 0;
  for (uint64_t op = 0; op < ops; op++) {
    if (n < MAXLIVE && (n == 0 || test_rand_below(&rng, 100) < 53)) {
      uint64_t s = 8 + test_rand_below(&rng, test_rand_below(&rng, 4) ? 512 << 10 : 24 * MiB);
      if (hbm_alloc(h, s, (hbm_tag)test_rand_below(&rng, HBM_TAG_COUNT), (int)test_rand_below(&rng, 2), &addr[n]) != HBM_OK) {
        refused++; /* the device full, or its free memory in pieces */
      } else {
        size[n] = s;
        uint64_t *w = (uint64_t *)(uintptr_t)addr[n];
        for (uint64_t i = 0; i < s / 8; i++) w[i] = word(addr[n], i);
        n++;
      }
    } else {
      int k = (int)test_rand_below(&rng, (uint64_t)n);
      const uint64_t *w = (const uint64_t *)(uintptr_t)addr[k];
      for (uint64_t i = 0; i < size[k] / 8; i++)
        if (w[i] != word(addr[k], i)) {
          fprintf(stderr, "block at %#llx lost its contents at word %llu (op %llu, seed %llu)\n", (unsigned long long)addr[k],
                  (unsigned long long)i, (unsigned long long)op, (unsigned long long)seed);
          return 1;
        }
      verified++;
      CHECK(hbm_free(h, addr[k]) == HBM_OK);
      addr[k] = addr[--n];
      size[k] = size[n];
    }
    if (hbm_check(h) != HBM_OK) { /* after a refusal too: it may have run the pressure paths */
      fprintf(stderr, "check failed at op %llu (seed %llu)\n", (unsigned long long)op, (unsigned long long)seed);
      return 1;
    }
  }
  hbm_heap_destroy(h);
  hbm_device_close(dev);
  printf("test_zoned_host: heap: %llu operations, %llu blocks verified on free, %llu requests refused\n", (unsigned long long)ops,
         (unsigned long long)verified, (unsigned long long)refused);
  return test_done("test_zoned_host");
}
