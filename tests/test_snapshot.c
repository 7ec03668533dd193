/* test_snapshot.c: the snapshot importer on small snapshots written here, one
 * rule at a time: the starting state (blocks alive before recording, their
 * unsplit slack, evidence from later allocations, small pool, blocks alive
 * throughout, segments made or released in the trace, expandable ranges),
 * ids, streams, steps, settings, pending frees, devices, private pools; and
 * the errors: missing keys, double frees, frees of unknown blocks, overlaps,
 * a free of another size than its alloc's, an allocation past its segment's
 * end or in no segment, a release of a live block. */
#include <unistd.h>

#include "hbm.h"
#include "replay/fidelity.h"
#include "trace/snapshot.h"
#include "trace/trace.h"
#include "testutil.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

/* ---- a tiny pickle writer (protocol 2: the opcodes Python writes for plain data) ---- */
typedef struct pk {
  uint8_t b[1 << 16];
  size_t n;
} pk;

static void put(pk *p, const void *d, size_t n) {
  if (p->n + n > sizeof p->b) {
    fprintf(stderr, "pickle buffer full\n");
    exit(1);
  }
  memcpy(p->b + p->n, d, n);
  p->n += n;
}
static void op(pk *p, uint8_t c) { put(p, &c, 1); }
static void pk_int(pk *p, int64_t v) {
  if (v >= 0 && v < 256) {
    op(p, 'K');
    op(p, (uint8_t)v);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    op(p, 'J');
    for (int i = 0; i < 4; i++) op(p, (uint8_t)((uint64_t)v >> (8 * i)));
  } else { /* LONG1: little-endian two's complement, as short as the sign allows */
    uint8_t bytes[9];
    int n = 0;
    uint64_t u = (uint64_t)v;
    do {
      bytes[n++] = (uint8_t)u;
      u >>= 8;
    } while (n < 8 && (u || (bytes[n - 1] & 0x80)));
    op(p, 0x8a);
    op(p, (uint8_t)n);
    put(p, bytes, (size_t)n);
  }
}
static void pk_str(pk *p, const char *s) {
  uint32_t n = (uint32_t)strlen(s);
  op(p, 'X');
  for (int i = 0; i < 4; i++) op(p, (uint8_t)(n >> (8 * i)));
  put(p, s, n);
}
static void dict_begin(pk *p) { op(p, '}'); op(p, '('); }
static void dict_end(pk *p) { op(p, 'u'); }
static void list_begin(pk *p) { op(p, ']'); op(p, '('); }
static void list_end(pk *p) { op(p, 'e'); }
static void kv_int(pk *p, const char *k, int64_t v) { pk_str(p, k); pk_int(p, v); }
static void kv_str(pk *p, const char *k, const char *v) { pk_str(p, k); pk_str(p, v); }

/* ---- snapshot builder ---- */
typedef struct snap {
  pk p;
  int in_segments, in_trace;
} snap;

static void snap_begin(snap *s) {
  memset(s, 0, sizeof *s);
  op(&s->p, 0x80);
  op(&s->p, 2);
  dict_begin(&s->p);
  pk_str(&s->p, "segments");
  list_begin(&s->p);
}
/* A segment's keys up to its blocks, which seg_begin opens. */
static void seg_head(snap *s, uint64_t addr, uint64_t size, int64_t stream, int small, int expandable) {
  pk *p = &s->p;
  dict_begin(p);
  kv_int(p, "device", 0);
  kv_int(p, "address", (int64_t)addr);
  kv_int(p, "total_size", (int64_t)size);
  kv_int(p, "stream", stream);
  kv_str(p, "segment_type", small ? "small" : "large");
  pk_str(p, "is_expandable");
  op(p, expandable ? 0x88 : 0x89);
}
static void seg_begin(snap *s, uint64_t addr, uint64_t size, int64_t stream, int small, int expandable) {
  seg_head(s, addr, size, stream, small, expandable);
  pk_str(&s->p, "blocks");
  list_begin(&s->p);
}
static void blk(snap *s, uint64_t addr, uint64_t size, uint64_t requested, const char *state) {
  pk *p = &s->p;
  dict_begin(p);
  kv_int(p, "address", (int64_t)addr);
  kv_int(p, "size", (int64_t)size);
  kv_int(p, "requested_size", (int64_t)requested);
  kv_str(p, "state", state);
  dict_end(p);
}
static void seg_end(snap *s) {
  list_end(&s->p);
  dict_end(&s->p);
}
/* A small segment of the start, all free: room for the allocations a test
 * makes at addr (every allocation lies in a segment). */
static void free_segment(snap *s, uint64_t addr) {
  seg_begin(s, addr, 2 * MiB, 0, 1, 0);
  blk(s, addr, 2 * MiB, 0, "inactive");
  seg_end(s);
}
static void trace_begin(snap *s) {
  list_end(&s->p); /* segments */
  pk_str(&s->p, "device_traces");
  list_begin(&s->p);
  list_begin(&s->p);
}
static void ev(snap *s, const char *action, uint64_t addr, uint64_t size, int64_t stream, int64_t time_us) {
  pk *p = &s->p;
  dict_begin(p);
  kv_str(p, "action", action);
  kv_int(p, "addr", (int64_t)addr);
  kv_int(p, "size", (int64_t)size);
  kv_int(p, "stream", stream);
  if (time_us >= 0) kv_int(p, "time_us", time_us);
  dict_end(p);
}
static void trace_end(snap *s) {
  list_end(&s->p);
  list_end(&s->p);
}
static void snap_end(snap *s) {
  dict_end(&s->p);
  op(&s->p, '.');
}

static int import(snap *s, hbm_trace **t, hbm_diag *d) {
  memset(d, 0, sizeof *d);
  return hbm_snapshot_import(s->p.b, s->p.n, "test.pickle", NULL, t, d);
}

static const hbm_init_block *blocks_of(const hbm_trace *t, uint32_t seg) {
  return &t->init_blocks[t->init_segments[seg].first_block];
}

#define A0 0x7f0000000000ull

/* Slack: a gap after a block that no free block could fill (<= 1 MiB in the
 * large pool) belongs to the block; a larger gap is a free block. */
static void test_slack(void) {
  snap s;
  snap_begin(&s);
  seg_begin(&s, A0, 20 * MiB, 0, 0, 0);
  blk(&s, A0, 20 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "free_requested", A0, 4 * MiB - 1000, 0, -1);
  ev(&s, "free_completed", A0, 4 * MiB - 1000, 0, -1);
  ev(&s, "free_completed", A0 + 4 * MiB + 512 * KiB, 6 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->ninit_segments, 1);
  CHECK_EQ_U64(t->init_segments[0].nblocks, 3);
  const hbm_init_block *b = blocks_of(t, 0);
  CHECK_EQ_U64(b[0].size, 4 * MiB + 512 * KiB); /* 4 MiB - 512 rounded, + 512 KiB + 512 slack */
  CHECK_EQ_U64(b[0].request, 4 * MiB - 1000);
  CHECK(b[0].id != HBM_NO_ID);
  CHECK_EQ_U64(b[1].addr, A0 + 4 * MiB + 512 * KiB);
  CHECK_EQ_U64(b[1].size, 6 * MiB); /* 9.5 MiB follow: a free block, no evidence of slack */
  CHECK_EQ_U64(b[2].id, HBM_NO_ID);
  CHECK_EQ_U64(b[2].size, 9 * MiB + 512 * KiB);
  CHECK(hbm_trace_validate(t, &d) == HBM_OK);
  CHECK_EQ_U64(t->capacity, 0); /* no oom entry: the snapshot names no capacity */
  /* The two frees name the starting blocks' ids; no free_requested event. */
  CHECK_EQ_U64(t->nevents, 2);
  CHECK(t->events[0].kind == HBM_EV_FREE && t->events[0].id == b[0].id);
  CHECK_EQ_U64(t->events[0].line, 2); /* entry index + 1 */
  hbm_trace_free(t);
}

/* Evidence: an allocation made while the block lived shows where the free
 * block after it began (best fit takes the low end of a free block). */
