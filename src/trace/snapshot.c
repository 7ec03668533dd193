/* snapshot.c: a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot)
 * as an hbm trace, without Python: the allocation trace of one device, its
 * streams, segment events, step boundaries, the allocator settings as
 * PYTORCH_CUDA_ALLOC_CONF text, and the allocator state at the first recorded
 * event. docs/snapshot-import.md is the reference for every rule here.
 *
 * What is read:
 *   segments[]         final state: address, total_size, stream, segment_type,
 *                      is_expandable, blocks[] (address or position, size,
 *                      requested_size, state)
 *   device_traces[D][] alloc, free_requested, free_completed (or the older
 *                      'free'), segment_alloc, segment_free, segment_map,
 *                      segment_unmap; others (snapshot, oom, user_defined...) are skipped
 *   allocator_settings effective settings -> conf
 *   external_annotations  Optimizer.step END times -> step boundaries
 *
 * A free becomes an hbm free where PyTorch completed it (free_completed):
 * that is when the block returns to the cache; a free_requested without its
 * completion (a block another stream still used at the dump) stays live.
 *
 * The starting state is reconstructed from all the evidence the snapshot
 * holds; the events themselves are copied as recorded. Only the starting
 * state uses addresses as evidence: replay never sees them when placing.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/addrmap.h"
#include "core/ordset.h"
#include "core/util.h"
#include "policy/pytorch_alloc.h"
#include "trace/pickle.h"
#include "trace/snapshot.h"
#include "trace/trace.h"

#define MiB (1ull << 20)

enum {
  E_ALLOC = 0,
  E_FREE,       /* free_completed (or 'free') */
  E_FREE_REQ,   /* free_requested: the program let go; the block may still be in use */
  E_SEG_ALLOC,  /* segment_alloc */
  E_SEG_FREE,   /* segment_free */
  E_MAP,        /* segment_map (expandable) */
  E_UNMAP,      /* segment_unmap (expandable) */
  E_OOM,        /* oom: addr holds device_free (cudaMemGetInfo at the failure), size the
                 * refused request (rounded, as PyTorch records it; 0 if not recorded) */
  E_OTHER,
};

typedef struct entry {
  uint64_t addr, size;
  int64_t stream;
  int64_t time_us;
  uint32_t index; /* position in device_traces[D] */
  uint8_t kind, has_time;
  uint8_t old_free; /* E_FREE read from the older 'free' action */
} entry;

typedef struct fblock { /* a block of the final segments */
  uint64_t addr, size, requested;
  int active;
} fblock;

typedef struct fseg { /* a final segment */
  uint64_t addr, size;
  int64_t stream;
  int small, expandable;
  uint32_t first, n;
} fseg;

typedef struct live_start { /* an allocation alive when recording began */
  uint64_t addr, request, final_size; /* final_size: 0 unless alive to the end */
  int64_t stream;
  uint32_t free_entry;                /* entry index of its free, UINT32_MAX if none */
  uint32_t id;
} live_start;

typedef struct sseg { /* a segment (or mapped range) at the start */
  uint64_t addr, size;
  int64_t stream;
  int small, expandable;
} sseg;

typedef struct importer {
  const char *name;
  hbm_diag *diag;
  int device;
  entry *e;
  size_t ne;
  fseg *segs;
  size_t nsegs;
  fblock *blocks;
  size_t nblocks, cap_blocks;
  live_start *ls;
  size_t nls, cap_ls;
  sseg *ss;
  size_t nss, cap_ss;
  int64_t *streams; /* distinct raw stream values, sorted: the rank is the hbm stream */
  size_t nstreams;
  hbm_pt_conf conf;
  char conf_text[512];
  int have_conf;
  int64_t *step_ends;
  size_t nsteps;
  uint32_t private_segments; /* the device's segments in a private pool at the dump */
  uint64_t private_bytes;
} importer;

