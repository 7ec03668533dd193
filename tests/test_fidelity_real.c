/* test_fidelity_real.c: the caching model against every real PyTorch memory
 * snapshot in ../shared/data/snapshots (public training runs; not part of the
 * repository, so the test skips where they are absent). Fails when a
 * snapshot's address match is below 0.99, its segment allocations differ in
 * number or sizes, or peak reserved differs by more than 0.5%. Prints the
 * fidelity table (docs/caching-model.md), its address match cut, not rounded,
 * to four decimals: 1.0000 only where every allocation matched. */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>

#include "hbm.h"
#include "replay/fidelity.h"
#include "trace/snapshot.h"
#include "trace/trace.h"
#include "testutil.h"

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* matches / compared to four decimals, cut (compared > 0): 99996 of 100000
 * is 0.9999, where "%.4f" printed 1.0000, a perfect match to the reader. */
static const char *match_text(uint64_t matches, uint64_t compared, char out[32]) {
  uint64_t v = (uint64_t)((unsigned __int128)matches * 10000 / compared);
  snprintf(out, 32, "%llu.%04llu", (unsigned long long)(v / 10000), (unsigned long long)(v % 10000));
  return out;
}

int main(void) {
  char m[32];
  CHECK(!strcmp(match_text(99996, 100000, m), "0.9999"));
  CHECK(!strcmp(match_text(19999, 20000, m), "0.9999"));
  CHECK(!strcmp(match_text(7591, 7591, m), "1.0000"));
  CHECK(!strcmp(match_text(1653, 1935, m), "0.8542"));
  CHECK(!strcmp(match_text(0, 3, m), "0.0000"));
  if (test_failures_) return test_done("test_fidelity_real"); /* whether the snapshots are there or not */
  const char *shared = test_shared_data();
  if (!shared) {
    printf("skip: ../shared/data is absent (the real snapshots are not part of the repository)\n");
    return TEST_SKIP;
  }
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/snapshots", shared);
  DIR *dp = opendir(dir);
  if (!dp) {
    printf("skip: %s is absent\n", dir);
    return TEST_SKIP;
  }
  char *names[256];
  int n = 0;
  struct dirent *de;
  while ((de = readdir(dp)) && n < 256) {
    size_t len = strlen(de->d_name);
    if (len > 7 && !strcmp(de->d_name + len - 7, ".pickle")) names[n++] = strdup(de->d_name);
  }
  closedir(dp);
  if (!n) {
    printf("skip: no snapshots in %s\n", dir);
    return TEST_SKIP;
  }
  qsort(names, (size_t)n, sizeof *names, name_cmp);
  printf("| snapshot | allocations | streams | PyTorch peak reserved | model peak reserved | address match |\n");
  printf("|---|---:|---:|---:|---:|---:|\n");
  for (int i = 0; i < n; i++) {
    char path[4500];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    char *data;
    size_t len;
    hbm_diag d = {0};
    hbm_trace *t = NULL;
    int rc = hbm_read_file(path, &data, &len, &d);
    if (rc == HBM_OK) {
      rc = hbm_snapshot_import((const uint8_t *)data, len, path, NULL, &t, &d);
      free(data);
    }
    if (rc != HBM_OK) {
      fprintf(stderr, "%s: %s\n", path, d.message);
      CHECK(rc == HBM_OK);
      continue;
    }
    hbm_fidelity_result r;
    /* the other allocator over the same recording runs too (its addresses
     * need not match: a recorded segment's address may be no place for a
     * reservation); both, so whichever was recorded */
    static const char *const both[] = {"caching", "expandable"};
    for (int k = 0; k < 2; k++) {
      hbm_fidelity_options other = {.policy = both[k]};
      int orc = hbm_fidelity(t, &other, &r, &d);
      if (orc != HBM_OK) fprintf(stderr, "%s: fidelity --policy %s: %s\n", path, both[k], d.message);
      CHECK(orc == HBM_OK && r.allocs > 0 && r.check_failures == 0);
    }
    rc = hbm_fidelity(t, NULL, &r, &d);
    hbm_trace_free(t);
    if (rc != HBM_OK) {
      fprintf(stderr, "%s: fidelity: %s\n", path, d.message);
      CHECK(rc == HBM_OK);
      continue;
    }
    char a[32], b[32];
    uint64_t compared = r.allocs - r.unrecorded; /* a snapshot records every address */
    printf("| %s | %llu | %llu | %s | %s | %s |\n", names[i], (unsigned long long)r.allocs,
           (unsigned long long)r.streams, hbm_size_format(r.peak_reserved_real, a, sizeof a),
           hbm_size_format(r.peak_reserved_model, b, sizeof b),
           compared ? match_text(r.address_matches, compared, m) : "n/a");
    double peak_diff = r.peak_reserved_real
        ? fabs((double)r.peak_reserved_model - (double)r.peak_reserved_real) / (double)r.peak_reserved_real
        : 0.0;
    if (r.address_match < 0.99 || r.segment_allocs_real != r.segment_allocs_model || !r.segment_sizes_equal ||
        peak_diff > 0.005 || r.check_failures) {
      fprintf(stderr,
              "%s: address match %s (first mismatch at event %llu: PyTorch 0x%llx, model 0x%llx), "
              "segments %llu vs %llu (sizes %s), peak %+.3f%%, invariant failures %d\n",
              names[i], compared ? match_text(r.address_matches, compared, m) : "n/a",
              (unsigned long long)r.mismatch_event,
              (unsigned long long)r.mismatch_real, (unsigned long long)r.mismatch_model,
              (unsigned long long)r.segment_allocs_real, (unsigned long long)r.segment_allocs_model,
              r.segment_sizes_equal ? "equal" : "differ", 100.0 * peak_diff, r.check_failures);
      CHECK(0);
    }
  }
  for (int i = 0; i < n; i++) free(names[i]);
  return test_done("test_fidelity_real");
}
