/* pickle.c: a bounded, non-executing reader for the pickles PyTorch writes in
 * torch.cuda.memory._dump_snapshot (protocols 2 to 5).
 *
 * It is a small stack machine over the opcode stream, like Python's own
 * Unpickler, but it builds only plain values (None, bool, int64, float, str,
 * bytes, list, tuple, dict). Every opcode that would import a name or call
 * something is refused, with the opcode and its byte offset in the message.
 *
 * Bounds, so a forged file cannot take the machine with it:
 *   - every length is checked against the bytes left before anything is
 *     allocated for it; allocations are proportional to the input;
 *   - nesting depth (of values and of open MARKs), memo size and node count
 *     have limits (hbm_pickle_limits);
 *   - a memo index may not exceed the opcodes read so far (a pickler numbers
 *     its memo entries in order, so a larger index is forged), which keeps the
 *     memo array proportional to the input too;
 *   - values never form cycles (see the rule at add_child()).
 *
 * Memory: every value, string and item array lives in one arena owned by the
 * document; hbm_pickle_free releases it in one pass. The value stack, the mark
 * stack and the memo are parser scratch, freed when parsing ends.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "trace/pickle.h"
#include "trace/trace.h"

/* ---- arena ------------------------------------------------------------------ */

typedef struct arena_chunk {
  struct arena_chunk *next;
  size_t size, used;
  _Alignas(16) unsigned char data[];
} arena_chunk;

enum { ARENA_CHUNK_MIN = 256 * 1024 };

/* Bump allocation, 16-byte aligned. NULL when host memory runs out.
 * Small requests share chunks that double in size (up to 8 MiB); a large one
 * gets a chunk of its own, linked below the current one. */
static void *arena_alloc(arena_chunk **head, size_t n) {
  n = (n + 15) & ~(size_t)15;
  arena_chunk *c = *head;
  if (c && c->size - c->used >= n) {
    void *ptr = c->data + c->used;
    c->used += n;
    return ptr;
  }
  if (n > ARENA_CHUNK_MIN / 2 && c) {
    arena_chunk *big = malloc(sizeof *big + n);
    if (!big) return NULL;
    big->size = big->used = n;
    big->next = c->next;
    c->next = big;
    return big->data;
  }
  size_t size = ARENA_CHUNK_MIN;
  if (c && c->size * 2 <= 8u * 1024 * 1024) size = c->size * 2;
  else if (c) size = c->size;
  if (size < n) size = n;
  c = malloc(sizeof *c + size);
  if (!c) return NULL;
  c->size = size;
  c->used = n;
  c->next = *head;
  *head = c;
  return c->data;
}

static void arena_release(arena_chunk *c) {
  while (c) {
    arena_chunk *next = c->next;
    free(c);
    c = next;
  }
}

/* ---- values ------------------------------------------------------------------ */

/* A value plus what the parser needs to know about it. `v` comes first, so a
 * pk_node * is also a hbm_pk_value *.
 * Invariants: depth == 0 for scalars, 1 + max(depth of items) for containers
 * (1 when empty); cap >= n for lists and dicts; a sealed container has been
 * stored in another container and never takes another item. */
typedef struct pk_node {
  hbm_pk_value v;
  size_t cap;        /* capacity of the item (or key/value) arrays */
  uint32_t depth;
  uint8_t sealed;
  uint8_t unhashable; /* list, dict, or a tuple holding one */
} pk_node;

struct hbm_pickle {
  arena_chunk *arena;
  hbm_pk_value *root;
  uint64_t nodes;
};

/* ---- opcodes ------------------------------------------------------------------ */

enum {
  OP_MARK = '(', OP_STOP = '.', OP_POP = '0', OP_POP_MARK = '1', OP_DUP = '2',
  OP_FLOAT = 'F', OP_INT = 'I', OP_BININT = 'J', OP_BININT1 = 'K', OP_LONG = 'L',
  OP_BININT2 = 'M', OP_NONE = 'N', OP_PERSID = 'P', OP_BINPERSID = 'Q', OP_REDUCE = 'R',
  OP_STRING = 'S', OP_BINSTRING = 'T', OP_SHORT_BINSTRING = 'U', OP_UNICODE = 'V',
  OP_BINUNICODE = 'X', OP_APPEND = 'a', OP_BUILD = 'b', OP_GLOBAL = 'c', OP_DICT = 'd',
  OP_EMPTY_DICT = '}', OP_APPENDS = 'e', OP_GET = 'g', OP_BINGET = 'h', OP_INST = 'i',
  OP_LONG_BINGET = 'j', OP_LIST = 'l', OP_EMPTY_LIST = ']', OP_OBJ = 'o', OP_PUT = 'p',
  OP_BINPUT = 'q', OP_LONG_BINPUT = 'r', OP_SETITEM = 's', OP_TUPLE = 't',
  OP_EMPTY_TUPLE = ')', OP_SETITEMS = 'u', OP_BINFLOAT = 'G',
  OP_PROTO = 0x80, OP_NEWOBJ = 0x81, OP_EXT1 = 0x82, OP_EXT2 = 0x83, OP_EXT4 = 0x84,
  OP_TUPLE1 = 0x85, OP_TUPLE2 = 0x86, OP_TUPLE3 = 0x87, OP_NEWTRUE = 0x88,
  OP_NEWFALSE = 0x89, OP_LONG1 = 0x8a, OP_LONG4 = 0x8b,
  OP_BINBYTES = 'B', OP_SHORT_BINBYTES = 'C',
  OP_SHORT_BINUNICODE = 0x8c, OP_BINUNICODE8 = 0x8d, OP_BINBYTES8 = 0x8e,
  OP_EMPTY_SET = 0x8f, OP_ADDITEMS = 0x90, OP_FROZENSET = 0x91, OP_NEWOBJ_EX = 0x92,
  OP_STACK_GLOBAL = 0x93, OP_MEMOIZE = 0x94, OP_FRAME = 0x95,
  OP_BYTEARRAY8 = 0x96, OP_NEXT_BUFFER = 0x97, OP_READONLY_BUFFER = 0x98,
};