static int fail(importer *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(importer *im, const char *fmt, ...) {
  char msg[480];
  va_list ap;
  va_start(ap, fmt);
  hbm_vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return hbm_diag_set(im->diag, im->name, 0, 0, "%s", msg);
}


/* ---- reading the pickle tree ---------------------------------------------------- */

static int get_u64(importer *im, const hbm_pk_value *obj, const char *key, uint64_t *out, const char *where) {
  const hbm_pk_value *v = hbm_pk_get(obj, key);
  int64_t i;
  if (!v) return fail(im, "%s: missing '%s'", where, key);
  /* hbm_pk_int takes a bool as 0 or 1; PyTorch writes every address, size and
   * stream as an int, so a bool is damage, not a size of 1. */
  if (v->type != HBM_PK_INT || !hbm_pk_int(v, &i))
    return fail(im, "%s: '%s' is a %s, expected an int", where, key, hbm_pk_type_name(v->type));
  if (i < 0) return fail(im, "%s: '%s' is negative (%lld)", where, key, (long long)i);
  *out = (uint64_t)i;
  return HBM_OK;
}

static int get_str(importer *im, const hbm_pk_value *obj, const char *key, const char **out, const char *where) {
  const hbm_pk_value *v = hbm_pk_get(obj, key);
  if (!v) return fail(im, "%s: missing '%s'", where, key);
  if (!(*out = hbm_pk_str(v))) return fail(im, "%s: '%s' has type %s, expected a str", where, key, hbm_pk_type_name(v->type));
  return HBM_OK;
}

static int get_i64(importer *im, const hbm_pk_value *obj, const char *key, int64_t *out, int64_t dflt,
                   const char *where) {
  const hbm_pk_value *v = hbm_pk_get(obj, key);
  if (!v || v->type == HBM_PK_NONE) {
    *out = dflt;
    return HBM_OK;
  }
  if (v->type != HBM_PK_INT || !hbm_pk_int(v, out))
    return fail(im, "%s: '%s' is a %s, expected an int", where, key, hbm_pk_type_name(v->type));
  return HBM_OK;
}

/* A blocks list the pickle shares between segments (a memo reference) is
 * read once per segment: a file of kilobytes could make the reader walk
 * billions of blocks. PyTorch gives every segment a list of its own. */
static int read_segments_of(importer *im, const hbm_pk_value *segments, hbm_addrmap *lists);

static int read_segments(importer *im, const hbm_pk_value *segments) {
  hbm_addrmap lists;
  hbm_addrmap_init(&lists);
  int rc = read_segments_of(im, segments, &lists);
  hbm_addrmap_release(&lists);
  return rc;
}

static int read_segments_of(importer *im, const hbm_pk_value *segments, hbm_addrmap *lists) {
  size_t n = hbm_pk_len(segments);
  im->segs = calloc(n + 1, sizeof *im->segs);
  if (!im->segs) return HBM_EHOSTMEM;
  char where[96];
  for (size_t i = 0; i < n; i++) {
    const hbm_pk_value *s = hbm_pk_item(segments, i);
    snprintf(where, sizeof where, "segments[%zu]", i);
    if (!s || s->type != HBM_PK_DICT) return fail(im, "%s: expected a dict", where);
    int64_t device;
    int rc;
    if ((rc = get_i64(im, s, "device", &device, 0, where))) return rc;
    if (device < 0) return fail(im, "%s: device %lld: expected a device index, 0 or more", where, (long long)device);
    if (device != im->device) continue;
    fseg *g = &im->segs[im->nsegs];
    memset(g, 0, sizeof *g);
    if ((rc = get_u64(im, s, "address", &g->addr, where)) || (rc = get_u64(im, s, "total_size", &g->size, where)) ||
        (rc = get_i64(im, s, "stream", &g->stream, 0, where)))
      return rc;
    if (g->size > HBM_MAX_SIZE)
      return fail(im, "%s: total_size %llu is more than the 1 PiB a trace holds", where, (unsigned long long)g->size);
    if (g->size == 0 || g->size % HBM_PT_MIN_BLOCK || g->addr % HBM_PT_MIN_BLOCK)
      return fail(im, "%s: total_size %llu at 0x%llx: expected a positive multiple of 512 bytes on a 512-byte boundary", where,
                  (unsigned long long)g->size, (unsigned long long)g->addr);
    const char *type = hbm_pk_str(hbm_pk_get(s, "segment_type"));
    if (type && strcmp(type, "small") && strcmp(type, "large"))
      return fail(im, "%s: segment_type '%.40s': expected small or large", where, type);
    g->small = type ? !strcmp(type, "small") : g->size == HBM_PT_SMALL_BUFFER;
    const hbm_pk_value *exp = hbm_pk_get(s, "is_expandable");
    int64_t e = 0;
    if (exp && exp->type != HBM_PK_NONE && !hbm_pk_int(exp, &e))
      return fail(im, "%s: 'is_expandable' is a %s, expected a bool", where, hbm_pk_type_name(exp->type));
    g->expandable = e != 0;
    /* segment_pool_id: (0, 0) is the default pool; any other pair a private
     * one (CUDA graph capture, torch.cuda.MemPool), which no policy keeps
     * apart: counted, so that the tools can say so. */
    const hbm_pk_value *pool = hbm_pk_get(s, "segment_pool_id");
    if (pool && pool->type != HBM_PK_NONE) {
      int64_t id[2];
      if ((pool->type != HBM_PK_TUPLE && pool->type != HBM_PK_LIST) || hbm_pk_len(pool) != 2 ||
          !hbm_pk_int(hbm_pk_item(pool, 0), &id[0]) || !hbm_pk_int(hbm_pk_item(pool, 1), &id[1]))
        return fail(im, "%s: 'segment_pool_id' is not a pair of ints (a %s)", where, hbm_pk_type_name(pool->type));
      if (id[0] || id[1]) {
        im->private_segments++;
        im->private_bytes += g->size;
      }
    }
    const hbm_pk_value *blocks = hbm_pk_get(s, "blocks");
    if (!blocks) return fail(im, "%s: missing 'blocks'", where);
    if (blocks->type != HBM_PK_LIST && blocks->type != HBM_PK_TUPLE)
      return fail(im, "%s: 'blocks' is a %s, expected a list", where, hbm_pk_type_name(blocks->type));
    uint64_t other;
    if (hbm_pk_len(blocks) && hbm_addrmap_get(lists, (uint64_t)(uintptr_t)blocks, &other))
      return fail(im, "%s: its 'blocks' are those of segments[%llu] (one list, shared in the pickle); a recording "
                      "gives each segment its own", where, (unsigned long long)other);
    if (hbm_pk_len(blocks) && hbm_addrmap_put(lists, (uint64_t)(uintptr_t)blocks, i)) return HBM_EHOSTMEM;
    g->first = (uint32_t)im->nblocks;
    uint64_t at = g->addr;
    for (size_t k = 0; k < hbm_pk_len(blocks); k++) {
      const hbm_pk_value *b = hbm_pk_item(blocks, k);
      snprintf(where, sizeof where, "segments[%zu].blocks[%zu]", i, k);
      if (!b || b->type != HBM_PK_DICT) return fail(im, "%s: expected a dict", where);
      if ((rc = hbm_grow_array((void **)&im->blocks, &im->cap_blocks, im->nblocks, sizeof *im->blocks))) return rc;
      fblock *fb = &im->blocks[im->nblocks];
      memset(fb, 0, sizeof *fb);
      if ((rc = get_u64(im, b, "size", &fb->size, where))) return rc;
      fb->addr = at;
      if (hbm_pk_get(b, "address") && (rc = get_u64(im, b, "address", &fb->addr, where))) return rc;
      if (fb->addr != at || fb->size == 0 || fb->size % HBM_PT_MIN_BLOCK)
        return fail(im, "%s: block 0x%llx+%llu does not follow the previous block at 0x%llx", where,
                    (unsigned long long)fb->addr, (unsigned long long)fb->size, (unsigned long long)at);
      /* within the segment: sizes up to 2^63 would otherwise let `at` wrap
       * round to the segment's end, and a block past it be taken as alive */
      if (fb->size > g->addr + g->size - at)
        return fail(im, "%s: block 0x%llx+%llu runs past the end of its segment at 0x%llx", where,
                    (unsigned long long)fb->addr, (unsigned long long)fb->size,
                    (unsigned long long)(g->addr + g->size));
      at += fb->size;
      const char *state;
      if ((rc = get_str(im, b, "state", &state, where))) return rc;
      /* PyTorch's states (active_pending_free is documented as active_awaiting_free) */
      fb->active = !strcmp(state, "active_allocated") || !strcmp(state, "active_pending_free") ||
                   !strcmp(state, "active_awaiting_free");
      if (!fb->active && strcmp(state, "inactive"))
        return fail(im, "%s: state '%.40s': expected active_allocated, active_pending_free or inactive", where, state);
      if (fb->active) {
        uint64_t rq = fb->size;
        if (hbm_pk_get(b, "requested_size") && (rc = get_u64(im, b, "requested_size", &rq, where))) return rc;
        if (rq > fb->size)
          return fail(im, "%s: requested_size %llu is more than the block's size %llu", where, (unsigned long long)rq,
                      (unsigned long long)fb->size);
        fb->requested = rq ? rq : fb->size;
      }
      im->nblocks++;
      g->n++;
    }
    if (at != g->addr + g->size)
      return fail(im, "segments[%zu]: blocks cover %llu of total_size %llu bytes", i,
                  (unsigned long long)(at - g->addr), (unsigned long long)g->size);
    im->nsegs++;
  }
  return HBM_OK;
}

static int action_kind(const char *a) {
  if (!strcmp(a, "alloc")) return E_ALLOC;
  if (!strcmp(a, "free_completed") || !strcmp(a, "free")) return E_FREE;
  if (!strcmp(a, "free_requested")) return E_FREE_REQ;
  if (!strcmp(a, "segment_alloc")) return E_SEG_ALLOC;
  if (!strcmp(a, "segment_free")) return E_SEG_FREE;
  if (!strcmp(a, "segment_map")) return E_MAP;
  if (!strcmp(a, "segment_unmap")) return E_UNMAP;
  if (!strcmp(a, "oom")) return E_OOM;
  return E_OTHER;
}

static int read_trace(importer *im, const hbm_pk_value *trace) {
  size_t n = hbm_pk_len(trace);
  im->e = calloc(n + 1, sizeof *im->e);
  if (!im->e) return HBM_EHOSTMEM;
  char where[96];
  for (size_t i = 0; i < n; i++) {
    const hbm_pk_value *t = hbm_pk_item(trace, i);
    snprintf(where, sizeof where, "device_traces[%d][%zu]", im->device, i);
    if (!t || t->type != HBM_PK_DICT) return fail(im, "%s: expected a dict", where);
    const char *a;
    int arc = get_str(im, t, "action", &a, where);
    if (arc) return arc;
    int kind = action_kind(a);
    if (kind == E_OTHER) continue;
    if (i > UINT32_MAX - 2) return fail(im, "%s: too many entries", where);
    snprintf(where, sizeof where, "device_traces[%d][%zu] (%s)", im->device, i, a);
    entry *x = &im->e[im->ne];
    int rc;
    if (kind == E_OOM) { /* kept only when it says how much the device had free */
      int64_t free_bytes, size, stream = 0;
      if (!hbm_pk_int(hbm_pk_get(t, "device_free"), &free_bytes) || free_bytes < 0) continue;
      x->addr = (uint64_t)free_bytes;
      /* The refused request, where recorded: one past what a trace holds (a
       * program may ask for 2 PiB, and PyTorch records the refusal) or none
       * keeps the capacity the entry tells, and is not asked again. */
      x->size = hbm_pk_int(hbm_pk_get(t, "size"), &size) && size > 0 && (uint64_t)size <= HBM_MAX_SIZE ? (uint64_t)size : 0;
      const hbm_pk_value *sv = hbm_pk_get(t, "stream");
      if (sv && !hbm_pk_int(sv, &stream)) stream = 0;
      x->stream = stream;
      const hbm_pk_value *tv = hbm_pk_get(t, "time_us");
      x->has_time = tv && hbm_pk_int(tv, &x->time_us);
      x->index = (uint32_t)i;
      x->kind = E_OOM;
      im->ne++;
      continue;
    }
    if ((rc = get_u64(im, t, "addr", &x->addr, where)) || (rc = get_u64(im, t, "size", &x->size, where)) ||
        (rc = get_i64(im, t, "stream", &x->stream, 0, where)))
      return rc;
    if (kind == E_ALLOC && (x->size == 0 || x->size > HBM_MAX_SIZE))
      return fail(im, "%s: size %llu is not between 1 B and 1 PiB", where, (unsigned long long)x->size);
    int seg_kind = kind == E_SEG_ALLOC || kind == E_SEG_FREE || kind == E_MAP || kind == E_UNMAP;
    if (seg_kind && x->size > HBM_MAX_SIZE)
      return fail(im, "%s: segment of %llu bytes: more than the 1 PiB a trace holds", where, (unsigned long long)x->size);
    if (seg_kind && (x->size == 0 || x->size % HBM_PT_MIN_BLOCK || x->addr % HBM_PT_MIN_BLOCK))
      return fail(im, "%s: segment of %llu bytes at 0x%llx is not a positive multiple of 512 bytes on a 512-byte boundary",
                  where, (unsigned long long)x->size, (unsigned long long)x->addr);
    const hbm_pk_value *tv = hbm_pk_get(t, "time_us");
    if (tv && hbm_pk_int(tv, &x->time_us)) x->has_time = 1;
    x->index = (uint32_t)i;
    x->kind = (uint8_t)kind;
    x->old_free = kind == E_FREE && !strcmp(a, "free");
    im->ne++;
  }
  return HBM_OK;
}

/* The shortest text that reads back as d: 0.0481, not 0.048099999999999997. */
static const char *shortest_double(double d, char buf[32]) {
  for (int digits = 1; digits <= 17; digits++) {
    hbm_snprintf(buf, 32, "%.*g", digits, d);
    if (hbm_strtod(buf, NULL) == d) break;
  }
  return buf;
}

/* allocator_settings -> PYTORCH_CUDA_ALLOC_CONF text with the same effect. */
static int read_settings(importer *im, const hbm_pk_value *s) {
  hbm_pt_conf_default(&im->conf, 0);
  if (!s || s->type != HBM_PK_DICT) return HBM_OK;
  char *out = im->conf_text;
  size_t cap = sizeof im->conf_text, n = 0;
#define APPEND(...) \
  do { \
    int k_ = snprintf(out + n, cap - n, "%s", n ? "," : ""); \
    if (k_ > 0 && (size_t)k_ < cap - n) n += (size_t)k_; \
    k_ = snprintf(out + n, cap - n, __VA_ARGS__); \
    if (k_ > 0 && (size_t)k_ < cap - n) n += (size_t)k_; \
  } while (0)
  int64_t i;
  double d;
  char num[32];
  /* Values PyTorch would have refused: a damaged recording, not settings to
   * drop quietly (the run would be modelled with others). */
  const hbm_pk_value *es = hbm_pk_get(s, "expandable_segments"), *ms = hbm_pk_get(s, "max_split_size"),
                     *gc = hbm_pk_get(s, "garbage_collection_threshold");
  if (es && es->type != HBM_PK_NONE && es->type != HBM_PK_BOOL) /* PyTorch writes True or False */
    return fail(im, "allocator_settings: 'expandable_segments' is a %s, expected a bool", hbm_pk_type_name(es->type));
  if (ms && ms->type != HBM_PK_NONE && !hbm_pk_int(ms, &i))
    return fail(im, "allocator_settings: 'max_split_size' is a %s, expected an int", hbm_pk_type_name(ms->type));
  if (ms && hbm_pk_int(ms, &i) && i > 0 && (uint64_t)i < 20 * MiB) /* PyTorch: "max_split_size_mb too small" */
    return fail(im, "allocator_settings: 'max_split_size' %lld is below 20 MiB (PyTorch refuses it)", (long long)i);
  if (gc && gc->type != HBM_PK_NONE && (!hbm_pk_float(gc, &d) || !(d >= 0 && d < 1)))
    return fail(im, "allocator_settings: 'garbage_collection_threshold' is not a number in [0, 1) (PyTorch refuses "
                "others)");
  if (hbm_pk_int(hbm_pk_get(s, "expandable_segments"), &i) && i) APPEND("expandable_segments:True");
  if (hbm_pk_int(hbm_pk_get(s, "max_split_size"), &i) && i > 0 && (uint64_t)i / MiB >= 20 &&
      (uint64_t)i < (UINT64_MAX >> 1))
    APPEND("max_split_size_mb:%llu", (unsigned long long)((uint64_t)i / MiB));
  /* PyTorch records no field for these two: the text it was given is their
   * only trace (a text it refused, or one the fields contradict, adds nothing). */
  hbm_pt_conf given;
  hbm_pt_conf_default(&given, 0);
  const char *given_text = hbm_pk_str(hbm_pk_get(s, "PYTORCH_CUDA_ALLOC_CONF"));
  int given_ok = given_text && hbm_pt_conf_parse(given_text, &given, NULL) == HBM_OK;
  if (hbm_pk_int(hbm_pk_get(s, "max_non_split_rounding_size"), &i)) { /* recorded: it wins, default or not */
    if (i > 0 && (uint64_t)i / MiB >= 20 && (uint64_t)i != HBM_PT_LARGE_BUFFER)
      APPEND("max_non_split_rounding_mb:%llu", (unsigned long long)((uint64_t)i / MiB));
  } else if (given_ok && given.max_non_split_rounding != HBM_PT_LARGE_BUFFER)
    APPEND("max_non_split_rounding_mb:%llu", (unsigned long long)(given.max_non_split_rounding / MiB));
  if (given_ok && given.set_fraction) APPEND("per_process_memory_fraction:%s", shortest_double(given.memory_fraction, num));
  if (hbm_pk_float(hbm_pk_get(s, "garbage_collection_threshold"), &d) && d > 0 && d < 1)
    APPEND("garbage_collection_threshold:%s", shortest_double(d, num));
  const hbm_pk_value *r = hbm_pk_get(s, "roundup_power2_divisions");
  if (r && r->type == HBM_PK_DICT) {
    uint64_t div[HBM_PT_ROUNDUP_INTERVALS] = {0};
    int any = 0;
    for (size_t k = 0; k < r->u.dict.n; k++) {
      /* PyTorch writes one entry an interval, keyed by its size in MiB (1, 2,
       * 4, ...), each 0 or a power of two, as its parser demands. */
      const char *key = hbm_pk_str(r->u.dict.keys[k]);
      const hbm_pk_value *val = r->u.dict.vals[k];
      char *end = NULL;
      unsigned long long mb = key && *key >= '1' && *key <= '9' ? strtoull(key, &end, 10) : 0;
      int64_t v = 0;
      if (!key)
        return fail(im, "allocator_settings: 'roundup_power2_divisions' has a key that is a %s, expected a str",
                    hbm_pk_type_name(r->u.dict.keys[k]->type));
      if (!mb || *end || (mb & (mb - 1)))
        return fail(im, "allocator_settings: 'roundup_power2_divisions' has the key '%s', expected an interval "
                    "in MiB, a power of two", key);
      if (val->type != HBM_PK_INT || !hbm_pk_int(val, &v) || v < 0 || ((uint64_t)v & ((uint64_t)v - 1)))
        return fail(im, "allocator_settings: 'roundup_power2_divisions' gives %s MiB %s, expected 0 or a power of "
                    "two (PyTorch refuses others)", key, val->type == HBM_PK_INT ? "a count that is neither" : "no int");
      if (!v) continue;
      unsigned idx = 63u - (unsigned)__builtin_clzll(mb);
      if (idx < HBM_PT_ROUNDUP_INTERVALS) {
        div[idx] = (uint64_t)v;
        any = 1;
      }
    }
    if (any) {
      char list[400];
      size_t ln = 0;
      for (unsigned k = 0; k < HBM_PT_ROUNDUP_INTERVALS && ln < sizeof list; k++)
        ln += (size_t)snprintf(list + ln, sizeof list - ln, "%s%llu:%llu", k ? "," : "", 1ull << k,
                               (unsigned long long)div[k]);
      APPEND("roundup_power2_divisions:[%s]", list);
    }
  } else if (r && hbm_pk_int(r, &i) && i > 1 && !(i & (i - 1))) {
    APPEND("roundup_power2_divisions:%lld", (long long)i);
  }
#undef APPEND
  im->have_conf = 1;
  hbm_pt_conf c;
  hbm_pt_conf_default(&c, 0);
  int rc = hbm_pt_conf_parse(im->conf_text, &c, NULL);
  if (rc == HBM_EHOSTMEM) return rc; /* not a reason to drop the settings */
  if (rc == HBM_OK) im->conf = c;
  else im->conf_text[0] = '\0'; /* cannot happen for settings PyTorch accepted */
  return HBM_OK;
}

static int i64_cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static int read_steps(importer *im, const hbm_pk_value *ann) {
  size_t n = hbm_pk_len(ann);
  if (!n) return HBM_OK;
  im->step_ends = calloc(n, sizeof *im->step_ends);
  if (!im->step_ends) return HBM_EHOSTMEM; /* the steps would be lost: no answer at all rather than a wrong one */
  for (size_t i = 0; i < n; i++) {
    const hbm_pk_value *a = hbm_pk_item(ann, i);
    const char *stage = hbm_pk_str(hbm_pk_get(a, "stage"));
    const char *nm = hbm_pk_str(hbm_pk_get(a, "name"));
    int64_t dev = 0, t;
    if (!stage || !nm || strcmp(stage, "END") || !strstr(nm, "Optimizer.step")) continue;
    if (hbm_pk_get(a, "device") && hbm_pk_int(hbm_pk_get(a, "device"), &dev) && dev != im->device) continue;
    if (!hbm_pk_int(hbm_pk_get(a, "time_us"), &t)) continue;
    im->step_ends[im->nsteps++] = t;
  }
  qsort(im->step_ends, im->nsteps, sizeof *im->step_ends, i64_cmp);
  return HBM_OK;
}

/* ---- streams ---------------------------------------------------------------------- */

static int collect_streams(importer *im) {
  im->streams = malloc((im->ne + im->nsegs + 1) * sizeof *im->streams);
  if (!im->streams) return HBM_EHOSTMEM;
  size_t n = 0;
  for (size_t i = 0; i < im->ne; i++) im->streams[n++] = im->e[i].stream;
  for (size_t i = 0; i < im->nsegs; i++) im->streams[n++] = im->segs[i].stream;
  qsort(im->streams, n, sizeof *im->streams, i64_cmp);
  size_t u = 0;
  for (size_t i = 0; i < n; i++)
    if (!u || im->streams[u - 1] != im->streams[i]) im->streams[u++] = im->streams[i];
  im->nstreams = u;
  return HBM_OK;
}

static int32_t stream_rank(const importer *im, int64_t raw) {
  size_t lo = 0, hi = im->nstreams;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (im->streams[mid] < raw) lo = mid + 1; else hi = mid;
  }
  return (int32_t)lo;
}

