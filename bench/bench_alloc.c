/* hbm bench alloc: alloc+free pairs with request sizes drawn from real
 * training traces (bench/alloc_sizes.h), through hbm's range allocator, the
 * public heap (lock + accounting + bestfit), glibc malloc and mimalloc, in the
 * same run over the same sequence. Each figure is the best of 3 rounds. */
#include <dlfcn.h>
#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_sizes.h"
#include "bench.h"
#include "cli.h"
#include "core/range.h"
#include "report/json.h"

typedef struct op { uint32_t slot; uint32_t size_index; } op;

/* The sizes a round draws from: all of them, or only those <= 1 MiB (where
 * malloc serves from its own heap without system calls, a fair contest). */
static const unsigned long long *sizes;
static size_t nsizes;
static unsigned long long small_sizes[sizeof alloc_sizes / sizeof alloc_sizes[0]];

static void usage(FILE *out) {
  fprintf(out,
          "usage: hbm bench alloc [--json] [--pairs N] [--live N] [--seed S]\n\n"
          "Alloc+free pairs, request sizes sampled from real PyTorch snapshots; N live\n"
          "blocks at a time, each pair frees a random one and allocates a new size.\n"
          "  --pairs N   pairs per round (default 2000000)\n"
          "  --live N    live blocks (default 1024)\n"
          "  --seed S    sequence seed (default 437)\n"
          "Prints ns per pair of hbm's range allocator, its heap (bestfit), glibc malloc\n"
          "(called as __libc_malloc, whatever overrides malloc) and mimalloc where\n"
          "libmimalloc.so.2 is installed (loaded at run time), over every size and over\n"
          "sizes <= 1 MiB (where malloc needs no system call), and the ratios hbm range\n"
          "allocator / glibc malloc and / mimalloc (below 1: hbm is faster).\n"
          "JSON keys: bench, pairs, live_blocks, sizes (request sizes drawn from),\n"
          "hbm_ns, heap_ns, glibc_ns, mimalloc_ns, ratio_hbm_glibc, ratio_hbm_mimalloc\n"
          "(ns per pair over every size), small_hbm_ns, small_heap_ns, small_glibc_ns,\n"
          "small_mimalloc_ns, small_ratio_hbm_glibc, small_ratio_hbm_mimalloc (the same\n"
          "for sizes <= 1 MiB), small_sizes; mimalloc_ns and ratio_hbm_mimalloc (and their\n"
          "small_) are null where libmimalloc cannot be loaded, a figure or ratio where\n"
          "every round failed is null.\n");
}

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}


static double run_range(const op *ops, size_t nops, uint32_t live) {
  hbm_range *r;
  if (hbm_range_create(1ull << 40, 1ull << 40, 512, &r) != HBM_OK) return -1;
  uint64_t *addr = calloc(live, sizeof *addr), bs;
  if (!addr) { hbm_range_destroy(r); return -1; }
  int failed = 0;
  double t0 = bench_now_ns();
  for (size_t i = 0; i < nops; i++) {
    uint32_t s = ops[i].slot;
    if (addr[s]) hbm_range_free(r, addr[s], &bs);
    if (hbm_range_alloc(r, sizes[ops[i].size_index], 0, &addr[s], &bs) != HBM_OK) { addr[s] = 0; failed = 1; }
  }
  double t = bench_now_ns() - t0;
  hbm_range_destroy(r);
  free(addr);
  return failed ? -1 : t / (double)nops;
}

static double run_heap(const op *ops, size_t nops, uint32_t live) {
  hbm_device *d;
  hbm_heap *h;
  if (hbm_device_open("sim:1TiB", &d) != HBM_OK) return -1;
  if (hbm_heap_create(d, "bestfit", NULL, &h) != HBM_OK) { hbm_device_close(d); return -1; }
  uint64_t *addr = calloc(live, sizeof *addr);
  if (!addr) { hbm_heap_destroy(h); hbm_device_close(d); return -1; }
  int failed = 0;
  double t0 = bench_now_ns();
  for (size_t i = 0; i < nops; i++) {
    uint32_t s = ops[i].slot;
    if (addr[s]) hbm_free(h, addr[s]);
    if (hbm_alloc(h, sizes[ops[i].size_index], HBM_TAG_OTHER, 0, &addr[s]) != HBM_OK) { addr[s] = 0; failed = 1; }
  }
  double t = bench_now_ns() - t0;
  hbm_heap_destroy(h);
  hbm_device_close(d);
  free(addr);
  return failed ? -1 : t / (double)nops;
}

