/* test_hostmem_failure: every host allocation the library makes can fail,
 * and each failure is an answer, never a crash, a leak or a lie.
 *
 * This program is linked with -Wl,--wrap for malloc, calloc, realloc, free,
 * strdup and strndup (CMakeLists.txt), so every allocation the library makes
 * passes through the counters below. Each scenario runs once clean, to count
 * its allocations M, then again with allocation N failing, for N = 1..M (or a
 * seeded sample of them when M is large), in two modes: that one allocation
 * only, and every allocation from N on (left out where the first mode's run
 * for N made no allocation after the Nth and never asked which mode it ran
 * in: the second would be the same run, allocation for allocation). Each run
 * must:
 *   - end without a crash (ASan and UBSan in the sanitizer build);
 *   - answer HBM_EHOSTMEM, and only from a call during which an allocation
 *     failed; never HBM_ENOMEM (that says the device is full) nor
 *     HBM_ECORRUPT for a host failure;
 *   - leave a heap whose hbm_check() holds after the failed call (a failed
 *     free leaves its block live), and which keeps working, and gives every
 *     block back, once host memory is back;
 *   - give back every allocation it made (counted here, so a plain build
 *     catches leaks too, not only LeakSanitizer);
 *   - when a call succeeded although an allocation in it failed, give what
 *     the clean run gave: the same heap (layout, live, reserved, largest free,
 *     device calls), a replay's figures, a reader's trace, a plan, a report
 *     page, an AdamW step, the trace writer's file;
 *   - where a failed call takes an hbm_diag (the trace writer), say in it
 *     which file and why.
 * HBM_HOSTMEM_ONLY=TEXT runs the scenarios whose name holds TEXT.
 */
#include <dirent.h>
#include <stdint.h>
#include <unistd.h>

#include "core/dsa.h"
#include "core/vspace.h"
#include "device/device.h"
#include "hbm.h"
#include "replay/fidelity.h"
#include "replay/mincap.h"
#include "report/html.h"
#include "replay_counter.h"
#include "seeded_trace.h"
#include "small_workload.h"
#include "staged_trace.h"
#include "stepped_trace.h"
#include "testutil.h"
#include "trace/gen_llm.h"
#include "trace/plan_csv.h"
#include "trace/snapshot.h"
#include "trace/trace.h"
#include "trim_trace.h"

/* ---- the wrapped allocator -------------------------------------------------------- */
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);

static long long live_allocs;         /* allocations not yet freed */
static unsigned long long alloc_calls; /* allocations attempted since the run began */
static unsigned long long fail_at;     /* 0: none fails; else the Nth fails ... */
static int fail_after;                 /* ... and with this set, every one after it */
static unsigned long long injected;    /* failures injected since the run began */
static int paused;                     /* the test's own looking: neither counted nor failed */
static int promised;                   /* a reservation holds: any allocation now breaks its promise */
static unsigned long long broken_promises; /* allocations tried while promised (each failed) */
static int mode_read;                  /* the run asked whether allocations still fail (still_failing) */

/* Whether every allocation from fail_at on fails: a run that behaves
 * differently by mode asks here, never reads fail_after itself. */
static int still_failing(void) {
  mode_read = 1;
  return fail_after;
}

static int inject(void) {
  if (paused) return 0;
  if (promised) {
    broken_promises++;
    return 1;
  }
  alloc_calls++;
  if (fail_at && (alloc_calls == fail_at || (fail_after && alloc_calls > fail_at))) {
    injected++;
    return 1;
  }
  return 0;
}

void *__wrap_malloc(size_t n) {
  if (inject()) return NULL;
  void *p = __real_malloc(n);
  if (p) live_allocs++;
  return p;
}
void *__wrap_calloc(size_t n, size_t size) {
  if (inject()) return NULL;
  void *p = __real_calloc(n, size);
  if (p) live_allocs++;
  return p;
}
void *__wrap_realloc(void *p, size_t n) {
  if (inject()) return NULL;
  void *q = __real_realloc(p, n);
  if (q && !p) live_allocs++;
  return q;
}
void __wrap_free(void *p) {
  if (p) live_allocs--;
  __real_free(p);
}
char *__wrap_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = __wrap_malloc(n);
  if (p) memcpy(p, s, n);
  return p;
}
char *__wrap_strndup(const char *s, size_t max) {
  size_t n = strnlen(s, max);
  char *p = __wrap_malloc(n + 1);
  if (p) {
    memcpy(p, s, n);
    p[n] = '\0';
  }
  return p;
}

/* Errors reported through the handler during a run: a host failure may be
 * reported, but only as HBM_EHOSTMEM. */
static int reported_other;
static void on_error(int err, const char *message, void *arg) {
  (void)arg;
  if (err != HBM_EHOSTMEM && fail_at) {
    if (reported_other++ < 3) fprintf(stderr, "  reported %s: %s\n", hbm_strerror(err), message);
  }
}

/* ---- the runs ----------------------------------------------------------------------- */
typedef struct scenario {
  const char *name;
  /* Runs once; returns 0 when every check in it held. `clean` is 1 on the
   * run without failures, which records what later runs compare against. */
  int (*run)(const void *arg, int clean);
  const void *arg;
} scenario;

static const char *mode_name(void) { return fail_after ? "from" : "only"; }

/* Fails the scenario's run with a message naming the injection. */
#define EXPECT(cond)                                                                           \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: %s failed with allocation %llu failing (%s): %s\n", __FILE__,    \
              __LINE__, current_name, fail_at, mode_name(), #cond);                            \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

static const char *current_name;

static uint64_t base_seed;

/* Returns 0 when every run held. */
static int run_scenario(const scenario *s, uint64_t max_runs) {
  const char *only = getenv("HBM_HOSTMEM_ONLY"); /* run the scenarios whose name holds this */
  if (only && !strstr(s->name, only)) return 0;
  current_name = s->name;
  /* Each scenario samples from its own stream (the seed and its name), so
   * that HBM_HOSTMEM_ONLY reproduces exactly what the whole run did. */
  uint64_t own = base_seed ^ 0xcbf29ce484222325ull;
  for (const char *c = s->name; *c; c++) own = (own ^ (uint8_t)*c) * 0x100000001b3ull;
  uint64_t *rng = &own;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  fail_at = 0;
  alloc_calls = injected = 0;
  long long before = live_allocs;
  reported_other = 0;
  if (s->run(s->arg, 1)) {
    fprintf(stderr, "%s: the clean run failed\n", s->name);
    return 1;
  }
  unsigned long long m = alloc_calls;
  if (live_allocs != before) {
    fprintf(stderr, "%s: the clean run leaked %lld allocations\n", s->name, live_allocs - before);
    return 1;
  }
  int bad = 0;
  uint64_t runs = 0, failed_runs = 0, same_runs = 0;
  /* same[N]: the run with allocation N failing (only) made no allocation
   * after it and did not ask for the mode, so the run with every allocation
   * from N failing would repeat it exactly (the test's own array: not counted) */
  uint8_t *same = __real_calloc(m + 1, 1);
  if (!same) {
    fprintf(stderr, "%s: out of memory\n", s->name);
    return 1;
  }
  for (int persist = 0; persist <= 1 && !bad; persist++) {
    /* Every allocation when they are few, else the first ones (setup) and a
     * seeded sample of the rest. */
    uint64_t n = m <= max_runs ? m : max_runs;
    for (uint64_t k = 0; k < n && !bad; k++) {
      uint64_t at = m <= max_runs || k < n / 4 ? k + 1 : n / 4 + 1 + test_rand_below(rng, m - n / 4);
      if (persist && same[at]) {
        same_runs++;
        continue;
      }
      fail_after = persist;
      fail_at = at;
      alloc_calls = injected = 0;
      reported_other = 0;
      mode_read = 0;
      paused = promised = 0; /* a run that failed an EXPECT while paused or promised left it set */
      before = live_allocs;
      int r = s->run(s->arg, 0);
      fail_at = 0;
      if (!persist && alloc_calls <= at && !mode_read) same[at] = 1;
      runs++;
      if (injected) failed_runs++;
      if (r) bad = 1;
      else if (live_allocs != before) {
        fprintf(stderr, "%s: allocation %llu failing (%s) leaked %lld allocations\n", s->name,
                (unsigned long long)at, persist ? "from" : "only", live_allocs - before);
        bad = 1;
      } else if (reported_other) {
        fprintf(stderr, "%s: allocation %llu failing (%s) reported %d errors other than HBM_EHOSTMEM\n",
                s->name, (unsigned long long)at, persist ? "from" : "only", reported_other);
        bad = 1;
      }
    }
  }
  __real_free(same);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("  %-34s %6llu allocations; %5" PRIu64 " runs, %5" PRIu64 " of them failed one, %5" PRIu64
         " left out as the same in both modes, %.1f s%s\n", s->name, m, runs, failed_runs, same_runs,
         (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec), bad ? ": FAILED" : "");
  fflush(stdout);
  return bad;
}