static void test_evidence(void) {
  snap s;
  snap_begin(&s);
  seg_begin(&s, A0, 20 * MiB, 0, 0, 0);
  blk(&s, A0, 20 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  uint64_t L = A0 + 4 * MiB, slack = 768 * KiB;
  ev(&s, "alloc", L + 6 * MiB + slack, 2 * MiB, 0, -1);
  ev(&s, "free_completed", L + 6 * MiB + slack, 2 * MiB, 0, -1);
  ev(&s, "free_completed", L, 6 * MiB, 0, -1);
  ev(&s, "free_completed", A0, 4 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  const hbm_init_block *b = blocks_of(t, 0);
  CHECK_EQ_U64(t->init_segments[0].nblocks, 3);
  CHECK(b[0].id != HBM_NO_ID); /* [A0, L): alive too, so F is the only free block */
  CHECK_EQ_U64(b[0].size, 4 * MiB);
  CHECK_EQ_U64(b[1].addr, L);
  CHECK_EQ_U64(b[1].size, 6 * MiB + slack);
  CHECK_EQ_U64(b[2].addr, L + 6 * MiB + slack);
  /* ... and with it the model places the allocation where PyTorch did. */
  hbm_fidelity_result r;
  CHECK(hbm_fidelity(t, NULL, &r, &d) == HBM_OK);
  CHECK_EQ_U64(r.allocs, 1);
  CHECK_EQ_U64(r.address_matches, 1);
  hbm_trace_free(t);
}

/* Small pool: every remainder of 512 bytes or more is split, so no slack. */
static void test_small_pool(void) {
  const uint64_t S = 0x7f0000200000ull;
  snap s;
  snap_begin(&s);
  seg_begin(&s, S, 2 * MiB, 0, 1, 0);
  blk(&s, S, 1536, 0, "inactive");
  blk(&s, S + 1536, 4096, 4000, "active_allocated"); /* alive throughout */
  blk(&s, S + 5632, 2 * MiB - 5632, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "free_completed", S, 1000, 0, -1);
  trace_end(&s);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK(t->init_segments[0].small == 1);
  const hbm_init_block *b = blocks_of(t, 0);
  CHECK_EQ_U64(t->init_segments[0].nblocks, 4);
  CHECK_EQ_U64(b[0].size, 1024);
  CHECK_EQ_U64(b[1].id, HBM_NO_ID);
  CHECK_EQ_U64(b[1].size, 512);
  CHECK_EQ_U64(b[2].size, 4096); /* alive throughout: its final size */
  CHECK_EQ_U64(b[2].request, 4000);
  hbm_trace_free(t);
}

/* Segments: one made in the trace is not in the starting state; one released
 * in the trace is; ids are reused after a free; streams keep their order. */
static void test_segments_streams_ids(void) {
  const uint64_t B = 0x7f0010000000ull, C = 0x7f0020000000ull;
  const int64_t side = 94833748361216; /* a cudaStream_t value */
  snap s;
  snap_begin(&s);
  free_segment(&s, A0);
  seg_begin(&s, B, 20 * MiB, side, 0, 0);
  blk(&s, B, 1536 * KiB, 1536 * KiB, "active_allocated");
  blk(&s, B + 1536 * KiB, 20 * MiB - 1536 * KiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "segment_free", C, 2 * MiB, 0, -1);
  ev(&s, "alloc", A0, 512, 0, -1);
  ev(&s, "free_requested", A0, 512, 0, -1);
  ev(&s, "free_completed", A0, 512, 0, -1);
  ev(&s, "segment_alloc", B, 20 * MiB, side, -1);
  ev(&s, "alloc", B, 1536 * KiB, side, -1);
  ev(&s, "snapshot", 0, 0, 0, -1);
  trace_end(&s);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->ninit_segments, 2); /* A0's, in the final state and untouched, and C's */
  CHECK_EQ_U64(t->init_segments[0].addr, A0);
  CHECK_EQ_U64(t->init_segments[1].addr, C);
  CHECK(t->init_segments[1].small == 1);
  CHECK_EQ_U64(t->nevents, 5);
  CHECK(t->events[0].kind == HBM_EV_SEG_FREE);
  CHECK(t->events[1].kind == HBM_EV_ALLOC && t->events[1].addr == A0 && t->events[1].stream == 0);
  CHECK(t->events[2].kind == HBM_EV_FREE && t->events[2].id == t->events[1].id);
  CHECK(t->events[3].kind == HBM_EV_SEG_ALLOC && t->events[3].stream == 1 && t->events[3].tag == 0);
  CHECK(t->events[4].kind == HBM_EV_ALLOC && t->events[4].stream == 1);
  CHECK_EQ_U64(t->events[4].id, t->events[1].id); /* reused after its free */
  CHECK(hbm_trace_validate(t, &d) == HBM_OK);
  hbm_trace_free(t);
}

/* A free_requested without its free_completed (another stream still used the
 * block when the snapshot was taken) keeps the block alive. */
static void test_pending_free(void) {
  snap s;
  snap_begin(&s);
  seg_begin(&s, A0, 20 * MiB, 0, 0, 0);
  blk(&s, A0, 2 * MiB, 2 * MiB, "active_pending_free");
  blk(&s, A0 + 2 * MiB, 18 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "segment_alloc", A0, 20 * MiB, 0, -1);
  ev(&s, "alloc", A0, 2 * MiB, 0, -1);
  ev(&s, "free_requested", A0, 2 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->ninit_segments, 0);
  CHECK_EQ_U64(t->nevents, 2); /* seg + alloc; no free */
  hbm_trace_free(t);
}

/* Steps after each Optimizer.step END; settings as PYTORCH_CUDA_ALLOC_CONF. */
static void test_steps_and_settings(void) {
  snap s;
  snap_begin(&s);
  trace_begin(&s);
  ev(&s, "segment_alloc", A0, 2 * MiB, 0, 100);
  ev(&s, "alloc", A0, 512, 0, 100);
  ev(&s, "free_completed", A0, 512, 0, 200);
  ev(&s, "alloc", A0, 512, 0, 300);
  trace_end(&s);
  pk *p = &s.p;
  pk_str(p, "allocator_settings");
  dict_begin(p);
  kv_str(p, "PYTORCH_CUDA_ALLOC_CONF", "");
  kv_int(p, "max_split_size", 128 * MiB);
  pk_str(p, "garbage_collection_threshold");
  op(p, 'G'); /* BINFLOAT 0.5, big-endian */
  const uint8_t half[8] = {0x3f, 0xe0, 0, 0, 0, 0, 0, 0};
  put(p, half, 8);
  pk_str(p, "expandable_segments");
  op(p, 0x88);
  pk_str(p, "roundup_power2_divisions");
  dict_begin(p);
  for (int i = 0; i < 16; i++) {
    char key[16];
    snprintf(key, sizeof key, "%d", 1 << i);
    kv_int(p, key, i == 6 ? 8 : 0);
  }
  dict_end(p);
  dict_end(p);
  pk_str(p, "external_annotations");
  list_begin(p);
  dict_begin(p);
  kv_str(p, "stage", "END");
  kv_str(p, "name", "Optimizer.step#AdamW.step");
  kv_int(p, "device", 0);
  kv_int(p, "time_us", 250);
  dict_end(p);
  list_end(p);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->nevents, 5);
  CHECK(t->events[3].kind == HBM_EV_STEP && t->events[3].size == 1); /* between 200 and 300 */
  CHECK(t->conf != NULL);
  if (t->conf) {
    CHECK(strstr(t->conf, "expandable_segments:True") != NULL);
    CHECK(strstr(t->conf, "max_split_size_mb:128") != NULL);
    CHECK(strstr(t->conf, "garbage_collection_threshold:0.5") != NULL);
    CHECK(strstr(t->conf, "64:8") != NULL);
    CHECK(strstr(t->conf, ",2:0,") != NULL);
  }
  hbm_trace_free(t);
}

/* The settings PyTorch records no field for come from the text it was given;
 * the fields win over the text, and a text PyTorch would refuse adds nothing. */
static void test_settings_from_text(void) {
  static const struct {
    const char *text, *want, *not_want;
    int64_t rounding_field; /* -1: not recorded */
  } cases[] = {
      {"max_split_size_mb:100,max_non_split_rounding_mb:300,per_process_memory_fraction:0.5",
       "max_split_size_mb:128,max_non_split_rounding_mb:300,per_process_memory_fraction:0.5", NULL, -1},
      {"max_non_split_rounding_mb:20,per_process_memory_fraction:1.0", "max_split_size_mb:128", "non_split", -1},
      {"max_non_split_rounding_mb:300,bogus:1", "max_split_size_mb:128", "non_split", -1},
      /* a field recorded, at its default: it wins over the text */
      {"max_non_split_rounding_mb:300", "max_split_size_mb:128", "non_split", 20 * MiB},
      {"max_non_split_rounding_mb:300", "max_split_size_mb:128,max_non_split_rounding_mb:40", NULL, 40 * MiB},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    snap s;
    snap_begin(&s);
    trace_begin(&s);
    ev(&s, "segment_alloc", A0, 2 * MiB, 0, 100);
    ev(&s, "alloc", A0, 512, 0, 100);
    trace_end(&s);
    pk *p = &s.p;
    pk_str(p, "allocator_settings");
    dict_begin(p);
    kv_str(p, "PYTORCH_CUDA_ALLOC_CONF", cases[k].text);
    kv_int(p, "max_split_size", 128 * MiB); /* the field: what the allocator used */
    if (cases[k].rounding_field >= 0) kv_int(p, "max_non_split_rounding_size", cases[k].rounding_field);
    dict_end(p);
    snap_end(&s);
    hbm_trace *t;
    hbm_diag d;
    REQUIRE(import(&s, &t, &d) == HBM_OK);
    CHECK(t->conf != NULL);
    if (t->conf && (strcmp(t->conf, cases[k].want) || (cases[k].not_want && strstr(t->conf, cases[k].not_want)))) {
      fprintf(stderr, "settings from '%s': conf '%s', expected '%s'\n", cases[k].text, t->conf, cases[k].want);
      CHECK(0);
    }
    hbm_trace_free(t);
  }
}

