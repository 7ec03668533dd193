/* test_replay_check: what `hbm replay --check N` verifies beyond the policy's
 * own invariants is seen to fail, on a policy that misbehaves.
 *
 * The test is linked with --wrap=hbm_policy_find: the name "liar" finds a
 * class made here from a real one (caching, or compact for moves), which
 * misbehaves in one way at a time:
 *   1. usage figures that do not hold together: reserved above the capacity,
 *      below what is allocated, a largest free piece above capacity - live;
 *   2. a device call that breaks the device's contract (a segment freed that
 *      was never allocated), while the replay runs and while the policy is
 *      destroyed;
 *   3. a segment the policy keeps when destroyed;
 *   4. a move of a block that is not live, told through the relocation
 *      callback;
 *   5. a write into a block still live at the end, on a host device with
 *      the data verified (skipped where there is no host device).
 * Each replay must end with HBM_ECORRUPT and the message naming what broke;
 * the same replay of the real class must pass. (The check that live by
 * purpose sums to live has no case: the replay adds and takes a request from
 * both in the same step, so no policy can part them.) */
#include <string.h>

#include "device/device.h"
#include "hbm.h"
#include "policy/policy.h"
#include "testutil.h"

enum { HONEST, RESERVED_HIGH, RESERVED_LOW, LARGEST_HIGH, REFUSED_RUNNING, REFUSED_DESTROY, LEAK, BAD_MOVE, SCRIBBLE };
static int mode;
static const hbm_policy_class *real;
static hbm_policy_class liar;
static uint64_t leaked, first_block;
static void (*moved_fn)(void *arg, uint64_t old_addr, uint64_t new_addr, uint64_t size);
static void *moved_arg;

#define NOWHERE 0x1234000ull /* no segment's address on a sim device */

static void liar_usage(hbm_policy *p, hbm_policy_usage *out) {
  real->usage(p, out);
  if (mode == RESERVED_HIGH) out->reserved = p->dev->caps.capacity + 512;
  if (mode == RESERVED_LOW) out->reserved = 0;
  if (mode == LARGEST_HIGH) out->largest_free = p->dev->caps.capacity;
}
static int liar_alloc(hbm_policy *p, uint64_t size, hbm_tag tag, int stream, uint64_t *addr, uint64_t *block) {
  int rc = real->alloc(p, size, tag, stream, addr, block);
  if (rc != HBM_OK) return rc;
  if (mode == REFUSED_RUNNING) hbm_dev_seg_free(p->dev, NOWHERE, 1 << 20);
  if (mode == LEAK && !leaked) CHECK(hbm_dev_seg_alloc(p->dev, 2 << 20, 0, &leaked) == HBM_OK);
  if (mode == BAD_MOVE && moved_fn) moved_fn(moved_arg, NOWHERE, *addr, size);
  if (mode == SCRIBBLE && !first_block) first_block = *addr;
  else if (mode == SCRIBBLE) *(unsigned char *)(uintptr_t)first_block ^= 1; /* a host device: memory here */
  return HBM_OK;
}
static void liar_destroy(hbm_policy *p) {
  hbm_device *dev = p->dev;
  real->destroy(p);
  if (mode == REFUSED_DESTROY) hbm_dev_seg_free(dev, NOWHERE, 1 << 20);
}
static void liar_set_relocation_callback(hbm_policy *p, void (*fn)(void *, uint64_t, uint64_t, uint64_t),
                                         void *arg) {
  moved_fn = fn, moved_arg = arg;
  real->set_relocation_callback(p, fn, arg);
}

const hbm_policy_class *__real_hbm_policy_find(const char *name);
const hbm_policy_class *__wrap_hbm_policy_find(const char *name) {
  return name && !strcmp(name, "liar") ? &liar : __real_hbm_policy_find(name);
}

static void make_liar(const char *base) {
  real = __real_hbm_policy_find(base);
  liar = *real;
  liar.name = "liar";
  liar.usage = liar_usage;
  liar.reserved = NULL; /* every figure through liar_usage */
  liar.alloc = liar_alloc;
  liar.destroy = liar_destroy;
  if (real->set_relocation_callback) liar.set_relocation_callback = liar_set_relocation_callback;
  moved_fn = NULL, moved_arg = NULL, leaked = first_block = 0;
}

static char said[4096];
static void keep_error(int err, const char *message, void *arg) {
  (void)arg, (void)err;
  size_t n = strlen(said);
  if (n + 2 < sizeof said) snprintf(said + n, sizeof said - n, "%s\n", message);
}

