/* json.h: a small JSON writer into a growing buffer (no printing). Used by
 * every report so keys and number formats are written one way. */
#ifndef HBM_JSON_H
#define HBM_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef struct hbm_json {
  char *buf;
  size_t len, cap;
  int need_comma[64]; /* per nesting level */
  int depth;
  int failed;         /* 0, or why the document failed (hbm_json_failure); buf holds
                       * what was written before */
} hbm_json;

typedef enum hbm_json_failure {
  HBM_JSON_NO_MEMORY = 1, /* a host allocation failed */
  HBM_JSON_TOO_DEEP = 2   /* a container opened 64 levels deep */
} hbm_json_failure;

void hbm_json_init(hbm_json *j);
void hbm_json_release(hbm_json *j);
void hbm_json_object_begin(hbm_json *j);
void hbm_json_object_end(hbm_json *j);
void hbm_json_array_begin(hbm_json *j);
void hbm_json_array_end(hbm_json *j);
void hbm_json_key(hbm_json *j, const char *key);    /* then one value */
void hbm_json_string(hbm_json *j, const char *s); /* NULL: null; bytes not UTF-8: U+FFFD */
void hbm_json_u64(hbm_json *j, uint64_t v);
void hbm_json_i64(hbm_json *j, int64_t v);
/* The shortest of %.15g, %.16g, %.17g that reads back (strtod) as v: no double
 * loses its value; integer-valued ones print as integers (3, not 3.0).
 * Non-finite values become null. */
void hbm_json_double(hbm_json *j, double v);
void hbm_json_bool(hbm_json *j, int v);
void hbm_json_null(hbm_json *j);
/* key + value shorthands */
void hbm_json_kv_string(hbm_json *j, const char *key, const char *s);
void hbm_json_kv_u64(hbm_json *j, const char *key, uint64_t v);
void hbm_json_kv_double(hbm_json *j, const char *key, double v);
/* Appends raw text (already valid JSON). */
void hbm_json_raw(hbm_json *j, const char *text);

#endif
