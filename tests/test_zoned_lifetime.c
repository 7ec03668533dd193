/* test_zoned_lifetime: the online lifetime rule zoned uses for blocks that
 * carry no tag (core/lifetime.h): the build phase is static; afterwards a
 * 2-bit counter per (size rounded to 512 B, stream) learns from lifetimes;
 * long-lived means surviving a step mark, or, without marks, staying live
 * while more than twice the peak live bytes were allocated. */
#include "core/lifetime.h"
#include "hbm.h"
#include "testutil.h"

#define MiB (1ull << 20)

/* ==== slow reference: the rule of docs/zoned.md, written from the text ====
 * Every allocation ever predicted stays in one array; keys are (request
 * rounded up to 512 B, stream) pairs in another; everything is recomputed by
 * linear scans. Nothing is shared with core/lifetime.c but the rule. */
enum { REF_LIVE, REF_FREED, REF_FORGOTTEN };
typedef struct ref_block {
  uint64_t size, units, marks_at_birth;
  int stream, state;
} ref_block;
typedef struct ref_key {
  uint64_t units;
  int stream, counter;
} ref_key;
typedef struct ref_life {
  ref_block *blocks;
  uint64_t nblocks, cap;
  ref_key keys[256];
  int nkeys;
  int freed;      /* a free was observed: the build phase is over */
  uint64_t marks; /* step marks seen */
  uint64_t peak;  /* most live bytes at once */
  uint64_t predicted_static, predicted_transient, observed_long, observed_short;
} ref_life;

static uint64_t ref_units(uint64_t size) { return size / 512 + (size % 512 != 0); }

static ref_key *ref_find(ref_life *r, uint64_t size, int stream) {
  for (int k = 0; k < r->nkeys; k++)
    if (r->keys[k].units == ref_units(size) && r->keys[k].stream == stream) return &r->keys[k];
  return NULL;
}

static ref_key *ref_add_key(ref_life *r, uint64_t size, int stream, int counter) {
  ref_key *k = &r->keys[r->nkeys++];
  *k = (ref_key){ref_units(size), stream, counter};
  return k;
}

static uint64_t ref_live(const ref_life *r) {
  uint64_t live = 0;
  for (uint64_t i = 0; i < r->nblocks; i++)
    if (r->blocks[i].state == REF_LIVE) live += r->blocks[i].size;
  return live;
}

/* Bytes of the allocations made after block i (those never placed do not count). */
static uint64_t ref_allocated_after(const ref_life *r, uint64_t i) {
  uint64_t bytes = 0;
  for (uint64_t j = i + 1; j < r->nblocks; j++)
    if (r->blocks[j].state != REF_FORGOTTEN) bytes += r->blocks[j].size;
  return bytes;
}

/* Returns the index of the new block and its class (1 static). Changes
 * nothing else: a prediction counts once its block is placed. */
static uint64_t ref_predict(ref_life *r, uint64_t size, int stream, int *is_static) {
  if (r->nblocks == r->cap) {
    r->cap = r->cap ? 2 * r->cap : 1024;
    r->blocks = realloc(r->blocks, r->cap * sizeof *r->blocks);
    if (!r->blocks) exit(1);
  }
  r->blocks[r->nblocks] = (ref_block){size, ref_units(size), r->marks, stream, REF_FORGOTTEN};
  ref_key *k = ref_find(r, size, stream);
  *is_static = !r->freed || (k && k->counter >= 2); /* build phase: static; never seen: transient */
  return r->nblocks++;
}

/* The block of the latest prediction was placed: it is live, a build-phase
 * key starts at 3, and the peak may rise. */
static void ref_place(ref_life *r, uint64_t i, int is_static) {
  ref_block *b = &r->blocks[i];
  b->state = REF_LIVE;
  if (!r->freed) {
    ref_key *k = ref_find(r, b->size, b->stream);
    if (!k) k = ref_add_key(r, b->size, b->stream, 3);
    k->counter = 3;
  }
  is_static ? r->predicted_static++ : r->predicted_transient++;
  uint64_t live = ref_live(r);
  if (live > r->peak) r->peak = live;
}

