/* lifetime.c: see lifetime.h for the rule. */
#include "core/lifetime.h"

#include <string.h>

#include "hbm.h"

enum { LIFE_UNIT = 512, COUNTER_MAX = 3, COUNTER_STATIC = 2 };

/* Never UINT64_MAX (the map's empty key); high bits vary (the map hashes key >> 9). */
static uint64_t life_key(uint64_t size, int stream) {
  uint64_t units = (size + LIFE_UNIT - 1) / LIFE_UNIT;
  uint64_t z = units * 0x9E3779B97F4A7C15ull ^ ((uint64_t)(uint32_t)stream << 1);
  z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
  z ^= z >> 29;
  return z == UINT64_MAX ? 0 : z;
}

void hbm_lifetime_init(hbm_lifetime *l) {
  memset(l, 0, sizeof *l);
  hbm_addrmap_init(&l->counters);
}

void hbm_lifetime_release(hbm_lifetime *l) { hbm_addrmap_release(&l->counters); }

hbm_life hbm_lifetime_predict(hbm_lifetime *l, uint64_t size, int stream, hbm_life_stamp *stamp) {
  uint64_t key = life_key(size, stream), counter;
  *stamp = (hbm_life_stamp){key, l->clock, l->steps_seen, size};
  l->last_peak = l->peak_live_bytes;
  l->last_added_key = 0;
  l->clock += size;
  l->live_bytes += size;
  if (l->live_bytes > l->peak_live_bytes) l->peak_live_bytes = l->live_bytes;
  hbm_life life;
  if (!l->freed) {
    l->last_added_key = !hbm_addrmap_get(&l->counters, key, &counter);
    int held = hbm_addrmap_put(&l->counters, key, COUNTER_MAX) == HBM_OK;
    if (!held) l->last_added_key = 0;
    life = held ? HBM_LIFE_STATIC : HBM_LIFE_TRANSIENT;
  } else if (hbm_addrmap_get(&l->counters, key, &counter)) {
    life = counter >= COUNTER_STATIC ? HBM_LIFE_STATIC : HBM_LIFE_TRANSIENT;
  } else {
    life = HBM_LIFE_TRANSIENT;
  }
  if (life == HBM_LIFE_STATIC) l->predicted_static++;
  else l->predicted_transient++;
  l->last_life = life;
  return life;
}

int hbm_lifetime_observe(hbm_lifetime *l, const hbm_life_stamp *stamp) {
  l->freed = 1;
  l->live_bytes -= stamp->size <= l->live_bytes ? stamp->size : l->live_bytes;
  int long_lived = l->steps_seen ? stamp->birth_marks != l->steps_seen
                                 : l->clock - stamp->birth_clock - stamp->size > 2 * l->peak_live_bytes;
  uint64_t counter = 0;
  int known = hbm_addrmap_get(&l->counters, stamp->key, &counter), moved = 1;
  if (!known) counter = long_lived ? COUNTER_STATIC : 0;
  else if (long_lived && counter < COUNTER_MAX) counter++;
  else if (!long_lived && counter > 0) counter--;
  else moved = 0; /* saturated: most frees of a steady run, and no write needed */
  if (moved) hbm_addrmap_put(&l->counters, stamp->key, counter);
  if (long_lived) l->observed_long++;
  else l->observed_short++;
  return long_lived;
}

void hbm_lifetime_forget(hbm_lifetime *l, const hbm_life_stamp *stamp) {
  l->live_bytes -= stamp->size <= l->live_bytes ? stamp->size : l->live_bytes;
  l->clock -= stamp->size <= l->clock ? stamp->size : l->clock;
  l->peak_live_bytes = l->last_peak; /* a block never placed was never live */
  uint64_t counter;
  if (l->last_added_key) hbm_addrmap_take(&l->counters, stamp->key, &counter);
  l->last_added_key = 0;
  if (l->last_life == HBM_LIFE_STATIC) l->predicted_static--;
  else l->predicted_transient--;
}

/* Counts marks rather than comparing numbers: the first mark may be step 0,
 * and numbers may skip. */
void hbm_lifetime_step(hbm_lifetime *l, uint64_t step) {
  (void)step;
  l->steps_seen++;
}

int hbm_lifetime_counter(const hbm_lifetime *l, uint64_t size, int stream) {
  uint64_t counter;
  return hbm_addrmap_get(&l->counters, life_key(size, stream), &counter) ? (int)counter : -1;
}