/* Expandable: the mapped ranges at the start are the final ones less what
 * the trace mapped, plus what it unmapped. */
static void test_expandable_ranges(void) {
  const uint64_t E = 0x7f4000000000ull;
  snap s;
  snap_begin(&s);
  seg_begin(&s, E, 40 * MiB, 0, 0, 1);
  blk(&s, E, 10 * MiB, 10 * MiB, "active_allocated");        /* alive throughout */
  blk(&s, E + 10 * MiB, 20 * MiB, 20 * MiB, "active_allocated"); /* allocated in the trace */
  blk(&s, E + 30 * MiB, 10 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "segment_unmap", E + 60 * MiB, 20 * MiB, 0, -1);
  ev(&s, "segment_map", E + 20 * MiB, 20 * MiB, 0, -1);
  ev(&s, "alloc", E + 10 * MiB, 20 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->ninit_segments, 2);
  CHECK_EQ_U64(t->init_segments[0].addr, E);
  CHECK_EQ_U64(t->init_segments[0].size, 20 * MiB);
  CHECK(t->init_segments[0].expandable && !t->init_segments[0].small);
  CHECK_EQ_U64(t->init_segments[0].nblocks, 2);
  CHECK_EQ_U64(blocks_of(t, 0)[0].size, 10 * MiB);
  CHECK(blocks_of(t, 0)[0].id != HBM_NO_ID);
  CHECK_EQ_U64(blocks_of(t, 0)[1].id, HBM_NO_ID);
  CHECK_EQ_U64(t->init_segments[1].addr, E + 60 * MiB);
  CHECK_EQ_U64(t->init_segments[1].size, 20 * MiB);
  CHECK(t->events[0].kind == HBM_EV_SEG_FREE && t->events[1].kind == HBM_EV_SEG_ALLOC);
  CHECK(t->events[1].tag == 0); /* 20 MiB mapped: the large pool's pages */
  hbm_trace_free(t);
}

/* Which pool a segment made in the trace belongs to, where the final state
 * does not say: a 2 MiB segment is the small pool's, and under expandable
 * segments a mapping that is not whole 20 MiB pages. */
static void test_segment_event_pools(void) {
  const uint64_t E = 0x7f4000000000ull;
  snap s;
  snap_begin(&s);
  trace_begin(&s);
  ev(&s, "segment_alloc", A0, 2 * MiB, 0, -1);
  ev(&s, "segment_free", A0, 2 * MiB, 0, -1);
  ev(&s, "segment_alloc", A0, 20 * MiB, 0, -1);
  ev(&s, "segment_map", E, 2 * MiB, 0, -1);
  ev(&s, "segment_map", E + 20 * MiB, 20 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->nevents, 5);
  if (t->nevents == 5) {
    CHECK(t->events[0].kind == HBM_EV_SEG_ALLOC && t->events[0].tag == 1);
    CHECK(t->events[2].kind == HBM_EV_SEG_ALLOC && t->events[2].tag == 0);
    CHECK(t->events[3].kind == HBM_EV_SEG_ALLOC && t->events[3].tag == 1);
    CHECK(t->events[4].kind == HBM_EV_SEG_ALLOC && t->events[4].tag == 0);
  }
  hbm_trace_free(t);
}

/* An oversize block (at least max_split_size) is never split: what follows it
 * up to max_non_split_rounding - 512 bytes is its own, at both edges. */
static void test_oversize_slack(void) {
  snap s;
  snap_begin(&s);
  const uint64_t B = A0 + 64 * MiB, C = A0 + 128 * MiB;
  seg_begin(&s, A0, 36 * MiB, 0, 0, 0);
  blk(&s, A0, 36 * MiB, 0, "inactive");
  seg_end(&s);
  seg_begin(&s, B, 52 * MiB - 512, 0, 0, 0);
  blk(&s, B, 52 * MiB - 512, 0, "inactive");
  seg_end(&s);
  seg_begin(&s, C, 52 * MiB, 0, 0, 0);
  blk(&s, C, 52 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "free_completed", A0, 32 * MiB, 0, -1); /* exactly max_split_size: oversize */
  ev(&s, "free_completed", B, 32 * MiB, 0, -1);
  ev(&s, "free_completed", C, 32 * MiB, 0, -1);
  trace_end(&s);
  pk *p = &s.p;
  pk_str(p, "allocator_settings");
  dict_begin(p);
  kv_int(p, "max_split_size", 32 * MiB);
  dict_end(p);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK(t->conf && !strcmp(t->conf, "max_split_size_mb:32"));
  CHECK_EQ_U64(t->ninit_segments, 3);
  if (t->ninit_segments == 3) {
    CHECK_EQ_U64(blocks_of(t, 0)[0].size, 36 * MiB);       /* 4 MiB after it: slack */
    CHECK_EQ_U64(blocks_of(t, 1)[0].size, 52 * MiB - 512); /* 20 MiB - 512: still slack */
    CHECK_EQ_U64(blocks_of(t, 2)[0].size, 32 * MiB);       /* 20 MiB: a free block */
    CHECK_EQ_U64(t->init_segments[2].nblocks, 2);
  }
  hbm_trace_free(t);
}

/* Settings whose text needs care: a threshold of more than one digit, and
 * roundup_power2_divisions as a single int (1 rounds nothing, as unset). */
