/* fuzz_replay.c: libFuzzer target for replay: any text trace that parses
 * (starting states included) goes through every policy on a small device,
 * with the policy's invariants checked after every event
 * (hbm_replay_options.check_every), and through zoned with plan:always,
 * with moves over 2 MiB chunks, and with slots for blocks of 4 MiB and more. A replay must end HBM_OK, a failed
 * request being a result (oom), not an error; only running out of host
 * memory may end it otherwise. The checks include the replay's own figures
 * (live <= allocated <= reserved <= the device, the largest free request
 * within the free total, live by purpose summing to live). Traces are capped at 512 events and blocks
 * so that one input stays quick.
 * Seed corpus: fuzz/corpus/replay/ (hand-written traces, starting states). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_policies.h"
#include "hbm.h"
#include "trace/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *const *policies;
  int npolicies = fuzz_policies(&policies);
  hbm_trace *trace = NULL;
  hbm_diag diag;
  memset(&diag, 0, sizeof diag);
  if (hbm_trace_parse_text((const char *)data, size, "fuzz.trace", &trace, &diag) != HBM_OK) return 0;
  if (trace->nevents > 512 || trace->ninit_blocks > 512) {
    hbm_trace_free(trace);
    return 0;
  }
  /* every policy with its defaults, then zoned's other paths: plans made
   * whenever two steps match, moves over the smallest chunks, and slots */
  static const char *const extra[][2] = {
      {"zoned", "plan:always"}, {"zoned", "moves:on,chunk:2MiB"}, {"zoned", "slot:4MiB"}};
  int nextra = (int)(sizeof extra / sizeof extra[0]);
  for (int i = 0; i < npolicies + nextra; i++) {
    hbm_replay_options o = {.policy = i < npolicies ? policies[i] : extra[i - npolicies][0],
                            .conf = i < npolicies ? NULL : extra[i - npolicies][1],
                            .device = "sim:256MiB", .check_every = 1};
    hbm_replay_result r;
    int rc = hbm_replay(trace, &o, &r);
    if (rc != HBM_OK && rc != HBM_EHOSTMEM) abort();
  }
  hbm_trace_free(trace);
  return 0;
}