static int ref_observe(ref_life *r, uint64_t i) {
  ref_block *b = &r->blocks[i];
  r->freed = 1;
  b->state = REF_FREED;
  int long_lived = r->marks ? b->marks_at_birth != r->marks /* survived a step mark */
                            : ref_allocated_after(r, i) > 2 * r->peak;
  ref_key *k = ref_find(r, b->size, b->stream);
  if (!k) ref_add_key(r, b->size, b->stream, long_lived ? 2 : 0);
  else if (long_lived && k->counter < 3) k->counter++;
  else if (!long_lived && k->counter > 0) k->counter--;
  long_lived ? r->observed_long++ : r->observed_short++;
  return long_lived;
}

/* ==== randomized differential run ==== */
typedef struct live_block {
  hbm_life_stamp stamp;
  uint64_t ref;
} live_block;

static void compare(const hbm_lifetime *l, const ref_life *r, const uint64_t *unit_set, int nunits, int nstreams,
                    uint64_t seed, int run, uint64_t event) {
  int before = test_failures_;
  CHECK_EQ_U64(l->live_bytes, ref_live(r));
  CHECK_EQ_U64(l->peak_live_bytes, r->peak);
  CHECK_EQ_U64(l->predicted_static, r->predicted_static);
  CHECK_EQ_U64(l->predicted_transient, r->predicted_transient);
  CHECK_EQ_U64(l->observed_long, r->observed_long);
  CHECK_EQ_U64(l->observed_short, r->observed_short);
  CHECK_EQ_U64(l->counters.used, (uint64_t)r->nkeys);
  CHECK(hbm_addrmap_check(&l->counters, NULL, NULL) == 0);
  for (int u = 0; u < nunits; u++)
    for (int s = -1; s < nstreams; s++) {
      uint64_t size = unit_set[u] * 512;
      ref_key *k = ref_find((ref_life *)r, size, s);
      int counter = hbm_lifetime_counter(l, size, s);
      CHECK(counter >= -1 && counter <= 3);
      CHECK(counter == (k ? k->counter : -1));
    }
  if (test_failures_ != before)
    fprintf(stderr, "  after event %" PRIu64 " of run %d (HBM_SEED=%" PRIu64 ")\n", event, run, seed);
}

