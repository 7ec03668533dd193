/* addrmap.h: a map from device address to a 64-bit value (open addressing,
 * linear probing, backward-shift deletion). Invariant: used * 2 <= cap; a key
 * sits in the probe run starting at its hash; UINT64_MAX is never a key. */
#ifndef HBM_ADDRMAP_H
#define HBM_ADDRMAP_H

#include <stdint.h>

typedef struct hbm_addrmap {
  uint64_t *keys, *vals;
  uint64_t cap, used;
} hbm_addrmap;

void hbm_addrmap_init(hbm_addrmap *m);
void hbm_addrmap_release(hbm_addrmap *m);
/* HBM_OK, or HBM_EHOSTMEM. Replaces the value of an existing key. */
int hbm_addrmap_put(hbm_addrmap *m, uint64_t key, uint64_t val);
/* Makes room for `extra` more keys, so the next `extra` puts cannot fail.
 * HBM_OK or HBM_EHOSTMEM (then the map is unchanged). Inline: callers that
 * reserve before every change (zoned) pay a comparison while there is room. */
int hbm_addrmap_grow_for(hbm_addrmap *m, uint64_t extra);
static inline int hbm_addrmap_reserve(hbm_addrmap *m, uint64_t extra) {
  return (m->used + extra) * 2 <= m->cap ? 0 /* HBM_OK */ : hbm_addrmap_grow_for(m, extra);
}
/* Removes every key, keeping the capacity (never allocates). */
void hbm_addrmap_clear(hbm_addrmap *m);
/* 1 and *val if found. */
int hbm_addrmap_get(const hbm_addrmap *m, uint64_t key, uint64_t *val);
/* 1 and *val if it was there (then removed). */
int hbm_addrmap_take(hbm_addrmap *m, uint64_t key, uint64_t *val);
/* Visits every entry (unordered). */
void hbm_addrmap_each(const hbm_addrmap *m, void (*fn)(void *arg, uint64_t key, uint64_t val), void *arg);
/* Verifies the invariant: cap is 0 or a power of two, used * 2 <= cap, used
 * equals the occupied slots, and each key is found from its hash slot (no
 * empty slot before it in its probe run, no copy of it earlier in the run).
 * Returns the number of failures, each passed to report (may be NULL). */
int hbm_addrmap_check(const hbm_addrmap *m, void (*report)(void *arg, const char *message), void *arg);

#endif
