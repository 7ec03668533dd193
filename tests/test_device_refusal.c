/* test_device_refusal: a device that refuses a call the policy had every
 * reason to expect to succeed (another process took the memory first, a
 * driver error) never costs a block its data in silence, never breaks a
 * policy's invariants and never leaks what the device holds.
 *
 * The test is linked with --wrap=hbm_device_open: every device a replay
 * opens passes its calls through counters here. Each scenario (a verified
 * replay on the host device: every block filled with a pattern, verified on
 * free and at the end, invariants after every event, the device checked empty
 * once the policy is destroyed) runs once to count the calls that can fail
 * for want of memory (creating physical memory, allocating a segment,
 * mapping, copying, to and from host memory), then again with call N
 * refused (HBM_ENOMEM), for every N or a seeded sample. A run must end
 * either with HBM_OK (every block verified), or with the policy's own report
 * that it lost data (HBM_ECORRUPT, first reported by the policy itself: a
 * re-chunk refused half way). Never the replay finding a block's contents
 * gone, a broken invariant, a leak, or another error.
 *
 * Each run fills and verifies hundreds of MiB of the host device's memory,
 * most of its time the kernel's (faulting pages in, punching them out), the
 * same with or without sanitizers, and no scenario depends on another: with
 * two CPUs or more they run two at a time, each in a process of its own whose
 * lines are printed in scenario order; a child that breaks a run, fails a
 * check, meets a sanitizer or crashes fails the test. HBM_TEST_JOBS=N runs N
 * at a time; 1 runs them all in this process, one after another. */
#include <sys/wait.h>
#include <unistd.h>

#include "hbm.h"
#include "device/device.h"
#include "trace/trace.h"
#include "seeded_trace.h"
#include "random_trace.h"
#include "staged_trace.h"
#include "trim_trace.h"
#include "replay_counter.h"
#include "testutil.h"

#define MiB (1ull << 20)

/* ---- the refusing device ------------------------------------------------------------- */
static const hbm_device_ops *real_ops;
static hbm_device_ops refusing_ops;
static uint64_t calls;      /* refusable calls since the device opened */
static uint64_t refuse_at;  /* 0: none */
static int refused;         /* the call was refused */

static int refuse(void) {
  if (++calls != refuse_at) return 0;
  refused = 1;
  return 1;
}
static int r_seg_alloc(hbm_device *d, uint64_t size, uint64_t hint, uint64_t *addr) {
  return refuse() ? HBM_ENOMEM : real_ops->seg_alloc(d, size, hint, addr);
}
static int r_phys_create(hbm_device *d, uint64_t size, uint64_t *handle) {
  return refuse() ? HBM_ENOMEM : real_ops->phys_create(d, size, handle);
}
static int r_map(hbm_device *d, uint64_t va, uint64_t size, uint64_t handle, uint64_t offset) {
  return refuse() ? HBM_ENOMEM : real_ops->map(d, va, size, handle, offset);
}
static int r_copy(hbm_device *d, uint64_t dst, uint64_t src, uint64_t n) {
  return refuse() ? HBM_ENOMEM : real_ops->copy(d, dst, src, n);
}
static int r_to_host(hbm_device *d, void *dst, uint64_t src, uint64_t n) {
  return refuse() ? HBM_ENOMEM : real_ops->to_host(d, dst, src, n);
}
static int r_from_host(hbm_device *d, uint64_t dst, const void *src, uint64_t n) {
  return refuse() ? HBM_ENOMEM : real_ops->from_host(d, dst, src, n);
}

int __real_hbm_device_open(const char *spec, hbm_device **out);
int __wrap_hbm_device_open(const char *spec, hbm_device **out) {
  int rc = __real_hbm_device_open(spec, out);
  if (rc != HBM_OK) return rc;
  hbm_device *d = *out;
  real_ops = d->ops;
  refusing_ops = *d->ops;
  if (d->ops->seg_alloc) refusing_ops.seg_alloc = r_seg_alloc;
  if (d->ops->phys_create) refusing_ops.phys_create = r_phys_create;
  if (d->ops->map) refusing_ops.map = r_map;
  if (d->ops->copy) refusing_ops.copy = r_copy;
  if (d->ops->to_host) refusing_ops.to_host = r_to_host;
  if (d->ops->from_host) refusing_ops.from_host = r_from_host;
  d->ops = &refusing_ops;
  calls = 0;
  return HBM_OK;
}

/* The first error reported during a run. */
static char first_error[512];
static void on_error(int err, const char *message, void *arg) {
  (void)err, (void)arg;
  if (!first_error[0]) snprintf(first_error, sizeof first_error, "%s", message);
}

/* ---- scenarios ------------------------------------------------------------------------ */
typedef struct scenario {
  char name[96];
  hbm_trace *trace;
  const char *policy, *conf;
  char device[48];
} scenario;

static int run(const scenario *s, hbm_replay_result *r) {
  first_error[0] = 0;
  refused = 0;
  hbm_replay_options o = {.policy = s->policy, .conf = s->conf, .device = s->device, .verify_data = 1, .check_every = 1};
  return hbm_replay(s->trace, &o, r);
}

