/* test_pickle.c: the snapshot pickle reader (src/trace/pickle.c).
 *
 * Every opcode path on hand-written pickles; memo sharing; every refusal
 * names its opcode and byte offset; limits; the generated fixtures decode to
 * exactly the tree Python's pickle.load builds (digest in EXPECTED, written
 * by tools/gen_snapshot_fixtures.py); protocols 2, 4 and 5 give equal trees;
 * every prefix and many random mutations of a fixture fail cleanly. */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>

#include "testutil.h"
#include "trace/pickle.h"
#include "trace/trace.h"

/* ---- helpers ------------------------------------------------------------------ */

static char fixtures_dir[4096];

static void find_fixtures(void) {
  const char *root = getenv("HBM_ROOT");
  if (root) {
    snprintf(fixtures_dir, sizeof fixtures_dir, "%s/tests/fixtures/snapshots", root);
    return;
  }
  /* __FILE__ is .../tests/test_pickle.c */
  snprintf(fixtures_dir, sizeof fixtures_dir, "%s", __FILE__);
  char *slash = strrchr(fixtures_dir, '/');
  if (slash) *slash = 0;
  else snprintf(fixtures_dir, sizeof fixtures_dir, "tests");
  strncat(fixtures_dir, "/fixtures/snapshots", sizeof fixtures_dir - strlen(fixtures_dir) - 1);
}

static int load(const char *rel, char **data, size_t *len) {
  char path[4600];
  snprintf(path, sizeof path, "%s/%s", fixtures_dir, rel);
  hbm_diag d;
  int rc = hbm_read_file(path, data, len, &d);
  if (rc) fprintf(stderr, "cannot read %s: %s\n", path, d.message);
  return rc;
}

static hbm_pickle *parse_ok_(const void *data, size_t len, const char *what, int line) {
  hbm_pickle *doc = NULL;
  hbm_diag d;
  memset(&d, 0, sizeof d);
  int rc = hbm_pickle_parse(data, len, what, NULL, &doc, &d);
  if (rc != HBM_OK) {
    fprintf(stderr, "%s:%d: %s: expected to parse, got %d: %s\n", __FILE__, line, what, rc,
            d.message);
    test_failures_++;
    return NULL;
  }
  CHECK(hbm_pickle_root(doc) != NULL);
  return doc;
}
#define PARSE_OK(bytes) parse_ok_(bytes, sizeof(bytes) - 1, #bytes, __LINE__)

/* Expects HBM_EPARSE with diag->offset == offset and each of the NULL-ended
 * substrings in the message (the offset is diag->offset; a printer such as the
 * CLI's shows it as "file: byte N: message", so the message does not repeat it). */
static void parse_fails_(const void *data, size_t len, const hbm_pickle_limits *lim,
                         uint64_t offset, int line, ...) {
  hbm_pickle *doc = (hbm_pickle *)(uintptr_t)1;
  hbm_diag d;
  memset(&d, 0, sizeof d);
  int rc = hbm_pickle_parse(data, len, "bad.pickle", lim, &doc, &d);
  if (rc != HBM_EPARSE) {
    fprintf(stderr, "%s:%d: expected HBM_EPARSE, got %d (%s)\n", __FILE__, line, rc, d.message);
    test_failures_++;
    if (rc == HBM_OK) hbm_pickle_free(doc);
    return;
  }
  if (doc != (hbm_pickle *)(uintptr_t)1) {
    fprintf(stderr, "%s:%d: *out changed on failure\n", __FILE__, line);
    test_failures_++;
  }
  if (d.offset != offset || strncmp(d.message, "byte ", 5) == 0 || d.message[0] == 0 ||
      strcmp(d.file, "bad.pickle") != 0 || d.line != 0) {
    fprintf(stderr, "%s:%d: expected offset %" PRIu64 ", got %" PRIu64 " in %s: \"%s\"\n",
            __FILE__, line, offset, d.offset, d.file, d.message);
    test_failures_++;
  }
  va_list ap;
  va_start(ap, line);
  for (const char *want; (want = va_arg(ap, const char *));) {
    if (!strstr(d.message, want)) {
      fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\"\n", __FILE__, line, d.message, want);
      test_failures_++;
    }
  }
  va_end(ap);
}
#define PARSE_FAILS(bytes, offset, ...) \
  parse_fails_(bytes, sizeof(bytes) - 1, NULL, offset, __LINE__, __VA_ARGS__, (const char *)NULL)
#define PARSE_FAILS_LIM(bytes, lim, offset, ...) \
  parse_fails_(bytes, sizeof(bytes) - 1, lim, offset, __LINE__, __VA_ARGS__, (const char *)NULL)

/* ---- canonical text of a tree (the generator writes the same) -------------------------- */

typedef struct canon {
  uint64_t hash, len;
} canon;

static void canon_put(canon *c, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    c->hash ^= (uint8_t)s[i];
    c->hash *= 0x100000001B3ull;
  }
  c->len += n;
}
static void canon_printf(canon *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void canon_printf(canon *c, const char *fmt, ...) {
  char buf[64];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  canon_put(c, buf, (size_t)n);
}
static void canon_hex(canon *c, const char *s, size_t n) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    char two[2] = {digits[(uint8_t)s[i] >> 4], digits[(uint8_t)s[i] & 15]};
    canon_put(c, two, 2);
  }
}
static void canon_value(canon *c, const hbm_pk_value *v) {
  switch (v->type) {
  case HBM_PK_NONE: canon_put(c, "N", 1); break;
  case HBM_PK_BOOL: canon_put(c, v->u.i ? "T" : "F", 1); break;
  case HBM_PK_INT: canon_printf(c, "i%" PRId64, v->u.i); break;
  case HBM_PK_FLOAT: {
    uint64_t bits;
    memcpy(&bits, &v->u.f, sizeof bits);
    canon_printf(c, "f%016" PRIx64, bits);
    break;
  }
  case HBM_PK_STR:
  case HBM_PK_BYTES:
    canon_printf(c, "%c%zu:", v->type == HBM_PK_STR ? 's' : 'b', v->u.s.len);
    canon_hex(c, v->u.s.str, v->u.s.len);
    break;
  case HBM_PK_LIST:
  case HBM_PK_TUPLE:
    canon_put(c, v->type == HBM_PK_LIST ? "[" : "(", 1);
    for (size_t i = 0; i < v->u.seq.n; i++) {
      if (i) canon_put(c, ",", 1);
      canon_value(c, v->u.seq.items[i]);
    }
    canon_put(c, v->type == HBM_PK_LIST ? "]" : ")", 1);
    break;
  case HBM_PK_DICT:
    canon_put(c, "{", 1);
    for (size_t i = 0; i < v->u.dict.n; i++) {
      if (i) canon_put(c, ",", 1);
      canon_value(c, v->u.dict.keys[i]);
      canon_put(c, ":", 1);
      canon_value(c, v->u.dict.vals[i]);
    }
    canon_put(c, "}", 1);
    break;
  }
}
static canon canon_of(const hbm_pk_value *v) {
  canon c = {0xCBF29CE484222325ull, 0};
  canon_value(&c, v);
  return c;
}
static canon canon_bytes(const void *data, size_t len) {
  hbm_pickle *doc = parse_ok_(data, len, "canon", __LINE__);
  canon c = {0, 0};
  if (doc) c = canon_of(hbm_pickle_root(doc));
  hbm_pickle_free(doc);
  return c;
}
#define CANON(bytes) canon_bytes(bytes, sizeof(bytes) - 1)

