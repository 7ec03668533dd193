/* test_caching_reference.c: the PyTorch caching-allocator model
 * (pytorch_alloc.c, policies `caching` and `expandable`) against its slow
 * reference (pytorch_ref.c), operation by operation.
 *
 * Each run draws a policy, settings (max_split_size_mb,
 * max_non_split_rounding_mb, roundup_power2_divisions,
 * garbage_collection_threshold with per_process_memory_fraction), a device
 * capacity small enough that out-of-memory and release-and-retry happen, and
 * a sequence of mallocs (small, 1-10 MiB and oversize requests on several
 * streams, first used in random order), frees and recorded segment releases,
 * half the runs from a recorded starting state (ordinary segments and
 * expandable ranges, sometimes larger than the device, sometimes broken).
 * Model and reference each own a sim device of that capacity. After every
 * operation they must agree on the answer (address and block size, or the
 * error), the segment actions in order (cudaMalloc, cudaFree, map, unmap with
 * address and size), PyTorch's statistics, the devices' physical bytes and
 * call counts, and where the seeded live blocks landed; and both invariant
 * checks must pass.
 *
 * HBM_SEED picks the seed; HBM_REF_RUNS the number of runs (default 300,
 * scaled by HBM_TEST_SCALE). On a difference the run, its settings and the
 * operation are printed, with the seed that reproduces it. */
#include "device/device.h"
#include "hbm.h"
#include "policy/policy.h"
#include "policy/pytorch_alloc.h"
#include "policy/pytorch_ref.h"
#include "testutil.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

typedef struct act {
  int a, stream, small;
  uint64_t addr, size;
} act;

enum { MAX_ACTS = 4096 };
typedef struct act_log {
  act v[MAX_ACTS];
  int n, lost;
} act_log;

static void on_action(void *arg, hbm_pt_action a, uint64_t addr, uint64_t size, int stream, int small) {
  act_log *l = arg;
  if (l->n == MAX_ACTS) {
    l->lost++;
    return;
  }
  l->v[l->n++] = (act){(int)a, stream, small, addr, size};
}

static void report(void *arg, const char *message) {
  (void)arg;
  fprintf(stderr, "check: %s\n", message);
}

static const char *action_name[] = {"segment_alloc", "segment_free", "segment_map", "segment_unmap"};

/* Settings for one run, in PYTORCH_CUDA_ALLOC_CONF syntax. */
static void draw_conf(uint64_t *rng, char *out, size_t cap) {
  size_t n = 0;
  out[0] = 0;
#define ADD(...) n += (size_t)snprintf(out + n, cap - n, __VA_ARGS__)
  if (test_rand_below(rng, 3) == 0) {
    static const unsigned msplit[] = {20, 21, 23, 32, 40, 64, 100, 200};
    ADD("%smax_split_size_mb:%u", n ? "," : "", msplit[test_rand_below(rng, 8)]);
    if (test_rand_below(rng, 2)) ADD(",max_non_split_rounding_mb:%u", 20 + (unsigned)test_rand_below(rng, 60));
  }
  if (test_rand_below(rng, 4) == 0) {
    static const char *div[] = {"2", "4", "8", "16", "[1:2,4:8,>:4]", "[64:8,>:2]", "[2:16,16:4,>:1]"};
    ADD("%sroundup_power2_divisions:%s", n ? "," : "", div[test_rand_below(rng, 7)]);
  }
  if (test_rand_below(rng, 4) == 0) {
    ADD("%sper_process_memory_fraction:0.%u", n ? "," : "", 5 + (unsigned)test_rand_below(rng, 5));
    if (test_rand_below(rng, 4)) ADD(",garbage_collection_threshold:0.%u", 3 + (unsigned)test_rand_below(rng, 6));
  }
#undef ADD
}

