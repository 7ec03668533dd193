/* html.c: the replay report page (see html.h, docs/report.md).
 *
 * One self-contained page: inline CSS and SVG, no script, no fonts or images
 * from the network. Per policy: live / allocated / reserved over time,
 * fragmentation ratio and largest free block over time, the layout at the first
 * failure as a strip coloured by tag, and the diagnosis in words. Long runs are
 * drawn from at most PLOT_POINTS points per line, keeping each bucket's worst
 * value (highest memory and fragmentation, lowest largest free), so no peak
 * is lost to downsampling. */
#include "report/html.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/addrmap.h"
#include "core/util.h"
#include "policy/policy.h"
#include "replay/replay.h"
#include "trace/trace.h"

#define PLOT_POINTS 900
#define STRIP_COLUMNS 1200
#define GIB (1024.0 * 1024.0 * 1024.0)

/* ==== collecting a run ========================================================== */

void hbm_report_keep_sample(const hbm_sample *s, void *arg) {
  hbm_report_run *r = arg;
  if (r->nsamples == r->samples_cap) {
    size_t cap = r->samples_cap ? r->samples_cap * 2 : 1024;
    hbm_sample *v = realloc(r->samples, cap * sizeof *v);
    if (!v) {
      r->error = HBM_EHOSTMEM;
      return;
    }
    r->samples = v;
    r->samples_cap = cap;
  }
  r->samples[r->nsamples++] = *s;
}

int hbm_report_keep_layout(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  hbm_report_run *r = arg;
  if (r->nlayout == r->layout_cap) {
    size_t cap = r->layout_cap ? r->layout_cap * 2 : 4096;
    hbm_layout_run *v = realloc(r->layout, cap * sizeof *v);
    if (!v) { /* a layout with runs left out would show holes that are not there */
      r->error = HBM_EHOSTMEM;
      return HBM_EHOSTMEM;
    }
    r->layout = v;
    r->layout_cap = cap;
  }
  r->layout[r->nlayout++] = (hbm_layout_run){addr, size, (uint8_t)(live != 0), (uint8_t)tag};
  r->layout_at_failure = 1;
  return 0;
}

/* The slices of the events the live band is drawn in: one per plotted point. */
static size_t live_slices(const hbm_trace *t) { return t->nevents < PLOT_POINTS ? (size_t)t->nevents : PLOT_POINTS; }

/* (Re)allocates a live band's least and most for t's slices: their count, or
 * 0 with both NULL where there is no event or no host memory. */
static size_t band_alloc(const hbm_trace *t, uint64_t **lo, uint64_t **hi) {
  size_t nb = live_slices(t);
  free(*lo);
  free(*hi);
  *lo = nb ? malloc(nb * sizeof **lo) : NULL;
  *hi = nb ? malloc(nb * sizeof **hi) : NULL;
  if (*lo && *hi) return nb;
  free(*lo);
  free(*hi);
  *lo = *hi = NULL;
  return 0;
}

int hbm_report_run_hooks(const hbm_trace *t, hbm_report_run *run, hbm_replay_options *o) {
  o->on_sample = hbm_report_keep_sample;
  o->sample_arg = run;
  o->on_oom_layout = hbm_report_keep_layout;
  o->oom_layout_arg = run;
  run->live_buckets = band_alloc(t, &run->live_min, &run->live_max);
  o->live_buckets = run->live_buckets;
  o->live_min = run->live_min;
  o->live_max = run->live_max;
  return run->live_buckets == live_slices(t) ? HBM_OK : HBM_EHOSTMEM;
}

int hbm_report_run_policy(const hbm_trace *t, const char *policy, const char *conf,
                          const char *device, uint64_t every, hbm_progress_fn *progress,
                          void *progress_arg, hbm_report_run *out) {
  memset(out, 0, sizeof *out);
  out->conf = conf;
  hbm_replay_options o;
  memset(&o, 0, sizeof o);
  o.policy = policy;
  o.conf = conf;
  o.device = device;
  o.every = every;
  o.on_progress = progress;
  o.progress_arg = progress_arg;
  int rc = hbm_report_run_hooks(t, out, &o);
  if (rc == HBM_OK) rc = hbm_replay(t, &o, &out->result);
  if (rc == HBM_OK && out->error) rc = out->error;
  snprintf(out->result.policy, sizeof out->result.policy, "%s", policy);
  out->error = rc;
  if (out->result.oom) hbm_report_failure_moment(out);
  return rc;
}

void hbm_report_failure_moment(hbm_report_run *r) {
  const hbm_oom_report *o = &r->result.first_oom;
  r->layout_event = o->event;
  r->layout_step = o->step;
  r->layout_largest_free = o->largest_free;
  r->layout_live = o->limit - o->free_total; /* free is the limit less live */
}

/* The tightest moment leaves out steps 0 and 1 (the first fills caches and
 * creates optimizer state) where the samples reach past them; else (few or no
 * step marks) it takes every sample. 1 when that leaves some sample out. */
static int tightest_skips(const hbm_report_run *r) {
  if (!r->nsamples || r->samples[r->nsamples - 1].step < 2) return 0;
  return r->samples[0].step < 2;
}

uint64_t hbm_report_tightest_event(const hbm_report_run *r) {
  uint64_t best = UINT64_MAX, at = HBM_REPORT_NO_MOMENT;
  int skip = tightest_skips(r);
  for (size_t i = 0; i < r->nsamples; i++) {
    const hbm_sample *s = &r->samples[i];
    if (skip && s->step < 2) continue;
    if (s->largest_free < best || at == HBM_REPORT_NO_MOMENT) {
      best = s->largest_free;
      at = s->event;
    }
  }
  return at;
}

/* ---- the layout at a chosen moment: hbm_replay up to it (starting state,
 * failed requests skipped, step hooks, moved blocks followed, as in the whole
 * run), then the policy's scan with each block's tag. ---- */
typedef struct at_ctx {
  uint64_t event;
  hbm_sample sample; /* the one taken at the event */
  int sampled;
  hbm_progress_fn *progress; /* told done of `event`, where the replay stops */
  void *progress_arg;
} at_ctx;

static void at_progress(uint64_t done, uint64_t total, void *arg) {
  const at_ctx *c = arg;
  (void)total;
  c->progress(done < c->event ? done : c->event, c->event, c->progress_arg);
}

static void at_sample(const hbm_sample *s, void *arg) {
  at_ctx *c = arg;
  if (s->event != c->event) return;
  c->sample = *s;
  c->sampled = 1;
}

int hbm_report_layout_at(const hbm_trace *t, const char *policy, const char *conf, const char *device,
                         uint64_t event, hbm_progress_fn *progress, void *progress_arg, hbm_report_run *run) {
  if (event > t->nevents) event = t->nevents;
  at_ctx c = {.event = event, .progress = progress, .progress_arg = progress_arg};
  hbm_replay_options o;
  memset(&o, 0, sizeof o);
  o.policy = policy;
  o.conf = conf;
  o.device = device;
  o.every = event; /* the first sample is the moment itself */
  o.on_sample = at_sample;
  o.sample_arg = &c;
  if (progress && event) {
    o.on_progress = at_progress;
    o.progress_arg = &c;
  }
  o.layout_event = event;
  o.layout_at_start = event == 0;
  o.on_layout = hbm_report_keep_layout;
  o.layout_arg = run;
  free(run->layout); /* replaced */
  run->layout = NULL;
  run->nlayout = run->layout_cap = 0;
  int run_error = run->error; /* the run's own; hbm_report_keep_layout reports through it */
  run->error = HBM_OK;
  hbm_replay_result partial;
  int rc = hbm_replay(t, &o, &partial);
  if (rc == HBM_OK) rc = run->error;
  run->error = run_error;
  run->layout_error = rc;
  if (rc == HBM_OK && !c.sampled) rc = run->layout_error = HBM_EINVAL; /* a start that did not fit: no moment */
  if (rc != HBM_OK) { /* no layout with runs left out: the page says it was not drawn */
    free(run->layout);
    run->layout = NULL;
    run->nlayout = run->layout_cap = 0;
    return rc;
  }
  run->layout_at_failure = 0;
  run->layout_event = event;
  run->layout_step = c.sample.step;
  run->layout_largest_free = c.sample.largest_free;
  run->layout_live = c.sample.live;
  run->layout_reserved = c.sample.reserved;
  return HBM_OK;
}

void hbm_report_run_release(hbm_report_run *r) {
  if (!r) return;
  free(r->samples);
  free(r->layout);
  free(r->live_min);
  free(r->live_max);
  memset(r, 0, sizeof *r);
}

