/* test_trace: the text trace v1 reader and writer. Every kind of bad input is
 * refused with the line and what was expected; a written trace reads back
 * identical; the writer never overwrites its input (after a chdir too),
 * never shares or follows a temporary file, a reader never sees half a
 * file while two threads write it, and a write that fails part way leaves
 * the old file whole. */
#include <pthread.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "trace/trace.h"

static int parse_n(const char *text, size_t len, hbm_trace **t, hbm_diag *d) {
  memset(d, 0, sizeof *d);
  return hbm_trace_parse_text(text, len, "t.trace", t, d);
}
static int parse(const char *text, hbm_trace **t, hbm_diag *d) { return parse_n(text, strlen(text), t, d); }

static void expect_bad_n(const char *text, size_t len, uint64_t line, const char *words) {
  hbm_trace *t = NULL;
  hbm_diag d;
  int rc = parse_n(text, len, &t, &d);
  CHECK(rc == HBM_EPARSE);
  if (rc != HBM_EPARSE) { hbm_trace_free(t); return; }
  if (d.line != line || !strstr(d.message, words))
    fprintf(stderr, "for input %s\n  got %s:%llu: %s\n  expected line %llu mentioning '%s'\n", text, d.file,
            (unsigned long long)d.line, d.message, (unsigned long long)line, words);
  CHECK(d.line == line);
  CHECK(strstr(d.message, words) != NULL);
  CHECK(!strcmp(d.file, "t.trace"));
}
static void expect_bad(const char *text, uint64_t line, const char *words) {
  expect_bad_n(text, strlen(text), line, words);
}

/* The name of the temporary file the next save into dir creates, seen
 * through inotify (the save renames it away before returning). */
static int save_and_see_temp(const hbm_trace *t, const char *dir, const char *out, char *name, size_t cap) {
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0 || inotify_add_watch(fd, dir, IN_CREATE) < 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  hbm_diag d;
  int rc = hbm_trace_save(t, out, &d);
  char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
  ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  name[0] = 0;
  for (char *p = buf; n > 0 && p < buf + n;) {
    const struct inotify_event *e = (const struct inotify_event *)p;
    if (e->len && strstr(e->name, ".tmp.")) snprintf(name, cap, "%s/%s", dir, e->name);
    p += sizeof *e + e->len;
  }
  return rc == HBM_OK && name[0] ? 0 : -1;
}

/* The writer's temporary file is its own: one already at a name it would
 * try (here, symbolic links to a victim at the next ten) is passed over,
 * never followed (nor the single name per process earlier writers used).
 * A first save shows which name comes next, so the links lie in the way
 * whatever saves ran before. */
/* The k-th planted link: -1 the one name per process an earlier writer used,
 * else the k-th name from `next` on. */
static void planted_name(char *name, size_t cap, const char *out, const char *prefix, unsigned long next, int k) {
  if (k < 0) snprintf(name, cap, "%s.tmp.%ld", out, (long)getpid());
  else snprintf(name, cap, "%s%lu", prefix, next + (unsigned long)k);
}

static void test_save_temp_names(const hbm_trace *t) {
  char dir[] = "/tmp/hbm-test-save-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char victim[128], out[128], seen[256], name[192];
  snprintf(victim, sizeof victim, "%s/victim", dir);
  snprintf(out, sizeof out, "%s/out.trace", dir);
  FILE *f = fopen(victim, "w");
  CHECK(f && fputs("keep\n", f) >= 0);
  if (f) fclose(f);
  CHECK(save_and_see_temp(t, dir, out, seen, sizeof seen) == 0);
  char prefix[160];
  snprintf(prefix, sizeof prefix, "%s.tmp.%ld.", out, (long)getpid());
  CHECK(!strncmp(seen, prefix, strlen(prefix)));
  unsigned long next = strtoul(seen + strlen(prefix), NULL, 10) + 1;
  for (int k = -1; k < 10; k++) {
    planted_name(name, sizeof name, out, prefix, next, k);
    CHECK(symlink(victim, name) == 0);
  }
  CHECK(save_and_see_temp(t, dir, out, seen, sizeof seen) == 0);
  planted_name(name, sizeof name, out, prefix, next, 10);
  CHECK(!strcmp(seen, name)); /* the first free name after the ten */
  char text[16] = "";
  f = fopen(victim, "r");
  CHECK(f && fgets(text, sizeof text, f) && !strcmp(text, "keep\n"));
  if (f) fclose(f);
  hbm_trace *back = NULL;
  hbm_diag d;
  CHECK(hbm_trace_load(out, &back, &d) == HBM_OK && back->nevents == t->nevents);
  hbm_trace_free(back);
  for (int k = -1; k < 10; k++) {
    planted_name(name, sizeof name, out, prefix, next, k);
    CHECK(unlink(name) == 0);
  }
  unlink(out);
  unlink(victim);
  CHECK(rmdir(dir) == 0); /* nothing else was left behind */
}

/* The writer at its edges: an empty path is refused; a new file gets 0644
 * less the umask; a write that fails part way (here the file size limit)
 * leaves the old file whole and no temporary file behind; what the reader
 * hands back is NUL-terminated, and a read error is one. */
static void test_writer_edges(void) {
  hbm_diag d;
  CHECK(hbm_write_file_atomic("", "x", 1, &d) == HBM_EINVAL && strstr(d.message, "empty path"));
  char dir[] = "/tmp/hbm-test-writer-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[128];
  snprintf(path, sizeof path, "%s/new", dir);
  mode_t old_mask = umask(027);
  CHECK(hbm_write_file_atomic(path, "abc", 3, &d) == HBM_OK);
  umask(old_mask);
  struct stat st;
  CHECK(stat(path, &st) == 0 && (st.st_mode & 07777) == 0640);
  char *data = malloc(4096);
  if (data) memset(data, 'z', 4096), free(data); /* leave no zero where the reader's end will be */
  size_t len = 0;
  data = NULL;
  CHECK(hbm_read_file(path, &data, &len, &d) == HBM_OK && len == 3 && data && data[3] == 0);
  free(data);
  data = NULL;
  CHECK(hbm_read_file("/proc/self/mem", &data, &len, &d) == HBM_EIO && strstr(d.message, "read failed") && !data);

  /* In a child: 64 KiB over the old file under a 4 KiB file size limit. */
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    struct rlimit lim = {4096, 4096};
    signal(SIGXFSZ, SIG_IGN);
    static char big[65536];
    memset(big, 'b', sizeof big);
    int ok = setrlimit(RLIMIT_FSIZE, &lim) == 0 && hbm_write_file_atomic(path, big, sizeof big, &d) == HBM_EIO;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char text[8] = "";
  FILE *f = fopen(path, "r");
  CHECK(f && fgets(text, sizeof text, f) && !strcmp(text, "abc"));
  if (f) fclose(f);
  CHECK(unlink(path) == 0);
  CHECK(rmdir(dir) == 0); /* no temporary file was left */
}

/* Two threads saving to one path while a third reads it: every save
 * succeeds, and a reader only ever sees a whole trace. */
typedef struct save_job {
  const hbm_trace *t;
  const char *path;
  int failures;
} save_job;
static void *save_loop(void *arg) {
  save_job *j = arg;
  hbm_diag d;
  for (int k = 0; k < 200; k++) j->failures += hbm_trace_save(j->t, j->path, &d) != HBM_OK;
  return NULL;
}
static void *load_loop(void *arg) {
  save_job *j = arg;
  for (int k = 0; k < 200; k++) {
    hbm_trace *t = NULL;
    hbm_diag d;
    int rc = hbm_trace_load(j->path, &t, &d);
    j->failures += rc != HBM_OK || (t->nevents != 10 && t->nevents != 2);
    if (rc == HBM_OK) hbm_trace_free(t);
  }
  return NULL;
}
static void test_save_concurrent(const hbm_trace *a, const hbm_trace *b) {
  char dir[] = "/tmp/hbm-test-save-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char out[128];
  snprintf(out, sizeof out, "%s/shared.trace", dir);
  hbm_diag d;
  CHECK(hbm_trace_save(a, out, &d) == HBM_OK);
  save_job jobs[3] = {{a, out, 0}, {b, out, 0}, {NULL, out, 0}};
  pthread_t th[3];
  for (int k = 0; k < 3; k++) CHECK(pthread_create(&th[k], NULL, k < 2 ? save_loop : load_loop, &jobs[k]) == 0);
  for (int k = 0; k < 3; k++) pthread_join(th[k], NULL);
  CHECK_EQ_U64(jobs[0].failures + jobs[1].failures, 0);
  CHECK_EQ_U64(jobs[2].failures, 0);
  unlink(out);
  CHECK(rmdir(dir) == 0); /* no temporary file left */
}

/* The input is the file it was read from, not its path: after a chdir the
 * same relative path names another file, which may be written, and the
 * input, named any way, may not. */
