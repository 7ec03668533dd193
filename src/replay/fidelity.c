/* fidelity.c: replays a recording through the PyTorch model and compares
 * (fidelity.h has the rules).
 *
 * The model runs on a sim device that gives a new segment or address
 * reservation the address the recording shows (a segment's unless it overlaps
 * a live one), so the model's addresses compare with PyTorch's one for one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "device/device.h"
#include "policy/policy.h"
#include "policy/pytorch_alloc.h"
#include "replay/fidelity.h"
#include "replay/seg_hints.h"

#define FIDELITY_BASE (1ull << 60) /* the device's own addresses: far above any recorded CUDA address */

/* ---- the comparison ----------------------------------------------------------------- */

typedef struct run {
  hbm_device *dev;
  hbm_seg_hints hints; /* recorded segment allocations since the last alloc event */
  uint64_t *model_sizes;
  size_t nmodel, cap_model;
  uint64_t reserved_model, peak_model;
  int failed; /* host memory */
} run;

static uint64_t on_hint(void *arg, int reservation, uint64_t size, int stream, int small, uint64_t proposed) {
  run *r = arg;
  return hbm_seg_hints_take(&r->hints, reservation, size, stream, small, proposed);
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

static int stream_cmp(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return x < y ? -1 : x > y;
}

typedef struct check_count { int failures, no_memory; } check_count;
static void count_report(void *arg, const char *message) {
  check_count *c = arg;
  if (message == hbm_check_no_memory_message) c->no_memory = 1;
  else c->failures++;
}

/* The policy (asked for, else the one the recorded settings name) and its
 * settings (given, else recorded). Asked for caching over a recording made
 * with expandable segments (or the reverse), the recorded settings run with
 * expandable_segments turned to the policy's, written into `own`: the
 * policy's name says which allocator ran. */
static int pick_policy(const hbm_trace *t, const hbm_fidelity_options *o, const char **conf,
                       char own[512], const hbm_policy_class **cls, hbm_diag *diag) {
  *conf = o && o->conf ? o->conf : t->conf;
  const char *name = o ? o->policy : NULL;
  hbm_pt_conf c;
  hbm_pt_conf_default(&c, name && !strcmp(name, "expandable"));
  if (!name) {
    int rc = hbm_pt_conf_policy(*conf, &name, diag);
    if (rc != HBM_OK) return rc == HBM_EHOSTMEM ? rc : HBM_EINVAL;
  }
  *cls = hbm_policy_find(name);
  if (!*cls || (strcmp(name, "caching") && strcmp(name, "expandable"))) {
    hbm_diag_set(diag, "fidelity", 0, 0, "policy '%s': fidelity compares PyTorch's allocator "
                 "(caching or expandable) with a recording", name);
    return HBM_EINVAL;
  }
  int expandable = !strcmp(name, "expandable");
  int parsed = !(o && o->conf) && *conf ? hbm_pt_conf_parse(*conf, &c, NULL) : HBM_EINVAL;
  if (parsed == HBM_EHOSTMEM) return parsed;
  if (parsed == HBM_OK && c.expandable != expandable) {
    /* a later key overrides an earlier one, as in PyTorch */
    if ((size_t)snprintf(own, 512, "%s,expandable_segments:%s", *conf, expandable ? "True" : "False") >= 512) {
      hbm_diag_set(diag, t->name, 0, 0, "recorded settings too long (more than 480 bytes)");
      return HBM_EINVAL;
    }
    *conf = own;
  }
  return HBM_OK;
}

int hbm_fidelity(const hbm_trace *t, const hbm_fidelity_options *o, hbm_fidelity_result *res, hbm_diag *diag) {
  if (!t || !res) return HBM_EINVAL;
  memset(res, 0, sizeof *res);
  /* Only requests PyTorch placed compare: a refused one is not placed, even
   * where a text trace gives it an address. */
  uint64_t recorded = 0, allocs = 0, refused_recorded = 0;
  for (uint64_t i = 0; i < t->nevents; i++) {
    if (t->events[i].kind != HBM_EV_ALLOC) continue;
    if (t->events[i].flags & HBM_EV_REFUSED) {
      refused_recorded += t->events[i].addr != HBM_NO_ADDR;
      continue;
    }
    allocs++;
    if (t->events[i].addr != HBM_NO_ADDR) recorded++;
  }
  if (!allocs) { /* a match of 0 of 0 would read as a pass */
    char dev[32] = ""; /* a snapshot's other devices may have some */
    if (t->from_snapshot) snprintf(dev, sizeof dev, "device %d: ", (int)t->snapshot_device);
    hbm_diag_set(diag, t->name, 0, 0, "%sno allocations with recorded addresses to compare", dev);
    return HBM_EINVAL;
  }
  if (!recorded) {
    hbm_diag_set(diag, t->name, 0, 0, "the trace records no addresses (@ADDR)%s: nothing to compare with; "
                 "import a PyTorch snapshot, or replay the trace instead",
                 refused_recorded ? " but on requests PyTorch refused, which are not placed" : "");
    return HBM_EINVAL;
  }
  const char *conf;
  char own_conf[512];
  const hbm_policy_class *cls;
  int rc = pick_policy(t, o, &conf, own_conf, &cls, diag);
  if (rc != HBM_OK) return rc;
  snprintf(res->policy, sizeof res->policy, "%s", cls->name);

  /* Recorded releases are applied where they happened, so the model needs no
   * capacity of its own to follow an OOM; a finite one could only make it
   * fail where PyTorch did not. */
  uint64_t capacity = o && o->capacity ? o->capacity : HBM_MAX_SIZE;
  run r = {0};
  if ((rc = hbm_sim_open_at(capacity, 2ull << 20, FIDELITY_BASE, &r.dev)) != HBM_OK) return rc;
  hbm_policy *p = NULL;
  uint64_t *id_addr = NULL;
  uint64_t *real_sizes = NULL;
  size_t nreal = 0;
  rc = cls->create(r.dev, conf, &p, diag);
  if (rc != HBM_OK) goto done;
  r.hints.dev = r.dev;
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
  rc = cls->seed(p, t, id_addr, NULL);
  if (rc != HBM_OK && rc != HBM_EHOSTMEM) {
    hbm_diag_set(diag, t->name, 0, 0, "the starting state does not fit the %s model (%s)", cls->name,
                 hbm_strerror(rc));
    rc = HBM_EPARSE;
    goto done;
  }
  if (rc != HBM_OK) goto done;
  hbm_pt_stats st;
  hbm_pt_get_stats(p, &st);
  r.reserved_model = r.peak_model = st.reserved;
  res->peak_reserved_real = reserved_real;

  /* streams: those requests and segments name (a free names none in a text
   * trace, and its 0 there is no stream of the recording), all of them */
  {
    int32_t *seen = malloc((t->nevents + t->ninit_segments + 1) * sizeof *seen);
    if (!seen) {
      rc = HBM_EHOSTMEM;
      goto done;
    }
    size_t nseen = 0;
    for (uint64_t i = 0; i < t->nevents; i++)
      if (t->events[i].kind == HBM_EV_ALLOC || t->events[i].kind == HBM_EV_SEG_ALLOC) seen[nseen++] = t->events[i].stream;
    for (uint32_t i = 0; i < t->ninit_segments; i++) seen[nseen++] = t->init_segments[i].stream;
    qsort(seen, nseen, sizeof *seen, stream_cmp);
    res->streams = 0;
    for (size_t k = 0; k < nseen; k++) res->streams += !k || seen[k] != seen[k - 1];
    free(seen);
  }

  for (uint64_t i = 0; i < t->nevents; i++) {
    const hbm_event *e = &t->events[i];
    uint64_t addr, bs;
    switch (e->kind) {
      case HBM_EV_SEG_ALLOC:
        if (hbm_seg_hints_add(&r.hints, e->addr, e->size) != HBM_OK) {
          rc = HBM_EHOSTMEM;
          goto done;
        }
        real_sizes[nreal++] = e->size;
        res->segment_allocs_real++;
        reserved_real += e->size;
        if (reserved_real > res->peak_reserved_real) res->peak_reserved_real = reserved_real;
        break;
      case HBM_EV_SEG_FREE:
        res->segment_frees_real++;
        reserved_real = reserved_real > e->size ? reserved_real - e->size : 0;
        if (cls->seg_released(p, e->addr, e->size) == HBM_OK) {
          res->segment_frees_applied++;
        } else if (!res->has_unapplied) { /* the model holds that memory otherwise than PyTorch did */
          res->has_unapplied = 1;
          res->unapplied_event = i;
          res->unapplied_addr = e->addr;
          res->unapplied_size = e->size;
          hbm_trace_where(t, e->line, res->unapplied_where, sizeof res->unapplied_where);
        }
        break;
      case HBM_EV_ALLOC:
        if (e->flags & HBM_EV_REFUSED) {
          res->refused++;
          id_addr[e->id] = HBM_NO_ADDR; /* its free is then no event for the model */
          break;
        }
        res->allocs++;
        rc = cls->alloc(p, e->size, (hbm_tag)e->tag, e->stream, &addr, &bs);
        hbm_seg_hints_clear(&r.hints); /* hints belong to the malloc that recorded them */
        if (rc == HBM_OK) {
          id_addr[e->id] = addr;
        } else if (rc == HBM_ENOMEM) {
          res->failed_allocs++;
          id_addr[e->id] = HBM_NO_ADDR;
          addr = HBM_NO_ADDR;
        } else {
          goto done;
        }
        if (e->addr == HBM_NO_ADDR) {
          res->unrecorded++; /* nothing to compare with */
        } else if (addr == e->addr) {
          res->address_matches++;
        } else if (!res->has_mismatch) {
          res->has_mismatch = 1;
          res->mismatch_event = i;
          res->mismatch_real = e->addr;
          res->mismatch_model = addr;
          res->mismatch_line = e->line;
          hbm_trace_where(t, e->line, res->mismatch_where, sizeof res->mismatch_where);
        }
        break;
      case HBM_EV_FREE:
        if (e->id <= t->nids && id_addr[e->id] != HBM_NO_ADDR) {
          rc = cls->free(p, id_addr[e->id], &bs);
          if (rc != HBM_OK) {
            /* a snapshot's entry is no line of the file */
            char where[48];
            hbm_trace_where(t, t->from_snapshot ? e->line : 0, where, sizeof where);
            hbm_diag_set(diag, t->name, t->from_snapshot ? 0 : e->line, 0, "%s%sevent %llu: the model cannot free id %u (%s)",
                         where, where[0] ? ": " : "", (unsigned long long)i, e->id, hbm_strerror(rc));
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
  res->address_match = res->allocs > res->unrecorded
                           ? (double)res->address_matches / (double)(res->allocs - res->unrecorded) : 1.0;
  res->segment_allocs_model = r.nmodel;
  res->peak_reserved_model = r.peak_model;
  res->segment_sizes_equal = nreal == r.nmodel;
  for (size_t k = 0; k < nreal && res->segment_sizes_equal; k++)
    if (real_sizes[k] != r.model_sizes[k]) res->segment_sizes_equal = 0;
  check_count cc = {0, 0};
  cls->check(p, count_report, &cc);
  res->check_failures = cc.failures;
  if (cc.no_memory) {
    hbm_diag_set(diag, t->name, 0, 0, "out of host memory checking the model");
    rc = HBM_EHOSTMEM;
  }
done:
  if (p) cls->destroy(p);
  hbm_device_close(r.dev);
  hbm_seg_hints_release(&r.hints);
  free(r.model_sizes);
  free(id_addr);
  free(real_sizes);
  return rc;
}
