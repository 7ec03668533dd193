/* cli.c: helpers shared by the commands. */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "report/json.h"
#include "trace/gen_llm.h"
#include "trace/trace.h"

void cli_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("hbm: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

void cli_diag(const hbm_diag *d, int err, const char *path) {
  /* A library call that failed without filling the diag still gets a message;
   * a path longer than the diag holds is said whole, from the caller's copy. */
  const char *file = d->file[0] ? d->file : path;
  size_t held = sizeof d->file - 1;
  if (path && strnlen(d->file, sizeof d->file) == held && strlen(path) > held && !strncmp(path, d->file, held)) file = path;
  const char *message = d->message[0] ? d->message : hbm_strerror(err);
  if (!file || !file[0])
    cli_error("%s", message);
  else if (d->line)
    cli_error("%s:%llu: %s", file, (unsigned long long)d->line, message);
  else if (d->offset)
    cli_error("%s: byte %llu: %s", file, (unsigned long long)d->offset, message);
  else
    cli_error("%s: %s", file, message);
}

int cli_exit_code(int err) {
  switch (err) {
    case HBM_OK: return CLI_OK;
    case HBM_EPARSE:
    case HBM_EINVAL:
    case HBM_EIO:
    case HBM_EUNSUPPORTED: return CLI_BAD_INPUT;
    default: return CLI_FAILED;
  }
}

int cli_policy_failed(const char *command, const char *path, const char *policy, int err, int *exit_code) {
  cli_error("%s of %s through %s failed: %s", command, path, policy, hbm_strerror(err));
  *exit_code = cli_exit_code(err) == CLI_BAD_INPUT ? CLI_BAD_INPUT : CLI_FAILED;
  return *exit_code == CLI_BAD_INPUT;
}

int cli_write_failed(const hbm_diag *diag, int err, const char *path) {
  if (diag->message[0]) cli_diag(diag, err, path);
  else cli_error("%s: cannot write: %s", path, hbm_strerror(err));
  return err == HBM_EINVAL ? CLI_BAD_INPUT : CLI_FAILED; /* EINVAL: e.g. the output path is an input */
}

/* `too_large`: what follows "WHAT: 'TEXT' is too large" for a size past
 * 2^64 - 1 bytes (the range the caller takes). */
static int parse_size(const char *what, const char *text, const char *too_large, uint64_t *out) {
  uint64_t v = 0;
  if (hbm_size_parse(text, &v) == HBM_OK && v > 0) {
    *out = v;
    return 1;
  }
  /* Say which part is wrong: a number that reads but lands on zero bytes, a
   * fraction of a byte, a unit hbm does not know, or a size past 2^64. */
  size_t digits = strspn(text, "0123456789");
  size_t number = digits;
  if (digits && text[digits] == '.' && isdigit((unsigned char)text[digits + 1]))
    number += 1 + strspn(text + digits + 1, "0123456789");
  const char *unit = text + number;
  static const char *const units[] = {"", "B", "KiB", "MiB", "GiB", "TiB", "PiB", "KB", "MB", "GB", "TB", "PB"};
  int known = 0;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) known |= !strcmp(unit, units[i]);
  if (!digits || !known)
    cli_error("%s: expected a size like 96GiB, 512MiB or 4.2GB (B/KiB/MiB/GiB/TiB/PiB or KB/MB/GB/TB/PB), "
              "got '%s'", what, text);
  else if (number > digits && (!*unit || !strcmp(unit, "B")))
    cli_error("%s: expected a whole number of bytes, got '%s'", what, text);
  else if (hbm_size_parse(text, &v) == HBM_OK)
    cli_error("%s: expected a size above zero, got '%s'%s", what, text, number > digits ? " (0 bytes once rounded)" : "");
  else
    cli_error("%s: '%s' is too large%s", what, text, too_large);
  return 0;
}

int cli_parse_size(const char *what, const char *text, uint64_t *out) {
  return parse_size(what, text, " (at most 16 EiB, 2^64 - 1 bytes)", out);
}

