/* test_caching_ordset.c: the ordered set behind the caching policies'
 * free-block sets (ordset.c, a two-level sorted array), compared operation
 * by operation with the sorted-array reference, with the invariant check
 * after every change. Seedable (HBM_SEED).
 *
 * malloc and realloc are wrapped (CMakeLists.txt) so that host memory can be
 * made to fail: after hbm_ordset_reserve(n), n inserts with erases between
 * them must succeed while every allocation fails. */
#include "core/ordset.h"
#include "hbm.h"
#include "testutil.h"

void *__real_malloc(size_t n);
void *__real_realloc(void *p, size_t n);
static int host_fails; /* every malloc and realloc fails while set */
void *__wrap_malloc(size_t n) { return host_fails ? NULL : __real_malloc(n); }
void *__wrap_realloc(void *p, size_t n) { return host_fails ? NULL : __real_realloc(p, n); }

static void report(void *arg, const char *message) {
  (void)arg;
  fprintf(stderr, "%s\n", message);
}

static hbm_okey random_key(uint64_t *rng, int narrow) {
  /* Narrow keys collide often (duplicates, equal hi with different lo), as
   * free blocks of equal size do; wide keys exercise the full 64 bits. */
  hbm_okey k;
  if (narrow) {
    k.hi = test_rand_below(rng, 16);
    k.lo = test_rand_below(rng, 64);
  } else {
    k.hi = test_rand(rng);
    k.lo = test_rand(rng);
  }
  return k;
}

static int same_answer(int a, hbm_okey ka, uint32_t va, int b, hbm_okey kb, uint32_t vb) {
  if (a != b) return 0;
  if (!a) return 1;
  return hbm_okey_cmp(ka, kb) == 0 && va == vb;
}

/* Walks both sets in key order: the same keys and values, to the same end,
 * every key the reference holds. */
static void same_walk(const hbm_ordset *s, const hbm_ordref *r) {
  hbm_okey ka, kb;
  uint32_t va, vb;
  int a = hbm_ordset_first(s, &ka, &va), b = hbm_ordref_first(r, &kb, &vb);
  size_t walked = 0;
  while (a && b) {
    CHECK(same_answer(a, ka, va, b, kb, vb));
    walked++;
    a = hbm_ordset_upper_bound(s, ka, &ka, &va);
    b = hbm_ordref_upper_bound(r, kb, &kb, &vb);
  }
  CHECK(a == b);
  CHECK_EQ_U64(walked, hbm_ordref_count(r));
}

