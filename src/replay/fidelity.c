/* fidelity.c: replays a recording through the PyTorch model and compares
 * (fidelity.h has the rules).
 *
 * The replica device: address arithmetic like `sim`, but it gives a new
 * segment or address reservation the address the recording shows (sim's
 * reserve takes no hint), so the model's addresses can be compared with
 * PyTorch's one for one. It honours a hint unless it overlaps a live segment
 * or reservation of its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "device/device.h"
#include "policy/policy.h"
#include "policy/pytorch_alloc.h"
#include "replay/fidelity.h"

/* ---- the replica device --------------------------------------------------------- */

typedef struct span {
  uint64_t addr, size;
} span;

typedef struct spans {
  span *v; /* sorted by address */
  size_t n, cap;
} spans;

typedef struct replica {
  hbm_device base;
  spans segs;          /* live segments: a hint that overlaps one is not honoured */
  spans reservations;  /* address reservations: honoured as recorded (their unmapped
                        * tails may reach over other recorded addresses: the model's
                        * reservation is 1.125 x its capacity, PyTorch's 1.125 x the GPU's) */
  uint64_t next_va;
  uint64_t next_handle;
  uint64_t reserve_at; /* the address the next reservation should take (0: any) */
} replica;

#define REPLICA_BASE (1ull << 60) /* far above any recorded CUDA address */

static size_t lower(const spans *s, uint64_t addr) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (s->v[mid].addr < addr) lo = mid + 1; else hi = mid;
  }
  return lo;
}

static int overlaps(const spans *s, uint64_t addr, uint64_t size) {
  size_t i = lower(s, addr);
  if (i < s->n && s->v[i].addr < addr + size) return 1;
  if (i > 0 && s->v[i - 1].addr + s->v[i - 1].size > addr) return 1;
  return 0;
}

static int take_span(replica *r, spans *s, uint64_t size, uint64_t hint, uint64_t *addr) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    span *v = realloc(s->v, cap * sizeof *v);
    if (!v) return HBM_EHOSTMEM;
    s->v = v;
    s->cap = cap;
  }
  uint64_t a;
  if (hint && hint <= UINT64_MAX - size && (s == &r->reservations || !overlaps(s, hint, size))) {
    a = hint;
  } else {
    a = hbm_align_up(r->next_va, 2ull << 20);
    r->next_va = a + size;
  }
  size_t i = lower(s, a);
  memmove(s->v + i + 1, s->v + i, (s->n - i) * sizeof *s->v);
  s->v[i] = (span){a, size};
  s->n++;
  *addr = a;
  return HBM_OK;
}

static int drop_span(spans *s, uint64_t addr, uint64_t size) {
  size_t i = lower(s, addr);
  if (i == s->n || s->v[i].addr != addr || s->v[i].size != size) return HBM_EINVAL;
  memmove(s->v + i, s->v + i + 1, (s->n - i - 1) * sizeof *s->v);
  s->n--;
  return HBM_OK;
}

static int rep_seg_alloc(hbm_device *d, uint64_t size, uint64_t hint, uint64_t *addr) {
  if (hbm_device_claim(d, size) != HBM_OK) return HBM_ENOMEM;
  replica *r = (replica *)d;
  int rc = take_span(r, &r->segs, size, hint, addr);
  if (rc != HBM_OK) hbm_device_unclaim(d, size);
  return rc;
}
static int rep_seg_free(hbm_device *d, uint64_t addr, uint64_t size) {
  int rc = drop_span(&((replica *)d)->segs, addr, size);
  if (rc == HBM_OK) hbm_device_unclaim(d, size);
  return rc;
}
static int rep_reserve(hbm_device *d, uint64_t size, uint64_t *base) {
  replica *r = (replica *)d;
  uint64_t hint = r->reserve_at;
  r->reserve_at = 0;
  return take_span(r, &r->reservations, size, hint, base);
}
static int rep_unreserve(hbm_device *d, uint64_t base, uint64_t size) {
  return drop_span(&((replica *)d)->reservations, base, size);
}
static int rep_phys_create(hbm_device *d, uint64_t size, uint64_t *handle) {
  if (hbm_device_claim(d, size) != HBM_OK) return HBM_ENOMEM;
  *handle = ++((replica *)d)->next_handle;
  return HBM_OK;
}
static int rep_phys_release(hbm_device *d, uint64_t handle, uint64_t size) {
  hbm_device_unclaim(d, size);
  return HBM_OK;
}
static int rep_map(hbm_device *d, uint64_t va, uint64_t size, uint64_t h, uint64_t off) { return HBM_OK; }
static int rep_unmap(hbm_device *d, uint64_t va, uint64_t size) { return HBM_OK; }
static void rep_destroy(hbm_device *d) {
  replica *r = (replica *)d;
  free(r->segs.v);
  free(r->reservations.v);
  free(r);
}

static const hbm_device_ops replica_ops = {
    .kind = "replica",
    .seg_alloc = rep_seg_alloc,
    .seg_free = rep_seg_free,
    .reserve = rep_reserve,
    .unreserve = rep_unreserve,
    .phys_create = rep_phys_create,
    .phys_release = rep_phys_release,
    .map = rep_map,
    .unmap = rep_unmap,
    .destroy = rep_destroy,
};

