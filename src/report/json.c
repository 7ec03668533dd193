/* json.c: see json.h. */
#include "report/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

void hbm_json_init(hbm_json *j) { memset(j, 0, sizeof *j); }
void hbm_json_release(hbm_json *j) { free(j->buf); memset(j, 0, sizeof *j); }

static void put(hbm_json *j, const char *s, size_t n) {
  if (j->failed) return;
  if (j->len + n + 1 > j->cap) {
    size_t cap = j->cap ? j->cap : 256;
    while (j->len + n + 1 > cap) cap *= 2;
    char *b = realloc(j->buf, cap);
    if (!b) { j->failed = HBM_JSON_NO_MEMORY; return; }
    j->buf = b;
    j->cap = cap;
  }
  memcpy(j->buf + j->len, s, n);
  j->len += n;
  j->buf[j->len] = 0;
}
static void puts_(hbm_json *j, const char *s) { put(j, s, strlen(s)); }

/* Before a value: a comma unless it is the first in its container or follows
 * a key. need_comma: 0 first, 1 comma needed, 2 just after a key. */
static void value_prefix(hbm_json *j) {
  if (j->depth == 0) return;
  if (j->need_comma[j->depth] == 1) puts_(j, ",");
  j->need_comma[j->depth] = 1;
}

/* need_comma keeps a state for 63 levels (0 is the top, outside any
 * container): a 64th would share one with its parent and lose commas, so
 * the document fails instead (json.h). */
enum { MAX_DEPTH = (int)(sizeof ((hbm_json *)0)->need_comma / sizeof (int)) - 1 };
static void open_(hbm_json *j, const char *c) {
  value_prefix(j);
  if (j->depth == MAX_DEPTH) j->failed = HBM_JSON_TOO_DEEP;
  puts_(j, c);
  if (j->failed) return;
  j->depth++;
  j->need_comma[j->depth] = 0;
}
static void close_(hbm_json *j, const char *c) {
  if (j->depth > 0) j->depth--;
  puts_(j, c);
}
void hbm_json_object_begin(hbm_json *j) { open_(j, "{"); }
void hbm_json_object_end(hbm_json *j) { close_(j, "}"); }
void hbm_json_array_begin(hbm_json *j) { open_(j, "["); }
void hbm_json_array_end(hbm_json *j) { close_(j, "]"); }

/* JSON is UTF-8 text (RFC 8259): a byte that is not part of a well-formed
 * sequence (a Latin-1 file name, say) is written as U+FFFD. */
static void quoted(hbm_json *j, const char *s) {
  puts_(j, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char esc[8];
    switch (*p) {
      case '"': puts_(j, "\\\""); break;
      case '\\': puts_(j, "\\\\"); break;
      case '\n': puts_(j, "\\n"); break;
      case '\r': puts_(j, "\\r"); break;
      case '\t': puts_(j, "\\t"); break;
      default:
        if (*p < 0x20) {
          snprintf(esc, sizeof esc, "\\u%04x", *p);
          puts_(j, esc);
        } else if (*p < 0x80) {
          put(j, (const char *)p, 1);
        } else {
          int n = hbm_utf8_len(p);
          if (n) {
            put(j, (const char *)p, (size_t)n);
            p += n - 1;
          } else {
            puts_(j, "\\ufffd");
          }
        }
    }
  }
  puts_(j, "\"");
}

void hbm_json_key(hbm_json *j, const char *key) {
  value_prefix(j);
  quoted(j, key);
  puts_(j, ":");
  j->need_comma[j->depth] = 2; /* the value that follows takes no comma */
}
void hbm_json_string(hbm_json *j, const char *s) {
  value_prefix(j);
  if (s) quoted(j, s); else puts_(j, "null");
}
void hbm_json_u64(hbm_json *j, uint64_t v) {
  char b[32];
  value_prefix(j);
  snprintf(b, sizeof b, "%llu", (unsigned long long)v);
  puts_(j, b);
}
void hbm_json_i64(hbm_json *j, int64_t v) {
  char b[32];
  value_prefix(j);
  snprintf(b, sizeof b, "%lld", (long long)v);
  puts_(j, b);
}
/* The shortest of 15, 16 and 17 significant digits that reads back as the
 * same double: every double survives the trip (17 always suffices), and a
 * value with few digits keeps them (0.1, 3, 1e+20, not 0.10000000000000001). */
void hbm_json_double(hbm_json *j, double v) {
  char b[40];
  value_prefix(j);
  if (!isfinite(v)) { puts_(j, "null"); return; }
  for (int digits = 15; digits <= 17; digits++) {
    hbm_snprintf(b, sizeof b, "%.*g", digits, v);
    if (hbm_strtod(b, NULL) == v) break;
  }
  puts_(j, b);
}
void hbm_json_bool(hbm_json *j, int v) { value_prefix(j); puts_(j, v ? "true" : "false"); }
void hbm_json_null(hbm_json *j) { value_prefix(j); puts_(j, "null"); }
void hbm_json_raw(hbm_json *j, const char *text) { value_prefix(j); puts_(j, text); }
void hbm_json_kv_string(hbm_json *j, const char *k, const char *s) { hbm_json_key(j, k); hbm_json_string(j, s); }
void hbm_json_kv_u64(hbm_json *j, const char *k, uint64_t v) { hbm_json_key(j, k); hbm_json_u64(j, v); }
void hbm_json_kv_double(hbm_json *j, const char *k, double v) { hbm_json_key(j, k); hbm_json_double(j, v); }