int hbm_report_trace_facts(const hbm_trace *t, hbm_report *rep) {
  rep->trace = t;
  rep->events = t->nevents;
  rep->steps = 0;
  rep->largest_comm_request = 0;
  if (!rep->capacity) rep->capacity = t->capacity;
  size_t nb = live_slices(t);
  rep->live_buckets = band_alloc(t, &rep->live_min, &rep->live_max);
  uint64_t *size = calloc(t->nids ? t->nids : 1, sizeof *size);
  if (!size) rep->live_buckets = 0;
  for (uint32_t i = 0; i < t->ninit_blocks && size; i++) {
    const hbm_init_block *b = &t->init_blocks[i];
    if (b->id != HBM_NO_ID && b->id < t->nids) size[b->id] = b->request;
  }
  uint64_t live = 0, peak = 0;
  for (uint32_t id = 0; size && id < t->nids; id++) live += size[id];
  peak = live;
  size_t k = 0;
  uint64_t k_end = rep->live_buckets ? t->nevents / rep->live_buckets : 0;
  if (rep->live_buckets) rep->live_min[0] = rep->live_max[0] = live;
  for (uint64_t i = 0; i < t->nevents; i++) {
    const hbm_event *e = &t->events[i];
    if (e->kind == HBM_EV_STEP) {
      rep->steps++;
    } else if (e->kind == HBM_EV_ALLOC) {
      if (e->tag == HBM_TAG_COMM && e->size > rep->largest_comm_request) rep->largest_comm_request = e->size;
      if (size && e->id < t->nids && !size[e->id]) {
        size[e->id] = e->size;
        live += e->size;
      }
    } else if (e->kind == HBM_EV_FREE) {
      if (size && e->id < t->nids && size[e->id]) {
        live -= size[e->id];
        size[e->id] = 0;
      }
    }
    if (live > peak) peak = live;
    if (rep->live_buckets) {
      while (i >= k_end && k + 1 < rep->live_buckets) {
        k++;
        k_end = (k + 1) * t->nevents / rep->live_buckets;
        rep->live_min[k] = rep->live_max[k] = live;
      }
      if (live < rep->live_min[k]) rep->live_min[k] = live;
      if (live > rep->live_max[k]) rep->live_max[k] = live;
    }
  }
  int counted = size != NULL;
  free(size);
  rep->peak_live = counted ? peak : hbm_trace_peak_live(t);
  return nb && !rep->live_buckets ? HBM_EHOSTMEM : HBM_OK;
}

void hbm_report_release(hbm_report *rep) {
  if (!rep) return;
  free(rep->live_min);
  free(rep->live_max);
  rep->live_min = rep->live_max = NULL;
  rep->live_buckets = 0;
}

/* ==== a growing string ========================================================== */

typedef struct sb {
  char *buf;
  size_t len, cap;
  int failed;
} sb;

static void sb_put(sb *b, const char *s, size_t n) {
  if (b->failed) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 65536;
    while (b->len + n + 1 > cap) cap *= 2;
    char *p = realloc(b->buf, cap);
    if (!p) {
      b->failed = 1;
      return;
    }
    b->buf = p;
    b->cap = cap;
  }
  memcpy(b->buf + b->len, s, n);
  b->len += n;
  b->buf[b->len] = 0;
}

static void sb_printf(sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sb *b, const char *fmt, ...) {
  char small[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = hbm_vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof small) {
    sb_put(b, small, (size_t)n);
    return;
  }
  char *big = malloc((size_t)n + 1);
  if (!big) {
    b->failed = 1;
    return;
  }
  va_start(ap, fmt);
  hbm_vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  sb_put(b, big, (size_t)n);
  free(big);
}

/* The page declares UTF-8: a byte that is not part of a well-formed sequence
 * (a Latin-1 file name, say), or a control character HTML does not allow, is
 * written as U+FFFD, as the JSON reports do. */
static void sb_esc(sb *b, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
    switch (*p) {
      case '<': sb_put(b, "&lt;", 4); break;
      case '>': sb_put(b, "&gt;", 4); break;
      case '&': sb_put(b, "&amp;", 5); break;
      case '"': sb_put(b, "&quot;", 6); break;
      case '\t': case '\n': case '\r': sb_put(b, (const char *)p, 1); break;
      default:
        if (*p < 0x20 || *p == 0x7f) {
          sb_put(b, "\xef\xbf\xbd", 3);
        } else if (*p < 0x80) {
          sb_put(b, (const char *)p, 1);
        } else {
          int n = hbm_utf8_len(p);
          int c1 = n == 2 && p[0] == 0xc2 && p[1] < 0xa0; /* U+0080..U+009F: C1 controls */
          if (n && !c1) sb_put(b, (const char *)p, (size_t)n);
          else sb_put(b, "\xef\xbf\xbd", 3);
          if (n) p += n - 1;
        }
    }
  }
}

static const char *size_text(uint64_t bytes, char *buf, size_t len) {
  return hbm_size_format(bytes, buf, len);
}

void hbm_report_sizes_apart(const uint64_t *bytes, size_t n, char (*text)[32]) {
  int alike = 0;
  for (size_t i = 0; i < n; i++) {
    size_text(bytes[i], text[i], 32);
    alike |= i && bytes[i] != bytes[0] && !strcmp(text[i], text[0]);
  }
  for (size_t i = 0; alike && i < n; i++) snprintf(text[i], 32, "%llu B", (unsigned long long)bytes[i]);
}

const char *hbm_report_efficiency_text(const hbm_replay_result *result, char text[32]) {
  if (!result->peak_reserved) snprintf(text, 32, "-");
  else hbm_snprintf(text, 32, "%.3f", result->efficiency);
  return text;
}

/* A fragmentation ratio in words: the API's 1e9 (memory free, no block of it
 * usable) is "infinite", not a number. */
static const char *frag_text(double ratio, char *buf, size_t len) {
  if (ratio >= 1e9) snprintf(buf, len, "infinite");
  else hbm_snprintf(buf, len, "%.2f", ratio);
  return buf;
}

/* How the runs were sampled, for sentences that speak of the samples only:
 * "Sampled every 55 events (20337 samples)", or at each step boundary, which
 * misses a step's own low point (said so). */
static const char *sampling_text(const hbm_report *rep, const hbm_report_run *r, char *buf, size_t len) {
  uint64_t every = hbm_replay_sample_every(rep->every, rep->steps > 0, rep->events);
  const char *plural = r->nsamples == 1 ? "" : "s"; /* an --every past the run's events takes one */
  if (every)
    snprintf(buf, len, "Sampled every %llu event%s (%zu sample%s)", (unsigned long long)every, every == 1 ? "" : "s",
             r->nsamples, plural);
  else
    snprintf(buf, len, "Sampled at each step boundary (%zu sample%s; within a step it goes lower, unseen here: "
                       "--every N samples there)", r->nsamples, plural);
  return buf;
}

/* ==== what a run says ============================================================ */

static const char *tag_colors[HBM_TAG_COUNT] = {
    "#9c755f", /* other */
    "#4e79a7", /* param */
    "#f28e2b", /* grad */
    "#76b7b2", /* optim */
    "#59a14f", /* act */
    "#e15759", /* comm */
    "#edc948", /* temp */
};
#define HOLE_COLOR "#ffffff"
#define UNRESERVED_COLOR "url(#hatch)"

typedef struct run_facts {
  uint64_t min_largest_free, min_largest_free_step, min_largest_free_event;
  double worst_frag;
  uint64_t worst_frag_step, worst_frag_free, worst_frag_largest;
  uint64_t steps_over_goal;  /* step boundaries (first sample of a step) with ratio > 0.05 */
  uint64_t nboundaries;
  hbm_layout_summary lay; /* of the layout the page shows */
} run_facts;

void hbm_layout_summarize(const hbm_layout_run *runs, size_t n, hbm_layout_summary *out) {
  memset(out, 0, sizeof *out);
  uint64_t end = 0;
  for (size_t i = 0; i < n; i++) {
    const hbm_layout_run *l = &runs[i];
    if (i == 0 || l->addr != end) out->ranges++;
    end = l->addr + l->size;
    out->span += l->size;
    if (l->live) {
      out->live_blocks++;
      out->live_bytes += l->size;
      out->live_by_tag[l->tag < HBM_TAG_COUNT ? l->tag : 0] += l->size;
    } else {
      out->holes++;
      out->hole_bytes += l->size;
      if (l->size > out->largest_hole) out->largest_hole = l->size;
    }
  }
}

static void facts_of(const hbm_report *rep, const hbm_report_run *r, run_facts *f) {
  memset(f, 0, sizeof *f);
  f->min_largest_free = UINT64_MAX;
  uint64_t last_step = UINT64_MAX;
  for (size_t i = 0; i < r->nsamples; i++) {
    const hbm_sample *s = &r->samples[i];
    /* every sample, step 0 included: a trace without step marks (or with
     * one near its end, as a snapshot) has most of its run there */
    if (s->largest_free < f->min_largest_free) {
      f->min_largest_free = s->largest_free;
      f->min_largest_free_step = s->step;
      f->min_largest_free_event = s->event;
    }
    if (s->fragmentation > f->worst_frag) {
      f->worst_frag = s->fragmentation;
      f->worst_frag_step = s->step;
      f->worst_frag_free = s->free_total;
      f->worst_frag_largest = s->largest_free;
    }
    if (s->step != last_step) {
      f->nboundaries++;
      if (s->fragmentation > 0.05) f->steps_over_goal++;
      last_step = s->step;
    }
  }
  if (f->min_largest_free == UINT64_MAX) f->min_largest_free = 0;
  hbm_layout_summarize(r->layout, r->nlayout, &f->lay);
  (void)rep;
}

