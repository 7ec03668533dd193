/* test_html.c: the report page is self-contained and says what happened:
 * a workload replayed at a capacity below its peak fails for capacity, at one
 * above it every policy gets a section with its charts; the exact live
 * envelope agrees with the trace's peak; a layout taken at a moment accounts
 * for every live byte at that moment. */
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
  rep.title = "test <report> & more \xe9\x01 \xc3\xa9\xc2\x85"; /* a Latin-1 byte, controls (C0, C1), UTF-8 */
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
    CHECK(strstr(html, "test &lt;report&gt; &amp; more \xef\xbf\xbd\xef\xbf\xbd \xc3\xa9\xef\xbf\xbd") != NULL); /* escaped */
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
    CHECK(hbm_report_layout_at(t, p, NULL, NULL, at, r) == HBM_OK);
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
    CHECK(strstr(html, "No request failed") != NULL);
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
  return test_done("test_html");
}
