/* fuzz_snapshot.c: libFuzzer target for PyTorch snapshot import: pickle
 * parsing, then the snapshot structure (segments, blocks, trace entries) and
 * the reconstruction of the starting state. A snapshot that imports must give
 * a trace that validates, and one that does not must say why.
 * Seed corpus: fuzz/corpus/snapshot/ (the generated fixtures). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hbm_trace *trace = NULL;
  hbm_diag diag;
  memset(&diag, 0, sizeof diag);
  int rc = hbm_snapshot_to_trace(data, size, "fuzz.pickle", &trace, &diag);
  if (rc == HBM_OK) {
    if (!trace) abort();
    hbm_diag check;
    memset(&check, 0, sizeof check);
    if (hbm_trace_validate(trace, &check) != HBM_OK) abort(); /* import made an unpaired trace */
    (void)hbm_trace_peak_live(trace);
    hbm_trace_free(trace);
  } else if (rc == HBM_EPARSE && diag.message[0] == 0) {
    abort(); /* bad input must be explained */
  }
  return 0;
}