/* The largest communication request live after `event` events of a run in
 * which none failed (0: none, no trace, or no host memory to tell). */
static uint64_t largest_comm_live(const hbm_trace *t, uint64_t event) {
  if (!t || !t->nids) return 0;
  uint64_t *size = calloc(t->nids, sizeof *size); /* live comm requests by id */
  if (!size) return 0;
  for (uint32_t i = 0; i < t->ninit_blocks; i++) {
    const hbm_init_block *b = &t->init_blocks[i];
    if (b->id != HBM_NO_ID && b->id < t->nids && b->tag == HBM_TAG_COMM) size[b->id] = b->request;
  }
  for (uint64_t i = 0; i < event && i < t->nevents; i++) {
    const hbm_event *e = &t->events[i];
    if (e->id >= t->nids) continue;
    if (e->kind == HBM_EV_ALLOC) size[e->id] = e->tag == HBM_TAG_COMM ? e->size : 0;
    else if (e->kind == HBM_EV_FREE) size[e->id] = 0;
  }
  uint64_t largest = 0;
  for (uint32_t id = 0; id < t->nids; id++)
    if (size[id] > largest) largest = size[id];
  free(size);
  return largest;
}

int hbm_report_diagnosis(const hbm_report *rep, const hbm_report_run *r, char *buf, size_t len) {
  char a[32], b[32], c[32], d[32], e[32], g[32];
  const hbm_replay_result *res = &r->result;
  run_facts f;
  facts_of(rep, r, &f);
  uint64_t cap = res->capacity ? res->capacity : rep->capacity;
  if (r->error)
    return snprintf(buf, len, "The replay could not run (%s).", hbm_strerror(r->error)); /* its caller names the policy */
  if (res->oom) {
    const hbm_oom_report *o = &res->first_oom;
    uint64_t room = o->limit < cap ? o->limit : cap; /* free total is this less live */
    uint64_t live = room > o->free_total ? room - o->free_total : 0;
    if (o->cause == HBM_CAUSE_START && o->request > cap)
      return snprintf(buf, len, "The trace's starting state does not fit: its %s live exceed the capacity %s; "
                      "the run fails before its first event.", size_text(o->request, b, 32), size_text(cap, a, 32));
    if (o->cause == HBM_CAUSE_START)
      return snprintf(buf, len, "The recorded starting state does not fit %s as recorded: its %s live alone "
                      "would, but not in the segments that hold them, which the policy keeps whole; the run "
                      "fails before its first event.",
                      size_text(cap, a, 32), size_text(o->request, b, 32));
    /* "a 3.00 MiB request failed with 3.00 MiB free", or "... the largest free block only
     * 3.00 MiB", would read as a contradiction: the request, free total and largest free as
     * the table gives them, and the layout's holes (when drawn) told apart from the request */
    char said[5][32];
    hbm_report_sizes_apart((const uint64_t[]){o->request, o->free_total, o->largest_free, f.lay.hole_bytes,
                                              f.lay.largest_hole},
                           r->nlayout ? 5 : 3, said);
    int n = snprintf(buf, len, "At step %llu a %s request failed with %s free in total (%s %s minus %s live) ",
                     (unsigned long long)o->step, said[0], said[1], room < cap ? "the policy's limit" : "capacity",
                     size_text(room, c, 32), size_text(live, d, 32));
    if (o->cause == HBM_CAUSE_RULES && live + o->request > o->limit) {
      n += snprintf(buf + (n < (int)len ? n : (int)len), n < (int)len ? len - (size_t)n : 0,
                    "but the policy may hold only %s of the capacity (a cap it was set with, such as "
                    "per_process_memory_fraction), and live plus the request exceed that by %s: over the "
                    "policy's limit, not the device's capacity and not fragmentation.",
                    size_text(o->limit, e, 32), size_text(live + o->request - o->limit, g, 32));
    } else if (o->cause == HBM_CAUSE_RULES && o->request > o->largest_free) {
      n += snprintf(buf + (n < (int)len ? n : (int)len), n < (int)len ? len - (size_t)n : 0,
                    "in one piece, not cut up, yet the largest request the policy could serve was %s: its "
                    "granularity refused it, not fragmentation and not capacity%s",
                    said[2],
                    !strcmp(res->policy, "expandable")
                        ? " (expandable segments map whole 20 MiB pages; a hole at a segment's end is what its last "
                          "page leaves past its last block, and goes on into the pages it maps next)."
                        : ".");
    } else if (o->cause == HBM_CAUSE_RULES) {
      n += snprintf(buf + (n < (int)len ? n : (int)len), n < (int)len ? len - (size_t)n : 0,
                    "and the policy itself reports that a request of %s would have succeeded: its own rules "
                    "refused this one, not fragmentation and not capacity%s",
                    said[2],
                    !strcmp(res->policy, "caching") || !strcmp(res->policy, "expandable")
                        ? " (PyTorch's rules: a request of 1 to 10 MiB takes a segment of its own of 20 MiB, "
                          "one of at most 1 MiB a 2 MiB segment of the small pool, and a block serves only "
                          "the stream it was made on)."
                        : " (its size rounding, its pools or its streams).");
    } else if (o->cause == HBM_CAUSE_OVERHEAD) {
      n += snprintf(buf + (n < (int)len ? n : (int)len), n < (int)len ? len - (size_t)n : 0,
                    "but the live blocks as placed hold %s, %s more than their requests (each rounded up), "
                    "so only %s was free to place it in: the policy's overhead, not fragmentation.",
                    size_text(o->allocated, e, 32), size_text(o->allocated - live, g, 32),
                    size_text(o->limit > o->allocated ? o->limit - o->allocated : 0, c, 32));
    } else if (o->cause == HBM_CAUSE_FRAGMENTATION) {
      n += snprintf(buf + (n < (int)len ? n : (int)len), n < (int)len ? len - (size_t)n : 0,
                    "but the largest free block only %s: fragmentation, not capacity (ratio %s = %s / %s - 1). "
                    "A perfectly packed device would have had room for it.",
                    said[2], frag_text(hbm_fragmentation_ratio(o->free_total, o->largest_free), c, 32),
                    said[1], said[2]);
    } else {
      n += snprintf(buf + (n < (int)len ? n : (int)len), n < (int)len ? len - (size_t)n : 0,
                    "and live plus the request exceed the capacity by %s: over capacity; no placement "
                    "could have served it.",
                    size_text(live + o->request - cap, e, 32));
    }
    if (r->nlayout)
      n += snprintf(buf + (n < (int)len ? n : (int)len), n < (int)len ? len - (size_t)n : 0,
                    " The layout then: %llu hole%s holding %s, the largest %s, across %llu range%s.",
                    (unsigned long long)f.lay.holes, f.lay.holes == 1 ? "" : "s", said[3], said[4],
                    (unsigned long long)f.lay.ranges,
                    f.lay.ranges == 1 ? "" : "s");
    n += snprintf(buf + (n < (int)len ? n : (int)len), n < (int)len ? len - (size_t)n : 0,
                  " %llu request%s failed in all (each skipped, its free ignored).",
                  (unsigned long long)res->failures, res->failures == 1 ? "" : "s");
    return n;
  }
  double retries = 0;
  for (int k = 0; k < res->ncounters; k++)
    if (!strcmp(res->counters[k].name, "alloc_retries")) retries = res->counters[k].value;
  char steps[48] = ""; /* a trace without step marks has none to count */
  if (rep->steps) snprintf(steps, sizeof steps, " in %llu step%s", (unsigned long long)rep->steps, rep->steps == 1 ? "" : "s");
  char eff[32];
  int n = snprintf(buf, len,
                   "No request failed%s. Peak reserved %s of %s (%s to spare), peak live %s: "
                   "%s%s. ",
                   steps, size_text(res->peak_reserved, a, 32), size_text(cap, b, 32),
                   size_text(cap > res->peak_reserved ? cap - res->peak_reserved : 0, c, 32),
                   size_text(res->peak_live, d, 32), res->peak_reserved ? "efficiency " : "nothing reserved, no efficiency",
                   res->peak_reserved ? hbm_report_efficiency_text(res, eff) : "");
  char how[160];
  sampling_text(rep, r, how, sizeof how);
  if (f.worst_frag > 0 || rep->largest_comm_request)
    n += snprintf(buf + (n < (int)len ? n : (int)len), n < (int)len ? len - (size_t)n : 0, "%s: ", how);
  if (f.worst_frag > 0)
    n += snprintf(buf + (n < (int)len ? n : (int)len), n < (int)len ? len - (size_t)n : 0,
                  "the worst fragmentation ratio, %s, came at step %llu (%s free, largest block %s)%s",
                  frag_text(f.worst_frag, c, 32), (unsigned long long)f.worst_frag_step, size_text(f.worst_frag_free, a, 32),
                  size_text(f.worst_frag_largest, b, 32), rep->largest_comm_request ? "; " : ".");
  /* Where a buffer that large was itself live at that moment, the low is the
   * buffer's own: no alarm to raise. */
  uint64_t comm_live = rep->largest_comm_request && f.min_largest_free < rep->largest_comm_request
                           ? largest_comm_live(rep->trace, f.min_largest_free_event) : 0;
  if (rep->largest_comm_request && comm_live >= rep->largest_comm_request)
    n += snprintf(buf + (n < (int)len ? n : (int)len), n < (int)len ? len - (size_t)n : 0,
                  "the largest free block was never below %s (step %llu), and the largest communication "
                  "buffer is %s: one that large was itself live at that moment, so that low is the "
                  "buffer's own.",
                  size_text(f.min_largest_free, a, 32), (unsigned long long)f.min_largest_free_step,
                  size_text(rep->largest_comm_request, b, 32));
  else if (rep->largest_comm_request)
    n += snprintf(buf + (n < (int)len ? n : (int)len), n < (int)len ? len - (size_t)n : 0,
                  "the largest free block was never below %s (step %llu), and the largest communication "
                  "buffer is %s, so %s.",
                  size_text(f.min_largest_free, a, 32), (unsigned long long)f.min_largest_free_step,
                  size_text(rep->largest_comm_request, b, 32),
                  f.min_largest_free >= rep->largest_comm_request
                      ? "it had room at every sample"
                      : "one that large would not have fit beside what was live at that moment");
  if (retries > 0)
    n += snprintf(buf + (n < (int)len ? n : (int)len), n < (int)len ? len - (size_t)n : 0,
                  " It got there by releasing its cached segments and retrying %.0f time%s (alloc_retries): "
                  "each is a device synchronisation in a real run.",
                  retries, retries == 1 ? "" : "s");
  return n;
}

