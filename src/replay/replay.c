/* replay.c: drives one policy with every event of a trace and measures it the
 * same way for every policy: live from the trace's requests, allocated from
 * the block sizes the policy reports, reserved from the policy's usage.
 *
 * A failed request is skipped (its later free ignored); the first failure is
 * classified, the first that holds: capacity when live + request > capacity,
 * the policy's own rules, its blocks' overhead, else fragmentation (see
 * do_alloc's comment). A starting state that does not fit
 * is no request: the run ends before its first event, cause start. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/addrmap.h"
#include "core/util.h"
#include "policy/policy.h"
#include "policy/pytorch_alloc.h"
#include "replay/replay.h"
#include "replay/seg_hints.h"

typedef struct replay_state {
  const hbm_trace *t;
  const hbm_replay_options *o;
  hbm_replay_result *res;
  hbm_device *dev;
  hbm_policy *p;
  uint64_t *addr;      /* per id: current address, or HBM_NO_ADDR when not live */
  uint64_t *request;   /* per id */
  uint64_t *block;     /* per id: block size */
  uint8_t *tag;        /* per id */
  hbm_addrmap *by_addr; /* addr -> id, only for policies that move blocks */
  uint64_t live, allocated, step;
  uint64_t live_tag[HBM_TAG_COUNT]; /* live by purpose: sums to live */
  uint64_t done;       /* events replayed once the one under way ends (0: the starting state) */
  int verify;          /* fill and check data (host device) */
  int failed;          /* a fatal error inside a callback */
  int placing_start;   /* placing the starting state's blocks as requests */
  int start_unfit;     /* ... and one of them did not fit */
  hbm_seg_hints hints; /* a recording's segment addresses, for PyTorch's model on sim */
  int use_hints;
  uint64_t slice, slice_end; /* o->live_buckets: the slice of the events under way, and its end */
} replay_state;

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* ---- data verification: every block holds words derived from its id, the
 * bytes past its last whole word too (the low bytes of the next word's
 * pattern): a request of fewer than 8 bytes is checked as well ---- */
/* The blocks lie in the host device's mappings, where AddressSanitizer has
 * nothing to check (no redzones, nothing poisoned): instrumenting every word
 * found nothing and made test_zoned_host under ASan some 30% slower. */
#if defined(__has_attribute)
#if __has_attribute(no_sanitize_address)
#define NO_ASAN __attribute__((no_sanitize_address))
#endif
#endif
#ifndef NO_ASAN
#define NO_ASAN
#endif
NO_ASAN static uint64_t pattern(uint32_t id, uint64_t word) {
  return ((uint64_t)id * 0x9E3779B97F4A7C15ull) ^ (word * 0xD1B54A32D192ED03ull) ^ 0x5555555555555555ull;
}
NO_ASAN static void fill(uint64_t addr, uint64_t bytes, uint32_t id) {
  uint64_t *w = (uint64_t *)(uintptr_t)addr, tail = pattern(id, bytes / 8);
  for (uint64_t i = 0; i < bytes / 8; i++) w[i] = pattern(id, i);
  unsigned char *b = (unsigned char *)(uintptr_t)addr;
  for (uint64_t i = bytes & ~7ull; i < bytes; i++) b[i] = (unsigned char)(tail >> (8 * (i & 7)));
}
NO_ASAN static int verify(uint64_t addr, uint64_t bytes, uint32_t id) {
  const uint64_t *w = (const uint64_t *)(uintptr_t)addr, tail = pattern(id, bytes / 8);
  for (uint64_t i = 0; i < bytes / 8; i++)
    if (w[i] != pattern(id, i)) return 0;
  const unsigned char *b = (const unsigned char *)(uintptr_t)addr;
  for (uint64_t i = bytes & ~7ull; i < bytes; i++)
    if (b[i] != (unsigned char)(tail >> (8 * (i & 7)))) return 0;
  return 1;
}

