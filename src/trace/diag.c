/* diag.c: where bad input was found, and whole-file I/O that never loses data. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
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

int hbm_read_file(const char *path, char **data, size_t *len, hbm_diag *diag) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(diag, path, "cannot open");
  struct stat st;
  if (fstat(fd, &st) != 0) { close(fd); return io_error(diag, path, "cannot stat"); }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    errno = EISDIR;
    return io_error(diag, path, "cannot read");
  }
  size_t cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 65536, n = 0;
  char *buf = malloc(cap);
  if (!buf) { close(fd); return HBM_EHOSTMEM; }
  for (;;) {
    if (n + 1 >= cap) {
      char *b = realloc(buf, cap * 2);
      if (!b) { free(buf); close(fd); return HBM_EHOSTMEM; }
      buf = b;
      cap *= 2;
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