/* ==== charts ===================================================================== */

enum { CHART_W = 960, CHART_H = 210, ML = 64, MR = 16, MT = 14, MB = 30 };

typedef struct plot {
  uint64_t x0, x1;   /* event range: every event, not from the first sample, which a trace
                      * whose one step mark is near its end (a snapshot) takes late */
  double y1;         /* top of the y axis (y0 = 0) */
} plot;

static double px(const plot *p, double event) {
  double w = CHART_W - ML - MR;
  return ML + (p->x1 > p->x0 ? (event - (double)p->x0) / (double)(p->x1 - p->x0) : 0) * w;
}
static double py(const plot *p, double v) {
  double h = CHART_H - MT - MB;
  if (v > p->y1) v = p->y1;
  if (v < 0) v = 0;
  return MT + h - (p->y1 > 0 ? v / p->y1 : 0) * h;
}

static double nice_step(double range, int ticks) {
  double raw = range / ticks, mag = pow(10, floor(log10(raw > 0 ? raw : 1)));
  double m = raw / mag;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * mag;
}

/* A byte axis in the unit its top calls for: 0.0 GiB on every line says nothing. */
static void byte_axis(double top, double *unit, const char **name, int *decimals) {
  static const struct { double unit; const char *name; } units[] = {
      {1024.0 * 1024 * 1024 * 1024, " TiB"}, {GIB, " GiB"}, {1024.0 * 1024, " MiB"}, {1024.0, " KiB"}, {1.0, " B"}};
  size_t i = 0;
  while (i + 1 < sizeof units / sizeof units[0] && top < units[i].unit) i++;
  *unit = units[i].unit;
  *name = units[i].name;
  *decimals = top / units[i].unit < 8 && units[i].unit > 1 ? 1 : 0;
}

/* Frame, horizontal grid with labels (y in `unit`), and step ticks from the samples. */
static void frame(sb *b, const plot *p, const hbm_report_run *r, double unit, const char *unit_name,
                  int decimals) {
  sb_printf(b, "<rect x='%d' y='%d' width='%d' height='%d' class='plotbg'/>\n", ML, MT,
            CHART_W - ML - MR, CHART_H - MT - MB);
  double step = nice_step(p->y1 / unit, 4);
  for (double v = 0; v <= p->y1 / unit + 1e-9; v += step) {
    double y = py(p, v * unit);
    sb_printf(b, "<line x1='%d' x2='%d' y1='%.1f' y2='%.1f' class='grid'/>", ML, CHART_W - MR, y, y);
    sb_printf(b, "<text x='%d' y='%.1f' class='ylab'>%.*f%s</text>\n", ML - 6, y + 4, decimals, v,
              unit_name);
  }
  /* step ticks: where the samples' step number changes */
  uint64_t last = r->nsamples ? r->samples[r->nsamples - 1].step : 0;
  double every = nice_step((double)(last ? last : 1), 8);
  if (every < 1) every = 1;
  uint64_t prev = UINT64_MAX;
  for (size_t i = 0; i < r->nsamples; i++) {
    const hbm_sample *s = &r->samples[i];
    if (s->step == prev) continue;
    prev = s->step;
    if (s->step == 0 || (s->step % (uint64_t)every) != 0) continue;
    double x = px(p, (double)s->event);
    sb_printf(b, "<line x1='%.1f' x2='%.1f' y1='%d' y2='%d' class='tick'/>", x, x, CHART_H - MB,
              CHART_H - MB + 4);
    sb_printf(b, "<text x='%.1f' y='%d' class='xlab'>%llu</text>\n", x, CHART_H - MB + 16,
              (unsigned long long)s->step);
  }
  sb_printf(b, "<text x='%d' y='%d' class='xname'>step</text>\n", CHART_W - MR, CHART_H - 2);
}

typedef enum { F_LIVE, F_ALLOCATED, F_RESERVED, F_LARGEST, F_FREE, F_FRAG, F_CALLS } field;

static double field_of(const hbm_sample *s, field f) {
  switch (f) {
    case F_LIVE: return (double)s->live;
    case F_ALLOCATED: return (double)s->allocated;
    case F_RESERVED: return (double)s->reserved;
    case F_LARGEST: return (double)s->largest_free;
    case F_FREE: return (double)s->free_total;
    case F_FRAG: return s->fragmentation;
    case F_CALLS: return (double)s->backend_calls;
  }
  return 0;
}

/* A polyline (or a filled area down to 0) of one field, PLOT_POINTS buckets,
 * each keeping its maximum (or minimum with `lowest`). */
static void line(sb *b, const plot *p, const hbm_report_run *r, field f, int lowest, const char *cls,
                 int area) {
  if (!r->nsamples) return;
  size_t n = r->nsamples, buckets = n < PLOT_POINTS ? n : PLOT_POINTS;
  sb_printf(b, "<%s class='%s' points='", area ? "polygon" : "polyline", cls);
  if (area) sb_printf(b, "%.1f,%.1f ", px(p, (double)r->samples[0].event), py(p, 0));
  for (size_t k = 0; k < buckets; k++) {
    size_t i0 = k * n / buckets, i1 = (k + 1) * n / buckets;
    if (i1 <= i0) continue;
    double v = field_of(&r->samples[i0], f);
    for (size_t i = i0 + 1; i < i1; i++) {
      double x = field_of(&r->samples[i], f);
      if (lowest ? x < v : x > v) v = x;
    }
    double xm = (double)r->samples[(i0 + i1 - 1) / 2].event;
    sb_printf(b, "%.1f,%.1f ", px(p, xm), py(p, v));
  }
  if (area) sb_printf(b, "%.1f,%.1f", px(p, (double)r->samples[n - 1].event), py(p, 0));
  sb_printf(b, "'/>\n");
}

/* The range each bucket spans (min to max) as a filled band. */
static void band(sb *b, const plot *p, const hbm_report_run *r, field f, const char *cls) {
  if (!r->nsamples) return;
  size_t n = r->nsamples, buckets = n < PLOT_POINTS ? n : PLOT_POINTS;
  double *lo = malloc(buckets * sizeof *lo), *hi = malloc(buckets * sizeof *hi), *xs = malloc(buckets * sizeof *xs);
  if (!lo || !hi || !xs) {
    free(lo);
    free(hi);
    free(xs);
    b->failed = 1;
    return;
  }
  size_t m = 0;
  for (size_t k = 0; k < buckets; k++) {
    size_t i0 = k * n / buckets, i1 = (k + 1) * n / buckets;
    if (i1 <= i0) continue;
    double mn = field_of(&r->samples[i0], f), mx = mn;
    for (size_t i = i0 + 1; i < i1; i++) {
      double v = field_of(&r->samples[i], f);
      if (v < mn) mn = v;
      if (v > mx) mx = v;
    }
    xs[m] = px(p, (double)r->samples[(i0 + i1 - 1) / 2].event);
    lo[m] = py(p, mn);
    hi[m] = py(p, mx);
    m++;
  }
  sb_printf(b, "<polygon class='%s' points='", cls);
  for (size_t k = 0; k < m; k++) sb_printf(b, "%.1f,%.1f ", xs[k], hi[k]);
  for (size_t k = m; k-- > 0;) sb_printf(b, "%.1f,%.1f ", xs[k], lo[k]);
  sb_printf(b, "'/>\n");
  free(lo);
  free(hi);
  free(xs);
}

