/* testutil.h: tiny helpers shared by the test programs.
 * A test program exits 0 on success, 77 to skip (with a last line saying why),
 * anything else on failure. CHECK() prints file:line and the expression. */
#ifndef HBM_TESTUTIL_H
#define HBM_TESTUTIL_H

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TEST_SKIP 77

/* Names in dir other than . and .. (-1 if it cannot be read): a save that
 * left a temporary file beside its output shows here. */
static inline int test_dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  return n;
}

static int test_failures_;

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);       \
      test_failures_++;                                                              \
      if (test_failures_ > 20) exit(1);                                              \
    }                                                                                \
  } while (0)

#define CHECK_EQ_U64(a, b)                                                           \
  do {                                                                               \
    uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                                 \
    if (a_ != b_) {                                                                  \
      fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%" PRIu64 " vs %" PRIu64 ")\n", \
              __FILE__, __LINE__, #a, #b, a_, b_);                                   \
      test_failures_++;                                                              \
      if (test_failures_ > 20) exit(1);                                              \
    }                                                                                \
  } while (0)

/* CHECK for what the rest of a test function stands on (a trace it goes on to
 * read, a file it goes on to parse): on failure the function returns, rather
 * than read what the failed call left undefined. In functions returning void. */
#define REQUIRE(cond)                                                                \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      CHECK(cond);                                                                   \
      return;                                                                        \
    }                                                                                \
  } while (0)

/* Ends a test program: prints a summary line and returns the exit code. */
static inline int test_done(const char *name) {
  if (test_failures_) {
    fprintf(stderr, "%s: %d check(s) failed\n", name, test_failures_);
    return 1;
  }
  printf("%s: ok\n", name);
  return 0;
}

/* Seed from HBM_SEED, else from the clock; always printed so a failure
 * reproduces with HBM_SEED=<seed>. */
static inline uint64_t test_seed(const char *name) {
  const char *env = getenv("HBM_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
  printf("%s: seed %" PRIu64 " (rerun with HBM_SEED=%" PRIu64 ")\n", name, seed, seed);
  fflush(stdout);
  return seed;
}

/* Scale factor for long randomized tests: HBM_TEST_SCALE (default 1.0).
 * Sanitizer builds pass their own smaller scale through the runner. */
static inline double test_scale(void) {
  const char *env = getenv("HBM_TEST_SCALE");
  return env ? atof(env) : 1.0;
}

/* 1 in a build with AddressSanitizer, ThreadSanitizer or MemorySanitizer
 * (make check SANITIZE=1, SANITIZE=thread or SANITIZE=memory), which CI runs
 * at HBM_TEST_SCALE=0.2 after the plain build at 1. There a test may repeat
 * less of what the plain build checks in full at any scale (an invariant
 * recount, one more identical step), never less of what only a sanitizer sees
 * (the operations themselves). */
static inline int test_sanitized(void) {
#ifdef HBM_SANITIZED /* CMakeLists.txt defines it in all three sanitizer builds */
  return 1;
#else
  return 0;
#endif
}

/* splitmix64: small, seedable, good enough for tests. */
static inline uint64_t test_rand(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline uint64_t test_rand_below(uint64_t *state, uint64_t n) {
  return n ? test_rand(state) % n : 0;
}

/* Path of ../shared/data relative to the repository, or NULL (then skip). */
static inline const char *test_shared_data(void) {
  static char path[4096];
  const char *root = getenv("HBM_ROOT");
  if (!root) root = ".";
  snprintf(path, sizeof path, "%s/../shared/data", root);
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  fclose(f);
  return path;
}

/* 1 when `list` (n names) names every policy of `all`, hbm_policy_names()'s
 * comma-separated list: a test that lists its policies by hand fails when a
 * new one is left out, rather than skipping it without a word. */
static inline int test_lists_every_policy(const char *all, const char *const *list, size_t n) {
  for (const char *p = all; *p;) {
    size_t len = strcspn(p, ",");
    int found = 0;
    for (size_t i = 0; i < n && !found; i++) found = strlen(list[i]) == len && !strncmp(list[i], p, len);
    if (!found) {
      fprintf(stderr, "policy '%.*s' is missing from the test's list\n", (int)len, p);
      return 0;
    }
    p += len + (p[len] == ',');
  }
  return 1;
}

#endif
