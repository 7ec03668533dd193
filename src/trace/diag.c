/* diag.c: where bad input was found, and whole-file I/O that never loses data. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"
#include "trace/trace.h"

/* The longest suffix a temporary file name gets: ".tmp." and two 20-digit numbers. */
#define TMP_SUFFIX_MAX (5 + 20 + 1 + 20)

/* Messages quote the input, and the CLI prints them to a terminal: a
 * control byte (an escape sequence, a bell, a carriage return that hides
 * what came before) is shown as '?'. So are the C1 controls (U+0080 to
 * U+009F: CSI is one) and bytes that are no UTF-8, which an 8-bit terminal
 * reads as C1 controls. Other UTF-8 is kept. No message has one of its own. */
static void shown_safe(char *message) {
  unsigned char *c = (unsigned char *)message;
  while (*c) {
    if (*c < 0x80) {
      if (*c < 0x20 || *c == 0x7f) *c = '?';
      c++;
      continue;
    }
    int n = hbm_utf8_len(c); /* 0: no UTF-8 (a NUL ends the sequence) */
    if (n == 0 || (c[0] == 0xc2 && c[1] < 0xa0)) *c++ = '?'; /* or a C1 control: its bytes one by one */
    else c += n;
  }
}

int hbm_diag_set(hbm_diag *diag, const char *file, uint64_t line, uint64_t offset,
                 const char *fmt, ...) {
  if (!diag) return HBM_EPARSE;
  snprintf(diag->file, sizeof diag->file, "%s", file ? file : "<input>");
  diag->line = line;
  diag->offset = offset;
  va_list ap;
  va_start(ap, fmt);
  hbm_vsnprintf(diag->message, sizeof diag->message, fmt, ap);
  va_end(ap);
  shown_safe(diag->message);
  return HBM_EPARSE;
}

static int io_error_said(hbm_diag *diag, const char *path, const char *what, const char *why) {
  if (diag) {
    snprintf(diag->file, sizeof diag->file, "%s", path);
    diag->line = 0;
    diag->offset = 0;
    snprintf(diag->message, sizeof diag->message, "%s: %s", what, why);
  }
  return HBM_EIO;
}

static int io_error(hbm_diag *diag, const char *path, const char *what) {
  return io_error_said(diag, path, what, strerror(errno));
}

/* Host memory ran out: still say which file, for what and how much, so no
 * caller is left with an empty message. */
static int out_of_memory(hbm_diag *diag, const char *path, const char *doing, uint64_t bytes) {
  if (diag) {
    snprintf(diag->file, sizeof diag->file, "%s", path);
    diag->line = 0;
    diag->offset = 0;
    snprintf(diag->message, sizeof diag->message, "out of host memory %s %llu bytes", doing,
             (unsigned long long)bytes);
  }
  return HBM_EHOSTMEM;
}

static int too_large(hbm_diag *diag, const char *path, uint64_t bytes, int whole, uint64_t max) {
  char m[32];
  hbm_size_format(max, m, sizeof m);
  if (whole)
    return hbm_diag_set(diag, path, 0, 0, "%llu bytes, more than the %s the reader takes",
                        (unsigned long long)bytes, m);
  return hbm_diag_set(diag, path, 0, 0, "more than the %s the reader takes (stopped after %llu bytes)", m,
                      (unsigned long long)bytes);
}

/* open, asked again when a signal interrupts it: opening a FIFO waits for
 * the other end, and a handler installed without SA_RESTART ends that wait
 * with EINTR. */
static int open_again(const char *path, int flags, mode_t mode) {
  int fd;
  do fd = open(path, flags, mode);
  while (fd < 0 && errno == EINTR);
  return fd;
}

int hbm_read_file(const char *path, char **data, size_t *len, hbm_diag *diag) {
  return hbm_read_file_max(path, HBM_MAX_INPUT, data, len, diag);
}