static void on_relocate(void *arg, uint64_t old_addr, uint64_t new_addr, uint64_t size) {
  replay_state *s = arg;
  uint64_t id;
  if (!hbm_addrmap_take(s->by_addr, old_addr, &id) ||
      hbm_addrmap_put(s->by_addr, new_addr, id) != HBM_OK) {
    s->failed = hbm_report_error(HBM_ECORRUPT, "replay: the policy moved %#llx, which is not a live block", (unsigned long long)old_addr);
    return;
  }
  s->addr[id] = new_addr;
}

/* Live bytes after event i, into its slice's least and most (live_buckets
 * equal slices of the events, as the report's envelope of the trace takes
 * them: a slice starts from the live bytes of the event that opens it). */
static void note_live(replay_state *s, uint64_t i) {
  const hbm_replay_options *o = s->o;
  while (i >= s->slice_end && s->slice + 1 < o->live_buckets) {
    s->slice++;
    s->slice_end = (s->slice + 1) * s->t->nevents / o->live_buckets;
    o->live_min[s->slice] = o->live_max[s->slice] = s->live;
  }
  if (s->live < o->live_min[s->slice]) o->live_min[s->slice] = s->live;
  if (s->live > o->live_max[s->slice]) o->live_max[s->slice] = s->live;
}

static void track_peaks(replay_state *s) {
  uint64_t reserved = hbm_policy_reserved(s->p->cls, s->p);
  hbm_replay_result *r = s->res;
  if (reserved > r->peak_reserved) {
    r->peak_reserved = reserved;
    r->peak_reserved_event = s->done;
  }
  if (s->live > r->peak_live) r->peak_live = s->live;
  if (s->allocated > r->peak_allocated) r->peak_allocated = s->allocated;
}

/* What the policy may hold (hbm_policy_room: its limit, or what it holds past it). */
static uint64_t room_of(const replay_state *s, const hbm_policy_usage *u) {
  return hbm_policy_room(u, s->res->capacity);
}

/* What is free for the policy: its room less live. Memory the process may
 * not take is not free to it, and counted free it would read as
 * fragmentation. */
static uint64_t free_for(const replay_state *s, const hbm_policy_usage *u) {
  uint64_t room = room_of(s, u);
  return room > s->live ? room - s->live : 0;
}

/* A tag's slot in live by purpose: a trace built through the library's own
 * calls is not checked for its tags, and one past the list counts as other. */
static inline unsigned purpose(unsigned tag) { return tag < HBM_TAG_COUNT ? tag : HBM_TAG_OTHER; }

static void take_sample(replay_state *s, uint64_t event) {
  hbm_policy_usage u = {0};
  s->p->cls->usage(s->p, &u);
  hbm_sample smp = {.event = event,
                    .step = s->step,
                    .live = s->live,
                    .allocated = s->allocated,
                    .reserved = u.reserved,
                    .free_total = free_for(s, &u),
                    .largest_free = u.largest_free,
                    .backend_calls = s->dev->backend_calls,
                    .alloc_events = s->res->alloc_events};
  memcpy(smp.live_by_tag, s->live_tag, sizeof smp.live_by_tag);
  /* Where the starting state did not fit, nothing ran: live leaves out what
   * the policy did place, so a ratio would be made up, and what it held is
   * the partial placement, different for each policy; the device is shown
   * as the run found it, empty. */
  if (s->start_unfit) {
    smp.live = smp.allocated = smp.reserved = 0;
    memset(smp.live_by_tag, 0, sizeof smp.live_by_tag);
    smp.free_total = smp.largest_free = s->res->capacity;
  } else {
    smp.fragmentation = hbm_fragmentation_ratio(smp.free_total, smp.largest_free);
  }
  if (smp.fragmentation > s->res->max_frag) s->res->max_frag = smp.fragmentation;
  if (s->o->on_sample) s->o->on_sample(&smp, s->o->sample_arg);
}