/* ---- the allocations alive at the start ---------------------------------------------- */

static int add_live_start(importer *im, live_start l) {
  int rc = hbm_grow_array((void **)&im->ls, &im->cap_ls, im->nls, sizeof *im->ls);
  if (rc) return rc;
  im->ls[im->nls++] = l;
  return HBM_OK;
}

/* A free whose address no earlier event touched is of a block alive at the
 * start; one whose address was touched and is not live is a double free. */
static int find_live_start(importer *im) {
  hbm_addrmap live, seen;
  hbm_addrmap_init(&live);
  hbm_addrmap_init(&seen);
  int rc = HBM_OK;
  for (size_t i = 0; i < im->ne && rc == HBM_OK; i++) {
    entry *x = &im->e[i];
    if (x->kind == E_ALLOC) {
      if (hbm_addrmap_get(&live, x->addr, NULL)) {
        rc = fail(im, "device_traces[%d][%u] (alloc): 0x%llx is allocated again without a free in between",
                  im->device, x->index, (unsigned long long)x->addr);
        break;
      }
      if (hbm_addrmap_put(&live, x->addr, i) || hbm_addrmap_put(&seen, x->addr, i)) rc = HBM_EHOSTMEM;
    } else if (x->kind == E_FREE) {
      uint64_t made;
      if (hbm_addrmap_take(&live, x->addr, &made)) {
        /* PyTorch records an alloc's request and sets the block's
         * requested_size to it; free_completed records that requested_size.
         * Another size is not the block the alloc made. (The older 'free'
         * action is left unchecked: what size it recorded is not known.) */
        if (!x->old_free && x->size != im->e[made].size) {
          rc = fail(im, "device_traces[%d][%u] (free_completed): size %llu, but the allocation of 0x%llx it frees "
                        "(device_traces[%d][%u]) asked for %llu", im->device, x->index, (unsigned long long)x->size,
                    (unsigned long long)x->addr, im->device, im->e[made].index, (unsigned long long)im->e[made].size);
          break;
        }
        continue;
      }
      if (hbm_addrmap_get(&seen, x->addr, NULL)) {
        rc = fail(im, "device_traces[%d][%u] (free_completed): free of 0x%llx, which no allocation holds "
                      "(already freed)", im->device, x->index, (unsigned long long)x->addr);
        break;
      }
      if (hbm_addrmap_put(&seen, x->addr, i)) rc = HBM_EHOSTMEM;
      else rc = add_live_start(im, (live_start){x->addr, x->size, 0, x->stream, (uint32_t)i, 0});
    }
  }
  /* Active at the end, untouched by the trace: alive all along. */
  for (size_t s = 0; s < im->nsegs && rc == HBM_OK; s++) {
    for (uint32_t k = 0; k < im->segs[s].n && rc == HBM_OK; k++) {
      fblock *b = &im->blocks[im->segs[s].first + k];
      if (!b->active || hbm_addrmap_get(&seen, b->addr, NULL)) continue;
      rc = add_live_start(im, (live_start){b->addr, b->requested, b->size, im->segs[s].stream, UINT32_MAX, 0});
    }
  }
  hbm_addrmap_release(&live);
  hbm_addrmap_release(&seen);
  return rc;
}

