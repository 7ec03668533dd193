/* snapshot.h: PyTorch memory snapshots (torch.cuda.memory._dump_snapshot) as
 * hbm traces. hbm_snapshot_to_trace (trace.h) is the plain entry point; this
 * header adds the choice of device for multi-device snapshots.
 * docs/snapshot-import.md describes what is read and how the starting state
 * is reconstructed. */
#ifndef HBM_SNAPSHOT_H
#define HBM_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "trace/trace.h"

typedef struct hbm_snapshot_options {
  int device; /* -1: the first device with trace entries (else the first with segments) */
} hbm_snapshot_options;

/* Parses the pickle and builds the trace of one device. HBM_EPARSE with diag
 * (file = name; offset = byte offset for malformed pickles; for a snapshot
 * that parses but is inconsistent, the message names the entry, e.g.
 * "device_traces[0][17]"). HBM_EHOSTMEM when host memory runs out. */
int hbm_snapshot_import(const uint8_t *data, size_t len, const char *name,
                        const hbm_snapshot_options *options, hbm_trace **out, hbm_diag *diag);

/* Trace events made from snapshot entries carry the entry's index + 1 in
 * hbm_event.line, and the trace its device (hbm_trace_where names the entry
 * "device_traces[D][line - 1]"). */

#endif
