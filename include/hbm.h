/* hbm.h: the one public header of libhbm.
 *
 * hbm keeps accelerator memory (HBM on NPUs and GPUs) usable through long
 * training runs: it measures fragmentation, replays allocation traces through
 * allocators, and provides allocators that do not fragment.
 *
 * Conventions
 *   - Every function that can fail returns an int: HBM_OK (0) or a negative
 *     hbm error code. On error, outputs are left untouched unless stated.
 *   - The library never prints and never exits. Errors are also reported, with
 *     a message, through the callback set by hbm_set_error_handler().
 *   - Device addresses are uint64_t. On the host device they are real pointers.
 *   - All allocator metadata lives in host memory, never inside the managed range.
 */
#ifndef HBM_H
#define HBM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HBM_VERSION_MAJOR 0
#define HBM_VERSION_MINOR 1
#define HBM_VERSION_PATCH 0
const char *hbm_version(void);

/* ---- errors ------------------------------------------------------------------ */
enum {
  HBM_OK = 0,
  HBM_ENOMEM = -1,       /* the device cannot satisfy the request (an OOM) */
  HBM_EINVAL = -2,       /* bad argument: zero or absurd size, unknown address, double free */
  HBM_EPARSE = -3,       /* malformed input (see hbm_diag for where) */
  HBM_EIO = -4,          /* a file could not be read or written */
  HBM_EUNSUPPORTED = -5, /* the device, the policy (hbm_compact on one that never moves
                            blocks) or the CPU (an AdamW impl) lacks a capability, the
                            build knows no such device kind, or a runtime is absent */
  HBM_ECORRUPT = -6,     /* an invariant check failed */
  HBM_EHOSTMEM = -7,     /* host memory for metadata could not be allocated */
  HBM_EBUSY = -8,        /* busy: the block is pinned (freeing it), or the caller's
                            before_move hook refused a compaction pass */
};
const char *hbm_strerror(int err);

/* Where bad input was found: file, 1-based line (0 if not line-oriented),
 * byte offset, and what was expected. Filled by every reader on HBM_EPARSE. */
typedef struct hbm_diag {
  char file[256];
  uint64_t line;
  uint64_t offset;
  char message[512];
} hbm_diag;

/* ---- callbacks ------------------------------------------------------------------ */
/* Errors the library detects (double free, unknown address, failed check, bad
 * settings) are described here before the error code is returned. Not
 * reported here: HBM_ENOMEM from an allocation or from a partial
 * hbm_compact() (an answer the caller handles, and hbm_stats says why),
 * HBM_EBUSY from a pass the caller's own before_move hook refused, text the
 * parsers do not accept (hbm_tag_parse, hbm_size_parse, hbm_count_parse,
 * hbm_adamw_impl_parse: HBM_EINVAL alone, as the caller holds the text), and
 * a NULL handle or pointer argument (HBM_EINVAL alone), except in
 * hbm_adamw_step, which says which of its arguments it refuses, NULL ones
 * included. Calls that take an hbm_diag (the trace and plan readers,
 * hbm_trace_save) describe their errors in it instead, not here.
 * Default: silent. */
typedef void hbm_error_fn(int err, const char *message, void *arg);
void hbm_set_error_handler(hbm_error_fn *fn, void *arg);
/* Informational output: what the caller may want to know and that is no
 * error. In this version, settings a policy was given and will not read:
 * on this device (zoned's `split` where it maps virtual memory, its mapping
 * settings in fixed zones) or beside the other settings given (zoned's
 * `trust` with `plan:off`, `trim` with `moves:off`), said as the heap is
 * created, one message for each such group. hbm_check()
 * findings are errors, reported through the error handler. Default: silent.
 * Both setters are thread-safe: a handler and its argument change together.
 * A handler runs on the thread that reports, so where several threads use
 * the library it must be thread-safe itself; it may set handlers. */
typedef void hbm_output_fn(const char *message, void *arg);
void hbm_set_output_handler(hbm_output_fn *fn, void *arg);

/* ---- tags: what an allocation is for ------------------------------------------- */
typedef enum hbm_tag {
  HBM_TAG_OTHER = 0,
  HBM_TAG_PARAM,
  HBM_TAG_GRAD,
  HBM_TAG_OPTIM,
  HBM_TAG_ACT,
  HBM_TAG_COMM,
  HBM_TAG_TEMP,
  HBM_TAG_COUNT
} hbm_tag;
/* The tag's name ("other", "param", ...); "invalid" for a value that is no
 * tag (below 0, HBM_TAG_COUNT or above), a name hbm_tag_parse refuses. */
const char *hbm_tag_name(hbm_tag tag);
/* Returns HBM_OK and sets *tag, or HBM_EINVAL for an unknown name. */
int hbm_tag_parse(const char *name, hbm_tag *tag);

