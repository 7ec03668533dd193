/* test_fidelity.c: the caching model against the project's generated
 * snapshots (tests/fixtures/snapshots, written by tools/gen_snapshot_fixtures.py
 * from its own model of PyTorch's placement: streams, record_stream frees,
 * empty_cache, OOM after release-and-retry, expandable segments). Each must
 * replay at every recorded address, with the same segment allocations and
 * peak; the same after a round trip through the text trace format. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hbm.h"
#include "replay/fidelity.h"
#include "trace/snapshot.h"
#include "trace/trace.h"
#include "testutil.h"

static hbm_trace *load_snapshot(const char *path) {
  char *data;
  size_t len;
  hbm_diag d = {0};
  if (hbm_read_file(path, &data, &len, &d) != HBM_OK) {
    fprintf(stderr, "%s: %s\n", path, d.message);
    return NULL;
  }
  hbm_trace *t = NULL;
  int rc = hbm_snapshot_import((const uint8_t *)data, len, path, NULL, &t, &d);
  free(data);
  if (rc != HBM_OK) fprintf(stderr, "%s: %s\n", path, d.message);
  return t;
}

static void expect_faithful(const char *what, const hbm_trace *t, const char *policy, hbm_fidelity_result *out) {
  hbm_fidelity_result r;
  hbm_diag d = {0};
  int rc = hbm_fidelity(t, NULL, &r, &d);
  if (rc != HBM_OK) fprintf(stderr, "%s: %s\n", what, d.message);
  CHECK(rc == HBM_OK);
  printf("%-32s %-10s allocs %4llu match %.4f segments %llu/%llu releases %llu/%llu peak %llu/%llu\n", what,
         r.policy, (unsigned long long)r.allocs, r.address_match, (unsigned long long)r.segment_allocs_real,
         (unsigned long long)r.segment_allocs_model, (unsigned long long)r.segment_frees_applied,
         (unsigned long long)r.segment_frees_real, (unsigned long long)r.peak_reserved_real,
         (unsigned long long)r.peak_reserved_model);
  CHECK(!strcmp(r.policy, policy));
  CHECK(r.allocs > 0);
  CHECK_EQ_U64(r.address_matches, r.allocs);
  CHECK(!r.has_mismatch);
  CHECK_EQ_U64(r.segment_allocs_real, r.segment_allocs_model);
  CHECK(r.segment_sizes_equal);
  CHECK_EQ_U64(r.segment_frees_applied, r.segment_frees_real);
  CHECK_EQ_U64(r.peak_reserved_real, r.peak_reserved_model);
  CHECK_EQ_U64(r.failed_allocs, 0);
  CHECK_EQ_U64(r.check_failures, 0);
  if (out) *out = r;
}

typedef struct found { uint64_t addr, size; int live; } found;
static int find_live(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  (void)tag;
  found *f = arg;
  if (live && size == f->size && !f->live) {
    f->addr = addr;
    f->live = 1;
  }
  return HBM_OK;
}

/* A replay of caching on a recording gives new segments CUDA's addresses, so
 * best fit breaks the tie between two free 12 MiB blocks as PyTorch did: z
 * lands in y's segment, the lower address, though the model made x's first.
 * expandable over the same recording places by its own addresses. (The
 * recorded addresses lie far from the sim device's own.) */
static void test_replay_takes_recorded_segment_addresses(void) {
  const char *text =
      "hbm-trace 1\n"
      "capacity 1GiB\n"
      "seg 0x5f0002000000 12MiB 0 large\n"
      "a x 12MiB other 0 @0x5f0002000000\n"
      "seg 0x5f0001000000 12MiB 0 large\n"
      "a y 12MiB other 0 @0x5f0001000000\n"
      "f x\n"
      "f y\n"
      "a z 12MiB other 0 @0x5f0001000000\n";
  hbm_trace *t = NULL;
  hbm_diag d = {0};
  CHECK(hbm_trace_parse_text(text, strlen(text), "ties.trace", &t, &d) == HBM_OK);
  if (!t) return;
  found f = {.size = 12 << 20};
  hbm_replay_options o = {.policy = "caching", .layout_event = t->nevents, .on_layout = find_live, .layout_arg = &f};
  hbm_replay_result r;
  CHECK(hbm_replay(t, &o, &r) == HBM_OK);
  CHECK(f.live && f.addr == 0x5f0001000000ull);
  o.policy = "expandable";
  f.live = 0;
  CHECK(hbm_replay(t, &o, &r) == HBM_OK && f.live);
  CHECK(f.addr >> 40 != 0x5f); /* the device's own: nowhere near the recording's */
  hbm_trace_free(t);
}

/* streams: the distinct streams requests and segments name, however many;
 * a free or a segment release names none (a text trace's `f` reads as 0). */