static void test_settings_digits(void) {
  static const struct {
    double threshold;
    int64_t divisions, max_split; /* 0: not recorded */
    const char *want;
  } cases[] = {
      {0.85, 1, 0, "garbage_collection_threshold:0.85"},
      {0.85, 4, 0, "garbage_collection_threshold:0.85,roundup_power2_divisions:4"},
      /* nine digits; a max_split_size of 20 MiB, the least PyTorch takes, is written (one
       * below it is refused: test_max_split_too_small) */
      {0.123456789, 0, 20 * MiB, "max_split_size_mb:20,garbage_collection_threshold:0.123456789"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    snap s;
    snap_begin(&s);
    trace_begin(&s);
    trace_end(&s);
    pk *p = &s.p;
    pk_str(p, "allocator_settings");
    dict_begin(p);
    pk_str(p, "garbage_collection_threshold");
    op(p, 'G'); /* BINFLOAT, big-endian */
    uint64_t bits;
    memcpy(&bits, &cases[k].threshold, sizeof bits);
    for (int i = 7; i >= 0; i--) op(p, (uint8_t)(bits >> (8 * i)));
    if (cases[k].divisions) kv_int(p, "roundup_power2_divisions", cases[k].divisions);
    if (cases[k].max_split) kv_int(p, "max_split_size", cases[k].max_split);
    dict_end(p);
    snap_end(&s);
    hbm_trace *t;
    hbm_diag d;
    REQUIRE(import(&s, &t, &d) == HBM_OK);
    CHECK(t->conf != NULL);
    if (t->conf && strcmp(t->conf, cases[k].want)) {
      fprintf(stderr, "settings: conf '%s', expected '%s'\n", t->conf, cases[k].want);
      CHECK(0);
    }
    hbm_trace_free(t);
  }
}

static void expect_error(snap *s, const char *needle) {
  hbm_trace *t = NULL;
  hbm_diag d;
  int rc = import(s, &t, &d);
  CHECK(rc == HBM_EPARSE);
  CHECK(t == NULL);
  if (!strstr(d.message, needle)) fprintf(stderr, "message '%s' lacks '%s'\n", d.message, needle);
  CHECK(strstr(d.message, needle) != NULL);
  CHECK(!strcmp(d.file, "test.pickle"));
  if (rc == HBM_OK) hbm_trace_free(t);
}

/* segment_pool_id: (0, 0) is the default pool; any other pair, as a tuple
 * or a list, a private one, counted with its bytes and noted in a saved
 * trace; anything else is an error naming the segment. */
static void seg_begin_pool(snap *s, uint64_t addr, uint64_t size, int64_t a, int64_t b, int as_list) {
  pk *p = &s->p;
  seg_head(s, addr, size, 0, 0, 0);
  pk_str(p, "segment_pool_id");
  if (as_list) list_begin(p);
  pk_int(p, a);
  pk_int(p, b);
  if (as_list) list_end(p);
  else op(p, 0x86); /* TUPLE2, as Python writes a pair */
  pk_str(p, "blocks");
  list_begin(p);
}

static void test_private_pools(void) {
  snap s;
  snap_begin(&s);
  const int64_t pools[3][3] = {{0, 0, 0}, {1, 3, 0}, {0, 7, 1}}; /* a, b, as a list */
  for (int k = 0; k < 3; k++) {
    seg_begin_pool(&s, A0 + (uint64_t)k * 20 * MiB, (uint64_t)(k + 1) * 2 * MiB, pools[k][0], pools[k][1], (int)pools[k][2]);
    blk(&s, A0 + (uint64_t)k * 20 * MiB, (uint64_t)(k + 1) * 2 * MiB, 0, "inactive");
    seg_end(&s);
  }
  trace_begin(&s);
  trace_end(&s);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  uint64_t bytes = 0;
  CHECK_EQ_U64(hbm_trace_private_pools(t, &bytes), 2);
  CHECK_EQ_U64(bytes, 10 * MiB);
  char path[] = "/tmp/hbm_test_pools_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  CHECK(hbm_trace_save(t, path, &d) == HBM_OK);
  hbm_trace_free(t);
  CHECK(hbm_trace_load(path, &t, &d) == HBM_OK);
  CHECK_EQ_U64(hbm_trace_private_pools(t, NULL), 0); /* text traces carry no pools */
  hbm_trace_free(t);
  FILE *f = fopen(path, "r");
  char text[4096] = "";
  CHECK(f && fread(text, 1, sizeof text - 1, f) > 0);
  if (f) fclose(f);
  unlink(path);
  CHECK(strstr(text, "# 2 segment(s), 10485760 bytes, were in private pools") != NULL);

  snap_begin(&s);
  seg_begin(&s, A0, 2 * MiB, 0, 0, 0);
  blk(&s, A0, 2 * MiB, 0, "inactive");
  seg_end(&s);
  seg_head(&s, A0 + 20 * MiB, 2 * MiB, 0, 0, 0);
  kv_str(&s.p, "segment_pool_id", "graph");
  pk_str(&s.p, "blocks");
  list_begin(&s.p);
  blk(&s, A0 + 20 * MiB, 2 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "segments[1]: 'segment_pool_id' is not a pair of ints (a str)");
  printf("test_snapshot: private pools counted (2 segments, 10 MiB), noted in a saved trace, a malformed id refused\n");
}

static void test_errors(void) {
  snap s;
  /* a double free */
  snap_begin(&s);
  seg_begin(&s, A0, 2 * MiB, 0, 1, 0);
  blk(&s, A0, 2 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "alloc", A0, 512, 0, -1);
  ev(&s, "free_completed", A0, 512, 0, -1);
  ev(&s, "free_completed", A0, 512, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "device_traces[0][2] (free_completed): free of 0x7f0000000000, which no allocation holds");

  /* a free of a block no segment holds */
  snap_begin(&s);
  trace_begin(&s);
  ev(&s, "free_completed", 0x5000, 512, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "no segment at the start holds");

  /* a block alive at the start that overlaps the next */
  snap_begin(&s);
  seg_begin(&s, A0, 20 * MiB, 0, 0, 0);
  blk(&s, A0, 20 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "free_completed", A0, 8 * MiB, 0, -1);
  ev(&s, "free_completed", A0 + 4 * MiB, 4 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "overlaps the next live block");

  /* alloc of an address already allocated */
  snap_begin(&s);
  trace_begin(&s);
  ev(&s, "alloc", A0, 512, 0, -1);
  ev(&s, "alloc", A0, 512, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "allocated again without a free");

  /* an allocation of no bytes, or of more than 1 PiB */
  snap_begin(&s);
  trace_begin(&s);
  ev(&s, "alloc", A0, 0, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "device_traces[0][0] (alloc): size 0 is not between 1 B and 1 PiB");
  snap_begin(&s);
  trace_begin(&s);
  ev(&s, "alloc", A0, (1ull << 50) + 512, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "size 1125899906843136 is not between");
  { /* 1 PiB itself is allowed */
    hbm_trace *t = NULL;
    hbm_diag d;
    snap_begin(&s);
    seg_begin(&s, A0, 1ull << 50, 0, 0, 0);
    blk(&s, A0, 1ull << 50, 0, "inactive");
    seg_end(&s);
    trace_begin(&s);
    ev(&s, "alloc", A0, 1ull << 50, 0, -1);
    trace_end(&s);
    snap_end(&s);
    REQUIRE(import(&s, &t, &d) == HBM_OK);
    hbm_trace_free(t);
  }

  /* a segment release of a size off the 512-byte grid */
  snap_begin(&s);
  trace_begin(&s);
  ev(&s, "segment_free", A0, 1000, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "device_traces[0][0] (segment_free): segment of 1000 bytes at 0x7f0000000000 is not a positive "
                   "multiple of 512");

  /* a block alive at the start whose address is off the 512-byte grid (its
   * size, a rounded request, is always on it) */
  snap_begin(&s);
  seg_begin(&s, A0, 2 * MiB, 0, 1, 0);
  blk(&s, A0, 2 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "free_completed", A0 + 256, 512, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "device_traces[0][0] (free_completed): the block at 0x7f0000000100 (512 bytes), alive at the "
                   "start, is not in 512-byte units");

  /* missing keys */
  snap_begin(&s);
  trace_begin(&s);
  pk *p = &s.p;
  dict_begin(p);
  kv_str(p, "action", "alloc");
  kv_int(p, "addr", (int64_t)A0);
  kv_int(p, "stream", 0);
  dict_end(p);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "device_traces[0][0] (alloc): missing 'size'");

  snap_begin(&s);
  p = &s.p;
  dict_begin(p);
  kv_int(p, "total_size", 2 * MiB);
  pk_str(p, "blocks");
  list_begin(p);
  list_end(p);
  dict_end(p);
  trace_begin(&s);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "segments[0]: missing 'address'");

  /* blocks that do not cover their segment */
  snap_begin(&s);
  seg_begin(&s, A0, 2 * MiB, 0, 1, 0);
  blk(&s, A0, MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "blocks cover");

  /* not a snapshot */
  memset(&s, 0, sizeof s);
  op(&s.p, 0x80);
  op(&s.p, 2);
  dict_begin(&s.p);
  kv_int(&s.p, "segments", 3);
  dict_end(&s.p);
  op(&s.p, '.');
  expect_error(&s, "'segments'");
  memset(&s, 0, sizeof s);
  op(&s.p, 0x80);
  op(&s.p, 2);
  dict_begin(&s.p);
  pk_str(&s.p, "segments");
  list_begin(&s.p);
  list_end(&s.p);
  kv_int(&s.p, "device_traces", 3);
  dict_end(&s.p);
  op(&s.p, '.');
  expect_error(&s, "expected a list in 'device_traces'");
}

/* PyTorch's record of a refused request: cudaMemGetInfo's free bytes, the request. */
static void oom_entry(snap *s, int64_t device_free, int64_t size, int64_t stream) {
  pk *p = &s->p;
  dict_begin(p);
  kv_str(p, "action", "oom");
  kv_int(p, "device_free", device_free);
  kv_int(p, "size", size);
  kv_int(p, "stream", stream);
  dict_end(p);
}

/* An oom entry gives the capacity: what was reserved then plus the device's free bytes. */
static void test_capacity_from_oom(void) {
  snap s;
  snap_begin(&s);
  seg_begin(&s, A0, 20 * MiB, 0, 0, 0);
  blk(&s, A0, 20 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "segment_alloc", A0 + 20 * MiB, 40 * MiB, 0, -1);
  ev(&s, "alloc", A0 + 20 * MiB, 40 * MiB, 0, -1);
  oom_entry(&s, 101 * MiB + 12345, 200 * MiB, 5); /* on another stream */
  oom_entry(&s, 10 * MiB, (1ll << 50) + 512, 0);  /* a request past 1 PiB: not asked again */
  trace_end(&s);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->capacity, 160 * MiB); /* 20 + 40 reserved + 101 free, in 2 MiB units */
  /* The refused request is asked again, and let go at once. */
  CHECK_EQ_U64(t->nevents, 4);
  if (t->nevents == 4) {
    const hbm_event *a = &t->events[2], *f = &t->events[3];
    CHECK(a->kind == HBM_EV_ALLOC && (a->flags & HBM_EV_REFUSED) && a->size == 200 * MiB && a->addr == HBM_NO_ADDR);
    CHECK(a->stream == 1 && f->stream == 1);
    CHECK(f->kind == HBM_EV_FREE && f->id == a->id);
    CHECK(!(t->events[1].flags & HBM_EV_REFUSED));
  }
  hbm_trace_free(t);
  /* a device with exactly 1 PiB free (the most a size may be) still counts */
  snap_begin(&s);
  trace_begin(&s);
  oom_entry(&s, 1ll << 50, 0, 0);
  trace_end(&s);
  snap_end(&s);
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->capacity, 1ull << 50);
  hbm_trace_free(t);
}

