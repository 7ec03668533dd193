/* zoned.c: hbm's own allocator (docs/design.md §3; docs/zoned.md has the
 * measurements behind every choice below): page stitching plus lifetime
 * zones, so that holes between live blocks never block a request.
 *
 * Virtual space is plentiful; physical granules are what count.
 *   - Placement. Requests of a granule or more share one large zone; smaller
 *     ones are packed into pages of small zones kept apart by lifetime class
 *     and stream. Each zone places blocks tightly (512 B), by best fit, in
 *     virtual reservations several times the capacity (core/vspace.h). Of the
 *     first `probes` candidate holes it takes the one needing the fewest new
 *     pages.
 *   - Mapping. A page (one granule of virtual space) is mapped while a live
 *     block touches it. Physical memory comes in chunks, one create and one
 *     map call each; a run of new pages is backed by chunks that never cross
 *     a `chunk`-sized stripe of the zone. A block's chunks need not be
 *     adjacent in physical memory (stitching).
 *   - The cache. A chunk no live block touches stays mapped: the next block
 *     placed there costs no call, so steady-state steps make almost none.
 *     When new pages would take the mapped total past the most pages ever
 *     touched at once (plus `slack`), chunks that sat idle through a whole
 *     step are unmapped first. With `moves:on` the cache is held at that
 *     bound: idle chunks are stitched into the new pages instead of mapping
 *     more (fewer bytes reserved, more calls: docs/zoned.md measures both).
 *   - Pressure. When the device is full, idle chunks are stitched into the
 *     new block's pages (unmap there, map here) or unmapped; then every hole
 *     is tried; then chunks that live blocks use only in part are re-chunked
 *     (their used pages copied into chunks of just that size, at the same
 *     addresses) so the rest of their memory can go. Only then does a
 *     request fail.
 *   - Step plan. In a job that marks its steps, when a step repeats the one
 *     before it exactly (the same large requests at the same points), that
 *     step is planned offline (core/dsa.h) and the steps after it place
 *     their large blocks at the planned addresses, in a range whose pages
 *     stay mapped: the footprint of a plan made with the whole step in view,
 *     and no call while steps repeat. A request off the plan ends it. Until
 *     a plan is followed (and in jobs whose steps differ) the cache is held
 *     at its bound by moves (`moves:auto`); steps that repeat but would not
 *     gain by a plan keep their online layout, without moves, until that
 *     layout drifts past the bound (then it is planned after all).
 *   - Lifetime. Small zones are per class; without tags the class is
 *     inferred online (core/lifetime.h). For large blocks classes cost more
 *     than they save (idle memory of one zone cannot serve another without
 *     a remap), so they share one zone unless `large_life:on`.
 *   - No virtual memory: fixed zones over one segment, static blocks below a
 *     fixed split, transient ones above, each spilling into the other before
 *     a request fails (compaction comes with a later policy).
 *
 * Settings (conf "key:value,..."; '=' works too):
 *   zones:infer|tags|off  lifetime classes (default infer; tags: param, grad and
 *                         optim are static, other tags transient, untagged inferred)
 *   large_life:on|off     classes for large blocks too (default off)
 *   chunk:SIZE            stripe: the largest chunk (default 64MiB, a granule multiple)
 *   slack:SIZE|P%         cache allowed above the touched high-water mark (default 0)
 *   headroom:P%           in a job that marks steps, the bound is at least P% over peak
 *                         live bytes: fewer moves and trims for that reserve (default 0)
 *   slot:SIZE|off         a block of SIZE or more may take an address range of its own,
 *                         where the next such block finds its pages mapped (default off)
 *   moves:on|off|auto     hold the cache at that bound by moving idle chunks (default auto:
 *                         while a job that marks steps follows no plan)
 *   trim:on|off           re-chunk partly used chunks before new pages raise the
 *                         high-water mark (default on)
 *   plan:on|off|always    plan the large blocks of steps that repeat (default on: when
 *                         the plan pays for the switch to it; always: whenever steps match)
 *   trust:on|off          once per heap, plan a step before a repeat confirms it, where
 *                         it frees every large block it makes as the step before did (default on)
 *   probes:N              candidate holes compared per placement (default 8)
 *   small:on|off          sub-granule requests in their own zones (default on)
 *   streams:on|off        small zones per stream (default on)
 *   va:N                  each zone reservation is N x capacity (default 2)
 *   vmm:on|off            off forces the fixed-zone fallback
 *   split:F               fallback: static share of the segment (default 0.5)
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/addrmap.h"
#include "core/dsa.h"
#include "core/lifetime.h"
#include "core/range.h"
#include "core/util.h"
#include "core/vspace.h"
#include "policy/policy.h"

enum { ZONED_UNIT = 512, ZONED_ARENA_RANGES = 8 };
enum { MOVES_OFF = 0, MOVES_ON = 1, MOVES_AUTO = 2 };
enum { PLAN_OFF = 0, PLAN_ON = 1, PLAN_ALWAYS = 2 };
enum { ZONE_PLANNED = 2, PLAN_MAX_RANGES = 4 }; /* the zone planned blocks live in (life 2: no class) */
enum { ZONE_SLOTS = 3, MAX_SLOTS = 64 }; /* the zone of slots (life 3: no class), a range each */
#define NIL UINT32_MAX
/* Pages of a range, and of a stripe, at most: page indexes are 32 bits, and
 * a stripe's start plus its length then stays below 2^32 (the placement
 * loops count in 32 bits; in 64 they took 6% longer on select_n_b). Reached
 * only where capacity x va passes 2^31 granules: 4 PiB of 2 MiB pages. */
#define ZONED_MAX_PAGES (1u << 31)

typedef enum zone_mode { ZONES_INFER = 0, ZONES_TAGS, ZONES_OFF } zone_mode;

typedef struct zoned_conf {
  zone_mode zones;
  int large_life, small, streams, vmm, probes, moves, plan, trim, trust;
  uint64_t chunk, slack, va_factor, slot; /* slot: 0 off */
  double slack_share, headroom, split;
  unsigned given; /* 1 << conf_key for each setting the text gave */
} zoned_conf;

/* The settings, in the order the messages list them. */
typedef enum conf_key {
  K_ZONES, K_LARGE_LIFE, K_CHUNK, K_SLACK, K_HEADROOM, K_SLOT, K_MOVES, K_PLAN,
  K_TRIM, K_TRUST, K_PROBES, K_SMALL, K_STREAMS, K_VA, K_VMM, K_SPLIT, K_COUNT
} conf_key;
static const char *const conf_key_names[K_COUNT] = {
    "zones", "large_life", "chunk", "slack", "headroom", "slot", "moves", "plan",
    "trim",  "trust",      "probes", "small", "streams", "va",  "vmm",  "split"};
/* What each takes, for the messages: "name:values", then what bounds it. */
static const char *const conf_key_values[K_COUNT] = {
    "infer|tags|off", "on|off", "SIZE", "SIZE|P%", "P%",  "SIZE|off", "on|off|auto", "on|off|always",
    "on|off",         "on|off", "N",    "on|off",  "on|off", "N",     "on|off",      "F"};

/* A physical chunk: `npages` granules from one phys_create, mapped at pages
 * [first, first + npages) of range `range` (a free record has npages 0,
 * and `range` chains the free records).
 * Invariant: touched == pages of it touched by live blocks; touched == 0
 * <=> its idle bit is set. */
typedef struct zchunk {
  uint32_t first, npages, touched;
  uint32_t range;      /* for a free record: the next free record */
  uint64_t handle;
  uint64_t idle_since; /* z->clock (bytes allocated) when it became idle */
} zchunk;             /* 32 bytes: two to a cache line */

/* A mapped page's chunk, side by side with where that chunk ends, so that
 * touch and untouch read both from one cache line and need not wait on the
 * chunk's record to step to the next chunk. */
typedef struct zpage {
  uint32_t chunk; /* 0: not mapped; else the chunk's index + 1 */
  uint32_t end;   /* while mapped: one past the chunk's last page */
} zpage;

/* One virtual reservation of a zone. Invariants: page[p].chunk != 0 <=> page
 * p is mapped, by chunk page[p].chunk - 1, and then page[p].end is one past
 * that chunk's last page; edge[p] == live blocks whose first
 * or last page is p; a page is touched <=> edge[p] > 0 or it lies inside a
 * live block; touched => mapped; fenwick, once built, holds prefix counts of mapped
 * pages. page and edge hold pages [0, cover): cover >= top and > every
 * page a live block touches, and the entries past it are 0 by definition
 * (read them through chunk_at). The vspace user value of a block is its
 * lifetime record or NIL. */
typedef struct zrange {
  uint64_t base, size;
  uint32_t npages, zone;
  hbm_vspace *vs;
  zpage *page;
  uint32_t *edge;
  uint32_t cover;    /* pages page and edge hold, grown by doubling */
  uint32_t *fenwick; /* 1-based; built when counting pages directly has cost as much (fresh_cost) */
  uint32_t fenwick_n; /* pages it covers: >= top (nothing is mapped above), grown by doubling */
  uint32_t mapped;   /* mapped pages */
  uint32_t top;      /* one past the highest page ever mapped: if mapped == top, all below are */
  uint64_t counted;  /* pages fresh_cost has counted one by one */
} zrange;

typedef struct zzone {
  int life, small, stream;
  uint32_t *ranges;
  uint32_t nranges;
} zzone;

/* One large allocation of a step the plan learns from. */
typedef struct zstep_block {
  uint64_t size;       /* as placed (ZONED_UNIT multiple) */
  uint32_t born, died; /* event numbers in its step; died NIL while live, and
                          the step's events plus the number in the next step
                          when freed there */
} zstep_block;

/* A step as the plan sees it: its large allocations in order, and its
 * events (large allocations and frees). `seq` is the step mark it began at. */
typedef struct zstep {
  zstep_block *b;
  uint32_t n, cap, events;
  uint64_t seq;
  int broken; /* not recorded (learning paused, or host memory ran out): it cannot be planned */
} zstep;

/* What the lifetime rule learns from, for blocks whose class matters. */
typedef struct zrec {
  hbm_life_stamp stamp;
  uint32_t next_free;
} zrec;

typedef struct zoned {
  hbm_policy base;
  zoned_conf conf;
  uint64_t granule, capacity;
  uint64_t range_size; /* bytes of every range: capacity x va, at most ZONED_MAX_PAGES pages */
  unsigned gshift;
  uint32_t stripe;     /* pages per stripe (conf.chunk) */
  uint32_t stripe_mask; /* stripe - 1 when a power of two (the default), else 0 */
  int fallback;
  /* ---- virtual-memory mode ---- */
  zzone *zones;
  uint32_t nzones;
  uint32_t large_zone;  /* the zone of large blocks without large_life, NIL until needed */
  struct { int stream; uint32_t zone; } small_last[2]; /* per life: the small zone found last (zone NIL: none) */
  zrange *ranges;
  uint32_t nranges;
  uint32_t *order;      /* range indices by base address */
  uint64_t *order_base; /* order_base[k] == ranges[order[k]].base: range_of reads these alone */
  uint64_t *arenas;     /* (base, size) of each reservation */
  uint32_t narenas;
  uint64_t arena_base, arena_size, arena_used;
  uint64_t scratch_va;  /* window for re-chunking (0: not carved yet) */
  void *stage;          /* host memory a staged re-chunk holds used pages in */
  uint64_t stage_bytes;
  zchunk *chunks;
  uint32_t nchunks, chunks_cap, free_chunk;
  uint64_t *idle_bits;  /* bit c set <=> chunk c is idle */
  uint32_t idle_words, idle_chunks;
  uint64_t mapped_pages, touched_pages, idle_pages, peak_touched_pages;
  /* When mapped pages (reserved memory) last rose to their peak at the end of
   * an operation, as a replay sees them: that peak, the pages live blocks
   * touched then and the bytes of those blocks (the rest of the peak sat in
   * idle chunks). */
  uint64_t peak_mapped_pages, peak_mapped_touched, peak_mapped_live;
  uint32_t *undo;       /* chunks one placement mapped */
  uint32_t nundo, undo_cap;
  /* Bytes allocated through this heap, all sizes (the lifetime clock counts
   * only blocks whose class is tracked), live bytes and their peak: what
   * the cache's ages are measured in. */
  uint64_t clock, live_bytes, peak_live_bytes;
  uint64_t last_step_clock, prev_step_clock; /* clock at the last two step marks */
  /* ---- step plan (docs/zoned.md "Step plans") ----
   * While learning, each step's large allocations are recorded; when two
   * steps in a row match, the earlier is planned (core/dsa.h) and the next
   * steps place their large blocks at the planned addresses, in a range of
   * the plan's own, for as long as they follow it. */
  uint64_t marks;        /* step marks seen */
  zstep learn[2];        /* learn[cur]: the step under way; learn[!cur]: the one before */
  int cur, following;
  int settled;           /* steps repeat and their online layout is worth keeping: no plan, no moves */
  int drifted;           /* this step unsettled: its layout did not repeat, so a plan pays */
  uint64_t step_calls0;  /* backend calls at the last step mark */
  /* Recording costs a map entry per large block: after 4 evaluations in a
   * row that made no plan (steps that differ, or plans that would not pay),
   * learning pauses for 2 steps, then 4, ... up to 64. */
  uint32_t learn_idle, learn_pause, learn_skip;
  int trust_spent;       /* a step was weighed for a plan on trust: once per heap */
  uint64_t step_peak_mapped, step_peak_touched; /* pages, since the last step mark */
  hbm_addrmap learn_at;  /* addr -> seq << 32 | index, for recorded blocks still live */
  uint64_t *plan_addr;   /* per index in the planned step: its address, 0 if placed online */
  uint64_t *plan_size;
  uint32_t plan_n, plan_events, plan_range;
  uint32_t step_n, step_events; /* this step, while following */
  /* ---- lifetime ---- */
  zrec *recs;
  uint32_t nrecs, recs_cap, free_rec;
  hbm_lifetime life;
  /* ---- fallback (no virtual memory) ---- */
  hbm_addrmap fixed_live; /* addr -> record (or NIL) */
  uint64_t seg_addr, seg_size, split_at;
  hbm_range *fixed[2];   /* [HBM_LIFE_TRANSIENT], [HBM_LIFE_STATIC] */
  /* ---- counters ---- */
  uint64_t chunks_created, chunks_released, chunks_moved, pressure_releases, cold_releases, rechunks,
      staged_rechunks, trims, unsettles, switch_moves, bound_moves, bound_releases, peak_releases, static_allocs, slot_allocs,
      small_in_large, plan_builds, plan_steps, plan_misses, plan_drops, plans_declined, trusted_plans;
} zoned;

/* ==== settings ================================================================ */
static int parse_onoff(const char *v, int *out) {
  if (!strcmp(v, "on") || !strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1")) { *out = 1; return 1; }
  if (!strcmp(v, "off") || !strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "0")) { *out = 0; return 1; }
  return 0;
}

/* A decimal number at the start of v ("5", "0.5", ".5", "5e-3"): strtod's,
 * less the sign, space, hexadecimal, infinity and NaN it also takes. 1 with
 * the value and *end past it; 0 where v does not start with one. */
static int parse_decimal(const char *v, const char **end, double *out) {
  const char *digit = v[0] == '.' ? v + 1 : v;
  if (*digit < '0' || *digit > '9') return 0;
  char *e;
  double d = hbm_strtod(v, &e);
  if (memchr(v, 'x', (size_t)(e - v)) || memchr(v, 'X', (size_t)(e - v))) return 0;
  *end = e;
  *out = d;
  return 1;
}

/* P of "P%": a decimal, then exactly one '%'. */
static int parse_percent(const char *v, double *p) {
  const char *end;
  return parse_decimal(v, &end, p) && !strcmp(end, "%");
}

/* N from lo to hi, as hbm_count_parse reads counts (no sign or space). */
static int parse_bounded(const char *v, uint64_t lo, uint64_t hi, uint64_t *out) {
  uint64_t n;
  if (hbm_count_parse(v, &n) != HBM_OK || n < lo || n > hi) return 0;
  *out = n;
  return 1;
}

/* The settings of `keys` (bits 1 << conf_key) in table order, comma-separated,
 * each with its values when `values`, into out; 0 if none. */
static int join_keys(unsigned keys, int values, char *out, size_t len) {
  size_t n = 0;
  out[0] = 0;
  for (int b = 0; b < K_COUNT && n < len; b++)
    if (keys & (1u << b))
      n += (size_t)snprintf(out + n, len - n, "%s%s%s%s", n ? ", " : "", conf_key_names[b], values ? ":" : "",
                            values ? conf_key_values[b] : "");
  return n > 0;
}