/* A NULL from malloc fails the round, as a failed placement does above: the
 * time of failed calls is not the allocator's. */
#define RUN_MALLOC(name, alloc_fn, free_fn)                                      \
  static double name(const op *ops, size_t nops, uint32_t live) {                \
    void **p = calloc(live, sizeof *p);                                          \
    if (!p) return -1;                                                           \
    int failed = 0;                                                              \
    double t0 = bench_now_ns();                                                  \
    for (size_t i = 0; i < nops; i++) {                                          \
      uint32_t s = ops[i].slot;                                                  \
      free_fn(p[s]);                                                             \
      if (!(p[s] = alloc_fn(sizes[ops[i].size_index]))) failed = 1;             \
    }                                                                            \
    double t = bench_now_ns() - t0;                                              \
    for (uint32_t s = 0; s < live; s++) free_fn(p[s]);                           \
    free(p);                                                                     \
    return failed ? -1 : t / (double)nops;                                       \
  }
/* The C library's malloc by its own name: a malloc that overrides it (a
 * preloaded one, or libmimalloc.so, which replaces malloc in any program
 * linked with it) would otherwise be timed under glibc's name. */
#ifdef __GLIBC__
extern void *__libc_malloc(size_t size);
extern void __libc_free(void *ptr);
#define LIBC_MALLOC __libc_malloc
#define LIBC_FREE __libc_free
#define LIBC_NAME "glibc malloc"
#define LIBC_SHORT "glibc"
#else
#define LIBC_MALLOC malloc
#define LIBC_FREE free
#define LIBC_NAME "libc malloc"
#define LIBC_SHORT "libc"
#endif
RUN_MALLOC(run_glibc, LIBC_MALLOC, LIBC_FREE)

/* mimalloc, loaded where it is installed, privately (RTLD_LOCAL): linked in,
 * it would become every malloc of the tool, glibc's row included. */
static void *(*mimalloc_alloc)(size_t);
static void (*mimalloc_free)(void *);
static int load_mimalloc(void) {
  static const char *const names[] = {"libmimalloc.so.2", "libmimalloc.so"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) continue;
    void *a = dlsym(lib, "mi_malloc"), *f = dlsym(lib, "mi_free");
    if (a && f) { /* object to function pointer: memcpy, as ISO C has no cast for it */
      memcpy(&mimalloc_alloc, &a, sizeof a);
      memcpy(&mimalloc_free, &f, sizeof f);
      return 1;
    }
    dlclose(lib);
  }
  return 0;
}
RUN_MALLOC(run_mimalloc, mimalloc_alloc, mimalloc_free)

/* A figure below 0: every round failed. */
static void json_ns(hbm_json *j, const char *key, double ns) {
  hbm_json_key(j, key);
  if (ns < 0) hbm_json_null(j); else hbm_json_double(j, ns);
}
/* a / b, or below 0 where either has no time (failed, or not built). */
static double ratio(double a, double b) { return a > 0 && b > 0 ? a / b : -1; }
static void json_ratio(hbm_json *j, const char *key, double a, double b) {
  hbm_json_key(j, key);
  if (ratio(a, b) < 0) hbm_json_null(j); else hbm_json_double(j, ratio(a, b));
}
static void print_row(const char *name, const double ns[2]) {
  printf("%-22s", name);
  for (int set = 0; set < 2; set++)
    if (ns[set] < 0) printf(" %*s", set ? 16 : 14, "failed");
    else printf(" %*.1f", set ? 16 : 14, ns[set]);
  printf("\n");
}
static void print_ratio(const char *name, const double a[2], const double b[2]) {
  printf("%-22s", name);
  for (int set = 0; set < 2; set++)
    if (ratio(a[set], b[set]) < 0) printf(" %*s", set ? 16 : 14, "-");
    else printf(" %*.2f", set ? 16 : 14, ratio(a[set], b[set]));
  printf("\n");
}