static const char *op_name(int op) {
  switch (op) {
#define N_(name) case OP_##name: return #name;
    N_(MARK) N_(STOP) N_(POP) N_(POP_MARK) N_(DUP) N_(FLOAT) N_(INT) N_(BININT)
    N_(BININT1) N_(LONG) N_(BININT2) N_(NONE) N_(PERSID) N_(BINPERSID) N_(REDUCE)
    N_(STRING) N_(BINSTRING) N_(SHORT_BINSTRING) N_(UNICODE) N_(BINUNICODE) N_(APPEND)
    N_(BUILD) N_(GLOBAL) N_(DICT) N_(EMPTY_DICT) N_(APPENDS) N_(GET) N_(BINGET) N_(INST)
    N_(LONG_BINGET) N_(LIST) N_(EMPTY_LIST) N_(OBJ) N_(PUT) N_(BINPUT) N_(LONG_BINPUT)
    N_(SETITEM) N_(TUPLE) N_(EMPTY_TUPLE) N_(SETITEMS) N_(BINFLOAT) N_(PROTO) N_(NEWOBJ)
    N_(EXT1) N_(EXT2) N_(EXT4) N_(TUPLE1) N_(TUPLE2) N_(TUPLE3) N_(NEWTRUE) N_(NEWFALSE)
    N_(LONG1) N_(LONG4) N_(BINBYTES) N_(SHORT_BINBYTES) N_(SHORT_BINUNICODE)
    N_(BINUNICODE8) N_(BINBYTES8) N_(EMPTY_SET) N_(ADDITEMS) N_(FROZENSET) N_(NEWOBJ_EX)
    N_(STACK_GLOBAL) N_(MEMOIZE) N_(FRAME) N_(BYTEARRAY8) N_(NEXT_BUFFER)
    N_(READONLY_BUFFER)
#undef N_
  }
  return NULL;
}

/* ---- parser state ----------------------------------------------------------------- */

typedef struct parser {
  const uint8_t *data;
  size_t len, pos;     /* pos: next byte to read */
  size_t op_pos;       /* offset of the opcode being executed (for messages) */
  int op;
  const char *name;
  hbm_diag *diag;
  hbm_pickle_limits lim;
  hbm_pickle *doc;

  pk_node **stack;     /* values; the top level starts at marks[nmarks-1] */
  size_t nstack, stack_cap;
  size_t *marks;
  size_t nmarks, marks_cap;
  pk_node **memo;      /* memo[i] or NULL; entries 0..memo_cap-1 exist */
  size_t memo_cap;
  uint64_t memo_count; /* distinct indices set (MEMOIZE uses this, like Python's len(memo)) */

  pk_node *none, *true_, *false_; /* shared singletons */
} parser;

/* Records the message and its byte offset in diag; returns HBM_EPARSE. */
__attribute__((format(printf, 3, 4)))
static int fail_at(parser *p, size_t offset, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  hbm_vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return hbm_diag_set(p->diag, p->name, 0, offset, "%s", msg);
}
#define FAIL(...) fail_at(p, p->op_pos, __VA_ARGS__)

static int fail_nomem(parser *p) {
  hbm_diag_set(p->diag, p->name, 0, p->op_pos, "out of host memory");
  return HBM_EHOSTMEM;
}

static const char *cur_name(const parser *p) {
  const char *n = op_name(p->op);
  return n ? n : "?";
}

/* Grows a malloc'd scratch array of `elem`-sized entries to hold `need`. */
static int grow(void **arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : 64;
  while (n < need) n *= 2;
  void *a = realloc(*arr, n * elem);
  if (!a) return -1;
  *arr = a;
  *cap = n;
  return 0;
}

static inline size_t level_base(const parser *p) {
  return p->nmarks ? p->marks[p->nmarks - 1] : 0;
}

static inline int push(parser *p, pk_node *v) {
  if (p->nstack == p->stack_cap &&
      grow((void **)&p->stack, &p->stack_cap, p->nstack + 1, sizeof *p->stack))
    return fail_nomem(p);
  p->stack[p->nstack++] = v;
  return HBM_OK;
}

/* Fails unless the current level (above the last MARK) holds >= n values. */
static inline int need_values(parser *p, size_t n) {
  size_t have = p->nstack - level_base(p);
  if (have >= n) return HBM_OK;
  if (p->nstack >= n)
    return FAIL("%s needs %zu value(s) after the last MARK, found %zu", cur_name(p), n, have);
  return FAIL("%s needs %zu value(s) on the stack, found %zu", cur_name(p), n, have);
}