/* Where the device had room for the refused request, a limit below the
 * device refused it (a memory fraction): the capacity is the most PyTorch
 * held, not the device's memory; and the refused request fails again there. */
static void test_capacity_from_limited_oom(void) {
  snap s;
  snap_begin(&s);
  trace_begin(&s);
  ev(&s, "segment_alloc", A0, 40 * MiB, 0, -1);
  ev(&s, "alloc", A0, 40 * MiB, 0, -1);
  ev(&s, "segment_alloc", A0 + 64 * MiB, 30 * MiB, 0, -1);
  ev(&s, "alloc", A0 + 64 * MiB, 30 * MiB, 0, -1);
  ev(&s, "free_requested", A0 + 64 * MiB, 30 * MiB, 0, -1);
  ev(&s, "free_completed", A0 + 64 * MiB, 30 * MiB, 0, -1);
  ev(&s, "segment_free", A0 + 64 * MiB, 30 * MiB, 0, -1); /* released before the retry */
  oom_entry(&s, 70ll << 30, 50 * MiB, 0); /* the device had 70 GiB free */
  trace_end(&s);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->capacity, 70 * MiB); /* 40 + 30 at the most, not 40 + 70 GiB */
  CHECK_EQ_U64(hbm_trace_peak_live(t), 90 * MiB); /* the refused request counts: the job asked for it */
  hbm_replay_options o = {.policy = "caching"};
  hbm_replay_result r;
  CHECK(hbm_replay(t, &o, &r) == HBM_OK);
  CHECK(r.oom && r.failures == 1);
  CHECK_EQ_U64(r.first_oom.request, 50 * MiB);
  CHECK(r.first_oom.cause == HBM_CAUSE_CAPACITY);
  CHECK(r.first_oom.refused && r.refused_requests == 1 && r.refused_placed == 0);
  o.device = "sim:1GiB"; /* with room, the policy places what PyTorch refused */
  CHECK(hbm_replay(t, &o, &r) == HBM_OK);
  CHECK(!r.oom && r.refused_requests == 1 && r.refused_placed == 1);
  hbm_trace_free(t);
}

/* A free 2 MiB small segment of device 1 at A0, in the segments list. */
static void device1_segment(snap *s) {
  pk *p = &s->p;
  dict_begin(p);
  kv_int(p, "device", 1);
  kv_int(p, "address", (int64_t)A0);
  kv_int(p, "total_size", 2 * MiB);
  kv_int(p, "stream", 0);
  kv_str(p, "segment_type", "small");
  pk_str(p, "blocks");
  list_begin(p);
  blk(s, A0, 2 * MiB, 0, "inactive");
  list_end(p);
  dict_end(p);
}

/* Two devices: the first with entries by default, or the one asked for. */
static void test_devices(void) {
  snap s;
  snap_begin(&s);
  pk *p = &s.p;
  device1_segment(&s);
  list_end(p);
  pk_str(p, "device_traces");
  list_begin(p);
  list_begin(p); /* device 0: empty */
  list_end(p);
  list_begin(p); /* device 1 */
  ev(&s, "alloc", A0, 512, 0, -1);
  list_end(p);
  list_end(p);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->ninit_segments, 1);
  CHECK_EQ_U64(t->nevents, 1);
  hbm_trace_free(t);
  hbm_snapshot_options o = {.device = 0};
  CHECK(hbm_snapshot_import(s.p.b, s.p.n, "test.pickle", &o, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->ninit_segments, 0);
  CHECK_EQ_U64(t->nevents, 0);
  hbm_trace_free(t);
  { /* the same through the file reader: device 0 asked for is device 0 */
    char path[] = "/tmp/hbm-test-devices-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && write(fd, s.p.b, s.p.n) == (ssize_t)s.p.n);
    if (fd >= 0) close(fd);
    t = NULL;
    CHECK(hbm_trace_load_device(path, 0, &t, &d) == HBM_OK);
    if (t) CHECK(t->snapshot_device == 0 && t->nevents == 0);
    hbm_trace_free(t);
    t = NULL;
    CHECK(hbm_trace_load(path, &t, &d) == HBM_OK);
    if (t) CHECK(t->snapshot_device == 1 && t->nevents == 1);
    hbm_trace_free(t);
    unlink(path);
  }
  o.device = 5;
  t = (hbm_trace *)&o; /* on error the output is left untouched (hbm.h) */
  CHECK(hbm_snapshot_import(s.p.b, s.p.n, "test.pickle", &o, &t, &d) == HBM_EPARSE);
  CHECK(strstr(d.message, "device 5") != NULL);
  CHECK(t == (hbm_trace *)&o);

  /* No device with entries: the lowest device that holds a segment, in
   * whatever order the segments come. */
  static const int orders[2][2] = {{2, 1}, {0, 1}};
  for (int order = 0; order < 2; order++) {
    snap_begin(&s);
    p = &s.p;
    for (int k = 0; k < 2; k++) {
      const int dev = orders[order][k];
      dict_begin(p);
      kv_int(p, "device", dev);
      kv_int(p, "address", (int64_t)(A0 + (uint64_t)dev * 64 * MiB));
      kv_int(p, "total_size", 2 * MiB);
      kv_int(p, "stream", 0);
      kv_str(p, "segment_type", "small");
      pk_str(p, "blocks");
      list_begin(p);
      blk(&s, A0 + (uint64_t)dev * 64 * MiB, 2 * MiB, 0, "inactive");
      list_end(p);
      dict_end(p);
    }
    list_end(p);
    pk_str(p, "device_traces");
    list_begin(p);
    for (int dev = 0; dev < 3; dev++) {
      list_begin(p);
      list_end(p);
    }
    list_end(p);
    snap_end(&s);
    const int want = orders[order][1] < orders[order][0] ? orders[order][1] : orders[order][0];
    REQUIRE(import(&s, &t, &d) == HBM_OK);
    CHECK_EQ_U64(t->snapshot_device, want);
    CHECK_EQ_U64(t->ninit_segments, 1);
    if (t->ninit_segments == 1) CHECK_EQ_U64(t->init_segments[0].addr, A0 + (uint64_t)want * 64 * MiB);
    hbm_trace_free(t);
  }
}

/* An entry whose time_us is not an int has no time: an oom entry too, so a
 * step that ended before the first timed entry is not taken as in the trace. */
static void test_untimed_oom(void) {
  snap s;
  snap_begin(&s);
  free_segment(&s, A0);
  trace_begin(&s);
  pk *p = &s.p;
  dict_begin(p);
  kv_str(p, "action", "oom");
  kv_int(p, "device_free", 100 * MiB);
  pk_str(p, "time_us");
  op(p, 'N');
  dict_end(p);
  ev(&s, "alloc", A0, 512, 0, 100);
  trace_end(&s);
  pk_str(p, "external_annotations");
  list_begin(p);
  dict_begin(p);
  kv_str(p, "stage", "END");
  kv_str(p, "name", "Optimizer.step#AdamW.step");
  kv_int(p, "time_us", 50);
  dict_end(p);
  list_end(p);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->nevents, 1); /* the alloc; no step before it */
  hbm_trace_free(t);
}

/* Steps: the ends of other devices' optimizer steps are not this device's,
 * and the ends are taken in time order, whatever order they were recorded in. */
