/* ordset.c: hbm_ordset as a two-level sorted array (see ordset.h for the
 * contract and the invariants O1..O5).
 *
 * Keys live in chunks of up to CHUNK entries, each sorted; the chunks are in
 * key order and an index holds each chunk's largest key, so a lookup is a
 * binary search over the index and one inside a chunk: two or three cache
 * lines for the few hundred free blocks a caching allocator holds, where a
 * pointer tree takes a miss per level. A full chunk splits in two; a chunk
 * that falls below a quarter merges into a neighbour with room, and an empty
 * one goes; so chunks stay at least a quarter full on average and memory
 * stays proportional to the entries.
 *
 * The index has free slots at both ends, and a change to it moves the
 * shorter side: a set emptied from the front (a ledger releasing its oldest
 * mappings first) drops each chunk in constant time, where moving the whole
 * index made that quadratic (26.8M pages released from the front of a
 * 2^49-byte mapping: over a million chunks, each drop moving the rest). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ordset.h"
#include "hbm.h"

enum { CHUNK = 32 };
_Static_assert(HBM_OK == 0, "hbm_ordset_reserve's inline answer (ordset.h) is HBM_OK");

typedef struct entry {
  hbm_okey key;
  uint64_t value; /* 32 bits used; 64 keeps entries 8-byte aligned, 24 bytes */
} entry;

typedef struct chunk {
  uint32_t n;
  union {
    entry e[CHUNK];
    struct chunk *next_spare; /* while on the spare list */
  };
} chunk;

/* Spares: empty chunks kept for splits. Invariant (what makes a reservation
 * hold): cap >= nchunks + nspare, so a split that takes a spare never grows
 * the index either. */
struct hbm_ordset {
  hbm_ordset_head head; /* nspare: empty chunks on the spare list; pending: inserts still promised */
  chunk **chunks;  /* in key order: chunk_slots + front */
  hbm_okey *maxkey; /* maxkey[i] = chunks[i]->keys[n - 1]: maxkey_slots + front */
  chunk **chunk_slots;    /* the index's memory, cap slots (and maxkey_slots'): */
  hbm_okey *maxkey_slots; /* the index is its slots [front, front + nchunks) */
  size_t nchunks, cap, front;
  size_t count;
  chunk *spare;    /* list of empty chunks, head.nspare long */
  size_t keep;     /* spares kept when chunks are dropped (>= 1; the last reservation's need) */
};

int hbm_ordset_create(hbm_ordset **out) {
  hbm_ordset *s = calloc(1, sizeof *s);
  if (!s) return HBM_EHOSTMEM;
  s->keep = 1;
  *out = s;
  return HBM_OK;
}

void hbm_ordset_destroy(hbm_ordset *s) {
  if (!s) return;
  for (size_t i = 0; i < s->nchunks; i++) free(s->chunks[i]);
  while (s->spare) {
    chunk *c = s->spare;
    s->spare = c->next_spare;
    free(c);
  }
  free(s->chunk_slots);
  free(s->maxkey_slots);
  free(s);
}

size_t hbm_ordset_count(const hbm_ordset *s) { return s->count; }

static inline int lt(hbm_okey a, hbm_okey b) { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo); }

/* First chunk whose largest key is >= key (nchunks if none). */
static size_t find_chunk(const hbm_ordset *s, hbm_okey key) {
  size_t lo = 0, hi = s->nchunks;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (lt(s->maxkey[mid], key)) lo = mid + 1; else hi = mid;
  }
  return lo;
}

/* First position in c whose key is >= key (c->n if none). */
static uint32_t find_pos(const chunk *c, hbm_okey key) {
  uint32_t lo = 0, hi = c->n;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (lt(c->e[mid].key, key)) lo = mid + 1; else hi = mid;
  }
  return lo;
}

static chunk *chunk_new(hbm_ordset *s) {
  chunk *c = s->spare;
  if (c) {
    s->spare = c->next_spare;
    s->head.nspare--;
  } else {
    c = malloc(sizeof *c);
    if (!c) return NULL;
  }
  c->n = 0;
  return c;
}

