/* test_compact_replay: policy compact under replay.
 *   - The field report's step 437 (tests/fixtures/step437.trace, 96 GiB):
 *     the 4.2 GiB AllReduce buffer that fails under bestfit is placed after
 *     one partial pass that moves 4 GiB, the minimum (one 4 GiB activation
 *     must leave any 4.2 GiB window); full compaction would move 22 GiB.
 *   - The same layout in MiB on the host device with --verify: data moves.
 *   - --verify checks every byte of a block, a request under 8 bytes too.
 *   - A generated training workload (static weights and optimizer state,
 *     per-layer activations of varying sequence length, communication buffers
 *     that come and go, gradient buckets) at 2% over its peak live: on the
 *     host device with every block filled and verified through its moves, and
 *     at full length (>= 1e5 events) on the sim device. compact completes
 *     where it must, and every pass moves at least its minimum. */
#include <stdarg.h>

#include "hbm.h"
#include "replay_counter.h"
#include "testutil.h"

static hbm_trace *load_fixture(const char *name) {
  char path[4096];
  const char *root = getenv("HBM_ROOT");
  snprintf(path, sizeof path, "%s/tests/fixtures/%s", root ? root : ".", name);
  hbm_trace *t = NULL;
  hbm_diag d = {0};
  if (hbm_trace_load(path, &t, &d) != HBM_OK)
    fprintf(stderr, "%s:%llu: %s\n", d.file, (unsigned long long)d.line, d.message);
  return t;
}

static void step437(void) {
  hbm_trace *t = load_fixture("step437.trace");
  CHECK(t != NULL);
  if (!t) return;
  hbm_replay_result r;
  hbm_replay_options o = {.policy = "compact", .device = "sim:96GiB"};
  CHECK(hbm_replay(t, &o, &r) == HBM_OK);
  CHECK(r.oom == 0 && r.failures == 0);
  CHECK(replay_counter(&r, "moved_bytes") == (double)(4ull << 30));
  CHECK(replay_counter(&r, "min_moved_bytes") == (double)(4ull << 30));
  CHECK(replay_counter(&r, "compactions") == 1 && replay_counter(&r, "sync_points") == 1);
  printf("step437 under compact: moved %.0f bytes (minimum %.0f) in %.0f pass, no failure\n",
         replay_counter(&r, "moved_bytes"), replay_counter(&r, "min_moved_bytes"), replay_counter(&r, "sync_points"));
  o.conf = "on_failure:full";
  CHECK(hbm_replay(t, &o, &r) == HBM_OK);
  CHECK(r.oom == 0);
  CHECK(replay_counter(&r, "moved_bytes") == (double)(22ull << 30)); /* act1..act5 all slide */
  o.conf = "on_failure:off"; /* then it fails exactly as bestfit does */
  CHECK(hbm_replay(t, &o, &r) == HBM_OK);
  CHECK(r.oom == 1 && r.first_oom.cause == HBM_CAUSE_FRAGMENTATION && r.first_oom.step == 437);
  CHECK_EQ_U64(r.first_oom.largest_free, 3ull << 30);
  hbm_trace_free(t);

  /* The same layout at 1/1024 scale on the host device: the bytes move. */
  static const char scaled[] =
      "hbm-trace 1\ncapacity 96MiB\ns 1\na w_bf16 20MiB param\na w_fp32 20MiB optim\na adam_mv 20MiB optim\n"
      "a ar1 3MiB comm 1\na act1 4MiB act\na ar2 3MiB comm 1\na act2 4MiB act\na ar3 3MiB comm 1\n"
      "a act3 4MiB act\na ar4 3MiB comm 1\na act4 5MiB act\na ar5 2MiB comm 1\na act5 5MiB act\n"
      "f ar1\nf ar2\nf ar3\nf ar4\nf ar5\ns 437\na allreduce 4.2MiB comm 1\n";
  hbm_diag d = {0};
  CHECK(hbm_trace_parse_text(scaled, sizeof scaled - 1, "step437-MiB", &t, &d) == HBM_OK);
  hbm_replay_options h = {.policy = "compact", .device = "host:96MiB", .verify_data = 1};
  int rc = hbm_replay(t, &h, &r);
  if (rc == HBM_EUNSUPPORTED) {
    printf("step437 on the host device: skipped (no memfd)\n");
  } else {
    CHECK(rc == HBM_OK && r.oom == 0);
    CHECK_EQ_U64(r.verified_blocks, 14); /* 5 on free, 9 live at the end */
    CHECK(replay_counter(&r, "moved_bytes") == (double)(4ull << 20));
  }
  hbm_trace_free(t);
}

