/* ordset.h: an ordered set of (hi, lo) 64-bit key pairs, each carrying a
 * 32-bit value. Keys order lexicographically: hi first, then lo.
 *
 * The caching policies keep their free blocks here keyed (size, address), so
 * lower_bound(size, 0) is PyTorch's best fit: the smallest block that holds
 * the request, the lowest address among equals (std::set::lower_bound with
 * BlockComparatorSize, per stream).
 *
 * hbm_ordset is a two-level sorted array: sorted chunks of up to 32 keys in
 * key order, and an index of each chunk's largest key. A lookup is a binary
 * search over the index and one inside a chunk (two or three cache lines for
 * the few hundred free blocks an allocator holds); a change moves at most one
 * chunk's entries, or splits or merges a chunk. No allocation per operation
 * once the chunks exist.
 *
 * Only insert (and replace, which may insert) allocates: a chunk when one
 * splits. hbm_ordset_reserve makes the next inserts unable to fail, so a
 * caller that must not stop half way (the caching model's operations) asks
 * for everything first and then changes its sets without error paths. Erase
 * never allocates.
 *
 * Invariants (hbm_ordset_check verifies each):
 *   O1 keys strictly increase through the chunks in order (no duplicates);
 *   O2 every chunk holds 1..32 keys and its index key is its largest;
 *   O3 count == the keys the chunks hold;
 *   O4 no chunk is listed twice;
 *   O5 head.nspare == the spare chunks listed (what hbm_ordset_reserve counts
 *      on), and the index has room for its chunks and every spare; its
 *      chunks lie inside its memory, from slot `front` on.
 *
 * hbm_ordref is the slow, obviously correct reference: a sorted array with
 * binary search and memmove. Same contract; tests run both side by side.
 */
#ifndef HBM_ORDSET_H
#define HBM_ORDSET_H

#include <stddef.h>
#include <stdint.h>

typedef struct hbm_okey {
  uint64_t hi, lo;
} hbm_okey;

static inline int hbm_okey_cmp(hbm_okey a, hbm_okey b) {
  if (a.hi != b.hi) return a.hi < b.hi ? -1 : 1;
  if (a.lo != b.lo) return a.lo < b.lo ? -1 : 1;
  return 0;
}

typedef void hbm_ordset_report_fn(void *arg, const char *message);

/* ---- the fast set ---- */
typedef struct hbm_ordset hbm_ordset;

/* HBM_OK or HBM_EHOSTMEM. */
int hbm_ordset_create(hbm_ordset **out);
void hbm_ordset_destroy(hbm_ordset *s);
size_t hbm_ordset_count(const hbm_ordset *s);
/* HBM_OK; HBM_EINVAL if the key is present (set unchanged); HBM_EHOSTMEM
 * (set unchanged). */
int hbm_ordset_insert(hbm_ordset *s, hbm_okey key, uint32_t value);
/* After HBM_OK, the next n inserts or replaces cannot fail for host memory,
 * whatever erases come between them; a promise made earlier and not yet
 * used up still holds. O(1) amortized: the room is spare chunks, kept for
 * later (at most n of them, and for n over 4 at most (count + 3n) / 32 + 2).
 * HBM_EHOSTMEM leaves the keys unchanged (some spares may have been made). */
static inline int hbm_ordset_reserve(hbm_ordset *s, size_t n);
/* What every set starts with, so that the common reservation is inline. */
typedef struct hbm_ordset_head {
  size_t nspare;  /* spare chunks: each one an insert that cannot fail */
  size_t pending; /* inserts still promised */
} hbm_ordset_head;
int hbm_ordset_reserve_more(hbm_ordset *s, size_t n);
static inline int hbm_ordset_reserve(hbm_ordset *s, size_t n) {
  hbm_ordset_head *h = (hbm_ordset_head *)(void *)s;
  if (n > h->nspare) return hbm_ordset_reserve_more(s, n);
  if (n > h->pending) h->pending = n;
  return 0; /* HBM_OK */
}
/* HBM_OK, or HBM_EINVAL if the key is absent (set unchanged). */
int hbm_ordset_erase(hbm_ordset *s, hbm_okey key);
/* Erases `old` and inserts `key` with `value` (old == key: the value only):
 * what a free block that shrinks or grows needs, in one pass where both keys
 * fall in one chunk. HBM_OK; HBM_EINVAL if old is absent or key, not old, is
 * present; HBM_EHOSTMEM. On error the set is unchanged. */