/* ---- opcode paths ----------------------------------------------------------------------- */

static void test_scalars(void) {
  int64_t i;
  double f;
  struct { const char *bytes; size_t len; int64_t want; } ints[] = {
#define I_(b, v) {b, sizeof(b) - 1, v}
    I_("\x80\x02K\xff.", 255),                         /* BININT1 */
    I_("\x80\x02M\xff\xff.", 65535),                   /* BININT2 */
    I_("\x80\x02J\xfe\xff\xff\xff.", -2),              /* BININT, signed */
    I_("\x80\x02J\xff\xff\xff\x7f.", INT32_MAX),
    I_("\x80\x02\x8a\x00.", 0),                        /* LONG1, empty: 0 */
    I_("\x80\x02\x8a\x01\xff.", -1),
    I_("\x80\x02\x8a\x05\x00\x00\x00\x80\x00.", 2147483648ll),
    I_("\x80\x02\x8a\x06\x00\x10\x3a\x2c\x7f\x00.", 0x7f2c3a1000ll),
    I_("\x80\x02\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f.", INT64_MAX),
    I_("\x80\x02\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80.", INT64_MIN),
    I_("\x80\x02\x8a\x09\xff\xff\xff\xff\xff\xff\xff\x7f\x00.", INT64_MAX), /* redundant byte */
    I_("\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\xff.", INT64_MIN),
    I_("\x80\x02\x8b\x02\x00\x00\x00\x34\x12.", 0x1234),  /* LONG4 */
    I_("\x80\x02I42\n.", 42),                          /* INT text */
    I_("\x80\x02I-9223372036854775808\n.", INT64_MIN),
    I_("\x80\x02I-9223372036854775807\n.", -INT64_MAX),   /* one above: not INT64_MIN */
    I_("\x80\x02I+9223372036854775807\n.", INT64_MAX),
    I_("\x80\x02L123L\n.", 123),                       /* LONG text */
    I_("\x80\x02L-7\n.", -7),
#undef I_
  };
  for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
    hbm_pickle *doc = parse_ok_(ints[k].bytes, ints[k].len, "int", __LINE__);
    if (!doc) continue;
    const hbm_pk_value *v = hbm_pickle_root(doc);
    CHECK(v->type == HBM_PK_INT);
    CHECK(hbm_pk_int(v, &i) && i == ints[k].want);
    if (i != ints[k].want) fprintf(stderr, "  case %zu: %" PRId64 "\n", k, i);
    CHECK(hbm_pk_float(v, &f) && f == (double)ints[k].want);
    hbm_pickle_free(doc);
  }

  hbm_pickle *doc = PARSE_OK("\x80\x02I01\n.");    /* protocol 0 True */
  CHECK(doc && hbm_pickle_root(doc)->type == HBM_PK_BOOL && hbm_pickle_root(doc)->u.i == 1);
  hbm_pickle_free(doc);
  doc = PARSE_OK("\x80\x02I00\n.");
  CHECK(doc && hbm_pickle_root(doc)->type == HBM_PK_BOOL && hbm_pickle_root(doc)->u.i == 0);
  hbm_pickle_free(doc);

  /* NONE, NEWTRUE, NEWFALSE in a tuple; the singletons are shared */
  doc = PARSE_OK("\x80\x02(N\x88\x89N\x88t.");
  if (doc) {
    const hbm_pk_value *t = hbm_pickle_root(doc);
    CHECK(t->type == HBM_PK_TUPLE && hbm_pk_len(t) == 5);
    CHECK(hbm_pk_item(t, 0)->type == HBM_PK_NONE);
    CHECK(hbm_pk_int(hbm_pk_item(t, 1), &i) && i == 1);
    CHECK(hbm_pk_int(hbm_pk_item(t, 2), &i) && i == 0);
    CHECK(hbm_pk_item(t, 0) == hbm_pk_item(t, 3));
    CHECK(hbm_pk_item(t, 1) == hbm_pk_item(t, 4));
    CHECK(hbm_pk_item(t, 5) == NULL);
  }
  hbm_pickle_free(doc);

  /* BINFLOAT is big-endian; FLOAT is text */
  doc = PARSE_OK("\x80\x02G\x3f\xf8\x00\x00\x00\x00\x00\x00.");
  CHECK(doc && hbm_pk_float(hbm_pickle_root(doc), &f) && f == 1.5);
  CHECK(doc && !hbm_pk_int(hbm_pickle_root(doc), &i));
  hbm_pickle_free(doc);
  doc = PARSE_OK("\x80\x02" "F-0.25\n.");
  CHECK(doc && hbm_pickle_root(doc)->type == HBM_PK_FLOAT && hbm_pickle_root(doc)->u.f == -0.25);
  hbm_pickle_free(doc);
}

static void check_str(const char *bytes, size_t len, hbm_pk_type type, const char *want,
                      size_t want_len, int line) {
  hbm_pickle *doc = parse_ok_(bytes, len, "string", line);
  if (!doc) return;
  const hbm_pk_value *v = hbm_pickle_root(doc);
  if (v->type != type || v->u.s.len != want_len || memcmp(v->u.s.str, want, want_len) != 0 ||
      v->u.s.str[want_len] != 0) {
    fprintf(stderr, "%s:%d: wrong string value (type %s, len %zu)\n", __FILE__, line,
            hbm_pk_type_name(v->type), v->u.s.len);
    test_failures_++;
  }
  hbm_pickle_free(doc);
}
#define CHECK_STR(bytes, type, want) \
  check_str(bytes, sizeof(bytes) - 1, type, want, sizeof(want) - 1, __LINE__)