static void spare_push(hbm_ordset *s, chunk *c) {
  c->next_spare = s->spare;
  s->spare = c;
  s->head.nspare++;
}

/* A chunk leaves the index: kept while the spares are fewer than a
 * reservation may need (its index slot stays free with it, so cap >=
 * nchunks + nspare holds), else freed. */
static void chunk_drop(hbm_ordset *s, chunk *c) {
  if (s->head.nspare < s->keep) spare_push(s, c);
  else free(c);
}

/* Moves the index to slot `front` of its memory (never allocates). */
static void index_centre(hbm_ordset *s, size_t front) {
  if (s->nchunks) {
    memmove(s->chunk_slots + front, s->chunks, s->nchunks * sizeof *s->chunks);
    memmove(s->maxkey_slots + front, s->maxkey, s->nchunks * sizeof *s->maxkey);
  }
  s->front = front;
  s->chunks = s->chunk_slots + front;
  s->maxkey = s->maxkey_slots + front;
}

/* Moves the index to new memory of `cap` slots, centred in it.
 * HBM_EHOSTMEM leaves it as it was. */
static int index_grow(hbm_ordset *s, size_t cap) {
  chunk **c = malloc(cap * sizeof *c);
  hbm_okey *m = malloc(cap * sizeof *m);
  if (!c || !m) {
    free(c);
    free(m);
    return HBM_EHOSTMEM;
  }
  size_t front = (cap - s->nchunks) / 2;
  if (s->nchunks) {
    memcpy(c + front, s->chunks, s->nchunks * sizeof *c);
    memcpy(m + front, s->maxkey, s->nchunks * sizeof *m);
  }
  free(s->chunk_slots);
  free(s->maxkey_slots);
  s->chunk_slots = c;
  s->maxkey_slots = m;
  s->cap = cap;
  s->front = front;
  s->chunks = c + front;
  s->maxkey = m + front;
  return HBM_OK;
}

/* Makes room for `more` chunk pointers beyond those in the index. */
static int index_reserve(hbm_ordset *s, size_t more) {
  if (more <= s->cap - s->nchunks) return HBM_OK;
  size_t cap = s->cap ? s->cap * 2 : 8;
  while (cap - s->nchunks < more) cap *= 2;
  return index_grow(s, cap);
}

/* Inserts c at position at, moving the shorter side of the index where it
 * has a free slot. Where neither the side that would move nor the other
 * has one, the index is centred again in its memory, in larger memory when
 * less than an eighth of it is free (best effort: the reservation already
 * made room, so this cannot fail). */
static void index_insert(hbm_ordset *s, size_t at, chunk *c) {
  int down = at < s->nchunks / 2;
  if (!(down ? s->front : s->cap - s->front - s->nchunks)) {
    size_t slack = s->cap - s->nchunks;
    if (slack >= s->cap / 8 || index_grow(s, s->cap * 2) != HBM_OK) index_centre(s, slack / 2);
    down = down && s->front; /* the slot after is free now (slack - slack / 2 >= 1) */
  }
  if (down) { /* the chunks before `at` move down a slot */
    memmove(s->chunks - 1, s->chunks, at * sizeof *s->chunks);
    memmove(s->maxkey - 1, s->maxkey, at * sizeof *s->maxkey);
    s->front--;
    s->chunks--;
    s->maxkey--;
  } else { /* those from `at` on move up one */
    memmove(s->chunks + at + 1, s->chunks + at, (s->nchunks - at) * sizeof *s->chunks);
    memmove(s->maxkey + at + 1, s->maxkey + at, (s->nchunks - at) * sizeof *s->maxkey);
  }
  s->chunks[at] = c;
  s->maxkey[at] = c->e[c->n - 1].key;
  s->nchunks++;
}

