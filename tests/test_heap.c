/* test_heap: the public API's edges (sizes, double and unknown frees, tags,
 * devices, stats equations, scan, check) and a seeded randomized run with
 * hbm_check() after every operation. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hbm.h"
#include "core/util.h"
#include "testutil.h"

static int errors_seen;
static void count_error(int err, const char *message, void *arg) { errors_seen++; }

typedef struct scan_tally { uint64_t live, holes, live_blocks, prev_end; int ordered; hbm_tag last_tag; } scan_tally;
static int tally(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  scan_tally *t = arg;
  if (t->prev_end && addr < t->prev_end) t->ordered = 0;
  t->prev_end = addr + size;
  if (live) { t->live += size; t->live_blocks++; t->last_tag = tag; }
  else t->holes += size;
  return 0;
}

/* The lowest address a scan visits, and the end of its highest live block. */
typedef struct extent { uint64_t base, live_end; int seen; } extent;
static int extent_visit(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  (void)tag;
  extent *e = arg;
  if (!e->seen || addr < e->base) e->base = addr;
  e->seen = 1;
  if (live && addr + size > e->live_end) e->live_end = addr + size;
  return 0;
}
/* bestfit's reserved, its footprint: the end of its highest live block. */
static void bestfit_footprint(hbm_heap *h, uint64_t want) {
  extent e = {0, 0, 0};
  hbm_stats st;
  CHECK(hbm_heap_scan(h, extent_visit, &e) == HBM_OK && hbm_heap_stats(h, &st) == HBM_OK);
  CHECK_EQ_U64(st.reserved, e.live_end ? e.live_end - e.base : 0);
  CHECK_EQ_U64(st.reserved, want);
}

typedef struct stop_after_one {
  int answer, visits;
} stop_after_one;
static int stop_visit(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  (void)addr, (void)size, (void)live, (void)tag;
  stop_after_one *s = arg;
  s->visits++;
  return s->answer;
}

typedef struct check_words {
  int n;
  char last[128];
} check_words;
static void keep_check(void *arg, const char *message) {
  check_words *w = arg;
  w->n++;
  snprintf(w->last, sizeof w->last, "%s", message);
}

/* The shared helpers at their edges: every error's words, an array grown past
 * the index it must hold, sizes at the top of the last unit, the ratio's two
 * ends, and the stats printer's every field. */