static void failure_marker(sb *b, const plot *p, const hbm_report_run *r) {
  if (!r->result.oom && r->nlayout) {
    double x = px(p, (double)r->layout_event);
    sb_printf(b, "<line x1='%.1f' x2='%.1f' y1='%d' y2='%d' class='momentline'/>", x, x, MT, CHART_H - MB);
    sb_printf(b, "<text x='%.1f' y='%d' class='momentlab'>layout below, step %llu</text>\n", x + 4, MT + 12,
              (unsigned long long)r->layout_step);
  }
  if (!r->result.oom) return;
  double x = px(p, (double)r->result.first_oom.event);
  sb_printf(b, "<line x1='%.1f' x2='%.1f' y1='%d' y2='%d' class='oomline'/>", x, x, MT, CHART_H - MB);
  if (r->result.first_oom.cause == HBM_CAUSE_START)
    sb_printf(b, "<text x='%.1f' y='%d' class='oomlab'>the starting state did not fit</text>\n", x + 4, MT + 12);
  else
    sb_printf(b, "<text x='%.1f' y='%d' class='oomlab'>first failure, step %llu</text>\n", x + 4, MT + 12,
              (unsigned long long)r->result.first_oom.step);
}

static void hline(sb *b, const plot *p, double v, const char *cls, const char *label) {
  double y = py(p, v);
  sb_printf(b, "<line x1='%d' x2='%d' y1='%.1f' y2='%.1f' class='%s'/>", ML, CHART_W - MR, y, y, cls);
  if (label) {
    sb_printf(b, "<text x='%d' y='%.1f' class='hlab'>", CHART_W - MR - 4, y - 4);
    sb_esc(b, label);
    sb_printf(b, "</text>\n");
  }
}

static void svg_open(sb *b, const char *label) {
  sb_printf(b, "<svg viewBox='0 0 %d %d' width='%d' height='%d' role='img' aria-label='", CHART_W, CHART_H,
            CHART_W, CHART_H);
  sb_esc(b, label);
  sb_printf(b, "'>\n");
}

static void chart_memory(sb *b, const hbm_report *rep, const hbm_report_run *r) {
  uint64_t cap = r->result.capacity ? r->result.capacity : rep->capacity;
  plot p = {0, rep->events ? rep->events : 1, (double)cap * 1.06};
  svg_open(b, "live, allocated and reserved bytes over time");
  double unit;
  const char *unit_name;
  int decimals;
  byte_axis(p.y1, &unit, &unit_name, &decimals);
  frame(b, &p, r, unit, unit_name, decimals);
  /* exact: the run's own (requests it failed are not live), else the trace's
   * where the replay served every request; a start that did not fit has
   * neither, only its sample */
  int own = r->live_buckets && !(r->result.oom && r->result.first_oom.cause == HBM_CAUSE_START);
  size_t nb = own ? r->live_buckets : !r->result.oom ? rep->live_buckets : 0;
  const uint64_t *lo = own ? r->live_min : rep->live_min, *hi = own ? r->live_max : rep->live_max;
  if (nb && rep->events) {
    sb_printf(b, "<polygon class='live' points='");
    for (size_t k = 0; k < nb; k++) {
      double mid = ((double)k + 0.5) * (double)rep->events / (double)nb;
      sb_printf(b, "%.1f,%.1f ", px(&p, mid), py(&p, (double)hi[k]));
    }
    for (size_t k = nb; k-- > 0;) {
      double mid = ((double)k + 0.5) * (double)rep->events / (double)nb;
      sb_printf(b, "%.1f,%.1f ", px(&p, mid), py(&p, (double)lo[k]));
    }
    sb_printf(b, "'/>\n");
  } else {
    band(b, &p, r, F_LIVE, "live");
    line(b, &p, r, F_LIVE, 0, "liveline", 0);
  }
  line(b, &p, r, F_ALLOCATED, 0, "allocated", 0);
  line(b, &p, r, F_RESERVED, 0, "reserved", 0);
  char c[32], l[64];
  snprintf(l, sizeof l, "capacity %s", size_text(cap, c, sizeof c));
  hline(b, &p, (double)cap, "capline", l);
  snprintf(l, sizeof l, "peak live %s", size_text(r->result.peak_live, c, sizeof c));
  double y = py(&p, (double)r->result.peak_live);
  sb_printf(b, "<line x1='%d' x2='%d' y1='%.1f' y2='%.1f' class='peakline'/>", ML, CHART_W - MR, y, y);
  sb_printf(b, "<text x='%d' y='%.1f' class='peaklab'>", ML + 4, y - 3);
  sb_esc(b, l);
  sb_printf(b, "</text>\n");
  failure_marker(b, &p, r);
  sb_printf(b, "</svg>\n");
}

/* Which purposes any sample has live bytes of; 1 when one has. */
static int purposes_sampled(const hbm_report_run *r, uint64_t any[HBM_TAG_COUNT]) {
  int used = 0;
  for (int t = 0; t < HBM_TAG_COUNT; t++) any[t] = 0;
  for (size_t i = 0; i < r->nsamples; i++)
    for (int t = 0; t < HBM_TAG_COUNT; t++) any[t] |= r->samples[i].live_by_tag[t];
  for (int t = 0; t < HBM_TAG_COUNT; t++) used |= any[t] != 0;
  return used;
}

static void legend_item(sb *b, const char *color, const char *label, int line);

/* Live by purpose at the samples, stacked in the order of the strip's legend
 * (other last): per slice of samples, the one with the most live, so the
 * stack's top is the slice's highest sampled live. `any`: purposes_sampled's. */
static void chart_purpose(sb *b, const hbm_report *rep, const hbm_report_run *r, const uint64_t any[HBM_TAG_COUNT]) {
  size_t n = r->nsamples, buckets = n < PLOT_POINTS ? n : PLOT_POINTS;
  size_t *pick = malloc(buckets * sizeof *pick);
  double *base = calloc(buckets, sizeof *base);
  if (!pick || !base) {
    free(pick);
    free(base);
    b->failed = 1;
    return;
  }
  size_t m = 0;
  for (size_t k = 0; k < buckets; k++) {
    size_t i0 = k * n / buckets, i1 = (k + 1) * n / buckets, best = i0;
    if (i1 <= i0) continue;
    for (size_t i = i0 + 1; i < i1; i++)
      if (r->samples[i].live > r->samples[best].live) best = i;
    pick[m++] = best;
  }
  uint64_t cap = r->result.capacity ? r->result.capacity : rep->capacity;
  plot p = {0, rep->events ? rep->events : 1, (double)cap * 1.06};
  sb_printf(b, "<div class='legend'>");
  for (int k = 1; k <= HBM_TAG_COUNT; k++) { /* other last, as in the strip */
    int t = k % HBM_TAG_COUNT;
    if (any[t]) legend_item(b, tag_colors[t], hbm_tag_name((hbm_tag)t), 0);
  }
  sb_printf(b, "</div>\n");
  svg_open(b, "live bytes by purpose over time, at the samples");
  double unit;
  const char *unit_name;
  int decimals;
  byte_axis(p.y1, &unit, &unit_name, &decimals);
  frame(b, &p, r, unit, unit_name, decimals);
  for (int k = 1; k <= HBM_TAG_COUNT; k++) {
    int t = k % HBM_TAG_COUNT;
    if (!any[t]) continue;
    sb_printf(b, "<polygon style='fill:%s;stroke:none' points='", tag_colors[t]);
    for (size_t q = 0; q < m; q++) {
      const hbm_sample *s = &r->samples[pick[q]];
      sb_printf(b, "%.1f,%.1f ", px(&p, (double)s->event), py(&p, base[q] + (double)s->live_by_tag[t]));
    }
    for (size_t q = m; q-- > 0;) sb_printf(b, "%.1f,%.1f ", px(&p, (double)r->samples[pick[q]].event), py(&p, base[q]));
    sb_printf(b, "'/>\n");
    for (size_t q = 0; q < m; q++) base[q] += (double)r->samples[pick[q]].live_by_tag[t];
  }
  char c[32], l[64];
  snprintf(l, sizeof l, "capacity %s", size_text(cap, c, sizeof c));
  hline(b, &p, (double)cap, "capline", l);
  failure_marker(b, &p, r);
  sb_printf(b, "</svg>\n");
  free(pick);
  free(base);
}