/* Removes position at, moving the shorter side. */
static void index_remove(hbm_ordset *s, size_t at) {
  if (at < s->nchunks / 2) {
    memmove(s->chunks + 1, s->chunks, at * sizeof *s->chunks);
    memmove(s->maxkey + 1, s->maxkey, at * sizeof *s->maxkey);
    s->front++;
    s->chunks++;
    s->maxkey++;
  } else {
    memmove(s->chunks + at, s->chunks + at + 1, (s->nchunks - at - 1) * sizeof *s->chunks);
    memmove(s->maxkey + at, s->maxkey + at + 1, (s->nchunks - at - 1) * sizeof *s->maxkey);
  }
  s->nchunks--;
}

int hbm_ordset_insert(hbm_ordset *s, hbm_okey key, uint32_t value) {
  if (s->nchunks == 0) {
    if (index_reserve(s, 1) != HBM_OK) return HBM_EHOSTMEM;
    chunk *c = chunk_new(s);
    if (!c) return HBM_EHOSTMEM;
    c->e[0].key = key;
    c->e[0].value = value;
    c->n = 1;
    index_insert(s, 0, c);
    s->count = 1;
    if (s->head.pending) s->head.pending--;
    return HBM_OK;
  }
  size_t ci = find_chunk(s, key);
  if (ci == s->nchunks) ci--; /* beyond every key: append to the last chunk */
  chunk *c = s->chunks[ci];
  uint32_t pos = find_pos(c, key);
  if (pos < c->n && hbm_okey_cmp(c->e[pos].key, key) == 0) return HBM_EINVAL;
  if (c->n == CHUNK) { /* split: the upper half moves to a new chunk after c */
    if (index_reserve(s, 1) != HBM_OK) return HBM_EHOSTMEM;
    chunk *d = chunk_new(s);
    if (!d) return HBM_EHOSTMEM;
    uint32_t half = CHUNK / 2;
    memcpy(d->e, c->e + half, (CHUNK - half) * sizeof *c->e);
    d->n = CHUNK - half;
    c->n = half;
    s->maxkey[ci] = c->e[half - 1].key;
    index_insert(s, ci + 1, d);
    if (pos > half) {
      c = d;
      ci++;
      pos -= half;
    }
  }
  memmove(c->e + pos + 1, c->e + pos, (c->n - pos) * sizeof *c->e);
  c->e[pos].key = key;
  c->e[pos].value = value;
  c->n++;
  if (pos == c->n - 1) s->maxkey[ci] = key;
  s->count++;
  if (s->head.pending) s->head.pending--;
  return HBM_OK;
}

/* How many spares n more inserts can take, erases between them or not.
 * Each insert takes at most one (n). And with Psi = the sum over chunks of
 * max(0, keys - 16): an insert raises Psi by at most 1; a split (of a full
 * chunk, 32 keys, into 16 + 16) lowers it by 16 and takes a spare; a merge
 * (a chunk under 8 keys into a neighbour, at most 24 keys after) raises it
 * by at most 7 and gives a spare back, kept while spares < keep; an erase
 * lowers it. So at any point the spares still needed are at most
 * ceil((Psi + inserts left) / 16), plus 1 for an empty set's first chunk,
 * and Psi <= keys / 2 <= (count + n) / 2. */
static size_t spares_needed(size_t count, size_t n) {
  size_t bound = (count + 3 * n + 31) / 32 + 1;
  return n < bound ? n : bound;
}

/* A small reservation keeps a spare per insert, more than the bound needs
 * in a small set, so that the next one like it is answered inline
 * (hbm_ordset_reserve) instead of here before every change. */
enum { SMALL_RESERVATION = 4 };

/* hbm_ordset_reserve (ordset.h) answers at once when there is a spare for
 * each insert (index room comes with them: cap >= nchunks + nspare). */
int hbm_ordset_reserve_more(hbm_ordset *s, size_t n) {
  if (n < s->head.pending) n = s->head.pending; /* an earlier promise still holds */
  size_t need = n <= SMALL_RESERVATION ? n : spares_needed(s->count, n);
  if (index_reserve(s, s->head.nspare > need ? s->head.nspare : need) != HBM_OK) return HBM_EHOSTMEM;
  while (s->head.nspare < need) {
    chunk *c = malloc(sizeof *c);
    if (!c) return HBM_EHOSTMEM; /* the spares made so far stay: harmless */
    spare_push(s, c);
  }
  s->keep = need > 1 ? need : 1;
  s->head.pending = n;
  return HBM_OK;
}