static void test_save_input_after_chdir(void) {
  char dir[] = "/tmp/hbm-test-save-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char d1[160], d2[160], in1[192], in2[192], cwd[4096];
  snprintf(d1, sizeof d1, "%s/d1", dir);
  snprintf(d2, sizeof d2, "%s/d2", dir);
  snprintf(in1, sizeof in1, "%s/in.trace", d1);
  snprintf(in2, sizeof in2, "%s/in.trace", d2);
  CHECK(mkdir(d1, 0755) == 0 && mkdir(d2, 0755) == 0);
  const char *small = "hbm-trace 1\na x 10\nf x\n";
  for (int k = 0; k < 2; k++) {
    FILE *f = fopen(k ? in2 : in1, "w");
    CHECK(f && fputs(small, f) >= 0);
    if (f) fclose(f);
  }
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  CHECK(chdir(d1) == 0);
  hbm_trace *t = NULL;
  hbm_diag d;
  CHECK(hbm_trace_load("in.trace", &t, &d) == HBM_OK);
  CHECK(chdir(d2) == 0);
  CHECK(hbm_trace_save(t, "in.trace", &d) == HBM_OK);               /* d2's: not the input */
  CHECK(hbm_trace_save(t, in1, &d) == HBM_EINVAL && strstr(d.message, "overwrite")); /* the input, by its full path */
  CHECK(chdir(cwd) == 0);
  hbm_trace_free(t);
  unlink(in1);
  unlink(in2);
  rmdir(d1);
  rmdir(d2);
  CHECK(rmdir(dir) == 0);
}

/* Recorded addresses: two allocations live at once never share a byte of
 * [@ADDR, @ADDR + request) (the narrowest range a recording guarantees
 * disjoint); a free ends the range, so reuse after it is fine. */
static void test_recorded_overlap(void) {
  hbm_trace *t = NULL;
  hbm_diag d;
  expect_bad("hbm-trace 1\ncapacity 1GiB\na b0 100 @4096\na b1 100 @4096\n", 4,
             "b1's recorded range [0x1000, 0x1064) overlaps b0's [0x1000, 0x1064) (line 3), live at once");
  /* reaching in from below, reaching over from above, the last byte */
  expect_bad("hbm-trace 1\na big 1000 @0x1000\na s 10 @0x1100\n", 3,
             "s's recorded range [0x1100, 0x110a) overlaps big's [0x1000, 0x13e8) (line 2)");
  expect_bad("hbm-trace 1\na hi 10 @0x1100\na lo 1000 @0x1000\n", 3,
             "lo's recorded range [0x1000, 0x13e8) overlaps hi's [0x1100, 0x110a) (line 2)");
  expect_bad("hbm-trace 1\na x 512 @0x1000\na y 1 @0x11ff\n", 3, "overlaps x's [0x1000, 0x1200)");
  /* unrelated frees and unrecorded allocations in between change nothing */
  expect_bad("hbm-trace 1\na a 100 @0x1000\na b 100 @0x2000\nf b\na n 5\na c 100 @0x1010\n", 6,
             "c's recorded range [0x1010, 0x1074) overlaps a's [0x1000, 0x1064) (line 2)");
  /* an id reused after its free: the new range counts, not the old */
  expect_bad("hbm-trace 1\na x 100 @0x1000\nf x\na x 100 @0x2000\na y 100 @0x2010\n", 5, "overlaps x's [0x2000, 0x2064) (line 4)");
  /* a starting-state block's request counts as an allocation's */
  expect_bad("hbm-trace 1\ninit-seg 0x200000 2MiB 0 large\ninit-blk 0x200000 1MiB w 1000\ninit-blk 0x300000 1MiB -\n"
             "a x 100 @0x200200\n", 5, "x's recorded range [0x200200, 0x200264) overlaps w's [0x200000, 0x2003e8) (line 3)");
  expect_bad("hbm-trace 1\na x 100 @0xffffffffffffffc0\n", 2, "wrap past the top of the address space");
  /* the last byte of the address space: refused as any wrap, not read as "no address" */
  expect_bad("hbm-trace 1\na x 1 @0xffffffffffffffff\n", 2, "recorded address 0xffffffffffffffff: 1 bytes from there wrap");
  expect_bad("hbm-trace 1\na x 1 @18446744073709551615 @0x1000\n", 2, "wrap past the top of the address space");

  static const char *const fine[] = {
      "hbm-trace 1\na b0 100 @4096\nf b0\na b1 100 @4096\n",            /* reuse after a free */
      "hbm-trace 1\na x 100 @0x1000\na y 100 @0x1064\n",                /* side by side */
      "hbm-trace 1\na y 100 @0x1064\na x 100 @0x1000\n",                /* ... the upper one first */
      "hbm-trace 1\na x 100 @0x1000\na r 100 @0x1000 refused\nf r\n",   /* refused: never placed */
      "hbm-trace 1\na r 100 @0xffffffffffffffc0 refused\nf r\n",        /* ... so its range is none */
      "hbm-trace 1\na x 100 @0x1000\na y 100\n",                        /* nothing recorded */
      "hbm-trace 1\na x 100 @0x1000\na y 100\na z 100\n",                /* ... twice, alike */
      "hbm-trace 1\na x 100 @0xffffffffffffff9b\n",                     /* up to the last byte */
      /* a starting-state block: freed, then its bytes reused; and the slack
       * past its request, which the recording does not vouch for */
      ("hbm-trace 1\ninit-seg 0x200000 2MiB 0 large\ninit-blk 0x200000 1MiB w 1000\ninit-blk 0x300000 1MiB v 1000\n"
       "a x 100 @0x200400\nf w\na y 1000 @0x200000\n"), /* one string: the parentheses say so */
  };
  for (size_t i = 0; i < sizeof fine / sizeof *fine; i++) {
    int rc = parse(fine[i], &t, &d);
    if (rc != HBM_OK) fprintf(stderr, "refused %s\n  %s:%llu: %s\n", fine[i], d.file, (unsigned long long)d.line, d.message);
    CHECK(rc == HBM_OK);
    if (rc == HBM_OK) CHECK(hbm_trace_validate(t, &d) == HBM_OK);
    hbm_trace_free(t);
  }

  /* hbm_trace_validate finds the same in a trace built in memory (no lines,
   * no names), and names a snapshot's entries as the importer does */
  CHECK(hbm_trace_new("mem", &t) == HBM_OK);
  hbm_init_segment g = {.addr = 0x200000, .size = 2 << 20, .line = 0};
  hbm_init_block w = {.addr = 0x200000, .size = 1 << 20, .request = 1000, .id = 0};
  hbm_init_block rest = {.addr = 0x300000, .size = 1 << 20, .id = HBM_NO_ID};
  CHECK(hbm_trace_add_init_segment(t, &g) == HBM_OK && hbm_trace_add_init_block(t, &w) == HBM_OK &&
        hbm_trace_add_init_block(t, &rest) == HBM_OK);
  hbm_event a1 = {.kind = HBM_EV_ALLOC, .id = 1, .size = 100, .addr = 0x1000};
  hbm_event a2 = {.kind = HBM_EV_ALLOC, .id = 2, .size = 100, .addr = 0x1010, .line = 7};
  CHECK(hbm_trace_push(t, &a1) == HBM_OK && hbm_trace_push(t, &a2) == HBM_OK);
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_validate(t, &d) == HBM_EPARSE && d.line == 7);
  CHECK(strstr(d.message, "b2's recorded range [0x1010, 0x1074) overlaps b1's [0x1000, 0x1064) (event 0), live at once") != NULL);
  /* an event without a line is named by its index; and an event that is
   * no allocation or free (here a step built with an allocation's id) ends
   * no range */
  t->events[1].line = 0;
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_validate(t, &d) == HBM_EPARSE && d.line == 0 && strstr(d.message, "event 1: b2's recorded range"));
  hbm_event step = {.kind = HBM_EV_STEP, .id = 1, .size = 1, .addr = HBM_NO_ADDR};
  t->events[1] = step;
  CHECK(hbm_trace_push(t, &a2) == HBM_OK);
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_validate(t, &d) == HBM_EPARSE && d.line == 7 && strstr(d.message, "overlaps b1's [0x1000, 0x1064)"));
  t->events[1] = a2;
  t->nevents = 2;
  t->from_snapshot = 1;
  t->events[0].line = 3;
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_check_recorded(t, "s.pickle", &d) == HBM_EPARSE && d.line == 0 && !strcmp(d.file, "s.pickle"));
  CHECK(strstr(d.message, "device_traces[0][6] (alloc): its recorded range [0x1010, 0x1074) overlaps the block "
                          "[0x1000, 0x1064) (device_traces[0][2]), live at once") != NULL);
  t->events[1].line = 0; /* a snapshot's event without an entry: its index */
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_check_recorded(t, "s.pickle", &d) == HBM_EPARSE && strstr(d.message, "event 1: its recorded range"));
  /* a recorded address that wraps, named as an overlap is */
  t->events[1].addr = 0xffffffffffffffc0ull;
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_check_recorded(t, "s.pickle", &d) == HBM_EPARSE &&
        strstr(d.message, "event 1: recorded address 0xffffffffffffffc0: 100 bytes from there wrap past the top"));
  t->events[1].line = 7;
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_check_recorded(t, "s.pickle", &d) == HBM_EPARSE && d.line == 0 &&
        strstr(d.message, "device_traces[0][6] (alloc): recorded address 0xffffffffffffffc0"));
  t->events[1].addr = 0x200100; /* into the starting state's block */
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_check_recorded(t, NULL, &d) == HBM_EPARSE && !strcmp(d.file, "mem"));
  CHECK(strstr(d.message, "overlaps the block [0x200000, 0x2003e8) (alive at the start)") != NULL);
  hbm_event f0 = {.kind = HBM_EV_FREE, .id = 0};
  t->events[1] = f0; /* freed first: then the bytes are free to take */
  CHECK(hbm_trace_push(t, &a2) == HBM_OK);
  t->events[2].addr = 0x200100;
  CHECK(hbm_trace_validate(t, &d) == HBM_OK);
  /* a starting-state block that requested no byte shares none, even alive */
  t->init_blocks[0].request = 0;
  t->events[1] = t->events[2];
  t->events[1].addr = 0x200000;
  t->nevents = 2;
  CHECK(hbm_trace_validate(t, &d) == HBM_OK);
  hbm_trace_free(t);
}