/* ---- a heap under a random workload ------------------------------------------------ */
typedef struct heap_case {
  const char *policy, *conf, *device;
  uint64_t seed;
  int ops;
} heap_case;

#define HEAP_MAX_LIVE 256
#define HEAP_MAX_OPS 600
static int clean_results[HEAP_MAX_OPS];
static uint64_t clean_layouts[HEAP_MAX_OPS];

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull; }
typedef struct digest { uint64_t h; int addresses, live_only; } digest;
static int digest_visit(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  digest *d = arg;
  if (!live && d->live_only) return 0;
  d->h = mix(mix(mix(mix(d->h, d->addresses ? addr : 0), size), (uint64_t)live), (uint64_t)tag);
  return 0;
}
/* The scan's blocks (live ones only, or holes too) hashed, and the heap's
 * stats, read without meeting a failure; 0 where either could not be read. */
static int read_heap(hbm_heap *heap, int addresses, int live_only, uint64_t *scan, hbm_stats *st) {
  paused = 1;
  digest d = {0xcbf29ce484222325ull, addresses, live_only};
  int ok = hbm_heap_scan(heap, digest_visit, &d) == HBM_OK && hbm_heap_stats(heap, st) == HBM_OK;
  paused = 0;
  *scan = d.h;
  return ok;
}

/* The heap as a caller sees it: its layout and what it holds from the device.
 * Addresses only where the device places them itself: the kernel places a
 * host device's, differently from run to run. */
static uint64_t heap_digest(hbm_heap *heap, int addresses) {
  uint64_t h;
  hbm_stats st;
  if (!read_heap(heap, addresses, 0, &h, &st)) return 0;
  return mix(mix(mix(mix(mix(h, st.live), st.allocated), st.reserved), st.largest_free), st.backend_calls);
}

/* What a caller holds: the live blocks, what they add up to, and (policy
 * compact) the compaction counts. A call that failed for host memory leaves
 * all of it as it was; zoned may have released idle memory or re-chunked on
 * the way (docs/zoned.md), so the device side is not part of it. */
static uint64_t holder_digest(hbm_heap *heap, int addresses, int movable) {
  uint64_t h;
  hbm_stats st;
  if (!read_heap(heap, addresses, 1, &h, &st)) return 0;
  h = mix(mix(mix(mix(mix(h, st.live), st.allocated), st.allocs), st.frees), st.live_blocks);
  if (!movable) return h;
  paused = 1;
  hbm_compact_stats cs;
  int ok = hbm_compact_stats_get(heap, &cs) == HBM_OK;
  paused = 0;
  if (!ok) return 0;
  return mix(mix(mix(mix(mix(h, cs.compactions), cs.full_compactions), cs.partial_compactions), cs.failed_compactions),
             cs.moved_bytes);
}

/* What heap_run compares after each operation, read at once without meeting
 * a failure: heap_digest's and holder_digest's figures (0 where they could
 * not be read) and the requests the heap counts as failed (stats.failures;
 * UINT64_MAX where unread). The same figures as the three read one at a time,
 * from one scan and one stats call instead of two and four: the reading was
 * most of a heap scenario's time. */
typedef struct heap_view { uint64_t layout, held, failures; } heap_view;
typedef struct digest_pair { digest all, live_only; } digest_pair;
static int digest_both(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  digest_pair *p = arg;
  digest_visit(&p->all, addr, size, live, tag);
  return digest_visit(&p->live_only, addr, size, live, tag);
}
static heap_view view_heap(hbm_heap *heap, int addresses, int movable) {
  heap_view v = {0, 0, UINT64_MAX};
  digest_pair p = {{0xcbf29ce484222325ull, addresses, 0}, {0xcbf29ce484222325ull, addresses, 1}};
  hbm_stats st;
  hbm_compact_stats cs;
  paused = 1;
  int scanned = hbm_heap_scan(heap, digest_both, &p) == HBM_OK, stats = hbm_heap_stats(heap, &st) == HBM_OK;
  int compact = !movable || hbm_compact_stats_get(heap, &cs) == HBM_OK;
  paused = 0;
  if (!stats) return v;
  v.failures = st.failures;
  if (!scanned) return v;
  v.layout = mix(mix(mix(mix(mix(p.all.h, st.live), st.allocated), st.reserved), st.largest_free), st.backend_calls);
  uint64_t h = mix(mix(mix(mix(mix(p.live_only.h, st.live), st.allocated), st.allocs), st.frees), st.live_blocks);
  if (movable)
    h = !compact ? 0
                 : mix(mix(mix(mix(mix(h, cs.compactions), cs.full_compactions), cs.partial_compactions),
                           cs.failed_compactions), cs.moved_bytes);
  v.held = h;
  return v;
}

static uint64_t random_size(uint64_t *rng) {
  switch (test_rand_below(rng, 4)) {
  case 0: return 1 + test_rand_below(rng, 4096);
  case 1: return 512 * (1 + test_rand_below(rng, 4096));
  case 2: return (1ull << 20) * (1 + test_rand_below(rng, 24));
  default: return 512 * (1 + test_rand_below(rng, 256));
  }
}

/* hbm_check() during a run: it may meet the failure itself and say so
 * (HBM_EHOSTMEM); then once more, unless every allocation fails from here on. */
static int check_during_run(hbm_heap *heap) {
  unsigned long long before = injected;
  int r = hbm_check(heap);
  if (r == HBM_EHOSTMEM && injected != before && !still_failing()) r = hbm_check(heap);
  EXPECT(r == HBM_OK || (r == HBM_EHOSTMEM && still_failing()));
  return 0;
}

/* Opens a device and a heap on it. A run with a failure injected may fail
 * either for host memory, leaving nothing open (*heap NULL): the run ends
 * there. Returns 1 when a check failed. */
static int heap_open(const char *device, const char *policy, const char *conf, int clean, hbm_device **dev,
                     hbm_heap **heap) {
  *dev = NULL;
  *heap = NULL;
  int r = hbm_device_open(device, dev);
  if (r != HBM_OK) {
    EXPECT(!clean && r == HBM_EHOSTMEM && injected && *dev == NULL);
    return 0;
  }
  r = hbm_heap_create(*dev, policy, conf, heap);
  if (r != HBM_OK) {
    EXPECT(!clean && r == HBM_EHOSTMEM && injected && *heap == NULL);
    EXPECT((*dev)->phys_used == 0); /* what the policy took as it started, it gave back */
    hbm_device_close(*dev);
    *dev = NULL;
  }
  return 0;
}