static void test_step_ends(void) {
  snap s;
  snap_begin(&s);
  free_segment(&s, A0);
  trace_begin(&s);
  ev(&s, "alloc", A0, 512, 0, 100);
  ev(&s, "free_completed", A0, 512, 0, 200);
  ev(&s, "alloc", A0, 512, 0, 300);
  ev(&s, "free_completed", A0, 512, 0, 400);
  trace_end(&s);
  pk *p = &s.p;
  pk_str(p, "external_annotations");
  list_begin(p);
  const int64_t ends[3][2] = {{0, 350}, {0, 150}, {1, 250}}; /* device, time */
  for (int k = 0; k < 3; k++) {
    dict_begin(p);
    kv_str(p, "stage", "END");
    kv_str(p, "name", "Optimizer.step#SGD.step");
    kv_int(p, "device", ends[k][0]);
    kv_int(p, "time_us", ends[k][1]);
    dict_end(p);
  }
  list_end(p);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->nevents, 6);
  if (t->nevents == 6) {
    CHECK(t->events[1].kind == HBM_EV_STEP && t->events[1].size == 1); /* between 100 and 200 */
    CHECK(t->events[4].kind == HBM_EV_STEP && t->events[4].size == 2); /* between 300 and 400 */
  }
  hbm_trace_free(t);
}

/* The older format's 'free' is a free_completed. */
static void test_old_free(void) {
  snap s;
  snap_begin(&s);
  seg_begin(&s, A0, 2 * MiB, 0, 1, 0);
  blk(&s, A0, 2 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "alloc", A0, 512, 0, -1);
  ev(&s, "free", A0, 512, 0, -1);
  trace_end(&s);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->nevents, 2);
  if (t->nevents == 2) CHECK(t->events[1].kind == HBM_EV_FREE && t->events[1].id == t->events[0].id);
  hbm_trace_free(t);
}

/* Slack in the large pool: a gap of 1 MiB after a block is its own (no free
 * block is that small); 1.5 MiB is a free block. */
static void test_slack_edges(void) {
  const uint64_t B = A0 + 64 * MiB;
  snap s;
  snap_begin(&s);
  seg_begin(&s, A0, 20 * MiB, 0, 0, 0);
  blk(&s, A0, 20 * MiB, 0, "inactive");
  seg_end(&s);
  seg_begin(&s, B, 20 * MiB, 0, 0, 0);
  blk(&s, B, 20 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "free_completed", A0, 4 * MiB, 0, -1);
  ev(&s, "free_completed", A0 + 5 * MiB, 4 * MiB, 0, -1);
  ev(&s, "free_completed", B, 4 * MiB, 0, -1);
  ev(&s, "free_completed", B + 5 * MiB + 512 * KiB, 4 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->ninit_segments, 2);
  if (t->ninit_segments == 2) {
    CHECK_EQ_U64(blocks_of(t, 0)[0].size, 5 * MiB);
    CHECK_EQ_U64(blocks_of(t, 1)[0].size, 4 * MiB);
    CHECK_EQ_U64(blocks_of(t, 1)[1].id, HBM_NO_ID);
    CHECK_EQ_U64(blocks_of(t, 1)[1].size, MiB + 512 * KiB);
  }
  hbm_trace_free(t);
}

/* Ranges unmapped in the trace: one next to a range of its stream takes that
 * range's pool and joins it; next to another stream's, or alone, its pool is
 * its size's (whole 20 MiB pages: large), and ranges of two streams stay apart. */
static void test_unmapped_ranges(void) {
  const uint64_t E = 0x7f4000000000ull;
  snap s;
  snap_begin(&s);
  seg_begin(&s, E, 20 * MiB, 0, 0, 1);
  blk(&s, E, 20 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "segment_unmap", E + 40 * MiB, 2 * MiB, 7, -1);
  ev(&s, "segment_unmap", E + 20 * MiB, 20 * MiB, 0, -1);
  ev(&s, "segment_unmap", E + 100 * MiB, 2 * MiB, 0, -1);
  ev(&s, "segment_unmap", E - 40 * MiB, 20 * MiB, 0, -1);
  ev(&s, "segment_unmap", E - 20 * MiB, 20 * MiB, 7, -1);
  trace_end(&s);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->ninit_segments, 5);
  if (t->ninit_segments == 5) {
    const hbm_init_segment *g = t->init_segments;
    CHECK(g[0].addr == E - 40 * MiB && g[0].size == 20 * MiB && !g[0].small && g[0].stream == 0);
    CHECK(g[1].addr == E - 20 * MiB && g[1].size == 20 * MiB && !g[1].small && g[1].stream == 1);
    CHECK(g[2].addr == E && g[2].size == 40 * MiB && !g[2].small && g[2].stream == 0 && g[2].expandable);
    CHECK(g[3].addr == E + 40 * MiB && g[3].size == 2 * MiB && g[3].small && g[3].stream == 1);
    CHECK(g[4].addr == E + 100 * MiB && g[4].size == 2 * MiB && g[4].small && g[4].stream == 0);
  }
  hbm_trace_free(t);
}

/* Address 0 is an address like any other: an allocation there, alive at the
 * end, is read as made (no entry past the recorded ones is read). */
static void test_address_zero(void) {
  snap s;
  snap_begin(&s);
  free_segment(&s, 0);
  trace_begin(&s);
  ev(&s, "alloc", 0, 512, 0, -1);
  trace_end(&s);
  snap_end(&s);
  hbm_trace *t;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->nevents, 1);
  if (t->nevents == 1) CHECK(t->events[0].kind == HBM_EV_ALLOC && t->events[0].addr == 0);
  hbm_trace_free(t);
}

/* cudaMalloc never returns memory still reserved: a segment allocated over
 * one of the start, or over one the trace made and did not release, is a
 * damaged recording (fidelity would otherwise count both in PyTorch's
 * reserved bytes). Released first, or beside it, it is fine. */
static void test_segment_overlap(void) {
  snap s;
  snap_begin(&s);
  trace_begin(&s);
  ev(&s, "segment_alloc", A0, 20 * MiB, 0, -1);
  ev(&s, "segment_alloc", A0, 20 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "device_traces[0][1] (segment_alloc): segment [0x7f0000000000, 0x7f0001400000) overlaps the segment "
                   "[0x7f0000000000, 0x7f0001400000) reserved by device_traces[0][0]");

  snap_begin(&s);
  seg_begin(&s, A0, 20 * MiB, 0, 0, 0);
  blk(&s, A0, 20 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "segment_alloc", A0 + 18 * MiB, 20 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "device_traces[0][0] (segment_alloc): segment [0x7f0001200000, 0x7f0002600000) overlaps the segment "
                   "[0x7f0000000000, 0x7f0001400000) reserved at the start");

  snap_begin(&s); /* released in between, or next to it: no error */
  trace_begin(&s);
  ev(&s, "segment_alloc", A0, 20 * MiB, 0, -1);
  ev(&s, "segment_free", A0, 20 * MiB, 0, -1);
  ev(&s, "segment_alloc", A0, 40 * MiB, 0, -1);
  ev(&s, "segment_alloc", A0 + 40 * MiB, 2 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  hbm_trace *t = NULL;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->nevents, 4);
  hbm_trace_free(t);

  /* PyTorch 2.0 recorded no segment_free for a segment no recorded allocation
   * touched: one of before the recording, released by empty_cache. It is in no
   * event and not in `segments`, so a segment allocated over its memory later
   * meets nothing reserved (here a 2 MiB one where a 20 MiB one was). */
  snap_begin(&s);
  free_segment(&s, A0);
  trace_begin(&s);
  ev(&s, "segment_alloc", A0, 2 * MiB, 0, -1);
  ev(&s, "alloc", A0, 512, 0, -1);
  ev(&s, "free_completed", A0, 512, 0, -1);
  trace_end(&s);
  snap_end(&s);
  t = NULL;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->ninit_segments, 0);
  CHECK_EQ_U64(t->nevents, 3);
  hbm_trace_free(t);
}

/* A one-allocation snapshot up to its allocator_settings' items, which the
 * caller writes; settings_end() closes it, then expects `error` or reads it. */
static void settings_begin(snap *s) {
  snap_begin(s);
  free_segment(s, A0);
  trace_begin(s);
  ev(s, "alloc", A0, 512, 0, -1);
  trace_end(s);
  pk_str(&s->p, "allocator_settings");
  dict_begin(&s->p);
}
/* The trace read (NULL where refused with `error`, as expected). */
static hbm_trace *settings_end(snap *s, const char *error) {
  dict_end(&s->p);
  snap_end(s);
  if (error) {
    expect_error(s, error);
    return NULL;
  }
  hbm_trace *t = NULL;
  hbm_diag d;
  int rc = import(s, &t, &d);
  CHECK(rc == HBM_OK);
  return rc == HBM_OK ? t : NULL;
}

/* A one-allocation snapshot whose allocator_settings hold `key`: True (or
 * False) where as_bool, else the int `value`. It is refused with `error`, or
 * read with `conf` as its settings. */