static pk_node *new_node(parser *p, hbm_pk_type type) {
  if (p->doc->nodes >= p->lim.max_nodes) return NULL;
  pk_node *n = arena_alloc(&p->doc->arena, sizeof *n);
  if (!n) return NULL;
  memset(n, 0, sizeof *n);
  n->v.type = type;
  n->depth = (type == HBM_PK_LIST || type == HBM_PK_TUPLE || type == HBM_PK_DICT) ? 1 : 0;
  n->unhashable = (type == HBM_PK_LIST || type == HBM_PK_DICT);
  p->doc->nodes++;
  return n;
}

/* new_node's failure as an error code: node limit or host memory. */
static int node_fail(parser *p) {
  if (p->doc->nodes >= p->lim.max_nodes)
    return FAIL("more than %llu values (node limit)", (unsigned long long)p->lim.max_nodes);
  return fail_nomem(p);
}

static inline int push_new(parser *p, pk_node *n) {
  if (!n) return node_fail(p);
  return push(p, n);
}

/* ---- reading the input ----------------------------------------------------------- */

static inline size_t left(const parser *p) { return p->len - p->pos; }

/* Fails unless n argument bytes follow the opcode, naming the byte where
 * they were wanted (never 0: the opcode is before it). */
static inline int need_bytes(parser *p, size_t n) {
  if (left(p) >= n) return HBM_OK;
  return fail_at(p, p->pos, "truncated %s: needs %zu argument byte(s), %zu left", cur_name(p), n, left(p));
}

static inline uint32_t rd_u32(const uint8_t *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static inline uint64_t rd_u64(const uint8_t *b) {
  return (uint64_t)rd_u32(b) | (uint64_t)rd_u32(b + 4) << 32;
}

/* Reads an n-byte little-endian length, checks the data it announces is there,
 * and sets *out. `max` bounds the length when signed (BINSTRING, LONG4). */
static int read_length(parser *p, size_t width, int is_signed, size_t *out) {
  int rc = need_bytes(p, width);
  if (rc) return rc;
  const uint8_t *b = p->data + p->pos;
  uint64_t n = width == 1 ? b[0] : width == 4 ? rd_u32(b) : rd_u64(b);
  p->pos += width;
  if (is_signed && width == 4 && (n & 0x80000000u))
    return FAIL("%s: negative length %d", cur_name(p), (int)(int32_t)(uint32_t)n);
  if (n > left(p))
    return FAIL("truncated %s: length %llu exceeds the %zu bytes left", cur_name(p),
                (unsigned long long)n, left(p));
  *out = (size_t)n;
  return HBM_OK;
}

/* Text argument up to '\n' (protocol 0 forms): sets *line (not terminated) and
 * *n, and moves past the newline. */
static int read_line(parser *p, const char **line, size_t *n) {
  const uint8_t *start = p->data + p->pos;
  *line = NULL; /* defined on every path, so callers (and the optimizer) see them set */
  *n = 0;
  const uint8_t *nl = memchr(start, '\n', left(p));
  if (!nl) return FAIL("truncated %s: no newline ends its argument", cur_name(p));
  *line = (const char *)start;
  *n = (size_t)(nl - start);
  p->pos += *n + 1;
  return HBM_OK;
}

/* ---- UTF-8 -------------------------------------------------------------------- */

/* Python decodes pickled str as UTF-8 with 'surrogatepass', so encoded
 * surrogates (ED A0..BF xx) are accepted; overlong forms and values above
 * U+10FFFF are not. Returns the offset of the first bad byte, or n. */
static size_t utf8_check(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    /* ASCII fast path, 8 bytes at a time */
    while (i + 8 <= n) {
      uint64_t w;
      memcpy(&w, s + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    uint8_t c = s[i];
    if (c < 0x80) { i++; continue; }
    size_t k;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) k = 1;
    else if (c == 0xE0) { k = 2; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEF) k = 2;
    else if (c == 0xF0) { k = 3; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) k = 3;
    else if (c == 0xF4) { k = 3; hi = 0x8F; }
    else return i;
    if (n - i <= k) return i;
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t j = 2; j <= k; j++)
      if ((s[i + j] & 0xC0) != 0x80) return i;
    i += k + 1;
  }
  return n;
}

/* ---- building values ------------------------------------------------------------- */

/* A string or bytes value: the data copied into the arena, NUL-terminated. */
static int push_string(parser *p, hbm_pk_type type, const uint8_t *s, size_t n) {
  pk_node *v = new_node(p, type);
  if (!v) return node_fail(p);
  char *copy = arena_alloc(&p->doc->arena, n + 1);
  if (!copy) return fail_nomem(p);
  memcpy(copy, s, n);
  copy[n] = 0;
  v->v.u.s.str = copy;
  v->v.u.s.len = n;
  return push(p, v);
}

static int push_int(parser *p, int64_t i) {
  pk_node *v = new_node(p, HBM_PK_INT);
  if (!v) return node_fail(p);
  v->v.u.i = i;
  return push(p, v);
}

/* Stores `child` in `container`: the one place edges between values are made.
 *
 * The no-cycle rule: a container takes items only while it is unsealed, and
 * storing a container anywhere seals it. A cycle would need its last-made
 * edge to point from a container that was already stored in the previous
 * member of the cycle, i.e. already sealed; so no cycle can form. Every
 * pickler writes a container's items before the container is stored in its
 * parent, so only recursive data (a list that holds itself) is refused. */
static inline int add_child(parser *p, pk_node *container, pk_node *child) {
  if (child->v.type >= HBM_PK_LIST) {
    if (child == container)
      return FAIL("%s would store a %s inside itself (recursive data is not supported)",
                  cur_name(p), hbm_pk_type_name(child->v.type));
    child->sealed = 1;
    if (child->depth + 1 > container->depth) {
      if (child->depth + 1 > p->lim.max_depth)
        return FAIL("values nest deeper than %u levels", p->lim.max_depth);
      container->depth = child->depth + 1;
    }
  }
  return HBM_OK;
}