static int heap_run(const void *arg, int clean) {
  const heap_case *c = arg;
  hbm_device *dev;
  hbm_heap *heap;
  if (heap_open(c->device, c->policy, c->conf, clean, &dev, &heap)) return 1;
  if (!heap) return 0;
  int r;
  uint64_t rng = c->seed, live[HEAP_MAX_LIVE];
  hbm_handle handles[HEAP_MAX_LIVE];
  int nlive = 0, diverged = 0;
  int movable = !strcmp(c->policy, "compact");
  const int addresses = strncmp(c->device, "host", 4) != 0;
  uint64_t step = 0;
  heap_view now = view_heap(heap, addresses, movable); /* kept from one operation to the next */
  for (int i = 0; i < c->ops && i < HEAP_MAX_OPS; i++) {
    unsigned long long injected_before = injected;
    const uint64_t held_before = now.held, failed_before = now.failures;
    int alloc = 0;
    uint64_t pick = test_rand(&rng);
    int op = (int)(pick % 100);
    if (op < 4) {
      r = hbm_heap_step(heap, ++step);
    } else if (op < 6 && movable) {
      hbm_compact_result cr;
      r = hbm_compact(heap, NULL, &cr);
    } else if (op < 50 || nlive == 0) {
      if (nlive == HEAP_MAX_LIVE) continue;
      uint64_t size = random_size(&rng);
      hbm_tag tag = (hbm_tag)test_rand_below(&rng, HBM_TAG_COUNT);
      int stream = (int)test_rand_below(&rng, 2);
      alloc = 1;
      if (movable) {
        hbm_handle h;
        r = hbm_alloc_handle(heap, size, tag, stream, &h);
        if (r == HBM_OK) {
          handles[nlive] = h;
          r = hbm_handle_addr(heap, h, &live[nlive]);
          EXPECT(r == HBM_OK);
          nlive++;
        }
      } else {
        uint64_t addr = 0;
        r = hbm_alloc(heap, size, tag, stream, &addr);
        if (r == HBM_OK) live[nlive++] = addr;
      }
    } else {
      int k = (int)test_rand_below(&rng, (uint64_t)nlive);
      r = movable ? hbm_free_handle(heap, handles[k]) : hbm_free(heap, live[k]);
      if (r == HBM_OK) {
        live[k] = live[nlive - 1];
        handles[k] = handles[nlive - 1];
        nlive--;
      } else {
        /* The block is still live: its address still answers. */
        EXPECT(r == HBM_EHOSTMEM);
      }
    }
    int hit = injected != injected_before;
    now = view_heap(heap, addresses, movable);
    /* Every request that did not succeed is counted, whatever failed. */
    if (alloc) EXPECT(now.failures == failed_before + (r != HBM_OK));
    uint64_t layout = now.layout;
    if (r == HBM_EHOSTMEM) EXPECT(now.held == held_before);
    if (clean) {
      clean_results[i] = r;
      clean_layouts[i] = layout;
    } else {
      /* An answer the clean run gave, with the clean run's heap: a call that
       * met a failure and still succeeded did what it would have done. */
      if (!diverged && r == clean_results[i] && layout != clean_layouts[i]) EXPECT(!"heap as in the clean run");
      if (r == HBM_EHOSTMEM) EXPECT(hit);
      /* A host failure is not an out-of-memory answer, nor corruption. */
      if (hit && r != HBM_OK && r != HBM_EHOSTMEM) EXPECT(diverged && r == HBM_ENOMEM);
      if (!diverged && r != clean_results[i]) {
        EXPECT(hit);
        diverged = 1;
      }
    }
    if (hit || (i % 16) == 0) {
      if (check_during_run(heap)) return 1;
      now = view_heap(heap, addresses, movable); /* as the next operation finds the heap */
    }
  }
  if (!clean && still_failing()) {
    /* Host memory is still failing: destroying a heap that holds blocks must
     * still give everything back. */
    hbm_heap_destroy(heap);
    hbm_device_close(dev);
    return 0;
  }
  /* Host memory is back: the heap works and gives everything back. */
  fail_at = 0;
  EXPECT(hbm_check(heap) == HBM_OK);
  uint64_t addr;
  r = hbm_alloc(heap, 4096, HBM_TAG_TEMP, 0, &addr);
  EXPECT(r == HBM_OK || r == HBM_ENOMEM);
  if (r == HBM_OK) EXPECT(hbm_free(heap, addr) == HBM_OK);
  for (int k = 0; k < nlive; k++) EXPECT((movable ? hbm_free_handle(heap, handles[k]) : hbm_free(heap, live[k])) == HBM_OK);
  EXPECT(hbm_check(heap) == HBM_OK);
  hbm_stats st;
  EXPECT(hbm_heap_stats(heap, &st) == HBM_OK);
  EXPECT(st.live == 0);
  hbm_heap_destroy(heap);
  hbm_device_close(dev);
  return 0;
}

/* ---- zoned's re-chunks with its arrays full --------------------------------------- */
/* An array that doubles is full only at some counts, and the runs above never
 * fill zoned's chunk records or the device's bookkeeping just as a re-chunk
 * asks for more. So rechunk_trace_after's job (staged_trace.h: S in two runs,
 * so that the re-chunk needs a second record) runs here as requests after a
 * sweep of fillers, 64 MiB blocks of a chunk each: 254 fill zoned's first
 * 256 chunk records (with X and Y; chunk_new), and the sim device's ledger
 * grows its mappings at 251 to 254. The requests before R's meet no failure
 * (paused), so every allocation of R's request and the re-chunk's fails in
 * turn; the teardown after it is paused too (not counted, so that no run is
 * spent failing an allocation that is never made). Where zoned's first
 * capacity changes, the window must follow. */
enum { FULL_FIRST = 248, FULL_LAST = 258 };
typedef struct full_case {
  const hbm_trace *trace; /* rechunk_trace_after's, two runs */
  uint32_t fillers;
  char device[32];
} full_case;

static uint64_t full_clean_layout;

static int full_rechunk_run(const void *arg, int clean) {
  const full_case *c = arg;
  const uint32_t r_id = c->fillers + RECHUNK_TRACE_R;
  uint64_t addr[FULL_LAST + RECHUNK_TRACE_IDS];
  uint8_t live[FULL_LAST + RECHUNK_TRACE_IDS] = {0};
  paused = 1;
  hbm_device *dev = NULL;
  hbm_heap *heap = NULL;
  int ok = hbm_device_open(c->device, &dev) == HBM_OK && hbm_heap_create(dev, "zoned", NULL, &heap) == HBM_OK;
  const hbm_event *e = c->trace->events;
  for (; ok && !(e->kind == HBM_EV_ALLOC && e->id == r_id); e++) {
    if (e->kind == HBM_EV_ALLOC) ok = hbm_alloc(heap, e->size, (hbm_tag)e->tag, e->stream, &addr[e->id]) == HBM_OK;
    else if (e->kind == HBM_EV_FREE) ok = hbm_free(heap, addr[e->id]) == HBM_OK;
    if (e->kind == HBM_EV_ALLOC || e->kind == HBM_EV_FREE) live[e->id] = e->kind == HBM_EV_ALLOC;
  }
  paused = 0;
  EXPECT(ok);
  uint64_t held_before = holder_digest(heap, 1, 0), scan_before, scan_after;
  hbm_stats before, after;
  EXPECT(read_heap(heap, 1, 0, &scan_before, &before));
  int r = hbm_alloc(heap, e->size, (hbm_tag)e->tag, e->stream, &addr[r_id]);
  live[r_id] = r == HBM_OK;
  uint64_t layout = heap_digest(heap, 1);
  if (clean) {
    EXPECT(r == HBM_OK);
    full_clean_layout = layout;
  } else if (r == HBM_EHOSTMEM) {
    EXPECT(injected);
    EXPECT(holder_digest(heap, 1, 0) == held_before);
    /* The re-chunk may have been done before the request failed, and then
     * the layout shows it. Where the layout is as it was, no call was made
     * either: a re-chunk takes what it needs from host memory before its
     * first call, rather than making calls and undoing them. */
    EXPECT(read_heap(heap, 1, 0, &scan_after, &after));
    if (scan_after == scan_before && after.reserved == before.reserved) EXPECT(after.backend_calls == before.backend_calls);
  } else {
    EXPECT(r == HBM_OK);
    EXPECT(layout == full_clean_layout);
  }
  if (check_during_run(heap)) return 1;
  if (!clean && still_failing()) { /* destroying must still give everything back */
    hbm_heap_destroy(heap);
    hbm_device_close(dev);
    return 0;
  }
  paused = 1;
  EXPECT(hbm_check(heap) == HBM_OK);
  for (uint32_t id = 0; id < c->fillers + RECHUNK_TRACE_IDS; id++)
    if (live[id]) EXPECT(hbm_free(heap, addr[id]) == HBM_OK);
  EXPECT(hbm_check(heap) == HBM_OK);
  hbm_stats st;
  EXPECT(hbm_heap_stats(heap, &st) == HBM_OK && st.live == 0);
  hbm_heap_destroy(heap);
  hbm_device_close(dev);
  paused = 0;
  return 0;
}

/* ---- whole replays, with the policy's invariants checked ----------------------------- */
typedef struct replay_case {
  const hbm_trace *trace;
  const char *policy, *conf, *device;
  uint64_t check_every;
  int verify;
} replay_case;

