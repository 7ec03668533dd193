/* test_range: the TLSF range allocator against a slow, obviously correct
 * reference (a sorted array of live intervals), over seeded random operations,
 * with hbm_range_check() after every one.
 *
 * The reference does not choose addresses; it checks every choice the fast
 * structure makes: inside the range, aligned, overlapping nothing live; a
 * failure only when no hole could hold the request; free bytes, live bytes
 * and the exact largest free block equal a recount from the intervals.
 *
 * And the check's counters can fail: each broken alone (free and live bytes,
 * block counts, the address table's count, the cached largest free block)
 * is reported by name and passes again once put back. The range keeps its
 * struct to range.c: this program compiles range.c into itself to reach it
 * (so the library's copy is not linked). */
#include "core/range.c"
#include "testutil.h"

typedef struct interval { uint64_t addr, size; } interval;
typedef struct reference {
  interval *v;
  size_t n, cap;
  uint64_t base, size;
} reference;

static size_t ref_lower_bound(const reference *r, uint64_t addr) {
  size_t lo = 0, hi = r->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (r->v[mid].addr < addr) lo = mid + 1; else hi = mid;
  }
  return lo;
}
static int ref_overlaps(const reference *r, uint64_t addr, uint64_t size) {
  size_t i = ref_lower_bound(r, addr);
  if (i < r->n && r->v[i].addr < addr + size) return 1;
  if (i > 0 && r->v[i - 1].addr + r->v[i - 1].size > addr) return 1;
  return 0;
}
static void ref_insert(reference *r, uint64_t addr, uint64_t size) {
  if (r->n == r->cap) {
    r->cap = r->cap ? r->cap * 2 : 64;
    r->v = realloc(r->v, r->cap * sizeof *r->v);
  }
  size_t i = ref_lower_bound(r, addr);
  memmove(r->v + i + 1, r->v + i, (r->n - i) * sizeof *r->v);
  r->v[i] = (interval){addr, size};
  r->n++;
}
static void ref_remove(reference *r, size_t i) {
  memmove(r->v + i, r->v + i + 1, (r->n - i - 1) * sizeof *r->v);
  r->n--;
}
/* Holes from the live intervals: free bytes, largest hole, and whether some
 * hole can hold `size` at an `align`-aligned address. */
static void ref_holes(const reference *r, uint64_t *free_bytes, uint64_t *largest, uint64_t size,
                      uint64_t align, int *fits) {
  uint64_t at = r->base, fb = 0, lg = 0;
  *fits = 0;
  for (size_t i = 0; i <= r->n; i++) {
    uint64_t end = i < r->n ? r->v[i].addr : r->base + r->size;
    uint64_t hole = end - at;
    fb += hole;
    if (hole > lg) lg = hole;
    uint64_t a = (at + align - 1) & ~(align - 1);
    if (size && a + size <= end) *fits = 1;
    if (i < r->n) at = r->v[i].addr + r->v[i].size;
  }
  *free_bytes = fb;
  *largest = lg;
}

static void report(void *arg, const char *message) {
  fprintf(stderr, "check: %s\n", message);
}

static char said_all[1024];
static void report_said(void *arg, const char *message) {
  (void)arg;
  size_t n = strlen(said_all);
  snprintf(said_all + n, sizeof said_all - n, "%s\n", message);
}
/* The range's check fails exactly once, naming `want`. */
static int fires(hbm_range *r, const char *what, const char *want) {
  said_all[0] = 0;
  int f = hbm_range_check(r, report_said, NULL);
  int ok = f == 1 && strstr(said_all, want) != NULL;
  printf("test_range: %s %s\n", what, ok ? "is reported" : "is NOT reported");
  if (!ok) fprintf(stderr, "wanted \"%s\", %d failure(s):\n%s", want, f, said_all);
  return ok;
}

