/* fuzz_pickle.c: libFuzzer target for the snapshot pickle reader.
 *
 * Each input is parsed twice: with the default limits, and with tight ones so
 * the limit paths run on small inputs. A parsed tree is walked (the first
 * 64 Ki nodes of its expansion): strings must be NUL-terminated at their
 * length, nesting within the limit, no list or dict as a key. A snapshot
 * reader's lookups run on it. A failure must leave *out untouched and come
 * with a message and an offset inside the input.
 * Seed corpus: fuzz/corpus/pickle/ (written by fuzz/seed_pickle_corpus.py). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trace/pickle.h"

/* Walks at most `budget` nodes of the expanded tree: memo sharing can make a
 * small DAG expand exponentially, which is legal, so only a prefix is walked. */
static uint64_t walk_bounded(const hbm_pk_value *v, uint32_t depth, uint32_t max_depth,
                             uint64_t *budget) {
  if (*budget == 0) return 0;
  (*budget)--;
  if (depth > max_depth) abort();
  uint64_t n = 1;
  if (v->type == HBM_PK_STR || v->type == HBM_PK_BYTES) {
    if (v->u.s.str[v->u.s.len] != 0) abort();
  } else if (v->type == HBM_PK_LIST || v->type == HBM_PK_TUPLE) {
    for (size_t i = 0; i < v->u.seq.n && *budget; i++)
      n += walk_bounded(v->u.seq.items[i], depth + 1, max_depth, budget);
  } else if (v->type == HBM_PK_DICT) {
    for (size_t i = 0; i < v->u.dict.n && *budget; i++) {
      const hbm_pk_value *k = v->u.dict.keys[i];
      if (k->type == HBM_PK_LIST || k->type == HBM_PK_DICT) abort();
      n += walk_bounded(k, depth + 1, max_depth, budget);
      n += walk_bounded(v->u.dict.vals[i], depth + 1, max_depth, budget);
    }
  }
  return n;
}

static void one(const uint8_t *data, size_t size, const hbm_pickle_limits *lim, uint32_t depth) {
  hbm_pickle *doc = NULL;
  hbm_diag diag;
  memset(&diag, 0, sizeof diag);
  int rc = hbm_pickle_parse(data, size, "fuzz.pickle", lim, &doc, &diag);
  if (rc == HBM_OK) {
    const hbm_pk_value *root = hbm_pickle_root(doc);
    if (!root) abort();
    uint64_t budget = 1u << 16;
    walk_bounded(root, 1, depth, &budget);
    /* the lookups a snapshot reader makes */
    const hbm_pk_value *segs = hbm_pk_get(root, "segments");
    for (size_t i = 0; i < hbm_pk_len(segs) && i < 64; i++) {
      int64_t v;
      double f;
      const hbm_pk_value *s = hbm_pk_item(segs, i);
      (void)hbm_pk_int(hbm_pk_get(s, "address"), &v);
      (void)hbm_pk_float(hbm_pk_get(s, "total_size"), &f);
      (void)hbm_pk_str(hbm_pk_get(s, "segment_type"));
    }
    hbm_pickle_free(doc);
  } else {
    if (doc) abort();                      /* *out untouched on failure */
    if (rc == HBM_EPARSE) {
      if (diag.message[0] == 0) abort();   /* bad input must be explained */
      if (diag.offset > size) abort();
    } else if (rc != HBM_EHOSTMEM) {
      abort();
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  one(data, size, NULL, 64 + 1);
  hbm_pickle_limits tight = {.max_depth = 6, .max_nodes = 300, .max_memo = 40};
  one(data, size, &tight, 6 + 1);
  if (size >= 2) (void)hbm_pickle_sniff(data, size);
  return 0;
}
