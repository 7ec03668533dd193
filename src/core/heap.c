/* heap.c: the public heap: one policy over one device, with the accounting
 * every policy is measured by (live, allocated, reserved, peaks, per tag),
 * a lock, and hbm_check().
 *
 * Invariant: live == sum of requests in `blocks`; allocated == sum of their
 * block sizes; live_by_tag[t] == sum over blocks tagged t; live_blocks ==
 * blocks.used. hbm_check() recounts each. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/addrmap.h"
#include "core/reloc.h"
#include "core/util.h"
#include "policy/policy.h"

/* A live block's record: request (up to 2^50), tag, and block size. */
typedef struct live_rec { uint64_t request, block_size; hbm_tag tag; } live_rec;

/* Every call takes the device's lock (dev->lock), not a lock of the heap's
 * own: heaps that share a device share its memory and counters. While it
 * holds the lock the device counts the heap's claims in phys_held, so
 * free_total can leave out what the other heaps hold.
 * Invariant: phys_held <= dev->phys_used. */
struct hbm_heap {
  hbm_device *dev;
  uint64_t phys_held;      /* physical bytes this heap's policy holds from the device */
  uint64_t *outer_holder;  /* the device's holder before heap_lock, put back by heap_unlock */
  hbm_policy *policy;
  hbm_addrmap blocks;      /* addr -> index into recs */
  live_rec *recs;          /* record pool; free slots chained through request */
  uint64_t nrecs, recs_cap, free_rec;
  hbm_stats st;
  hbm_reloc *reloc;        /* handles and relocation hooks (core/reloc.c); NULL unless the policy moves blocks */
  uint64_t last_step;      /* the number of the last step mark taken; meaningful once `stepped` */
  int stepped;
};

#define NO_REC UINT64_MAX

/* The device's lock, with this heap as the one whose claims it counts. */
static void heap_lock(hbm_heap *h) {
  pthread_mutex_lock(&h->dev->lock);
  h->outer_holder = h->dev->holder;
  h->dev->holder = &h->phys_held;
}
static void heap_unlock(hbm_heap *h) {
  h->dev->holder = h->outer_holder;
  pthread_mutex_unlock(&h->dev->lock);
}

/* The policy moved a live block (compaction): follow it, then let the
 * relocation layer follow its handle and tell the framework. */
static void heap_moved(void *arg, uint64_t old_addr, uint64_t new_addr, uint64_t size) {
  hbm_heap *h = arg;
  uint64_t r;
  if (!hbm_addrmap_take(&h->blocks, old_addr, &r)) return; /* hbm_check reports the mismatch */
  hbm_addrmap_put(&h->blocks, new_addr, r);                /* the take made room: cannot fail */
  hbm_reloc_moved(h->reloc, old_addr, new_addr, h->recs[r].request, h->recs[r].tag);
}

int hbm_heap_create(hbm_device *dev, const char *policy, const char *conf, hbm_heap **out) {
  if (!dev || !policy || !out) return HBM_EINVAL;
  const hbm_policy_class *cls = hbm_policy_find(policy);
  if (!cls) return hbm_report_error(HBM_EINVAL, "unknown policy '%s' (known: %s)", policy, hbm_policy_names());
  hbm_heap *h = calloc(1, sizeof *h);
  if (!h) return HBM_EHOSTMEM;
  hbm_diag diag = {0};
  h->dev = dev;
  heap_lock(h); /* a policy may take device memory as it starts */
  int rc = cls->create(dev, conf, &h->policy, &diag);
  heap_unlock(h);
  if (rc != HBM_OK) {
    if (diag.message[0]) hbm_report_error(rc, "policy %s: %s", policy, diag.message);
    else if (rc == HBM_ENOMEM) /* no heap yet: so no answer a caller expects, as an allocation's is */
      hbm_report_error(rc, "policy %s: the device cannot give the memory the policy takes as it starts "
                           "(bestfit and compact take the whole device; another heap may hold some of it)", policy);
    else if (rc == HBM_EHOSTMEM) /* e.g. a host device whose reservation the address space cannot hold */
      hbm_report_error(rc, "policy %s: out of host memory or address space as it starts (zoned and expandable "
                           "reserve address space beyond the capacity)", policy);
    free(h);
    return rc;
  }
  h->policy->cls = cls;
  h->policy->dev = dev;
  hbm_addrmap_init(&h->blocks);
  h->free_rec = NO_REC;
  h->st.version = HBM_STATS_VERSION;
  h->st.capacity = dev->caps.capacity;
  if (cls->set_relocation_callback) {
    if (hbm_reloc_create(&h->reloc) != HBM_OK) {
      hbm_heap_destroy(h);
      return HBM_EHOSTMEM;
    }
    cls->set_relocation_callback(h->policy, heap_moved, h);
  }
  *out = h;
  return HBM_OK;
}