static hbm_replay_result clean_replay;

/* The figures and the policy's own counters (plans made, moves, ...): a host
 * failure that a request survived must not have changed what it learnt. */
static int same_replay(const hbm_replay_result *a, const hbm_replay_result *b) {
  if (a->ncounters != b->ncounters) return 0;
  for (int i = 0; i < a->ncounters; i++)
    if (strcmp(a->counters[i].name, b->counters[i].name) || a->counters[i].value != b->counters[i].value) return 0;
  return a->events == b->events && a->failures == b->failures && a->peak_live == b->peak_live &&
         a->peak_reserved == b->peak_reserved && a->backend_calls == b->backend_calls &&
         a->max_frag == b->max_frag && a->verified_blocks == b->verified_blocks;
}

static void count_sample(const hbm_sample *s, void *arg) {
  (void)s;
  (*(uint64_t *)arg)++;
}

static int replay_run(const void *arg, int clean) {
  const replay_case *c = arg;
  uint64_t samples = 0;
  hbm_replay_options o = {.policy = c->policy, .conf = c->conf, .device = c->device,
                          .check_every = c->check_every, .verify_data = c->verify,
                          .on_sample = count_sample, .sample_arg = &samples};
  hbm_replay_result res;
  int r = hbm_replay(c->trace, &o, &res);
  if (clean) {
    EXPECT(r == HBM_OK);
    clean_replay = res;
    return 0;
  }
  if (r == HBM_EHOSTMEM) {
    EXPECT(injected);
    return 0;
  }
  EXPECT(r == HBM_OK);
  EXPECT(same_replay(&res, &clean_replay));
  return 0;
}

/* ---- readers and tools ------------------------------------------------------------- */
typedef struct bytes {
  const uint8_t *b;
  size_t n;
} bytes;

static uint64_t clean_digest; /* what the clean run read: a trace_digest, or a count */

/* Everything a trace holds, as one number: a reader that drops a setting, a
 * step or a block on a failed allocation and still answers HBM_OK shows. */
static uint64_t trace_digest(const hbm_trace *t) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char *s = t->conf ? t->conf : ""; *s; s++) h = mix(h, (uint8_t)*s);
  h = mix(h, t->capacity);
  h = mix(h, t->nids);
  for (uint64_t i = 0; i < t->nevents; i++) {
    const hbm_event *e = &t->events[i];
    h = mix(mix(mix(mix(mix(mix(mix(h, e->kind), e->tag), e->flags), (uint32_t)e->stream), e->id), e->size), e->addr);
  }
  for (uint32_t i = 0; i < t->ninit_segments; i++) {
    const hbm_init_segment *s = &t->init_segments[i];
    h = mix(mix(mix(mix(mix(mix(mix(h, s->addr), s->size), (uint32_t)s->stream), s->small), s->expandable), s->first_block), s->nblocks);
  }
  for (uint32_t i = 0; i < t->ninit_blocks; i++) {
    const hbm_init_block *b = &t->init_blocks[i];
    h = mix(mix(mix(mix(mix(h, b->addr), b->size), b->request), b->id), b->tag);
  }
  return h;
}

/* What a reader or the generator gave: the clean run's trace, or HBM_EHOSTMEM
 * with no trace made. */
static int expect_trace(int r, hbm_trace *t, int clean) {
  if (clean) {
    EXPECT(r == HBM_OK);
    clean_digest = trace_digest(t);
  } else if (r != HBM_OK) {
    EXPECT(r == HBM_EHOSTMEM && injected && t == NULL);
    return 0;
  }
  EXPECT(trace_digest(t) == clean_digest);
  hbm_trace_free(t);
  return 0;
}

static int trace_text_run(const void *arg, int clean) {
  const bytes *in = arg;
  hbm_trace *t = NULL;
  hbm_diag d = {0};
  int r = hbm_trace_parse_text((const char *)in->b, in->n, "in.trace", &t, &d);
  return expect_trace(r, t, clean);
}

static int snapshot_run(const void *arg, int clean) {
  const bytes *in = arg;
  hbm_trace *t = NULL;
  hbm_diag d = {0};
  int r = hbm_snapshot_import(in->b, in->n, "in.pickle", NULL, &t, &d);
  return expect_trace(r, t, clean);
}

/* hbm_trace_load of a snapshot file: where it fails, *out is as it was (the
 * header's rule for outputs), here a pointer that is no trace. It was set to
 * NULL when host memory ran out measuring the imported trace's peak live. */
static char untouched_mark;
static int trace_load_run(const void *arg, int clean) {
  hbm_trace *const untouched = (hbm_trace *)(void *)&untouched_mark;
  hbm_trace *t = untouched;
  hbm_diag d = {0};
  int r = hbm_trace_load((const char *)arg, &t, &d);
  if (!clean && r != HBM_OK) {
    EXPECT(r == HBM_EHOSTMEM && injected && t == untouched);
    return 0;
  }
  return expect_trace(r, t, clean);
}

/* zoned without virtual memory: a block whose record cannot be made goes
 * back to the zone it came from. The first transient block sits exactly at
 * the split, where the zones meet, and its record is the map's first entry,
 * so each of its host allocations fails in turn; a block given back to the
 * wrong zone stays live there with no record, which hbm_check names. */
static int fixed_zones_run(const void *arg, int clean) {
  (void)arg;
  const uint64_t mib = 1ull << 20;
  hbm_device *dev;
  hbm_heap *heap;
  if (heap_open("sim:64MiB", "zoned", "vmm:off,zones:tags", clean, &dev, &heap)) return 1;
  if (!heap) return 0;
  int r;
  static const hbm_tag tags[] = {HBM_TAG_ACT, HBM_TAG_PARAM, HBM_TAG_ACT, HBM_TAG_OPTIM};
  uint64_t addr[4], held = 0;
  int ok[4];
  for (int i = 0; i < 4; i++) {
    r = hbm_alloc(heap, mib, tags[i], 0, &addr[i]);
    EXPECT(r == HBM_OK || (!clean && r == HBM_EHOSTMEM));
    ok[i] = r == HBM_OK;
    held += ok[i] ? mib : 0;
    if (check_during_run(heap)) return 1;
    hbm_stats st;
    uint64_t scan;
    if (read_heap(heap, 1, 1, &scan, &st)) EXPECT(st.live == held);
  }
  if (clean) EXPECT(addr[0] == addr[1] + 32 * mib); /* the transient zone starts at the split, half the device */
  for (int i = 0; i < 4; i++)
    if (ok[i]) EXPECT(hbm_free(heap, addr[i]) == HBM_OK);
  if (check_during_run(heap)) return 1;
  hbm_heap_destroy(heap);
  hbm_device_close(dev);
  return 0;
}

/* ---- a virtual range on its own, unreserved -------------------------------------------
 * Every policy calls hbm_vspace_reserve before it places or frees, so there
 * a placement or a free never fails for host memory, and the paths that undo
 * a half-made change (carve's and free's) never run. Here nothing reserves:
 * placements (best fit and at an address, once the address index is kept)
 * and frees take what they need as they go. One that fails must answer
 * HBM_EHOSTMEM and leave the range as it was, block for block, its
 * invariants holding; a failed free leaves the block live, to be freed
 * later. A run in which nothing failed ends as the clean run did. */
#define VSPACE_OPS 1600
static uint64_t clean_vspace;
static int vspace_visit(void *arg, uint64_t addr, uint64_t size, int live) {
  uint64_t *h = arg;
  *h = mix(mix(mix(*h, addr), size), (uint64_t)live);
  return 0;
}
static uint64_t vspace_digest(const hbm_vspace *v) {
  uint64_t h = 0xcbf29ce484222325ull;
  hbm_vspace_walk(v, vspace_visit, &h);
  return mix(mix(h, hbm_vspace_live_bytes(v)), hbm_vspace_largest_free(v));
}
typedef struct free_pick { uint64_t want, addr, size; } free_pick;
static int pick_free(void *arg, uint64_t addr, uint64_t size, int live) {
  free_pick *f = arg;
  if (!live && size >= f->want) f->addr = addr, f->size = size;
  return 0;
}
/* Op `op` of the run: the first 500 place small blocks, side by side; the
 * next 250 free every other one of them (hundreds of free blocks apart:
 * the free set and the address index split their chunks, which is when they
 * allocate; a freed entry is 0 until the list closes up after them); the
 * rest mix frees, placements at an address and best fits. */
