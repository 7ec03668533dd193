/* pickle.h: a reader for the subset of Python's pickle format that PyTorch
 * memory snapshots use (protocols 2 to 5): plain dicts, lists, tuples,
 * strings, ints, floats, bools and None, with the memo. Anything that would
 * construct an object (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ,
 * PERSID, EXT*) is refused. Memory is bounded: nesting depth, memo size and
 * total nodes have limits; lengths are checked against the input.
 *
 * Values form a DAG (memo back-references share nodes) owned by one document;
 * hbm_pickle_free releases all of it.
 */
#ifndef HBM_PICKLE_H
#define HBM_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "hbm.h"

typedef enum hbm_pk_type {
  HBM_PK_NONE = 0,
  HBM_PK_BOOL,
  HBM_PK_INT,    /* fits int64 (LONG1/LONG4 beyond that is refused) */
  HBM_PK_FLOAT,
  HBM_PK_STR,    /* UTF-8, not NUL-terminated in the input; `str` is NUL-terminated */
  HBM_PK_BYTES,
  HBM_PK_LIST,
  HBM_PK_TUPLE,
  HBM_PK_DICT,
} hbm_pk_type;

typedef struct hbm_pk_value hbm_pk_value;
struct hbm_pk_value {
  hbm_pk_type type;
  union {
    int64_t i;        /* INT and BOOL */
    double f;
    struct { const char *str; size_t len; } s;           /* STR, BYTES */
    struct { hbm_pk_value **items; size_t n; } seq;       /* LIST, TUPLE */
    struct { hbm_pk_value **keys, **vals; size_t n; } dict;
  } u;
};

typedef struct hbm_pickle hbm_pickle; /* owns every value */

typedef struct hbm_pickle_limits {
  uint32_t max_depth;   /* default 64 */
  uint64_t max_nodes;   /* default 64 Mi, or the input's bytes where more */
  uint64_t max_memo;    /* default 16 Mi entries, or the input's bytes where more */
} hbm_pickle_limits;

/* The limits a parse of len bytes takes by default: depth 64; values and memo
 * entries 64 Mi and 16 Mi, or len where more (each costs a byte at least). */
hbm_pickle_limits hbm_pickle_default_limits(size_t len);

/* Parses data[0..len). name is used in diag. limits may be NULL (defaults);
 * a zero field also takes its default. HBM_EPARSE with diag->offset at the
 * offending opcode (or byte) and a message that starts "byte N: " and says
 * what was expected; HBM_EHOSTMEM if host memory ran out; HBM_EINVAL for a
 * NULL out or NULL data with len > 0. On error *out is left untouched and
 * nothing stays allocated. diag may be NULL. */
int hbm_pickle_parse(const uint8_t *data, size_t len, const char *name,
                     const hbm_pickle_limits *limits, hbm_pickle **out, hbm_diag *diag);
const hbm_pk_value *hbm_pickle_root(const hbm_pickle *doc);
void hbm_pickle_free(hbm_pickle *doc);

/* Helpers: dict lookup by string key (NULL if absent or not a dict). */
const hbm_pk_value *hbm_pk_get(const hbm_pk_value *dict, const char *key);
/* 1 if v is INT (or BOOL) and sets *out. */
int hbm_pk_int(const hbm_pk_value *v, int64_t *out);
/* NUL-terminated string or NULL if not STR. */
const char *hbm_pk_str(const hbm_pk_value *v);
/* 1 if data starts as a pickle of protocol 2 or later does (the PROTO opcode,
 * 0x80, which no text trace starts with): the reader then takes it or says why
 * not (a protocol it does not know, a truncated file). */
int hbm_pickle_sniff(const uint8_t *data, size_t len);
/* What the file is where it is a snapshot packed in something this reader does
 * not open (gzip, xz, zstd, a zip archive such as torch.save writes), as a phrase
 * that says what to do ("compressed with gzip: decompress it first (gunzip)");
 * NULL for anything else, a pickle or text included. */
const char *hbm_pickle_wrapped(const uint8_t *data, size_t len);

/* ---- additions (compatible with the API above) ---------------------------------
 * What a parsed document guarantees (checked while parsing, so consumers may
 * recurse without their own guards):
 *   - no cycles: a container takes items only until it is stored in another
 *     container (the order every pickler writes); recursive data is refused;
 *   - nesting depth of containers <= limits.max_depth (a scalar is depth 0,
 *     a container 1 + its deepest child);
 *   - dict keys are never lists or dicts (Python could not hash them).
 *   Dicts keep their items in the order the pickle set them. A key set twice
 *   appears twice; the later one is Python's value, and hbm_pk_get finds it
 *   (it searches from the end).
 * Mapping of opcodes to types: SHORT_BINSTRING/BINSTRING (Python 2 str) give
 * STR when the bytes are valid UTF-8, else BYTES; BYTEARRAY8 gives BYTES;
 * INT "01"/"00" (protocol 0 booleans) give BOOL. */

/* 1 if v is FLOAT, INT or BOOL and sets *out. */
int hbm_pk_float(const hbm_pk_value *v, double *out);
/* Number of items of a LIST or TUPLE, pairs of a DICT; 0 otherwise. */
size_t hbm_pk_len(const hbm_pk_value *v);
/* Item i of a LIST or TUPLE, or NULL (wrong type or out of range). */
const hbm_pk_value *hbm_pk_item(const hbm_pk_value *v, size_t i);
/* "none", "bool", "int", "float", "str", "bytes", "list", "tuple", "dict". */
const char *hbm_pk_type_name(hbm_pk_type type);
/* Values created while parsing (shared values count once). */
uint64_t hbm_pickle_node_count(const hbm_pickle *doc);

#endif