static int check_open(parser *p, pk_node *c, hbm_pk_type want) {
  if (c->v.type != want)
    return FAIL("%s expects a %s below its items, found a %s", cur_name(p),
                hbm_pk_type_name(want), hbm_pk_type_name(c->v.type));
  if (c->sealed)
    return FAIL("%s adds to a %s already stored in another value (recursive or "
                "mutated-after-use data is not supported)",
                cur_name(p), hbm_pk_type_name(want));
  return HBM_OK;
}

/* Appends items[0..n) to list `l` (unsealed, checked by the caller). */
static int list_extend(parser *p, pk_node *l, pk_node *const *items, size_t n) {
  size_t have = l->v.u.seq.n;
  if (n > l->cap - have) {
    size_t cap = l->cap ? l->cap * 2 : 4;
    if (cap < have + n) cap = have + n;
    hbm_pk_value **a = arena_alloc(&p->doc->arena, cap * sizeof *a);
    if (!a) return fail_nomem(p);
    if (have) memcpy(a, l->v.u.seq.items, have * sizeof *a);
    l->v.u.seq.items = a;
    l->cap = cap;
  }
  for (size_t i = 0; i < n; i++) {
    int rc = add_child(p, l, items[i]);
    if (rc) return rc;
    l->v.u.seq.items[have + i] = &items[i]->v;
  }
  l->v.u.seq.n = have + n;
  return HBM_OK;
}

/* Sets pairs kv[0..2*npairs) (key, value, key, value...) in dict `d`. */
static int dict_set(parser *p, pk_node *d, pk_node *const *kv, size_t npairs) {
  size_t have = d->v.u.dict.n;
  if (npairs > d->cap - have) {
    size_t cap = d->cap ? d->cap * 2 : 8;
    if (cap < have + npairs) cap = have + npairs;
    hbm_pk_value **k = arena_alloc(&p->doc->arena, cap * sizeof *k);
    hbm_pk_value **v = arena_alloc(&p->doc->arena, cap * sizeof *v);
    if (!k || !v) return fail_nomem(p);
    if (have) {
      memcpy(k, d->v.u.dict.keys, have * sizeof *k);
      memcpy(v, d->v.u.dict.vals, have * sizeof *v);
    }
    d->v.u.dict.keys = k;
    d->v.u.dict.vals = v;
    d->cap = cap;
  }
  for (size_t i = 0; i < npairs; i++) {
    pk_node *key = kv[2 * i], *val = kv[2 * i + 1];
    if (key->unhashable)
      return FAIL("%s: a %s cannot be a dict key (Python could not hash it)", cur_name(p),
                  hbm_pk_type_name(key->v.type));
    int rc = add_child(p, d, key);
    if (!rc) rc = add_child(p, d, val);
    if (rc) return rc;
    d->v.u.dict.keys[have + i] = &key->v;
    d->v.u.dict.vals[have + i] = &val->v;
  }
  d->v.u.dict.n = have + npairs;
  return HBM_OK;
}

/* Replaces the values at stack[from..nstack) with one new tuple of them. */
static int make_tuple(parser *p, size_t from) {
  size_t n = p->nstack - from;
  pk_node *t = new_node(p, HBM_PK_TUPLE);
  if (!t) return node_fail(p);
  if (n) {
    hbm_pk_value **a = arena_alloc(&p->doc->arena, n * sizeof *a);
    if (!a) return fail_nomem(p);
    for (size_t i = 0; i < n; i++) {
      pk_node *item = p->stack[from + i];
      int rc = add_child(p, t, item);
      if (rc) return rc;
      t->unhashable |= item->unhashable;
      a[i] = &item->v;
    }
    t->v.u.seq.items = a;
    t->v.u.seq.n = n;
  }
  p->nstack = from;
  return push(p, t);
}

static int pop_mark(parser *p, size_t *base) {
  *base = 0; /* defined on every path */
  if (!p->nmarks) return FAIL("%s without a MARK before it", cur_name(p));
  *base = p->marks[--p->nmarks];
  return HBM_OK;
}

/* ---- the memo ------------------------------------------------------------------------ */

static int memo_put(parser *p, uint64_t idx) {
  int rc = need_values(p, 1);
  if (rc) return rc;
  if (idx >= p->lim.max_memo)
    return FAIL("%s: memo index %llu is beyond the limit of %llu entries", cur_name(p),
                (unsigned long long)idx, (unsigned long long)p->lim.max_memo);
  if (idx > p->pos)
    return FAIL("%s: memo index %llu is larger than any pickler numbers its memo this early "
                "in the stream", cur_name(p), (unsigned long long)idx);
  if (idx >= p->memo_cap) {
    size_t old = p->memo_cap;
    if (grow((void **)&p->memo, &p->memo_cap, (size_t)idx + 1, sizeof *p->memo))
      return fail_nomem(p);
    memset(p->memo + old, 0, (p->memo_cap - old) * sizeof *p->memo);
  }
  if (!p->memo[idx]) p->memo_count++;
  p->memo[idx] = p->stack[p->nstack - 1];
  return HBM_OK;
}

