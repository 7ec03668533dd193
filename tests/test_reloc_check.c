/* test_reloc_check: the handle table of a compact heap (core/reloc.h) and the
 * compact policy's own state, white-box.
 *   1. The slot table grows by doubling up to HBM_RELOC_MAX_SLOTS and then
 *      refuses: the arithmetic at 2^31 and at the limit, and a heap whose
 *      table is made to look full answers hbm_alloc_handle with HBM_EHOSTMEM,
 *      counting a failed request and allocating nothing (2^32 slots are never
 *      really made: tens of GiB).
 * A corruption is made through hbm_heap_enter(), which hands out the heap's
 * table; each is undone before the heap is destroyed. */
#include <string.h>

#include "core/reloc.h"
#include "core/util.h"
#include "hbm.h"
#include "testutil.h"

static char last_error[256];
static void keep_error(int err, const char *message, void *arg) {
  (void)arg, (void)err;
  snprintf(last_error, sizeof last_error, "%s", message);
}

static hbm_reloc *table_of(hbm_heap *h) {
  hbm_reloc *r = NULL;
  hbm_heap_enter(h, &r);
  hbm_heap_leave(h);
  return r;
}

/* ---- 1. growth ------------------------------------------------------------------ */
static void growth(hbm_device *sim) {
  CHECK_EQ_U64(hbm_reloc_grown_cap(0), 256);
  CHECK_EQ_U64(hbm_reloc_grown_cap(256), 512);
  CHECK_EQ_U64(hbm_reloc_grown_cap(1u << 30), 1u << 31);
  CHECK_EQ_U64(hbm_reloc_grown_cap(1u << 31), HBM_RELOC_MAX_SLOTS); /* not 2^32, wrapped to 0 */
  CHECK_EQ_U64(hbm_reloc_grown_cap(HBM_RELOC_MAX_SLOTS - 1), HBM_RELOC_MAX_SLOTS);
  CHECK_EQ_U64(hbm_reloc_grown_cap(HBM_RELOC_MAX_SLOTS), 0);
  if (hbm_reloc_grown_cap(HBM_RELOC_MAX_SLOTS) != 0) return; /* the heap below would ask for 64 GiB */
  hbm_heap *h;
  hbm_handle a, b = 7;
  CHECK(hbm_heap_create(sim, "compact", NULL, &h) == HBM_OK);
  CHECK(hbm_alloc_handle(h, 4096, HBM_TAG_ACT, 0, &a) == HBM_OK);
  hbm_reloc *r = table_of(h);
  hbm_reloc saved = *r;
  hbm_stats before, after;
  CHECK(hbm_heap_stats(h, &before) == HBM_OK);
  r->nslots = r->cap = HBM_RELOC_MAX_SLOTS; /* full, and no free slot */
  r->nspare = 0;
  hbm_set_error_handler(keep_error, NULL);
  CHECK(hbm_alloc_handle(h, 4096, HBM_TAG_ACT, 0, &b) == HBM_EHOSTMEM);
  hbm_set_error_handler(NULL, NULL);
  CHECK(b == 7);
  CHECK(strstr(last_error, "4294967295 handles live") != NULL);
  CHECK(r->slots == saved.slots && r->spare == saved.spare); /* not reallocated */
  r->nslots = saved.nslots, r->cap = saved.cap, r->nspare = saved.nspare;
  CHECK(hbm_heap_stats(h, &after) == HBM_OK);
  CHECK_EQ_U64(after.live_blocks, before.live_blocks);
  CHECK_EQ_U64(after.failures, before.failures + 1);
  CHECK(hbm_check(h) == HBM_OK);
  CHECK(hbm_alloc_handle(h, 4096, HBM_TAG_ACT, 0, &b) == HBM_OK);
  CHECK(hbm_free_handle(h, a) == HBM_OK && hbm_free_handle(h, b) == HBM_OK);
  hbm_heap_destroy(h);
}

int main(void) {
  hbm_device *sim;
  CHECK(hbm_device_open("sim:1GiB", &sim) == HBM_OK);
  growth(sim);
  hbm_device_close(sim);
  return test_done("test_reloc_check");
}