static void random_runs(uint64_t seed) {
  uint64_t rng = seed;
  int runs = (int)(1000 * test_scale());
  if (runs < 10) runs = 10;
  for (int run = 0; run < runs && test_failures_ == 0; run++) {
    /* a few keys: sizes from tiny to large, so the peak rule sees real spread */
    static const uint64_t unit_pool[] = {1, 2, 3, 8, 100, 2048, 40000};
    uint64_t unit_set[4];
    int nunits = 1 + (int)test_rand_below(&rng, 4), nstreams = 1 + (int)test_rand_below(&rng, 3);
    for (int u = 0; u < nunits; u++) unit_set[u] = unit_pool[test_rand_below(&rng, 7)];
    int marks_per_mille = test_rand_below(&rng, 3) ? 0 : 1 + (int)test_rand_below(&rng, 60);
    int free_pct = 20 + (int)test_rand_below(&rng, 60), forget_pct = (int)test_rand_below(&rng, 8);
    int build = (int)test_rand_below(&rng, 40); /* allocations before the first free */
    int whole_units = (int)test_rand_below(&rng, 2); /* exact sizes: ties at 2 x peak happen */
    uint64_t step = test_rand_below(&rng, 2);   /* step numbers may start at 0 and repeat */
    uint64_t events = 200 + test_rand_below(&rng, 1800);
    hbm_lifetime l;
    ref_life r = {0};
    live_block live[512];
    int nlive = 0;
    hbm_lifetime_init(&l);
    for (uint64_t e = 0; e < events && test_failures_ == 0; e++) {
      uint64_t roll = test_rand_below(&rng, 1000);
      if (roll < (uint64_t)marks_per_mille) {
        if (test_rand_below(&rng, 4)) step++;
        hbm_lifetime_step(&l, step);
        r.marks++;
      } else if (nlive && (nlive == 512 || (e >= (uint64_t)build && test_rand_below(&rng, 100) < (uint64_t)free_pct))) {
        int k = (int)test_rand_below(&rng, (uint64_t)nlive);
        int got = hbm_lifetime_observe(&l, &live[k].stamp), want = ref_observe(&r, live[k].ref);
        CHECK(got == want);
        live[k] = live[--nlive];
      } else {
        /* sizes anywhere in their 512 B unit, the stream sometimes -1 */
        uint64_t units = unit_set[test_rand_below(&rng, (uint64_t)nunits)];
        uint64_t size = units * 512 - (whole_units ? 0 : test_rand_below(&rng, 512));
        int stream = (int)test_rand_below(&rng, (uint64_t)nstreams + 1) - 1;
        hbm_life_stamp stamp;
        int want_static;
        hbm_life got = hbm_lifetime_predict(&l, size, stream, &stamp);
        uint64_t ref = ref_predict(&r, size, stream, &want_static);
        CHECK(got == (want_static ? HBM_LIFE_STATIC : HBM_LIFE_TRANSIENT));
        if (test_rand_below(&rng, 100) < (uint64_t)forget_pct) { /* never placed: it leaves no trace */
          hbm_lifetime_forget(&l, &stamp);
        } else {
          ref_place(&r, ref, want_static);
          live[nlive++] = (live_block){stamp, ref};
        }
      }
      compare(&l, &r, unit_set, nunits, nstreams, seed, run, e);
    }
    hbm_lifetime_release(&l);
    free(r.blocks);
  }
}