static uint64_t draw_size(uint64_t *rng, uint64_t capacity) {
  uint64_t lo, hi;
  switch (test_rand_below(rng, 8)) {
  case 0: case 1: case 2: lo = 1; hi = MiB; break;                    /* small pool */
  case 3: case 4: case 5: lo = MiB + 1; hi = 10 * MiB; break;         /* 20 MiB segments */
  default: lo = 10 * MiB; hi = capacity / 3 > 12 * MiB ? capacity / 3 : 12 * MiB; /* own segments */
  }
  uint64_t size = lo + test_rand_below(rng, hi - lo + 1);
  switch (test_rand_below(rng, 6)) {
  case 0: size = (size + 511) & ~511ull; break;                       /* exact 512 multiples */
  case 1: size = 1ull << (63 - __builtin_clzll(size)); break;         /* powers of two */
  case 2: size = lo + test_rand_below(rng, 4096); break;              /* near a class border */
  default: break;
  }
  return size ? size : 1;
}

/* A recorded starting state: ordinary segments of both pools at recorded
 * addresses, expandable ranges in whole pages (runs of them in one
 * reservation, a jump past it starting the next), on the run's streams; the
 * blocks of each tile it in 512-byte units, about half of them live. It may
 * be larger than the device (the seed then leaves out the segments without a
 * live block, and may still fill the device). One state in sixteen is broken
 * (a block past its segment's end, or a range not in whole pages): both must
 * refuse it, unless the broken segment is cache the seed leaves out. */
static hbm_trace *draw_state(uint64_t *rng, uint64_t capacity, const int *streams, int nstreams, int *broken) {
  hbm_trace *t = NULL;
  /* ordinary large segments up to a quarter of the device, in one state of four up to two thirds */
  uint64_t large = capacity / (test_rand_below(rng, 4) ? 8 * MiB : 3 * MiB); /* in 2 MiB units */
  CHECK(hbm_trace_new("state", &t) == HBM_OK);
  /* Expandable ranges of every stream and pool share one stretch of
   * addresses, each at a whole number of its pages from the start, so that a
   * range of another stream or pool can lie where a reservation would reach. */
  const uint64_t range_base = 0x7e0000000000ull;
  uint64_t plain_at = 0x7f0000000000ull, range_at = 0;
  uint32_t nids = 0;
  int nseg = 1 + (int)test_rand_below(rng, 6);
  for (int i = 0; i < nseg; i++) {
    int si = (int)test_rand_below(rng, (uint64_t)nstreams), small = test_rand_below(rng, 3) == 0;
    hbm_init_segment s = {.stream = streams[si], .small = (uint8_t)small, .expandable = test_rand_below(rng, 3) == 0};
    if (s.expandable) {
      uint64_t page = small ? 2 * MiB : 20 * MiB;
      if (test_rand_below(rng, 6) == 0) range_at += 2 * capacity; /* past a reservation */
      range_at = (range_at + page - 1) / page * page + test_rand_below(rng, 3) * page; /* a gap, or none */
      s.addr = range_base + range_at;
      s.size = page * (1 + test_rand_below(rng, 3));
      range_at += s.size;
    } else {
      s.size = small ? 2 * MiB : test_rand_below(rng, 2) ? 20 * MiB : 2 * MiB * (1 + test_rand_below(rng, large));
      s.addr = plain_at;
      plain_at += s.size + test_rand_below(rng, 3) * 2 * MiB;
    }
    CHECK(hbm_trace_add_init_segment(t, &s) == HBM_OK);
    int nblocks = 1 + (int)test_rand_below(rng, 5);
    uint64_t at = s.addr, end = s.addr + s.size;
    for (int b = 0; b < nblocks && at < end; b++) {
      uint64_t left = (end - at) / 512, size = b == nblocks - 1 ? left * 512 : (1 + test_rand_below(rng, left)) * 512;
      int live = test_rand_below(rng, 2) == 0;
      hbm_init_block ib = {.addr = at, .size = size, .request = size, .id = live ? nids++ : HBM_NO_ID};
      CHECK(hbm_trace_add_init_block(t, &ib) == HBM_OK);
      at += size;
    }
  }
  *broken = test_rand_below(rng, 16) == 0;
  if (*broken) {
    uint32_t which = test_rand_below(rng, 2) ? t->ninit_segments - 1 : (uint32_t)test_rand_below(rng, t->ninit_segments);
    hbm_init_segment *s = &t->init_segments[which]; /* the last often: the seed meets the others first */
    hbm_init_block *last = &t->init_blocks[s->first_block + s->nblocks - 1];
    if (s->expandable && test_rand_below(rng, 2)) { /* not whole pages */
      s->size -= 512;
      last->size -= 512;
      if (last->size == 0) s->nblocks--;
    } else {
      last->size += 512;
    }
  }
  return t;
}