static void run(uint64_t seed, int narrow, int ops) {
  uint64_t rng = seed;
  hbm_ordset *s;
  hbm_ordref *r;
  CHECK(hbm_ordset_create(&s) == HBM_OK);
  CHECK(hbm_ordref_create(&r) == HBM_OK);
  for (int i = 0; i < ops; i++) {
    hbm_okey k = random_key(&rng, narrow);
    uint32_t v = (uint32_t)test_rand(&rng);
    int op = (int)test_rand_below(&rng, 10);
    /* Bias towards growth for the first half, shrinkage for the second. */
    if (i > ops / 2 && op < 4) op = 4 + op;
    if (op < 4) {
      int a = hbm_ordset_insert(s, k, v), b = hbm_ordref_insert(r, k, v);
      CHECK(a == b);
    } else if (op < 7) {
      /* Erase a present key most of the time. */
      if (hbm_ordref_count(r) && test_rand_below(&rng, 4)) hbm_ordref_lower_bound(r, k, &k, NULL);
      int a = hbm_ordset_erase(s, k), b = hbm_ordref_erase(r, k);
      CHECK(a == b);
    } else if (op < 8) {
      /* Replace a present key most of the time; the new key is often near
       * it (a free block shrinking or growing), sometimes anywhere, or taken. */
      hbm_okey old = k;
      if (hbm_ordref_count(r) && test_rand_below(&rng, 4)) hbm_ordref_lower_bound(r, old, &old, NULL);
      if (test_rand_below(&rng, 3)) {
        k = old;
        k.lo += test_rand_below(&rng, 5) - 2;
        if (test_rand_below(&rng, 2)) k.hi += test_rand_below(&rng, 3) - 1;
      }
      int a = hbm_ordset_replace(s, old, k, v), b = hbm_ordref_replace(r, old, k, v);
      CHECK(a == b);
    } else if (op == 9) {
      /* A placement's walk: seek, a few steps on, then erase or replace
       * the key found there (a block carved out of its free block). */
      hbm_ordpos pa, pb;
      hbm_okey ka = {0, 0}, kb = {0, 0};
      uint32_t va = 0, vb = 0;
      int a = hbm_ordset_seek(s, k, &pa, &ka, &va), b = hbm_ordref_seek(r, k, &pb, &kb, &vb);
      CHECK(same_answer(a, ka, va, b, kb, vb));
      for (uint64_t steps = test_rand_below(&rng, 4); a && b && steps; steps--) {
        a = hbm_ordset_next(s, &pa, &ka, &va);
        b = hbm_ordref_next(r, &pb, &kb, &vb);
        CHECK(same_answer(a, ka, va, b, kb, vb));
      }
      if (a && b && test_rand_below(&rng, 2)) {
        hbm_ordset_erase_at(s, &pa);
        hbm_ordref_erase_at(r, &pb);
      } else if (a && b) {
        hbm_okey nk = ka;
        uint64_t shrink = test_rand_below(&rng, 3);
        if (shrink <= nk.hi) nk.hi -= shrink;
        if (test_rand_below(&rng, 4) == 0) nk = random_key(&rng, narrow);
        CHECK(hbm_ordset_replace_at(s, &pa, nk, v) == hbm_ordref_replace_at(r, &pb, nk, v));
      }
    }
    hbm_okey ka = {0, 0}, kb = {0, 0};
    uint32_t va = 0, vb = 0;
    int a, b;
    a = hbm_ordset_find(s, k, &va);
    b = hbm_ordref_find(r, k, &vb);
    CHECK(a == b && (!a || va == vb));
    a = hbm_ordset_lower_bound(s, k, &ka, &va);
    b = hbm_ordref_lower_bound(r, k, &kb, &vb);
    CHECK(same_answer(a, ka, va, b, kb, vb));
    a = hbm_ordset_upper_bound(s, k, &ka, &va);
    b = hbm_ordref_upper_bound(r, k, &kb, &vb);
    CHECK(same_answer(a, ka, va, b, kb, vb));
    a = hbm_ordset_below(s, k, &ka, &va);
    b = hbm_ordref_below(r, k, &kb, &vb);
    CHECK(same_answer(a, ka, va, b, kb, vb));
    a = hbm_ordset_first(s, &ka, &va);
    b = hbm_ordref_first(r, &kb, &vb);
    CHECK(same_answer(a, ka, va, b, kb, vb));
    a = hbm_ordset_last(s, &ka, &va);
    b = hbm_ordref_last(r, &kb, &vb);
    CHECK(same_answer(a, ka, va, b, kb, vb));
    CHECK_EQ_U64(hbm_ordset_count(s), hbm_ordref_count(r));
    CHECK(hbm_ordset_check(s, report, NULL) == 0);
  }
  same_walk(s, r); /* full in-order walk agrees */
  hbm_ordset_destroy(s);
  hbm_ordref_destroy(r);
}

static void edge_cases(void) {
  hbm_ordset *s;
  CHECK(hbm_ordset_create(&s) == HBM_OK);
  hbm_okey k = {5, 5}, got;
  uint32_t v;
  CHECK(!hbm_ordset_first(s, &got, &v));
  CHECK(!hbm_ordset_lower_bound(s, k, &got, &v));
  CHECK(hbm_ordset_erase(s, k) == HBM_EINVAL);
  CHECK(hbm_ordset_insert(s, k, 1) == HBM_OK);
  CHECK(hbm_ordset_insert(s, k, 2) == HBM_EINVAL); /* duplicate: unchanged */
  CHECK(hbm_ordset_find(s, k, &v) && v == 1);
  hbm_okey max = {UINT64_MAX, UINT64_MAX}, zero = {0, 0};
  CHECK(hbm_ordset_insert(s, max, 3) == HBM_OK);
  CHECK(hbm_ordset_insert(s, zero, 4) == HBM_OK);
  CHECK(hbm_ordset_lower_bound(s, (hbm_okey){5, 6}, &got, &v) && v == 3);
  CHECK(!hbm_ordset_upper_bound(s, max, &got, &v));
  CHECK(!hbm_ordset_below(s, zero, &got, &v));
  CHECK(hbm_ordset_below(s, k, &got, &v) && v == 4);
  CHECK(hbm_ordset_check(s, report, NULL) == 0);
  CHECK_EQ_U64(hbm_ordset_count(s), 3);
  /* replace: old absent or key taken leaves the set as it was */
  CHECK(hbm_ordset_replace(s, (hbm_okey){9, 9}, (hbm_okey){8, 8}, 7) == HBM_EINVAL);
  CHECK(hbm_ordset_replace(s, k, max, 7) == HBM_EINVAL);
  CHECK(hbm_ordset_find(s, k, &v) && v == 1 && hbm_ordset_find(s, max, &v) && v == 3);
  CHECK(hbm_ordset_replace(s, k, k, 9) == HBM_OK && hbm_ordset_find(s, k, &v) && v == 9);
  CHECK(hbm_ordset_replace(s, k, (hbm_okey){1, 0}, 8) == HBM_OK); /* moves down past nothing */
  CHECK(!hbm_ordset_find(s, k, NULL) && hbm_ordset_find(s, (hbm_okey){1, 0}, &v) && v == 8);
  CHECK(hbm_ordset_check(s, report, NULL) == 0);
  CHECK_EQ_U64(hbm_ordset_count(s), 3);
  hbm_ordset_destroy(s);
}

