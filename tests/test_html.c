/* test_html.c: the report page is self-contained and says what happened:
 * a workload replayed at a capacity below its peak fails for capacity, at one
 * above it every policy gets a section with its charts; the exact live
 * envelope agrees with the trace's peak, bucket by bucket; a layout taken at a
 * moment accounts for every live byte at that moment; and runs made by hand
 * hold every cause's finding, and the page's figures, to the letter. */
#include "core/util.h"
#include "report/html.h"
#include "small_workload.h"
#include "testutil.h"

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
  return n;
}

static void check_page_is_self_contained(const char *html) {
  CHECK(strncmp(html, "<!DOCTYPE html>", 15) == 0);
  CHECK(strstr(html, "</html>") != NULL);
  CHECK(strstr(html, "<script") == NULL);
  CHECK(strstr(html, "http://") == NULL);
  CHECK(strstr(html, "https://") == NULL);
  CHECK(strstr(html, "src=") == NULL);
  CHECK(strstr(html, "@import") == NULL);
  CHECK(count(html, "<svg") == count(html, "</svg>"));
  /* the page declares UTF-8 and is: every byte in a well-formed sequence */
  for (const unsigned char *p = (const unsigned char *)html; *p; p++) {
    int n = *p < 0x80 ? 1 : hbm_utf8_len(p);
    CHECK(n > 0);
    if (!n) break;
    p += n - 1;
  }
}

/* Every x drawn in the charts lies on the page: points of lines and bands,
 * and vertical markers (x1). */
static int xs_on_page(const char *html) {
  int bad = 0;
  for (const char *p = html; (p = strstr(p, "points='")); ) {
    p += 8;
    while (*p && *p != '\'') {
      char *end;
      double x = strtod(p, &end);
      if (end == p) break;
      if (x < 0 || x > 960) bad++;
      p = end;
      if (*p == ',') strtod(p + 1, &end), p = end;
      while (*p == ' ') p++;
    }
  }
  for (const char *p = html; (p = strstr(p, " x1='")); p += 5) {
    double x = strtod(p + 5, NULL);
    if (x < 0 || x > 960) bad++;
  }
  return bad;
}

/* The words of a run, whole: each figure and each word of them is what a
 * reader acts on, so a sentence is held to the letter. */
static void words_are(const hbm_report *rep, const hbm_report_run *r, const char *want) {
  char got[2048];
  int n = hbm_report_diagnosis(rep, r, got, sizeof got);
  if (strcmp(got, want) != 0 || n != (int)strlen(want)) {
    fprintf(stderr, "words:\n  got  %s\n  want %s\n", got, want);
    CHECK(!"the words of a run");
  }
}

#define MIB (1ull << 20)

/* A report of one bestfit run made by hand, of `events` events on a device
 * of `capacity`, in which `failures` requests failed (first_oom: the
 * caller's). */
static void failed_run(hbm_report *rep, hbm_report_run *r, uint64_t capacity, uint64_t events, uint64_t failures) {
  memset(rep, 0, sizeof *rep);
  rep->capacity = capacity;
  rep->events = events;
  memset(r, 0, sizeof *r);
  snprintf(r->result.policy, sizeof r->result.policy, "bestfit");
  r->result.capacity = capacity;
  r->result.oom = 1;
  r->result.failures = failures;
}