static int memo_get(parser *p, uint64_t idx) {
  if (idx >= p->memo_cap || !p->memo[idx])
    return FAIL("%s: memo index %llu was never set", cur_name(p), (unsigned long long)idx);
  return push(p, p->memo[idx]);
}

/* Decimal index of the text forms PUT/GET. */
static int read_text_index(parser *p, uint64_t *idx) {
  const char *s;
  size_t n;
  int rc = read_line(p, &s, &n);
  if (rc) return rc;
  if (n == 0 || n > 19) return FAIL("%s: expected a decimal memo index", cur_name(p));
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return FAIL("%s: expected a decimal memo index", cur_name(p));
    v = v * 10 + (uint64_t)(s[i] - '0');
  }
  *idx = v;
  return HBM_OK;
}

/* ---- integers ------------------------------------------------------------------------- */

/* LONG1/LONG4 payload: little-endian two's complement of any width. */
static int push_long_bytes(parser *p, const uint8_t *b, size_t n) {
  if (n == 0) return push_int(p, 0);
  size_t low = n < 8 ? n : 8;
  uint64_t u = 0;
  for (size_t i = 0; i < low; i++) u |= (uint64_t)b[i] << (8 * i);
  if (n < 8) {
    if (b[n - 1] & 0x80) u |= ~(uint64_t)0 << (8 * n); /* sign-extend */
  } else {
    uint8_t ext = (b[7] & 0x80) ? 0xFF : 0x00;
    for (size_t i = 8; i < n; i++)
      if (b[i] != ext) return FAIL("%s: integer of %zu bytes does not fit in 64 bits", cur_name(p), n);
  }
  int64_t v;
  memcpy(&v, &u, sizeof v);
  return push_int(p, v);
}

/* Decimal text (INT, LONG): optional sign, digits, LONG's optional trailing L. */
static int push_text_int(parser *p) {
  const char *s;
  size_t n;
  int rc = read_line(p, &s, &n);
  if (rc) return rc;
  if (p->op == OP_INT && n == 2 && s[0] == '0' && (s[1] == '0' || s[1] == '1')) {
    pk_node *b = s[1] == '1' ? p->true_ : p->false_;
    return push(p, b);
  }
  if (p->op == OP_LONG && n && s[n - 1] == 'L') n--;
  size_t i = 0;
  int neg = 0;
  if (i < n && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
  if (i == n) return FAIL("%s: expected a decimal integer", cur_name(p));
  uint64_t mag = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return FAIL("%s: expected a decimal integer", cur_name(p));
    unsigned d = (unsigned)(s[i] - '0');
    if (mag > (limit - d) / 10)
      return FAIL("%s: integer does not fit in 64 bits", cur_name(p));
    mag = mag * 10 + d;
  }
  int64_t v = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
  return push_int(p, v);
}

static int push_float(parser *p, double d) {
  pk_node *v = new_node(p, HBM_PK_FLOAT);
  if (!v) return node_fail(p);
  v->v.u.f = d;
  return push(p, v);
}

static int push_text_float(parser *p) {
  const char *s;
  size_t n;
  int rc = read_line(p, &s, &n);
  if (rc) return rc;
  char buf[128];
  if (n == 0 || n >= sizeof buf) return FAIL("FLOAT: expected a decimal number");
  memcpy(buf, s, n);
  buf[n] = 0;
  char *end;
  double d = hbm_strtod(buf, &end);
  if (end != buf + n) return FAIL("FLOAT: expected a decimal number, found \"%s\"", buf);
  return push_float(p, d);
}

/* ---- the machine ------------------------------------------------------------------------ */

static int refuse(parser *p) {
  const char *what = "imports a name or constructs an object";
  switch (p->op) {
  case OP_PERSID: case OP_BINPERSID: what = "loads a persistent id"; break;
  case OP_EXT1: case OP_EXT2: case OP_EXT4: what = "imports a name from the extension registry"; break;
  case OP_NEXT_BUFFER: case OP_READONLY_BUFFER: what = "needs an out-of-band buffer"; break;
  case OP_EMPTY_SET: case OP_ADDITEMS: case OP_FROZENSET:
    return FAIL("opcode %s (0x%02x): sets are not supported (snapshots hold dicts, lists, "
                "tuples and scalars)", cur_name(p), p->op);
  case OP_STRING: case OP_UNICODE:
    return FAIL("opcode %s (0x%02x): protocol 0 quoted strings are not supported (expected "
                "protocol 2 to 5)", cur_name(p), p->op);
  }
  return FAIL("opcode %s (0x%02x) %s; refused: a memory snapshot holds only plain dicts, "
              "lists, tuples and scalars", cur_name(p), p->op, what);
}

