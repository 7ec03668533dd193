/* test_locale: a program that runs in a locale whose decimal point is a comma
 * (setlocale(LC_ALL, "") under de_DE, say) still gets hbm's text with '.':
 * JSON stays JSON, sizes print as documented, and settings such as
 * garbage_collection_threshold:0.8 or headroom:1.5% are read, in a heap's
 * settings and in a trace's conf line alike.
 *
 * The comma locale is the environment's where it has one; else one is made
 * with localedef in a temporary directory (LOCPATH); where neither can be
 * had, the test skips and says so. */
#include <locale.h>
#include <stdlib.h>
#include <unistd.h>

#include "hbm.h"
#include "testutil.h"

static int comma_locale(void) {
  const char *dp = setlocale(LC_ALL, "") ? localeconv()->decimal_point : ".";
  if (!strcmp(dp, ",")) return 1;
  static char dir[] = "/tmp/hbm-test-locale-XXXXXX";
  if (!mkdtemp(dir)) return 0;
  char cmd[256];
  snprintf(cmd, sizeof cmd, "localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1", dir);
  int made = system(cmd) == 0;
  if (made) {
    setenv("LOCPATH", dir, 1);
    made = setlocale(LC_ALL, "de_DE.UTF-8") && !strcmp(localeconv()->decimal_point, ",");
  }
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "test_locale: could not remove %s\n", dir);
  return made;
}

static char last_error[512];
static void keep_error(int err, const char *message, void *arg) {
  (void)err, (void)arg;
  snprintf(last_error, sizeof last_error, "%s", message);
}

int main(void) {
  if (!comma_locale()) {
    printf("test_locale: skipped: no locale with a decimal comma (none in the environment, and localedef "
           "could not make de_DE.UTF-8)\n");
    return TEST_SKIP;
  }
  char probe[16];
  snprintf(probe, sizeof probe, "%.1f", 0.5);
  CHECK(!strcmp(probe, "0,5")); /* the program's own printf follows the locale */

  char b[32];
  CHECK(!strcmp(hbm_size_format(4509715661ull, b, sizeof b), "4.20 GiB"));

  hbm_stats st = {.version = HBM_STATS_VERSION, .fragmentation = 0.5};
  char text[4096];
  CHECK(hbm_stats_format(&st, 1, text, sizeof text) > 0);
  CHECK(strstr(text, "\"fragmentation\":0.5") != NULL);
  CHECK(hbm_stats_format(&st, 0, text, sizeof text) > 0);
  CHECK(strstr(text, "0.5000") != NULL);

  hbm_device *dev = NULL;
  hbm_heap *h = NULL;
  CHECK(hbm_device_open("sim:1GiB", &dev) == HBM_OK);
  CHECK(hbm_heap_create(dev, "caching", "garbage_collection_threshold:0.8,per_process_memory_fraction:0.5", &h) ==
        HBM_OK);
  hbm_heap_destroy(h);
  h = NULL;
  CHECK(hbm_heap_create(dev, "zoned", "headroom:1.5%", &h) == HBM_OK);
  hbm_heap_destroy(h);
  hbm_device_close(dev);

  const char *trace = "hbm-trace 1\ncapacity 1GiB\nconf garbage_collection_threshold:0.6,per_process_memory_fraction:0.9\n"
                      "a x 1.5MiB\nf x\n";
  hbm_trace *t = NULL;
  hbm_diag d = {0};
  int rc = hbm_trace_parse_text(trace, strlen(trace), "comma.trace", &t, &d);
  if (rc != HBM_OK) fprintf(stderr, "%s: %s\n", d.file, d.message);
  CHECK(rc == HBM_OK);
  hbm_trace_free(t);
  /* the library's error words are its own too: a figure in them keeps its point */
  hbm_set_error_handler(keep_error, NULL);
  hbm_adamw_options ao;
  hbm_adamw_options_init(&ao);
  ao.lr = -0.5;
  hbm_adamw_tensor none;
  memset(&none, 0, sizeof none);
  CHECK(hbm_adamw_step(&none, 1, &ao) == HBM_EINVAL);
  CHECK(!strcmp(last_error, "adamw: lr -0.5 must be finite and >= 0"));
  hbm_set_error_handler(NULL, NULL);
  char again[16];
  snprintf(again, sizeof again, "%.1f", 0.5);
  CHECK(!strcmp(again, "0,5")); /* the program's locale is back after the library's calls */
  printf("test_locale: under a decimal comma (printf gives '%s'), hbm writes 4.20 GiB and JSON with '.', and "
         "reads 0.8 and 1.5%%\n", probe);
  return test_done("test_locale");
}