/* ---- sizes ----------------------------------------------------------------------- */
/* Parses "96GiB", "512MiB", "4.2GB", "1024" (bytes). B/KiB/MiB/GiB/TiB/PiB are
 * powers of 2; KB/MB/GB/TB/PB powers of 10. Fractions allowed with a unit of KiB
 * or KB and up (not B: no fraction of a byte), any number of digits; the result is
 * exactly the nearest byte (a half rounds up). HBM_EINVAL on anything else or on
 * overflow. */
int hbm_size_parse(const char *text, uint64_t *bytes);
/* Parses a whole count: "1024", "7B", "70e9", "1.3B", "16Mi". Digits with an
 * optional fraction and exponent (e6 or e+6, not negative), then an optional
 * suffix: K, M, G or B, T (powers of 10, either case) or Ki, Mi, Gi, Ti (of
 * 2). Exact to 2^64 - 1;
 * HBM_EINVAL on a sign, hexadecimal, anything else, a value that is not whole
 * ("1.5"), overflow or more than 64 characters. */
int hbm_count_parse(const char *text, uint64_t *count);
/* Writes a human size ("4.20 GiB") into buf of len bytes, truncated as snprintf
 * truncates; returns buf (nothing written where buf is NULL or len 0). */
char *hbm_size_format(uint64_t bytes, char *buf, size_t len);

/* ---- devices ------------------------------------------------------------------- */
typedef struct hbm_device hbm_device;

typedef struct hbm_device_caps {
  char kind[16];        /* "sim", "host", ... */
  uint64_t capacity;    /* bytes the device can give this process */
  uint64_t granule;     /* page size for virtual-memory mapping */
  int vmm;              /* 1 if physical granules can be mapped anywhere in reserved ranges */
  int d2d_copy;         /* 1 if device-to-device copies are possible (data moves for real) */
  int host_visible;     /* 1 if device addresses are host pointers (host device) */
} hbm_device_caps;

/* spec: "sim:96GiB" (address arithmetic only, touches no memory) or "host:4GiB"
 * (real memory, real granule mapping through memfd + mmap). An optional
 * ",granule=2MiB" sets the granule. The capacity is rounded down to whole
 * granules (caps.capacity says what it is). HBM_EUNSUPPORTED for a kind this
 * build does not know (kinds are lower case); HBM_EINVAL for a bad size, and
 * for a host capacity the host cannot reserve address space for. */
int hbm_device_open(const char *spec, hbm_device **out);
void hbm_device_close(hbm_device *dev);
int hbm_device_get_caps(const hbm_device *dev, hbm_device_caps *caps);
/* Backend calls made so far (segment alloc/free, map/unmap, create/release). */
uint64_t hbm_device_backend_calls(const hbm_device *dev);
/* The most physical memory the device has held at once, moments inside one
 * call included (a policy that maps new memory before it gives old memory
 * back); heap statistics see only the state between calls. */
uint64_t hbm_device_peak_used(const hbm_device *dev);

/* ---- telemetry ----------------------------------------------------------------- */
/* Every field is declared once here, and expanded for the struct, the text
 * printer and the JSON writer. X(type, name, description). largest_free is
 * for the stream that takes the most: policies that keep memory per stream
 * (caching, expandable; docs/caching-model.md) may place less on another. */
#define HBM_STATS_FIELDS(X)                                                              \
  X(uint64_t, capacity, "bytes the device can give this heap")                          \
  X(uint64_t, live, "sum of requests not yet freed")                                    \
  X(uint64_t, peak_live, "highest live")                                                \
  X(uint64_t, allocated, "sum of block sizes handed out")                               \
  X(uint64_t, peak_allocated, "highest allocated")                                      \
  X(uint64_t, reserved, "bytes held from the device (bestfit, compact: their footprint)") \
  X(uint64_t, peak_reserved, "highest reserved")                                        \
  X(uint64_t, free_total, "capacity - live - what other heaps hold; at most a limit the settings set - live") \
  X(uint64_t, largest_free, "largest request that would succeed now without moving data") \
  X(double, fragmentation, "free_total / largest_free - 1")                             \
  X(uint64_t, allocs, "successful allocations")                                         \
  X(uint64_t, frees, "frees")                                                           \
  X(uint64_t, failures, "requests the policy could not place (not bad arguments)")      \
  X(uint64_t, live_blocks, "allocations alive now")                                     \
  X(uint64_t, backend_calls, "the device's runtime calls so far, every heap's on it")

#define HBM_STATS_VERSION 1

typedef struct hbm_stats {
  int version; /* HBM_STATS_VERSION */
#define HBM_STATS_DECLARE_(type, name, doc) type name;
  HBM_STATS_FIELDS(HBM_STATS_DECLARE_)
#undef HBM_STATS_DECLARE_
  uint64_t live_by_tag[HBM_TAG_COUNT]; /* live bytes per purpose */
  uint64_t peak_live_by_tag[HBM_TAG_COUNT];
} hbm_stats;

