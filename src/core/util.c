/* util.c: errors, callbacks, tags, sizes and the stats printer. */
#include <ctype.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* hbm.h's version macros, as text: one source for the version everywhere. */
#define HBM_TEXT_(x) #x
#define HBM_TEXT(x) HBM_TEXT_(x)
const char *hbm_version(void) {
  return HBM_TEXT(HBM_VERSION_MAJOR) "." HBM_TEXT(HBM_VERSION_MINOR) "." HBM_TEXT(HBM_VERSION_PATCH);
}

/* ---- C-locale numbers (util.h) ---- */
static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static void make_c_locale(void) { c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

/* The calling thread's locale before the switch, or 0 where there was none. */
static locale_t c_numeric_begin(void) {
  pthread_once(&c_locale_once, make_c_locale);
  return c_locale ? uselocale(c_locale) : (locale_t)0;
}
static void c_numeric_end(locale_t old) {
  if (old) uselocale(old);
}

double hbm_strtod(const char *s, char **end) {
  locale_t old = c_numeric_begin();
  double v = strtod(s, end);
  c_numeric_end(old);
  return v;
}

int hbm_vsnprintf(char *buf, size_t len, const char *fmt, va_list ap) {
  locale_t old = c_numeric_begin();
  int n = vsnprintf(buf, len, fmt, ap);
  c_numeric_end(old);
  return n;
}

int hbm_snprintf(char *buf, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = hbm_vsnprintf(buf, len, fmt, ap);
  va_end(ap);
  return n;
}

const char *hbm_strerror(int err) {
  switch (err) {
    case HBM_OK: return "success";
    case HBM_ENOMEM: return "out of device memory";
    case HBM_EINVAL: return "invalid argument";
    case HBM_EPARSE: return "malformed input";
    case HBM_EIO: return "input/output error";
    case HBM_EUNSUPPORTED: return "not supported (by the device, policy, CPU or runtime)";
    case HBM_ECORRUPT: return "invariant check failed";
    case HBM_EHOSTMEM: return "out of host memory";
    case HBM_EBUSY: return "busy (a pinned block, or a compaction pass the before_move hook refused)";
    default: return "unknown error";
  }
}

/* ---- callbacks: set by the program, read on error paths ----
 * A handler and its argument are set and read together under one lock, so a
 * report on one thread never pairs another thread's new handler with the old
 * argument. The handler runs outside the lock: it may set handlers itself. */
static pthread_mutex_t handler_lock = PTHREAD_MUTEX_INITIALIZER;
static hbm_error_fn *error_fn;
static void *error_arg;
static hbm_output_fn *output_fn;
static void *output_arg;

void hbm_set_error_handler(hbm_error_fn *fn, void *arg) {
  pthread_mutex_lock(&handler_lock);
  error_fn = fn, error_arg = arg;
  pthread_mutex_unlock(&handler_lock);
}
void hbm_set_output_handler(hbm_output_fn *fn, void *arg) {
  pthread_mutex_lock(&handler_lock);
  output_fn = fn, output_arg = arg;
  pthread_mutex_unlock(&handler_lock);
}

int hbm_report_error(int err, const char *fmt, ...) {
  pthread_mutex_lock(&handler_lock);
  hbm_error_fn *fn = error_fn;
  void *arg = error_arg;
  pthread_mutex_unlock(&handler_lock);
  if (!fn) return err;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  hbm_vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fn(err, msg, arg);
  return err;
}

void hbm_report_note(const char *fmt, ...) {
  pthread_mutex_lock(&handler_lock);
  hbm_output_fn *fn = output_fn;
  void *arg = output_arg;
  pthread_mutex_unlock(&handler_lock);
  if (!fn) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  hbm_vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fn(msg, arg);
}

int hbm_setting_repeated(const char **seen, unsigned *n, const char *key) {
  for (unsigned i = 0; i < *n; i++)
    if (!strcmp(key, seen[i])) return 1;
  seen[(*n)++] = key;
  return 0;
}

int hbm_grow_array(void **p, size_t *cap, size_t n, size_t elem) {
  if (n < *cap) return HBM_OK;
  size_t c = *cap ? *cap * 2 : 64;
  while (c <= n) c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q) return HBM_EHOSTMEM;
  *p = q;
  *cap = c;
  return HBM_OK;
}

const char hbm_check_no_memory_message[] = "no host memory to check";

void hbm_check_no_memory(hbm_checker *k) {
  if (k->report) k->report(k->arg, hbm_check_no_memory_message);
}

void hbm_check_forward(hbm_checker *k, const char *message) {
  if (message == hbm_check_no_memory_message) hbm_check_no_memory(k);
  else hbm_check_fail(k, "%s", message);
}