/* Erases the key at position pos of chunk ci. */
static inline __attribute__((always_inline)) void erase_found(hbm_ordset *s, size_t ci, uint32_t pos) {
  chunk *c = s->chunks[ci];
  memmove(c->e + pos, c->e + pos + 1, (c->n - pos - 1) * sizeof *c->e);
  c->n--;
  s->count--;
  if (c->n == 0) {
    index_remove(s, ci);
    chunk_drop(s, c);
    return;
  }
  s->maxkey[ci] = c->e[c->n - 1].key;
  if (c->n < CHUNK / 4) { /* merge into a neighbour with room */
    if (ci + 1 < s->nchunks && s->chunks[ci + 1]->n + c->n <= CHUNK * 3 / 4) {
      chunk *d = s->chunks[ci + 1]; /* c's keys go in front of d's */
      memmove(d->e + c->n, d->e, d->n * sizeof *d->e);
      memcpy(d->e, c->e, c->n * sizeof *c->e);
      d->n += c->n;
      index_remove(s, ci);
      chunk_drop(s, c);
    } else if (ci > 0 && s->chunks[ci - 1]->n + c->n <= CHUNK * 3 / 4) {
      chunk *d = s->chunks[ci - 1]; /* c's keys go after d's */
      memcpy(d->e + d->n, c->e, c->n * sizeof *c->e);
      d->n += c->n;
      s->maxkey[ci - 1] = d->e[d->n - 1].key;
      index_remove(s, ci);
      chunk_drop(s, c);
    }
  }
}

int hbm_ordset_erase(hbm_ordset *s, hbm_okey key) {
  size_t ci = find_chunk(s, key);
  if (ci == s->nchunks) return HBM_EINVAL;
  const chunk *c = s->chunks[ci];
  uint32_t pos = find_pos(c, key);
  if (pos == c->n || hbm_okey_cmp(c->e[pos].key, key) != 0) return HBM_EINVAL;
  erase_found(s, ci, pos);
  return HBM_OK;
}

void hbm_ordset_erase_at(hbm_ordset *s, const hbm_ordpos *pos) { erase_found(s, pos->chunk, pos->at); }

/* Replaces `old`, the key at position i of chunk ci (see hbm_ordset_replace). */
static inline __attribute__((always_inline)) int replace_found(hbm_ordset *s, size_t ci, uint32_t i, hbm_okey old, hbm_okey key, uint32_t value) {
  chunk *c = s->chunks[ci];
  int dir = hbm_okey_cmp(key, old);
  if (dir == 0) {
    c->e[i].value = value;
    return HBM_OK;
  }
  /* Most replaces keep the key's place: a block shrinks or grows by less
   * than the gap to its neighbours' sizes. Then it is written where it is. */
  int after_left = i > 0 ? lt(c->e[i - 1].key, key) : ci == 0 || lt(s->maxkey[ci - 1], key);
  int before_right = i + 1 < c->n ? lt(key, c->e[i + 1].key) : ci + 1 == s->nchunks || lt(key, s->chunks[ci + 1]->e[0].key);
  if (after_left && before_right) {
    c->e[i].key = key;
    c->e[i].value = value;
    if (i + 1 == c->n) s->maxkey[ci] = key;
    return HBM_OK;
  }
  /* key stays in c when it lies between the chunks either side (O1 holds,
   * and no other chunk can hold it); otherwise insert, then erase. */
  int above_prev = ci == 0 || lt(s->maxkey[ci - 1], key);
  int below_next = ci + 1 == s->nchunks || lt(key, s->chunks[ci + 1]->e[0].key);
  if (!above_prev || !below_next) {
    int rc = hbm_ordset_insert(s, key, value);
    if (rc != HBM_OK) return rc;
    return hbm_ordset_erase(s, old); /* present: cannot fail */
  }
  uint32_t j = find_pos(c, key);
  if (j < c->n && hbm_okey_cmp(c->e[j].key, key) == 0) return HBM_EINVAL;
  if (dir > 0) { /* j > i: the entries between move down one */
    memmove(c->e + i, c->e + i + 1, (j - 1 - i) * sizeof *c->e);
    j--;
  } else { /* j <= i: they move up one */
    memmove(c->e + j + 1, c->e + j, (i - j) * sizeof *c->e);
  }
  c->e[j].key = key;
  c->e[j].value = value;
  /* From key itself where it is the last: reading back the 16 bytes just
   * written as two halves stalls the load. */
  s->maxkey[ci] = j + 1 == c->n ? key : c->e[c->n - 1].key;
  return HBM_OK;
}