/* The reference allocates as it likes: host memory works for it. */
static int ref_insert(hbm_ordref *r, hbm_okey k, uint32_t v) {
  int failing = host_fails, rc;
  host_fails = 0;
  rc = hbm_ordref_insert(r, k, v);
  host_fails = failing;
  return rc;
}
static int ref_replace(hbm_ordref *r, hbm_okey old, hbm_okey k, uint32_t v) {
  int failing = host_fails, rc;
  host_fails = 0;
  rc = hbm_ordref_replace(r, old, k, v);
  host_fails = failing;
  return rc;
}

/* hbm_ordset_reserve: rounds of "reserve n, then n inserts (and replaces)
 * with random erases between them, every allocation failing", each checked
 * against the reference. Sizes run from an empty set to thousands of keys,
 * so reservations meet splits, merges and an emptied set. */
static void reserve_rounds(uint64_t seed, int rounds) {
  uint64_t rng = seed;
  hbm_ordset *s;
  hbm_ordref *r;
  CHECK(hbm_ordset_create(&s) == HBM_OK);
  CHECK(hbm_ordref_create(&r) == HBM_OK);
  /* A failed reservation changes no key. */
  host_fails = 1;
  CHECK(hbm_ordset_reserve(s, 3) == HBM_EHOSTMEM);
  CHECK(hbm_ordset_insert(s, (hbm_okey){1, 1}, 1) == HBM_EHOSTMEM);
  host_fails = 0;
  CHECK_EQ_U64(hbm_ordset_count(s), 0);
  CHECK(hbm_ordset_check(s, report, NULL) == 0);
  for (int round = 0; round < rounds; round++) {
    int narrow = (int)test_rand_below(&rng, 2);
    uint64_t n = test_rand_below(&rng, 4) ? 1 + test_rand_below(&rng, 8) : 1 + test_rand_below(&rng, 600);
    CHECK(hbm_ordset_reserve(s, n) == HBM_OK);
    /* A smaller reservation on top keeps the first promise. */
    if (test_rand_below(&rng, 4) == 0) CHECK(hbm_ordset_reserve(s, 1) == HBM_OK);
    host_fails = 1;
    uint64_t shrink = test_rand_below(&rng, 3); /* 0: mostly erase, else mostly insert */
    for (uint64_t done = 0; done < n;) {
      hbm_okey k = {test_rand_below(&rng, narrow ? 64 : 1u << 20), test_rand_below(&rng, narrow ? 64 : 1u << 20)};
      uint32_t v = (uint32_t)test_rand(&rng);
      uint64_t op = test_rand_below(&rng, 8);
      if (op < (shrink ? 2u : 5u) && hbm_ordref_count(r)) {
        if (!hbm_ordref_lower_bound(r, k, &k, NULL)) hbm_ordref_first(r, &k, NULL);
        CHECK(hbm_ordset_erase(s, k) == HBM_OK && hbm_ordref_erase(r, k) == HBM_OK);
      } else if (op == 7 && hbm_ordref_count(r)) {
        hbm_okey old;
        if (!hbm_ordref_lower_bound(r, k, &old, NULL)) hbm_ordref_first(r, &old, NULL);
        int b = ref_replace(r, old, k, v);
        CHECK(hbm_ordset_replace(s, old, k, v) == b);
        done++;
      } else {
        int b = ref_insert(r, k, v);
        CHECK(hbm_ordset_insert(s, k, v) == b); /* never HBM_EHOSTMEM */
        done++;
      }
    }
    host_fails = 0;
    CHECK_EQ_U64(hbm_ordset_count(s), hbm_ordref_count(r));
    CHECK(hbm_ordset_check(s, report, NULL) == 0);
    /* Now and then, empty it (spares gather) or let it grow unreserved. */
    if (test_rand_below(&rng, 16) == 0) {
      hbm_okey k;
      while (hbm_ordref_first(r, &k, NULL)) CHECK(hbm_ordset_erase(s, k) == HBM_OK && hbm_ordref_erase(r, k) == HBM_OK);
    }
  }
  same_walk(s, r);
  hbm_ordset_destroy(s);
  hbm_ordref_destroy(r);
}

