/* plan_csv.c: MiniMalloc's CSV reader and writer (plan_csv.h). */
#include "trace/plan_csv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "trace/trace.h"

enum { COL_ID, COL_LOWER, COL_UPPER, COL_SIZE, COL_ALIGNMENT, COL_OFFSET, COL_KINDS, COL_OTHER = COL_KINDS };
enum { MAX_COLUMNS = 64 };

static const char *const column_names[COL_KINDS] = {"id", "lower", "upper", "size", "alignment", "offset"};

/* A field: [at, at + len) of the text, spaces and tabs around it dropped. */
typedef struct field {
  const char *at;
  size_t len;
} field;

/* The line starting at text[pos] (without its \n or \r\n): its end. */
static size_t line_end(const char *text, size_t len, size_t pos) {
  const char *nl = memchr(text + pos, '\n', len - pos);
  return nl ? (size_t)(nl - text) : len;
}

static field trimmed(const char *at, size_t n) {
  while (n && (*at == ' ' || *at == '\t')) at++, n--;
  while (n && (at[n - 1] == ' ' || at[n - 1] == '\t')) n--;
  return (field){at, n};
}

/* Splits [at, at + n) at commas into f[]; returns the count, or -1 past max. */
static int split(const char *at, size_t n, field *f, int max) {
  int k = 0;
  for (;;) {
    const char *comma = memchr(at, ',', n);
    size_t m = comma ? (size_t)(comma - at) : n;
    if (k == max) return -1;
    f[k++] = trimmed(at, m);
    if (!comma) return k;
    at += m + 1;
    n -= m + 1;
  }
}

static int field_is(field f, const char *name) { return f.len == strlen(name) && !memcmp(f.at, name, f.len); }

/* As diagnostics are shown (trace/diag.c): the C1 controls (U+0080 to
 * U+009F, CSI among them) and bytes that are no UTF-8, which an 8-bit
 * terminal reads as C1 controls, are '?' too; other UTF-8 is kept whole,
 * never cut inside a character. */
