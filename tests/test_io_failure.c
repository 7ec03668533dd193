/* test_io_failure: the whole-file reader and the atomic writer
 * (src/trace/diag.c) when the system calls under them fail, are interrupted,
 * or do part of what was asked.
 *
 * This program is linked with -Wl,--wrap for read, write, fsync, close,
 * rename, fchmod, fstat, realpath, open, malloc, realloc and free
 * (CMakeLists.txt). While a call under test runs ("armed"), the wrappers
 * count each function's calls and can make the Nth and the K-1 after it fail
 * with a chosen errno (a close that fails still releases its descriptor, as
 * Linux's does; a malloc that fails gives NULL; a write, 0 bytes), or let
 * write take only a few bytes at a time; malloc and realloc record the sizes
 * asked for. Nothing is timed. The bytes are seeded (the seed is printed;
 * HBM_SEED reruns one).
 *
 * The writer: a write, fchmod, fsync, close or rename that fails is HBM_EIO
 * naming the file, the error and the step (a close's is a write's: NFS and
 * quotas report there), with the old file whole, nothing left beside it, no
 * descriptor left open and no host memory kept; an fsync the file system does
 * not offer (EINVAL) is no failure; a write that is interrupted, would block
 * or takes part of the bytes is carried on to the last byte, and one that
 * takes none fails the save; an open interrupted by a signal (the temporary
 * file's, the directory's, a device's) is asked again; host memory running
 * out is HBM_EHOSTMEM with the file named all the same. Through a symbolic
 * link the file it names is replaced, the link kept; a link that loops, leads
 * into a directory that may not be searched, or that realpath cannot resolve
 * is an error, the link and its file untouched; a dangling link is replaced
 * by the new file. After the rename the directory holding the new name is
 * fsync'd: one that fails is HBM_EIO saying the file is written, the new
 * bytes in place. The reader: reads and opens interrupted any number of times
 * give the exact bytes; a read that fails is HBM_EIO at once (never retried),
 * with nothing handed back or kept, and its error (or a failed fstat's) is
 * the one said even when the close after it fails too; a pipe of every length
 * around its buffer's steps (trace.h: 64 KiB that doubles, never past the
 * limit + 2) up to 5 MiB reads back exactly and NUL-terminated; a regular
 * file, and a /proc file that says size 0 (/proc/version), in one buffer. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "trace/trace.h"

/* ---- the wrapped calls -------------------------------------------------------------- */
ssize_t __real_read(int fd, void *buf, size_t n);
ssize_t __real_write(int fd, const void *buf, size_t n);
int __real_fsync(int fd);
int __real_close(int fd);
int __real_rename(const char *from, const char *to);
int __real_fchmod(int fd, mode_t mode);
int __real_fstat(int fd, struct stat *st);
char *__real_realpath(const char *path, char *resolved);
int __real_open(const char *path, int flags, ...);
void *__real_malloc(size_t n);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);

enum { F_READ, F_WRITE, F_FSYNC, F_CLOSE, F_RENAME, F_FCHMOD, F_FSTAT, F_MALLOC, F_REALPATH, F_OPEN, F_COUNT };
static const char *const fn_name[F_COUNT] = {"read",   "write",  "fsync",  "close",    "rename",
                                             "fchmod", "fstat",  "malloc", "realpath", "open"};
/* What the writer says when each fails (its message begins so). */
static const char *const write_said[F_COUNT] = {
    [F_WRITE] = "write failed: ",   [F_FSYNC] = "fsync failed: ",
    [F_CLOSE] = "write failed (at close): ", /* a write NFS or a quota refused late */
    [F_RENAME] = "cannot replace: ", [F_FCHMOD] = "cannot keep the mode of: ",
    [F_OPEN] = "cannot create: "}; /* the temporary file's */

typedef struct fault {
  unsigned long calls;    /* calls since the case began */
  unsigned long nth;      /* 0: none fails; else calls nth .. nth + count - 1 fail */
  unsigned long count;
  int err;                /* with this errno */
  unsigned long injected; /* failures made */
} fault;

static fault faults[F_COUNT];
static int armed;          /* a call under test is running */
static size_t write_limit; /* nonzero: a write takes at most this many bytes */
static unsigned long mallocs, reallocs;
static long net_allocs;    /* allocations made less those freed, while armed */
static size_t sizes[64];   /* the sizes malloc and realloc were asked for, in order */
static unsigned nsizes;
static char *block;        /* the block malloc or realloc gave last, and its size */
static size_t block_size;
static unsigned long overreach; /* reads into the last block that left no byte for the NUL */
static unsigned long dir_syncs; /* fsyncs of a directory, the last one's device and inode */
static dev_t synced_dev;
static ino_t synced_ino;

static void reset(void) {
  memset(faults, 0, sizeof faults);
  write_limit = 0;
  mallocs = reallocs = 0;
  net_allocs = 0;
  nsizes = 0;
  block = NULL;
  block_size = 0;
  overreach = 0;
  dir_syncs = 0;
  synced_dev = 0;
  synced_ino = 0;
}

static void fail_calls(int f, unsigned long nth, unsigned long count, int err) {
  faults[f].nth = nth;
  faults[f].count = count;
  faults[f].err = err;
}

