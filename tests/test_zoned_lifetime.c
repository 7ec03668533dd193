/* test_zoned_lifetime: the online lifetime rule zoned uses for blocks that
 * carry no tag (core/lifetime.h): the build phase is static; afterwards a
 * 2-bit counter per (size rounded to 512 B, stream) learns from lifetimes;
 * long-lived means surviving a step mark, or, without marks, staying live
 * while more than twice the peak live bytes were allocated. */
#include "core/lifetime.h"
#include "hbm.h"
#include "testutil.h"

#define MiB (1ull << 20)

int main(void) {
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
  return test_done("test_zoned_lifetime");
}