const char *hbm_plan_csv_quote(const char *text, size_t len, char buf[48]) {
  size_t n = len > 40 ? 40 : len, k = 0, i = 0;
  while (i < n) {
    unsigned char c = (unsigned char)text[i], seq[5] = {0};
    if (c < 0x80) {
      buf[k++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
      i++;
      continue;
    }
    memcpy(seq, text + i, len - i < 4 ? len - i : 4); /* the text need not end in a NUL */
    size_t m = (size_t)hbm_utf8_len(seq);
    if (!m || (c == 0xc2 && seq[1] < 0xa0)) m = 0;
    if (m && i + m > n) break; /* a character past the 40 bytes shown */
    if (!m) buf[k++] = '?', i++;
    else memcpy(buf + k, text + i, m), k += m, i += m;
  }
  if (len > i) buf[k++] = '.', buf[k++] = '.', buf[k++] = '.';
  buf[k] = 0;
  return buf;
}

static const char *shown(field f, char buf[48]) { return hbm_plan_csv_quote(f.at, f.len, buf); }

/* A whole number in plain decimal digits (a '+' allowed), at most max. */
static int whole(field f, uint64_t max, uint64_t *out) {
  size_t i = f.len && f.at[0] == '+';
  if (i == f.len) return 0;
  uint64_t v = 0;
  for (; i < f.len; i++) {
    if (f.at[i] < '0' || f.at[i] > '9') return 0;
    unsigned d = (unsigned)(f.at[i] - '0');
    if (v > (max - d) / 10) return 0;
    v = v * 10 + d;
  }
  *out = v;
  return 1;
}

typedef struct id_at {
  const char *id;
  uint32_t line;
} id_at;

static int by_id(const void *a, const void *b) {
  const id_at *x = a, *y = b;
  int c = strcmp(x->id, y->id);
  return c ? c : (x->line > y->line) - (x->line < y->line);
}

/* Two buffers with one id would make a solution ambiguous: the later is
 * named, of the repeats the first a reader going line by line meets. */
static int check_ids_distinct(const hbm_plan_input *in, const char *name, hbm_diag *diag) {
  if (in->n < 2) return HBM_OK;
  id_at *a = malloc(in->n * sizeof *a);
  if (!a) return HBM_EHOSTMEM;
  for (size_t i = 0; i < in->n; i++) a[i] = (id_at){in->ids[i], in->lines[i]};
  qsort(a, in->n, sizeof *a, by_id);
  int rc = HBM_OK;
  size_t repeat = 0, first = 0; /* the earliest repeat (0: none) and its id's first line */
  for (size_t i = 1, group = 0; i < in->n; i++) {
    if (strcmp(a[i].id, a[group].id)) group = i;
    else if (i == group + 1 && (!repeat || a[i].line < a[repeat].line)) repeat = i, first = group;
  }
  if (repeat) {
    char buf[48];
    rc = hbm_diag_set(diag, name, a[repeat].line, 0, "id '%s' again (first on line %u): expected each id once",
                      shown((field){a[repeat].id, strlen(a[repeat].id)}, buf), a[first].line);
  }
  free(a);
  return rc;
}

void hbm_plan_input_free(hbm_plan_input *in) {
  if (!in) return;
  free(in->blocks);
  free(in->ids);
  free(in->id_pool);
  free(in->align_log2);
  free(in->lines);
  free(in->offsets);
  memset(in, 0, sizeof *in);
}

int hbm_plan_csv_parse(const char *text, size_t len, const char *name, hbm_plan_input *out, hbm_diag *diag) {
  if ((!text && len) || !out) return HBM_EINVAL;
  if (!text) text = ""; /* no arithmetic on a null pointer below, even + 0 */
  if (!name) name = "<input>";
  const char *nul = len ? memchr(text, 0, len) : NULL;
  if (nul) { /* by its line, as every other error here (byte 0 would read as no place at all) */
    uint64_t line = 1;
    for (const char *c = text; c < nul; c++) line += *c == '\n';
    return hbm_diag_set(diag, name, line, (uint64_t)(nul - text), "a NUL byte (byte %llu): expected CSV text",
                        (unsigned long long)(nul - text));
  }
  int has_lf = len && memchr(text, '\n', len) != NULL;
  size_t lines = 1;
  for (const char *p = text; p && (p = memchr(p, '\n', len - (size_t)(p - text))); p++) lines++;

  hbm_plan_input in = {0};
  in.align = 1;
  int rc = HBM_EHOSTMEM;
  in.blocks = malloc(lines * sizeof *in.blocks);
  in.ids = malloc(lines * sizeof *in.ids);
  in.lines = malloc(lines * sizeof *in.lines);
  char *pool_end = in.id_pool = malloc(len + lines + 1);
  if (!in.blocks || !in.ids || !in.lines || !in.id_pool) goto fail;

  int col[COL_KINDS], ncols = 0;
  for (int k = 0; k < COL_KINDS; k++) col[k] = -1;
  field f[MAX_COLUMNS];
  uint64_t total = 0, line = 0;
  int inclusive_end = 0; /* an `end` column: upper = end + 1 */
  char buf[48];
  size_t first = len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3) ? 3 : 0; /* a UTF-8 byte order mark, as
                                                                          spreadsheets write */
  for (size_t pos = first; pos < len || (pos == len && !line); pos = line_end(text, len, pos) + 1) {
    size_t end = line_end(text, len, pos);
    line++;
    if (line > UINT32_MAX) {
      rc = hbm_diag_set(diag, name, line, pos, "more lines than the reader takes (2^32 - 1)");
      goto fail;
    }
    /* A line ends in LF or CR LF: one CR there, and no other anywhere (a
     * file of CR line ends is said to be one, as the trace reader says it). */
    size_t stop = end > pos && text[end - 1] == '\r' ? end - 1 : end;
    const char *cr = memchr(text + pos, '\r', stop - pos);
    if (cr) {
      size_t at = (size_t)(cr - text);
      rc = has_lf ? hbm_diag_set(diag, name, line, at,
                                 "a carriage return inside the line (byte %zu): expected lines that end in LF or CR LF",
                                 at)
                  : hbm_diag_set(diag, name, line, at,
                                 "lines that end in CR alone (byte %zu; the file has no LF): expected lines that end "
                                 "in LF or CR LF",
                                 at);
      goto fail;
    }
    field whole_line = trimmed(text + pos, stop - pos);
    if (!whole_line.len) {
      if (pos >= len) break;
      continue;
    }
    if (memchr(whole_line.at, '"', whole_line.len)) {
      rc = hbm_diag_set(diag, name, line, pos, "a quoted field: expected plain comma-separated values");
      goto fail;
    }
    int nf = split(whole_line.at, whole_line.len, f, MAX_COLUMNS);
    if (nf < 0 && !ncols) {
      rc = hbm_diag_set(diag, name, line, pos, "more than %d fields: expected id, lower, upper, size and few others",
                        MAX_COLUMNS);
      goto fail;
    }
    if (nf < 0) { /* a row past the most any header has: counted, to say it as any other count */
      uint64_t fields = 1;
      for (const char *c = whole_line.at; (c = memchr(c, ',', (size_t)(whole_line.at + whole_line.len - c))); c++)
        fields++;
      rc = hbm_diag_set(diag, name, line, pos, "%llu fields: expected %d, as the header has",
                        (unsigned long long)fields, ncols);
      goto fail;
    }
    if (!ncols) { /* the header */
      ncols = nf;
      for (int k = 0; k < nf; k++) {
        int kind = COL_OTHER;
        if (field_is(f[k], "id") || field_is(f[k], "buffer") || field_is(f[k], "buffer_id")) kind = COL_ID;
        else if (field_is(f[k], "lower") || field_is(f[k], "start") || field_is(f[k], "begin")) kind = COL_LOWER;
        else if (field_is(f[k], "upper")) kind = COL_UPPER;
        else if (field_is(f[k], "end")) kind = COL_UPPER, inclusive_end = 1;
        else if (field_is(f[k], "size")) kind = COL_SIZE;
        else if (field_is(f[k], "alignment")) kind = COL_ALIGNMENT;
        else if (field_is(f[k], "offset")) kind = COL_OFFSET;
        else if (field_is(f[k], "gaps")) {
          rc = hbm_diag_set(diag, name, line, pos,
                            "column 'gaps': lifetimes with holes are not supported; expected one "
                            "[lower, upper) per buffer");
          goto fail;
        }
        if (kind == COL_OTHER) continue;
        if (col[kind] >= 0) {
          rc = hbm_diag_set(diag, name, line, pos, "column '%s' twice (as '%s'): expected each column once",
                            column_names[kind], shown(f[k], buf));
          goto fail;
        }
        col[kind] = k;
      }
      for (int kind = COL_ID; kind <= COL_SIZE; kind++)
        if (col[kind] < 0) {
          rc = hbm_diag_set(diag, name, line, pos,
                            "no '%s' column: expected a header naming id, lower, upper and size "
                            "(MiniMalloc's CSV: id,lower,upper,size)",
                            column_names[kind]);
          goto fail;
        }
      if (col[COL_OFFSET] >= 0 && !(in.offsets = malloc(lines * sizeof *in.offsets))) goto fail;
      if (col[COL_ALIGNMENT] >= 0 && !(in.align_log2 = malloc(lines))) goto fail;
      continue;
    }
    if (nf != ncols) {
      rc = hbm_diag_set(diag, name, line, pos, "%d field%s: expected %d, as the header has", nf, nf == 1 ? "" : "s",
                        ncols);
      goto fail;
    }
    if (in.n >= HBM_PLAN_MAX_BUFFERS) {
      rc = hbm_diag_set(diag, name, line, pos, "more buffers than the planner takes (%u)", HBM_PLAN_MAX_BUFFERS);
      goto fail;
    }
    field id = f[col[COL_ID]];
    if (!id.len) {
      rc = hbm_diag_set(diag, name, line, pos, "an empty id: expected a name for the buffer");
      goto fail;
    }
    uint64_t lower, upper, size, v;
    if (!whole(f[col[COL_LOWER]], HBM_PLAN_MAX_VALUE - 1, &lower)) {
      rc = hbm_diag_set(diag, name, line, pos, "%s '%s': expected a whole number 0..2^62 - 1",
                        column_names[COL_LOWER], shown(f[col[COL_LOWER]], buf));
      goto fail;
    }
    /* upper <= 2^62 - 1 either way, so that what the writer writes reads back */
    if (!whole(f[col[COL_UPPER]], HBM_PLAN_MAX_VALUE - 1 - (uint64_t)inclusive_end, &upper)) {
      rc = hbm_diag_set(diag, name, line, pos, "%s '%s': expected a whole number 0..2^62 - %d",
                        inclusive_end ? "end" : "upper", shown(f[col[COL_UPPER]], buf), 1 + inclusive_end);
      goto fail;
    }
    if (inclusive_end && lower > upper) {
      rc = hbm_diag_set(diag, name, line, pos, "lower %llu, end %llu: expected lower <= end (the last time it lives)",
                        (unsigned long long)lower, (unsigned long long)upper);
      goto fail;
    }
    if (inclusive_end) upper++;
    if (lower >= upper) {
      rc = hbm_diag_set(diag, name, line, pos, "lifetime [%llu, %llu): expected lower < upper",
                        (unsigned long long)lower, (unsigned long long)upper);
      goto fail;
    }
    if (!whole(f[col[COL_SIZE]], HBM_PLAN_MAX_TOTAL, &size) || !size) {
      rc = hbm_diag_set(diag, name, line, pos, "size '%s': expected a whole number 1..2^60",
                        shown(f[col[COL_SIZE]], buf));
      goto fail;
    }
    if (size > HBM_PLAN_MAX_TOTAL - total) {
      rc = hbm_diag_set(diag, name, line, pos, "the sizes add up past 2^60, more than the planner takes");
      goto fail;
    }
    total += size;
    if (in.align_log2) {
      field a = f[col[COL_ALIGNMENT]];
      if (!whole(a, HBM_PLAN_MAX_ALIGN, &v) || !v || (v & (v - 1))) {
        rc = hbm_diag_set(diag, name, line, pos, "alignment '%s': expected a power of two 1..2^30",
                          shown(a, buf));
        goto fail;
      }
      if (v > in.align) in.align = v;
      uint8_t log2 = 0;
      while ((1ull << log2) < v) log2++;
      in.align_log2[in.n] = log2;
    }
    if (in.offsets) {
      field o = f[col[COL_OFFSET]];
      if (!whole(o, HBM_PLAN_MAX_VALUE - size, &v)) {
        rc = hbm_diag_set(diag, name, line, pos, "offset '%s': expected a whole number 0..2^62 - size",
                          shown(o, buf));
        goto fail;
      }
      in.offsets[in.n] = v;
    }
    in.blocks[in.n] = (hbm_dsa_block){size, lower, upper};
    in.ids[in.n] = pool_end;
    memcpy(pool_end, id.at, id.len);
    pool_end[id.len] = 0;
    pool_end += id.len + 1;
    in.lines[in.n] = (uint32_t)line;
    in.n++;
  }
  if (!ncols) {
    rc = hbm_diag_set(diag, name, 1, 0, "no header: expected a first line naming id, lower, upper and size "
                                        "(MiniMalloc's CSV: id,lower,upper,size)");
    goto fail;
  }
  if ((rc = check_ids_distinct(&in, name, diag)) != HBM_OK) {
    hbm_plan_input_free(&in);
    return rc;
  }
  *out = in;
  return HBM_OK;
fail:
  /* A line refused after an id repeated: the repeat, on an earlier line, is
   * what a reader going line by line meets first. */
  if (rc == HBM_EPARSE && in.n > 1) {
    hbm_diag earlier = {0};
    if (check_ids_distinct(&in, name, &earlier) == HBM_EPARSE && diag) *diag = earlier;
  }
  hbm_plan_input_free(&in);
  return rc;
}

