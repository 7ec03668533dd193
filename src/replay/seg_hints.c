/* seg_hints.c: recorded segment addresses for PyTorch's model (seg_hints.h). */
#include "replay/seg_hints.h"

#include <stdlib.h>

#include "hbm.h"

int hbm_seg_hints_add(hbm_seg_hints *s, uint64_t addr, uint64_t size) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 16;
    hbm_seg_hint *h = realloc(s->h, cap * sizeof *h);
    if (!h) return HBM_EHOSTMEM;
    s->h = h;
    s->cap = cap;
  }
  s->h[s->n++] = (hbm_seg_hint){addr, size, 0};
  return HBM_OK;
}

uint64_t hbm_seg_hints_take(void *arg, int reservation, uint64_t size, int stream, int small, uint64_t proposed) {
  hbm_seg_hints *s = arg;
  (void)stream;
  (void)small;
  if (reservation) {
    uint64_t at = proposed;
    if (!at && s->n) at = s->h[0].addr;
    /* A recording of the other allocator (expandable run over cudaMalloc
     * segments) names segment addresses, where a reservation may overlap a
     * recorded segment still live: the device then picks the address. */
    if (at && !(s->clear_only ? hbm_sim_reserve_is_clear(s->dev, at, size) : hbm_sim_reserve_can_take(s->dev, at, size)))
      at = 0;
    hbm_sim_reserve_next_at(s->dev, at); /* 0: the device's choice */
    return at;
  }
  /* A malloc makes one segment at most, so a second request before the next
   * clear means the last one failed (the device full, before PyTorch frees
   * its cache and retries): its hint goes to the retry, the request CUDA placed. */
  if (s->pending) s->h[s->pending - 1].used = 0;
  s->pending = 0;
  for (size_t i = 0; i < s->n; i++) {
    if (!s->h[i].used && s->h[i].size == size) {
      s->h[i].used = 1;
      s->pending = i + 1;
      return s->h[i].addr;
    }
  }
  return 0;
}

void hbm_seg_hints_release(hbm_seg_hints *s) {
  free(s->h);
  s->h = NULL;
  s->n = s->cap = 0;
}