/* One save, or one read, with the faults fail_calls set since reset(): the
 * wrappers armed for that call alone, its diag cleared first. */
static int armed_save(const char *path, const unsigned char *data, size_t len, hbm_diag *d) {
  memset(d, 0, sizeof *d);
  armed = 1;
  int rc = hbm_write_file_atomic(path, data, len, d);
  armed = 0;
  return rc;
}

static int armed_read(const char *path, char **got, size_t *got_len, hbm_diag *d) {
  memset(d, 0, sizeof *d);
  armed = 1;
  int rc = hbm_read_file(path, got, got_len, d);
  armed = 0;
  return rc;
}

static int inject(int f) {
  if (!armed) return 0;
  fault *x = &faults[f];
  x->calls++;
  if (x->nth && x->calls >= x->nth && x->calls - x->nth < x->count) {
    x->injected++;
    return 1;
  }
  return 0;
}

ssize_t __wrap_read(int fd, void *buf, size_t n) {
  char *p = buf;
  if (armed && block && p >= block && p <= block + block_size && n > (size_t)(block + block_size - p) - 1)
    overreach++;
  if (inject(F_READ)) return errno = faults[F_READ].err, -1;
  return __real_read(fd, buf, n);
}
ssize_t __wrap_write(int fd, const void *buf, size_t n) {
  if (inject(F_WRITE)) return faults[F_WRITE].err ? (errno = faults[F_WRITE].err, -1) : 0; /* 0: took nothing */
  if (armed && write_limit && n > write_limit) n = write_limit;
  return __real_write(fd, buf, n);
}
int __wrap_fsync(int fd) {
  struct stat st;
  if (armed && __real_fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))
    dir_syncs++, synced_dev = st.st_dev, synced_ino = st.st_ino;
  if (inject(F_FSYNC)) return errno = faults[F_FSYNC].err, -1;
  return __real_fsync(fd);
}
int __wrap_close(int fd) {
  if (inject(F_CLOSE)) {
    __real_close(fd); /* Linux releases the descriptor whatever close says */
    return errno = faults[F_CLOSE].err, -1;
  }
  return __real_close(fd);
}
int __wrap_rename(const char *from, const char *to) {
  if (inject(F_RENAME)) return errno = faults[F_RENAME].err, -1;
  return __real_rename(from, to);
}
int __wrap_fchmod(int fd, mode_t mode) {
  if (inject(F_FCHMOD)) return errno = faults[F_FCHMOD].err, -1;
  return __real_fchmod(fd, mode);
}
int __wrap_fstat(int fd, struct stat *st) {
  if (inject(F_FSTAT)) return errno = faults[F_FSTAT].err, -1;
  return __real_fstat(fd, st);
}
int __wrap_open(const char *path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  if (inject(F_OPEN)) return errno = faults[F_OPEN].err, -1;
  return __real_open(path, flags, mode);
}
char *__wrap_realpath(const char *path, char *resolved) {
  if (inject(F_REALPATH)) return errno = faults[F_REALPATH].err, NULL;
  return __real_realpath(path, resolved);
}

static void record(void *p, size_t n) {
  if (nsizes < sizeof sizes / sizeof *sizes) sizes[nsizes] = n;
  nsizes++;
  block = p;
  block_size = n;
}
void *__wrap_malloc(size_t n) {
  if (inject(F_MALLOC)) return errno = faults[F_MALLOC].err, NULL;
  void *p = __real_malloc(n);
  if (armed && p) mallocs++, net_allocs++, record(p, n);
  return p;
}
void *__wrap_realloc(void *p, size_t n) {
  void *q = __real_realloc(p, n);
  if (armed && q) reallocs++, net_allocs += !p, record(q, n);
  return q;
}
void __wrap_free(void *p) {
  if (armed && p) net_allocs--;
  __real_free(p);
}

/* ---- helpers -------------------------------------------------------------------------- */
/* Open descriptors (-1 where /proc is missing: then not compared). */
static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* Whether path holds exactly data[0..len) (read through stdio, not wrapped). */
static int holds(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  int same = 1;
  const unsigned char *p = data;
  char buf[8192];
  size_t at = 0, got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
    if (at + got > len || memcmp(buf, p + at, got)) same = 0;
    at += got;
  }
  fclose(f);
  return same && at == len;
}

