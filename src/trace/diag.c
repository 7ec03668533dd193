/* diag.c: where bad input was found, and whole-file I/O that never loses data. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trace/trace.h"

int hbm_diag_set(hbm_diag *diag, const char *file, uint64_t line, uint64_t offset,
                 const char *fmt, ...) {
  if (!diag) return HBM_EPARSE;
  snprintf(diag->file, sizeof diag->file, "%s", file ? file : "<input>");
  diag->line = line;
  diag->offset = offset;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(diag->message, sizeof diag->message, fmt, ap);
  va_end(ap);
  return HBM_EPARSE;
}

static int io_error(hbm_diag *diag, const char *path, const char *what) {
  if (diag) {
    snprintf(diag->file, sizeof diag->file, "%s", path);
    diag->line = 0;
    diag->offset = 0;
    snprintf(diag->message, sizeof diag->message, "%s: %s", what, strerror(errno));
  }
  return HBM_EIO;
}

/* Host memory ran out: still say which file and how much, so no caller is
 * left with an empty message. */
static int out_of_memory(hbm_diag *diag, const char *path, uint64_t bytes) {
  if (diag) {
    snprintf(diag->file, sizeof diag->file, "%s", path);
    diag->line = 0;
    diag->offset = 0;
    snprintf(diag->message, sizeof diag->message, "out of host memory reading %llu bytes",
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

int hbm_read_file(const char *path, char **data, size_t *len, hbm_diag *diag) {
  return hbm_read_file_max(path, HBM_MAX_INPUT, data, len, diag);
}

int hbm_read_file_max(const char *path, uint64_t max, char **data, size_t *len, hbm_diag *diag) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(diag, path, "cannot open");
  struct stat st;
  if (fstat(fd, &st) != 0) { close(fd); return io_error(diag, path, "cannot stat"); }
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
  if (!buf) { close(fd); return out_of_memory(diag, path, cap); }
  for (;;) {
    if (n + 1 >= cap) {
      /* Never more than max + 2: one byte past max tells an input that is too long. */
      size_t grown = cap > (max + 2) / 2 ? max + 2 : cap * 2;
      char *b = realloc(buf, grown);
      if (!b) { free(buf); close(fd); return out_of_memory(diag, path, grown); }
      buf = b;
      cap = grown;
    }
    ssize_t r = read(fd, buf + n, cap - n - 1);
    if (r < 0) {
      if (errno == EINTR) continue;
      free(buf);
      close(fd);
      return io_error(diag, path, "read failed");
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

int hbm_write_file_atomic(const char *path, const void *data, size_t len, hbm_diag *diag) {
  size_t plen = strlen(path);
  char *tmp = malloc(plen + 32);
  if (!tmp) return HBM_EHOSTMEM;
  snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) { int rc = io_error(diag, path, "cannot create"); free(tmp); return rc; }
  const char *p = data;
  size_t left = len;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      int rc = io_error(diag, path, "write failed");
      close(fd);
      unlink(tmp);
      free(tmp);
      return rc;
    }
    p += w;
    left -= (size_t)w;
  }
  if (fsync(fd) != 0 && errno != EINVAL) {
    int rc = io_error(diag, path, "fsync failed");
    close(fd); unlink(tmp); free(tmp);
    return rc;
  }
  if (close(fd) != 0 || rename(tmp, path) != 0) {
    int rc = io_error(diag, path, "cannot replace");
    unlink(tmp);
    free(tmp);
    return rc;
  }
  free(tmp);
  return HBM_OK;
}