/* The block layout as scan reports it: (address, size, allocated). */
typedef struct layout {
  uint64_t v[3 * 8192];
  int n, lost;
} layout;

static int on_block(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  (void)tag;
  layout *l = arg;
  if (l->n + 3 > (int)(sizeof l->v / sizeof l->v[0])) {
    l->lost++;
    return 1;
  }
  l->v[l->n++] = addr;
  l->v[l->n++] = size;
  l->v[l->n++] = (uint64_t)live;
  return 0;
}

/* Scans both into their layouts; 1 when they are equal. */
static int same_layout(const hbm_policy_class *cls, hbm_policy *p, layout *lm, const hbm_ptref *ref, layout *lr) {
  lm->n = lm->lost = lr->n = lr->lost = 0;
  cls->scan(p, on_block, lm);
  hbm_ptref_scan(ref, on_block, lr);
  return lm->n == lr->n && !lm->lost && !lr->lost && !memcmp(lm->v, lr->v, (size_t)lm->n * sizeof lm->v[0]);
}

static void print_layout_diff(const layout *a, const layout *b) {
  for (int i = 0; i < a->n || i < b->n; i += 3) {
    if (i < a->n && i < b->n && !memcmp(a->v + i, b->v + i, 3 * sizeof a->v[0])) continue;
    fprintf(stderr, "  first layout difference, block %d: model ", i / 3);
    if (i < a->n) fprintf(stderr, "0x%llx %llu %s", (unsigned long long)a->v[i], (unsigned long long)a->v[i + 1], a->v[i + 2] ? "allocated" : "free");
    else fprintf(stderr, "none");
    fprintf(stderr, "; reference ");
    if (i < b->n) fprintf(stderr, "0x%llx %llu %s\n", (unsigned long long)b->v[i], (unsigned long long)b->v[i + 1], b->v[i + 2] ? "allocated" : "free");
    else fprintf(stderr, "none\n");
    return;
  }
}

typedef struct side {
  hbm_device *dev;
  act_log log;
  layout blocks;
} side;

static int same_logs(const act_log *a, const act_log *b) {
  if (a->n != b->n || a->lost != b->lost) return 0;
  for (int i = 0; i < a->n; i++)
    if (memcmp(&a->v[i], &b->v[i], sizeof a->v[i])) return 0;
  return 1;
}

static void print_log(const char *who, const act_log *l) {
  fprintf(stderr, "  %s: %d action(s)%s\n", who, l->n, l->lost ? " (some lost)" : "");
  for (int i = 0; i < l->n && i < 40; i++)
    fprintf(stderr, "    %s 0x%llx %llu stream %d %s\n", action_name[l->v[i].a], (unsigned long long)l->v[i].addr,
            (unsigned long long)l->v[i].size, l->v[i].stream, l->v[i].small ? "small" : "large");
}

static int same_stats(const hbm_pt_stats *a, const hbm_pt_stats *b) {
  return a->reserved == b->reserved && a->allocated == b->allocated && a->segments == b->segments &&
         a->free_blocks == b->free_blocks && a->num_alloc_retries == b->num_alloc_retries &&
         a->num_ooms == b->num_ooms && a->num_device_alloc == b->num_device_alloc &&
         a->num_device_free == b->num_device_free && a->num_gc_releases == b->num_gc_releases;
}

