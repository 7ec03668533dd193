/* trace.c: the hbm text trace v1 (reader, writer) and the trace builder.
 * The format is documented in docs/trace-format.md and at the top of trace.h. */
#include "trace/trace.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/ordset.h"
#include "core/util.h"
#include "policy/pytorch_alloc.h"
#include "trace/pickle.h"
#include "trace/snapshot.h"

/* ---- builder ------------------------------------------------------------------ */
int hbm_trace_new(const char *name, hbm_trace **out) {
  hbm_trace *t = calloc(1, sizeof *t);
  if (!t || !(t->name = strdup(name ? name : "trace"))) {
    free(t);
    return HBM_EHOSTMEM;
  }
  *out = t;
  return HBM_OK;
}

void hbm_trace_free(hbm_trace *t) {
  if (!t) return;
  if (t->id_names) {
    for (uint32_t i = 0; i < t->nids; i++) free(t->id_names[i]);
    free(t->id_names);
  }
  free(t->name);
  free(t->conf);
  free(t->events);
  free(t->init_segments);
  free(t->init_blocks);
  free(t);
}

int hbm_trace_push(hbm_trace *t, const hbm_event *ev) {
  if (t->nevents == t->events_cap) {
    uint64_t cap = t->events_cap ? t->events_cap * 2 : 4096;
    hbm_event *e = realloc(t->events, cap * sizeof *e);
    if (!e) return HBM_EHOSTMEM;
    t->events = e;
    t->events_cap = cap;
  }
  t->events[t->nevents++] = *ev;
  if ((ev->kind == HBM_EV_ALLOC || ev->kind == HBM_EV_FREE) && ev->id >= t->nids) t->nids = ev->id + 1;
  t->peak_live_cache = 0;
  return HBM_OK;
}

int hbm_trace_alloc(hbm_trace *t, uint32_t id, uint64_t size, hbm_tag tag, int stream) {
  hbm_event e = {.kind = HBM_EV_ALLOC, .tag = (uint8_t)tag, .stream = stream, .id = id,
                 .size = size, .addr = HBM_NO_ADDR};
  return hbm_trace_push(t, &e);
}
int hbm_trace_free_id(hbm_trace *t, uint32_t id) {
  hbm_event e = {.kind = HBM_EV_FREE, .id = id, .addr = HBM_NO_ADDR};
  return hbm_trace_push(t, &e);
}
int hbm_trace_step(hbm_trace *t, uint64_t step) {
  hbm_event e = {.kind = HBM_EV_STEP, .id = HBM_NO_ID, .size = step, .addr = HBM_NO_ADDR};
  return hbm_trace_push(t, &e);
}
int hbm_trace_set_conf(hbm_trace *t, const char *conf) {
  char *c = strdup(conf);
  if (!c) return HBM_EHOSTMEM;
  free(t->conf);
  t->conf = c;
  return HBM_OK;
}
void hbm_trace_reserve_ids(hbm_trace *t, uint32_t n) {
  if (n > t->nids) t->nids = n;
}

int hbm_trace_add_init_segment(hbm_trace *t, const hbm_init_segment *seg) {
  if (t->ninit_segments == t->init_segments_cap) {
    uint32_t cap = t->init_segments_cap ? t->init_segments_cap * 2 : 16;
    hbm_init_segment *s = realloc(t->init_segments, cap * sizeof *s);
    if (!s) return HBM_EHOSTMEM;
    t->init_segments = s;
    t->init_segments_cap = cap;
  }
  hbm_init_segment s = *seg;
  s.first_block = t->ninit_blocks;
  s.nblocks = 0;
  t->init_segments[t->ninit_segments++] = s;
  return HBM_OK;
}

int hbm_trace_add_init_block(hbm_trace *t, const hbm_init_block *blk) {
  if (!t->ninit_segments) return HBM_EINVAL;
  if (t->ninit_blocks == t->init_blocks_cap) {
    uint32_t cap = t->init_blocks_cap ? t->init_blocks_cap * 2 : 64;
    hbm_init_block *b = realloc(t->init_blocks, cap * sizeof *b);
    if (!b) return HBM_EHOSTMEM;
    t->init_blocks = b;
    t->init_blocks_cap = cap;
  }
  t->init_blocks[t->ninit_blocks++] = *blk;
  t->init_segments[t->ninit_segments - 1].nblocks++;
  if (blk->id != HBM_NO_ID && blk->id >= t->nids) t->nids = blk->id + 1;
  t->peak_live_cache = 0;
  return HBM_OK;
}

/* ---- queries -------------------------------------------------------------------- */
uint64_t hbm_trace_event_count(const hbm_trace *t) { return t ? t->nevents : 0; }
uint64_t hbm_trace_capacity(const hbm_trace *t) { return t ? t->capacity : 0; }

uint32_t hbm_trace_private_pools(const hbm_trace *t, uint64_t *bytes) {
  if (bytes) *bytes = t ? t->private_pool_bytes : 0;
  return t ? t->private_pool_segments : 0;
}

const char *hbm_trace_name(const hbm_trace *t) { return t ? t->name : NULL; }

/* The highest sum of live requests; HBM_EHOSTMEM for want of the id map. */
static int peak_live_compute(const hbm_trace *t, uint64_t *out) {
  uint64_t *size = calloc(t->nids ? t->nids : 1, sizeof *size);
  if (!size) return HBM_EHOSTMEM;
  /* 128 bits: 16Ki live allocations of 1 PiB already sum to 2^64 */
  unsigned __int128 live = 0, peak = 0;
  for (uint32_t i = 0; i < t->ninit_blocks; i++)
    if (t->init_blocks[i].id != HBM_NO_ID) {
      size[t->init_blocks[i].id] = t->init_blocks[i].request;
      live += t->init_blocks[i].request;
    }
  peak = live;
  for (uint64_t i = 0; i < t->nevents; i++) {
    const hbm_event *e = &t->events[i];
    if (e->kind == HBM_EV_ALLOC) {
      size[e->id] = e->size;
      live += e->size;
      if (live > peak) peak = live;
    } else if (e->kind == HBM_EV_FREE) {
      live -= size[e->id];
      size[e->id] = 0;
    }
  }
  free(size);
  *out = peak > UINT64_MAX ? UINT64_MAX : (uint64_t)peak;
  return HBM_OK;
}

int hbm_trace_peak_live_prepare(hbm_trace *t) {
  uint64_t p;
  int rc = peak_live_compute(t, &p);
  if (rc == HBM_OK) __atomic_store_n(&t->peak_live_cache, p, __ATOMIC_RELAXED);
  return rc;
}

/* The public readers prepare the figure, so for their traces this only
 * reads; a trace built here event by event computes it on first use, and
 * threads that race there store the same value (atomically: no data race). */
uint64_t hbm_trace_peak_live(const hbm_trace *t) {
  if (!t) return 0;
  uint64_t p = __atomic_load_n(&t->peak_live_cache, __ATOMIC_RELAXED);
  if (p || peak_live_compute(t, &p) != HBM_OK) return p;
  __atomic_store_n(&((hbm_trace *)t)->peak_live_cache, p, __ATOMIC_RELAXED);
  return p;
}

/* ---- validation: the starting state's segments and tiling, pairing of allocs and frees -- */
const char *hbm_trace_where(const hbm_trace *t, uint32_t line, char *buf, size_t len) {
  if (!line) snprintf(buf, len, "%s", "");
  else if (t && t->from_snapshot) snprintf(buf, len, "device_traces[%d][%u]", (int)t->snapshot_device, line - 1);
  else snprintf(buf, len, "line %u", line);
  return buf;
}