static void expect_setting(const char *key, int as_bool, int64_t value, const char *error, const char *conf) {
  snap s;
  settings_begin(&s);
  pk *p = &s.p;
  pk_str(p, key);
  if (as_bool) op(p, value ? 0x88 : 0x89); /* NEWTRUE, NEWFALSE */
  else pk_int(p, value);
  hbm_trace *t = settings_end(&s, error);
  if (!t) return;
  CHECK(t->conf && !strcmp(t->conf, conf));
  hbm_trace_free(t);
}

/* expandable_segments is a bool in every recording; an int 1 is none
 * (snapshot-import.md: refused, not read as True). True itself is read. */
static void test_expandable_setting_bool(void) {
  expect_setting("expandable_segments", 1, 1, NULL, "expandable_segments:True");
  expect_setting("expandable_segments", 0, 1, "allocator_settings: 'expandable_segments' is a int, expected a bool", NULL);
}

/* A max_split_size PyTorch refuses (below 20 MiB) is a damaged recording,
 * not a setting to drop for the default; 20 MiB itself is taken. */
static void test_max_split_too_small(void) {
  expect_setting("max_split_size", 0, 10 * MiB,
                 "allocator_settings: 'max_split_size' 10485760 is below 20 MiB (PyTorch refuses it)", NULL);
  expect_setting("max_split_size", 0, 20 * MiB, NULL, "max_split_size_mb:20");
}

/* One allocation with roundup_power2_divisions {"1": 0, key: value} (key
 * NULL: the int 64): refused with `error`, or read with `conf` among its
 * settings (NULL: no roundup among them). */
static void expect_roundup(const char *key, int value_as_bool, int64_t value, const char *error, const char *conf) {
  snap s;
  settings_begin(&s);
  pk *p = &s.p;
  pk_str(p, "roundup_power2_divisions");
  dict_begin(p);
  kv_int(p, "1", 0);
  if (key) pk_str(p, key);
  else pk_int(p, 64); /* an int key, where PyTorch writes "64" */
  if (value_as_bool) op(p, value ? 0x88 : 0x89);
  else pk_int(p, value);
  dict_end(p);
  hbm_trace *t = settings_end(&s, error);
  if (!t) return;
  if (conf) CHECK(t->conf && strstr(t->conf, conf));
  else CHECK(!t->conf || !strstr(t->conf, "roundup")); /* every interval 0: PyTorch's default */
  hbm_trace_free(t);
}

/* PyTorch's parser takes only 0 or a power of two divisions, and writes one
 * entry per interval, keyed by its size in MiB: anything else is damage, not
 * an entry to drop for the default (which would model the run with other
 * settings). */
static void test_roundup_refused(void) {
  expect_roundup("64", 0, 8, NULL, "64:8");
  expect_roundup("64", 0, 0, NULL, NULL); /* 0: that interval does not round */
  expect_roundup("64", 0, 3, "'roundup_power2_divisions' gives 64 MiB a count that is neither, expected 0 or a "
                 "power of two", NULL);
  expect_roundup("64", 0, -4, "gives 64 MiB a count that is neither", NULL);
  expect_roundup("64", 1, 1, "gives 64 MiB no int", NULL);
  expect_roundup("3", 0, 4, "'roundup_power2_divisions' has the key '3', expected an interval in MiB, a power of two",
                 NULL);
  expect_roundup("64MB", 0, 4, "has the key '64MB'", NULL);
  expect_roundup("0", 0, 4, "has the key '0'", NULL);
  expect_roundup(NULL, 0, 4, "'roundup_power2_divisions' has a key that is a int, expected a str", NULL);
}

/* Addresses, sizes and streams are ints in every recording: True is damage,
 * not a size of 1 (Python's pickle would give a bool for nothing else). */
static void test_bool_size_refused(void) {
  static const char *const field[] = {"size", "stream"};
  for (int bad = 0; bad < 2; bad++) {
    snap s;
    snap_begin(&s);
    trace_begin(&s);
    pk *p = &s.p;
    dict_begin(p);
    kv_str(p, "action", "alloc");
    kv_int(p, "addr", (int64_t)A0);
    for (int k = 0; k < 2; k++) {
      pk_str(p, field[k]);
      if (k != bad) pk_int(p, k ? 0 : 512);
      else op(p, bad ? 0x89 : 0x88); /* NEWFALSE, NEWTRUE */
    }
    dict_end(p);
    trace_end(&s);
    snap_end(&s);
    char want[96];
    snprintf(want, sizeof want, "device_traces[0][0] (alloc): '%s' is a bool, expected an int", field[bad]);
    expect_error(&s, want);
  }
}

/* A device asked for is one the snapshot has: a trace of its own, or a
 * segment. With no traces at all, any other is refused, not imported as an
 * empty device; beyond the traces, one with a segment is read. */
static void test_device_lacked(void) {
  for (int ntraces = 0; ntraces < 2; ntraces++) {
    snap s;
    snap_begin(&s);
    pk *p = &s.p;
    device1_segment(&s);
    list_end(p);
    pk_str(p, "device_traces");
    list_begin(p);
    if (ntraces) { /* device 0's, elsewhere */
      list_begin(p);
      ev(&s, "alloc", A0 + 64 * MiB, 512, 0, -1);
      list_end(p);
    }
    list_end(p);
    snap_end(&s);
    hbm_trace *t = NULL;
    hbm_diag d;
    hbm_snapshot_options o = {.device = 1};
    REQUIRE(hbm_snapshot_import(s.p.b, s.p.n, "test.pickle", &o, &t, &d) == HBM_OK);
    CHECK_EQ_U64(t->snapshot_device, 1);
    CHECK_EQ_U64(t->ninit_segments, 1);
    hbm_trace_free(t);
    for (int dev = 2; dev < 8; dev += 5) {
      o.device = dev;
      t = NULL;
      memset(&d, 0, sizeof d);
      CHECK(hbm_snapshot_import(s.p.b, s.p.n, "test.pickle", &o, &t, &d) == HBM_EPARSE);
      CHECK(t == NULL);
      char want[64];
      snprintf(want, sizeof want, "device %d: the snapshot has traces for %d device(s)", dev, ntraces);
      if (!strstr(d.message, want)) fprintf(stderr, "message '%s' lacks '%s'\n", d.message, want);
      CHECK(strstr(d.message, want) != NULL);
      if (t) hbm_trace_free(t);
    }
  }
}

/* A blocks list shared between segments through the pickle's memo: a file
 * of kilobytes would otherwise have the reader walk it once per segment
 * (20000 references to a list of 1024 blocks took 17 s and 640 MB before
 * any error). Refused at the second segment, naming the first. */
static void test_shared_blocks(void) {
  snap s;
  snap_begin(&s);
  pk *p = &s.p;
  for (int k = 0; k < 3; k++) {
    seg_head(&s, A0 + (uint64_t)k * 2 * MiB, 2 * MiB, 0, 1, 0);
    pk_str(p, "blocks");
    if (k == 0) {
      op(p, ']');
      op(p, 'q'); /* BINPUT 0 */
      op(p, 0);
      op(p, '(');
      blk(&s, A0, 1 * MiB, 0, "inactive");
      blk(&s, A0 + 1 * MiB, 1 * MiB, 0, "inactive");
      list_end(p);
    } else {
      op(p, 'h'); /* BINGET 0: the first segment's list */
      op(p, 0);
    }
    dict_end(p);
  }
  trace_begin(&s);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "segments[1]: its 'blocks' are those of segments[0]");
}

/* A free_completed gives the size its alloc asked for: PyTorch records the
 * request at the alloc, keeps it as the block's requested_size, and records
 * that at the free. Another size is refused, naming both entries; the older
 * 'free' action is not checked. */
static void test_free_size(void) {
  snap s;
  snap_begin(&s);
  seg_begin(&s, A0, 2 * MiB, 0, 1, 0);
  blk(&s, A0, 2 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "alloc", A0, 512, 0, -1);
  ev(&s, "free_requested", A0, 512, 0, -1);
  ev(&s, "free_completed", A0, 1024, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "device_traces[0][2] (free_completed): size 1024, but the allocation of 0x7f0000000000 it frees "
                   "(device_traces[0][0]) asked for 512");
  for (int old = 0; old < 2; old++) { /* the same size, or the older 'free' */
    hbm_trace *t = NULL;
    hbm_diag d;
    snap_begin(&s);
    seg_begin(&s, A0, 2 * MiB, 0, 1, 0);
    blk(&s, A0, 2 * MiB, 0, "inactive");
    seg_end(&s);
    trace_begin(&s);
    ev(&s, "alloc", A0, 512, 0, -1);
    ev(&s, old ? "free" : "free_completed", A0, old ? 1024 : 512, 0, -1);
    trace_end(&s);
    snap_end(&s);
    REQUIRE(import(&s, &t, &d) == HBM_OK);
    CHECK_EQ_U64(t->nevents, 2);
    hbm_trace_free(t);
  }
}

