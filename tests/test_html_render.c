/* test_html_render.c: the report renders in a real browser. Builds a page from
 * a small workload replayed at a capacity it does not fit (so every part of
 * the page is present, the failure layout included), screenshots it with
 * headless Chromium and checks the PNG is not blank: many pixels off the
 * background, many colours, and the tag colours of the layout strip.
 * Skips (77) where no Chromium is installed; HBM_CHROMIUM names the binary. */
#include <dlfcn.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__has_feature)
#if __has_feature(memory_sanitizer)
#include <sanitizer/msan_interface.h>
#define HBM_MSAN 1
#endif
#endif

#include "report/html.h"
#include "small_workload.h"
#include "testutil.h"

static int find_in_path(const char *name, char *out, size_t len) {
  const char *path = getenv("PATH");
  if (!path) path = "/usr/bin:/bin";
  while (*path) {
    const char *colon = strchr(path, ':');
    size_t n = colon ? (size_t)(colon - path) : strlen(path);
    snprintf(out, len, "%.*s/%s", (int)n, path, name);
    if (access(out, X_OK) == 0) return 1;
    path += n + (colon ? 1 : 0);
  }
  return 0;
}

static int find_chromium(char *out, size_t len) {
  const char *env = getenv("HBM_CHROMIUM");
  if (env && *env) {
    snprintf(out, len, "%s", env);
    return access(out, X_OK) == 0;
  }
  static const char *names[] = {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (find_in_path(names[i], out, len)) return 1;
  return 0;
}

/* ---- a small PNG reader: 8-bit RGB or RGBA, inflated by the system's zlib ---- */
typedef int (*uncompress_fn)(unsigned char *dest, unsigned long *dest_len, const unsigned char *src,
                             unsigned long src_len);

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int paeth(int a, int b, int c) {
  int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/* Returns RGB pixels (3 bytes each) or NULL with a reason in *why. */
static unsigned char *read_png(const char *path, uint32_t *w, uint32_t *h, const char **why) {
  void *z = dlopen("libz.so.1", RTLD_NOW);
  if (!z) z = dlopen("libz.so", RTLD_NOW);
  uncompress_fn inflate_all = z ? (uncompress_fn)dlsym(z, "uncompress") : NULL;
  if (!inflate_all) {
    *why = "no zlib to decode the PNG";
    return NULL;
  }
  FILE *f = fopen(path, "rb");
  if (!f) {
    *why = "no screenshot was written";
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *file = malloc((size_t)size), *idat = malloc((size_t)size);
  if (!file || !idat || fread(file, 1, (size_t)size, f) != (size_t)size || size < 33 ||
      memcmp(file, "\x89PNG\r\n\x1a\n", 8) != 0) {
    fclose(f);
    free(file);
    free(idat);
    *why = "not a PNG";
    return NULL;
  }
  fclose(f);
  size_t nidat = 0;
  int ctype = -1, depth = 0;
  for (long p = 8; p + 12 <= size;) {
    uint32_t len = be32(file + p);
    const unsigned char *type = file + p + 4, *data = file + p + 8;
    if (p + 12 + (long)len > size) break;
    if (!memcmp(type, "IHDR", 4)) {
      *w = be32(data);
      *h = be32(data + 4);
      depth = data[8];
      ctype = data[9];
    } else if (!memcmp(type, "IDAT", 4)) {
      memcpy(idat + nidat, data, len);
      nidat += len;
    }
    p += 12 + (long)len;
  }
  free(file);
  int bpp = ctype == 2 ? 3 : ctype == 6 ? 4 : 0;
  if (depth != 8 || !bpp || !*w || !*h || *w > 20000 || *h > 20000) {
    free(idat);
    *why = "unexpected PNG format";
    return NULL;
  }
  size_t stride = (size_t)*w * bpp;
  unsigned long raw_len = (unsigned long)((stride + 1) * *h);
  unsigned char *raw = malloc(raw_len), *rgb = malloc((size_t)*w * *h * 3);
  if (!raw || !rgb || inflate_all(raw, &raw_len, idat, nidat) != 0 || raw_len != (stride + 1) * *h) {
    free(idat);
    free(raw);
    free(rgb);
    *why = "PNG data does not inflate";
    return NULL;
  }
  free(idat);
#ifdef HBM_MSAN
  __msan_unpoison(raw, raw_len); /* written by zlib, which is not instrumented */
#endif
  unsigned char *prev = calloc(stride, 1), *cur = malloc(stride);
  for (uint32_t y = 0; y < *h; y++) {
    const unsigned char *in = raw + y * (stride + 1);
    int filter = in[0];
    for (size_t x = 0; x < stride; x++) {
      int a = x >= (size_t)bpp ? cur[x - bpp] : 0, b = prev[x], c = x >= (size_t)bpp ? prev[x - bpp] : 0;
      int v = in[1 + x];
      switch (filter) {
        case 1: v += a; break;
        case 2: v += b; break;
        case 3: v += (a + b) / 2; break;
        case 4: v += paeth(a, b, c); break;
        default: break;
      }
      cur[x] = (unsigned char)v;
    }
    for (uint32_t x = 0; x < *w; x++) memcpy(rgb + ((size_t)y * *w + x) * 3, cur + (size_t)x * bpp, 3);
    memcpy(prev, cur, stride);
  }
  free(prev);
  free(cur);
  free(raw);
  return rgb;
}

int main(void) {
  char chromium[4096];
  if (!find_chromium(chromium, sizeof chromium)) {
    printf("SKIP: no chromium (install the Debian package 'chromium', or set HBM_CHROMIUM)\n");
    return TEST_SKIP;
  }
  hbm_trace *t = small_workload(1ull << 40, 8);
  CHECK(t != NULL);
  if (!t) return test_done("test_html_render");
  uint64_t peak = hbm_trace_peak_live(t);
  hbm_trace_free(t);
  uint64_t capacity = peak - peak / 10;
  t = small_workload(capacity, 8);
  CHECK(t != NULL);
  if (!t) return test_done("test_html_render");

  hbm_report rep;
  memset(&rep, 0, sizeof rep);
  rep.title = "render test";
  rep.workload = t->name;
  rep.capacity = capacity;
  hbm_report_trace_facts(t, &rep);
  hbm_report_run run;
  CHECK(hbm_report_run_policy(t, "bestfit", NULL, NULL, 0, NULL, NULL, &run) == HBM_OK);
  CHECK(run.result.oom && run.nlayout > 0);
  rep.runs = &run;
  rep.nruns = 1;
  char *html = NULL;
  size_t len = 0;
  CHECK(hbm_report_html(&rep, &html, &len) == HBM_OK);
  hbm_report_run_release(&run);
  hbm_report_release(&rep);
  hbm_trace_free(t);
  if (!html) return test_done("test_html_render");

  char dir[] = "/tmp/hbm-render-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char page[256], png[256], profile[256], cmd[8192];
  snprintf(page, sizeof page, "%s/report.html", dir);
  snprintf(png, sizeof png, "%s/report.png", dir);
  snprintf(profile, sizeof profile, "%s/profile", dir);
  FILE *f = fopen(page, "w");
  CHECK(f != NULL);
  if (f) {
    fwrite(html, 1, len, f);
    fclose(f);
  }
  free(html);
  snprintf(cmd, sizeof cmd,
           "timeout 180 '%s' --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run "
           "--user-data-dir='%s' --window-size=1050,1700 --screenshot='%s' 'file://%s' > '%s/chromium.log' 2>&1",
           chromium, profile, png, page, dir);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "chromium exited with %d; see %s/chromium.log\n", rc, dir);

  uint32_t w = 0, h = 0;
  const char *why = NULL;
  unsigned char *rgb = read_png(png, &w, &h, &why);
  if (!rgb) {
    fprintf(stderr, "screenshot %s: %s\n", png, why);
    CHECK(0);
    return test_done("test_html_render");
  }
  /* not blank: pixels off the page background, colours, and the strip's tag colours */
  uint64_t off = 0, n = (uint64_t)w * h, param = 0, grad = 0;
  static unsigned char seen[1 << 15];
  int colours = 0;
  for (uint64_t i = 0; i < n; i++) {
    const unsigned char *p = rgb + i * 3;
    int background = p[0] >= 0xf8 && p[1] >= 0xf8 && p[2] >= 0xf8;
    if (!background) off++;
    unsigned key = (unsigned)(p[0] >> 3) << 10 | (unsigned)(p[1] >> 3) << 5 | (p[2] >> 3);
    if (!seen[key]) {
      seen[key] = 1;
      colours++;
    }
    if (abs(p[0] - 0x4e) < 6 && abs(p[1] - 0x79) < 6 && abs(p[2] - 0xa7) < 6) param++;
    if (abs(p[0] - 0xf2) < 6 && abs(p[1] - 0x8e) < 6 && abs(p[2] - 0x2b) < 6) grad++;
  }
  printf("screenshot %ux%u: %.1f%% of pixels off the background, %d colours, %llu param-blue, "
         "%llu grad-orange pixels (%s)\n",
         w, h, 100.0 * (double)off / (double)n, colours, (unsigned long long)param, (unsigned long long)grad, png);
  CHECK(w >= 1000 && h >= 1000);
  CHECK(off * 100 >= n * 5);  /* at least 5% of the page is drawn */
  CHECK(colours >= 40);       /* charts, text, tag colours: not a flat page */
  CHECK(param >= 200);        /* the layout strip's parameter blocks */
  CHECK(grad >= 50);          /* gradient blocks, allocated-bytes line */
  free(rgb);
  const char *keep = getenv("HBM_BUILD");
  if (keep) { /* keep the screenshot next to the test logs */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/test-logs/report-render.png' 2>/dev/null", png, keep);
    if (system(cmd) != 0) fprintf(stderr, "could not keep the screenshot\n");
  }
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return test_done("test_html_render");
}