static int vspace_op(hbm_vspace *v, int op, uint64_t *rng, uint64_t *live, size_t *nlive, int indexed) {
  enum { UNIT = 512 };
  uint64_t addr = 0, block = 0, size = UNIT * (1 + test_rand_below(rng, test_rand_below(rng, 4) ? 16 : 512));
  int r = HBM_OK, kind = op < 500 ? 7 : (int)test_rand_below(rng, 8); /* 0-1 free, 2-4 at an address */
  if (op >= 500 && op < 750) {
    size_t k = 2 * (size_t)(op - 500) + 1;
    if (k < *nlive) r = hbm_vspace_free(v, live[k], NULL, NULL);
    if (k < *nlive && r == HBM_OK) live[k] = 0;
    if (op == 749) { /* close up the list: the blocks whose free failed stay in it */
      size_t m = 0;
      for (size_t i = 0; i < *nlive; i++)
        if (live[i]) live[m++] = live[i];
      *nlive = m;
    }
  } else if (kind < 2 && *nlive) {
    size_t k = (size_t)test_rand_below(rng, *nlive);
    r = hbm_vspace_free(v, live[k], NULL, NULL);
    if (r == HBM_OK) live[k] = live[--*nlive];
  } else if (kind >= 2 && kind <= 4 && indexed) {
    free_pick f = {size, 0, 0};
    hbm_vspace_walk(v, pick_free, &f); /* the highest free block that holds it, */
    addr = f.addr + (f.size - size) / UNIT / 2 * UNIT; /* in its middle: free parts before and after */
    r = f.addr ? hbm_vspace_alloc_at(v, addr, size, (uint32_t)op, &block) : HBM_ENOMEM;
    if (r == HBM_OK) live[(*nlive)++] = addr;
  } else {
    r = hbm_vspace_alloc(v, op < 500 ? UNIT : size, NULL, NULL, 1, (uint32_t)op, &addr, &block);
    if (r == HBM_OK) live[(*nlive)++] = addr;
  }
  return r;
}
/* With `reserved` (the scenario's arg), each op runs as zoned runs its
 * placements: hbm_vspace_reserve first, and then the op (a placement, a
 * placement at an address or a free) and, once the address index is kept,
 * the free that would take a placement back, must make no allocation at
 * all; the block is then placed again at its address, unreserved. */
static int vspace_run(const void *arg, int clean) {
  int reserved = arg != NULL;
  hbm_vspace *v;
  int r = hbm_vspace_create(1ull << 30, 64ull << 20, 512, &v);
  if (r != HBM_OK) {
    EXPECT(!clean && r == HBM_EHOSTMEM && injected);
    return 0;
  }
  uint64_t rng = 0x7673706163650001ull, live[VSPACE_OPS];
  size_t nlive = 0;
  int indexed = 0;
  for (int op = 0; op < VSPACE_OPS; op++) {
    if (op == 250 && !indexed) { /* the index, kept from then on */
      uint64_t d0 = vspace_digest(v);
      r = hbm_vspace_index_addresses(v);
      if (r == HBM_OK) indexed = 1;
      else EXPECT(!clean && r == HBM_EHOSTMEM && injected && vspace_digest(v) == d0);
    }
    uint64_t d0 = vspace_digest(v);
    if (reserved && (r = hbm_vspace_reserve(v)) != HBM_OK) {
      EXPECT(!clean && r == HBM_EHOSTMEM && injected && vspace_digest(v) == d0);
      continue; /* the op is not made: nothing changed */
    }
    size_t placed_before = nlive;
    broken_promises = 0;
    promised = reserved;
    r = vspace_op(v, op, &rng, live, &nlive, indexed);
    if (reserved && r == HBM_OK && indexed && nlive > placed_before) {
      uint64_t a = live[nlive - 1], size;
      int f = hbm_vspace_free(v, a, &size, NULL); /* the undo the reservation covers too */
      promised = 0;
      EXPECT(f == HBM_OK);
      uint64_t block;
      f = hbm_vspace_alloc_at(v, a, size, (uint32_t)op, &block);
      if (f != HBM_OK) {
        EXPECT(!clean && f == HBM_EHOSTMEM && injected);
        nlive--;
      }
    }
    promised = 0;
    EXPECT(!broken_promises);
    if (r == HBM_EHOSTMEM) {
      EXPECT(!clean && injected);
      EXPECT(vspace_digest(v) == d0);
    } else {
      EXPECT(r == HBM_OK || r == HBM_ENOMEM);
    }
    EXPECT(hbm_vspace_check(v, NULL, NULL) == 0);
  }
  uint64_t end = vspace_digest(v);
  if (clean) clean_vspace = end;
  EXPECT(injected || end == clean_vspace);
  hbm_vspace_destroy(v);
  return 0;
}

/* Reads a MiniMalloc CSV, plans it, writes the solution: the plan must be
 * the clean run's, offset for offset, or the answer HBM_EHOSTMEM. */
#define PLAN_BLOCKS 48
static uint64_t clean_plan;
static int plan_csv_run(const void *arg, int clean) {
  const char *text = arg;
  hbm_plan_input in;
  hbm_diag d = {0};
  int r = hbm_plan_csv_parse(text, strlen(text), "in.csv", &in, &d);
  if (r != HBM_OK) {
    EXPECT(!clean && r == HBM_EHOSTMEM && injected);
    return 0;
  }
  EXPECT(in.n == PLAN_BLOCKS);
  uint64_t offsets[PLAN_BLOCKS], footprint = 0;
  char *out = NULL;
  size_t len = 0;
  r = hbm_dsa_plan(in.blocks, in.n, 0, 1, offsets, &footprint);
  if (r == HBM_OK) {
    uint64_t h = mix(0xcbf29ce484222325ull, footprint);
    for (size_t i = 0; i < in.n; i++) h = mix(h, offsets[i]);
    if (clean) clean_plan = h;
    EXPECT(h == clean_plan);
    r = hbm_plan_csv_render(&in, offsets, &out, &len);
  }
  EXPECT(r == HBM_OK || (r == HBM_EHOSTMEM && injected && !clean));
  free(out);
  hbm_plan_input_free(&in);
  return 0;
}

/* The host device's promise (hbm_dev_prepare): the creates it was prepared
 * for need no host memory, also where no free run of its memory file is long
 * enough and a handle is made of several runs, and after a release between
 * the prepare and the creates (as zoned's staged re-chunk does). */
