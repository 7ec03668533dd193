/* check_says.h: a check run on a structure made to break one invariant, and
 * what it said. */
#ifndef HBM_TEST_CHECK_SAYS_H
#define HBM_TEST_CHECK_SAYS_H

#include <stdio.h>
#include <string.h>

#include "hbm.h"

/* Every message the library's error handler gets, one a line. */
static char check_said[8192];
static inline void check_keep_error(int err, const char *message, void *arg) {
  (void)arg, (void)err;
  size_t n = strlen(check_said);
  if (n + 2 < sizeof check_said) snprintf(check_said + n, sizeof check_said - n, "%s\n", message);
}

/* hbm_check(h) fails, one of its messages containing `want`. */
static inline int check_says(hbm_heap *h, const char *want) {
  check_said[0] = 0;
  hbm_set_error_handler(check_keep_error, NULL);
  int rc = hbm_check(h);
  hbm_set_error_handler(NULL, NULL);
  if (rc == HBM_ECORRUPT && strstr(check_said, want)) {
    printf("  reported: %s\n", want);
    return 1;
  }
  fprintf(stderr, "hbm_check: %d, messages:\n%sexpected one with \"%s\"\n", rc, check_said, want);
  return 0;
}

/* What a structure's own check passed its report callback: the messages,
 * one a line, and how many (test_core_check, test_host_failure). */
typedef struct check_seen {
  char all[4096];
  int n;
} check_seen;
static inline void check_collect(void *arg, const char *message) {
  check_seen *s = arg;
  s->n++;
  size_t len = strlen(s->all);
  snprintf(s->all + len, sizeof s->all - len, "%s\n", message);
}

#endif
