/* addrmap.c: see addrmap.h. */
#include "core/addrmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"

#define EMPTY UINT64_MAX
static inline uint64_t slot_of(uint64_t key, uint64_t cap) {
  return ((key >> 9) * 0x9E3779B97F4A7C15ull >> 17) & (cap - 1);
}

void hbm_addrmap_init(hbm_addrmap *m) { memset(m, 0, sizeof *m); }
void hbm_addrmap_release(hbm_addrmap *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

void hbm_addrmap_clear(hbm_addrmap *m) {
  if (m->cap) memset(m->keys, 0xff, m->cap * sizeof *m->keys);
  m->used = 0;
}

static int grow(hbm_addrmap *m) {
  uint64_t cap = m->cap ? m->cap * 2 : 16;
  uint64_t *k = malloc(cap * sizeof *k), *v = malloc(cap * sizeof *v);
  if (!k || !v) { free(k); free(v); return HBM_EHOSTMEM; }
  memset(k, 0xff, cap * sizeof *k);
  for (uint64_t i = 0; i < m->cap; i++) {
    if (m->keys[i] == EMPTY) continue;
    uint64_t h = slot_of(m->keys[i], cap);
    while (k[h] != EMPTY) h = (h + 1) & (cap - 1);
    k[h] = m->keys[i];
    v[h] = m->vals[i];
  }
  free(m->keys);
  free(m->vals);
  m->keys = k;
  m->vals = v;
  m->cap = cap;
  return HBM_OK;
}

/* 1 if `extra` more keys would fill the table past half (its load limit). */
static inline int over_half(const hbm_addrmap *m, uint64_t extra) { return (m->used + extra) * 2 > m->cap; }

int hbm_addrmap_grow_for(hbm_addrmap *m, uint64_t extra) {
  while (over_half(m, extra))
    if (grow(m) != HBM_OK) return HBM_EHOSTMEM;
  return HBM_OK;
}

int hbm_addrmap_put(hbm_addrmap *m, uint64_t key, uint64_t val) {
  if (over_half(m, 1) && hbm_addrmap_reserve(m, 1) != HBM_OK) return HBM_EHOSTMEM; /* the call only to grow */
  uint64_t h = slot_of(key, m->cap);
  while (m->keys[h] != EMPTY && m->keys[h] != key) h = (h + 1) & (m->cap - 1);
  if (m->keys[h] == EMPTY) m->used++;
  m->keys[h] = key;
  m->vals[h] = val;
  return HBM_OK;
}

static uint64_t find(const hbm_addrmap *m, uint64_t key) {
  if (!m->cap) return EMPTY;
  uint64_t h = slot_of(key, m->cap);
  while (m->keys[h] != EMPTY) {
    if (m->keys[h] == key) return h;
    h = (h + 1) & (m->cap - 1);
  }
  return EMPTY;
}

int hbm_addrmap_get(const hbm_addrmap *m, uint64_t key, uint64_t *val) {
  uint64_t h = find(m, key);
  if (h == EMPTY) return 0;
  if (val) *val = m->vals[h];
  return 1;
}

int hbm_addrmap_take(hbm_addrmap *m, uint64_t key, uint64_t *val) {
  uint64_t h = find(m, key);
  if (h == EMPTY) return 0;
  if (val) *val = m->vals[h];
  uint64_t mask = m->cap - 1, j = h;
  m->keys[h] = EMPTY;
  for (;;) { /* shift back later members of the probe run */
    j = (j + 1) & mask;
    if (m->keys[j] == EMPTY) break;
    uint64_t home = slot_of(m->keys[j], m->cap);
    if ((j > h && (home <= h || home > j)) || (j < h && home <= h && home > j)) {
      m->keys[h] = m->keys[j];
      m->vals[h] = m->vals[j];
      m->keys[j] = EMPTY;
      h = j;
    }
  }
  m->used--;
  return 1;
}

void hbm_addrmap_each(const hbm_addrmap *m, void (*fn)(void *, uint64_t, uint64_t), void *arg) {
  for (uint64_t i = 0; i < m->cap; i++)
    if (m->keys[i] != EMPTY) fn(arg, m->keys[i], m->vals[i]);
}

int hbm_addrmap_check(const hbm_addrmap *m, void (*report)(void *arg, const char *message), void *arg) {
  int failures = 0;
  char msg[160];
#define ADDRMAP_FAIL(...)                          \
  do {                                             \
    snprintf(msg, sizeof msg, "addrmap: " __VA_ARGS__); \
    if (report) report(arg, msg);                  \
    failures++;                                    \
  } while (0)
  if (m->cap & (m->cap - 1)) ADDRMAP_FAIL("capacity %llu is not a power of two", (unsigned long long)m->cap);
  if (m->used * 2 > m->cap) ADDRMAP_FAIL("%llu keys in %llu slots, more than half", (unsigned long long)m->used, (unsigned long long)m->cap);
  if (failures) return failures;
  uint64_t occupied = 0;
  for (uint64_t i = 0; i < m->cap; i++) {
    uint64_t key = m->keys[i];
    if (key == EMPTY) continue;
    occupied++;
    /* the probe from the key's hash slot must reach slot i, this copy first */
    for (uint64_t h = slot_of(key, m->cap); h != i; h = (h + 1) & (m->cap - 1)) {
      if (m->keys[h] == EMPTY) {
        ADDRMAP_FAIL("key %#llx at slot %llu is cut off from its hash slot by an empty slot", (unsigned long long)key, (unsigned long long)i);
        break;
      }
      if (m->keys[h] == key) {
        ADDRMAP_FAIL("key %#llx is held twice", (unsigned long long)key);
        break;
      }
    }
    if (failures > 8) return failures;
  }
  if (occupied != m->used) ADDRMAP_FAIL("%llu slots occupied, used counts %llu", (unsigned long long)occupied, (unsigned long long)m->used);
#undef ADDRMAP_FAIL
  return failures;
}