/* A replay of t through "liar" misbehaving as m: rc and its messages in `said`. */
static int replay(const hbm_trace *t, int m, uint64_t check_every) {
  hbm_replay_result r;
  hbm_replay_options o = {.policy = "liar", .device = "sim:64MiB", .check_every = check_every};
  mode = m;
  said[0] = 0;
  hbm_set_error_handler(keep_error, NULL);
  int rc = hbm_replay(t, &o, &r);
  hbm_set_error_handler(NULL, NULL);
  mode = HONEST;
  return rc;
}

static int fails_saying(const hbm_trace *t, int m, const char *want) {
  int rc = replay(t, m, 1);
  if (rc == HBM_ECORRUPT && strstr(said, want)) {
    printf("  reported: %s\n", want);
    return 1;
  }
  fprintf(stderr, "replay: %d, messages:\n%sexpected one with \"%s\"\n", rc, said, want);
  return 0;
}

int main(void) {
  static const char text[] = "hbm-trace 1\ncapacity 64MiB\na x 3MiB act\na y 700 param\nf x\na z 1MiB grad\n"
                             "f y\nf z\n";
  hbm_trace *t = NULL;
  hbm_diag d = {0};
  CHECK(hbm_trace_parse_text(text, sizeof text - 1, "small", &t, &d) == HBM_OK);
  if (!t) return test_done("test_replay_check");

  printf("caching, misreporting its figures\n");
  make_liar("caching");
  CHECK(replay(t, HONEST, 1) == HBM_OK);
  char want[200];
  snprintf(want, sizeof want, "replay: after event 0: figures do not hold together: live 0, allocated 0, "
           "reserved %llu, largest free", (unsigned long long)(64ull << 20) + 512);
  CHECK(fails_saying(t, RESERVED_HIGH, want));
  /* after the first event: 3 MiB live in a 3 MiB block */
  CHECK(fails_saying(t, RESERVED_LOW, "replay: after event 1: figures do not hold together: live 3145728, "
                                      "allocated 3145728, reserved 0"));
  snprintf(want, sizeof want, "replay: after event 1: figures do not hold together: live 3145728, allocated "
           "3145728, reserved 20971520, largest free %llu, capacity %llu", (unsigned long long)64 << 20,
           (unsigned long long)64 << 20);
  CHECK(fails_saying(t, LARGEST_HIGH, want));

  printf("caching, breaking the device's contract\n");
  CHECK(fails_saying(t, REFUSED_RUNNING,
                     "replay: after event 1: the device refused 1 call(s) that break its contract"));
  CHECK(fails_saying(t, REFUSED_DESTROY, "replay: policy liar, once destroyed, left 0 object(s) and 0 B on the "
                                         "device; 1 call(s) refused"));
  CHECK(replay(t, REFUSED_DESTROY, 0) == HBM_OK); /* checked only with --check */

  printf("caching, keeping a segment\n");
  CHECK(fails_saying(t, LEAK, "replay: policy liar, once destroyed, left 1 object(s) and 2097152 B on the device; "
                              "0 call(s) refused"));

  printf("compact, moving a block that is not live\n");
  make_liar("compact");
  CHECK(replay(t, HONEST, 1) == HBM_OK);
  snprintf(want, sizeof want, "replay: the policy moved %#llx, which is not a live block", (unsigned long long)NOWHERE);
  CHECK(fails_saying(t, BAD_MOVE, want));
  CHECK(replay(t, BAD_MOVE, 0) == HBM_ECORRUPT); /* with or without --check */

  printf("caching, writing into a live block\n");
  static const char two[] = "hbm-trace 1\ncapacity 64MiB\na x 3MiB act\na y 700 param\n"; /* both live at the end */
  hbm_trace *t2 = NULL;
  CHECK(hbm_trace_parse_text(two, sizeof two - 1, "two", &t2, &d) == HBM_OK);
  make_liar("caching");
  for (int m = HONEST; t2 && m <= SCRIBBLE; m += SCRIBBLE) {
    hbm_replay_result r;
    hbm_replay_options o = {.policy = "liar", .device = "host:64MiB", .verify_data = 1};
    mode = m, first_block = 0, said[0] = 0;
    hbm_set_error_handler(keep_error, NULL);
    int rc = hbm_replay(t2, &o, &r);
    hbm_set_error_handler(NULL, NULL);
    mode = HONEST;
    if (rc == HBM_EUNSUPPORTED) {
      printf("  no host device here: skipped\n");
      break;
    }
    if (m == HONEST) CHECK(rc == HBM_OK && r.verified_blocks == 2);
    else CHECK(rc == HBM_ECORRUPT && strstr(said, "replay: block 0 at ") && strstr(said, " lost its contents"));
    if (m != HONEST && rc == HBM_ECORRUPT) printf("  reported: replay: block 0 at ... lost its contents\n");
  }
  hbm_trace_free(t2);
  hbm_trace_free(t);
  return test_done("test_replay_check");
}