/* A failed run made by hand: every cause's sentence and its figures. */
static void check_failure_words(void) {
  hbm_report rep;
  hbm_report_run r;
  failed_run(&rep, &r, 8 * MIB, 10, 2);
  rep.steps = 4;
  hbm_oom_report *o = &r.result.first_oom;
  *o = (hbm_oom_report){.event = 5, .step = 3, .request = 4 * MIB, .free_total = 2 * MIB, .largest_free = 2 * MIB,
                        .cause = HBM_CAUSE_CAPACITY, .allocated = 6 * MIB, .limit = 8 * MIB};
  /* two ranges, three holes: the layout's sentence counts them */
  hbm_layout_run layout[] = {{0, 4 * MIB, 1, HBM_TAG_PARAM}, {4 * MIB, MIB, 0, 0}, {5 * MIB, MIB, 1, HBM_TAG_ACT},
                             {6 * MIB, MIB / 2, 0, 0}, {16 * MIB, 3 * MIB / 2, 0, 0}};
  r.layout = layout;
  r.nlayout = 5;
  r.layout_at_failure = 1;
  words_are(&rep, &r, "At step 3 a 4.00 MiB request failed with 2.00 MiB free in total (capacity 8.00 MiB minus "
                      "6.00 MiB live) and live plus the request exceed the capacity by 2.00 MiB: over capacity; no "
                      "placement could have served it. The layout then: 3 holes holding 3.00 MiB, the largest "
                      "1.50 MiB, across 2 ranges. 2 requests failed in all (each skipped, its free ignored).");
  /* the page: the table's row, the layout's heading and its words */
  rep.runs = &r;
  rep.nruns = 1;
  char *html = NULL;
  size_t len = 0;
  CHECK(hbm_report_html(&rep, &html, &len) == HBM_OK);
  if (html) {
    check_page_is_self_contained(html);
    CHECK(strstr(html, "<td class='fail'>3</td><td>4.00 MiB</td><td>2.00 MiB</td><td>2.00 MiB</td>"
                       "<td class='fail'>capacity</td><td>2</td></tr>") != NULL);
    CHECK(strstr(html, "<h3>Layout at the first failure (step 3, a 4.00 MiB request, largest free 2.00 MiB)</h3>"));
    CHECK(strstr(html, "<p class='sub'>3 holes, 3.00 MiB in all, the largest 1.50 MiB (marked); placed by purpose: "
                       "param 4.00 MiB act 1.00 MiB. The strip") != NULL);
    /* the ranges span 8 MiB, the capacity itself: no word of address space beyond it */
    CHECK(strstr(html, "Its ranges span") == NULL);
    CHECK(strstr(html, "></span>other</span>") == NULL); /* nothing of no purpose is live */
    CHECK(strstr(html, " Its largest free (2.00 MiB) exceeds the largest hole because") != NULL);
    CHECK(strstr(html, "first failure, step 3</text>") != NULL);
    CHECK(strstr(html, "class='hlab'>capacity 8.00 MiB</text>") != NULL);
    CHECK(strstr(html, "aria-label='layout at the first failure'>") != NULL);
    CHECK(strstr(html, "class='labright'>6.83 KiB per column</text>") != NULL); /* 8 MiB over 1200 columns */
    /* the three largest holes marked and labelled, each once, no live block among them */
    CHECK(count(html, "class='holemark'") == 3 && count(html, "class='holelab'>") == 3);
    CHECK(strstr(html, "class='holelab'>1.50 MiB</text>") && strstr(html, "class='holelab'>1.00 MiB</text>") &&
          strstr(html, "class='holelab'>512.00 KiB</text>"));
    CHECK(count(html, "<div class='finding bad'>") == 2); /* the diagnosis, and the run's own section */
    /* the strip: parameters in their colour, a run of one kind as one rectangle */
    CHECK(strstr(html, "height='44' fill='#4e79a7'/>") != NULL);
    /* the footer names every cause the table can show, in the order they are tried */
    CHECK(strstr(html, "Cause, the first that holds: <i>capacity</i> when live + request &gt; capacity; <i>rules</i> "
                       "when the memory could hold it and the policy's own rules refused it; <i>overhead</i> when "
                       "the live blocks as placed leave less than the request free; else <i>fragmentation</i>; "
                       "<i>start</i> when the trace's starting state does not fit.") != NULL);
  }
  free(html);
  /* one hole, one range, one failure; a layout spanning more than the capacity
   * (made by hand: a scan visits no more than a policy holds) drawn as given */
  layout[0] = (hbm_layout_run){0, 9 * MIB, 1, HBM_TAG_OTHER};
  layout[1] = (hbm_layout_run){9 * MIB, MIB, 0, 0};
  r.nlayout = 2;
  r.result.failures = 1;
  o->largest_free = MIB;
  o->cause = HBM_CAUSE_FRAGMENTATION;
  o->free_total = 7 * MIB / 2; /* 3.5 MiB in holes of at most 1 MiB: ratio 2.50 */
  o->request = 2 * MIB;
  words_are(&rep, &r, "At step 3 a 2.00 MiB request failed with 3.50 MiB free in total (capacity 8.00 MiB minus "
                      "4.50 MiB live) but the largest free block only 1.00 MiB: fragmentation, not capacity (ratio "
                      "2.50 = 3.50 MiB / 1.00 MiB - 1). A perfectly packed device would have had room for it. The "
                      "layout then: 1 hole holding 1.00 MiB, the largest 1.00 MiB, across 1 range. 1 request failed "
                      "in all (each skipped, its free ignored).");
  html = NULL;
  CHECK(hbm_report_html(&rep, &html, &len) == HBM_OK);
  if (html) {
    CHECK(strstr(html, " Its ranges span") == NULL); /* no note on address space: a hole is memory */
    CHECK(strstr(html, "Its largest free (") == NULL); /* 1 MiB, the largest hole itself */
    CHECK(strstr(html, "placed by purpose: other 9.00 MiB. The strip") != NULL);
    CHECK(strstr(html, "background:#9c755f'></span>other</span>") != NULL); /* in the legend where it is live */
  }
  free(html);
  /* two holes in one range: each count takes its own plural */
  layout[0] = (hbm_layout_run){0, MIB, 0, 0};
  layout[1] = (hbm_layout_run){MIB, 6 * MIB, 1, HBM_TAG_ACT};
  layout[2] = (hbm_layout_run){7 * MIB, MIB, 0, 0};
  r.nlayout = 3;
  char two[2048];
  hbm_report_diagnosis(&rep, &r, two, sizeof two);
  CHECK(strstr(two, " The layout then: 2 holes holding 2.00 MiB, the largest 1.00 MiB, across 1 range. ") != NULL);
  r.nlayout = 0;
  r.layout = NULL;
  /* the policy's overhead */
  *o = (hbm_oom_report){.step = 0, .request = MIB, .free_total = 3 * MIB, .largest_free = MIB / 2,
                        .cause = HBM_CAUSE_OVERHEAD, .allocated = 15 * MIB / 2, .limit = 8 * MIB};
  words_are(&rep, &r, "At step 0 a 1.00 MiB request failed with 3.00 MiB free in total (capacity 8.00 MiB minus "
                      "5.00 MiB live) but the live blocks as placed hold 7.50 MiB, 2.50 MiB more than their requests "
                      "(each rounded up), so only 512.00 KiB was free to place it in: the policy's overhead, not "
                      "fragmentation. 1 request failed in all (each skipped, its free ignored).");
  /* a cap below the capacity: the limit is the room */
  rep.capacity = r.result.capacity = 1024 * MIB;
  snprintf(r.result.policy, sizeof r.result.policy, "caching");
  *o = (hbm_oom_report){.step = 1, .request = 600 * MIB, .free_total = 400 * MIB, .largest_free = 400 * MIB,
                        .cause = HBM_CAUSE_RULES, .allocated = 112 * MIB, .limit = 512 * MIB};
  words_are(&rep, &r, "At step 1 a 600.00 MiB request failed with 400.00 MiB free in total (the policy's limit "
                      "512.00 MiB minus 112.00 MiB live) but the policy may hold only 512.00 MiB of the capacity (a "
                      "cap it was set with, such as per_process_memory_fraction), and live plus the request exceed "
                      "that by 200.00 MiB: over the policy's limit, not the device's capacity and not fragmentation. "
                      "1 request failed in all (each skipped, its free ignored).");
  /* the policy's own rules: a larger request would have succeeded */
  *o = (hbm_oom_report){.step = 2, .request = 5 * MIB, .free_total = 30 * MIB, .largest_free = 12 * MIB,
                        .cause = HBM_CAUSE_RULES, .allocated = 994 * MIB, .limit = 1024 * MIB};
  words_are(&rep, &r, "At step 2 a 5.00 MiB request failed with 30.00 MiB free in total (capacity 1.00 GiB minus "
                      "994.00 MiB live) and the policy itself reports that a request of 12.00 MiB would have "
                      "succeeded: its own rules refused this one, not fragmentation and not capacity (PyTorch's rules: "
                      "a request of 1 to 10 MiB takes a segment of its own of 20 MiB, one of at most 1 MiB a 2 MiB "
                      "segment of the small pool, and a block serves only the stream it was made on). 1 request "
                      "failed in all (each skipped, its free ignored).");
  snprintf(r.result.policy, sizeof r.result.policy, "zoned");
  words_are(&rep, &r, "At step 2 a 5.00 MiB request failed with 30.00 MiB free in total (capacity 1.00 GiB minus "
                      "994.00 MiB live) and the policy itself reports that a request of 12.00 MiB would have "
                      "succeeded: its own rules refused this one, not fragmentation and not capacity (its size "
                      "rounding, its pools or its streams). 1 request failed in all (each skipped, its free ignored).");
  /* free memory in one piece its granularity cannot use */
  *o = (hbm_oom_report){.step = 0, .request = 30 * MIB, .free_total = 32 * MIB, .largest_free = 20 * MIB,
                        .cause = HBM_CAUSE_RULES, .limit = 1024 * MIB};
  rep.capacity = r.result.capacity = 32 * MIB;
  snprintf(r.result.policy, sizeof r.result.policy, "expandable");
  words_are(&rep, &r, "At step 0 a 30.00 MiB request failed with 32.00 MiB free in total (capacity 32.00 MiB minus "
                      "0 B live) in one piece, not cut up, yet the largest request the policy could serve was 20.00 "
                      "MiB: its granularity refused it, not fragmentation and not capacity (expandable segments map "
                      "whole 20 MiB pages; a hole at a segment's end is what its last page leaves past its last "
                      "block, and goes on into the pages it maps next). 1 request failed in all (each skipped, its "
                      "free ignored).");
  snprintf(r.result.policy, sizeof r.result.policy, "compact");
  words_are(&rep, &r, "At step 0 a 30.00 MiB request failed with 32.00 MiB free in total (capacity 32.00 MiB minus "
                      "0 B live) in one piece, not cut up, yet the largest request the policy could serve was 20.00 "
                      "MiB: its granularity refused it, not fragmentation and not capacity. 1 request failed in all "
                      "(each skipped, its free ignored).");
  /* a starting state that fits the capacity but not as recorded */
  *o = (hbm_oom_report){.request = 24 * MIB, .free_total = 32 * MIB, .cause = HBM_CAUSE_START, .limit = 32 * MIB};
  words_are(&rep, &r, "The recorded starting state does not fit 32.00 MiB as recorded: its 24.00 MiB live alone "
                      "would, but not in the segments that hold them, which the policy keeps whole; the run fails "
                      "before its first event.");
  o->request = 40 * MIB;
  words_are(&rep, &r, "The trace's starting state does not fit: its 40.00 MiB live exceed the capacity 32.00 MiB; "
                      "the run fails before its first event.");
  o->request = 32 * MIB; /* exactly the capacity: it fits, as recorded or not */
  {
    char w[512];
    hbm_report_diagnosis(&rep, &r, w, sizeof w);
    CHECK(strncmp(w, "The recorded starting state does not fit", 40) == 0);
  }
  /* a run that could not run says so, whatever its result holds */
  r.error = HBM_EHOSTMEM;
  words_are(&rep, &r, "The replay could not run (out of host memory)."); /* the policy named once, by the caller */
  html = NULL;
  CHECK(hbm_report_html(&rep, &html, &len) == HBM_OK);
  if (html) {
    CHECK(strstr(html, "<td colspan='9' class='fail'>replay error: out of host memory</td></tr>") != NULL);
    CHECK(strstr(html, "<p>The replay could not run: out of host memory.</p>") != NULL);
  }
  free(html);
}

