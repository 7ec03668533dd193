/* reloc.c: handles, relocation hooks and the public compaction calls
 * (hbm.h, "relocatable allocations and compaction"; docs/compaction.md).
 *
 * A handle is (generation << 32) | (slot + 1): a slot is reused after its
 * block is freed, with the next generation, so a stale handle is refused
 * rather than resolved to someone else's block. A slot whose generations
 * are all spent is retired, never reused: its generation would wrap and
 * bring back handles freed long ago. Handle 0 is never issued. */
#include "core/reloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "policy/compact.h"

uint32_t hbm_reloc_grown_cap(uint32_t cap) {
  uint64_t most = HBM_RELOC_MAX_SLOTS;
  if (most > SIZE_MAX / sizeof(hbm_handle_slot)) most = SIZE_MAX / sizeof(hbm_handle_slot);
  if (cap >= most) return 0;
  uint64_t grown = cap ? 2 * (uint64_t)cap : 256; /* 64-bit: 2^31 doubled is not 0 */
  return (uint32_t)(grown < most ? grown : most);
}

int hbm_reloc_create(hbm_reloc **out) {
  hbm_reloc *r = calloc(1, sizeof *r);
  if (!r) return HBM_EHOSTMEM;
  hbm_addrmap_init(&r->by_addr);
  *out = r;
  return HBM_OK;
}

void hbm_reloc_destroy(hbm_reloc *r) {
  if (!r) return;
  hbm_addrmap_release(&r->by_addr);
  free(r->slots);
  free(r->spare);
  free(r);
}

void hbm_reloc_moved(hbm_reloc *r, uint64_t old_addr, uint64_t new_addr, uint64_t request, hbm_tag tag) {
  uint64_t slot;
  if (hbm_addrmap_take(&r->by_addr, old_addr, &slot)) {
    hbm_addrmap_put(&r->by_addr, new_addr, slot); /* the take made room: cannot fail */
    r->slots[slot].addr = new_addr;
  }
  if (r->hooks.moved) r->hooks.moved(r->hooks.arg, old_addr, new_addr, request, tag);
}

void hbm_reloc_freed(hbm_reloc *r, uint64_t addr) {
  uint64_t slot;
  if (!hbm_addrmap_take(&r->by_addr, addr, &slot)) return;
  r->slots[slot].live = 0;
  if (++r->slots[slot].gen == 0) r->retired++; /* every generation issued: never reused */
  else r->spare[r->nspare++] = (uint32_t)slot; /* room: spare has cap entries */
  r->live_handles--;
}

typedef struct check_ctx {
  const hbm_reloc *r;
  const hbm_addrmap *live;
  hbm_check_report_fn *report;
  void *arg;
  int failures;
} check_ctx;

static void check_entry(void *arg, uint64_t addr, uint64_t slot) {
  check_ctx *c = arg;
  uint64_t rec;
  char m[160];
  if (slot >= c->r->nslots || !c->r->slots[slot].live || c->r->slots[slot].addr != addr) {
    snprintf(m, sizeof m, "handles: address %#llx maps to slot %llu, which does not hold it",
             (unsigned long long)addr, (unsigned long long)slot);
    c->report(c->arg, m);
    c->failures++;
  } else if (!hbm_addrmap_get(c->live, addr, &rec)) {
    snprintf(m, sizeof m, "handles: a handle resolves to %#llx, which is not a live block", (unsigned long long)addr);
    c->report(c->arg, m);
    c->failures++;
  }
}

static void forward(void *arg, const char *message) { hbm_check_forward(arg, message); }