static void counters_broken(void) {
  hbm_range *r;
  uint64_t a, b, c;
  REQUIRE(hbm_range_create(0, 64 << 10, 512, &r) == HBM_OK);
  REQUIRE(hbm_range_alloc(r, 4096, 0, &a, NULL) == HBM_OK);
  REQUIRE(hbm_range_alloc(r, 8192, 0, &b, NULL) == HBM_OK);
  REQUIRE(hbm_range_alloc(r, 4096, 0, &c, NULL) == HBM_OK);
  REQUIRE(hbm_range_free(r, b, NULL) == HBM_OK);
  (void)hbm_range_largest_free(r); /* the cache is fresh */
  REQUIRE(!r->largest_stale && hbm_range_check(r, NULL, NULL) == 0);
  r->free_bytes += 512;
  CHECK(fires(r, "a free byte count off", "I4 counters: free 57344/57856 live 8192/8192 size 65536"));
  r->free_bytes -= 512;
  r->live_bytes -= 512;
  CHECK(fires(r, "a live byte count off", "I4 counters: free 57344/57344 live 8192/7680"));
  r->live_bytes += 512;
  r->live_blocks++;
  CHECK(fires(r, "a live block count off", "I4 block counts differ from a recount"));
  r->live_blocks--;
  r->free_blocks--;
  CHECK(fires(r, "a free block count off", "I4 block counts differ from a recount"));
  r->free_blocks++;
  r->live.used++;
  CHECK(fires(r, "the address table's count off", "I5 address table holds 3 entries for 2 live blocks"));
  r->live.used--;
  r->largest -= 512;
  CHECK(fires(r, "a cached largest free block off", "I6 cached largest free 48640, recount 49152"));
  r->largest += 512;
  CHECK(hbm_range_check(r, NULL, NULL) == 0);
  hbm_range_destroy(r);
}

