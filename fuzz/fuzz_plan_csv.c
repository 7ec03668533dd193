/* fuzz_plan_csv.c: libFuzzer target for MiniMalloc's CSV reader
 * (hbm_plan_csv_parse, src/trace/plan_csv.h) and what `hbm plan` does with
 * what it reads.
 *
 * The input is handed over as it is, not NUL-terminated. A refusal must say
 * why, at a line or a byte offset inside the input. A problem that is read
 * must hold the reader's invariants, read back the same after rendering, and,
 * when small, be planned validly (checked by the slow pairwise count and the
 * fast sweep, which must agree), never below its peak load; a plan the file
 * carries is judged alike by both checks.
 * Seed corpus: fuzz/corpus/plan_csv/ (hand-written problems, every alias, and
 * one file per kind of refusal). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/dsa.h"
#include "hbm.h"
#include "trace/plan_csv.h"

static void same_verdict(const hbm_plan_input *in, const uint64_t *offsets) {
  size_t first, second;
  int fast = hbm_dsa_first_conflict(in->blocks, in->n, 0, offsets, &first, &second);
  if (fast < 0) {
    if (fast != HBM_EHOSTMEM) abort();
    return;
  }
  if (fast != (hbm_dsa_conflicts(in->blocks, in->n, 0, offsets) > 0)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hbm_plan_input in;
  hbm_diag diag;
  memset(&diag, 0, sizeof diag);
  int rc = hbm_plan_csv_parse((const char *)data, size, "fuzz.csv", &in, &diag);
  if (rc != HBM_OK) {
    if (rc == HBM_EHOSTMEM) return 0;
    if (rc != HBM_EPARSE || !diag.message[0] || diag.offset > size) abort();
    return 0;
  }
  uint64_t total = 0;
  if (!in.align || (in.align & (in.align - 1)) || in.align > HBM_PLAN_MAX_ALIGN) abort();
  for (size_t i = 0; i < in.n; i++) {
    const hbm_dsa_block *b = &in.blocks[i];
    if (!b->size || b->start >= b->end || b->end >= HBM_PLAN_MAX_VALUE || !in.ids[i][0]) abort();
    if ((total += b->size) > HBM_PLAN_MAX_TOTAL) abort();
    if (in.offsets && in.offsets[i] + b->size > HBM_PLAN_MAX_VALUE) abort();
    if (in.align_log2 && (1ull << in.align_log2[i]) > in.align) abort();
    for (size_t j = 0; j < i && in.n <= 64; j++)
      if (!strcmp(in.ids[i], in.ids[j])) abort();
  }
  /* Rendered and read back: the same problem. */
  uint64_t *offsets = calloc(in.n ? in.n : 1, sizeof *offsets);
  char *text = NULL;
  size_t len;
  if (offsets && hbm_plan_csv_render(&in, in.offsets ? in.offsets : offsets, &text, &len) == HBM_OK) {
    hbm_plan_input back;
    if (hbm_plan_csv_parse(text, len, "rendered.csv", &back, &diag) == HBM_OK) {
      if (back.n != in.n || memcmp(back.blocks, in.blocks, in.n * sizeof *in.blocks)) abort();
      for (size_t i = 0; i < in.n; i++)
        if (strcmp(back.ids[i], in.ids[i])) abort();
      hbm_plan_input_free(&back);
    } else if (diag.message[0] && !strstr(diag.message, "host memory")) {
      abort(); /* what the writer writes, the reader reads */
    }
    free(text);
  }
  if (offsets && in.n <= 64) {
    uint64_t footprint;
    rc = hbm_dsa_plan(in.blocks, in.n, 0, in.align, offsets, &footprint);
    if (rc == HBM_OK) {
      if (hbm_dsa_conflicts(in.blocks, in.n, 0, offsets)) abort();
      size_t first, second;
      if (hbm_dsa_first_conflict(in.blocks, in.n, 0, offsets, &first, &second) == 1) abort();
      if (footprint < hbm_dsa_peak(in.blocks, in.n, 0)) abort();
      for (size_t i = 0; i < in.n; i++)
        if (offsets[i] % in.align) abort();
    } else if (rc != HBM_EHOSTMEM) {
      abort();
    }
    if (in.offsets) same_verdict(&in, in.offsets);
  }
  free(offsets);
  hbm_plan_input_free(&in);
  return 0;
}
