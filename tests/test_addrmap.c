/* test_addrmap: the open-addressing address map (core/addrmap.h) against a
 * slow, obviously correct reference (an unsorted array searched linearly),
 * over seeded random puts (new keys and existing ones), gets, takes (present
 * and absent keys) and reserves, with hbm_addrmap_check() after every one.
 * Keys are drawn so that probe runs collide and wrap around the table's end:
 * a few hash slots' worth of 512-byte multiples, and arbitrary 64-bit keys.
 * After each operation the count, and every so often every key's value and
 * the whole table through hbm_addrmap_each, must equal the reference's.
 * Each run ends with a clear: no key left, the capacity kept, and the map
 * usable again. */
#include "core/addrmap.h"
#include "hbm.h"
#include "testutil.h"

typedef struct pair { uint64_t key, val; } pair;
typedef struct reference { pair *v; size_t n, cap; } reference;

static size_t ref_find(const reference *r, uint64_t key) {
  for (size_t i = 0; i < r->n; i++)
    if (r->v[i].key == key) return i;
  return r->n;
}
static void ref_put(reference *r, uint64_t key, uint64_t val) {
  size_t i = ref_find(r, key);
  if (i == r->n) {
    if (r->n == r->cap) {
      r->cap = r->cap ? r->cap * 2 : 64;
      r->v = realloc(r->v, r->cap * sizeof *r->v);
    }
    r->n++;
  }
  r->v[i] = (pair){key, val};
}

static void report(void *arg, const char *message) {
  (void)arg;
  fprintf(stderr, "check: %s\n", message);
}

typedef struct each_ctx { const reference *ref; size_t seen, bad; } each_ctx;
static void each_visit(void *arg, uint64_t key, uint64_t val) {
  each_ctx *e = arg;
  size_t i = ref_find(e->ref, key);
  if (i == e->ref->n || e->ref->v[i].val != val) e->bad++;
  e->seen++;
}

/* A key: a 512-byte multiple from a small pool (dense, colliding probe runs),
 * or any 64-bit value but the empty marker. */
static uint64_t draw_key(uint64_t *rng, uint64_t pool) {
  if (test_rand_below(rng, 4)) return (1ull << 36) + test_rand_below(rng, pool) * 512;
  uint64_t k = test_rand(rng);
  return k == UINT64_MAX ? 0 : k;
}

static int twice_said;
static void report_twice(void *arg, const char *message) {
  (void)arg;
  twice_said += strstr(message, "is held twice") != NULL;
}

