/* replay_driver.c: runs a libFuzzer target without libFuzzer.
 *
 *   fuzz_pickle FILE|DIR...
 *
 * Calls LLVMFuzzerTestOneInput once for every file named, and for every file
 * in each directory named (recursively, in name order), so `make check`
 * replays each regression corpus under the plain and sanitizer builds. Each
 * input gets a buffer of exactly its size, as libFuzzer gives, so a read past
 * the end is caught by AddressSanitizer. Exits 0 after all inputs ran; 2 if a
 * path cannot be read. A crash, of course, ends the run with the input's
 * name already printed on stderr (set HBM_FUZZ_VERBOSE=1 to name every input). */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

static unsigned long inputs;
static int verbose;

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "%s: %s\n", path, strerror(errno));
    return 2;
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  for (;;) {
    if (!buf) break;
    if (n == cap) {
      uint8_t *b = realloc(buf, cap * 2);
      if (!b) { free(buf); buf = NULL; break; }
      buf = b;
      cap *= 2;
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (r == 0) break;
  }
  int err = ferror(f);
  fclose(f);
  if (!buf || err) {
    fprintf(stderr, "%s: cannot read\n", path);
    free(buf);
    return 2;
  }
  /* an exact-size copy, so reading one byte past the input is an ASan error */
  uint8_t *exact = malloc(n ? n : 1);
  if (!exact) { free(buf); return 2; }
  memcpy(exact, buf, n);
  free(buf);
  if (verbose) fprintf(stderr, "input %s (%zu bytes)\n", path, n);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  inputs++;
  return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
  return strcmp((*a)->d_name, (*b)->d_name);
}

static int run_path(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "%s: %s\n", path, strerror(errno));
    return 2;
  }
  if (!S_ISDIR(st.st_mode)) return run_file(path);
  struct dirent **names;
  int n = scandir(path, &names, NULL, by_name);
  if (n < 0) {
    fprintf(stderr, "%s: %s\n", path, strerror(errno));
    return 2;
  }
  int rc = 0;
  for (int i = 0; i < n; i++) {
    if (names[i]->d_name[0] != '.') {
      size_t len = strlen(path) + strlen(names[i]->d_name) + 2;
      char *child = malloc(len);
      if (child) {
        snprintf(child, len, "%s/%s", path, names[i]->d_name);
        if (run_path(child)) rc = 2;
        free(child);
      } else {
        rc = 2;
      }
    }
    free(names[i]);
  }
  free(names);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE|DIR... (runs the fuzz target over each input)\n", argv[0]);
    return 2;
  }
  verbose = getenv("HBM_FUZZ_VERBOSE") != NULL;
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  int rc = 0;
  for (int i = 1; i < argc; i++)
    if (run_path(argv[i])) rc = 2;
  printf("%s: %lu input(s) ran without a crash\n", argv[0], inputs);
  return rc;
}
