/* hbm bench compact: compaction against memmove on the host device, same run.
 *
 * One heap (policy compact, on_failure:off) on a host device of --capacity is
 * filled to 92% with LLM-like blocks (64 KiB to 256 MiB), each block's bytes
 * set, then 40% of the blocks are freed at random: a fragmented heap. Then:
 *   full     hbm_compact() slides every block down; timed end to end through
 *            the public call (plan, range rebuild, copies, hooks);
 *   memmove  the same heap rebuilt (same addresses: the arena is reset and
 *            refilled by the same sequence), then the very copies the pass
 *            made (its moves, adjacent ones joined as the compactor joins
 *            them) done with bare memmove: the machine's memmove bandwidth on
 *            the same sizes, addresses and overlaps; and the same runs copied
 *            to a separate buffer (no overlap) for reference;
 *   partial  a request between the largest free block and the free total
 *            (it fails for fragmentation): bytes a partial pass moves against
 *            the minimum any plan needs, and against full compaction.
 * Each round measures compaction and then memmove seconds apart; times are
 * medians over --rounds and ratios medians of the per-round ratios, so a load
 * change on a shared machine moves both sides. The blocks' bytes are
 * verified after the first pass of each kind, and after the first memmove
 * baseline's copies at the addresses that pass gave them: the baseline did
 * the same work. Pages are touched before timing (no first-touch
 * faults in either figure). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "report/json.h"

typedef struct move { uint64_t src, dst, size; } move;
typedef struct moves { move *v; size_t n, cap; int failed; } moves;

typedef struct fragmented {
  hbm_device *dev;
  hbm_heap *heap;
  hbm_handle *h;       /* live handles after build */
  uint64_t *size;      /* their sizes */
  unsigned char *fill; /* their fill bytes */
  size_t n, cap;
  uint64_t capacity, seed, max_block;
  int quiet;           /* no progress bar (--json), as every command that reports */
} fragmented;

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void on_moved(void *arg, uint64_t old_addr, uint64_t new_addr, uint64_t size, hbm_tag tag) {
  moves *m = arg;
  if (!m || m->failed) return;
  if (m->n == m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 1024;
    move *v = realloc(m->v, cap * sizeof *v);
    if (!v) { m->failed = 1; return; }
    m->v = v;
    m->cap = cap;
  }
  m->v[m->n++] = (move){old_addr, new_addr, size};
}

/* Frees everything, then allocates and frees the same sequence: the range
 * allocator is deterministic, so every build has the same addresses. */
static int build(fragmented *f) {
  for (size_t i = 0; i < f->n; i++) hbm_free_handle(f->heap, f->h[i]);
  f->n = 0;
  uint64_t s = f->seed, used = 0;
  size_t total = 0;
  for (;;) {
    uint64_t r = rng_next(&s) % 100, size;
    if (r < 50) size = (1 + rng_next(&s) % 16) << 16;          /* 64 KiB to 1 MiB */
    else if (r < 80) size = (16 + rng_next(&s) % 241) << 16;   /* 1 to 16 MiB */
    else if (r < 97) size = (256 + rng_next(&s) % 769) << 16;  /* 16 to 64 MiB */
    else size = (1024 + rng_next(&s) % 3073) << 16;            /* 64 to 256 MiB */
    if (size > f->max_block) size = f->max_block; /* at most 1/16 of the heap: main() */
    if (used + size > f->capacity / 100 * 92) break;
    if (total == f->cap) {
      size_t cap = f->cap ? f->cap * 2 : 1024;
      hbm_handle *h = realloc(f->h, cap * sizeof *h);
      if (h) f->h = h;
      uint64_t *sz = h ? realloc(f->size, cap * sizeof *sz) : NULL;
      if (sz) f->size = sz;
      unsigned char *fl = sz ? realloc(f->fill, cap) : NULL;
      if (!fl) return HBM_EHOSTMEM;
      f->fill = fl;
      f->cap = cap;
    }
    int rc = hbm_alloc_handle(f->heap, size, HBM_TAG_ACT, 0, &f->h[total]);
    if (rc != HBM_OK) return rc;
    uint64_t a;
    hbm_handle_addr(f->heap, f->h[total], &a);
    f->size[total] = size;
    f->fill[total] = (unsigned char)(1 + rng_next(&s) % 255);
    memset((void *)(uintptr_t)a, f->fill[total], size);
    used += size;
    total++;
  }
  for (size_t i = 0; i < total; i++) { /* free 40%, keep the rest in order */
    if (rng_next(&s) % 100 < 40) {
      hbm_free_handle(f->heap, f->h[i]);
    } else {
      f->h[f->n] = f->h[i];
      f->size[f->n] = f->size[i];
      f->fill[f->n] = f->fill[i];
      f->n++;
    }
  }
  return HBM_OK;
}