/* Appends what bounds a setting's value to want, its "name:values". */
static void want_bound(char *want, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void want_bound(char *want, size_t len, const char *fmt, ...) {
  size_t n = strlen(want);
  va_list ap;
  va_start(ap, fmt);
  hbm_vsnprintf(want + n, len - n, fmt, ap);
  va_end(ap);
}

static int parse_conf(const char *text, uint64_t granule, zoned_conf *c, hbm_diag *diag) {
  *c = (zoned_conf){.zones = ZONES_INFER, .small = 1, .streams = 1, .vmm = 1, .probes = 8, .moves = MOVES_AUTO,
                    .plan = 1, .trim = 1, .trust = 1, .chunk = 64ull << 20, .va_factor = 2, .split = 0.5};
  if (c->chunk < granule) c->chunk = granule;
  if (!text) return HBM_OK;
  char buf[512];
  if (strlen(text) >= sizeof buf) {
    hbm_diag_set(diag, "alloc-conf", 0, 0, "settings longer than %zu bytes", sizeof buf - 1);
    return HBM_EINVAL;
  }
  strcpy(buf, text);
  /* Each setting once: slack:SIZE and slack:P% would otherwise add up, and
   * a later value silently replace an earlier one (as --alloc-conf, given
   * twice for one policy, is refused). Items are at least two bytes apart. */
  const char *seen[sizeof buf / 2];
  unsigned nseen = 0;
  for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    char *sep = strpbrk(item, ":="), sep_char = sep ? *sep : 0;
    char want[160] = ""; /* what a known key takes, for the message: set before any jump to bad */
    if (!sep) goto bad;
    *sep = 0;
    const char *k = item, *v = sep + 1;
    if (hbm_setting_repeated(seen, &nseen, k)) {
      hbm_diag_set(diag, "alloc-conf", 0, (uint64_t)(item - buf), "setting '%s' given twice (each setting once)", k);
      return HBM_EINVAL;
    }
    int key = 0; /* its place in conf_key_names, the one spelling of each name; K_COUNT: none */
    while (key < K_COUNT && strcmp(k, conf_key_names[key])) key++;
    if (key < K_COUNT) snprintf(want, sizeof want, "%s:%s", conf_key_names[key], conf_key_values[key]);
    if (key == K_ZONES) {
      if (!strcmp(v, "infer")) c->zones = ZONES_INFER;
      else if (!strcmp(v, "tags")) c->zones = ZONES_TAGS;
      else if (!strcmp(v, "off")) c->zones = ZONES_OFF;
      else goto bad;
    } else if (key == K_LARGE_LIFE) {
      if (!parse_onoff(v, &c->large_life)) goto bad;
    } else if (key == K_CHUNK) {
      want_bound(want, sizeof want, ", a multiple of the device's granule (%llu B) up to 1 PiB",
                 (unsigned long long)granule);
      if (hbm_size_parse(v, &c->chunk) != HBM_OK || c->chunk < granule || c->chunk % granule ||
          c->chunk > HBM_MAX_SIZE)
        goto bad;
    } else if (key == K_SLACK) {
      want_bound(want, sizeof want, " with P from 0 to 1000");
      size_t len = strlen(v);
      if (len > 1 && v[len - 1] == '%') {
        if (!parse_percent(v, &c->slack_share) || !(c->slack_share <= 1000)) goto bad;
        c->slack_share /= 100.0;
      } else if (hbm_size_parse(v, &c->slack) != HBM_OK) {
        goto bad;
      }
    } else if (key == K_HEADROOM) {
      want_bound(want, sizeof want, " with P from 0 to 50");
      if (!parse_percent(v, &c->headroom) || !(c->headroom <= 50)) goto bad;
      c->headroom /= 100.0;
    } else if (key == K_SLOT) {
      want_bound(want, sizeof want, ", SIZE at least the device's granule (%llu B) up to 1 PiB",
                 (unsigned long long)granule);
      if (!strcmp(v, "off")) c->slot = 0;
      else if (hbm_size_parse(v, &c->slot) != HBM_OK || c->slot < granule || c->slot > HBM_MAX_SIZE) goto bad;
    } else if (key == K_PROBES) {
      want_bound(want, sizeof want, " with N from 1 to 1024");
      uint64_t n;
      if (!parse_bounded(v, 1, 1024, &n)) goto bad;
      c->probes = (int)n;
    } else if (key == K_MOVES) {
      if (!strcmp(v, "auto")) c->moves = MOVES_AUTO;
      else if (!parse_onoff(v, &c->moves)) goto bad;
    } else if (key == K_PLAN) {
      if (!strcmp(v, "always")) c->plan = PLAN_ALWAYS;
      else if (!parse_onoff(v, &c->plan)) goto bad;
    } else if (key == K_TRIM) {
      if (!parse_onoff(v, &c->trim)) goto bad;
    } else if (key == K_TRUST) {
      if (!parse_onoff(v, &c->trust)) goto bad;
    } else if (key == K_SMALL) {
      if (!parse_onoff(v, &c->small)) goto bad;
    } else if (key == K_STREAMS) {
      if (!parse_onoff(v, &c->streams)) goto bad;
    } else if (key == K_VA) {
      want_bound(want, sizeof want, " with N from 1 to 64");
      if (!parse_bounded(v, 1, 64, &c->va_factor)) goto bad;
    } else if (key == K_VMM) {
      if (!parse_onoff(v, &c->vmm)) goto bad;
    } else if (key == K_SPLIT) {
      want_bound(want, sizeof want, " with F between 0 and 1, both excluded");
      double f;
      const char *end;
      if (!parse_decimal(v, &end, &f) || *end || !(f > 0 && f < 1)) goto bad;
      c->split = f;
    } else {
      goto bad;
    }
    c->given |= 1u << key;
    continue;
  bad:
    if (sep) *sep = sep_char; /* the whole setting in the message */
    if (want[0]) {
      hbm_diag_set(diag, "alloc-conf", 0, (uint64_t)(item - buf), "bad setting '%s' (expected %s)", item,
                   want);
      return HBM_EINVAL;
    }
    char known[320];
    join_keys((1u << K_COUNT) - 1, 1, known, sizeof known);
    hbm_diag_set(diag, "alloc-conf", 0, (uint64_t)(item - buf), "bad setting '%s' (expected %s)", item, known);
    return HBM_EINVAL;
  }
  return HBM_OK;
}

/* ==== per-page arrays ============================================================
 * A reservation is twice the capacity, and a run uses the pages near its
 * bottom, so the arrays cover only the pages used so far and double as more
 * are: a placement costs no page fault on the arrays past the first few. */
static inline uint32_t chunk_at(const zrange *r, uint32_t p) { return p < r->cover ? r->page[p].chunk : 0; }

static int range_grow(zrange *r, uint32_t end) {
  uint32_t n = r->cover ? r->cover : 64;
  while (n < end) n = n > UINT32_MAX / 2 ? UINT32_MAX : n * 2;
  if (n > r->npages) n = r->npages;
  zpage *pg = realloc(r->page, (size_t)n * sizeof *pg);
  if (!pg) return HBM_EHOSTMEM;
  r->page = pg;
  uint32_t *e = realloc(r->edge, (size_t)n * sizeof *e);
  if (!e) return HBM_EHOSTMEM; /* page is larger than it needs to be, no harm */
  r->edge = e;
  memset(pg + r->cover, 0, (size_t)(n - r->cover) * sizeof *pg);
  memset(e + r->cover, 0, (size_t)(n - r->cover) * sizeof *e);
  r->cover = n;
  return HBM_OK;
}
/* Makes page and edge hold pages [0, end) (end <= npages). On error
 * nothing changed. */
static inline int range_cover(zrange *r, uint32_t end) { return end <= r->cover ? HBM_OK : range_grow(r, end); }

/* ==== mapped-page counts (Fenwick tree per range) ============================== */
static void fenwick_add(zrange *r, uint32_t page, int delta) {
  if (!r->fenwick) return;
  for (uint32_t i = page + 1; i <= r->fenwick_n; i += i & -i) r->fenwick[i] += (uint32_t)delta;
}
/* Builds (or grows) the tree from page[].chunk; 0 when host memory ran out. It
 * covers the pages up to `top` (at least 1024), not the whole reservation:
 * building it walks what it covers, and a reservation is twice the capacity. */
static int fenwick_build(zrange *r) {
  if (r->fenwick && r->fenwick_n >= r->top) return 1;
  uint32_t n = r->fenwick_n ? r->fenwick_n : 1024;
  while (n < r->top) n = n > UINT32_MAX / 2 ? UINT32_MAX - 1 : n * 2;
  if (n > r->npages) n = r->npages;
  uint32_t *f = calloc((size_t)n + 1, sizeof *f);
  if (!f) return 0;
  for (uint32_t i = 1; i <= r->top; i++) f[i] += r->page[i - 1].chunk != 0;
  for (uint32_t i = 1; i <= n; i++) {
    uint32_t parent = i + (i & -i);
    if (parent <= n) f[parent] += f[i];
  }
  free(r->fenwick);
  r->fenwick = f;
  r->fenwick_n = n;
  return 1;
}
static uint32_t fenwick_prefix(const zrange *r, uint32_t pages) { /* mapped pages in [0, pages) */
  uint32_t s = 0;
  if (pages > r->fenwick_n) pages = r->fenwick_n;
  for (uint32_t i = pages; i > 0; i -= i & -i) s += r->fenwick[i];
  return s;
}

/* ==== idle chunks (the cache) ===================================================
 * A bit per chunk: chunks go idle and back whenever blocks come and go, so
 * that is all that is kept per transition. The searches (the coldest, one of
 * a size) run only when new pages are needed past the bound or the device
 * is full, and walk the bits. */
static void idle_push(zoned *z, uint32_t c) {
  z->chunks[c].idle_since = z->clock;
  z->idle_bits[c / 64] |= 1ull << (c % 64);
  z->idle_pages += z->chunks[c].npages;
  z->idle_chunks++;
}

static void idle_remove(zoned *z, uint32_t c) {
  z->idle_bits[c / 64] &= ~(1ull << (c % 64));
  z->idle_pages -= z->chunks[c].npages;
  z->idle_chunks--;
}

/* idle_remove where `was_idle` (0 or 1), idle_push where `now_idle`,
 * without a branch: where blocks span a chunk or two (select_n_b), touch
 * and untouch meet chunks going idle and back in no order a predictor
 * learns. */
static inline void idle_remove_if(zoned *z, uint32_t c, uint64_t was_idle) {
  z->idle_bits[c / 64] &= ~(was_idle << (c % 64));
  z->idle_pages -= was_idle * z->chunks[c].npages;
  z->idle_chunks -= (uint32_t)was_idle;
}
static inline void idle_push_if(zoned *z, uint32_t c, uint64_t now_idle) {
  zchunk *ch = &z->chunks[c];
  ch->idle_since = now_idle ? z->clock : ch->idle_since;
  z->idle_bits[c / 64] |= now_idle << (c % 64);
  z->idle_pages += now_idle * ch->npages;
  z->idle_chunks += (uint32_t)now_idle;
}

#define FOR_IDLE(z, c)                                                         \
  for (uint32_t w_ = 0; w_ < (z)->idle_words; w_++)                            \
    for (uint64_t b_ = (z)->idle_bits[w_]; b_; b_ &= b_ - 1)                   \
      for (uint32_t c = w_ * 64 + (uint32_t)__builtin_ctzll(b_), once_ = 1; once_; once_ = 0)

/* The idle chunk that has been idle longest, or NIL. */
static uint32_t idle_coldest(const zoned *z) {
  uint32_t best = NIL;
  FOR_IDLE(z, c) if (best == NIL || z->chunks[c].idle_since < z->chunks[best].idle_since) best = c;
  return best;
}

static uint64_t idle_va(const zoned *z, const zchunk *ch) {
  return z->ranges[ch->range].base + ((uint64_t)ch->first << z->gshift);
}

/* 1 if chunk ch belongs to the layout a followed plan replaced: a large
 * zone's, outside the plan's range. */
static inline int replaced_layout(const zoned *z, const zchunk *ch) {
  return ch->range != z->plan_range && !z->zones[z->ranges[ch->range].zone].small;
}

/* The idle chunk to stitch into a run of `want` pages that lies in a window
 * of `window` unmapped pages: one that covers the run and fits the window
 * (its other pages stay mapped, untouched), else the largest that fits
 * inside the run. Among those, under pressure: the smallest cover, the
 * coldest among equals. Holding the cache at its bound (`by_address`): the
 * highest address, so that mapped memory settles low and the holes it leaves
 * lie where placement (lowest address first) looks last; moving recently
 * freed chunks from anywhere kept new blocks landing on unmapped pages, a
 * move for every few allocations. With `replaced_only`, only chunks of the
 * layout a followed plan replaced. NIL if none. */
static uint32_t idle_fit(const zoned *z, uint32_t want, uint32_t window, int by_address, int replaced_only) {
  uint32_t cover = NIL, inside = NIL;
  FOR_IDLE(z, c) {
    const zchunk *ch = &z->chunks[c];
    if (replaced_only && !replaced_layout(z, ch)) continue;
    if (ch->npages >= want && ch->npages <= window) {
      if (cover == NIL) { cover = c; continue; }
      const zchunk *b = &z->chunks[cover];
      if (by_address ? idle_va(z, ch) > idle_va(z, b)
                     : ch->npages < b->npages || (ch->npages == b->npages && ch->idle_since < b->idle_since))
        cover = c;
    } else if (ch->npages < want) {
      if (inside == NIL) { inside = c; continue; }
      const zchunk *b = &z->chunks[inside];
      if (by_address ? idle_va(z, ch) > idle_va(z, b)
                     : ch->npages > b->npages || (ch->npages == b->npages && ch->idle_since < b->idle_since))
        inside = c;
    }
  }
  return cover != NIL ? cover : inside;
}

/* 1 if idle chunk c sat idle through a whole step: it is not part of the
 * working set the steps repeat. Before the second step mark (or in a job that
 * marks none), while twice the peak live bytes were allocated: a whole
 * working set came and went. */
static int chunk_cold(const zoned *z, uint32_t c) {
  uint64_t since = z->chunks[c].idle_since;
  if (z->life.steps_seen >= 2) return since < z->prev_step_clock;
  return z->clock - since > 2 * z->peak_live_bytes;
}

/* ==== chunks ==================================================================== */
static uint32_t chunk_new(zoned *z) {
  if (z->free_chunk != NIL) {
    uint32_t c = z->free_chunk;
    z->free_chunk = z->chunks[c].range;
    return c;
  }
  if (z->nchunks == z->chunks_cap) {
    uint32_t cap = z->chunks_cap ? z->chunks_cap * 2 : 256; /* test_hostmem_failure fills the first 256 */
    zchunk *n = realloc(z->chunks, cap * sizeof *n);
    if (!n) return NIL;
    z->chunks = n;
    uint64_t *bits = realloc(z->idle_bits, cap / 64 * sizeof *bits);
    if (!bits) return NIL;
    memset(bits + z->idle_words, 0, (cap / 64 - z->idle_words) * sizeof *bits);
    z->idle_bits = bits;
    z->idle_words = cap / 64;
    z->chunks_cap = cap;
  }
  return z->nchunks++;
}

static void chunk_put_back(zoned *z, uint32_t c) {
  z->chunks[c].npages = 0;
  z->chunks[c].range = z->free_chunk;
  z->free_chunk = c;
}

static void chunk_set_pages(zoned *z, uint32_t c, int mapped) {
  zchunk *ch = &z->chunks[c];
  zrange *r = &z->ranges[ch->range];
  r->mapped = mapped ? r->mapped + ch->npages : r->mapped - ch->npages;
  if (mapped && ch->first + ch->npages > r->top) r->top = ch->first + ch->npages;
  if (r->fenwick && r->top > r->fenwick_n && !fenwick_build(r)) { /* no host memory to grow it: counted directly */
    free(r->fenwick);
    r->fenwick = NULL;
    r->fenwick_n = 0;
  }
  for (uint32_t p = ch->first; p < ch->first + ch->npages; p++) {
    r->page[p].chunk = mapped ? c + 1 : 0;
    r->page[p].end = ch->first + ch->npages;
    fenwick_add(r, p, mapped ? 1 : -1);
  }
}

static uint64_t page_va(const zoned *z, uint32_t ri, uint32_t page) {
  return z->ranges[ri].base + ((uint64_t)page << z->gshift);
}

/* Records chunk c: the n pages from physical memory `handle`, mapped at page
 * `first` of range ri, `touched` of them touched by live blocks. */
static void chunk_install(zoned *z, uint32_t c, uint64_t handle, uint32_t ri, uint32_t first, uint32_t n,
                          uint32_t touched) {
  z->chunks[c] = (zchunk){.handle = handle, .range = ri, .first = first, .npages = n, .touched = touched};
  chunk_set_pages(z, c, 1);
  z->mapped_pages += n;
  z->chunks_created++;
  if (!touched) idle_push(z, c);
}

/* Maps a new chunk of n pages at page `first` of range ri, `touched` of
 * them touched by the block being placed. On error nothing changed. */
static int chunk_create(zoned *z, uint32_t ri, uint32_t first, uint32_t n, uint32_t touched, uint32_t *out) {
  hbm_device *dev = z->base.dev;
  uint32_t c = chunk_new(z);
  if (c == NIL) return HBM_EHOSTMEM;
  uint64_t bytes = (uint64_t)n << z->gshift, handle;
  int rc = hbm_dev_phys_create(dev, bytes, &handle);
  if (rc == HBM_OK) {
    rc = hbm_dev_map(dev, page_va(z, ri, first), bytes, handle, 0);
    if (rc != HBM_OK) hbm_dev_phys_release(dev, handle, bytes);
  }
  if (rc != HBM_OK) {
    chunk_put_back(z, c);
    return rc;
  }
  chunk_install(z, c, handle, ri, first, n, touched);
  *out = c;
  return HBM_OK;
}

/* Unmaps chunk c and gives its memory back to the device. */
static void chunk_release(zoned *z, uint32_t c) {
  hbm_device *dev = z->base.dev;
  zchunk *ch = &z->chunks[c];
  uint64_t bytes = (uint64_t)ch->npages << z->gshift;
  if (ch->touched == 0) idle_remove(z, c);
  hbm_dev_unmap(dev, page_va(z, ch->range, ch->first), bytes);
  hbm_dev_phys_release(dev, ch->handle, bytes);
  chunk_set_pages(z, c, 0);
  z->mapped_pages -= ch->npages;
  z->chunks_released++;
  chunk_put_back(z, c);
}

/* Stitching: moves idle chunk c to page `first` of range ri (unmap there,
 * map here: the same memory at a new address); `touched` of its pages are
 * touched by the block being placed. HBM_EHOSTMEM: nothing changed (the
 * device's bookkeeping is prepared before the unmap); on any other error
 * the chunk is released. */
static int chunk_move(zoned *z, uint32_t c, uint32_t ri, uint32_t first, uint32_t touched) {
  hbm_device *dev = z->base.dev;
  zchunk *ch = &z->chunks[c];
  uint64_t bytes = (uint64_t)ch->npages << z->gshift;
  if (hbm_dev_prepare(dev, 0, 1) != HBM_OK) return HBM_EHOSTMEM;
  idle_remove(z, c);
  hbm_dev_unmap(dev, page_va(z, ch->range, ch->first), bytes);
  chunk_set_pages(z, c, 0);
  int rc = hbm_dev_map(dev, page_va(z, ri, first), bytes, ch->handle, 0);
  if (rc != HBM_OK) {
    hbm_dev_phys_release(dev, ch->handle, bytes);
    z->mapped_pages -= ch->npages;
    z->chunks_released++;
    chunk_put_back(z, c);
    return rc;
  }
  ch->range = ri;
  ch->first = first;
  ch->touched = touched;
  chunk_set_pages(z, c, 1);
  z->chunks_moved++;
  if (!touched) idle_push(z, c);
  return HBM_OK;
}

/* ==== touching pages ============================================================ */
static inline void block_pages(const zoned *z, const zrange *r, uint64_t addr, uint64_t size, uint32_t *p0,
                               uint32_t *p1) {
  *p0 = (uint32_t)((addr - r->base) >> z->gshift);
  *p1 = (uint32_t)((addr + size - 1 - r->base) >> z->gshift);
}

/* The first page of the stripe that holds page p: a mask, not a division,
 * on the placement path. */
static inline uint32_t stripe_start(const zoned *z, uint32_t p) {
  return z->stripe_mask ? p & ~z->stripe_mask : p - p % z->stripe;
}

/* A block now covers pages [p0, p1]: counts, per chunk, the pages it is the
 * first to touch (an edge page another live block touches already is not
 * one). Returns how many of them are not mapped (counted touched: the caller
 * maps them). Inlined in its callers, as untouch is: every placement and
 * every free runs one, and as calls they cost select_n_b about 5% of zoned's
 * time on an AVX2 EPYC. */