void hbm_check_fail(hbm_checker *k, const char *fmt, ...) {
  k->failures++;
  if (!k->report || (k->limit && k->failures > k->limit)) return;
  char msg[512];
  int n = snprintf(msg, sizeof msg, "%s", k->prefix ? k->prefix : "");
  va_list ap;
  va_start(ap, fmt);
  hbm_vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
  va_end(ap);
  k->report(k->arg, msg);
}

/* ---- tags ---- */
static const char *const tag_names[HBM_TAG_COUNT] = {"other", "param", "grad", "optim",
                                                      "act",   "comm",  "temp"};
const char *hbm_tag_name(hbm_tag tag) {
  /* Not "other": that is a tag of its own. Not NULL: callers print it. */
  return (unsigned)tag < HBM_TAG_COUNT ? tag_names[tag] : "invalid";
}
int hbm_tag_parse_n(const char *name, size_t len, hbm_tag *tag) {
  for (int i = 0; i < HBM_TAG_COUNT; i++)
    if (hbm_str_is(tag_names[i], name, len)) {
      *tag = (hbm_tag)i;
      return HBM_OK;
    }
  return HBM_EINVAL;
}
int hbm_tag_parse(const char *name, hbm_tag *tag) {
  if (!name || !tag) return HBM_EINVAL;
  return hbm_tag_parse_n(name, strlen(name), tag);
}

/* ---- counts ---- */
static int mul_u64(uint64_t *v, uint64_t m) {
  if (m && *v > UINT64_MAX / m) return 0;
  *v *= m;
  return 1;
}

/* The digits of a count spelling, whatever their number: 64 characters are
 * below 10^64 < 2^213, and times 2^40 (Ti) below 2^256. Limbs low first. */
typedef struct count_digits {
  uint32_t limb[8];
} count_digits;

static void digits_mul_add(count_digits *b, uint32_t m, uint32_t add) {
  uint64_t carry = add;
  for (int i = 0; i < 8; i++) {
    uint64_t t = (uint64_t)b->limb[i] * m + carry;
    b->limb[i] = (uint32_t)t;
    carry = t >> 32;
  }
}

/* Divides by d, returning the remainder. */
static uint32_t digits_div(count_digits *b, uint32_t d) {
  uint64_t rem = 0;
  for (int i = 8; i-- > 0;) {
    uint64_t cur = rem << 32 | b->limb[i];
    b->limb[i] = (uint32_t)(cur / d);
    rem = cur % d;
  }
  return (uint32_t)rem;
}

int hbm_count_parse(const char *text, uint64_t *count) {
  /* 64 characters hold any spelling of a 64-bit count, and keep the
   * exponent bookkeeping below far from int's range. */
  if (!text || !count || !isdigit((unsigned char)text[0]) || strnlen(text, 65) > 64) return HBM_EINVAL;
  const char *p = text;
  count_digits mant = {{0}}; /* the digits without the point; the value is mant x 10^exp10 */
  int exp10 = 0, zeros = 0, any = 0;
  for (int frac = 0;; p++) {
    if (*p == '.' && !frac) {
      frac = 1;
      continue;
    }
    if (!isdigit((unsigned char)*p)) break;
    unsigned d = (unsigned)(*p - '0');
    if (frac && d == 0) { /* held back: trailing zeros of a fraction change nothing */
      zeros++;
      continue;
    }
    for (; zeros > 0; zeros--, exp10--) digits_mul_add(&mant, 10, 0);
    digits_mul_add(&mant, 10, d);
    any |= d != 0;
    exp10 -= frac;
  }
  if (p[-1] == '.') return HBM_EINVAL; /* "5." */
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+') p++;
    if (!isdigit((unsigned char)*p)) return HBM_EINVAL;
    int e = 0; /* from 100 on, the value is 0 or past 2^64 whatever follows: read, not added */
    for (; isdigit((unsigned char)*p); p++)
      if (e < 100) e = e * 10 + (*p - '0');
    exp10 += e;
  }
  static const struct { char c; int dec, bin; } units[] = {{'K', 3, 10}, {'M', 6, 20}, {'G', 9, 30}, {'B', 9, 0}, {'T', 12, 40}};
  int bin = 0;
  if (*p) {
    size_t i = 0, n = sizeof units / sizeof units[0];
    while (i < n && toupper((unsigned char)*p) != units[i].c) i++;
    if (i == n) return HBM_EINVAL;
    if (p[1] == 'i' && !p[2] && units[i].bin && *p == units[i].c) bin = units[i].bin; /* "Ki", as in KiB */
    else if (!p[1]) exp10 += units[i].dec;
    else return HBM_EINVAL;
  }
  if (!any) { /* 0, 0.0, 0e99, 0Ki */
    *count = 0;
    return HBM_OK;
  }
  /* mant x 2^bin x 10^exp10. A fraction (exp10 = -k) is whole only where 5^k
   * divides mant (2^bin has no factor 5) and 2^k divides mant x 2^bin. */
  int shift = bin;
  for (; exp10 < 0; exp10++, shift--)
    if (digits_div(&mant, 5)) return HBM_EINVAL;
  for (; shift < 0; shift++)
    if (digits_div(&mant, 2)) return HBM_EINVAL;
  for (int i = 2; i < 8; i++)
    if (mant.limb[i]) return HBM_EINVAL; /* 2^64 or more, before any unit multiplies it */
  uint64_t v = (uint64_t)mant.limb[1] << 32 | mant.limb[0];
  if (!mul_u64(&v, 1ull << shift)) return HBM_EINVAL;
  for (; exp10 > 0; exp10--)
    if (!mul_u64(&v, 10)) return HBM_EINVAL;
  *count = v;
  return HBM_OK;
}