/* Every field the writer knows, written exactly as the format says and read
 * back to the same trace: the starting state (a segment's stream, pool and
 * expandable flag; a block's id, request and tag, or '-'), a recorded
 * segment's stream and pool, the settings, and the private-pool note. The
 * round trip through the file above has no starting state and stream 0
 * only, so a field written wrong or left out there goes unseen. */
static void test_round_trip_fields(void) {
  const char *in =
      "hbm-trace 1\n"
      "capacity 96GiB\n"
      "conf max_split_size_mb:128\n"
      "init-seg 0x200000 2MiB 2 small expandable\n"
      "init-blk 0x200000 512 w 500 param\n"
      "init-blk 0x200200 2096640 -\n"
      "init-seg 0x400000 2MiB 0 large\n"
      "init-blk 0x400000 2MiB v 1000 grad\n"
      "s 3\n"
      "seg 0x7f0000000000 20MiB 5 small\n"
      "a x 1000 act 3 @0x7f0000001000\n"
      "a z 4KiB comm refused\n"
      "f x\n"
      "segfree 0x7f0000000000 20MiB\n"
      "f w\n";
  const char *want =
      "hbm-trace 1\n"
      "# rt.trace\n"
      "capacity 103079215104\n"
      "conf max_split_size_mb:128\n"
      "# 2 segment(s), 4194304 bytes, were in private pools (CUDA graphs, MemPool) when the snapshot was "
      "taken; replays place their blocks as the default pool's\n"
      "init-seg 0x200000 2097152 2 small expandable\n"
      "init-blk 0x200000 512 w 500 param\n"
      "init-blk 0x200200 2096640 -\n"
      "init-seg 0x400000 2097152 0 large\n"
      "init-blk 0x400000 2097152 v 1000 grad\n"
      "s 3\n"
      "seg 0x7f0000000000 20971520 5 small\n"
      "a x 1000 act 3 @0x7f0000001000\n"
      "a z 4096 comm 0 refused\n"
      "f x\n"
      "segfree 0x7f0000000000 20971520\n"
      "f w\n";
  hbm_trace *t = NULL, *back = NULL;
  hbm_diag d;
  CHECK(hbm_trace_parse_text(in, strlen(in), "rt.trace", &t, &d) == HBM_OK);
  if (!t) return;
  t->private_pool_segments = 2;
  t->private_pool_bytes = 4 << 20;
  char dir[] = "/tmp/hbm-test-fields-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[128];
  snprintf(path, sizeof path, "%s/out.trace", dir);
  CHECK(hbm_trace_save(t, path, &d) == HBM_OK);
  char *text = NULL;
  size_t len = 0;
  CHECK(hbm_read_file(path, &text, &len, &d) == HBM_OK);
  if (text && strcmp(text, want)) fprintf(stderr, "written:\n%s\nexpected:\n%s", text, want);
  CHECK(text && !strcmp(text, want));
  free(text);
  CHECK(hbm_trace_load(path, &back, &d) == HBM_OK);
  if (back) {
    CHECK_EQ_U64(back->capacity, t->capacity);
    CHECK(back->conf && !strcmp(back->conf, t->conf));
    CHECK(back->ninit_segments == 2 && back->ninit_blocks == 3);
    for (uint32_t k = 0; k < 2 && k < back->ninit_segments; k++) {
      const hbm_init_segment *a = &t->init_segments[k], *b = &back->init_segments[k];
      CHECK(a->addr == b->addr && a->size == b->size && a->stream == b->stream && a->small == b->small &&
            a->expandable == b->expandable && a->first_block == b->first_block && a->nblocks == b->nblocks);
    }
    for (uint32_t k = 0; k < 3 && k < back->ninit_blocks; k++) {
      const hbm_init_block *a = &t->init_blocks[k], *b = &back->init_blocks[k];
      CHECK(a->addr == b->addr && a->size == b->size && a->id == b->id && a->request == b->request &&
            a->tag == b->tag);
    }
    CHECK_EQ_U64(back->nevents, t->nevents);
    for (uint64_t i = 0; i < t->nevents && i < back->nevents; i++) {
      const hbm_event *a = &t->events[i], *b = &back->events[i];
      CHECK(a->kind == b->kind && a->id == b->id && a->size == b->size && a->addr == b->addr &&
            a->stream == b->stream && a->tag == b->tag && a->flags == b->flags);
    }
    CHECK_EQ_U64(back->nids, 4);
    CHECK_EQ_U64(hbm_trace_peak_live(back), 500 + 1000 + 1000 + 4096);
    hbm_trace_free(back);
  }
  hbm_trace_free(t);
  CHECK(unlink(path) == 0);
  CHECK(rmdir(dir) == 0);
}

/* The allocation and free lines are written without printf: random events,
 * at the edges of each field (sizes and addresses up to 2^64 - 1, address 0,
 * negative streams a trace built in memory may hold, names or none), must
 * come out as printf's formats write them. */
static void test_writer_formats(uint64_t *rng) {
  enum { EVENTS = 3000, IDS = 40 };
  static const uint64_t edges[] = {0, 1, 9, 10, 15, 16, 255, 256, 4095, 4096, UINT32_MAX, 1ull << 50,
                                   UINT64_MAX - 1, UINT64_MAX};
  char dir[] = "/tmp/hbm-test-writer-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[128];
  snprintf(path, sizeof path, "%s/out.trace", dir);
  for (int named = 0; named < 2; named++) {
    hbm_trace *t = NULL;
    CHECK(hbm_trace_new("w", &t) == HBM_OK);
    if (!t) return;
    size_t cap = 1 << 20, n = 0;
    char *want = malloc(cap);
    CHECK(want != NULL);
    if (!want) return;
    n += (size_t)snprintf(want + n, cap - n, "hbm-trace 1\n# w\n");
    for (int i = 0; i < EVENTS; i++) {
      hbm_event e = {.kind = test_rand_below(rng, 3) ? HBM_EV_ALLOC : HBM_EV_FREE,
                     .id = (uint32_t)test_rand_below(rng, IDS)};
      uint64_t r = test_rand(rng);
      e.size = r % 4 ? test_rand(rng) >> test_rand_below(rng, 64) : edges[r % 14];
      e.tag = (uint8_t)test_rand_below(rng, HBM_TAG_COUNT);
      e.stream = test_rand_below(rng, 4) ? (int32_t)test_rand_below(rng, 1000)
                                         : (int32_t)(uint32_t)edges[test_rand_below(rng, 14)];
      r = test_rand(rng);
      e.addr = r % 3 == 0 ? HBM_NO_ADDR : r % 3 == 1 ? edges[test_rand_below(rng, 14)] : test_rand(rng);
      if (e.kind == HBM_EV_ALLOC && e.addr == HBM_NO_ADDR && test_rand_below(rng, 4) == 0) e.flags = HBM_EV_REFUSED;
      CHECK(hbm_trace_push(t, &e) == HBM_OK);
    }
    if (named) {
      t->id_names = calloc(t->nids, sizeof *t->id_names);
      CHECK(t->id_names != NULL);
      for (uint32_t id = 0; t->id_names && id < t->nids; id++)
        if (id % 5) { /* every fifth has none: written as b<id> */
          char name[32];
          snprintf(name, sizeof name, "%s%u", id % 2 ? "act.attn_" : "x", id * 7919);
          t->id_names[id] = strdup(name);
        }
    }
    for (uint64_t i = 0; i < t->nevents; i++) {
      const hbm_event *e = &t->events[i];
      if (cap - n < 256) want = realloc(want, cap *= 2);
      CHECK(want != NULL);
      if (!want) return;
      char id[64];
      if (t->id_names && t->id_names[e->id]) snprintf(id, sizeof id, "%s", t->id_names[e->id]);
      else snprintf(id, sizeof id, "b%u", e->id);
      if (e->kind == HBM_EV_FREE) {
        n += (size_t)snprintf(want + n, cap - n, "f %s\n", id);
        continue;
      }
      n += (size_t)snprintf(want + n, cap - n, "a %s %llu %s %d", id, (unsigned long long)e->size,
                            hbm_tag_name((hbm_tag)e->tag), e->stream);
      if (e->addr != HBM_NO_ADDR) n += (size_t)snprintf(want + n, cap - n, " @%#llx", (unsigned long long)e->addr);
      if (e->flags & HBM_EV_REFUSED) n += (size_t)snprintf(want + n, cap - n, " refused");
      n += (size_t)snprintf(want + n, cap - n, "\n");
    }
    hbm_diag d;
    CHECK(hbm_trace_save(t, path, &d) == HBM_OK);
    char *text = NULL;
    size_t len = 0;
    CHECK(hbm_read_file(path, &text, &len, &d) == HBM_OK);
    CHECK(text && len == n && !memcmp(text, want, n));
    if (text && (len != n || memcmp(text, want, n))) {
      size_t k = 0;
      while (k < len && k < n && text[k] == want[k]) k++;
      size_t from = k > 60 ? k - 60 : 0;
      fprintf(stderr, "writer differs from printf at byte %zu:\n  written: %.120s\n  printf:  %.120s\n", k, text + from,
              want + from);
    }
    free(text);
    free(want);
    hbm_trace_free(t);
  }
  CHECK(unlink(path) == 0);
  CHECK(rmdir(dir) == 0);
}