static int step(parser *p) {
  int rc;
  size_t n, base;
  switch (p->op) {
  case OP_MARK:
    if (p->nmarks >= p->lim.max_depth)
      return FAIL("MARK: more than %u MARKs open (nesting limit)", p->lim.max_depth);
    if (p->nmarks == p->marks_cap &&
        grow((void **)&p->marks, &p->marks_cap, p->nmarks + 1, sizeof *p->marks))
      return fail_nomem(p);
    p->marks[p->nmarks++] = p->nstack;
    return HBM_OK;

  case OP_POP:
    if (p->nstack > level_base(p)) { p->nstack--; return HBM_OK; }
    if (p->nmarks) { p->nmarks--; return HBM_OK; } /* Python pops the MARK itself */
    return FAIL("POP on an empty stack");
  case OP_POP_MARK:
    if ((rc = pop_mark(p, &base))) return rc;
    p->nstack = base;
    return HBM_OK;
  case OP_DUP:
    if ((rc = need_values(p, 1))) return rc;
    return push(p, p->stack[p->nstack - 1]);

  /* scalars */
  case OP_NONE: return push(p, p->none);
  case OP_NEWTRUE: return push(p, p->true_);
  case OP_NEWFALSE: return push(p, p->false_);
  case OP_BININT1:
    if ((rc = need_bytes(p, 1))) return rc;
    return push_int(p, p->data[p->pos++]);
  case OP_BININT2:
    if ((rc = need_bytes(p, 2))) return rc;
    p->pos += 2;
    return push_int(p, (int64_t)p->data[p->pos - 2] | (int64_t)p->data[p->pos - 1] << 8);
  case OP_BININT:
    if ((rc = need_bytes(p, 4))) return rc;
    p->pos += 4;
    return push_int(p, (int32_t)rd_u32(p->data + p->pos - 4));
  case OP_LONG1:
  case OP_LONG4:
    if ((rc = read_length(p, p->op == OP_LONG1 ? 1 : 4, 1, &n))) return rc;
    p->pos += n;
    return push_long_bytes(p, p->data + p->pos - n, n);
  case OP_INT:
  case OP_LONG:
    return push_text_int(p);
  case OP_BINFLOAT: {
    if ((rc = need_bytes(p, 8))) return rc;
    uint64_t u = 0;
    for (int i = 0; i < 8; i++) u = u << 8 | p->data[p->pos + i]; /* big-endian */
    p->pos += 8;
    double d;
    memcpy(&d, &u, sizeof d);
    return push_float(p, d);
  }
  case OP_FLOAT:
    return push_text_float(p);

  /* strings and bytes */
  case OP_SHORT_BINUNICODE:
  case OP_BINUNICODE:
  case OP_BINUNICODE8: {
    size_t width = p->op == OP_SHORT_BINUNICODE ? 1 : p->op == OP_BINUNICODE ? 4 : 8;
    if ((rc = read_length(p, width, 0, &n))) return rc;
    const uint8_t *s = p->data + p->pos;
    size_t bad = utf8_check(s, n);
    if (bad != n)
      return fail_at(p, p->pos + bad, "%s: invalid UTF-8 (byte 0x%02x) in a string that starts "
                     "at byte %zu", cur_name(p), s[bad], p->pos);
    p->pos += n;
    return push_string(p, HBM_PK_STR, s, n);
  }
  case OP_SHORT_BINSTRING:
  case OP_BINSTRING: {
    if ((rc = read_length(p, p->op == OP_SHORT_BINSTRING ? 1 : 4, 1, &n))) return rc;
    const uint8_t *s = p->data + p->pos;
    p->pos += n;
    return push_string(p, utf8_check(s, n) == n ? HBM_PK_STR : HBM_PK_BYTES, s, n);
  }
  case OP_SHORT_BINBYTES:
  case OP_BINBYTES:
  case OP_BINBYTES8:
  case OP_BYTEARRAY8: {
    size_t width = p->op == OP_SHORT_BINBYTES ? 1 : p->op == OP_BINBYTES ? 4 : 8;
    if ((rc = read_length(p, width, 0, &n))) return rc;
    p->pos += n;
    return push_string(p, HBM_PK_BYTES, p->data + p->pos - n, n);
  }

  /* containers */
  case OP_EMPTY_LIST: return push_new(p, new_node(p, HBM_PK_LIST));
  case OP_EMPTY_DICT: return push_new(p, new_node(p, HBM_PK_DICT));
  case OP_EMPTY_TUPLE: return make_tuple(p, p->nstack);
  case OP_TUPLE1:
  case OP_TUPLE2:
  case OP_TUPLE3:
    n = (size_t)(p->op - OP_TUPLE1 + 1);
    if ((rc = need_values(p, n))) return rc;
    return make_tuple(p, p->nstack - n);
  case OP_TUPLE:
    if ((rc = pop_mark(p, &base))) return rc;
    return make_tuple(p, base);
  case OP_LIST: {
    if ((rc = pop_mark(p, &base))) return rc;
    pk_node *l = new_node(p, HBM_PK_LIST);
    if (!l) return node_fail(p);
    if ((rc = list_extend(p, l, p->stack + base, p->nstack - base))) return rc;
    p->nstack = base;
    return push(p, l);
  }
  case OP_DICT: {
    if ((rc = pop_mark(p, &base))) return rc;
    if ((p->nstack - base) % 2) return FAIL("DICT: odd number of values (keys without a value)");
    pk_node *d = new_node(p, HBM_PK_DICT);
    if (!d) return node_fail(p);
    if ((rc = dict_set(p, d, p->stack + base, (p->nstack - base) / 2))) return rc;
    p->nstack = base;
    return push(p, d);
  }
  case OP_APPEND: {
    if ((rc = need_values(p, 2))) return rc;
    pk_node *l = p->stack[p->nstack - 2];
    if ((rc = check_open(p, l, HBM_PK_LIST))) return rc;
    if ((rc = list_extend(p, l, p->stack + p->nstack - 1, 1))) return rc;
    p->nstack--;
    return HBM_OK;
  }
  case OP_APPENDS: {
    if ((rc = pop_mark(p, &base))) return rc;
    if (base == level_base(p)) return FAIL("APPENDS: no list before its MARK");
    pk_node *l = p->stack[base - 1];
    if ((rc = check_open(p, l, HBM_PK_LIST))) return rc;
    if ((rc = list_extend(p, l, p->stack + base, p->nstack - base))) return rc;
    p->nstack = base;
    return HBM_OK;
  }
  case OP_SETITEM: {
    if ((rc = need_values(p, 3))) return rc;
    pk_node *d = p->stack[p->nstack - 3];
    if ((rc = check_open(p, d, HBM_PK_DICT))) return rc;
    if ((rc = dict_set(p, d, p->stack + p->nstack - 2, 1))) return rc;
    p->nstack -= 2;
    return HBM_OK;
  }
  case OP_SETITEMS: {
    if ((rc = pop_mark(p, &base))) return rc;
    if (base == level_base(p)) return FAIL("SETITEMS: no dict before its MARK");
    if ((p->nstack - base) % 2)
      return FAIL("SETITEMS: odd number of values after the MARK (a key without a value)");
    pk_node *d = p->stack[base - 1];
    if ((rc = check_open(p, d, HBM_PK_DICT))) return rc;
    if ((rc = dict_set(p, d, p->stack + base, (p->nstack - base) / 2))) return rc;
    p->nstack = base;
    return HBM_OK;
  }

  /* memo */
  case OP_MEMOIZE: return memo_put(p, p->memo_count);
  case OP_BINPUT:
    if ((rc = need_bytes(p, 1))) return rc;
    return memo_put(p, p->data[p->pos++]);
  case OP_LONG_BINPUT:
    if ((rc = need_bytes(p, 4))) return rc;
    p->pos += 4;
    return memo_put(p, rd_u32(p->data + p->pos - 4));
  case OP_PUT: {
    uint64_t idx;
    if ((rc = read_text_index(p, &idx))) return rc;
    return memo_put(p, idx);
  }
  case OP_BINGET:
    if ((rc = need_bytes(p, 1))) return rc;
    return memo_get(p, p->data[p->pos++]);
  case OP_LONG_BINGET:
    if ((rc = need_bytes(p, 4))) return rc;
    p->pos += 4;
    return memo_get(p, rd_u32(p->data + p->pos - 4));
  case OP_GET: {
    uint64_t idx;
    if ((rc = read_text_index(p, &idx))) return rc;
    return memo_get(p, idx);
  }

  /* framing */
  case OP_PROTO:
    if ((rc = need_bytes(p, 1))) return rc;
    n = p->data[p->pos++];
    if (n < 2 || n > 5) /* at the protocol byte: the opcode's own offset, 0, reads as no offset */
      return fail_at(p, p->pos - 1, "PROTO: protocol %zu is not supported (expected 2 to 5)", n);
    return HBM_OK;
  case OP_FRAME: /* a hint for buffered readers; the whole input is in memory */
    if ((rc = read_length(p, 8, 0, &n))) return rc;
    return HBM_OK;

  case OP_PERSID: case OP_BINPERSID: case OP_REDUCE: case OP_BUILD: case OP_GLOBAL:
  case OP_INST: case OP_OBJ: case OP_NEWOBJ: case OP_NEWOBJ_EX: case OP_STACK_GLOBAL:
  case OP_EXT1: case OP_EXT2: case OP_EXT4: case OP_NEXT_BUFFER: case OP_READONLY_BUFFER:
  case OP_EMPTY_SET: case OP_ADDITEMS: case OP_FROZENSET: case OP_STRING: case OP_UNICODE:
    return refuse(p);
  }
  if (p->op >= 0x20 && p->op < 0x7f)
    return FAIL("unknown opcode 0x%02x ('%c'); expected a pickle opcode of protocol 2 to 5",
                p->op, p->op);
  return FAIL("unknown opcode 0x%02x; expected a pickle opcode of protocol 2 to 5", p->op);
}

