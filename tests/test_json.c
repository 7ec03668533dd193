/* test_json: the JSON writer's doubles read back as the same double (every
 * bit, the sign of zero included), in the fewest of 15, 16 or 17 significant
 * digits, integers stay integers, and non-finite values are null. Random
 * doubles of every kind (any bit pattern, ratios of byte counts as reports
 * compute them, values with few decimal digits, integers, subnormals) go
 * through hbm_json_double inside an array and come back through strtod.
 * Strings come out as UTF-8 text: random byte strings against a decoder that
 * checks code points, where each byte of no well-formed sequence is U+FFFD.
 * A document of every kind of value, nested, comes out exactly as written
 * here, so do the control characters' escapes and 63 levels of nesting (a
 * 64th fails the document); and the buffer keeps its NUL at every length. */
#include <float.h>
#include <math.h>

#include "report/json.h"
#include "testutil.h"

/* realloc is wrapped (CMakeLists.txt): it fails while this is set. */
void *__real_realloc(void *p, size_t n);
static int realloc_fails;
void *__wrap_realloc(void *p, size_t n) { return realloc_fails ? NULL : __real_realloc(p, n); }

/* Writes v alone and returns the text (static buffer). */
static const char *written(double v) {
  static char text[64];
  hbm_json j;
  hbm_json_init(&j);
  hbm_json_double(&j, v);
  snprintf(text, sizeof text, "%s", j.failed || !j.buf ? "(failed)" : j.buf);
  hbm_json_release(&j);
  return text;
}

static int same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Significant digits of a %g-style number. */
static int digits_of(const char *s) {
  int n = 0, leading = 1;
  for (; *s && *s != 'e' && *s != 'E'; s++) {
    if (*s < '0' || *s > '9') continue;
    if (leading && *s == '0') continue;
    leading = 0;
    n++;
  }
  return n ? n : 1;
}

static double random_double(uint64_t *rng) {
  uint64_t kind = test_rand_below(rng, 6), bits;
  double v;
  switch (kind) {
    case 0: /* any finite bit pattern */
      do {
        bits = test_rand(rng);
        memcpy(&v, &bits, sizeof v);
      } while (!isfinite(v));
      return v;
    case 1: /* a ratio of byte counts, as efficiency and over-peak figures are */
      return (double)(test_rand(rng) >> test_rand_below(rng, 40)) /
             (double)((test_rand(rng) >> test_rand_below(rng, 40)) | 1);
    case 2: /* few decimal digits: 0.1, 2.5, 1234.5678 */
      return (double)test_rand_below(rng, 100000) / pow(10, (double)test_rand_below(rng, 8));
    case 3: /* an integer, up to 2^63 */
      return (double)(test_rand(rng) >> test_rand_below(rng, 64));
    case 4: /* tiny: subnormals and the smallest normals */
      return ldexp((double)(test_rand(rng) >> 11), -1126 + (int)test_rand_below(rng, 120));
    default: /* near 1, where 6 digits used to merge neighbours */
      return nextafter(1.0, 2.0) + (double)test_rand_below(rng, 1000) * DBL_EPSILON;
  }
}

/* The reference: decodes the code point at p and checks it (continuation
 * bytes, no overlong form, no surrogate, at most U+10FFFF). Its length, or 0. */