/* Layout at the first failure: the policy's scan with each block's tag. */
typedef struct oom_scan { replay_state *s; hbm_addrmap tags; hbm_scan_fn *visit; void *arg; } oom_scan;
static int oom_visit(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  oom_scan *c = arg;
  uint64_t id;
  if (live && hbm_addrmap_get(&c->tags, addr, &id)) tag = (hbm_tag)c->s->tag[id];
  return c->visit(c->arg, addr, size, live, tag);
}
static int report_layout(replay_state *s, hbm_scan_fn *visit, void *arg) {
  oom_scan c = {s, {0}, visit, arg};
  hbm_addrmap_init(&c.tags);
  /* Without every block's tag the layout would show some wrong: none then. */
  int rc = HBM_OK;
  for (uint32_t id = 0; id < s->t->nids && rc == HBM_OK; id++)
    if (s->addr[id] != HBM_NO_ADDR) rc = hbm_addrmap_put(&c.tags, s->addr[id], id);
  if (rc == HBM_OK) s->p->cls->scan(s->p, oom_visit, &c);
  hbm_addrmap_release(&c.tags);
  return rc;
}

/* The policy's invariants after `event` events (check_every). */
typedef struct check_tally { uint64_t event; int failures, no_memory; } check_tally;
static void check_failed(void *arg, const char *message) {
  check_tally *c = arg;
  if (message == hbm_check_no_memory_message) {
    c->no_memory = 1;
    return;
  }
  if (!c->failures++) hbm_report_error(HBM_ECORRUPT, "replay: after event %llu: %s", (unsigned long long)c->event, message);
}
static int check_policy(replay_state *s, uint64_t event) {
  check_tally c = {event, 0, 0};
  if (s->p->cls->check) s->p->cls->check(s->p, check_failed, &c);
  hbm_device_check(s->p->dev, check_failed, &c);
  /* The figures a sample would show hold together: a block holds its
   * request, reserved memory holds the blocks and sits on the device, and a
   * request that would succeed fits in what is not live. (Where the starting
   * state did not fit, samples show the empty device instead.) */
  if (!s->start_unfit) {
    hbm_policy_usage u;
    s->p->cls->usage(s->p, &u);
    uint64_t cap = s->res->capacity;
    if (s->live > s->allocated || s->allocated > u.reserved || u.reserved > cap || u.largest_free > cap - s->live) {
      char m[200];
      snprintf(m, sizeof m, "figures do not hold together: live %llu, allocated %llu, reserved %llu, largest free %llu, capacity %llu",
               (unsigned long long)s->live, (unsigned long long)s->allocated, (unsigned long long)u.reserved,
               (unsigned long long)u.largest_free, (unsigned long long)cap);
      check_failed(&c, m);
    }
  }
  uint64_t by_purpose = 0; /* live split by purpose is all of live */
  for (int t = 0; t < HBM_TAG_COUNT; t++) by_purpose += s->live_tag[t];
  if (by_purpose != s->live) {
    char m[120];
    snprintf(m, sizeof m, "live by purpose sums to %llu, live is %llu", (unsigned long long)by_purpose,
             (unsigned long long)s->live);
    check_failed(&c, m);
  }
  uint64_t refused = hbm_device_refused(s->p->dev);
  if (refused) {
    char m[160];
    snprintf(m, sizeof m, "the device refused %llu call(s) that break its contract (each reported above)", (unsigned long long)refused);
    check_failed(&c, m);
  }
  if (c.failures) return HBM_ECORRUPT;
  return c.no_memory ? hbm_report_error(HBM_EHOSTMEM, "replay: after event %llu: no host memory to run every check", (unsigned long long)event) : HBM_OK;
}

/* With checks on: a destroyed policy gave the device back everything, and
 * broke the contract nowhere (not even while tearing down). */
static void count_held(void *arg, hbm_device_obj kind, uint64_t a, uint64_t b, uint64_t c, uint64_t d) { (*(uint64_t *)arg)++; }
static int check_emptied(hbm_device *dev, const char *policy) {
  uint64_t held = 0, refused = hbm_device_refused(dev);
  hbm_device_each(dev, count_held, &held);
  if (held || dev->phys_used || refused)
    return hbm_report_error(HBM_ECORRUPT, "replay: policy %s, once destroyed, left %llu object(s) and %llu B on the device; %llu call(s) refused",
                            policy, (unsigned long long)held, (unsigned long long)dev->phys_used, (unsigned long long)refused);
  return HBM_OK;
}