/* ---- --verify checks every byte ------------------------------------------------------ */
/* A 5-byte block slides down in a partial pass; at the first failed request
 * (8 MiB on a 4 MiB device: on_oom_layout) one of its bytes is changed. Its
 * free must find that: a request shorter than a word was once filled and
 * checked by whole words only, none at all for it, and counted verified. */
static int change_small(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  (void)tag;
  int *changed = arg;
  if (live && size == 512 && *changed >= 0) { /* the 5-byte block: the one 512-byte block */
    ((volatile unsigned char *)(uintptr_t)addr)[2] ^= 0x5a;
    ++*changed;
  }
  return 0;
}
static char last_error[256];
static void keep_error(int err, const char *message, void *arg) {
  (void)err, (void)arg;
  snprintf(last_error, sizeof last_error, "%s", message);
}
static void verify_every_byte(void) {
  static const char text[] = "hbm-trace 1\ncapacity 4MiB\na pad 1MiB act\na small 5 act\na rest 2MiB act\nf pad\n"
                             "a big 1.5MiB act\na huge 8MiB act\nf small\n";
  hbm_trace *t = NULL;
  hbm_diag d = {0};
  CHECK(hbm_trace_parse_text(text, sizeof text - 1, "small", &t, &d) == HBM_OK);
  if (!t) return;
  for (int change = 0; change <= 1; change++) {
    int changed = change ? 0 : -1;
    hbm_replay_result r;
    hbm_replay_options o = {.policy = "compact", .device = "host:4MiB", .verify_data = 1,
                            .on_oom_layout = change_small, .oom_layout_arg = &changed};
    last_error[0] = 0;
    hbm_set_error_handler(keep_error, NULL);
    int rc = hbm_replay(t, &o, &r);
    hbm_set_error_handler(NULL, NULL);
    if (rc == HBM_EUNSUPPORTED) break; /* no host device here */
    if (!change) {
      CHECK(rc == HBM_OK && r.failures == 1);
      CHECK(replay_counter(&r, "moved_blocks") == 2); /* small and rest slid down */
      CHECK_EQ_U64(r.verified_blocks, 4);
    } else {
      CHECK(changed == 1);
      CHECK(rc == HBM_ECORRUPT && strstr(last_error, "lost its contents"));
    }
  }
  hbm_trace_free(t);
}