static inline __attribute__((always_inline)) uint32_t touch(zoned *z, zrange *r, uint32_t p0, uint32_t p1) {
  if (p1 == p0) { /* a small block: one page, no loop */
    if (r->edge[p0]++) return 0;
    z->touched_pages++;
    uint32_t c = r->page[p0].chunk;
    if (!c) return 1;
    idle_remove_if(z, c - 1, z->chunks[c - 1].touched++ == 0);
    return 0;
  }
  uint32_t a = p0 + (r->edge[p0]++ > 0), b = p1 - (r->edge[p1]++ > 0);
  if (a > b) return 0;
  uint32_t fresh = 0, stripe = z->stripe;
  uint64_t touched = 0;
  /* Stripe by stripe, each chunk's pages counted up to the stripe's end (a
   * new chunk stays inside one; an idle one stitched past a block's end may
   * reach into the next): where each iteration starts does not wait on the
   * previous one's loads. */
  for (uint32_t s0 = stripe_start(z, a); s0 <= b; s0 += stripe) { /* no wrap: ZONED_MAX_PAGES */
    uint32_t hi = s0 + stripe - 1 < b ? s0 + stripe - 1 : b;
    for (uint32_t q = s0 > a ? s0 : a; q <= hi;) {
      uint32_t c = r->page[q].chunk;
      if (!c) {
        fresh++;
        q++;
        continue;
      }
      zchunk *ch = &z->chunks[c - 1];
      uint32_t end = r->page[q].end - 1;
      if (end > hi) end = hi;
      uint32_t n = end - q + 1;
      idle_remove_if(z, c - 1, ch->touched == 0);
      ch->touched += n;
      touched += n;
      q = end + 1;
    }
  }
  z->touched_pages += touched + fresh;
  return fresh;
}

/* The reverse of touch. Unmapped pages are skipped: only an undone placement
 * has them, and its caller uncounts them. */
static inline __attribute__((always_inline)) void untouch(zoned *z, zrange *r, uint32_t p0, uint32_t p1) {
  if (p1 == p0) { /* as in touch */
    if (--r->edge[p0]) return;
    uint32_t c = r->page[p0].chunk;
    if (!c) return;
    z->touched_pages--;
    idle_push_if(z, c - 1, --z->chunks[c - 1].touched == 0);
    return;
  }
  uint32_t a = p0 + (--r->edge[p0] > 0), b = p1 - (--r->edge[p1] > 0);
  if (a > b) return;
  uint32_t stripe = z->stripe;
  uint64_t touched = 0;
  for (uint32_t s0 = stripe_start(z, a); s0 <= b; s0 += stripe) { /* no wrap: ZONED_MAX_PAGES */
    uint32_t hi = s0 + stripe - 1 < b ? s0 + stripe - 1 : b;
    for (uint32_t q = s0 > a ? s0 : a; q <= hi;) {
      uint32_t c = r->page[q].chunk;
      if (!c) { q++; continue; }
      zchunk *ch = &z->chunks[c - 1];
      uint32_t end = r->page[q].end - 1;
      if (end > hi) end = hi;
      uint32_t n = end - q + 1;
      ch->touched -= n;
      touched += n;
      idle_push_if(z, c - 1, ch->touched == 0);
      q = end + 1;
    }
  }
  z->touched_pages -= touched;
}

/* ==== backing new pages ============================================================ */
static uint64_t device_room(const zoned *z) { /* pages the device can still give */
  const hbm_device *dev = z->base.dev;
  return (dev->caps.capacity - dev->phys_used) >> z->gshift;
}

static uint32_t stripe_pages(const zoned *z) { return z->stripe; }

/* Mapped pages may pass the most pages ever touched at once by `slack`
 * before cold idle chunks are unmapped. With `headroom`, in a job that
 * marks steps, the bound is at least that share over the peak live bytes:
 * the reserve goal's allowance spent on fewer moves and trims. */
static uint64_t cache_bound(const zoned *z) {
  uint64_t high = z->peak_touched_pages > z->touched_pages ? z->peak_touched_pages : z->touched_pages;
  if (z->marks && z->conf.headroom > 0) {
    uint64_t room = (uint64_t)((double)z->peak_live_bytes * (1.0 + z->conf.headroom)) >> z->gshift;
    if (room > high) high = room;
  }
  return high + (z->conf.slack >> z->gshift) + (uint64_t)((double)high * z->conf.slack_share);
}

/* Whether `fresh` more mapped pages would stand past the cache's bound by
 * more than `beyond` pages: the one test moves, trimming, reclaim and a
 * drifting settled layout each make, with their own margin. */
static int past_bound(const zoned *z, uint64_t fresh, uint64_t beyond) {
  return z->mapped_pages + fresh > cache_bound(z) + beyond;
}

/* moves:auto holds the cache at its bound, in a job that marks steps,
 * while it follows no plan and its steps have not settled: the bound then
 * costs calls only in the steps a plan is learnt from, or, where steps
 * differ, for as long as they do. In a job that marks none, only for runs of
 * a stripe or more (a large block past the bound, the most memory per call;
 * moves for every small run thrash). */
static int moves_now(const zoned *z, int big_run) {
  if (z->conf.moves != MOVES_AUTO) return z->conf.moves == MOVES_ON;
  return z->marks ? !z->following && !z->settled : big_run;
}

/* While a plan is followed, an idle chunk outside its range (large zones
 * only) is the cache of the layout the plan replaced, or NIL. */
static uint32_t idle_outside_plan(const zoned *z) {
  FOR_IDLE(z, c) if (replaced_layout(z, &z->chunks[c])) return c;
  return NIL;
}

/* Unmapped pages right after page p of range r, up to `most`. */
static uint32_t unmapped_after(const zrange *r, uint32_t p, uint32_t most) {
  uint32_t n = 0;
  while (n < most && p + 1 + n < r->npages && !chunk_at(r, p + 1 + n)) n++;
  return n;
}

/* The unmapped pages around the run [q, q + want) within its stripe:
 * [*lo, *hi). No live block touches an unmapped page, so a chunk may cover
 * them. */
static void unmapped_window(const zoned *z, const zrange *r, uint32_t q, uint32_t want, uint32_t *lo, uint32_t *hi) {
  uint32_t s0 = stripe_start(z, q), s1 = (uint64_t)s0 + z->stripe < r->npages ? s0 + z->stripe : r->npages;
  uint32_t a = q, b = q + want;
  while (a > s0 && !chunk_at(r, a - 1)) a--;
  while (b < s1 && !chunk_at(r, b)) b++;
  *lo = a;
  *hi = b;
}

/* Room on z->undo for one more chunk, made before the chunk is. */
static int undo_room(zoned *z) {
  if (z->nundo < z->undo_cap) return HBM_OK;
  uint32_t cap = z->undo_cap ? z->undo_cap * 2 : 64;
  uint32_t *u = realloc(z->undo, cap * sizeof *u);
  if (!u) return HBM_EHOSTMEM;
  z->undo = u;
  z->undo_cap = cap;
  return HBM_OK;
}

/* Stitches idle chunk c into the run of `want` unmapped pages at page q of
 * range ri, whose unmapped window ends at page hi: a chunk larger than the
 * run covers unmapped pages beside it too. *touched: the run's pages it
 * covers. On error as chunk_move. */
static int stitch(zoned *z, uint32_t c, uint32_t ri, uint32_t q, uint32_t want, uint32_t hi, uint32_t *touched) {
  uint32_t n = z->chunks[c].npages, at = n <= want || q + n <= hi ? q : hi - n;
  *touched = n < want ? n : want;
  return chunk_move(z, c, ri, at, *touched);
}

/* Backs the run of `run` unmapped pages at page q of range ri (ending at
 * the block's last page when run_ends_block), a stripe at a time:
 *   - device full: stitch an idle chunk here (the smallest that covers the
 *     piece, spilling into free pages after the block, else the largest
 *     that fits inside it), else unmap the coldest idle chunk;
 *   - cache past its bound: while a plan is followed, stitch the idle
 *     chunks of the layout it replaced into the plan's range, else unmap
 *     them; unmap idle chunks that sat idle a whole
 *     step; with moves (moves_now), then stitch an idle chunk here as when full (the
 *     highest-addressed that fits the unmapped pages around the piece),
 *     else unmap the coldest; without moves, in a job that marks no steps,
 *     unmap idle chunks (the highest-addressed first) while the new pages
 *     would raise the device's memory in use past its high-water mark: the reserve then
 *     peaks only once no chunk sits idle, whatever the chunks' ages;
 *   - then a new chunk.
 * The caller checked that the device holds the run with every idle chunk
 * gone. Chunks it maps go on z->undo. */
static int back_run(zoned *z, uint32_t ri, uint32_t q, uint32_t run, int run_ends_block) {
  const hbm_device *dev = z->base.dev;
  uint32_t stripe = stripe_pages(z);
  int moves = moves_now(z, run >= stripe);
  while (run > 0) {
    uint32_t left = stripe - q % stripe, want = run < left ? run : left, c, lo = q, hi = q + want;
    int rc = undo_room(z);
    if (rc != HBM_OK) return rc;
    int full = device_room(z) < want && z->idle_chunks;
    int over = !full && past_bound(z, want, 0) && z->idle_chunks;
    if (over && z->following && (c = idle_outside_plan(z)) != NIL) {
      /* The layout the plan replaces: its idle chunks are stitched into the
       * plan's range (two calls, where giving one back and mapping a new one
       * cost four), else given back. */
      uint32_t m = NIL;
      if (ri == z->plan_range) {
        unmapped_window(z, &z->ranges[ri], q, want, &lo, &hi);
        m = idle_fit(z, want, hi - lo, 1, 1);
      }
      if (m == NIL) {
        z->cold_releases++;
        chunk_release(z, c);
        continue;
      }
      uint32_t touched;
      if ((rc = stitch(z, m, ri, q, want, hi, &touched)) != HBM_OK) return rc;
      z->switch_moves++;
      q += touched;
      run -= touched;
      z->undo[z->nundo++] = m;
      continue;
    }
    if (over && chunk_cold(z, c = idle_coldest(z))) {
      z->cold_releases++;
      chunk_release(z, c);
      continue;
    }
    if (over && !moves && !z->marks && dev->phys_used + ((uint64_t)want << z->gshift) > dev->peak_phys_used) {
      z->peak_releases++;
      chunk_release(z, idle_fit(z, 1, UINT32_MAX, 1, 0)); /* the highest-addressed */
      continue;
    }
    if (full || (over && moves)) {
      if (full && want == run && run_ends_block) /* spill into free pages after the block */
        hi += unmapped_after(&z->ranges[ri], q + run - 1, stripe);
      else if (!full)
        unmapped_window(z, &z->ranges[ri], q, want, &lo, &hi);
      c = idle_fit(z, want, hi - lo, !full, 0);
      if (c == NIL) {
        if (full) z->pressure_releases++; else z->bound_releases++;
        chunk_release(z, idle_coldest(z));
        continue;
      }
      uint32_t touched;
      if ((rc = stitch(z, c, ri, q, want, hi, &touched)) != HBM_OK) return rc;
      if (!full) z->bound_moves++;
      q += touched;
      run -= touched;
    } else {
      /* A device with room may still lack one piece that large (the host
       * device's memory file fragments): smaller pieces then. */
      while ((rc = chunk_create(z, ri, q, want, want, &c)) == HBM_ENOMEM && want > 1 && device_room(z) >= want)
        want /= 2;
      if (rc != HBM_OK) return rc;
      q += want;
      run -= want;
    }
    z->undo[z->nundo++] = c;
  }
  return HBM_OK;
}

/* Backs every unmapped page of [p0, p1] in range ri. On error the chunks it
 * mapped are released again (their pages were touched only by this block). */
static int back_block(zoned *z, uint32_t ri, uint32_t p0, uint32_t p1) {
  int rc = HBM_OK;
  z->nundo = 0;
  for (uint32_t q = p0; q <= p1 && rc == HBM_OK;) {
    const zrange *r = &z->ranges[ri];
    if (r->page[q].chunk) { /* mapped: skip to where its chunk ends */
      q = r->page[q].end;
      continue;
    }
    uint32_t n = 1;
    while (q + n <= p1 && !r->page[q + n].chunk) n++;
    rc = back_run(z, ri, q, n, q + n - 1 == p1);
    q += n;
  }
  if (rc != HBM_OK)
    for (uint32_t i = 0; i < z->nundo; i++)
      if (z->chunks[z->undo[i]].npages) {
        z->chunks[z->undo[i]].touched = 0;
        idle_push(z, z->undo[i]);
        chunk_release(z, z->undo[i]);
      }
  return rc;
}

/* ==== virtual space ===================================================================
 * Taken from the device in arenas of ZONED_ARENA_RANGES zone ranges (one
 * reserve call each) and carved without further calls. */
static uint64_t range_bytes_of(const zoned *z) {
  uint64_t size = hbm_align_up(z->capacity * z->conf.va_factor, z->granule);
  if (size >> z->gshift > ZONED_MAX_PAGES) size = (uint64_t)ZONED_MAX_PAGES << z->gshift;
  return size;
}
static inline uint64_t range_bytes(const zoned *z) { return z->range_size; }

static int va_take(zoned *z, uint64_t size, uint64_t *base) {
  if (!z->narenas || z->arena_used + size > z->arena_size) {
    uint64_t bytes = range_bytes(z) * ZONED_ARENA_RANGES, at;
    if (bytes < size) bytes = size;
    uint64_t *na = realloc(z->arenas, (z->narenas + 1) * 2 * sizeof *na);
    if (!na) return HBM_EHOSTMEM;
    z->arenas = na;
    int rc = hbm_dev_reserve(z->base.dev, bytes, &at);
    if (rc != HBM_OK) return rc;
    z->arenas[2 * z->narenas] = at;
    z->arenas[2 * z->narenas + 1] = bytes;
    z->narenas++;
    z->arena_base = at;
    z->arena_size = bytes;
    z->arena_used = 0;
  }
  *base = z->arena_base + z->arena_used;
  z->arena_used += size;
  return HBM_OK;
}

static int range_add(zoned *z, uint32_t zi, uint32_t *out) {
  uint64_t size = range_bytes(z);
  zrange *nr = realloc(z->ranges, (z->nranges + 1) * sizeof *nr);
  if (!nr) return HBM_EHOSTMEM;
  z->ranges = nr;
  uint32_t *no = realloc(z->order, (z->nranges + 1) * sizeof *no);
  if (!no) return HBM_EHOSTMEM;
  z->order = no;
  uint64_t *nb = realloc(z->order_base, (z->nranges + 1) * sizeof *nb);
  if (!nb) return HBM_EHOSTMEM;
  z->order_base = nb;
  zzone *zone = &z->zones[zi];
  uint32_t *zr = realloc(zone->ranges, (zone->nranges + 1) * sizeof *zr);
  if (!zr) return HBM_EHOSTMEM;
  zone->ranges = zr;
  zrange r = {.size = size, .npages = (uint32_t)(size >> z->gshift), .zone = zi};
  int rc = range_cover(&r, 1);
  if (rc == HBM_OK) rc = va_take(z, size, &r.base);
  if (rc == HBM_OK && hbm_vspace_create(r.base, size, ZONED_UNIT, &r.vs) != HBM_OK) rc = HBM_EHOSTMEM;
  if (rc != HBM_OK) { /* carved space is not handed back: it is only address space */
    free(r.page);
    free(r.edge);
    return rc;
  }
  uint32_t ri = z->nranges++, k = ri;
  z->ranges[ri] = r;
  while (k > 0 && z->order_base[k - 1] > r.base) {
    z->order[k] = z->order[k - 1];
    z->order_base[k] = z->order_base[k - 1];
    k--;
  }
  z->order[k] = ri;
  z->order_base[k] = r.base;
  zone->ranges[zone->nranges++] = ri;
  *out = ri;
  return HBM_OK;
}

/* The range holding addr, or NIL. */
static uint32_t range_of(const zoned *z, uint64_t addr) {
  uint32_t lo = 0, hi = z->nranges;
  /* Every free asks: the few ranges of a run are counted without a branch
   * (a binary search over them mispredicts), many are searched. */
  if (hi <= 16) {
    for (uint32_t k = 0; k < hi; k++) lo += z->order_base[k] <= addr;
  } else {
    while (lo < hi) {
      uint32_t mid = (lo + hi) / 2;
      if (z->order_base[mid] <= addr) lo = mid + 1; else hi = mid;
    }
  }
  if (lo == 0) return NIL;
  const zrange *r = &z->ranges[z->order[lo - 1]];
  return addr - r->base < r->size ? z->order[lo - 1] : NIL;
}

static int zone_get(zoned *z, int life, int small, int stream, uint32_t *out) {
  for (uint32_t i = 0; i < z->nzones; i++) {
    const zzone *zn = &z->zones[i];
    if (zn->life == life && zn->small == small && zn->stream == stream) { *out = i; return HBM_OK; }
  }
  zzone *nz = realloc(z->zones, (z->nzones + 1) * sizeof *nz);
  if (!nz) return HBM_EHOSTMEM;
  z->zones = nz;
  z->zones[z->nzones] = (zzone){life, small, stream, NULL, 0};
  *out = z->nzones++;
  return HBM_OK;
}

/* ==== re-chunking under pressure ====================================================
 * A chunk partly used by live blocks holds all of its memory: a device
 * unmaps and frees a chunk only whole (cuMemUnmap, aclrtUnmapMem). When the
 * device is too full for a request, such a chunk is replaced: the pages live
 * blocks touch are copied into new chunks of just their size, mapped back
 * at the same addresses (blocks keep their addresses and contents), and the
 * old chunk is freed. It costs a copy of those pages and a few calls, so it
 * runs only when the alternative is a failed request.
 *
 * It needs room on the device for the used pages while the old chunk still
 * holds them. Without that room the pages wait in host memory instead
 * (staged: copied out, the old chunk freed, the new chunks made from its
 * memory and filled back), so even a device with no free granule can give
 * back what partly used chunks hold. A staged re-chunk that cannot remake
 * its chunks (only a device failing on memory it just gave back) has lost
 * data and says so (HBM_ECORRUPT). */
enum { RECHUNK_MAX_RUNS = 64 };

/* Gives back the records of runs from..n-1, the last taken first: the free
 * list is as it was. Run 0's is the old chunk's own (from 1: it stays). */
static void rechunk_records_back(zoned *z, uint32_t from, uint32_t n, const uint32_t *slot) {
  while (n > from) chunk_put_back(z, slot[--n]);
}

/* The records for a re-chunk's n runs: run 0 keeps the old chunk c's own,
 * the others take new ones. Taken before the re-chunk's first device call,
 * so that host memory running out costs no call: HBM_EHOSTMEM with none
 * taken. */
