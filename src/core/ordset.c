/* ordset.c: the treap behind hbm_ordset (see ordset.h for the contract and
 * the invariants O1..O4). Insert walks down by priority and splits the
 * subtree it stops at; erase replaces the node with the merge of its
 * children. Both are iterative, so depth never touches the C stack. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ordset.h"
#include "hbm.h"

#define NIL UINT32_MAX

typedef struct node {
  hbm_okey key;
  uint32_t value;
  uint32_t left, right; /* free nodes chain through left */
  uint32_t prio;
} node;

struct hbm_ordset {
  node *nodes;
  uint32_t cap, used; /* nodes[0..used) have been handed out at least once */
  uint32_t free_head, free_count;
  uint32_t root;
  size_t count;
  uint32_t rng;       /* xorshift32 state, fixed seed: reproducible shapes */
};

int hbm_ordset_create(hbm_ordset **out) {
  hbm_ordset *s = calloc(1, sizeof *s);
  if (!s) return HBM_EHOSTMEM;
  s->root = NIL;
  s->free_head = NIL;
  s->rng = 0x9e3779b9u;
  *out = s;
  return HBM_OK;
}

void hbm_ordset_destroy(hbm_ordset *s) {
  if (!s) return;
  free(s->nodes);
  free(s);
}

size_t hbm_ordset_count(const hbm_ordset *s) { return s->count; }

static uint32_t next_prio(hbm_ordset *s) {
  uint32_t x = s->rng;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  s->rng = x;
  return x;
}

static uint32_t node_new(hbm_ordset *s) {
  if (s->free_head != NIL) {
    uint32_t n = s->free_head;
    s->free_head = s->nodes[n].left;
    s->free_count--;
    return n;
  }
  if (s->used == s->cap) {
    uint32_t cap = s->cap ? s->cap * 2 : 64;
    if (cap <= s->cap || cap == NIL) return NIL;
    node *n = realloc(s->nodes, (size_t)cap * sizeof *n);
    if (!n) return NIL;
    s->nodes = n;
    s->cap = cap;
  }
  return s->used++;
}

static void node_release(hbm_ordset *s, uint32_t n) {
  s->nodes[n].left = s->free_head;
  s->nodes[n].right = NIL;
  s->nodes[n].prio = 0;
  s->free_head = n;
  s->free_count++;
}

int hbm_ordset_insert(hbm_ordset *s, hbm_okey key, uint32_t value) {
  uint32_t n = node_new(s);
  if (n == NIL) return HBM_EHOSTMEM;
  node *nodes = s->nodes; /* stable from here on: no more growth */
  uint32_t prio = next_prio(s);
  uint32_t *link = &s->root;
  while (*link != NIL && nodes[*link].prio >= prio) {
    int c = hbm_okey_cmp(key, nodes[*link].key);
    if (c == 0) {
      node_release(s, n);
      return HBM_EINVAL;
    }
    link = c < 0 ? &nodes[*link].left : &nodes[*link].right;
  }
  /* The key must not be in the subtree we are about to split. */
  for (uint32_t t = *link; t != NIL;) {
    int c = hbm_okey_cmp(key, nodes[t].key);
    if (c == 0) {
      node_release(s, n);
      return HBM_EINVAL;
    }
    t = c < 0 ? nodes[t].left : nodes[t].right;
  }
  nodes[n].key = key;
  nodes[n].value = value;
  nodes[n].prio = prio;
  uint32_t *l = &nodes[n].left, *r = &nodes[n].right;
  uint32_t t = *link;
  while (t != NIL) {
    if (hbm_okey_cmp(key, nodes[t].key) > 0) {
      *l = t;
      l = &nodes[t].right;
      t = nodes[t].right;
    } else {
      *r = t;
      r = &nodes[t].left;
      t = nodes[t].left;
    }
  }
  *l = NIL;
  *r = NIL;
  *link = n;
  s->count++;
  return HBM_OK;
}

int hbm_ordset_erase(hbm_ordset *s, hbm_okey key) {
  node *nodes = s->nodes;
  uint32_t *link = &s->root;
  while (*link != NIL) {
    int c = hbm_okey_cmp(key, nodes[*link].key);
    if (c == 0) break;
    link = c < 0 ? &nodes[*link].left : &nodes[*link].right;
  }
  if (*link == NIL) return HBM_EINVAL;
  uint32_t t = *link;
  uint32_t a = nodes[t].left, b = nodes[t].right;
  uint32_t *dst = link;
  while (a != NIL && b != NIL) {
    if (nodes[a].prio >= nodes[b].prio) {
      *dst = a;
      dst = &nodes[a].right;
      a = nodes[a].right;
    } else {
      *dst = b;
      dst = &nodes[b].left;
      b = nodes[b].left;
    }
  }
  *dst = a != NIL ? a : b;
  node_release(s, t);
  s->count--;
  return HBM_OK;
}

static int emit(const hbm_ordset *s, uint32_t n, hbm_okey *found, uint32_t *value) {
  if (n == NIL) return 0;
  if (found) *found = s->nodes[n].key;
  if (value) *value = s->nodes[n].value;
  return 1;
}