void hbm_heap_destroy(hbm_heap *h) {
  if (!h) return;
  heap_lock(h); /* the policy gives device memory back */
  h->policy->cls->destroy(h->policy);
  heap_unlock(h);
  hbm_addrmap_release(&h->blocks);
  hbm_reloc_destroy(h->reloc);
  free(h->recs);
  free(h);
}

/* Room for one more record, so that the next rec_new cannot fail. */
static int rec_reserve(hbm_heap *h) {
  if (h->free_rec != NO_REC || h->nrecs < h->recs_cap) return HBM_OK;
  uint64_t cap = h->recs_cap ? h->recs_cap * 2 : 256;
  live_rec *r = realloc(h->recs, cap * sizeof *r);
  if (!r) return HBM_EHOSTMEM;
  h->recs = r;
  h->recs_cap = cap;
  return HBM_OK;
}

static uint64_t rec_new(hbm_heap *h) {
  if (rec_reserve(h) != HBM_OK) return NO_REC;
  if (h->free_rec != NO_REC) {
    uint64_t i = h->free_rec;
    h->free_rec = h->recs[i].request;
    return i;
  }
  return h->nrecs++;
}

static void track_peaks(hbm_heap *h) {
  h->st.reserved = hbm_policy_reserved(h->policy->cls, h->policy);
  if (h->st.reserved > h->st.peak_reserved) h->st.peak_reserved = h->st.reserved;
  if (h->st.live > h->st.peak_live) h->st.peak_live = h->st.live;
  if (h->st.allocated > h->st.peak_allocated) h->st.peak_allocated = h->st.allocated;
}

int hbm_alloc(hbm_heap *h, uint64_t size, hbm_tag tag, int stream, uint64_t *addr) {
  if (!h || !addr) return HBM_EINVAL;
  heap_lock(h);
  int rc = hbm_heap_alloc_locked(h, size, tag, stream, addr);
  heap_unlock(h);
  return rc;
}

int hbm_heap_alloc_locked(hbm_heap *h, uint64_t size, hbm_tag tag, int stream, uint64_t *addr) {
  if (size == 0 || size > HBM_MAX_SIZE)
    return hbm_report_error(HBM_EINVAL, "alloc of %llu bytes: expected 1 B to 1 PiB", (unsigned long long)size);
  if ((unsigned)tag >= HBM_TAG_COUNT) return hbm_report_error(HBM_EINVAL, "alloc: unknown tag %d", (int)tag);
  uint64_t a, block;
  /* The heap's record of the block first: once the policy placed it, taking
   * it back would be a free (which the policy learns from, and which can
   * itself fail). */
  int rc = HBM_EHOSTMEM;
  if (rec_reserve(h) == HBM_OK && hbm_addrmap_reserve(&h->blocks, 1) == HBM_OK)
    rc = h->policy->cls->alloc(h->policy, size, tag, stream, &a, &block);
  if (rc == HBM_OK) {
    uint64_t r = rec_new(h);
    if (r == NO_REC || hbm_addrmap_put(&h->blocks, a, r) != HBM_OK) { /* reserved: cannot happen */
      h->policy->cls->free(h->policy, a, &block);
      rc = HBM_EHOSTMEM;
    } else {
      h->recs[r] = (live_rec){size, block, tag};
      h->st.live += size;
      h->st.allocated += block;
      h->st.live_by_tag[tag] += size;
      if (h->st.live_by_tag[tag] > h->st.peak_live_by_tag[tag]) h->st.peak_live_by_tag[tag] = h->st.live_by_tag[tag];
      h->st.allocs++;
      h->st.live_blocks++;
      track_peaks(h);
      *addr = a;
    }
  }
  if (rc != HBM_OK) h->st.failures++;
  return rc;
}