static int rechunk_records(zoned *z, uint32_t c, uint32_t n, uint32_t *slot) {
  slot[0] = c;
  for (uint32_t i = 1; i < n; i++) {
    if ((slot[i] = chunk_new(z)) == NIL) {
      rechunk_records_back(z, 1, i, slot);
      return HBM_EHOSTMEM;
    }
  }
  return HBM_OK;
}

/* The used pages of the old chunk go to host memory, the chunk is freed,
 * and the runs are made, mapped at their addresses and filled back. */
static int rechunk_staged(zoned *z, uint32_t c, uint32_t nruns, const uint32_t *first, const uint32_t *len) {
  hbm_device *dev = z->base.dev;
  zchunk old = z->chunks[c];
  uint64_t bytes = (uint64_t)old.npages << z->gshift, va = page_va(z, old.range, old.first), used = 0;
  uint32_t slot[RECHUNK_MAX_RUNS];
  for (uint32_t i = 0; i < nruns; i++) used += (uint64_t)len[i] << z->gshift;
  if (!dev->ops->to_host || !dev->ops->from_host) return HBM_EUNSUPPORTED;
  if (z->stage_bytes < used) { /* nothing in it to keep: no realloc, whose copy touches every page */
    free(z->stage);
    z->stage_bytes = 0;
    if (!(z->stage = malloc(used))) return HBM_EHOSTMEM;
    z->stage_bytes = used;
  }
  /* Records, and the device's bookkeeping for the calls after the old
   * chunk goes, first: if they cannot be had, nothing changed. */
  if (rechunk_records(z, c, nruns, slot) != HBM_OK) return HBM_EHOSTMEM;
  if (hbm_dev_prepare(dev, nruns, nruns) != HBM_OK) {
    rechunk_records_back(z, 1, nruns, slot);
    return HBM_EHOSTMEM;
  }
  uint64_t off = 0;
  for (uint32_t i = 0; i < nruns; off += (uint64_t)len[i] << z->gshift, i++) {
    int rc = hbm_dev_to_host(dev, (char *)z->stage + off, page_va(z, old.range, first[i]), (uint64_t)len[i] << z->gshift);
    if (rc != HBM_OK) {
      rechunk_records_back(z, 1, nruns, slot);
      return rc;
    }
  }
  hbm_dev_unmap(dev, va, bytes);
  hbm_dev_phys_release(dev, old.handle, bytes);
  chunk_set_pages(z, c, 0);
  z->mapped_pages -= old.npages;
  z->chunks_released++;
  off = 0;
  for (uint32_t i = 0; i < nruns; off += (uint64_t)len[i] << z->gshift, i++) {
    uint64_t at = page_va(z, old.range, first[i]), n = (uint64_t)len[i] << z->gshift, handle;
    int rc = hbm_dev_phys_create(dev, n, &handle), created = rc == HBM_OK, mapped = 0;
    if (created && (rc = hbm_dev_map(dev, at, n, handle, 0)) == HBM_OK) {
      mapped = 1;
      rc = hbm_dev_from_host(dev, at, (char *)z->stage + off, n);
    }
    if (rc != HBM_OK) {
      /* The memory given back was taken, or the device failed: the blocks
       * on these pages lost their data. The records stay true to the device
       * (what was made is kept, the rest given back), so the heap can still
       * be checked, which names the unbacked pages, and destroyed. */
      if (mapped) chunk_install(z, slot[i], handle, old.range, first[i], len[i], len[i]);
      else if (created) hbm_dev_phys_release(dev, handle, n);
      rechunk_records_back(z, i + (uint32_t)mapped, nruns, slot); /* the old chunk's own too, where run 0 was not made */
      return hbm_report_error(HBM_ECORRUPT, "zoned: staged re-chunking could not remake %#llx", (unsigned long long)at);
    }
    chunk_install(z, slot[i], handle, old.range, first[i], len[i], len[i]);
  }
  z->rechunks++;
  z->staged_rechunks++;
  return HBM_OK;
}

/* Undoes a re-chunk of nruns runs that did not happen: gives back the
 * memory of the first `made` and every run's new record (slot 0 is the old
 * chunk's own, which stays). */
static void rechunk_unmake(zoned *z, uint32_t made, uint32_t nruns, const uint32_t *slot, const uint64_t *handle,
                           const uint32_t *len) {
  for (uint32_t i = 0; i < made; i++) hbm_dev_phys_release(z->base.dev, handle[i], (uint64_t)len[i] << z->gshift);
  rechunk_records_back(z, 1, nruns, slot);
}

/* Re-chunks chunk c in place (new memory first, the used pages copied over
 * from the old, then the old given back), or through host memory when the
 * device lacks room for both, or (where the device can) when both at once
 * would take the device's memory in use past `ceiling` (0: no limit). */
static int rechunk(zoned *z, uint32_t c, const uint8_t *touched_page, uint64_t ceiling) {
  hbm_device *dev = z->base.dev;
  zchunk old = z->chunks[c];
  uint64_t bytes = (uint64_t)old.npages << z->gshift, va = page_va(z, old.range, old.first);
  if (!z->scratch_va) {
    int rc = va_take(z, z->conf.chunk, &z->scratch_va);
    if (rc != HBM_OK) return rc;
  }
  uint32_t first[RECHUNK_MAX_RUNS], len[RECHUNK_MAX_RUNS], slot[RECHUNK_MAX_RUNS], nruns = 0;
  uint64_t handle[RECHUNK_MAX_RUNS];
  for (uint32_t q = old.first; q < old.first + old.npages;) {
    if (!touched_page[q]) { q++; continue; }
    uint32_t n = 1;
    while (q + n < old.first + old.npages && touched_page[q + n]) n++;
    if (nruns == RECHUNK_MAX_RUNS) return HBM_EBUSY;
    first[nruns] = q;
    len[nruns++] = n;
    q += n;
  }
  if (nruns == 0) return HBM_EINVAL; /* an idle chunk: released, not re-chunked */
  int no_room = device_room(z) < old.touched;
  if (no_room || (ceiling && dev->phys_used + ((uint64_t)old.touched << z->gshift) > ceiling)) {
    int rc = rechunk_staged(z, c, nruns, first, len);
    if (no_room || rc != HBM_EUNSUPPORTED) return rc;
    /* A device that cannot stage through host memory: in place, past the ceiling. */
  }
  /* The device's bookkeeping for every call up to the end (and for mapping
   * the old chunk back), and the records, before any call: if they cannot be
   * had, nothing changed and no call was made. Then the new memory; past that
   * only a device refusing a call could stop it, and then the old chunk goes
   * back in place. */
  if (hbm_dev_prepare(dev, nruns, nruns + 2) != HBM_OK || rechunk_records(z, c, nruns, slot) != HBM_OK)
    return HBM_EHOSTMEM;
  int rc = HBM_OK;
  uint32_t made = 0;
  for (; made < nruns; made++)
    if ((rc = hbm_dev_phys_create(dev, (uint64_t)len[made] << z->gshift, &handle[made])) != HBM_OK) break;
  /* The old memory is seen through the scratch window while the new is
   * mapped in its place and filled from it. The records change only once
   * every call has succeeded: where the device refuses one (another process
   * took the memory, a driver error), the old chunk goes back in place and
   * nothing changed. */
  if (rc == HBM_OK) rc = hbm_dev_map(dev, z->scratch_va, bytes, old.handle, 0);
  if (rc != HBM_OK) {
    rechunk_unmake(z, made, nruns, slot, handle, len);
    return rc;
  }
  int moved_out = (rc = hbm_dev_unmap(dev, va, bytes)) == HBM_OK;
  uint32_t mapped = 0;
  for (; rc == HBM_OK && mapped < nruns; mapped++) {
    uint64_t at = page_va(z, old.range, first[mapped]), n = (uint64_t)len[mapped] << z->gshift;
    if ((rc = hbm_dev_map(dev, at, n, handle[mapped], 0)) != HBM_OK) break;
    rc = hbm_dev_copy(dev, at, z->scratch_va + ((uint64_t)(first[mapped] - old.first) << z->gshift), n);
  }
  if (rc != HBM_OK) {
    for (uint32_t i = 0; i < mapped; i++) hbm_dev_unmap(dev, page_va(z, old.range, first[i]), (uint64_t)len[i] << z->gshift);
    if (moved_out && hbm_dev_map(dev, va, bytes, old.handle, 0) != HBM_OK)
      return hbm_report_error(HBM_ECORRUPT, "zoned: re-chunking %#llx was refused part way, and its old chunk could not be mapped back",
                              (unsigned long long)va);
    hbm_dev_unmap(dev, z->scratch_va, bytes);
    rechunk_unmake(z, nruns, nruns, slot, handle, len);
    return rc;
  }
  chunk_set_pages(z, c, 0);
  z->mapped_pages -= old.npages;
  for (uint32_t i = 0; i < nruns; i++) chunk_install(z, slot[i], handle[i], old.range, first[i], len[i], len[i]);
  hbm_dev_unmap(dev, z->scratch_va, bytes);
  hbm_dev_phys_release(dev, old.handle, bytes);
  z->chunks_released++;
  z->rechunks++;
  return HBM_OK;
}

typedef struct mark_ctx { zoned *z; const zrange *r; uint8_t *touched; } mark_ctx;
static int mark_touched(void *arg, uint64_t addr, uint64_t size, int live) {
  mark_ctx *m = arg;
  if (live) {
    uint32_t p0, p1;
    block_pages(m->z, m->r, addr, size, &p0, &p1);
    memset(m->touched + p0, 1, (size_t)(p1 - p0) + 1);
  }
  return 0;
}

static void release_idle(zoned *z) {
  while (z->idle_chunks) {
    z->pressure_releases++;
    chunk_release(z, idle_coldest(z));
  }
}

/* The idle pages that count as room for new ones against the cache's bound.
 * While a plan is followed, its range's idle chunks are not: they are where
 * the step's next planned blocks land, so they stay mapped and no move takes
 * them (docs/zoned.md, "Step plans"). Counting them let partly used chunks
 * elsewhere keep their unused pages on top of the plan's footprint. */
__attribute__((noinline)) static uint64_t idle_outside_plan_pages(const zoned *z) {
  uint64_t room = 0;
  FOR_IDLE(z, c) if (z->chunks[c].range != z->plan_range) room += z->chunks[c].npages;
  return room;
}
static inline uint64_t idle_room(const zoned *z) {
  return z->following ? idle_outside_plan_pages(z) : z->idle_pages;
}

/* What reclaim works towards: room on the device for `fresh` pages, or
 * (`bound`) the mapped total, with them, down to the cache's bound (idle
 * chunks count as room: moves stitch them in). */
static int short_of(const zoned *z, uint64_t fresh, int bound) {
  return bound ? past_bound(z, fresh, idle_room(z)) : device_room(z) < fresh;
}

/* How far past the cache's bound the mapped total may stand before trimming
 * or a drifted settled layout acts: 1% of the touched peak, half the reserve
 * goal's 2% (acting costs copies and calls, so small waste is left alone). */
static uint64_t bound_tolerance(const zoned *z) { return z->peak_touched_pages / 100; }

/* Trimming. While moves hold the cache at its bound in a job that marks steps
 * (the steps a plan is learnt from, or steps that differ), idle chunks are
 * stitched into new pages, but a chunk that live blocks use only in part
 * keeps its unused pages mapped: on generated jobs whose steps differ in
 * block sizes, that was most of what the reserve held over peak live while
 * the steps were learnt (docs/zoned.md). So when new pages would raise the
 * device's high-water mark and partly used chunks leave more than the
 * tolerance (1% of the touched peak) unused, they are re-chunked first, the
 * most unused first, until the mapped total is back at the bound.
 * While a plan is followed the same holds outside the plan's range (its
 * pages stay mapped: idle_room): in row 50 of `hbm bench sweep --seed 3`,
 * a chunk with one page in use kept 30 MiB unused on top of the plan's
 * footprint from the plan's first step to the last.
 * A job that marks no steps has no steps to learn, and the high-water rule
 * gives back only idle chunks: partly used ones held random jobs 25-44% over
 * peak live. There trimming acts unless moves:off, past half the reserve
 * goal's whole allowance, max(1% of the touched peak, 32 MiB): at 1% alone
 * select_n_b (3,000 events), inside its allowance already, trimmed for more
 * time than the speed goal has to spare. */
static uint64_t trim_tolerance(const zoned *z) {
  uint64_t share = bound_tolerance(z), least = (32ull << 20) >> z->gshift;
  return z->marks || share > least ? share : least;
}
static int trim_now(const zoned *z, uint32_t fresh) {
  const hbm_device *dev = z->base.dev;
  return z->conf.trim && (z->marks ? moves_now(z, 0) || (z->following && z->conf.moves != MOVES_OFF)
                                   : z->conf.moves != MOVES_OFF) &&
         past_bound(z, fresh, idle_room(z) + trim_tolerance(z)) &&
         dev->phys_used + ((uint64_t)fresh << z->gshift) > dev->peak_phys_used;
}

/* Makes room for `fresh` pages (short_of) by re-chunking partly used
 * chunks, the most idle memory first: those the room left can hold directly
 * first, then through host memory. A chunk that cannot be re-chunked (more
 * runs than a re-chunk takes, a device that cannot stage) is passed over for
 * the next. HBM_EHOSTMEM when host memory ran out (chunks re-chunked before
 * that keep their blocks' addresses and contents), HBM_ECORRUPT when a
 * re-chunk lost data; else HBM_OK, having made what room it could. */
static int reclaim(zoned *z, uint64_t fresh, int bound) {
  if (!z->nranges || !short_of(z, fresh, bound)) return HBM_OK;
  /* One page map for every range, as long as the most pages a range covers
   * (no chunk and no live block lies past its range's cover, the block
   * being placed included), not the whole reservation: clearing that cost
   * more than the rest of reclaim. And a bit per chunk record for those
   * passed over. Both had before any change: running out of host memory is
   * not the same as no room. A re-chunk's new records are used in full, so
   * they are never candidates, and the bits cover only the records there
   * are now. */
  const uint32_t nrecords = z->nchunks;
  uint32_t cover = 1;
  for (uint32_t ri = 0; ri < z->nranges; ri++)
    if (z->ranges[ri].cover > cover) cover = z->ranges[ri].cover;
  const size_t map_bytes = hbm_align_up(cover, sizeof(uint64_t)), words = ((size_t)nrecords + 63) / 64;
  uint8_t *touched = malloc(map_bytes + words * sizeof(uint64_t));
  if (!touched) return HBM_EHOSTMEM;
  uint64_t *passed = (uint64_t *)(void *)(touched + map_bytes);
  memset(passed, 0, words * sizeof(uint64_t));
  int rc = HBM_OK;
  for (uint32_t ri = 0; ri < z->nranges && short_of(z, fresh, bound) && rc == HBM_OK; ri++) {
    if (bound && z->following && ri == z->plan_range) continue; /* its pages stay mapped (idle_room) */
    zrange *r = &z->ranges[ri];
    memset(touched, 0, r->cover);
    mark_ctx m = {z, r, touched};
    hbm_vspace_walk(r->vs, mark_touched, &m);
    while (short_of(z, fresh, bound)) {
      uint32_t best = NIL, best_idle = 0, staged = NIL, staged_idle = 0;
      uint64_t room = device_room(z);
      for (uint32_t c = 0; c < nrecords; c++) {
        const zchunk *ch = &z->chunks[c];
        if (ch->range != ri || !ch->touched || ch->touched == ch->npages || (passed[c / 64] >> (c % 64) & 1)) continue;
        uint32_t idle = ch->npages - ch->touched;
        if (ch->touched <= room && idle > best_idle) { best = c; best_idle = idle; }
        if (ch->touched > room && idle > staged_idle) { staged = c; staged_idle = idle; }
      }
      if (best == NIL) best = staged;
      if (best == NIL) break;
      /* Trimming holds the device's high-water mark: a re-chunk in place,
       * new memory before the old goes, must not raise it on the way. */
      int r2 = rechunk(z, best, touched, bound ? z->base.dev->peak_phys_used : 0);
      /* Host memory short, or blocks' data lost (the device refused a call
       * part way): the request must say so. Anything else leaves that chunk
       * as it was: on to the next. */
      if (r2 == HBM_EHOSTMEM || r2 == HBM_ECORRUPT) {
        rc = r2;
        break;
      }
      if (!z->scratch_va) break; /* no address space for the window any re-chunk in place needs */
      if (r2 != HBM_OK) passed[best / 64] |= 1ull << (best % 64);
    }
  }
  free(touched);
  return rc;
}

/* ==== placement ========================================================================== */
/* The pages of [p0, p1] not mapped, three ways: walked a chunk at a time; from the tree
 * (built); and, where every page below the top is mapped (mapped == top),
 * from the top alone. zoned_check holds all three to a recount. */
static uint64_t unmapped_counted(const zrange *r, uint32_t p0, uint32_t p1) {
  uint64_t fresh = 0;
  if (p1 >= r->cover) { /* nothing is mapped from cover on */
    if (p0 >= r->cover) return (uint64_t)(p1 - p0 + 1);
    fresh = p1 - r->cover + 1;
    p1 = r->cover - 1;
  }
  for (uint32_t q = p0; q <= p1;) /* a mapped chunk at a time */
    if (r->page[q].chunk) {
      q = r->page[q].end;
    } else {
      fresh++;
      q++;
    }
  return fresh;
}
static uint64_t unmapped_tree(const zrange *r, uint32_t p0, uint32_t p1) {
  return (uint64_t)(p1 - p0 + 1) - (fenwick_prefix(r, p1 + 1) - fenwick_prefix(r, p0));
}
static uint64_t unmapped_above_top(const zrange *r, uint32_t p0, uint32_t p1) {
  return p1 < r->top ? 0 : (uint64_t)(p1 - (p0 > r->top ? p0 : r->top) + 1);
}

/* Placement cost: the pages of [hole, hole + size) not mapped yet. */
static uint64_t fresh_cost(void *arg, uint64_t hole, uint64_t hole_size, uint64_t size) {
  const zoned *z = ((void **)arg)[0];
  zrange *r = ((void **)arg)[1];
  uint32_t p0, p1;
  block_pages(z, r, hole, size, &p0, &p1);
  if (r->mapped == r->top) return unmapped_above_top(r, p0, p1); /* no tree walk */
  /* The tree pays for itself once counting pages one by one has cost about
   * what building it does (a short run never builds it), and only for spans
   * of more than a few pages. */
  uint64_t build_cost = 64 * (uint64_t)(r->top > 1024 ? r->top : 1024);
  if (p1 - p0 < 32 || (!r->fenwick && r->counted < build_cost) || !fenwick_build(r)) {
    r->counted += p1 - p0 + 1;
    return unmapped_counted(r, p0, p1);
  }
  return unmapped_tree(r, p0, p1);
}