int main(void) {
  uint64_t seed = test_seed("test_zoned_lifetime");
  hbm_lifetime l;
  hbm_life_stamp s[16];

  /* ---- build phase: everything static until the first free ---- */
  hbm_lifetime_init(&l);
  CHECK(hbm_lifetime_predict(&l, 100 * MiB, 0, &s[0]) == HBM_LIFE_STATIC);
  CHECK(hbm_lifetime_predict(&l, 7 * MiB, 0, &s[1]) == HBM_LIFE_STATIC);
  CHECK(hbm_lifetime_counter(&l, 100 * MiB, 0) == 3);
  CHECK(hbm_lifetime_counter(&l, 5 * MiB, 0) == -1);
  /* sizes in the same 512 B unit share a key; streams do not */
  CHECK(hbm_lifetime_counter(&l, 7 * MiB - 100, 0) == 3);
  CHECK(hbm_lifetime_counter(&l, 7 * MiB, 1) == -1);
  /* the first free ends the build phase; a short life counts the key down */
  CHECK(hbm_lifetime_predict(&l, 3 * MiB, 0, &s[2]) == HBM_LIFE_STATIC);
  CHECK(hbm_lifetime_observe(&l, &s[2]) == 0);
  CHECK(hbm_lifetime_counter(&l, 3 * MiB, 0) == 2);
  /* a key never seen is transient now */
  CHECK(hbm_lifetime_predict(&l, 5 * MiB, 0, &s[3]) == HBM_LIFE_TRANSIENT);
  /* a key seen in the build phase stays static until its blocks prove short */
  CHECK(hbm_lifetime_predict(&l, 7 * MiB, 0, &s[4]) == HBM_LIFE_STATIC);
  CHECK(hbm_lifetime_observe(&l, &s[4]) == 0); /* 3 -> 2: still static */
  CHECK(hbm_lifetime_predict(&l, 7 * MiB, 0, &s[4]) == HBM_LIFE_STATIC);
  CHECK(hbm_lifetime_observe(&l, &s[4]) == 0); /* 2 -> 1: transient */
  CHECK(hbm_lifetime_predict(&l, 7 * MiB, 0, &s[4]) == HBM_LIFE_TRANSIENT);
  CHECK(hbm_lifetime_observe(&l, &s[4]) == 0);
  CHECK(hbm_lifetime_counter(&l, 7 * MiB, 0) == 0); /* saturates at 0 */
  CHECK(hbm_lifetime_observe(&l, &s[3]) == 0);
  CHECK(l.live_bytes == 107 * MiB); /* s[0] and s[1] are still live */
  hbm_lifetime_release(&l);

  /* ---- with step marks: surviving a boundary is long-lived ---- */
  hbm_lifetime_init(&l);
  hbm_lifetime_predict(&l, 1 * MiB, 0, &s[0]); /* build phase */
  hbm_lifetime_observe(&l, &s[0]);
  hbm_lifetime_step(&l, 1);
  /* a gradient-like key: allocated in one step, freed in the next */
  for (int k = 0; k < 3; k++) {
    hbm_life want = k == 0 ? HBM_LIFE_TRANSIENT : HBM_LIFE_STATIC; /* unseen; its first life sets the counter */
    CHECK(hbm_lifetime_predict(&l, 64 * MiB, 0, &s[1]) == want);
    hbm_lifetime_step(&l, (uint64_t)k + 2);
    CHECK(hbm_lifetime_observe(&l, &s[1]) == 1);
  }
  CHECK(hbm_lifetime_counter(&l, 64 * MiB, 0) == 3);
  /* an activation-like key: allocated and freed within a step, whatever came between */
  for (int k = 0; k < 4; k++) {
    CHECK(hbm_lifetime_predict(&l, 96 * MiB, 0, &s[2]) == HBM_LIFE_TRANSIENT);
    for (int j = 0; j < 8; j++) {
      hbm_lifetime_predict(&l, 512 * MiB, 1, &s[3]);
      hbm_lifetime_observe(&l, &s[3]);
    }
    CHECK(hbm_lifetime_observe(&l, &s[2]) == 0);
  }
  CHECK(hbm_lifetime_counter(&l, 96 * MiB, 0) == 0);
  CHECK(l.observed_long == 3);
  hbm_lifetime_release(&l);

  /* ---- without step marks: twice the peak live bytes allocated meanwhile ---- */
  hbm_lifetime_init(&l);
  hbm_lifetime_predict(&l, 10 * MiB, 0, &s[0]);
  hbm_lifetime_observe(&l, &s[0]); /* ends the build phase; peak live 10 MiB */
  hbm_lifetime_predict(&l, 10 * MiB, 0, &s[1]); /* peak live stays 10 MiB */
  hbm_lifetime_predict(&l, 1 * MiB, 0, &s[2]);
  /* 15 MiB allocated after s[1] (< 2 x 11 MiB peak): short */
  for (int j = 0; j < 15; j++) { hbm_lifetime_predict(&l, 1 * MiB, 2, &s[3]); hbm_lifetime_observe(&l, &s[3]); }
  CHECK(hbm_lifetime_observe(&l, &s[2]) == 0);
  /* 10 more MiB: s[1] has now seen 26 MiB pass (> 22): long */
  for (int j = 0; j < 10; j++) { hbm_lifetime_predict(&l, 1 * MiB, 2, &s[3]); hbm_lifetime_observe(&l, &s[3]); }
  CHECK(hbm_lifetime_observe(&l, &s[1]) == 1);
  CHECK(l.live_bytes == 0);
  /* forget: a prediction whose block was never placed leaves no trace */
  uint64_t clock = l.clock;
  hbm_lifetime_predict(&l, 4 * MiB, 0, &s[4]);
  hbm_lifetime_forget(&l, &s[4]);
  CHECK(l.live_bytes == 0 && l.clock == clock);
  hbm_lifetime_release(&l);

  random_runs(seed);
  return test_done("test_zoned_lifetime");
}