/* Fragmentation ratio as DESIGN defines it: free_total / largest_free - 1.
 * 0 when nothing is free; "infinite" is reported as 1e9 when largest_free is 0. */
double hbm_fragmentation_ratio(uint64_t free_total, uint64_t largest_free);

/* Formats stats as text lines ("live 1.00 GiB (1073741824)", counts such as
 * "allocs 3000" without a size) or as one JSON object (a fragmentation that
 * is not finite as null). Returns the length that was needed (like snprintf;
 * a NULL buf writes nothing, whatever len says); HBM_EINVAL for NULL stats,
 * and, reported and with nothing written, for a version other than
 * HBM_STATS_VERSION (hbm_heap_stats sets it; set it where you fill one). */
int hbm_stats_format(const hbm_stats *stats, int json, char *buf, size_t len);

/* ---- heaps: an allocator policy over a device ------------------------------------ */
typedef struct hbm_heap hbm_heap;

/* policy: "bestfit", "caching", "expandable", "zoned", ... (hbm_policy_names()).
 * conf: policy settings, or NULL. For caching/expandable this is PyTorch's own
 * PYTORCH_CUDA_ALLOC_CONF syntax. The heap does not own the device; the device
 * must outlive it. Heaps are thread-safe, and so are heaps that share one
 * device: every call takes the device's lock (they share its memory and
 * counters), so they take turns. A heap's free_total and largest_free leave
 * out what the other heaps on its device hold. bestfit and compact take the
 * whole device as they start, one segment their blocks are placed in: their
 * `reserved` is the footprint in it (the end of the highest live block, what
 * the layout costs), not what they hold. So no other heap can have memory of
 * that device: one created before them fails theirs (HBM_ENOMEM, reported),
 * and one created after them starts, but its requests fail (HBM_ENOMEM, the
 * answer to a request, not reported). caching, expandable and zoned take
 * memory as they need it and report it as reserved. */
int hbm_heap_create(hbm_device *dev, const char *policy, const char *conf, hbm_heap **out);
void hbm_heap_destroy(hbm_heap *heap);
/* Comma-separated list of policy names this build knows. */
const char *hbm_policy_names(void);

/* Allocates `size` bytes for purpose `tag` on `stream` (0 if unsure; any
 * int names a stream, negative ones too: policies that keep memory per stream
 * only compare them). On success *addr is the block's device address. On HBM_ENOMEM the heap is
 * unchanged apart from what the policy released trying (e.g. its cache). */
int hbm_alloc(hbm_heap *heap, uint64_t size, hbm_tag tag, int stream, uint64_t *addr);
/* Frees the block at addr. Unknown addresses and double frees are HBM_EINVAL,
 * reported through the error handler; the heap is unchanged. */
int hbm_free(hbm_heap *heap, uint64_t addr);
int hbm_heap_stats(hbm_heap *heap, hbm_stats *out);
/* A training step begins (call it before the step's first allocation). The
 * first mark may carry any number, each later one a larger number than the
 * last mark taken: HBM_EINVAL otherwise, reported through the error handler,
 * and nothing changed. Policies that learn per step use it: zoned ages its
 * cache by steps and, once steps repeat, places large blocks by a plan
 * learned from one of them (docs/zoned.md); compact with "every_steps:N" runs
 * a full compaction here, which may move blocks (docs/compaction.md): a pass
 * its before_move hook refuses is skipped (nothing moves, the mark is taken,
 * HBM_OK; the next pass is due at the next multiple of N). Optional.
 * HBM_OK, or HBM_EHOSTMEM when host memory ran out: then the mark was not
 * taken and nothing changed (mark the step again, with the same number).
 * A device copy error that stops the pass is returned, with the outcome
 * hbm_compact() describes for it (completed moves kept and reported, the
 * heap consistent), and the mark is taken: the pass counts as failed, the
 * next is due at the next multiple of N (hbm_compact() may finish sooner). */
int hbm_heap_step(hbm_heap *heap, uint64_t step);

/* Layout scan: visits live blocks and holes in address order within each
 * range the policy manages. `live` is 1 for a live block (tag meaningful), 0 for
 * a hole: free memory the policy holds there. Address space it reserved with
 * no memory behind it is not visited, so a policy that maps memory visits no
 * more than it reserved; bestfit and compact visit the whole device. Stop
 * early by returning non-zero from the visitor: hbm_heap_scan then
 * returns HBM_OK, as after a whole scan. HBM_EHOSTMEM where the scan needs host
 * memory it cannot get (caching sorts its segments). The visitor must not call
 * into the same heap: a block freed or placed mid-scan may end the walk early
 * or leave it reading a layout that is gone. */