void hbm_heap_count_failure(hbm_heap *h) { h->st.failures++; }

int hbm_free(hbm_heap *h, uint64_t addr) {
  if (!h) return HBM_EINVAL;
  heap_lock(h);
  int rc = hbm_heap_free_locked(h, addr);
  heap_unlock(h);
  return rc;
}

int hbm_heap_free_locked(hbm_heap *h, uint64_t addr) {
  uint64_t r, block;
  int rc = HBM_OK;
  if (!hbm_addrmap_get(&h->blocks, addr, &r)) {
    rc = hbm_report_error(HBM_EINVAL, "free of %#llx: not a live block (double free or unknown address)", (unsigned long long)addr);
  } else if ((rc = h->policy->cls->free(h->policy, addr, &block)) != HBM_OK) {
    if (rc == HBM_EBUSY) /* compact's pins: the one refusal a live block meets */
      hbm_report_error(rc, "free of %#llx: the block is pinned (unpin it first)", (unsigned long long)addr);
    else
      hbm_report_error(rc, "free of %#llx: the policy refused it", (unsigned long long)addr);
  } else {
    hbm_addrmap_take(&h->blocks, addr, NULL);
    live_rec *rec = &h->recs[r];
    h->st.live -= rec->request;
    h->st.allocated -= rec->block_size;
    h->st.live_by_tag[rec->tag] -= rec->request;
    h->st.frees++;
    h->st.live_blocks--;
    rec->request = h->free_rec;
    h->free_rec = r;
    if (h->reloc) hbm_reloc_freed(h->reloc, addr);
  }
  return rc;
}

hbm_policy *hbm_heap_enter(hbm_heap *h, hbm_reloc **reloc) {
  heap_lock(h);
  *reloc = h->reloc;
  return h->policy;
}
/* A compaction may take memory above the old footprint on its way (a block
 * evacuated over the top): the peaks see it as they see an allocation. */
void hbm_heap_leave(hbm_heap *h) {
  track_peaks(h);
  heap_unlock(h);
}

/* The heap's own counters, which hbm_check recounts: for the white-box test
 * of the check (tests/test_heap_check.c), which breaks one at a time. */
hbm_stats *hbm_heap_counters(hbm_heap *h) { return &h->st; }

static void fill_stats(hbm_heap *h, hbm_stats *out) {
  hbm_policy_usage u = {0};
  h->policy->cls->usage(h->policy, &u);
  *out = h->st;
  out->reserved = u.reserved;
  /* what the other heaps on the device hold is not free for this one, nor is
   * memory past the policy's limit (per_process_memory_fraction), which
   * counts this heap's memory only: the smaller of the two */
  uint64_t others = h->dev->phys_used > h->phys_held ? h->dev->phys_used - h->phys_held : 0, live = h->st.live;
  uint64_t on_device = h->st.capacity > live + others ? h->st.capacity - live - others : 0;
  uint64_t room = hbm_policy_room(&u, h->st.capacity), in_limit = room > live ? room - live : 0;
  out->free_total = in_limit < on_device ? in_limit : on_device;
  out->largest_free = u.largest_free;
  out->fragmentation = hbm_fragmentation_ratio(out->free_total, u.largest_free);
  out->backend_calls = h->dev->backend_calls;
}

int hbm_heap_stats(hbm_heap *h, hbm_stats *out) {
  if (!h || !out) return HBM_EINVAL;
  heap_lock(h);
  fill_stats(h, out);
  heap_unlock(h);
  return HBM_OK;
}