int hbm_read_file_max(const char *path, uint64_t max, char **data, size_t *len, hbm_diag *diag) {
  if (!path[0]) /* else the message names no file at all */
    return hbm_diag_set(diag, path, 0, 0, "expected a file path, got an empty one");
  int fd = open_again(path, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return io_error(diag, path, "cannot open");
  struct stat st;
  if (fstat(fd, &st) != 0) { /* the message first: close may set errno */
    int rc = io_error(diag, path, "cannot stat");
    close(fd);
    return rc;
  }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    errno = EISDIR;
    return io_error(diag, path, "cannot read");
  }
  if (max > SIZE_MAX - 2) max = SIZE_MAX - 2;
  /* A regular file says its size: refuse it before reading a byte. */
  if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > max) {
    close(fd);
    return too_large(diag, path, (uint64_t)st.st_size, 1, max);
  }
  /* Room for the whole file, the NUL and one byte more, so the read that
   * finds the end needs no second buffer. A pipe or device grows one. */
  size_t cap = st.st_size > 0 ? (size_t)st.st_size + 2 : 65536, n = 0;
  char *buf = malloc(cap);
  if (!buf) { close(fd); return out_of_memory(diag, path, "reading", cap); }
  for (;;) {
    if (n + 1 >= cap) {
      /* Never more than max + 2: one byte past max tells an input that is too long. */
      size_t grown = cap > (max + 2) / 2 ? max + 2 : cap * 2;
      char *b = realloc(buf, grown);
      if (!b) { free(buf); close(fd); return out_of_memory(diag, path, "reading", grown); }
      buf = b;
      cap = grown;
    }
    ssize_t r = read(fd, buf + n, cap - n - 1);
    if (r < 0) {
      if (errno == EINTR) continue;
      int rc = io_error(diag, path, "read failed"); /* before close can change errno */
      free(buf);
      close(fd);
      return rc;
    }
    if (r == 0) break;
    n += (size_t)r;
    if (n > max) { /* a pipe, a device, or a file that grew while read */
      free(buf);
      close(fd);
      return too_large(diag, path, n, 0, max);
    }
  }
  close(fd);
  buf[n] = 0;
  *data = buf;
  *len = n;
  return HBM_OK;
}

/* All of data to fd: 0; -1 with errno set; or 1 where a write took no byte
 * of what was left (asked again, it would loop for ever). */
static int write_all(int fd, const void *data, size_t len) {
  const char *p = data;
  for (size_t left = len; left;) {
    ssize_t w = write(fd, p, left);
    if (w == 0) return 1;
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) { /* a non-blocking stream a parent left us: wait for room */
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        if (poll(&pfd, 1, -1) >= 0 || errno == EINTR) continue;
      }
      return -1;
    }
    p += w;
    left -= (size_t)w;
  }
  return 0;
}

/* write_all's failure, said. */
static int write_error(hbm_diag *diag, const char *path, int how) {
  return how > 0 ? io_error_said(diag, path, "write failed", "wrote 0 bytes (no error given)")
                 : io_error(diag, path, "write failed");
}

/* Writes into what is already there, for a path that is not a regular file:
 * a device (/dev/null, /dev/stdout) or a FIFO, which a rename would replace. */
static int write_in_place(const char *path, const void *data, size_t len, hbm_diag *diag) {
  int fd = open_again(path, O_WRONLY | O_CLOEXEC, 0);
  if (fd < 0) return io_error(diag, path, "cannot open for writing");
  int how = write_all(fd, data, len);
  if (how != 0) {
    int rc = write_error(diag, path, how);
    close(fd);
    return rc;
  }
  return close(fd) == 0 ? HBM_OK : io_error(diag, path, "write failed (at close)");
}

/* The standard stream (stdout, stderr, then stdin) that is the very file a
 * path names (/dev/stdout, /proc/self/fd/1, or the file's own name), or -1.
 * Opening it anew would start at its first byte, or replace it, losing what
 * `>>` or the commands before wrote there; writing to the descriptor goes on
 * where they left off. Standard input counts only as a regular file: it is
 * open for reading, so the write fails and the file is kept; a device it
 * shares (/dev/null, a terminal) is opened for writing as any other. */
static int standard_stream(const struct stat *st) {
  static const int order[] = {STDOUT_FILENO, STDERR_FILENO, STDIN_FILENO};
  for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
    struct stat s;
    if (order[i] == STDIN_FILENO && !S_ISREG(st->st_mode)) break;
    if (fstat(order[i], &s) == 0 && s.st_dev == st->st_dev && s.st_ino == st->st_ino) return order[i];
  }
  return -1;
}

/* A path that names a descriptor by number: where it is missing, the
 * descriptor is closed, and the path is no file to create. */
static int names_descriptor(const char *path) {
  static const char *const prefixes[] = {"/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/"};
  if (!strcmp(path, "/dev/stdin") || !strcmp(path, "/dev/stdout") || !strcmp(path, "/dev/stderr")) return 1;
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
    if (!strncmp(path, prefixes[i], strlen(prefixes[i]))) return 1;
  return 0;
}

/* Errors that say a directory cannot be synced here at all (no permission
 * to open it, a file system without fsync for directories): no failure, as
 * for the file's own fsync. */
static int cannot_sync_dir(int err) {
  return err == EACCES || err == EPERM || err == EINVAL || err == EBADF || err == EROFS || err == ENOTSUP ||
         err == EOPNOTSUPP;
}

/* A rename lives in the directory: only its fsync makes the new name survive
 * a crash. By then the file is replaced, so a failure says the bytes are
 * written and what is not yet sure. dir: room for target's length + 2. */