/* ---- the segments at the start ----------------------------------------------------------- */

static int add_sseg(importer *im, sseg s) {
  int rc = hbm_grow_array((void **)&im->ss, &im->cap_ss, im->nss, sizeof *im->ss);
  if (rc) return rc;
  im->ss[im->nss++] = s;
  return HBM_OK;
}

/* Ordinary segments: those in the final state whose first recorded event is
 * not their allocation, and those whose first recorded event is their release. */
static int start_segments(importer *im) {
  hbm_addrmap first;
  hbm_addrmap_init(&first);
  int rc = HBM_OK;
  for (size_t i = 0; i < im->ne && rc == HBM_OK; i++) {
    entry *x = &im->e[i];
    if ((x->kind == E_SEG_ALLOC || x->kind == E_SEG_FREE) && !hbm_addrmap_get(&first, x->addr, NULL))
      rc = hbm_addrmap_put(&first, x->addr, i);
  }
  hbm_addrmap final;
  hbm_addrmap_init(&final);
  for (size_t s = 0; s < im->nsegs && rc == HBM_OK; s++) {
    fseg *g = &im->segs[s];
    if (g->expandable) continue;
    rc = hbm_addrmap_put(&final, g->addr, s);
    uint64_t fi;
    if (rc || !hbm_addrmap_get(&first, g->addr, &fi)) {
      if (!rc) rc = add_sseg(im, (sseg){g->addr, g->size, g->stream, g->small, 0});
      continue;
    }
    entry *x = &im->e[fi];
    if (x->kind == E_SEG_FREE)
      rc = add_sseg(im, (sseg){g->addr, x->size, x->stream,
                               x->size == g->size ? g->small : x->size == HBM_PT_SMALL_BUFFER, 0});
  }
  for (size_t i = 0; i < im->ne && rc == HBM_OK; i++) {
    entry *x = &im->e[i];
    uint64_t fi;
    if (x->kind != E_SEG_FREE || !hbm_addrmap_get(&first, x->addr, &fi) || fi != i ||
        hbm_addrmap_get(&final, x->addr, NULL))
      continue;
    rc = add_sseg(im, (sseg){x->addr, x->size, x->stream, x->size == HBM_PT_SMALL_BUFFER, 0});
  }
  hbm_addrmap_release(&first);
  hbm_addrmap_release(&final);
  return rc;
}

