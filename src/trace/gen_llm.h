/* gen_llm.h: the workload model. A per-device allocation trace of
 * mixed-precision transformer training, derived from the model's shapes.
 *
 * Nothing here is hand-placed: every allocation is a tensor whose size follows
 * from (layers, hidden, heads, ffn, vocab), the sequence length of the
 * micro-batch, the parallel split and the memory options; every lifetime
 * follows from the order in which a training framework (Megatron-LM /
 * DeepSpeed / PyTorch) creates and releases that tensor. docs/workload.md lists
 * every tensor with its size and the source of its formula.
 *
 * The modelled device is one tensor-parallel rank of pipeline stage
 * `pp_stage` (0 by default: the stage that keeps the most micro-batches in
 * flight under 1F1B). All sizes are bytes.
 */
#ifndef HBM_GEN_LLM_H
#define HBM_GEN_LLM_H

#include <stddef.h>
#include <stdint.h>

#include "hbm.h"

typedef enum hbm_gen_arch {
  HBM_ARCH_GPT = 0, /* LayerNorm with bias, biased linears, GELU MLP (ffn 4h), tied embeddings */
  HBM_ARCH_LLAMA,   /* RMSNorm, no biases, SwiGLU MLP, grouped-query attention, untied head */
} hbm_gen_arch;

typedef enum hbm_gen_attention {
  HBM_ATTN_FLASH = 0, /* fused attention: keeps Q, K, V, output and the log-sum-exp */
  HBM_ATTN_EAGER,     /* materialised scores: keeps softmax (and dropout) of a*s*s per sample */
} hbm_gen_attention;

typedef enum hbm_gen_seq_kind {
  HBM_SEQ_FIXED = 0,  /* every micro-batch seq_max tokens */
  HBM_SEQ_UNIFORM,    /* uniform in [seq_min, seq_max], multiples of seq_align */
  HBM_SEQ_LIST,       /* uniform choice among seq_list */
} hbm_gen_seq_kind;

#define HBM_GEN_SEQ_LIST_MAX 32

typedef struct hbm_gen_llm_config {
  char preset[32];           /* name of the preset this started from, or "" */

  /* ---- model (params > 0 derives layers/hidden/heads/ffn when those are 0) ---- */
  uint64_t params;           /* total parameter count, 0 = use the shape */
  uint32_t layers, hidden, heads, kv_heads, ffn, vocab; /* 0 = derive / default */
  int arch;                  /* hbm_gen_arch */
  int attention;             /* hbm_gen_attention */
  int dropout;               /* 1: dropout masks kept (Korthikanti's 34sbh); -1 = arch default */

  /* ---- data ---- */
  int seq_kind;              /* hbm_gen_seq_kind */
  uint32_t seq_min, seq_max, seq_align;
  uint32_t seq_list[HBM_GEN_SEQ_LIST_MAX];
  int nseq_list;
  uint32_t micro_batch;      /* sequences per micro-batch (padded to the micro-batch's length) */
  uint32_t grad_accum;       /* micro-batches per optimizer step */

  /* ---- parallelism ---- */
  uint32_t dp, tp, pp;       /* data, tensor, pipeline parallel sizes */
  uint32_t pp_stage;         /* which pipeline stage this device is (0 .. pp-1) */
  int sequence_parallel;     /* -1 = on when tp > 1 (Korthikanti et al. 2022) */
  int zero;                  /* 0: all-reduce; 1: optimizer state sharded; 2: + gradients; 3: + parameters */
  int offload;               /* 1: optimizer state and FP32 gradients on the host (ZeRO-Offload) */

  /* ---- memory options ---- */
  uint32_t checkpoint_every; /* 0: keep every activation; k: keep the input of every k-th layer, recompute in backward */
  uint64_t bucket_bytes;     /* gradient bucket (AllReduce / ReduceScatter / AllGather buffer) */
  int fused_optimizer;       /* 0: Adam step allocates two FP32 temporaries per tensor; 1: none */

  /* ---- timing (shapes lifetimes of communication buffers only) ---- */
  double tflops;             /* effective compute throughput, 1e12 FLOP/s */
  double comm_gbps;          /* bus bandwidth of the gradient collectives (or offload link), GB/s */

  /* ---- run ---- */
  uint32_t steps;
  uint64_t seed;
  uint64_t capacity;         /* device capacity written into the trace */

  /* ---- reporting (not part of the workload) ---- */
  hbm_progress_fn *on_progress; /* NULL, or called after each step: done of total steps */
  void *progress_arg;
} hbm_gen_llm_config;

/* Sets every field to its default (a 1.3B GPT on one 80 GiB device). */
void hbm_gen_llm_defaults(hbm_gen_llm_config *cfg);

typedef struct hbm_gen_llm_preset_info {
  const char *name;
  const char *summary;
} hbm_gen_llm_preset_info;
/* The presets, *count set to how many. */
const hbm_gen_llm_preset_info *hbm_gen_llm_presets(int *count);
/* Overwrites cfg with the preset (defaults first). HBM_EINVAL for an unknown name. */
int hbm_gen_llm_preset(const char *name, hbm_gen_llm_config *cfg);