static int put(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = fwrite(data, 1, len, f) == len;
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* What a failure with err is said as: its text, or for a write that took
 * nothing (err 0), that. */
static const char *said_as(int err) { return err ? strerror(err) : "wrote 0 bytes"; }

/* Reports which case a failed CHECK belonged to. */
static int failures_before;
static void begin_case(void) { failures_before = test_failures_; }
static void end_case(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void end_case(const char *fmt, ...) {
  if (test_failures_ == failures_before) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "  (in: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, ")\n");
  va_end(ap);
}

/* A reader case's start: path holds data[0..n), the faults are reset; the
 * descriptors open now, to compare with after the read. */
static int read_begin(const char *path, const unsigned char *data, size_t n) {
  begin_case();
  CHECK(put(path, data, n) == 0);
  int fds = open_fds();
  reset();
  return fds;
}

/* ---- the writer -------------------------------------------------------------------------- */
static const char old_text[] = "the old file, which a failed save must leave whole\n";

/* A writer case's start: path holds old_text (existing) or is not there, the
 * faults are reset; the descriptors open now, to compare with after. */
static int save_begin(const char *path, int existing) {
  begin_case();
  unlink(path);
  if (existing) CHECK(put(path, old_text, sizeof old_text - 1) == 0);
  int fds = open_fds();
  reset();
  return fds;
}

/* One save of data over path (a file holding old_text, or none when
 * !existing) with function f failing at its nth call count times with err;
 * f < 0: nothing fails (write_limit may still be set by the caller). */
static void save_case(const char *dir, const char *path, int existing, const unsigned char *data, size_t len,
                      int f, unsigned long nth, unsigned long count, int err, size_t limit, int expect_ok) {
  hbm_diag d;
  int fds = save_begin(path, existing);
  if (f >= 0) fail_calls(f, nth, count, err);
  write_limit = limit;
  int rc = armed_save(path, data, len, &d);
  if (f >= 0) CHECK_EQ_U64(faults[f].injected, count); /* the failure was met, every time */
  if (expect_ok) {
    CHECK(rc == HBM_OK);
    CHECK(holds(path, data, len));
  } else {
    CHECK(rc == HBM_EIO);
    CHECK(!strcmp(d.file, path));
    CHECK(strstr(d.message, said_as(err)) != NULL);
    CHECK(f >= 0 && write_said[f] && !strncmp(d.message, write_said[f], strlen(write_said[f])));
    if (existing) CHECK(holds(path, old_text, sizeof old_text - 1));
    else CHECK(access(path, F_OK) != 0 && errno == ENOENT);
  }
  CHECK(test_dir_entries(dir) == (existing || expect_ok)); /* no temporary file left */
  CHECK(open_fds() == fds);
  CHECK(net_allocs == 0);
  end_case("save, %s file, %s call %lu failing %lu time(s) with %s, writes of at most %zu bytes",
           existing ? "an existing" : "a new", f >= 0 ? fn_name[f] : "no", nth, count,
           f >= 0 ? said_as(err) : "-", limit);
}

static void test_writer(const unsigned char *data, size_t len) {
  char dir[] = "/tmp/hbm-test-iofail-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[128];
  snprintf(path, sizeof path, "%s/out", dir);
  for (int existing = 0; existing < 2; existing++) {
    /* what must fail the save */
    save_case(dir, path, existing, data, len, F_FSYNC, 1, 1, EIO, 0, 0);
    save_case(dir, path, existing, data, len, F_FSYNC, 1, 1, ENOSPC, 0, 0);
    save_case(dir, path, existing, data, len, F_CLOSE, 1, 1, EIO, 0, 0);
    save_case(dir, path, existing, data, len, F_CLOSE, 1, 1, EDQUOT, 0, 0);
    save_case(dir, path, existing, data, len, F_RENAME, 1, 1, EIO, 0, 0);
    save_case(dir, path, existing, data, len, F_WRITE, 1, 1, EIO, 0, 0);
    save_case(dir, path, existing, data, len, F_WRITE, 3, 1, ENOSPC, 1000, 0); /* after part of the bytes */
    save_case(dir, path, existing, data, len, F_WRITE, 1, 1, 0, 0, 0);         /* took nothing: never retried */
    save_case(dir, path, existing, data, len, F_WRITE, 3, 1, 0, 1000, 0);
    save_case(dir, path, existing, data, len, F_OPEN, 1, 1, EACCES, 0, 0); /* the temporary file's */
    /* what must not */
    save_case(dir, path, existing, data, len, F_FSYNC, 1, 1, EINVAL, 0, 1); /* no fsync there */
    save_case(dir, path, existing, data, len, F_WRITE, 1, 1, EINTR, 0, 1);
    save_case(dir, path, existing, data, len, F_WRITE, 2, 5, EINTR, 7, 1);
    save_case(dir, path, existing, data, len, F_WRITE, 1, 2, EAGAIN, 0, 1);
    save_case(dir, path, existing, data, len, F_OPEN, 1, 3, EINTR, 0, 1); /* a signal while opening */
    save_case(dir, path, existing, data, len, F_OPEN, 2, 3, EINTR, 0, 1); /* the directory's, to sync it */
    save_case(dir, path, existing, data, len, -1, 0, 0, 0, 7, 1); /* 7 bytes a write */
    save_case(dir, path, existing, data, len, -1, 0, 0, 0, 0, 1);
  }
  /* a replaced file keeps its mode: the fchmod that keeps it failing fails the save */
  save_case(dir, path, 1, data, len, F_FCHMOD, 1, 1, EPERM, 0, 0);
  { /* ... and its message stands: nothing is written after it to fail again and say otherwise */
    begin_case();
    CHECK(put(path, old_text, sizeof old_text - 1) == 0);
    hbm_diag d;
    reset();
    fail_calls(F_FCHMOD, 1, 1, EPERM);
    fail_calls(F_WRITE, 1, 1000, EIO);
    int rc = armed_save(path, data, len, &d);
    CHECK(rc == HBM_EIO && strstr(d.message, said_as(EPERM)) && !strstr(d.message, said_as(EIO)));
    CHECK_EQ_U64(faults[F_WRITE].calls, 0);
    CHECK(holds(path, old_text, sizeof old_text - 1));
    CHECK(test_dir_entries(dir) == 1);
    end_case("save, an existing file, fchmod failing, then every write");
  }

  /* Host memory for the temporary file's name running out is said too,
   * naming the file, with the old file whole and nothing left. */
  for (int existing = 0; existing < 2; existing++) {
    hbm_diag d;
    int fds = save_begin(path, existing);
    fail_calls(F_MALLOC, 1, 1, ENOMEM);
    int rc = armed_save(path, data, len, &d);
    CHECK_EQ_U64(faults[F_MALLOC].injected, 1);
    CHECK(rc == HBM_EHOSTMEM);
    CHECK(!strcmp(d.file, path));
    CHECK(!strncmp(d.message, "out of host memory", strlen("out of host memory")));
    if (existing) CHECK(holds(path, old_text, sizeof old_text - 1));
    CHECK(test_dir_entries(dir) == existing);
    CHECK(open_fds() == fds);
    CHECK(net_allocs == 0);
    end_case("save, %s file, malloc failing", existing ? "an existing" : "a new");
  }
  unlink(path);
  CHECK(rmdir(dir) == 0);

  /* A device is written in place: its close and write are checked too
   * (unless /dev/null is this process's output, which is written through
   * its descriptor, never closed). */
  struct stat null_st, out_st;
  int null_is_output = stat("/dev/null", &null_st) != 0;
  for (int fd = 1; fd <= 2; fd++)
    if (fstat(fd, &out_st) == 0 && out_st.st_dev == null_st.st_dev && out_st.st_ino == null_st.st_ino)
      null_is_output = 1;
  if (null_is_output) {
    printf("test_io_failure: /dev/null is standard output or error here: its in-place write is not tried\n");
    return;
  }
  static const struct {
    int f, err;
    unsigned long count;
    int ok;
  } dev_cases[] = {{F_CLOSE, EIO, 1, 0}, {F_WRITE, EIO, 1, 0}, {F_WRITE, 0, 1, 0}, {F_WRITE, EINTR, 3, 1},
                   {F_OPEN, EINTR, 3, 1}, {F_OPEN, EACCES, 1, 0}};
  for (size_t i = 0; i < sizeof dev_cases / sizeof *dev_cases; i++) {
    begin_case();
    hbm_diag d;
    int fds = open_fds();
    reset();
    fail_calls(dev_cases[i].f, 1, dev_cases[i].count, dev_cases[i].err);
    int rc = armed_save("/dev/null", data, len, &d);
    CHECK_EQ_U64(faults[dev_cases[i].f].injected, dev_cases[i].count);
    CHECK(rc == (dev_cases[i].ok ? HBM_OK : HBM_EIO));
    if (!dev_cases[i].ok) {
      const char *said = dev_cases[i].f == F_OPEN ? "cannot open for writing: " : write_said[dev_cases[i].f];
      CHECK(strstr(d.message, said_as(dev_cases[i].err)) != NULL);
      CHECK(!strncmp(d.message, said, strlen(said)));
    }
    CHECK(open_fds() == fds);
    end_case("/dev/null, %s failing %lu time(s) with %s", fn_name[dev_cases[i].f], dev_cases[i].count,
             said_as(dev_cases[i].err));
  }
}

/* Whether the last directory fsync'd while armed is dir. */
static int synced_dir_is(const char *dir) {
  struct stat st;
  return stat(dir, &st) == 0 && dir_syncs > 0 && st.st_dev == synced_dev && st.st_ino == synced_ino;
}

/* After the rename, the directory that holds the new name is fsync'd (once,
 * and it is the file's directory: through a link, the one of the file the
 * link names; for a bare name, the working directory). A directory fsync the
 * file system does not offer is no failure; one that fails is HBM_EIO that
 * says the file is written (it is: the new bytes, nothing left beside them)
 * but its name may not survive a crash. A device written in place syncs no
 * directory. */
static void test_writer_dir_sync(const unsigned char *data, size_t len) {
  char dir[] = "/tmp/hbm-test-iofail-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[128], sub[128], in_sub[128], link[128];
  snprintf(path, sizeof path, "%s/out", dir);
  static const struct {
    int err; /* the directory's fsync fails with this (0: not at all) */
    int ok;
  } how[] = {{0, 1}, {EIO, 0}, {ENOSPC, 0}, {EINVAL, 1}, {EROFS, 1}, {EBADF, 1}};
  for (int existing = 0; existing < 2; existing++) {
    for (size_t i = 0; i < sizeof how / sizeof *how; i++) {
      hbm_diag d;
      int fds = save_begin(path, existing);
      if (how[i].err) fail_calls(F_FSYNC, 2, 1, how[i].err); /* the file's is the first */
      int rc = armed_save(path, data, len, &d);
      CHECK_EQ_U64(faults[F_FSYNC].calls, 2);
      CHECK_EQ_U64(dir_syncs, 1);
      CHECK(synced_dir_is(dir));
      if (how[i].err) CHECK_EQ_U64(faults[F_FSYNC].injected, 1);
      if (how[i].ok) {
        CHECK(rc == HBM_OK);
      } else {
        static const char said[] = "written, but the directory could not be synced: ";
        CHECK(rc == HBM_EIO);
        CHECK(!strcmp(d.file, path));
        CHECK(!strncmp(d.message, said, strlen(said)) && strstr(d.message, strerror(how[i].err)));
      }
      CHECK(holds(path, data, len)); /* written, either way */
      CHECK(test_dir_entries(dir) == 1);
      CHECK(open_fds() == fds);
      CHECK(net_allocs == 0);
      end_case("save, %s file, the directory's fsync failing with %s", existing ? "an existing" : "a new",
               how[i].err ? strerror(how[i].err) : "-");
    }
  }
  unlink(path);

  /* Through a link into another directory: that directory. */
  snprintf(sub, sizeof sub, "%s/sub", dir);
  snprintf(in_sub, sizeof in_sub, "%s/sub/file", dir);
  snprintf(link, sizeof link, "%s/link", dir);
  CHECK(mkdir(sub, 0700) == 0 && put(in_sub, old_text, sizeof old_text - 1) == 0);
  CHECK(symlink("sub/file", link) == 0);
  {
    begin_case();
    hbm_diag d;
    reset();
    int rc = armed_save(link, data, len, &d);
    CHECK(rc == HBM_OK && holds(in_sub, data, len));
    CHECK_EQ_U64(dir_syncs, 1);
    CHECK(synced_dir_is(sub));
    end_case("save through a link into another directory");
  }
  /* A bare name: the working directory. */
  char cwd[4096];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  if (chdir(sub) == 0) {
    begin_case();
    hbm_diag d;
    reset();
    int rc = armed_save("bare", data, len, &d);
    CHECK(rc == HBM_OK && holds("bare", data, len));
    CHECK_EQ_U64(dir_syncs, 1);
    CHECK(synced_dir_is("."));
    unlink("bare");
    CHECK(chdir(cwd) == 0);
    end_case("save to a bare name");
  } else {
    CHECK(!"chdir into the test's directory");
  }
  unlink(link);
  unlink(in_sub);
  CHECK(rmdir(sub) == 0);
  CHECK(rmdir(dir) == 0);

  /* In place: no directory is synced. */
  {
    begin_case();
    hbm_diag d;
    reset();
    int rc = armed_save("/dev/null", data, len, &d);
    CHECK(rc == HBM_OK);
    CHECK_EQ_U64(dir_syncs, 0);
    end_case("/dev/null");
  }
}

/* Whether path is a symbolic link whose text is to. */
static int is_link_to(const char *path, const char *to) {
  char buf[256];
  ssize_t n = readlink(path, buf, sizeof buf - 1);
  if (n < 0) return 0;
  buf[n] = 0;
  return !strcmp(buf, to);
}

/* One save through a symbolic link whose file cannot be known (realpath
 * failing with err, or the link itself not followable): the error names the
 * link and why, the link stays a link, what it names is untouched, nothing
 * is left beside it. */
static void link_case(const char *dir, const char *link, const char *to, const char *named, int entries,
                      const unsigned char *data, size_t len, int realpath_err, int want_err, int want_rc) {
  begin_case();
  hbm_diag d;
  int fds = open_fds();
  reset();
  if (realpath_err) fail_calls(F_REALPATH, 1, 1, realpath_err);
  int rc = armed_save(link, data, len, &d);
  if (realpath_err) CHECK_EQ_U64(faults[F_REALPATH].injected, 1);
  CHECK(rc == want_rc);
  CHECK(!strcmp(d.file, link));
  CHECK(strstr(d.message, "symbolic link") && strstr(d.message, strerror(want_err)));
  CHECK(is_link_to(link, to));
  if (named) CHECK(holds(named, old_text, sizeof old_text - 1));
  CHECK(test_dir_entries(dir) == entries);
  CHECK(open_fds() == fds);
  CHECK(net_allocs == 0);
  end_case("save through %s -> %s, realpath %s", link, to, realpath_err ? strerror(realpath_err) : "real");
}

static void test_writer_links(const unsigned char *data, size_t len) {
  char dir[] = "/tmp/hbm-test-iofail-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char file[128], link[128], a[128], b[128], dangling[128];
  snprintf(file, sizeof file, "%s/file", dir);
  snprintf(link, sizeof link, "%s/link", dir);
  CHECK(put(file, old_text, sizeof old_text - 1) == 0);
  CHECK(symlink("file", link) == 0);
  /* realpath failing on a link to a file that is there: the link is not
   * replaced by a file of its own (out of memory is said as such) */
  link_case(dir, link, "file", file, 2, data, len, EACCES, EACCES, HBM_EIO);
  link_case(dir, link, "file", file, 2, data, len, ENOMEM, ENOMEM, HBM_EHOSTMEM);
  link_case(dir, link, "file", file, 2, data, len, ENAMETOOLONG, ENAMETOOLONG, HBM_EIO);
  /* links that loop */
  snprintf(a, sizeof a, "%s/a", dir);
  snprintf(b, sizeof b, "%s/b", dir);
  CHECK(symlink("b", a) == 0 && symlink("a", b) == 0);
  link_case(dir, a, "b", NULL, 4, data, len, 0, ELOOP, HBM_EIO);
  /* a link into a directory that may not be searched (root may search it) */
  char locked[128], inside[128], to_inside[128];
  snprintf(locked, sizeof locked, "%s/locked", dir);
  snprintf(inside, sizeof inside, "%s/locked/file", dir);
  snprintf(to_inside, sizeof to_inside, "%s/to-locked", dir);
  CHECK(mkdir(locked, 0700) == 0 && put(inside, old_text, sizeof old_text - 1) == 0);
  CHECK(symlink("locked/file", to_inside) == 0 && chmod(locked, 0600) == 0);
  if (access(inside, F_OK) != 0 && errno == EACCES)
    link_case(dir, to_inside, "locked/file", NULL, 6, data, len, 0, EACCES, HBM_EIO);
  else
    printf("test_io_failure: a directory without search permission is searched here (root): not tried\n");
  CHECK(chmod(locked, 0700) == 0);
  CHECK(holds(inside, old_text, sizeof old_text - 1));
  /* realpath that works: the file the link names is replaced, the link kept */
  {
    begin_case();
    hbm_diag d;
    memset(&d, 0, sizeof d);
    CHECK(hbm_write_file_atomic(link, data, len, &d) == HBM_OK);
    CHECK(is_link_to(link, "file") && holds(file, data, len));
    CHECK(test_dir_entries(dir) == 6);
    end_case("save through %s -> file", link);
  }
  /* A dangling link names nothing yet: it is replaced by the new file, as a
   * path that names nothing is created (trace.h). */
  {
    begin_case();
    snprintf(dangling, sizeof dangling, "%s/dangling", dir);
    CHECK(symlink("nothing", dangling) == 0);
    hbm_diag d;
    memset(&d, 0, sizeof d);
    CHECK(hbm_write_file_atomic(dangling, data, len, &d) == HBM_OK);
    struct stat st;
    CHECK(lstat(dangling, &st) == 0 && S_ISREG(st.st_mode) && holds(dangling, data, len));
    CHECK(test_dir_entries(dir) == 7);
    end_case("save through %s -> nothing", dangling);
  }
  unlink(dangling);
  unlink(inside);
  rmdir(locked);
  unlink(to_inside);
  unlink(a);
  unlink(b);
  unlink(link);
  unlink(file);
  CHECK(rmdir(dir) == 0);
}

/* ---- the reader --------------------------------------------------------------------------- */
#define GROWTH_START 65536 /* trace.h: a buffer of unknown size starts at 64 KiB and doubles */

/* A pipe whose other end a child fills with data[0..len), in seeded pieces:
 * returns the read end (its path is /dev/fd/N), sets *child. */
static int pipe_of(const unsigned char *data, size_t len, uint64_t seed, pid_t *child) {
  int p[2];
  if (pipe(p) != 0) return -1;
  *child = fork();
  if (*child < 0) {
    close(p[0]);
    close(p[1]);
    return -1;
  }
  if (*child == 0) {
    close(p[0]);
    uint64_t s = seed;
    for (size_t at = 0; at < len;) {
      size_t piece = 1 + (size_t)test_rand_below(&s, 100000);
      if (piece > len - at) piece = len - at;
      ssize_t w = write(p[1], data + at, piece);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) _exit(1);
      at += (size_t)w;
    }
    _exit(close(p[1]) == 0 ? 0 : 1);
  }
  close(p[1]);
  return p[0];
}