static void test_strings(void) {
  CHECK_STR("\x80\x04\x8c\x04name.", HBM_PK_STR, "name");                  /* SHORT_BINUNICODE */
  CHECK_STR("\x80\x02X\x03\x00\x00\x00\xc3\xa9t.", HBM_PK_STR, "\xc3\xa9t"); /* BINUNICODE */
  CHECK_STR("\x80\x04\x8d\x02\x00\x00\x00\x00\x00\x00\x00" "ab.", HBM_PK_STR, "ab"); /* BINUNICODE8 */
  CHECK_STR("\x80\x02X\x00\x00\x00\x00.", HBM_PK_STR, "");
  CHECK_STR("\x80\x02X\x04\x00\x00\x00\xf0\x9f\x98\x80.", HBM_PK_STR, "\xf0\x9f\x98\x80");
  CHECK_STR("\x80\x02X\x03\x00\x00\x00\xed\xa0\x80.", HBM_PK_STR, "\xed\xa0\x80"); /* surrogatepass */
  CHECK_STR("\x80\x04\x8c\x03\xe0\xa0\x80.", HBM_PK_STR, "\xe0\xa0\x80");             /* U+0800, the first of 3 bytes */
  CHECK_STR("\x80\x04\x8c\x04\xf0\x90\x80\x80.", HBM_PK_STR, "\xf0\x90\x80\x80");     /* U+10000, the first of 4 */
  CHECK_STR("\x80\x02X\x03\x00\x00\x00" "a\x00" "b.", HBM_PK_STR, "a\0b");       /* embedded NUL */
  CHECK_STR("\x80\x02U\x02hi.", HBM_PK_STR, "hi");                         /* SHORT_BINSTRING */
  CHECK_STR("\x80\x02T\x02\x00\x00\x00hi.", HBM_PK_STR, "hi");             /* BINSTRING */
  CHECK_STR("\x80\x02U\x02\xff\xfe.", HBM_PK_BYTES, "\xff\xfe");           /* not UTF-8 */
  CHECK_STR("\x80\x03""C\x03\x00\x01\x02.", HBM_PK_BYTES, "\x00\x01\x02"); /* SHORT_BINBYTES */
  CHECK_STR("\x80\x03""B\x01\x00\x00\x00z.", HBM_PK_BYTES, "z");           /* BINBYTES */
  CHECK_STR("\x80\x04\x8e\x01\x00\x00\x00\x00\x00\x00\x00z.", HBM_PK_BYTES, "z"); /* BINBYTES8 */
  CHECK_STR("\x80\x05\x96\x01\x00\x00\x00\x00\x00\x00\x00z.", HBM_PK_BYTES, "z"); /* BYTEARRAY8 */
  /* a long string (BINUNICODE with 300 bytes) */
  char big[7 + 300 + 1];
  memcpy(big, "\x80\x02X\x2c\x01\x00\x00", 7);
  memset(big + 7, 'x', 300);
  big[307] = '.';
  hbm_pickle *doc = parse_ok_(big, 308, "big", __LINE__);
  CHECK(doc && hbm_pickle_root(doc)->u.s.len == 300 && strlen(hbm_pk_str(hbm_pickle_root(doc))) == 300);
  hbm_pickle_free(doc);
  CHECK(hbm_pk_str(NULL) == NULL);
}

static void test_containers(void) {
  int64_t i;
  /* EMPTY_LIST + APPEND + APPENDS, in order */
  hbm_pickle *doc = PARSE_OK("\x80\x02]K\x01" "a(K\x02K\x03" "e(e.");
  if (doc) {
    const hbm_pk_value *l = hbm_pickle_root(doc);
    CHECK(l->type == HBM_PK_LIST && hbm_pk_len(l) == 3);
    for (size_t k = 0; k < 3; k++) CHECK(hbm_pk_int(hbm_pk_item(l, k), &i) && i == (int64_t)k + 1);
  }
  hbm_pickle_free(doc);
  /* LIST from a MARK; DICT from a MARK; TUPLE from a MARK; TUPLE1..3; EMPTY_TUPLE */
  canon a = CANON("\x80\x02(K\x01K\x02l.");
  canon b = CANON("\x80\x02](K\x01K\x02" "e.");
  CHECK(a.hash == b.hash && a.len == b.len);
  a = CANON("\x80\x02(U\x01" "aK\x01U\x01" "bK\x02" "d.");
  b = CANON("\x80\x02}(U\x01" "aK\x01U\x01" "bK\x02u.");
  canon c = CANON("\x80\x02}U\x01" "aK\x01sU\x01" "bK\x02s.");
  CHECK(a.hash == b.hash && b.hash == c.hash);
  a = CANON("\x80\x02(K\x01K\x02K\x03t.");
  b = CANON("\x80\x02K\x01K\x02K\x03\x87.");
  CHECK(a.hash == b.hash);
  a = CANON("\x80\x02(K\x01t.");
  b = CANON("\x80\x02K\x01\x85.");
  CHECK(a.hash == b.hash);
  a = CANON("\x80\x02(K\x01K\x02t.");
  b = CANON("\x80\x02K\x01K\x02\x86.");
  CHECK(a.hash == b.hash);
  /* LIST, DICT, TUPLE of nothing, with nothing else on the stack */
  hbm_pickle *empty = PARSE_OK("\x80\x02(d.");
  CHECK(empty && hbm_pickle_root(empty)->type == HBM_PK_DICT && hbm_pk_len(hbm_pickle_root(empty)) == 0);
  hbm_pickle_free(empty);
  empty = PARSE_OK("\x80\x02(l.");
  CHECK(empty && hbm_pickle_root(empty)->type == HBM_PK_LIST && hbm_pk_len(hbm_pickle_root(empty)) == 0);
  hbm_pickle_free(empty);
  a = CANON("\x80\x02(t.");
  b = CANON("\x80\x02).");
  CHECK(a.hash == b.hash);

  /* dict lookups; a key set twice: the later value wins, as in Python */
  doc = PARSE_OK("\x80\x02}(U\x01" "aK\x01U\x01" "bK\x02U\x01" "aK\x03K\x07K\x08u.");
  if (doc) {
    const hbm_pk_value *d = hbm_pickle_root(doc);
    CHECK(hbm_pk_len(d) == 4);
    CHECK(hbm_pk_int(hbm_pk_get(d, "a"), &i) && i == 3);
    CHECK(hbm_pk_int(hbm_pk_get(d, "b"), &i) && i == 2);
    CHECK(hbm_pk_get(d, "c") == NULL);
    CHECK(hbm_pk_get(d, NULL) == NULL);
    CHECK(hbm_pk_get(hbm_pk_get(d, "a"), "a") == NULL); /* not a dict */
    CHECK(hbm_pk_item(d, 0) == NULL);                      /* not a sequence */
  }
  hbm_pickle_free(doc);
  /* a tuple as a key (hashable) */
  doc = PARSE_OK("\x80\x02}K\x01K\x02\x86Ns.");
  CHECK(doc && hbm_pk_len(hbm_pickle_root(doc)) == 1);
  hbm_pickle_free(doc);

  /* nesting: {'k': [(1, [2]), {}]}, walked value by value */
  doc = PARSE_OK("\x80\x02}U\x01k](K\x01]K\x02" "a\x86}es.");
  if (doc) {
    const hbm_pk_value *k = hbm_pk_get(hbm_pickle_root(doc), "k");
    const hbm_pk_value *pair = hbm_pk_item(k, 0), *inner = hbm_pk_item(pair, 1), *none = hbm_pk_item(k, 1);
    CHECK(k && k->type == HBM_PK_LIST && hbm_pk_len(k) == 2);
    CHECK(pair && pair->type == HBM_PK_TUPLE && hbm_pk_len(pair) == 2);
    CHECK(hbm_pk_int(hbm_pk_item(pair, 0), &i) && i == 1);
    CHECK(inner && inner->type == HBM_PK_LIST && hbm_pk_len(inner) == 1);
    CHECK(hbm_pk_int(hbm_pk_item(inner, 0), &i) && i == 2);
    CHECK(none && none->type == HBM_PK_DICT && hbm_pk_len(none) == 0);
  }
  hbm_pickle_free(doc);

  /* POP, POP_MARK, DUP */
  doc = PARSE_OK("\x80\x02K\x01K\x02" "0.");
  CHECK(doc && hbm_pk_int(hbm_pickle_root(doc), &i) && i == 1);
  hbm_pickle_free(doc);
  doc = PARSE_OK("\x80\x02K\x01(K\x02K\x03" "1.");
  CHECK(doc && hbm_pk_int(hbm_pickle_root(doc), &i) && i == 1);
  hbm_pickle_free(doc);
  doc = PARSE_OK("\x80\x02(0K\x05.");               /* POP with an empty level pops the MARK */
  CHECK(doc && hbm_pk_int(hbm_pickle_root(doc), &i) && i == 5);
  hbm_pickle_free(doc);
  doc = PARSE_OK("\x80\x02U\x01x2\x86.");          /* DUP: both items are one value */
  if (doc) {
    const hbm_pk_value *t = hbm_pickle_root(doc);
    CHECK(hbm_pk_len(t) == 2 && hbm_pk_item(t, 0) == hbm_pk_item(t, 1));
  }
  hbm_pickle_free(doc);

  /* FRAME is accepted and ignored; PROTO may repeat */
  doc = PARSE_OK("\x80\x04\x95\x02\x00\x00\x00\x00\x00\x00\x00K\x07\x80\x05.");
  CHECK(doc && hbm_pk_int(hbm_pickle_root(doc), &i) && i == 7);
  hbm_pickle_free(doc);
  /* no PROTO at all (protocol 0/1 stream of the supported opcodes) */
  doc = PARSE_OK("(I1\nI2\nl.");
  CHECK(doc && hbm_pk_len(hbm_pickle_root(doc)) == 2);
  hbm_pickle_free(doc);
}

