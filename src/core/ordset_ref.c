/* ordset_ref.c: the slow reference for hbm_ordset, a sorted array searched
 * by bisection and shifted with memmove. Obviously correct, O(n) per change;
 * used only by tests that compare it with hbm_ordset. */
#include <stdlib.h>
#include <string.h>

#include "core/ordset.h"
#include "hbm.h"

typedef struct entry {
  hbm_okey key;
  uint32_t value;
} entry;

struct hbm_ordref {
  entry *e;
  size_t n, cap;
};

int hbm_ordref_create(hbm_ordref **out) {
  hbm_ordref *s = calloc(1, sizeof *s);
  if (!s) return HBM_EHOSTMEM;
  *out = s;
  return HBM_OK;
}

void hbm_ordref_destroy(hbm_ordref *s) {
  if (!s) return;
  free(s->e);
  free(s);
}

size_t hbm_ordref_count(const hbm_ordref *s) { return s->n; }

/* Index of the first entry >= key. */
static size_t lb(const hbm_ordref *s, hbm_okey key) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (hbm_okey_cmp(s->e[mid].key, key) < 0) lo = mid + 1; else hi = mid;
  }
  return lo;
}

static int emit(const hbm_ordref *s, size_t i, hbm_okey *found, uint32_t *value) {
  if (i >= s->n) return 0;
  if (found) *found = s->e[i].key;
  if (value) *value = s->e[i].value;
  return 1;
}

int hbm_ordref_insert(hbm_ordref *s, hbm_okey key, uint32_t value) {
  size_t i = lb(s, key);
  if (i < s->n && hbm_okey_cmp(s->e[i].key, key) == 0) return HBM_EINVAL;
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    entry *e = realloc(s->e, cap * sizeof *e);
    if (!e) return HBM_EHOSTMEM;
    s->e = e;
    s->cap = cap;
  }
  memmove(s->e + i + 1, s->e + i, (s->n - i) * sizeof *s->e);
  s->e[i] = (entry){key, value};
  s->n++;
  return HBM_OK;
}

int hbm_ordref_erase(hbm_ordref *s, hbm_okey key) {
  size_t i = lb(s, key);
  if (i == s->n || hbm_okey_cmp(s->e[i].key, key) != 0) return HBM_EINVAL;
  memmove(s->e + i, s->e + i + 1, (s->n - i - 1) * sizeof *s->e);
  s->n--;
  return HBM_OK;
}

int hbm_ordref_find(const hbm_ordref *s, hbm_okey key, uint32_t *value) {
  size_t i = lb(s, key);
  if (i == s->n || hbm_okey_cmp(s->e[i].key, key) != 0) return 0;
  return emit(s, i, NULL, value);
}

int hbm_ordref_lower_bound(const hbm_ordref *s, hbm_okey key, hbm_okey *found, uint32_t *value) {
  return emit(s, lb(s, key), found, value);
}

int hbm_ordref_upper_bound(const hbm_ordref *s, hbm_okey key, hbm_okey *found, uint32_t *value) {
  size_t i = lb(s, key);
  if (i < s->n && hbm_okey_cmp(s->e[i].key, key) == 0) i++;
  return emit(s, i, found, value);
}

int hbm_ordref_seek(const hbm_ordref *s, hbm_okey key, hbm_ordpos *pos, hbm_okey *found, uint32_t *value) {
  *pos = (hbm_ordpos){lb(s, key), 0};
  return emit(s, pos->chunk, found, value);
}

int hbm_ordref_next(const hbm_ordref *s, hbm_ordpos *pos, hbm_okey *found, uint32_t *value) {
  return emit(s, ++pos->chunk, found, value);
}

int hbm_ordref_below(const hbm_ordref *s, hbm_okey key, hbm_okey *found, uint32_t *value) {
  size_t i = lb(s, key);
  if (i == 0) return 0;
  return emit(s, i - 1, found, value);
}

int hbm_ordref_first(const hbm_ordref *s, hbm_okey *found, uint32_t *value) {
  return emit(s, 0, found, value);
}

int hbm_ordref_last(const hbm_ordref *s, hbm_okey *found, uint32_t *value) {
  if (!s->n) return 0;
  return emit(s, s->n - 1, found, value);
}

int hbm_ordref_replace(hbm_ordref *s, hbm_okey old, hbm_okey key, uint32_t value) {
  if (!hbm_ordref_find(s, old, NULL)) return HBM_EINVAL;
  if (hbm_okey_cmp(old, key) == 0) {
    s->e[lb(s, old)].value = value;
    return HBM_OK;
  }
  int rc = hbm_ordref_insert(s, key, value);
  if (rc != HBM_OK) return rc;
  return hbm_ordref_erase(s, old);
}

void hbm_ordref_erase_at(hbm_ordref *s, const hbm_ordpos *pos) { hbm_ordref_erase(s, s->e[pos->chunk].key); }

int hbm_ordref_replace_at(hbm_ordref *s, const hbm_ordpos *pos, hbm_okey key, uint32_t value) {
  return hbm_ordref_replace(s, s->e[pos->chunk].key, key, value);
}
