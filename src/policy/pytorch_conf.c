/* pytorch_conf.c: PYTORCH_CUDA_ALLOC_CONF as PyTorch reads it, and the two
 * size functions that depend on it (round_size, get_allocation_size).
 *
 * The lexer and the per-key rules follow c10/core/AllocatorConfig.cpp and
 * c10/cuda/CUDAAllocatorConfig.cpp (PyTorch 2.9): the text splits into tokens
 * at ',' ':' '[' ']' (each a token of its own), spaces are dropped, and every
 * key is followed by ':' and its value, items separated by ','. Where
 * PyTorch's stoi/stod would accept a number followed by junk ("128x"), we
 * refuse it: a setting that means something else than it says is a bug. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "policy/pytorch_alloc.h"

#define MB (1ull << 20)

void hbm_pt_conf_default(hbm_pt_conf *conf, int expandable) {
  memset(conf, 0, sizeof *conf);
  conf->max_split_size = UINT64_MAX;
  conf->max_non_split_rounding = HBM_PT_LARGE_BUFFER;
  conf->gc_threshold = 0.0;
  conf->expandable = expandable ? 1 : 0;
  conf->set_fraction = 0;
  conf->memory_fraction = 1.0;
}

/* ---- lexer ---- */
typedef struct token {
  char text[64];
  size_t offset;
} token;

typedef struct parser {
  const char *src;
  token *tok;
  size_t n;
  hbm_diag *diag;
} parser;