static void test_memo(void) {
  int64_t i;
  /* MEMOIZE numbers entries 0, 1, ...; BINGET and LONG_BINGET return the same node */
  hbm_pickle *doc = PARSE_OK("\x80\x04](\x8c\x03key\x94]\x94h\x00j\x01\x00\x00\x00" "e.");
  if (doc) {
    const hbm_pk_value *l = hbm_pickle_root(doc);
    CHECK(hbm_pk_len(l) == 4);
    CHECK(hbm_pk_item(l, 0) == hbm_pk_item(l, 2));
    CHECK(hbm_pk_item(l, 1) == hbm_pk_item(l, 3));
    CHECK(hbm_pk_item(l, 1)->type == HBM_PK_LIST);
    CHECK(strcmp(hbm_pk_str(hbm_pk_item(l, 0)), "key") == 0);
  }
  hbm_pickle_free(doc);
  /* BINPUT / LONG_BINPUT / PUT and their GETs */
  doc = PARSE_OK("\x80\x02(K\x01q\x03K\x02r\x05\x00\x00\x00K\x03p2\nh\x03j\x05\x00\x00\x00g2\nl.");
  if (doc) {
    const hbm_pk_value *l = hbm_pickle_root(doc);
    CHECK(hbm_pk_len(l) == 6);
    for (size_t k = 0; k < 3; k++) CHECK(hbm_pk_item(l, k) == hbm_pk_item(l, k + 3));
    CHECK(hbm_pk_int(hbm_pk_item(l, 5), &i) && i == 3);
  }
  hbm_pickle_free(doc);
  /* a PUT over an existing index replaces it; MEMOIZE counts distinct indices */
  doc = PARSE_OK("\x80\x04(K\x01\x94K\x02q\x00K\x03\x94h\x00h\x01t.");
  if (doc) {
    const hbm_pk_value *t = hbm_pickle_root(doc);
    /* memo: 0 -> 2 (replaced), then MEMOIZE with one entry set -> index 1 = 3 */
    CHECK(hbm_pk_len(t) == 5);
    CHECK(hbm_pk_int(hbm_pk_item(t, 3), &i) && i == 2);
    CHECK(hbm_pk_int(hbm_pk_item(t, 4), &i) && i == 3);
  }
  hbm_pickle_free(doc);
  /* a shared container may be referenced again after it is complete */
  doc = PARSE_OK("\x80\x04}\x94(\x8c\x01" "a]\x94(K\x01K\x02" "e\x8c\x01" "bh\x01u.");
  if (doc) {
    const hbm_pk_value *d = hbm_pickle_root(doc);
    CHECK(hbm_pk_get(d, "a") == hbm_pk_get(d, "b") && hbm_pk_len(hbm_pk_get(d, "a")) == 2);
  }
  hbm_pickle_free(doc);
}

/* ---- refusals and malformed input ------------------------------------------------------ */

static void test_refusals(void) {
  PARSE_FAILS("\x80\x02" "cbuiltins\neval\n.", 2, "GLOBAL", "0x63", "refused");
  PARSE_FAILS("\x80\x04\x8c\x01" "a\x8c\x01" "b\x93.", 8, "STACK_GLOBAL", "refused");
  PARSE_FAILS("\x80\x02N)R.", 4, "REDUCE");
  PARSE_FAILS("\x80\x02}}b.", 4, "BUILD");
  PARSE_FAILS("\x80\x02(ibuiltins\nobject\n.", 3, "INST");
  PARSE_FAILS("\x80\x02(No.", 4, "OBJ");
  PARSE_FAILS("\x80\x02N)\x81.", 4, "NEWOBJ");
  PARSE_FAILS("\x80\x04N)}\x92.", 5, "NEWOBJ_EX");
  PARSE_FAILS("\x80\x02Pid\n.", 2, "PERSID");
  PARSE_FAILS("\x80\x02K\x01Q.", 4, "BINPERSID", "persistent id");
  PARSE_FAILS("\x80\x02\x82\x01.", 2, "EXT1", "extension registry");
  PARSE_FAILS("\x80\x02\x83\x01\x00.", 2, "EXT2");
  PARSE_FAILS("\x80\x02\x84\x01\x00\x00\x00.", 2, "EXT4");
  PARSE_FAILS("\x80\x05\x97.", 2, "NEXT_BUFFER", "out-of-band");
  PARSE_FAILS("\x80\x05K\x01\x98.", 4, "READONLY_BUFFER");
  PARSE_FAILS("\x80\x04\x8f.", 2, "EMPTY_SET", "sets");
  PARSE_FAILS("\x80\x04(K\x01\x91.", 5, "FROZENSET");
  PARSE_FAILS("\x80\x04]\x8f(K\x01\x90.", 3, "EMPTY_SET");
  PARSE_FAILS("\x80\x02S'a'\n.", 2, "STRING", "protocol 0");
  PARSE_FAILS("\x80\x02Vabc\n.", 2, "UNICODE");
  PARSE_FAILS("\x80\x02\xff.", 2, "unknown opcode 0xff");
  PARSE_FAILS("\x80\x02K\x01Z.", 4, "unknown opcode 0x5a ('Z')");
  PARSE_FAILS("\x80\x02\x7f.", 2, "unknown opcode 0x7f; expected"); /* DEL is not shown as a character */
  PARSE_FAILS("\x80\x06N.", 1, "protocol 6", "2 to 5"); /* at the protocol byte */
  PARSE_FAILS("\x80\x01N.", 1, "protocol 1");
}