/* PyTorch releases (segment_free) and unmaps (segment_unmap) only free
 * blocks: a release that takes a byte of a block still live (allocated, or
 * freed only as far as free_requested) is refused, naming the block; one of
 * the free rest of a segment, or after the free_completed, is read. */
static void test_release_of_live(void) {
  const uint64_t E = 0x7f4000000000ull;
  snap s;
  snap_begin(&s);
  trace_begin(&s);
  ev(&s, "segment_alloc", A0, 20 * MiB, 0, -1);
  ev(&s, "alloc", A0 + 4 * MiB, 3 * MiB, 0, -1);
  ev(&s, "free_requested", A0 + 4 * MiB, 3 * MiB, 0, -1);
  ev(&s, "segment_free", A0, 20 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "device_traces[0][3] (segment_free): releases [0x7f0000000000, 0x7f0001400000) while the block "
                   "[0x7f0000400000, 0x7f0000700000) allocated by device_traces[0][1] is live");

  /* a block alive at the start (active at the end), in an expandable segment */
  snap_begin(&s);
  seg_begin(&s, E, 40 * MiB, 0, 0, 1);
  blk(&s, E, 30 * MiB, 25 * MiB, "active_allocated");
  blk(&s, E + 30 * MiB, 10 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "segment_unmap", E + 20 * MiB, 20 * MiB, 0, -1);
  ev(&s, "segment_map", E + 20 * MiB, 20 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "device_traces[0][0] (segment_unmap): releases [0x7f4001400000, 0x7f4002800000) while the block "
                   "[0x7f4000000000, 0x7f4001900000) alive at the start is live");

  /* the free end of the same segment, and a segment after the free_completed */
  snap_begin(&s);
  seg_begin(&s, E, 40 * MiB, 0, 0, 1);
  blk(&s, E, 20 * MiB, 20 * MiB, "active_allocated");
  blk(&s, E + 20 * MiB, 20 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "segment_alloc", A0, 20 * MiB, 0, -1);
  ev(&s, "alloc", A0 + 4 * MiB, 3 * MiB, 0, -1);
  ev(&s, "free_requested", A0 + 4 * MiB, 3 * MiB, 0, -1);
  ev(&s, "free_completed", A0 + 4 * MiB, 3 * MiB, 0, -1);
  ev(&s, "segment_free", A0, 20 * MiB, 0, -1);
  ev(&s, "segment_unmap", E + 20 * MiB, 20 * MiB, 0, -1);
  ev(&s, "segment_map", E + 20 * MiB, 20 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  hbm_trace *t = NULL;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->nevents, 6);
  hbm_trace_free(t);
}

/* An allocation lies inside the segment it starts in: PyTorch carves blocks
 * inside one segment. Segments side by side (cudaMalloc often returns them
 * so) do not make one; mapped ranges of expandable segments do where they are
 * of one stream (test_expandable_ranges); an allocation in no known segment
 * is refused. */
static void test_alloc_past_segment(void) {
  snap s;
  snap_begin(&s);
  trace_begin(&s);
  ev(&s, "segment_alloc", A0, 20 * MiB, 0, -1);
  ev(&s, "alloc", A0 + 18 * MiB, 3 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "device_traces[0][1] (alloc): its recorded range [0x7f0001200000, 0x7f0001500000) runs past the "
                   "end of its segment [0x7f0000000000, 0x7f0001400000) (reserved by device_traces[0][0])");

  snap_begin(&s); /* two segments of the start, side by side */
  seg_begin(&s, A0, 20 * MiB, 0, 0, 0);
  blk(&s, A0, 20 * MiB, 0, "inactive");
  seg_end(&s);
  seg_begin(&s, A0 + 20 * MiB, 20 * MiB, 0, 0, 0);
  blk(&s, A0 + 20 * MiB, 20 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "alloc", A0 + 10 * MiB, 10 * MiB + 512, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "device_traces[0][0] (alloc): its recorded range [0x7f0000a00000, 0x7f0001400200) runs past the "
                   "end of its segment [0x7f0000000000, 0x7f0001400000) (reserved at the start)");

  /* mapped ranges side by side of two streams (each stream has its own
   * expandable segment): one at the start and one the trace maps, or two the
   * trace maps, are not one */
  const uint64_t E = 0x7f4000000000ull;
  snap_begin(&s);
  seg_begin(&s, E, 20 * MiB, 0, 0, 1);
  blk(&s, E, 20 * MiB, 0, "inactive");
  seg_end(&s);
  seg_begin(&s, E + 20 * MiB, 20 * MiB, 7, 0, 1);
  blk(&s, E + 20 * MiB, 20 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "segment_map", E + 20 * MiB, 20 * MiB, 7, -1);
  ev(&s, "alloc", E + 10 * MiB, 20 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "device_traces[0][1] (alloc): its recorded range [0x7f4000a00000, 0x7f4001e00000) runs past the "
                   "end of its segment [0x7f4000000000, 0x7f4001400000) (reserved at the start)");
  snap_begin(&s);
  trace_begin(&s);
  ev(&s, "segment_map", E, 20 * MiB, 0, -1);
  ev(&s, "segment_map", E + 20 * MiB, 20 * MiB, 7, -1);
  ev(&s, "alloc", E + 10 * MiB, 20 * MiB, 7, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "device_traces[0][2] (alloc): its recorded range [0x7f4000a00000, 0x7f4001e00000) runs past the "
                   "end of its segment [0x7f4000000000, 0x7f4001400000) (reserved by device_traces[0][0])");
  snap_begin(&s); /* of one stream they are one (as in test_expandable_ranges) */
  trace_begin(&s);
  ev(&s, "segment_map", E, 20 * MiB, 7, -1);
  ev(&s, "segment_map", E + 20 * MiB, 20 * MiB, 7, -1);
  ev(&s, "alloc", E + 10 * MiB, 20 * MiB, 7, -1);
  trace_end(&s);
  snap_end(&s);
  {
    hbm_trace *t = NULL;
    hbm_diag d;
    REQUIRE(import(&s, &t, &d) == HBM_OK);
    hbm_trace_free(t);
  }

  snap_begin(&s); /* to the segment's last byte */
  seg_begin(&s, A0, 20 * MiB, 0, 0, 0);
  blk(&s, A0, 20 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "alloc", A0 + 10 * MiB, 10 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  hbm_trace *t = NULL;
  hbm_diag d;
  REQUIRE(import(&s, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->nevents, 1);
  hbm_trace_free(t);

  /* in no segment at all: neither one of the start nor one the trace reserved
   * (a segment the trace releases first, or reserves later, does not hold it) */
  snap_begin(&s);
  seg_begin(&s, A0, 20 * MiB, 0, 0, 0);
  blk(&s, A0, 20 * MiB, 0, "inactive");
  seg_end(&s);
  trace_begin(&s);
  ev(&s, "segment_free", A0 + 40 * MiB, 40 * MiB, 0, -1);
  ev(&s, "alloc", A0 + 40 * MiB, 30 * MiB, 0, -1);
  ev(&s, "segment_alloc", A0 + 80 * MiB, 20 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "device_traces[0][1] (alloc): its recorded range [0x7f0002800000, 0x7f0004600000) lies in no "
                   "segment (none of the start, none reserved by the trace before it)");
  snap_begin(&s);
  trace_begin(&s);
  ev(&s, "alloc", A0 + 80 * MiB, 512, 0, -1);
  ev(&s, "segment_alloc", A0 + 80 * MiB, 2 * MiB, 0, -1);
  trace_end(&s);
  snap_end(&s);
  expect_error(&s, "device_traces[0][0] (alloc): its recorded range [0x7f0005000000, 0x7f0005000200) lies in no "
                   "segment");
}

int main(void) {
  test_slack();
  test_evidence();
  test_small_pool();
  test_segments_streams_ids();
  test_pending_free();
  test_steps_and_settings();
  test_settings_from_text();
  test_expandable_ranges();
  test_private_pools();
  test_errors();
  test_capacity_from_oom();
  test_capacity_from_limited_oom();
  test_devices();
  test_segment_event_pools();
  test_oversize_slack();
  test_settings_digits();
  test_address_zero();
  test_untimed_oom();
  test_step_ends();
  test_old_free();
  test_slack_edges();
  test_unmapped_ranges();
  test_segment_overlap();
  test_expandable_setting_bool();
  test_max_split_too_small();
  test_roundup_refused();
  test_bool_size_refused();
  test_device_lacked();
  test_shared_blocks();
  test_free_size();
  test_release_of_live();
  test_alloc_past_segment();
  return test_done("test_snapshot");
}