static int fail(parser *ps, size_t i, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(parser *ps, size_t i, const char *fmt, ...) {
  if (ps->diag) {
    memset(ps->diag, 0, sizeof *ps->diag);
    snprintf(ps->diag->file, sizeof ps->diag->file, "alloc-conf");
    ps->diag->offset = i < ps->n ? ps->tok[i].offset : strlen(ps->src);
    va_list ap;
    va_start(ap, fmt);
    hbm_vsnprintf(ps->diag->message, sizeof ps->diag->message, fmt, ap);
    va_end(ap);
  }
  return HBM_EINVAL;
}

static int lex(parser *ps) {
  size_t len = strlen(ps->src);
  ps->tok = calloc(len + 1, sizeof *ps->tok);
  if (!ps->tok) return HBM_EHOSTMEM;
  size_t blen = 0, bstart = 0;
  for (size_t i = 0; i <= len; i++) {
    char c = ps->src[i];
    int sep = c == ',' || c == ':' || c == '[' || c == ']';
    if (sep || c == '\0') {
      if (blen) {
        ps->tok[ps->n].offset = bstart;
        ps->n++;
        blen = 0;
      }
      if (sep) {
        ps->tok[ps->n].text[0] = c;
        ps->tok[ps->n].offset = i;
        ps->n++;
      }
    } else if (c != ' ') {
      if (!blen) bstart = i;
      if (blen + 1 >= sizeof ps->tok[0].text) {
        ps->n++; /* so the message points here */
        return fail(ps, ps->n - 1, "setting starting at byte %zu is too long", bstart);
      }
      ps->tok[ps->n].text[blen++] = c;
      ps->tok[ps->n].text[blen] = '\0';
    }
  }
  return HBM_OK;
}

static int is(const parser *ps, size_t i, const char *s) { return i < ps->n && !strcmp(ps->tok[i].text, s); }

/* consumeToken: the token at i must be c. */
static int expect(parser *ps, size_t i, char c) {
  char s[2] = {c, 0};
  if (!is(ps, i, s))
    return fail(ps, i, "Error parsing CachingAllocator::AllocatorConfig settings, expected %c", c);
  return HBM_OK;
}

static int parse_u64(parser *ps, size_t i, const char *what, uint64_t *out) {
  if (i >= ps->n) return fail(ps, i, "Error, expecting %s value", what);
  const char *t = ps->tok[i].text;
  if (!*t || strspn(t, "0123456789") != strlen(t))
    return fail(ps, i, "%s: expected a non-negative integer, got '%s'", what, t);
  errno = 0;
  unsigned long long v = strtoull(t, NULL, 10);
  if (errno) return fail(ps, i, "%s: '%s' is out of range", what, t);
  *out = v;
  return HBM_OK;
}

static int parse_double(parser *ps, size_t i, const char *what, double *out) {
  if (i >= ps->n) return fail(ps, i, "Error, expecting %s value", what);
  const char *t = ps->tok[i].text;
  char *end = NULL;
  errno = 0;
  double v = hbm_strtod(t, &end);
  if (!*t || *end || errno || !isfinite(v))
    return fail(ps, i, "%s: expected a number, got '%s'", what, t);
  *out = v;
  return HBM_OK;
}

static int parse_bool(parser *ps, size_t i, const char *what, int *out) {
  if (is(ps, i, "True")) *out = 1;
  else if (is(ps, i, "False")) *out = 0;
  else return fail(ps, i, "Expected a single True/False argument for %s", what);
  return HBM_OK;
}

static int pow2(uint64_t v) { return v && !(v & (v - 1)); }
static unsigned log2_floor(uint64_t v) { return 63u - (unsigned)__builtin_clzll(v); }

/* max_split_size_mb and max_non_split_rounding_mb: >= kLargeBuffer / kMB. */
static int parse_mb(parser *ps, size_t *i, const char *what, uint64_t *bytes) {
  int rc;
  uint64_t v;
  if ((rc = expect(ps, ++*i, ':')) || (rc = parse_u64(ps, ++*i, what, &v))) return rc;
  if (v < HBM_PT_LARGE_BUFFER / MB)
    return fail(ps, *i, "CachingAllocator option %s too small, must be >= %llu", what,
                (unsigned long long)(HBM_PT_LARGE_BUFFER / MB));
  if (v > UINT64_MAX / MB) v = UINT64_MAX / MB;
  *bytes = v * MB;
  return HBM_OK;
}

static int parse_roundup(parser *ps, size_t *i, hbm_pt_conf *c) {
  int rc;
  if ((rc = expect(ps, ++*i, ':'))) return rc;
  if (++*i >= ps->n) return fail(ps, *i, "Error, expecting roundup_power2_divisions value");
  if (is(ps, *i, "[")) {
    size_t last_index = 0;
    int first_value = 1;
    while (++*i < ps->n && !is(ps, *i, "]")) {
      size_t key = *i;
      uint64_t div;
      if ((rc = expect(ps, ++*i, ':'))) return rc;
      if (++*i >= ps->n) return fail(ps, *i, "Error parsing roundup_power2_divisions value");
      if ((rc = parse_u64(ps, *i, "roundup_power2_divisions", &div))) return rc;
      if (div != 0 && !pow2(div))
        return fail(ps, *i, "For roundups, the divisons has to be power of 2 or 0 to disable roundup ");
      if (div > UINT32_MAX) return fail(ps, *i, "roundup_power2_divisions: %llu is too large",
                                        (unsigned long long)div);
      if (is(ps, key, ">")) {
        for (size_t k = last_index; k < HBM_PT_ROUNDUP_INTERVALS; k++)
          c->roundup_divisions[k] = (uint32_t)div;
      } else {
        uint64_t interval;
        if ((rc = parse_u64(ps, key, "roundup_power2_divisions interval", &interval))) return rc;
        if (!pow2(interval)) return fail(ps, key, "For roundups, the intervals have to be power of 2 ");
        size_t index = log2_floor(interval);
        if (index > HBM_PT_ROUNDUP_INTERVALS - 1) index = HBM_PT_ROUNDUP_INTERVALS - 1;
        if (first_value) {
          for (size_t k = 0; k < index; k++) c->roundup_divisions[k] = (uint32_t)div;
          first_value = 0;
        }
        c->roundup_divisions[index] = (uint32_t)div;
        last_index = index;
      }
      if (*i + 1 >= ps->n) return fail(ps, *i + 1, "roundup_power2_divisions: missing ']'");
      if (!is(ps, *i + 1, "]") && (rc = expect(ps, ++*i, ','))) return rc;
    }
    if (*i >= ps->n) return fail(ps, *i, "roundup_power2_divisions: missing ']'");
  } else {
    uint64_t div;
    if ((rc = parse_u64(ps, *i, "roundup_power2_divisions", &div))) return rc;
    if (!pow2(div)) return fail(ps, *i, "For roundups, the divisons has to be power of 2 ");
    if (div > UINT32_MAX) return fail(ps, *i, "roundup_power2_divisions: %llu is too large",
                                      (unsigned long long)div);
    for (size_t k = 0; k < HBM_PT_ROUNDUP_INTERVALS; k++) c->roundup_divisions[k] = (uint32_t)div;
  }
  return HBM_OK;
}

static int parse_all(parser *ps, hbm_pt_conf *c) {
  int rc, flag;
  uint64_t u;
  double d;
  for (size_t i = 0; i < ps->n; i++) {
    const char *key = ps->tok[i].text;
    if (!strcmp(key, "max_split_size_mb")) {
      if ((rc = parse_mb(ps, &i, key, &c->max_split_size))) return rc;
    } else if (!strcmp(key, "max_non_split_rounding_mb")) {
      if ((rc = parse_mb(ps, &i, key, &c->max_non_split_rounding))) return rc;
    } else if (!strcmp(key, "garbage_collection_threshold")) {
      if ((rc = expect(ps, ++i, ':')) || (rc = parse_double(ps, ++i, key, &d))) return rc;
      if (!(d > 0 && d < 1.0))
        return fail(ps, i, "garbage_collect_threshold is invalid, set it in (0.0, 1.0)");
      c->gc_threshold = d;
    } else if (!strcmp(key, "roundup_power2_divisions")) {
      if ((rc = parse_roundup(ps, &i, c))) return rc;
    } else if (!strcmp(key, "expandable_segments")) {
      if ((rc = expect(ps, ++i, ':')) || (rc = parse_bool(ps, ++i, key, &flag))) return rc;
      c->expandable = flag;
    } else if (!strcmp(key, "backend")) {
      if ((rc = expect(ps, ++i, ':'))) return rc;
      if (is(ps, ++i, "native")) {
      } else if (is(ps, i, "cudaMallocAsync")) {
        return fail(ps, i, "backend:cudaMallocAsync is the CUDA driver's allocator, not the "
                           "caching allocator this policy models");
      } else {
        return fail(ps, i, "Unknown allocator backend, options are native and cudaMallocAsync");
      }
    } else if (!strcmp(key, "release_lock_on_cudamalloc") || !strcmp(key, "release_lock_on_hipmalloc") ||
               !strcmp(key, "pinned_use_cuda_host_register") ||
               !strcmp(key, "pinned_use_hip_host_register") ||
               !strcmp(key, "pinned_use_background_threads") ||
               !strcmp(key, "graph_capture_record_stream_reuse")) {
      /* No effect on device placement: checked, then ignored. */
      if ((rc = expect(ps, ++i, ':')) || (rc = parse_bool(ps, ++i, key, &flag))) return rc;
    } else if (!strcmp(key, "pinned_num_register_threads")) {
      if ((rc = expect(ps, ++i, ':')) || (rc = parse_u64(ps, ++i, key, &u))) return rc;
      if (!pow2(u)) return fail(ps, i, "Number of register threads has to be power of 2 ");
      if (u > 128) return fail(ps, i, "Number of register threads should be less than or equal to 128");
    } else if (!strcmp(key, "pinned_reserve_segment_size_mb")) {
      if ((rc = expect(ps, ++i, ':')) || (rc = parse_u64(ps, ++i, key, &u))) return rc;
      if (u == 0) return fail(ps, i, "Pinned reserve segment size has to be greater than 0");
    } else if (!strcmp(key, "per_process_memory_fraction")) {
      if ((rc = expect(ps, ++i, ':')) || (rc = parse_double(ps, ++i, key, &d))) return rc;
      if (!(d >= 0.0 && d <= 1.0))
        return fail(ps, i, "per_process_memory_fraction is invalid, set it in [0.0, 1.0]");
      /* setMemoryFraction: a fraction of 1.0 leaves allowed_memory_maximum
       * empty (no cap, no garbage collection), any smaller one sets it. */
      c->memory_fraction = d;
      c->set_fraction = d < 1.0;
    } else {
      return fail(ps, i, "Unrecognized CachingAllocator option: %s", key);
    }
    if (i + 1 < ps->n && (rc = expect(ps, ++i, ','))) return rc;
  }
  return HBM_OK;
}

int hbm_pt_conf_parse(const char *text, hbm_pt_conf *conf, hbm_diag *diag) {
  if (!text || !*text) return HBM_OK;
  parser ps = {.src = text, .diag = diag};
  hbm_pt_conf c = *conf;
  int rc = lex(&ps);
  if (rc == HBM_OK) rc = parse_all(&ps, &c);
  free(ps.tok);
  if (rc == HBM_OK) *conf = c;
  return rc;
}

int hbm_pt_conf_policy(const char *text, const char **policy, hbm_diag *diag) {
  hbm_pt_conf c;
  hbm_pt_conf_default(&c, 0);
  int rc = hbm_pt_conf_parse(text, &c, diag);
  if (rc == HBM_OK) *policy = c.expandable ? "expandable" : "caching";
  return rc;
}

/* ---- sizes ---- */

static size_t roundup_divisions_for(const hbm_pt_conf *c, uint64_t size) {
  /* AllocatorConfig::roundup_power2_divisions(size): interval of log2(size)
   * counted from 1 MiB, clamped to [0, 15]. */
  int index = (int)log2_floor(size) - 20;
  if (index < 0) index = 0;
  if (index > HBM_PT_ROUNDUP_INTERVALS - 1) index = HBM_PT_ROUNDUP_INTERVALS - 1;
  return c->roundup_divisions[index];
}

static uint64_t roundup_power2_next_division(uint64_t size, uint64_t divisions) {
  if (pow2(size)) return size;
  uint64_t power2_floor = 1ull << log2_floor(size);
  uint64_t power2_division = power2_floor >> log2_floor(divisions);
  if (power2_division == 0) return power2_floor << 1;
  uint64_t round_size_floor = size & ~(power2_division - 1);
  return round_size_floor == size ? size : round_size_floor + power2_division;
}

uint64_t hbm_pt_round_size(const hbm_pt_conf *c, uint64_t size) {
  if (size < HBM_PT_MIN_BLOCK) return HBM_PT_MIN_BLOCK;
  uint64_t divisions = roundup_divisions_for(c, size);
  if (divisions > 1 && size > HBM_PT_MIN_BLOCK * divisions)
    return roundup_power2_next_division(size, divisions);
  return HBM_PT_MIN_BLOCK * ((size + HBM_PT_MIN_BLOCK - 1) / HBM_PT_MIN_BLOCK);
}

uint64_t hbm_pt_allocation_size(uint64_t size) {
  if (size <= HBM_PT_SMALL_SIZE) return HBM_PT_SMALL_BUFFER;
  if (size < HBM_PT_MIN_LARGE_ALLOC) return HBM_PT_LARGE_BUFFER;
  return HBM_PT_ROUND_LARGE * ((size + HBM_PT_ROUND_LARGE - 1) / HBM_PT_ROUND_LARGE);
}