/* Every byte of every live block still holds its fill: where the heap says the
 * block is (at NULL), or at at[i]. */
static int verify(fragmented *f, const uint64_t *at) {
  static unsigned char ref[1 << 20];
  for (size_t i = 0; i < f->n; i++) {
    uint64_t a;
    if (at) a = at[i];
    else if (hbm_handle_addr(f->heap, f->h[i], &a) != HBM_OK) return 0;
    memset(ref, f->fill[i], sizeof ref);
    for (uint64_t off = 0; off < f->size[i]; off += sizeof ref) {
      uint64_t n = f->size[i] - off < sizeof ref ? f->size[i] - off : sizeof ref;
      if (memcmp((void *)(uintptr_t)(a + off), ref, n)) return 0;
    }
  }
  return 1;
}

/* One pass (need 0: full), timed, its moves recorded. */
static int timed_pass(fragmented *f, uint64_t need, moves *m, hbm_compact_result *r, double *ns) {
  hbm_relocation_hooks hooks = {on_moved, NULL, m};
  m->n = 0;
  hbm_heap_set_relocation_hooks(f->heap, &hooks);
  hbm_compact_options o = {.need = need};
  double t0 = bench_now_ns();
  int rc = hbm_compact(f->heap, &o, r);
  *ns = bench_now_ns() - t0;
  hbm_heap_set_relocation_hooks(f->heap, NULL);
  return rc != HBM_OK ? rc : m->failed ? HBM_EHOSTMEM : HBM_OK;
}

/* The moves from m->v[*i] on that continue one another at both ends, joined
 * into one copy as the compactor joins them; *i steps past them. */
static uint64_t join_run(const moves *m, size_t *i, uint64_t *src, uint64_t *dst) {
  size_t k = *i;
  uint64_t len = m->v[k].size;
  *src = m->v[k].src;
  *dst = m->v[k].dst;
  for (k++; k < m->n && m->v[k].src == *src + len && m->v[k].dst == *dst + len; k++) len += m->v[k].size;
  *i = k;
  return len;
}

/* The same copies with bare memmove, adjacent moves joined. */
static double memmove_moves(const moves *m) {
  double t0 = bench_now_ns();
  for (size_t i = 0; i < m->n;) {
    uint64_t src, dst, len = join_run(m, &i, &src, &dst);
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, len);
  }
  return bench_now_ns() - t0;
}

/* The same runs copied to a separate 256 MiB buffer (no overlap), written
 * round-robin so destinations are not cache-resident: memmove's bandwidth
 * where it may use non-temporal stores. */
enum { SCRATCH = 256 << 20 };
/* Maps every page of the scratch buffer before timing. Not memset(0): GCC
 * folds malloc + memset(0) into calloc, whose fresh pages are mapped on
 * first write, inside the timed copy. A volatile store per page stays. */