static void where_line(char *buf, size_t len, uint32_t line) {
  if (line) snprintf(buf, len, " at line %u", line);
  else buf[0] = 0;
}

/* In a set of disjoint ranges keyed {.hi = start, .lo = end}: whether one
 * shares a byte with [lo, hi) (lo < hi), and which (*k, *value). Being
 * disjoint, only the first at or above lo and the last below it can reach
 * into [lo, hi). The starting segments and the recorded ranges are checked
 * with it, each in the trace's order. */
static int ranges_meet(const hbm_ordset *set, uint64_t lo, uint64_t hi, hbm_okey *k, uint32_t *value) {
  return (hbm_ordset_lower_bound(set, (hbm_okey){.hi = lo, .lo = 0}, k, value) && k->hi < hi) ||
         (hbm_ordset_below(set, (hbm_okey){.hi = lo, .lo = 0}, k, value) && k->lo > lo);
}

/* Two segments of one starting state share no byte: a replay would place
 * blocks twice over and count the memory twice. Read in the trace's order,
 * the first segment that meets one before it is reported, on its line,
 * naming the earliest segment it meets. */
int hbm_trace_check_segments(const hbm_trace *t, const char *file, hbm_diag *diag) {
  if (!file) file = t->name;
  for (uint32_t k = 0; k < t->ninit_segments; k++) {
    const hbm_init_segment *g = &t->init_segments[k];
    if (hbm_range_wraps(g->addr, g->size))
      return hbm_diag_set(diag, file, g->line, 0, "starting state: the segment at %#llx (%llu bytes) wraps past the top of the address space",
                          (unsigned long long)g->addr, (unsigned long long)g->size);
  }
  if (t->ninit_segments < 2) return HBM_OK;
  hbm_ordset *set = NULL;
  int rc = hbm_ordset_create(&set);
  for (uint32_t k = 0; k < t->ninit_segments && rc == HBM_OK; k++) {
    const hbm_init_segment *b = &t->init_segments[k];
    uint64_t lo = b->addr, hi = b->addr + b->size;
    hbm_okey key;
    uint32_t other;
    if (hi == lo) continue; /* an empty one (built in memory) shares no byte */
    if (!ranges_meet(set, lo, hi, &key, &other)) {
      rc = hbm_ordset_insert(set, (hbm_okey){.hi = lo, .lo = hi}, k);
      continue;
    }
    for (uint32_t j = 0; j < other; j++) { /* the earliest it meets */
      const hbm_init_segment *g = &t->init_segments[j];
      if (g->addr < hi && lo < g->addr + g->size) other = j;
    }
    const hbm_init_segment *a = &t->init_segments[other];
    char at[32];
    where_line(at, sizeof at, a->line);
    rc = hbm_diag_set(diag, file, b->line, 0,
                      "starting state: the segment [0x%llx, 0x%llx) overlaps the segment [0x%llx, 0x%llx)%s",
                      (unsigned long long)lo, (unsigned long long)hi, (unsigned long long)a->addr,
                      (unsigned long long)(a->addr + a->size), at);
  }
  hbm_ordset_destroy(set);
  return rc;
}

/* ---- recorded ranges: two blocks live at once never share a byte ---------------- */
/* A real allocator never hands out one byte twice, so recorded ranges that
 * overlap while both are live come from a damaged or hand-made trace, and a
 * comparison with them (fidelity: "placed where PyTorch placed it") would
 * mean nothing. A block's range is [addr, addr + request): the request lies
 * inside the block PyTorch carved (rounded to 512 B, maybe with unsplit
 * slack), so it is the narrowest range a recording guarantees disjoint; a
 * free ends it. */

#define REC_INIT (1ull << 63) /* a range's source: REC_INIT | k, the starting state's block k; else event i */

typedef struct rec_check {
  const hbm_trace *t;
  const char *file;
  hbm_diag *diag;
  hbm_ordset *live; /* each live range as {.hi = start, .lo = end} (ordered by start), value its id */
  uint64_t *src;    /* by id: 1 + the source of its live range, 0 for none */
} rec_check;

static void rec_range(const hbm_trace *t, uint64_t src, uint64_t *lo, uint64_t *hi) {
  if (src & REC_INIT) {
    const hbm_init_block *b = &t->init_blocks[src & ~REC_INIT];
    *lo = b->addr;
    *hi = b->addr + b->request;
  } else {
    *lo = t->events[src].addr;
    *hi = *lo + t->events[src].size;
  }
}

static uint32_t rec_line(const hbm_trace *t, uint64_t src) {
  return src & REC_INIT ? t->init_blocks[src & ~REC_INIT].line : t->events[src].line;
}

/* A range's owner for a message: "x1's" in a text trace; a snapshot's ids
 * are the importer's, so there the entry names it. */
static void rec_owner(const hbm_trace *t, uint32_t id, int mine, char *buf, size_t len) {
  if (t->from_snapshot) snprintf(buf, len, mine ? "its" : "the block");
  else if (t->id_names && id < t->nids && t->id_names[id]) snprintf(buf, len, "%.100s's", t->id_names[id]);
  else snprintf(buf, len, "b%u's", id);
}

/* Where a range came from, for a message: " (line 3)", a snapshot's entry,
 * or what a trace built in memory (no lines) has. */
static void rec_where(const hbm_trace *t, uint64_t src, char *buf, size_t len) {
  uint32_t line = rec_line(t, src);
  if (line && t->from_snapshot) snprintf(buf, len, " (device_traces[%d][%u])", (int)t->snapshot_device, line - 1);
  else if (line) snprintf(buf, len, " (line %u)", line);
  else if (src & REC_INIT) snprintf(buf, len, " (alive at the start)");
  else snprintf(buf, len, " (event %llu)", (unsigned long long)src);
}

/* A message's start where the diag's line cannot say where: a snapshot's
 * entry, or an event's index in a trace built in memory. */
static void rec_prefix(const hbm_trace *t, uint64_t src, char *buf, size_t len) {
  uint32_t line = rec_line(t, src);
  if (t->from_snapshot && line) snprintf(buf, len, "device_traces[%d][%u] (alloc): ", (int)t->snapshot_device, line - 1);
  else if (!line && !(src & REC_INIT)) snprintf(buf, len, "event %llu: ", (unsigned long long)src);
  else buf[0] = 0;
}

static int rec_overlap(rec_check *c, uint32_t id, uint64_t src, uint32_t other, hbm_okey range) {
  const hbm_trace *t = c->t;
  uint64_t osrc = c->src[other] - 1, lo, hi;
  rec_range(t, src, &lo, &hi);
  char me[128], them[128], at[64], where[64];
  rec_owner(t, id, 1, me, sizeof me);
  rec_owner(t, other, 0, them, sizeof them);
  rec_where(t, osrc, at, sizeof at);
  rec_prefix(t, src, where, sizeof where);
  return hbm_diag_set(c->diag, c->file, t->from_snapshot ? 0 : rec_line(t, src), 0,
                      "%s%s recorded range [0x%llx, 0x%llx) overlaps %s [0x%llx, 0x%llx)%s, live at once", where, me,
                      (unsigned long long)lo, (unsigned long long)hi, them, (unsigned long long)range.hi /* its start */,
                      (unsigned long long)range.lo /* its end */, at);
}