int main(void) {
  uint64_t seed = test_seed("test_addrmap"), rng = seed;
  uint64_t ops = (uint64_t)(400000 * test_scale());
  if (ops < 2000) ops = 2000;
  uint64_t done = 0, puts = 0, replaced = 0, takes = 0, misses = 0, walks = 0;
  /* pools: a table that stays small (wraps often), and one that grows large */
  const uint64_t pools[2] = {24, 3000};
  for (int shape = 0; shape < 2; shape++) {
    hbm_addrmap m;
    hbm_addrmap_init(&m);
    reference ref = {0};
    uint64_t shape_ops = ops / 2;
    for (uint64_t i = 0; i < shape_ops; i++, done++) {
      uint64_t roll = test_rand_below(&rng, 100);
      /* grow in the first half, shrink in the second */
      int grow = i < shape_ops / 2 ? roll < 55 : roll < 40;
      if (grow) {
        uint64_t key = ref.n && test_rand_below(&rng, 5) == 0 ? ref.v[test_rand_below(&rng, ref.n)].key
                                                               : draw_key(&rng, pools[shape]);
        uint64_t val = test_rand(&rng);
        replaced += ref_find(&ref, key) < ref.n;
        CHECK(hbm_addrmap_put(&m, key, val) == HBM_OK);
        ref_put(&ref, key, val);
        puts++;
      } else if (roll < 90) {
        uint64_t key = ref.n && test_rand_below(&rng, 4) ? ref.v[test_rand_below(&rng, ref.n)].key
                                                          : draw_key(&rng, pools[shape]);
        size_t k = ref_find(&ref, key);
        uint64_t val = 0;
        int got = hbm_addrmap_take(&m, key, &val);
        CHECK(got == (k < ref.n));
        if (k < ref.n) {
          CHECK_EQ_U64(val, ref.v[k].val);
          ref.v[k] = ref.v[--ref.n];
          takes++;
        } else {
          misses++;
        }
      } else if (roll < 97) {
        uint64_t key = draw_key(&rng, pools[shape]), val = 0;
        size_t k = ref_find(&ref, key);
        CHECK(hbm_addrmap_get(&m, key, &val) == (k < ref.n));
        if (k < ref.n) CHECK_EQ_U64(val, ref.v[k].val);
      } else {
        uint64_t extra = test_rand_below(&rng, 64);
        CHECK(hbm_addrmap_reserve(&m, extra) == HBM_OK);
        CHECK((m.used + extra) * 2 <= m.cap);
      }
      CHECK_EQ_U64(m.used, ref.n);
      if (hbm_addrmap_check(&m, report, NULL) != 0) CHECK(!"hbm_addrmap_check");
      if (i % 257 == 0) {
        for (size_t k = 0; k < ref.n; k++) {
          uint64_t val;
          CHECK(hbm_addrmap_get(&m, ref.v[k].key, &val) && val == ref.v[k].val);
        }
        each_ctx e = {&ref, 0, 0};
        hbm_addrmap_each(&m, each_visit, &e);
        CHECK(e.bad == 0 && e.seen == ref.n);
        walks++;
      }
      if (test_failures_) {
        fprintf(stderr, "divergence at op %llu of shape %d (seed %llu)\n", (unsigned long long)i, shape,
                (unsigned long long)seed);
        return 1;
      }
    }
    /* clear: every key gone, the capacity kept, and the map as good as new */
    uint64_t cap = m.cap, some = ref.n ? ref.v[0].key : 1ull << 36;
    hbm_addrmap_clear(&m);
    CHECK_EQ_U64(m.used, 0);
    CHECK_EQ_U64(m.cap, cap);
    CHECK(hbm_addrmap_check(&m, report, NULL) == 0);
    for (size_t k = 0; k < ref.n; k++) CHECK(!hbm_addrmap_get(&m, ref.v[k].key, NULL));
    each_ctx cleared = {&ref, 0, 0};
    hbm_addrmap_each(&m, each_visit, &cleared);
    CHECK_EQ_U64(cleared.seen, 0);
    CHECK(hbm_addrmap_put(&m, some, 7) == HBM_OK);
    CHECK_EQ_U64(m.cap, cap);
    ref.n = 0;
    ref_put(&ref, some, 7);
    while (ref.n) { /* empty it: every take finds its key */
      CHECK(hbm_addrmap_take(&m, ref.v[ref.n - 1].key, NULL));
      ref.n--;
    }
    CHECK_EQ_U64(m.used, 0);
    CHECK(hbm_addrmap_check(&m, report, NULL) == 0);
    hbm_addrmap_release(&m);
    free(ref.v);
  }
  /* the check itself fails on a broken table */
  hbm_addrmap m;
  hbm_addrmap_init(&m);
  CHECK(hbm_addrmap_check(&m, NULL, NULL) == 0); /* empty, never allocated */
  hbm_addrmap_clear(&m); /* no table to clear */
  CHECK(m.cap == 0 && m.used == 0 && !m.keys);
  CHECK(hbm_addrmap_put(&m, 1ull << 20, 1) == HBM_OK);
  m.used++;
  CHECK(hbm_addrmap_check(&m, NULL, NULL) > 0);
  m.used--;
  /* a key held twice: a copy just past its own slot, where a probe from its
   * hash slot meets the original first */
  uint64_t i = 0, key = 1ull << 20;
  while (i < m.cap && m.keys[i] != key) i++;
  uint64_t j = (i + 1) & (m.cap - 1);
  CHECK(i < m.cap && m.keys[j] == UINT64_MAX);
  if (i < m.cap && m.keys[j] == UINT64_MAX) {
    m.keys[j] = key;
    m.vals[j] = 1;
    m.used++;
    twice_said = 0;
    int f = hbm_addrmap_check(&m, report_twice, NULL);
    printf("test_addrmap: a key held twice %s\n", f == 1 && twice_said ? "is reported" : "is NOT reported");
    CHECK(f == 1 && twice_said);
    m.keys[j] = UINT64_MAX;
    m.used--;
  }
  CHECK(hbm_addrmap_check(&m, report, NULL) == 0);
  hbm_addrmap_release(&m);
  printf("test_addrmap: %llu operations (%llu puts, %llu of them replacing, %llu takes, %llu takes of absent keys, "
         "%llu full comparisons), check after each\n",
         (unsigned long long)done, (unsigned long long)puts, (unsigned long long)replaced, (unsigned long long)takes,
         (unsigned long long)misses, (unsigned long long)walks);
  return test_done("test_addrmap");
}