/* The table's sizes that round alike but differ are given in bytes, as the
 * text's and the words' are: "2.00 MiB, 2.00 MiB: capacity" contradicts itself. */
static void check_table_bytes(void) {
  hbm_report rep;
  hbm_report_run r;
  failed_run(&rep, &r, 4 * MIB, 2, 1);
  r.result.first_oom = (hbm_oom_report){.event = 1, .request = 2 * MIB, .free_total = 2 * MIB - 1024,
                                        .largest_free = 2 * MIB - 1024, .cause = HBM_CAUSE_CAPACITY,
                                        .allocated = 2 * MIB + 1024, .limit = 4 * MIB};
  rep.runs = &r;
  rep.nruns = 1;
  char *html = NULL;
  size_t len = 0;
  CHECK(hbm_report_html(&rep, &html, &len) == HBM_OK);
  if (html)
    CHECK(strstr(html, "<td class='fail'>0</td><td>2097152 B</td><td>2096128 B</td><td>2096128 B</td>"
                       "<td class='fail'>capacity</td><td>1</td></tr>") != NULL);
  free(html);
  /* a request that rounds alike with neither stays in its unit */
  r.result.first_oom.free_total = r.result.first_oom.largest_free = MIB;
  CHECK(hbm_report_html(&rep, &html, &len) == HBM_OK);
  if (html)
    CHECK(strstr(html, "<td class='fail'>0</td><td>2.00 MiB</td><td>1.00 MiB</td><td>1.00 MiB</td>") != NULL);
  free(html);
}

/* The tightest moment: the lowest largest free after steps 0 and 1 where the
 * samples reach past them, else the lowest of all. */