/* The case a reservation is sized for: every chunk full (32 keys), then one
 * insert into each, every one a split. Sequential appends leave chunks of
 * 16; 16 more keys between each chunk's own fill it. */
static void reserve_full_chunks(void) {
  enum { CHUNKS = 200 };
  hbm_ordset *s;
  CHECK(hbm_ordset_create(&s) == HBM_OK);
  for (uint64_t i = 0; i < CHUNKS * 16; i++) CHECK(hbm_ordset_insert(s, (hbm_okey){i * 4, 0}, 0) == HBM_OK);
  for (uint64_t i = 0; i < CHUNKS * 16; i++) CHECK(hbm_ordset_insert(s, (hbm_okey){i * 4 + 1, 0}, 0) == HBM_OK);
  CHECK(hbm_ordset_check(s, report, NULL) == 0);
  CHECK(hbm_ordset_reserve(s, CHUNKS) == HBM_OK);
  host_fails = 1;
  for (uint64_t c = 0; c < CHUNKS; c++) CHECK(hbm_ordset_insert(s, (hbm_okey){c * 64 + 2, 0}, 0) == HBM_OK);
  host_fails = 0;
  CHECK(hbm_ordset_check(s, report, NULL) == 0);
  CHECK_EQ_U64(hbm_ordset_count(s), CHUNKS * 33);
  hbm_ordset_destroy(s);
}

/* A promise holds through merges: the spares they give back are kept for
 * the splits still promised. 400 full chunks (as above) and a reservation of
 * 4000 inserts, every allocation failing: one insert into each chunk's upper
 * half (a split each: 16 + 17 keys), 9 erases from each lower half (a merge
 * each into its upper half, 24 keys, a spare back), and only then 9 inserts
 * into each merged chunk (a split each again). 800 splits, more than the 776
 * spares the reservation makes: the last 400 run on spares given back. With
 * `again`, a second reservation after the first splits, for more inserts
 * than there are spares left but fewer than the first has left, must keep
 * the first promise. */
static void reserve_through_merges(int again) {
  enum { CHUNKS = 400 };
  hbm_ordset *s;
  CHECK(hbm_ordset_create(&s) == HBM_OK);
  for (uint64_t i = 0; i < CHUNKS * 16; i++) CHECK(hbm_ordset_insert(s, (hbm_okey){i * 4, 0}, 0) == HBM_OK);
  for (uint64_t i = 0; i < CHUNKS * 16; i++) CHECK(hbm_ordset_insert(s, (hbm_okey){i * 4 + 1, 0}, 0) == HBM_OK);
  size_t count = hbm_ordset_count(s);
  CHECK(hbm_ordset_reserve(s, CHUNKS * 10) == HBM_OK);
  host_fails = 1;
  int failed = 0;
  for (uint64_t c = 0; c < CHUNKS; c++) failed |= hbm_ordset_insert(s, (hbm_okey){c * 64 + 34, 0}, 0) != HBM_OK;
  if (again) {
    host_fails = 0;
    CHECK(hbm_ordset_reserve(s, CHUNKS * 24 / 25) == HBM_OK);
    host_fails = 1;
  }
  static const uint64_t lower[9] = {0, 1, 4, 5, 8, 9, 12, 13, 16}; /* of 64c + {0, 1, 4, 5, ..., 28, 29} */
  for (uint64_t c = 0; c < CHUNKS; c++)
    for (int k = 0; k < 9; k++) CHECK(hbm_ordset_erase(s, (hbm_okey){c * 64 + lower[k], 0}) == HBM_OK);
  for (uint64_t c = 0; c < CHUNKS; c++)
    for (uint64_t k = 0; k < 9; k++) failed |= hbm_ordset_insert(s, (hbm_okey){c * 64 + 2, k}, 0) != HBM_OK;
  host_fails = 0;
  if (failed) fprintf(stderr, "reserve_through_merges(%d): an insert failed for host memory\n", again);
  CHECK(!failed);
  CHECK(hbm_ordset_check(s, report, NULL) == 0);
  CHECK_EQ_U64(hbm_ordset_count(s), count + CHUNKS);
  hbm_ordset_destroy(s);
}