/* Expandable segments: the mapped ranges at the end, with the recorded maps
 * taken away and unmaps put back, walking the trace backwards. */
typedef struct range {
  uint64_t lo, hi;
  int64_t stream;
  int small;
} range;

static int range_cmp(const void *a, const void *b) {
  const range *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static int start_ranges(importer *im) {
  range *r = NULL;
  size_t n = 0, cap = 0;
  int rc = HBM_OK;
  for (size_t s = 0; s < im->nsegs && rc == HBM_OK; s++) {
    fseg *g = &im->segs[s];
    if (!g->expandable) continue;
    if ((rc = hbm_grow_array((void **)&r, &cap, n, sizeof *r))) break;
    r[n++] = (range){g->addr, g->addr + g->size, g->stream, g->small};
  }
  for (size_t i = im->ne; i-- > 0 && rc == HBM_OK;) {
    entry *x = &im->e[i];
    uint64_t lo = x->addr, hi = x->addr + x->size;
    if (x->kind == E_MAP) { /* take [lo, hi) away */
      for (size_t k = 0; k < n && rc == HBM_OK; k++) {
        if (r[k].hi <= lo || r[k].lo >= hi) continue;
        range left = r[k], right = r[k];
        left.hi = lo;
        right.lo = hi;
        int keep_left = left.lo < left.hi, keep_right = right.lo < right.hi;
        if (keep_left && keep_right) {
          if ((rc = hbm_grow_array((void **)&r, &cap, n, sizeof *r))) break;
          r[k] = left;
          r[n++] = right;
        } else if (keep_left) {
          r[k] = left;
        } else if (keep_right) {
          r[k] = right;
        } else {
          r[k--] = r[--n];
        }
      }
    } else if (x->kind == E_UNMAP) { /* put [lo, hi) back, in the pool of its neighbour */
      int small = x->size % HBM_PT_LARGE_BUFFER != 0;
      for (size_t k = 0; k < n; k++)
        if ((r[k].hi == lo || r[k].lo == hi) && r[k].stream == x->stream) small = r[k].small;
      if ((rc = hbm_grow_array((void **)&r, &cap, n, sizeof *r))) break;
      r[n++] = (range){lo, hi, x->stream, small};
    }
  }
  if (rc == HBM_OK && n) {
    qsort(r, n, sizeof *r, range_cmp);
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
      if (m && r[m - 1].hi == r[k].lo && r[m - 1].stream == r[k].stream && r[m - 1].small == r[k].small)
        r[m - 1].hi = r[k].hi;
      else
        r[m++] = r[k];
    }
    for (size_t k = 0; k < m && rc == HBM_OK; k++)
      rc = add_sseg(im, (sseg){r[k].lo, r[k].hi - r[k].lo, r[k].stream, r[k].small, 1});
  }
  free(r);
  return rc;
}

static int sseg_cmp(const void *a, const void *b) {
  const sseg *x = a, *y = b;
  return x->addr < y->addr ? -1 : x->addr > y->addr;
}
static int ls_cmp(const void *a, const void *b) {
  const live_start *x = a, *y = b;
  return x->addr < y->addr ? -1 : x->addr > y->addr;
}

typedef struct alloc_at {
  uint64_t addr;
  uint32_t entry;
} alloc_at;
static int alloc_at_cmp(const void *a, const void *b) {
  const alloc_at *x = a, *y = b;
  if (x->addr != y->addr) return x->addr < y->addr ? -1 : 1;
  return x->entry < y->entry ? -1 : x->entry > y->entry;
}

/* The lowest address of an allocation in [lo, hi) made before entry `before`. */
static int first_alloc_in(const alloc_at *a, size_t n, uint64_t lo, uint64_t hi, uint32_t before, uint64_t *out) {
  size_t l = 0, h = n;
  while (l < h) {
    size_t mid = (l + h) / 2;
    if (a[mid].addr < lo) l = mid + 1; else h = mid;
  }
  for (size_t k = l; k < n && a[k].addr < hi; k++) {
    if (a[k].entry < before) {
      *out = a[k].addr;
      return 1;
    }
  }
  return 0;
}

/* ---- putting the trace together ------------------------------------------------------------ */

/* The size of a block alive at the start (docs/snapshot-import.md, "Block
 * boundaries"): the rounded request plus the unsplit slack PyTorch left in it. */
static uint64_t start_block_size(importer *im, const live_start *l, const sseg *s, uint64_t limit,
                                 const alloc_at *allocs, size_t nallocs) {
  if (l->final_size) return l->final_size;
  uint64_t rounded = hbm_pt_round_size(&im->conf, l->request);
  if (l->addr + rounded >= limit) return limit - l->addr; /* overlap is reported by the caller */
  uint64_t gap = limit - (l->addr + rounded);
  /* Small pool and expandable segments split any remainder of 512 bytes or more. */
  if (s->small || s->expandable) return rounded;
  /* Large pool: a free block is always larger than 1 MiB, so a shorter gap is slack. */
  if (gap <= HBM_PT_SMALL_SIZE) return rounded + gap;
  int oversize = rounded >= im->conf.max_split_size;
  uint64_t slack_max = oversize ? im->conf.max_non_split_rounding - HBM_PT_MIN_BLOCK : HBM_PT_SMALL_SIZE;
  uint64_t first;
  uint32_t until = l->free_entry == UINT32_MAX ? (uint32_t)im->ne : l->free_entry;
  if (first_alloc_in(allocs, nallocs, l->addr + rounded, limit, until, &first)) {
    /* Best fit places into the low end of the free block after the slack. */
    uint64_t slack = first - (l->addr + rounded);
    return slack <= slack_max ? rounded + slack : rounded;
  }
  /* An oversize block is never split: what follows it up to the next block
   * is its own, unless evidence showed a free block there. */
  if (oversize && gap <= slack_max) return rounded + gap;
  return rounded;
}

/* What a refused request asked the device for: the segment PyTorch's
 * alloc_block would cudaMalloc, or under expandable segments the whole pages
 * it would map (an upper bound: a segment's free end may have served part). */
static uint64_t refused_need(const importer *im, const entry *x) {
  if (!x->size) return 0;
  uint64_t rounded = hbm_pt_round_size(&im->conf, x->size);
  if (!im->conf.expandable) return hbm_pt_allocation_size(rounded);
  uint64_t page = rounded <= HBM_PT_SMALL_SIZE ? HBM_PT_SMALL_BUFFER : HBM_PT_LARGE_BUFFER;
  return hbm_round_up(rounded, page);
}

/* What the device held reserved, walked in the recorded order: cudaMalloc
 * (or a mapping) never returns memory still reserved, so a segment_alloc or
 * segment_map sharing a byte with a segment of the start, or with one the
 * trace made and did not release, is a damaged recording. Ranges are keyed
 * {.hi = start, .lo = end}; what a value says is read by reserved_mapped(). */
static int reserved_meet(const hbm_ordset *set, uint64_t lo, uint64_t hi, hbm_okey *k, uint32_t *v) {
  return (hbm_ordset_lower_bound(set, (hbm_okey){.hi = lo, .lo = 0}, k, v) && k->hi < hi) ||
         (hbm_ordset_below(set, (hbm_okey){.hi = lo, .lo = 0}, k, v) && k->lo > lo);
}

