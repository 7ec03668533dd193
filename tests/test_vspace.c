/* test_vspace: the best-fit virtual-range placer against a slow, obviously
 * correct reference (a sorted array of live intervals; the free holes are
 * what lies between them), over seeded random operations, with
 * hbm_vspace_check() after every one.
 *
 * The reference predicts every answer, not just its plausibility: alloc's
 * address (the best fit, or with a cost function the cheapest of the first
 * `probes` holes in best-fit order), whether alloc_at succeeds (exactly when
 * the span is free), ENOMEM only when no hole holds the request, EINVAL for
 * a free of anything that is not a live block; and after each operation the
 * live bytes and blocks, the largest hole and the top. Every so often the
 * whole tiling from hbm_vspace_walk must equal the reference's.
 *
 * Four shapes of range: a tight one indexed from the start (alloc_at from
 * op 0, many ENOMEMs), a large one with multi-MiB blocks indexed midway (the
 * index is built from a fragmented state), one never indexed (alloc_at
 * must answer HBM_EUNSUPPORTED and change nothing), and one indexed from the
 * start whose best fit is dropped midway, from a fragmented state (alloc
 * must then answer HBM_EUNSUPPORTED and change nothing, while alloc_at,
 * free and the largest hole go on as before). */
#include "core/vspace.h"
#include "testutil.h"

typedef struct interval { uint64_t addr, size; uint32_t user; } interval;
typedef struct hole { uint64_t addr, size; } hole;
typedef struct reference {
  interval *v;
  size_t n, cap;
  uint64_t base, size, unit, live_bytes;
  hole *h; /* scratch: the holes, from ref_holes */
  size_t nh, hcap;
} reference;