static void test_malformed(void) {
  /* truncation, with the lengths in the message, at the byte the arguments
   * were wanted from (the protocol byte's too) */
  PARSE_FAILS("", 0, "empty input");
  PARSE_FAILS("\x80", 1, "truncated PROTO");
  PARSE_FAILS("\x80\x02N", 3, "without STOP");
  PARSE_FAILS("\x80\x02J\x01\x02", 3, "truncated BININT", "needs 4", "2 left");
  PARSE_FAILS("\x80\x02M\x01", 3, "truncated BININT2");
  PARSE_FAILS("\x80\x02K", 3, "truncated BININT1");
  PARSE_FAILS("\x80\x02G\x01\x02\x03", 3, "truncated BINFLOAT");
  PARSE_FAILS("\x80\x02X\x00\x09\x3d\x00" "abcdefghijkl.", 2, "truncated BINUNICODE",
              "length 4000000 exceeds the 13 bytes left");
  PARSE_FAILS("\x80\x04\x8c\x05" "abc", 2, "SHORT_BINUNICODE", "length 5", "3 bytes left");
  PARSE_FAILS("\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\xff.", 2, "BINUNICODE8",
              "length 18446744073709551615");
  PARSE_FAILS("\x80\x04\x8e\x00\x00\x00\x00\x00\x00\x00\x40.", 2, "BINBYTES8");
  PARSE_FAILS("\x80\x05\x96\x00\x00\x00\x00\x00\x00\x00\x40.", 2, "BYTEARRAY8");
  PARSE_FAILS("\x80\x03""B\xff\xff\xff\xff.", 2, "BINBYTES");
  PARSE_FAILS("\x80\x03""C\x09.", 2, "SHORT_BINBYTES");
  PARSE_FAILS("\x80\x02T\xff\xff\xff\xff.", 2, "BINSTRING", "negative length");
  PARSE_FAILS("\x80\x02U\x05.", 2, "SHORT_BINSTRING");
  PARSE_FAILS("\x80\x04\x95\x00\x00\x00\x00\x00\x01\x00\x00N.", 2, "truncated FRAME");
  PARSE_FAILS("\x80\x02\x8b\x00\x00\x00\x80.", 2, "LONG4", "negative length");
  PARSE_FAILS("\x80\x02\x8b\xff\xff\xff\x7f.", 2, "LONG4", "2147483647");
  PARSE_FAILS("\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01.", 2, "does not fit in 64 bits");
  PARSE_FAILS("\x80\x02\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00.", 2, "does not fit");
  PARSE_FAILS("\x80\x02I9223372036854775808\n.", 2, "INT", "does not fit");
  PARSE_FAILS("\x80\x02Ix\n.", 2, "INT", "decimal integer");
  PARSE_FAILS("\x80\x02I\n.", 2, "INT", "decimal integer");
  PARSE_FAILS("\x80\x02I12", 2, "INT", "no newline");
  PARSE_FAILS("\x80\x02" "F1.5x\n.", 2, "FLOAT", "decimal number");
  PARSE_FAILS("\x80\x02X\x02\x00\x00\x00\xc3\x28.", 7, "BINUNICODE", "invalid UTF-8", "byte 7");
  PARSE_FAILS("\x80\x04\x8c\x02\xc0\x80.", 4, "invalid UTF-8"); /* overlong NUL */
  PARSE_FAILS("\x80\x04\x8c\x04\xf4\x90\x80\x80.", 4, "invalid UTF-8");       /* > U+10FFFF */
  PARSE_FAILS("\x80\x04\x8c\x02\xe2\x82.", 4, "invalid UTF-8");               /* cut sequence */
  PARSE_FAILS("\x80\x04\x8c\x03\xe0\x9f\xbf.", 4, "invalid UTF-8");           /* overlong U+07FF */
  PARSE_FAILS("\x80\x04\x8c\x04\xf0\x8f\xbf\xbf.", 4, "invalid UTF-8");       /* overlong U+FFFF */
  /* the bad byte's offset, and where its string starts */
  PARSE_FAILS("\x80\x04\x8c\x03" "a\xc3\x28.", 5, "invalid UTF-8 (byte 0xc3)", "starts at byte 4");

  /* stack and mark discipline */
  PARSE_FAILS("\x80\x02.", 2, "STOP with 0 values");
  PARSE_FAILS("\x80\x02NN.", 4, "STOP with 2 values");
  PARSE_FAILS("\x80\x02(N.", 4, "STOP with 1 MARK");
  PARSE_FAILS("\x80\x02((.", 4, "STOP with 2 MARK(s) still open");
  PARSE_FAILS("\x80\x02" "a.", 2, "APPEND needs 2");
  PARSE_FAILS("\x80\x02]K\x01(a.", 6, "APPEND needs 2", "after the last MARK");
  PARSE_FAILS("\x80\x02Ne.", 3, "APPENDS without a MARK");
  PARSE_FAILS("\x80\x02(K\x01" "e.", 5, "APPENDS: no list before its MARK");
  PARSE_FAILS("\x80\x02K\x01(K\x01" "e.", 7, "APPENDS expects a list", "found a int");
  PARSE_FAILS("\x80\x02}(K\x01u.", 6, "SETITEMS: odd number");
  PARSE_FAILS("\x80\x02(K\x01" "d.", 5, "DICT: odd number");
  PARSE_FAILS("\x80\x02](K\x01K\x02u.", 8, "SETITEMS expects a dict", "found a list");
  PARSE_FAILS("\x80\x02NNNs.", 5, "SETITEM expects a dict");
  PARSE_FAILS("\x80\x02t.", 2, "TUPLE without a MARK");
  PARSE_FAILS("\x80\x02N\x87.", 3, "TUPLE3 needs 3");
  PARSE_FAILS("\x80\x02N(N\x86.", 5, "TUPLE2 needs 2", "after the last MARK");
  PARSE_FAILS("\x80\x02" "1.", 2, "POP_MARK without a MARK");
  PARSE_FAILS("\x80\x02" "0.", 2, "POP on an empty stack");
  PARSE_FAILS("\x80\x02" "2.", 2, "DUP needs 1");
  PARSE_FAILS("\x80\x02\x94.", 2, "MEMOIZE needs 1");
  PARSE_FAILS("\x80\x02}]K\x01s.", 6, "a list cannot be a dict key");
  PARSE_FAILS("\x80\x02}]\x85K\x01s.", 7, "a tuple cannot be a dict key");
  PARSE_FAILS("\x80\x02(}K\x01" "d.", 6, "a dict cannot be a dict key");

  /* memo */
  PARSE_FAILS("\x80\x02h\x07.", 2, "BINGET", "memo index 7 was never set");
  PARSE_FAILS("\x80\x02j\x00\x00\x01\x00.", 2, "LONG_BINGET", "65536");
  PARSE_FAILS("\x80\x02g3\n.", 2, "GET", "never set");
  PARSE_FAILS("\x80\x02gx\n.", 2, "GET", "decimal memo index");
  PARSE_FAILS("\x80\x02Nr\xff\xff\xff\x0f.", 3, "LONG_BINPUT", "268435455", "limit of 16777216 entries");
  /* the default limit is 16 Mi entries: index 2^24 is past it, 2^24 - 1 only past the stream */
  PARSE_FAILS("\x80\x02Nr\x00\x00\x00\x01.", 3, "memo index 16777216 is beyond the limit");
  PARSE_FAILS("\x80\x02Nr\xff\xff\xff\x00.", 3, "memo index 16777215", "this early");
  PARSE_FAILS("\x80\x02Nr\x00\x01\x00\x00.", 3, "memo index 256", "this early");
  PARSE_FAILS("\x80\x02Np99999999999999999999\n.", 3, "PUT", "decimal memo index");

  /* no cycles: a container cannot take itself, nor items after it is stored */
  PARSE_FAILS("\x80\x02]q\x00h\x00" "a.", 7, "inside itself", "recursive");
  PARSE_FAILS("\x80\x02]2a.", 4, "inside itself");
  PARSE_FAILS("\x80\x02}q\x00K\x01h\x00s.", 9, "inside itself");
  PARSE_FAILS("\x80\x02]q\x00\x85h\x00K\x01" "a.", 10, "already stored");
  /* [l] then l.append(outer): l is stored (sealed) before it could take outer */
  PARSE_FAILS("\x80\x02]q\x00]q\x01" "ah\x01h\x00" "a.", 13, "APPEND adds to a list already stored");
}