static int host_prepared_run(const void *arg, int clean) {
  (void)arg, (void)clean;
  const uint64_t MiB = 1ull << 20;
  hbm_device *dev;
  /* Unprepared, a create over scattered runs may fail for host memory: then
   * the device holds, and has held, no more than before. */
  int r = hbm_device_open("host:64MiB", &dev);
  if (r != HBM_OK) {
    EXPECT(r == HBM_EHOSTMEM && injected);
    return 0;
  }
  uint64_t s3[3], hu, small[24];
  /* First 24 segments of 2 MiB (peak 48 MiB), all freed: the memory file's
   * allocator then has room for the create's runs, and only their chain needs
   * host memory (a create that went on without it would chain nothing). */
  int made = 0;
  for (; made < 24 && (r = hbm_dev_seg_alloc(dev, 2 * MiB, 0, &small[made])) == HBM_OK; made++) {}
  while (made > 0 && r == HBM_OK) r = hbm_dev_seg_free(dev, small[--made], 2 * MiB);
  if (r != HBM_OK) {
    EXPECT(r == HBM_EHOSTMEM && injected);
    while (made > 0) (void)hbm_dev_seg_free(dev, small[--made], 2 * MiB);
    hbm_device_close(dev);
    return 0;
  }
  /* three 16 MiB, the first freed: free runs of 16 MiB at both ends, peak 48 MiB */
  for (; made < 3 && (r = hbm_dev_seg_alloc(dev, 16 * MiB, 0, &s3[made])) == HBM_OK; made++) {}
  if (r == HBM_OK) r = hbm_dev_seg_free(dev, s3[0], 16 * MiB);
  if (r == HBM_OK) {
    uint64_t peak = dev->peak_phys_used, used = dev->phys_used;
    r = hbm_dev_phys_create(dev, 24 * MiB, &hu);
    if (r == HBM_OK) {
      /* made whole: its runs are chained, and all go back (a chain missing
       * a link leaves a run live that no handle holds) */
      EXPECT(hbm_device_check(dev, NULL, NULL) == 0);
      EXPECT(hbm_dev_phys_release(dev, hu, 24 * MiB) == HBM_OK);
      EXPECT(dev->phys_used == used);
      EXPECT(hbm_device_check(dev, NULL, NULL) == 0);
    } else {
      EXPECT(r == HBM_EHOSTMEM && injected && dev->phys_used == used && dev->peak_phys_used == peak);
    }
  } else {
    EXPECT(r == HBM_EHOSTMEM && injected);
  }
  hbm_device_close(dev);

  r = hbm_device_open("host:64MiB", &dev);
  if (r != HBM_OK) {
    EXPECT(r == HBM_EHOSTMEM && injected);
    return 0;
  }
  uint64_t seg[4], h1 = 0, h2 = 0;
  int nseg = 0;
  for (; nseg < 4 && (r = hbm_dev_seg_alloc(dev, 16 * MiB, 0, &seg[nseg])) == HBM_OK; nseg++) {}
  if (r == HBM_OK) r = hbm_dev_seg_free(dev, seg[0], 16 * MiB);
  if (r == HBM_OK) r = hbm_dev_prepare(dev, 2, 2);
  if (r == HBM_OK) {
    unsigned long long before = alloc_calls;
    EXPECT(hbm_dev_seg_free(dev, seg[2], 16 * MiB) == HBM_OK); /* released after the prepare */
    EXPECT(hbm_dev_phys_create(dev, 24 * MiB, &h1) == HBM_OK); /* 16 MiB + 8 MiB */
    EXPECT(hbm_dev_phys_create(dev, 8 * MiB, &h2) == HBM_OK);
    EXPECT(alloc_calls == before);
    EXPECT(hbm_device_check(dev, NULL, NULL) == 0);
    EXPECT(hbm_dev_phys_release(dev, h1, 24 * MiB) == HBM_OK);
    EXPECT(hbm_dev_phys_release(dev, h2, 8 * MiB) == HBM_OK);
  } else {
    EXPECT(r == HBM_EHOSTMEM && injected);
  }
  hbm_device_close(dev); /* gives back what is left */
  return 0;
}

static int gen_run(const void *arg, int clean) {
  (void)arg;
  hbm_gen_llm_config c;
  hbm_gen_llm_defaults(&c);
  c.layers = 2;
  c.hidden = 512;
  c.heads = 4;
  c.vocab = 1000;
  c.seq_min = c.seq_max = 256;
  c.grad_accum = 2;
  c.dp = 2;
  c.zero = 1;
  c.steps = 2;
  hbm_trace *t = NULL;
  hbm_diag d = {0};
  int r = hbm_gen_llm(&c, &t, &d);
  return expect_trace(r, t, clean);
}

/* A report page: zoned where the trace fits, bestfit on a device too small
 * (its layout at the first failure). The page must be the clean run's. */
static char report_tight[64];
static uint64_t clean_page;
static int report_run(const void *arg, int clean) {
  const hbm_trace *t = arg;
  hbm_report rep;
  memset(&rep, 0, sizeof rep);
  hbm_report_run run[2];
  memset(run, 0, sizeof run);
  int r = hbm_report_trace_facts(t, &rep);
  if (r == HBM_OK) r = hbm_report_run_policy(t, "zoned", NULL, NULL, 0, NULL, NULL, &run[0]);
  if (r == HBM_OK) r = hbm_report_run_policy(t, "bestfit", NULL, report_tight, 0, NULL, NULL, &run[1]);
  if (r == HBM_OK) r = hbm_report_layout_at(t, "zoned", NULL, NULL, hbm_report_tightest_event(&run[0]), NULL, NULL, &run[0]);
  char *html = NULL;
  size_t len = 0;
  if (r == HBM_OK) {
    for (int i = 0; i < 2; i++) run[i].result.ns_per_event = 0; /* the page's one timing */
    rep.runs = run;
    rep.nruns = 2;
    r = hbm_report_html(&rep, &html, &len);
  }
  if (clean) EXPECT(r == HBM_OK && html && len > 0 && run[0].nlayout > 0 && run[1].result.oom && run[1].nlayout > 0);
  else EXPECT(r == HBM_OK || (r == HBM_EHOSTMEM && injected));
  if (r == HBM_OK) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) h = mix(h, (uint8_t)html[i]);
    if (clean) clean_page = h;
    EXPECT(h == clean_page);
  }
  free(html);
  for (int i = 0; i < 2; i++) hbm_report_run_release(&run[i]);
  rep.runs = NULL;
  rep.nruns = 0;
  hbm_report_release(&rep);
  return 0;
}

static hbm_mincap_result clean_mincap;
static int mincap_run(const void *arg, int clean) {
  const hbm_trace *t = arg;
  hbm_mincap_options o = {0};
  hbm_mincap_result res;
  int r = hbm_mincap(t, "zoned", &o, &res);
  if (clean) {
    EXPECT(r == HBM_OK && res.found);
    clean_mincap = res;
    return 0;
  }
  if (r != HBM_OK) {
    EXPECT(r == HBM_EHOSTMEM && injected);
    return 0;
  }
  EXPECT(res.found == clean_mincap.found && res.min_capacity == clean_mincap.min_capacity &&
         res.backend_calls == clean_mincap.backend_calls);
  return 0;
}

static hbm_fidelity_result clean_fidelity;
static int fidelity_run(const void *arg, int clean) {
  const hbm_trace *t = arg;
  hbm_fidelity_result res;
  hbm_diag d = {0};
  int r = hbm_fidelity(t, NULL, &res, &d);
  if (clean) {
    EXPECT(r == HBM_OK);
    clean_fidelity = res;
    return 0;
  }
  if (r != HBM_OK) {
    EXPECT(r == HBM_EHOSTMEM && injected);
    return 0;
  }
  EXPECT(res.address_matches == clean_fidelity.address_matches &&
         res.segment_allocs_model == clean_fidelity.segment_allocs_model);
  return 0;
}

/* One AdamW step over a few tensors, from the same state each run: the clean
 * run's result, or HBM_EHOSTMEM with nothing written. */
#define ADAMW_TENSORS 5
#define ADAMW_ELEMS 300
static uint16_t aw_weight[ADAMW_TENSORS][ADAMW_ELEMS], aw_grad[ADAMW_TENSORS][ADAMW_ELEMS];
static float aw_master[ADAMW_TENSORS][ADAMW_ELEMS], aw_m[ADAMW_TENSORS][ADAMW_ELEMS], aw_v[ADAMW_TENSORS][ADAMW_ELEMS];
static uint64_t aw_start, aw_clean;
static uint64_t adamw_digest(void) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int t = 0; t < ADAMW_TENSORS; t++)
    for (int i = 0; i < ADAMW_ELEMS; i++) {
      uint32_t a, b, c;
      memcpy(&a, &aw_master[t][i], 4);
      memcpy(&b, &aw_m[t][i], 4);
      memcpy(&c, &aw_v[t][i], 4);
      h = mix(mix(mix(mix(h, aw_weight[t][i]), a), b), c);
    }
  return h;
}
static void adamw_reset(void) {
  for (int t = 0; t < ADAMW_TENSORS; t++)
    for (int i = 0; i < ADAMW_ELEMS; i++) {
      aw_master[t][i] = (float)(t + 1) * 0.01f * (float)(i % 17 - 8);
      aw_weight[t][i] = (uint16_t)(0x3c00 + i % 64);
      aw_grad[t][i] = (uint16_t)(0x3a00 + (i * 7 + t) % 128);
      aw_m[t][i] = 0.001f * (float)(i % 5);
      aw_v[t][i] = 0.0001f * (float)(i % 3);
    }
}
static int adamw_run(const void *arg, int clean) {
  const hbm_adamw_impl *impl = arg;
  adamw_reset();
  if (clean) aw_start = adamw_digest();
  hbm_adamw_tensor ts[ADAMW_TENSORS];
  for (int t = 0; t < ADAMW_TENSORS; t++)
    ts[t] = (hbm_adamw_tensor){aw_weight[t], aw_grad[t], aw_master[t], aw_m[t], aw_v[t], ADAMW_ELEMS - 40 * (uint64_t)t, t % 2};
  hbm_adamw_options o;
  hbm_adamw_options_init(&o);
  o.impl = *impl;
  o.threads = 2;
  int r = hbm_adamw_step(ts, ADAMW_TENSORS, &o);
  if (clean) {
    EXPECT(r == HBM_OK);
    aw_clean = adamw_digest();
    return 0;
  }
  if (r == HBM_EHOSTMEM) {
    EXPECT(injected && adamw_digest() == aw_start);
    return 0;
  }
  EXPECT(r == HBM_OK && adamw_digest() == aw_clean);
  return 0;
}