static size_t ref_lower_bound(const reference *r, uint64_t addr) {
  size_t lo = 0, hi = r->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (r->v[mid].addr < addr) lo = mid + 1; else hi = mid;
  }
  return lo;
}
/* Whether [addr, addr + size) lies inside the range and touches nothing live. */
static int ref_span_free(const reference *r, uint64_t addr, uint64_t size) {
  if (addr < r->base || addr + size > r->base + r->size) return 0;
  size_t i = ref_lower_bound(r, addr);
  if (i < r->n && r->v[i].addr < addr + size) return 0;
  if (i > 0 && r->v[i - 1].addr + r->v[i - 1].size > addr) return 0;
  return 1;
}
static void ref_insert(reference *r, uint64_t addr, uint64_t size, uint32_t user) {
  if (r->n == r->cap) {
    r->cap = r->cap ? r->cap * 2 : 64;
    r->v = realloc(r->v, r->cap * sizeof *r->v);
  }
  size_t i = ref_lower_bound(r, addr);
  memmove(r->v + i + 1, r->v + i, (r->n - i) * sizeof *r->v);
  r->v[i] = (interval){addr, size, user};
  r->n++;
  r->live_bytes += size;
}
static void ref_remove(reference *r, size_t i) {
  r->live_bytes -= r->v[i].size;
  memmove(r->v + i, r->v + i + 1, (r->n - i - 1) * sizeof *r->v);
  r->n--;
}
/* The holes in address order: the maximal free runs between live intervals. */
static void ref_holes(reference *r) {
  if (r->hcap < r->n + 1) {
    r->hcap = (r->n + 1) * 2;
    r->h = realloc(r->h, r->hcap * sizeof *r->h);
  }
  r->nh = 0;
  uint64_t at = r->base;
  for (size_t i = 0; i <= r->n; i++) {
    uint64_t end = i < r->n ? r->v[i].addr : r->base + r->size;
    if (end > at) r->h[r->nh++] = (hole){at, end - at};
    if (i < r->n) at = r->v[i].addr + r->v[i].size;
  }
}
static uint64_t ref_largest(const reference *r) {
  uint64_t lg = 0;
  for (size_t i = 0; i < r->nh; i++)
    if (r->h[i].size > lg) lg = r->h[i].size;
  return lg;
}
static int hole_order(const void *a, const void *b) { /* best-fit order: (size, address) */
  const hole *x = a, *y = b;
  if (x->size != y->size) return x->size < y->size ? -1 : 1;
  return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* A deterministic cost: some holes are "free" (0, the search stops there),
 * the rest cost a little by address. It also checks that every hole it is
 * shown is a whole hole of the reference that holds the request. */
typedef struct cost_ctx { const reference *ref; uint64_t calls; } cost_ctx;
static uint64_t hole_cost(uint64_t hole_addr) { return (hole_addr / 512 * 0x9E3779B97F4A7C15ull >> 40) % 7; }
static uint64_t cost_fn(void *arg, uint64_t addr, uint64_t hole_size, uint64_t size) {
  cost_ctx *c = arg;
  c->calls++;
  const reference *r = c->ref;
  CHECK(hole_size >= size);
  CHECK(ref_span_free(r, addr, hole_size));
  /* maximal: live (or the range's edge) on both sides */
  CHECK(addr == r->base || !ref_span_free(r, addr - r->unit, r->unit));
  CHECK(addr + hole_size == r->base + r->size || !ref_span_free(r, addr + hole_size, r->unit));
  return hole_cost(addr);
}
/* Where alloc must place `rounded` bytes: the reference's own search over
 * the holes in best-fit order. Returns 0 if no hole holds it. */
static int ref_place(reference *r, uint64_t rounded, int use_cost, int probes, uint64_t *addr) {
  hole *cand = malloc((r->nh + 1) * sizeof *cand);
  size_t nc = 0;
  for (size_t i = 0; i < r->nh; i++)
    if (r->h[i].size >= rounded) cand[nc++] = r->h[i];
  int found = nc > 0;
  if (found) {
    qsort(cand, nc, sizeof *cand, hole_order);
    size_t best = 0;
    if (use_cost && probes >= 2) {
      uint64_t best_cost = UINT64_MAX;
      for (size_t k = 0; k < nc && k < (size_t)probes; k++) {
        uint64_t c = hole_cost(cand[k].addr);
        if (c < best_cost) { best_cost = c; best = k; }
        if (c == 0) break;
      }
    }
    *addr = cand[best].addr;
  }
  free(cand);
  return found;
}

/* The whole tiling from hbm_vspace_walk against the reference's. */
typedef struct walk_ctx { const reference *ref; size_t live_i, hole_i, bad; } walk_ctx;
static int walk_visit(void *arg, uint64_t addr, uint64_t size, int live) {
  walk_ctx *w = arg;
  const reference *r = w->ref;
  if (live) {
    if (w->live_i >= r->n || r->v[w->live_i].addr != addr || r->v[w->live_i].size != size) w->bad++;
    w->live_i++;
  } else {
    if (w->hole_i >= r->nh || r->h[w->hole_i].addr != addr || r->h[w->hole_i].size != size) w->bad++;
    w->hole_i++;
  }
  return 0;
}
static int walk_matches(const hbm_vspace *v, const reference *r) {
  walk_ctx w = {r, 0, 0, 0};
  CHECK(hbm_vspace_walk(v, walk_visit, &w) == 0);
  return w.bad == 0 && w.live_i == r->n && w.hole_i == r->nh;
}

static uint64_t max_cost(void *arg, uint64_t addr, uint64_t hole_size, uint64_t size) { return UINT64_MAX; }

static void report(void *arg, const char *message) {
  fprintf(stderr, "check: %s\n", message);
}

/* A request size: mostly small, sometimes large, now and then huge. */
static uint64_t draw_size(uint64_t *rng, const uint64_t max[3]) {
  uint64_t roll = test_rand_below(rng, 100);
  uint64_t m = roll < 70 ? max[0] : roll < 97 ? max[1] : max[2];
  return 1 + test_rand_below(rng, m);
}

typedef struct shape {
  const char *name;
  uint64_t base, size, unit;
  uint64_t max[3]; /* request size bounds: small, large, huge */
  int index;       /* 0 never, 1 from the start, 2 midway */
  int drop;        /* best fit dropped midway */
} shape;

int main(void) {
  uint64_t seed = test_seed("test_vspace"), rng = seed;
  uint64_t ops = (uint64_t)(300000 * test_scale());
  if (ops < 3000) ops = 3000;
  const shape shapes[4] = {
      {"tight", 1ull << 36, 8ull << 20, 512, {16ull << 10, 256ull << 10, 2ull << 20}, 1, 0},
      {"large", 1ull << 40, 64ull << 30, 512, {1ull << 20, 64ull << 20, 4ull << 30}, 2, 0},
      {"plain", 1ull << 36, 64ull << 20, 512, {64ull << 10, 1ull << 20, 16ull << 20}, 0, 0},
      {"placed", 1ull << 38, 256ull << 20, 512, {64ull << 10, 2ull << 20, 32ull << 20}, 1, 1},
  };
  uint64_t done = 0, allocs = 0, enomem = 0, at_ok = 0, at_refused = 0, at_unsupported = 0, bad_frees = 0,
           walks = 0, cost_calls = 0, alloc_unsupported = 0;
  for (int si = 0; si < 4; si++) {
    const shape *sh = &shapes[si];
    const uint64_t unit = sh->unit, base = sh->base, end = sh->base + sh->size;
    hbm_vspace *v;
    CHECK(hbm_vspace_create(base, sh->size, unit, &v) == HBM_OK);
    int indexed = 0, dropped = 0;
    if (sh->index == 1) {
      CHECK(hbm_vspace_index_addresses(v) == HBM_OK);
      indexed = 1;
    }
    reference ref = {0};
    ref.base = base;
    ref.size = sh->size;
    ref.unit = unit;
    cost_ctx cc = {&ref, 0};
    uint64_t shape_ops = ops / 3;
    for (uint64_t i = 0; i < shape_ops; i++, done++) {
      if (sh->index == 2 && i == shape_ops / 2) { /* built from a fragmented state */
        CHECK(hbm_vspace_index_addresses(v) == HBM_OK);
        CHECK(hbm_vspace_index_addresses(v) == HBM_OK); /* idempotent */
        indexed = 1;
      }
      if (sh->drop && i == shape_ops / 2) { /* from a fragmented state */
        CHECK(hbm_vspace_drop_best_fit(v) == HBM_OK);
        CHECK(hbm_vspace_drop_best_fit(v) == HBM_OK); /* idempotent */
        dropped = 1;
      }
      ref_holes(&ref);
      uint64_t roll = test_rand_below(&rng, 100);
      /* keep a few hundred blocks live: enough to fragment, cheap to recount */
      if ((roll < 35 && ref.n < 300) || ref.n == 0) {
        uint64_t size = test_rand_below(&rng, 200) == 0 ? (test_rand_below(&rng, 2) ? sh->size + 1 : UINT64_MAX)
                                                         : draw_size(&rng, sh->max);
        uint64_t rounded = size <= sh->size ? (size + unit - 1) / unit * unit : 0;
        uint64_t how = test_rand_below(&rng, 4); /* plain, cost with 1 probe, a few probes, all probes */
        int probes = how == 0 || how == 1 ? 1 : how == 2 ? 2 + (int)test_rand_below(&rng, 7) : 1 << 30;
        int use_cost = how != 0;
        uint32_t user = (uint32_t)test_rand(&rng);
        uint64_t addr = 0, bs = 0, expect = 0;
        int fits = rounded && ref_place(&ref, rounded, use_cost, probes, &expect);
        /* Reserving first (as zoned does) changes no placement: the reference still agrees. */
        if (test_rand_below(&rng, 2)) CHECK(hbm_vspace_reserve(v) == HBM_OK);
        int rc = hbm_vspace_alloc(v, size, use_cost ? cost_fn : NULL, use_cost ? &cc : NULL, probes, user, &addr, &bs);
        allocs++;
        if (dropped) {
          CHECK(rc == HBM_EUNSUPPORTED);
          CHECK(addr == 0 && bs == 0); /* nothing said, and (below) nothing changed */
          alloc_unsupported++;
        } else if (rc == HBM_OK) {
          CHECK(fits);
          CHECK_EQ_U64(bs, rounded);
          CHECK_EQ_U64(addr, expect);
          CHECK(ref_span_free(&ref, addr, bs));
          ref_insert(&ref, addr, bs, user);
        } else {
          CHECK(rc == HBM_ENOMEM);
          CHECK(!fits); /* refused only when no hole holds it */
          CHECK(rounded == 0 || ref_largest(&ref) < rounded);
          enomem++;
        }
      } else if (roll < 55 && ref.n < 300) {
        uint64_t addr, size;
        int expect;
        uint64_t kind = test_rand_below(&rng, 100);
        if (kind < 50 && ref.nh) { /* inside a hole: fits by construction */
          const hole *h = &ref.h[test_rand_below(&rng, ref.nh)];
          uint64_t units = h->size / unit, off;
          uint64_t where = test_rand_below(&rng, 4);
          if (where == 0) off = 0; /* at the hole's start */
          else off = test_rand_below(&rng, units) * unit;
          uint64_t room = h->size - off;
          size = where == 1 ? room - test_rand_below(&rng, unit) /* to the hole's end */
                            : 1 + test_rand_below(&rng, room < sh->max[1] ? room : sh->max[1]);
          addr = h->addr + off;
        } else if (kind < 92) { /* anywhere aligned: may collide or run past the end */
          addr = base + test_rand_below(&rng, sh->size / unit) * unit;
          size = draw_size(&rng, sh->max);
        } else { /* bad arguments */
          uint64_t bad = test_rand_below(&rng, 5);
          addr = base + test_rand_below(&rng, sh->size / unit) * unit;
          size = 1 + test_rand_below(&rng, sh->max[0]);
          if (bad == 0) size = 0;
          else if (bad == 1) addr += 1 + test_rand_below(&rng, unit - 1); /* unaligned */
          else if (bad == 2) addr = base - unit * (1 + test_rand_below(&rng, 4)); /* below the range */
          else if (bad == 3) addr = end + unit * test_rand_below(&rng, 4); /* at or past the end */
          else size = UINT64_MAX - test_rand_below(&rng, 1000); /* wraps */
        }
        uint64_t rounded = size && size <= UINT64_MAX - unit ? (size + unit - 1) / unit * unit : 0;
        int valid = size && addr % unit == 0 && addr >= base && addr < end && size <= end - addr;
        if (!indexed) expect = HBM_EUNSUPPORTED;
        else if (!valid) expect = HBM_EINVAL;
        else expect = ref_span_free(&ref, addr, rounded) ? HBM_OK : HBM_ENOMEM;
        uint32_t user = (uint32_t)test_rand(&rng);
        uint64_t bs = 0;
        int rc = hbm_vspace_alloc_at(v, addr, size, user, test_rand_below(&rng, 8) ? &bs : NULL);
        if (rc != expect)
          fprintf(stderr, "alloc_at(%#llx, %llu): %d, expected %d\n", (unsigned long long)addr, (unsigned long long)size, rc, expect);
        CHECK(rc == expect);
        if (rc == HBM_OK) {
          CHECK(bs == 0 || bs == rounded);
          ref_insert(&ref, addr, rounded, user);
          at_ok++;
        } else if (rc == HBM_EUNSUPPORTED) {
          at_unsupported++;
        } else {
          at_refused++;
        }
      } else if (roll < 95) {
        size_t k = (size_t)test_rand_below(&rng, ref.n);
        uint64_t bs = 0;
        uint32_t user = 0, u2 = 0;
        CHECK_EQ_U64(hbm_vspace_block_size(v, ref.v[k].addr, &u2), ref.v[k].size);
        CHECK(u2 == ref.v[k].user);
        CHECK(hbm_vspace_free(v, ref.v[k].addr, &bs, &user) == HBM_OK);
        CHECK_EQ_U64(bs, ref.v[k].size);
        CHECK(user == ref.v[k].user);
        ref_remove(&ref, k);
      } else {
        /* frees that must be refused: not the start of a live block */
        uint64_t kind = test_rand_below(&rng, 4), addr;
        size_t k = (size_t)test_rand_below(&rng, ref.n);
        if (kind == 0) addr = base + test_rand_below(&rng, sh->size / unit) * unit;
        else if (kind == 1 && ref.v[k].size > unit) addr = ref.v[k].addr + unit; /* inside one */
        else if (kind == 2) addr = ref.v[k].addr + 1 + test_rand_below(&rng, unit - 1);
        else addr = test_rand_below(&rng, 2) ? end : base - unit;
        size_t j = ref_lower_bound(&ref, addr);
        if (!(j < ref.n && ref.v[j].addr == addr)) {
          uint64_t bs = 12345;
          uint32_t user = 777;
          CHECK(hbm_vspace_free(v, addr, &bs, &user) == HBM_EINVAL);
          CHECK(bs == 12345 && user == 777); /* nothing said, nothing changed */
          CHECK(hbm_vspace_block_size(v, addr, NULL) == 0);
          bad_frees++;
        }
      }
      ref_holes(&ref);
      CHECK_EQ_U64(hbm_vspace_live_bytes(v), ref.live_bytes);
      CHECK_EQ_U64(hbm_vspace_live_blocks(v), ref.n);
      CHECK_EQ_U64(hbm_vspace_largest_free(v), ref_largest(&ref));
      CHECK_EQ_U64(hbm_vspace_top(v), ref.n ? ref.v[ref.n - 1].addr + ref.v[ref.n - 1].size : base);
      if (hbm_vspace_check(v, report, NULL) != 0) {
        fprintf(stderr, "invariant failure after op %llu of shape %s (seed %llu)\n", (unsigned long long)i, sh->name, (unsigned long long)seed);
        return 1;
      }
      if (i % 101 == 0 || i + 1 == shape_ops || ((sh->index == 2 || sh->drop) && i == shape_ops / 2)) {
        CHECK(walk_matches(v, &ref));
        walks++;
      }
      if (test_failures_) {
        fprintf(stderr, "divergence at op %llu of shape %s (seed %llu)\n", (unsigned long long)i, sh->name, (unsigned long long)seed);
        return 1;
      }
    }
    cost_calls += cc.calls;
    /* Free everything: one free block again. */
    while (ref.n) {
      CHECK(hbm_vspace_free(v, ref.v[ref.n - 1].addr, NULL, NULL) == HBM_OK);
      ref_remove(&ref, ref.n - 1);
    }
    ref_holes(&ref);
    CHECK_EQ_U64(hbm_vspace_largest_free(v), sh->size);
    CHECK_EQ_U64(hbm_vspace_top(v), base);
    CHECK(hbm_vspace_check(v, report, NULL) == 0);
    CHECK(walk_matches(v, &ref));
    if (indexed) {
      /* the edges: the last unit, the first unit, then the whole gap between */
      uint64_t bs = 0, a;
      CHECK(hbm_vspace_alloc_at(v, end - unit, 1, 1, &bs) == HBM_OK);
      CHECK_EQ_U64(bs, unit);
      CHECK_EQ_U64(hbm_vspace_top(v), end);
      CHECK(hbm_vspace_alloc_at(v, end - unit, 1, 1, NULL) == HBM_ENOMEM);
      CHECK(hbm_vspace_alloc_at(v, end - 2 * unit, 2 * unit, 1, NULL) == HBM_ENOMEM); /* half taken */
      CHECK(hbm_vspace_alloc_at(v, end - unit, 2 * unit, 1, NULL) == HBM_EINVAL);     /* past the end */
      CHECK(hbm_vspace_alloc_at(v, base, unit, 2, NULL) == HBM_OK);
      CHECK(hbm_vspace_alloc_at(v, base + unit, sh->size - 2 * unit, 3, &bs) == HBM_OK);
      CHECK_EQ_U64(bs, sh->size - 2 * unit);
      CHECK_EQ_U64(hbm_vspace_largest_free(v), 0);
      CHECK(hbm_vspace_alloc(v, 1, NULL, NULL, 1, 0, &a, NULL) == (dropped ? HBM_EUNSUPPORTED : HBM_ENOMEM));
      CHECK(hbm_vspace_check(v, report, NULL) == 0);
      /* freeing the middle, then the edges, coalesces back to one block */
      CHECK(hbm_vspace_free(v, base + unit, NULL, NULL) == HBM_OK);
      CHECK(hbm_vspace_free(v, end - unit, NULL, NULL) == HBM_OK);
      CHECK(hbm_vspace_free(v, base, NULL, NULL) == HBM_OK);
      CHECK_EQ_U64(hbm_vspace_largest_free(v), sh->size);
      CHECK(hbm_vspace_check(v, report, NULL) == 0);
    } else {
      CHECK(hbm_vspace_alloc_at(v, base, unit, 0, NULL) == HBM_EUNSUPPORTED);
      CHECK_EQ_U64(hbm_vspace_live_blocks(v), 0);
    }
    hbm_vspace_destroy(v);
    free(ref.v);
    free(ref.h);
  }
  /* Bad arguments. */
  hbm_vspace *v;
  uint64_t a;
  CHECK(hbm_vspace_create(0, 1000, 512, &v) == HBM_EINVAL);
  CHECK(hbm_vspace_create(0, 4096, 500, &v) == HBM_EINVAL);
  CHECK(hbm_vspace_create(0, 3000, 500, &v) == HBM_EINVAL);  /* a whole number of units, not a power of two */
  CHECK(hbm_vspace_create(100, 4096, 512, &v) == HBM_EINVAL); /* a base off the unit */
  CHECK(hbm_vspace_create(0, 4096, 512, NULL) == HBM_EINVAL);
  CHECK(hbm_vspace_create(0, 4096, 512, &v) == HBM_OK);
  CHECK(hbm_vspace_alloc(v, 0, NULL, NULL, 1, 0, &a, NULL) == HBM_EINVAL);
  CHECK(hbm_vspace_alloc(v, 512, NULL, NULL, 1, 0, NULL, NULL) == HBM_EINVAL);
  CHECK(hbm_vspace_alloc_at(v, 0, 512, 0, NULL) == HBM_EUNSUPPORTED);
  CHECK(hbm_vspace_drop_best_fit(v) == HBM_EUNSUPPORTED); /* best fit is all it has */
  CHECK(hbm_vspace_drop_best_fit(NULL) == HBM_EINVAL);
  CHECK(hbm_vspace_index_addresses(v) == HBM_OK);
  CHECK(hbm_vspace_alloc_at(v, 0, 0, 0, NULL) == HBM_EINVAL);
  CHECK(hbm_vspace_alloc_at(v, 100, 512, 0, NULL) == HBM_EINVAL);
  CHECK(hbm_vspace_alloc_at(v, 4096, 512, 0, NULL) == HBM_EINVAL);
  CHECK(hbm_vspace_alloc_at(v, 512, 4096, 0, NULL) == HBM_EINVAL);
  CHECK(hbm_vspace_alloc_at(v, 1024, 1, 0, NULL) == HBM_OK); /* splits the one block in three */
  CHECK(hbm_vspace_alloc(v, 1024, NULL, NULL, 1, 0, &a, NULL) == HBM_OK);
  CHECK_EQ_U64(a, 0); /* the exact fit below it */
  CHECK(hbm_vspace_alloc(v, 4096, NULL, NULL, 1, 0, &a, NULL) == HBM_ENOMEM);
  CHECK(hbm_vspace_free(v, 1024, NULL, NULL) == HBM_OK);
  CHECK(hbm_vspace_free(v, 1024, NULL, NULL) == HBM_EINVAL); /* double free */
  CHECK(hbm_vspace_check(v, report, NULL) == 0);
  /* A cost function may answer any number, UINT64_MAX included: when every
   * candidate costs that much, the first (the best fit) is taken. */
  CHECK(hbm_vspace_alloc_at(v, 2048, 512, 0, NULL) == HBM_OK); /* holes: 1 KiB at 1024, 1.5 KiB at 2560 */
  CHECK(hbm_vspace_alloc(v, 512, max_cost, NULL, 4, 0, &a, NULL) == HBM_OK);
  CHECK_EQ_U64(a, 1024); /* the best fit */
  /* Without a cost function the probes are not used: the best fit again */
  CHECK(hbm_vspace_alloc(v, 512, NULL, NULL, 8, 0, &a, NULL) == HBM_OK);
  CHECK_EQ_U64(a, 1536);
  CHECK(hbm_vspace_check(v, report, NULL) == 0);
  hbm_vspace_destroy(v);
  /* One block may take the whole space, and no more. */
  CHECK(hbm_vspace_create(1 << 20, 4096, 512, &v) == HBM_OK);
  CHECK(hbm_vspace_alloc(v, 4097, NULL, NULL, 1, 0, &a, NULL) == HBM_ENOMEM);
  CHECK(hbm_vspace_alloc(v, 4096, NULL, NULL, 1, 0, &a, NULL) == HBM_OK);
  CHECK_EQ_U64(a, 1 << 20);
  CHECK(hbm_vspace_check(v, report, NULL) == 0);
  hbm_vspace_destroy(v);
  printf("test_vspace: %llu operations (%llu allocs, %llu refused for lack of space, %llu without best fit; alloc_at "
         "%llu placed, %llu refused, %llu unsupported; %llu bad frees refused; %llu cost calls; %llu walks), check "
         "after each\n",
         (unsigned long long)done, (unsigned long long)allocs, (unsigned long long)enomem,
         (unsigned long long)alloc_unsupported, (unsigned long long)at_ok,
         (unsigned long long)at_refused, (unsigned long long)at_unsupported, (unsigned long long)bad_frees,
         (unsigned long long)cost_calls, (unsigned long long)walks);
  return test_done("test_vspace");
}
