/* test_pickle_real.c: parses every real PyTorch snapshot in
 * ../shared/data/snapshots and reports how long each took. Skips (77) where
 * that directory is absent: the real files are not part of the repository.
 *
 * Checks the shape a snapshot reader relies on: a dict with segments and
 * device_traces; blocks tile their segment; every trace entry has an action.
 * Times are reported, never asserted (shared machines are noisy). */
#include <dirent.h>
#include <time.h>

#include "testutil.h"
#include "trace/pickle.h"
#include "trace/trace.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void check_shape(const char *name, const hbm_pk_value *root) {
  const hbm_pk_value *segs = hbm_pk_get(root, "segments");
  const hbm_pk_value *traces = hbm_pk_get(root, "device_traces");
  CHECK(root && root->type == HBM_PK_DICT);
  CHECK(segs && segs->type == HBM_PK_LIST);
  CHECK(traces && traces->type == HBM_PK_LIST);
  for (size_t i = 0; i < hbm_pk_len(segs); i++) {
    const hbm_pk_value *s = hbm_pk_item(segs, i);
    int64_t addr = 0, total = 0, sum = 0, size;
    CHECK(hbm_pk_int(hbm_pk_get(s, "address"), &addr));
    CHECK(hbm_pk_int(hbm_pk_get(s, "total_size"), &total));
    CHECK(hbm_pk_str(hbm_pk_get(s, "segment_type")) != NULL);
    const hbm_pk_value *blocks = hbm_pk_get(s, "blocks");
    CHECK(blocks && blocks->type == HBM_PK_LIST);
    for (size_t k = 0; k < hbm_pk_len(blocks); k++) {
      const hbm_pk_value *b = hbm_pk_item(blocks, k);
      CHECK(hbm_pk_int(hbm_pk_get(b, "size"), &size));
      CHECK(hbm_pk_str(hbm_pk_get(b, "state")) != NULL);
      sum += size;
    }
    if (sum != total) {
      fprintf(stderr, "%s: segment %zu: blocks sum to %" PRId64 ", total_size %" PRId64 "\n",
              name, i, sum, total);
      test_failures_++;
    }
  }
  for (size_t d = 0; d < hbm_pk_len(traces); d++) {
    const hbm_pk_value *tr = hbm_pk_item(traces, d);
    CHECK(tr && tr->type == HBM_PK_LIST);
    for (size_t i = 0; i < hbm_pk_len(tr); i++)
      CHECK(hbm_pk_str(hbm_pk_get(hbm_pk_item(tr, i), "action")) != NULL);
  }
}

static int by_name(const struct dirent **a, const struct dirent **b) {
  return strcmp((*a)->d_name, (*b)->d_name);
}

int main(void) {
  const char *data_dir = test_shared_data();
  if (!data_dir) {
    printf("skip: ../shared/data not found (real snapshots are not part of the repository)\n");
    return TEST_SKIP;
  }
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/snapshots", data_dir);
  struct dirent **names;
  int n = scandir(dir, &names, NULL, by_name);
  if (n < 0) {
    printf("skip: %s cannot be listed\n", dir);
    return TEST_SKIP;
  }
  int parsed = 0;
  double worst_ms = 0;
  size_t worst_bytes = 0;
  for (int i = 0; i < n; i++) {
    const char *fname = names[i]->d_name;
    size_t fl = strlen(fname);
    if (fl < 7 || strcmp(fname + fl - 7, ".pickle") != 0) {
      free(names[i]);
      continue;
    }
    char path[4500];
    snprintf(path, sizeof path, "%s/%s", dir, fname);
    char *data;
    size_t len;
    hbm_diag d;
    if (hbm_read_file(path, &data, &len, &d) != HBM_OK) {
      fprintf(stderr, "%s: %s\n", path, d.message);
      test_failures_++;
      free(names[i]);
      continue;
    }
    CHECK(hbm_pickle_sniff((const uint8_t *)data, len));
    /* best of three: the first run also pays for page faults */
    double best = 1e30;
    hbm_pickle *doc = NULL;
    for (int rep = 0; rep < 3; rep++) {
      hbm_pickle_free(doc);
      doc = NULL;
      double t0 = now_ms();
      int rc = hbm_pickle_parse((const uint8_t *)data, len, fname, NULL, &doc, &d);
      double ms = now_ms() - t0;
      if (rc != HBM_OK) {
        fprintf(stderr, "%s: %s\n", fname, d.message);
        test_failures_++;
        break;
      }
      if (ms < best) best = ms;
    }
    if (doc) {
      check_shape(fname, hbm_pickle_root(doc));
      printf("%-34s %8zu bytes %8" PRIu64 " values %7.2f ms (%.0f MB/s)\n", fname, len,
             hbm_pickle_node_count(doc), best, len / 1e3 / (best > 0 ? best : 1e-3));
      if (len > worst_bytes) {
        worst_bytes = len;
        worst_ms = best;
      }
      parsed++;
    }
    hbm_pickle_free(doc);
    free(data);
    free(names[i]);
  }
  free(names);
  if (parsed == 0 && test_failures_ == 0) {
    printf("skip: no .pickle files in %s\n", dir);
    return TEST_SKIP;
  }
  printf("largest snapshot (%zu bytes) parsed in %.2f ms\n", worst_bytes, worst_ms);
  return test_done("test_pickle_real");
}
