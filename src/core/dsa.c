/* dsa.c: greedy offset planning for blocks with known lifetimes (dsa.h).
 *
 * Which placed blocks a block must stay clear of is found through time
 * windows: the horizon is cut into up to 1024 windows, each listing, in
 * placement order, the blocks live in it (`member`) and the blocks that
 * begin in it (`born`). A placed block that meets a span is live where the
 * span begins, or begins inside it: so a block reads `member` of the window
 * its span begins in, and `born` of each window the span covers. Each block
 * it meets is read about once; reading `member` of every window the span
 * covers read a long-lived block once per window, most of a plan's time
 * where thousands of blocks live together. */
#include "core/dsa.h"

#include <stdlib.h>
#include <string.h>

#include "core/ordset.h"
#include "hbm.h"

enum { DSA_MAX_WINDOWS = 1024 };
#define DSA_MAX_MEMBERS (64u << 20) /* window entries before fewer, wider windows */

/* The spans of [0, P) block x lives over: one, or two when it wraps. */
static int spans(const hbm_dsa_block *x, uint64_t period, uint64_t s[4]) {
  s[0] = x->start;
  if (!period || x->end <= period) {
    s[1] = x->end;
    return 1;
  }
  s[1] = period;
  s[2] = 0;
  s[3] = x->end - period;
  return 2;
}

/* Whether block y is live during any of the na spans a (spans() of another block). */
static int meets_spans(const uint64_t *a, int na, const hbm_dsa_block *y, uint64_t period) {
  uint64_t b[4];
  int nb = spans(y, period, b);
  for (int i = 0; i < na; i++)
    for (int j = 0; j < nb; j++)
      if (a[2 * i] < b[2 * j + 1] && b[2 * j] < a[2 * i + 1]) return 1;
  return 0;
}

static int live_together(const hbm_dsa_block *x, const hbm_dsa_block *y, uint64_t period) {
  uint64_t a[4];
  int na = spans(x, period, a);
  return meets_spans(a, na, y, period);
}

static int well_formed(const hbm_dsa_block *x, uint64_t period) {
  if (!x->size || x->start >= x->end) return 0;
  return !period || (x->start < period && x->end - x->start <= period);
}

typedef struct span_off {
  uint64_t lo, hi;
} span_off;

/* Sorts n spans by lo, tmp n more for scratch, counts room for one digit's
 * counts (SORT_COUNTS): a block meets hundreds of placed blocks where many
 * live at once (411 on average in one step of 13,432 blocks), and sorting
 * them was most of a plan's time under qsort. Short lists by insertion;
 * longer ones least significant digit first, over the bits where the lo
 * differ only (offsets are multiples of the alignment and below the
 * footprint), in digits of the width that costs least for n (each pass
 * clears and sums its counts and reads n twice). Ties keep no order:
 * offset_among's answer does not depend on it. */
enum { SORT_SHORT = 128, SORT_MIN_BITS = 6, SORT_MAX_BITS = 11, SORT_COUNTS = 1 << SORT_MAX_BITS };
static void sort_by_lo(span_off *a, span_off *tmp, uint32_t *counts, size_t n) {
  if (n < SORT_SHORT) {
    for (size_t i = 1; i < n; i++) {
      span_off x = a[i];
      size_t j = i;
      for (; j > 0 && a[j - 1].lo > x.lo; j--) a[j] = a[j - 1];
      a[j] = x;
    }
    return;
  }
  uint64_t any = 0, every = ~0ull;
  for (size_t i = 0; i < n; i++) {
    any |= a[i].lo;
    every &= a[i].lo;
  }
  uint64_t differ = any ^ every;
  if (!differ) return;
  unsigned low = (unsigned)__builtin_ctzll(differ), span = 64 - (unsigned)__builtin_clzll(differ) - low;
  unsigned w = SORT_MIN_BITS;
  for (unsigned v = SORT_MIN_BITS + 1; v <= SORT_MAX_BITS; v++)
    if ((span + v - 1) / v * ((1u << v) + 2 * n) < (span + w - 1) / w * ((1u << w) + 2 * n)) w = v;
  uint64_t mask = (1u << w) - 1;
  span_off *src = a, *dst = tmp;
  for (unsigned shift = low; shift < low + span; shift += w) {
    memset(counts, 0, ((size_t)1 << w) * sizeof *counts);
    for (size_t i = 0; i < n; i++) counts[(src[i].lo >> shift) & mask]++;
    for (uint32_t d = 0, sum = 0; d <= mask; d++) {
      uint32_t c = counts[d];
      counts[d] = sum;
      sum += c;
    }
    for (size_t i = 0; i < n; i++) dst[counts[(src[i].lo >> shift) & mask]++] = src[i];
    span_off *t = src;
    src = dst;
    dst = t;
  }
  if (src != a) memcpy(a, src, n * sizeof *a);
}