int cli_parse_capacity(const char *what, const char *text, uint64_t *out) {
  uint64_t v;
  if (!parse_size(what, text, ": expected a device capacity of 2MiB (one page) to 1PiB", &v)) return 0;
  if (v < (2ull << 20) || v > (1ull << 50)) {
    cli_error("%s: expected a device capacity of 2MiB (one page) to 1PiB, got '%s'", what, text);
    return 0;
  }
  /* What the device gives: whole 2 MiB granules, as a sim device opens it, so
   * that every command reports the capacity it replays on (80GB is
   * 79,997,960,192 B), not the figure typed. */
  *out = v / (2ull << 20) * (2ull << 20);
  return 1;
}

int cli_parse_count(const char *opt, const char *text, uint64_t min, uint64_t max, uint64_t *out) {
  uint64_t v = 0;
  int ok = hbm_count_parse(text, &v) == HBM_OK;
  if (!ok || v < min || v > max) {
    if (max < UINT64_MAX)
      cli_error("%s: expected a whole number %llu..%llu, got '%s'", opt, (unsigned long long)min,
                (unsigned long long)max, text);
    else if (min)
      cli_error("%s: expected a whole number of at least %llu, got '%s'", opt, (unsigned long long)min, text);
    else
      cli_error("%s: expected a whole number, got '%s'", opt, text);
    return 0;
  }
  *out = v;
  return 1;
}

void cli_unknown_preset(const char *opt, const char *name) {
  int n = 0;
  const hbm_gen_llm_preset_info *p = hbm_gen_llm_presets(&n);
  char known[512] = "";
  size_t used = 0;
  for (int i = 0; i < n && used < sizeof known; i++) {
    int w = snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "", p[i].name);
    if (w < 0) break;
    used += (size_t)w;
  }
  cli_error("%s: unknown preset '%s' (known: %s; hbm gen llm --list-presets describes them)", opt, name, known);
}

static const struct option *last_opts; /* cli_option_error names the candidates of an ambiguous prefix */

int cli_getopt(int argc, char *const argv[], const char *optstring, const struct option *opts,
               const char *repeatable, cli_seen *seen) {
  last_opts = opts;
  int li = -1, c = getopt_long(argc, argv, optstring, opts, &li);
  if (c == -1 || c == '?' || c == ':') return c;
  int entry = li; /* the option's entry in opts, long or short spelling alike */
  for (int i = 0; entry < 0 && opts[i].name; i++)
    if (!opts[i].flag && opts[i].val == c) entry = i;
  if (entry < 0 || opts[entry].has_arg == no_argument) return c; /* flags may repeat */
  /* getopt takes the next argument as the value whatever it is, so "--impl
   * --reps 3" would read "--reps" as the implementation: a value that starts
   * with "--" and stands on its own is the next option, and this one has no
   * value. ("-1" stays a value; so does "--opt=--x".) */
  if (optarg && optind > 1 && optarg == argv[optind - 1] && !strncmp(optarg, "--", 2)) {
    optind--; /* argv[optind - 1] names the option again, as for getopt's own ':' */
    return ':';
  }
  const char *name = opts[entry].name;
  if (repeatable) { /* a name in the comma-separated list */
    size_t n = strlen(name);
    for (const char *r = strstr(repeatable, name); r; r = strstr(r + 1, name))
      if ((r == repeatable || r[-1] == ',') && (r[n] == ',' || !r[n])) return c;
  }
  const char *value = optarg ? optarg : "";
  for (int i = 0; i < seen->n; i++) {
    if (seen->one[i].c != entry) continue;
    char shown[64];
    if (li >= 0) snprintf(shown, sizeof shown, "--%s", name);
    else snprintf(shown, sizeof shown, "-%c", c);
    cli_error("%s%s%s given twice ('%s', then '%s'): give it once", seen->command ? seen->command : "",
              seen->command ? ": " : "", shown, seen->one[i].value, value);
    return CLI_OPT_TWICE;
  }
  if (seen->n < (int)(sizeof seen->one / sizeof *seen->one)) {
    seen->one[seen->n].c = entry;
    seen->one[seen->n++].value = value;
  }
  return c;
}