typedef int hbm_scan_fn(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag);
int hbm_heap_scan(hbm_heap *heap, hbm_scan_fn *visit, void *arg);

/* Verifies every invariant of the heap (no overlap, every byte live or free, no
 * two free neighbours, bitmaps agree with lists, stats equal a recount, and
 * hold together: allocated <= reserved <= capacity, largest free <= free total,
 * no figure above its peak).
 * HBM_OK, or HBM_ECORRUPT after reporting each failure through the error handler;
 * HBM_EHOSTMEM when, finding nothing wrong, some check could not run for want of
 * host memory. */
int hbm_check(hbm_heap *heap);

/* ==== relocatable allocations and compaction (policy "compact"; docs/compaction.md) ====
 *
 * Under policy "compact" the heap may move live blocks, and only inside these
 * calls on that heap: hbm_alloc() and hbm_alloc_handle() (a request that fails
 * for fragmentation, free total >= request > largest free, opens a hole by
 * moving the fewest bytes it can; conf "on_failure:off" turns that off),
 * hbm_heap_step() (a full pass at each multiple of N steps, with conf
 * "every_steps:N" only) and hbm_compact(). A block moves whole; its bytes are copied on the device with
 * memmove semantics (ordered non-overlapping copies where the copy engine
 * needs them), then the block is reported once through the `moved` hook, so a
 * framework updates its tensor descriptors in bulk (CANN's
 * aclUpdateDataBufferAddr). Addresses kept outside the heap are stale after a
 * move unless updated there; a handle always resolves to the current address.
 *
 * The device must be idle on the heap's memory while blocks move: a pass that
 * is about to move data first calls `before_move`, the one global sync point
 * of the pass (synchronize streams there, or refuse).
 *
 * Pinned blocks (a kernel is using them) never move. Full compaction slides
 * movable blocks down with their order kept and never across a pinned block:
 * a pinned block is a wall, so free space just below it stays where it is.
 * Partial compaction opens its hole where no pinned block is and may fill
 * holes beside pinned blocks. Freeing a pinned block is HBM_EBUSY.
 *
 * Hooks are called with the device's lock held (a recursive one): they must
 * not call into the same heap. Policies that never move blocks answer HBM_EUNSUPPORTED. */
typedef uint64_t hbm_handle; /* 0 is never a handle; a freed handle stays invalid */

/* One moved block: its old and new address, its request size and tag. */
typedef void hbm_moved_fn(void *arg, uint64_t old_addr, uint64_t new_addr, uint64_t size,
                          hbm_tag tag);
/* A pass is about to copy `bytes` in `blocks` blocks. Called once its plan
 * and the heap's metadata for the new layout are made, so that after a 0 the
 * pass fails only where a device copy does (no host allocation is left to
 * fail; such a failure before comes with no call). Return 0 to go ahead;
 * non-zero refuses the pass (nothing moves; the call returns HBM_EBUSY, or
 * HBM_ENOMEM from an allocation that needed the pass). */
typedef int hbm_before_move_fn(void *arg, uint64_t bytes, uint64_t blocks);

typedef struct hbm_relocation_hooks {
  hbm_moved_fn *moved;             /* NULL: not told (use handles) */
  hbm_before_move_fn *before_move; /* NULL: always go ahead */
  void *arg;
} hbm_relocation_hooks;
/* Replaces the heap's hooks (NULL clears them). */
int hbm_heap_set_relocation_hooks(hbm_heap *heap, const hbm_relocation_hooks *hooks);

/* Allocates like hbm_alloc() and names the block with a handle. On error
 * *handle is untouched and nothing was allocated. HBM_EHOSTMEM also when
 * the heap's 2^32 - 1 handle slots are all live or retired (a slot retires
 * once its 2^32 - 1 generations were issued), the most it holds. */
int hbm_alloc_handle(hbm_heap *heap, uint64_t size, hbm_tag tag, int stream, hbm_handle *handle);
/* Frees the handle's block. HBM_EINVAL for a handle that is not live,
 * HBM_EBUSY while pinned. Freeing the block by address (hbm_free) also ends
 * its handle. */
int hbm_free_handle(hbm_heap *heap, hbm_handle handle);
/* The block's current address. HBM_EINVAL for a handle that is not live. */
int hbm_handle_addr(hbm_heap *heap, hbm_handle handle, uint64_t *addr);
/* Pins count: a block pinned twice moves again after two unpins. HBM_EINVAL
 * for a handle that is not live, or an unpin of a block not pinned. */
int hbm_pin(hbm_heap *heap, hbm_handle handle);
int hbm_unpin(hbm_heap *heap, hbm_handle handle);

typedef struct hbm_compact_options {
  uint64_t need;  /* 0: full compaction. Else partial: open one hole of at least
                   * `need` bytes, moving only what that takes */
  int dry_run;    /* 1: plan and fill the result, move nothing */
} hbm_compact_options;