typedef struct rank_key {
  uint64_t size, start, length;
  uint64_t breadth; /* the most bytes live at one time during its lifetime */
  uint32_t i;
} rank_key;

static int by_size_desc(const void *a, const void *b) {
  const rank_key *x = a, *y = b;
  if (x->size != y->size) return x->size > y->size ? -1 : 1;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return x->i < y->i ? -1 : 1;
}

static int by_length_desc(const void *a, const void *b) {
  const rank_key *x = a, *y = b;
  if (x->length != y->length) return x->length > y->length ? -1 : 1;
  return by_size_desc(a, b);
}

static int by_breadth_desc(const void *a, const void *b) {
  const rank_key *x = a, *y = b;
  if (x->breadth != y->breadth) return x->breadth > y->breadth ? -1 : 1;
  return by_size_desc(a, b);
}

static int by_start(const void *a, const void *b) {
  const rank_key *x = a, *y = b;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return by_size_desc(a, b);
}

/* The order blocks are placed in, and where each goes among the blocks
 * already placed that it meets: the lowest offset clear of them, or the
 * smallest gap between them that holds it (else the top). */
static const struct {
  int (*order)(const void *, const void *);
  int smallest_gap;
  const char *name;
} strategies[HBM_DSA_STRATEGIES] = {
    [HBM_DSA_SIZE_LOWEST] = {by_size_desc, 0, "size-lowest"},
    [HBM_DSA_SIZE_GAP] = {by_size_desc, 1, "size-gap"},
    [HBM_DSA_LENGTH_LOWEST] = {by_length_desc, 0, "length-lowest"},
    [HBM_DSA_START_GAP] = {by_start, 1, "start-gap"},
    [HBM_DSA_BREADTH_LOWEST] = {by_breadth_desc, 0, "breadth-lowest"},
    [HBM_DSA_BREADTH_GAP] = {by_breadth_desc, 1, "breadth-gap"},
};

const char *hbm_dsa_strategy_name(hbm_dsa_strategy strategy) {
  return (unsigned)strategy < HBM_DSA_STRATEGIES ? strategies[strategy].name : NULL;
}