static void print_stats(const char *who, const hbm_pt_stats *s) {
  fprintf(stderr,
          "  %s: reserved %llu allocated %llu segments %llu free_blocks %llu retries %llu ooms %llu "
          "device_alloc %llu device_free %llu gc %llu\n",
          who, (unsigned long long)s->reserved, (unsigned long long)s->allocated, (unsigned long long)s->segments,
          (unsigned long long)s->free_blocks, (unsigned long long)s->num_alloc_retries,
          (unsigned long long)s->num_ooms, (unsigned long long)s->num_device_alloc,
          (unsigned long long)s->num_device_free, (unsigned long long)s->num_gc_releases);
}

typedef struct run_stats {
  uint64_t ops, ooms, retries, segment_frees, maps, unmaps, gc, failed_runs;
  uint64_t seeded, seed_dropped, seed_full, seed_refused, released, release_refused, probes, probes_under;
} run_stats;

/* One run; returns 0 when model and reference agreed throughout. */
static int run(uint64_t seed, uint64_t run_index, run_stats *rs) {
  uint64_t rng = seed ^ (run_index * 0x9E3779B97F4A7C15ull);
  test_rand(&rng);
  int expandable = test_rand_below(&rng, 3) == 0;
  char conf_text[256];
  draw_conf(&rng, conf_text, sizeof conf_text);
  uint64_t capacity = (24 + test_rand_below(&rng, 500)) * 2 * MiB;
  int nstreams = 1 + (int)test_rand_below(&rng, 3);
  int streams[4] = {0, 1, 2, 5};
  for (int i = 3; i > 0; i--) { /* first use in random order: stream order is not first-use order */
    int j = (int)test_rand_below(&rng, (uint64_t)i + 1), t = streams[i];
    streams[i] = streams[j];
    streams[j] = t;
  }
  int nlive_max = 16 + (int)test_rand_below(&rng, 200);
  int ops = 200 + (int)test_rand_below(&rng, 600);

  static side m, r;
  memset(&m.log, 0, sizeof m.log);
  memset(&r.log, 0, sizeof r.log);
  m.blocks.n = r.blocks.n = 0;
  CHECK(hbm_sim_open(capacity, 2 * MiB, &m.dev) == HBM_OK);
  CHECK(hbm_sim_open(capacity, 2 * MiB, &r.dev) == HBM_OK);
  const hbm_policy_class *cls = expandable ? &hbm_policy_expandable : &hbm_policy_caching;
  hbm_policy *p = NULL;
  hbm_diag d = {0};
  int rc = cls->create(m.dev, conf_text, &p, &d);
  if (rc != HBM_OK) fprintf(stderr, "create '%s': %s\n", conf_text, d.message);
  CHECK(rc == HBM_OK);
  hbm_pt_hooks hooks = {NULL, on_action, &m.log};
  CHECK(hbm_pt_set_hooks(p, &hooks) == HBM_OK);
  hbm_pt_conf conf;
  hbm_pt_conf_default(&conf, expandable);
  CHECK(hbm_pt_conf_parse(conf_text, &conf, NULL) == HBM_OK);
  hbm_ptref *ref = NULL;
  CHECK(hbm_ptref_create(r.dev, &conf, &ref) == HBM_OK);
  hbm_ptref_set_action(ref, on_action, &r.log);

  int broken = 0;
  hbm_trace *state = test_rand_below(&rng, 2) ? draw_state(&rng, capacity, streams, nstreams, &broken) : NULL;
  uint32_t nids = state ? state->nids : 0;
  uint64_t *ids_m = malloc(((size_t)nids + 1) * sizeof *ids_m), *ids_r = malloc(((size_t)nids + 1) * sizeof *ids_r);
  CHECK(ids_m && ids_r);
  for (uint32_t k = 0; k < nids; k++) ids_m[k] = ids_r[k] = HBM_NO_ADDR;
  nlive_max += (int)nids;
  uint64_t *live = calloc((size_t)nlive_max, sizeof *live);
  int nlive = 0, bad = 0;
  char what[128] = "";
  for (int i = 0; i < ops && !bad; i++) {
    m.log.n = m.log.lost = r.log.n = r.log.lost = 0;
    int rc_m, rc_r;
    uint64_t am = 0, ar = 0, bm = 0, br = 0;
    const char *expect = NULL; /* what the operation itself must show */
    if (i == 0 && state) {
      snprintf(what, sizeof what, "seed %u segment(s), %u live block(s)%s", state->ninit_segments, nids,
               broken ? ", broken" : "");
      rc_m = cls->seed(p, state, ids_m, NULL);
      rc_r = hbm_ptref_seed(ref, state, ids_r);
      if (nids && memcmp(ids_m, ids_r, nids * sizeof *ids_m)) expect = "where the live blocks landed";
      else if (rc_m == HBM_EINVAL && m.dev->backend_calls) expect = "a refused state left the device untouched";
      else if (!broken && rc_m == HBM_EINVAL) expect = "a sound state accepted";
      for (uint32_t k = 0; k < nids; k++)
        if (ids_m[k] != HBM_NO_ADDR && ids_m[k] == ids_r[k]) live[nlive++] = ids_m[k];
      uint64_t need = 0;
      for (uint32_t k = 0; k < state->ninit_segments; k++) need += state->init_segments[k].size;
      rs->seed_dropped += need > capacity; /* seeded without its cache */
      rs->seeded += rc_m == HBM_OK;
      rs->seed_full += rc_m == HBM_ENOMEM;
      rs->seed_refused += rc_m == HBM_EINVAL;
    } else if (test_rand_below(&rng, 100) < 4) { /* a recorded release: mostly of a cached block */
      uint64_t addr = 0x1000, size = 2 * MiB;
      int n = m.blocks.n / 3, pick = n ? (int)test_rand_below(&rng, (uint64_t)n) * 3 : -1;
      for (int tries = 0; pick >= 0 && m.blocks.v[pick + 2] && tries < 4; tries++) /* a free one, if it can */
        pick = (int)test_rand_below(&rng, (uint64_t)n) * 3;
      if (pick >= 0 && test_rand_below(&rng, 8)) {
        addr = m.blocks.v[pick];
        size = m.blocks.v[pick + 1];
        if (test_rand_below(&rng, 2)) { /* a range inside it, in 2 MiB pages half the time */
          uint64_t unit = test_rand_below(&rng, 2) ? 2 * MiB : 512;
          uint64_t off = test_rand_below(&rng, size) / unit * unit;
          addr += off;
          size = 1 + test_rand_below(&rng, size - off);
          if (unit > 512) size = (size + unit - 1) / unit * unit;
        }
      }
      snprintf(what, sizeof what, "segment released 0x%llx %llu", (unsigned long long)addr, (unsigned long long)size);
      rc_m = cls->seg_released(p, addr, size);
      rc_r = hbm_ptref_seg_released(ref, addr, size);
      rs->released += rc_m == HBM_OK;
      rs->release_refused += rc_m != HBM_OK;
    } else if (nstreams == 1 && nlive < nlive_max && test_rand_below(&rng, 100) < 5) {
      /* largest_free's promise: a request of that size succeeds now, and
       * one 512 bytes larger does not. Under expandable the figure is exact
       * without max_split_size (release_available_cached_blocks' path is
       * not counted) and per_process_memory_fraction (its check drops a
       * run's figure rather than shortening it; garbage collection frees
       * pages first). */
      hbm_policy_usage u;
      cls->usage(p, &u);
      int over = u.largest_free == 0 || test_rand_below(&rng, 2);
      uint64_t size = u.largest_free + (over ? 512 : 0);
      snprintf(what, sizeof what, "alloc %llu, largest_free %llu", (unsigned long long)size,
               (unsigned long long)u.largest_free);
      rc_m = cls->alloc(p, size, HBM_TAG_OTHER, streams[0], &am, &bm);
      rc_r = hbm_ptref_alloc(ref, size, streams[0], &ar, &br);
      if (rc_m == HBM_OK && rc_r == HBM_OK && am == ar) live[nlive++] = am;
      if (!over && rc_m != HBM_OK) expect = "a request of largest_free succeeding";
      else if (over && rc_m == HBM_OK && (!expandable || (conf.max_split_size == UINT64_MAX && !conf.set_fraction)))
        expect = "a request above largest_free failing";
      rs->probes++;
      rs->probes_under += over && rc_m == HBM_OK;
    } else if (nlive && (nlive == nlive_max || test_rand_below(&rng, 100) < 40)) {
      int k = (int)test_rand_below(&rng, (uint64_t)nlive);
      snprintf(what, sizeof what, "free 0x%llx", (unsigned long long)live[k]);
      rc_m = cls->free(p, live[k], &bm);
      rc_r = hbm_ptref_free(ref, live[k], &br);
      live[k] = live[--nlive];
    } else {
      uint64_t size = draw_size(&rng, capacity);
      int stream = streams[test_rand_below(&rng, (uint64_t)nstreams)];
      snprintf(what, sizeof what, "alloc %llu on stream %d", (unsigned long long)size, stream);
      rc_m = cls->alloc(p, size, HBM_TAG_OTHER, stream, &am, &bm);
      rc_r = hbm_ptref_alloc(ref, size, stream, &ar, &br);
      if (rc_m == HBM_OK && rc_r == HBM_OK && am == ar) live[nlive++] = am;
      if (rc_m == HBM_ENOMEM) rs->ooms++;
    }
    rs->ops++;
    hbm_pt_stats sm, sr;
    CHECK(hbm_pt_get_stats(p, &sm) == HBM_OK);
    hbm_ptref_stats(ref, &sr);
    const char *diff = NULL;
    if (expect) diff = expect;
    else if (rc_m != rc_r) diff = "the result";
    else if (am != ar) diff = "the address";
    else if (bm != br) diff = "the block size";
    else if (!same_logs(&m.log, &r.log)) diff = "the segment actions";
    else if (m.dev->phys_used != r.dev->phys_used) diff = "the device's physical bytes";
    else if (m.dev->backend_calls != r.dev->backend_calls) diff = "the device calls";
    else if (!same_layout(cls, p, &m.blocks, ref, &r.blocks)) diff = "the block layout";
    else if (!same_stats(&sm, &sr)) diff = "the statistics";
    else if (cls->check(p, report, NULL) != 0 || hbm_ptref_check(ref, report, NULL) != 0)
      diff = "an invariant check";
    for (int k = 0; k < m.log.n; k++) {
      rs->segment_frees += m.log.v[k].a == HBM_PT_SEGMENT_FREE;
      rs->maps += m.log.v[k].a == HBM_PT_SEGMENT_MAP;
      rs->unmaps += m.log.v[k].a == HBM_PT_SEGMENT_UNMAP;
    }
    if (diff) {
      bad = 1;
      fprintf(stderr,
              "run %llu (HBM_SEED=%llu): %s policy, capacity %llu MiB, settings '%s': op %d (%s) differs in %s\n",
              (unsigned long long)run_index, (unsigned long long)seed, cls->name,
              (unsigned long long)(capacity / MiB), conf_text, i, what, diff);
      fprintf(stderr, "  model: %s addr 0x%llx block %llu; reference: %s addr 0x%llx block %llu\n",
              hbm_strerror(rc_m), (unsigned long long)am, (unsigned long long)bm, hbm_strerror(rc_r),
              (unsigned long long)ar, (unsigned long long)br);
      print_log("model", &m.log);
      print_log("reference", &r.log);
      print_layout_diff(&m.blocks, &r.blocks);
      print_stats("model", &sm);
      print_stats("reference", &sr);
      fprintf(stderr, "  device: model %llu bytes %llu calls; reference %llu bytes %llu calls\n",
              (unsigned long long)m.dev->phys_used, (unsigned long long)m.dev->backend_calls,
              (unsigned long long)r.dev->phys_used, (unsigned long long)r.dev->backend_calls);
    }
  }
  hbm_pt_stats sm;
  CHECK(hbm_pt_get_stats(p, &sm) == HBM_OK);
  rs->retries += sm.num_alloc_retries;
  rs->gc += sm.num_gc_releases;
  free(live);
  free(ids_m);
  free(ids_r);
  hbm_trace_free(state);
  cls->destroy(p);
  hbm_ptref_destroy(ref);
  CHECK_EQ_U64(m.dev->phys_used, 0);
  CHECK_EQ_U64(r.dev->phys_used, 0);
  hbm_device_close(m.dev);
  hbm_device_close(r.dev);
  if (bad) {
    rs->failed_runs++;
    CHECK(!bad);
  }
  return bad;
}