typedef enum hbm_compact_kind {
  HBM_COMPACT_NONE = 0, /* nothing needed moving */
  HBM_COMPACT_FULL,     /* every movable block slid down, order kept */
  HBM_COMPACT_EVACUATE, /* the blocks of one window moved into holes outside it */
  HBM_COMPACT_SLIDE,    /* one run of blocks slid down, its holes joined */
} hbm_compact_kind;

typedef struct hbm_compact_result {
  hbm_compact_kind kind;
  uint64_t moved_bytes;     /* block bytes copied */
  uint64_t moved_blocks;    /* blocks moved (the `moved` hook fired once for each) */
  /* The least bytes any plan must copy to leave a hole as large as the one
   * this pass opened (partial: `need`; full: its largest hole): over every
   * window of that size free of pinned blocks, the smallest total size of the
   * live blocks it intersects (docs/compaction.md). moved_bytes >= this. */
  uint64_t min_moved_bytes;
  uint64_t copies;          /* device copies (moves of adjacent blocks joined; with ordered
                             * copies, an overlapping one split into its chunks) */
  uint64_t hole_addr, hole_size; /* the hole opened, all of the free run it lies in (partial: at
                                  * least `need`; full: the largest free run after) */
  uint64_t largest_free_before, largest_free_after;
  uint64_t pinned_blocks;   /* pinned blocks the pass had to leave in place */
} hbm_compact_result;

/* One compaction pass now. Partial: HBM_ENOMEM when no plan can open `need`
 * (free total short, or pinned blocks in the way); nothing moved. HBM_EBUSY
 * when before_move refused. HBM_EHOSTMEM: nothing moved. A device copy that
 * fails stops the pass and its error is returned: the blocks whose copies
 * completed have moved and were reported through the `moved` hook, every
 * other block stays where it was with its bytes (docs/compaction.md says
 * when the failed copy's own blocks may not), and the heap is consistent
 * (hbm_check() holds) and usable. result may be NULL; on error it is
 * untouched. An allocation whose pass meets a device copy error returns
 * that error, with the same outcome. */
int hbm_compact(hbm_heap *heap, const hbm_compact_options *options, hbm_compact_result *result);

/* Totals since the heap was created (replay reports the same names). */
typedef struct hbm_compact_stats {
  uint64_t compactions;      /* passes run (not dry runs), whatever they moved */
  uint64_t sync_points;      /* passes that moved data: each needed the device idle */
  uint64_t moved_bytes, moved_blocks, min_moved_bytes;
  uint64_t full_compactions, partial_compactions;
  uint64_t failed_compactions; /* passes that could not open the hole asked for (partial, or
                                * full under "on_failure:full": nothing moved), passes
                                * before_move refused (nothing moved, no sync point), and
                                * passes a device copy error stopped (their completed moves count
                                * in moved_bytes, moved_blocks; nothing in min_moved_bytes) */
} hbm_compact_stats;
int hbm_compact_stats_get(hbm_heap *heap, hbm_compact_stats *out);
/* ==== end of relocatable allocations and compaction ==================================== */

/* ---- traces --------------------------------------------------------------------- */
typedef struct hbm_trace hbm_trace;

/* Reads a trace file: hbm text trace v1, or a PyTorch memory snapshot pickle
 * (detected by content). On HBM_EPARSE/HBM_EIO, diag says where and what; a
 * file over 16 GiB, and an empty path, are HBM_EPARSE, unread. On
 * HBM_EHOSTMEM diag names the file. */
int hbm_trace_load(const char *path, hbm_trace **out, hbm_diag *diag);
/* The same, reading device `device` of a snapshot (-1: the first with trace
 * entries, as hbm_trace_load does; below -1: HBM_EINVAL, diag says so). A text trace, or a
 * device the snapshot lacks, with device >= 0: HBM_EPARSE, diag says why. */
int hbm_trace_load_device(const char *path, int device, hbm_trace **out, hbm_diag *diag);
/* Parses a text trace from memory; `name` is used in diagnostics. */
int hbm_trace_parse_text(const char *text, size_t len, const char *name, hbm_trace **out,
                         hbm_diag *diag);
/* Writes the trace as text v1, atomically: a temporary file of its own
 * (created exclusively beside the path, never an existing one), renamed over
 * the path. Refuses (HBM_EINVAL) an empty path, and to write over the file
 * the trace was read from, however the path names it (the file, not the path
 * read, is kept). */
int hbm_trace_save(const hbm_trace *trace, const char *path, hbm_diag *diag);
void hbm_trace_free(hbm_trace *trace);
uint64_t hbm_trace_event_count(const hbm_trace *trace);
uint64_t hbm_trace_capacity(const hbm_trace *trace); /* 0 when the trace names none */
/* The highest sum of live requests, starting state included: measured when the
 * trace was read, so this only reads. A trace is never changed after it is read:
 * threads may share one (replay it, ask it) without a lock. */