static void rec_release(rec_check *c, uint32_t id) {
  if (!c->src[id]) return;
  uint64_t lo, hi;
  rec_range(c->t, c->src[id] - 1, &lo, &hi);
  hbm_ordset_erase(c->live, (hbm_okey){.hi = lo, .lo = hi});
  c->src[id] = 0;
}

/* Makes `id`'s range from `src` live: HBM_OK, HBM_EHOSTMEM, or HBM_EPARSE
 * naming the live range it shares a byte with. */
static int rec_claim(rec_check *c, uint32_t id, uint64_t src) {
  uint64_t lo, hi;
  rec_release(c, id); /* an unpaired trace's old range: validate says so */
  rec_range(c->t, src, &lo, &hi);
  if (hi == lo) return HBM_OK; /* no byte to share */
  hbm_okey k;
  uint32_t other;
  if (ranges_meet(c->live, lo, hi, &k, &other)) return rec_overlap(c, id, src, other, k);
  int rc = hbm_ordset_insert(c->live, (hbm_okey){.hi = lo, .lo = hi}, id);
  if (rc != HBM_OK) return rc;
  c->src[id] = src + 1;
  return HBM_OK;
}

int hbm_trace_check_recorded(const hbm_trace *t, const char *file, hbm_diag *diag) {
  if (!file) file = t->name;
  uint64_t recorded = 0;
  for (uint64_t i = 0; i < t->nevents; i++) {
    const hbm_event *e = &t->events[i];
    if (e->kind != HBM_EV_ALLOC || e->addr == HBM_NO_ADDR || (e->flags & HBM_EV_REFUSED)) continue;
    if (hbm_range_wraps(e->addr, e->size)) {
      char where[64];
      rec_prefix(t, i, where, sizeof where);
      return hbm_diag_set(diag, file, t->from_snapshot ? 0 : e->line, 0,
                          "%srecorded address 0x%llx: %llu bytes from there wrap past the top of the address space",
                          where, (unsigned long long)e->addr, (unsigned long long)e->size);
    }
    recorded++;
  }
  /* The starting state's blocks tile segments that do not overlap: they
   * can only meet a recorded allocation. */
  if (!recorded) return HBM_OK;
  rec_check c = {t, file, diag, NULL, calloc(t->nids ? t->nids : 1, sizeof *c.src)};
  int rc = c.src ? hbm_ordset_create(&c.live) : HBM_EHOSTMEM;
  for (uint32_t k = 0; k < t->ninit_blocks && rc == HBM_OK; k++) {
    uint32_t id = t->init_blocks[k].id;
    if (id != HBM_NO_ID && id < t->nids) rc = rec_claim(&c, id, REC_INIT | k);
  }
  for (uint64_t i = 0; i < t->nevents && rc == HBM_OK; i++) {
    const hbm_event *e = &t->events[i];
    if ((e->kind != HBM_EV_ALLOC && e->kind != HBM_EV_FREE) || e->id >= t->nids) continue;
    if (e->kind == HBM_EV_ALLOC && e->addr != HBM_NO_ADDR && !(e->flags & HBM_EV_REFUSED)) rc = rec_claim(&c, e->id, i);
    else rec_release(&c, e->id); /* a free; or an allocation without a range, in an unpaired trace */
  }
  hbm_ordset_destroy(c.live);
  free(c.src);
  return rc;
}

/* A trace's conf is PYTORCH_CUDA_ALLOC_CONF text (fidelity replays with it):
 * what PyTorch would refuse is refused where the trace is read, not later by
 * one command and never by others. `offset` is where the text starts in the
 * file; the message says the byte within the setting. */
static int check_conf(const char *conf, const char *file, uint64_t line, uint64_t offset, hbm_diag *diag) {
  hbm_pt_conf c;
  hbm_pt_conf_default(&c, 0);
  hbm_diag why = {0};
  int rc = hbm_pt_conf_parse(conf, &c, &why);
  if (rc == HBM_OK || rc == HBM_EHOSTMEM) return rc;
  hbm_diag_set(diag, file, line, offset + why.offset, "conf: byte %llu of the setting '%.80s%s': %s",
               (unsigned long long)why.offset, conf, strlen(conf) > 80 ? "..." : "", why.message);
  return HBM_EPARSE;
}

int hbm_trace_validate(const hbm_trace *t, hbm_diag *diag) {
  int rc = hbm_trace_check_segments(t, NULL, diag);
  if (rc == HBM_OK && t->conf) rc = check_conf(t->conf, t->name, 0, 0, diag);
  if (rc != HBM_OK) return rc;
  uint8_t *live = calloc(t->nids ? t->nids : 1, 1);
  if (!live) return HBM_EHOSTMEM;
  for (uint32_t k = 0; k < t->ninit_segments && rc == HBM_OK; k++) { /* tiled whole, in 512-byte units */
    const hbm_init_segment *seg = &t->init_segments[k];
    uint64_t at = seg->addr;
    for (uint32_t i = seg->first_block; i < seg->first_block + seg->nblocks && rc == HBM_OK; i++) {
      const hbm_init_block *b = &t->init_blocks[i];
      if (b->addr != at || b->size == 0 || b->size % 512 || b->addr % 512 || b->size > seg->addr + seg->size - at)
        rc = hbm_diag_set(diag, t->name, 0, 0, "starting state: the segment at %#llx is not tiled in 512-byte blocks at %#llx",
                          (unsigned long long)seg->addr, (unsigned long long)b->addr);
      at += b->size;
    }
    if (rc == HBM_OK && at != seg->addr + seg->size)
      rc = hbm_diag_set(diag, t->name, 0, 0, "starting state: the blocks of the segment at %#llx cover %llu of its %llu bytes",
                        (unsigned long long)seg->addr, (unsigned long long)(at - seg->addr), (unsigned long long)seg->size);
  }
  for (uint32_t i = 0; i < t->ninit_blocks && rc == HBM_OK; i++) {
    uint32_t id = t->init_blocks[i].id;
    if (id == HBM_NO_ID) continue;
    if (live[id]) rc = hbm_diag_set(diag, t->name, 0, 0, "starting state: id %u is live twice", id);
    live[id] = 1;
  }
  for (uint64_t i = 0; i < t->nevents && rc == HBM_OK; i++) {
    const hbm_event *e = &t->events[i];
    if (e->kind == HBM_EV_ALLOC) {
      if (e->id >= t->nids || live[e->id])
        rc = hbm_diag_set(diag, t->name, e->line, 0, "event %llu: allocation of id %u, which is already live", (unsigned long long)i, e->id);
      else if (e->size == 0 || e->size > HBM_MAX_SIZE)
        rc = hbm_diag_set(diag, t->name, e->line, 0, "event %llu: size %llu is not between 1 B and 1 PiB", (unsigned long long)i, (unsigned long long)e->size);
      else
        live[e->id] = 1;
    } else if (e->kind == HBM_EV_FREE) {
      if (e->id >= t->nids || !live[e->id])
        rc = hbm_diag_set(diag, t->name, e->line, 0, "event %llu: free of id %u, which is not live", (unsigned long long)i, e->id);
      else
        live[e->id] = 0;
    } else if (e->kind == HBM_EV_SEG_ALLOC || e->kind == HBM_EV_SEG_FREE) {
      if (!e->size || e->size % 512 || e->addr % 512 || hbm_range_wraps(e->addr, e->size))
        rc = hbm_diag_set(diag, t->name, e->line, 0,
                          "event %llu: segment of %llu bytes at %#llx is not a multiple of 512 bytes on a 512-byte boundary "
                          "within the address space", (unsigned long long)i, (unsigned long long)e->size, (unsigned long long)e->addr);
    }
  }
  free(live);
  return rc == HBM_OK ? hbm_trace_check_recorded(t, NULL, diag) : rc;
}