int hbm_plan_csv_render(const hbm_plan_input *in, const uint64_t *offsets, char **text, size_t *len) {
  if (!in || (in->n && !offsets) || !text || !len) return HBM_EINVAL;
  /* Each line: an id and five numbers of at most 20 digits, commas, \n. */
  size_t cap = 64, at = 0;
  for (size_t i = 0; i < in->n; i++) cap += strlen(in->ids[i]) + 5 * 21 + 1;
  char *out = malloc(cap);
  if (!out) return HBM_EHOSTMEM;
  at += (size_t)snprintf(out, cap, "id,lower,upper,size%s,offset\n", in->align_log2 ? ",alignment" : "");
  for (size_t i = 0; i < in->n; i++) {
    const hbm_dsa_block *b = &in->blocks[i];
    at += (size_t)snprintf(out + at, cap - at, "%s,%llu,%llu,%llu", in->ids[i], (unsigned long long)b->start,
                           (unsigned long long)b->end, (unsigned long long)b->size);
    if (in->align_log2) at += (size_t)snprintf(out + at, cap - at, ",%llu", 1ull << in->align_log2[i]);
    at += (size_t)snprintf(out + at, cap - at, ",%llu\n", (unsigned long long)offsets[i]);
  }
  *text = out;
  *len = at;
  return HBM_OK;
}