/* A recording that starts mid-run, small enough (tens of MiB) for the host
 * device to fill and verify each run quickly: a small and a large recorded
 * segment tiled with blocks, some live, then random allocations of up to
 * 4 MiB and frees, with step marks. NULL if host memory ran out. */
static hbm_trace *small_recording(uint64_t *rng) {
  const uint64_t mib = 1ull << 20;
  hbm_trace *t;
  if (hbm_trace_new("small", &t) != HBM_OK) return NULL;
  uint32_t live[64], nlive = 0, next_id = 0;
  for (int k = 0; k < 2; k++) {
    hbm_init_segment seg = {.addr = 0x100000000ull + (uint64_t)k * (1ull << 30), .size = k ? 20 * mib : 2 * mib,
                            .small = (uint8_t)!k};
    if (hbm_trace_add_init_segment(t, &seg) != HBM_OK) goto fail;
    for (uint64_t at = 0; at < seg.size;) {
      uint64_t size = 512 * (1 + test_rand_below(rng, k ? 8192 : 1024));
      hbm_init_block b = {.addr = seg.addr + at, .size = size < seg.size - at ? size : seg.size - at, .id = HBM_NO_ID};
      if (test_rand_below(rng, 3) && nlive < 64) {
        b.id = next_id++;
        b.request = b.size;
        b.tag = (uint8_t)test_rand_below(rng, HBM_TAG_COUNT);
        live[nlive++] = b.id;
      }
      if (hbm_trace_add_init_block(t, &b) != HBM_OK) goto fail;
      at += b.size;
    }
  }
  for (int e = 0; e < 150; e++) {
    uint64_t r = test_rand_below(rng, 100);
    if (r < 4) {
      if (hbm_trace_step(t, (uint64_t)e + 1) != HBM_OK) goto fail;
    } else if (nlive && (r < 50 || nlive == 64)) {
      uint32_t k = (uint32_t)test_rand_below(rng, nlive);
      if (hbm_trace_free_id(t, live[k]) != HBM_OK) goto fail;
      live[k] = live[--nlive];
    } else {
      uint64_t size = 1 + test_rand_below(rng, 4 * mib);
      if (hbm_trace_alloc(t, next_id, size, (hbm_tag)test_rand_below(rng, HBM_TAG_COUNT), (int)test_rand_below(rng, 2)) != HBM_OK)
        goto fail;
      live[nlive++] = next_id++;
    }
  }
  hbm_trace_reserve_ids(t, next_id);
  return t;
fail:
  hbm_trace_free(t);
  return NULL;
}

/* ---- main ---------------------------------------------------------------------------- */
static int read_file(const char *path, bytes *out) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  static uint8_t buf[1 << 20];
  out->n = fread(buf, 1, sizeof buf, f);
  out->b = buf;
  fclose(f);
  return out->n > 0 && out->n < sizeof buf;
}

/* Saves a trace as text over the file its clean run wrote: after every run
 * the file holds the clean run's bytes (kept, or written again) with nothing
 * left beside it, and a failure names the file and says why. */
typedef struct save_case {
  const hbm_trace *t;
  const char *dir, *path;
  const bytes *want;
} save_case;
static int holds_bytes(const char *path, const bytes *want) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  static uint8_t buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  return n == want->n && !memcmp(buf, want->b, n);
}
static int trace_save_run(const void *arg, int clean) {
  const save_case *c = arg;
  hbm_diag d = {0};
  int r = hbm_trace_save(c->t, c->path, &d);
  EXPECT(r == HBM_OK || (!clean && r == HBM_EHOSTMEM && injected));
  if (r != HBM_OK) EXPECT(!strcmp(d.file, c->path) && d.message[0]);
  paused = 1;
  int same = holds_bytes(c->path, c->want), alone = test_dir_entries(c->dir) == 1;
  paused = 0;
  EXPECT(same);
  EXPECT(alone);
  return 0;
}