uint64_t hbm_trace_peak_live(const hbm_trace *trace);
const char *hbm_trace_name(const hbm_trace *trace);
/* How many of a snapshot's segments (and their bytes, in *bytes if not NULL)
 * belonged to a private memory pool (CUDA graph capture, torch.cuda.MemPool)
 * when it was taken; 0 for a text trace. No policy keeps private pools apart,
 * so a replay places their blocks as the default pool's and may differ from
 * the recorded run there (docs/snapshot-import.md). */
uint32_t hbm_trace_private_pools(const hbm_trace *trace, uint64_t *bytes);

/* ---- replay -------------------------------------------------------------------- */
typedef enum hbm_oom_cause {
  HBM_CAUSE_NONE = 0,
  HBM_CAUSE_CAPACITY,      /* live + request > capacity */
  HBM_CAUSE_FRAGMENTATION, /* free total >= request > largest free, and the live blocks
                              as placed (allocated) leave room for the request */
  HBM_CAUSE_START,         /* the trace's starting state (init-seg/init-blk) does not fit:
                              its live bytes (the report's request) exceed the capacity
                              (request > free_total), or the policy cannot hold them (as
                              recorded, segments whole). The run fails before its first
                              event (event 0, nothing replayed; max_frag 0) */
  HBM_CAUSE_RULES,         /* the memory could hold it, the policy's own rules refused it:
                              request <= largest free (a 5 MiB request needs a 20 MiB
                              segment under PyTorch's rules, a small one its small pool,
                              a block its own stream), or live + request > limit (a cap
                              such as per_process_memory_fraction), or the free memory is
                              in one piece its granularity cannot use (expandable's 20 MiB
                              pages; a hole at a segment's end goes on into the pages it
                              maps next, one piece with the room beyond) */
  HBM_CAUSE_OVERHEAD,      /* allocated + request > limit >= live + request: the live
                              blocks' rounding (and unsplit remainders) holds the bytes
                              free total counts */
} hbm_oom_cause;
/* The cause's name ("none", "capacity", ...); "invalid" for a value that is
 * no cause. */
const char *hbm_oom_cause_name(hbm_oom_cause cause);

/* A sample taken at each step boundary (or every N events). */
typedef struct hbm_sample {
  uint64_t event, step;
  uint64_t live, allocated, reserved, free_total, largest_free;
  double fragmentation;
  uint64_t backend_calls;  /* device calls so far, the policy's setup included:
                              the difference between two samples is what the
                              events between them cost */
  uint64_t alloc_events;   /* allocation requests replayed so far: with
                              backend_calls, calls per allocation over any
                              span of samples */
  uint64_t live_by_tag[HBM_TAG_COUNT]; /* live split by purpose: bytes requested
                              and not yet freed, per tag (they sum to live) */
} hbm_sample;
typedef void hbm_sample_fn(const hbm_sample *sample, void *arg);
/* Progress: done of total events. */
typedef void hbm_progress_fn(uint64_t done, uint64_t total, void *arg);

typedef struct hbm_replay_options {
  const char *policy;      /* one policy name */
  const char *conf;        /* policy settings (alloc-conf), or NULL */
  const char *device;      /* device spec; NULL: "sim:<trace capacity>" */
  uint64_t every;          /* 0: sample at step boundaries; N: every N events */
  int verify_data;         /* host device: fill each block, verify on free (on another
                              device HBM_EUNSUPPORTED, reported) */
  hbm_sample_fn *on_sample;
  void *sample_arg;
  hbm_progress_fn *on_progress;
  void *progress_arg;
  /* Called once, at the first failed request, with the layout at that moment
   * (live blocks with their tags, and holes, in address order). */
  hbm_scan_fn *on_oom_layout;
  void *oom_layout_arg;
  /* With on_layout: after layout_event events (1 to the trace's events; else
   * none is taken), the layout then, as on_oom_layout has it, reached as the
   * whole run reaches it (starting state, failed requests, moved blocks). The
   * replay ends there: *result is then a partial one, not a run's result. */
  uint64_t layout_event;
  hbm_scan_fn *on_layout;
  void *layout_arg;
  /* With on_layout: 1 takes it after the starting state instead, before any
   * event (layout_event is then not read), with a sample at event 0 first;
   * none where the starting state did not fit. */
  int layout_at_start;
  /* N > 0: the policy's invariants (those hbm_check() runs) and the
   * replay's figures (live <= allocated <= reserved <= capacity, largest
   * free within capacity - live, live by purpose summing to live) after the
   * starting state and after every
   * N events; the first broken one ends the
   * replay with HBM_ECORRUPT, reported through the error callback. Slow, and
   * counted in ns_per_event: for tests and bug reports. On a sim device it
   * also checks the device's bookkeeping, fails the replay once the device has
   * refused a call that breaks the device contract, and, after the policy is
   * destroyed, that it left nothing on the device. */
  uint64_t check_every;
  /* 1 on a sim device: its ledger takes handles, mappings and copies on trust
   * (hbm_sim_track_mappings in src/device/device.h), so that ns_per_event
   * times the policy alone rather than the simulator's bookkeeping of each
   * backend call; `hbm bench replay` sets it. The contract's rules on them
   * are then not checked. */
  int untracked_mappings;
  /* live_buckets > 0 (at most the trace's events), with live_min and
   * live_max of as many entries: the least and most live bytes after each
   * event of each of live_buckets equal slices of the events (slice k: events
   * k * n / live_buckets up to the next slice's first, of n), under this
   * policy: a request it failed is not live. Every entry starts at the
   * starting state's live bytes, so slices a replay ended before (a starting
   * state that did not fit, layout_event) keep that. The report page's band. */
  uint64_t live_buckets;
  uint64_t *live_min, *live_max;
} hbm_replay_options;