static void check_util_edges(void) {
  static const struct { int err; const char *words; } errors[] = {
      {HBM_OK, "success"},
      {HBM_ENOMEM, "out of device memory"},
      {HBM_EINVAL, "invalid argument"},
      {HBM_EPARSE, "malformed input"},
      {HBM_EIO, "input/output error"},
      {HBM_EUNSUPPORTED, "not supported (by the device, policy, CPU or runtime)"}, /* not only a device's */
      {HBM_ECORRUPT, "invariant check failed"},
      {HBM_EHOSTMEM, "out of host memory"},
      {HBM_EBUSY, "busy (a pinned block, or a compaction pass the before_move hook refused)"},
      {-1000, "unknown error"},
  };
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (strcmp(hbm_strerror(errors[i].err), errors[i].words) != 0) {
      fprintf(stderr, "hbm_strerror(%d): '%s', expected '%s'\n", errors[i].err, hbm_strerror(errors[i].err),
              errors[i].words);
      CHECK(!"an error's words");
    }
  /* index n must lie inside the array after hbm_grow_array(n): at 0, at the
   * capacity exactly, at twice it, far past it */
  {
    char *p = NULL;
    size_t cap = 0;
    static const size_t at[] = {0, 63, 64, 128, 129, 1000, 4096};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
      CHECK(hbm_grow_array((void **)&p, &cap, at[i], 1) == HBM_OK);
      CHECK(at[i] < cap);
      if (p && at[i] < cap) p[at[i]] = 1;
    }
    size_t before = cap;
    CHECK(hbm_grow_array((void **)&p, &cap, 10, 1) == HBM_OK && cap == before); /* room enough: unchanged */
    free(p);
  }
  /* a checker's reports: its prefix on each, none past its limit, every failure counted */
  {
    check_words w = {0};
    hbm_checker k = {.report = keep_check, .arg = &w, .prefix = "p: ", .limit = 2};
    for (int i = 1; i <= 3; i++) hbm_check_fail(&k, "x %d", i);
    CHECK(k.failures == 3 && w.n == 2 && !strcmp(w.last, "p: x 2"));
    hbm_check_forward(&k, hbm_check_no_memory_message); /* not a failure, and not held back by the limit */
    CHECK(k.failures == 3 && w.n == 3 && !strcmp(w.last, hbm_check_no_memory_message));
  }
  /* the largest sizes stay in PiB, rounded as the others are */
  char sz[32];
  CHECK(!strcmp(hbm_size_format(UINT64_MAX, sz, sizeof sz), "16384.00 PiB"));
  CHECK(!strcmp(hbm_size_format((1ull << 60) - 1, sz, sizeof sz), "1024.00 PiB"));
  CHECK(!strcmp(hbm_size_format(1ull << 50, sz, sizeof sz), "1.00 PiB"));
  CHECK(!strcmp(hbm_size_format((1ull << 50) - 1, sz, sizeof sz), "1.00 PiB")); /* not "1024.00 TiB" */
  CHECK(!strcmp(hbm_size_format(1073699225ull, sz, sizeof sz), "1023.96 MiB")); /* below 1023.995: kept */
  CHECK(!strcmp(hbm_size_format(1024, sz, sizeof sz), "1.00 KiB"));
  CHECK(!strcmp(hbm_size_format(1536ull << 40, sz, sizeof sz), "1.50 PiB"));
  /* the ratio: infinite with nothing usable, never below 0 */
  CHECK(hbm_fragmentation_ratio(5, 0) == 1e9);
  CHECK(hbm_fragmentation_ratio(1, 2) == 0.0);
  CHECK(hbm_fragmentation_ratio(3, 2) == 0.5);
  /* every field of the stats, in text and JSON */
  hbm_stats st;
  memset(&st, 0, sizeof st);
  st.version = HBM_STATS_VERSION;
  st.capacity = 1ull << 30;
  st.allocs = 3001;
  st.frees = 3002;
  st.failures = 3003;
  st.live_blocks = 3004;
  st.backend_calls = 3005;
  st.fragmentation = 0.123456789;
  st.live_by_tag[HBM_TAG_GRAD] = 11;
  st.peak_live_by_tag[HBM_TAG_GRAD] = 22;
  st.peak_live_by_tag[HBM_TAG_TEMP] = 1ull << 20;
  char text[4096];
  int n = hbm_stats_format(&st, 0, text, sizeof text);
  CHECK(n == (int)strlen(text));
  static const char *const lines[] = {
      "capacity        1.00 GiB (1073741824)\n", "\nallocs          3001\n", "\nfrees           3002\n",
      "\nfailures        3003\n", "\nlive_blocks     3004\n", "\nbackend_calls   3005\n",
      "\nfragmentation   0.1235\n", "\nlive[grad]      11 B\n", "\npeak_live[grad] 22 B\n",
      "\npeak_live[temp] 1.00 MiB\n", "\nlive_blocks     3004\nbackend_calls   3005\nlive[other]     0 B\n"};
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
    if (!strstr(text, lines[i])) {
      fprintf(stderr, "stats text lacks '%s':\n%s", lines[i], text);
      CHECK(!"a stats line");
    }
  n = hbm_stats_format(&st, 1, text, sizeof text);
  CHECK(n == (int)strlen(text));
  const char *head = "{\"version\":1,\"capacity\":1073741824,\"live\":0,";
  CHECK(!strncmp(text, head, strlen(head)));
  CHECK(strstr(text, ",\"fragmentation\":0.123457,\"allocs\":3001,\"frees\":3002,\"failures\":3003,"
                     "\"live_blocks\":3004,\"backend_calls\":3005,\"live_by_tag\":{\"other\":0,\"param\":0,"
                     "\"grad\":11,\"optim\":0,\"act\":0,\"comm\":0,\"temp\":0},\"peak_live_by_tag\":{\"other\":0,"
                     "\"param\":0,\"grad\":22,\"optim\":0,\"act\":0,\"comm\":0,\"temp\":1048576}}") != NULL);
  /* too small a buffer: the length it needs, as snprintf */
  CHECK(hbm_stats_format(&st, 1, text, 8) == n && strlen(text) == 7);
  /* no buffer: the length it needs, whatever the length given */
  CHECK(hbm_stats_format(&st, 1, NULL, 0) == n);
  CHECK(hbm_stats_format(&st, 1, NULL, 100) == n);
  CHECK(hbm_stats_format(&st, 0, NULL, 100) > 0);
}

/* per_process_memory_fraction:0 is a limit of nothing: every request fails,
 * and nothing is free for the heap (not the whole device, "infinitely"
 * fragmented). */
static void fraction_zero(void) {
  static const char *const policies[] = {"caching", "expandable"};
  for (int i = 0; i < 2; i++) {
    hbm_device *dev;
    hbm_heap *h;
    uint64_t addr;
    hbm_stats st;
    CHECK(hbm_device_open("sim:1GiB", &dev) == HBM_OK);
    CHECK(hbm_heap_create(dev, policies[i], "per_process_memory_fraction:0", &h) == HBM_OK);
    CHECK(hbm_alloc(h, 1 << 20, HBM_TAG_TEMP, 0, &addr) == HBM_ENOMEM);
    CHECK(hbm_heap_stats(h, &st) == HBM_OK);
    CHECK_EQ_U64(st.free_total, 0);
    CHECK_EQ_U64(st.largest_free, 0);
    CHECK(st.fragmentation == 0);
    hbm_heap_destroy(h);
    hbm_device_close(dev);
  }
}

/* largest_free at two edges of PyTorch's rules, asked and then requested:
 * expandable under a memory fraction, where the check weighs the request's
 * size (10 MiB of room after a 20 MiB page: a 10 MiB request, its own
 * allocation size, passes); and caching with exactly one small segment's
 * 2 MiB left on the device (a 1 MiB request). */
static void largest_free_edges(void) {
  static const struct { const char *policy, *conf, *device; uint64_t first, want; } edges[] = {
      {"expandable", "per_process_memory_fraction:0.3", "sim:100MiB", 20ull << 20, 10ull << 20},
      {"caching", NULL, "sim:12MiB", 10ull << 20, 1ull << 20},
  };
  for (int i = 0; i < 2; i++) {
    hbm_device *dev;
    hbm_heap *h;
    uint64_t a, b;
    hbm_stats st;
    CHECK(hbm_device_open(edges[i].device, &dev) == HBM_OK);
    CHECK(hbm_heap_create(dev, edges[i].policy, edges[i].conf, &h) == HBM_OK);
    CHECK(hbm_alloc(h, edges[i].first, HBM_TAG_TEMP, 0, &a) == HBM_OK);
    CHECK(hbm_heap_stats(h, &st) == HBM_OK);
    CHECK_EQ_U64(st.largest_free, edges[i].want);
    CHECK(hbm_alloc(h, edges[i].want, HBM_TAG_TEMP, 0, &b) == HBM_OK);
    hbm_heap_destroy(h);
    hbm_device_close(dev);
  }
}