/* ---- text reader ---------------------------------------------------------------------- */
/* Names to dense ids: open addressing. A slot keeps its name's key beside
 * the id: up to 8 bytes, the name itself (most ids, "b1234", are short:
 * a hit compares two words and reads no name); longer, its FNV-1a hash,
 * and the name is compared on a match. Every allocation and free of a text
 * trace looks its id up, and hashing and comparing bytes there was a fifth
 * of reading a large trace. */
typedef struct id_slot {
  uint64_t key;
  uint32_t id1; /* id + 1, 0 = empty */
  uint32_t len; /* the name's length, UINT32_MAX for any longer */
} id_slot;

typedef struct id_table {
  char **names;      /* index = id */
  uint32_t n, cap;
  id_slot *slots;
  uint64_t nslots;   /* a power of two, at least twice n */
  uint8_t *live;
  uint32_t *last_line; /* line where the id was last allocated or freed */
} id_table;

static uint64_t id_key(const char *s, size_t n) {
  uint64_t h = 0;
  if (n <= sizeof h) {
    memcpy(&h, s, n);
    return h;
  }
  h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

/* The slot from the top log2(nslots) bits of a multiplicative hash. */
static uint64_t id_slot_of(const id_table *t, uint64_t key, uint32_t len) {
  return ((key ^ len) * 0x9e3779b97f4a7c15ull) >> (64 - __builtin_ctzll(t->nslots));
}

static int ids_grow_slots(id_table *t) {
  uint64_t n = t->nslots ? t->nslots * 2 : 1024;
  id_slot *s = calloc(n, sizeof *s), *old = t->slots;
  if (!s) return HBM_EHOSTMEM;
  uint64_t old_n = t->nslots;
  t->slots = s;
  t->nslots = n;
  for (uint64_t i = 0; i < old_n; i++) {
    if (!old[i].id1) continue;
    uint64_t h = id_slot_of(t, old[i].key, old[i].len);
    while (s[h].id1) h = (h + 1) & (n - 1);
    s[h] = old[i];
  }
  free(old);
  return HBM_OK;
}

/* Finds or adds name[0..len); returns the id or HBM_NO_ID on host OOM. */
static uint32_t ids_lookup(id_table *t, const char *name, size_t len, int add) {
  if ((uint64_t)(t->n + 1) * 2 > t->nslots && ids_grow_slots(t) != HBM_OK) return HBM_NO_ID;
  uint32_t len32 = len < UINT32_MAX ? (uint32_t)len : UINT32_MAX; /* longer ones: the names decide */
  uint64_t key = id_key(name, len), h = id_slot_of(t, key, len32);
  for (const id_slot *x; (x = &t->slots[h])->id1; h = (h + 1) & (t->nslots - 1))
    if (x->key == key && x->len == len32 && (len <= sizeof key || hbm_str_is(t->names[x->id1 - 1], name, len)))
      return x->id1 - 1;
  if (!add) return HBM_NO_ID - 1;
  if (t->n == t->cap) {
    uint32_t cap = t->cap ? t->cap * 2 : 1024;
    char **nn = realloc(t->names, cap * sizeof *nn);
    if (!nn) return HBM_NO_ID;
    t->names = nn;
    uint8_t *nl = realloc(t->live, cap);
    if (!nl) return HBM_NO_ID;
    t->live = nl;
    uint32_t *ll = realloc(t->last_line, cap * sizeof *ll);
    if (!ll) return HBM_NO_ID;
    t->last_line = ll;
    t->cap = cap;
  }
  char *copy = strndup(name, len);
  if (!copy) return HBM_NO_ID;
  t->names[t->n] = copy;
  t->live[t->n] = 0;
  t->last_line[t->n] = 0;
  t->slots[h] = (id_slot){key, t->n + 1, len32};
  return t->n++;
}

static void ids_release(id_table *t, int keep_names) {
  if (!keep_names) {
    for (uint32_t i = 0; i < t->n; i++) free(t->names[i]);
    free(t->names);
  }
  free(t->slots);
  free(t->live);
  free(t->last_line);
}

typedef struct tok { const char *s; size_t n; } tok;

static int tok_eq(tok t, const char *s) { return hbm_str_is(s, t.s, t.n); }

/* Parses an unsigned number spanning the whole token: decimal, or
 * hexadecimal after 0x. A leading zero is no octal prefix (strtoull's base 0
 * read stream "010" as 8 and refused "09"). */
static int tok_u64(tok t, uint64_t *v) {
  size_t i = 0;
  unsigned base = 10;
  if (t.n > 2 && t.s[0] == '0' && (t.s[1] == 'x' || t.s[1] == 'X')) {
    base = 16;
    i = 2;
  }
  if (i == t.n) return 0;
  uint64_t x = 0;
  for (; i < t.n; i++) {
    unsigned char c = (unsigned char)t.s[i];
    unsigned d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (base == 16 && (c | 0x20) >= 'a' && (c | 0x20) <= 'f') d = (c | 0x20) - 'a' + 10;
    else return 0;
    if (x > (UINT64_MAX - d) / base) return 0;
    x = x * base + d;
  }
  *v = x;
  return 1;
}

static int tok_size(tok t, uint64_t *v) {
  char buf[40];
  if (t.n == 0 || t.n >= sizeof buf) return 0;
  /* Most sizes in a trace are plain byte counts: up to 19 digits cannot
   * overflow, and read as hbm_size_parse would read them. */
  if (t.n <= 19) {
    uint64_t x = 0;
    size_t i = 0;
    for (; i < t.n && t.s[i] >= '0' && t.s[i] <= '9'; i++) x = x * 10 + (uint64_t)(t.s[i] - '0');
    if (i == t.n) {
      *v = x;
      return 1;
    }
  }
  memcpy(buf, t.s, t.n);
  buf[t.n] = 0;
  return hbm_size_parse(buf, v) == HBM_OK;
}

static int tok_tag(tok t, hbm_tag *tag) { return hbm_tag_parse_n(t.s, t.n, tag) == HBM_OK; }

static int tok_stream(tok t, int32_t *stream) {
  uint64_t v;
  if (!tok_u64(t, &v) || v > INT32_MAX) return 0;
  *stream = (int32_t)v;
  return 1;
}

#define MAX_TOKENS 8

typedef struct parser {
  const char *file;
  uint64_t line, offset;
  hbm_diag *diag;
} parser;

#define BAD(p, ...) hbm_diag_set((p)->diag, (p)->file, (p)->line, (p)->offset, __VA_ARGS__)

/* A number where an optional stream may stand: a second one, or one past
 * what a stream holds. */
static int bad_stream(parser *p, tok t, int have_stream, const char *per) {
  if (have_stream) return BAD(p, "a second stream number '%.*s': one stream per %s", (int)t.n, t.s, per);
  return BAD(p, "stream '%.*s' out of range: expected 0..2147483647", (int)t.n, t.s);
}

static int parse_size_tok(parser *p, tok t, const char *what, uint64_t *v) {
  if (!tok_size(t, v))
    return BAD(p, "%s: expected a size like 512MiB, 4.2GB or 1024 (B/KiB/MiB/GiB/TiB/PiB or KB/MB/GB/TB/PB), got '%.*s'", what, (int)t.n, t.s);
  if (*v == 0) return BAD(p, "%s: size must be at least 1 byte", what);
  if (*v > HBM_MAX_SIZE) return BAD(p, "%s: size %.*s is absurd (more than 1 PiB)", what, (int)t.n, t.s);
  return HBM_OK;
}

static int parse_addr_tok(parser *p, tok t, const char *what, uint64_t *v) {
  if (!tok_u64(t, v)) return BAD(p, "%s: expected an address (0x... or decimal), got '%.*s'", what, (int)t.n, t.s);
  return HBM_OK;
}

/* The starting state's last segment must be tiled whole: checked when the
 * next init-seg, the first event or the end of the input comes. */
static int last_segment_covered(parser *p, const hbm_trace *t) {
  if (!t->ninit_segments) return HBM_OK;
  const hbm_init_segment *seg = &t->init_segments[t->ninit_segments - 1];
  uint64_t covered = 0;
  for (uint32_t i = 0; i < seg->nblocks; i++) covered += t->init_blocks[seg->first_block + i].size;
  if (covered == seg->size) return HBM_OK;
  return BAD(p, "the init-seg at %#llx is not tiled: its init-blk lines cover %llu of its %llu bytes",
             (unsigned long long)seg->addr, (unsigned long long)covered, (unsigned long long)seg->size);
}

/* The starting state is complete (first event, or end of input): its last
 * segment tiled, no two segments overlapping. */
static int starting_state_done(parser *p, const hbm_trace *t) {
  int rc = last_segment_covered(p, t);
  return rc != HBM_OK ? rc : hbm_trace_check_segments(t, p->file, p->diag);
}

int hbm_trace_parse_text(const char *text, size_t len, const char *name, hbm_trace **out,
                         hbm_diag *diag) {
  if (!text || !out) return HBM_EINVAL;
  hbm_trace *t;
  if (hbm_trace_new(name, &t) != HBM_OK) return HBM_EHOSTMEM;
  id_table ids = {0};
  parser p = {name ? name : "<input>", 0, 0, diag};
  int rc = HBM_OK, saw_header = 0;
  uint64_t step = 0, step_line = 0, capacity_line = 0, conf_line = 0; /* lines of the last mark, the settings */
  const char *pos = text, *end = text + len;
  /* A UTF-8 byte order mark, as some editors on Windows write: read past, as
   * hbm plan reads past one. */
  if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) pos += 3;
  int has_lf = memchr(text, '\n', len) != NULL;
  while (pos < end && rc == HBM_OK) {
    const char *eol = memchr(pos, '\n', (size_t)(end - pos));
    if (!eol) eol = end;
    p.line++;
    p.offset = (uint64_t)(pos - text);
    if (memchr(pos, 0, (size_t)(eol - pos))) { rc = BAD(&p, "NUL byte in a text trace (binary file?)"); break; }
    /* A line ends in LF or CR LF. A CR anywhere else is no blank: refused,
     * as hbm plan refuses it, and a file of CR line ends is said to be one
     * (else its one long line would be refused for want of the header). */
    const char *stop = eol > pos && eol[-1] == '\r' ? eol - 1 : eol;
    const char *cr = memchr(pos, '\r', (size_t)(stop - pos));
    if (cr) {
      p.offset = (uint64_t)(cr - text);
      rc = has_lf ? BAD(&p, "a carriage return inside the line (byte %llu): expected lines that end in LF or CR LF",
                        (unsigned long long)p.offset)
                  : BAD(&p, "lines that end in CR alone (byte %llu; the file has no LF): expected lines that end "
                            "in LF or CR LF", (unsigned long long)p.offset);
      break;
    }
    /* tokenize, dropping a # comment */
    tok tk[MAX_TOKENS + 1];
    int n = 0;
    const char *c = pos;
    while (c < stop && *c != '#') {
      while (c < stop && (*c == ' ' || *c == '\t')) c++;
      if (c >= stop || *c == '#') break;
      const char *s = c;
      while (c < stop && *c != ' ' && *c != '\t' && *c != '#') c++;
      if (n <= MAX_TOKENS) tk[n] = (tok){s, (size_t)(c - s)};
      n++;
    }
    pos = eol + 1;
    if (n == 0) continue;
    if (n > MAX_TOKENS) { rc = BAD(&p, "too many fields (%d); see docs/trace-format.md", n); break; }
    if (!saw_header) {
      if (n == 2 && tok_eq(tk[0], "hbm-trace")) {
        if (!tok_eq(tk[1], "1")) { rc = BAD(&p, "unsupported trace version '%.*s' (this reader knows version 1)", (int)tk[1].n, tk[1].s); break; }
        saw_header = 1;
        continue;
      }
      rc = BAD(&p, "expected the header 'hbm-trace 1' as the first line (or a PyTorch snapshot: a pickle of "
                   "protocol 2 to 5)");
      break;
    }
    hbm_event e = {.id = HBM_NO_ID, .addr = HBM_NO_ADDR, .line = (uint32_t)(p.line > UINT32_MAX ? UINT32_MAX : p.line)};
    if (tok_eq(tk[0], "a")) {
      if (n < 3) { rc = BAD(&p, "expected 'a ID SIZE [TAG] [STREAM] [@ADDR] [refused]'"); break; }
      uint32_t id = ids_lookup(&ids, tk[1].s, tk[1].n, 1);
      if (id == HBM_NO_ID) { rc = HBM_EHOSTMEM; break; }
      if (ids.live[id]) { rc = BAD(&p, "id '%.*s' is already live (allocated at line %u and not freed)", (int)tk[1].n, tk[1].s, ids.last_line[id]); break; }
      if ((rc = parse_size_tok(&p, tk[2], "allocation size", &e.size)) != HBM_OK) break;
      int have_tag = 0, have_stream = 0;
      for (int i = 3; i < n && rc == HBM_OK; i++) {
        hbm_tag tag = HBM_TAG_OTHER;
        uint64_t num;
        int is_tag = tok_tag(tk[i], &tag);
        if (tok_eq(tk[i], "refused")) {
          if (e.flags & HBM_EV_REFUSED) rc = BAD(&p, "a second 'refused'");
          e.flags |= HBM_EV_REFUSED;
        } else if (tk[i].n > 1 && tk[i].s[0] == '@') {
          if (e.addr != HBM_NO_ADDR) rc = BAD(&p, "a second @ADDR '%.*s': one recorded address per allocation", (int)tk[i].n, tk[i].s);
          else if ((rc = parse_addr_tok(&p, (tok){tk[i].s + 1, tk[i].n - 1}, "recorded address", &e.addr)) == HBM_OK &&
                   e.addr == HBM_NO_ADDR) /* the last byte: no block fits there, and the value means "none" */
            rc = BAD(&p, "recorded address 0x%llx: %llu bytes from there wrap past the top of the address space",
                     (unsigned long long)e.addr, (unsigned long long)e.size);
        } else if (!have_tag && is_tag) {
          e.tag = (uint8_t)tag;
          have_tag = 1;
        } else if (!have_stream && tok_stream(tk[i], &e.stream)) {
          have_stream = 1;
        } else if (is_tag) {
          rc = BAD(&p, "a second tag '%.*s': one tag per allocation", (int)tk[i].n, tk[i].s);
        } else if (tok_u64(tk[i], &num)) {
          rc = bad_stream(&p, tk[i], have_stream, "allocation");
        } else {
          rc = BAD(&p, "unexpected field '%.*s': expected a tag (param grad optim act comm temp other), a stream number, @ADDR or 'refused'", (int)tk[i].n, tk[i].s);
        }
      }
      if (rc != HBM_OK) break;
      e.kind = HBM_EV_ALLOC;
      e.id = id;
      ids.live[id] = 1;
      ids.last_line[id] = e.line;
    } else if (tok_eq(tk[0], "f")) {
      if (n != 2) { rc = BAD(&p, "expected 'f ID'"); break; }
      uint32_t id = ids_lookup(&ids, tk[1].s, tk[1].n, 0);
      if (id == HBM_NO_ID) { rc = HBM_EHOSTMEM; break; }
      if (id == HBM_NO_ID - 1) { rc = BAD(&p, "free of unknown id '%.*s' (never allocated)", (int)tk[1].n, tk[1].s); break; }
      if (!ids.live[id]) { rc = BAD(&p, "double free of id '%.*s' (already freed at line %u)", (int)tk[1].n, tk[1].s, ids.last_line[id]); break; }
      e.kind = HBM_EV_FREE;
      e.id = id;
      ids.live[id] = 0;
      ids.last_line[id] = e.line;
    } else if (tok_eq(tk[0], "s")) {
      if (n > 2) { rc = BAD(&p, "expected 's [STEP]'"); break; }
      uint64_t s = step + 1;
      if (n == 2 && !tok_u64(tk[1], &s)) { rc = BAD(&p, "expected a step number, got '%.*s'", (int)tk[1].n, tk[1].s); break; }
      if (n == 1 && step_line && s == 0) { /* the next after 2^64 - 1 would wrap to 0 */
        rc = BAD(&p, "'s' after step %llu (line %llu): no step number follows it", (unsigned long long)step,
                 (unsigned long long)step_line);
        break;
      }
      if (step_line && s <= step) {
        rc = BAD(&p, "step %llu after step %llu (line %llu): steps only go forward", (unsigned long long)s,
                 (unsigned long long)step, (unsigned long long)step_line);
        break;
      }
      step = s;
      step_line = p.line;
      e.kind = HBM_EV_STEP;
      e.size = s;
    } else if (tok_eq(tk[0], "capacity")) {
      if (n != 2) { rc = BAD(&p, "expected 'capacity SIZE'"); break; }
      if (capacity_line) { rc = BAD(&p, "a second 'capacity' (the first at line %llu)", (unsigned long long)capacity_line); break; }
      capacity_line = p.line;
      if ((rc = parse_size_tok(&p, tk[1], "capacity", &t->capacity)) != HBM_OK) break;
      /* The trace's device is sim at its default granule: refuse here, at the
       * line, a capacity no device of that granule can open. */
      if (t->capacity < HBM_TRACE_MIN_CAPACITY) {
        rc = BAD(&p, "capacity: %.*s is smaller than one 2 MiB granule, the least a device holds", (int)tk[1].n, tk[1].s);
        break;
      }
      continue;
    } else if (tok_eq(tk[0], "conf")) {
      if (n != 2) { rc = BAD(&p, "expected 'conf KEY:VALUE[,KEY:VALUE...]' (no spaces)"); break; }
      if (conf_line) { rc = BAD(&p, "a second 'conf' (the first at line %llu)", (unsigned long long)conf_line); break; }
      conf_line = p.line;
      char *conf = strndup(tk[1].s, tk[1].n);
      if (!conf) { rc = HBM_EHOSTMEM; break; }
      if ((rc = check_conf(conf, p.file, p.line, (uint64_t)(tk[1].s - text), diag)) != HBM_OK) { free(conf); break; }
      free(t->conf);
      t->conf = conf;
      continue;
    } else if (tok_eq(tk[0], "seg") || tok_eq(tk[0], "segfree")) {
      int is_free = tok_eq(tk[0], "segfree");
      if (n < 3 || (is_free && n != 3) || n > 5) { rc = BAD(&p, is_free ? "expected 'segfree ADDR SIZE'" : "expected 'seg ADDR SIZE [STREAM] [small|large]'"); break; }
      if ((rc = parse_addr_tok(&p, tk[1], "segment address", &e.addr)) != HBM_OK) break;
      if ((rc = parse_size_tok(&p, tk[2], "segment size", &e.size)) != HBM_OK) break;
      if (hbm_range_wraps(e.addr, e.size)) { rc = BAD(&p, "segment at %#llx: %llu bytes from there wrap past the top of the address space", (unsigned long long)e.addr, (unsigned long long)e.size); break; }
      /* as the snapshot importer: a device segment is carved in 512-byte
       * blocks, and the caching model places one where it was recorded */
      if (e.addr % 512 || e.size % 512) { rc = BAD(&p, "segment of %llu bytes at %#llx is not a multiple of 512 bytes on a 512-byte boundary", (unsigned long long)e.size, (unsigned long long)e.addr); break; }
      /* The optional fields read by what they are, in either order, as an
       * allocation's are: 'seg ADDR SIZE small' names the pool alone. */
      int have_pool = 0, have_stream = 0;
      for (int i = 3; i < n && rc == HBM_OK; i++) {
        uint64_t num;
        if (tok_eq(tk[i], "small") || tok_eq(tk[i], "large")) {
          if (have_pool) rc = BAD(&p, "a second pool '%.*s': one of small or large per segment", (int)tk[i].n, tk[i].s);
          e.tag = tok_eq(tk[i], "small");
          have_pool = 1;
        } else if (!have_stream && tok_stream(tk[i], &e.stream)) {
          have_stream = 1;
        } else if (tok_u64(tk[i], &num)) {
          rc = bad_stream(&p, tk[i], have_stream, "segment");
        } else {
          rc = BAD(&p, "unexpected field '%.*s': expected a stream number, 'small' or 'large'", (int)tk[i].n, tk[i].s);
        }
      }
      if (rc != HBM_OK) break;
      e.kind = is_free ? HBM_EV_SEG_FREE : HBM_EV_SEG_ALLOC;
    } else if (tok_eq(tk[0], "init-seg")) {
      hbm_init_segment s = {0};
      if (n < 5 || n > 6) { rc = BAD(&p, "expected 'init-seg ADDR SIZE STREAM small|large [expandable]'"); break; }
      if ((rc = parse_addr_tok(&p, tk[1], "segment address", &s.addr)) != HBM_OK) break;
      if ((rc = parse_size_tok(&p, tk[2], "segment size", &s.size)) != HBM_OK) break;
      if (!tok_stream(tk[3], &s.stream)) { rc = BAD(&p, "expected a stream number, got '%.*s'", (int)tk[3].n, tk[3].s); break; }
      if (tok_eq(tk[4], "small")) s.small = 1;
      else if (!tok_eq(tk[4], "large")) { rc = BAD(&p, "expected 'small' or 'large', got '%.*s'", (int)tk[4].n, tk[4].s); break; }
      if (n == 6) {
        if (!tok_eq(tk[5], "expandable")) { rc = BAD(&p, "expected 'expandable' or nothing, got '%.*s'", (int)tk[5].n, tk[5].s); break; }
        s.expandable = 1;
      }
      if (t->nevents) { rc = BAD(&p, "starting state (init-seg) must come before the first event"); break; }
      if (s.addr % 512) { rc = BAD(&p, "init-seg address %#llx is not a multiple of 512 bytes", (unsigned long long)s.addr); break; }
      /* its blocks are multiples of 512 bytes: no tiling of them covers it,
       * which is said here rather than at the next init-seg or event */
      if (s.size % 512) { rc = BAD(&p, "init-seg size %llu is not a multiple of 512 bytes", (unsigned long long)s.size); break; }
      if (hbm_range_wraps(s.addr, s.size)) { rc = BAD(&p, "init-seg at %#llx: %llu bytes from there wrap past the top of the address space", (unsigned long long)s.addr, (unsigned long long)s.size); break; }
      s.line = (uint32_t)(p.line > UINT32_MAX ? UINT32_MAX : p.line);
      if ((rc = last_segment_covered(&p, t)) != HBM_OK) break;
      if ((rc = hbm_trace_add_init_segment(t, &s)) != HBM_OK) break;
      continue;
    } else if (tok_eq(tk[0], "init-blk")) {
      hbm_init_block b = {.id = HBM_NO_ID, .line = (uint32_t)(p.line > UINT32_MAX ? UINT32_MAX : p.line)};
      if (n < 4 || n > 6) { rc = BAD(&p, "expected 'init-blk ADDR SIZE ID|- [REQUEST [TAG]]'"); break; }
      if (t->nevents) { rc = BAD(&p, "starting state (init-blk) must come before the first event"); break; }
      if (!t->ninit_segments) { rc = BAD(&p, "init-blk before any init-seg"); break; }
      if ((rc = parse_addr_tok(&p, tk[1], "block address", &b.addr)) != HBM_OK) break;
      if ((rc = parse_size_tok(&p, tk[2], "block size", &b.size)) != HBM_OK) break;
      if (b.size % 512) { rc = BAD(&p, "block size %llu is not a multiple of 512 bytes (the unit blocks are carved in)", (unsigned long long)b.size); break; }
      const hbm_init_segment *seg = &t->init_segments[t->ninit_segments - 1];
      uint64_t expect = seg->addr;
      if (seg->nblocks) {
        const hbm_init_block *last = &t->init_blocks[t->ninit_blocks - 1];
        expect = last->addr + last->size;
      }
      uint64_t seg_end = seg->addr + seg->size;
      if (b.addr != expect) { rc = BAD(&p, "init-blk at 0x%llx: expected the next block of its segment (0x%llx..0x%llx) at 0x%llx, where the one before ends; its blocks tile it in order", (unsigned long long)b.addr, (unsigned long long)seg->addr, (unsigned long long)seg_end, (unsigned long long)expect); break; }
      if (b.size > seg_end - b.addr) { rc = BAD(&p, "init-blk at 0x%llx of %llu bytes runs past its segment's end 0x%llx: expected at most %llu bytes", (unsigned long long)b.addr, (unsigned long long)b.size, (unsigned long long)seg_end, (unsigned long long)(seg_end - b.addr)); break; }
      if (!tok_eq(tk[3], "-")) {
        uint32_t id = ids_lookup(&ids, tk[3].s, tk[3].n, 1);
        if (id == HBM_NO_ID) { rc = HBM_EHOSTMEM; break; }
        if (ids.live[id]) { rc = BAD(&p, "id '%.*s' is already live (allocated at line %u and not freed)", (int)tk[3].n, tk[3].s, ids.last_line[id]); break; }
        b.id = id;
        b.request = b.size;
        ids.live[id] = 1;
        ids.last_line[id] = (uint32_t)p.line;
        if (n >= 5 && (rc = parse_size_tok(&p, tk[4], "request", &b.request)) != HBM_OK) break;
        if (b.request > b.size) { rc = BAD(&p, "init-blk at 0x%llx: request of %llu bytes is larger than its block of %llu: expected at most the block's size", (unsigned long long)b.addr, (unsigned long long)b.request, (unsigned long long)b.size); break; }
        hbm_tag tag;
        if (n == 6) {
          if (!tok_tag(tk[5], &tag)) { rc = BAD(&p, "expected a tag, got '%.*s'", (int)tk[5].n, tk[5].s); break; }
          b.tag = (uint8_t)tag;
        }
      } else if (n > 4) {
        rc = BAD(&p, "a free block ('-') takes no request or tag");
        break;
      }
      if ((rc = hbm_trace_add_init_block(t, &b)) != HBM_OK) break;
      continue;
    } else {
      rc = BAD(&p, "unknown directive '%.*s' (expected a, f, s, seg, segfree, init-seg, init-blk, capacity or conf)", (int)tk[0].n, tk[0].s);
      break;
    }
    if (!t->nevents && (rc = starting_state_done(&p, t)) != HBM_OK) break;
    if ((rc = hbm_trace_push(t, &e)) != HBM_OK) break;
  }
  if (rc == HBM_OK && !t->nevents) rc = starting_state_done(&p, t); /* at the end of the input */
  if (rc == HBM_OK && !saw_header) {
    p.line = 1;
    p.offset = 0;
    rc = BAD(&p, "empty input: expected the header 'hbm-trace 1'");
  }
  if (rc != HBM_OK) {
    ids_release(&ids, 0);
    hbm_trace_free(t);
    return rc;
  }
  if (t->nids < ids.n) t->nids = ids.n;
  t->id_names = ids.names;
  ids_release(&ids, 1);
  if ((rc = hbm_trace_check_recorded(t, p.file, diag)) != HBM_OK) {
    hbm_trace_free(t);
    return rc;
  }
  if (hbm_trace_peak_live_prepare(t) != HBM_OK) {
    hbm_diag_set(diag, name, 0, 0, "out of host memory measuring the trace's peak live bytes");
    hbm_trace_free(t);
    return HBM_EHOSTMEM;
  }
  *out = t;
  return HBM_OK;
}