/* A range's value: 0 for a segment of the start, UINT32_MAX for a mapped
 * range of the start, else the entry that made it + 1. */
#define START_MAPPED UINT32_MAX
static int reserved_mapped(const importer *im, uint32_t v) {
  return v == START_MAPPED || (v && im->e[v - 1].kind == E_MAP);
}

/* The recorded stream of the reserved range at `at` with value v: its map's,
 * or for a range of the start that of the start's range holding `at` (an
 * unmap may have cut the range's low end away; im->ss is in address order). */
static int64_t reserved_stream(const importer *im, uint32_t v, uint64_t at) {
  if (v != START_MAPPED) return v ? im->e[v - 1].stream : 0;
  size_t lo = 0, hi = im->nss;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (im->ss[mid].addr <= at) lo = mid + 1; else hi = mid;
  }
  return lo ? im->ss[lo - 1].stream : 0;
}

/* The blocks live at each entry are keyed the same way by their requests,
 * the value 0 for a block alive at the start, else its alloc's entry + 1:
 * PyTorch releases (segment_free) and unmaps (segment_unmap) only blocks in
 * its free sets, never a block allocated and not yet free_completed. */
static int live_put(hbm_ordset *live, uint64_t addr, uint64_t size, uint32_t v) {
  if (!size) return HBM_OK;
  int rc = hbm_ordset_insert(live, (hbm_okey){.hi = addr, .lo = addr + size}, v);
  return rc == HBM_EINVAL ? HBM_OK : rc; /* one address live twice is reported elsewhere */
}

static int check_reserved(importer *im) {
  hbm_ordset *set, *live = NULL;
  int rc = hbm_ordset_create(&set);
  if (rc != HBM_OK) return rc;
  if ((rc = hbm_ordset_create(&live)) != HBM_OK) {
    hbm_ordset_destroy(set);
    return rc;
  }
  for (size_t k = 0; k < im->nss && rc == HBM_OK; k++)
    rc = hbm_ordset_insert(set, (hbm_okey){.hi = im->ss[k].addr, .lo = im->ss[k].addr + im->ss[k].size},
                           im->ss[k].expandable ? START_MAPPED : 0);
  for (size_t k = 0; k < im->nls && rc == HBM_OK; k++) rc = live_put(live, im->ls[k].addr, im->ls[k].request, 0);
  for (size_t i = 0; i < im->ne && rc == HBM_OK; i++) {
    const entry *x = &im->e[i];
    uint64_t lo = x->addr, hi = x->addr + x->size;
    hbm_okey k;
    uint32_t v;
    if (x->kind == E_ALLOC) {
      /* PyTorch carves a block inside one segment, or under expandable
       * segments inside mapped pages (which maps made one after another can
       * have put side by side; only of one stream, since each stream has its
       * own expandable segment), and the request lies within its block. Every
       * segment an allocation of the trace can lie in is known: one alive at
       * the dump is in `segments`, one reserved or released in the trace has
       * its event (PyTorch 2.0 skipped segment_free for a segment no recorded
       * allocation touched, which no allocation can lie in then). */
      if ((hbm_ordset_lower_bound(set, (hbm_okey){.hi = lo, .lo = 0}, &k, &v) && k.hi == lo) ||
          (hbm_ordset_below(set, (hbm_okey){.hi = lo, .lo = 0}, &k, &v) && k.lo > lo)) {
        uint64_t start = k.hi, end = k.lo;
        uint32_t by_v = v;
        int64_t stream = reserved_stream(im, v, start);
        while (end < hi && reserved_mapped(im, v) &&
               hbm_ordset_lower_bound(set, (hbm_okey){.hi = end, .lo = 0}, &k, &v) && k.hi == end &&
               reserved_mapped(im, v) && reserved_stream(im, v, k.hi) == stream)
          end = k.lo;
        if (hi > end) {
          char by[64] = "at the start";
          if (by_v && by_v != START_MAPPED)
            snprintf(by, sizeof by, "by device_traces[%d][%u]", im->device, im->e[by_v - 1].index);
          rc = fail(im, "device_traces[%d][%u] (alloc): its recorded range [0x%llx, 0x%llx) runs past the end of its "
                        "segment [0x%llx, 0x%llx) (reserved %s)", im->device, x->index, (unsigned long long)lo,
                    (unsigned long long)hi, (unsigned long long)start, (unsigned long long)end, by);
          break;
        }
      } else {
        rc = fail(im, "device_traces[%d][%u] (alloc): its recorded range [0x%llx, 0x%llx) lies in no segment (none of "
                      "the start, none reserved by the trace before it): PyTorch carves every block inside a "
                      "segment", im->device, x->index, (unsigned long long)lo, (unsigned long long)hi);
        break;
      }
      rc = live_put(live, lo, x->size, (uint32_t)i + 1);
    } else if (x->kind == E_FREE) {
      if (hbm_ordset_lower_bound(live, (hbm_okey){.hi = lo, .lo = 0}, &k, &v) && k.hi == lo)
        rc = hbm_ordset_erase(live, k);
    } else if ((x->kind == E_SEG_FREE || x->kind == E_UNMAP) && reserved_meet(live, lo, hi, &k, &v)) {
      char by[64] = "alive at the start";
      if (v) snprintf(by, sizeof by, "allocated by device_traces[%d][%u]", im->device, im->e[v - 1].index);
      rc = fail(im, "device_traces[%d][%u] (%s): releases [0x%llx, 0x%llx) while the block [0x%llx, 0x%llx) %s is "
                    "live (PyTorch releases only free blocks)",
                im->device, x->index, x->kind == E_UNMAP ? "segment_unmap" : "segment_free", (unsigned long long)lo,
                (unsigned long long)hi, (unsigned long long)k.hi, (unsigned long long)k.lo, by);
      break;
    }
    if (rc != HBM_OK) break;
    if (x->kind == E_SEG_ALLOC || x->kind == E_MAP) {
      if (reserved_meet(set, lo, hi, &k, &v)) {
        char by[64] = "at the start";
        if (v && v != START_MAPPED) snprintf(by, sizeof by, "by device_traces[%d][%u]", im->device, im->e[v - 1].index);
        rc = fail(im, "device_traces[%d][%u] (%s): segment [0x%llx, 0x%llx) overlaps the segment [0x%llx, 0x%llx) "
                      "reserved %s and not released in between",
                  im->device, x->index, x->kind == E_MAP ? "segment_map" : "segment_alloc", (unsigned long long)lo,
                  (unsigned long long)hi, (unsigned long long)k.hi, (unsigned long long)k.lo, by);
        break;
      }
      rc = hbm_ordset_insert(set, (hbm_okey){.hi = lo, .lo = hi}, (uint32_t)i + 1);
    } else if (x->kind == E_SEG_FREE || x->kind == E_UNMAP) {
      /* what it releases is no longer reserved; the rest of a range it cuts stays */
      while (rc == HBM_OK && reserved_meet(set, lo, hi, &k, &v)) {
        rc = hbm_ordset_erase(set, k);
        if (rc == HBM_OK && k.hi < lo) rc = hbm_ordset_insert(set, (hbm_okey){.hi = k.hi, .lo = lo}, v);
        if (rc == HBM_OK && k.lo > hi) rc = hbm_ordset_insert(set, (hbm_okey){.hi = hi, .lo = k.lo}, v);
      }
    }
  }
  hbm_ordset_destroy(set);
  hbm_ordset_destroy(live);
  return rc;
}

