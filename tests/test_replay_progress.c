/* test_replay_progress: a replay reports its progress every 2^20 events,
 * counting the events done, and once more at the end with all of them (the
 * CLI's progress line on long traces reads these). A replay up to a layout
 * (hbm_report_layout_at) reports against the event it stops at. */
#include "hbm.h"
#include "report/html.h"
#include "testutil.h"
#include "trace/trace.h"

typedef struct progress_log {
  uint64_t calls, done[8], total;
} progress_log;

static void on_progress(uint64_t done, uint64_t total, void *arg) {
  progress_log *l = arg;
  if (l->calls < 8) l->done[l->calls] = done;
  l->calls++;
  l->total = total;
}

int main(void) {
  /* 2^20 + 3 allocations, each freed at once: 2^21 + 6 events */
  const uint64_t pairs = (1u << 20) + 3, events = 2 * pairs;
  hbm_trace *t;
  CHECK(hbm_trace_new("progress", &t) == HBM_OK);
  for (uint64_t i = 0; i < pairs; i++) {
    CHECK(hbm_trace_alloc(t, 0, 4096, HBM_TAG_TEMP, 0) == HBM_OK);
    CHECK(hbm_trace_free_id(t, 0) == HBM_OK);
  }
  progress_log l = {0};
  hbm_replay_options o = {.policy = "bestfit", .device = "sim:64MiB", .on_progress = on_progress, .progress_arg = &l};
  hbm_replay_result r;
  CHECK(hbm_replay(t, &o, &r) == HBM_OK);
  printf("test_replay_progress: %llu events, %llu reports: %llu, %llu, %llu\n", (unsigned long long)events,
         (unsigned long long)l.calls, (unsigned long long)l.done[0], (unsigned long long)l.done[1],
         (unsigned long long)l.done[2]);
  CHECK_EQ_U64(l.calls, 3);
  CHECK_EQ_U64(l.done[0], 1u << 20);
  CHECK_EQ_U64(l.done[1], 2u << 20);
  CHECK_EQ_U64(l.done[2], events);
  CHECK_EQ_U64(l.total, events);

  /* up to the layout after 2^21 + 1 events: reports at 2^20 and 2^21, of 2^21 + 1 */
  progress_log m = {0};
  hbm_report_run run = {0};
  const uint64_t at = (2u << 20) + 1;
  CHECK(hbm_report_layout_at(t, "bestfit", NULL, "sim:64MiB", at, on_progress, &m, &run) == HBM_OK);
  CHECK_EQ_U64(m.calls, 2);
  CHECK_EQ_U64(m.done[0], 1u << 20);
  CHECK_EQ_U64(m.done[1], 2u << 20);
  CHECK_EQ_U64(m.total, at);
  CHECK_EQ_U64(run.layout_event, at);
  hbm_report_run_release(&run);
  hbm_trace_free(t);
  return test_done("test_replay_progress");
}