/* The model (caching) and the reference side by side, each on its own sim
 * device of `capacity`, under the same settings: the fixed cases below. */
typedef struct side_by_side {
  hbm_device *dm, *dr;
  hbm_policy *p;
  hbm_ptref *ref;
} side_by_side;

static void pair_open(side_by_side *s, uint64_t capacity, const char *conf_text) {
  memset(s, 0, sizeof *s);
  CHECK(hbm_sim_open(capacity, 2 * MiB, &s->dm) == HBM_OK);
  CHECK(hbm_sim_open(capacity, 2 * MiB, &s->dr) == HBM_OK);
  CHECK(hbm_policy_caching.create(s->dm, conf_text, &s->p, NULL) == HBM_OK);
  hbm_pt_conf conf;
  hbm_pt_conf_default(&conf, 0);
  CHECK(hbm_pt_conf_parse(conf_text, &conf, NULL) == HBM_OK);
  CHECK(hbm_ptref_create(s->dr, &conf, &s->ref) == HBM_OK);
}

static void pair_close(side_by_side *s) {
  hbm_policy_caching.destroy(s->p);
  hbm_ptref_destroy(s->ref);
  hbm_device_close(s->dm);
  hbm_device_close(s->dr);
}

/* Oversize cached blocks that add up to exactly the request are enough:
 * release_available_cached_blocks returns true when the bytes released reach
 * the key (totalReleased < key is the failure), so the small pool's cached
 * segment stays. Under max_split_size_mb:20 on 64 MiB: two 20 MiB segments
 * and a small one cached, then 40 MiB, which only fits once both 20 MiB go:
 * 42 MiB reserved after it, and no retry. */
