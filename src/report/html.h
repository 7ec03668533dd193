/* html.h: the replay report as one self-contained HTML page (no network,
 * plots as inline SVG). docs/report.md describes what the page shows.
 *
 * Two steps: hbm_report_run_policy() replays a trace through one policy and
 * keeps what the page needs (samples over time, the result, the layout at the
 * first failure); hbm_report_html() renders any number of such runs into a
 * buffer. The library never writes the file: the CLI does, atomically. */
#ifndef HBM_REPORT_HTML_H
#define HBM_REPORT_HTML_H

#include <stddef.h>
#include <stdint.h>

#include "hbm.h"

/* One run of the layout scan: a live block (tag meaningful) or a hole. */
typedef struct hbm_layout_run {
  uint64_t addr, size;
  uint8_t live, tag;
} hbm_layout_run;

/* A layout summed up: live blocks and their bytes (by purpose), holes, their
 * bytes and the largest, the address ranges (a run that does not start where
 * the one before it ends starts a new range) and the bytes they span. */
typedef struct hbm_layout_summary {
  uint64_t live_blocks, live_bytes, live_by_tag[HBM_TAG_COUNT];
  uint64_t holes, hole_bytes, largest_hole;
  uint64_t ranges, span;
} hbm_layout_summary;
void hbm_layout_summarize(const hbm_layout_run *runs, size_t n, hbm_layout_summary *out);

/* What the page shows for one policy. Fill it with hbm_report_run_policy(),
 * or by hand (e.g. from a replay that collected its own samples). */
typedef struct hbm_report_run {
  hbm_replay_result result;
  const char *conf;              /* the settings it ran with, or NULL: named on the page, as
                                  * the JSON's alloc_conf (the caller's string, not copied) */
  int error;                     /* HBM_OK, or why the replay could not run */
  hbm_sample *samples;           /* in event order */
  size_t nsamples, samples_cap;
  hbm_layout_run *layout;        /* address order; empty if none */
  size_t nlayout, layout_cap;
  int layout_at_failure;         /* 1: taken at the first failure; 0: at layout_event */
  uint64_t layout_event, layout_step, layout_largest_free, layout_live;
  uint64_t layout_reserved;      /* at layout_event (hbm_report_layout_at); not at a failure */
  int layout_error;              /* HBM_OK, or why hbm_report_layout_at drew no layout: the run
                                  * itself stands (error is the run's, untouched) */
  /* Live bytes under this policy over time, exact (hbm_replay_options'
   * live_buckets: requests it failed are not live), in the report's slices
   * of the events; none (0) where there is no event or no host memory. */
  uint64_t *live_min, *live_max;
  size_t live_buckets;
} hbm_report_run;

typedef struct hbm_report {
  const char *title;             /* e.g. "hbm demo: 910c-dense at 96 GiB" */
  const char *workload;          /* what was replayed (trace name / generator line) */
  const char *command;           /* how to reproduce, shown in the footer (or NULL) */
  uint64_t capacity;
  uint64_t events, steps;
  uint64_t largest_comm_request; /* largest comm-tagged request in the trace (0: none) */
  uint64_t peak_live;            /* of the trace */
  const char *notes;             /* optional paragraph (e.g. the closed-form estimate) */
  uint64_t every;                /* the runs' sampling: every N events; 0 at step boundaries
                                  * (a trace without step marks: every thousandth of it) */
  const hbm_report_run *runs;
  int nruns;
  /* Live bytes over time, exact, from the trace (hbm_report_trace_facts fills
   * them, hbm_report_release frees): min and max over live_buckets equal
   * slices of the events. A run draws its own (hbm_report_run), which differ
   * where it failed requests. */
  uint64_t *live_min, *live_max;
  size_t live_buckets;
  const hbm_trace *trace;        /* set by hbm_report_trace_facts: the diagnosis asks it what was
                                  * live at a sampled moment (NULL: it does not) */
} hbm_report;

/* Points o's samples, layout at the first failure and live band at `run`
 * (the band's slices allocated here): what a replay needs to fill a report
 * run. HBM_EHOSTMEM where the band could not be allocated (the run then has
 * none). Release with hbm_report_run_release(). */