int cli_option_error(const char *command, char *const argv[], int c) {
  if (c == CLI_OPT_TWICE) return CLI_BAD_INPUT; /* cli_getopt said why */
  const char *opt = optind > 0 ? argv[optind - 1] : "";
  if (c == ':') {
    cli_error("%s: %s needs a value (try: hbm %s --help)", command, opt, command);
    return CLI_BAD_INPUT;
  }
  /* getopt_long takes a unique prefix (--cap for --capacity) and refuses one
   * that several options share as it refuses an unknown one: say which. */
  char names[256] = "";
  size_t len = strncmp(opt, "--", 2) ? 0 : strcspn(opt + 2, "="), used = 0;
  int matches = 0, exact = 0;
  for (int i = 0; len && last_opts && last_opts[i].name; i++) {
    if (strncmp(last_opts[i].name, opt + 2, len)) continue;
    if (strlen(last_opts[i].name) == len) { /* the whole name: getopt refused its '=value' */
      exact = 1;
      continue;
    }
    int w = snprintf(names + used, sizeof names - used, "%s--%s", matches ? ", " : "", last_opts[i].name);
    if (w > 0 && (size_t)w < sizeof names - used) used += (size_t)w;
    else names[used] = 0; /* no half name */
    matches++;
  }
  if (exact) cli_error("%s: --%.*s takes no value, got '%s' (try: hbm %s --help)", command, (int)len, opt + 2, opt, command);
  else if (matches > 1) cli_error("%s: ambiguous option '%s': %s (try: hbm %s --help)", command, opt, names, command);
  else cli_error("%s: unknown option '%s' (try: hbm %s --help)", command, opt, command);
  return CLI_BAD_INPUT;
}

int cli_parse_snapshot_device(const char *opt, const char *text, int *device) {
  if (*device >= 0) { /* a second one: which would win is a guess */
    cli_error("%s: the snapshot's device is given twice (a second: '%s')", opt, text);
    return 0;
  }
  uint64_t v;
  if (!cli_parse_count(opt, text, 0, 1024, &v)) return 0;
  *device = (int)v;
  return 1;
}

/* The first number on the line of `path` that starts with `key` (the whole
 * file when key is ""), times `unit`; 0 when absent. */
static uint64_t read_number(const char *path, const char *key, uint64_t unit) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[256];
  uint64_t v = 0;
  size_t klen = strlen(key);
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, key, klen)) continue;
    unsigned long long n;
    if (sscanf(line + klen, " %llu", &n) == 1 && n <= UINT64_MAX / unit) v = (uint64_t)n * unit;
    break;
  }
  fclose(f);
  return v;
}