static void release_exactly_the_key(void) {
  side_by_side s;
  pair_open(&s, 64 * MiB, "max_split_size_mb:20");
  uint64_t sizes[3] = {20 * MiB, 20 * MiB, 512}, am[3], ar[3], a, b;
  for (int k = 0; k < 3; k++) {
    CHECK(hbm_policy_caching.alloc(s.p, sizes[k], HBM_TAG_OTHER, 0, &am[k], &b) == HBM_OK);
    CHECK(hbm_ptref_alloc(s.ref, sizes[k], 0, &ar[k], &b) == HBM_OK);
  }
  for (int k = 0; k < 3; k++) {
    CHECK(hbm_policy_caching.free(s.p, am[k], &b) == HBM_OK);
    CHECK(hbm_ptref_free(s.ref, ar[k], &b) == HBM_OK);
  }
  CHECK(hbm_policy_caching.alloc(s.p, 40 * MiB, HBM_TAG_OTHER, 0, &a, &b) == HBM_OK);
  CHECK(hbm_ptref_alloc(s.ref, 40 * MiB, 0, &a, &b) == HBM_OK);
  hbm_pt_stats sm, sr;
  CHECK(hbm_pt_get_stats(s.p, &sm) == HBM_OK);
  hbm_ptref_stats(s.ref, &sr);
  CHECK_EQ_U64(sm.reserved, 42 * MiB);
  CHECK_EQ_U64(sr.reserved, 42 * MiB);
  CHECK_EQ_U64(sm.num_alloc_retries, 0);
  CHECK_EQ_U64(sr.num_alloc_retries, 0);
  pair_close(&s);
}