/* Free pieces in the policy's layout: its holes, and the memory it has not
 * reserved (one piece: any segment or page can be made of it). */
static int count_hole(void *arg, uint64_t addr, uint64_t size, int live, hbm_tag tag) {
  (void)addr, (void)tag;
  if (!live && size) (*(uint64_t *)arg)++;
  return 0;
}
static uint64_t free_pieces(replay_state *s, uint64_t capacity) {
  int room = hbm_policy_reserved(s->p->cls, s->p) < capacity;
  if (s->p->cls->free_pieces) return s->p->cls->free_pieces(s->p, room);
  uint64_t pieces = (uint64_t)room;
  if (s->p->cls->scan(s->p, count_hole, &pieces) != HBM_OK) return UINT64_MAX; /* unknown: no host memory */
  return pieces;
}

static int do_alloc(replay_state *s, uint32_t id, uint64_t size, hbm_tag tag, int stream,
                    uint64_t event) {
  uint64_t a, block;
  int rc = s->p->cls->alloc(s->p, size, tag, stream, &a, &block);
  if (rc == HBM_ENOMEM && s->placing_start) {
    s->start_unfit = 1; /* reported by start_unfit(), not as a request */
    return HBM_OK;
  }
  if (rc == HBM_ENOMEM) {
    hbm_replay_result *r = s->res;
    r->failures++;
    if (!r->oom) {
      hbm_policy_usage u = {0};
      s->p->cls->usage(s->p, &u);
      hbm_oom_report *o = &r->first_oom;
      r->oom = 1;
      o->event = event;
      o->step = s->step;
      o->request = size;
      o->free_total = free_for(s, &u);
      o->largest_free = u.largest_free;
      o->allocated = s->allocated;
      o->limit = room_of(s, &u);
      /* Capacity, then what the policy's own rules refused though the memory
       * could hold it, then what its blocks' rounding holds; only then is the
       * free memory in pieces too small: fragmentation. Free memory in one
       * piece is not fragmented: the policy's granularity (expandable's 20 MiB
       * pages) refused a request that piece holds. */
      if (s->live + size > r->capacity) o->cause = HBM_CAUSE_CAPACITY;
      else if (s->live + size > o->limit || size <= u.largest_free) o->cause = HBM_CAUSE_RULES;
      else if (s->allocated + size > o->limit) o->cause = HBM_CAUSE_OVERHEAD;
      else if (free_pieces(s, o->limit) <= 1) o->cause = HBM_CAUSE_RULES;
      else o->cause = HBM_CAUSE_FRAGMENTATION;
      double f = hbm_fragmentation_ratio(r->first_oom.free_total, u.largest_free);
      if (f > r->max_frag) r->max_frag = f;
      if (s->o->on_oom_layout) return report_layout(s, s->o->on_oom_layout, s->o->oom_layout_arg);
    }
    return HBM_OK; /* skipped */
  }
  if (rc != HBM_OK) return rc;
  s->addr[id] = a;
  s->request[id] = size;
  s->block[id] = block;
  s->tag[id] = (uint8_t)tag;
  s->live += size;
  s->live_tag[purpose(tag)] += size;
  s->allocated += block;
  if (s->by_addr && hbm_addrmap_put(s->by_addr, a, id) != HBM_OK) return HBM_EHOSTMEM;
  if (s->verify) fill(a, size, id);
  track_peaks(s);
  return HBM_OK;
}