static int replica_open(uint64_t capacity, replica **out) {
  replica *r = calloc(1, sizeof *r);
  if (!r) return HBM_EHOSTMEM;
  r->base.ops = &replica_ops;
  strcpy(r->base.caps.kind, "replica");
  r->base.caps.capacity = capacity;
  r->base.caps.granule = 2ull << 20;
  r->base.caps.vmm = 1;
  r->next_va = REPLICA_BASE;
  *out = r;
  return HBM_OK;
}

/* ---- the comparison ----------------------------------------------------------------- */

typedef struct pending {
  uint64_t addr, size;
  int used;
} pending;

typedef struct run {
  replica *dev;
  pending *hints; /* recorded segment allocations since the last alloc event */
  size_t nhints, cap_hints;
  uint64_t *model_sizes;
  size_t nmodel, cap_model;
  uint64_t reserved_model, peak_model;
  int failed; /* host memory */
} run;

static uint64_t on_hint(void *arg, int reservation, uint64_t size, int stream, int small, uint64_t proposed) {
  run *r = arg;
  if (reservation) {
    /* PyTorch maps a fresh reservation from its start right after making it,
     * so the first map recorded in this malloc is at the new base. */
    uint64_t at = proposed;
    if (!at && r->nhints) at = r->hints[0].addr;
    r->dev->reserve_at = at;
    return at;
  }
  for (size_t i = 0; i < r->nhints; i++) {
    if (!r->hints[i].used && r->hints[i].size == size) {
      r->hints[i].used = 1;
      return r->hints[i].addr;
    }
  }
  return 0;
}

static void on_action(void *arg, hbm_pt_action action, uint64_t addr, uint64_t size, int stream, int small) {
  run *r = arg;
  if (action == HBM_PT_SEGMENT_ALLOC || action == HBM_PT_SEGMENT_MAP) {
    if (r->nmodel == r->cap_model) {
      size_t cap = r->cap_model ? r->cap_model * 2 : 64;
      uint64_t *s = realloc(r->model_sizes, cap * sizeof *s);
      if (!s) {
        r->failed = 1;
        return;
      }
      r->model_sizes = s;
      r->cap_model = cap;
    }
    r->model_sizes[r->nmodel++] = size;
    r->reserved_model += size;
    if (r->reserved_model > r->peak_model) r->peak_model = r->reserved_model;
  } else {
    r->reserved_model -= size;
  }
}

static void count_report(void *arg, const char *message) { (*(int *)arg)++; }

static int pick_policy(const hbm_trace *t, const hbm_fidelity_options *o, const char **conf,
                       const hbm_policy_class **cls, hbm_diag *diag) {
  *conf = o && o->conf ? o->conf : t->conf;
  const char *name = o ? o->policy : NULL;
  if (!name) {
    hbm_pt_conf c;
    hbm_pt_conf_default(&c, 0);
    if (hbm_pt_conf_parse(*conf, &c, diag) != HBM_OK) return HBM_EINVAL;
    name = c.expandable ? "expandable" : "caching";
  }
  *cls = hbm_policy_find(name);
  if (!*cls || (strcmp(name, "caching") && strcmp(name, "expandable"))) {
    hbm_diag_set(diag, "fidelity", 0, 0, "policy '%s': fidelity compares PyTorch's allocator "
                 "(caching or expandable) with a recording", name);
    return HBM_EINVAL;
  }
  return HBM_OK;
}