static int u64_cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static size_t lower_index(const uint64_t *t, size_t nt, uint64_t v) {
  size_t lo = 0, hi = nt;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (t[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* The live bytes over the elementary intervals between span ends (at most
 * 4n), then the maximum over each block's spans from a bottom-up segment
 * tree (two entries an interval). */
int hbm_dsa_breadth(const hbm_dsa_block *b, size_t n, uint64_t period, uint64_t *breadth) {
  if (!n) return HBM_OK;
  size_t nt = 0;
  uint64_t *t = malloc(4 * n * sizeof *t), *tree = NULL;
  int64_t *delta = NULL;
  if (!t) return HBM_EHOSTMEM;
  for (size_t i = 0; i < n; i++) {
    uint64_t s[4];
    for (int k = 0, ns = spans(&b[i], period, s); k < ns; k++) {
      t[nt++] = s[2 * k];
      t[nt++] = s[2 * k + 1];
    }
  }
  qsort(t, nt, sizeof *t, u64_cmp);
  size_t u = 0;
  for (size_t k = 0; k < nt; k++)
    if (!u || t[k] != t[u - 1]) t[u++] = t[k];
  nt = u; /* interval k is [t[k], t[k + 1]) */
  delta = calloc(nt, sizeof *delta);
  tree = calloc(2 * nt, sizeof *tree);
  if (!delta || !tree) {
    free(t);
    free(delta);
    free(tree);
    return HBM_EHOSTMEM;
  }
  for (size_t i = 0; i < n; i++) {
    uint64_t s[4];
    for (int k = 0, ns = spans(&b[i], period, s); k < ns; k++) {
      delta[lower_index(t, nt, s[2 * k])] += (int64_t)b[i].size;
      delta[lower_index(t, nt, s[2 * k + 1])] -= (int64_t)b[i].size;
    }
  }
  int64_t live = 0;
  for (size_t k = 0; k < nt; k++) tree[nt + k] = (uint64_t)(live += delta[k]);
  for (size_t k = nt - 1; k > 0; k--) tree[k] = tree[2 * k] > tree[2 * k + 1] ? tree[2 * k] : tree[2 * k + 1];
  for (size_t i = 0; i < n; i++) {
    uint64_t s[4], most = 0;
    for (int k = 0, ns = spans(&b[i], period, s); k < ns; k++)
      for (size_t lo = lower_index(t, nt, s[2 * k]) + nt, hi = lower_index(t, nt, s[2 * k + 1]) + nt; lo < hi;
           lo /= 2, hi /= 2) {
        if (lo & 1) { if (tree[lo] > most) most = tree[lo]; lo++; }
        if (hi & 1) { hi--; if (tree[hi] > most) most = tree[hi]; }
      }
    breadth[i] = most;
  }
  free(t);
  free(delta);
  free(tree);
  return HBM_OK;
}

/* The offset for a block of `size` among the spans cand[0..nc) (sorted by
 * lo) of the placed blocks it meets. */
static uint64_t offset_among(const span_off *cand, size_t nc, uint64_t size, uint64_t align, int smallest_gap) {
  uint64_t off = 0;
  if (!smallest_gap) {
    for (size_t k = 0; k < nc && cand[k].lo < off + size; k++)
      if (cand[k].hi > off) off = (cand[k].hi + align - 1) & ~(align - 1);
    return off;
  }
  uint64_t best = UINT64_MAX, best_off = 0;
  for (size_t k = 0; k < nc; k++) {
    if (cand[k].lo >= off + size && cand[k].lo - off < best) {
      best = cand[k].lo - off;
      best_off = off;
    }
    if (cand[k].hi > off) off = (cand[k].hi + align - 1) & ~(align - 1);
  }
  return best != UINT64_MAX ? best_off : off;
}

/* Places the blocks in the order given (order[r]: the r-th to place), each
 * at offset_among the placed blocks it meets. horizon: the period, or the
 * latest end without one. A plan whose footprint reaches `give_up` stops
 * there: *footprint is then at least give_up, and offsets are left part
 * placed (a caller passes UINT64_MAX where it needs the whole plan). */
static int place_in_order(const hbm_dsa_block *b, size_t n, uint64_t period, uint64_t horizon, uint64_t align,
                          const uint32_t *order, int smallest_gap, uint64_t give_up, uint64_t *offsets,
                          uint64_t *footprint) {
  int rc = HBM_EHOSTMEM;
  uint32_t *rank = malloc(n * sizeof *rank), *seen = calloc(n, sizeof *seen);
  span_off *cand = malloc(2 * n * sizeof *cand); /* and as much scratch for sorting */
  uint32_t *counts = malloc(SORT_COUNTS * sizeof *counts);
  uint32_t *start = NULL, *member = NULL, *fill = NULL, *bstart = NULL, *born = NULL, *bfill = NULL;
  if (!rank || !seen || !cand || !counts) goto out;
  for (size_t r = 0; r < n; r++) rank[order[r]] = (uint32_t)r;

  /* Windows: each lists, in placement order, the blocks live in it. */
  uint64_t nwin = n / 4 < DSA_MAX_WINDOWS ? (n / 4 ? n / 4 : 1) : DSA_MAX_WINDOWS, width, total;
  for (;;) {
    width = (horizon + nwin - 1) / nwin;
    total = 0;
    for (size_t i = 0; i < n; i++) {
      uint64_t s[4];
      for (int k = 0, ns = spans(&b[i], period, s); k < ns; k++) total += (s[2 * k + 1] - 1) / width - s[2 * k] / width + 1;
    }
    if (total <= DSA_MAX_MEMBERS || nwin == 1) break;
    nwin /= 2;
  }
  start = calloc(nwin + 1, sizeof *start);
  fill = calloc(nwin, sizeof *fill);
  member = malloc(total * sizeof *member);
  bstart = calloc(nwin + 1, sizeof *bstart);
  bfill = calloc(nwin, sizeof *bfill);
  born = malloc(2 * n * sizeof *born);
  if (!start || !fill || !member || !bstart || !bfill || !born) goto out;
  for (size_t i = 0; i < n; i++) {
    uint64_t s[4];
    for (int k = 0, ns = spans(&b[i], period, s); k < ns; k++) {
      bstart[s[2 * k] / width + 1]++;
      for (uint64_t w = s[2 * k] / width; w <= (s[2 * k + 1] - 1) / width; w++) start[w + 1]++;
    }
  }
  for (uint64_t w = 0; w < nwin; w++) {
    start[w + 1] += start[w];
    bstart[w + 1] += bstart[w];
  }
  for (size_t r = 0; r < n; r++) {
    uint64_t s[4];
    uint32_t i = order[r];
    for (int k = 0, ns = spans(&b[i], period, s); k < ns; k++) {
      uint64_t w0 = s[2 * k] / width;
      born[bstart[w0] + bfill[w0]++] = i;
      for (uint64_t w = w0; w <= (s[2 * k + 1] - 1) / width; w++) member[start[w] + fill[w]++] = i;
    }
  }

  uint64_t top = 0;
  for (size_t r = 0; r < n; r++) {
    uint32_t i = order[r];
    size_t nc = 0;
    uint64_t s[4];
    int ns = spans(&b[i], period, s);
    for (int k = 0; k < ns; k++) {
      uint64_t w0 = s[2 * k] / width, w1 = (s[2 * k + 1] - 1) / width;
      for (uint64_t w = w0; w <= w1 + 1; w++) { /* w1 + 1: the blocks live at the span's start */
        const uint32_t *list = w <= w1 ? born : member;
        uint32_t m = w <= w1 ? bstart[w] : start[w0], end = w <= w1 ? bstart[w + 1] : start[w0 + 1];
        /* A span that begins in a window strictly inside this span's begins inside it: they meet. */
        int inside = w > w0 && w < w1;
        for (; m < end; m++) {
          uint32_t j = list[m];
          if (rank[j] >= r) break; /* the rest are not placed yet */
          if (seen[j] == r + 1) continue;
          seen[j] = (uint32_t)r + 1;
          if (inside || meets_spans(s, ns, &b[j], period)) cand[nc++] = (span_off){offsets[j], offsets[j] + b[j].size};
        }
      }
    }
    sort_by_lo(cand, cand + n, counts, nc);
    uint64_t off = offset_among(cand, nc, b[i].size, align, smallest_gap);
    offsets[i] = off;
    if (off + b[i].size > top) top = off + b[i].size;
    if (top >= give_up) break;
  }
  *footprint = top;
  rc = HBM_OK;
out:
  free(rank);
  free(seen);
  free(cand);
  free(counts);
  free(fill);
  free(start);
  free(member);
  free(bstart);
  free(bfill);
  free(born);
  return rc;
}

/* Checks the arguments; *horizon: the period, or the latest end. */
static int plan_args(const hbm_dsa_block *b, size_t n, uint64_t period, uint64_t align, const uint64_t *offsets,
                     const uint64_t *footprint, uint64_t *horizon) {
  if ((n && (!b || !offsets)) || !footprint || !align || (align & (align - 1)) || n >= UINT32_MAX) return HBM_EINVAL;
  *horizon = period;
  for (size_t i = 0; i < n; i++) {
    if (!well_formed(&b[i], period)) return HBM_EINVAL;
    if (!period && b[i].end > *horizon) *horizon = b[i].end;
  }
  return HBM_OK;
}

/* order[r]: the r-th block a strategy places. */
static int strategy_order(const hbm_dsa_block *b, size_t n, uint64_t period, hbm_dsa_strategy strategy,
                          uint32_t *order) {
  rank_key *key = malloc(n * sizeof *key);
  if (!key) return HBM_EHOSTMEM;
  for (size_t i = 0; i < n; i++) key[i] = (rank_key){b[i].size, b[i].start, b[i].end - b[i].start, 0, (uint32_t)i};
  if (strategies[strategy].order == by_breadth_desc) {
    uint64_t *breadth = malloc(n * sizeof *breadth);
    int ok = breadth && hbm_dsa_breadth(b, n, period, breadth) == HBM_OK;
    for (size_t i = 0; ok && i < n; i++) key[i].breadth = breadth[i];
    free(breadth);
    if (!ok) {
      free(key);
      return HBM_EHOSTMEM;
    }
  }
  qsort(key, n, sizeof *key, strategies[strategy].order);
  for (size_t r = 0; r < n; r++) order[r] = key[r].i;
  free(key);
  return HBM_OK;
}

/* One strategy: its order into order[0..n), its plan into offsets. */
static int plan_strategy(const hbm_dsa_block *b, size_t n, uint64_t period, uint64_t horizon, uint64_t align,
                         hbm_dsa_strategy strategy, uint64_t give_up, uint32_t *order, uint64_t *offsets,
                         uint64_t *footprint) {
  int rc = strategy_order(b, n, period, strategy, order);
  if (rc != HBM_OK) return rc;
  return place_in_order(b, n, period, horizon, align, order, strategies[strategy].smallest_gap, give_up, offsets,
                        footprint);
}

int hbm_dsa_plan_with(const hbm_dsa_block *b, size_t n, uint64_t period, uint64_t align,
                      hbm_dsa_strategy strategy, uint64_t *offsets, uint64_t *footprint) {
  uint64_t horizon;
  int rc = plan_args(b, n, period, align, offsets, footprint, &horizon);
  if (rc != HBM_OK || (unsigned)strategy >= HBM_DSA_STRATEGIES) return HBM_EINVAL;
  *footprint = 0;
  if (!n) return HBM_OK;
  uint32_t *order = malloc(n * sizeof *order);
  rc = order ? plan_strategy(b, n, period, horizon, align, strategy, UINT64_MAX, order, offsets, footprint)
             : HBM_EHOSTMEM;
  free(order);
  return rc;
}

/* Squeaky-wheel rounds: the blocks a plan put above the peak load go first
 * in the next order, in the order they had, and the rest follow in theirs.
 * What the greedy orders leave over the peak load is mostly a few blocks
 * placed too late, and promoting them fixes much of it: of the 337 step
 * plans zoned asked for over three sweep samples (93 today: it skips plans
 * that could not pay), the orders alone left 22 more than 1% over the peak
 * load and 9 more than 2%; up to four rounds from each order's plan leave
 * 12 and 3, for 1.15 times the planner's time over the 337 (docs/zoned.md,
 * "Step plans"). Rounds start from the best plan, and an order's rounds
 * stop after two that do not lower its best. A plan within 1% of the peak
 * load gets none: rounds there would have more than doubled the planner's
 * time for under a third of the gain. */
enum {
  DSA_SQUEAKY_ROUNDS = 4,
  DSA_SQUEAKY_STALLS = 2,  /* rounds in a row that do not lower an order's best */
  DSA_SQUEAKY_ABOVE = 100, /* rounds only for a plan more than 1/100 over the peak load */
};

static void promote_squeaky(const hbm_dsa_block *b, size_t n, uint64_t peak, const uint64_t *offsets,
                            const uint32_t *order, uint32_t *next) {
  size_t k = 0;
  for (size_t r = 0; r < n; r++)
    if (offsets[order[r]] + b[order[r]].size > peak) next[k++] = order[r];
  for (size_t r = 0; r < n; r++)
    if (offsets[order[r]] + b[order[r]].size <= peak) next[k++] = order[r];
}

int hbm_dsa_plan(const hbm_dsa_block *b, size_t n, uint64_t period, uint64_t align, uint64_t *offsets,
                 uint64_t *footprint) {
  uint64_t horizon;
  int rc = plan_args(b, n, period, align, offsets, footprint, &horizon);
  if (rc != HBM_OK) return rc;
  *footprint = 0;
  if (!n) return HBM_OK;
  /* Each strategy's order is kept: the rounds start from it. */
  uint32_t *orders = malloc(HBM_DSA_STRATEGIES * n * sizeof *orders), *spare = malloc(n * sizeof *spare);
  uint64_t *plans = NULL, *trial;
  if (!orders || !spare) {
    rc = HBM_EHOSTMEM;
    goto out;
  }
  rc = plan_strategy(b, n, period, horizon, align, HBM_DSA_SIZE_LOWEST, UINT64_MAX, orders, offsets, footprint);
  if (rc != HBM_OK || n == 1) goto out;
  /* Host memory running out later answers HBM_EHOSTMEM too, not the plan in
   * hand: the same input must give the same plan. (A positive footprint
   * means a positive peak, so a peak of 0 is host memory.) */
  uint64_t peak = hbm_dsa_peak(b, n, period), fp[HBM_DSA_STRATEGIES] = {*footprint};
  int tried = 1, by_fp[HBM_DSA_STRATEGIES];
  if ((!peak && *footprint) || !(plans = malloc(HBM_DSA_STRATEGIES * n * sizeof *plans))) {
    rc = HBM_EHOSTMEM;
    goto out;
  }
  memcpy(plans, offsets, n * sizeof *plans);
  /* Each order once, then rounds from each order's plan, the best first. */
  for (; tried < HBM_DSA_STRATEGIES && *footprint > peak; tried++) {
    trial = plans + (size_t)tried * n;
    /* A best within 1% of the peak load gets no rounds, so an order's plan
     * then matters only if it is lower, and stops once it is not. */
    uint64_t give_up = *footprint - peak > peak / DSA_SQUEAKY_ABOVE ? UINT64_MAX : *footprint;
    if ((rc = plan_strategy(b, n, period, horizon, align, (hbm_dsa_strategy)tried, give_up, orders + (size_t)tried * n,
                            trial, &fp[tried])) != HBM_OK)
      goto out;
    if (fp[tried] < *footprint) {
      memcpy(offsets, trial, n * sizeof *trial);
      *footprint = fp[tried];
    }
  }
  for (int k = 0; k < tried; k++) {
    int j = k;
    for (; j > 0 && fp[by_fp[j - 1]] > fp[k]; j--) by_fp[j] = by_fp[j - 1];
    by_fp[j] = k;
  }
  uint32_t *next = spare; /* scratch for the next order: the spare, or an order already used up */
  for (int k = 0; k < tried && *footprint > peak && *footprint - peak > peak / DSA_SQUEAKY_ABOVE; k++) {
    int s = by_fp[k];
    uint32_t *order = orders + (size_t)s * n;
    trial = plans + (size_t)s * n;
    uint64_t own = fp[s]; /* this order's best so far */
    for (int round = 0, stalled = 0; round < DSA_SQUEAKY_ROUNDS && stalled < DSA_SQUEAKY_STALLS && *footprint > peak;
         round++) {
      promote_squeaky(b, n, peak, trial, order, next);
      uint32_t *t = order;
      order = next;
      next = t;
      /* The last round this order may get (its last, or a stall that would
       * be the one too many) matters only if it lowers the order's best (and
       * the best overall is no higher): once its footprint reaches that, the
       * rest of it cannot, and nothing reads its plan. */
      int last = round + 1 == DSA_SQUEAKY_ROUNDS || stalled + 1 == DSA_SQUEAKY_STALLS;
      uint64_t f;
      if ((rc = place_in_order(b, n, period, horizon, align, order, strategies[s].smallest_gap, last ? own : UINT64_MAX,
                               trial, &f)) != HBM_OK)
        goto out;
      stalled = f < own ? 0 : stalled + 1;
      if (f < own) own = f;
      if (f < *footprint) {
        memcpy(offsets, trial, n * sizeof *trial);
        *footprint = f;
      }
    }
  }
out:
  free(orders);
  free(spare);
  free(plans);
  return rc;
}

typedef struct dsa_event {
  uint64_t t;
  int64_t delta;
} dsa_event;

static int by_time(const void *a, const void *b) {
  const dsa_event *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return x->delta < y->delta ? -1 : x->delta > y->delta; /* frees first: lifetimes are half-open */
}

uint64_t hbm_dsa_peak(const hbm_dsa_block *b, size_t n, uint64_t period) {
  dsa_event *ev = malloc(4 * (n ? n : 1) * sizeof *ev);
  if (!ev) return 0;
  size_t ne = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t s[4];
    for (int k = 0, ns = spans(&b[i], period, s); k < ns; k++) {
      ev[ne++] = (dsa_event){s[2 * k], (int64_t)b[i].size};
      ev[ne++] = (dsa_event){s[2 * k + 1], -(int64_t)b[i].size};
    }
  }
  qsort(ev, ne, sizeof *ev, by_time);
  int64_t live = 0, peak = 0;
  for (size_t k = 0; k < ne; k++)
    if ((live += ev[k].delta) > peak) peak = live;
  free(ev);
  return (uint64_t)peak;
}

size_t hbm_dsa_conflicts(const hbm_dsa_block *b, size_t n, uint64_t period, const uint64_t *offsets) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++)
      if (offsets[i] < offsets[j] + b[j].size && offsets[j] < offsets[i] + b[i].size &&
          live_together(&b[i], &b[j], period))
        bad++;
  return bad;
}