/* Backs the `fresh` pages of [p0, p1] that the block just placed at addr
 * touched first and that are not mapped: out of line, as a settled layout
 * rarely has any. On error the block is untouched and unplaced again. */
static __attribute__((noinline)) int back_fresh(zoned *z, uint32_t ri, uint64_t addr, uint32_t p0, uint32_t p1,
                                                uint32_t fresh, int pressed) {
  /* A settled layout repeats: one that needs new pages past the bound while
   * chunks sit idle has drifted, and the bound is held again (moves, trims)
   * until the next step mark decides anew. */
  int settled = z->settled, drifted = z->drifted;
  if (z->settled && z->idle_chunks && past_bound(z, fresh, bound_tolerance(z))) {
    z->settled = 0;
    z->drifted = 1;
    z->unsettles++;
  }
  int rc = HBM_OK;
  if (pressed && device_room(z) < fresh) rc = reclaim(z, fresh, 0);
  else if (trim_now(z, fresh)) {
    z->trims++;
    rc = reclaim(z, fresh, 1);
  }
  if (rc == HBM_OK) rc = device_room(z) + z->idle_pages >= fresh ? back_block(z, ri, p0, p1) : HBM_ENOMEM;
  if (rc == HBM_EHOSTMEM && settled != z->settled) { /* the request did not happen: nor did the drift */
    z->settled = settled;
    z->drifted = drifted;
    z->unsettles--;
  }
  if (rc != HBM_OK) {
    zrange *r = &z->ranges[ri];
    untouch(z, r, p0, p1);
    z->touched_pages -= fresh;
    hbm_vspace_free(r->vs, addr, NULL, NULL);
  }
  return rc;
}

/* Backs the pages of the block just placed at addr of range ri (with
 * `pressed`, partly used chunks may be re-chunked to make room). On error
 * the block is unplaced again. Inlined in the placement path, every
 * placement runs it. */
static inline __attribute__((always_inline)) int back_placed(zoned *z, uint32_t ri, uint64_t addr, uint64_t block,
                                                             int pressed) {
  zrange *r = &z->ranges[ri];
  uint32_t p0, p1;
  block_pages(z, r, addr, block, &p0, &p1);
  /* Backing it may map up to a stripe past its last page (back_run). */
  uint64_t reach = (uint64_t)p1 + 1 + z->stripe;
  if (range_cover(r, reach < r->npages ? (uint32_t)reach : r->npages) != HBM_OK) {
    hbm_vspace_free(r->vs, addr, NULL, NULL);
    return HBM_EHOSTMEM;
  }
  uint32_t fresh = touch(z, r, p0, p1);
  if (fresh) {
    int rc = back_fresh(z, ri, addr, p0, p1, fresh, pressed);
    if (rc != HBM_OK) return rc;
  }
  if (z->touched_pages > z->peak_touched_pages) z->peak_touched_pages = z->touched_pages;
  if (z->touched_pages > z->step_peak_touched) z->step_peak_touched = z->touched_pages;
  if (z->mapped_pages > z->step_peak_mapped) z->step_peak_mapped = z->mapped_pages;
  return HBM_OK;
}

/* Places a block in range ri and backs its pages. `pressed`: the device was
 * too full for the first try, so the cache goes first (a block that covered
 * part of an idle chunk would pin the rest of it), every hole is a
 * candidate, and partly used chunks may be re-chunked. Then any request up
 * to largest_free succeeds: a hole at a zone's top needs no more new pages
 * than the request has. On error nothing changed apart from chunks unmapped
 * and re-chunked to make room.
 *
 * The first try of every request runs zoned_alloc -> vmm_alloc -> zone_alloc
 * -> place_in -> back_placed inlined into one function (the *_inline
 * bodies; the pressed, slot and planned paths call the out-of-line copies):
 * as five calls, their entries and exits cost select_n_b about 9% of
 * zoned's time per event on an AVX2 EPYC. */
static inline __attribute__((always_inline)) int place_in_inline(zoned *z, uint32_t ri, uint64_t size, int pressed,
                                                                  uint32_t user, uint64_t *addr, uint64_t *block) {
  /* Room for the placement and for taking it back (its pages may not be
   * backed), before anything changes. */
  if (hbm_vspace_reserve(z->ranges[ri].vs) != HBM_OK) return HBM_EHOSTMEM;
  if (pressed) release_idle(z);
  void *cost_arg[2] = {z, &z->ranges[ri]};
  int rc = hbm_vspace_alloc(z->ranges[ri].vs, size, fresh_cost, cost_arg, pressed ? 1 << 30 : z->conf.probes,
                            user, addr, block);
  return rc != HBM_OK ? rc : back_placed(z, ri, *addr, *block, pressed);
}
static int place_in(zoned *z, uint32_t ri, uint64_t size, int pressed, uint32_t user, uint64_t *addr,
                    uint64_t *block) {
  return place_in_inline(z, ri, size, pressed, user, addr, block);
}

/* Places a block at addr of range ri (a planned address) and backs its
 * pages, `pressed` as place_in. HBM_EBUSY when that span is taken. */
static int place_at(zoned *z, uint32_t ri, uint64_t addr, uint64_t size, int pressed, uint64_t *block) {
  if (hbm_vspace_reserve(z->ranges[ri].vs) != HBM_OK) return HBM_EHOSTMEM; /* as place_in */
  if (pressed) release_idle(z);
  int rc = hbm_vspace_alloc_at(z->ranges[ri].vs, addr, size, NIL, block);
  if (rc == HBM_ENOMEM) return HBM_EBUSY;
  return rc != HBM_OK ? rc : back_placed(z, ri, addr, *block, pressed);
}

/* 1 if a request goes to the large zone (a granule or more, or small:off). */
static int is_large(const zoned *z, uint64_t size) { return !(z->conf.small && size < z->granule); }

/* The zone a request goes to. */
static int zone_for(zoned *z, uint64_t size, hbm_life life, int stream, uint32_t *zi) {
  if (!is_large(z, size)) { /* most small requests go where the last of their class went */
    int s = z->conf.streams ? stream : 0;
    if (z->small_last[life].zone == NIL || z->small_last[life].stream != s) {
      uint32_t found;
      if (zone_get(z, (int)life, 1, s, &found) != HBM_OK) return HBM_EHOSTMEM;
      z->small_last[life].stream = s;
      z->small_last[life].zone = found;
    }
    *zi = z->small_last[life].zone;
    return HBM_OK;
  }
  if (z->conf.large_life) return zone_get(z, (int)life, 0, 0, zi);
  /* Large blocks share one zone: found once, then kept. */
  if (z->large_zone == NIL && zone_get(z, HBM_LIFE_TRANSIENT, 0, 0, &z->large_zone) != HBM_OK) return HBM_EHOSTMEM;
  *zi = z->large_zone;
  return HBM_OK;
}

/* 1 if the class of a request of this size decides its zone (then its
 * lifetime is tracked). */
static int class_matters(const zoned *z, uint64_t size) {
  return z->fallback || !is_large(z, size) || z->conf.large_life;
}

/* ==== slots (slot:SIZE) =========================================================
 * A block of `slot` bytes or more may take an address range of its own, at
 * its start. Where such blocks come and go with sizes that change (attention
 * scores over sequences of varying length), the next one is larger than the
 * hole its predecessor left in the large zone, lands elsewhere, and the
 * predecessor's chunks are stitched over to it, a move a stripe. In a slot it
 * starts on the pages its predecessor left mapped and needs only the rest.
 * A slot is taken only where it needs no more new pages than the block's
 * place in the large zone; a new slot (all its pages new) wins a tie, so that
 * the next block of the kind has one to come back to. At most MAX_SLOTS.
 * Only without large_life: a large block then carries no lifetime record. */

/* The empty slot whose mapped pages cover most of a block of `size` at its
 * start (*fresh: the pages it lacks), or NIL. */
static uint32_t best_slot(zoned *z, uint32_t zi, uint64_t size, uint64_t *fresh) {
  uint32_t best = NIL;
  *fresh = UINT64_MAX;
  for (uint32_t k = 0; k < z->zones[zi].nranges; k++) {
    uint32_t ri = z->zones[zi].ranges[k];
    zrange *r = &z->ranges[ri];
    void *arg[2] = {z, r};
    uint64_t f;
    if (!hbm_vspace_live_blocks(r->vs) && (f = fresh_cost(arg, r->base, r->size, size)) < *fresh) {
      *fresh = f;
      best = ri;
    }
  }
  return best;
}

/* A large request of slot size or more: placed in the large zone (range li,
 * at *addr) or in a slot, whichever needs fewer new pages (see above).
 * HBM_ENOMEM when neither could be backed: the caller's pressed path then
 * tries the large zone again. */
static int slot_or_zone(zoned *z, uint32_t li, uint64_t size, uint32_t user, uint64_t *addr, uint64_t *block) {
  uint32_t si_zone, si;
  if (zone_get(z, ZONE_SLOTS, 0, 0, &si_zone) != HBM_OK) return HBM_EHOSTMEM;
  uint64_t slot_fresh, zone_fresh = UINT64_MAX, pages = (hbm_align_up(size, ZONED_UNIT) + z->granule - 1) >> z->gshift;
  if ((si = best_slot(z, si_zone, size, &slot_fresh)) == NIL)
    slot_fresh = z->zones[si_zone].nranges < MAX_SLOTS ? pages : UINT64_MAX;
  void *arg[2] = {z, &z->ranges[li]};
  if (hbm_vspace_reserve(z->ranges[li].vs) != HBM_OK) return HBM_EHOSTMEM; /* the free below cannot fail then */
  int placed = hbm_vspace_alloc(z->ranges[li].vs, size, fresh_cost, arg, z->conf.probes, user, addr, block) == HBM_OK;
  if (placed) zone_fresh = fresh_cost(arg, *addr, *block, *block);
  if (placed && zone_fresh < slot_fresh) return back_placed(z, li, *addr, *block, 0);
  if (slot_fresh == UINT64_MAX) return HBM_ENOMEM; /* no hole, no slot */
  if (placed) hbm_vspace_free(z->ranges[li].vs, *addr, NULL, NULL);
  int rc = si == NIL ? range_add(z, si_zone, &si) : HBM_OK;
  if (rc == HBM_OK && hbm_vspace_index_addresses(z->ranges[si].vs) != HBM_OK) rc = HBM_EHOSTMEM;
  if (rc == HBM_OK && (rc = place_at(z, si, z->ranges[si].base, size, 0, block)) == HBM_OK) *addr = z->ranges[si].base;
  z->slot_allocs += rc == HBM_OK;
  return rc == HBM_EBUSY ? HBM_ENOMEM : rc;
}

/* Places a request in zone zi (a slot first where slot:SIZE applies). */
static inline __attribute__((always_inline)) int zone_alloc(zoned *z, uint32_t zi, uint64_t size, uint32_t user,
                                                            uint64_t *addr, uint64_t *block) {
  uint32_t ri;
  int rc;
  if (z->conf.slot && size >= z->conf.slot && is_large(z, size) && !z->conf.large_life && z->zones[zi].nranges) {
    rc = slot_or_zone(z, z->zones[zi].ranges[0], size, user, addr, block);
    if (rc != HBM_ENOMEM) return rc;
  }
  uint64_t need = hbm_align_up(size, ZONED_UNIT);
  /* The first reservation with a hole that holds it; a physical shortage is
   * final (every range draws on the same granules). Holes are looked for by
   * trying (a try that finds none changes nothing); only a failed try asks
   * which of the two it met. */
  for (uint32_t k = 0; k < z->zones[zi].nranges; k++) {
    ri = z->zones[zi].ranges[k];
    rc = place_in_inline(z, ri, size, 0, user, addr, block);
    if (rc != HBM_ENOMEM) return rc;
    if (hbm_vspace_largest_free(z->ranges[ri].vs) >= need) return place_in(z, ri, size, 1, user, addr, block);
  }
  /* A range holds at most ZONED_MAX_PAGES pages: on a device of more
   * (sim:1PiB,granule=4KiB) a larger request fits no range (no try above
   * changed anything for it), and a range added for it would be carved in
   * vain, one a request. */
  if (need > range_bytes(z)) return HBM_ENOMEM;
  rc = range_add(z, zi, &ri);
  if (rc == HBM_OK) rc = place_in(z, ri, size, 0, user, addr, block);
  if (rc == HBM_ENOMEM) rc = place_in(z, ri, size, 1, user, addr, block);
  return rc;
}

static inline __attribute__((always_inline)) int vmm_alloc_inline(zoned *z, uint64_t size, hbm_life life, int stream,
                                                                   uint32_t user, uint64_t *addr, uint64_t *block) {
  uint32_t zi;
  int rc = zone_for(z, size, life, stream, &zi);
  if (rc == HBM_OK) rc = zone_alloc(z, zi, size, user, addr, block);
  if (rc != HBM_ENOMEM || is_large(z, size) || z->large_zone == NIL) return rc;
  /* A small zone with no room left: a hole of the large zone over pages its
   * chunks keep mapped still takes the request (largest free counts those
   * holes, whatever the request's size). Tried only where the request would
   * fail, so that no layout that succeeds changes. */
  for (uint32_t k = 0; k < z->zones[z->large_zone].nranges && rc == HBM_ENOMEM; k++)
    rc = place_in(z, z->zones[z->large_zone].ranges[k], size, 1, user, addr, block);
  z->small_in_large += rc == HBM_OK;
  return rc;
}
static int vmm_alloc(zoned *z, uint64_t size, hbm_life life, int stream, uint32_t user, uint64_t *addr,
                     uint64_t *block) {
  return vmm_alloc_inline(z, size, life, stream, user, addr, block);
}

/* ==== step plan ================================================================================
 * A job whose steps repeat allocates the same large blocks in the same order
 * every step, and frees them at the same points. Placed one request at a
 * time, the union of a step's layouts stays a few percent above its peak
 * (holes a block does not fit); planned with the whole step in view, it is
 * the peak itself. So each step's large allocations and frees are recorded
 * (sizes, and the event numbers they happen at); when one step matches the
 * step before it exactly, that step is planned (core/dsa.h, lifetimes
 * cyclic over the step), and from the next step on the i-th large
 * allocation is placed at the i-th planned address, in a range of its own,
 * whose pages then stay mapped: no call while steps repeat. A request that
 * differs in size, or whose planned span is still taken (or cannot be
 * backed even under pressure), is placed online (a miss) and ends the plan;
 * so does a step with a different count. Learning then starts again.
 * Blocks that outlive the step after theirs are not planned (placed
 * online). A plan is made only when it pays for the switch (plan_worth). */
static int plan_tracks(const zoned *z) {
  return z->conf.plan && z->marks && !z->fallback && !z->conf.large_life;
}

/* Room to record one more large block of the step under way, made before
 * the block is placed: running out of host memory then fails the request
 * instead of leaving the step unrecorded (no plan from it, and every layout
 * after it different). */
static int learn_reserve(zoned *z) {
  zstep *s = &z->learn[z->cur];
  if (s->broken) return HBM_OK;
  if (s->n == s->cap) {
    uint32_t cap = s->cap ? s->cap * 2 : 1024;
    zstep_block *b = realloc(s->b, cap * sizeof *b);
    if (!b) return HBM_EHOSTMEM;
    s->b = b;
    s->cap = cap;
  }
  return hbm_addrmap_reserve(&z->learn_at, 1);
}

/* Records a large block just placed (learn_reserve made room). */
static void learn_alloc(zoned *z, uint64_t addr, uint64_t block) {
  zstep *s = &z->learn[z->cur];
  if (s->broken) return;
  /* Room is there already; were it not, the step could not be planned. */
  if (learn_reserve(z) != HBM_OK || hbm_addrmap_put(&z->learn_at, addr, s->seq << 32 | s->n) != HBM_OK) {
    s->broken = 1;
    return;
  }
  s->b[s->n++] = (zstep_block){block, s->events++, NIL};
}

/* A large block at addr was freed. */
static void learn_free(zoned *z, uint64_t addr) {
  uint64_t v;
  if (z->following) z->step_events++;
  else z->learn[z->cur].events++;
  if (!z->learn_at.used || !hbm_addrmap_take(&z->learn_at, addr, &v) || z->following) return;
  zstep *s = &z->learn[z->cur], *prev = &z->learn[!z->cur];
  uint32_t i = (uint32_t)v, when = s->events - 1;
  if (v >> 32 == s->seq && i < s->n) s->b[i].died = when;
  else if (v >> 32 == prev->seq && i < prev->n) prev->b[i].died = prev->events + when;
}

/* prev and the step after it allocated the same sizes at the same events and
 * freed them at the same events; what prev carried into this step, this
 * step still holds. */
static int steps_match(const zstep *prev, const zstep *s) {
  if (prev->broken || s->broken || !s->n || prev->seq + 1 != s->seq || prev->n != s->n || prev->events != s->events)
    return 0;
  for (uint32_t i = 0; i < s->n; i++) {
    const zstep_block *a = &prev->b[i], *b = &s->b[i];
    if (a->size != b->size || a->born != b->born) return 0;
    if (a->died < prev->events ? b->died != a->died : b->died != NIL) return 0;
  }
  return 1;
}

/* PLAN_NOMEM: host memory ran out while planning; the step mark then fails
 * (HBM_EHOSTMEM) having changed nothing, rather than going on unplanned,
 * which would change every layout after it. */
enum { PLAN_BUILT, PLAN_NOT_WORTH, PLAN_FAILED, PLAN_NOMEM };

/* Whether a plan of the step just compared pays for the switch to it:
 * mapping its range and giving back the layout it replaces cost about two
 * calls a stripe each. It pays when the step it was learnt from, placed online, mapped
 * more pages beyond those it touched than the plan would, by 1% of what it
 * touched; or when that step's calls, ten steps of them, outweigh the
 * switch (the cache held at its bound by moves costs calls every step).
 * A plan on trust, which no second step has confirmed, must win back the
 * switch within two steps of the calls it saves. */
static int plan_worth(const zoned *z, uint64_t footprint, uint64_t peak, uint64_t step_calls, int trusted) {
  uint64_t switch_calls = 4 * ((footprint + z->conf.chunk - 1) / z->conf.chunk);
  if (trusted) return step_calls * 2 >= switch_calls;
  if (z->conf.plan == PLAN_ALWAYS || z->drifted) return 1;
  uint64_t g = z->granule, plan_excess = (footprint + g - 1) / g - peak / g;
  uint64_t online_excess = z->step_peak_mapped - z->step_peak_touched;
  uint64_t gain = online_excess > plan_excess ? online_excess - plan_excess : 0;
  return gain * 100 >= z->step_peak_touched || step_calls * 10 >= switch_calls;
}