/* roundup_power2_divisions' last interval is open-ended: a request of 64 GiB
 * or more takes its divisions (PyTorch clamps the interval's index at
 * kRoundUpPowerOfTwoIntervals - 1). 100 GiB and a little, in halves of the
 * 64 GiB power of two below it, is a 128 GiB block in both. A clamp one
 * interval too late read past the divisions there; no random run asks for
 * that much. */
static void roundup_past_the_last_interval(void) {
  side_by_side s;
  pair_open(&s, 256 * GiB, "roundup_power2_divisions:[64:8,>:2]");
  uint64_t am, ar, bm = 0, br = 0;
  CHECK(hbm_policy_caching.alloc(s.p, 100 * GiB + 12345, HBM_TAG_OTHER, 0, &am, &bm) == HBM_OK);
  CHECK(hbm_ptref_alloc(s.ref, 100 * GiB + 12345, 0, &ar, &br) == HBM_OK);
  CHECK_EQ_U64(bm, 128 * GiB);
  CHECK_EQ_U64(br, 128 * GiB);
  pair_close(&s);
}

/* Runs that once found a difference, run first whatever the seed (run()
 * is a function of the seed and the run's number alone). */
static const struct { uint64_t seed, run; } found_before[] = {
    /* expandable, max_split_size_mb:40: largest_free counted a run of free
     * space whose head was mapped, but a longer run before it, with pages to
     * map and no device memory to map them, takes the request first */
    {1796686594, 56},
};