static void check_tightest(void) {
  hbm_sample s[4] = {{.event = 2, .step = 0, .largest_free = 10}, {.event = 5, .step = 1, .largest_free = 20},
                     {.event = 9, .step = 2, .largest_free = 50}, {.event = 12, .step = 3, .largest_free = 40}};
  hbm_report_run r;
  memset(&r, 0, sizeof r);
  r.samples = s;
  r.nsamples = 4;
  CHECK_EQ_U64(hbm_report_tightest_event(&r), 12);
  r.nsamples = 2; /* no sample past step 1: every sample counts */
  CHECK_EQ_U64(hbm_report_tightest_event(&r), 2);
  s[0].event = 0; /* the starting state's sample is a moment too, not "none" */
  CHECK_EQ_U64(hbm_report_tightest_event(&r), 0);
  s[0].largest_free = UINT64_MAX; /* the first sample is taken whatever its figure */
  r.nsamples = 1;
  CHECK_EQ_U64(hbm_report_tightest_event(&r), 0);
  r.nsamples = 0;
  CHECK_EQ_U64(hbm_report_tightest_event(&r), HBM_REPORT_NO_MOMENT);
}

/* A run without failures made by hand: its figures, the samples' worst
 * moments (the first of each), the communication buffer, the retries. */
static void check_success_words(void) {
  hbm_report rep;
  memset(&rep, 0, sizeof rep);
  rep.capacity = 1024 * MIB;
  rep.events = 12;
  rep.steps = 3;
  rep.largest_comm_request = 200 * MIB;
  hbm_sample s[4] = {
      {.event = 1, .step = 0, .free_total = 900 * MIB, .largest_free = 800 * MIB, .fragmentation = 0.125},
      {.event = 4, .step = 1, .free_total = 250 * MIB, .largest_free = 100 * MIB, .fragmentation = 1.5},
      {.event = 8, .step = 2, .free_total = 180 * MIB, .largest_free = 90 * MIB, .fragmentation = 1.0},
      {.event = 11, .step = 2, .free_total = 700 * MIB, .largest_free = 150 * MIB, .fragmentation = 0},
  };
  hbm_report_run r;
  memset(&r, 0, sizeof r);
  snprintf(r.result.policy, sizeof r.result.policy, "caching");
  r.samples = s;
  r.nsamples = 4;
  r.result.peak_reserved = 600 * MIB;
  r.result.peak_live = 500 * MIB;
  r.result.efficiency = 500.0 / 600;
  r.result.ncounters = 2;
  snprintf(r.result.counters[0].name, sizeof r.result.counters[0].name, "segments");
  r.result.counters[0].value = 7;
  snprintf(r.result.counters[1].name, sizeof r.result.counters[1].name, "alloc_retries");
  r.result.counters[1].value = 2;
  words_are(&rep, &r, "No request failed in 3 steps. Peak reserved 600.00 MiB of 1.00 GiB (424.00 MiB to spare), "
                      "peak live 500.00 MiB: efficiency 0.833. Sampled at each step boundary (4 samples; within a "
                      "step it goes lower, unseen here: --every N samples there): the worst fragmentation ratio, "
                      "1.50, came at step 1 (250.00 MiB free, largest block 100.00 MiB); the largest free block was "
                      "never below 90.00 MiB (step 2), and the largest communication buffer is 200.00 MiB, so one "
                      "that large would not have fit beside what was live at that moment. It got there by releasing "
                      "its cached segments and retrying 2 times (alloc_retries): each is a device synchronisation "
                      "in a real run.");
  /* one step, one retry, sampled every 5 events, a buffer of exactly the lowest largest free */
  rep.steps = 1;
  rep.every = 5;
  rep.largest_comm_request = 90 * MIB;
  r.result.counters[1].value = 1;
  r.result.peak_reserved = 1024 * MIB; /* nothing to spare */
  r.result.efficiency = 500.0 / 1024;
  words_are(&rep, &r, "No request failed in 1 step. Peak reserved 1.00 GiB of 1.00 GiB (0 B to spare), peak live "
                      "500.00 MiB: efficiency 0.488. Sampled every 5 events (4 samples): the worst fragmentation "
                      "ratio, 1.50, came at step 1 (250.00 MiB free, largest block 100.00 MiB); the largest free "
                      "block was never below 90.00 MiB (step 2), and the largest communication buffer is 90.00 "
                      "MiB, so it had room at every sample. It got there by releasing its cached segments and "
                      "retrying 1 time (alloc_retries): each is a device synchronisation in a real run.");
  /* one sample (an --every past the run's events): "1 sample", at step boundaries too */
  r.nsamples = 1;
  words_are(&rep, &r, "No request failed in 1 step. Peak reserved 1.00 GiB of 1.00 GiB (0 B to spare), peak live "
                      "500.00 MiB: efficiency 0.488. Sampled every 5 events (1 sample): the worst fragmentation "
                      "ratio, 0.12, came at step 0 (900.00 MiB free, largest block 800.00 MiB); the largest free "
                      "block was never below 800.00 MiB (step 0), and the largest communication buffer is 90.00 "
                      "MiB, so it had room at every sample. It got there by releasing its cached segments and "
                      "retrying 1 time (alloc_retries): each is a device synchronisation in a real run.");
  rep.every = 0;
  words_are(&rep, &r, "No request failed in 1 step. Peak reserved 1.00 GiB of 1.00 GiB (0 B to spare), peak live "
                      "500.00 MiB: efficiency 0.488. Sampled at each step boundary (1 sample; within a step it goes "
                      "lower, unseen here: --every N samples there): the worst fragmentation ratio, 0.12, came at "
                      "step 0 (900.00 MiB free, largest block 800.00 MiB); the largest free block was never below "
                      "800.00 MiB (step 0), and the largest communication buffer is 90.00 MiB, so it had room at "
                      "every sample. It got there by releasing its cached segments and retrying 1 time "
                      "(alloc_retries): each is a device synchronisation in a real run.");
  r.nsamples = 4;
  /* no step marks, no fragmentation, no buffer, no retries */
  rep.steps = 0;
  rep.every = 1;
  rep.largest_comm_request = 0;
  r.result.ncounters = 1;
  for (int i = 0; i < 4; i++) s[i].fragmentation = 0;
  words_are(&rep, &r, "No request failed. Peak reserved 1.00 GiB of 1.00 GiB (0 B to spare), peak live 500.00 MiB: "
                      "efficiency 0.488. ");
  /* the page's own figures for it */
  rep.runs = &r;
  rep.nruns = 1;
  rep.peak_live = 500 * MIB;
  rep.steps = 1;
  r.result.refused_placed = 1;
  r.result.max_frag = 1e9; /* free memory, none of it usable: infinite, not the API's 1e9 */
  r.result.peak_allocated = 510 * MIB;
  r.result.backend_calls = 9;
  r.result.backend_calls_after_first_step = 4;
  r.conf = "max_split_size_mb:64,<x>&"; /* the settings it ran with, named and escaped */
  char *html = NULL;
  size_t len = 0;
  CHECK(hbm_report_html(&rep, &html, &len) == HBM_OK);
  if (html) {
    check_page_is_self_contained(html);
    CHECK(strstr(html, "<br>capacity 1.00 GiB &middot; 12 events &middot; 1 step &middot; peak live 500.00 MiB</p>"));
    CHECK(strstr(html, "<td>1.00 GiB</td><td>0.488</td><td>infinite</td><td class='ok'>none (it placed what PyTorch "
                       "refused)</td><td>-</td><td>-</td><td>-</td><td>-</td><td>0</td></tr>") != NULL);
    CHECK(strstr(html, "<p class='sub'>peak reserved 1.00 GiB &middot; peak allocated 510.00 MiB &middot; "
                       "efficiency 0.488 &middot; backend calls 9 &middot; ") != NULL);
    CHECK(strstr(html, "<p class='sub mono'>segments 7</p>") != NULL);
    CHECK(strstr(html, "<p class='sub'>settings <span class='mono'>max_split_size_mb:64,&lt;x&gt;&amp;</span></p>") != NULL);
    CHECK(strstr(html, "<h3>Backend calls so far (4 after the first step)</h3>") != NULL);
    CHECK(strstr(html, "<p class='sub'>No request failed; no layout was taken.</p>") != NULL);
    CHECK(count(html, "<div class='finding'>") == 2 && !strstr(html, "finding bad"));
    /* four samples, four points of the largest free line, each at its own height */
    const char *pl = strstr(html, "<polyline class='largest' points='");
    double ys[8];
    int np = 0;
    for (const char *q = pl ? pl + 35 : NULL; q && *q != '\'' && np < 8;) {
      char *end;
      strtod(q, &end);
      if (end == q || *end != ',') break;
      ys[np++] = strtod(end + 1, &end);
      q = end;
      while (*q == ' ') q++;
    }
    CHECK(np == 4);
    /* and the band around it: a point above and below each */
    const char *band = strstr(html, "<polygon class='largestband' points='");
    const char *band_end = band ? strchr(band + 37, '\'') : NULL;
    int nb = 0;
    for (const char *q = band ? band + 37 : NULL; q && q < band_end; q++) nb += *q == ',';
    CHECK(nb == 8);
    for (int i = 0; i < np; i++)
      for (int j = 0; j < i; j++) CHECK(ys[i] != ys[j]);
  }
  free(html);
}