/* Values at the edge of what the reader takes, each side of it; a trace
 * built in memory that ends with a step mark; a starting block that runs
 * past its segment, named as such. */
static void test_edges_exact(void) {
  hbm_trace *t = NULL;
  hbm_diag d;
  /* capacity: one 2 MiB granule is the least, and is taken */
  CHECK(parse("hbm-trace 1\ncapacity 2MiB\na x 10\n", &t, &d) == HBM_OK);
  if (t) CHECK_EQ_U64(t->capacity, 2 << 20);
  hbm_trace_free(t);
  expect_bad("hbm-trace 1\ncapacity 2097151\n", 2, "capacity: 2097151 is smaller than one 2 MiB granule");
  /* stream: 2^31 - 1 is the highest, in an allocation, a segment and a starting segment */
  t = NULL;
  CHECK(parse("hbm-trace 1\ninit-seg 0x0 2MiB 2147483647 large\ninit-blk 0x0 2MiB -\n"
              "seg 0x200000 2MiB 2147483647\na x 10 2147483647\n", &t, &d) == HBM_OK);
  if (t) {
    CHECK(t->init_segments[0].stream == INT32_MAX && t->events[0].stream == INT32_MAX &&
          t->events[1].stream == INT32_MAX);
    hbm_trace_free(t);
  }
  expect_bad("hbm-trace 1\nseg 0x200000 2MiB 2147483648\n", 2, "stream '2147483648' out of range: expected 0..2147483647");
  /* a size token of 39 characters is read; one of 40 is not a size */
  t = NULL;
  CHECK(parse("hbm-trace 1\na x 000000000000000000000000000000000001024\n", &t, &d) == HBM_OK);
  if (t) CHECK_EQ_U64(t->events[0].size, 1024);
  hbm_trace_free(t);
  expect_bad("hbm-trace 1\na x 0000000000000000000000000000000000001024\n", 2, "expected a size");
  /* numbers are decimal, or hexadecimal after 0x: a leading zero is no octal
   * prefix (stream 010 is ten, 09 is nine, @0100 is a hundred) */
  t = NULL;
  CHECK(parse("hbm-trace 1\na x 512 act 010 @0100\na y 512 09 @0X1fE00\ns 010\nf x\nseg 0x400000 2MiB 011\n", &t, &d) ==
        HBM_OK);
  if (t) {
    CHECK(t->events[0].stream == 10 && t->events[0].addr == 100);
    CHECK(t->events[1].stream == 9 && t->events[1].addr == 0x1fe00);
    CHECK(t->events[2].kind == HBM_EV_STEP && t->events[2].size == 10);
    CHECK(t->events[4].stream == 11);
    hbm_trace_free(t);
  }
  expect_bad("hbm-trace 1\na x 512 act 0x\n", 2, "unexpected field '0x'");
  expect_bad("hbm-trace 1\na x 512 act @0x1g\n", 2, "recorded address");
  expect_bad("hbm-trace 1\na x 512 act @18446744073709551616\n", 2, "recorded address");
  expect_bad("hbm-trace 1\na x 512 act @0x10000000000000000\n", 2, "recorded address");
  t = NULL;
  CHECK(parse("hbm-trace 1\na x 512 act @18446744073709550592\n", &t, &d) == HBM_OK);
  if (t) CHECK(t->events[0].addr == 18446744073709550592ull);
  hbm_trace_free(t);
  /* 2^64 - 1 itself, each way it can be written: the overflow test is exact */
  static const char *const u64_max[] = {"hbm-trace 1\ns 18446744073709551615\n", "hbm-trace 1\ns 0xffffffffffffffff\n",
                                        "hbm-trace 1\ns 0XFFFFFFFFFFFFFFFF\n"};
  for (size_t i = 0; i < sizeof u64_max / sizeof u64_max[0]; i++) {
    t = NULL;
    CHECK(parse(u64_max[i], &t, &d) == HBM_OK);
    if (t) CHECK(t->nevents == 1 && t->events[0].size == UINT64_MAX);
    hbm_trace_free(t);
  }
  expect_bad("hbm-trace 1\ns 18446744073709551616\n", 2, "expected a step number");
  expect_bad("hbm-trace 1\ns 0x10000000000000000\n", 2, "expected a step number");
  /* tags and plain byte counts take a reader of their own: each tag name, and
   * each size of up to 20 digits, reads as hbm_tag_parse and hbm_size_parse
   * read it */
  {
    static const char *const words[] = {"act", "temp", "comm", "grad", "param", "optim", "other",
                                         "ac", "acts", "Act", "tem", "optimx", "othe", "x", "paramparam"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
      char text[96];
      hbm_tag want;
      snprintf(text, sizeof text, "hbm-trace 1\na x 512 %s\n", words[i]);
      t = NULL;
      int rc = parse(text, &t, &d);
      CHECK((rc == HBM_OK) == (hbm_tag_parse(words[i], &want) == HBM_OK));
      if (rc == HBM_OK && t) CHECK(t->events[0].tag == want);
      hbm_trace_free(t);
    }
    uint64_t rng = 0x5eed;
    for (int i = 0; i < 2000; i++) {
      char digits[24], text[96];
      int n = 1 + (int)test_rand_below(&rng, 20);
      for (int k = 0; k < n; k++) digits[k] = (char)('0' + test_rand_below(&rng, 10));
      if (i % 3 == 0) memset(digits, '9', (size_t)n); /* at the top of each length */
      digits[n] = 0;
      uint64_t want;
      int ok = hbm_size_parse(digits, &want) == HBM_OK && want && want <= (1ull << 50);
      snprintf(text, sizeof text, "hbm-trace 1\na x %s\n", digits);
      t = NULL;
      int rc = parse(text, &t, &d);
      CHECK((rc == HBM_OK) == ok);
      if (rc == HBM_OK && t) CHECK_EQ_U64(t->events[0].size, want);
      hbm_trace_free(t);
    }
  }
  /* built event by event, ending with a step mark (ids counted by allocs and frees only) */
  CHECK(hbm_trace_new("built", &t) == HBM_OK);
  CHECK(hbm_trace_alloc(t, 3, 1000, HBM_TAG_ACT, 0) == HBM_OK);
  CHECK(hbm_trace_alloc(t, 0, 24, HBM_TAG_ACT, 0) == HBM_OK);
  CHECK(hbm_trace_free_id(t, 3) == HBM_OK);
  CHECK(hbm_trace_step(t, 1) == HBM_OK);
  CHECK_EQ_U64(t->nids, 4);
  CHECK_EQ_U64(hbm_trace_peak_live(t), 1024);
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_validate(t, &d) == HBM_OK);
  hbm_trace_free(t);
  /* in memory: a starting block past its segment's end is named, not only the sum */
  CHECK(parse("hbm-trace 1\ninit-seg 0x200000 2MiB 0 large\ninit-blk 0x200000 1MiB -\ninit-blk 0x300000 1MiB -\n",
              &t, &d) == HBM_OK);
  if (t) {
    t->init_blocks[1].size = 2 << 20;
    memset(&d, 0, sizeof d);
    CHECK(hbm_trace_validate(t, &d) == HBM_EPARSE &&
          strstr(d.message, "the segment at 0x200000 is not tiled in 512-byte blocks at 0x300000"));
    /* ... and a segment its blocks do not fill, by how much */
    t->init_blocks[1].size = 1 << 20;
    t->init_segments[0].size = 4 << 20;
    memset(&d, 0, sizeof d);
    CHECK(hbm_trace_validate(t, &d) == HBM_EPARSE &&
          strstr(d.message, "the blocks of the segment at 0x200000 cover 2097152 of its 4194304 bytes"));
    hbm_trace_free(t);
  }
  expect_bad("hbm-trace 1\ninit-seg 0x1000 4096 0 small\ninit-blk 0x1000 1024 a\n", 3,
             "the init-seg at 0x1000 is not tiled: its init-blk lines cover 1024 of its 4096 bytes");
  /* a request past its block, with both figures */
  expect_bad("hbm-trace 1\ninit-seg 0x1000 4096 0 small\ninit-blk 0x1000 1024 a 1536\n", 3,
             "init-blk at 0x1000: request of 1536 bytes is larger than its block of 1024");
  /* blanks and a carriage return before the newline end no field; a lone '@'
   * is no address; a 16-byte field is no tag (its buffer holds 15) */
  t = NULL;
  CHECK(parse("hbm-trace 1\r\ncapacity 4MiB \r\na x 10 act\t\r\ns \nf x\r\n", &t, &d) == HBM_OK);
  if (t) CHECK(t->nevents == 3 && t->events[0].tag == HBM_TAG_ACT && t->capacity == 4 << 20);
  hbm_trace_free(t);
  /* a UTF-8 byte order mark before the header is read past, as hbm plan
   * reads past one; a CR is a line end only before LF, not a blank within
   * the line, and a file of CR line ends is said to be one */
  t = NULL;
  CHECK(parse("\xef\xbb\xbfhbm-trace 1\r\na x 10\r\nf x\r\n", &t, &d) == HBM_OK);
  if (t) CHECK(t->nevents == 2);
  hbm_trace_free(t);
  t = NULL;
  CHECK(parse("hbm-trace 1\na x 10\r", &t, &d) == HBM_OK); /* CR LF cut short at the end */
  if (t) CHECK(t->nevents == 1);
  hbm_trace_free(t);
  expect_bad("\xef\xbb\xbf", 1, "empty input");
  expect_bad("\xef\xbb\xbf\xef\xbb\xbfhbm-trace 1\n", 1, "expected the header");
  expect_bad("hbm-trace 1\na x\r100\n", 2, "a carriage return inside the line (byte 15): expected lines that end in LF or CR LF");
  expect_bad("hbm-trace 1\na x 100\r\r\n", 2, "a carriage return inside the line (byte 19)");
  expect_bad("hbm-trace 1\n# a\rcomment\n", 2, "a carriage return inside the line");
  expect_bad("hbm-trace 1\ra x 10\rf x\r", 1, "lines that end in CR alone (byte 11; the file has no LF)");
  expect_bad("# made on a Mac\rhbm-trace 1\r", 1, "lines that end in CR alone");
  expect_bad("hbm-trace 1\na x 1 @\n", 2, "unexpected field '@'");
  expect_bad("hbm-trace 1\na x 1 abcdefghijklmnop\n", 2, "unexpected field 'abcdefghijklmnop'");
  /* an input that ends without a newline (after a blank, or not), in a buffer of exactly its bytes */
  static const char *const last[] = {"hbm-trace 1\na x 10", "hbm-trace 1\na x 10 "};
  for (int k = 0; k < 2; k++) {
    size_t n = strlen(last[k]);
    char *exact = malloc(n);
    CHECK(exact != NULL);
    if (!exact) break;
    memcpy(exact, last[k], n);
    t = NULL;
    CHECK(parse_n(exact, n, &t, &d) == HBM_OK && t && t->nevents == 1);
    hbm_trace_free(t);
    free(exact);
  }
  /* built in memory: a free starting block after a live one leaves the ids counted */
  CHECK(hbm_trace_new("built", &t) == HBM_OK);
  hbm_init_segment seg = {.addr = 0x200000, .size = 2 << 20};
  hbm_init_block live = {.addr = 0x200000, .size = 1 << 20, .id = 5, .request = 1000};
  hbm_init_block rest = {.addr = 0x300000, .size = 1 << 20, .id = HBM_NO_ID};
  CHECK(hbm_trace_add_init_segment(t, &seg) == HBM_OK && hbm_trace_add_init_block(t, &live) == HBM_OK &&
        hbm_trace_add_init_block(t, &rest) == HBM_OK);
  CHECK_EQ_U64(t->nids, 6);
  CHECK_EQ_U64(hbm_trace_peak_live(t), 1000);
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_validate(t, &d) == HBM_OK);
  /* ... and a block whose size is off the grid, at an aligned address, is refused */
  t->init_segments[0].size = 1000;
  t->init_segments[0].nblocks = 1;
  t->init_blocks[0].size = 1000;
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_validate(t, &d) == HBM_EPARSE && strstr(d.message, "is not tiled in 512-byte blocks at 0x200000"));
  hbm_trace_free(t);
  /* an event is named by its index from 0 */
  CHECK(hbm_trace_new("twice", &t) == HBM_OK);
  CHECK(hbm_trace_alloc(t, 0, 10, HBM_TAG_ACT, 0) == HBM_OK && hbm_trace_alloc(t, 0, 10, HBM_TAG_ACT, 0) == HBM_OK);
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_validate(t, &d) == HBM_EPARSE && strstr(d.message, "event 1: allocation of id 0, which is already live"));
  hbm_trace_free(t);
}