static int do_free(replay_state *s, uint32_t id) {
  uint64_t a = s->addr[id], block;
  if (a == HBM_NO_ADDR) return HBM_OK; /* its allocation failed */
  if (s->verify) {
    if (!verify(a, s->request[id], id))
      return hbm_report_error(HBM_ECORRUPT, "replay: block %u at %#llx lost its contents", id, (unsigned long long)a);
    s->res->verified_blocks++;
  }
  int rc = s->p->cls->free(s->p, a, &block);
  if (rc != HBM_OK) return rc;
  if (s->by_addr) hbm_addrmap_take(s->by_addr, a, NULL);
  s->live -= s->request[id];
  s->live_tag[purpose(s->tag[id])] -= s->request[id];
  s->allocated -= s->block[id];
  s->addr[id] = HBM_NO_ADDR;
  return HBM_OK;
}

/* The starting state did not fit: the run fails before its first event,
 * whatever the policy (seeded or placing the blocks as requests). The report's
 * request is its live bytes; over the capacity or not, the cause is start. */
static void start_unfit(replay_state *s) {
  hbm_replay_result *res = s->res;
  const hbm_trace *t = s->t;
  uint64_t recorded = 0;
  for (uint32_t i = 0; i < t->ninit_blocks; i++)
    if (t->init_blocks[i].id != HBM_NO_ID) recorded += t->init_blocks[i].request;
  s->start_unfit = 1;
  res->oom = 1;
  res->failures = 1;
  /* Nothing ran: the peaks are those of an empty device for every policy,
   * not of the part of the state one placed before it failed (bestfit
   * placed 2 GiB of bcrafton_step at 2 GiB where caching, rolled back, held
   * none). The calls it made trying stay counted, and so does the device's
   * own high-water mark. */
  res->peak_reserved = res->peak_allocated = res->peak_live = res->peak_reserved_event = 0;
  res->first_oom = (hbm_oom_report){.request = recorded, .free_total = res->capacity, .largest_free = res->capacity,
                                    .cause = HBM_CAUSE_START, .limit = res->capacity};
}

/* Opens the device (device_spec, or "sim:<trace capacity>") and creates the
 * policy over it. On error nothing is left open and the reason was reported. */
static int open_policy(const hbm_trace *t, const char *policy, const char *conf, const char *device_spec,
                       int untracked_mappings, hbm_device **dev, hbm_policy **p) {
  char spec[64];
  if (!device_spec) {
    if (!t->capacity)
      return hbm_report_error(HBM_EINVAL, "trace '%s' names no capacity: pass a device (e.g. sim:96GiB)", t->name);
    snprintf(spec, sizeof spec, "sim:%llu", (unsigned long long)t->capacity);
    device_spec = spec;
  }
  const hbm_policy_class *cls = hbm_policy_find(policy);
  if (!cls) return hbm_report_error(HBM_EINVAL, "unknown policy '%s' (known: %s)", policy, hbm_policy_names());
  int rc = hbm_device_open(device_spec, dev);
  if (rc != HBM_OK) return rc;
  if (untracked_mappings && !strcmp((*dev)->caps.kind, "sim")) hbm_sim_track_mappings(*dev, 0); /* nothing made yet */
  hbm_diag diag = {0};
  rc = cls->create(*dev, conf, p, &diag);
  if (rc != HBM_OK) {
    if (diag.message[0]) hbm_report_error(rc, "policy %s: %s", policy, diag.message);
    hbm_device_close(*dev);
    return rc;
  }
  (*p)->cls = cls;
  (*p)->dev = *dev;
  return HBM_OK;
}

/* The policy is the allocator the trace was recorded with: caching over a
 * recording without expandable segments, expandable over one with them. Only
 * then are the recorded segments its own (cudaMalloc'd segments, or mapped
 * pages). */
static int same_allocator(const hbm_trace *t, const hbm_policy *p) {
  const char *recorded;
  return hbm_pt_conf_policy(t->conf, &recorded, NULL) == HBM_OK && !strcmp(p->cls->name, recorded);
}

uint64_t hbm_replay_sample_every(uint64_t every, int has_steps, uint64_t nevents) {
  if (every || has_steps) return every;
  return nevents / 1000 > 0 ? nevents / 1000 : 1;
}