uint64_t cli_host_memory(void) {
  uint64_t avail = read_number("/proc/meminfo", "MemAvailable:", 1024);
  if (!avail) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) avail = (uint64_t)pages * (uint64_t)page;
  }
  /* a container's limit (cgroup v2, else v1) can be far below the machine's */
  static const char *const limits[][2] = {{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
                                          {"/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                           "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
  for (int i = 0; i < 2; i++) {
    uint64_t limit = read_number(limits[i][0], "", 1), used = read_number(limits[i][1], "", 1);
    if (!limit) continue; /* absent, or "max" */
    uint64_t left = limit > used ? limit - used : 0;
    if (!avail || left < avail) avail = left;
    break;
  }
  return avail;
}

int cli_check_host_memory(const char *what, uint64_t need, const char *remedy) {
  uint64_t avail = cli_host_memory();
  if (!avail || need <= avail) return CLI_OK; /* unknown: let the run try */
  char n[32], a[32];
  cli_error("%s needs about %s of host memory, more than the %s available%s%s", what, cli_size(need, n),
            cli_size(avail, a), remedy && remedy[0] ? "; " : "", remedy ? remedy : "");
  return CLI_BAD_INPUT;
}

int cli_check_trace_memory(const char *command, const hbm_gen_llm_config *cfg, uint64_t bytes_per_event) {
  uint64_t first, later;
  hbm_diag d;
  memset(&d, 0, sizeof d);
  if (hbm_gen_llm_count_events(cfg, &first, &later, &d) != HBM_OK) return CLI_OK;
  uint64_t steps = cfg->steps, events = first + (steps - 1) * later, avail = cli_host_memory();
  if (!avail || events * bytes_per_event <= avail) return CLI_OK;
  uint64_t fit = avail / bytes_per_event > first && later ? 1 + (avail / bytes_per_event - first) / later : 0;
  char what[160], remedy[96];
  snprintf(what, sizeof what, "%s: --steps %llu (%llu events, held in memory at %llu bytes each)", command,
           (unsigned long long)steps, (unsigned long long)events, (unsigned long long)bytes_per_event);
  if (fit) snprintf(remedy, sizeof remedy, "give --steps %llu or fewer", (unsigned long long)fit);
  else snprintf(remedy, sizeof remedy, "not even one step fits");
  return cli_check_host_memory(what, events * bytes_per_event, remedy);
}

int cli_is_tty(void) { return isatty(STDERR_FILENO); }

static int progress_shown, progress_pct = -1;
static const char *progress_label;
void cli_progress(const char *label, uint64_t done, uint64_t total) {
  if (!cli_is_tty() || !total) return;
  int pct = (int)(100.0 * (double)done / (double)total);
  if (progress_shown && label == progress_label && pct == progress_pct) return; /* nothing new to show */
  progress_label = label, progress_pct = pct;
  int width = 30, filled = (int)((double)done / (double)total * width);
  char bar[64];
  for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
  bar[width] = 0;
  fprintf(stderr, "\r%-12s [%s] %3d%%", label, bar, pct);
  progress_shown = 1;
}
void cli_progress_fn(uint64_t done, uint64_t total, void *label) { cli_progress(label, done, total); }
void cli_progress_end(void) {
  if (progress_shown) fprintf(stderr, "\r%60s\r", "");
  progress_shown = 0;
  progress_pct = -1;
}

/* 1 for a name of a descriptor: /dev/stdout, /dev/fd/N, /proc/self/fd/N. */
static int names_descriptor(const char *path) {
  if (!strncmp(path, "/dev/std", 8)) return 1;
  if (strncmp(path, "/dev/", 5) && strncmp(path, "/proc/", 6)) return 0;
  const char *slash = strrchr(path, '/');
  return slash - path >= 3 && !strncmp(slash - 3, "/fd", 3);
}

/* The directory an output goes in must be there and take files, before the
 * work: a long replay or plan would otherwise end in "cannot create". Said as
 * writing it would say it. That directory is target's: the path itself, or
 * the file a symbolic link names, beside which the writer makes its
 * temporary file. */
static int check_output_dir(const char *path, const char *target) {
  /* The writer checks a descriptor's name itself: a closed one is no matter of
   * its directory's permissions (a process's fd directory is not writable).
   * Any other path under /dev or /proc is checked as a file's. */
  if (names_descriptor(path)) return CLI_OK;
  const char *slash = strrchr(target, '/');
  char dir[4096];
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == target) snprintf(dir, sizeof dir, "/");
  else if ((size_t)(slash - target) < sizeof dir) snprintf(dir, sizeof dir, "%.*s", (int)(slash - target), target);
  else return CLI_OK; /* a path this long is left to the writer */
  struct stat sd;
  int err = stat(dir, &sd) != 0 ? errno : !S_ISDIR(sd.st_mode) ? ENOTDIR : access(dir, W_OK | X_OK) != 0 ? errno : 0;
  if (!err) return CLI_OK;
  hbm_diag d = {0};
  snprintf(d.file, sizeof d.file, "%s", path);
  snprintf(d.message, sizeof d.message, "cannot create: %s", strerror(err));
  return cli_write_failed(&d, HBM_EIO, path);
}

int cli_check_output(const char *path, const char *const *inputs, int ninputs) {
  struct stat so, si;
  if (stat(path, &so) != 0) {
    int err = errno;
    if (err != ENOENT && lstat(path, &si) == 0 && S_ISLNK(si.st_mode)) { /* said now, as the writer would say it after the work */
      hbm_diag d = {0};
      snprintf(d.file, sizeof d.file, "%s", path);
      snprintf(d.message, sizeof d.message, "cannot follow the symbolic link: %s", strerror(err));
      return cli_write_failed(&d, HBM_EIO, path);
    }
    return check_output_dir(path, path); /* not there yet */
  }
  for (int i = 0; i < ninputs; i++) {
    if (inputs[i] && stat(inputs[i], &si) == 0 && so.st_dev == si.st_dev && so.st_ino == si.st_ino) {
      cli_error("%s: refusing to overwrite an input file; choose another output path", path);
      return CLI_BAD_INPUT;
    }
  }
  if (S_ISDIR(so.st_mode)) { /* said as writing it would say it */
    hbm_diag d = {0};
    snprintf(d.file, sizeof d.file, "%s", path);
    snprintf(d.message, sizeof d.message, "cannot write: %s", strerror(EISDIR));
    return cli_write_failed(&d, HBM_EIO, path);
  }
  /* A regular file is replaced by a temporary one made beside it (beside
   * the file a link names): a directory that takes no new file is said now,
   * not after the work. Anything else is written in place. */
  if (!S_ISREG(so.st_mode)) return CLI_OK;
  char *real = realpath(path, NULL);
  int rc = check_output_dir(path, real ? real : path);
  free(real);
  return rc;
}

int cli_write_output(const char *path, const char *text, size_t len, const char *const *inputs,
                     int ninputs) {
  int rc0 = cli_check_output(path, inputs, ninputs);
  if (rc0 != CLI_OK) return rc0;
  hbm_diag d = {0};
  int rc = hbm_write_file_atomic(path, text, len, &d);
  return rc == HBM_OK ? CLI_OK : cli_write_failed(&d, rc, path);
}

int cli_read_input(const char *path, char **data, size_t *len) {
  hbm_diag diag = {0};
  int rc = hbm_read_file(path, data, len, &diag);
  if (rc == HBM_OK) return CLI_OK;
  cli_diag(&diag, rc, path);
  return cli_exit_code(rc);
}

const char *cli_output_path(const char *opt, const char *arg) {
  if (arg && arg[0]) return arg;
  cli_error("%s: expected a file path, got an empty one", opt);
  return NULL;
}

void cli_summary_after_output(const char *output) {
  struct stat so, s1, s2, sn;
  if (!output || fstat(STDOUT_FILENO, &s1) != 0 || stat(output, &so) != 0) return;
  if (so.st_dev != s1.st_dev || so.st_ino != s1.st_ino) return;
  /* both thrown away: nothing to keep apart, and stderr stays quiet */
  if (stat("/dev/null", &sn) == 0 && sn.st_dev == so.st_dev && sn.st_ino == so.st_ino) return;
  fflush(stdout);
  /* Where stderr is closed, or is the output too, the summary has nowhere
   * to go but into the output: it goes nowhere. */
  int to_stderr = fstat(STDERR_FILENO, &s2) == 0 && !(s2.st_dev == so.st_dev && s2.st_ino == so.st_ino);
  if (to_stderr && dup2(STDERR_FILENO, STDOUT_FILENO) >= 0) return;
  int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null < 0 || dup2(null, STDOUT_FILENO) < 0) close(STDOUT_FILENO); /* then a summary written fails, and says so */
  if (null >= 0 && null != STDOUT_FILENO) close(null);
}

