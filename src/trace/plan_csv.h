/* plan_csv.h: static-planning problems in MiniMalloc's CSV, the format the
 * public planning benchmarks (MiniMalloc, TelaMalloc's inputs) come in, so
 * that hbm's step planner (core/dsa.h) can be run and judged on them with
 * `hbm plan` (docs/plan.md is the contract).
 *
 *   id,lower,upper,size          header: column names, in any order
 *   0,45,247,589825              a buffer live over [lower, upper), `size` units
 *
 * Columns (at most 64): id (aliases buffer, buffer_id), lower (start,
 * begin), upper, or end (an inclusive last time: upper = end + 1), size;
 * optional alignment (a power of two; the plan aligns every buffer to the
 * largest) and offset (a
 * plan already made, e.g. MiniMalloc's solution, checked and measured beside
 * hbm's). Other columns are read past; `gaps` (MiniMalloc's lifetimes with
 * holes) is refused, as the planner has no such lifetimes. Blank lines and
 * CR LF line ends are taken; quoted fields and lines ending in CR alone are
 * not.
 */
#ifndef HBM_PLAN_CSV_H
#define HBM_PLAN_CSV_H

#include <stddef.h>
#include <stdint.h>

#include "core/dsa.h"
#include "hbm.h"

/* Limits that keep every sum a plan makes inside 63 bits: a footprint is at
 * most the sizes' total plus one alignment per buffer. */
#define HBM_PLAN_MAX_VALUE (1ull << 62) /* a time, or a given offset + its size */
#define HBM_PLAN_MAX_TOTAL (1ull << 60)  /* all sizes together */
#define HBM_PLAN_MAX_ALIGN (1ull << 30)
#define HBM_PLAN_MAX_BUFFERS (1u << 30)

/* A parsed problem. Invariants: blocks[i] is well formed (1 <= size, the
 * sizes' total <= HBM_PLAN_MAX_TOTAL; start < end < HBM_PLAN_MAX_VALUE); ids
 * are non-empty and distinct; align is a power of two <= HBM_PLAN_MAX_ALIGN;
 * a given offset + its size <= HBM_PLAN_MAX_VALUE (a given plan is checked by
 * its user, not trusted by the reader). */
typedef struct hbm_plan_input {
  size_t n;
  hbm_dsa_block *blocks;
  char **ids;           /* n strings, into id_pool */
  char *id_pool;
  uint32_t *lines;      /* each buffer's line in the file, for messages */
  uint64_t *offsets;    /* the input's offset column, or NULL without one */
  uint8_t *align_log2;  /* the input's alignment column, as log2, or NULL without one */
  uint64_t align;       /* the largest alignment; 1 without the column */
} hbm_plan_input;

/* Parses `len` bytes (not necessarily NUL-terminated); `name` is used in
 * diagnostics. HBM_OK and *out filled; HBM_EPARSE with diag at the line (and
 * byte offset) and what was expected; HBM_EHOSTMEM. On error *out is
 * untouched. */
int hbm_plan_csv_parse(const char *text, size_t len, const char *name, hbm_plan_input *out, hbm_diag *diag);
/* Frees what parse allocated; the struct is zeroed. */
void hbm_plan_input_free(hbm_plan_input *in);

/* Text from a file as a message may quote it: at most 40 bytes (then
 * "..."), control bytes (C1 too) and bytes that are no UTF-8 as '?' so that
 * no escape reaches a terminal. Returns buf. The reader's diagnostics and
 * `hbm plan`'s report use it. */
const char *hbm_plan_csv_quote(const char *text, size_t len, char buf[48]);

/* Renders the problem with `offsets` as MiniMalloc writes a solution:
 * id,lower,upper,size[,alignment],offset, half-open lifetimes, one line per
 * buffer in the input's order. *text is malloc'd and NUL-terminated.
 * HBM_OK or HBM_EHOSTMEM (nothing allocated). */
int hbm_plan_csv_render(const hbm_plan_input *in, const uint64_t *offsets, char **text, size_t *len);

#endif