int main(void) {
  release_exactly_the_key();
  roundup_past_the_last_interval();
  run_stats found = {0};
  for (size_t i = 0; i < sizeof found_before / sizeof found_before[0]; i++)
    run(found_before[i].seed, found_before[i].run, &found);
  uint64_t seed = test_seed("test_caching_reference");
  const char *env = getenv("HBM_REF_RUNS");
  uint64_t runs = env ? strtoull(env, NULL, 0) : (uint64_t)(300 * test_scale());
  if (runs == 0) runs = 1;
  run_stats rs = {0};
  for (uint64_t k = 0; k < runs && rs.failed_runs < 3; k++) run(seed, k, &rs);
  printf("test_caching_reference: %llu runs, %llu operations, %llu out of memory, %llu retries, "
         "%llu segment frees, %llu maps, %llu unmaps, %llu garbage-collected segments; starting states: "
         "%llu seeded, %llu larger than the device, %llu filled it, %llu refused; recorded releases: "
         "%llu applied, %llu refused; largest_free probed %llu times, below the largest request %llu\n",
         (unsigned long long)runs, (unsigned long long)rs.ops, (unsigned long long)rs.ooms,
         (unsigned long long)rs.retries, (unsigned long long)rs.segment_frees, (unsigned long long)rs.maps,
         (unsigned long long)rs.unmaps, (unsigned long long)rs.gc, (unsigned long long)rs.seeded,
         (unsigned long long)rs.seed_dropped, (unsigned long long)rs.seed_full, (unsigned long long)rs.seed_refused,
         (unsigned long long)rs.released, (unsigned long long)rs.release_refused, (unsigned long long)rs.probes,
         (unsigned long long)rs.probes_under);
  return test_done("test_caching_reference");
}