static int build(importer *im, hbm_trace *t) {
  int rc;
  if (im->nss) qsort(im->ss, im->nss, sizeof *im->ss, sseg_cmp);
  for (size_t k = 1; k < im->nss; k++)
    if (im->ss[k - 1].addr + im->ss[k - 1].size > im->ss[k].addr)
      return fail(im, "starting state: segments at 0x%llx and 0x%llx overlap",
                  (unsigned long long)im->ss[k - 1].addr, (unsigned long long)im->ss[k].addr);
  if ((rc = check_reserved(im)) != HBM_OK) return rc;
  /* ids: the allocations alive at the start first, in address order. */
  if (im->nls) qsort(im->ls, im->nls, sizeof *im->ls, ls_cmp);
  for (size_t k = 0; k < im->nls; k++) im->ls[k].id = (uint32_t)k;
  alloc_at *allocs = malloc((im->ne + 1) * sizeof *allocs);
  if (!allocs) return HBM_EHOSTMEM;
  size_t nallocs = 0;
  for (size_t i = 0; i < im->ne; i++)
    if (im->e[i].kind == E_ALLOC) allocs[nallocs++] = (alloc_at){im->e[i].addr, (uint32_t)i};
  qsort(allocs, nallocs, sizeof *allocs, alloc_at_cmp);

  size_t li = 0;
  rc = HBM_OK;
  for (size_t k = 0; k < im->nss && rc == HBM_OK; k++) {
    sseg *s = &im->ss[k];
    uint64_t end = s->addr + s->size;
    while (li < im->nls && im->ls[li].addr < s->addr) {
      live_start *l = &im->ls[li];
      if (l->free_entry != UINT32_MAX)
        rc = fail(im, "device_traces[%d][%u] (free_completed): free of 0x%llx, which no allocation in the "
                      "trace made and no segment at the start holds", im->device, im->e[l->free_entry].index,
                  (unsigned long long)l->addr);
      else
        rc = fail(im, "segments: active block at 0x%llx lies in a segment the trace allocated, but the "
                      "trace never allocated the block", (unsigned long long)l->addr);
      break;
    }
    if (rc) break;
    hbm_init_segment seg = {.addr = s->addr, .size = s->size, .stream = stream_rank(im, s->stream),
                            .small = (uint8_t)s->small, .expandable = (uint8_t)s->expandable};
    if ((rc = hbm_trace_add_init_segment(t, &seg))) break;
    uint64_t at = s->addr;
    while (li < im->nls && im->ls[li].addr < end && rc == HBM_OK) {
      live_start *l = &im->ls[li];
      uint64_t limit = li + 1 < im->nls && im->ls[li + 1].addr < end ? im->ls[li + 1].addr : end;
      uint64_t rounded = l->final_size ? l->final_size : hbm_pt_round_size(&im->conf, l->request);
      if (l->addr % HBM_PT_MIN_BLOCK || rounded % HBM_PT_MIN_BLOCK) { /* PyTorch carves blocks in 512-byte units */
        if (l->free_entry != UINT32_MAX)
          rc = fail(im, "device_traces[%d][%u] (free_completed): the block at 0x%llx (%llu bytes), alive at the start, "
                        "is not in 512-byte units", im->device, im->e[l->free_entry].index,
                    (unsigned long long)l->addr, (unsigned long long)rounded);
        else
          rc = fail(im, "segments: the active block at 0x%llx (%llu bytes) is not in 512-byte units",
                    (unsigned long long)l->addr, (unsigned long long)rounded);
        break;
      }
      if (l->addr + rounded > limit) {
        rc = fail(im, "starting state: the block at 0x%llx (%llu bytes for a request of %llu) overlaps %s at 0x%llx",
                  (unsigned long long)l->addr, (unsigned long long)rounded, (unsigned long long)l->request,
                  limit == end ? "the end of its segment" : "the next live block", (unsigned long long)limit);
        break;
      }
      uint64_t size = start_block_size(im, l, s, limit, allocs, nallocs);
      if (l->addr > at) {
        hbm_init_block fb = {.addr = at, .size = l->addr - at, .id = HBM_NO_ID};
        if ((rc = hbm_trace_add_init_block(t, &fb))) break;
      }
      hbm_init_block lb = {.addr = l->addr, .size = size, .request = l->request, .id = l->id, .tag = HBM_TAG_OTHER};
      if ((rc = hbm_trace_add_init_block(t, &lb))) break;
      at = l->addr + size;
      li++;
    }
    if (rc == HBM_OK && at < end) {
      hbm_init_block fb = {.addr = at, .size = end - at, .id = HBM_NO_ID};
      rc = hbm_trace_add_init_block(t, &fb);
    }
  }
  if (rc == HBM_OK && li < im->nls) {
    live_start *l = &im->ls[li];
    if (l->free_entry != UINT32_MAX)
      rc = fail(im, "device_traces[%d][%u] (free_completed): free of 0x%llx, which no allocation in the "
                    "trace made and no segment at the start holds", im->device, im->e[l->free_entry].index,
                (unsigned long long)l->addr);
    else
      rc = fail(im, "segments: active block at 0x%llx lies in a segment the trace allocated, but the "
                    "trace never allocated the block", (unsigned long long)l->addr);
  }
  free(allocs);
  if (rc) return rc;
  hbm_trace_reserve_ids(t, (uint32_t)im->nls);

  /* Capacity, from the out-of-memory entries (docs/snapshot-import.md). PyTorch
   * had released its cached segments and still could not get the `need` bytes
   * its request asked the device for. Where the device had less than that
   * free, the device was the limit: what PyTorch held plus what was free is
   * what this process could have had. Where the device had room, a limit
   * below it refused (a memory fraction), which the recording does not give:
   * it lies between the most PyTorch ever held and what it held plus `need`.
   * The lower end is taken: at it PyTorch's allocator makes the same calls
   * and fails the same request, and no policy is credited with memory the
   * process may never have had. The largest over all entries. */
  uint64_t reserved = 0, peak = 0, capacity = 0;
  int limited = 0;
  for (size_t k = 0; k < im->nss; k++) reserved += im->ss[k].size;
  peak = reserved;
  for (size_t i = 0; i < im->ne; i++) {
    entry *x = &im->e[i];
    if (x->kind == E_SEG_ALLOC || x->kind == E_MAP) {
      reserved += x->size;
      if (reserved > peak) peak = reserved;
    } else if ((x->kind == E_SEG_FREE || x->kind == E_UNMAP) && reserved >= x->size) {
      reserved -= x->size;
    } else if (x->kind == E_OOM && x->addr <= HBM_MAX_SIZE) {
      uint64_t need = refused_need(im, x);
      if (need && x->addr >= need) limited = 1;
      else if (reserved + x->addr > capacity) capacity = reserved + x->addr;
    }
  }
  if (limited && peak > capacity) capacity = peak;
  capacity = capacity / (2 * MiB) * (2 * MiB);
  if (capacity > t->capacity) t->capacity = capacity;
  t->private_pool_segments = im->private_segments;
  t->private_pool_bytes = im->private_bytes;

  /* Events, in recorded order, with ids reused after their free. */
  hbm_addrmap live, start_id;
  hbm_addrmap_init(&live);
  hbm_addrmap_init(&start_id);
  uint32_t *free_ids = malloc((im->ne + 1) * sizeof *free_ids);
  if (!free_ids) return HBM_EHOSTMEM;
  uint32_t nfree = 0, next_id = (uint32_t)im->nls;
  for (size_t k = 0; k < im->nls && rc == HBM_OK; k++)
    if (im->ls[k].free_entry != UINT32_MAX) rc = hbm_addrmap_put(&start_id, im->ls[k].addr, im->ls[k].id);
  size_t step = 0;
  int64_t first_time = 0;
  for (size_t i = 0; i < im->ne; i++)
    if (im->e[i].has_time) {
      first_time = im->e[i].time_us;
      break;
    }
  while (step < im->nsteps && im->step_ends[step] < first_time) step++;
  uint64_t step_number = 0;
  for (size_t i = 0; i < im->ne && rc == HBM_OK; i++) {
    entry *x = &im->e[i];
    while (x->has_time && step < im->nsteps && x->time_us > im->step_ends[step] && rc == HBM_OK) {
      hbm_event s = {.kind = HBM_EV_STEP, .id = HBM_NO_ID, .size = ++step_number, .addr = HBM_NO_ADDR,
                     .line = x->index + 1};
      rc = hbm_trace_push(t, &s);
      step++;
    }
    hbm_event ev = {.id = HBM_NO_ID, .addr = x->addr, .size = x->size, .stream = stream_rank(im, x->stream),
                    .line = x->index + 1};
    uint64_t id;
    switch (x->kind) {
      case E_ALLOC:
        ev.kind = HBM_EV_ALLOC;
        ev.id = nfree ? free_ids[--nfree] : next_id++;
        ev.tag = HBM_TAG_OTHER;
        rc = hbm_addrmap_put(&live, x->addr, ev.id);
        if (rc == HBM_OK) rc = hbm_trace_push(t, &ev);
        break;
      case E_FREE:
        if (!hbm_addrmap_take(&live, x->addr, &id) && !hbm_addrmap_take(&start_id, x->addr, &id)) break;
        ev.kind = HBM_EV_FREE;
        ev.id = (uint32_t)id;
        ev.addr = HBM_NO_ADDR;
        ev.size = 0;
        free_ids[nfree++] = (uint32_t)id;
        rc = hbm_trace_push(t, &ev);
        break;
      case E_SEG_ALLOC:
      case E_MAP:
        ev.kind = HBM_EV_SEG_ALLOC;
        ev.tag = x->kind == E_MAP ? x->size % HBM_PT_LARGE_BUFFER != 0 : x->size == HBM_PT_SMALL_BUFFER;
        for (size_t s = 0; s < im->nsegs; s++)
          if (im->segs[s].addr == x->addr && im->segs[s].size == x->size) ev.tag = (uint8_t)im->segs[s].small;
        rc = hbm_trace_push(t, &ev);
        break;
      case E_SEG_FREE:
      case E_UNMAP:
        ev.kind = HBM_EV_SEG_FREE;
        rc = hbm_trace_push(t, &ev);
        break;
      case E_OOM: /* the request PyTorch refused: asked again, and let go at once,
                   * since what the program would have done with it is unrecorded */
        if (!x->size) break;
        ev.kind = HBM_EV_ALLOC;
        ev.flags = HBM_EV_REFUSED;
        ev.addr = HBM_NO_ADDR;
        ev.tag = HBM_TAG_OTHER;
        ev.id = nfree ? free_ids[--nfree] : next_id++;
        if ((rc = hbm_trace_push(t, &ev))) break;
        ev = (hbm_event){.kind = HBM_EV_FREE, .id = ev.id, .addr = HBM_NO_ADDR, .stream = ev.stream, .line = ev.line};
        free_ids[nfree++] = ev.id;
        rc = hbm_trace_push(t, &ev);
        break;
      default: break;
    }
  }
  free(free_ids);
  hbm_addrmap_release(&live);
  hbm_addrmap_release(&start_id);
  return rc;
}