int hbm_trace_load(const char *path, hbm_trace **out, hbm_diag *diag) {
  return hbm_trace_load_device(path, -1, out, diag);
}

int hbm_trace_load_device(const char *path, int device, hbm_trace **out, hbm_diag *diag) {
  if (!path || !out) return HBM_EINVAL;
  if (device < -1) {
    hbm_diag_set(diag, path, 0, 0, "device %d: expected a device index, or -1 for the first with trace entries", device);
    return HBM_EINVAL;
  }
  char *data;
  size_t len;
  int rc = hbm_read_file(path, &data, &len, diag);
  if (rc != HBM_OK) return rc;
  /* A pickle starts with PROTO (0x80) and a protocol number; text never does. */
  if (hbm_pickle_sniff((const uint8_t *)data, len)) {
    hbm_snapshot_options so = {.device = device < 0 ? -1 : device};
    hbm_trace *t = NULL; /* *out is set only on success, as the API promises */
    rc = hbm_snapshot_import((const uint8_t *)data, len, path, &so, &t, diag);
    if (rc == HBM_OK) rc = hbm_trace_peak_live_prepare(t);
    if (rc == HBM_OK) *out = t;
    else hbm_trace_free(t); /* NULL where the import failed */
  } else if (hbm_pickle_wrapped((const uint8_t *)data, len)) { /* no text trace starts so */
    hbm_diag_set(diag, path, 0, 0, "byte 0: %s", hbm_pickle_wrapped((const uint8_t *)data, len));
    rc = HBM_EPARSE;
  } else if (device >= 0) { /* a text trace is one device's already */
    hbm_diag_set(diag, path, 0, 0, "a text trace holds one device's events: a snapshot device (%d) applies "
                 "to PyTorch snapshots only", device);
    rc = HBM_EPARSE;
  } else {
    rc = hbm_trace_parse_text(data, len, path, out, diag);
  }
  free(data);
  if (rc == HBM_OK) hbm_trace_set_source(*out, path);
  if (rc == HBM_EHOSTMEM) { /* the readers' own out-of-memory returns say nothing */
    hbm_diag_set(diag, path, 0, 0, "out of host memory reading %llu bytes", (unsigned long long)len);
    return HBM_EHOSTMEM;
  }
  return rc;
}