int hbm_fidelity(const hbm_trace *t, const hbm_fidelity_options *o, hbm_fidelity_result *res, hbm_diag *diag) {
  if (!t || !res) return HBM_EINVAL;
  memset(res, 0, sizeof *res);
  uint64_t recorded = 0, allocs = 0;
  for (uint64_t i = 0; i < t->nevents; i++) {
    if (t->events[i].kind != HBM_EV_ALLOC) continue;
    allocs++;
    if (t->events[i].addr != HBM_NO_ADDR) recorded++;
  }
  if (allocs && !recorded) {
    hbm_diag_set(diag, t->name, 0, 0, "the trace records no addresses (@ADDR): nothing to compare with; "
                 "import a PyTorch snapshot, or replay the trace instead");
    return HBM_EINVAL;
  }
  const char *conf;
  const hbm_policy_class *cls;
  int rc = pick_policy(t, o, &conf, &cls, diag);
  if (rc != HBM_OK) return rc;
  snprintf(res->policy, sizeof res->policy, "%s", cls->name);

  /* Recorded releases are applied where they happened, so the model needs no
   * capacity of its own to follow an OOM; a finite one could only make it
   * fail where PyTorch did not. */
  uint64_t capacity = o && o->capacity ? o->capacity : HBM_MAX_SIZE;
  run r = {0};
  if ((rc = replica_open(capacity, &r.dev)) != HBM_OK) return rc;
  hbm_policy *p = NULL;
  uint64_t *id_addr = NULL;
  uint64_t *real_sizes = NULL;
  size_t nreal = 0;
  rc = cls->create(&r.dev->base, conf, &p, diag);
  if (rc != HBM_OK) goto done;
  hbm_pt_hooks hooks = {on_hint, on_action, &r};
  hbm_pt_set_hooks(p, &hooks);
  id_addr = malloc(((size_t)t->nids + 1) * sizeof *id_addr);
  real_sizes = malloc((t->nevents + 1) * sizeof *real_sizes);
  if (!id_addr || !real_sizes) {
    rc = HBM_EHOSTMEM;
    goto done;
  }
  for (uint32_t i = 0; i <= t->nids; i++) id_addr[i] = HBM_NO_ADDR;
  uint64_t reserved_real = 0;
  for (uint32_t i = 0; i < t->ninit_segments; i++) reserved_real += t->init_segments[i].size;
  rc = cls->seed(p, t, id_addr);
  if (rc != HBM_OK) {
    hbm_diag_set(diag, t->name, 0, 0, "the starting state does not fit the %s model (%s)", cls->name,
                 hbm_strerror(rc));
    rc = HBM_EPARSE;
    goto done;
  }
  hbm_pt_stats st;
  hbm_pt_get_stats(p, &st);
  r.reserved_model = r.peak_model = st.reserved;
  res->peak_reserved_real = reserved_real;

  /* streams */
  {
    int32_t seen[64];
    size_t nseen = 0;
    for (uint64_t i = 0; i < t->nevents + t->ninit_segments; i++) {
      int32_t s = i < t->nevents ? t->events[i].stream : t->init_segments[i - t->nevents].stream;
      if (i < t->nevents && t->events[i].kind == HBM_EV_STEP) continue;
      size_t k = 0;
      while (k < nseen && seen[k] != s) k++;
      if (k == nseen && nseen < 64) seen[nseen++] = s;
    }
    res->streams = nseen;
  }

  for (uint64_t i = 0; i < t->nevents; i++) {
    const hbm_event *e = &t->events[i];
    uint64_t addr, bs;
    switch (e->kind) {
      case HBM_EV_SEG_ALLOC:
        if (r.nhints == r.cap_hints) {
          size_t cap = r.cap_hints ? r.cap_hints * 2 : 16;
          pending *h = realloc(r.hints, cap * sizeof *h);
          if (!h) {
            rc = HBM_EHOSTMEM;
            goto done;
          }
          r.hints = h;
          r.cap_hints = cap;
        }
        r.hints[r.nhints++] = (pending){e->addr, e->size, 0};
        real_sizes[nreal++] = e->size;
        res->segment_allocs_real++;
        reserved_real += e->size;
        if (reserved_real > res->peak_reserved_real) res->peak_reserved_real = reserved_real;
        break;
      case HBM_EV_SEG_FREE:
        res->segment_frees_real++;
        reserved_real = reserved_real > e->size ? reserved_real - e->size : 0;
        if (cls->seg_released(p, e->addr, e->size) == HBM_OK) res->segment_frees_applied++;
        break;
      case HBM_EV_ALLOC:
        res->allocs++;
        rc = cls->alloc(p, e->size, (hbm_tag)e->tag, e->stream, &addr, &bs);
        r.nhints = 0; /* hints belong to the malloc that recorded them */
        if (rc == HBM_OK) {
          id_addr[e->id] = addr;
        } else if (rc == HBM_ENOMEM) {
          res->failed_allocs++;
          id_addr[e->id] = HBM_NO_ADDR;
          addr = HBM_NO_ADDR;
        } else {
          goto done;
        }
        if (e->addr != HBM_NO_ADDR && addr == e->addr) {
          res->address_matches++;
        } else if (!res->has_mismatch) {
          res->has_mismatch = 1;
          res->mismatch_event = i;
          res->mismatch_real = e->addr;
          res->mismatch_model = addr;
          res->mismatch_line = e->line;
        }
        break;
      case HBM_EV_FREE:
        if (e->id <= t->nids && id_addr[e->id] != HBM_NO_ADDR) {
          rc = cls->free(p, id_addr[e->id], &bs);
          if (rc != HBM_OK) {
            hbm_diag_set(diag, t->name, e->line, 0, "event %llu: the model cannot free id %u (%s)",
                         (unsigned long long)i, e->id, hbm_strerror(rc));
            goto done;
          }
          id_addr[e->id] = HBM_NO_ADDR;
        }
        break;
      default: break;
    }
    res->events++;
  }
  rc = r.failed ? HBM_EHOSTMEM : HBM_OK;
  res->address_match = res->allocs ? (double)res->address_matches / (double)res->allocs : 1.0;
  res->segment_allocs_model = r.nmodel;
  res->peak_reserved_model = r.peak_model;
  res->segment_sizes_equal = nreal == r.nmodel;
  for (size_t k = 0; k < nreal && res->segment_sizes_equal; k++)
    if (real_sizes[k] != r.model_sizes[k]) res->segment_sizes_equal = 0;
  cls->check(p, count_report, &res->check_failures);
done:
  if (p) cls->destroy(p);
  rep_destroy(&r.dev->base);
  free(r.hints);
  free(r.model_sizes);
  free(id_addr);
  free(real_sizes);
  return rc;
}