/* ---- sizes ---- */
int hbm_size_parse(const char *text, uint64_t *bytes) {
  if (!text || !bytes || !isdigit((unsigned char)text[0])) return HBM_EINVAL;
  const char *p = text;
  uint64_t whole = 0;
  while (isdigit((unsigned char)*p)) {
    unsigned d = (unsigned)(*p - '0');
    if (whole > (UINT64_MAX - d) / 10) return HBM_EINVAL;
    whole = whole * 10 + d;
    p++;
  }
  const char *frac = NULL; /* the fraction's digits, frac[0..nfrac) */
  size_t nfrac = 0;
  int has_frac = 0;
  if (*p == '.') {
    p++;
    if (!isdigit((unsigned char)*p)) return HBM_EINVAL;
    has_frac = 1;
    frac = p;
    while (isdigit((unsigned char)*p)) p++;
    nfrac = (size_t)(p - frac);
  }
  static const struct { const char *suffix; uint64_t mult; } units[] = {
      {"", 1},
      {"B", 1},
      {"KiB", 1ull << 10},
      {"MiB", 1ull << 20},
      {"GiB", 1ull << 30},
      {"TiB", 1ull << 40},
      {"PiB", 1ull << 50},
      {"KB", 1000ull},
      {"MB", 1000000ull},
      {"GB", 1000000000ull},
      {"TB", 1000000000000ull},
      {"PB", 1000000000000000ull},
  };
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcmp(p, units[i].suffix) != 0) continue;
    uint64_t mult = units[i].mult;
    if (has_frac && mult == 1) return HBM_EINVAL; /* fractional bytes */
    if (whole > UINT64_MAX / mult) return HBM_EINVAL;
    uint64_t v = whole * mult;
    /* The fraction times the unit, exactly: multiply its decimal digits from
     * the last, carrying, as on paper (a digit times a unit of at most 10^15
     * and the carry fit 64 bits). What carries out of the first digit is the
     * whole bytes; the first digit left decides the rounding, half up. */
    uint64_t carry = 0, first = 0;
    for (size_t k = nfrac; k-- > 0;) {
      uint64_t t = (uint64_t)(frac[k] - '0') * mult + carry;
      carry = t / 10;
      first = t % 10;
    }
    uint64_t f = carry + (nfrac && first >= 5);
    if (v > UINT64_MAX - f) return HBM_EINVAL;
    *bytes = v + f;
    return HBM_OK;
  }
  return HBM_EINVAL;
}

char *hbm_size_format(uint64_t bytes, char *buf, size_t len) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (!buf || !len) return buf; /* nowhere to write */
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    u++;
  }
  if (u > 0 && u < 5 && v >= 1023.995) { /* would print as 1024.00 of this unit */
    v /= 1024;
    u++;
  }
  if (u == 0)
    snprintf(buf, len, "%llu B", (unsigned long long)bytes);
  else
    hbm_snprintf(buf, len, "%.2f %s", v, units[u]);
  return buf;
}

/* The length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong
 * forms, surrogates or code points past U+10FFFF), or 0. */