int hbm_ordset_replace(hbm_ordset *s, hbm_okey old, hbm_okey key, uint32_t value) {
  size_t ci = find_chunk(s, old);
  if (ci == s->nchunks) return HBM_EINVAL;
  const chunk *c = s->chunks[ci];
  uint32_t i = find_pos(c, old);
  if (i == c->n || hbm_okey_cmp(c->e[i].key, old) != 0) return HBM_EINVAL;
  return replace_found(s, ci, i, old, key, value);
}

int hbm_ordset_replace_at(hbm_ordset *s, const hbm_ordpos *pos, hbm_okey key, uint32_t value) {
  return replace_found(s, pos->chunk, pos->at, s->chunks[pos->chunk]->e[pos->at].key, key, value);
}

static int emit(const chunk *c, uint32_t pos, hbm_okey *found, uint32_t *value) {
  if (found) *found = c->e[pos].key;
  if (value) *value = (uint32_t)c->e[pos].value;
  return 1;
}

int hbm_ordset_find(const hbm_ordset *s, hbm_okey key, uint32_t *value) {
  size_t ci = find_chunk(s, key);
  if (ci == s->nchunks) return 0;
  const chunk *c = s->chunks[ci];
  uint32_t pos = find_pos(c, key);
  if (pos == c->n || hbm_okey_cmp(c->e[pos].key, key) != 0) return 0;
  return emit(c, pos, NULL, value);
}

int hbm_ordset_lower_bound(const hbm_ordset *s, hbm_okey key, hbm_okey *found, uint32_t *value) {
  size_t ci = find_chunk(s, key);
  if (ci == s->nchunks) return 0;
  const chunk *c = s->chunks[ci];
  return emit(c, find_pos(c, key), found, value); /* maxkey >= key: a position exists */
}

int hbm_ordset_upper_bound(const hbm_ordset *s, hbm_okey key, hbm_okey *found, uint32_t *value) {
  size_t ci = find_chunk(s, key);
  if (ci == s->nchunks) return 0;
  const chunk *c = s->chunks[ci];
  uint32_t pos = find_pos(c, key);
  if (hbm_okey_cmp(c->e[pos].key, key) == 0) pos++;
  if (pos == c->n) {
    if (++ci == s->nchunks) return 0;
    c = s->chunks[ci];
    pos = 0;
  }
  return emit(c, pos, found, value);
}

int hbm_ordset_seek(const hbm_ordset *s, hbm_okey key, hbm_ordpos *pos, hbm_okey *found, uint32_t *value) {
  size_t ci = find_chunk(s, key);
  if (ci == s->nchunks) return 0;
  const chunk *c = s->chunks[ci];
  *pos = (hbm_ordpos){ci, find_pos(c, key)};
  return emit(c, pos->at, found, value);
}

int hbm_ordset_next(const hbm_ordset *s, hbm_ordpos *pos, hbm_okey *found, uint32_t *value) {
  if (++pos->at == s->chunks[pos->chunk]->n) {
    if (pos->chunk + 1 == s->nchunks) return 0;
    *pos = (hbm_ordpos){pos->chunk + 1, 0};
  }
  return emit(s->chunks[pos->chunk], pos->at, found, value);
}