static void touch_pages(unsigned char *p, size_t bytes) {
  long page = sysconf(_SC_PAGESIZE);
  size_t step = page > 0 ? (size_t)page : 1;
  volatile unsigned char *v = p;
  for (size_t i = 0; i < bytes; i += step) v[i] = 1;
}
static double memmove_disjoint(const moves *m, unsigned char *scratch) {
  uint64_t at = 0;
  double t0 = bench_now_ns();
  for (size_t i = 0; i < m->n;) {
    uint64_t src, dst, len = join_run(m, &i, &src, &dst);
    for (uint64_t off = 0; off < len;) {
      uint64_t n = len - off < SCRATCH - at ? len - off : SCRATCH - at;
      memmove(scratch + at, (const void *)(uintptr_t)(src + off), n);
      off += n;
      at = (at + n) % SCRATCH;
    }
  }
  return bench_now_ns() - t0;
}

enum { MAX_ROUNDS = 100 };
typedef struct figures {
  uint64_t moved, min_moved, blocks, copies;
  double compact_ns[MAX_ROUNDS], memmove_ns[MAX_ROUNDS], disjoint_ns[MAX_ROUNDS];
  int rounds, verified;
} figures;

/* done counts the rounds of both measures, for progress on a terminal */
static int measure(fragmented *f, uint64_t need, int rounds, unsigned char *scratch, figures *out, int *done) {
  moves m = {0};
  uint64_t *at = NULL; /* round 1: where the pass put each live block */
  int rc = HBM_OK;
  memset(out, 0, sizeof *out);
  out->verified = 1;
  for (int round = 0; round < rounds && rc == HBM_OK; round++) {
    hbm_compact_result r;
    double ns;
    if ((rc = build(f)) != HBM_OK || (rc = timed_pass(f, need, &m, &r, &ns)) != HBM_OK) break;
    if (round == 0) {
      if (!verify(f, NULL)) out->verified = 0;
      at = malloc((f->n ? f->n : 1) * sizeof *at);
      if (!at) { rc = HBM_EHOSTMEM; break; }
      for (size_t i = 0; i < f->n; i++)
        if (hbm_handle_addr(f->heap, f->h[i], &at[i]) != HBM_OK) out->verified = 0;
    }
    out->compact_ns[round] = ns;
    out->moved = r.moved_bytes;
    out->min_moved = r.min_moved_bytes;
    out->blocks = r.moved_blocks;
    out->copies = r.copies;
    if ((rc = build(f)) != HBM_OK) break;
    out->memmove_ns[round] = memmove_moves(&m);
    /* the baseline made the same copies: every block's bytes are where the
     * pass put them (the rebuilt heap lays the blocks out as before) */
    if (round == 0 && !verify(f, at)) out->verified = 0;
    out->disjoint_ns[round] = memmove_disjoint(&m, scratch);
    out->rounds = round + 1;
    ++*done;
    if (!f->quiet) cli_progress("bench compact", (uint64_t)*done, 2 * (uint64_t)rounds);
  }
  free(m.v);
  free(at);
  return rc;
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: hbm bench compact [--json] [--capacity SIZE] [--rounds N] [--seed S] [--max-block SIZE]\n\n"
          "Compaction of a fragmented heap on the host device against bare memmove of\n"
          "the same copies, in one run; and a partial pass for a request that fails for\n"
          "fragmentation, against the minimum any plan needs and against full compaction.\n"
          "  --capacity SIZE  host device size, at least 256MiB (default 4GiB; needs that\n"
          "                   much free RAM and 256 MiB more, or it is refused)\n"
          "  --rounds N       rounds; times are medians, ratios medians of per-round ratios\n"
          "                   (default 5)\n"
          "  --seed S         heap layout (default 437)\n"
          "  --max-block SIZE largest block, a multiple of 64KiB (default 256MiB; smaller:\n"
          "                   more blocks, more bookkeeping per byte moved); never more\n"
          "                   than 1/16 of the capacity, so the heap fills to about 92%%\n"
          "JSON keys: bench, capacity, live (bytes), live_blocks, free_total (capacity -\n"
          "live), largest_free, max_block (the largest block drawn: --max-block, or 1/16 of\n"
          "the capacity where that is less), rounds, compact_gbps, memmove_gbps, ratio (compact/memmove),\n"
          "memmove_disjoint_gbps (same runs, separate destination), ratio_disjoint,\n"
          "compact_seconds, memmove_seconds, moved_bytes, min_moved_bytes (full pass: least\n"
          "any plan moves to open a hole as large as full's), moved_blocks, copies, request,\n"
          "partial_moved_bytes, partial_min_moved_bytes, partial_full_moved_bytes,\n"
          "partial_compact_gbps, partial_memmove_gbps, verified (every live block's bytes\n"
          "where the first pass of each kind put them, after the pass and after memmove's\n"
          "copies of its moves).\n");
}