/* ---- text writer --------------------------------------------------------------------- */
typedef struct sbuf { char *b; size_t n, cap; int failed; } sbuf;
/* Room for k more bytes and a NUL (what vsnprintf writes); 0 once out of memory. */
static int sb_room(sbuf *s, size_t k) {
  if (s->failed) return 0;
  if (k < s->cap - s->n) return 1;
  size_t cap = s->cap * 2 + k;
  char *b = realloc(s->b, cap);
  if (!b) {
    s->failed = 1;
    return 0;
  }
  s->b = b;
  s->cap = cap;
  return 1;
}

static void sb_printf(sbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *s, const char *fmt, ...) {
  while (!s->failed) {
    va_list ap;
    va_start(ap, fmt);
    int k = hbm_vsnprintf(s->b + s->n, s->cap - s->n, fmt, ap);
    va_end(ap);
    if (k < 0) { s->failed = 1; return; }
    if ((size_t)k < s->cap - s->n) { s->n += (size_t)k; return; }
    sb_room(s, (size_t)k);
  }
}

/* The allocation and free lines, nearly all of a trace, skip printf: its
 * per-call locale switch and parsing of the format were half of writing a
 * generated trace. They write what sb_printf's formats would, byte for byte
 * (test_trace compares them). */
static void sb_put(sbuf *s, const char *text, size_t k) {
  if (!sb_room(s, k)) return;
  memcpy(s->b + s->n, text, k);
  s->n += k;
}