int hbm_ordset_below(const hbm_ordset *s, hbm_okey key, hbm_okey *found, uint32_t *value) {
  size_t ci = find_chunk(s, key);
  uint32_t pos = ci < s->nchunks ? find_pos(s->chunks[ci], key) : 0;
  if (ci == s->nchunks || pos == 0) { /* the answer is the last key of the chunk before */
    if (ci == 0) return 0;
    const chunk *p = s->chunks[ci - 1];
    return emit(p, p->n - 1, found, value);
  }
  return emit(s->chunks[ci], pos - 1, found, value);
}

int hbm_ordset_first(const hbm_ordset *s, hbm_okey *found, uint32_t *value) {
  if (!s->nchunks) return 0;
  return emit(s->chunks[0], 0, found, value);
}

int hbm_ordset_last(const hbm_ordset *s, hbm_okey *found, uint32_t *value) {
  if (!s->nchunks) return 0;
  const chunk *c = s->chunks[s->nchunks - 1];
  return emit(c, c->n - 1, found, value);
}

/* ---- invariant check ---- */

static int fail(hbm_ordset_report_fn *report, void *arg, const char *msg) {
  if (report) report(arg, msg);
  return 1;
}

int hbm_ordset_check(const hbm_ordset *s, hbm_ordset_report_fn *report, void *arg) {
  int failures = 0;
  char msg[160];
  size_t total = 0;
  int have_prev = 0;
  hbm_okey prev = {0, 0};
  for (size_t i = 0; i < s->nchunks && !failures; i++) {
    const chunk *c = s->chunks[i];
    if (c->n == 0 || c->n > CHUNK) {
      snprintf(msg, sizeof msg, "ordset: O2 chunk %zu holds %u keys (1..%d)", i, c->n, CHUNK);
      failures += fail(report, arg, msg);
      break;
    }
    for (uint32_t k = 0; k < c->n && !failures; k++) {
      if (have_prev && hbm_okey_cmp(prev, c->e[k].key) >= 0) {
        /* A chunk listed twice (O4) shows here first: its keys, non-empty
         * (O2), come round again at its second place. So the index is
         * searched for it only then, and the check stays linear. */
        size_t j = 0;
        while (k == 0 && j < i && s->chunks[j] != c) j++;
        if (k == 0 && j < i) snprintf(msg, sizeof msg, "ordset: O4 chunk %zu listed twice (at %zu too)", i, j);
        else snprintf(msg, sizeof msg, "ordset: O1 keys out of order in chunk %zu at %u", i, k);
        failures += fail(report, arg, msg);
      }
      prev = c->e[k].key;
      have_prev = 1;
    }
    if (!failures && hbm_okey_cmp(s->maxkey[i], c->e[c->n - 1].key) != 0) {
      snprintf(msg, sizeof msg, "ordset: O2 index key of chunk %zu is not its largest", i);
      failures += fail(report, arg, msg);
    }
    total += c->n;
  }
  if (!failures && total != s->count) {
    snprintf(msg, sizeof msg, "ordset: O3 count %zu but chunks hold %zu", s->count, total);
    failures += fail(report, arg, msg);
  }
  size_t spares = 0;
  for (const chunk *c = s->spare; c && spares <= s->head.nspare; c = c->next_spare) spares++;
  int placed = s->chunk_slots ? s->chunks == s->chunk_slots + s->front && s->maxkey == s->maxkey_slots + s->front
                               : !s->chunks && !s->maxkey && !s->cap;
  if (spares != s->head.nspare || s->cap < s->nchunks + s->head.nspare || s->front > s->cap - s->nchunks || !placed) {
    snprintf(msg, sizeof msg,
             "ordset: O5 %zu spare chunks listed, %zu counted; index room %zu for %zu chunks from slot %zu and the spares",
             spares, s->head.nspare, s->cap, s->nchunks, s->front);
    failures += fail(report, arg, msg);
  }
  return failures;
}