/* The refusable calls a policy makes as it starts (a segment of the whole
 * device, without virtual memory): refused, the replay cannot begin. */
static uint64_t setup_calls(const scenario *s) {
  hbm_device *dev;
  hbm_heap *heap;
  refuse_at = 0;
  if (hbm_device_open(s->device, &dev) != HBM_OK) return 0;
  uint64_t n = 0;
  if (hbm_heap_create(dev, s->policy, s->conf, &heap) == HBM_OK) {
    n = calls;
    hbm_heap_destroy(heap);
  }
  hbm_device_close(dev);
  return n;
}

/* Returns the number of runs that broke the promise. The run without a
 * refusal, which counts the calls, is left in *clean where it succeeded. */
static int run_scenario(const scenario *s, uint64_t seed, int max_runs, hbm_replay_result *clean) {
  hbm_replay_result r;
  clock_t t0 = clock();
  uint64_t setup = setup_calls(s);
  refuse_at = 0;
  int rc = run(s, &r);
  uint64_t total = calls, clean_calls = r.backend_calls;
  if (rc == HBM_OK) *clean = r;
  if (rc != HBM_OK) {
    fprintf(stderr, "%s: fails without any refusal: %s\n", s->name, first_error);
    return 1;
  }
  uint64_t rng = seed ^ (uint64_t)strlen(s->name) * 0x9E3779B97F4A7C15ull;
  for (const char *c = s->name; *c; c++) rng = rng * 131 + (unsigned char)*c;
  int bad = 0, runs = 0, completed = 0, lost = 0;
  for (uint64_t n = 1; n <= total && runs < max_runs; n++) {
    /* Every call while there are few; else a seeded sample of them. */
    if (total > (uint64_t)max_runs && test_rand_below(&rng, total) >= (uint64_t)max_runs) continue;
    refuse_at = n;
    runs++;
    rc = run(s, &r);
    if (!refused) {
      fprintf(stderr, "%s: call %llu of %llu never came: the replay is not repeatable\n", s->name,
              (unsigned long long)n, (unsigned long long)total);
      bad++;
    } else if (rc == HBM_OK) {
      completed++;
    } else if (rc == HBM_ENOMEM && n <= setup) {
      completed++; /* the device refused what the policy needs to start: said so */
    } else if (rc == HBM_ECORRUPT && strstr(first_error, "zoned: staged re-chunking could not remake") == first_error) {
      /* The one loss a single refusal may cause, and zoned says so itself: a
       * staged re-chunk gives the old chunk back before it remakes the new
       * ones from host memory (docs/zoned.md, "When the device refuses"). */
      lost++;
      if (getenv("HBM_REFUSAL_VERBOSE")) printf("    call %llu: %s\n", (unsigned long long)n, first_error);
    } else {
      fprintf(stderr, "%s: with call %llu of %llu refused: %s (%s)\n", s->name, (unsigned long long)n,
              (unsigned long long)total, hbm_strerror(rc), first_error[0] ? first_error : "no report");
      bad++;
    }
    if (bad > 3) break;
  }
  printf("  %-32s %4llu calls to refuse (backend calls: %llu, copies aside); %3d runs: %3d completed, %2d lost data and said so, %.1f s%s\n",
         s->name, (unsigned long long)total, (unsigned long long)clean_calls, runs, completed, lost,
         (double)(clock() - t0) / CLOCKS_PER_SEC, bad ? ": FAILED" : "");
  return bad;
}

/* ---- the scenarios, one process each ---------------------------------------------------- */
static struct {
  scenario list[16];
  int n, max_runs;
  uint64_t seed;
  const hbm_trace *seeded, *inplace, *staged;
} all;

/* Scenario i in full: the number of runs that broke the promise (a check that
 * fails counts in test_failures_). */
static int scenario_at(int i) {
  const scenario *s = &all.list[i];
  /* The recorded starting state is the most memory to fill: fewer runs. */
  hbm_replay_result clean = {0}; /* no counters unless the run without a refusal succeeded */
  int bad = run_scenario(s, all.seed, s->trace == all.seeded ? all.max_runs / 3 + 1 : all.max_runs, &clean);
  /* The re-chunk jobs do what they are there for (in their run without a refusal). */
  if (s->trace == all.inplace)
    CHECK(replay_counter(&clean, "rechunks") == 1 && replay_counter(&clean, "staged_rechunks") == 0);
  if (s->trace == all.staged) CHECK(replay_counter(&clean, "staged_rechunks") == 1);
  return bad;
}

static int jobs_wanted(void) {
  const char *env = getenv("HBM_TEST_JOBS");
  if (env) return atoi(env) > 1 ? atoi(env) : 1;
  return sysconf(_SC_NPROCESSORS_ONLN) >= 2 ? 2 : 1;
}

/* Every scenario HBM_REFUSAL_ONLY names (all by default), up to `jobs` at a
 * time in child processes, each one's output held in a file and printed in
 * scenario order once it ends. Returns the number that broke the promise
 * (in this process: the runs that did), a child that did not end with 0
 * (a broken run or check, a sanitizer's report, a crash) counting as one. */
