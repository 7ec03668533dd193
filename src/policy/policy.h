/* policy.h: what an allocator policy is (docs/design.md §3).
 *
 * A policy places requests over a device. It keeps no live/peak accounting:
 * the heap (public API) and replay keep that, so every policy is measured the
 * same way; a trace it reads only to seed a recorded starting state (seed).
 * One policy per file; each exports one `const hbm_policy_class
 * hbm_policy_<name>` listed in registry.c.
 *
 * Every policy struct starts with `hbm_policy base;`.
 */
#ifndef HBM_POLICY_H
#define HBM_POLICY_H

#include "hbm.h"
#include "device/device.h"
#include "trace/trace.h"

typedef struct hbm_policy_class hbm_policy_class;

typedef struct hbm_policy {
  const hbm_policy_class *cls;
  hbm_device *dev;
} hbm_policy;

/* What only the policy knows. `largest_free` follows docs/design.md §2: the largest
 * single request that would succeed now without moving data, counting what the
 * policy would release on pressure (cached segments, unmapped capacity). */
typedef struct hbm_policy_usage {
  uint64_t reserved;
  uint64_t largest_free;
  uint64_t limit; /* the most the policy may hold, where a setting caps it below the capacity
                   * (0 is a limit: per_process_memory_fraction:0); else UINT64_MAX */
} hbm_policy_usage;

/* What the policy may hold on a device of `capacity`: the capacity, or its
 * limit below it, or what it holds past that limit: as PyTorch's, expandable
 * checks a request against the limit and then maps whole pages, so it can
 * hold up to a page more, and that memory is its own. Free for the policy is
 * this less live. */
static inline uint64_t hbm_policy_room(const hbm_policy_usage *u, uint64_t capacity) {
  if (u->limit >= capacity) return capacity;
  uint64_t room = u->reserved > u->limit ? u->reserved : u->limit;
  return room < capacity ? room : capacity;
}

/* A named counter a policy adds to replay's JSON (e.g. moved_bytes). */
typedef struct hbm_counter {
  const char *name;
  double value;
} hbm_counter;

/* Sink for invariant failures found by check(); the heap routes them to the
 * error handler. */
typedef void hbm_check_report_fn(void *arg, const char *message);

struct hbm_policy_class {
  const char *name;
  const char *summary;   /* one line for --help */
  /* conf: policy settings (NULL = defaults). Bad conf: HBM_EINVAL and a message in diag. */
  int (*create)(hbm_device *dev, const char *conf, hbm_policy **out, hbm_diag *diag);
  void (*destroy)(hbm_policy *p);
  /* On success *addr and *block_size (bytes the block really occupies: the
   * request after rounding and unsplit slack). HBM_ENOMEM when it cannot. */
  int (*alloc)(hbm_policy *p, uint64_t size, hbm_tag tag, int stream, uint64_t *addr,
               uint64_t *block_size);
  /* HBM_EINVAL for an address that is not a live block (nothing changes). */
  int (*free)(hbm_policy *p, uint64_t addr, uint64_t *block_size);
  /* Fills every field of *out. Called for samples, stats and failures, and,
   * where `reserved` below is NULL, after every successful allocation (peak
   * reserved is tracked from it): then it must be O(1) or amortized O(1):
   * keep counters, cache maxima. */
  void (*usage)(hbm_policy *p, hbm_policy_usage *out);
  /* Visits live blocks and holes in address order (see hbm_heap_scan). */
  int (*scan)(hbm_policy *p, hbm_scan_fn *visit, void *arg);
  /* Verifies invariants; returns the number of failures, each reported. */
  int (*check)(hbm_policy *p, hbm_check_report_fn *report, void *arg);

  /* ---- optional (NULL when not supported) ---- */
  /* usage()'s `reserved` alone, in O(1), for a policy whose largest_free
   * costs more (caching walks its cache and rounds). */
  uint64_t (*reserved)(hbm_policy *p);
  /* Start from a recorded state (trace init-seg/init-blk). Writes the address
   * of each live init block into id_addr[id] and, where id_block is not NULL,
   * the size of the block the policy gave it into id_block[id]: the recorded
   * block where the policy keeps the recorded layout, else its own rounding
   * of the request (what free will return as the block size). */
  int (*seed)(hbm_policy *p, const hbm_trace *t, uint64_t *id_addr, uint64_t *id_block);
  /* A step boundary passed (policies that act per step: compaction, zones).
   * HBM_OK, or HBM_EHOSTMEM when host memory ran out: then the mark was not
   * taken and nothing changed (the caller may mark the step again). Any other
   * error (compact: the device copy error that stopped its periodic pass)
   * comes with the mark taken. */
  int (*step)(hbm_policy *p, uint64_t step);
  /* Recorded segment release (empty_cache, release before retry): release the
   * segment at addr if the model holds it free. */
  int (*seg_released)(hbm_policy *p, uint64_t addr, uint64_t size);
  /* The free memory's separate pieces, as a failed request's cause counts
   * them, where a hole is not one apart from the room: expandable's hole at
   * a segment's end goes on into the pages it maps next. `room`: 1 where the
   * policy holds less than it may. NULL: every hole is a piece, and the room
   * one more. */
  uint64_t (*free_pieces)(hbm_policy *p, int room);
  /* Extra counters for reports; returns how many were written (<= max). */
  int (*counters)(hbm_policy *p, hbm_counter *out, int max);
  /* Block relocation (compacting policies): the policy moved a live block. The
   * replay/heap layer registers this callback so it can follow the block. */
  void (*set_relocation_callback)(hbm_policy *p,
                                  void (*fn)(void *arg, uint64_t old_addr, uint64_t new_addr,
                                             uint64_t size),
                                  void *arg);
};

/* Bytes the policy reserves now, the cheap way. */
static inline uint64_t hbm_policy_reserved(const hbm_policy_class *cls, hbm_policy *p) {
  if (cls->reserved) return cls->reserved(p);
  hbm_policy_usage u;
  cls->usage(p, &u);
  return u.reserved;
}

/* Registry (registry.c). */
const hbm_policy_class *hbm_policy_find(const char *name);
extern const hbm_policy_class *const hbm_policy_classes[];
extern const int hbm_policy_class_count;

#endif