/* Step numbers only go forward, as in a trace: compact's every_steps:N reads
 * the number, and a number that went back (a counter reset each epoch) would
 * stop its passes until the number caught up again. */
int hbm_heap_step(hbm_heap *h, uint64_t step) {
  if (!h) return HBM_EINVAL;
  heap_lock(h);
  int rc;
  if (h->stepped && step <= h->last_step) {
    rc = hbm_report_error(HBM_EINVAL, "step %llu after step %llu: step numbers only go forward",
                          (unsigned long long)step, (unsigned long long)h->last_step);
  } else {
    rc = h->policy->cls->step ? h->policy->cls->step(h->policy, step) : HBM_OK;
    track_peaks(h); /* a policy may map at a step boundary */
    if (rc != HBM_EHOSTMEM) { /* a device copy error that stopped a pass: the mark is taken */
      h->stepped = 1;
      h->last_step = step;
    }
  }
  heap_unlock(h);
  return rc;
}

/* The policy's scan knows addresses; the heap knows what each block is for. */
typedef struct scan_ctx { hbm_heap *h; hbm_scan_fn *visit; void *arg; int stopped; } scan_ctx;
static int scan_tagged(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  scan_ctx *c = arg;
  uint64_t r;
  if (live && hbm_addrmap_get(&c->h->blocks, addr, &r)) tag = c->h->recs[r].tag;
  c->stopped = c->visit(c->arg, addr, size, live, tag) != 0;
  return c->stopped; /* 1, whatever the visitor said: the policies stop on any nonzero */
}

int hbm_heap_scan(hbm_heap *h, hbm_scan_fn *visit, void *arg) {
  if (!h || !visit) return HBM_EINVAL;
  heap_lock(h);
  scan_ctx c = {h, visit, arg, 0};
  int rc = h->policy->cls->scan(h->policy, scan_tagged, &c);
  heap_unlock(h);
  return rc < 0 && !c.stopped ? rc : HBM_OK; /* a visitor's stop is no error */
}

/* ---- hbm_check: the policy's own invariants, then the heap's recount ---- */
typedef struct check_ctx {
  hbm_heap *h;
  int failures;
  int no_memory; /* a check could not run for want of host memory */
  uint64_t live, allocated, blocks, by_tag[HBM_TAG_COUNT];
  uint64_t scan_prev_end, scan_live_blocks;
  int scan_started;
} check_ctx;

static void report_fail(void *arg, const char *message) {
  check_ctx *c = arg;
  if (message == hbm_check_no_memory_message) {
    c->no_memory = 1;
    return;
  }
  c->failures++;
  hbm_report_error(HBM_ECORRUPT, "check: %s", message);
}

static void recount(void *arg, uint64_t key, uint64_t val) {
  check_ctx *c = arg;
  live_rec *r = &c->h->recs[val];
  c->live += r->request;
  c->allocated += r->block_size;
  c->by_tag[r->tag] += r->request;
  c->blocks++;
  if (r->request > r->block_size) {
    char m[128];
    snprintf(m, sizeof m, "block at %#llx holds a request larger than itself", (unsigned long long)key);
    report_fail(c, m);
  }
}

static int scan_check(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  check_ctx *c = arg;
  char m[160];
  if (c->scan_started && addr < c->scan_prev_end) {
    snprintf(m, sizeof m, "layout scan: block at %#llx overlaps the previous one (ends %#llx)", (unsigned long long)addr, (unsigned long long)c->scan_prev_end);
    report_fail(c, m);
  }
  c->scan_started = 1;
  c->scan_prev_end = addr + size;
  if (live) {
    c->scan_live_blocks++;
    uint64_t r;
    if (!hbm_addrmap_get(&c->h->blocks, addr, &r)) {
      snprintf(m, sizeof m, "layout scan: live block at %#llx unknown to the heap", (unsigned long long)addr);
      report_fail(c, m);
    } else if (c->h->recs[r].block_size > size) {
      snprintf(m, sizeof m, "layout scan: block at %#llx shorter than its allocation", (unsigned long long)addr);
      report_fail(c, m);
    }
  }
  return 0;
}

