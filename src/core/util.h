/* util.h: internal helpers shared by every layer. */
#ifndef HBM_UTIL_H
#define HBM_UTIL_H

#include <stdarg.h>

#include "hbm.h"

/* Numbers in hbm's text (JSON, traces, settings, reports, messages) use '.'
 * as the decimal point whatever LC_NUMERIC the program set: a program that
 * called setlocale(LC_ALL, "") in a comma locale would otherwise get invalid
 * JSON and have "0.8" refused. These run the C library's conversion under
 * the C locale for the calling thread only (uselocale), and fall back to the
 * program's locale where the C locale cannot be made. */
double hbm_strtod(const char *s, char **end);
int hbm_vsnprintf(char *buf, size_t len, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
int hbm_snprintf(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Whether the string s is name[0..len), which holds no NUL: a shorter s
 * differs at its NUL, before any byte past it is read. For the trace
 * reader's tokens, read in place: short, and one per line, where a library
 * call per compare showed in its profile. */
static inline int hbm_str_is(const char *s, const char *name, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (s[i] != name[i]) return 0;
  return !s[len];
}

/* hbm_tag_parse on name[0..len), which holds no NUL. */
int hbm_tag_parse_n(const char *name, size_t len, hbm_tag *tag);

/* Reports through the error handler; returns err so callers can
 * `return hbm_report_error(HBM_EINVAL, "...")`. */
int hbm_report_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Informational output, through the output handler (silent without one). */
void hbm_report_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A check function's failures: each counted, and said through report (when
 * not NULL) with prefix before it, up to `limit` messages (0: all). Every
 * structure's check takes the same report signature, so one counter serves. */
typedef struct hbm_checker {
  void (*report)(void *arg, const char *message);
  void *arg;
  const char *prefix; /* NULL: none */
  int limit;
  int failures;
} hbm_checker;
void hbm_check_fail(hbm_checker *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A check that cannot run for want of host memory says so through report with
 * this very string (compared by address), not as a failure: the structure may
 * well be sound, and hbm_check() answers HBM_EHOSTMEM, not HBM_ECORRUPT. */
extern const char hbm_check_no_memory_message[];
void hbm_check_no_memory(hbm_checker *k);
/* Passes a message from a nested check on to k: a failure, prefixed, or the
 * no-memory notice unchanged. */
void hbm_check_forward(hbm_checker *k, const char *message);

/* v rounded up to a multiple of a: by a mask, so a must be a power of two;
 * hbm_round_up takes any a > 0 (a resolution, a page of any size). */
static inline uint64_t hbm_align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }
static inline uint64_t hbm_round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
static inline int hbm_is_pow2(uint64_t v) { return v && !(v & (v - 1)); }

/* Makes room for element n of the array *p (elem bytes each, *cap held):
 * doubles from 64 until n < *cap. HBM_OK, or HBM_EHOSTMEM with *p and *cap
 * unchanged. */
int hbm_grow_array(void **p, size_t *cap, size_t n, size_t elem);

/* Settings parsers (zoned's, compact's): each key once. 1 when `key` is
 * among seen[0..*n), the keys read before it; else 0, and it joins them
 * (seen has room for every item the settings text can hold). */
int hbm_setting_repeated(const char **seen, unsigned *n, const char *key);

/* The length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong
 * forms, surrogates or code points past U+10FFFF), or 0; never reads past a
 * NUL. Reports written as UTF-8 replace what is not with U+FFFD. */
int hbm_utf8_len(const unsigned char *p);

/* Sizes above this are absurd for any device we model (1 PiB). */
#define HBM_MAX_SIZE (1ull << 50)
#define HBM_TRACE_MIN_CAPACITY (2ull << 20) /* one default granule: the least a trace's sim device opens at */

#endif