static int run_all(int jobs) {
  const char *only = getenv("HBM_REFUSAL_ONLY");
  int bad = 0, next = 0, running = 0, printed = 0;
  pid_t pid[16] = {0};
  FILE *out[16] = {0};
  int done[16] = {0};
  while (printed < all.n) {
    while (next < all.n && (running < jobs || jobs <= 1)) {
      int i = next++;
      done[i] = 1; /* unless a child takes it */
      if (only && !strstr(all.list[i].name, only)) continue;
      fflush(stdout);
      fflush(stderr);
      if (jobs <= 1 || !(out[i] = tmpfile()) || (pid[i] = fork()) < 0) { /* here, as the only process */
        if (out[i]) fclose(out[i]);
        out[i] = NULL;
        bad += scenario_at(i);
        continue;
      }
      if (pid[i] == 0) {
        dup2(fileno(out[i]), STDOUT_FILENO);
        int broke = scenario_at(i) || test_failures_;
        fflush(stdout);
        exit(broke ? 1 : 0);
      }
      done[i] = 0;
      running++;
    }
    for (; printed < all.n && done[printed]; printed++) {
      FILE *f = out[printed];
      if (!f) continue;
      rewind(f);
      char line[1024];
      while (fgets(line, sizeof line, f)) fputs(line, stdout);
      fclose(f);
    }
    if (printed >= all.n || running == 0) continue;
    int status;
    pid_t p = wait(&status);
    if (p < 0) break;
    for (int i = 0; i < all.n; i++) {
      if (pid[i] != p || done[i]) continue;
      done[i] = 1;
      running--;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        bad++;
        if (WIFSIGNALED(status)) fprintf(stderr, "%s: ended by signal %d\n", all.list[i].name, WTERMSIG(status));
      }
    }
  }
  return bad;
}

int main(void) {
  uint64_t seed = test_seed("test_device_refusal"), rng = seed;
  hbm_device *probe;
  if (hbm_device_open("host:64MiB", &probe) != HBM_OK) {
    printf("test_device_refusal: skipped: this kernel has no memfd_create\n");
    return TEST_SKIP;
  }
  hbm_device_close(probe);
  setvbuf(stdout, NULL, _IOLBF, 0);
  hbm_set_error_handler(on_error, NULL);
  double scale = test_scale();
  int max_runs = (int)(30 * scale) + 6;

  hbm_trace *random = random_trace(&rng, (uint64_t)(300 * scale) + 150, 30 * MiB, 6 * MiB, 199);
  hbm_trace *seeded = seeded_trace(&rng, 200);
  hbm_trace *inplace = rechunk_trace(46), *staged = staged_trace(), *trim = trim_trace(1), *trim_staged = trim_trace_sized(1, 20, 50);
  CHECK(random && seeded && inplace && staged && trim && trim_staged);
  if (!random || !seeded || !inplace || !staged || !trim || !trim_staged) return test_done("test_device_refusal");

  scenario *list = all.list;
  int n = 0;
  static const char *policies[] = {"zoned", "caching", "expandable", "compact", "bestfit"};
  CHECK(test_lists_every_policy(hbm_policy_names(), policies, sizeof policies / sizeof policies[0]));
  for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++) {
    scenario s = {{0}, random, policies[i], NULL, "host:32MiB"};
    snprintf(s.name, sizeof s.name, "random job, %s, tight", policies[i]);
    list[n++] = s;
  }
  scenario fixed[] = {
      {"random job, zoned, roomy", random, "zoned", NULL, "host:96MiB"},
      {"random job, zoned vmm:off", random, "zoned", "vmm:off", "host:36MiB"},
      /* Pressure's re-chunks: trimming would make its own first. */
      {"re-chunk in place", inplace, "zoned", "trim:off", "host:168MiB"},
      {"re-chunk through host memory", staged, "zoned", "trim:off", "host:140MiB"},
      {"trim", trim, "zoned", NULL, "host:256MiB"},
      {"trim through host memory", trim_staged, "zoned", NULL, "host:256MiB"},
  };
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) list[n++] = fixed[i];
  scenario sd = {"recorded starting state, zoned", seeded, "zoned", NULL, ""};
  snprintf(sd.device, sizeof sd.device, "host:%llu",
           (unsigned long long)((hbm_trace_peak_live(seeded) / 20 * 21 + 16 * MiB) / (2 * MiB) * (2 * MiB)));
  list[n++] = sd;

  all.n = n;
  all.max_runs = max_runs;
  all.seed = seed;
  all.seeded = seeded;
  all.inplace = inplace;
  all.staged = staged;
  int bad = run_all(jobs_wanted());
  CHECK(bad == 0);
  hbm_trace_free(random);
  hbm_trace_free(seeded);
  hbm_trace_free(inplace);
  hbm_trace_free(staged);
  hbm_trace_free(trim);
  hbm_trace_free(trim_staged);
  return test_done("test_device_refusal");
}