const char *cli_size(uint64_t bytes, char buf[32]) { return hbm_size_format(bytes, buf, 32); }

const char *cli_frag(double ratio, int decimals, char buf[32]) {
  if (ratio >= 1e9) snprintf(buf, 32, "inf");
  else snprintf(buf, 32, "%.*f", decimals, ratio);
  return buf;
}

static int known_policy(const char *name) {
  size_t len = strlen(name);
  for (const char *p = hbm_policy_names(); *p;) {
    const char *c = strchr(p, ',');
    size_t n = c ? (size_t)(c - p) : strlen(p);
    if (n == len && !strncmp(p, name, n)) return 1;
    p += c ? n + 1 : n;
  }
  return 0;
}

int cli_split_policies(const char *list, char names[][32], int max) {
  const char *given = list;
  if (!strcmp(list, "all")) list = hbm_policy_names();
  int n = 0;
  for (const char *p = list;;) { /* every item, the one after a trailing comma included */
    const char *c = strchr(p, ',');
    size_t len = c ? (size_t)(c - p) : strlen(p);
    if (len == 0) {
      cli_error("--policy: an empty name in '%s' (expected a comma-separated list of %s, or all)", given,
                hbm_policy_names());
      return 0;
    }
    if (len >= 32) { /* no policy has so long a name */
      cli_error("--policy: unknown policy '%.*s' (known: %s)", (int)len, p, hbm_policy_names());
      return 0;
    }
    if (n == max) {
      cli_error("--policy: '%s' is too long a list (at most %d of %s, or all)", given, max, hbm_policy_names());
      return 0;
    }
    memcpy(names[n], p, len);
    names[n][len] = 0;
    if (!known_policy(names[n])) {
      cli_error("--policy: unknown policy '%s' (known: %s)", names[n], hbm_policy_names());
      return 0;
    }
    for (int i = 0; i < n; i++)
      if (!strcmp(names[i], names[n])) {
        cli_error("--policy: '%s' given twice in '%s'; each policy runs once", names[n], given);
        return 0;
      }
    n++;
    if (!c) break;
    p = c + 1;
  }
  return n;
}