int main(void) {
  uint64_t seed = test_seed("test_heap"), rng = seed;
  hbm_set_error_handler(count_error, NULL);
  check_util_edges();
  fraction_zero();
  largest_free_edges();

  /* sizes */
  uint64_t v;
  CHECK(hbm_size_parse("96GiB", &v) == HBM_OK && v == 96ull << 30);
  CHECK(hbm_size_parse("4.2GB", &v) == HBM_OK && v == 4200000000ull);
  CHECK(hbm_size_parse("1.5KiB", &v) == HBM_OK && v == 1536);
  CHECK(hbm_size_parse("1024", &v) == HBM_OK && v == 1024);
  /* 1 PiB, the largest size any reader takes, can be written as one */
  CHECK(hbm_size_parse("1PiB", &v) == HBM_OK && v == 1ull << 50);
  CHECK(hbm_size_parse("2PB", &v) == HBM_OK && v == 2000000000000000ull);
  CHECK(hbm_size_parse("12QB", &v) == HBM_EINVAL);
  CHECK(hbm_size_parse("", &v) == HBM_EINVAL);
  CHECK(hbm_size_parse("-5MiB", &v) == HBM_EINVAL);
  CHECK(hbm_size_parse("1.5", &v) == HBM_EINVAL);
  CHECK(hbm_size_parse("99999999999999999999GiB", &v) == HBM_EINVAL);
  /* fractions are exact to the byte, however many digits (a double is not) */
  CHECK(hbm_size_parse("0.529157375460210501PB", &v) == HBM_OK && v == 529157375460211ull);
  CHECK(hbm_size_parse("0.0005KB", &v) == HBM_OK && v == 1);   /* half a byte rounds up */
  CHECK(hbm_size_parse("0.00049999999999999999999999KB", &v) == HBM_OK && v == 0);
  CHECK(hbm_size_parse("16383.9999999999999999999PiB", &v) == HBM_EINVAL); /* 2^64 once rounded */
  {
    /* against a reference in 128-bit integers: up to 19 digits after the point */
    static const uint64_t mults[] = {1ull << 10, 1ull << 20, 1ull << 30, 1ull << 40, 1ull << 50,
                                     1000ull, 1000000ull, 1000000000ull, 1000000000000ull, 1000000000000000ull};
    static const char *const names[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "KB", "MB", "GB", "TB", "PB"};
    for (int n = 0; n < 20000; n++) {
      int u = (int)test_rand_below(&rng, 10), k = 1 + (int)test_rand_below(&rng, 19);
      uint64_t whole = test_rand_below(&rng, 1000), ten_k = 1;
      for (int i = 0; i < k; i++) ten_k *= 10;
      uint64_t frac = test_rand_below(&rng, ten_k);
      if (n % 4 == 0) frac = ten_k / 2 - test_rand_below(&rng, 2); /* at and just below a half */
      char text[64];
      snprintf(text, sizeof text, "%llu.%0*llu%s", (unsigned long long)whole, k, (unsigned long long)frac, names[u]);
      unsigned __int128 num = (unsigned __int128)frac * mults[u] * 2 + ten_k;
      uint64_t want = whole * mults[u] + (uint64_t)(num / ((unsigned __int128)ten_k * 2));
      if (hbm_size_parse(text, &v) != HBM_OK || v != want) {
        fprintf(stderr, "hbm_size_parse(\"%s\"): %llu, expected %llu\n", text, (unsigned long long)v,
                (unsigned long long)want);
        CHECK(0);
        break;
      }
    }
  }
  /* counts */
  CHECK(hbm_count_parse("1024", &v) == HBM_OK && v == 1024);
  CHECK(hbm_count_parse("18446744073709551615", &v) == HBM_OK && v == UINT64_MAX);
  CHECK(hbm_count_parse("18446744073709551616", &v) == HBM_EINVAL);
  CHECK(hbm_count_parse("1.3B", &v) == HBM_OK && v == 1300000000ull);
  CHECK(hbm_count_parse("70e9", &v) == HBM_OK && v == 70000000000ull);
  CHECK(hbm_count_parse("16Mi", &v) == HBM_OK && v == 16ull << 20);
  CHECK(hbm_count_parse("0.5Ki", &v) == HBM_OK && v == 512);
  CHECK(hbm_count_parse("0.3Ki", &v) == HBM_EINVAL); /* 307.2 */
  /* exact where the digits times the unit pass 2^64 on the way */
  CHECK(hbm_count_parse("0.0000152587890625Gi", &v) == HBM_OK && v == 1ull << 14);
  CHECK(hbm_count_parse("0.00006103515625Ti", &v) == HBM_OK && v == 1ull << 26);
  CHECK(hbm_count_parse("16777215.9999999999990905052982270717620849609375Ti", &v) == HBM_OK && v == UINT64_MAX);
  CHECK(hbm_count_parse("16777215.99999904632568359375Ti", &v) == HBM_OK && v == UINT64_MAX - ((1ull << 20) - 1));
  CHECK(hbm_count_parse("16777215.999999999999090505298227071762084960937Ti", &v) == HBM_EINVAL); /* not whole */
  CHECK(hbm_count_parse("16777216Ti", &v) == HBM_EINVAL); /* 2^64 */
  CHECK(hbm_count_parse("1k", &v) == HBM_OK && v == 1000);
  CHECK(hbm_count_parse("1.50", &v) == HBM_EINVAL); /* not whole */
  CHECK(hbm_count_parse("2.50", &v) == HBM_EINVAL);
  CHECK(hbm_count_parse("2.000", &v) == HBM_OK && v == 2);
  CHECK(hbm_count_parse("0e99", &v) == HBM_OK && v == 0);
  CHECK(hbm_count_parse("1e20", &v) == HBM_EINVAL); /* past 2^64 */
  CHECK(hbm_count_parse("1e999", &v) == HBM_EINVAL);
  /* however long the exponent: zero is whole, anything else past 2^64 */
  CHECK(hbm_count_parse("0e1000", &v) == HBM_OK && v == 0);
  CHECK(hbm_count_parse("0e99999999999999999999", &v) == HBM_OK && v == 0);
  CHECK(hbm_count_parse("1e1000", &v) == HBM_EINVAL);
  CHECK(hbm_count_parse("1.5e100", &v) == HBM_EINVAL);
  CHECK(hbm_count_parse("1e0000000000000000000019", &v) == HBM_OK && v == 10000000000000000000ull);
  CHECK(hbm_count_parse("1.00000000000000000000000000000000000000000000000000000000000000", &v) == HBM_OK && v == 1);
  CHECK(hbm_count_parse("1.000000000000000000000000000000000000000000000000000000000000000", &v) == HBM_EINVAL);
  /* A NULL argument is HBM_EINVAL, never a crash (hbm.h's conventions). */
  hbm_tag tg;
  CHECK(hbm_size_parse("1GiB", NULL) == HBM_EINVAL);
  CHECK(hbm_count_parse("1", NULL) == HBM_EINVAL);
  CHECK(hbm_tag_parse(NULL, &tg) == HBM_EINVAL);
  CHECK(hbm_tag_parse("act", NULL) == HBM_EINVAL);
  /* every tag's name reads back as the tag; a prefix, a longer word or
   * another case is none */
  for (int i = 0; i < HBM_TAG_COUNT; i++)
    CHECK(hbm_tag_parse(hbm_tag_name((hbm_tag)i), &tg) == HBM_OK && tg == (hbm_tag)i);
  /* a value that is no tag is named as none, not as HBM_TAG_OTHER, and its
   * name reads back as no tag */
  static const int not_tag_values[] = {HBM_TAG_COUNT, HBM_TAG_COUNT + 1, -1, 1000};
  for (size_t i = 0; i < sizeof not_tag_values / sizeof not_tag_values[0]; i++) {
    const char *name = hbm_tag_name((hbm_tag)not_tag_values[i]);
    CHECK(name && !strcmp(name, "invalid") && hbm_tag_parse(name, &tg) == HBM_EINVAL);
  }
  /* so is a value that is no failure cause: "none" would say nothing failed */
  CHECK(!strcmp(hbm_oom_cause_name(HBM_CAUSE_NONE), "none"));
  CHECK(!strcmp(hbm_oom_cause_name(HBM_CAUSE_OVERHEAD), "overhead"));
  CHECK(!strcmp(hbm_oom_cause_name((hbm_oom_cause)(HBM_CAUSE_OVERHEAD + 1)), "invalid"));
  CHECK(!strcmp(hbm_oom_cause_name((hbm_oom_cause)-1), "invalid"));
  const char *not_tags[] = {"", "ac", "acts", "Act", "tem", "optimx", "othe", "paramparam", "act "};
  for (size_t i = 0; i < sizeof not_tags / sizeof not_tags[0]; i++) CHECK(hbm_tag_parse(not_tags[i], &tg) == HBM_EINVAL);
  CHECK(hbm_stats_format(NULL, 1, NULL, 0) == HBM_EINVAL);
  const char *bad_counts[] = {"", "-1", "+1", ".5", "0x10", "1.", "1e", "1e-3", "1.2.3", "1 ", "5Bi", "1KiB", "inf", "nan", "1Q", "1ki"};
  for (size_t i = 0; i < sizeof bad_counts / sizeof bad_counts[0]; i++)
    if (hbm_count_parse(bad_counts[i], &v) != HBM_EINVAL) {
      fprintf(stderr, "count '%s' accepted\n", bad_counts[i]);
      CHECK(!"a bad count accepted");
    }
  /* Binary units with the exact fraction: n = (n >> b) + (n mod 2^b) / 2^b,
   * whose decimals are (n mod 2^b) x 5^b over b places; one digit fewer is
   * not whole. */
  for (int i = 0; i < 20000; i++) {
    static const char *const bunits[] = {"Ki", "Mi", "Gi"};
    int u = (int)test_rand_below(&rng, 3), b = 10 * (u + 1);
    uint64_t want = test_rand(&rng) >> test_rand_below(&rng, 64), low = want & ((1ull << b) - 1);
    unsigned __int128 dec = (unsigned __int128)low;
    for (int k = 0; k < b; k++) dec *= 5;
    char digits[48];
    for (int k = b; k-- > 0; dec /= 10) digits[k] = (char)('0' + (int)(dec % 10));
    digits[b] = 0;
    char text[80];
    snprintf(text, sizeof text, "%llu.%s%s", (unsigned long long)(want >> b), digits, bunits[u]);
    if (hbm_count_parse(text, &v) != HBM_OK || v != want) {
      fprintf(stderr, "hbm_count_parse(\"%s\"): %llu, expected %llu\n", text, (unsigned long long)v, (unsigned long long)want);
      CHECK(0);
      break;
    }
    int last = b; /* the last nonzero decimal: without it the value is not whole */
    while (last > 0 && digits[last - 1] == '0') last--;
    if (last > 0) {
      digits[last - 1] = 0;
      snprintf(text, sizeof text, "%llu.%s%s", (unsigned long long)(want >> b), digits, bunits[u]);
      if (hbm_count_parse(text, &v) != HBM_EINVAL) {
        fprintf(stderr, "hbm_count_parse(\"%s\") accepted a count that is not whole\n", text);
        CHECK(0);
        break;
      }
    }
  }
  /* Random whole numbers in every spelling the grammar has for them. */
  for (int i = 0; i < 20000; i++) {
    int digits = 1 + (int)test_rand_below(&rng, 19);
    uint64_t want = test_rand(&rng) % 10000000000000000000ull;
    for (int d = digits; d < 19; d++) want /= 10;
    char text[64];
    switch (test_rand_below(&rng, 5)) {
      case 0: snprintf(text, sizeof text, "%llu", (unsigned long long)want); break;
      case 1: /* K/M/G/T with the remainder as a fraction */
      {
        static const char units[] = "KMGT";
        int u = (int)test_rand_below(&rng, 4);
        uint64_t unit = u == 0 ? 1000ull : u == 1 ? 1000000ull : u == 2 ? 1000000000ull : 1000000000000ull;
        int w = u == 0 ? 3 : u == 1 ? 6 : u == 2 ? 9 : 12;
        snprintf(text, sizeof text, "%llu.%0*llu%c", (unsigned long long)(want / unit), w,
                 (unsigned long long)(want % unit), units[u]);
        break;
      }
      case 2: /* binary suffix, the value rounded down to its unit */
        want &= ~((1ull << 20) - 1);
        snprintf(text, sizeof text, "%lluMi", (unsigned long long)(want >> 20));
        break;
      case 3: /* e-notation: the digits with their trailing zeros as the exponent */
      {
        uint64_t m = want;
        int e = 0;
        while (m && m % 10 == 0) m /= 10, e++;
        snprintf(text, sizeof text, "%llue%d", (unsigned long long)m, e);
        break;
      }
      default: /* a fraction that divides out: want x 10 / 10 */
        snprintf(text, sizeof text, "%llu.%llu0e1", (unsigned long long)(want / 10), (unsigned long long)(want % 10));
        break;
    }
    uint64_t got = 0;
    if (hbm_count_parse(text, &got) != HBM_OK || got != want) {
      fprintf(stderr, "count '%s': got %llu, want %llu\n", text, (unsigned long long)got, (unsigned long long)want);
      CHECK(!"a count misread");
      break;
    }
  }
  char buf[32];
  CHECK(!strcmp(hbm_size_format(3ull << 30, buf, sizeof buf), "3.00 GiB"));
  /* the story's ratio: 14 GiB free in holes of at most 3 GiB */
  double r = hbm_fragmentation_ratio(14ull << 30, 3ull << 30);
  CHECK(r > 3.666 && r < 3.667);
  CHECK(hbm_fragmentation_ratio(0, 0) == 0.0);

  /* devices */
  hbm_device *dev;
  CHECK(hbm_device_open("sim", &dev) == HBM_EINVAL);
  CHECK(hbm_device_open("sim:lots", &dev) == HBM_EINVAL);
  CHECK(hbm_device_open("gpu:8GiB", &dev) == HBM_EUNSUPPORTED);
  CHECK(hbm_device_open("averyveryverylongkind:1GiB", &dev) == HBM_EUNSUPPORTED); /* longer than any kind: still a kind */
  CHECK(hbm_device_open("cuda:0", &dev) == HBM_EUNSUPPORTED);      /* the kind first: not a bad capacity */
  CHECK(hbm_device_open("npu:0,granule=3MiB", &dev) == HBM_EUNSUPPORTED);
  CHECK(hbm_device_open("sim:8GiB,granule=3MiB", &dev) == HBM_EINVAL);
  CHECK(hbm_device_open("sim:96GiB", &dev) == HBM_OK);
  hbm_device_caps caps;
  CHECK(hbm_device_get_caps(dev, &caps) == HBM_OK);
  CHECK(caps.capacity == 96ull << 30 && caps.granule == 2ull << 20 && caps.vmm && !caps.host_visible);

  hbm_heap *h;
  CHECK(hbm_heap_create(dev, "nosuch", NULL, &h) == HBM_EINVAL);
  /* a policy is found by its whole name: a prefix, the empty name or a longer one is none */
  CHECK(hbm_heap_create(dev, "best", NULL, &h) == HBM_EINVAL);
  CHECK(hbm_heap_create(dev, "", NULL, &h) == HBM_EINVAL);
  CHECK(hbm_heap_create(dev, "bestfit2", NULL, &h) == HBM_EINVAL);
  CHECK(hbm_heap_create(dev, "bestfit", NULL, &h) == HBM_OK);
  uint64_t a, b;
  errors_seen = 0;
  CHECK(hbm_alloc(h, 0, HBM_TAG_ACT, 0, &a) == HBM_EINVAL);
  CHECK(hbm_alloc(h, 1ull << 51, HBM_TAG_ACT, 0, &a) == HBM_EINVAL);
  CHECK(hbm_alloc(h, 1ull << 50, HBM_TAG_ACT, 0, &a) == HBM_ENOMEM); /* 1 PiB is a size, too large here */
  CHECK(hbm_alloc(h, 100, (hbm_tag)99, 0, &a) == HBM_EINVAL);
  CHECK(hbm_alloc(h, 97ull << 30, HBM_TAG_ACT, 0, &a) == HBM_ENOMEM);
  CHECK(hbm_alloc(h, 1000, HBM_TAG_PARAM, 0, &a) == HBM_OK);
  CHECK(hbm_alloc(h, 5000, HBM_TAG_ACT, 0, &b) == HBM_OK);
  CHECK(hbm_free(h, a + 512) == HBM_EINVAL);
  CHECK(hbm_free(h, a) == HBM_OK);
  CHECK(hbm_free(h, a) == HBM_EINVAL); /* double free */
  CHECK(errors_seen >= 5);
  /* Step marks: the first may carry any number, 0 included; each later one a
   * larger number than the last mark taken, as in a trace. */
  errors_seen = 0;
  CHECK(hbm_heap_step(h, 0) == HBM_OK);
  CHECK(hbm_heap_step(h, 0) == HBM_EINVAL);
  CHECK(hbm_heap_step(h, 7) == HBM_OK);
  CHECK(hbm_heap_step(h, 3) == HBM_EINVAL);
  CHECK(hbm_heap_step(h, 7) == HBM_EINVAL);
  CHECK(hbm_heap_step(h, 9) == HBM_OK);
  CHECK(errors_seen == 3);
  hbm_stats st;
  CHECK(hbm_heap_stats(h, &st) == HBM_OK);
  CHECK(st.version == HBM_STATS_VERSION);
  CHECK_EQ_U64(st.live, 5000);
  CHECK_EQ_U64(st.allocated, 5120); /* 512-byte granularity */
  CHECK_EQ_U64(st.live_by_tag[HBM_TAG_ACT], 5000);
  CHECK_EQ_U64(st.live_by_tag[HBM_TAG_PARAM], 0);
  CHECK_EQ_U64(st.peak_live, 6000);
  CHECK_EQ_U64(st.free_total, st.capacity - st.live);
  CHECK_EQ_U64(st.failures, 2); /* 1 PiB and 97 GiB */
  CHECK(st.largest_free == (96ull << 30) - 6144); /* hole below b merges? no: a's hole stays apart */
  CHECK(st.fragmentation >= 0);
  char text[4096];
  CHECK(hbm_stats_format(&st, 1, text, sizeof text) > 0 && strstr(text, "\"largest_free\":") && strstr(text, "\"act\":5000"));
  CHECK(hbm_stats_format(&st, 0, text, sizeof text) > 0 && strstr(text, "fragmentation"));
  /* counts are counts, not sizes; peaks per purpose are in the text too */
  CHECK(strstr(text, "\nfailures        2\n") != NULL);
  CHECK(strstr(text, "\npeak_live[act]  ") != NULL);
  {
    char want[96], sz[32];
    snprintf(want, sizeof want, "\nlive            %s (%llu)\n", hbm_size_format(st.live, sz, sizeof sz),
             (unsigned long long)st.live);
    CHECK(strstr(text, want) != NULL); /* bytes keep their size */
  }
  {
    hbm_stats odd = st;
    odd.fragmentation = NAN; /* filled in by a caller: the JSON stays JSON */
    CHECK(hbm_stats_format(&odd, 1, text, sizeof text) > 0 && strstr(text, "\"fragmentation\":null,"));
    /* A version this library does not know: its fields are not these */
    static const int versions[] = {0, HBM_STATS_VERSION + 1, -1};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
      odd.version = versions[i];
      int seen = errors_seen;
      strcpy(text, "untouched");
      CHECK(hbm_stats_format(&odd, 1, text, sizeof text) == HBM_EINVAL && !strcmp(text, "untouched"));
      CHECK(hbm_stats_format(&odd, 0, NULL, 0) == HBM_EINVAL);
      CHECK(errors_seen == seen + 2);
    }
  }
  {
    char small[8];
    CHECK(hbm_size_format(1ull << 30, NULL, 16) == NULL); /* nowhere to write: nothing written */
    CHECK(hbm_size_format(1ull << 30, small, 0) == small);
    CHECK(!strcmp(hbm_size_format(1ull << 30, small, sizeof small), "1.00 Gi")); /* truncated as snprintf */
    char sz[32];
    CHECK(!strcmp(hbm_size_format((1ull << 30) - 1, sz, sizeof sz), "1.00 GiB")); /* not "1024.00 MiB" */
    CHECK(!strcmp(hbm_size_format(1023, sz, sizeof sz), "1023 B"));
    CHECK(!strcmp(hbm_size_format(1023ull << 20, sz, sizeof sz), "1023.00 MiB"));
  }
  scan_tally t = {.ordered = 1};
  CHECK(hbm_heap_scan(h, tally, &t) == HBM_OK);
  CHECK(t.ordered && t.live_blocks == 1 && t.live == 5120 && t.live + t.holes == 96ull << 30 && t.last_tag == HBM_TAG_ACT);
  CHECK(hbm_check(h) == HBM_OK);
  /* A NULL argument is HBM_EINVAL, never a crash. */
  CHECK(hbm_alloc(h, 100, HBM_TAG_ACT, 0, NULL) == HBM_EINVAL && hbm_alloc(NULL, 100, HBM_TAG_ACT, 0, &a) == HBM_EINVAL);
  CHECK(hbm_heap_stats(h, NULL) == HBM_EINVAL && hbm_heap_stats(NULL, &st) == HBM_EINVAL);
  CHECK(hbm_heap_scan(h, NULL, NULL) == HBM_EINVAL && hbm_heap_scan(NULL, tally, &t) == HBM_EINVAL);
  CHECK(hbm_free(h, b) == HBM_OK);

  /* randomized: hbm_check() after every operation */
  uint64_t ops = (uint64_t)(100000 * test_scale()), live_addr[512] = {0};
  int nlive = 0;
  for (uint64_t i = 0; i < ops; i++) {
    if (nlive < 512 && (test_rand_below(&rng, 100) < 55 || nlive == 0)) {
      uint64_t size = 1 + test_rand_below(&rng, test_rand_below(&rng, 4) ? 1 << 20 : 1ull << 32);
      if (hbm_alloc(h, size, (hbm_tag)test_rand_below(&rng, HBM_TAG_COUNT), 0, &live_addr[nlive]) == HBM_OK) nlive++;
    } else {
      int k = (int)test_rand_below(&rng, (uint64_t)nlive);
      CHECK(hbm_free(h, live_addr[k]) == HBM_OK);
      live_addr[k] = live_addr[--nlive];
    }
    if (hbm_check(h) != HBM_OK) {
      fprintf(stderr, "hbm_check failed after op %llu (seed %llu)\n", (unsigned long long)i, (unsigned long long)seed);
      return 1;
    }
  }
  hbm_heap_destroy(h);
  hbm_device_close(dev);
  printf("test_heap: %llu randomized operations, hbm_check after each\n", (unsigned long long)ops);

  /* A visitor's stop is no error, whatever it returns, under every policy. */
  for (const char *names = hbm_policy_names(); *names;) {
    char name[32];
    size_t len = strcspn(names, ",");
    snprintf(name, sizeof name, "%.*s", (int)len, names);
    names += len + (names[len] == ',');
    hbm_heap *hs;
    uint64_t x;
    CHECK(hbm_device_open("sim:1GiB", &dev) == HBM_OK);
    CHECK(hbm_heap_create(dev, name, NULL, &hs) == HBM_OK);
    CHECK(hbm_alloc(hs, 3 << 20, HBM_TAG_ACT, 0, &x) == HBM_OK);
    for (int answer = -8; answer <= 1; answer++) {
      if (!answer) continue;
      stop_after_one st1 = {answer, 0};
      int rc = hbm_heap_scan(hs, stop_visit, &st1);
      if (rc != HBM_OK || st1.visits != 1) {
        fprintf(stderr, "%s: a visitor answering %d: scan %d after %d visits\n", name, answer, rc, st1.visits);
        CHECK(0);
      }
    }
    hbm_heap_destroy(hs);
    hbm_device_close(dev);
  }

  /* Under a memory fraction, memory past the limit is not free to the heap:
   * an unfragmented heap reads as such (counted against the capacity, half
   * the device would read as a ratio of about 1). */
  {
    hbm_heap *hf;
    uint64_t x;
    hbm_stats sf;
    CHECK(hbm_device_open("sim:1GiB", &dev) == HBM_OK);
    CHECK(hbm_heap_create(dev, "caching", "per_process_memory_fraction:0.5", &hf) == HBM_OK);
    CHECK(hbm_alloc(hf, 100ull << 20, HBM_TAG_ACT, 0, &x) == HBM_OK);
    CHECK(hbm_heap_stats(hf, &sf) == HBM_OK);
    CHECK_EQ_U64(sf.free_total, (512ull << 20) - sf.live);
    CHECK(sf.largest_free <= sf.free_total && sf.fragmentation < 0.05);
    CHECK(hbm_free(hf, x) == HBM_OK);
    /* another heap's 400 MiB leave 624 MiB on the device, more than the
     * limit's 512: the limit counts this heap's memory only */
    hbm_heap *other;
    CHECK(hbm_heap_create(dev, "caching", NULL, &other) == HBM_OK);
    CHECK(hbm_alloc(other, 400ull << 20, HBM_TAG_ACT, 0, &x) == HBM_OK);
    CHECK(hbm_heap_stats(hf, &sf) == HBM_OK);
    CHECK_EQ_U64(sf.free_total, 512ull << 20);
    CHECK(sf.largest_free <= sf.free_total);
    CHECK(hbm_free(other, x) == HBM_OK);
    hbm_heap_destroy(other);
    hbm_heap_destroy(hf);
    hbm_device_close(dev);
  }

  /* expandable checks a request against the limit, then maps whole 20 MiB
   * pages, as PyTorch does: it can hold more than the limit, and the free
   * pages it holds are its own (free total was once limit - live, less than
   * the free block it held: hbm_check failed). */
  {
    hbm_heap *he;
    uint64_t x, y;
    hbm_stats se;
    CHECK(hbm_device_open("sim:256MiB", &dev) == HBM_OK);
    CHECK(hbm_heap_create(dev, "expandable", "per_process_memory_fraction:0.5", &he) == HBM_OK);
    CHECK(hbm_alloc(he, 100ull << 20, HBM_TAG_ACT, 0, &x) == HBM_OK); /* 5 pages */
    CHECK(hbm_alloc(he, 25ull << 20, HBM_TAG_ACT, 0, &y) == HBM_OK);  /* 26 MiB checked, 2 pages mapped */
    CHECK(hbm_free(he, y) == HBM_OK);
    CHECK(hbm_heap_stats(he, &se) == HBM_OK);
    CHECK(se.reserved > (128ull << 20));
    CHECK_EQ_U64(se.free_total, se.reserved - se.live);
    CHECK(se.largest_free <= se.free_total);
    CHECK(hbm_check(he) == HBM_OK);
    CHECK(hbm_free(he, x) == HBM_OK);
    hbm_heap_destroy(he);
    hbm_device_close(dev);
  }

  /* Heaps that share a device: what one holds is not free for the other,
   * and an empty heap is not fragmented by it. */
  static const char *const sharing[] = {"caching", "expandable", "zoned"};
  for (size_t i = 0; i < sizeof sharing / sizeof sharing[0]; i++) {
    hbm_heap *ha, *hb;
    uint64_t x;
    CHECK(hbm_device_open("sim:1GiB", &dev) == HBM_OK);
    CHECK(hbm_heap_create(dev, sharing[i], NULL, &ha) == HBM_OK);
    CHECK(hbm_heap_create(dev, sharing[i], NULL, &hb) == HBM_OK);
    CHECK(hbm_alloc(ha, 800ull << 20, HBM_TAG_ACT, 0, &x) == HBM_OK);
    hbm_stats sa, sb;
    CHECK(hbm_heap_stats(ha, &sa) == HBM_OK && hbm_heap_stats(hb, &sb) == HBM_OK);
    CHECK_EQ_U64(sa.free_total, sa.capacity - sa.live);          /* alone on the device */
    CHECK_EQ_U64(sb.free_total, sb.capacity - sa.reserved);      /* ha's memory is not hb's */
    CHECK(sb.largest_free <= sb.free_total && sb.fragmentation < 0.05);
    CHECK(hbm_check(ha) == HBM_OK && hbm_check(hb) == HBM_OK);
    CHECK(hbm_free(ha, x) == HBM_OK);
    hbm_heap_destroy(ha);
    CHECK(hbm_heap_stats(hb, &sb) == HBM_OK);
    CHECK_EQ_U64(sb.free_total, sb.capacity); /* ha gave its memory back */
    hbm_heap_destroy(hb);
    hbm_device_close(dev);
  }
  /* bestfit: blocks in PyTorch's 512-byte units, its reserved the footprint
   * of its live blocks, not the device it took */
  {
    hbm_heap *hf;
    CHECK(hbm_device_open("sim:1GiB", &dev) == HBM_OK);
    CHECK(hbm_heap_create(dev, "bestfit", NULL, &hf) == HBM_OK);
    bestfit_footprint(hf, 0);
    uint64_t x, y, z;
    CHECK(hbm_alloc(hf, 1, HBM_TAG_ACT, 0, &x) == HBM_OK);
    CHECK(hbm_alloc(hf, 1536, HBM_TAG_ACT, 0, &y) == HBM_OK);
    CHECK(hbm_alloc(hf, 513, HBM_TAG_ACT, 0, &z) == HBM_OK);
    CHECK(hbm_heap_stats(hf, &st) == HBM_OK);
    CHECK_EQ_U64(st.allocated, 512 + 1536 + 1024);
    CHECK(x % 512 == 0 && y % 512 == 0 && z % 512 == 0);
    bestfit_footprint(hf, 512 + 1536 + 1024);
    CHECK(hbm_free(hf, z) == HBM_OK);
    bestfit_footprint(hf, 512 + 1536);
    CHECK(hbm_free(hf, x) == HBM_OK);
    bestfit_footprint(hf, 512 + 1536);
    CHECK(hbm_free(hf, y) == HBM_OK);
    bestfit_footprint(hf, 0);
    CHECK(hbm_heap_stats(hf, &st) == HBM_OK);
    CHECK_EQ_U64(st.peak_reserved, 512 + 1536 + 1024);
    hbm_heap_destroy(hf);
    hbm_device_close(dev);
  }
  /* bestfit and compact take the whole device as they start: a second heap
   * there is refused, and said so (not an allocation's silent answer). */
  static const char *const whole[] = {"bestfit", "compact"};
  for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
    hbm_heap *ha, *hb = NULL;
    CHECK(hbm_device_open("sim:1GiB", &dev) == HBM_OK);
    CHECK(hbm_heap_create(dev, whole[i], NULL, &ha) == HBM_OK);
    CHECK_EQ_U64(hbm_device_peak_used(dev), 1ull << 30);
    errors_seen = 0;
    CHECK(hbm_heap_create(dev, "caching", NULL, &hb) == HBM_OK); /* takes memory as it needs it */
    uint64_t x;
    CHECK(hbm_alloc(hb, 2ull << 20, HBM_TAG_ACT, 0, &x) == HBM_ENOMEM && errors_seen == 0);
    hbm_heap_destroy(hb);
    hb = NULL;
    CHECK(hbm_heap_create(dev, whole[i], NULL, &hb) == HBM_ENOMEM && hb == NULL && errors_seen == 1);
    hbm_heap_destroy(ha);
    hbm_device_close(dev);
  }
  return test_done("test_heap");
}