/* Whether a segment belongs to `device` (one without a device, or with None, is device 0's). */
static int segments_on(const hbm_pk_value *segments, int device) {
  for (size_t i = 0; i < hbm_pk_len(segments); i++) {
    int64_t dev = 0;
    const hbm_pk_value *dv = hbm_pk_get(hbm_pk_item(segments, i), "device");
    if (dv && dv->type != HBM_PK_NONE && !hbm_pk_int(dv, &dev)) continue;
    if (dev == device) return 1;
  }
  return 0;
}

static int choose_device(importer *im, const hbm_pk_value *traces, const hbm_pk_value *segments, int want) {
  size_t nd = hbm_pk_len(traces);
  if (want >= 0) {
    im->device = want;
    return HBM_OK;
  }
  for (size_t d = 0; d < nd; d++) {
    if (hbm_pk_len(hbm_pk_item(traces, d))) {
      im->device = (int)d;
      return HBM_OK;
    }
  }
  int64_t best = -1;
  for (size_t i = 0; i < hbm_pk_len(segments); i++) {
    int64_t dev = 0;
    const hbm_pk_value *dv = hbm_pk_get(hbm_pk_item(segments, i), "device");
    if (dv && hbm_pk_int(dv, &dev) && (best < 0 || dev < best)) best = dev;
  }
  im->device = best < 0 ? 0 : (int)best;
  return HBM_OK;
}

int hbm_snapshot_import(const uint8_t *data, size_t len, const char *name, const hbm_snapshot_options *options,
                        hbm_trace **out, hbm_diag *diag) {
  if (!data || !out) return HBM_EINVAL;
  hbm_pickle *doc = NULL;
  int rc = hbm_pickle_parse(data, len, name, NULL, &doc, diag);
  if (rc != HBM_OK) return rc;
  importer im = {.name = name ? name : "<snapshot>", .diag = diag};
  hbm_trace *t = NULL;
  const hbm_pk_value *root = hbm_pickle_root(doc);
  const hbm_pk_value *segments, *traces, *trace;
  if (!root || root->type != HBM_PK_DICT) {
    rc = fail(&im, "not a PyTorch memory snapshot: the top level is a %s, expected a dict with 'segments' and "
                   "'device_traces'", root ? hbm_pk_type_name(root->type) : "nothing");
    goto done;
  }
  segments = hbm_pk_get(root, "segments");
  traces = hbm_pk_get(root, "device_traces");
  if (!segments || (segments->type != HBM_PK_LIST && segments->type != HBM_PK_TUPLE)) {
    rc = fail(&im, "not a PyTorch memory snapshot: %s 'segments' (a list of segments)",
              segments ? "expected a list in" : "missing");
    goto done;
  }
  if (!traces || (traces->type != HBM_PK_LIST && traces->type != HBM_PK_TUPLE)) {
    rc = fail(&im, "not a PyTorch memory snapshot: %s 'device_traces' (one list of trace entries per device; "
                   "record with torch.cuda.memory._record_memory_history())",
              traces ? "expected a list in" : "missing");
    goto done;
  }
  choose_device(&im, traces, segments, options ? options->device : -1);
  trace = hbm_pk_item(traces, (size_t)im.device);
  if ((size_t)im.device >= hbm_pk_len(traces) && options && options->device >= 0 &&
      !segments_on(segments, im.device)) { /* a device the snapshot lacks */
    rc = fail(&im, "device %d: the snapshot has traces for %zu device(s) and no segment of device %d", im.device,
              hbm_pk_len(traces), im.device);
    goto done;
  }
  if (trace && trace->type != HBM_PK_LIST && trace->type != HBM_PK_TUPLE) {
    rc = fail(&im, "device_traces[%d]: expected a list of trace entries", im.device);
    goto done;
  }
  if ((rc = read_settings(&im, hbm_pk_get(root, "allocator_settings")))) goto done;
  if ((rc = read_segments(&im, segments))) goto done;
  if (trace && (rc = read_trace(&im, trace))) goto done;
  if ((rc = read_steps(&im, hbm_pk_get(root, "external_annotations"))) || (rc = collect_streams(&im)) || (rc = find_live_start(&im)) || (rc = start_segments(&im)) ||
      (rc = start_ranges(&im)))
    goto done;
  if ((rc = hbm_trace_new(name, &t))) goto done;
  if (im.have_conf && (rc = hbm_trace_set_conf(t, im.conf_text))) goto done;
  t->from_snapshot = 1;
  t->snapshot_device = im.device;
  /* Blocks live at once cannot share a byte: a recording that says so is damaged. */
  if ((rc = build(&im, t)) == HBM_OK) rc = hbm_trace_check_recorded(t, im.name, diag);
done:
  if (rc != HBM_OK) hbm_trace_free(t);
  else *out = t; /* on error the caller's pointer is left as it was (hbm.h) */
  free(im.e);
  free(im.segs);
  free(im.blocks);
  free(im.ls);
  free(im.ss);
  free(im.streams);
  free(im.step_ends);
  hbm_pickle_free(doc);
  return rc;
}

int hbm_snapshot_to_trace(const uint8_t *data, size_t len, const char *name, hbm_trace **out, hbm_diag *diag) {
  return hbm_snapshot_import(data, len, name, NULL, out, diag);
}