static void chart_frag(sb *b, const hbm_report *rep, const hbm_report_run *r, double worst) {
  double top = worst * 1.15;
  if (top < 0.25) top = 0.25;
  int clipped = 0;
  if (top > 12) {
    top = 12;
    clipped = 1;
  }
  plot p = {0, rep->events ? rep->events : 1, top};
  svg_open(b, "fragmentation ratio over time");
  frame(b, &p, r, 1.0, "", top < 2 ? 2 : 1);
  band(b, &p, r, F_FRAG, "fragband");
  line(b, &p, r, F_FRAG, 0, "frag", 0);
  hline(b, &p, 0.05, "goal", "hbm goal 0.05");
  if (top > 4.7) hline(b, &p, 4.7, "ref", "field report, step 400: 4.7");
  if (clipped)
    sb_printf(b, "<text x='%d' y='%d' class='note'>clipped at 12 (largest free near 0)</text>\n", ML + 6, MT + 12);
  failure_marker(b, &p, r);
  sb_printf(b, "</svg>\n");
}

static void chart_free(sb *b, const hbm_report *rep, const hbm_report_run *r) {
  uint64_t cap = r->result.capacity ? r->result.capacity : rep->capacity;
  double top = 0;
  for (size_t i = 0; i < r->nsamples; i++) {
    if ((double)r->samples[i].free_total > top) top = (double)r->samples[i].free_total;
    if ((double)r->samples[i].largest_free > top) top = (double)r->samples[i].largest_free;
  }
  if (top < (double)rep->largest_comm_request) top = (double)rep->largest_comm_request;
  if (top <= 0) top = (double)cap;
  top *= 1.08;
  plot p = {0, rep->events ? rep->events : 1, top};
  svg_open(b, "free total and largest free block over time");
  double unit;
  const char *unit_name;
  int decimals;
  byte_axis(top, &unit, &unit_name, &decimals);
  frame(b, &p, r, unit, unit_name, decimals);
  band(b, &p, r, F_FREE, "freetotal");
  band(b, &p, r, F_LARGEST, "largestband");
  line(b, &p, r, F_LARGEST, 1, "largest", 0);
  if (rep->largest_comm_request) {
    char c[32], l[80];
    snprintf(l, sizeof l, "largest comm buffer %s", size_text(rep->largest_comm_request, c, sizeof c));
    hline(b, &p, (double)rep->largest_comm_request, "commline", l);
  }
  failure_marker(b, &p, r);
  sb_printf(b, "</svg>\n");
}

/* Backend calls so far: a step that churns shows as a climb, steady steps
 * that reuse their memory as a flat line. */
static void chart_calls(sb *b, const hbm_report *rep, const hbm_report_run *r) {
  double top = r->nsamples ? (double)r->samples[r->nsamples - 1].backend_calls : 0;
  top = top < 4 ? 4 : top * 1.08;
  plot p = {0, rep->events ? rep->events : 1, top};
  svg_open(b, "backend calls so far over time");
  frame(b, &p, r, 1.0, "", 0);
  line(b, &p, r, F_CALLS, 0, "calls", 0);
  failure_marker(b, &p, r);
  sb_printf(b, "</svg>\n");
}

/* Spreads `bytes` of one class over the strip's columns from byte position
 * *pos. Column c holds bytes [c * all / COLUMNS, (c + 1) * all / COLUMNS);
 * integer arithmetic, so a boundary never swallows a whole block. */
static void strip_add(double *col, int nclass, int cls, uint64_t *pos, uint64_t bytes, uint64_t all) {
  while (bytes) {
    uint64_t c = (uint64_t)((unsigned __int128)*pos * STRIP_COLUMNS / all);
    uint64_t take = bytes;
    if (c >= STRIP_COLUMNS - 1) {
      c = STRIP_COLUMNS - 1;
    } else { /* up to the column's end, rounded up so that it lies past *pos */
      uint64_t end = (uint64_t)(((unsigned __int128)(c + 1) * all + STRIP_COLUMNS - 1) / STRIP_COLUMNS);
      if (end - *pos < take) take = end - *pos;
    }
    col[c * (uint64_t)nclass + (uint64_t)cls] += (double)take;
    *pos += take;
    bytes -= take;
  }
}

/* The layout at the first failure: address ranges side by side (gaps between
 * ranges dropped), unreserved capacity after them, STRIP_COLUMNS columns each
 * stacked by what its bytes are. */
static void strip(sb *b, const hbm_report *rep, const hbm_report_run *r, const run_facts *f) {
  uint64_t cap = r->result.capacity ? r->result.capacity : rep->capacity;
  uint64_t total = f->lay.span, unreserved = cap > total ? cap - total : 0;
  uint64_t all = total + unreserved;
  if (!all) return;
  enum { NCLASS = HBM_TAG_COUNT + 2, HOLE = HBM_TAG_COUNT, UNRES = HBM_TAG_COUNT + 1 };
  double *col = calloc((size_t)STRIP_COLUMNS * NCLASS, sizeof *col);
  if (!col) {
    b->failed = 1;
    return;
  }
  double per = (double)all / STRIP_COLUMNS;
  uint64_t pos = 0;
  for (size_t i = 0; i < r->nlayout; i++) {
    const hbm_layout_run *l = &r->layout[i];
    strip_add(col, NCLASS, l->live ? (l->tag < HBM_TAG_COUNT ? l->tag : 0) : HOLE, &pos, l->size, all);
  }
  strip_add(col, NCLASS, UNRES, &pos, unreserved, all);
  const int W = CHART_W, H = 96, top = 22, sh = 44, left = 8, width = W - 16;
  sb_printf(b, "<svg viewBox='0 0 %d %d' width='%d' height='%d' role='img' aria-label='layout at %s'>\n",
            W, H, W, H, r->result.oom ? "the first failure" : "the tightest moment sampled");
  sb_printf(b, "<defs><pattern id='hatch' width='6' height='6' patternUnits='userSpaceOnUse' "
               "patternTransform='rotate(45)'><rect width='6' height='6' fill='#f4f4f4'/>"
               "<line x1='0' y1='0' x2='0' y2='6' stroke='#c8c8c8' stroke-width='2'/></pattern></defs>\n");
  double cw = (double)width / STRIP_COLUMNS;
  sb_printf(b, "<g shape-rendering='crispEdges'>");
  for (size_t c = 0; c < STRIP_COLUMNS;) {
    double sum = 0;
    int only = -1, kinds = 0;
    for (int k = 0; k < NCLASS; k++) {
      double v = col[c * NCLASS + k];
      sum += v;
      if (v > 0) {
        kinds++;
        only = k;
      }
    }
    if (sum <= 0) {
      c++;
      continue;
    }
    if (kinds == 1) { /* a run of columns holding one kind only: one rectangle */
      size_t e = c + 1;
      while (e < STRIP_COLUMNS) {
        int same = col[e * NCLASS + only] > 0;
        for (int k = 0; k < NCLASS && same; k++) same = k == only || col[e * NCLASS + k] <= 0;
        if (!same) break;
        e++;
      }
      const char *fill = only == HOLE ? HOLE_COLOR : only == UNRES ? UNRESERVED_COLOR : tag_colors[only];
      sb_printf(b, "<rect x='%.2f' y='%d' width='%.2f' height='%d' fill='%s'/>", left + (double)c * cw, top,
                (double)(e - c) * cw, sh, fill);
      c = e;
      continue;
    }
    double y = top;
    for (int k = 0; k < NCLASS; k++) {
      double v = col[c * NCLASS + k];
      if (v <= 0) continue;
      double hh = v / sum * sh;
      const char *fill = k == HOLE ? HOLE_COLOR : k == UNRES ? UNRESERVED_COLOR : tag_colors[k];
      sb_printf(b, "<rect x='%.2f' y='%.2f' width='%.2f' height='%.2f' fill='%s'/>", left + (double)c * cw, y, cw,
                hh, fill);
      y += hh;
    }
    c++;
  }
  sb_printf(b, "</g>");
  sb_printf(b, "\n<rect x='%d' y='%d' width='%d' height='%d' fill='none' stroke='#333'/>\n", left, top, width, sh);
  /* range boundaries */
  uint64_t at = 0, end = 0;
  for (size_t i = 0; i < r->nlayout; i++) {
    const hbm_layout_run *l = &r->layout[i];
    if (i > 0 && l->addr != end) {
      double x = left + (double)at / (double)all * width;
      sb_printf(b, "<line x1='%.1f' x2='%.1f' y1='%d' y2='%d' class='rangeb'/>", x, x, top + sh, top + sh + 5);
    }
    at += l->size;
    end = l->addr + l->size;
  }
  /* the largest holes, marked above the strip; labels only where they do not collide */
  double label_x[3];
  int nlabels = 0;
  uint64_t marked[3] = {0, 0, 0};
  for (int m = 0; m < 3; m++) {
    uint64_t best = 0, best_at = 0, off = 0;
    for (size_t i = 0; i < r->nlayout; i++) {
      const hbm_layout_run *l = &r->layout[i];
      int taken = 0;
      for (int q = 0; q < m; q++) taken |= marked[q] == off + 1;
      if (!l->live && l->size > best && !taken) {
        best = l->size;
        best_at = off;
      }
      off += l->size;
    }
    if (!best) break;
    marked[m] = best_at + 1;
    double x = left + ((double)best_at + (double)best / 2) / (double)all * width;
    sb_printf(b, "<path d='M%.1f %d l-5 -8 h10 z' class='holemark'/>", x, top - 2);
    int clear = 1;
    for (int q = 0; q < nlabels; q++) clear &= fabs(label_x[q] - x) > 70;
    if (clear) {
      char s[32];
      double lx = x < left + 35 ? left + 35 : x > left + width - 35 ? left + width - 35 : x;
      sb_printf(b, "<text x='%.1f' y='%d' class='holelab'>%s</text>\n", lx, top - 12, size_text(best, s, sizeof s));
      label_x[nlabels++] = x;
    }
  }
  char s1[32];
  sb_printf(b, "<text x='%d' y='%d' class='lableft'>low addresses</text>", left, H - 8);
  sb_printf(b, "<text x='%d' y='%d' class='labright'>%s per column</text>\n", left + width, H - 8,
            size_text((uint64_t)per, s1, sizeof s1));
  sb_printf(b, "</svg>\n");
  free(col);
}