const char *cli_one_input(const char *command, const char *what, int argc, char **argv,
                          void (*usage)(FILE *)) {
  if (optind == argc - 1) return argv[optind];
  if (optind >= argc) cli_error("%s: expected one %s", command, what);
  else cli_error("%s: expected one input file, got more", command);
  usage(stderr);
  return NULL;
}


/* A known policy name before '=' makes the value that policy's own: no
 * setting of any policy is named like one, and zoned's "key=value" form
 * still reads as settings for all. */
int cli_conf_add(cli_confs *c, const char *arg) {
  const char *eq = strchr(arg, '=');
  size_t len = eq ? (size_t)(eq - arg) : 0;
  char name[32];
  if (eq && len > 0 && len < sizeof name) {
    memcpy(name, arg, len);
    name[len] = 0;
    if (known_policy(name)) {
      for (int i = 0; i < c->n; i++)
        if (!strcmp(c->one[i].policy, name)) {
          cli_error("--alloc-conf: settings for %s given twice", name);
          return 0;
        }
      if (c->n == (int)(sizeof c->one / sizeof c->one[0])) {
        cli_error("--alloc-conf: at most %d policies with their own settings", c->n);
        return 0;
      }
      snprintf(c->one[c->n].policy, sizeof c->one[c->n].policy, "%s", name);
      c->one[c->n++].conf = eq + 1;
      return 1;
    }
  }
  if (c->all) {
    cli_error("--alloc-conf: settings for every policy given twice ('%s' and '%s'); "
              "use POLICY=SETTINGS for one policy", c->all, arg);
    return 0;
  }
  c->all = arg;
  return 1;
}

const char *cli_conf_for(const cli_confs *c, const char *policy) {
  for (int i = 0; i < c->n; i++)
    if (!strcmp(c->one[i].policy, policy)) return c->one[i].conf;
  return c->all;
}

void cli_print_settings(const char *conf) {
  if (conf) printf("%-11s   settings: %s\n", "", conf);
}

void cli_json_efficiency(hbm_json *j, const hbm_replay_result *r) {
  hbm_json_key(j, "efficiency");
  if (r->peak_reserved) hbm_json_double(j, r->efficiency);
  else hbm_json_null(j);
}