int hbm_replay(const hbm_trace *t, const hbm_replay_options *o, hbm_replay_result *res) {
  if (!res) return HBM_EINVAL;
  memset(res, 0, sizeof *res); /* cleared on every error, as the header says */
  if (!t || !o || !o->policy) return HBM_EINVAL;
  if (o->live_buckets && (!o->live_min || !o->live_max)) return HBM_EINVAL;
  if (o->live_buckets > t->nevents)
    return hbm_report_error(HBM_EINVAL, "replay: live_buckets %llu is more than the trace's %llu events",
                            (unsigned long long)o->live_buckets, (unsigned long long)t->nevents);
  replay_state s = {.t = t, .o = o, .res = res};
  int rc = open_policy(t, o->policy, o->conf, o->device, o->untracked_mappings, &s.dev, &s.p);
  if (rc != HBM_OK) return rc;
  snprintf(res->policy, sizeof res->policy, "%s", o->policy);
  res->events = t->nevents;
  res->capacity = s.dev->caps.capacity;
  if (o->verify_data && !s.dev->caps.host_visible) {
    rc = hbm_report_error(HBM_EUNSUPPORTED, "replay: verify_data needs the host device (device \"host:SIZE\"), not '%s'",
                          s.dev->caps.kind);
    goto out;
  }
  s.verify = o->verify_data;
  uint32_t n = t->nids ? t->nids : 1;
  s.addr = malloc(n * sizeof *s.addr);
  s.request = calloc(n, sizeof *s.request);
  s.block = calloc(n, sizeof *s.block);
  s.tag = calloc(n, 1);
  if (!s.addr || !s.request || !s.block || !s.tag) { rc = HBM_EHOSTMEM; goto out; }
  for (uint32_t i = 0; i < n; i++) s.addr[i] = HBM_NO_ADDR;
  hbm_addrmap by_addr;
  if (s.p->cls->set_relocation_callback) {
    hbm_addrmap_init(&by_addr);
    s.by_addr = &by_addr;
    s.p->cls->set_relocation_callback(s.p, on_relocate, &s);
  }

  /* The starting state: seeded where the policy can take a recorded layout,
   * otherwise placed like any request. */
  int unfit = 0;  /* the recorded starting state did not fit */
  int seeded = 0; /* the policy took the recorded layout (checked already), or it did not fit */
  if (t->ninit_blocks) {
    if (s.p->cls->seed) {
      uint64_t *ids = malloc(2 * (size_t)n * sizeof *ids); /* addresses, then block sizes */
      if (!ids) { rc = HBM_EHOSTMEM; goto out; }
      uint64_t *blocks = ids + n;
      for (uint32_t i = 0; i < n; i++) ids[i] = HBM_NO_ADDR;
      rc = s.p->cls->seed(s.p, t, ids, blocks);
      if (rc == HBM_OK && o->check_every && (rc = check_policy(&s, 0)) != HBM_OK) { /* before any byte is filled */
        free(ids);
        goto out;
      }
      if (rc == HBM_OK) {
        seeded = 1;
        for (uint32_t i = 0; i < t->ninit_blocks; i++) {
          const hbm_init_block *b = &t->init_blocks[i];
          if (b->id == HBM_NO_ID || ids[b->id] == HBM_NO_ADDR) continue;
          s.addr[b->id] = ids[b->id];
          s.request[b->id] = b->request;
          s.block[b->id] = blocks[b->id]; /* the policy's block, which may not be the recorded one */
          s.tag[b->id] = b->tag;
          s.live += b->request;
          s.live_tag[purpose(b->tag)] += b->request;
          s.allocated += blocks[b->id];
          if (s.by_addr && hbm_addrmap_put(s.by_addr, ids[b->id], b->id) != HBM_OK) {
            free(ids);
            rc = HBM_EHOSTMEM;
            goto out;
          }
          if (s.verify) fill(ids[b->id], b->request, b->id);
        }
        track_peaks(&s);
      } else if (rc == HBM_ENOMEM) {
        /* The recorded state does not fit this device: the run fails at
         * its start, a result like any failed request, not an error. Its
         * live bytes alone may fit: then the recorded layout is what does
         * not (a segment holding a live block is kept whole). */
        seeded = unfit = 1;
        rc = HBM_OK;
        start_unfit(&s);
      } else if (rc != HBM_EUNSUPPORTED) {
        free(ids);
        goto out;
      }
      free(ids);
    }
    s.placing_start = 1;
    for (uint32_t i = 0; !seeded && !s.start_unfit && i < t->ninit_blocks; i++) {
      const hbm_init_block *b = &t->init_blocks[i];
      if (b->id == HBM_NO_ID) continue;
      const hbm_init_segment *seg = NULL;
      for (uint32_t k = 0; k < t->ninit_segments && !seg; k++)
        if (i >= t->init_segments[k].first_block && i < t->init_segments[k].first_block + t->init_segments[k].nblocks) seg = &t->init_segments[k];
      if ((rc = do_alloc(&s, b->id, b->request, (hbm_tag)b->tag, seg ? seg->stream : 0, 0)) != HBM_OK) goto out;
    }
    s.placing_start = 0;
    if (!seeded && s.start_unfit) {
      unfit = 1;
      start_unfit(&s);
    }
    rc = HBM_OK;
  }
  if (o->check_every && !seeded && (rc = check_policy(&s, 0)) != HBM_OK) goto out;
  if (o->on_layout && o->layout_at_start) { /* the starting state's layout: no event runs */
    if (!unfit) {
      take_sample(&s, 0);
      rc = report_layout(&s, o->on_layout, o->layout_arg);
    }
    goto out;
  }

  /* On a recording, PyTorch's model gets its new segments where CUDA put
   * them (seg_hints.h): best fit breaks ties between blocks of one size by
   * address, so at the sim device's own addresses its layout can depart from
   * the one PyTorch had (a recorded job that completed could fail). */
  if (!strcmp(s.dev->caps.kind, "sim") && same_allocator(t, s.p)) {
    for (uint64_t i = 0; i < t->nevents && !s.use_hints; i++) s.use_hints = t->events[i].kind == HBM_EV_SEG_ALLOC;
    s.hints.dev = s.dev;
    s.hints.clear_only = 1;
    hbm_pt_hooks hooks = {hbm_seg_hints_take, NULL, &s.hints};
    if (s.use_hints && hbm_pt_set_hooks(s.p, &hooks) != HBM_OK) s.use_hints = 0; /* not PyTorch's model */
  }

  int has_steps = 0;
  for (uint64_t i = 0; i < t->nevents && !has_steps; i++) has_steps = t->events[i].kind == HBM_EV_STEP;
  uint64_t every = hbm_replay_sample_every(o->every, has_steps, t->nevents);
  uint64_t steps_seen = 0, progress_every = 1u << 20;
  int counted_first_step = 0;
  uint64_t calls_after_first_step = 0;
  for (uint64_t k = 0; k < o->live_buckets; k++) o->live_min[k] = o->live_max[k] = s.live; /* the starting state's */
  s.slice_end = o->live_buckets ? t->nevents / o->live_buckets : 0;
  double t0 = now_ns();
  for (uint64_t i = 0; !unfit && i < t->nevents; i++) {
    const hbm_event *e = &t->events[i];
    s.done = i + 1;
    switch (e->kind) {
      case HBM_EV_ALLOC:
        res->alloc_events++;
        rc = do_alloc(&s, e->id, e->size, (hbm_tag)e->tag, e->stream, i);
        hbm_seg_hints_clear(&s.hints); /* hints belong to the malloc that recorded them */
        if (e->flags & HBM_EV_REFUSED) {
          res->refused_requests++;
          if (rc == HBM_OK && s.addr[e->id] != HBM_NO_ADDR) res->refused_placed++;
          if (res->oom && res->first_oom.event == i) res->first_oom.refused = 1;
        }
        break;
      case HBM_EV_FREE: rc = do_free(&s, e->id); break;
      case HBM_EV_STEP:
        if (!o->every) take_sample(&s, i);
        s.step = e->size;
        if (++steps_seen == 2) { counted_first_step = 1; calls_after_first_step = s.dev->backend_calls; }
        if (s.p->cls->step) rc = s.p->cls->step(s.p, s.step);
        track_peaks(&s); /* a step may map or move (compact's every_steps pass) */
        break;
      case HBM_EV_SEG_ALLOC:
        if (s.use_hints) rc = hbm_seg_hints_add(&s.hints, e->addr, e->size);
        break;
      default: break; /* recorded segment releases: only fidelity applies them */
    }
    if (rc != HBM_OK || s.failed) {
      if (rc == HBM_OK) rc = s.failed;
      goto out;
    }
    if (o->live_buckets) note_live(&s, i);
    if (o->check_every && (i + 1) % o->check_every == 0 && (rc = check_policy(&s, i + 1)) != HBM_OK) goto out;
    if (every && (i + 1) % every == 0) take_sample(&s, i + 1);
    if (o->on_progress && (i + 1) % progress_every == 0) o->on_progress(i + 1, t->nevents, o->progress_arg);
    if (o->on_layout && i + 1 == o->layout_event) {
      rc = report_layout(&s, o->on_layout, o->layout_arg);
      goto out;
    }
  }
  double elapsed = now_ns() - t0;
  if (unfit) take_sample(&s, 0); /* where it ended */
  else if (!every || t->nevents % every) take_sample(&s, t->nevents); /* the end, unless just sampled */
  if (o->on_progress) o->on_progress(t->nevents, t->nevents, o->progress_arg);
  res->ns_per_event = t->nevents && !unfit ? elapsed / (double)t->nevents : 0; /* no event ran: no time */
  res->backend_calls = s.dev->backend_calls; /* including the policy's setup */
  res->peak_device = hbm_device_peak_used(s.dev);
  res->backend_calls_after_first_step = counted_first_step ? s.dev->backend_calls - calls_after_first_step : 0;
  res->efficiency = res->peak_reserved ? (double)res->peak_live / (double)res->peak_reserved : 0;
  if (s.p->cls->counters) {
    hbm_counter c[HBM_MAX_COUNTERS];
    int k = s.p->cls->counters(s.p, c, HBM_MAX_COUNTERS);
    for (int i = 0; i < k && i < HBM_MAX_COUNTERS; i++) {
      snprintf(res->counters[i].name, sizeof res->counters[i].name, "%s", c[i].name);
      res->counters[i].value = c[i].value;
    }
    res->ncounters = k < HBM_MAX_COUNTERS ? k : HBM_MAX_COUNTERS;
  }
  /* Blocks still live at the end are verified too. */
  for (uint32_t id = 0; s.verify && id < n; id++) {
    if (s.addr[id] == HBM_NO_ADDR) continue;
    if (!verify(s.addr[id], s.request[id], id)) {
      rc = hbm_report_error(HBM_ECORRUPT, "replay: block %u at %#llx lost its contents", id, (unsigned long long)s.addr[id]);
      break;
    }
    res->verified_blocks++;
  }
out:
  hbm_seg_hints_release(&s.hints);
  if (s.by_addr) hbm_addrmap_release(s.by_addr);
  free(s.addr);
  free(s.request);
  free(s.block);
  free(s.tag);
  if (s.p) s.p->cls->destroy(s.p);
  if (s.dev && s.p && o->check_every && rc == HBM_OK) rc = check_emptied(s.dev, o->policy);
  if (s.dev) hbm_device_close(s.dev);
  return rc;
}

const char *hbm_oom_cause_name(hbm_oom_cause cause) {
  switch (cause) {
    case HBM_CAUSE_CAPACITY: return "capacity";
    case HBM_CAUSE_FRAGMENTATION: return "fragmentation";
    case HBM_CAUSE_START: return "start";
    case HBM_CAUSE_RULES: return "rules";
    case HBM_CAUSE_OVERHEAD: return "overhead";
    case HBM_CAUSE_NONE: return "none";
    default: return "invalid"; /* not "none": that says nothing failed */
  }
}