/* ==== the page ==================================================================== */

static const char *css =
    "body{font:14px/1.45 -apple-system,'Segoe UI',Roboto,'DejaVu Sans',Helvetica,Arial,sans-serif;"
    "color:#1d1d1f;background:#fafafa;margin:0}"
    "main{max-width:1000px;margin:0 auto;padding:24px 20px 48px}"
    "h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:32px 0 6px;padding-top:12px;border-top:1px solid #ddd}"
    "h3{font-size:14px;margin:16px 0 4px;color:#444}"
    ".sub{color:#555;margin:0 0 16px}.mono{font-family:'DejaVu Sans Mono',Menlo,Consolas,monospace;font-size:12px}"
    "table{border-collapse:collapse;width:100%;background:#fff;margin:8px 0 4px}"
    "th,td{padding:5px 8px;border-bottom:1px solid #e4e4e4;text-align:right;white-space:nowrap}"
    "th{background:#f0f0f0;font-weight:600;font-size:12px}td:first-child,th:first-child{text-align:left}"
    "td.fail{color:#b00020;font-weight:600}td.ok{color:#2e7d32}"
    ".finding{background:#fff;border-left:4px solid #4e79a7;padding:8px 12px;margin:8px 0}"
    ".finding.bad{border-left-color:#e15759}"
    ".legend{font-size:12px;color:#444;margin:2px 0 6px}.legend span{display:inline-block;margin-right:14px}"
    ".sw{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px;border:1px solid #999}"
    "svg{display:block;background:#fff;border:1px solid #e4e4e4;margin:2px 0 6px;max-width:100%;height:auto}"
    ".plotbg{fill:#fff}.grid{stroke:#eee}.tick{stroke:#888}"
    ".ylab{font-size:11px;fill:#555;text-anchor:end}.xlab{font-size:11px;fill:#555;text-anchor:middle}"
    ".xname{font-size:11px;fill:#777;text-anchor:end}.note{font-size:11px;fill:#b00020}"
    ".live{fill:#4e79a7;fill-opacity:.35;stroke:#4e79a7;stroke-width:.6}"
    ".allocated{fill:none;stroke:#f28e2b;stroke-width:1.3}.liveline{fill:none;stroke:#4e79a7;stroke-width:1.2}"
    ".reserved{fill:none;stroke:#222;stroke-width:1.5}"
    ".capline{stroke:#b00020;stroke-dasharray:6 4;stroke-width:1.2}"
    ".commline{stroke:#e15759;stroke-dasharray:3 3;stroke-width:1.2}"
    ".goal{stroke:#2e7d32;stroke-dasharray:5 4}.ref{stroke:#999;stroke-dasharray:2 4}"
    ".hlab{font-size:11px;fill:#555;text-anchor:end}"
    ".frag{fill:none;stroke:#8e44ad;stroke-width:1}.fragband{fill:#8e44ad;fill-opacity:.18;stroke:none}"
    ".largestband{fill:#1b7f79;fill-opacity:.18;stroke:none}"
    ".peakline{stroke:#4e79a7;stroke-dasharray:2 3}.peaklab{font-size:11px;fill:#4e79a7}"
    ".freetotal{fill:#999;fill-opacity:.25;stroke:#999;stroke-width:.6}"
    ".largest{fill:none;stroke:#1b7f79;stroke-width:1.5}"
    ".calls{fill:none;stroke:#59a14f;stroke-width:1.5}"
    ".momentline{stroke:#555;stroke-dasharray:4 3}.momentlab{font-size:11px;fill:#555}"
    ".oomline{stroke:#b00020;stroke-width:1.5}.oomlab{font-size:11px;fill:#b00020;font-weight:600}"
    ".lableft{font-size:11px;fill:#555;text-anchor:start}.labright{font-size:11px;fill:#555;text-anchor:end}"
    ".rangeb{stroke:#333;stroke-width:1}.holemark{fill:#333}.holelab{font-size:11px;fill:#333;text-anchor:middle}"
    "footer{color:#666;font-size:12px;margin-top:32px;border-top:1px solid #ddd;padding-top:8px}";

static void legend_item(sb *b, const char *color, const char *label, int line) {
  if (line)
    sb_printf(b, "<span><span class='sw' style='background:%s;height:3px;border:0;vertical-align:3px'></span>%s</span>",
              color, label);
  else
    sb_printf(b, "<span><span class='sw' style='background:%s'></span>%s</span>", color, label);
}

static void summary_table(sb *b, const hbm_report *rep) {
  sb_printf(b, "<table><tr><th>policy</th><th>peak reserved</th><th>efficiency</th><th>max frag. ratio</th>"
               "<th>first failure: step</th><th>request</th><th>free total</th><th>largest free</th>"
               "<th>cause</th><th>failed requests</th></tr>\n");
  for (int i = 0; i < rep->nruns; i++) {
    const hbm_report_run *r = &rep->runs[i];
    const hbm_replay_result *x = &r->result;
    char a[32];
    sb_printf(b, "<tr><td><a href='#p-%s'>", x->policy);
    sb_esc(b, x->policy);
    if (r->error) {
      sb_printf(b, "</a></td><td colspan='9' class='fail'>replay error: %s</td></tr>\n", hbm_strerror(r->error));
      continue;
    }
    char frag[32];
    if (x->max_frag >= 1e9) snprintf(frag, sizeof frag, "infinite"); /* as frag_text says it */
    else hbm_snprintf(frag, sizeof frag, "%.3f", x->max_frag);
    char eff[32];
    sb_printf(b, "</a></td><td>%s</td><td>%s</td><td>%s</td>", size_text(x->peak_reserved, a, 32),
              hbm_report_efficiency_text(x, eff), frag);
    char step[32];
    if (x->first_oom.cause == HBM_CAUSE_START) snprintf(step, sizeof step, "before event 0");
    else snprintf(step, sizeof step, "%llu", (unsigned long long)x->first_oom.step);
    if (x->oom) {
      const hbm_oom_report *o = &x->first_oom;
      char said[3][32]; /* as the text table gives them */
      hbm_report_sizes_apart((const uint64_t[]){o->request, o->free_total, o->largest_free}, 3, said);
      sb_printf(b, "<td class='fail'>%s</td><td>%s</td><td>%s</td><td>%s</td><td class='fail'>%s%s</td><td>%llu</td></tr>\n",
                step, said[0], said[1], said[2], hbm_oom_cause_name(o->cause), o->refused ? " (PyTorch refused it too)" : "",
                (unsigned long long)x->failures);
    }
    else
      sb_printf(b, "<td class='ok'>none%s</td><td>-</td><td>-</td><td>-</td><td>-</td><td>0</td></tr>\n",
                x->refused_placed ? " (it placed what PyTorch refused)" : "");
  }
  sb_printf(b, "</table>\n");
}