int hbm_ordset_find(const hbm_ordset *s, hbm_okey key, uint32_t *value) {
  uint32_t t = s->root;
  while (t != NIL) {
    int c = hbm_okey_cmp(key, s->nodes[t].key);
    if (c == 0) return emit(s, t, NULL, value);
    t = c < 0 ? s->nodes[t].left : s->nodes[t].right;
  }
  return 0;
}

int hbm_ordset_lower_bound(const hbm_ordset *s, hbm_okey key, hbm_okey *found, uint32_t *value) {
  uint32_t t = s->root, best = NIL;
  while (t != NIL) {
    int c = hbm_okey_cmp(key, s->nodes[t].key);
    if (c == 0) return emit(s, t, found, value);
    if (c < 0) {
      best = t;
      t = s->nodes[t].left;
    } else {
      t = s->nodes[t].right;
    }
  }
  return emit(s, best, found, value);
}

int hbm_ordset_upper_bound(const hbm_ordset *s, hbm_okey key, hbm_okey *found, uint32_t *value) {
  uint32_t t = s->root, best = NIL;
  while (t != NIL) {
    if (hbm_okey_cmp(key, s->nodes[t].key) < 0) {
      best = t;
      t = s->nodes[t].left;
    } else {
      t = s->nodes[t].right;
    }
  }
  return emit(s, best, found, value);
}

int hbm_ordset_below(const hbm_ordset *s, hbm_okey key, hbm_okey *found, uint32_t *value) {
  uint32_t t = s->root, best = NIL;
  while (t != NIL) {
    if (hbm_okey_cmp(s->nodes[t].key, key) < 0) {
      best = t;
      t = s->nodes[t].right;
    } else {
      t = s->nodes[t].left;
    }
  }
  return emit(s, best, found, value);
}

int hbm_ordset_first(const hbm_ordset *s, hbm_okey *found, uint32_t *value) {
  uint32_t t = s->root;
  if (t == NIL) return 0;
  while (s->nodes[t].left != NIL) t = s->nodes[t].left;
  return emit(s, t, found, value);
}

int hbm_ordset_last(const hbm_ordset *s, hbm_okey *found, uint32_t *value) {
  uint32_t t = s->root;
  if (t == NIL) return 0;
  while (s->nodes[t].right != NIL) t = s->nodes[t].right;
  return emit(s, t, found, value);
}

/* ---- invariant check ---- */

static int fail(hbm_ordset_report_fn *report, void *arg, const char *msg) {
  if (report) report(arg, msg);
  return 1;
}

int hbm_ordset_check(const hbm_ordset *s, hbm_ordset_report_fn *report, void *arg) {
  int failures = 0;
  char msg[160];
  if (s->used == 0) {
    if (s->root != NIL || s->count) failures += fail(report, arg, "ordset: empty array but a root or count");
    return failures;
  }
  uint8_t *seen = calloc(s->used, 1);
  uint32_t *stack = malloc(((size_t)s->used + 1) * sizeof *stack);
  if (!seen || !stack) {
    free(seen);
    free(stack);
    return fail(report, arg, "ordset: no host memory to check");
  }
  size_t depth = 0, reached = 0;
  int have_prev = 0;
  hbm_okey prev = {0, 0};
  uint32_t t = s->root;
  while ((t != NIL || depth) && !failures) {
    while (t != NIL) {
      if (t >= s->used) {
        snprintf(msg, sizeof msg, "ordset: O4 link to node %u beyond %u in use", t, s->used);
        failures += fail(report, arg, msg);
        break;
      }
      if (seen[t]) {
        snprintf(msg, sizeof msg, "ordset: O4 node %u reachable twice", t);
        failures += fail(report, arg, msg);
        break;
      }
      seen[t] = 1;
      reached++;
      const node *n = &s->nodes[t];
      if ((n->left != NIL && n->left < s->used && s->nodes[n->left].prio > n->prio) ||
          (n->right != NIL && n->right < s->used && s->nodes[n->right].prio > n->prio)) {
        snprintf(msg, sizeof msg, "ordset: O2 node %u has a child of higher priority", t);
        failures += fail(report, arg, msg);
      }
      stack[depth++] = t;
      t = n->left;
    }
    if (failures || !depth) break;
    t = stack[--depth];
    if (have_prev && hbm_okey_cmp(prev, s->nodes[t].key) >= 0) {
      snprintf(msg, sizeof msg, "ordset: O1 keys out of order at node %u", t);
      failures += fail(report, arg, msg);
    }
    prev = s->nodes[t].key;
    have_prev = 1;
    t = s->nodes[t].right;
  }
  if (!failures && reached != s->count) {
    snprintf(msg, sizeof msg, "ordset: O3 count %zu but %zu nodes reachable", s->count, reached);
    failures += fail(report, arg, msg);
  }
  if (!failures && reached + s->free_count != s->used) {
    snprintf(msg, sizeof msg, "ordset: O3 %zu reachable + %u free != %u in use", reached,
             s->free_count, s->used);
    failures += fail(report, arg, msg);
  }
  free(seen);
  free(stack);
  return failures;
}