void cli_json_oom(hbm_json *j, const hbm_replay_result *r) {
  hbm_json_key(j, "oom");
  if (!r->oom) {
    hbm_json_null(j);
    return;
  }
  hbm_json_object_begin(j);
  hbm_json_kv_u64(j, "event", r->first_oom.event);
  hbm_json_kv_u64(j, "step", r->first_oom.step);
  hbm_json_kv_u64(j, "request", r->first_oom.request);
  hbm_json_kv_u64(j, "free_total", r->first_oom.free_total);
  hbm_json_kv_u64(j, "largest_free", r->first_oom.largest_free);
  hbm_json_key(j, "fragmentation"); /* none where no request failed: the start did not fit */
  if (r->first_oom.cause == HBM_CAUSE_START) hbm_json_null(j);
  else hbm_json_double(j, hbm_fragmentation_ratio(r->first_oom.free_total, r->first_oom.largest_free));
  hbm_json_kv_u64(j, "allocated", r->first_oom.allocated);
  hbm_json_kv_u64(j, "limit", r->first_oom.limit);
  hbm_json_kv_string(j, "cause", hbm_oom_cause_name(r->first_oom.cause));
  hbm_json_key(j, "refused_too"); /* the recorded allocator refused this request too */
  hbm_json_bool(j, r->first_oom.refused);
  hbm_json_object_end(j);
}

int cli_json_policy_begin(hbm_json *j, const char *policy, const char *conf, int error) {
  hbm_json_object_begin(j);
  hbm_json_kv_string(j, "policy", policy);
  hbm_json_key(j, "alloc_conf");
  if (conf) hbm_json_string(j, conf); else hbm_json_null(j);
  hbm_json_key(j, "error");
  if (error == HBM_OK) {
    hbm_json_null(j);
    return 0;
  }
  hbm_json_string(j, hbm_strerror(error)); /* no figures: the policy could not go on */
  hbm_json_object_end(j);
  return 1;
}

void cli_library_error(int err, const char *message, void *arg) {
  (void)arg;
  cli_error("%s", message && message[0] ? message : hbm_strerror(err));
}

/* The first error the library reports while a policy is created. */
typedef struct held_error {
  char message[512];
} held_error;
static void hold_error(int err, const char *message, void *arg) {
  held_error *h = arg;
  if (!h->message[0]) snprintf(h->message, sizeof h->message, "%s", message && message[0] ? message : hbm_strerror(err));
}

/* What the library says that is no error: settings a policy does not read
 * here. Said while the policies are tried, so once per run, however many
 * heaps the run then makes. */
static void print_note(const char *message, void *arg) {
  (void)arg;
  fprintf(stderr, "hbm: note: %s\n", message);
}