/* Starting states drawn at random, a few segments over a few MiB so that
 * some overlap: the reader reports the first overlap in the trace's order
 * (the first segment that shares a byte with one before it, naming the
 * earliest such), as found by comparing every pair. */
static void test_overlap_order(uint64_t *rng) {
  enum { TRIALS = 3000, MAX_SEGS = 12 };
  int overlapping = 0;
  for (int trial = 0; trial < TRIALS; trial++) {
    uint64_t lo[MAX_SEGS], size[MAX_SEGS];
    int n = 2 + (int)test_rand_below(rng, MAX_SEGS - 1);
    char text[2048];
    int len = snprintf(text, sizeof text, "hbm-trace 1\n");
    for (int k = 0; k < n; k++) {
      lo[k] = test_rand_below(rng, 64) * 512 * 1024;
      size[k] = (1 + test_rand_below(rng, 8)) * 512 * 1024;
      len += snprintf(text + len, sizeof text - (size_t)len, "init-seg %#llx %llu 0 large\ninit-blk %#llx %llu -\n",
                      (unsigned long long)lo[k], (unsigned long long)size[k], (unsigned long long)lo[k],
                      (unsigned long long)size[k]);
    }
    int later = -1, earlier = -1;
    for (int k = 1; k < n && later < 0; k++)
      for (int j = 0; j < k; j++)
        if (lo[j] < lo[k] + size[k] && lo[k] < lo[j] + size[j]) {
          later = k;
          earlier = j;
          break;
        }
    hbm_trace *t = NULL;
    hbm_diag d;
    int rc = parse(text, &t, &d);
    if (later < 0) {
      CHECK(rc == HBM_OK);
      hbm_trace_free(t);
      continue;
    }
    overlapping++;
    char want[128];
    snprintf(want, sizeof want, "overlaps the segment [0x%llx, 0x%llx) at line %d", (unsigned long long)lo[earlier],
             (unsigned long long)(lo[earlier] + size[earlier]), 2 + 2 * earlier);
    CHECK(rc == HBM_EPARSE);
    if (rc != HBM_EPARSE || d.line != (uint64_t)(2 + 2 * later) || !strstr(d.message, want)) {
      fprintf(stderr, "for input\n%s  got line %llu: %s\n  expected line %d mentioning '%s'\n", text,
              (unsigned long long)d.line, d.message, 2 + 2 * later, want);
      CHECK(!"the first overlap in the trace's order");
    }
    hbm_trace_free(t);
  }
  CHECK(overlapping > TRIALS / 4 && overlapping < TRIALS); /* both kinds drawn */
}