int hbm_ordset_replace(hbm_ordset *s, hbm_okey old, hbm_okey key, uint32_t value);
/* Each returns 1 and fills *found and *value (either may be NULL) when such
 * a key exists, else 0:
 *   find:        the key itself;
 *   lower_bound: the smallest key >= key;
 *   upper_bound: the smallest key >  key (in-order successor);
 *   below:       the largest key  <  key (in-order predecessor);
 *   first/last:  the smallest / largest key. */
int hbm_ordset_find(const hbm_ordset *s, hbm_okey key, uint32_t *value);
int hbm_ordset_lower_bound(const hbm_ordset *s, hbm_okey key, hbm_okey *found, uint32_t *value);
int hbm_ordset_upper_bound(const hbm_ordset *s, hbm_okey key, hbm_okey *found, uint32_t *value);
int hbm_ordset_below(const hbm_ordset *s, hbm_okey key, hbm_okey *found, uint32_t *value);
int hbm_ordset_first(const hbm_ordset *s, hbm_okey *found, uint32_t *value);
int hbm_ordset_last(const hbm_ordset *s, hbm_okey *found, uint32_t *value);
/* A place in the set, for walking keys in order without a search per key
 * (a best-fit placement that compares several candidates). Any change to
 * the set invalidates it. */
typedef struct hbm_ordpos {
  size_t chunk;
  uint32_t at;
} hbm_ordpos;
/* seek: lower_bound, and *pos its place; next: the key after *pos (moving
 * *pos there). Each returns 1 and fills *found and *value (either may be
 * NULL) when such a key exists, else 0 (then *pos means nothing). */
int hbm_ordset_seek(const hbm_ordset *s, hbm_okey key, hbm_ordpos *pos, hbm_okey *found, uint32_t *value);
int hbm_ordset_next(const hbm_ordset *s, hbm_ordpos *pos, hbm_okey *found, uint32_t *value);
/* erase and replace of the key at a place seek or next gave (no search for
 * it); then the place means nothing. replace_at returns as replace does. */
void hbm_ordset_erase_at(hbm_ordset *s, const hbm_ordpos *pos);
int hbm_ordset_replace_at(hbm_ordset *s, const hbm_ordpos *pos, hbm_okey key, uint32_t value);
/* Verifies O1..O5; returns the number of failures, each passed to report (may be NULL). */
int hbm_ordset_check(const hbm_ordset *s, hbm_ordset_report_fn *report, void *arg);

/* ---- the reference: sorted array (ordset_ref.c) ---- */
typedef struct hbm_ordref hbm_ordref;
int hbm_ordref_create(hbm_ordref **out);
void hbm_ordref_destroy(hbm_ordref *s);
size_t hbm_ordref_count(const hbm_ordref *s);
int hbm_ordref_insert(hbm_ordref *s, hbm_okey key, uint32_t value);
int hbm_ordref_erase(hbm_ordref *s, hbm_okey key);
int hbm_ordref_replace(hbm_ordref *s, hbm_okey old, hbm_okey key, uint32_t value);
int hbm_ordref_find(const hbm_ordref *s, hbm_okey key, uint32_t *value);
int hbm_ordref_lower_bound(const hbm_ordref *s, hbm_okey key, hbm_okey *found, uint32_t *value);
int hbm_ordref_upper_bound(const hbm_ordref *s, hbm_okey key, hbm_okey *found, uint32_t *value);
int hbm_ordref_below(const hbm_ordref *s, hbm_okey key, hbm_okey *found, uint32_t *value);
int hbm_ordref_first(const hbm_ordref *s, hbm_okey *found, uint32_t *value);
int hbm_ordref_last(const hbm_ordref *s, hbm_okey *found, uint32_t *value);
int hbm_ordref_seek(const hbm_ordref *s, hbm_okey key, hbm_ordpos *pos, hbm_okey *found, uint32_t *value);
int hbm_ordref_next(const hbm_ordref *s, hbm_ordpos *pos, hbm_okey *found, uint32_t *value);
void hbm_ordref_erase_at(hbm_ordref *s, const hbm_ordpos *pos);
int hbm_ordref_replace_at(hbm_ordref *s, const hbm_ordpos *pos, hbm_okey key, uint32_t value);

#endif