typedef struct hbm_oom_report {
  uint64_t event;          /* 0-based index of the failing event */
  uint64_t step;
  uint64_t request;
  uint64_t free_total;
  uint64_t largest_free;
  hbm_oom_cause cause;
  uint64_t allocated;      /* the live blocks as placed (requests rounded up) */
  uint64_t limit;          /* what the policy may hold: the capacity, or less under a cap
                              it was set with (per_process_memory_fraction), or what it
                              holds where that is more (expandable's last page) */
  int refused;             /* 1: the recorded allocator refused this request too */
} hbm_oom_report;

#define HBM_MAX_COUNTERS 32 /* policy-specific figures a replay reports */

typedef struct hbm_replay_result {
  char policy[32];
  uint64_t events, capacity;
  uint64_t peak_live, peak_allocated;
  uint64_t peak_reserved;  /* the most the policy reported reserved, between events */
  uint64_t peak_device;    /* the device's high-water mark, moments inside an event included
                              (hbm_device_peak_used); a policy that takes the device as one
                              segment (bestfit, compact, zoned without virtual memory) holds
                              all of it */
  double efficiency;       /* peak_live / peak_reserved */
  double max_frag;         /* highest fragmentation ratio over the samples and the moment of
                              the first failure (0 when the starting state did not fit: its
                              one sample has no ratio) */
  uint64_t backend_calls;
  uint64_t backend_calls_after_first_step;
  uint64_t alloc_events;
  double ns_per_event;     /* 0 when no event ran (the starting state did not fit) */
  uint64_t failures;       /* requests that failed (skipped) */
  uint64_t refused_requests; /* requests the recorded allocator refused (a PyTorch snapshot's
                                oom entries, replayed as requests) */
  uint64_t refused_placed;   /* of those, the ones this policy placed (let go at once: what
                                the run would have asked next is not recorded) */
  int oom;                 /* 1 if any request failed; first_oom then holds the first */
  hbm_oom_report first_oom;
  uint64_t verified_blocks; /* with verify_data: blocks whose pattern was checked */
  int ncounters;           /* policy-specific figures (e.g. moved_bytes) */
  struct { char name[32]; double value; } counters[HBM_MAX_COUNTERS];
  uint64_t peak_reserved_event; /* after how many events reserved first stood at
                                   peak_reserved (0: with the starting state) */
} hbm_replay_result;

/* Replays every event of `trace` through one policy. A failed request is
 * skipped (later frees of it ignored) and the first failure is reported.
 * Returns HBM_OK even when requests failed (see result->oom); an error code
 * only when the replay itself could not run. Unlike other calls, *result is
 * written on error too: cleared, then filled as far as the replay got (it is
 * not a result to report). */
int hbm_replay(const hbm_trace *trace, const hbm_replay_options *options,
               hbm_replay_result *result);

/* ---- kernels: fused mixed-precision AdamW (src/kernels/) ----------------------- */
/* One AdamW step (decoupled weight decay, PyTorch's torch.optim.AdamW) over
 * many tensors in one call, reading and writing each element once:
 * 28 bytes per parameter. BF16 values are passed as their raw uint16_t bits.
 * The arithmetic is PyTorch's `_single_tensor_adamw` order in FP32, one
 * rounding per operation (docs/adamw.md); every implementation, CPU or CUDA,
 * gives bit-identical results for the same inputs (a NaN's sign and payload
 * aside: x86 and CUDA make different default NaNs). */