static void test_limits(void) {
  hbm_pickle_limits lim = {.max_depth = 3};
  hbm_pickle *doc = NULL;
  hbm_diag d;
  /* depth 3 is fine: [[[]]] */
  const char ok3[] = "\x80\x02]]]aa.";
  CHECK(hbm_pickle_parse((const uint8_t *)ok3, sizeof ok3 - 1, "d", &lim, &doc, &d) == HBM_OK);
  hbm_pickle_free(doc);
  PARSE_FAILS_LIM("\x80\x02]]]]aaa.", &lim, 8, "deeper than 3 levels");
  PARSE_FAILS_LIM("\x80\x02]]]]\x85\x85\x85.", &lim, 8, "deeper than 3");
  PARSE_FAILS_LIM("\x80\x02)\x85\x85\x85.", &lim, 5, "deeper than 3"); /* an empty tuple is a level too */
  PARSE_FAILS_LIM("\x80\x02((((N.", &lim, 5, "more than 3 MARKs");
  /* a dict is a level as a list is: {0: {0: {}}} is 3 deep, one more is too deep */
  const char dicts3[] = "\x80\x02}K\x00}K\x00}ss.";
  CHECK(hbm_pickle_parse((const uint8_t *)dicts3, sizeof dicts3 - 1, "d", &lim, &doc, &d) == HBM_OK);
  hbm_pickle_free(doc);
  PARSE_FAILS_LIM("\x80\x02}K\x00}K\x00}K\x00}sss.", &lim, 14, "deeper than 3 levels");
  /* default depth is 64 */
  char deep[2 + 70 + 69 + 1];
  memcpy(deep, "\x80\x02", 2);
  memset(deep + 2, ']', 70);
  memset(deep + 72, 'a', 69);
  deep[141] = '.';
  parse_fails_(deep, sizeof deep, NULL, 2 + 70 + 63, __LINE__, "deeper than 64", (const char *)NULL);
  char deep_ok[2 + 64 + 63 + 1];
  memcpy(deep_ok, "\x80\x02", 2);
  memset(deep_ok + 2, ']', 64);
  memset(deep_ok + 66, 'a', 63);
  deep_ok[129] = '.';
  doc = parse_ok_(deep_ok, sizeof deep_ok, "deep_ok", __LINE__);
  hbm_pickle_free(doc);

  hbm_pickle_limits nodes = {.max_nodes = 4};
  const char four[] = "\x80\x02(K\x01K\x02K\x03l.";
  CHECK(hbm_pickle_parse((const uint8_t *)four, sizeof four - 1, "n", &nodes, &doc, &d) == HBM_OK);
  CHECK(doc && hbm_pickle_node_count(doc) == 4);
  hbm_pickle_free(doc);
  PARSE_FAILS_LIM("\x80\x02(K\x01K\x02K\x03K\x04l.", &nodes, 11, "more than 4 values");
  /* shared values count once */
  const char shared[] = "\x80\x02(K\x01q\x00h\x00h\x00h\x00h\x00l.";
  CHECK(hbm_pickle_parse((const uint8_t *)shared, sizeof shared - 1, "n", &nodes, &doc, &d) == HBM_OK);
  CHECK(doc && hbm_pickle_node_count(doc) == 2 && hbm_pk_len(hbm_pickle_root(doc)) == 5);
  hbm_pickle_free(doc);

  hbm_pickle_limits memo = {.max_memo = 2};
  PARSE_FAILS_LIM("\x80\x04N\x94N\x94N\x94.", &memo, 7, "MEMOIZE", "limit of 2 entries");

  /* The defaults grow with the input: a value or memo entry costs a byte at
   * least, so a snapshot of gigabytes is not refused as malformed (a 147 MB
   * pickle of 70 Mi values was, at 64 Mi). */
  hbm_pickle_limits small = hbm_pickle_default_limits(1000), big = hbm_pickle_default_limits((size_t)3 << 30);
  CHECK(small.max_depth == 64 && small.max_nodes == 64ull << 20 && small.max_memo == 16ull << 20);
  CHECK(big.max_depth == 64 && big.max_nodes == 3ull << 30 && big.max_memo == 3ull << 30);

  /* bad arguments */
  CHECK(hbm_pickle_parse(NULL, 5, "x", NULL, &doc, &d) == HBM_EINVAL);
  CHECK(hbm_pickle_parse((const uint8_t *)"", 0, "x", NULL, NULL, &d) == HBM_EINVAL);
  /* diag may be NULL */
  CHECK(hbm_pickle_parse((const uint8_t *)"\x80\x02", 2, "x", NULL, &doc, NULL) == HBM_EPARSE);
  /* name may be NULL */
  memset(&d, 0, sizeof d);
  CHECK(hbm_pickle_parse((const uint8_t *)"\x80\x02", 2, NULL, NULL, &doc, &d) == HBM_EPARSE);
  CHECK(d.file[0] != 0);
  hbm_pickle_free(NULL);
  CHECK(hbm_pickle_root(NULL) == NULL);
  CHECK(hbm_pk_len(NULL) == 0 && hbm_pk_item(NULL, 0) == NULL && !hbm_pk_int(NULL, NULL));
  CHECK(!hbm_pk_float(NULL, NULL));
  /* a key looked up in no value, or in a value that is not a dict */
  CHECK(hbm_pk_get(NULL, "a") == NULL);
  const char list1[] = "\x80\x02](K\x01" "e.";
  CHECK(hbm_pickle_parse((const uint8_t *)list1, sizeof list1 - 1, "l", NULL, &doc, &d) == HBM_OK);
  CHECK(hbm_pk_get(hbm_pickle_root(doc), "a") == NULL);
  hbm_pickle_free(doc);
  CHECK(strcmp(hbm_pk_type_name(HBM_PK_DICT), "dict") == 0);
}