int hbm_reloc_check(const hbm_reloc *r, const hbm_policy *p, const hbm_addrmap *live, hbm_check_report_fn *report,
                    void *arg) {
  hbm_checker k = {.report = report, .arg = arg, .prefix = "handles: "};
  /* The hooks' two copies: the policy asks its own before_move, the layer
   * tells `moved` from its own, and both are set from one call. */
  if (hbm_policy_is_compact(p)) {
    const hbm_compact_policy *c = (const hbm_compact_policy *)p;
    if (c->before_move != r->hooks.before_move)
      hbm_check_fail(&k, "the policy asks a before_move hook other than the one set (%s, the hooks %s)",
                     c->before_move ? "a hook" : "none", r->hooks.before_move ? "a hook" : "none");
    if (c->before_arg != r->hooks.arg)
      hbm_check_fail(&k, "the policy passes before_move the argument %p, the hooks set %p", c->before_arg,
                     r->hooks.arg);
  }
  /* The address map's own invariant: hbm_reloc_freed and moved look blocks up through it. */
  hbm_addrmap_check(&r->by_addr, forward, &k);
  if (r->nslots > r->cap || r->nspare > r->cap) {
    hbm_check_fail(&k, "%u slots and %u free slots, room for %u", r->nslots, r->nspare, r->cap);
    return k.failures;
  }
  check_ctx c = {r, live, report, arg, 0};
  hbm_addrmap_each(&r->by_addr, check_entry, &c);
  k.failures += c.failures;
  uint64_t nlive = 0, nretired = 0;
  for (uint32_t i = 0; i < r->nslots; i++) {
    nlive += r->slots[i].live;
    nretired += r->slots[i].gen == 0;
  }
  if (nlive != r->live_handles || r->by_addr.used != r->live_handles ||
      (uint64_t)r->nslots - r->nspare - r->retired != r->live_handles)
    hbm_check_fail(&k, "%llu live handles, %llu live slots, %llu mapped, %u free and %u retired slots of %u",
                   (unsigned long long)r->live_handles, (unsigned long long)nlive,
                   (unsigned long long)r->by_addr.used, r->nspare, r->retired, r->nslots);
  /* Retired slots: generation 0, every generation issued; never live again. */
  if (nretired != r->retired)
    hbm_check_fail(&k, "%llu slots of generation 0, %u counted retired", (unsigned long long)nretired, r->retired);
  for (uint32_t i = 0; i < r->nslots; i++)
    if (r->slots[i].gen == 0 && r->slots[i].live) hbm_check_fail(&k, "slot %u is retired (generation 0) and live", i);
  /* The free slots: each one that is not live, once (with the count above:
   * exactly those), so that a slot handed out again is never a live one. */
  uint8_t *listed = calloc(r->nslots ? r->nslots : 1, 1);
  if (!listed) {
    hbm_check_no_memory(&k);
    return k.failures;
  }
  for (uint32_t i = 0; i < r->nspare; i++) {
    uint32_t s = r->spare[i];
    if (s >= r->nslots) hbm_check_fail(&k, "free slot %u (entry %u) is past the %u slots", s, i, r->nslots);
    else if (r->slots[s].live) hbm_check_fail(&k, "free slot %u (entry %u) is live", s, i);
    else if (r->slots[s].gen == 0) hbm_check_fail(&k, "free slot %u (entry %u) is retired", s, i);
    else if (listed[s]) hbm_check_fail(&k, "free slot %u is listed twice (entry %u)", s, i);
    else listed[s] = 1;
  }
  free(listed);
  return k.failures;
}

/* ---- public calls ------------------------------------------------------------------ */
static int slot_of(const hbm_reloc *r, hbm_handle handle, uint32_t *slot) {
  uint64_t s = (handle & 0xffffffffu) - 1;
  if (!handle || s >= r->nslots || !r->slots[s].live || r->slots[s].gen != (uint32_t)(handle >> 32))
    return HBM_EINVAL;
  *slot = (uint32_t)s;
  return HBM_OK;
}

/* Enters the heap; HBM_EUNSUPPORTED (lock released) unless its policy moves blocks. */
static int enter(hbm_heap *heap, hbm_policy **p, hbm_reloc **r, const char *what) {
  if (!heap) return HBM_EINVAL;
  *p = hbm_heap_enter(heap, r);
  if (!*r || !hbm_policy_is_compact(*p)) {
    const char *name = (*p)->cls->name;
    hbm_heap_leave(heap);
    return hbm_report_error(HBM_EUNSUPPORTED, "%s: policy %s never moves blocks (use policy compact)", what, name);
  }
  return HBM_OK;
}

static int bad_handle(hbm_heap *heap, const char *what, hbm_handle handle) {
  hbm_heap_leave(heap);
  return hbm_report_error(HBM_EINVAL, "%s: handle %#llx is not live (freed, or never issued)", what,
                          (unsigned long long)handle);
}

int hbm_heap_set_relocation_hooks(hbm_heap *heap, const hbm_relocation_hooks *hooks) {
  hbm_policy *p;
  hbm_reloc *r;
  int rc = enter(heap, &p, &r, "relocation hooks");
  if (rc != HBM_OK) return rc;
  if (hooks) r->hooks = *hooks;
  else memset(&r->hooks, 0, sizeof r->hooks);
  hbm_compact_policy_set_before_move(p, r->hooks.before_move, r->hooks.arg);
  hbm_heap_leave(heap);
  return HBM_OK;
}