typedef struct hbm_adamw_tensor {
  uint16_t *weight;       /* BF16 model weight: written from the new master */
  const uint16_t *grad;   /* BF16 gradient: read */
  float *master;          /* FP32 master weight: read and written */
  float *exp_avg;         /* FP32 first moment (m) */
  float *exp_avg_sq;      /* FP32 second moment (v) */
  uint64_t count;         /* elements, at least 1 */
  int weight_decay;       /* nonzero: apply the group's weight decay (off for biases, norms) */
} hbm_adamw_tensor;

typedef enum hbm_adamw_rounding {
  HBM_ADAMW_ROUND_NEAREST_EVEN = 0, /* BF16 write-back rounds to nearest even; NaN stays NaN */
  HBM_ADAMW_ROUND_STOCHASTIC = 1,   /* rounds up with probability of the dropped fraction */
} hbm_adamw_rounding;

typedef enum hbm_adamw_impl {
  HBM_ADAMW_AUTO = 0,   /* the fastest this CPU supports, threaded */
  HBM_ADAMW_REFERENCE,  /* portable scalar code, one thread: the oracle the others match */
  HBM_ADAMW_SCALAR,     /* the reference's element code, threaded (non-x86 fallback) */
  HBM_ADAMW_AVX2,
  HBM_ADAMW_AVX512,
  HBM_ADAMW_IMPL_COUNT
} hbm_adamw_impl;

typedef struct hbm_adamw_options {
  double lr, beta1, beta2, eps, weight_decay;
  uint64_t step;          /* 1 on the first update: PyTorch's state["step"] after its increment */
  double grad_scale;      /* gradients are divided by this (loss scaling); 1 for none */
  hbm_adamw_rounding rounding;
  uint64_t seed;          /* stochastic rounding: bits depend on (seed, step, tensor position,
                           * element index) only, never on threads or implementation */
  int threads;            /* 0: one per CPU this process may run on, fewer for small steps;
                           * N: N threads, at most one per 64 elements begun (65 take 2)
                           * and at most 256 */
  hbm_adamw_impl impl;
} hbm_adamw_options;

/* PyTorch's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay
 * 1e-2, step 1, grad_scale 1, nearest-even rounding, seed 0, auto threads/impl. */
void hbm_adamw_options_init(hbm_adamw_options *options);

/* Applies one step to every tensor. HBM_EINVAL (reported through the error
 * handler, nothing written) for: no tensors, a NULL pointer, a zero count,
 * a pointer not aligned to its element type, arrays that overlap, lr,
 * weight decay or eps negative or not finite, a beta outside [0, 1), step 0,
 * grad_scale not positive and finite once rounded to float, threads
 * negative, more than 2^56 elements (in one tensor or in all), an unknown
 * rounding or impl.
 * HBM_EUNSUPPORTED when the chosen impl is not available on this CPU.
 * HBM_EHOSTMEM (nothing written) when host memory for its bookkeeping runs out.
 * NaN or Inf gradients propagate as in PyTorch (the step is not skipped):
 * callers that use loss scaling check for them first. Thread-safe. */
int hbm_adamw_step(const hbm_adamw_tensor *tensors, size_t ntensors,
                   const hbm_adamw_options *options);

/* The threads hbm_adamw_step() runs a step of `elements` parameters on, with
 * options->threads = `requested_threads` and options->impl = `impl` (the
 * reference: 1). For reports; the step itself decides the same way. 0 where
 * the step refuses these inputs: requested_threads < 0, an unknown impl or
 * one this CPU lacks, no elements or more than 2^56. */
int hbm_adamw_thread_count(uint64_t elements, int requested_threads, hbm_adamw_impl impl);

/* 1 if `impl` can run here (HBM_ADAMW_AUTO always can). */
int hbm_adamw_impl_available(hbm_adamw_impl impl);
/* What HBM_ADAMW_AUTO runs on this CPU. */
hbm_adamw_impl hbm_adamw_impl_best(void);
/* "auto", "reference", "scalar", "avx2", "avx512"; NULL for an unknown value. */
const char *hbm_adamw_impl_name(hbm_adamw_impl impl);
/* Parses a name above; HBM_EINVAL for anything else. */
int hbm_adamw_impl_parse(const char *name, hbm_adamw_impl *impl);

/* The same step on a CUDA device, one kernel launch for the whole list.
 * Tensor pointers are device pointers; the `tensors` array itself is host
 * memory. `cuda_stream` is a cudaStream_t (NULL: the default stream); the
 * call is asynchronous on it. options->threads and impl choose nothing here,
 * but are checked as hbm_adamw_step checks them (HBM_EINVAL for a negative
 * thread count or an unknown impl).
 * Defined in libhbm_cuda (built where nvcc is present). HBM_EUNSUPPORTED with
 * the CUDA error reported when no device or runtime is usable. */
int hbm_adamw_step_cuda(const hbm_adamw_tensor *tensors, size_t ntensors,
                        const hbm_adamw_options *options, void *cuda_stream);

#ifdef __cplusplus
}
#endif
#endif /* HBM_H */