/* The exact live band: bucket k holds live after each event i with
 * k x n / B <= i < (k + 1) x n / B, and bucket 0 the live before the first
 * event as well; each bucket's least and most, recounted here. */
static void check_live_envelope(const hbm_trace *t, const hbm_report *rep) {
  size_t nb = rep->live_buckets;
  CHECK(nb == (t->nevents < 900 ? t->nevents : 900));
  uint64_t *size = calloc(t->nids + 1, sizeof *size), live = 0;
  if (!size || !nb) {
    free(size);
    return;
  }
  for (uint32_t i = 0; i < t->ninit_blocks; i++)
    if (t->init_blocks[i].id < t->nids) live += size[t->init_blocks[i].id] = t->init_blocks[i].request;
  uint64_t lo = live, hi = live;
  size_t k = 0, bad = 0;
  for (uint64_t i = 0; i < t->nevents; i++) {
    const hbm_event *e = &t->events[i];
    if (e->kind == HBM_EV_ALLOC && e->id < t->nids) live += size[e->id] = e->size;
    else if (e->kind == HBM_EV_FREE && e->id < t->nids) live -= size[e->id], size[e->id] = 0;
    if (i >= (k + 1) * t->nevents / nb) { /* the previous bucket is complete */
      bad += rep->live_min[k] != lo || rep->live_max[k] != hi;
      k++;
      lo = hi = live;
    }
    if (live < lo) lo = live;
    if (live > hi) hi = live;
  }
  bad += k != nb - 1 || rep->live_min[k] != lo || rep->live_max[k] != hi;
  if (bad) fprintf(stderr, "live band: %zu buckets of %zu differ from a recount\n", bad, nb);
  CHECK(bad == 0);
  free(size);
}

/* The page of one run: its memory chart draws the run's exact live band
 * (`exact`: a polygon of two points a slice, no sampled live line) or, for a
 * start that did not fit, the samples' band and line. */