static double best_of(double (*fn)(const op *, size_t, uint32_t), const op *ops, size_t n, uint32_t live) {
  double best = -1;
  for (int round = 0; round < 3; round++) {
    double t = fn(ops, n, live);
    if (t >= 0 && (best < 0 || t < best)) best = t;
  }
  return best;
}

int bench_alloc(int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, 0, 'j'}, {"pairs", required_argument, 0, 'p'},
                                       {"live", required_argument, 0, 'l'}, {"seed", required_argument, 0, 's'},
                                       {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  int json = 0, c;
  uint64_t pairs = 2000000, live = 1024, seed = 437;
  optind = 1;
  opterr = 0; /* cli_option_error says what is wrong */
  cli_seen seen = {.command = "bench alloc"};
  while ((c = cli_getopt(argc, argv, ":h", opts, NULL, &seen)) != -1) {
    int ok = 1;
    switch (c) {
      case 'j': json = 1; break;
      case 'p': ok = cli_parse_count("bench alloc: --pairs", optarg, 1, 1ull << 32, &pairs); break;
      case 'l': ok = cli_parse_count("bench alloc: --live", optarg, 1, 1u << 20, &live); break;
      case 's': ok = cli_parse_count("bench alloc: --seed", optarg, 0, UINT64_MAX, &seed); break;
      case 'h': usage(stdout); return CLI_OK;
      default: return cli_option_error("bench alloc", argv, c);
    }
    if (!ok) return CLI_BAD_INPUT;
  }
  if (optind < argc) { /* else ignored: a bare trace name would measure the defaults */
    cli_error("bench alloc: unexpected argument '%s' (try: hbm bench alloc --help)", argv[optind]);
    return CLI_BAD_INPUT;
  }
  /* The live blocks are drawn from every size: their mean times --live must
   * fit the 1 TiB the range allocator and the heap are given (half of it,
   * for the spread of a random draw), or every round fails. */
  long double mean = 0;
  for (size_t i = 0; i < sizeof alloc_sizes / sizeof alloc_sizes[0]; i++) mean += alloc_sizes[i];
  mean /= (long double)(sizeof alloc_sizes / sizeof alloc_sizes[0]);
  uint64_t most_live = (uint64_t)((long double)(1ull << 39) / mean);
  if (live > most_live) {
    char held[32], each[32];
    cli_error("bench alloc: --live %llu holds about %s at a time (mean request %s), more than half the 1 TiB "
              "the allocators are given; give --live %llu or fewer",
              (unsigned long long)live, cli_size((uint64_t)(mean * live), held), cli_size((uint64_t)mean, each),
              (unsigned long long)most_live);
    return CLI_BAD_INPUT;
  }
  char what[64];
  snprintf(what, sizeof what, "bench alloc: --pairs %llu", (unsigned long long)pairs);
  int mem_rc = cli_check_host_memory(what, pairs * sizeof(op), "give fewer --pairs");
  if (mem_rc != CLI_OK) return mem_rc;
  op *ops = malloc(pairs * sizeof *ops);
  if (!ops) { cli_error("bench alloc: out of memory"); return CLI_FAILED; }
  size_t nsmall = 0;
  for (size_t i = 0; i < sizeof alloc_sizes / sizeof alloc_sizes[0]; i++)
    if (alloc_sizes[i] <= (1u << 20)) small_sizes[nsmall++] = alloc_sizes[i];
  /* [0]: every size, [1]: small sizes only */
  double hbm_ns[2], heap_ns[2], glibc_ns[2], mimalloc_ns[2] = {-1, -1};
  const int have_mimalloc = load_mimalloc();
  const uint64_t parts = 2 * (have_mimalloc ? 4 : 3); /* the sets times the allocators: progress */
  uint64_t done = 0;
  const int progress = !json; /* no bar beside --json, as every command that reports */
  if (progress) cli_progress("bench alloc", done, parts);
#define TIMED(dst, fn) \
  (dst = best_of(fn, ops, pairs, (uint32_t)live), ++done, progress ? cli_progress("bench alloc", done, parts) : (void)0)
  for (int set = 0; set < 2; set++) {
    sizes = set ? small_sizes : alloc_sizes;
    nsizes = set ? nsmall : sizeof alloc_sizes / sizeof alloc_sizes[0];
    uint64_t st = seed;
    for (uint64_t i = 0; i < pairs; i++)
      ops[i] = (op){(uint32_t)(rng_next(&st) % live), (uint32_t)(rng_next(&st) % nsizes)};
    TIMED(hbm_ns[set], run_range);
    TIMED(heap_ns[set], run_heap);
    TIMED(glibc_ns[set], run_glibc);
    if (have_mimalloc) TIMED(mimalloc_ns[set], run_mimalloc);
  }
#undef TIMED
  cli_progress_end();
  free(ops);
  if (json) {
    hbm_json j;
    hbm_json_init(&j);
    hbm_json_object_begin(&j);
    hbm_json_kv_string(&j, "bench", "alloc");
    hbm_json_kv_u64(&j, "pairs", pairs);
    hbm_json_kv_u64(&j, "live_blocks", live); /* a count: "live" is bytes elsewhere */
    hbm_json_kv_u64(&j, "sizes", sizeof alloc_sizes / sizeof alloc_sizes[0]);
    static const char *const prefix[2] = {"", "small_"};
    for (int set = 0; set < 2; set++) {
      char k[48];
#define KEY(name) (snprintf(k, sizeof k, "%s%s", prefix[set], name), k)
      json_ns(&j, KEY("hbm_ns"), hbm_ns[set]);
      json_ns(&j, KEY("heap_ns"), heap_ns[set]);
      json_ns(&j, KEY("glibc_ns"), glibc_ns[set]);
      json_ns(&j, KEY("mimalloc_ns"), mimalloc_ns[set]);
      json_ratio(&j, KEY("ratio_hbm_glibc"), hbm_ns[set], glibc_ns[set]);
      json_ratio(&j, KEY("ratio_hbm_mimalloc"), hbm_ns[set], mimalloc_ns[set]);
#undef KEY
    }
    hbm_json_kv_u64(&j, "small_sizes", nsmall);
    hbm_json_object_end(&j);
    if (cli_print_json("bench alloc", &j) != CLI_OK) return CLI_FAILED;
  } else {
    printf("alloc+free pairs: %llu, live blocks %llu, best of 3 rounds, ns per pair\n",
           (unsigned long long)pairs, (unsigned long long)live);
    printf("%-22s %14s %16s\n", "", "all sizes", "sizes <= 1 MiB");
    printf("%-22s %14zu %16zu\n", "real request sizes", sizeof alloc_sizes / sizeof alloc_sizes[0], nsmall);
    print_row("hbm range allocator", hbm_ns);
    print_row("hbm heap (bestfit)", heap_ns);
    print_row(LIBC_NAME, glibc_ns);
    if (have_mimalloc) print_row("mimalloc", mimalloc_ns);
    print_ratio("ratio hbm / " LIBC_SHORT, hbm_ns, glibc_ns);
    if (have_mimalloc) print_ratio("ratio hbm / mimalloc", hbm_ns, mimalloc_ns);
    else printf("mimalloc: not installed (libmimalloc.so.2 could not be loaded)\n");
  }
  int failed = 0;
  static const char *const names[] = {"hbm range allocator", "hbm heap (bestfit)", LIBC_NAME, "mimalloc"};
  const double *all[] = {hbm_ns, heap_ns, glibc_ns, mimalloc_ns};
  for (int a = 0; a < 4; a++)
    for (int set = 0; set < 2; set++)
      if (all[a][set] < 0 && (a < 3 || have_mimalloc)) {
        cli_error("bench alloc: %s failed a request in every round (%s): no time to report", names[a],
                  set ? "sizes <= 1 MiB" : "all sizes");
        failed = 1;
      }
  return failed ? CLI_FAILED : CLI_OK;
}