/* The id table against the names themselves: ids from 3,000 names of 1 to
 * 24 bytes (a third up to 24, the rest up to 14) over two letters (so that
 * many share a prefix, names of 8 and 9 bytes differ only in the last, and
 * the table grows three times), in a random order of allocations and frees.
 * Each event's id must name what its line named, and every name one id. */
static void test_id_names(uint64_t *rng) {
  enum { NAMES = 3000, EVENTS = 40000, LEN = 24 };
  static char names[NAMES][LEN + 1];
  static uint8_t live[NAMES];
  static uint32_t named[EVENTS];
  for (int i = 0; i < NAMES; i++) {
    int again;
    do { /* distinct names */
      int len = 1 + (int)test_rand_below(rng, i % 3 ? 14 : LEN); /* 32,766 names of up to 14 */
      for (int k = 0; k < len; k++) names[i][k] = "ab"[test_rand_below(rng, 2)];
      names[i][len] = 0;
      again = 0;
      for (int j = 0; j < i && !again; j++) again = !strcmp(names[i], names[j]);
    } while (again);
  }
  size_t cap = 32 + (size_t)EVENTS * (LEN + 16), len = 0;
  char *text = malloc(cap);
  CHECK(text != NULL);
  if (!text) return;
  len += (size_t)snprintf(text, cap, "hbm-trace 1\n");
  memset(live, 0, sizeof live); /* bit 0: live now; bit 1: named at least once */
  uint32_t used = 0;
  for (int e = 0; e < EVENTS; e++) {
    uint32_t i = (uint32_t)test_rand_below(rng, NAMES);
    named[e] = i;
    len += (size_t)snprintf(text + len, cap - len, live[i] & 1 ? "f %s\n" : "a %s 512\n", names[i]);
    used += !(live[i] & 2);
    live[i] = (uint8_t)((live[i] ^ 1) | 2);
  }
  hbm_trace *t = NULL;
  hbm_diag d;
  CHECK(parse(text, &t, &d) == HBM_OK);
  if (t) {
    CHECK_EQ_U64(t->nevents, EVENTS);
    uint32_t bad = 0;
    for (int e = 0; e < EVENTS && e < (int)t->nevents; e++) {
      uint32_t id = t->events[e].id;
      if (id >= t->nids || !t->id_names[id] || strcmp(t->id_names[id], names[named[e]])) {
        if (bad++ < 3) fprintf(stderr, "event %d: id %u named '%s', the line named '%s'\n", e, id,
                               id < t->nids && t->id_names[id] ? t->id_names[id] : "?", names[named[e]]);
      }
    }
    CHECK(bad == 0);
    CHECK_EQ_U64(t->nids, used); /* one id a name: an id named twice would leave a name without one */
    hbm_trace_free(t);
  }
  free(text);
}

