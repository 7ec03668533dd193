/* test_dsa_steps: every step plan zoned makes on generated training jobs is
 * the slow planner's (dsa_ref.h), offset for offset.
 *
 * test_dsa and fuzz_dsa hold the planner to the slow one on random and
 * fuzzed problems. Here the problems are the steps zoned learns from the
 * workload model's shapes (lifetimes cyclic over a step, large blocks, its
 * alignment), reached through the policy as a replay reaches them: this
 * program is linked with -Wl,--wrap=hbm_dsa_plan (CMakeLists.txt), so each
 * plan zoned asks for is made by the planner and then by the slow one. The
 * jobs are small enough for the slow planner (a few hundred blocks a step),
 * and zoned runs with plan:always, so that each step that repeats is planned
 * whether or not the plan would pay. */
#include "core/dsa.h"
#include "dsa_ref.h"
#include "hbm.h"
#include "testutil.h"
#include "trace/gen_llm.h"

enum { MOST_BLOCKS = 1500 }; /* larger plans are not checked: the slow planner is quadratic */

static unsigned long long plans, checked, wrong_plans, orders_past_first, with_rounds;

int __real_hbm_dsa_plan(const hbm_dsa_block *b, size_t n, uint64_t period, uint64_t align, uint64_t *offsets,
                        uint64_t *footprint);
int __wrap_hbm_dsa_plan(const hbm_dsa_block *b, size_t n, uint64_t period, uint64_t align, uint64_t *offsets,
                        uint64_t *footprint) {
  int rc = __real_hbm_dsa_plan(b, n, period, align, offsets, footprint);
  plans++;
  if (rc != HBM_OK || !n || n > MOST_BLOCKS) return rc;
  uint64_t *ref = malloc(n * sizeof *ref), first, peak = ref_peak(b, n, period);
  uint64_t *scratch = malloc(n * sizeof *scratch);
  if (!ref || !scratch || !peak) {
    CHECK(0);
  } else {
    uint64_t slow = ref_plan_full(b, n, period, align, ref);
    checked++;
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += ref[i] != offsets[i];
    if (slow != *footprint || wrong) {
      wrong_plans++;
      fprintf(stderr, "test_dsa_steps: a plan of %zu blocks: footprint %llu, the slow planner's %llu; %zu offsets differ\n",
              n, (unsigned long long)*footprint, (unsigned long long)slow, wrong);
    }
    /* What the plan went through: more orders than the first (it is above
     * the peak load), and rounds (the best order is more than 1% above). */
    uint64_t best = UINT64_MAX, fk;
    for (int k = 0; k < HBM_DSA_STRATEGIES; k++) {
      CHECK(hbm_dsa_plan_with(b, n, period, align, (hbm_dsa_strategy)k, scratch, &fk) == HBM_OK);
      if (k == 0) first = fk;
      if (fk < best) best = fk;
    }
    orders_past_first += first > peak;
    with_rounds += best - peak > peak / 100;
  }
  free(ref);
  free(scratch);
  return rc;
}

typedef struct job {
  const char *name;
  hbm_gen_arch arch;
  hbm_gen_attention attention;
  uint32_t pp, layers, micro_batch, zero, checkpoint_every, seq;
} job;

int main(void) {
  /* Plans at the peak load, plans that take more orders than the first, and
   * plans 1.1-1.9% over the peak load after the orders, which get rounds
   * (the pipeline stages: micro-batches in flight overlap). */
  static const job jobs[] = {
      {"gpt, 4 layers", HBM_ARCH_GPT, HBM_ATTN_FLASH, 1, 4, 2, 0, 0, 1024},
      {"gpt, checkpoint every 2", HBM_ARCH_GPT, HBM_ATTN_FLASH, 1, 6, 2, 0, 2, 2048},
      {"llama, ZeRO-1, checkpoint every 1", HBM_ARCH_LLAMA, HBM_ATTN_FLASH, 1, 6, 2, 1, 1, 512},
      {"gpt, stage 1 of 4, ZeRO-3", HBM_ARCH_GPT, HBM_ATTN_FLASH, 4, 16, 1, 3, 0, 2048},
      {"gpt, stage 1 of 4, eager, ZeRO-3", HBM_ARCH_GPT, HBM_ATTN_EAGER, 4, 16, 4, 3, 0, 2048},
      {"llama, stage 1 of 4", HBM_ARCH_LLAMA, HBM_ATTN_FLASH, 4, 16, 1, 0, 0, 2048},
      {"llama, stage 1 of 4, ZeRO-3", HBM_ARCH_LLAMA, HBM_ATTN_FLASH, 4, 16, 1, 3, 0, 2048},
      {"llama, stage 1 of 4, ZeRO-3, checkpoint every 1", HBM_ARCH_LLAMA, HBM_ATTN_FLASH, 4, 16, 4, 3, 1, 2048},
      {"llama, stage 1 of 4, eager", HBM_ARCH_LLAMA, HBM_ATTN_EAGER, 4, 16, 1, 0, 0, 2048},
  };
  for (size_t k = 0; k < sizeof jobs / sizeof jobs[0]; k++) {
    const job *j = &jobs[k];
    hbm_gen_llm_config c;
    hbm_gen_llm_defaults(&c);
    c.arch = j->arch;
    c.attention = j->attention;
    c.layers = j->layers;
    c.hidden = 1024;
    c.heads = 8;
    c.pp = j->pp;
    c.pp_stage = j->pp > 1;
    c.micro_batch = j->micro_batch;
    c.grad_accum = 4;
    c.zero = j->zero;
    c.dp = j->zero ? 8 : 1;
    c.checkpoint_every = j->checkpoint_every;
    c.seq_kind = HBM_SEQ_FIXED;
    c.seq_max = j->seq;
    c.steps = 6;
    c.capacity = 80ull << 30;
    hbm_trace *t = NULL;
    hbm_diag d;
    int rc = hbm_gen_llm(&c, &t, &d);
    if (rc != HBM_OK) fprintf(stderr, "test_dsa_steps: %s: %s\n", j->name, d.message);
    CHECK(rc == HBM_OK);
    if (rc != HBM_OK) continue;
    unsigned long long before = plans;
    hbm_replay_options o = {.policy = "zoned", .conf = "plan:always"};
    hbm_replay_result r;
    CHECK(hbm_replay(t, &o, &r) == HBM_OK);
    CHECK(plans > before); /* the job repeats its steps: zoned plans */
    printf("test_dsa_steps: %s: %llu plan%s\n", j->name, plans - before, plans - before == 1 ? "" : "s");
    hbm_trace_free(t);
  }
  printf("test_dsa_steps: %llu plans, %llu checked (%llu went past the first order, %llu had rounds), %llu differ\n",
         plans, checked, orders_past_first, with_rounds, wrong_plans);
  /* The jobs must keep reaching what they are here for, should the workload
   * model change: plans past the first order, and plans with rounds. */
  CHECK(checked > 0 && orders_past_first > 0 && with_rounds > 0);
  CHECK_EQ_U64(wrong_plans, 0);
  return test_done("test_dsa_steps");
}