/* Derives what was left 0 (shape from params, kv_heads, ffn, vocab, dropout,
 * sequence parallelism) and validates everything. On a bad value returns
 * HBM_EINVAL with diag->message naming the option ("--tp 3 does not divide
 * --heads 32"). cfg is updated in place only on success. */
int hbm_gen_llm_resolve(hbm_gen_llm_config *cfg, hbm_diag *diag);

/* The longest sequence a micro-batch of the (resolved) run can have: seq_max,
 * or for a range, its largest multiple of seq_align (--seq 100:200 with
 * --seq-align 64 draws 128 and 192). */
uint32_t hbm_gen_llm_seq_longest(const hbm_gen_llm_config *c);

/* Closed-form memory of one device (docs/workload.md §5), from formulas, not
 * from generated events. Sequence lengths are drawn from the seed exactly as
 * the generator draws them, so `peak` is the estimate for this very run;
 * `at_seq_max` puts every micro-batch at the longest length the run can
 * draw (hbm_gen_llm_seq_longest). That is no bound: shorter
 * sequences compute a backward faster, so more gradient buckets can be in
 * flight at once (docs/workload.md §5). */
typedef struct hbm_gen_llm_estimate {
  uint64_t params_total;     /* whole model */
  uint64_t params_device;    /* parameters this device computes with (its TP/PP share) */
  uint64_t params_resident;  /* of those, held between uses: all, or the ZeRO-3 shard */
  uint64_t param_bytes;      /* BF16 weights held on the device (shard under ZeRO-3) */
  uint64_t master_bytes;     /* FP32 master weights on the device */
  uint64_t grad_bytes;       /* FP32 gradient accumulation on the device */
  uint64_t optim_bytes;      /* Adam m and v on the device */
  uint64_t static_bytes;     /* sum of the four above */
  uint64_t act_layer_bytes;  /* activations kept per layer at the longest sequence */
  /* The peak, in parts that add up to it: */
  uint64_t static_at_peak_bytes; /* the static state then (in step 1, before its optimizer
                                  * makes m and v, without them) */
  uint64_t act_peak_bytes;   /* activations (kept + recomputed) and a layer's temporaries */
  uint64_t comm_bytes;       /* gradient buckets in flight, with the BF16 gradients
                              * ZeRO-2/3 and offload hold for them */
  uint64_t transient_bytes;  /* the rest: what transient_what names, or 0 */
  const char *transient_what; /* "ZeRO-3's gathered weights", "Adam's FP32 temporaries",
                               * "the updated weights' all-gather bucket", or "" */
  uint64_t nbuckets;         /* gradient buckets per reduction */
  uint64_t bucket_max_bytes; /* largest gradient bucket */
  uint64_t peak;             /* estimated peak live bytes for this seed */
  uint64_t at_seq_max;       /* the same with every micro-batch at the longest sequence */
  const char *peak_phase;    /* "forward", "backward", "gradient reduction", "optimizer" */
  uint64_t events_per_step;  /* rough count, for sizing */
} hbm_gen_llm_estimate;

/* cfg must be resolved (or resolvable: this resolves a copy). */
int hbm_gen_llm_estimate_peak(const hbm_gen_llm_config *cfg, hbm_gen_llm_estimate *est,
                              hbm_diag *diag);

/* HBM_EINVAL, with a message naming the options to change, when est's static
 * state (weights, gradients, optimizer) is larger than cfg->capacity; else
 * HBM_OK. Changes nothing. */
int hbm_gen_llm_check_capacity(const hbm_gen_llm_config *cfg, const hbm_gen_llm_estimate *est,
                               hbm_diag *diag);

/* Generates the trace. Resolves a copy of cfg first (errors as above). A
 * static state larger than cfg->capacity is refused as
 * hbm_gen_llm_check_capacity() refuses it. */
int hbm_gen_llm(const hbm_gen_llm_config *cfg, hbm_trace **out, hbm_diag *diag);

/* Events the trace of cfg holds, without generating it: *first is the setup
 * and step 1 (which creates Adam's state), *later each step after it, so
 * cfg->steps steps make first + (steps - 1) * later events (the generator
 * runs two steps to count them). Errors as hbm_gen_llm(). */
int hbm_gen_llm_count_events(const hbm_gen_llm_config *cfg, uint64_t *first, uint64_t *later,
                             hbm_diag *diag);

/* One line describing the resolved configuration (for the trace name and the
 * CLI); returns the length needed, like snprintf. */
int hbm_gen_llm_describe(const hbm_gen_llm_config *cfg, char *buf, size_t len);

/* Sequence length of micro-batch `micro` of step `step` (1-based step), as the
 * generator draws it. cfg must be resolved. */
uint32_t hbm_gen_llm_seq(const hbm_gen_llm_config *cfg, uint64_t step, uint32_t micro);

/* FLOPs the time model gives one micro-batch's attention core (scores and
 * their product with V) on one device, forward (backward 0) or backward: the
 * forward 2·n·s·h/tp for n = seq × micro-batch tokens; the backward twice that
 * with eager attention, 2.5 times with flash (FlashAttention-2's count).
 * cfg must be resolved. */
double hbm_gen_llm_attention_flops(const hbm_gen_llm_config *cfg, uint64_t seq, int backward);

#endif
