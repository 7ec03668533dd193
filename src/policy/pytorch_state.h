/* pytorch_state.h: the state of the caching model (pytorch_alloc.c), which
 * hbm_pt_check verifies (P1-P8 there). Only pytorch_alloc.c changes it; the
 * white-box test of the check (tests/test_caching_check.c) reads it and
 * breaks one field at a time to see each failure reported. */
#ifndef HBM_PYTORCH_STATE_H
#define HBM_PYTORCH_STATE_H

#include "core/addrmap.h"
#include "core/ordset.h"
#include "policy/pytorch_alloc.h"

#define NONE UINT32_MAX
enum { LARGE = 0, SMALL = 1 };

typedef struct pt_block {
  uint64_t addr, size;
  uint64_t requested;     /* request of an allocated block */
  int64_t gc_count_base;  /* pool's get_free_block count when last cached */
  uint32_t prev, next;    /* neighbours in the segment (NONE at the ends); free list when unused */
  uint32_t slot;          /* stream slot */
  uint32_t es;            /* expandable segment, or NONE */
  uint8_t small, allocated, mapped, tag, in_use;
} pt_block;

typedef struct pt_stream {
  int stream;
  hbm_ordset *free[2];     /* cached mapped blocks: (size, address) -> block */
  hbm_ordset *unmapped[2]; /* expandable: unmapped ranges (address, 0) -> block */
  uint64_t promised[2][2]; /* [pool][free 0, unmapped 1]: the operation that last reserved inserts (P8) */
} pt_stream;

/* ExpandableSegment: one address reservation, pages mapped on demand. Slots
 * at and past nes (up to cap_es) are not segments yet; a reserved one holds
 * its handles array already (es_slots_reserve). */
typedef struct pt_es {
  uint64_t base, va_size, page;
  uint64_t *handles;       /* physical handle per page (0: unmapped); grows like handles_ */
  uint64_t nhandles, cap;
  uint64_t promised_op, promised_pages; /* the operation that last reserved handles, and for how many pages (P8) */
  uint32_t slot;
  uint8_t small, live;
} pt_es;

typedef struct pt {
  hbm_policy base;
  hbm_pt_conf conf;
  uint64_t allowed_memory_maximum;
  pt_block *blocks;
  uint32_t nblocks, cap_blocks, free_list;
  uint32_t nfree_list;         /* blocks on free_list */
  pt_stream *streams;
  uint32_t nstreams, cap_streams, last_slot;
  pt_es *es;
  uint32_t nes, cap_es, live_es;
  hbm_addrmap active;          /* address -> allocated block */
  int64_t pool_calls[2];       /* get_free_blocks_call_count per pool */
  uint64_t total_allocated_memory;
  uint64_t allocated_bytes, allocated_blocks;
  uint64_t releasable;         /* cached blocks that are whole (unsplit) segments */
  uint64_t largest[2];         /* largest cached block per pool, when valid */
  int largest_valid[2];
  hbm_pt_stats st;
  hbm_pt_hooks hooks;
  uint32_t *scratch;
  size_t cap_scratch;
  /* P8: each operation reserves its own inserts. Room left over from an
   * earlier operation's reservation would hide one that forgot. */
  uint64_t op;                 /* operations begun (malloc, free, segment release, seed) */
  uint64_t unpromised;         /* inserts into a set, or pages mapped, this operation did not reserve */
} pt;

#endif