int hbm_utf8_len(const unsigned char *p) {
  unsigned char lo = 0x80, hi = 0xbf;
  int n;
  if (*p >= 0xc2 && *p <= 0xdf) n = 2;
  else if (*p >= 0xe0 && *p <= 0xef) n = 3, lo = *p == 0xe0 ? 0xa0 : 0x80, hi = *p == 0xed ? 0x9f : 0xbf;
  else if (*p >= 0xf0 && *p <= 0xf4) n = 4, lo = *p == 0xf0 ? 0x90 : 0x80, hi = *p == 0xf4 ? 0x8f : 0xbf;
  else return 0;
  if (p[1] < lo || p[1] > hi) return 0; /* a NUL ends the check too */
  for (int k = 2; k < n; k++)
    if (p[k] < 0x80 || p[k] > 0xbf) return 0;
  return n;
}

double hbm_fragmentation_ratio(uint64_t free_total, uint64_t largest_free) {
  if (free_total == 0) return 0.0;
  if (largest_free == 0) return 1e9;
  double r = (double)free_total / (double)largest_free - 1.0;
  return r < 0 ? 0.0 : r;
}

/* ---- stats printer: one expansion of HBM_STATS_FIELDS per format ---- */
typedef struct out_buf { char *buf; size_t len, used; } out_buf;
static void outf(out_buf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void outf(out_buf *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = o->used < o->len ? o->len - o->used : 0;
  int n = hbm_vsnprintf(room ? o->buf + o->used : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) o->used += (size_t)n;
}
/* The fields that count events or blocks, not bytes: text gives them no size. */
static int is_count(const char *name) {
  static const char *const counts[] = {"allocs", "frees", "failures", "live_blocks", "backend_calls"};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
    if (!strcmp(name, counts[i])) return 1;
  return 0;
}
static void out_value_u64(out_buf *o, int json, const char *name, uint64_t v, int first) {
  char h[32];
  if (json)
    outf(o, "%s\"%s\":%llu", first ? "" : ",", name, (unsigned long long)v);
  else if (is_count(name))
    outf(o, "%-15s %llu\n", name, (unsigned long long)v);
  else
    outf(o, "%-15s %s (%llu)\n", name, hbm_size_format(v, h, sizeof h), (unsigned long long)v);
}
static void out_value_double(out_buf *o, int json, const char *name, double v, int first) {
  if (json && !isfinite(v)) /* JSON has no NaN or infinity */
    outf(o, "%s\"%s\":null", first ? "" : ",", name);
  else if (json)
    outf(o, "%s\"%s\":%.6g", first ? "" : ",", name, v);
  else
    outf(o, "%-15s %.4f\n", name, v);
}
#define OUT_VALUE(o, json, name, v, first)          \
  _Generic((v), double: out_value_double, default: out_value_u64)(o, json, name, v, first)

int hbm_stats_format(const hbm_stats *s, int json, char *buf, size_t len) {
  if (!s) return HBM_EINVAL;
  /* Another version's fields are not these: printing them would misname them. */
  if (s->version != HBM_STATS_VERSION)
    return hbm_report_error(HBM_EINVAL, "stats format: stats of version %d, this library knows version %d",
                            s->version, HBM_STATS_VERSION);
  if (!buf) len = 0; /* as snprintf(NULL, 0): the length needed */
  out_buf o = {buf, len, 0};
  if (len) buf[0] = 0;
  int first = 1;
  if (json) outf(&o, "{\"version\":%d,", s->version);
#define HBM_STATS_PRINT_(type, name, doc)       \
  OUT_VALUE(&o, json, #name, s->name, first); \
  first = 0;
  HBM_STATS_FIELDS(HBM_STATS_PRINT_)
#undef HBM_STATS_PRINT_
  if (json) {
    outf(&o, ",\"live_by_tag\":{");
    for (int t = 0; t < HBM_TAG_COUNT; t++)
      outf(&o, "%s\"%s\":%llu", t ? "," : "", tag_names[t], (unsigned long long)s->live_by_tag[t]);
    outf(&o, "},\"peak_live_by_tag\":{");
    for (int t = 0; t < HBM_TAG_COUNT; t++)
      outf(&o, "%s\"%s\":%llu", t ? "," : "", tag_names[t],
           (unsigned long long)s->peak_live_by_tag[t]);
    outf(&o, "}}");
  } else {
    for (int t = 0; t < HBM_TAG_COUNT; t++) {
      char name[32], h[32];
      snprintf(name, sizeof name, "live[%s]", tag_names[t]);
      outf(&o, "%-15s %s\n", name, hbm_size_format(s->live_by_tag[t], h, sizeof h));
    }
    for (int t = 0; t < HBM_TAG_COUNT; t++) {
      char name[32], h[32];
      snprintf(name, sizeof name, "peak_live[%s]", tag_names[t]);
      outf(&o, "%-15s %s\n", name, hbm_size_format(s->peak_live_by_tag[t], h, sizeof h));
    }
  }
  return (int)o.used;
}