/* ---- a generated training workload ------------------------------------------------- */
typedef struct text { char *buf; size_t len, cap; } text;
static void emit(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(text *t, const char *fmt, ...) {
  if (t->cap - t->len < 256) {
    t->cap = t->cap ? t->cap * 2 : 1 << 16;
    t->buf = realloc(t->buf, t->cap);
  }
  va_list ap;
  va_start(ap, fmt);
  t->len += (size_t)vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
  va_end(ap);
}

/* unit: bytes of one size unit (the workload's shape is fixed; unit scales it).
 * As in PyTorch, Adam's state is created at the first optimizer step, amid
 * whatever is live then; gradients accumulate across micro-batches; buffers of
 * the collectives live for a random number of layers. */
static hbm_trace *generate(uint64_t *rng, int steps, uint64_t unit) {
  text t = {0};
  enum { LAYERS = 8, MICRO = 3 };
  emit(&t, "hbm-trace 1\n");
  uint64_t gsize[LAYERS];
  for (int l = 0; l < LAYERS; l++) {
    gsize[l] = unit + test_rand_below(rng, unit);
    emit(&t, "a w%d %llu param\n", l, (unsigned long long)gsize[l]);
  }
  uint64_t comm = 0, open_ids[64], open_left[64];
  int nopen = 0;
  for (int s = 1; s <= steps; s++) {
    emit(&t, "s %d\n", s);
    for (int mb = 0; mb < MICRO; mb++) {
      uint64_t seq = 2 + test_rand_below(rng, 7); /* sequence length in eighths */
      for (int pass = 0; pass < 2; pass++) /* forward, then backward */
        for (int k = 0; k < LAYERS; k++) {
          int l = pass ? LAYERS - 1 - k : k;
          if (!pass) {
            emit(&t, "a x%d %llu act\n", l, (unsigned long long)(seq * unit / 3 + test_rand_below(rng, unit / 8)));
          } else {
            if (mb == 0) emit(&t, "a g%d %llu grad\n", l, (unsigned long long)gsize[l]);
            emit(&t, "a dx %llu temp\n", (unsigned long long)(seq * unit / 4));
            emit(&t, "f x%d\nf dx\n", l);
          }
          emit(&t, "a tmp %llu temp\nf tmp\n", (unsigned long long)(seq * unit / 5));
          for (int i = 0; i < nopen;) { /* collectives that finished */
            if (--open_left[i] == 0) {
              emit(&t, "f c%llu\n", (unsigned long long)open_ids[i]);
              open_ids[i] = open_ids[--nopen];
              open_left[i] = open_left[nopen];
            } else {
              i++;
            }
          }
          if (test_rand_below(rng, 3) == 0 && nopen < 64) {
            uint64_t size = (pass && mb == MICRO - 1) ? 2 * unit : unit / 2 + test_rand_below(rng, unit);
            emit(&t, "a c%llu %llu comm 1\n", (unsigned long long)comm, (unsigned long long)size);
            open_ids[nopen] = comm++;
            open_left[nopen++] = 1 + test_rand_below(rng, 4);
          }
        }
    }
    if (s == 1) /* Adam's m and v and the FP32 master weights, created lazily */
      for (int l = 0; l < LAYERS; l++) emit(&t, "a o%d %llu optim\n", l, (unsigned long long)(3 * gsize[l]));
    emit(&t, "a opt_tmp %llu temp\nf opt_tmp\n", (unsigned long long)(2 * unit));
    for (int l = 0; l < LAYERS; l++) emit(&t, "f g%d\n", l);
  }
  hbm_trace *tr = NULL;
  hbm_diag d = {0};
  if (hbm_trace_parse_text(t.buf, t.len, "generated", &tr, &d) != HBM_OK)
    fprintf(stderr, "generated:%llu: %s\n", (unsigned long long)d.line, d.message);
  free(t.buf);
  return tr;
}

static void workload(uint64_t *rng, const char *kind, int steps, uint64_t unit, int verify) {
  hbm_trace *t = generate(rng, steps, unit);
  CHECK(t != NULL);
  if (!t) return;
  uint64_t peak = hbm_trace_peak_live(t), g = 64 << 10;
  uint64_t cap = (peak + peak / 50 + g - 1) / g * g; /* 2% over peak live, whole granules */
  char dev[64];
  snprintf(dev, sizeof dev, "%s:%llu,granule=64KiB", kind, (unsigned long long)cap);
  hbm_replay_result rb, rc;
  hbm_replay_options ob = {.policy = "bestfit", .device = dev};
  hbm_replay_options oc = {.policy = "compact", .device = dev, .verify_data = verify};
  CHECK(hbm_replay(t, &ob, &rb) == HBM_OK);
  int err = hbm_replay(t, &oc, &rc);
  if (err == HBM_EUNSUPPORTED) { hbm_trace_free(t); return; }
  CHECK(err == HBM_OK);
  printf("%s workload: %llu events, %d steps, capacity %llu (peak live %llu): bestfit %llu failures (%s), "
         "compact %llu failures, %.0f passes moved %.0f bytes (minimum %.0f)%s\n",
         kind, (unsigned long long)hbm_trace_event_count(t), steps, (unsigned long long)cap,
         (unsigned long long)peak, (unsigned long long)rb.failures,
         rb.oom ? hbm_oom_cause_name(rb.first_oom.cause) : "none", (unsigned long long)rc.failures,
         replay_counter(&rc, "sync_points"), replay_counter(&rc, "moved_bytes"), replay_counter(&rc, "min_moved_bytes"),
         verify ? ", every block verified" : "");
  CHECK(rc.oom == 0);
  CHECK(replay_counter(&rc, "moved_bytes") >= replay_counter(&rc, "min_moved_bytes"));
  if (verify) CHECK(rc.verified_blocks > 1000);
  /* The field report's periodic mode as well. */
  oc.conf = "every_steps:50";
  CHECK(hbm_replay(t, &oc, &rc) == HBM_OK);
  CHECK(rc.oom == 0);
  CHECK(replay_counter(&rc, "full_compactions") >= steps / 50);
  hbm_trace_free(t);
}

int main(void) {
  uint64_t seed = test_seed("test_compact_replay"), rng = seed;
  double scale = test_scale();
  step437();
  verify_every_byte();
  workload(&rng, "host", (int)(100 * scale) + 10, 128 << 10, 1);
  workload(&rng, "sim", (int)(800 * scale) + 50, 256ull << 20, 0);
  return test_done("test_compact_replay");
}
