/* fuzz_trace.c: libFuzzer target for the hbm text trace reader, through the
 * public hbm_trace_parse_text() of include/hbm.h.
 *
 * The input is handed over as it is: exactly `size` bytes, not NUL-terminated,
 * as the API promises to accept. A parsed trace is queried through the public
 * accessors; a failure must fill the diagnostic with a message.
 * Seed corpus: fuzz/corpus/trace/ (small hand-written traces). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hbm_trace *trace = NULL;
  hbm_diag diag;
  memset(&diag, 0, sizeof diag);
  int rc = hbm_trace_parse_text((const char *)data, size, "fuzz.trace", &trace, &diag);
  if (rc == HBM_OK) {
    if (!trace) abort();
    (void)hbm_trace_event_count(trace);
    (void)hbm_trace_capacity(trace);
    (void)hbm_trace_peak_live(trace);
    (void)hbm_trace_name(trace);
    hbm_trace_free(trace);
  } else {
    if (rc == HBM_EPARSE && diag.message[0] == 0) abort(); /* bad input must be explained */
    if (rc != HBM_EPARSE && rc != HBM_EHOSTMEM && rc != HBM_EINVAL) abort();
  }
  return 0;
}
