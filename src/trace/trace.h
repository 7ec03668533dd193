/* trace.h: the in-memory trace every tool reads, writes and replays.
 *
 * Text form v1 (docs/trace-format.md is the contract):
 *   hbm-trace 1
 *   capacity 96GiB                 optional
 *   conf expandable_segments:True  optional: allocator settings the trace was recorded with
 *   s [N]                          step boundary (N optional, else previous + 1)
 *   a ID SIZE [TAG] [STREAM] [@ADDR] [refused]   allocate; @ADDR = where the recorded allocator
 *                                  put it; refused = it refused the request (an OOM)
 *   f ID                           free
 *   seg ADDR SIZE [STREAM] [small|large]   recorded segment allocation (cudaMalloc / map)
 *   segfree ADDR SIZE              recorded segment release (empty_cache / release on retry)
 *   init-seg ADDR SIZE STREAM small|large [expandable]   starting state: a segment
 *   init-blk ADDR SIZE ID|- [REQUEST [TAG]]               starting state: block in the last init-seg
 *                                                         ('-' = a free block)
 * Policies never see @ADDR or segment addresses; they seed the starting state,
 * and give PyTorch's model's new segments the recorded address (fidelity, and
 * replay of the recording's own allocator on sim: replay/seg_hints.h).
 */
#ifndef HBM_TRACE_H
#define HBM_TRACE_H

#include "hbm.h"

typedef enum hbm_event_kind {
  HBM_EV_ALLOC = 0,
  HBM_EV_FREE,
  HBM_EV_STEP,
  HBM_EV_SEG_ALLOC,  /* recorded: size, addr, stream, pool in tag field (0 large, 1 small) */
  HBM_EV_SEG_FREE,   /* recorded: size, addr */
} hbm_event_kind;

/* hbm_event.flags */
#define HBM_EV_REFUSED 1u /* alloc: the recorded allocator refused this request (a
                           * snapshot's oom entry); freed by the next event */

#define HBM_NO_ID UINT32_MAX
#define HBM_NO_ADDR UINT64_MAX

/* One event, 32 bytes. For alloc/free, `id` is a dense index (0..nids-1) that
 * names one allocation at a time; ids may be reused after a free. */
typedef struct hbm_event {
  uint8_t kind;     /* hbm_event_kind */
  uint8_t tag;      /* hbm_tag for alloc */
  uint16_t flags;
  int32_t stream;
  uint32_t id;
  uint32_t line;    /* source line (text traces), for messages */
  uint64_t size;    /* request bytes (alloc), segment bytes (seg events), step number (step) */
  uint64_t addr;    /* recorded address or HBM_NO_ADDR */
} hbm_event;

/* Starting state reconstructed from a snapshot. Blocks tile their segment
 * exactly, in address order. */
typedef struct hbm_init_segment {
  uint64_t addr, size;
  int32_t stream;
  uint8_t small;      /* 1: small pool, 0: large pool */
  uint8_t expandable;
  uint32_t first_block, nblocks; /* into hbm_trace.init_blocks */
  uint32_t line;      /* source line (text traces), for messages; 0 if none */
} hbm_init_segment;

typedef struct hbm_init_block {
  uint64_t addr, size;   /* size: block size (allocated bytes) */
  uint64_t request;      /* requested bytes for live blocks */
  uint32_t id;           /* live allocation id, or HBM_NO_ID for a free block */
  uint32_t line;         /* source line (text traces), for messages; 0 if none */
  uint8_t tag;
} hbm_init_block;

struct hbm_trace {
  char *name;             /* file name or generator description */
  /* The file it was read from (hbm_trace_set_source), by device and inode:
   * a path would name another file after a chdir. */
  uint8_t has_source;
  uint64_t source_dev, source_ino;
  char *conf;             /* recorded allocator settings, or NULL */
  uint64_t capacity;      /* 0 if unknown */
  hbm_event *events;
  uint64_t nevents, events_cap;
  uint32_t nids;          /* dense ids in use: 0..nids-1 */
  char **id_names;        /* optional: names from a text trace (index = id); NULL = "#id" */
  hbm_init_segment *init_segments;
  uint32_t ninit_segments, init_segments_cap;
  hbm_init_block *init_blocks;
  uint32_t ninit_blocks, init_blocks_cap;
  uint64_t peak_live_cache; /* 0 = not computed; read and written atomically */
  uint8_t from_snapshot;  /* events came from device_traces[snapshot_device]: line = entry + 1 */
  int32_t snapshot_device;
  /* A snapshot's segments that belonged to a private pool (CUDA graph
   * capture, torch.cuda.MemPool) when it was taken. No policy keeps such
   * pools apart, so a replay places their blocks as the default pool's: the
   * tools say so. Not carried by text traces. */
  uint32_t private_pool_segments;
  uint64_t private_pool_bytes;
};

/* ---- building a trace (generators, importers) ----
 * All return HBM_OK or HBM_EHOSTMEM. */
int hbm_trace_new(const char *name, hbm_trace **out);
int hbm_trace_push(hbm_trace *t, const hbm_event *ev);
int hbm_trace_alloc(hbm_trace *t, uint32_t id, uint64_t size, hbm_tag tag, int stream);
int hbm_trace_free_id(hbm_trace *t, uint32_t id);
int hbm_trace_step(hbm_trace *t, uint64_t step);
int hbm_trace_set_conf(hbm_trace *t, const char *conf);
int hbm_trace_add_init_segment(hbm_trace *t, const hbm_init_segment *seg);
int hbm_trace_add_init_block(hbm_trace *t, const hbm_init_block *blk);
/* Makes sure ids 0..n-1 are valid. */
void hbm_trace_reserve_ids(hbm_trace *t, uint32_t n);