/* ---- the fast check: a sweep through time --------------------------------- */

typedef struct sweep_event {
  uint64_t t;
  uint32_t block;
  uint32_t born; /* 0: the block dies at t; 1: it is born. Deaths sort first: lifetimes are half-open */
} sweep_event;

static int sweep_order(const void *a, const void *b) {
  const sweep_event *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  if (x->born != y->born) return (int)x->born - (int)y->born;
  return (x->block > y->block) - (x->block < y->block);
}

/* While no two live blocks overlap, the live blocks sorted by offset lie in
 * increasing, disjoint ranges: a new block overlaps one of them if and only if
 * it overlaps the one just below it or the one just above. */
int hbm_dsa_first_conflict(const hbm_dsa_block *b, size_t n, uint64_t period, const uint64_t *offsets,
                           size_t *first, size_t *second) {
  if ((n && (!b || !offsets)) || !first || !second || n >= UINT32_MAX) return HBM_EINVAL;
  for (size_t i = 0; i < n; i++)
    if (!well_formed(&b[i], period) || b[i].size > UINT64_MAX - offsets[i]) return HBM_EINVAL;
  sweep_event *ev = malloc(4 * (n ? n : 1) * sizeof *ev);
  hbm_ordset *live = NULL;
  if (!ev || hbm_ordset_create(&live) != HBM_OK) {
    free(ev);
    return HBM_EHOSTMEM;
  }
  size_t ne = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t s[4];
    for (int k = 0, ns = spans(&b[i], period, s); k < ns; k++) {
      ev[ne++] = (sweep_event){s[2 * k], (uint32_t)i, 1};
      ev[ne++] = (sweep_event){s[2 * k + 1], (uint32_t)i, 0};
    }
  }
  qsort(ev, ne, sizeof *ev, sweep_order);
  int rc = 0;
  for (size_t k = 0; k < ne && rc == 0; k++) {
    uint32_t i = ev[k].block;
    hbm_okey key = {offsets[i], i}, near;
    uint32_t j;
    if (!ev[k].born) {
      hbm_ordset_erase(live, key);
      continue;
    }
    if (hbm_ordset_below(live, key, &near, &j) && near.hi + b[j].size > offsets[i]) rc = 1;
    else if (hbm_ordset_upper_bound(live, key, &near, &j) && offsets[i] + b[i].size > near.hi) rc = 1;
    else if (hbm_ordset_insert(live, key, i) != HBM_OK) rc = HBM_EHOSTMEM;
    if (rc == 1) {
      *first = j < i ? j : i;
      *second = j < i ? i : j;
    }
  }
  hbm_ordset_destroy(live);
  free(ev);
  return rc;
}