static void test_sniff(void) {
  CHECK(hbm_pickle_sniff((const uint8_t *)"\x80\x04\x95", 3));
  CHECK(hbm_pickle_sniff((const uint8_t *)"\x80\x02", 2));
  CHECK(hbm_pickle_sniff((const uint8_t *)"\x80\x05", 2));
  /* routed to the reader, which names the protocol or the truncation */
  CHECK(hbm_pickle_sniff((const uint8_t *)"\x80\x06", 2));
  CHECK(hbm_pickle_sniff((const uint8_t *)"\x80\x01", 2));
  CHECK(hbm_pickle_sniff((const uint8_t *)"\x80", 1));
  CHECK(!hbm_pickle_sniff((const uint8_t *)"(dp0\n", 5)); /* protocol 0: the text reader's header message */
  CHECK(!hbm_pickle_sniff((const uint8_t *)"hbm-trace 1\n", 12));
  CHECK(!hbm_pickle_sniff(NULL, 0));
}

/* ---- the generated fixtures ------------------------------------------------------------- */

static void test_fixtures_expected(void) {
  char *list;
  size_t len;
  if (load("EXPECTED", &list, &len)) {
    test_failures_++;
    return;
  }
  int files = 0;
  uint64_t basic_hash = 0;
  for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] == '#') continue;
    char name[256];
    unsigned long long hash, clen;
    if (sscanf(line, "%255s %llx %llu", name, &hash, &clen) != 3) {
      fprintf(stderr, "EXPECTED: bad line \"%s\"\n", line);
      test_failures_++;
      continue;
    }
    char *data;
    size_t n;
    if (load(name, &data, &n)) {
      test_failures_++;
      continue;
    }
    canon c = canon_bytes(data, n);
    if (c.hash != hash || c.len != clen) {
      fprintf(stderr, "%s: tree digest %016" PRIx64 "/%" PRIu64 ", Python's %016llx/%llu\n",
              name, c.hash, c.len, hash, clen);
      test_failures_++;
    }
    if (strstr(name, "snapshot_basic_")) {
      if (basic_hash) CHECK(basic_hash == c.hash); /* protocols 2, 4, 5: one tree */
      basic_hash = c.hash;
    }
    files++;
    free(data);
  }
  CHECK(files >= 8);
  CHECK(basic_hash != 0);
  free(list);
}

/* The fixture's shape, as a snapshot reader will walk it. */
static void test_fixture_shape(void) {
  char *data;
  size_t n;
  if (load("snapshot_basic_p4.pickle", &data, &n)) {
    test_failures_++;
    return;
  }
  hbm_pickle *doc = parse_ok_(data, n, "basic_p4", __LINE__);
  free(data);
  if (!doc) return;
  const hbm_pk_value *root = hbm_pickle_root(doc);
  const hbm_pk_value *segs = hbm_pk_get(root, "segments");
  const hbm_pk_value *traces = hbm_pk_get(root, "device_traces");
  CHECK(segs && segs->type == HBM_PK_LIST && hbm_pk_len(segs) >= 4);
  CHECK(traces && hbm_pk_len(traces) == 1);
  CHECK(hbm_pk_get(root, "allocator_settings") != NULL);
  CHECK(hbm_pk_get(root, "external_annotations") != NULL);
  int64_t v;
  /* key strings are shared through the memo, like in real files */
  const hbm_pk_value *s0 = hbm_pk_item(segs, 0), *s1 = hbm_pk_item(segs, 1);
  CHECK(s0 && s1 && s0->type == HBM_PK_DICT && s1->type == HBM_PK_DICT);
  if (s0 && s1 && s0->type == HBM_PK_DICT && s1->type == HBM_PK_DICT)
    CHECK(s0->u.dict.keys[0] == s1->u.dict.keys[0]);
  for (size_t i = 0; i < hbm_pk_len(segs); i++) {
    const hbm_pk_value *s = hbm_pk_item(segs, i);
    int64_t addr, total, sum = 0;
    CHECK(hbm_pk_int(hbm_pk_get(s, "address"), &addr) && addr > (int64_t)1 << 31);
    CHECK(hbm_pk_int(hbm_pk_get(s, "total_size"), &total));
    const hbm_pk_value *blocks = hbm_pk_get(s, "blocks");
    for (size_t k = 0; k < hbm_pk_len(blocks); k++) {
      int64_t baddr;
      CHECK(hbm_pk_int(hbm_pk_get(hbm_pk_item(blocks, k), "address"), &baddr));
      CHECK(baddr == addr + sum);
      CHECK(hbm_pk_int(hbm_pk_get(hbm_pk_item(blocks, k), "size"), &v));
      sum += v;
    }
    CHECK(sum == total);
    const hbm_pk_value *pool = hbm_pk_get(s, "segment_pool_id");
    CHECK(pool && pool->type == HBM_PK_TUPLE && hbm_pk_len(pool) == 2);
  }
  const hbm_pk_value *tr = hbm_pk_item(traces, 0);
  size_t actions[8] = {0};
  const char *names[8] = {"alloc", "free_requested", "free_completed", "segment_alloc",
                          "segment_free", NULL};
  int64_t streams_seen = 0;
  for (size_t i = 0; i < hbm_pk_len(tr); i++) {
    const hbm_pk_value *e = hbm_pk_item(tr, i);
    const char *a = hbm_pk_str(hbm_pk_get(e, "action"));
    CHECK(a != NULL);
    for (int k = 0; a && names[k]; k++)
      if (strcmp(a, names[k]) == 0) actions[k]++;
    int64_t stream;
    CHECK(hbm_pk_int(hbm_pk_get(e, "stream"), &stream));
    if (stream != 0) streams_seen = 1;
    const hbm_pk_value *frames = hbm_pk_get(e, "frames");
    CHECK(frames && frames->type == HBM_PK_LIST);
  }
  for (int k = 0; names[k]; k++) CHECK(actions[k] > 0);
  CHECK(actions[1] == actions[2] + 1); /* one free still pending at the dump */
  CHECK(streams_seen);
  double gc = -1;
  CHECK(hbm_pk_float(hbm_pk_get(hbm_pk_get(root, "allocator_settings"),
                                "garbage_collection_threshold"), &gc) && gc == 0.0);
  hbm_pickle_free(doc);
}