/* ---- public API ------------------------------------------------------------------------ */

/* Each value costs a byte of input at least (its opcode; a memo reference
 * makes none), and so does each memo entry a valid pickle names: a file may
 * hold as many as it has bytes. The floors stop absurd counts in small input;
 * in large input host memory runs out first (the parse takes many times
 * the file), which is said as such, not as a malformed file. */
hbm_pickle_limits hbm_pickle_default_limits(size_t len) {
  hbm_pickle_limits l = {.max_depth = 64, .max_nodes = 64ull << 20, .max_memo = 16ull << 20};
  if (len > l.max_nodes) l.max_nodes = len;
  if (len > l.max_memo) l.max_memo = len;
  return l;
}

int hbm_pickle_parse(const uint8_t *data, size_t len, const char *name,
                     const hbm_pickle_limits *limits, hbm_pickle **out, hbm_diag *diag) {
  if (!out || (!data && len)) return HBM_EINVAL;
  parser pr;
  parser *p = &pr;
  memset(p, 0, sizeof *p);
  p->data = data;
  p->len = len;
  p->name = name ? name : "<pickle>";
  p->diag = diag;
  hbm_pickle_limits dflt = hbm_pickle_default_limits(len);
  p->lim.max_depth = limits && limits->max_depth ? limits->max_depth : dflt.max_depth;
  p->lim.max_nodes = limits && limits->max_nodes ? limits->max_nodes : dflt.max_nodes;
  p->lim.max_memo = limits && limits->max_memo ? limits->max_memo : dflt.max_memo;

  p->doc = calloc(1, sizeof *p->doc);
  if (!p->doc) return fail_nomem(p);
  int rc = HBM_OK;
  /* the value stack is never NULL: stack + base is then always defined */
  if (grow((void **)&p->stack, &p->stack_cap, 256, sizeof *p->stack)) {
    rc = fail_nomem(p);
    goto done;
  }
  /* None, True and False are shared by every use, as in Python. */
  pk_node *singletons = arena_alloc(&p->doc->arena, 3 * sizeof *singletons);
  if (!singletons) { rc = fail_nomem(p); goto done; }
  memset(singletons, 0, 3 * sizeof *singletons);
  p->none = &singletons[0];
  p->true_ = &singletons[1];
  p->false_ = &singletons[2];
  p->none->v.type = HBM_PK_NONE;
  p->true_->v.type = p->false_->v.type = HBM_PK_BOOL;
  p->true_->v.u.i = 1;

  for (;;) {
    if (p->pos >= p->len) {
      rc = fail_at(p, p->pos, len ? "truncated: input ends without STOP" : "empty input; "
                   "expected a pickle (PROTO 2 to 5 ... STOP)");
      break;
    }
    p->op_pos = p->pos;
    p->op = p->data[p->pos++];
    if (p->op == OP_STOP) {
      if (p->nmarks) {
        rc = FAIL("STOP with %zu MARK(s) still open", p->nmarks);
      } else if (p->nstack != 1) {
        rc = FAIL("STOP with %zu values on the stack (expected 1)", p->nstack);
      } else {
        p->doc->root = &p->stack[0]->v;
      }
      break;
    }
    if ((rc = step(p))) break;
  }

done:
  free(p->stack);
  free(p->marks);
  free(p->memo);
  if (rc) {
    hbm_pickle_free(p->doc);
    return rc;
  }
  *out = p->doc;
  return HBM_OK;
}