static int sync_dir(const char *target, char *dir, const char *path, hbm_diag *diag) {
  const char *slash = strrchr(target, '/');
  if (!slash) {
    strcpy(dir, ".");
  } else {
    size_t n = slash == target ? 1 : (size_t)(slash - target); /* "/name": the root */
    memcpy(dir, target, n);
    dir[n] = 0;
  }
  int fd = open_again(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  int err = fd < 0 ? errno : fsync(fd) != 0 ? errno : 0;
  if (fd >= 0) close(fd); /* read-only: its close has nothing to report */
  if (!err || cannot_sync_dir(err)) return HBM_OK;
  errno = err;
  return io_error(diag, path, "written, but the directory could not be synced");
}

int hbm_write_file_atomic(const char *path, const void *data, size_t len, hbm_diag *diag) {
  if (!path || !path[0]) {
    if (diag) {
      memset(diag, 0, sizeof *diag);
      snprintf(diag->file, sizeof diag->file, "%s", "<output>");
      snprintf(diag->message, sizeof diag->message, "an empty path: expected a file name");
    }
    return HBM_EINVAL;
  }
  /* Atomic means a temporary file renamed over the path: right for a regular
   * file (through a symbolic link, the file it names), wrong for anything
   * else a path can name. */
  struct stat st, lst;
  char *resolved = NULL;
  const char *target = path;
  int replacing = 0; /* a new file gets 0644 less the umask; a replaced one keeps its mode */
  int stat_err = stat(path, &st) == 0 ? 0 : errno;
  if (!stat_err) {
    replacing = 1;
    if (S_ISDIR(st.st_mode)) {
      errno = EISDIR;
      return io_error(diag, path, "cannot write");
    }
    int stream = standard_stream(&st);
    if (stream >= 0) {
      int how = write_all(stream, data, len);
      return how == 0 ? HBM_OK : write_error(diag, path, how);
    }
    if (!S_ISREG(st.st_mode)) return write_in_place(path, data, len, diag);
    if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
      /* Renamed over, the link itself would become a file of its own. */
      if (!(resolved = realpath(path, NULL))) {
        int rc = errno == ENOMEM ? HBM_EHOSTMEM : HBM_EIO;
        io_error(diag, path, "cannot resolve the symbolic link");
        return rc;
      }
      target = resolved;
    }
  } else if (names_descriptor(path)) {
    errno = EBADF;
    return io_error(diag, path, "cannot write (the descriptor is not open)");
  } else if (stat_err != ENOENT && lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
    /* A link that loops, or leads where we may not look: the file it names
     * may well exist, and must not lose its link to a new file. A dangling
     * link (ENOENT) names nothing yet: it is replaced, as a missing path is
     * created. */
    errno = stat_err;
    return io_error(diag, path, "cannot follow the symbolic link");
  }
  size_t plen = strlen(target);
  char *tmp = malloc(plen + 64);
  if (!tmp) {
    free(resolved);
    return out_of_memory(diag, path, "for a temporary file name of", plen + 64);
  }
  /* A name of its own, created exclusively: two writers (threads of one
   * process too) never share a temporary file, and a file or a symbolic link
   * already at that name is neither followed nor truncated. */
  static atomic_ulong serial;
  int rc = HBM_OK, fd = -1;
  /* Beside the target, so that the rename stays in one directory; its name
   * cut where the suffix would take it past NAME_MAX (a name of 240 bytes is
   * a file one may write: its temporary one must be too). */
  const char *slash = strrchr(target, '/');
  size_t dir_len = slash ? (size_t)(slash + 1 - target) : 0, base_len = plen - dir_len;
  if (base_len > NAME_MAX - TMP_SUFFIX_MAX) base_len = NAME_MAX - TMP_SUFFIX_MAX;
  for (int tries = 0; fd < 0 && tries < 100; tries++) {
    snprintf(tmp, plen + 64, "%.*s.tmp.%ld.%lu", (int)(dir_len + base_len), target, (long)getpid(),
             (unsigned long)atomic_fetch_add(&serial, 1));
    fd = open_again(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    rc = io_error(diag, path, "cannot create");
    goto out;
  }
  if (replacing && fchmod(fd, st.st_mode & 07777) != 0) rc = io_error(diag, path, "cannot keep the mode of");
  int how = rc == HBM_OK ? write_all(fd, data, len) : 0; /* after a failure, its message stands */
  if (how != 0) rc = write_error(diag, path, how);
  if (rc == HBM_OK && fsync(fd) != 0 && errno != EINVAL) rc = io_error(diag, path, "fsync failed");
  /* NFS and quotas report a write that did not land at close: a write error. */
  if (close(fd) != 0 && rc == HBM_OK) rc = io_error(diag, path, "write failed (at close)");
  if (rc == HBM_OK && rename(tmp, target) != 0) rc = io_error(diag, path, "cannot replace");
  if (rc != HBM_OK) unlink(tmp);
  else rc = sync_dir(target, tmp, path, diag);
out:
  free(tmp);
  free(resolved);
  return rc;
}