/* Checks alloc/free pairing (no free of a dead id, no alloc of a live id) and
 * the starting state: segments that neither wrap past the top of the address
 * space nor overlap, each tiled in 512-byte blocks; a conf that PyTorch's
 * settings parser takes; and recorded addresses (hbm_trace_check_recorded).
 * HBM_EPARSE with diag naming the event, segment or setting (and its line,
 * for text traces). */
int hbm_trace_validate(const hbm_trace *t, hbm_diag *diag);
/* Recorded addresses of a paired trace: no allocation's [@ADDR, @ADDR +
 * request) wraps past the top of the address space or shares a byte with
 * another live at the same time (a starting-state block's [addr, addr +
 * request) included; a free ends a range, a refused request has none).
 * HBM_OK, HBM_EPARSE (diag in `file`, NULL for the trace's name, at the later
 * allocation's line, naming the other and its line), or HBM_EHOSTMEM.
 * O(n + r log r) for n events, r of them with recorded addresses. */
int hbm_trace_check_recorded(const hbm_trace *t, const char *file, hbm_diag *diag);
/* Computes the trace's peak live bytes now, so that hbm_trace_peak_live()
 * only reads it: HBM_OK or HBM_EHOSTMEM (the figure not kept). */
int hbm_trace_peak_live_prepare(hbm_trace *t);
/* The starting state's segments alone: none wraps, no two overlap. HBM_OK,
 * HBM_EPARSE (diag in `file`, NULL for the trace's name, at the line of the
 * later of two overlapping segments, naming the other), or HBM_EHOSTMEM. */
int hbm_trace_check_segments(const hbm_trace *t, const char *file, hbm_diag *diag);
/* 1 if [addr, addr + size) runs past the top of the 64-bit address space. */
static inline int hbm_range_wraps(uint64_t addr, uint64_t size) { return size > UINT64_MAX - addr; }

/* Names an event's source for messages, as the importer does: "line N" in a
 * text trace, "device_traces[D][N - 1]" in a snapshot's; "" when line is 0. */
const char *hbm_trace_where(const hbm_trace *t, uint32_t line, char *buf, size_t len);

/* Records `path` (as it names a file now) as the file the trace was read
 * from: hbm_trace_save refuses to write over it. A path that names nothing
 * records nothing. */
void hbm_trace_set_source(hbm_trace *t, const char *path);

/* Loads a PyTorch snapshot pickle from memory as a trace (snapshot.c). */
int hbm_snapshot_to_trace(const uint8_t *data, size_t len, const char *name, hbm_trace **out,
                          hbm_diag *diag);

/* Sets diag (file, line, offset, printf-style message, its control bytes
 * shown as '?': it may quote the input); returns HBM_EPARSE. */
int hbm_diag_set(hbm_diag *diag, const char *file, uint64_t line, uint64_t offset,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The largest input the readers take: 16 GiB. Real traces reach a few hundred
 * MB and PyTorch snapshots a few GB; a larger file is a mistake (a disk image,
 * /dev/zero) that would otherwise run the host out of memory. */
#define HBM_MAX_INPUT (16ull << 30)

/* Reads a whole file into a malloc'd buffer (NUL-terminated), at most
 * HBM_MAX_INPUT bytes. Past that: HBM_EPARSE, "N bytes, more than the 16.00 GiB
 * the reader takes" (a pipe or device is read up to the limit, then refused).
 * Out of host memory: HBM_EHOSTMEM with diag naming the file and the bytes.
 * An open or a read interrupted by a signal (EINTR; opening a FIFO waits for
 * its writer) is asked again; any other error is HBM_EIO, with nothing
 * handed back. A regular file that says a size above 0 is read into one
 * buffer of its size + 2 (the NUL, and the byte the read that finds the end
 * asks for); anything whose size is not known up front (a pipe, a device, a
 * file that says 0: an empty one, or in /proc) into 64 KiB that doubles
 * whenever all but the NUL's byte is full, never past the limit + 2
 * (tests/test_io_failure.c). An empty path: HBM_EPARSE, "expected a file
 * path, got an empty one". */
int hbm_read_file(const char *path, char **data, size_t *len, hbm_diag *diag);
/* The same with another limit (tests). */
int hbm_read_file_max(const char *path, uint64_t max, char **data, size_t *len, hbm_diag *diag);
/* Writes data to path atomically: path.tmp.PID.N then rename (through a
 * symbolic link, next to the file it names; path's last part cut where the
 * suffix would take it past NAME_MAX), keeping a replaced file's mode.
 * A link whose file cannot be known (a loop, a directory that may not be
 * searched, realpath failing) is HBM_EIO (HBM_EHOSTMEM where realpath ran out
 * of memory) naming the path and why, the link kept; a dangling link names
 * no file yet and is replaced by the new one, as a missing path is created.
 * After the rename the directory is fsync'd, so that the new name survives a
 * crash; where it cannot be (no permission to open it, EINVAL and the like
 * from a file system without it) that is no failure, but an fsync that fails
 * is HBM_EIO, "written, but the directory could not be synced": the new
 * bytes are in place, the old ones gone, the name maybe not yet durable.
 * A path that is the very file of standard output or error (/dev/stdout,
 * /proc/self/fd/1, the file's own name) is written through that descriptor,
 * where it stands (after what `>>` or earlier commands wrote); standard input's
 * regular file is refused as its descriptor refuses writes, the file kept; a descriptor
 * path whose descriptor is closed is HBM_EIO, no file made. Any other path
 * that is neither a regular file nor absent (a device, a FIFO) is written in
 * place, not replaced. An open interrupted by a signal is asked again. An
 * empty path: HBM_EINVAL with diag saying so. */
int hbm_write_file_atomic(const char *path, const void *data, size_t len, hbm_diag *diag);

#endif