static void check_band_drawn(const hbm_trace *t, const hbm_report_run *run, int exact) {
  hbm_report rep;
  memset(&rep, 0, sizeof rep);
  rep.title = "band";
  rep.workload = t->name;
  CHECK(hbm_report_trace_facts(t, &rep) == HBM_OK);
  rep.runs = run;
  rep.nruns = 1;
  char *html = NULL;
  size_t len = 0;
  CHECK(hbm_report_html(&rep, &html, &len) == HBM_OK);
  if (html) {
    const char *band = strstr(html, "<polygon class='live' points='");
    CHECK(band != NULL);
    CHECK((strstr(html, "class='liveline'") != NULL) == !exact);
    if (band && exact) {
      const char *pts = band + strlen("<polygon class='live' points='"), *end = strchr(pts, '\'');
      int points = 0;
      for (const char *q = pts; end && q < end; q++) points += *q == ',';
      CHECK((size_t)points == 2 * run->live_buckets);
    }
  }
  free(html);
  hbm_report_release(&rep);
}

int main(void) {
  /* 1. below the peak: a capacity failure, its layout and its words */
  hbm_trace *t = small_workload(1ull << 40, 6);
  CHECK(t != NULL);
  if (!t) return test_done("test_html");
  uint64_t peak = hbm_trace_peak_live(t);
  hbm_trace_free(t);
  uint64_t tight = peak - peak / 10;
  t = small_workload(tight, 6);
  CHECK(t != NULL);
  if (!t) return test_done("test_html");

  hbm_report rep;
  memset(&rep, 0, sizeof rep);
  rep.title = "test <report> & more \xe9\x01 \xc3\xa9\xc2\x85\x80"; /* a Latin-1 byte, controls (C0, C1), UTF-8, a lone continuation byte */
  rep.workload = t->name;
  rep.capacity = tight;
  CHECK(hbm_report_trace_facts(t, &rep) == HBM_OK);
  CHECK_EQ_U64(rep.peak_live, peak);
  CHECK(rep.steps == 6);
  CHECK(rep.largest_comm_request > 0);
  uint64_t env_max = 0;
  for (size_t k = 0; k < rep.live_buckets; k++) {
    CHECK(rep.live_min[k] <= rep.live_max[k]);
    if (rep.live_max[k] > env_max) env_max = rep.live_max[k];
  }
  CHECK_EQ_U64(env_max, peak);
  check_live_envelope(t, &rep);

  hbm_report_run run;
  CHECK(hbm_report_run_policy(t, "bestfit", NULL, NULL, 0, NULL, NULL, &run) == HBM_OK);
  CHECK(run.result.oom);
  CHECK(run.result.first_oom.cause == HBM_CAUSE_CAPACITY);
  CHECK(run.nsamples >= 6);
  CHECK(run.nlayout > 0);
  CHECK(run.layout_at_failure);
  /* the layout tiles what the policy holds: live bytes in it = live at the failure */
  uint64_t live_in_layout = 0;
  for (size_t i = 0; i < run.nlayout; i++) {
    if (run.layout[i].live) live_in_layout += run.layout[i].size;
    if (i) CHECK(run.layout[i].addr >= run.layout[i - 1].addr + run.layout[i - 1].size);
  }
  CHECK(live_in_layout >= run.result.capacity - run.result.first_oom.free_total);
  /* its own live band: exact under the policy (a failed request is not live),
   * reaching its peak live; never above the trace's, slice by slice */
  CHECK(run.live_buckets == rep.live_buckets);
  uint64_t run_max = 0;
  for (size_t k = 0; k < run.live_buckets; k++) {
    CHECK(run.live_min[k] <= run.live_max[k]);
    CHECK(run.live_max[k] <= rep.live_max[k] && run.live_min[k] <= rep.live_min[k]);
    if (run.live_max[k] > run_max) run_max = run.live_max[k];
  }
  CHECK_EQ_U64(run_max, run.result.peak_live);
  CHECK(run.result.peak_live < peak);
  {
    /* where every request is served, the run's band is the trace's */
    hbm_report_run roomy;
    CHECK(hbm_report_run_policy(t, "bestfit", NULL, "sim:1TiB", 0, NULL, NULL, &roomy) == HBM_OK);
    CHECK(!roomy.result.oom && roomy.live_buckets == rep.live_buckets);
    for (size_t k = 0; k < roomy.live_buckets; k++)
      CHECK(roomy.live_min[k] == rep.live_min[k] && roomy.live_max[k] == rep.live_max[k]);
    hbm_report_run_release(&roomy);
  }
  char words[2048];
  hbm_report_diagnosis(&rep, &run, words, sizeof words);
  CHECK(strstr(words, "over capacity") != NULL);
  rep.runs = &run;
  rep.nruns = 1;
  char *html = NULL;
  size_t len = 0;
  CHECK(hbm_report_html(&rep, &html, &len) == HBM_OK);
  CHECK(html && strlen(html) == len);
  if (html) {
    check_page_is_self_contained(html);
    CHECK(strstr(html, "test &lt;report&gt; &amp; more \xef\xbf\xbd\xef\xbf\xbd \xc3\xa9\xef\xbf\xbd\xef\xbf\xbd") != NULL); /* escaped */
    CHECK(strstr(html, "Layout at the first failure") != NULL);
    CHECK(strstr(html, "first failure, step") != NULL);
    CHECK(count(html, "<svg") >= 5); /* memory, fragmentation, free, calls, layout */
    CHECK(strstr(html, "<h3>Backend calls so far (") != NULL);
    CHECK(strstr(html, "#4e79a7") != NULL); /* param blocks in the strip */
  }
  free(html);
  hbm_report_run_release(&run);
  hbm_report_release(&rep);
  hbm_trace_free(t);

  /* 2. room to spare: every policy, a layout at the tightest moment */
  t = small_workload(peak * 2, 6);
  CHECK(t != NULL);
  if (!t) return test_done("test_html");
  memset(&rep, 0, sizeof rep);
  rep.title = "every policy";
  rep.workload = t->name;
  rep.capacity = peak * 2;
  hbm_report_trace_facts(t, &rep);
  char names[512];
  snprintf(names, sizeof names, "%s", hbm_policy_names());
  hbm_report_run runs[16];
  int n = 0;
  for (char *save = NULL, *p = strtok_r(names, ",", &save); p && n < 16; p = strtok_r(NULL, ",", &save)) {
    hbm_report_run *r = &runs[n++];
    CHECK(hbm_report_run_policy(t, p, NULL, NULL, t->nevents / 500, NULL, NULL, r) == HBM_OK);
    CHECK(!r->result.oom);
    CHECK_EQ_U64(r->result.peak_live, peak);
    uint64_t at = hbm_report_tightest_event(r);
    CHECK(at > 0);
    CHECK(hbm_report_layout_at(t, p, NULL, NULL, at, NULL, NULL, r) == HBM_OK);
    uint64_t in_layout = 0;
    for (size_t i = 0; i < r->nlayout; i++)
      if (r->layout[i].live) in_layout += r->layout[i].size;
    CHECK(!r->layout_at_failure);
    CHECK(in_layout >= r->layout_live); /* blocks hold at least their requests */
    if (in_layout < r->layout_live) fprintf(stderr, "%s: layout live %llu < %llu\n", p,
                                             (unsigned long long)in_layout, (unsigned long long)r->layout_live);
  }
  rep.runs = runs;
  rep.nruns = n;
  html = NULL;
  CHECK(hbm_report_html(&rep, &html, &len) == HBM_OK);
  if (html) {
    check_page_is_self_contained(html);
    for (int i = 0; i < n; i++) {
      char id[80];
      snprintf(id, sizeof id, "<h2 id='p-%.32s'>", runs[i].result.policy);
      CHECK(strstr(html, id) != NULL);
    }
    CHECK(count(html, "Layout at the tightest moment") == n);
    CHECK(count(html, "Layout at the tightest moment sampled after steps 0 and 1 (step ") == n); /* 6 steps sampled */
    CHECK(count(html, "aria-label='layout at the tightest moment sampled'>") == n);
    CHECK(strstr(html, "No request failed") != NULL);
    /* live by purpose over the samples, one chart a run, each purpose sampled in its legend */
    CHECK(count(html, "<h3>Live by purpose, at the samples</h3>") == n);
    CHECK(count(html, "aria-label='live bytes by purpose over time, at the samples'>") == n);
  }
  free(html);
  for (int i = 0; i < n; i++) hbm_report_run_release(&runs[i]);
  hbm_report_release(&rep);
  hbm_trace_free(t);

  /* 3. free memory with no block of it usable: the API's ratio 1e9 reads as
   * "infinite" in the words, never as the number. */
  hbm_sample s[2] = {{.event = 1, .step = 1, .free_total = 1 << 20, .largest_free = 1 << 20},
                     {.event = 2, .step = 2, .free_total = 90 << 20, .largest_free = 0, .fragmentation = 1e9}};
  hbm_report_run hand;
  memset(&hand, 0, sizeof hand);
  hand.samples = s;
  hand.nsamples = 2;
  hand.result.capacity = 1ull << 30;
  memset(&rep, 0, sizeof rep);
  rep.capacity = 1ull << 30;
  rep.steps = 2;
  hbm_report_diagnosis(&rep, &hand, words, sizeof words);
  CHECK(strstr(words, "the worst fragmentation ratio, infinite, came at step 2") != NULL);
  /* the words say they speak of samples, and how they were taken */
  CHECK(strstr(words, "Sampled at each step boundary (2 samples; within a step it goes lower") != NULL);
  CHECK(strstr(words, "1000000000") == NULL);
  /* nothing live at any sample: no chart of live by purpose, nor its heading */
  rep.runs = &hand;
  rep.nruns = 1;
  html = NULL;
  CHECK(hbm_report_html(&rep, &html, &len) == HBM_OK);
  if (html) {
    check_page_is_self_contained(html);
    CHECK(strstr(html, "Live by purpose") == NULL);
  }
  free(html);
  s[1].live = s[1].live_by_tag[HBM_TAG_ACT] = 5 << 20; /* an act block live at step 2: drawn, its purpose named */
  html = NULL;
  CHECK(hbm_report_html(&rep, &html, &len) == HBM_OK);
  if (html) {
    CHECK(count(html, "<h3>Live by purpose, at the samples</h3>") == 1);
    CHECK(strstr(html, "></span>act</span>") != NULL); /* the chart's legend: no layout, so no strip's */
    CHECK(strstr(html, "></span>param</span>") == NULL); /* nothing else was live */
  }
  free(html);
  /* a layout the page could not draw (host memory ran out in its replay): the run
   * stands, and the page says the layout was not drawn, not that the run failed */
  hand.layout_error = HBM_EHOSTMEM;
  html = NULL;
  CHECK(hbm_report_html(&rep, &html, &len) == HBM_OK);
  if (html) {
    CHECK(strstr(html, "No request failed; its layout at the tightest moment was not drawn: ") != NULL);
    CHECK(strstr(html, "replay error") == NULL);
  }
  free(html);
  hand.layout_error = HBM_OK;

  /* 4. a trace whose only step mark comes near its end (as in a PyTorch
   * snapshot): the samples start there, but the charts span every event, so
   * the live band and the failure marker (event 40) are on the page. */
  char text[4096];
  int tl = snprintf(text, sizeof text, "hbm-trace 1\ncapacity 1GiB\n");
  for (int i = 0; i < 40; i++) tl += snprintf(text + tl, sizeof text - (size_t)tl, "a b%d 16MiB act\n", i);
  tl += snprintf(text + tl, sizeof text - (size_t)tl, "a big 900MiB comm\n");
  for (int i = 0; i < 40; i++) tl += snprintf(text + tl, sizeof text - (size_t)tl, "f b%d\n", i);
  tl += snprintf(text + tl, sizeof text - (size_t)tl, "s 1\na last 1MiB temp\n");
  hbm_diag d;
  CHECK(hbm_trace_parse_text(text, (size_t)tl, "late-step", &t, &d) == HBM_OK);
  memset(&rep, 0, sizeof rep);
  rep.workload = "late-step";
  CHECK(hbm_report_trace_facts(t, &rep) == HBM_OK);
  CHECK_EQ_U64(rep.capacity, 1ull << 30); /* none given: the trace's */
  rep.capacity = 1ull << 30;
  CHECK(hbm_report_trace_facts(t, &rep) == HBM_OK);
  CHECK(hbm_report_run_policy(t, "bestfit", NULL, NULL, 0, NULL, NULL, &hand) == HBM_OK);
  CHECK(hand.result.oom && hand.result.first_oom.event == 40);
  CHECK(hand.nsamples > 0 && hand.samples[0].event > 40);
  rep.runs = &hand;
  rep.nruns = 1;
  html = NULL;
  CHECK(hbm_report_html(&rep, &html, &len) == HBM_OK);
  if (html) {
    check_page_is_self_contained(html);
    CHECK(strstr(html, "class='oomline'") != NULL);
    CHECK(xs_on_page(html) == 0);
  }
  free(html);
  hbm_report_run_release(&hand);
  hbm_report_release(&rep);
  hbm_trace_free(t);

  /* 5. a trace with no step marks at all: every sample is step 0, and the
   * words still come from them (the table's max frag, the tightest moment). */
  const char *plain = "hbm-trace 1\ncapacity 16GiB\na w 4GiB param\na ar1 1GiB comm 1\na act1 2GiB act\n"
                      "a ar2 1GiB comm 1\na act2 2GiB act\nf ar1\nf ar2\na ar3 1GiB comm 1\nf ar3\nf act1\nf act2\n";
  CHECK(hbm_trace_parse_text(plain, strlen(plain), "no-steps", &t, &d) == HBM_OK);
  memset(&rep, 0, sizeof rep);
  rep.capacity = 16ull << 30;
  CHECK(hbm_report_trace_facts(t, &rep) == HBM_OK);
  CHECK(hbm_report_run_policy(t, "bestfit", NULL, NULL, 0, NULL, NULL, &hand) == HBM_OK);
  CHECK(!hand.result.oom && hand.result.max_frag > 0);
  uint64_t least = UINT64_MAX;
  for (size_t i = 0; i < hand.nsamples; i++)
    if (hand.samples[i].largest_free < least) least = hand.samples[i].largest_free;
  char want[128], sz[32];
  hbm_report_diagnosis(&rep, &hand, words, sizeof words);
  snprintf(want, sizeof want, "the worst fragmentation ratio, %.2f,", hand.result.max_frag);
  CHECK(strstr(words, want) != NULL);
  snprintf(want, sizeof want, "was never below %s", hbm_size_format(least, sz, sizeof sz));
  CHECK(least >= (1ull << 30) && strstr(words, want) != NULL);
  CHECK(strstr(words, "so it had room at every sample") != NULL);
  CHECK(strstr(words, "Sampled every 1 event (") != NULL); /* no step marks: a thousandth of 11 events, at least 1 */
  if (strstr(words, want) == NULL) fprintf(stderr, "%s\n", words);
  hbm_report_run_release(&hand);
  hbm_report_release(&rep);
  hbm_trace_free(t);
  check_failure_words();
  check_table_bytes();
  check_success_words();
  check_tightest();

  /* 6. a starting state that does not fit: no moment to draw a layout at */
  const char *unfit = "hbm-trace 1\ncapacity 64MiB\ninit-seg 0x0 128MiB 0 large\ninit-blk 0x0 128MiB a\n"
                      "a b 1MiB\nf a\nf b\n";
  CHECK(hbm_trace_parse_text(unfit, strlen(unfit), "unfit", &t, &d) == HBM_OK);
  memset(&hand, 0, sizeof hand);
  CHECK(hbm_report_layout_at(t, "bestfit", NULL, NULL, 1, NULL, NULL, &hand) == HBM_EINVAL);
  CHECK(hand.layout_error == HBM_EINVAL && hand.error == HBM_OK && hand.nlayout == 0 && hand.layout == NULL);
  hbm_report_run_release(&hand);
  /* ... and no exact live band to draw: the sample's line instead */
  CHECK(hbm_report_run_policy(t, "bestfit", NULL, NULL, 0, NULL, NULL, &hand) == HBM_OK);
  CHECK(hand.result.oom && hand.result.first_oom.cause == HBM_CAUSE_START);
  check_band_drawn(t, &hand, 0);
  hbm_report_run_release(&hand);
  hbm_trace_free(t);

  /* 7. a failure mid-trace: the run's own live band, exact, slice by slice
   * (the failed request is not live), drawn from every slice */
  const char *mid = "hbm-trace 1\ncapacity 64MiB\na x 40MiB\na y 40MiB\nf x\na z 10MiB\nf z\n";
  CHECK(hbm_trace_parse_text(mid, strlen(mid), "mid", &t, &d) == HBM_OK);
  CHECK(hbm_report_run_policy(t, "bestfit", NULL, NULL, 0, NULL, NULL, &hand) == HBM_OK);
  CHECK(hand.result.oom && hand.result.first_oom.event == 1 && hand.result.first_oom.cause != HBM_CAUSE_START);
  /* live after each event; the first slice holds the start's too (nothing live) */
  static const uint64_t most[5] = {40 * MIB, 40 * MIB, 0, 10 * MIB, 0}, fewest[5] = {0, 40 * MIB, 0, 10 * MIB, 0};
  CHECK(hand.live_buckets == 5);
  for (size_t k = 0; k < hand.live_buckets && k < 5; k++)
    CHECK(hand.live_min[k] == fewest[k] && hand.live_max[k] == most[k]);
  check_band_drawn(t, &hand, 1);
  hbm_report_run_release(&hand);
  hbm_trace_free(t);
  return test_done("test_html");
}