/* "%llu", or "%#llx" where hex (0 is "0", as printf writes it). */
static void sb_u64(sbuf *s, uint64_t v, int hex) {
  char digits[24];
  size_t k = sizeof digits;
  do {
    digits[--k] = "0123456789abcdef"[hex ? v & 15 : v % 10];
    v = hex ? v >> 4 : v / 10;
  } while (v);
  if (hex && !(k == sizeof digits - 1 && digits[k] == '0')) {
    digits[--k] = 'x';
    digits[--k] = '0';
  }
  sb_put(s, digits + k, sizeof digits - k);
}

/* "%d" */
static void sb_i32(sbuf *s, int32_t v) {
  if (v < 0) sb_put(s, "-", 1);
  sb_u64(s, v < 0 ? (uint64_t)-(int64_t)v : (uint64_t)v, 0);
}

static void write_id(sbuf *s, const hbm_trace *t, uint32_t id) {
  if (t->id_names && id < t->nids && t->id_names[id]) {
    sb_put(s, t->id_names[id], strlen(t->id_names[id]));
  } else {
    sb_put(s, "b", 1);
    sb_u64(s, id, 0);
  }
}

void hbm_trace_set_source(hbm_trace *t, const char *path) {
  struct stat st;
  t->has_source = stat(path, &st) == 0;
  t->source_dev = t->has_source ? (uint64_t)st.st_dev : 0;
  t->source_ino = t->has_source ? (uint64_t)st.st_ino : 0;
}