/* Whether step s, which did not repeat prev, the step recorded just before
 * it (both recorded whole: the caller's `pair`), is planned on trust:
 * without waiting for the step after it to repeat it, and once per heap.
 * A job's first steps also build state that stays (the model, the
 * optimizer's moments), so they match no later step; a step that frees
 * every large block it makes, and makes them in the sizes and order of the
 * blocks prev made and freed (prev less what it kept), is most likely what
 * the steps after it repeat, and waiting for the repeat costs a step of
 * moves. Steps whose sizes change (sequence lengths that vary) are not
 * planned on trust: the plan would end at its first request. */
static int trust_step(const zoned *z, const zstep *prev, const zstep *s) {
  if (!z->conf.trust || z->trust_spent || !s->n) return 0;
  for (uint32_t i = 0; i < s->n; i++)
    if (s->b[i].died == NIL) return 0;
  uint32_t j = 0;
  for (uint32_t i = 0; i < prev->n; i++) {
    if (prev->b[i].died >= prev->events) continue; /* kept past prev (NIL: still live) */
    if (j == s->n || prev->b[i].size != s->b[j].size) return 0;
    j++;
  }
  return j == s->n;
}

/* Plans step s: PLAN_BUILT, PLAN_NOT_WORTH, PLAN_FAILED (larger than the
 * device, no range left), or PLAN_NOMEM (host memory; nothing the caller
 * sees changed: a zone record or a reservation made on the way stays,
 * unused until a plan needs it). */
static int plan_build(zoned *z, const zstep *s, uint64_t step_calls, int trusted) {
  uint32_t zi, ri = NIL, m = 0;
  if (zone_get(z, ZONE_PLANNED, 0, 0, &zi) != HBM_OK) return PLAN_NOMEM;
  hbm_dsa_block *b = malloc(s->n * sizeof *b);
  uint64_t *off = malloc(s->n * sizeof *off), *addr = malloc(s->n * sizeof *addr), *size = malloc(s->n * sizeof *size);
  uint32_t *which = malloc(s->n * sizeof *which);
  uint64_t footprint = 0;
  int nomem = !(b && off && addr && size && which), ok = !nomem;
  for (uint32_t i = 0; ok && i < s->n; i++) {
    const zstep_block *x = &s->b[i];
    if (x->died != NIL && x->died - x->born <= s->events) { /* not longer than a step */
      which[m] = i;
      b[m++] = (hbm_dsa_block){x->size, x->born, x->died};
    }
  }
  /* No plan's footprint is below the peak load, and a plan pays less the
   * larger its footprint: where one at the peak would not pay, none would,
   * and the planner (the costliest part of a step mark) need not run. */
  uint64_t peak = ok && m ? hbm_dsa_peak(b, m, s->events) : 0;
  if (ok && m && !peak) nomem = 1; /* a peak of blocks of size > 0 is 0 only when out of host memory */
  ok = ok && !nomem;
  int hopeless = ok && m && !plan_worth(z, peak, peak, step_calls, trusted), rc = HBM_OK;
  ok = ok && m && !hopeless && (rc = hbm_dsa_plan(b, m, s->events, ZONED_UNIT, off, &footprint)) == HBM_OK &&
       footprint <= z->capacity;
  nomem |= rc == HBM_EHOSTMEM;
  int worth = !hopeless && (!ok || plan_worth(z, footprint, peak, step_calls, trusted));
  ok = ok && worth;
  /* A range of the plan's own: an empty one again, else a new one. */
  for (uint32_t k = 0; ok && k < z->zones[zi].nranges && ri == NIL; k++)
    if (!hbm_vspace_live_blocks(z->ranges[z->zones[zi].ranges[k]].vs)) ri = z->zones[zi].ranges[k];
  if (ok && ri == NIL) {
    rc = z->zones[zi].nranges < PLAN_MAX_RANGES ? range_add(z, zi, &ri) : HBM_ENOMEM;
    ok = rc == HBM_OK;
    nomem |= rc == HBM_EHOSTMEM;
  }
  if (ok && hbm_vspace_index_addresses(z->ranges[ri].vs) != HBM_OK) ok = 0, nomem = 1; /* a no-op once done */
  /* Blocks go to a plan's range only at planned addresses: its vspace need
   * not keep the size-keyed set best fit reads (cannot fail once indexed). */
  if (ok) hbm_vspace_drop_best_fit(z->ranges[ri].vs);
  if (ok) {
    memset(addr, 0, s->n * sizeof *addr);
    for (uint32_t i = 0; i < s->n; i++) size[i] = s->b[i].size;
    for (uint32_t k = 0; k < m; k++) addr[which[k]] = z->ranges[ri].base + off[k];
    free(z->plan_addr);
    free(z->plan_size);
    z->plan_addr = addr;
    z->plan_size = size;
    z->plan_n = s->n;
    z->plan_events = s->events;
    z->plan_range = ri;
    addr = size = NULL;
  }
  free(b);
  free(off);
  free(addr);
  free(size);
  free(which);
  if (nomem) return PLAN_NOMEM;
  return ok ? PLAN_BUILT : worth ? PLAN_FAILED : PLAN_NOT_WORTH; /* worth: planned, or could not be */
}

/* The step left the plan: learning starts again at the next step mark (the
 * step under way was not recorded, so it matches nothing). */
static void plan_drop(zoned *z) {
  z->plan_drops++;
  z->following = 0;
  z->learn[z->cur].broken = 1;
  z->step_n = z->step_events = 0;
}

/* Step mark: a followed step that kept to the plan keeps it; a learning step
 * that matches the one before it is planned if that pays, else the steps
 * have settled (until two steps differ again). */
static int plan_step(zoned *z) {
  uint64_t step_calls = z->base.dev->backend_calls - z->step_calls0, calls0 = z->step_calls0;
  z->marks++;
  z->step_calls0 = z->base.dev->backend_calls;
  if (!plan_tracks(z)) return HBM_OK;
  if (z->following) {
    if (z->step_n == z->plan_n && z->step_events == z->plan_events) {
      z->plan_steps++;
      z->step_n = z->step_events = 0;
      /* A whole step ran on the plan without them: the idle chunks of the
       * layout it replaced go (not before: a plan learned from two steps
       * that matched by chance may end at its first request). */
      for (uint32_t c; (c = idle_outside_plan(z)) != NIL; z->cold_releases++) chunk_release(z, c);
      return HBM_OK;
    }
    plan_drop(z);
  } else if (z->learn_skip) {
    z->learn_skip--;
  } else {
    const zstep *prev = &z->learn[!z->cur], *cur = &z->learn[z->cur];
    int pair = !prev->broken && !cur->broken && prev->seq + 1 == cur->seq, built = PLAN_FAILED;
    int match = steps_match(prev, cur), trusted = !match && pair && trust_step(z, prev, cur);
    if (!match) z->settled = 0;
    if (match || trusted) {
      built = plan_build(z, match ? prev : cur, step_calls, trusted);
      if (built == PLAN_NOMEM) { /* the mark is not taken: nothing changed */
        z->marks--;
        z->step_calls0 = calls0;
        return HBM_EHOSTMEM;
      }
      z->trust_spent |= trusted;
      if (match) {
        z->settled = built == PLAN_NOT_WORTH;
        z->plans_declined += z->settled;
      }
      if (built == PLAN_BUILT) {
        z->plan_builds++;
        z->trusted_plans += (uint64_t)trusted;
        z->following = 1;
        z->learn_idle = z->learn_pause = 0;
      }
    }
    if (pair && built != PLAN_BUILT && ++z->learn_idle >= 4) {
      z->learn_pause = z->learn_pause ? (z->learn_pause < 64 ? 2 * z->learn_pause : 64) : 2;
      z->learn_skip = z->learn_pause;
      z->learn_idle = 0;
    }
  }
  z->step_peak_mapped = z->mapped_pages;
  z->step_peak_touched = z->touched_pages;
  z->drifted = 0;
  if (z->following) return HBM_OK;
  z->cur = !z->cur;
  zstep *s = &z->learn[z->cur];
  s->n = s->events = 0;
  s->broken = z->learn_skip > 0;
  s->seq = z->marks;
  return HBM_OK;
}

/* A large request while a plan is followed. On HBM_EHOSTMEM the request
 * did not happen: the step's counts and the plan stand as they were (a
 * host failure must not end a plan, nor shift the requests after it). */
static int plan_alloc(zoned *z, uint64_t size, int stream, uint64_t *addr, uint64_t *block) {
  uint32_t i = z->step_n++;
  z->step_events++;
  int rc;
  if (i < z->plan_n && z->plan_size[i] == hbm_align_up(size, ZONED_UNIT)) {
    if (!z->plan_addr[i]) { /* planned online */
      rc = vmm_alloc(z, size, HBM_LIFE_TRANSIENT, stream, NIL, addr, block);
    } else {
      rc = place_at(z, z->plan_range, z->plan_addr[i], size, 0, block);
      if (rc == HBM_ENOMEM) rc = place_at(z, z->plan_range, z->plan_addr[i], size, 1, block);
      if (rc == HBM_OK) *addr = z->plan_addr[i];
    }
    if (rc == HBM_EHOSTMEM) {
      z->step_n--;
      z->step_events--;
    }
    if (rc == HBM_OK || rc == HBM_EHOSTMEM || !z->plan_addr[i]) return rc;
  }
  int broken = z->learn[z->cur].broken;
  uint32_t events = z->step_events;
  z->plan_misses++;
  plan_drop(z);
  rc = vmm_alloc(z, size, HBM_LIFE_TRANSIENT, stream, NIL, addr, block);
  if (rc == HBM_EHOSTMEM) { /* undo the drop: the plan is still followed */
    z->plan_misses--;
    z->plan_drops--;
    z->following = 1;
    z->learn[z->cur].broken = broken;
    z->step_n = i;
    z->step_events = events - 1;
  }
  return rc;
}

/* ==== lifetime class ========================================================================== */
static hbm_life classify(zoned *z, uint64_t size, hbm_tag tag, int stream, hbm_life_stamp *stamp) {
  hbm_life inferred = hbm_lifetime_predict(&z->life, size, stream, stamp);
  if (z->conf.zones == ZONES_OFF) return HBM_LIFE_TRANSIENT;
  if (z->conf.zones == ZONES_TAGS && tag != HBM_TAG_OTHER)
    return tag == HBM_TAG_PARAM || tag == HBM_TAG_OPTIM || tag == HBM_TAG_GRAD ? HBM_LIFE_STATIC : HBM_LIFE_TRANSIENT;
  return inferred;
}

static uint32_t rec_new(zoned *z) {
  if (z->free_rec != NIL) {
    uint32_t i = z->free_rec;
    z->free_rec = z->recs[i].next_free;
    return i;
  }
  if (z->nrecs == z->recs_cap) {
    uint32_t cap = z->recs_cap ? z->recs_cap * 2 : 1024;
    zrec *n = realloc(z->recs, cap * sizeof *n);
    if (!n) return NIL;
    z->recs = n;
    z->recs_cap = cap;
  }
  return z->nrecs++;
}

static void rec_put_back(zoned *z, uint32_t i) {
  z->recs[i].next_free = z->free_rec;
  z->free_rec = i;
}

/* ==== fixed zones (no virtual memory) ============================================================ */
static int fixed_alloc(zoned *z, uint64_t size, hbm_life life, uint32_t user, uint64_t *addr, uint64_t *block) {
  int rc = hbm_range_alloc(z->fixed[life], size, 0, addr, block);
  if (rc == HBM_ENOMEM) rc = hbm_range_alloc(z->fixed[!life], size, 0, addr, block);
  if (rc == HBM_OK && hbm_addrmap_put(&z->fixed_live, *addr, user) != HBM_OK) {
    hbm_range_free(z->fixed[*addr >= z->seg_addr + z->split_at ? HBM_LIFE_TRANSIENT : HBM_LIFE_STATIC], *addr, NULL);
    rc = HBM_EHOSTMEM;
  }
  return rc;
}

static int fixed_free(zoned *z, uint64_t addr, uint64_t *block, uint32_t *user) {
  uint64_t u;
  if (!hbm_addrmap_get(&z->fixed_live, addr, &u)) return HBM_EINVAL;
  int rc = hbm_range_free(z->fixed[addr >= z->seg_addr + z->split_at ? HBM_LIFE_TRANSIENT : HBM_LIFE_STATIC], addr, block);
  if (rc == HBM_OK) {
    hbm_addrmap_take(&z->fixed_live, addr, NULL);
    *user = (uint32_t)u;
  }
  return rc;
}

/* ==== create / destroy ============================================================================== */
static void zoned_destroy(hbm_policy *p);

/* Says which settings the text gave that this heap will not read: a setting
 * silently ignored reads as one that took effect. Through the output
 * handler; the settings stay accepted, so one text serves every device. */
static void note_ignored(const zoned *z) {
  const zoned_conf *c = &z->conf;
  char names[160];
  if (z->fallback) {
    unsigned fixed = 1u << K_ZONES | 1u << K_VMM | 1u << K_SPLIT;
    if (join_keys(c->given & ~fixed, 0, names, sizeof names))
      hbm_report_note("zoned: fixed zones (%s): %s ignored; they apply where zoned maps virtual memory",
                      c->vmm ? "the device maps no virtual memory" : "vmm:off", names);
    return;
  }
  if (c->given & 1u << K_SPLIT)
    hbm_report_note("zoned: split ignored: it sizes the fixed zones, used with vmm:off or on a device that "
                    "maps no virtual memory");
  /* small:off: no small zones, so none per stream; and unless large blocks
   * are placed by class, no class decides a zone */
  if (!c->small && join_keys(c->given & (1u << K_STREAMS | (c->large_life ? 0 : 1u << K_ZONES)), 0, names, sizeof names))
    hbm_report_note("zoned: %s ignored: with small:off every request goes to the large zone%s", names,
                    c->large_life ? "" : ", one zone for every class (large_life:off)");
  if (c->large_life && join_keys(c->given & (1u << K_PLAN | 1u << K_TRUST | 1u << K_SLOT), 0, names, sizeof names))
    hbm_report_note("zoned: %s ignored: with large_life:on large blocks are placed by class, without plans "
                    "or slots", names);
  else if (!c->plan && c->given & 1u << K_TRUST)
    hbm_report_note("zoned: trust ignored: plans are off (plan:off)");
  if (c->moves == MOVES_OFF && c->given & 1u << K_TRIM)
    hbm_report_note("zoned: trim ignored: it re-chunks only where moves hold the cache (moves:off)");
}

static int zoned_create(hbm_device *dev, const char *conf, hbm_policy **out, hbm_diag *diag) {
  zoned_conf c;
  int rc = parse_conf(conf, dev->caps.granule, &c, diag);
  if (rc != HBM_OK) return rc;
  zoned *z = calloc(1, sizeof *z);
  if (!z) return HBM_EHOSTMEM;
  z->base.dev = dev;
  z->conf = c;
  z->granule = dev->caps.granule;
  z->capacity = dev->caps.capacity;
  z->gshift = (unsigned)__builtin_ctzll(z->granule);
  z->range_size = range_bytes_of(z); /* once: zone_alloc compares every request with it */
  /* No range has more than ZONED_MAX_PAGES pages, so a stripe of that many
   * acts as any longer one: chunk:1PiB on a 4 KiB granule is 2^38 pages,
   * which cut to 32 bits was a stripe of 0, and the first placement
   * divided by it. */
  uint64_t stripe = c.chunk >> z->gshift;
  z->stripe = stripe > ZONED_MAX_PAGES ? ZONED_MAX_PAGES : (uint32_t)stripe;
  z->stripe_mask = hbm_is_pow2(z->stripe) ? z->stripe - 1 : 0;
  z->free_chunk = z->free_rec = z->large_zone = z->small_last[0].zone = z->small_last[1].zone = NIL;
  hbm_lifetime_init(&z->life);
  hbm_addrmap_init(&z->fixed_live);
  hbm_addrmap_init(&z->learn_at);
  z->fallback = !dev->caps.vmm || !c.vmm || !dev->ops->reserve || !dev->ops->map || !dev->ops->phys_create;
  if (z->fallback) {
    z->seg_size = z->capacity;
    z->split_at = (uint64_t)((double)z->seg_size * c.split) / ZONED_UNIT * ZONED_UNIT;
    if (z->split_at == 0 || z->split_at >= z->seg_size) z->split_at = z->seg_size / 2 / ZONED_UNIT * ZONED_UNIT;
    rc = hbm_dev_seg_alloc(dev, z->seg_size, 0, &z->seg_addr);
    if (rc == HBM_OK) rc = hbm_range_create(z->seg_addr, z->split_at, ZONED_UNIT, &z->fixed[HBM_LIFE_STATIC]);
    if (rc == HBM_OK)
      rc = hbm_range_create(z->seg_addr + z->split_at, z->seg_size - z->split_at, ZONED_UNIT, &z->fixed[HBM_LIFE_TRANSIENT]);
    if (rc != HBM_OK) {
      zoned_destroy(&z->base);
      return rc;
    }
  }
  note_ignored(z);
  *out = &z->base;
  return HBM_OK;
}

static void zoned_destroy(hbm_policy *p) {
  zoned *z = (zoned *)p;
  hbm_device *dev = p->dev;
  /* The last chunk first: chunks are made mostly in address order, and a
   * device that keeps its mappings ordered (sim's ledger) then gives each
   * one back from its end, where an erase moves nothing (first-to-last made
   * tearing down a 64 TiB block's million chunks quadratic). */
  for (uint32_t c = z->nchunks; c-- > 0;) {
    const zchunk *ch = &z->chunks[c];
    if (!ch->npages) continue;
    uint64_t bytes = (uint64_t)ch->npages << z->gshift;
    hbm_dev_unmap(dev, page_va(z, ch->range, ch->first), bytes);
    hbm_dev_phys_release(dev, ch->handle, bytes);
  }
  for (uint32_t i = 0; i < z->narenas; i++) hbm_dev_unreserve(dev, z->arenas[2 * i], z->arenas[2 * i + 1]);
  for (uint32_t i = 0; i < z->nranges; i++) {
    hbm_vspace_destroy(z->ranges[i].vs);
    free(z->ranges[i].page);
    free(z->ranges[i].edge);
    free(z->ranges[i].fenwick);
  }
  for (uint32_t i = 0; i < z->nzones; i++) free(z->zones[i].ranges);
  for (int i = 0; i < 2; i++) hbm_range_destroy(z->fixed[i]);
  if (z->seg_addr) hbm_dev_seg_free(dev, z->seg_addr, z->seg_size);
  free(z->arenas);
  free(z->zones);
  free(z->ranges);
  free(z->order);
  free(z->order_base);
  free(z->chunks);
  free(z->idle_bits);
  free(z->undo);
  free(z->stage);
  free(z->recs);
  for (int i = 0; i < 2; i++) free(z->learn[i].b);
  free(z->plan_addr);
  free(z->plan_size);
  hbm_addrmap_release(&z->learn_at);
  hbm_addrmap_release(&z->fixed_live);
  hbm_lifetime_release(&z->life);
  free(z);
}