int bench_compact(int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, 0, 'j'}, {"capacity", required_argument, 0, 'c'},
                                       {"rounds", required_argument, 0, 'r'}, {"seed", required_argument, 0, 's'},
                                       {"max-block", required_argument, 0, 'm'},
                                       {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  int json = 0, c;
  const char *cap_arg = "4GiB", *block_arg = "256MiB";
  uint64_t capacity = 4ull << 30, rounds = 5, seed = 437, max_block = 256ull << 20;
  optind = 1;
  opterr = 0; /* our messages, prefixed "hbm: ", as every other command's */
  cli_seen seen = {.command = "bench compact"};
  while ((c = cli_getopt(argc, argv, ":h", opts, NULL, &seen)) != -1) {
    int ok = 1;
    switch (c) {
      case 'j': json = 1; break;
      case 'c':
        if (!cli_parse_size("bench compact: --capacity", optarg, &capacity)) return CLI_BAD_INPUT;
        cap_arg = optarg;
        break;
      case 'm':
        if (!cli_parse_size("bench compact: --max-block", optarg, &max_block)) return CLI_BAD_INPUT;
        block_arg = optarg;
        break;
      case 'r': ok = cli_parse_count("bench compact: --rounds", optarg, 1, MAX_ROUNDS, &rounds); break;
      case 's': ok = cli_parse_count("bench compact: --seed", optarg, 0, UINT64_MAX, &seed); break;
      case 'h': usage(stdout); return CLI_OK;
      default: return cli_option_error("bench compact", argv, c);
    }
    if (!ok) return CLI_BAD_INPUT;
  }
  if (optind < argc) { /* else ignored: a bare trace name would measure the defaults */
    cli_error("bench compact: unexpected argument '%s' (try: hbm bench compact --help)", argv[optind]);
    return CLI_BAD_INPUT;
  }
  if (capacity < (256ull << 20)) {
    cli_error("bench compact: --capacity: expected at least 256MiB, got '%s'", cap_arg);
    return CLI_BAD_INPUT;
  }
  if (max_block < (64 << 10) || max_block % (64 << 10)) {
    cli_error("bench compact: --max-block: expected a multiple of 64KiB, got '%s'", block_arg);
    return CLI_BAD_INPUT;
  }
  /* The heap is real host memory, filled to 92% and touched, plus the
   * scratch buffer: refused up front rather than left to the OOM killer. */
  char what[128];
  snprintf(what, sizeof what, "bench compact: --capacity %s (a host heap that size, plus 256 MiB)", cap_arg);
  int mem_rc = cli_check_host_memory(what, capacity + SCRATCH, "give a smaller --capacity");
  if (mem_rc != CLI_OK) return mem_rc;
  char spec[64];
  snprintf(spec, sizeof spec, "host:%llu", (unsigned long long)(capacity & ~((2ull << 20) - 1)));
  fragmented f = {.seed = seed, .max_block = max_block, .quiet = json};
  int orc = hbm_device_open(spec, &f.dev);
  if (orc != HBM_OK) {
    cli_error("bench compact: cannot open a host device of --capacity %s: %s", cap_arg, hbm_strerror(orc));
    return cli_exit_code(orc); /* a capacity this host cannot reserve is bad input */
  }
  hbm_device_caps caps;
  hbm_device_get_caps(f.dev, &caps);
  f.capacity = caps.capacity;
  /* a block at most 1/16 of the heap, so the first that does not fit comes
   * near the 92% (at 4 GiB, the default, no block is cut); reported as used */
  if (f.max_block > (f.capacity / 16) >> 16 << 16) f.max_block = (f.capacity / 16) >> 16 << 16;
  int hrc = hbm_heap_create(f.dev, "compact", "on_failure:off", &f.heap);
  if (hrc != HBM_OK) { /* say why, not only that */
    hbm_device_close(f.dev);
    cli_error("bench compact: cannot create the heap on a host device of --capacity %s: %s", cap_arg, hbm_strerror(hrc));
    return CLI_FAILED;
  }
  /* The layout and a request that fails for fragmentation in it. */
  hbm_stats st;
  int rc = build(&f);
  hbm_heap_stats(f.heap, &st);
  uint64_t free_bytes = f.capacity - st.allocated, largest = st.largest_free;
  uint64_t request = largest + (free_bytes - largest) / 3;
  figures full = {0}, part = {0};
  unsigned char *scratch = malloc(SCRATCH);
  if (!scratch) rc = HBM_EHOSTMEM;
  else touch_pages(scratch, SCRATCH);
  int unfragmented = rc == HBM_OK && largest >= free_bytes; /* no request fails for fragmentation */
  int done = 0;
  if (rc == HBM_OK && !unfragmented) rc = measure(&f, 0, (int)rounds, scratch, &full, &done);
  if (rc == HBM_OK && !unfragmented) rc = measure(&f, request, (int)rounds, scratch, &part, &done);
  cli_progress_end();
  free(scratch);
  uint64_t live = st.allocated, nblocks = f.n;
  for (size_t i = 0; i < f.n; i++) hbm_free_handle(f.heap, f.h[i]);
  hbm_heap_destroy(f.heap);
  hbm_device_close(f.dev);
  free(f.h);
  free(f.size);
  free(f.fill);
  if (rc != HBM_OK) { cli_error("bench compact: %s", hbm_strerror(rc)); return CLI_FAILED; }
  if (unfragmented) {
    char b[32];
    cli_error("bench compact: seed %llu leaves the free memory of %s in one piece: nothing to compact "
              "(give another --seed)", (unsigned long long)seed, cli_size(f.capacity, b));
    return CLI_FAILED;
  }
  int n = full.rounds;
  double compact_s = bench_median(full.compact_ns, n) / 1e9, memmove_s = bench_median(full.memmove_ns, n) / 1e9;
  double disjoint_s = bench_median(full.disjoint_ns, n) / 1e9;
  double compact_gbps = full.moved / compact_s / 1e9, memmove_gbps = full.moved / memmove_s / 1e9;
  double disjoint_gbps = full.moved / disjoint_s / 1e9;
  double ratio = bench_ratio_quantile(full.compact_ns, full.memmove_ns, n, 0.5);
  double ratio_disjoint = bench_ratio_quantile(full.compact_ns, full.disjoint_ns, n, 0.5);
  double p_compact_gbps = part.moved / (bench_median(part.compact_ns, part.rounds) / 1e9) / 1e9;
  double p_memmove_gbps = part.moved / (bench_median(part.memmove_ns, part.rounds) / 1e9) / 1e9;
  int verified = full.verified && part.verified;
  if (json) {
    hbm_json j;
    hbm_json_init(&j);
    hbm_json_object_begin(&j);
    hbm_json_kv_string(&j, "bench", "compact");
    hbm_json_kv_u64(&j, "capacity", f.capacity);
    hbm_json_kv_u64(&j, "live", live);
    hbm_json_kv_u64(&j, "live_blocks", nblocks);
    hbm_json_kv_u64(&j, "free_total", free_bytes);
    hbm_json_kv_u64(&j, "largest_free", largest);
    hbm_json_kv_u64(&j, "max_block", f.max_block);
    hbm_json_kv_u64(&j, "rounds", rounds);
    hbm_json_kv_double(&j, "compact_gbps", compact_gbps);
    hbm_json_kv_double(&j, "memmove_gbps", memmove_gbps);
    hbm_json_kv_double(&j, "ratio", ratio);
    hbm_json_kv_double(&j, "memmove_disjoint_gbps", disjoint_gbps);
    hbm_json_kv_double(&j, "ratio_disjoint", ratio_disjoint);
    hbm_json_kv_double(&j, "compact_seconds", compact_s);
    hbm_json_kv_double(&j, "memmove_seconds", memmove_s);
    hbm_json_kv_u64(&j, "moved_bytes", full.moved);
    hbm_json_kv_u64(&j, "min_moved_bytes", full.min_moved);
    hbm_json_kv_u64(&j, "moved_blocks", full.blocks);
    hbm_json_kv_u64(&j, "copies", full.copies);
    hbm_json_kv_u64(&j, "request", request);
    hbm_json_kv_u64(&j, "partial_moved_bytes", part.moved);
    hbm_json_kv_u64(&j, "partial_min_moved_bytes", part.min_moved);
    hbm_json_kv_u64(&j, "partial_full_moved_bytes", full.moved);
    hbm_json_kv_double(&j, "partial_compact_gbps", p_compact_gbps);
    hbm_json_kv_double(&j, "partial_memmove_gbps", p_memmove_gbps);
    hbm_json_key(&j, "verified");
    hbm_json_bool(&j, verified);
    hbm_json_object_end(&j);
    if (cli_print_json("bench compact", &j) != CLI_OK) return CLI_FAILED;
  } else {
    char b1[32], b2[32], b3[32], b4[32];
    char b5[32];
    printf("fragmented heap on a %s host device: %s live in %llu block%s of up to %s, %s free, largest free %s (median of "
           "%llu round%s)\n", cli_size(f.capacity, b4), cli_size(live, b1), (unsigned long long)nblocks, nblocks == 1 ? "" : "s",
           cli_size(f.max_block, b5), cli_size(free_bytes, b2), cli_size(largest, b3), (unsigned long long)rounds,
           rounds == 1 ? "" : "s");
    printf("  full compaction   moved %s in %llu block%s (%llu cop%s), %.3f s, %6.2f GB/s\n", cli_size(full.moved, b1),
           (unsigned long long)full.blocks, full.blocks == 1 ? "" : "s", (unsigned long long)full.copies,
           full.copies == 1 ? "y" : "ies", compact_s, compact_gbps);
    printf("  memmove, same copies                                %.3f s, %6.2f GB/s\n", memmove_s, memmove_gbps);
    printf("  memmove, same runs to a separate buffer             %.3f s, %6.2f GB/s\n", disjoint_s, disjoint_gbps);
    printf("  ratio compact/memmove %.3f (target >= 0.80), compact/disjoint memmove %.3f (medians of per-round ratios)\n",
           ratio, ratio_disjoint);
    printf("  full: least any plan moves for a hole of its size: %s\n", cli_size(full.min_moved, b1));
    printf("  partial for a %s request: moved %s, minimum %s, full would move %s (%.3f of full); %.2f GB/s "
           "vs memmove %.2f GB/s\n",
           cli_size(request, b1), cli_size(part.moved, b2), cli_size(part.min_moved, b3), cli_size(full.moved, b4),
           full.moved ? (double)part.moved / (double)full.moved : 0, p_compact_gbps, p_memmove_gbps);
    printf("  contents after each kind of pass: %s\n", verified ? "verified" : "LOST");
  }
  return verified ? CLI_OK : CLI_FAILED;
}