static void test_streams_counted(void) {
  hbm_trace *t = NULL;
  hbm_diag d = {0};
  const char *text = "hbm-trace 1\nseg 0x7f0000000000 2MiB 3 small\na x 512 other 3 @0x7f0000000000\nf x\n"
                     "seg 0x7f0000200000 2MiB 5 small\na y 512 other 5 @0x7f0000200000\nf y\n"
                     "segfree 0x7f0000000000 2MiB\n";
  REQUIRE(hbm_trace_parse_text(text, strlen(text), "two", &t, &d) == HBM_OK);
  hbm_fidelity_result r;
  CHECK(hbm_fidelity(t, NULL, &r, &d) == HBM_OK);
  CHECK_EQ_U64(r.streams, 2);
  hbm_trace_free(t);

  enum { N = 70 }; /* more streams than a fixed table would hold */
  char *big = malloc(N * 128 + 32);
  REQUIRE(big != NULL);
  size_t n = (size_t)sprintf(big, "hbm-trace 1\n");
  for (int k = 0; k < N; k++)
    n += (size_t)sprintf(big + n, "seg 0x%llx 2MiB %d small\na b%d 512 other %d @0x%llx\nf b%d\n",
                         0x7f0000000000ull + (unsigned long long)k * 2 * 1024 * 1024, k, k, k,
                         0x7f0000000000ull + (unsigned long long)k * 2 * 1024 * 1024, k);
  t = NULL;
  memset(&d, 0, sizeof d);
  REQUIRE(hbm_trace_parse_text(big, n, "many", &t, &d) == HBM_OK);
  CHECK(hbm_fidelity(t, NULL, &r, &d) == HBM_OK);
  CHECK_EQ_U64(r.streams, N);
  CHECK(r.address_match == 1.0);
  hbm_trace_free(t);
  free(big);
}