int hbm_report_html(const hbm_report *rep, char **html, size_t *len) {
  *html = NULL;
  if (len) *len = 0;
  sb b = {0};
  char a[32], c[32], d[32];
  const char *title = rep->title ? rep->title : "hbm replay report";
  sb_printf(&b, "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>\n"
                "<meta name='viewport' content='width=device-width,initial-scale=1'>\n<title>");
  sb_esc(&b, title);
  sb_printf(&b, "</title>\n<style>%s</style></head>\n<body><main>\n<h1>", css);
  sb_esc(&b, title);
  sb_printf(&b, "</h1>\n<p class='sub'>");
  sb_esc(&b, rep->workload ? rep->workload : "");
  sb_printf(&b, "<br>capacity %s &middot; %llu event%s &middot; %llu step%s &middot; peak live %s",
            size_text(rep->capacity, a, 32), (unsigned long long)rep->events, rep->events == 1 ? "" : "s",
            (unsigned long long)rep->steps, rep->steps == 1 ? "" : "s",
            size_text(rep->peak_live, c, 32));
  if (rep->largest_comm_request)
    sb_printf(&b, " &middot; largest communication buffer %s", size_text(rep->largest_comm_request, d, 32));
  sb_printf(&b, "</p>\n");
  if (rep->notes) {
    sb_printf(&b, "<p>");
    sb_esc(&b, rep->notes);
    sb_printf(&b, "</p>\n");
  }

  sb_printf(&b, "<h3>Summary</h3>\n");
  summary_table(&b, rep);
  sb_printf(&b, "<h3>Diagnosis</h3>\n");
  char text[2048];
  for (int i = 0; i < rep->nruns; i++) {
    const hbm_report_run *r = &rep->runs[i];
    hbm_report_diagnosis(rep, r, text, sizeof text);
    sb_printf(&b, "<div class='finding%s'><b>", r->result.oom || r->error ? " bad" : "");
    sb_esc(&b, r->result.policy);
    sb_printf(&b, "</b>: ");
    sb_esc(&b, text);
    sb_printf(&b, "</div>\n");
  }

  for (int i = 0; i < rep->nruns; i++) {
    const hbm_report_run *r = &rep->runs[i];
    run_facts f;
    facts_of(rep, r, &f);
    sb_printf(&b, "<h2 id='p-%s'>", r->result.policy);
    sb_esc(&b, r->result.policy);
    sb_printf(&b, "</h2>\n");
    if (r->conf) { /* figures under settings read as the defaults' where the page does not say */
      sb_printf(&b, "<p class='sub'>settings <span class='mono'>");
      sb_esc(&b, r->conf);
      sb_printf(&b, "</span></p>\n");
    }
    if (r->error) {
      sb_printf(&b, "<p>The replay could not run: %s.</p>\n", hbm_strerror(r->error));
      continue;
    }
    char eff[32];
    sb_printf(&b, "<p class='sub'>peak reserved %s &middot; peak allocated %s &middot; efficiency %s "
                  "&middot; backend calls %llu &middot; %.0f ns per event</p>\n",
              size_text(r->result.peak_reserved, a, 32), size_text(r->result.peak_allocated, c, 32),
              hbm_report_efficiency_text(&r->result, eff), (unsigned long long)r->result.backend_calls,
              r->result.ns_per_event);
    if (r->result.ncounters) {
      sb_printf(&b, "<p class='sub mono'>");
      for (int k = 0; k < r->result.ncounters; k++) {
        sb_esc(&b, r->result.counters[k].name);
        sb_printf(&b, " %.0f%s", r->result.counters[k].value, k + 1 < r->result.ncounters ? " &middot; " : "");
      }
      sb_printf(&b, "</p>\n");
    }
    sb_printf(&b, "<h3>Memory over time</h3><div class='legend'>");
    legend_item(&b, "rgba(78,121,167,.45)", "live (requests)", 0);
    legend_item(&b, "#f28e2b", "allocated (blocks)", 1);
    legend_item(&b, "#222", "reserved (from the device)", 1);
    legend_item(&b, "#b00020", "capacity", 1);
    sb_printf(&b, "</div>\n");
    chart_memory(&b, rep, r);
    uint64_t sampled[HBM_TAG_COUNT];
    if (purposes_sampled(r, sampled)) { /* a run with nothing live at any sample draws none */
      sb_printf(&b, "<h3>Live by purpose, at the samples</h3>\n");
      chart_purpose(&b, rep, r, sampled);
    }
    sb_printf(&b, "<h3>Fragmentation ratio (free total / largest free &minus; 1)</h3>\n");
    chart_frag(&b, rep, r, r->result.max_frag);
    sb_printf(&b, "<h3>Free total and largest free block</h3><div class='legend'>");
    legend_item(&b, "rgba(150,150,150,.5)", "free total (capacity, or the policy's limit, &minus; live)", 0);
    legend_item(&b, "#1b7f79", "largest free block", 1);
    if (rep->largest_comm_request) legend_item(&b, "#e15759", "largest communication buffer", 1);
    sb_printf(&b, "</div>\n");
    chart_free(&b, rep, r);
    sb_printf(&b, "<h3>Backend calls so far (%llu after the first step)</h3>\n",
              (unsigned long long)r->result.backend_calls_after_first_step);
    chart_calls(&b, rep, r);
    if (r->result.oom && r->result.first_oom.cause == HBM_CAUSE_START) {
      sb_printf(&b, "<h3>No layout: the starting state (%s live) did not fit, and no event ran</h3>\n",
                size_text(r->result.first_oom.request, a, 32));
    } else if (r->nlayout || r->result.oom) {
      if (r->result.oom) {
        const hbm_oom_report *o = &r->result.first_oom;
        char said[3][32]; /* as the table above gives them */
        hbm_report_sizes_apart((const uint64_t[]){o->request, o->free_total, o->largest_free}, 3, said);
        sb_printf(&b, "<h3>Layout at the first failure (step %llu, a %s request, largest free %s)</h3>",
                  (unsigned long long)o->step, said[0], said[2]);
      } else
        sb_printf(&b, "<h3>Layout at the tightest moment sampled%s (step %llu, largest free %s, live %s; no request failed)</h3>",
                  tightest_skips(r) ? " after steps 0 and 1" : "",
                  (unsigned long long)r->layout_step, size_text(r->layout_largest_free, a, 32),
                  size_text(r->layout_live, c, 32));
      sb_printf(&b, "<div class='legend'>");
      for (int t = 1; t < HBM_TAG_COUNT; t++) legend_item(&b, tag_colors[t], hbm_tag_name((hbm_tag)t), 0);
      if (f.lay.live_by_tag[0]) legend_item(&b, tag_colors[0], "other", 0);
      legend_item(&b, "#fff", "hole (free)", 0);
      legend_item(&b, "repeating-linear-gradient(45deg,#f4f4f4 0 3px,#c8c8c8 3px 5px)", "not reserved", 0);
      sb_printf(&b, "</div>\n");
      if (r->nlayout) {
        strip(&b, rep, r, &f);
        sb_printf(&b, "<p class='sub'>%llu hole%s, %s in all, the largest %s (marked); placed by purpose:",
                  (unsigned long long)f.lay.holes, f.lay.holes == 1 ? "" : "s", size_text(f.lay.hole_bytes, a, 32),
                  size_text(f.lay.largest_hole, c, 32));
        for (int t = 0; t < HBM_TAG_COUNT; t++)
          if (f.lay.live_by_tag[t]) sb_printf(&b, " %s %s", hbm_tag_name((hbm_tag)t), size_text(f.lay.live_by_tag[t], a, 32));
        sb_printf(&b, ". The strip puts the address ranges the policy holds side by side (ticks below mark "
                      "gaps between ranges), then the capacity it has not reserved.");
        uint64_t lf = r->result.oom ? r->result.first_oom.largest_free : r->layout_largest_free;
        if (lf > f.lay.largest_hole)
          sb_printf(&b, " Its largest free (%s) exceeds the largest hole because it counts what the policy "
                        "would release or map on pressure (idle cached segments, unmapped pages, unreserved "
                        "capacity), as docs/design.md defines it.",
                    size_text(lf, a, 32));
        sb_printf(&b, "</p>\n");
      } else {
        sb_printf(&b, "<p class='sub'>The policy reported no layout at the failure.</p>\n");
      }
    } else {
      if (r->layout_error)
        sb_printf(&b, "<p class='sub'>No request failed; its layout at the tightest moment was not drawn: %s.</p>\n",
                  hbm_strerror(r->layout_error));
      else
        sb_printf(&b, "<p class='sub'>No request failed; no layout was taken.</p>\n");
    }
    hbm_report_diagnosis(rep, r, text, sizeof text);
    sb_printf(&b, "<div class='finding%s'>", r->result.oom ? " bad" : "");
    sb_esc(&b, text);
    sb_printf(&b, "</div>\n");
  }

  sb_printf(&b, "<footer>Words as in docs/design.md: <b>live</b> = sum of requests not freed; <b>allocated</b> = "
                "blocks handed out; <b>reserved</b> = held from the device; <b>free total</b> = capacity &minus; "
                "live (the policy's limit &minus; live where a setting caps what it may hold); <b>largest free</b> = the largest request that would succeed now without moving data; "
                "<b>efficiency</b> = peak live / peak reserved. Lines keep each bucket's worst value "
                "(at most %d points per line). Cause, the first that holds: <i>capacity</i> when live + request &gt; "
                "capacity; <i>rules</i> when the memory could hold it and the policy's own rules refused it; "
                "<i>overhead</i> when the live blocks as placed leave less than the request free; else "
                "<i>fragmentation</i>; <i>start</i> when the trace's starting state does not fit.",
            PLOT_POINTS);
  if (rep->command) {
    sb_printf(&b, "<br>Reproduce: <span class='mono'>");
    sb_esc(&b, rep->command);
    sb_printf(&b, "</span>");
  }
  sb_printf(&b, "<br>Generated by hbm %s.</footer>\n</main></body></html>\n", hbm_version());
  if (b.failed) {
    free(b.buf);
    return HBM_EHOSTMEM;
  }
  *html = b.buf;
  if (len) *len = b.len;
  return HBM_OK;
}