/* ==== alloc / free ========================================================================== */
static void count_live(zoned *z, int64_t delta) {
  if (delta > 0) z->clock += (uint64_t)delta;
  z->live_bytes += (uint64_t)delta;
  if (z->live_bytes > z->peak_live_bytes) z->peak_live_bytes = z->live_bytes;
}

/* At the end of an operation: a new peak of mapped pages, and what held it. */
static void note_mapped_peak(zoned *z) {
  if (z->mapped_pages <= z->peak_mapped_pages) return;
  z->peak_mapped_pages = z->mapped_pages;
  z->peak_mapped_touched = z->touched_pages;
  z->peak_mapped_live = z->live_bytes;
}

static int zoned_alloc(hbm_policy *p, uint64_t size, hbm_tag tag, int stream, uint64_t *addr, uint64_t *block_size) {
  zoned *z = (zoned *)p;
  if (size == 0) return HBM_EINVAL;
  if (size > z->capacity) return HBM_ENOMEM;
  hbm_life life = HBM_LIFE_TRANSIENT;
  hbm_life_stamp stamp;
  uint32_t rec = NIL;
  int planned = plan_tracks(z) && is_large(z, size), rc;
  /* What can fail for host memory outside placement comes first: a failed
   * request then changed nothing, and a host failure never changes what the
   * lifetime rule or the plan learn (and so no later placement). */
  if (planned && !z->following && learn_reserve(z) != HBM_OK) return HBM_EHOSTMEM;
  if (class_matters(z, size)) {
    if (hbm_lifetime_reserve(&z->life) != HBM_OK || (rec = rec_new(z)) == NIL) return HBM_EHOSTMEM;
    life = classify(z, size, tag, stream, &stamp);
  }
  if (z->fallback) rc = fixed_alloc(z, size, life, rec, addr, block_size);
  else if (planned && z->following) rc = plan_alloc(z, size, stream, addr, block_size);
  else rc = vmm_alloc_inline(z, size, life, stream, rec, addr, block_size);
  if (rc == HBM_OK && planned && !z->following) learn_alloc(z, *addr, *block_size);
  if (rec != NIL) {
    if (rc != HBM_OK) {
      hbm_lifetime_forget(&z->life, &stamp);
      rec_put_back(z, rec);
      return rc;
    }
    z->recs[rec].stamp = stamp;
    if (life == HBM_LIFE_STATIC) z->static_allocs++;
  }
  if (rc == HBM_OK) count_live(z, (int64_t)*block_size);
  note_mapped_peak(z);
  return rc;
}

static int zoned_free(hbm_policy *p, uint64_t addr, uint64_t *block_size) {
  zoned *z = (zoned *)p;
  uint32_t user;
  uint64_t block;
  /* Room for the lifetime rule to learn from the block, first: on error
   * nothing changed, the block is still live. */
  if (hbm_lifetime_reserve(&z->life) != HBM_OK) return HBM_EHOSTMEM;
  if (z->fallback) {
    int rc = fixed_free(z, addr, &block, &user);
    if (rc != HBM_OK) return rc;
  } else {
    uint32_t ri = range_of(z, addr);
    if (ri == NIL) return HBM_EINVAL;
    zrange *r = &z->ranges[ri];
    int rc = hbm_vspace_free(r->vs, addr, &block, &user);
    if (rc != HBM_OK) return rc == HBM_EHOSTMEM ? rc : HBM_EINVAL;
    uint32_t p0, p1;
    block_pages(z, r, addr, block, &p0, &p1);
    untouch(z, r, p0, p1);
    /* (a small request the large zone took carries a lifetime record; the plan never saw it) */
    if (plan_tracks(z) && !z->zones[r->zone].small && user == NIL) learn_free(z, addr);
  }
  if (user != NIL) {
    hbm_lifetime_observe(&z->life, &z->recs[user].stamp);
    rec_put_back(z, user);
  }
  count_live(z, -(int64_t)block);
  *block_size = block;
  return HBM_OK;
}

/* ==== starting state =======================================================================
 * A recording that starts mid-run begins with blocks already live. They are
 * placed like build-phase allocations (all static), then their pages are
 * mapped. In a small zone, chunks per run of touched pages: its pages hold
 * many blocks each. In a large zone, each block's pages get chunks of their
 * own, and a page two blocks share is a chunk of its own, so that when a
 * recorded block dies, what it alone touched is whole idle chunks, which the
 * cache reuses, stitches or gives back. (Chunks over runs of blocks left the
 * pages of blocks that died mapped inside chunks their neighbours still used,
 * until the peak: bcrafton_step's whole excess.) */
typedef struct seed_ctx {
  zoned *z;
  uint32_t ri, run_first, run_last;
  int in_run, failed;
} seed_ctx;

/* Maps the unmapped pages of [first, last] in range ri, a chunk per stretch
 * within a stripe. */
static int seed_map(zoned *z, uint32_t ri, uint32_t first, uint32_t last) {
  uint32_t stripe = stripe_pages(z);
  for (uint32_t q = first; q <= last;) {
    const zrange *r = &z->ranges[ri];
    if (r->page[q].chunk) {
      q = r->page[q].end;
      continue;
    }
    uint32_t n = 1, left = stripe - q % stripe, ch;
    while (q + n <= last && n < left && !r->page[q + n].chunk) n++;
    if (device_room(z) < n) return HBM_ENOMEM;
    int rc = chunk_create(z, ri, q, n, n, &ch);
    if (rc != HBM_OK) return rc;
    q += n;
  }
  return HBM_OK;
}

static int seed_visit(void *arg, uint64_t addr, uint64_t size, int live) {
  seed_ctx *c = arg;
  if (!live) return 0;
  zoned *z = c->z;
  const zrange *r = &z->ranges[c->ri];
  uint32_t p0, p1;
  block_pages(z, r, addr, size, &p0, &p1);
  if (!z->zones[r->zone].small) {
    if (r->edge[p0] > 1) c->failed = seed_map(z, c->ri, p0, p0);
    if (!c->failed && p1 != p0 && r->edge[p1] > 1) c->failed = seed_map(z, c->ri, p1, p1);
    if (!c->failed) c->failed = seed_map(z, c->ri, p0, p1);
    return c->failed != HBM_OK;
  }
  if (c->in_run && p0 <= c->run_last + 1) {
    if (p1 > c->run_last) c->run_last = p1;
    return 0;
  }
  if (c->in_run && (c->failed = seed_map(z, c->ri, c->run_first, c->run_last)) != HBM_OK) return 1;
  c->in_run = 1;
  c->run_first = p0;
  c->run_last = p1;
  return 0;
}

static int zoned_seed(hbm_policy *p, const hbm_trace *t, uint64_t *id_addr, uint64_t *id_block) {
  zoned *z = (zoned *)p;
  if (z->fallback) return HBM_EUNSUPPORTED; /* replay places them as requests */
  for (uint32_t k = 0; k < t->ninit_segments; k++) {
    const hbm_init_segment *seg = &t->init_segments[k];
    for (uint32_t i = seg->first_block; i < seg->first_block + seg->nblocks; i++) {
      const hbm_init_block *b = &t->init_blocks[i];
      if (b->id == HBM_NO_ID) continue;
      uint64_t size = b->request ? b->request : b->size, addr, block;
      uint32_t zi, ri = NIL, rec = NIL;
      hbm_life life = HBM_LIFE_TRANSIENT;
      hbm_life_stamp stamp;
      if (class_matters(z, size)) {
        if (hbm_lifetime_reserve(&z->life) != HBM_OK || (rec = rec_new(z)) == NIL) return HBM_EHOSTMEM;
        life = classify(z, size, (hbm_tag)b->tag, seg->stream, &stamp);
        z->recs[rec].stamp = stamp;
        z->static_allocs += life == HBM_LIFE_STATIC;
      }
      int rc = zone_for(z, size, life, seg->stream, &zi);
      for (uint32_t j = 0; rc == HBM_OK && j < z->zones[zi].nranges && ri == NIL; j++)
        if (hbm_vspace_largest_free(z->ranges[z->zones[zi].ranges[j]].vs) >= hbm_align_up(size, ZONED_UNIT))
          ri = z->zones[zi].ranges[j];
      if (rc == HBM_OK && ri == NIL) rc = range_add(z, zi, &ri);
      if (rc == HBM_OK) rc = hbm_vspace_alloc(z->ranges[ri].vs, size, NULL, NULL, 1, rec, &addr, &block);
      if (rc != HBM_OK) return rc; /* replay discards the policy */
      uint32_t p0, p1;
      block_pages(z, &z->ranges[ri], addr, block, &p0, &p1);
      if ((rc = range_cover(&z->ranges[ri], p1 + 1)) != HBM_OK) return rc;
      touch(z, &z->ranges[ri], p0, p1); /* counted touched now, mapped below */
      id_addr[b->id] = addr;
      if (id_block) id_block[b->id] = block; /* the request rounded, not the recorded block */
      count_live(z, (int64_t)block);
    }
  }
  for (uint32_t ri = 0; ri < z->nranges; ri++) {
    seed_ctx c = {.z = z, .ri = ri};
    hbm_vspace_walk(z->ranges[ri].vs, seed_visit, &c);
    if (c.failed) return c.failed;
    if (c.in_run && (c.failed = seed_map(z, ri, c.run_first, c.run_last)) != HBM_OK) return c.failed;
  }
  if (z->touched_pages > z->peak_touched_pages) z->peak_touched_pages = z->touched_pages;
  note_mapped_peak(z);
  return HBM_OK;
}

/* ==== usage, step, counters ================================================================ */
static uint64_t zoned_reserved(hbm_policy *p) {
  zoned *z = (zoned *)p;
  if (z->fallback)
    return hbm_range_top(z->fixed[HBM_LIFE_STATIC]) - z->seg_addr +
           hbm_range_top(z->fixed[HBM_LIFE_TRANSIENT]) - (z->seg_addr + z->split_at);
  return z->mapped_pages << z->gshift;
}

/* The largest request a hole of the large zone takes without moving data.
 * Under pressure the cache goes first and placement looks at every hole for
 * the one needing the fewest new pages (place_in): a request fits a hole
 * when its pages there that no partly used chunk keeps mapped number at
 * most `room` (the free granules with the idle chunks unmapped). So it
 * reaches from the hole's start to the page that would be the room's one
 * too many, or to the hole's end. */
typedef struct hole_ctx {
  const zoned *z;
  const zrange *r;
  uint64_t room, best;
} hole_ctx;

static int largest_in_hole(void *arg, uint64_t addr, uint64_t size, int live) {
  hole_ctx *h = arg;
  if (live || size <= h->best) return 0;
  const zoned *z = h->z;
  const zrange *r = h->r;
  uint64_t end = addr + size, at = addr, room = h->room;
  while (at < end) {
    uint32_t page = (uint32_t)((at - r->base) >> z->gshift);
    if (page >= r->top) { /* nothing above the top is mapped: the room's pages, and no more */
      uint64_t reach = r->base + ((uint64_t)(page + room) << z->gshift);
      at = reach < end ? reach : end;
      break;
    }
    /* A chunk at a time: a partly used chunk's pages are all kept mapped, an
     * idle chunk's all count against the room (page by page, as before
     * 2026-12-03, it took half of a replay sampled every 100 events). */
    uint32_t c = chunk_at(r, page), past = c ? r->page[page].end : page + 1;
    if (!c || !z->chunks[c - 1].touched) {
      if (past - page > room) { /* the room's one too many page is in here */
        uint64_t reach = r->base + ((uint64_t)(page + room) << z->gshift);
        if (room) at = reach < end ? reach : end;
        break;
      }
      room -= past - page;
    }
    uint64_t next = r->base + ((uint64_t)past << z->gshift);
    at = next < end ? next : end;
  }
  if (at - addr > h->best) h->best = at - addr;
  return 0;
}

/* The free granules with the idle chunks (room), or more where `visit` (a
 * walk of the large zone's holes) finds a hole that takes more. */
static uint64_t largest_free_by(const zoned *z, hbm_vspace_visit_fn *visit) {
  /* No request larger than a range fits (zone_alloc): on a device of more
   * than ZONED_MAX_PAGES granules, the granules free may be more than one
   * range holds. */
  uint64_t room = device_room(z) + z->idle_pages, most = range_bytes(z), all = room << z->gshift;
  if (all > most) all = most;
  if (z->large_zone == NIL || !z->zones[z->large_zone].nranges) return all;
  hole_ctx h = {z, &z->ranges[z->zones[z->large_zone].ranges[0]], room, all};
  hbm_vspace_walk(h.r->vs, visit, &h);
  return h.best;
}

static void zoned_usage(hbm_policy *p, hbm_policy_usage *u) {
  zoned *z = (zoned *)p;
  u->reserved = zoned_reserved(p);
  u->limit = UINT64_MAX;
  if (z->fallback) {
    uint64_t a = hbm_range_largest_free(z->fixed[0]), b = hbm_range_largest_free(z->fixed[1]);
    u->largest_free = a > b ? a : b;
    return;
  }
  /* The free granules, counting the idle chunks pressure would unmap: a
   * hole at the large zone's top takes that much. A hole with pages that
   * partly used chunks keep mapped may take more (the holes below the top
   * are walked a chunk at a time, only at samples). Where classes split the large
   * blocks (large_life), which zone a request goes to is the rule's guess:
   * only the granules. With no granule free, such a hole still takes any
   * request: one below a granule that its small zone has no room for goes to
   * the large zone (vmm_alloc). (Freeing what partly used chunks hold copies
   * data: not counted.) */
  u->largest_free = largest_free_by(z, largest_in_hole);
}

static int zoned_step(hbm_policy *p, uint64_t step) {
  zoned *z = (zoned *)p;
  int rc = plan_step(z); /* first: it alone can fail, and then changed nothing (it reads no lifetime state) */
  if (rc != HBM_OK) return rc;
  hbm_lifetime_step(&z->life, step);
  z->prev_step_clock = z->last_step_clock;
  z->last_step_clock = z->clock;
  return HBM_OK;
}

static int zoned_counters(hbm_policy *p, hbm_counter *out, int max) {
  zoned *z = (zoned *)p;
  hbm_counter c[] = {
      {"fixed_zones", (double)z->fallback}, /* 1: no virtual memory, and most counters below stay 0 */
      {"chunks_created", (double)z->chunks_created},
      {"chunks_released", (double)z->chunks_released},
      {"chunks_moved", (double)z->chunks_moved},
      {"pressure_releases", (double)z->pressure_releases},
      {"cold_releases", (double)z->cold_releases},
      {"peak_releases", (double)z->peak_releases},
      {"rechunks", (double)z->rechunks},
      {"staged_rechunks", (double)z->staged_rechunks},
      {"trims", (double)z->trims},
      {"switch_moves", (double)z->switch_moves},
      {"bound_moves", (double)z->bound_moves},
      {"bound_releases", (double)z->bound_releases},
      {"static_allocs", (double)z->static_allocs},
      {"peak_touched_bytes", (double)(z->peak_touched_pages << z->gshift)},
      {"peak_reserved_touched_bytes", (double)(z->peak_mapped_touched << z->gshift)},
      {"peak_reserved_live_bytes", (double)z->peak_mapped_live},
      {"plan_builds", (double)z->plan_builds},
      {"plan_steps", (double)z->plan_steps},
      {"plan_misses", (double)z->plan_misses},
      {"plan_drops", (double)z->plan_drops},
      {"plans_declined", (double)z->plans_declined},
      {"trusted_plans", (double)z->trusted_plans},
      {"slot_allocs", (double)z->slot_allocs},
      {"small_in_large", (double)z->small_in_large},
      {"unsettles", (double)z->unsettles},
  };
  int n = (int)(sizeof c / sizeof c[0]);
  if (n > max) n = max;
  memcpy(out, c, (size_t)n * sizeof *c);
  return n;
}

/* ==== layout scan ========================================================================
 * Live blocks, and the parts of holes that have memory behind them: a hole's
 * pages that are mapped (its share of pages it shares with a live block,
 * idle chunks inside it), a run of chunks at a time. Address space with no
 * memory behind it is not visited, as expandable leaves out its unmapped
 * pages, so what a scan visits in a range sums to its mapped pages: reserved.
 * (Fixed zones, without virtual memory, are device memory: all visited.) */
typedef struct scan_ctx {
  const zoned *z;
  uint32_t ri;
  hbm_scan_fn *visit;
  void *arg;
} scan_ctx;

static int scan_one(void *arg, uint64_t addr, uint64_t size, int live) {
  scan_ctx *c = arg;
  if (live) return c->visit(c->arg, addr, size, 1, HBM_TAG_OTHER);
  const zrange *r = &c->z->ranges[c->ri];
  uint64_t end = addr + size;
  uint32_t p0, p1;
  block_pages(c->z, r, addr, size, &p0, &p1);
  if (p1 >= r->cover) p1 = r->cover ? r->cover - 1 : 0; /* nothing is mapped from cover on */
  for (uint32_t q = p0; r->cover && q <= p1;) {
    if (!r->page[q].chunk) {
      q++;
      continue;
    }
    uint32_t e = q; /* chunks side by side: one run */
    while (e <= p1 && r->page[e].chunk) e = r->page[e].end;
    uint64_t from = page_va(c->z, c->ri, q), to = page_va(c->z, c->ri, e);
    if (from < addr) from = addr;
    if (to > end) to = end;
    int rc = c->visit(c->arg, from, to - from, 0, HBM_TAG_OTHER);
    if (rc) return rc;
    q = e;
  }
  return 0;
}

static int scan_fixed(void *arg, uint64_t addr, uint64_t size, int live) {
  scan_ctx *c = arg;
  return c->visit(c->arg, addr, size, live, HBM_TAG_OTHER);
}

/* One range's part of the scan (with virtual memory). */
static int scan_range(const zoned *z, uint32_t ri, hbm_scan_fn *visit, void *arg) {
  scan_ctx c = {z, ri, visit, arg};
  return hbm_vspace_walk(z->ranges[ri].vs, scan_one, &c);
}

static int zoned_scan(hbm_policy *p, hbm_scan_fn *visit, void *arg) {
  zoned *z = (zoned *)p;
  if (z->fallback) {
    scan_ctx c = {z, 0, visit, arg};
    int rc = hbm_range_walk(z->fixed[HBM_LIFE_STATIC], scan_fixed, &c);
    return rc ? rc : hbm_range_walk(z->fixed[HBM_LIFE_TRANSIENT], scan_fixed, &c);
  }
  for (uint32_t k = 0; k < z->nranges; k++) {
    if (z->order[k] >= z->nranges) continue; /* damage, not a range: zoned_check's Z8 names it */
    int rc = scan_range(z, z->order[k], visit, arg);
    if (rc) return rc;
  }
  return 0;
}