int cli_check_policies(const char *device, char names[][32], int n, const cli_confs *confs,
                       hbm_device_caps *caps) {
  for (int i = 0; i < confs->n; i++) {
    int run = 0;
    for (int k = 0; k < n; k++) run |= !strcmp(names[k], confs->one[i].policy);
    if (!run) {
      char ran[16 * 33] = "";
      for (int k = 0; k < n; k++) snprintf(ran + strlen(ran), sizeof ran - strlen(ran), "%s%s", k ? "," : "", names[k]);
      cli_error("--alloc-conf: settings for %s, which this run does not use (it runs %s)", confs->one[i].policy, ran);
      return CLI_BAD_INPUT;
    }
  }
  /* A policy's own settings replace the common ones, not add to them: common
   * settings that every policy of the run replaces would go nowhere, unread. */
  int common_used = 0;
  for (int k = 0; k < n; k++) common_used |= cli_conf_for(confs, names[k]) == confs->all;
  if (confs->all && !common_used) {
    cli_error("--alloc-conf '%s' would go to no policy: each one this run uses has its own (POLICY=SETTINGS), "
              "which replace the common settings; give a policy all of its settings in one POLICY=SETTINGS",
              confs->all);
    return CLI_BAD_INPUT;
  }
  hbm_device *dev = NULL;
  int rc = hbm_device_open(device ? device : "sim:96GiB", &dev);
  if (rc != HBM_OK) return cli_exit_code(rc);
  if (caps) hbm_device_get_caps(dev, caps);
  for (int i = 0; i < n && rc == HBM_OK; i++) {
    hbm_heap *heap = NULL;
    /* The policy's own words are held, not printed: where the settings went
     * to every policy they are said once, in one line, with why. */
    held_error held = {0};
    hbm_set_error_handler(hold_error, &held);
    hbm_set_output_handler(print_note, NULL);
    rc = hbm_heap_create(dev, names[i], cli_conf_for(confs, names[i]), &heap);
    hbm_set_output_handler(NULL, NULL);
    hbm_set_error_handler(cli_library_error, NULL);
    if (heap) hbm_heap_destroy(heap);
    int to_all = rc == HBM_EINVAL && confs->all && !strcmp(cli_conf_for(confs, names[i]), confs->all);
    size_t len = to_all ? strcspn(confs->all, "=:,") : 0;
    if (to_all && confs->all[len] == '=' && len > 0) /* a mistyped POLICY=: what the policy said misleads */
      cli_error("--alloc-conf '%s': '%.*s' is not a policy (known: %s); POLICY=SETTINGS gives settings to one",
                confs->all, (int)len, confs->all, hbm_policy_names());
    else if (to_all && n > 1) {
      if (!held.message[0]) /* the policy gave no words of its own */
        snprintf(held.message, sizeof held.message, "policy %s: %s", names[i], hbm_strerror(rc));
      cli_error("--alloc-conf '%s' went to every policy%s; %s; POLICY=SETTINGS gives settings to one", confs->all,
                confs->n ? " without settings of its own" : "", held.message);
    }
    else if (held.message[0])
      cli_error("%s", held.message);
  }
  hbm_device_close(dev);
  return rc == HBM_OK ? CLI_OK : cli_exit_code(rc);
}

void cli_note_private_pools(const char *path, const hbm_trace *t) {
  uint64_t bytes;
  uint32_t n = hbm_trace_private_pools(t, &bytes);
  char b[32];
  if (n)
    fprintf(stderr, "hbm: %s: note: %u segment%s (%s) %s in private memory pools (CUDA graphs, torch.cuda.MemPool) when "
            "the snapshot was taken; hbm keeps no private pools, so a replay places their blocks as the default "
            "pool's and may differ from the run there\n", path, n, n == 1 ? "" : "s", cli_size(bytes, b),
            n == 1 ? "was" : "were");
}

int cli_load_trace(const char *path, int device, hbm_trace **out) {
  hbm_diag diag = {0};
  int rc = hbm_trace_load_device(path, device, out, &diag);
  if (rc == HBM_OK) {
    cli_note_private_pools(path, *out);
    return CLI_OK;
  }
  cli_diag(&diag, rc, path);
  return cli_exit_code(rc);
}

int cli_print_json(const char *command, hbm_json *j) {
  int code = CLI_OK;
  if (j->failed == HBM_JSON_TOO_DEEP) {
    cli_error("%s: the report nests deeper than the JSON writer's 63 levels", command);
    code = CLI_FAILED;
  } else if (j->failed || !j->buf) {
    cli_error("%s: out of memory formatting the report", command);
    code = CLI_FAILED;
  } else {
    printf("%s\n", j->buf);
  }
  hbm_json_release(j);
  return code;
}

static volatile sig_atomic_t broken_pipe;
static void on_sigpipe(int sig) {
  (void)sig;
  broken_pipe = 1; /* the write itself fails with EPIPE */
}

void cli_catch_sigpipe(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigpipe;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGPIPE, &sa, NULL);
}

int cli_finish_stdout(int code) {
  errno = 0;
  if (fflush(stdout) != 0 || ferror(stdout)) { /* an earlier write may have failed, errno long gone */
    if (!errno && broken_pipe) errno = EPIPE;
    cli_error("writing to standard output: %s", errno ? strerror(errno) : "a write failed");
    return code ? code : CLI_FAILED;
  }
  return code;
}