int main(void) {
  uint64_t seed = test_seed("test_hostmem_failure");
  uint64_t rng = seed;
  base_seed = seed;
  double scale = test_scale();
  uint64_t max_runs = (uint64_t)(1500 * scale) + 50;
  hbm_set_error_handler(on_error, NULL);
  int bad = 0;

  /* Heaps under every policy, on the simulated and the host device. */
  static heap_case heaps[] = {
      {"bestfit", NULL, "sim:256MiB", 0, 600},
      {"caching", NULL, "sim:256MiB", 0, 600},
      {"expandable", NULL, "sim:256MiB", 0, 600},
      /* The release paths: garbage collection, oversize blocks, empty_cache. */
      {"caching", "per_process_memory_fraction:0.5,garbage_collection_threshold:0.3,max_split_size_mb:32", "sim:256MiB", 0, 600},
      {"expandable", "per_process_memory_fraction:0.5,garbage_collection_threshold:0.3", "sim:256MiB", 0, 600},
      {"compact", NULL, "sim:256MiB", 0, 600},
      {"compact", "every_steps:2", "sim:256MiB", 0, 600},
      {"zoned", NULL, "sim:256MiB", 0, 600},
      {"zoned", NULL, "sim:96MiB", 0, 600},
      {"zoned", "vmm:off", "sim:256MiB", 0, 600},
      {"zoned", NULL, "host:64MiB", 0, 200},
  };
  char names[sizeof heaps / sizeof heaps[0]][160];
  for (size_t i = 0; i < sizeof heaps / sizeof heaps[0]; i++) {
    heaps[i].seed = test_rand(&rng);
    snprintf(names[i], sizeof names[i], "heap %s%s%s on %s", heaps[i].policy, heaps[i].conf ? " " : "",
             heaps[i].conf ? heaps[i].conf : "", heaps[i].device);
    scenario s = {names[i], heap_run, &heaps[i]};
    /* A host device maps real memory for each run: fewer runs, sampled. */
    bad |= run_scenario(&s, strncmp(heaps[i].device, "host", 4) ? max_runs : max_runs / 32);
  }

  scenario sfixed = {"zoned vmm:off, first transient block at the split", fixed_zones_run, NULL};
  bad |= run_scenario(&sfixed, max_runs);

  /* Replays: a recording that starts mid-run, every policy, invariants checked. */
  uint64_t trng = test_rand(&rng);
  hbm_trace *seeded = seeded_trace(&trng, 200);
  /* The host device writes and verifies every live byte: a small recording. */
  hbm_trace *small = small_recording(&trng);
  hbm_trace *workload = small_workload(8ull << 30, 2);
  hbm_trace *repeating = NULL;
  size_t nrep;
  int deviated;
  stepped_op *rep_ops = stepped_ops(&trng, 8, 0, 40, 96ull << 20, &nrep, &deviated);
  if (rep_ops) repeating = stepped_to_trace(rep_ops, nrep);
  free(rep_ops);
  CHECK(seeded && workload && small && repeating);
  if (seeded && workload && small) {
    static const char *policies[] = {"bestfit", "caching", "expandable", "compact", "zoned"};
    char rnames[8][64];
    for (int i = 0; i < 5; i++) {
      replay_case rc = {seeded, policies[i], NULL, "sim:4GiB", 10, 0};
      snprintf(rnames[i], sizeof rnames[i], "replay %s (starting state)", policies[i]);
      scenario s = {rnames[i], replay_run, &rc};
      bad |= run_scenario(&s, max_runs);
    }
    replay_case verified = {small, "zoned", NULL, "host:256MiB", 0, 1};
    scenario sv = {"replay zoned, host device, verified", replay_run, &verified};
    bad |= run_scenario(&sv, max_runs / 8);
    replay_case gen = {workload, "zoned", NULL, NULL, 0, 0};
    scenario sg = {"replay zoned (generated workload)", replay_run, &gen};
    bad |= run_scenario(&sg, max_runs);
    /* Steps that repeat: zoned records them and follows a plan; a host
     * failure must fail its request or change nothing it records. With
     * plan:always, since whether a plan pays depends on the drawn job. */
    if (repeating) {
      hbm_replay_options po = {.policy = "zoned", .conf = "plan:always", .device = "sim:8GiB"};
      hbm_replay_result pr;
      CHECK(hbm_replay(repeating, &po, &pr) == HBM_OK && replay_counter(&pr, "plan_builds") >= 1);
      replay_case rep = {repeating, "zoned", "plan:always", "sim:8GiB", 0, 0};
      scenario sq = {"replay zoned (repeating steps)", replay_run, &rep};
      bad |= run_scenario(&sq, max_runs);
    }

    /* zoned's re-chunks, in place and through host memory, and a trim: a
     * request fails for host memory with nothing changed, never with pages
     * left unbacked. */
    static const struct { const char *name, *device, *counter; uint64_t r_mib; } rechunks[] = {
        {"replay zoned (re-chunk in place)", "sim:168MiB", "rechunks", 46},
        {"replay zoned (re-chunk staged)", "sim:140MiB", "staged_rechunks", 34},
        {"replay zoned (trim)", "sim:256MiB", "trims", 0},
    };
    for (size_t i = 0; i < sizeof rechunks / sizeof rechunks[0]; i++) {
      hbm_trace *t = rechunks[i].r_mib ? rechunk_trace(rechunks[i].r_mib) : trim_trace(1);
      CHECK(t != NULL);
      if (!t) continue;
      hbm_replay_options po = {.policy = "zoned", .device = rechunks[i].device};
      hbm_replay_result pr;
      CHECK(hbm_replay(t, &po, &pr) == HBM_OK && replay_counter(&pr, rechunks[i].counter) >= 1);
      replay_case rc = {t, "zoned", NULL, rechunks[i].device, 1, 0};
      scenario s = {rechunks[i].name, replay_run, &rc};
      bad |= run_scenario(&s, max_runs);
      hbm_trace_free(t);
    }

    /* The same re-chunks, S in two runs, with zoned's chunk records or the
     * device's bookkeeping full just when the re-chunk asks for more. */
    for (uint32_t fillers = FULL_FIRST; fillers <= FULL_LAST; fillers++) {
      for (int staged = 0; staged <= 1; staged++) {
        full_case fc = {.fillers = fillers};
        char name[64];
        snprintf(fc.device, sizeof fc.device, "sim:%lluMiB", (unsigned long long)(64ull * fillers + (staged ? 140 : 168)));
        snprintf(name, sizeof name, "zoned re-chunk %s, %u before", staged ? "staged" : "in place", fillers);
        /* R of 34 MiB on the smaller device is staged, of 46 on the larger in place: the replay says so. */
        hbm_trace *t = rechunk_trace_after(staged ? 34 : 46, fillers, 1);
        hbm_replay_options po = {.policy = "zoned", .device = fc.device};
        hbm_replay_result pr;
        CHECK(t && hbm_replay(t, &po, &pr) == HBM_OK && replay_counter(&pr, "rechunks") == 1 &&
              replay_counter(&pr, "staged_rechunks") == staged);
        if (!t) continue;
        fc.trace = t;
        scenario s = {name, full_rechunk_run, &fc};
        bad |= run_scenario(&s, max_runs);
        hbm_trace_free(t);
      }
    }

    snprintf(report_tight, sizeof report_tight, "sim:%lluMiB", (unsigned long long)(hbm_trace_peak_live(workload) >> 21));
    scenario sr = {"report (facts, run, html)", report_run, workload};
    bad |= run_scenario(&sr, max_runs);
    scenario sm = {"mincap zoned", mincap_run, seeded};
    bad |= run_scenario(&sm, max_runs / 4);

    /* The text format, written by the library and read back. */
    char path[4096];
    snprintf(path, sizeof path, "%s/test_hostmem_failure.%d.trace",
             getenv("HBM_BUILD") ? getenv("HBM_BUILD") : "/tmp", (int)getpid());
    hbm_diag d = {0};
    bytes text;
    CHECK(hbm_trace_save(seeded, path, &d) == HBM_OK);
    if (read_file(path, &text)) {
      scenario st = {"trace text reader", trace_text_run, &text};
      bad |= run_scenario(&st, max_runs);
      char save_dir[] = "/tmp/hbm-test-hostmem-XXXXXX", save_path[64];
      CHECK(mkdtemp(save_dir) != NULL);
      snprintf(save_path, sizeof save_path, "%s/out.trace", save_dir);
      save_case sc = {seeded, save_dir, save_path, &text};
      scenario ss = {"trace text writer", trace_save_run, &sc};
      bad |= run_scenario(&ss, max_runs);
      unlink(save_path);
      CHECK(rmdir(save_dir) == 0);
    } else {
      CHECK(!"trace text written and read back");
    }
    unlink(path);
  }
  scenario shost = {"host device, prepared creates over scattered runs", host_prepared_run, NULL};
  bad |= run_scenario(&shost, max_runs);
  scenario sgen = {"workload generator", gen_run, NULL};
  bad |= run_scenario(&sgen, max_runs);

  static char csv[PLAN_BLOCKS * 48 + 32];
  size_t at = (size_t)snprintf(csv, sizeof csv, "id,lower,upper,size\n");
  for (int i = 0; i < PLAN_BLOCKS; i++) {
    uint64_t lo = test_rand_below(&rng, 100), len = 1 + test_rand_below(&rng, 40);
    at += (size_t)snprintf(csv + at, sizeof csv - at, "b%d,%llu,%llu,%llu\n", i, (unsigned long long)lo,
                           (unsigned long long)(lo + len), (unsigned long long)(1 + test_rand_below(&rng, 1 << 20)));
  }
  scenario scsv = {"plan CSV reader and writer", plan_csv_run, csv};
  bad |= run_scenario(&scsv, max_runs);

  scenario svs = {"virtual range, unreserved", vspace_run, NULL};
  bad |= run_scenario(&svs, max_runs);
  scenario svr = {"virtual range, reserved first", vspace_run, "reserved"};
  bad |= run_scenario(&svr, max_runs);

  /* A snapshot the project generates (tests/fixtures/snapshots). */
  const char *root = getenv("HBM_ROOT") ? getenv("HBM_ROOT") : ".";
  char pickle_path[4096];
  snprintf(pickle_path, sizeof pickle_path, "%s/tests/fixtures/snapshots/snapshot_expandable_p4.pickle", root);
  static bytes pickle;
  if (read_file(pickle_path, &pickle)) {
    scenario sp = {"snapshot importer", snapshot_run, &pickle};
    bad |= run_scenario(&sp, max_runs);
    scenario sl = {"trace loader (a snapshot file)", trace_load_run, pickle_path};
    bad |= run_scenario(&sl, max_runs);
    hbm_trace *snap = NULL;
    hbm_diag d = {0};
    CHECK(hbm_snapshot_import(pickle.b, pickle.n, "in.pickle", NULL, &snap, &d) == HBM_OK);
    if (snap) {
      scenario sf = {"fidelity", fidelity_run, snap};
      bad |= run_scenario(&sf, max_runs);
      hbm_trace_free(snap);
    }
  } else {
    fprintf(stderr, "cannot read %s\n", pickle_path);
    CHECK(0);
  }

  static const hbm_adamw_impl impls[] = {HBM_ADAMW_REFERENCE, HBM_ADAMW_AUTO};
  scenario sa = {"adamw (reference)", adamw_run, &impls[0]};
  bad |= run_scenario(&sa, max_runs);
  scenario sb = {"adamw (auto)", adamw_run, &impls[1]};
  bad |= run_scenario(&sb, max_runs);

  hbm_trace_free(seeded);
  hbm_trace_free(small);
  hbm_trace_free(workload);
  hbm_trace_free(repeating);
  CHECK(!bad);
  return test_done("test_hostmem_failure");
}