const hbm_pk_value *hbm_pickle_root(const hbm_pickle *doc) { return doc ? doc->root : NULL; }

uint64_t hbm_pickle_node_count(const hbm_pickle *doc) { return doc ? doc->nodes : 0; }

void hbm_pickle_free(hbm_pickle *doc) {
  if (!doc) return;
  arena_release(doc->arena);
  free(doc);
}

const hbm_pk_value *hbm_pk_get(const hbm_pk_value *dict, const char *key) {
  if (!dict || dict->type != HBM_PK_DICT || !key) return NULL;
  size_t klen = strlen(key);
  for (size_t i = dict->u.dict.n; i-- > 0;) {
    const hbm_pk_value *k = dict->u.dict.keys[i];
    if (k->type == HBM_PK_STR && k->u.s.len == klen && memcmp(k->u.s.str, key, klen) == 0)
      return dict->u.dict.vals[i];
  }
  return NULL;
}

int hbm_pk_int(const hbm_pk_value *v, int64_t *out) {
  if (!v || (v->type != HBM_PK_INT && v->type != HBM_PK_BOOL)) return 0;
  if (out) *out = v->u.i;
  return 1;
}

int hbm_pk_float(const hbm_pk_value *v, double *out) {
  if (!v) return 0;
  if (v->type == HBM_PK_FLOAT) {
    if (out) *out = v->u.f;
    return 1;
  }
  if (v->type == HBM_PK_INT || v->type == HBM_PK_BOOL) {
    if (out) *out = (double)v->u.i;
    return 1;
  }
  return 0;
}

const char *hbm_pk_str(const hbm_pk_value *v) {
  return v && v->type == HBM_PK_STR ? v->u.s.str : NULL;
}

size_t hbm_pk_len(const hbm_pk_value *v) {
  if (!v) return 0;
  if (v->type == HBM_PK_LIST || v->type == HBM_PK_TUPLE) return v->u.seq.n;
  if (v->type == HBM_PK_DICT) return v->u.dict.n;
  return 0;
}

const hbm_pk_value *hbm_pk_item(const hbm_pk_value *v, size_t i) {
  if (!v || (v->type != HBM_PK_LIST && v->type != HBM_PK_TUPLE) || i >= v->u.seq.n) return NULL;
  return v->u.seq.items[i];
}

const char *hbm_pk_type_name(hbm_pk_type type) {
  switch (type) {
  case HBM_PK_NONE: return "none";
  case HBM_PK_BOOL: return "bool";
  case HBM_PK_INT: return "int";
  case HBM_PK_FLOAT: return "float";
  case HBM_PK_STR: return "str";
  case HBM_PK_BYTES: return "bytes";
  case HBM_PK_LIST: return "list";
  case HBM_PK_TUPLE: return "tuple";
  case HBM_PK_DICT: return "dict";
  }
  return "?";
}

int hbm_pickle_sniff(const uint8_t *data, size_t len) {
  return data && len >= 1 && data[0] == OP_PROTO;
}

const char *hbm_pickle_wrapped(const uint8_t *data, size_t len) {
  static const struct { const char *magic; size_t n; const char *what; } kinds[] = {
      {"\x1f\x8b", 2, "compressed with gzip: decompress it first (gunzip)"},
      {"\xfd" "7zXZ\0", 6, "compressed with xz: decompress it first (xz -d)"},
      {"\x28\xb5\x2f\xfd", 4, "compressed with zstd: decompress it first (zstd -d)"},
      {"PK\x03\x04", 4, "a zip archive (as torch.save writes), not a memory snapshot: save one with "
                         "torch.cuda.memory._dump_snapshot(), which writes a plain pickle"},
  };
  if (!data) return NULL;
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
    if (len >= kinds[k].n && !memcmp(data, kinds[k].magic, kinds[k].n)) return kinds[k].what;
  return NULL;
}