/* What each file in bad/ must do: fail with a substring, or parse (those are
 * well-formed pickles that are not valid snapshots; the snapshot reader
 * rejects them). */
static void test_bad_fixtures(void) {
  static const struct { const char *file, *want; } cases[] = {
    {"truncated_half.pickle", "truncated"},
    {"truncated_no_stop.pickle", "truncated"},
    {"truncated_p2.pickle", "truncated"},
    {"empty.pickle", "empty input"},
    {"global_reduce.pickle", "GLOBAL"},
    {"stack_global.pickle", "STACK_GLOBAL"},
    {"reduce.pickle", "REDUCE"},
    {"newobj.pickle", "NEWOBJ"},
    {"build.pickle", "BUILD"},
    {"persid.pickle", "BINPERSID"},
    {"ext1.pickle", "EXT1"},
    {"deep_nesting.pickle", "deeper than 64"},
    {"many_marks.pickle", "MARKs open"},
    {"absurd_binunicode.pickle", "exceeds the"},
    {"absurd_binunicode8.pickle", "exceeds the"},
    {"absurd_frame.pickle", "exceeds the"},
    {"absurd_long4.pickle", "exceeds the"},
    {"long_too_big.pickle", "does not fit"},
    {"memo_unset.pickle", "never set"},
    {"memo_huge_index.pickle", "limit"},
    {"unknown_opcode.pickle", "unknown opcode"},
    {"proto_6.pickle", "protocol 6"},
    {"recursive_list.pickle", "recursive"},
    {"set.pickle", "sets are not supported"},
    {"invalid_utf8.pickle", "invalid UTF-8"},
    {"unhashable_key.pickle", "cannot be a dict key"},
    {"stack_leftover.pickle", "STOP with 2 values"},
    {"missing_segments.pickle", NULL},
    {"missing_device_traces.pickle", NULL},
    {"not_a_dict.pickle", NULL},
    {"segment_without_blocks.pickle", NULL},
    {"trace_entry_without_addr.pickle", NULL},
  };
  size_t ncases = sizeof cases / sizeof cases[0];
  /* every file in bad/ has a case */
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/bad", fixtures_dir);
  DIR *dp = opendir(dir);
  CHECK(dp != NULL);
  size_t seen = 0;
  for (struct dirent *de; dp && (de = readdir(dp));) {
    if (de->d_name[0] == '.') continue;
    int known = 0;
    for (size_t i = 0; i < ncases; i++) known |= strcmp(de->d_name, cases[i].file) == 0;
    if (!known) {
      fprintf(stderr, "bad/%s has no expectation in %s\n", de->d_name, __FILE__);
      test_failures_++;
    }
    seen++;
  }
  if (dp) closedir(dp);
  CHECK(seen == ncases);
  for (size_t i = 0; i < ncases; i++) {
    char rel[300], *data;
    size_t n;
    snprintf(rel, sizeof rel, "bad/%s", cases[i].file);
    if (load(rel, &data, &n)) {
      test_failures_++;
      continue;
    }
    hbm_pickle *doc = NULL;
    hbm_diag d;
    memset(&d, 0, sizeof d);
    int rc = hbm_pickle_parse((const uint8_t *)data, n, rel, NULL, &doc, &d);
    if (cases[i].want) {
      if (rc != HBM_EPARSE || !strstr(d.message, cases[i].want) || !strncmp(d.message, "byte ", 5)) {
        fprintf(stderr, "%s: rc %d, message \"%s\", wanted \"%s\"\n", rel, rc, d.message,
                cases[i].want);
        test_failures_++;
      }
    } else {
      CHECK(rc == HBM_OK);
    }
    hbm_pickle_free(doc);
    free(data);
  }
}

/* Every prefix of a fixture fails cleanly (the whole file parses); seeded
 * byte mutations never crash and either parse or fail with a message. */
static void test_prefixes_and_mutations(uint64_t seed) {
  const char *files[] = {"snapshot_basic_p2.pickle", "snapshot_expandable_p4.pickle"};
  for (int f = 0; f < 2; f++) {
    char *data;
    size_t n;
    if (load(files[f], &data, &n)) {
      test_failures_++;
      continue;
    }
    size_t step = n / 3000 + 1;
    for (size_t cut = 1; cut < n; cut += step) {
      hbm_pickle *doc = NULL;
      hbm_diag d;
      d.message[0] = 0;
      int rc = hbm_pickle_parse((const uint8_t *)data, cut, files[f], NULL, &doc, &d);
      if (rc != HBM_EPARSE || d.offset > cut || !strstr(d.message, "truncated")) {
        fprintf(stderr, "%s cut at %zu: rc %d \"%s\"\n", files[f], cut, rc, d.message);
        test_failures_++;
        hbm_pickle_free(doc);
        break;
      }
    }
    uint64_t rng = seed + (uint64_t)f;
    size_t parsed = 0, iters = (size_t)(2000 * test_scale()) + 1;
    char *copy = malloc(n);
    for (size_t it = 0; copy && it < iters; it++) {
      memcpy(copy, data, n);
      int flips = 1 + (int)test_rand_below(&rng, 4);
      for (int k = 0; k < flips; k++)
        copy[test_rand_below(&rng, n)] = (char)test_rand(&rng);
      size_t len = test_rand_below(&rng, 8) == 0 ? test_rand_below(&rng, n + 1) : n;
      hbm_pickle *doc = NULL;
      hbm_diag d;
      d.message[0] = 0;
      int rc = hbm_pickle_parse((const uint8_t *)copy, len, files[f], NULL, &doc, &d);
      if (rc == HBM_OK) {
        parsed++;
        canon_of(hbm_pickle_root(doc)); /* the tree is walkable: finite, acyclic */
      } else if (rc != HBM_EPARSE || !d.message[0] || !strncmp(d.message, "byte ", 5) || d.offset > len) {
        fprintf(stderr, "mutation %zu: rc %d \"%s\"\n", it, rc, d.message);
        test_failures_++;
      }
      hbm_pickle_free(doc);
    }
    printf("%s: %zu prefixes fail cleanly; %zu/%zu mutations still parse\n", files[f],
           n / step, parsed, iters);
    free(copy);
    free(data);
  }
}

int main(void) {
  uint64_t seed = test_seed("test_pickle");
  find_fixtures();
  test_scalars();
  test_strings();
  test_containers();
  test_memo();
  test_refusals();
  test_malformed();
  test_limits();
  test_sniff();
  test_fixtures_expected();
  test_fixture_shape();
  test_bad_fixtures();
  test_prefixes_and_mutations(seed);
  return test_done("test_pickle");
}