/* The index's ends (ordset.c keeps free slots at both and moves the
 * shorter side): keys taken from the front while new ones come at the back
 * (a queue, the shape of a ledger releasing its oldest mappings first), new
 * keys in front of all (a stack at the front), and both ends in turn, each
 * against the reference with the check after every change. In `tight`
 * rounds every insert is reserved first and made with every allocation
 * failing: where one end of the index is full, it is centred again in the
 * memory it has, without allocating. */
static void index_ends(uint64_t seed, int ops) {
  uint64_t rng = seed;
  for (int shape = 0; shape < 3; shape++)
    for (int tight = 0; tight < 2; tight++) {
      hbm_ordset *s;
      hbm_ordref *r;
      CHECK(hbm_ordset_create(&s) == HBM_OK);
      CHECK(hbm_ordref_create(&r) == HBM_OK);
      uint64_t lo = 1ull << 40, hi = lo; /* keys in [lo, hi) */
      for (int i = 0; i < ops; i++) {
        /* Grow for the first half (three inserts to an erase), then shrink. */
        int insert = i < ops / 2 ? test_rand_below(&rng, 4) != 0 : test_rand_below(&rng, 4) == 0;
        if (insert || lo == hi) {
          int front = shape == 1 || (shape == 2 && test_rand_below(&rng, 2));
          hbm_okey k = {front ? --lo : hi++, 0};
          uint32_t v = (uint32_t)test_rand(&rng);
          if (tight) {
            CHECK(hbm_ordset_reserve(s, 1) == HBM_OK);
            host_fails = 1;
          }
          int a = hbm_ordset_insert(s, k, v);
          host_fails = 0;
          CHECK(a == HBM_OK && ref_insert(r, k, v) == HBM_OK);
        } else {
          int back = shape == 1 || (shape == 2 && test_rand_below(&rng, 2));
          hbm_okey k = {back ? --hi : lo++, 0};
          CHECK(hbm_ordset_erase(s, k) == HBM_OK && hbm_ordref_erase(r, k) == HBM_OK);
        }
        CHECK_EQ_U64(hbm_ordset_count(s), hbm_ordref_count(r));
        if (hbm_ordset_check(s, report, NULL) != 0) {
          fprintf(stderr, "index_ends: shape %d tight %d, operation %d\n", shape, tight, i);
          CHECK(0);
          break;
        }
      }
      same_walk(s, r);
      hbm_ordset_destroy(s);
      hbm_ordref_destroy(r);
    }
}

int main(void) {
  uint64_t seed = test_seed("test_caching_ordset");
  reserve_full_chunks();
  reserve_through_merges(0);
  reserve_through_merges(1);
  double scale = test_scale();
  edge_cases();
  index_ends(seed + 3, (int)(20000 * scale) + 2000);
  reserve_rounds(seed + 2, (int)(2000 * scale) + 50);
  run(seed, 1, (int)(4000 * scale) + 100);
  run(seed + 1, 0, (int)(40000 * scale) + 100);
  /* Sequential keys: the shape a sorted insertion order gives. */
  hbm_ordset *s;
  CHECK(hbm_ordset_create(&s) == HBM_OK);
  for (uint64_t i = 0; i < 100000; i++) CHECK(hbm_ordset_insert(s, (hbm_okey){i, 0}, (uint32_t)i) == HBM_OK);
  CHECK(hbm_ordset_check(s, report, NULL) == 0);
  for (uint64_t i = 0; i < 100000; i += 2) CHECK(hbm_ordset_erase(s, (hbm_okey){i, 0}) == HBM_OK);
  CHECK(hbm_ordset_check(s, report, NULL) == 0);
  CHECK_EQ_U64(hbm_ordset_count(s), 50000);
  /* Replacements that stay in their chunk, and that cross many chunks. */
  for (uint64_t i = 1; i < 100000; i += 2) CHECK(hbm_ordset_replace(s, (hbm_okey){i, 0}, (hbm_okey){i, 1}, 1) == HBM_OK);
  for (uint64_t i = 1; i < 20000; i += 2) CHECK(hbm_ordset_replace(s, (hbm_okey){i, 1}, (hbm_okey){i + 200000, 0}, 2) == HBM_OK);
  CHECK(hbm_ordset_check(s, report, NULL) == 0);
  CHECK_EQ_U64(hbm_ordset_count(s), 50000);
  hbm_ordset_destroy(s);
  return test_done("test_caching_ordset");
}