int hbm_check(hbm_heap *h) {
  if (!h) return HBM_EINVAL;
  heap_lock(h);
  check_ctx c = {.h = h};
  h->policy->cls->check(h->policy, report_fail, &c);
  hbm_device_check(h->dev, report_fail, &c); /* the device's own bookkeeping (sim: the contract's) */
  hbm_addrmap_check(&h->blocks, report_fail, &c); /* what recount walks and every free looks up */
  hbm_addrmap_each(&h->blocks, recount, &c);
  char m[200];
  if (c.live != h->st.live || c.allocated != h->st.allocated || c.blocks != h->st.live_blocks) {
    snprintf(m, sizeof m, "stats: live %llu allocated %llu blocks %llu, recount %llu %llu %llu",
             (unsigned long long)h->st.live, (unsigned long long)h->st.allocated, (unsigned long long)h->st.live_blocks,
             (unsigned long long)c.live, (unsigned long long)c.allocated, (unsigned long long)c.blocks);
    report_fail(&c, m);
  }
  for (int t = 0; t < HBM_TAG_COUNT; t++)
    if (c.by_tag[t] != h->st.live_by_tag[t]) {
      snprintf(m, sizeof m, "stats: live[%s] %llu, recount %llu", hbm_tag_name((hbm_tag)t),
               (unsigned long long)h->st.live_by_tag[t], (unsigned long long)c.by_tag[t]);
      report_fail(&c, m);
    }
  /* A scan may need host memory (caching sorts its segments): without it the
   * layout is not checked, and the check says so. */
  if (h->policy->cls->scan(h->policy, scan_check, &c) == HBM_EHOSTMEM) c.no_memory = 1;
  else if (c.scan_live_blocks != h->st.live_blocks) {
    snprintf(m, sizeof m, "layout scan shows %llu live blocks, the heap holds %llu",
             (unsigned long long)c.scan_live_blocks, (unsigned long long)h->st.live_blocks);
    report_fail(&c, m);
  }
  if (h->reloc) hbm_reloc_check(h->reloc, h->policy, &h->blocks, report_fail, &c);
  hbm_stats st; /* what hbm_heap_stats would answer: its figures hold together */
  fill_stats(h, &st);
  if (st.reserved > st.capacity) {
    snprintf(m, sizeof m, "reserved %llu exceeds capacity %llu", (unsigned long long)st.reserved, (unsigned long long)st.capacity);
    report_fail(&c, m);
  }
  if (st.allocated > st.reserved) {
    snprintf(m, sizeof m, "allocated %llu exceeds reserved %llu", (unsigned long long)st.allocated, (unsigned long long)st.reserved);
    report_fail(&c, m);
  }
  if (st.largest_free > st.free_total) {
    snprintf(m, sizeof m, "largest free %llu exceeds the free total %llu", (unsigned long long)st.largest_free,
             (unsigned long long)st.free_total);
    report_fail(&c, m);
  }
  if (st.reserved > st.peak_reserved || st.live > st.peak_live || st.allocated > st.peak_allocated) {
    snprintf(m, sizeof m, "a peak below its figure: reserved %llu (peak %llu), live %llu (%llu), allocated %llu (%llu)",
             (unsigned long long)st.reserved, (unsigned long long)st.peak_reserved, (unsigned long long)st.live,
             (unsigned long long)st.peak_live, (unsigned long long)st.allocated, (unsigned long long)st.peak_allocated);
    report_fail(&c, m);
  }
  if (h->phys_held > h->dev->phys_used) {
    snprintf(m, sizeof m, "holds %llu B of the device, more than all its heaps hold (%llu B)",
             (unsigned long long)h->phys_held, (unsigned long long)h->dev->phys_used);
    report_fail(&c, m);
  }
  heap_unlock(h);
  if (c.failures) return HBM_ECORRUPT;
  return c.no_memory ? hbm_report_error(HBM_EHOSTMEM, "check: no host memory to run every check") : HBM_OK;
}