int main(void) {
  uint64_t seed = test_seed("test_range"), rng = seed;
  const uint64_t unit = 512, base = 1ull << 36;
  uint64_t ops = (uint64_t)(1000000 * test_scale());
  if (ops < 1000) ops = 1000;
  /* Three shapes of range: small units and sizes, training-sized, and tight. */
  const uint64_t sizes[3] = {64ull << 20, 96ull << 30, 8ull << 20};
  uint64_t done = 0, allocs = 0, failures = 0, bad_frees = 0, at_ok = 0, at_refused = 0;
  for (int shape = 0; shape < 3; shape++) {
    hbm_range *r;
    CHECK(hbm_range_create(base, sizes[shape], unit, &r) == HBM_OK);
    reference ref = {0};
    ref.base = base;
    ref.size = sizes[shape];
    uint64_t shape_ops = ops / 3;
    for (uint64_t i = 0; i < shape_ops; i++, done++) {
      uint64_t roll = test_rand_below(&rng, 100);
      /* keep a few hundred blocks live: enough to fragment, cheap to recount */
      if ((roll < 55 && ref.n < 400) || ref.n == 0) {
        /* sizes: mostly small, sometimes large, up to a quarter of the range */
        uint64_t max = roll < 45 ? sizes[shape] / 4096 : sizes[shape] / 4;
        uint64_t size = 1 + test_rand_below(&rng, max);
        uint64_t align = test_rand_below(&rng, 10) == 0 ? unit << test_rand_below(&rng, 6) : 0;
        uint64_t a_eff = align ? align : unit, rounded = (size + unit - 1) / unit * unit;
        uint64_t addr = 0, bs = 0, fb, lg;
        int fits;
        ref_holes(&ref, &fb, &lg, rounded, a_eff, &fits);
        int rc = hbm_range_alloc(r, size, align, &addr, &bs);
        allocs++;
        if (rc == HBM_OK) {
          CHECK(bs == rounded);
          CHECK(addr % a_eff == 0);
          CHECK(addr >= base && addr + bs <= base + sizes[shape]);
          CHECK(!ref_overlaps(&ref, addr, bs));
          ref_insert(&ref, addr, bs);
        } else {
          CHECK(rc == HBM_ENOMEM);
          failures++;
          /* fails only if no hole holds it (at an aligned start: the exact
           * walk behind the good-fit search finds any) */
          CHECK(!fits);
          if (!align) CHECK(lg < rounded);
        }
      } else if (roll < 60 && ref.n < 400) {
        /* alloc_at: just after a live block (often free), or anywhere; placed
         * exactly when the span lies inside the range and touches nothing live */
        uint64_t addr = base + test_rand_below(&rng, sizes[shape] / unit) * unit;
        if (ref.n && test_rand_below(&rng, 2)) {
          size_t k = (size_t)test_rand_below(&rng, ref.n);
          addr = ref.v[k].addr + ref.v[k].size;
        }
        uint64_t size = 1 + test_rand_below(&rng, test_rand_below(&rng, 4) ? sizes[shape] / 4096 : sizes[shape] / 16);
        uint64_t rounded = (size + unit - 1) / unit * unit;
        int expect = addr + rounded <= base + sizes[shape] && !ref_overlaps(&ref, addr, rounded);
        int rc = hbm_range_alloc_at(r, addr, size);
        CHECK(rc == (expect ? HBM_OK : HBM_EINVAL));
        if (rc == HBM_OK) {
          ref_insert(&ref, addr, rounded);
          at_ok++;
        } else {
          at_refused++;
        }
      } else if (roll < 97) {
        size_t k = (size_t)test_rand_below(&rng, ref.n);
        uint64_t bs = 0;
        CHECK(hbm_range_block_size(r, ref.v[k].addr) == ref.v[k].size);
        CHECK(hbm_range_free(r, ref.v[k].addr, &bs) == HBM_OK);
        CHECK(bs == ref.v[k].size);
        ref_remove(&ref, k);
      } else {
        /* a free that must be refused: an address that is not a live block */
        uint64_t addr = base + test_rand_below(&rng, sizes[shape] / unit) * unit;
        size_t k = ref_lower_bound(&ref, addr);
        int is_live = k < ref.n && ref.v[k].addr == addr;
        if (!is_live) {
          CHECK(hbm_range_free(r, addr, NULL) == HBM_EINVAL);
          bad_frees++;
        }
      }
      uint64_t fb, lg;
      int fits;
      ref_holes(&ref, &fb, &lg, 0, unit, &fits);
      uint64_t live = 0;
      for (size_t k = 0; k < ref.n; k++) live += ref.v[k].size;
      CHECK_EQ_U64(hbm_range_free_bytes(r), fb);
      CHECK_EQ_U64(hbm_range_live_bytes(r), live);
      CHECK_EQ_U64(hbm_range_live_blocks(r), ref.n);
      CHECK_EQ_U64(hbm_range_largest_free(r), lg);
      CHECK_EQ_U64(hbm_range_top(r), ref.n ? ref.v[ref.n - 1].addr + ref.v[ref.n - 1].size : base);
      if (hbm_range_check(r, report, NULL) != 0) {
        fprintf(stderr, "invariant failure after op %llu (seed %llu)\n", (unsigned long long)i, (unsigned long long)seed);
        return 1;
      }
      if (test_failures_) {
        fprintf(stderr, "divergence at op %llu of shape %d (seed %llu)\n", (unsigned long long)i, shape, (unsigned long long)seed);
        return 1;
      }
    }
    /* Clear keeps capacity: after reserve, clearing and placing the same
     * blocks again (what a compaction pass stopped by a failed copy does)
     * gives the same range. */
    uint64_t free_before = hbm_range_free_bytes(r), largest_before = hbm_range_largest_free(r);
    CHECK(hbm_range_reserve(r, 2 * ref.n + 2) == HBM_OK);
    hbm_range_clear(r);
    CHECK(hbm_range_check(r, report, NULL) == 0);
    CHECK_EQ_U64(hbm_range_free_bytes(r), sizes[shape]);
    CHECK_EQ_U64(hbm_range_live_blocks(r), 0);
    CHECK_EQ_U64(hbm_range_largest_free(r), sizes[shape]);
    for (size_t k = 0; k < ref.n; k++) CHECK(hbm_range_alloc_at(r, ref.v[k].addr, ref.v[k].size) == HBM_OK);
    CHECK(hbm_range_check(r, report, NULL) == 0);
    CHECK_EQ_U64(hbm_range_free_bytes(r), free_before);
    CHECK_EQ_U64(hbm_range_largest_free(r), largest_before);
    CHECK_EQ_U64(hbm_range_live_blocks(r), ref.n);
    /* Free everything: one free block again. */
    while (ref.n) {
      CHECK(hbm_range_free(r, ref.v[ref.n - 1].addr, NULL) == HBM_OK);
      ref.n--;
    }
    CHECK_EQ_U64(hbm_range_largest_free(r), sizes[shape]);
    CHECK(hbm_range_check(r, report, NULL) == 0);
    /* alloc_at carves exactly the asked range, and refuses a taken one. */
    CHECK(hbm_range_alloc_at(r, base + 4096, 8192) == HBM_OK);
    CHECK(hbm_range_alloc_at(r, base + 8192, 512) == HBM_EINVAL);
    CHECK(hbm_range_alloc_at(r, base + 3 * unit, 512) == HBM_OK);
    CHECK(hbm_range_check(r, report, NULL) == 0);
    hbm_range_destroy(r);
    free(ref.v);
  }
  /* Bad arguments. */
  hbm_range *r;
  CHECK(hbm_range_create(0, 1000, 512, &r) == HBM_EINVAL);
  CHECK(hbm_range_create(0, 4096, 500, &r) == HBM_EINVAL);
  CHECK(hbm_range_create(0, 4096, 512, &r) == HBM_OK);
  uint64_t a;
  CHECK(hbm_range_alloc(r, 0, 0, &a, NULL) == HBM_EINVAL);
  CHECK(hbm_range_alloc(r, 8192, 0, &a, NULL) == HBM_ENOMEM); /* larger than the range */
  CHECK(hbm_range_alloc(r, 512, 3, &a, NULL) == HBM_EINVAL);
  CHECK(hbm_range_alloc(r, 4096, 0, &a, NULL) == HBM_OK);
  CHECK(hbm_range_alloc(r, 1, 0, &a, NULL) == HBM_ENOMEM);
  CHECK(hbm_range_free(r, a + 512, NULL) == HBM_EINVAL);
  CHECK(hbm_range_free(r, a, NULL) == HBM_OK);
  CHECK(hbm_range_free(r, a, NULL) == HBM_EINVAL); /* double free */
  hbm_range_destroy(r);
  /* An aligned request whose hole holds it only from an aligned start: the
   * good-fit search asks for size + align - unit and finds nothing; the walk
   * behind it finds the hole [64 KiB, 1 MiB). */
  CHECK(hbm_range_create(0, 1 << 20, 4096, &r) == HBM_OK);
  CHECK(hbm_range_alloc(r, 64 << 10, 0, &a, NULL) == HBM_OK && a == 0);
  CHECK(hbm_range_alloc(r, (1 << 20) - (64 << 10), 64 << 10, &a, NULL) == HBM_OK);
  CHECK_EQ_U64(a, 64 << 10);
  hbm_range_destroy(r);
  counters_broken();
  printf("test_range: %llu operations (%llu allocs, %llu refused for lack of space, alloc_at %llu placed, %llu refused, "
         "%llu bad frees refused), check after each\n",
         (unsigned long long)done, (unsigned long long)allocs, (unsigned long long)failures, (unsigned long long)at_ok,
         (unsigned long long)at_refused, (unsigned long long)bad_frees);
  return test_done("test_range");
}