/* Whether the last read_case handed back every byte, as they were. */
static int read_whole;

/* Reaps the pipe's child. When the reader took every byte, the child wrote
 * them all and must have ended well; else it may still be blocked writing
 * (a reader that left its descriptor open), so it is killed, not awaited. */
static void end_pipe(int rd, pid_t child) {
  close(rd);
  if (!read_whole) kill(child, SIGKILL);
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child);
  if (read_whole) CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* One read of path (its content data[0..len)) with read failing at its nth
 * call count times with err (nth 0: never). max: the limit given the reader.
 * Checks the bytes or the error; returns the reader's code (its diag in *diag if given). */
static int read_case(const char *path, const unsigned char *data, size_t len, uint64_t max, unsigned long nth,
                     unsigned long count, int err, hbm_diag *diag) {
  char *got = (char *)&got; /* a pointer the reader must not replace on failure */
  char *const untouched = got;
  size_t got_len = 12345;
  hbm_diag local, *dp = diag ? diag : &local;
  memset(dp, 0, sizeof *dp);
  int fds = open_fds();
  reset();
  fail_calls(F_READ, nth, count, err);
  armed = 1;
  int rc = hbm_read_file_max(path, max, &got, &got_len, dp);
  armed = 0;
  CHECK_EQ_U64(overreach, 0); /* every read left room for the NUL */
  read_whole = rc == HBM_OK && got_len == len && !memcmp(got, data, len);
  int interrupted = err == EINTR;
  if (nth) CHECK_EQ_U64(faults[F_READ].injected, interrupted ? count : 1); /* an error is not retried */
  if (rc == HBM_OK) {
    CHECK(got != untouched);
    CHECK_EQ_U64(got_len, len);
    CHECK(got_len == len && !memcmp(got, data, len));
    CHECK(got[got_len] == 0);
    CHECK(net_allocs == 1 && mallocs == 1); /* one buffer, handed back */
    free(got);
  } else {
    CHECK(got == untouched && got_len == 12345);
    CHECK(net_allocs == 0);
    CHECK(!strcmp(dp->file, path));
  }
  if (nth && !interrupted) {
    CHECK(rc == HBM_EIO);
    CHECK(strstr(dp->message, "read failed") && strstr(dp->message, strerror(err)));
  }
  CHECK(open_fds() == fds);
  return rc;
}

