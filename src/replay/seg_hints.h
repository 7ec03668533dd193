/* seg_hints.h: a recording's segment addresses, handed to PyTorch's model when
 * it asks the device for a segment, so that a replay places segments where
 * CUDA placed them (hbm fidelity; hbm replay of caching and expandable).
 *
 * The recorded segment allocations of one malloc come just before its alloc
 * event. The model's next segment of a recorded size takes that address (a
 * request that fails gives it back to the retry after the cache is freed); a
 * new expandable reservation takes the first recorded one (PyTorch maps a
 * fresh reservation from its start right after making it). Where an address
 * is taken (a live segment, a layout already departed from the recording),
 * the device picks one. The model never sees an address it did not ask for:
 * only where a new segment lands changes, as CUDA decided it. */
#ifndef HBM_SEG_HINTS_H
#define HBM_SEG_HINTS_H

#include <stddef.h>
#include <stdint.h>

#include "device/device.h"

typedef struct hbm_seg_hint {
  uint64_t addr, size;
  int used;
} hbm_seg_hint;

typedef struct hbm_seg_hints {
  hbm_device *dev;     /* sim: reservation addresses are named through it */
  int clear_only;      /* a reservation only where none lies: a replay whose layout may
                        * depart from the recording (fidelity follows it, and a recorded
                        * reservation's unused tail may reach over later ones) */
  hbm_seg_hint *h;     /* the recorded segment allocations since the last alloc event */
  size_t n, cap;
  size_t pending;      /* 1 + the hint given to this malloc's last segment request; 0: none */
} hbm_seg_hints;

/* A recorded segment allocation (HBM_EV_SEG_ALLOC). HBM_EHOSTMEM if it cannot be kept. */
int hbm_seg_hints_add(hbm_seg_hints *s, uint64_t addr, uint64_t size);
/* After each alloc event: hints belong to the malloc that recorded them. */
static inline void hbm_seg_hints_clear(hbm_seg_hints *s) { s->n = s->pending = 0; }
/* The hbm_pt_hooks.hint callback; arg is the hbm_seg_hints. */
uint64_t hbm_seg_hints_take(void *arg, int reservation, uint64_t size, int stream, int small, uint64_t proposed);
void hbm_seg_hints_release(hbm_seg_hints *s);

#endif