int main(void) {
  hbm_trace *t;
  hbm_diag d;
  const char *good =
      "hbm-trace 1\n"
      "# comment\n"
      "capacity 96GiB\n"
      "conf max_split_size_mb:128\n"
      "s 1\n"
      "a x 2GiB param   # trailing comment\n"
      "a y 1000 act 3 @0x7f0000001000\n"
      "a z 4.2GiB refused comm\n"
      "f y\n"
      "a y 512MiB temp 0\n"
      "s\n"
      "seg 0x7f0000000000 20MiB 0 large\n"
      "segfree 0x7f0000000000 20MiB\n"
      "f x\n";
  CHECK(parse(good, &t, &d) == HBM_OK);
  CHECK_EQ_U64(t->capacity, 96ull << 30);
  CHECK(t->conf && !strcmp(t->conf, "max_split_size_mb:128"));
  CHECK_EQ_U64(t->nevents, 10);
  CHECK_EQ_U64(t->nids, 3);
  CHECK(t->events[2].stream == 3 && t->events[2].addr == 0x7f0000001000ull && t->events[2].tag == HBM_TAG_ACT);
  CHECK_EQ_U64(t->events[3].size, 4509715661ull);
  CHECK(t->events[3].flags == HBM_EV_REFUSED && t->events[3].tag == HBM_TAG_COMM && t->events[2].flags == 0);
  CHECK_EQ_U64(t->events[6].size, 2); /* bare 's' continues the count */
  CHECK(t->events[7].kind == HBM_EV_SEG_ALLOC && t->events[8].kind == HBM_EV_SEG_FREE);
  /* measured as the trace is read: asking only reads (threads may share it) */
  CHECK_EQ_U64(t->peak_live_cache, (2ull << 30) + 4509715661ull + (512ull << 20));
  CHECK_EQ_U64(hbm_trace_peak_live(t), (2ull << 30) + 4509715661ull + (512ull << 20)); /* after y is reallocated */
  CHECK(hbm_trace_validate(t, &d) == HBM_OK);
  test_save_temp_names(t);
  hbm_trace *two = NULL;
  CHECK(parse("hbm-trace 1\na x 10\nf x\n", &two, &d) == HBM_OK);
  test_save_concurrent(t, two);
  hbm_trace_free(two);
  test_save_input_after_chdir();
  test_writer_edges();
  test_round_trip_fields();

  /* round trip through a file; the writer refuses to overwrite the input */
  char path[] = "/tmp/hbm-test-trace-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  CHECK(hbm_trace_save(t, path, &d) == HBM_OK);
  hbm_trace *back;
  CHECK(hbm_trace_load(path, &back, &d) == HBM_OK);
  CHECK_EQ_U64(back->nevents, t->nevents);
  for (uint64_t i = 0; i < t->nevents && i < back->nevents; i++) {
    CHECK(back->events[i].kind == t->events[i].kind);
    CHECK_EQ_U64(back->events[i].size, t->events[i].size);
    CHECK_EQ_U64(back->events[i].addr, t->events[i].addr);
    CHECK(back->events[i].stream == t->events[i].stream && back->events[i].tag == t->events[i].tag);
    CHECK(back->events[i].flags == t->events[i].flags);
  }
  CHECK(hbm_trace_save(back, path, &d) == HBM_EINVAL && strstr(d.message, "overwrite"));
  hbm_trace_free(back);
  hbm_trace *none = NULL;
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_load_device(path, -2, &none, &d) == HBM_EINVAL && none == NULL && strstr(d.message, "device -2"));
  /* a name with a newline (it is written as a comment) still gives a file that reads back */
  hbm_trace *named = NULL;
  const char *small = "hbm-trace 1\na x 10\nf x\n";
  CHECK(hbm_trace_parse_text(small, strlen(small), "two\nlines\x7f", &named, &d) == HBM_OK);
  CHECK(named && hbm_trace_save(named, path, &d) == HBM_OK);
  hbm_trace_free(named);
  back = NULL;
  CHECK(hbm_trace_load(path, &back, &d) == HBM_OK);
  if (back) {
    CHECK_EQ_U64(back->nevents, 2);
    hbm_trace_free(back);
  }
  unlink(path);
  hbm_trace_free(t);

  /* starting state */
  const char *init =
      "hbm-trace 1\n"
      "init-seg 0x1000000 2MiB 0 small\n"
      "init-blk 0x1000000 512 w 500 param\n"
      "init-blk 0x1000200 2096640 -\n"
      "a q 100\n"
      "f w\n";
  CHECK(parse(init, &t, &d) == HBM_OK);
  CHECK(t->ninit_segments == 1 && t->ninit_blocks == 2 && t->init_blocks[0].request == 500);
  CHECK_EQ_U64(hbm_trace_peak_live(t), 600);
  hbm_trace_free(t);

  /* peak live past 2^64 (16Ki live allocations of 1 PiB, then 1 GiB more):
   * the highest a uint64_t says, not what is left after wrapping round */
  CHECK(hbm_trace_new("big", &t) == HBM_OK);
  for (uint32_t i = 0; i < 16384; i++) CHECK(hbm_trace_alloc(t, i, 1ull << 50, HBM_TAG_OTHER, 0) == HBM_OK);
  CHECK(hbm_trace_alloc(t, 16384, 1ull << 30, HBM_TAG_OTHER, 0) == HBM_OK);
  CHECK_EQ_U64(hbm_trace_peak_live(t), UINT64_MAX);
  hbm_trace_free(t);

  /* bad input: one case each, with the line */
  expect_bad("", 1, "empty input");
  expect_bad("a x 1\n", 1, "header");
  expect_bad("hbm-trace 2\n", 1, "version");
  expect_bad("hbm-trace 1\nbogus 1 2\n", 2, "unknown directive");
  expect_bad("hbm-trace 1\na x\n", 2, "expected 'a ID SIZE");
  expect_bad("hbm-trace 1\nf nobody\n", 2, "unknown id");
  expect_bad("hbm-trace 1\na x 1\nf x\nf x\n", 4, "double free");
  /* a message quotes the file: its control bytes (a terminal's escape
   * sequences, a bell) come out as '?', here and wherever it quotes */
  expect_bad("hbm-trace 1\nf \x1b]0;pwned\x07\n", 2, "free of unknown id '?]0;pwned?' (never allocated)");
  expect_bad("hbm-trace 1\na x 1 act \x1b[2J\x7f\n", 2, "unexpected field '?[2J?'");
  expect_bad("hbm-trace 1\nconf max_split_size_mb:\x1b[1m\n", 2, "the setting 'max_split_size_mb:?[1m'");
  /* C1 controls too, as UTF-8 (CSI: C2 9B) or as the bare byte an 8-bit terminal reads;
   * other UTF-8 is kept, a sequence cut short is not */
  expect_bad("hbm-trace 1\nf \xc2\x9b" "31m\n", 2, "free of unknown id '?" "?31m'");
  expect_bad("hbm-trace 1\nf \x9b" "31m\n", 2, "free of unknown id '?31m'");
  expect_bad("hbm-trace 1\nf caf\xc3\xa9-\xe2\x86\x92\n", 2, "free of unknown id 'caf\xc3\xa9-\xe2\x86\x92'");
  expect_bad("hbm-trace 1\nf x\xe2\x86\n", 2, "free of unknown id 'x?" "?'");
  expect_bad("hbm-trace 1\nf \xc2\xa0\xc0\xaf\n", 2, "free of unknown id '\xc2\xa0?" "?'");
  expect_bad("hbm-trace 1\na x 1\na x 2\n", 3, "already live");
  /* the line each message names: where the id was last allocated or freed */
  expect_bad("hbm-trace 1\ns 1\na x 1\na x 2\n", 4, "id 'x' is already live (allocated at line 3 and not freed)");
  expect_bad("hbm-trace 1\na x 1\ns 2\nf x\nf x\n", 5, "double free of id 'x' (already freed at line 4)");
  expect_bad("hbm-trace 1\ninit-seg 0x0 2MiB 0 large\ninit-blk 0x0 2MiB w\ns 1\na w 1\n", 5,
             "id 'w' is already live (allocated at line 3 and not freed)");
  expect_bad("hbm-trace 1\ninit-seg 0x0 2MiB 0 large\ninit-blk 0x0 1MiB w\ninit-blk 0x100000 1MiB w\n", 4,
             "id 'w' is already live (allocated at line 3 and not freed)");
  expect_bad("hbm-trace 1\ninit-seg 0x0 2MiB 0 large\ninit-blk 0x0 1MiB w\ninit-blk 0x100000 1MiB -\n"
             "init-seg 0x200000 2MiB 0 large\ninit-blk 0x200000 2MiB w\n", 6,
             "id 'w' is already live (allocated at line 3 and not freed)");
  expect_bad("hbm-trace 1\na x 0\n", 2, "at least 1 byte");
  expect_bad("hbm-trace 1\na x 5EiB\n", 2, "expected a size");
  expect_bad("hbm-trace 1\na x 5PiB\n", 2, "absurd"); /* a size, over the 1 PiB limit */
  expect_bad("hbm-trace 1\na x 2000000TiB\n", 2, "absurd");
  expect_bad("hbm-trace 1\na x 12QB\n", 2, "expected a size");
  expect_bad("hbm-trace 1\na x 1 act act\n", 2, "a second tag 'act': one tag per allocation");
  expect_bad("hbm-trace 1\na x 1 act 1 2\n", 2, "a second stream number '2'");
  expect_bad("hbm-trace 1\na x 1 2147483648\n", 2, "stream '2147483648' out of range: expected 0..2147483647");
  expect_bad("hbm-trace 1\na x 1 @0x1000 @0x2000\n", 2, "a second @ADDR '@0x2000'");
  expect_bad("hbm-trace 1\na x 1 act 1 zzz\n", 2, "unexpected field 'zzz'");
  expect_bad("hbm-trace 1\na x 1 refused act refused\n", 2, "a second 'refused'");
  expect_bad("hbm-trace 1\ns 5\na x 1\ns 3\n", 4, "step 3 after step 5 (line 2): steps only go forward");
  expect_bad("hbm-trace 1\ns 5\ns 5\n", 3, "step 5 after step 5");
  expect_bad("hbm-trace 1\ncapacity 1GiB\ncapacity 2GiB\n", 3, "a second 'capacity' (the first at line 2)");
  expect_bad("hbm-trace 1\nconf max_split_size_mb:64\nconf max_split_size_mb:32\n", 3, "a second 'conf' (the first at line 2)");
  { /* the optional fields in any order, as docs/trace-format.md says */
    hbm_trace *any = NULL;
    hbm_diag why;
    CHECK(parse("hbm-trace 1\na x 1 @0x1000 3 act\nf x\n", &any, &why) == HBM_OK);
    if (any) {
      CHECK(any->events[0].tag == HBM_TAG_ACT && any->events[0].stream == 3 && any->events[0].addr == 0x1000);
      hbm_trace_free(any);
    }
  }
  expect_bad("hbm-trace 1\na x 1 @zz\n", 2, "address");
  expect_bad("hbm-trace 1\ncapacity\n", 2, "capacity SIZE");
  expect_bad("hbm-trace 1\ns x\n", 2, "step number");
  expect_bad("hbm-trace 1\nseg 0x1000 1MiB 0 medium\n", 2, "unexpected field 'medium': expected a stream number, 'small' or 'large'");
  /* a segment's stream and pool are read by what they are, in either order,
   * each at most once: the usage says 'seg ADDR SIZE [STREAM] [small|large]' */
  {
    static const struct { const char *line; int32_t stream; uint8_t small; } segs[] = {
        {"seg 0x200000 2MiB small", 0, 1}, {"seg 0x200000 2MiB large", 0, 0}, {"seg 0x200000 2MiB 3", 3, 0},
        {"seg 0x200000 2MiB small 7", 7, 1}, {"seg 0x200000 2MiB 7 small", 7, 1}, {"seg 0x200000 2MiB", 0, 0}};
    for (size_t i = 0; i < sizeof segs / sizeof *segs; i++) {
      char text[96];
      snprintf(text, sizeof text, "hbm-trace 1\n%s\n", segs[i].line);
      t = NULL;
      int ok = parse(text, &t, &d) == HBM_OK;
      if (!ok) fprintf(stderr, "for %s: %s\n", segs[i].line, d.message);
      CHECK(ok && t->nevents == 1 && t->events[0].kind == HBM_EV_SEG_ALLOC);
      if (ok) CHECK(t->events[0].stream == segs[i].stream && t->events[0].tag == segs[i].small);
      hbm_trace_free(t);
    }
  }
  expect_bad("hbm-trace 1\nseg 0x1000 1MiB small large\n", 2, "a second pool 'large'");
  expect_bad("hbm-trace 1\nseg 0x1000 1MiB 1 2\n", 2, "a second stream number '2': one stream per segment");
  expect_bad("hbm-trace 1\nseg 0x1000 1MiB small small\n", 2, "a second pool 'small'");
  expect_bad("hbm-trace 1\nseg 0x1000 1MiB small 2147483648\n", 2, "stream '2147483648' out of range");
  expect_bad("hbm-trace 1\nseg 0x1000 1MiB 1 small 2\n", 2, "expected 'seg ADDR SIZE [STREAM] [small|large]'");
  /* recorded segments are carved in 512-byte blocks, where they were: the
   * caching model places one there (a fuzzed 0x...a0 broke its invariants) */
  expect_bad("hbm-trace 1\nseg 0x7cf4220000a0 20MiB 0 large\n", 2, "not a multiple of 512 bytes on a 512-byte boundary");
  expect_bad("hbm-trace 1\ncapacity 1GiB\nsegfree 0x200000 1000\n", 3, "segment of 1000 bytes at 0x200000");
  expect_bad("hbm-trace 1\ninit-blk 0x0 512 -\n", 2, "before any init-seg");
  /* a TAG only after a REQUEST: the usage says so */
  expect_bad("hbm-trace 1\ninit-seg 0x0 512 0 large\ninit-blk 0x0\n", 3, "ID|- [REQUEST [TAG]]'");
  expect_bad("hbm-trace 1\ninit-seg 0x1000 1MiB 0 large\ninit-blk 0x2000 512 -\n", 3, "tile");
  /* the last segment is checked too: before the first event, or at the end */
  expect_bad("hbm-trace 1\ninit-seg 0x1000 4096 0 small\ninit-blk 0x1000 1024 a\na q 1KiB\n", 4, "not tiled");
  expect_bad("hbm-trace 1\ninit-seg 0x1000 4096 0 small\ninit-blk 0x1000 1024 a\n", 3, "not tiled");
  expect_bad("hbm-trace 1\ninit-seg 0x1000 4096 0 small\ninit-blk 0x1000 1000 a\n", 3, "multiple of 512");
  expect_bad("hbm-trace 1\ninit-seg 0x1001 4096 0 small\n", 2, "multiple of 512");
  /* a size no 512-byte blocks can tile: said at its line, not as "not tiled" later */
  expect_bad("hbm-trace 1\ninit-seg 0x1000 1000 0 small\ninit-blk 0x1000 512 -\na x 1\n", 2,
             "init-seg size 1000 is not a multiple of 512 bytes");
  expect_bad("hbm-trace 1\ninit-seg 0x1000 1.5KB 0 small\n", 2, "init-seg size 1500 is not a multiple of 512 bytes");
  /* a block after the first event belongs to no starting state: said as init-seg's is */
  expect_bad("hbm-trace 1\ninit-seg 0x1000 4096 0 small\ninit-blk 0x1000 4096 -\na q 1KiB\ninit-blk 0x2000 512 -\n", 5,
             "starting state (init-blk) must come before the first event");
  /* a conf PyTorch would refuse: the line, and the byte within the setting */
  expect_bad("hbm-trace 1\nconf max_split_size_mb:abc\na x 1\n", 2,
             "conf: byte 18 of the setting 'max_split_size_mb:abc': max_split_size_mb: expected a non-negative integer");
  expect_bad("hbm-trace 1\nconf bogus:1\n", 2, "Unrecognized CachingAllocator option: bogus");
  expect_bad("hbm-trace 1\nconf max_split_size_mb:10\n", 2, "too small");
  CHECK(parse("hbm-trace 1\nconf expandable_segments:True,roundup_power2_divisions:[256:1,>:4]\n", &t, &d) == HBM_OK);
  /* ... and hbm_trace_validate refuses it in a trace built in memory */
  free(t->conf);
  t->conf = strdup("garbage_collection_threshold:2");
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_validate(t, &d) == HBM_EPARSE && strstr(d.message, "garbage_collect_threshold is invalid"));
  hbm_trace_free(t);

  /* starting states that cannot exist: segments sharing bytes, or running past 2^64 */
  expect_bad("hbm-trace 1\ninit-seg 0x0 2MiB 0 large\ninit-blk 0x0 2MiB -\n"
             "init-seg 0x100000 2MiB 0 large\ninit-blk 0x100000 2MiB -\na x 10\n", 4,
             "the segment [0x100000, 0x300000) overlaps the segment [0x0, 0x200000) at line 2");
  expect_bad("hbm-trace 1\ninit-seg 0x100000 2MiB 0 large\ninit-blk 0x100000 2MiB -\n"
             "init-seg 0x0 2MiB 0 large\ninit-blk 0x0 2MiB -\n", 4,
             "the segment [0x0, 0x200000) overlaps the segment [0x100000, 0x300000) at line 2");
  expect_bad("hbm-trace 1\ninit-seg 0x0 8MiB 0 large\ninit-blk 0x0 8MiB -\ninit-seg 0x800000 2MiB 0 large\n"
             "init-blk 0x800000 2MiB -\ninit-seg 0x200000 512 0 small\ninit-blk 0x200000 512 -\n", 6,
             "overlaps the segment [0x0, 0x800000) at line 2");
  expect_bad("hbm-trace 1\ninit-seg 0x0 2MiB 0 large\ninit-blk 0x0 2MiB -\ninit-seg 0x0 2MiB 0 large\n"
             "init-blk 0x0 2MiB -\n", 4, "overlaps the segment [0x0, 0x200000) at line 2");
  /* The first overlap in the trace's order, not the lowest in address:
   * line 6 overlaps line 4, before line 8 overlaps line 2. */
  expect_bad("hbm-trace 1\ninit-seg 0x0 2MiB 0 large\ninit-blk 0x0 2MiB -\ninit-seg 0x1000000 4MiB 0 large\n"
             "init-blk 0x1000000 4MiB -\ninit-seg 0x1200000 1MiB 0 large\ninit-blk 0x1200000 1MiB -\n"
             "init-seg 0x100000 512KiB 0 large\ninit-blk 0x100000 512KiB -\n", 6,
             "the segment [0x1200000, 0x1300000) overlaps the segment [0x1000000, 0x1400000) at line 4");
  {
    uint64_t seed = test_seed("test_trace"), rng = seed;
    test_overlap_order(&rng);
    test_writer_formats(&rng);
    test_id_names(&rng);
  }
  expect_bad("hbm-trace 1\ninit-seg 0xfffffffffffffe00 2MiB 0 large\ninit-blk 0xfffffffffffffe00 2MiB -\n", 2,
             "wrap past the top of the address space");
  expect_bad("hbm-trace 1\ninit-seg 0xffffffffffe00000 2MiB 0 large\n", 2, "wrap past the top");
  expect_bad("hbm-trace 1\nseg 0xfffffffffffffe00 2MiB 0 large\n", 2, "wrap past the top");
  /* side by side is fine, in either order */
  CHECK(parse("hbm-trace 1\ninit-seg 0x200000 2MiB 0 large\ninit-blk 0x200000 2MiB -\n"
              "init-seg 0x0 2MiB 0 large\ninit-blk 0x0 2MiB -\na x 10\n", &t, &d) == HBM_OK);
  CHECK(hbm_trace_validate(t, &d) == HBM_OK);
  /* hbm_trace_validate refuses the same for traces built in memory (importers) */
  t->init_segments[1].addr = 0x100000;
  t->init_blocks[1].addr = 0x100000;
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_validate(t, &d) == HBM_EPARSE && strstr(d.message, "[0x100000, 0x300000) overlaps the segment [0x200000, 0x400000) at line 2"));
  t->init_segments[1].addr = 0xfffffffffffffe00ull;
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_validate(t, &d) == HBM_EPARSE && strstr(d.message, "wraps past the top"));
  hbm_trace_free(t);
  /* ... and a recorded segment off the 512-byte grid */
  CHECK(parse("hbm-trace 1\nseg 0x200000 2MiB 0 large\na x 10\n", &t, &d) == HBM_OK);
  CHECK(hbm_trace_validate(t, &d) == HBM_OK);
  t->events[0].addr = 0x2000a0;
  memset(&d, 0, sizeof d);
  CHECK(hbm_trace_validate(t, &d) == HBM_EPARSE && strstr(d.message, "event 0: segment of 2097152 bytes at 0x2000a0"));
  /* ... or of no bytes, or bytes off the grid, or past the top; a segfree alike */
  static const uint64_t bad_seg[][3] = {{HBM_EV_SEG_ALLOC, 0x200000, 0},
                                        {HBM_EV_SEG_ALLOC, 0x200000, (2 << 20) + 512 + 1},
                                        {HBM_EV_SEG_ALLOC, 0xfffffffffffffe00ull, 2 << 20},
                                        {HBM_EV_SEG_FREE, 0x2000a0, 2 << 20}};
  for (size_t i = 0; i < sizeof bad_seg / sizeof *bad_seg; i++) {
    t->events[0].kind = (uint8_t)bad_seg[i][0];
    t->events[0].addr = bad_seg[i][1];
    t->events[0].size = bad_seg[i][2];
    memset(&d, 0, sizeof d);
    CHECK(hbm_trace_validate(t, &d) == HBM_EPARSE && strstr(d.message, "is not a multiple of 512 bytes on a 512-byte boundary"));
  }
  hbm_trace_free(t);
  static const char nul[] = "hbm-trace 1\na x 1\nf x\0\n";
  expect_bad_n(nul, sizeof nul - 1, 3, "NUL");
  expect_bad("hbm-trace 1\na 1 2 3 4 5 6 7 8 9\n", 2, "too many fields (10)");

  /* the input size limit: a regular file by its size, before reading; an
   * endless device once past the limit; out of memory is never wordless */
  {
    char big[] = "/tmp/hbm-test-big-XXXXXX";
    int bfd = mkstemp(big);
    CHECK(bfd >= 0);
    char block[4096];
    memset(block, 'x', sizeof block);
    CHECK(write(bfd, block, sizeof block) == (ssize_t)sizeof block);
    close(bfd);
    char *data = NULL;
    size_t len = 0;
    memset(&d, 0, sizeof d);
    CHECK(hbm_read_file_max(big, 4096, &data, &len, &d) == HBM_OK && len == 4096);
    free(data);
    memset(&d, 0, sizeof d);
    CHECK(hbm_read_file_max(big, 4095, &data, &len, &d) == HBM_EPARSE);
    CHECK(!strcmp(d.file, big) && strstr(d.message, "4096 bytes, more than the 4.00 KiB the reader takes"));
    unlink(big);
    memset(&d, 0, sizeof d);
    CHECK(hbm_read_file_max("/dev/zero", 1 << 20, &data, &len, &d) == HBM_EPARSE);
    CHECK(!strcmp(d.file, "/dev/zero") && strstr(d.message, "more than the 1.00 MiB the reader takes"));
  }
  test_recorded_overlap();
  test_edges_exact();
  return test_done("test_trace");
}