int hbm_report_run_hooks(const hbm_trace *trace, hbm_report_run *run, hbm_replay_options *o);
/* Replays `trace` through `policy` (conf and device as in hbm_replay_options;
 * device NULL: sim at the trace's capacity), sampling every `every` events (0:
 * at step boundaries) and keeping the layout at the first failure. progress may
 * be NULL. Returns HBM_OK or the replay's error (also stored in out->error);
 * HBM_EHOSTMEM if the samples or the layout could not be kept. Release with
 * hbm_report_run_release(). */
int hbm_report_run_policy(const hbm_trace *trace, const char *policy, const char *conf,
                          const char *device, uint64_t every, hbm_progress_fn *progress,
                          void *progress_arg, hbm_report_run *out);
void hbm_report_run_release(hbm_report_run *run);

/* The same collection for a replay the caller runs itself: set
 * on_sample = hbm_report_keep_sample and on_oom_layout = hbm_report_keep_layout
 * with both args pointing at a zeroed run, then copy the result into run->result. */
void hbm_report_keep_sample(const hbm_sample *sample, void *run);
int hbm_report_keep_layout(void *run, uint64_t addr, uint64_t size, int live, hbm_tag tag);
/* The moment of a layout kept at the first failure, from run->result.first_oom:
 * layout_event, layout_step, layout_largest_free and layout_live. */
void hbm_report_failure_moment(hbm_report_run *run);

/* The layout of `policy` just before event `event` of the trace (0, after
 * the starting state alone, to its events; hbm_replay up to there, starting
 * state included), into run->layout. progress (or NULL) is told the events
 * replayed of `event`.
 * For runs that did not fail: hbm_report_tightest_event() says which moment to
 * show. HBM_EHOSTMEM (also in run->layout_error; run->error, the run's own,
 * is left as it was) when host memory ran out: no layout with runs left out;
 * HBM_EINVAL for a start that did not fit. */
int hbm_report_layout_at(const hbm_trace *trace, const char *policy, const char *conf,
                         const char *device, uint64_t event, hbm_progress_fn *progress, void *progress_arg,
                         hbm_report_run *run);
/* The sampled moment (after step 1) with the smallest largest free block:
 * an event count for hbm_report_layout_at, 0 for the starting state (a sample
 * before any event), or HBM_REPORT_NO_MOMENT where no sample was taken. */
#define HBM_REPORT_NO_MOMENT UINT64_MAX
uint64_t hbm_report_tightest_event(const hbm_report_run *run);

/* Facts of a trace the page states: events, steps, peak live, largest comm
 * request, and the exact live envelope. HBM_EHOSTMEM if the envelope could not
 * be kept (the rest is filled). */
int hbm_report_trace_facts(const hbm_trace *trace, hbm_report *report);
void hbm_report_release(hbm_report *report);

/* bytes[0..n) as a message shows them side by side, into text[i]: each in its
 * unit ("2.00 MiB"), or all in bytes where one rounds to the same text as the
 * first but differs ("a 2.00 MiB request, 2.00 MiB free: capacity" reads as a
 * contradiction). The diagnosis, the page's table and the replay's text use it. */
void hbm_report_sizes_apart(const uint64_t *bytes, size_t n, char (*text)[32]);

/* A run's efficiency (peak live / peak reserved) as the reports print it: "0.833", or "-"
 * where it reserved nothing (no allocation, or a starting state that did not fit), which
 * has no efficiency (the result's 0 is no figure). --json gives null there. */
const char *hbm_report_efficiency_text(const hbm_replay_result *result, char text[32]);

/* The diagnosis of one run in words (one paragraph, plain text). Returns the
 * length needed, like snprintf. */
int hbm_report_diagnosis(const hbm_report *report, const hbm_report_run *run, char *buf,
                         size_t len);

/* Renders the page into a malloc'd, NUL-terminated buffer (*len without the
 * NUL). HBM_EHOSTMEM if it could not; *html is then NULL. */
int hbm_report_html(const hbm_report *report, char **html, size_t *len);

#endif