static int sequence_len(const unsigned char *p) {
  int n = *p >= 0xf0 && *p < 0xf8 ? 4 : *p >= 0xe0 && *p < 0xf0 ? 3 : *p >= 0xc0 && *p < 0xe0 ? 2 : 0;
  if (!n) return 0;
  uint32_t cp = *p & (0x7f >> n);
  for (int k = 1; k < n; k++) {
    if ((p[k] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (p[k] & 0x3f);
  }
  static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < least[n] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return 0;
  return n;
}

/* s as the writer must quote it (for bytes >= 0x20 but '"' and '\\'). */
static void expected_string(const unsigned char *s, char *out) {
  size_t o = 0;
  out[o++] = '"';
  for (; *s; s++) {
    int n = *s < 0x80 ? 1 : sequence_len(s);
    if (!n) {
      memcpy(out + o, "\\ufffd", 6);
      o += 6;
      continue;
    }
    memcpy(out + o, s, (size_t)n);
    o += (size_t)n;
    s += n - 1;
  }
  out[o++] = '"';
  out[o] = 0;
}

static void check_strings(uint64_t *rng) {
  static const char *const fixed[][2] = {
      {"caf\xc3\xa9", "\"caf\xc3\xa9\""},        {"\xff\xfe.pickle", "\"\\ufffd\\ufffd.pickle\""},
      {"\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\""}, {"\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""},
      {"\xe2\x82", "\"\\ufffd\\ufffd\""},         {"\xc0\xaf", "\"\\ufffd\\ufffd\""},
      {"\xf0\x9f\x98\x80", "\"\xf0\x9f\x98\x80\""}, {"a\"b\\c\n", "\"a\\\"b\\\\c\\n\""},
  };
  for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) {
    hbm_json j;
    hbm_json_init(&j);
    hbm_json_string(&j, fixed[i][0]);
    if (j.failed || !j.buf || strcmp(j.buf, fixed[i][1])) {
      fprintf(stderr, "string case %zu written as '%s', want '%s'\n", i, j.buf ? j.buf : "(failed)", fixed[i][1]);
      CHECK(0);
    }
    hbm_json_release(&j);
  }
  /* bytes from where sequences go wrong: leads, continuations, the edges */
  static const unsigned char pool[] = {'a',  0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2,
                                       0xdf, 0xe0, 0xe1, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf3, 0xf4,
                                       0xf5, 0xf8, 0xfe, 0xff};
  for (int run = 0; run < 200000; run++) {
    unsigned char s[16];
    int len = 1 + (int)test_rand_below(rng, 12);
    for (int k = 0; k < len; k++) s[k] = pool[test_rand_below(rng, sizeof pool)];
    s[len] = 0;
    char want[16 * 6 + 3];
    expected_string(s, want);
    hbm_json j;
    hbm_json_init(&j);
    hbm_json_string(&j, (const char *)s);
    if (j.failed || !j.buf || strcmp(j.buf, want)) {
      fprintf(stderr, "random string %d written as '%s', want '%s'\n", run, j.buf ? j.buf : "(failed)", want);
      CHECK(0);
      hbm_json_release(&j);
      return;
    }
    hbm_json_release(&j);
  }
}

/* The text of j, or "(failed)"; j released. */
static void expect_text(hbm_json *j, const char *what, const char *want) {
  if (j->failed || !j->buf || strcmp(j->buf, want)) {
    fprintf(stderr, "%s written as '%s', want '%s'\n", what, j->failed || !j->buf ? "(failed)" : j->buf, want);
    CHECK(0);
  }
  hbm_json_release(j);
}

/* Commas between values and none after a key, at every level; each kind of
 * value; the escapes of every control character; and 63 levels of nesting,
 * each with a value beside the one nested in it, where a 64th level fails
 * the document. */
static void check_structure(void) {
  hbm_json j;
  hbm_json_init(&j);
  hbm_json_object_begin(&j);
  hbm_json_kv_string(&j, "name", "a b");
  hbm_json_kv_u64(&j, "max", UINT64_MAX);
  hbm_json_key(&j, "min");
  hbm_json_i64(&j, INT64_MIN);
  hbm_json_kv_double(&j, "ratio", 0.25);
  hbm_json_kv_string(&j, "none", NULL);
  hbm_json_key(&j, "list");
  hbm_json_array_begin(&j);
  hbm_json_bool(&j, 1);
  hbm_json_bool(&j, 0);
  hbm_json_null(&j);
  hbm_json_array_begin(&j);
  hbm_json_array_end(&j);
  hbm_json_object_begin(&j);
  hbm_json_object_end(&j);
  hbm_json_object_begin(&j);
  hbm_json_kv_u64(&j, "a", 1);
  hbm_json_kv_u64(&j, "b", 2);
  hbm_json_object_end(&j);
  hbm_json_raw(&j, "[3,4]");
  hbm_json_array_end(&j);
  hbm_json_kv_u64(&j, "last", 0);
  hbm_json_object_end(&j);
  expect_text(&j, "a document",
              "{\"name\":\"a b\",\"max\":18446744073709551615,\"min\":-9223372036854775808,\"ratio\":0.25,"
              "\"none\":null,\"list\":[true,false,null,[],{},{\"a\":1,\"b\":2},[3,4]],\"last\":0}");

  /* control characters: \n, \r and \t by name, the others as \u00XX; a space
   * and DEL as themselves */
  char all[40], want[256];
  size_t o = 0;
  want[o++] = '"';
  for (int c = 1; c < 0x20; c++) {
    all[c - 1] = (char)c;
    o += (size_t)(c == '\n' ? sprintf(want + o, "\\n") : c == '\r' ? sprintf(want + o, "\\r")
                  : c == '\t' ? sprintf(want + o, "\\t") : sprintf(want + o, "\\u%04x", c));
  }
  memcpy(all + 0x1f, " \x7f", 3);
  o += (size_t)sprintf(want + o, " \x7f\"");
  hbm_json_init(&j);
  hbm_json_string(&j, all);
  expect_text(&j, "the control characters", want);

  /* 63 levels, [inner, k] at each, the most the writer keeps commas for;
   * a 64th fails the document rather than lose them */
  enum { LEVELS = 63 };
  static char deep[LEVELS * 8 + 8];
  o = 0;
  hbm_json_init(&j);
  for (int k = 0; k < LEVELS; k++) {
    hbm_json_array_begin(&j);
    deep[o++] = '[';
  }
  hbm_json_u64(&j, 1);
  hbm_json_u64(&j, 2);
  o += (size_t)sprintf(deep + o, "1,2");
  for (int k = LEVELS; k > 0; k--) {
    hbm_json_array_end(&j);
    if (k > 1) hbm_json_u64(&j, (uint64_t)k);
    o += (size_t)(k > 1 ? sprintf(deep + o, "],%d", k) : sprintf(deep + o, "]"));
  }
  expect_text(&j, "63 levels", deep);
  hbm_json_init(&j);
  for (int k = 0; k < LEVELS; k++) hbm_json_array_begin(&j);
  CHECK(!j.failed && j.len == LEVELS);
  hbm_json_object_begin(&j);
  CHECK(j.failed == HBM_JSON_TOO_DEEP);
  hbm_json_release(&j);

  static char text[600];
  memset(text, 'x', sizeof text - 1);
  /* A failed realloc fails the document: what was written stays, with its
   * NUL, and nothing more is added, once host memory is back too. */
  hbm_json_init(&j);
  realloc_fails = 1;
  hbm_json_u64(&j, 1);
  realloc_fails = 0;
  CHECK(j.failed == HBM_JSON_NO_MEMORY && !j.buf && j.len == 0);
  hbm_json_release(&j);
  hbm_json_init(&j);
  hbm_json_array_begin(&j);
  hbm_json_u64(&j, 1);
  realloc_fails = 1;
  hbm_json_string(&j, text + 300); /* 299 bytes more: past the first 256 */
  realloc_fails = 0;
  hbm_json_u64(&j, 2);
  hbm_json_array_end(&j);
  CHECK(j.failed && j.buf && strlen(j.buf) == j.len && j.len < j.cap && !strncmp(j.buf, "[1,", 3));
  CHECK(j.buf && !strpbrk(j.buf, "2]")); /* nothing after the failure */
  hbm_json_release(&j);

  /* the buffer holds the text and its NUL, whatever lengths fill it */
  for (size_t a = 0; a < 300; a++)
    for (size_t b = 0; b < 300; b++) {
      hbm_json_init(&j);
      hbm_json_raw(&j, text + sizeof text - 1 - a);
      hbm_json_raw(&j, text + sizeof text - 1 - b);
      if (j.failed || !j.buf || j.len != a + b || j.len >= j.cap || strlen(j.buf) != a + b) {
        fprintf(stderr, "%zu then %zu bytes: %zu written in a buffer of %zu\n", a, b, j.len, j.cap);
        CHECK(0);
        hbm_json_release(&j);
        return;
      }
      hbm_json_release(&j);
    }
}

int main(void) {
  uint64_t seed = test_seed("test_json"), rng = seed;
  check_strings(&rng);
  check_structure();

  /* ---- fixed cases: short stays short, integers stay integers ---- */
  static const struct {
    double v;
    const char *want;
  } fixed[] = {
      {0.0, "0"},       {1.0, "1"},           {3.0, "3"},       {-2.0, "-2"},        {0.1, "0.1"},
      {0.5, "0.5"},     {2.5, "2.5"},         {1e20, "1e+20"},  {123456789.0, "123456789"},
      {1.0 / 3.0, "0.3333333333333333"},      {0.1 + 0.2, "0.30000000000000004"},
      {103079215104.0, "103079215104"},       {1e-300, "1e-300"},
  };
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
    const char *got = written(fixed[i].v);
    if (strcmp(got, fixed[i].want)) {
      fprintf(stderr, "%.17g written as '%s', want '%s'\n", fixed[i].v, got, fixed[i].want);
      CHECK(0);
    }
  }
  /* the sign of zero survives; non-finite values are null, as before */
  CHECK(same_bits(strtod(written(-0.0), NULL), -0.0));
  CHECK(!strcmp(written(NAN), "null"));
  CHECK(!strcmp(written(INFINITY), "null"));
  CHECK(!strcmp(written(-INFINITY), "null"));
  /* two neighbouring doubles print differently (6 digits printed both as 1) */
  char one[64];
  snprintf(one, sizeof one, "%s", written(1.0));
  CHECK(strcmp(one, written(nextafter(1.0, 2.0))) != 0);

  /* ---- random doubles, many to one array, read back one by one ---- */
  int rounds = (int)(200 * test_scale());
  if (rounds < 5) rounds = 5;
  enum { PER_ARRAY = 500 };
  double values[PER_ARRAY];
  for (int round = 0; round < rounds && test_failures_ == 0; round++) {
    hbm_json j;
    hbm_json_init(&j);
    hbm_json_object_begin(&j);
    hbm_json_key(&j, "values");
    hbm_json_array_begin(&j);
    for (int i = 0; i < PER_ARRAY; i++) {
      values[i] = random_double(&rng);
      if (test_rand_below(&rng, 2)) values[i] = -values[i];
      hbm_json_double(&j, values[i]);
    }
    hbm_json_array_end(&j);
    hbm_json_object_end(&j);
    CHECK(!j.failed);
    const char *prefix = "{\"values\":[";
    CHECK(j.buf && !strncmp(j.buf, prefix, strlen(prefix)));
    const char *p = j.buf ? j.buf + strlen(prefix) : "";
    for (int i = 0; i < PER_ARRAY && test_failures_ == 0; i++) {
      char *end;
      double back = strtod(p, &end);
      char text[64];
      snprintf(text, sizeof text, "%.*s", (int)(end - p < 63 ? end - p : 63), p);
      if (!same_bits(back, values[i])) {
        fprintf(stderr, "%.17g written as '%s', read back as %.17g (round %d, HBM_SEED=%llu)\n", values[i], text,
                back, round, (unsigned long long)seed);
        CHECK(0);
      }
      /* no more digits than needed: fewer would not read back */
      int digits = digits_of(text);
      CHECK(digits <= 17);
      if (digits > 15) {
        char shorter[400]; /* any precision fits: %g of a double is at most ~330 chars */
        snprintf(shorter, sizeof shorter, "%.*g", digits - 1, values[i]);
        if (strtod(shorter, NULL) == values[i]) {
          fprintf(stderr, "%.17g written as '%s' where '%s' reads back too\n", values[i], text, shorter);
          CHECK(0);
        }
      }
      /* an integer-valued double below 1e15 has no point and no exponent */
      if (values[i] == floor(values[i]) && fabs(values[i]) < 1e15) CHECK(!strpbrk(text, ".eE"));
      CHECK(*end == (i + 1 < PER_ARRAY ? ',' : ']'));
      p = end + 1;
    }
    CHECK(!strcmp(p, "}"));
    hbm_json_release(&j);
  }
  return test_done("test_json");
}