/* The buffer's steps for a pipe of len bytes and no limit in reach: 64 KiB,
 * doubled each time it fills (all but the byte for the NUL). */
static void check_growth(size_t len) {
  size_t cap = GROWTH_START;
  unsigned steps = 0;
  while (len >= cap - 1) cap *= 2, steps++;
  CHECK_EQ_U64(mallocs, 1);
  CHECK_EQ_U64(reallocs, steps);
  CHECK(nsizes > 0 && sizes[0] == GROWTH_START);
  for (unsigned i = 1; i < nsizes && i < sizeof sizes / sizeof *sizes; i++) CHECK_EQ_U64(sizes[i], 2 * sizes[i - 1]);
}

static void test_reader(const unsigned char *data, size_t big, uint64_t seed) {
  char dir[] = "/tmp/hbm-test-iofail-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[128], pipe_path[64];
  snprintf(path, sizeof path, "%s/in", dir);
  const size_t C = GROWTH_START;
  const size_t lens[] = {0, 1, 2, C - 3, C - 2, C - 1, C, C + 1, 2 * C - 2, 2 * C - 1, 2 * C, 2 * C + 1,
                         4 * C - 1, 4 * C, 8 * C + 12345, big - 1, big};

  /* Regular files: one buffer, whatever the size; pipes: every step. */
  for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
    size_t len = lens[i];
    begin_case();
    CHECK(put(path, data, len) == 0);
    CHECK(read_case(path, data, len, HBM_MAX_INPUT, 0, 0, 0, NULL) == HBM_OK);
    CHECK_EQ_U64(reallocs, 0);
    end_case("a regular file of %zu bytes", len);

    begin_case();
    pid_t child;
    int rd = pipe_of(data, len, seed + i, &child);
    CHECK(rd >= 0);
    if (rd < 0) continue;
    snprintf(pipe_path, sizeof pipe_path, "/dev/fd/%d", rd);
    CHECK(read_case(pipe_path, data, len, HBM_MAX_INPUT, 0, 0, 0, NULL) == HBM_OK);
    check_growth(len);
    end_pipe(rd, child);
    end_case("a pipe of %zu bytes", len);
  }

  /* A /proc file says size 0 and is read as one of unknown size: what it
   * holds (here the kernel's version line) comes back whole, in the first
   * buffer. */
  {
    begin_case();
    static const char proc_path[] = "/proc/version";
    static unsigned char text[1 << 15];
    struct stat st;
    FILE *f = fopen(proc_path, "rb");
    size_t n = f ? fread(text, 1, sizeof text, f) : 0;
    if (f) fclose(f);
    if (f && n > 0 && n < sizeof text && stat(proc_path, &st) == 0 && st.st_size == 0) {
      CHECK(read_case(proc_path, text, n, HBM_MAX_INPUT, 0, 0, 0, NULL) == HBM_OK);
      CHECK_EQ_U64(reallocs, 0);
      CHECK(nsizes == 1 && sizes[0] == GROWTH_START);
    } else {
      printf("test_io_failure: %s is missing or says its size: not tried\n", proc_path);
    }
    end_case("%s", proc_path);
  }

  /* The limit: the buffer never grows past max + 2, and a pipe with more
   * than max bytes is refused at the first byte past it. */
  static const uint64_t maxes[] = {100000, 200000};
  static const size_t extras[] = {0, 1, 5000};
  for (size_t i = 0; i < 2; i++) {
    for (size_t e = 0; e < 3; e++) {
      begin_case();
      size_t extra = extras[e], len = (size_t)maxes[i] + extra;
      pid_t child;
      int rd = pipe_of(data, len, seed + 100 + 3 * i + e, &child);
      CHECK(rd >= 0);
      if (rd < 0) continue;
      snprintf(pipe_path, sizeof pipe_path, "/dev/fd/%d", rd);
      hbm_diag d;
      int rc = read_case(pipe_path, data, len, maxes[i], 0, 0, 0, &d);
      if (!extra) {
        CHECK(rc == HBM_OK);
      } else {
        char want[64];
        snprintf(want, sizeof want, "(stopped after %llu bytes)", (unsigned long long)maxes[i] + 1);
        CHECK(rc == HBM_EPARSE && strstr(d.message, want));
      }
      size_t largest = 0;
      for (unsigned k = 0; k < nsizes && k < sizeof sizes / sizeof *sizes; k++)
        if (sizes[k] > largest) largest = sizes[k];
      CHECK_EQ_U64(largest, maxes[i] + 2);
      end_pipe(rd, child);
      end_case("a pipe of %zu bytes, limit %llu", len, (unsigned long long)maxes[i]);
    }
  }

  /* Interrupted reads are read again; a failed read fails the reader.
   * A regular file takes two reads (the bytes, then the end); a pipe of
   * 3 * C bytes at least four (to C - 1, 2C - 1, 3C, then the end). */
  const size_t small = 3, piped = 3 * C;
  for (unsigned long nth = 1; nth <= 4; nth++) {
    for (int k = 0; k < 4; k++) {
      static const struct {
        int err;
        unsigned long count;
      } how[] = {{EINTR, 1}, {EINTR, 3}, {EIO, 1}, {EIO, 1000}};
      int err = how[k].err;
      unsigned long count = how[k].count;
      if (nth <= 2) {
        begin_case();
        CHECK(put(path, data, small) == 0);
        int rc = read_case(path, data, small, HBM_MAX_INPUT, nth, count, err, NULL);
        CHECK(rc == (err == EINTR ? HBM_OK : HBM_EIO));
        end_case("a regular file of %zu bytes, read %lu failing %lu time(s) with %s", small, nth, count,
                 strerror(err));
      }
      begin_case();
      pid_t child;
      int rd = pipe_of(data, piped, seed + 200 + nth, &child);
      CHECK(rd >= 0);
      if (rd < 0) continue;
      snprintf(pipe_path, sizeof pipe_path, "/dev/fd/%d", rd);
      int rc = read_case(pipe_path, data, piped, HBM_MAX_INPUT, nth, count, err, NULL);
      CHECK(rc == (err == EINTR ? HBM_OK : HBM_EIO));
      end_pipe(rd, child);
      end_case("a pipe of %zu bytes, read %lu failing %lu time(s) with %s", piped, nth, count, strerror(err));
    }
  }

  /* The error a failed fstat or read met is the one said, even when the
   * close that follows fails too and sets errno again. */
  static const int first[] = {F_FSTAT, F_READ};
  for (size_t i = 0; i < sizeof first / sizeof *first; i++) {
    char *got = NULL;
    size_t got_len = 0;
    hbm_diag d;
    int fds = read_begin(path, data, small);
    fail_calls(first[i], 1, 1, EIO);
    fail_calls(F_CLOSE, 1, 1, ENOSPC);
    int rc = armed_read(path, &got, &got_len, &d);
    CHECK_EQ_U64(faults[first[i]].injected, 1);
    CHECK_EQ_U64(faults[F_CLOSE].injected, 1);
    CHECK(rc == HBM_EIO && got == NULL);
    CHECK(!strcmp(d.file, path));
    CHECK(strstr(d.message, first[i] == F_FSTAT ? "cannot stat: " : "read failed: ") != NULL);
    CHECK(strstr(d.message, strerror(EIO)) != NULL);
    CHECK(strstr(d.message, strerror(ENOSPC)) == NULL);
    CHECK(net_allocs == 0);
    CHECK(open_fds() == fds);
    end_case("a regular file, %s failing with %s, then close with %s", fn_name[first[i]], strerror(EIO),
             strerror(ENOSPC));
  }

  /* An open interrupted by a signal (a FIFO's waits for its writer) is
   * asked again; one that fails is HBM_EIO at once. */
  static const struct {
    int err;
    unsigned long count;
  } opens[] = {{EINTR, 1}, {EINTR, 3}, {EACCES, 1}};
  for (size_t i = 0; i < sizeof opens / sizeof *opens; i++) {
    char *got = NULL;
    size_t got_len = 0;
    hbm_diag d;
    int fds = read_begin(path, data, small);
    fail_calls(F_OPEN, 1, opens[i].count, opens[i].err);
    int rc = armed_read(path, &got, &got_len, &d);
    CHECK_EQ_U64(faults[F_OPEN].injected, opens[i].count);
    if (opens[i].err == EINTR) {
      CHECK(rc == HBM_OK && got_len == small && got && !memcmp(got, data, small));
      free(got);
    } else {
      CHECK(rc == HBM_EIO && got == NULL);
      CHECK(!strcmp(d.file, path) && !strncmp(d.message, "cannot open: ", 13));
      CHECK(strstr(d.message, strerror(opens[i].err)) != NULL);
    }
    CHECK(open_fds() == fds);
    end_case("a regular file, open failing %lu time(s) with %s", opens[i].count, strerror(opens[i].err));
  }

  /* The buffer's malloc failing: HBM_EHOSTMEM naming the file and the bytes. */
  {
    char *got = NULL;
    size_t got_len = 0;
    hbm_diag d;
    int fds = read_begin(path, data, small);
    fail_calls(F_MALLOC, 1, 1, ENOMEM);
    int rc = armed_read(path, &got, &got_len, &d);
    char want[64];
    snprintf(want, sizeof want, "out of host memory reading %zu bytes", small + 2);
    CHECK(rc == HBM_EHOSTMEM && got == NULL);
    CHECK(!strcmp(d.file, path) && !strcmp(d.message, want));
    CHECK(net_allocs == 0);
    CHECK(open_fds() == fds);
    end_case("a regular file, malloc failing");
  }
  unlink(path);
  CHECK(rmdir(dir) == 0);
}

int main(void) {
  uint64_t seed = test_seed("test_io_failure");
  signal(SIGPIPE, SIG_IGN); /* a pipe's child whose reader failed early gets EPIPE */
  const size_t big = 5u << 20;
  unsigned char *data = malloc(big);
  CHECK(data != NULL);
  if (!data) return test_done("test_io_failure");
  uint64_t s = seed;
  for (size_t i = 0; i < big; i++) data[i] = (unsigned char)test_rand(&s);
  test_writer(data, 10000);
  test_writer_links(data, 10000);
  test_writer_dir_sync(data, 10000);
  test_reader(data, big, seed);
  free(data);
  return test_done("test_io_failure");
}