int main(void) {
  const char *root = getenv("HBM_ROOT");
  test_replay_takes_recorded_segment_addresses();
  test_streams_counted();
  if (!root) root = ".";
  static const struct { const char *file, *policy; } fixtures[] = {
      {"snapshot_basic_p2.pickle", "caching"},          {"snapshot_basic_p4.pickle", "caching"},
      {"snapshot_basic_p5.pickle", "caching"},          {"snapshot_oldformat_p4.pickle", "caching"},
      {"snapshot_oom_p4.pickle", "caching"},            {"snapshot_expandable_p2.pickle", "expandable"},
      {"snapshot_expandable_p4.pickle", "expandable"},  {"snapshot_expandable_p5.pickle", "expandable"},
  };
  char path[4096], tmp[4096];
  snprintf(tmp, sizeof tmp, "%s/test_fidelity.%d.trace", getenv("HBM_BUILD") ? getenv("HBM_BUILD") : "/tmp", (int)getpid());
  for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) {
    snprintf(path, sizeof path, "%s/tests/fixtures/snapshots/%s", root, fixtures[i].file);
    hbm_trace *t = load_snapshot(path);
    CHECK(t != NULL);
    if (!t) continue;
    hbm_diag d = {0};
    CHECK(hbm_trace_validate(t, &d) == HBM_OK);
    hbm_fidelity_result a, b;
    expect_faithful(fixtures[i].file, t, fixtures[i].policy, &a);
    CHECK_EQ_U64(a.streams, 2); /* tools/gen_snapshot_fixtures.py records on two streams */

    /* The text trace carries everything fidelity needs. */
    CHECK(hbm_trace_save(t, tmp, &d) == HBM_OK);
    hbm_trace *u = NULL;
    CHECK(hbm_trace_load(tmp, &u, &d) == HBM_OK);
    if (u) {
      CHECK_EQ_U64(u->nevents, t->nevents);
      CHECK_EQ_U64(u->ninit_segments, t->ninit_segments);
      CHECK_EQ_U64(u->ninit_blocks, t->ninit_blocks);
      CHECK(!strcmp(t->conf ? t->conf : "", u->conf ? u->conf : "")); /* an empty conf is not written */
      expect_faithful("  (as text)", u, fixtures[i].policy, &b);
      CHECK_EQ_U64(a.allocs, b.allocs);
      CHECK_EQ_U64(a.peak_reserved_model, b.peak_reserved_model);
      hbm_trace_free(u);
    }
    /* The other model places differently and says so, without failing. */
    hbm_fidelity_options o = {.policy = strcmp(fixtures[i].policy, "caching") ? "caching" : "expandable"};
    hbm_fidelity_result c;
    CHECK(hbm_fidelity(t, &o, &c, &d) == HBM_OK);
    CHECK_EQ_U64(c.check_failures, 0);
    CHECK(!strcmp(c.policy, o.policy));
    /* ... and it is the other allocator that ran, not the recorded settings'
     * under the other's name: it does not reproduce the recording. */
    CHECK(c.address_matches < c.allocs || c.segment_allocs_model != c.segment_allocs_real || !c.segment_sizes_equal);
    /* A mismatch is named by its snapshot entry, 0-based, as the importer names entries. */
    if (c.has_mismatch) {
      char want[48];
      snprintf(want, sizeof want, "device_traces[0][%u]", c.mismatch_line - 1);
      CHECK(c.mismatch_line > 0 && !strcmp(c.mismatch_where, want));
    }
    o.policy = "bestfit";
    CHECK(hbm_fidelity(t, &o, &c, &d) == HBM_EINVAL);
    CHECK(strstr(d.message, "caching or expandable") != NULL);
    hbm_trace_free(t);
  }
  unlink(tmp);

  /* A trace without recorded addresses has nothing to compare with. */
  hbm_trace *t;
  hbm_diag d = {0};
  const char *text = "hbm-trace 1\na x 4096\nf x\n";
  CHECK(hbm_trace_parse_text(text, strlen(text), "plain", &t, &d) == HBM_OK);
  CHECK(hbm_fidelity(t, NULL, &(hbm_fidelity_result){0}, &d) == HBM_EINVAL);
  CHECK(strstr(d.message, "no addresses") != NULL);
  hbm_trace_free(t);

  /* Allocations without a recorded address are placed but not compared:
   * neither a mismatch nor part of the match share. */
  text = "hbm-trace 1\nseg 0x7f0000000000 2MiB 0 small\na x 1KiB @0x7f0000000000\na w0 2KiB\nf x\n";
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_parse_text(text, strlen(text), "mixed", &t, &d) == HBM_OK);
  hbm_fidelity_result m;
  CHECK(hbm_fidelity(t, NULL, &m, &d) == HBM_OK);
  CHECK_EQ_U64(m.allocs, 2);
  CHECK_EQ_U64(m.unrecorded, 1);
  CHECK_EQ_U64(m.address_matches, 1);
  CHECK(m.address_match == 1.0);
  CHECK(!m.has_mismatch);
  CHECK_EQ_U64(m.streams, 1);
  hbm_trace_free(t);
  /* ... and the first mismatch is a recorded allocation, never the sentinel. */
  text = "hbm-trace 1\na w0 2GiB param\na x 1KiB @0x7f0000000000\nf x\n";
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_parse_text(text, strlen(text), "unmatched", &t, &d) == HBM_OK);
  CHECK(hbm_fidelity(t, NULL, &m, &d) == HBM_OK);
  CHECK_EQ_U64(m.unrecorded, 1);
  CHECK_EQ_U64(m.address_matches, 0);
  CHECK(m.has_mismatch);
  CHECK_EQ_U64(m.mismatch_event, 1);
  CHECK_EQ_U64(m.mismatch_real, 0x7f0000000000ull);
  CHECK(!strcmp(m.mismatch_where, "line 3")); /* a text trace keeps its line */
  hbm_trace_free(t);

  /* Nor does one without allocations: 0 of 0 is no match rate, and no pass. */
  text = "hbm-trace 1\nconf expandable_segments:True\n";
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_parse_text(text, strlen(text), "empty", &t, &d) == HBM_OK);
  CHECK(hbm_fidelity(t, NULL, &(hbm_fidelity_result){0}, &d) == HBM_EINVAL);
  CHECK(strstr(d.message, "no allocations with recorded addresses to compare") != NULL);
  hbm_trace_free(t);

  /* A refused request is not placed, so its address compares with nothing:
   * the one allocation placed has none, and 0 of 0 is no pass either. */
  text = "hbm-trace 1\ninit-seg 0x7f0000000000 2MiB 0 small\ninit-blk 0x7f0000000000 2MiB -\n"
         "a w 1KiB param\na r 1GiB other 0 refused @0x7f0000200000\nf r\nf w\n";
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_parse_text(text, strlen(text), "refused", &t, &d) == HBM_OK);
  CHECK(hbm_fidelity(t, NULL, &(hbm_fidelity_result){0}, &d) == HBM_EINVAL);
  CHECK(strstr(d.message, "records no addresses (@ADDR) but on requests PyTorch refused, which are not placed") != NULL);
  hbm_trace_free(t);
  text = "hbm-trace 1\na r 1GiB other 0 refused @0x7f0000200000\nf r\n";
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_parse_text(text, strlen(text), "all refused", &t, &d) == HBM_OK);
  CHECK(hbm_fidelity(t, NULL, &(hbm_fidelity_result){0}, &d) == HBM_EINVAL);
  CHECK(strstr(d.message, "no allocations with recorded addresses to compare") != NULL);
  hbm_trace_free(t);

  /* The other allocator over a recording: expandable run over cudaMalloc
   * segments. The recorded segment's address is no place for expandable's
   * reservation, which would reach over the live segment above it: the
   * device picks one (the run was refused there before). */
  text = "hbm-trace 1\n"
         "init-seg 0x5f0002000000 2MiB 0 large\ninit-blk 0x5f0002000000 2MiB w 2MiB param\n"
         "seg 0x7f0000000000 20MiB 0 large\na x 12MiB act 0 @0x7f0000000000\nf x\n";
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_parse_text(text, strlen(text), "other", &t, &d) == HBM_OK);
  hbm_fidelity_options other = {.policy = "expandable"};
  hbm_fidelity_result o;
  int orc = hbm_fidelity(t, &other, &o, &d);
  if (orc != HBM_OK) fprintf(stderr, "expandable over a cudaMalloc recording: %s\n", d.message);
  CHECK(orc == HBM_OK && o.allocs == 1 && !strcmp(o.policy, "expandable"));
  hbm_trace_free(t);
  return test_done("test_fidelity");
}