int hbm_alloc_handle(hbm_heap *heap, uint64_t size, hbm_tag tag, int stream, hbm_handle *handle) {
  hbm_policy *p;
  hbm_reloc *r;
  if (!handle) return HBM_EINVAL;
  int rc = enter(heap, &p, &r, "alloc_handle");
  if (rc != HBM_OK) return rc;
  /* Room for one more slot and its address entry before allocating: once the
   * block is placed, taking it back would be a free the policy learns from. */
  if (!r->nspare && r->nslots == r->cap) {
    uint32_t cap = hbm_reloc_grown_cap(r->cap);
    if (!cap) {
      hbm_heap_count_failure(heap);
      hbm_heap_leave(heap);
      return hbm_report_error(HBM_EHOSTMEM, "alloc_handle: all %u handle slots taken (%u retired), the most one "
                              "heap holds", r->nslots, r->retired);
    }
    hbm_handle_slot *s = realloc(r->slots, (size_t)cap * sizeof *s);
    if (s) r->slots = s;
    uint32_t *sp = s ? realloc(r->spare, (size_t)cap * sizeof *sp) : NULL;
    if (sp) {
      r->spare = sp;
      r->cap = cap;
    }
  }
  if ((!r->nspare && r->nslots == r->cap) || hbm_addrmap_reserve(&r->by_addr, 1) != HBM_OK) {
    hbm_heap_count_failure(heap);
    hbm_heap_leave(heap);
    return HBM_EHOSTMEM;
  }
  uint64_t addr;
  rc = hbm_heap_alloc_locked(heap, size, tag, stream, &addr);
  if (rc == HBM_OK) {
    uint32_t slot = r->nspare ? r->spare[r->nspare - 1] : r->nslots;
    if (hbm_addrmap_put(&r->by_addr, addr, slot) != HBM_OK) { /* reserved: cannot happen */
      hbm_heap_free_locked(heap, addr);
      rc = HBM_EHOSTMEM;
    } else {
      if (r->nspare) r->nspare--;
      else r->slots[r->nslots++].gen = 1;
      r->slots[slot].addr = addr;
      r->slots[slot].live = 1;
      r->live_handles++;
      *handle = ((uint64_t)r->slots[slot].gen << 32) | (slot + 1u);
    }
  }
  hbm_heap_leave(heap);
  return rc;
}

int hbm_free_handle(hbm_heap *heap, hbm_handle handle) {
  hbm_policy *p;
  hbm_reloc *r;
  uint32_t slot;
  int rc = enter(heap, &p, &r, "free_handle");
  if (rc != HBM_OK) return rc;
  if (slot_of(r, handle, &slot) != HBM_OK) return bad_handle(heap, "free_handle", handle);
  rc = hbm_heap_free_locked(heap, r->slots[slot].addr); /* ends the handle through hbm_reloc_freed */
  hbm_heap_leave(heap);
  return rc;
}

int hbm_handle_addr(hbm_heap *heap, hbm_handle handle, uint64_t *addr) {
  hbm_policy *p;
  hbm_reloc *r;
  uint32_t slot;
  if (!addr) return HBM_EINVAL;
  int rc = enter(heap, &p, &r, "handle_addr");
  if (rc != HBM_OK) return rc;
  if (slot_of(r, handle, &slot) != HBM_OK) return bad_handle(heap, "handle_addr", handle);
  *addr = r->slots[slot].addr;
  hbm_heap_leave(heap);
  return HBM_OK;
}

static int pin_by(hbm_heap *heap, hbm_handle handle, int delta, const char *what) {
  hbm_policy *p;
  hbm_reloc *r;
  uint32_t slot;
  int rc = enter(heap, &p, &r, what);
  if (rc != HBM_OK) return rc;
  if (slot_of(r, handle, &slot) != HBM_OK) return bad_handle(heap, what, handle);
  rc = hbm_compact_policy_pin(p, r->slots[slot].addr, delta);
  hbm_heap_leave(heap);
  if (rc == HBM_EINVAL) return hbm_report_error(rc, "unpin: handle %#llx is not pinned", (unsigned long long)handle);
  return rc;
}
int hbm_pin(hbm_heap *heap, hbm_handle handle) { return pin_by(heap, handle, +1, "pin"); }
int hbm_unpin(hbm_heap *heap, hbm_handle handle) { return pin_by(heap, handle, -1, "unpin"); }

int hbm_compact(hbm_heap *heap, const hbm_compact_options *options, hbm_compact_result *result) {
  hbm_policy *p;
  hbm_reloc *r;
  int rc = enter(heap, &p, &r, "compact");
  if (rc != HBM_OK) return rc;
  rc = hbm_compact_policy_run(p, options, result);
  hbm_heap_leave(heap);
  return rc;
}

int hbm_compact_stats_get(hbm_heap *heap, hbm_compact_stats *out) {
  hbm_policy *p;
  hbm_reloc *r;
  if (!out) return HBM_EINVAL;
  int rc = enter(heap, &p, &r, "compact_stats");
  if (rc != HBM_OK) return rc;
  hbm_compact_policy_stats(p, out);
  hbm_heap_leave(heap);
  return HBM_OK;
}