/* Every failed save says why, naming the file: the CLI prints diag. */
static int save_out_of_memory(hbm_diag *diag, const char *path) {
  hbm_diag_set(diag, path, 0, 0, "out of host memory formatting the trace as text");
  return HBM_EHOSTMEM;
}

int hbm_trace_save(const hbm_trace *t, const char *path, hbm_diag *diag) {
  if (!t || !path) return HBM_EINVAL;
  struct stat so;
  if (t->has_source && stat(path, &so) == 0 && (uint64_t)so.st_dev == t->source_dev &&
      (uint64_t)so.st_ino == t->source_ino) {
    hbm_diag_set(diag, path, 0, 0, "refusing to overwrite the input file; choose another output path");
    return HBM_EINVAL;
  }
  sbuf s = {malloc(1 << 16), 0, 1 << 16, 0};
  if (!s.b) return save_out_of_memory(diag, path);
  /* The name is a comment: a control character in it (a newline in a path
   * or a caller's name) would end the line and make a file no reader takes. */
  sb_printf(&s, "hbm-trace 1\n# ");
  for (const char *c = t->name ? t->name : ""; *c; c++)
    sb_printf(&s, "%c", (unsigned char)*c < 0x20 || *c == 0x7f ? '?' : *c);
  sb_printf(&s, "\n");
  if (t->capacity) sb_printf(&s, "capacity %llu\n", (unsigned long long)t->capacity);
  if (t->conf && *t->conf) sb_printf(&s, "conf %s\n", t->conf);
  if (t->private_pool_segments) /* a note for the reader: the format carries no pools */
    sb_printf(&s, "# %u segment(s), %llu bytes, were in private pools (CUDA graphs, MemPool) when the snapshot "
              "was taken; replays place their blocks as the default pool's\n", t->private_pool_segments,
              (unsigned long long)t->private_pool_bytes);
  for (uint32_t i = 0; i < t->ninit_segments; i++) {
    const hbm_init_segment *g = &t->init_segments[i];
    sb_printf(&s, "init-seg %#llx %llu %d %s%s\n", (unsigned long long)g->addr, (unsigned long long)g->size,
              g->stream, g->small ? "small" : "large", g->expandable ? " expandable" : "");
    for (uint32_t k = 0; k < g->nblocks; k++) {
      const hbm_init_block *b = &t->init_blocks[g->first_block + k];
      sb_printf(&s, "init-blk %#llx %llu ", (unsigned long long)b->addr, (unsigned long long)b->size);
      if (b->id == HBM_NO_ID) {
        sb_printf(&s, "-\n");
      } else {
        write_id(&s, t, b->id);
        sb_printf(&s, " %llu %s\n", (unsigned long long)b->request, hbm_tag_name((hbm_tag)b->tag));
      }
    }
  }
  for (uint64_t i = 0; i < t->nevents && !s.failed; i++) {
    const hbm_event *e = &t->events[i];
    switch (e->kind) {
      case HBM_EV_ALLOC: {
        const char *tag = hbm_tag_name((hbm_tag)e->tag);
        sb_put(&s, "a ", 2);
        write_id(&s, t, e->id);
        sb_put(&s, " ", 1);
        sb_u64(&s, e->size, 0);
        sb_put(&s, " ", 1);
        sb_put(&s, tag, strlen(tag));
        sb_put(&s, " ", 1);
        sb_i32(&s, e->stream);
        if (e->addr != HBM_NO_ADDR) {
          sb_put(&s, " @", 2);
          sb_u64(&s, e->addr, 1);
        }
        if (e->flags & HBM_EV_REFUSED) sb_put(&s, " refused", 8);
        sb_put(&s, "\n", 1);
        break;
      }
      case HBM_EV_FREE:
        sb_put(&s, "f ", 2);
        write_id(&s, t, e->id);
        sb_put(&s, "\n", 1);
        break;
      case HBM_EV_STEP: sb_printf(&s, "s %llu\n", (unsigned long long)e->size); break;
      case HBM_EV_SEG_ALLOC:
        sb_printf(&s, "seg %#llx %llu %d %s\n", (unsigned long long)e->addr, (unsigned long long)e->size, e->stream, e->tag ? "small" : "large");
        break;
      case HBM_EV_SEG_FREE:
        sb_printf(&s, "segfree %#llx %llu\n", (unsigned long long)e->addr, (unsigned long long)e->size);
        break;
      default: break;
    }
  }
  int rc = s.failed ? save_out_of_memory(diag, path) : hbm_write_file_atomic(path, s.b, s.n, diag);
  free(s.b);
  return rc;
}