/* ==== invariants ============================================================================
 *   Z1 page[].chunk and page[].end agree with the chunk records; the Fenwick
 *      tree, once built, covers the pages up to the top, and every node equals a
 *      recount of the mapped pages it covers ((i - lowbit(i), i]); the
 *      placement cost's counts of unmapped pages equal a recount;
 *   Z2 edge counts equal a recount; every page a live block touches is mapped;
 *   Z3 each chunk's touched count equals a recount; the idle bits mark exactly
 *      the chunks with none;
 *   Z4 mapped, touched and idle totals equal recounts; touched <= its peak;
 *      mapped <= its peak, and the pages touched at that peak <= it;
 *   Z5 lifetime records: one per tracked live block, none elsewhere; the
 *      lifetime rule's live bytes equal the sizes its live stamps hold, and
 *      every counter is in 0..3 (lifetime.h's invariants);
 *   Z6 while a plan is followed, its range is one of the planned zone's, kept
 *      indexed by address, and every planned span lies inside it;
 *   Z7 largest free equals the walk of every hole page by page (the
 *      reference of the walk a chunk at a time);
 *   Z8 order lists every range once by base address and order_base holds
 *      their bases; every range is range_size bytes; a small zone
 *      remembered per life is a small zone of that life and its stream;
 *   Z9 the layout scan adds up, in address order: its live blocks to the
 *      live bytes, blocks and holes together to the mapped pages; no hole
 *      it visits ends where the next begins. */
typedef struct check_ctx {
  zoned *z;
  hbm_checker k; /* prefix "zoned: " */
  uint32_t ri;
  uint32_t *edge;
  uint8_t *touched;
  uint64_t tracked, stamped_bytes;
} check_ctx;

static void forward_report(void *arg, const char *message) {
  hbm_check_forward(&((check_ctx *)arg)->k, message);
}

static int recount_block(void *arg, uint64_t addr, uint64_t size, int live) {
  check_ctx *c = arg;
  if (!live) return 0;
  const zrange *r = &c->z->ranges[c->ri];
  uint32_t p0, p1, user = NIL;
  block_pages(c->z, r, addr, size, &p0, &p1);
  c->edge[p0]++;
  if (p1 != p0) c->edge[p1]++;
  memset(c->touched + p0, 1, (size_t)(p1 - p0) + 1);
  hbm_vspace_block_size(r->vs, addr, &user);
  if (user != NIL) {
    c->tracked++;
    if (user >= c->z->nrecs) hbm_check_fail(&c->k, "Z5 block at %#llx names record %u of %u", (unsigned long long)addr, user, c->z->nrecs);
    else c->stamped_bytes += c->z->recs[user].stamp.size;
  } else if (class_matters(c->z, size) && size < c->z->granule) {
    hbm_check_fail(&c->k, "Z5 small block at %#llx has no lifetime record", (unsigned long long)addr);
  }
  return 0;
}

static void stamped_fixed(void *arg, uint64_t addr, uint64_t user) {
  check_ctx *c = arg;
  if (user == NIL) return;
  c->tracked++;
  if (user >= c->z->nrecs)
    hbm_check_fail(&c->k, "Z5 fixed block at %#llx names record %llu of %u", (unsigned long long)addr,
                   (unsigned long long)user, c->z->nrecs);
  else
    c->stamped_bytes += c->z->recs[user].stamp.size;
}

/* Every record is a tracked live block's or on the free list, in both modes. */
static void check_records(zoned *z, check_ctx *c) {
  uint64_t free_recs = 0;
  for (uint32_t i = z->free_rec; i != NIL && free_recs <= z->nrecs; i = z->recs[i].next_free) free_recs++;
  if (c->tracked + free_recs != z->nrecs)
    hbm_check_fail(&c->k, "Z5 %llu tracked blocks and %llu free records, %u records", (unsigned long long)c->tracked,
                   (unsigned long long)free_recs, z->nrecs);
}

static void check_counter(void *arg, uint64_t key, uint64_t counter) {
  if (counter > 3) hbm_check_fail(&((check_ctx *)arg)->k, "Z5 lifetime counter %llu (0..3) for key %#llx", (unsigned long long)counter, (unsigned long long)key);
}

/* lifetime.h: live_bytes == the sizes of stamps predicted and not yet
 * observed (or forgotten), that is of the live blocks' records; counters 0..3. */
static void check_lifetime(zoned *z, check_ctx *c) {
  if (c->stamped_bytes != z->life.live_bytes)
    hbm_check_fail(&c->k, "Z5 lifetime rule counts %llu live bytes, the live blocks' stamps %llu",
         (unsigned long long)z->life.live_bytes, (unsigned long long)c->stamped_bytes);
  hbm_addrmap_each(&z->life.counters, check_counter, c);
}

static int check_fallback(zoned *z, check_ctx *c) {
  uint64_t live = 0;
  for (int i = 0; i < 2; i++) {
    hbm_range_check(z->fixed[i], forward_report, c);
    live += hbm_range_live_blocks(z->fixed[i]);
  }
  if (live != z->fixed_live.used)
    hbm_check_fail(&c->k, "Z5 %llu records for %llu live blocks", (unsigned long long)z->fixed_live.used, (unsigned long long)live);
  hbm_addrmap_each(&z->fixed_live, stamped_fixed, c);
  check_records(z, c);
  check_lifetime(z, c);
  return c->k.failures;
}

/* The placement cost's counts of unmapped pages against `below` (mapped
 * pages below each page, recounted), over spans of 1 to 37 pages starting
 * every 61st page: sparse, since a check may run after every event. */
static void check_unmapped_counts(const zrange *r, uint32_t ri, const uint32_t *below, hbm_checker *k) {
  uint32_t bad = 0;
  for (uint64_t q0 = 0; q0 < r->npages && bad < 4; q0 += 61) { /* 64 bits: as wide as the page count */
    uint32_t p0 = (uint32_t)q0, p1 = q0 + q0 % 37 < r->npages ? (uint32_t)(q0 + q0 % 37) : r->npages - 1;
    uint64_t want = (uint64_t)(p1 - p0 + 1) - (below[p1 + 1] - below[p0]);
    uint64_t counted = unmapped_counted(r, p0, p1), tree = r->fenwick ? unmapped_tree(r, p0, p1) : want,
             above = r->mapped == r->top ? unmapped_above_top(r, p0, p1) : want;
    if (counted != want || tree != want || above != want) {
      hbm_check_fail(k, "Z1 range %u pages %u-%u: %llu unmapped, counted %llu, tree %llu, from the top %llu", ri, p0, p1,
                     (unsigned long long)want, (unsigned long long)counted, (unsigned long long)tree,
                     (unsigned long long)above);
      bad++;
    }
  }
}

/* Z7's reference: largest_in_hole, a page at a time. */
static int largest_in_hole_by_page(void *arg, uint64_t addr, uint64_t size, int live) {
  hole_ctx *h = arg;
  if (live) return 0;
  const zoned *z = h->z;
  const zrange *r = h->r;
  uint64_t end = addr + size, at = addr, room = h->room;
  while (at < end) {
    uint32_t page = (uint32_t)((at - r->base) >> z->gshift);
    if (page >= r->top) {
      uint64_t reach = r->base + ((uint64_t)(page + room) << z->gshift);
      at = reach < end ? reach : end;
      break;
    }
    uint32_t c = chunk_at(r, page);
    if (!c || !z->chunks[c - 1].touched) {
      if (!room) break;
      room--;
    }
    uint64_t next = r->base + ((uint64_t)(page + 1) << z->gshift);
    at = next < end ? next : end;
  }
  if (at - addr > h->best) h->best = at - addr;
  return 0;
}

static void check_largest_free(zoned *z, check_ctx *c) {
  uint64_t fast = largest_free_by(z, largest_in_hole), slow = largest_free_by(z, largest_in_hole_by_page);
  if (fast != slow)
    hbm_check_fail(&c->k, "Z7 largest free %llu, page by page %llu", (unsigned long long)fast, (unsigned long long)slow);
}

typedef struct scan_sum { uint64_t live, holes, end; int ordered, split, last_hole; } scan_sum;
static int add_scanned(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  scan_sum *t = arg;
  (void)tag;
  if (addr < t->end) t->ordered = 0;
  if (!live && t->last_hole && addr == t->end) t->split = 1;
  t->last_hole = !live;
  t->end = addr + size;
  *(live ? &t->live : &t->holes) += size;
  return 0;
}

static void check_scan_sums(zoned *z, hbm_checker *k) {
  scan_sum t = {0, 0, 0, 1, 0, 0};
  for (uint32_t i = 0; i < z->nranges; i++) { /* range by range: two ranges may meet, and holes with them */
    t.last_hole = 0;
    if (z->order[i] < z->nranges) scan_range(z, z->order[i], add_scanned, &t); /* else Z8 names it */
  }
  if (!t.ordered) hbm_check_fail(k, "Z9 the layout scan goes back in address order");
  if (t.split) hbm_check_fail(k, "Z9 the layout scan visits two holes side by side (one hole, split)");
  if (t.live != z->live_bytes || t.live + t.holes != z->mapped_pages << z->gshift)
    hbm_check_fail(k, "Z9 the layout scan visits %llu live bytes and %llu in holes: live %llu, mapped %llu",
                   (unsigned long long)t.live, (unsigned long long)t.holes, (unsigned long long)z->live_bytes,
                   (unsigned long long)(z->mapped_pages << z->gshift));
}

static void check_range_order(const zoned *z, hbm_checker *k) {
  for (uint32_t i = 0; i < z->nranges; i++) {
    uint32_t ri = z->order[i];
    if (ri >= z->nranges || z->order_base[i] != z->ranges[ri].base || (i && z->order_base[i - 1] >= z->order_base[i]))
      hbm_check_fail(k, "Z8 range order broken at %u (range %u)", i, ri);
  }
  for (int life = 0; life < 2; life++) {
    uint32_t zi = z->small_last[life].zone;
    if (zi != NIL && (zi >= z->nzones || !z->zones[zi].small || z->zones[zi].life != life ||
                      z->zones[zi].stream != z->small_last[life].stream))
      hbm_check_fail(k, "Z8 the small zone remembered for life %d is zone %u, not one of that life and stream", life, zi);
  }
}

static int zoned_check(hbm_policy *p, hbm_check_report_fn *report, void *arg) {
  zoned *z = (zoned *)p;
  check_ctx c = {.z = z, .k = {.report = report, .arg = arg, .prefix = "zoned: "}};
  if (z->fallback) return check_fallback(z, &c);
  uint64_t mapped = 0, touched = 0, idle = 0;
  uint32_t *chunk_touched = calloc(z->nchunks ? z->nchunks : 1, sizeof *chunk_touched);
  if (!chunk_touched) { hbm_check_no_memory(&c.k); return c.k.failures; }
  for (uint32_t ri = 0; ri < z->nranges; ri++) {
    const zrange *r = &z->ranges[ri];
    hbm_vspace_check(r->vs, forward_report, &c);
    c.ri = ri;
    c.edge = calloc(r->npages, sizeof *c.edge);
    c.touched = calloc(r->npages, 1);
    if (!c.edge || !c.touched) { /* the recounts below would be partial: no verdict on them */
      free(c.edge);
      free(c.touched);
      free(chunk_touched);
      hbm_check_no_memory(&c.k);
      return c.k.failures;
    }
    hbm_vspace_walk(r->vs, recount_block, &c);
    uint32_t mapped_here = 0;
    /* mapped pages below each page: every Fenwick node is checked, not only
     * prefixes (a prefix at a power of two reads a single node), and so are
     * the placement cost's ways of counting unmapped pages */
    uint32_t *below = calloc((size_t)r->npages + 1, sizeof *below); /* the tree covers at most npages */
    if (!below) hbm_check_no_memory(&c.k);
    if (r->top > r->cover) hbm_check_fail(&c.k, "Z1 range %u: pages mapped up to %u, page entries only to %u", ri, r->top, r->cover);
    if (r->fenwick && r->fenwick_n < r->top)
      hbm_check_fail(&c.k, "Z1 range %u: pages mapped up to %u, the Fenwick tree covers only %u", ri, r->top, r->fenwick_n);
    for (uint32_t q = 0; q < r->npages; q++) {
      uint32_t ch = chunk_at(r, q), edge = q < r->cover ? r->edge[q] : 0;
      if (c.edge[q] != edge) hbm_check_fail(&c.k, "Z2 range %u page %u: edge count %u, recount %u", ri, q, edge, c.edge[q]);
      if (ch) {
        mapped++;
        mapped_here++;
        const zchunk *k = ch - 1 < z->nchunks ? &z->chunks[ch - 1] : NULL;
        if (!k || k->range != ri || q < k->first || q >= k->first + k->npages)
          hbm_check_fail(&c.k, "Z1 range %u page %u names chunk %u, which does not cover it", ri, q, ch - 1);
        else if (r->page[q].end != k->first + k->npages)
          hbm_check_fail(&c.k, "Z1 range %u page %u: its chunk ends at %u, recorded %u", ri, q, k->first + k->npages, r->page[q].end);
        else if (c.touched[q])
          chunk_touched[ch - 1]++;
      }
      if (c.touched[q]) {
        touched++;
        if (!ch) hbm_check_fail(&c.k, "Z2 range %u page %u is touched by a live block but not mapped", ri, q);
      }
      if (below) below[q + 1] = mapped_here;
      if (ch && q >= r->top) hbm_check_fail(&c.k, "Z1 range %u: page %u mapped above the recorded top %u", ri, q, r->top);
    }
    if (below) {
      check_unmapped_counts(r, ri, below, &c.k);
      for (uint32_t i = 1, bad = 0; i <= r->fenwick_n && bad < 4; i++) {
        uint32_t want = below[i] - below[i - (i & -i)];
        if (r->fenwick[i] != want) {
          hbm_check_fail(&c.k, "Z1 range %u: Fenwick node %u counts %u mapped pages in (%u, %u], recount %u", ri, i,
               r->fenwick[i], i - (i & -i), i, want);
          bad++;
        }
      }
      free(below);
    }
    if (mapped_here != r->mapped) hbm_check_fail(&c.k, "Z1 range %u counts %u mapped pages, recount %u", ri, r->mapped, mapped_here);
    free(c.edge);
    free(c.touched);
  }
  uint32_t idle_chunks = 0;
  for (uint32_t k = 0; k < z->nchunks; k++) {
    const zchunk *ch = &z->chunks[k];
    if (!ch->npages) continue;
    if (ch->range >= z->nranges || ch->first + ch->npages > z->ranges[ch->range].npages)
      hbm_check_fail(&c.k, "Z1 chunk %u lies outside its range", k);
    if (ch->touched != chunk_touched[k]) hbm_check_fail(&c.k, "Z3 chunk %u counts %u touched pages, recount %u", k, ch->touched, chunk_touched[k]);
    int bit = (int)((z->idle_bits[k / 64] >> (k % 64)) & 1);
    if (bit != !ch->touched) hbm_check_fail(&c.k, "Z3 chunk %u: idle bit %d with %u touched pages", k, bit, ch->touched);
    if (!ch->touched) { idle += ch->npages; idle_chunks++; }
  }
  for (uint32_t k = 0; k < z->nchunks; k++)
    if (!z->chunks[k].npages && ((z->idle_bits[k / 64] >> (k % 64)) & 1)) hbm_check_fail(&c.k, "Z3 free record %u marked idle", k);
  if (idle_chunks != z->idle_chunks) hbm_check_fail(&c.k, "Z3 %u idle chunks, %u counted", idle_chunks, z->idle_chunks);
  if (mapped != z->mapped_pages || touched != z->touched_pages || idle != z->idle_pages)
    hbm_check_fail(&c.k, "Z4 pages: mapped %llu/%llu touched %llu/%llu idle %llu/%llu (counted/recount)",
         (unsigned long long)z->mapped_pages, (unsigned long long)mapped, (unsigned long long)z->touched_pages,
         (unsigned long long)touched, (unsigned long long)z->idle_pages, (unsigned long long)idle);
  if (z->peak_touched_pages < z->touched_pages) hbm_check_fail(&c.k, "Z4 touched pages above their recorded peak");
  if (z->peak_mapped_pages < z->mapped_pages || z->peak_mapped_touched > z->peak_mapped_pages)
    hbm_check_fail(&c.k, "Z4 mapped pages above their recorded peak, or the peak's touched pages above it");
  if ((z->mapped_pages << z->gshift) > p->dev->phys_used) hbm_check_fail(&c.k, "Z4 more pages mapped than the device holds");
  check_lifetime(z, &c);
  check_records(z, &c);
  if (z->following) {
    const zrange *pr = z->plan_range < z->nranges ? &z->ranges[z->plan_range] : NULL;
    if (!pr || z->zones[pr->zone].life != ZONE_PLANNED)
      hbm_check_fail(&c.k, "Z6 the plan's range %u is not a planned range", z->plan_range);
    else if (!hbm_vspace_indexed(pr->vs)) /* plan_alloc places at addresses: the index must stand */
      hbm_check_fail(&c.k, "Z6 the plan's range %u is not indexed by address", z->plan_range);
    for (uint32_t i = 0; pr && i < z->plan_n; i++)
      if (z->plan_addr[i] && (z->plan_addr[i] < pr->base || z->plan_addr[i] + z->plan_size[i] > pr->base + pr->size))
        hbm_check_fail(&c.k, "Z6 planned block %u lies outside the plan's range", i);
  }
  if (!z->fallback && z->range_size != range_bytes_of(z))
    hbm_check_fail(&c.k, "Z8 ranges of %llu bytes, %llu from the device and settings",
                   (unsigned long long)z->range_size, (unsigned long long)range_bytes_of(z));
  for (uint32_t ri = 0; ri < z->nranges; ri++)
    if (z->ranges[ri].size != z->range_size)
      hbm_check_fail(&c.k, "Z8 range %u of %llu bytes, not %llu", ri, (unsigned long long)z->ranges[ri].size,
                     (unsigned long long)z->range_size);
  check_largest_free(z, &c);
  check_range_order(z, &c.k);
  check_scan_sums(z, &c.k);
  free(chunk_touched);
  return c.k.failures;
}

const hbm_policy_class hbm_policy_zoned = {
    .name = "zoned",
    .summary = "hbm's allocator: page stitching, mapped-granule cache, lifetime zones (no fragmentation)",
    .create = zoned_create,
    .destroy = zoned_destroy,
    .alloc = zoned_alloc,
    .free = zoned_free,
    .usage = zoned_usage,
    .reserved = zoned_reserved,
    .scan = zoned_scan,
    .check = zoned_check,
    .seed = zoned_seed,
    .step = zoned_step,
    .counters = zoned_counters,
};
