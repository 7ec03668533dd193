/* gen_llm.c: the workload model (docs/workload.md is its description).
 *
 * The trace of one device through mixed-precision transformer training:
 *   setup     BF16 weights, FP32 gradient accumulation, FP32 master weights
 *   each step 1F1B micro-batches: forward (activations kept per layer, or only
 *             every k-th layer input with checkpointing), backward (recompute,
 *             activation gradients, weight gradients, gradient buckets handed to
 *             the communication stream), then the optimizer step (Adam m and v
 *             created lazily at the first step, as torch.optim does).
 * Sizes come from the shapes; lifetimes from the order frameworks run in, and
 * for communication buffers from a simple time model (compute at `tflops`,
 * collectives serialised on stream 1 at `comm_gbps`).
 */
#include "trace/gen_llm.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "trace/trace.h"

/* ==== configuration ========================================================== */

void hbm_gen_llm_defaults(hbm_gen_llm_config *c) {
  memset(c, 0, sizeof *c);
  c->params = 0;
  c->layers = 24;
  c->hidden = 2048;
  c->heads = 16;
  c->arch = HBM_ARCH_GPT;
  c->attention = HBM_ATTN_FLASH;
  c->dropout = -1;
  c->seq_kind = HBM_SEQ_FIXED;
  c->seq_min = 2048;
  c->seq_max = 2048;
  c->seq_align = 64;
  c->micro_batch = 4;
  c->grad_accum = 4;
  c->dp = 8;
  c->tp = 1;
  c->pp = 1;
  c->sequence_parallel = -1;
  c->zero = 0;
  c->checkpoint_every = 0;
  c->bucket_bytes = 25ull << 20; /* PyTorch DDP bucket_cap_mb=25 */
  c->fused_optimizer = 0;
  c->tflops = 300;
  c->comm_gbps = 25;
  c->steps = 50;
  c->seed = 1;
  c->capacity = 80ull << 30;
}

static const hbm_gen_llm_preset_info presets[] = {
    {"910c-dense",
     "docs/design.md §1: 98B dense GPT (96 layers, hidden 9216) on 1024 x 96 GiB NPUs: tp 8, pp 4, "
     "dp 32, eager attention, sequences 1024-8192, checkpoint every 6 layers, 4.2 GB AllReduce "
     "buckets, 500 steps"},
    {"7b-1gpu-80g",
     "LLaMA-2-7B fine-tuning on one 80 GiB GPU: ZeRO-Offload (FP32 state and Adam on the host), "
     "sequences 512-4096, micro-batch 16, checkpoint every layer, 200 steps"},
    {"70b-zero3-64",
     "LLaMA-2-70B (GQA, 80 layers) under ZeRO-3 across 64 x 80 GiB GPUs: sequences of 4096, "
     "micro-batch 4 x 4, checkpoint every layer, 1 GB buckets, 100 steps"},
};

const hbm_gen_llm_preset_info *hbm_gen_llm_presets(int *count) {
  *count = (int)(sizeof presets / sizeof presets[0]);
  return presets;
}

int hbm_gen_llm_preset(const char *name, hbm_gen_llm_config *c) {
  if (!name) return HBM_EINVAL;
  if (!strcmp(name, "910c-dense")) {
    /* The field report's run (docs/design.md §1). ~200 GB of BF16 weights
     * and ~800 GB of Adam m+v in total => ~98B parameters. 1024 devices in nodes of 8:
     * tensor parallel inside a node (8), 4 pipeline stages, 32 data-parallel replicas
     * that all-reduce FP32 gradients in 4.2 GB buckets. The optimizer state is sharded
     * by the 32-way model parallelism (tp x pp), not by ZeRO. Checkpoint every 6 layers
     * as the report says. Attention is the one Korthikanti et al. 2022 measure (softmax
     * and dropout of heads x seq^2 kept, dropout 0.1): the report lists FlashAttention
     * among the remedies, not among what ran. One sequence per micro-batch, 16
     * micro-batches per step (512 sequences, ~2.4M tokens per batch); with these
     * shapes the closed-form peak is 81.3 GiB: the report's "configured peak 82 GB". */
    hbm_gen_llm_defaults(c);
    c->arch = HBM_ARCH_GPT;
    c->layers = 96;
    c->hidden = 9216;
    c->heads = 72;
    c->ffn = 4 * 9216;
    c->vocab = 64000;
    c->attention = HBM_ATTN_EAGER;
    c->dropout = 1;
    c->seq_kind = HBM_SEQ_UNIFORM;
    c->seq_min = 1024;
    c->seq_max = 8192;
    c->seq_align = 128;
    c->micro_batch = 1;
    c->grad_accum = 16;
    c->dp = 32;
    c->tp = 8;
    c->pp = 4;
    c->zero = 0;
    c->checkpoint_every = 6;
    c->bucket_bytes = 4200000000ull; /* "a 4.2 GB AllReduce buffer" */
    c->fused_optimizer = 0;
    c->tflops = 336; /* the report's effective 336 TFLOPS after the fixes */
    c->comm_gbps = 20;
    c->steps = 500;
    c->capacity = 96ull << 30;
  } else if (!strcmp(name, "7b-1gpu-80g")) {
    /* LLaMA-2-7B: 6.7B parameters need 18 B each under mixed-precision Adam
     * (docs/workload.md §2) = 121 GB: more than one 80 GiB GPU. What fits is
     * ZeRO-Offload: BF16 weights and activations on the GPU, FP32 state and the
     * Adam step on the host. */
    hbm_gen_llm_defaults(c);
    c->arch = HBM_ARCH_LLAMA;
    c->layers = 32;
    c->hidden = 4096;
    c->heads = 32;
    c->kv_heads = 32;
    c->ffn = 11008;
    c->vocab = 32000;
    c->attention = HBM_ATTN_FLASH;
    c->seq_kind = HBM_SEQ_UNIFORM;
    c->seq_min = 512;
    c->seq_max = 4096;
    c->seq_align = 64;
    c->micro_batch = 16; /* 41 GiB at 4096 tokens: room for the longest batches */
    c->grad_accum = 2;
    c->dp = 1;
    c->tp = 1;
    c->pp = 1;
    c->zero = 2;
    c->offload = 1;
    c->checkpoint_every = 1;
    c->bucket_bytes = 500000000ull; /* DeepSpeed reduce_bucket_size 5e8 */
    c->tflops = 400;
    c->comm_gbps = 25; /* PCIe 4.0 x16 to the host */
    c->steps = 200;
    c->capacity = 80ull << 30;
  } else if (!strcmp(name, "70b-zero3-64")) {
    /* LLaMA-2-70B pretraining shape: 4096-token context, ~4M tokens per batch
     * (64 x 4 x 4 x 4096), FSDP/ZeRO-3 over 64 GPUs with per-layer checkpointing. */
    hbm_gen_llm_defaults(c);
    c->arch = HBM_ARCH_LLAMA;
    c->layers = 80;
    c->hidden = 8192;
    c->heads = 64;
    c->kv_heads = 8;
    c->ffn = 28672;
    c->vocab = 32000;
    c->attention = HBM_ATTN_FLASH;
    c->seq_kind = HBM_SEQ_FIXED;
    c->seq_min = c->seq_max = 4096;
    c->micro_batch = 4;
    c->grad_accum = 4;
    c->dp = 64;
    c->tp = 1;
    c->pp = 1;
    c->zero = 3;
    c->checkpoint_every = 1;
    c->bucket_bytes = 1000000000ull; /* 5e8 BF16 elements */
    c->tflops = 400;
    c->comm_gbps = 40;
    c->steps = 100;
    c->capacity = 80ull << 30;
  } else {
    return HBM_EINVAL;
  }
  snprintf(c->preset, sizeof c->preset, "%s", name);
  return HBM_OK;
}

static int bad(hbm_diag *diag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(hbm_diag *diag, const char *fmt, ...) {
  if (diag) {
    memset(diag, 0, sizeof *diag);
    snprintf(diag->file, sizeof diag->file, "gen llm");
    va_list ap;
    va_start(ap, fmt);
    hbm_vsnprintf(diag->message, sizeof diag->message, fmt, ap);
    va_end(ap);
  }
  return HBM_EINVAL;
}

static uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* Parameters of the whole model for a shape (docs/workload.md 2). */
static uint64_t model_params(int arch, uint64_t L, uint64_t h, uint64_t hkv, uint64_t f,
                             uint64_t V) {
  uint64_t per_layer;
  if (arch == HBM_ARCH_LLAMA)
    per_layer = h * (h + 2 * hkv) + h * h + 3 * h * f + 2 * h;
  else
    per_layer = h * (h + 2 * hkv) + (h + 2 * hkv) + h * h + h + 2 * h * f + f + h + 4 * h;
  uint64_t emb = V * h * (arch == HBM_ARCH_LLAMA ? 2 : 1);
  uint64_t final_norm = arch == HBM_ARCH_LLAMA ? h : 2 * h;
  return L * per_layer + emb + final_norm;
}

static uint32_t default_ffn(int arch, uint32_t h) {
  if (arch == HBM_ARCH_LLAMA) { /* LLaMA: 2/3 * 4h rounded up to a multiple of 256 */
    uint64_t f = (8ull * h + 2) / 3;
    return (uint32_t)cdiv(f, 256) * 256;
  }
  return 4 * h;
}

/* Parameters of layers L and hidden h, or -1 where the split cannot run the
 * shape (tp must divide the heads, the kv heads and the ffn; the kv heads, given
 * or a preset's, must divide the heads; head size 128 unless --heads says
 * otherwise). */
static double shape_params(const hbm_gen_llm_config *c, uint32_t L, uint32_t h) {
  uint32_t f = c->ffn ? c->ffn : default_ffn(c->arch, h);
  uint32_t heads = c->heads ? c->heads : h / 128, kv = c->kv_heads ? c->kv_heads : heads;
  if (!heads || h % heads || heads % kv || heads % c->tp || kv % c->tp || f % c->tp) return -1;
  uint64_t hkv = (uint64_t)h / heads * kv;
  return (double)model_params(c->arch, L, h, hkv, f, c->vocab);
}

/* |parameters - c->params|, or +inf where the split cannot run the shape. */
static double shape_error(const hbm_gen_llm_config *c, uint32_t L, uint32_t h) {
  double p = shape_params(c, L, h);
  return p < 0 ? INFINITY : fabs(p - (double)c->params);
}

/* The smallest and largest shapes the search below can reach. */
typedef struct reach { double lo, hi; uint32_t lo_L, lo_h, hi_L, hi_h; } reach;
static void reach_add(reach *r, const hbm_gen_llm_config *c, uint32_t L, uint32_t h) {
  double p = shape_params(c, L, h);
  if (p < 0) return;
  if (!r->lo_L || p < r->lo) { r->lo = p; r->lo_L = L; r->lo_h = h; }
  if (!r->hi_L || p > r->hi) { r->hi = p; r->hi_L = L; r->hi_h = h; }
}

/* A parameter count as a model is named: 6.74B, 26.39T, 6.55M. */
static const char *count_text(double v, char buf[32]) {
  if (v >= 1e12) hbm_snprintf(buf, 32, "%.2fT", v / 1e12);
  else if (v >= 1e9) hbm_snprintf(buf, 32, "%.2fB", v / 1e9);
  else if (v >= 1e6) hbm_snprintf(buf, 32, "%.2fM", v / 1e6);
  else hbm_snprintf(buf, 32, "%.0f", v);
  return buf;
}

#define LIMIT_DIM (1u << 20)
#define LIMIT_SEQ (1u << 20)

/* A trace's SIZE is at most 1 PiB (docs/trace-format.md): a tensor past that
 * would be written and then refused by replay. Only activations reach it
 * (weights stay below 2^48 bytes within the shape limits); their sizes are
 * computed in double, where 64 bits could wrap (heads x seq^2 x micro-batch). */
static int check_largest(const hbm_gen_llm_config *c, hbm_diag *diag) {
  double n = (double)c->seq_max * c->micro_batch, t = c->tp, s = c->seq_max;
  double scores = c->attention == HBM_ATTN_EAGER ? 2.0 * (c->heads / c->tp) * s * s * c->micro_batch : 0;
  double softmax = c->pp_stage == c->pp - 1 ? 4.0 * n * c->vocab / t : 0; /* FP32, last stage */
  double fc1 = 2.0 * n * c->ffn / t * (c->arch == HBM_ARCH_LLAMA ? 2 : 1);
  double limit = (double)HBM_MAX_SIZE, pib = limit;
  const char *what, *fix;
  double v;
  if (scores >= softmax && scores >= fc1) {
    v = scores;
    what = "the attention scores, 2 x heads/tp x seq^2 x micro-batch";
    fix = "lower --seq, --micro-batch or --heads, raise --tp, or use --attention flash";
  } else if (softmax >= fc1) {
    v = softmax;
    what = "the FP32 softmax of the logits, 4 x seq x micro-batch x vocab/tp";
    fix = "lower --seq, --micro-batch or --vocab, or raise --tp";
  } else {
    v = fc1;
    what = "the MLP's fc1 output, 2 x seq x micro-batch x ffn/tp";
    fix = "lower --seq, --micro-batch or --ffn, or raise --tp";
  }
  if (v <= limit) return HBM_OK;
  return bad(diag, "--seq %u x --micro-batch %u: one allocation (%s) of %.2f PiB, more than the 1 PiB a trace "
             "holds: %s", c->seq_max, c->micro_batch, what, v / pib, fix);
}

int hbm_gen_llm_resolve(hbm_gen_llm_config *cfg, hbm_diag *diag) {
  hbm_gen_llm_config c = *cfg;
  int rc;
  if (c.arch != HBM_ARCH_GPT && c.arch != HBM_ARCH_LLAMA) return bad(diag, "--arch: expected gpt or llama");
  if (c.attention != HBM_ATTN_FLASH && c.attention != HBM_ATTN_EAGER)
    return bad(diag, "--attention: expected flash or eager");
  if (c.params && c.layers && c.hidden)
    return bad(diag, "--params conflicts with --layers and --hidden: give the count or the shape");
  if (c.vocab == 0) c.vocab = c.arch == HBM_ARCH_LLAMA ? 32000 : 50304;
  if (c.tp == 0 || c.tp > 1024) return bad(diag, "--tp %u: expected 1..1024", c.tp);
  if (c.pp == 0 || c.pp > 1024) return bad(diag, "--pp %u: expected 1..1024", c.pp);
  if (c.params) {
    /* Shape from the count: hidden = 128 x layers (GPT-3's family: 6.7B 32x4096,
     * 175B 96x12288; its 1.3B, 24x2048, is not of it), head size 128. With one of the two given, solve
     * for the other. Only shapes the split can run are candidates (pp divides the
     * layers, tp the heads and the ffn): the closest count alone may not be one
     * (7B as GPT is 33 layers, which --pp 2 cannot split). */
    uint32_t tp = c.tp, pp = c.pp, best_L = 0, best_h = 0;
    double best_err = 1e300;
    reach r = {0, 0, 0, 0, 0, 0};
    for (uint32_t L = pp; L <= 512; L += pp) {
      if (c.layers && L != c.layers) continue;
      for (uint32_t h = 128; h <= 65536; h += 128) {
        if (c.hidden && h != c.hidden) continue;
        if (!c.layers && !c.hidden && h != 128 * L) continue;
        double err = shape_error(&c, L, h);
        if (err < best_err) { best_err = err; best_L = L; best_h = h; }
        reach_add(&r, &c, L, h);
      }
    }
    /* A split can leave the family few members (70B as llama with --tp 8
     * --pp 4: 63.1B or 100B). Names round by a few percent (GPT-3's 6.7B is
     * a "7B"), so where the family misses by more than 6%, widths of 96 to
     * 160 per layer count too, as real models have (LLaMA 65B: 80 x 8192,
     * 102; GPT-3 175B: 128): of those within 1% of the count (or the
     * closest, if none is), the one nearest the family. */
    if (!c.layers && !c.hidden && best_err > 0.06 * (double)c.params) {
      double closest = best_err;
      for (uint32_t L = pp; L <= 512; L += pp)
        for (uint32_t h = 96 * L + 127 - (96 * L + 127) % 128; h <= 160 * L && h <= 65536; h += 128) {
          double err = shape_error(&c, L, h);
          if (err < closest) closest = err;
          reach_add(&r, &c, L, h);
        }
      double within = closest > 0.01 * (double)c.params ? closest : 0.01 * (double)c.params, off = 1e300;
      for (uint32_t L = pp; L <= 512; L += pp)
        for (uint32_t h = 96 * L + 127 - (96 * L + 127) % 128; h <= 160 * L && h <= 65536; h += 128) {
          double d = fabs((double)h - 128.0 * L) / L, err = shape_error(&c, L, h);
          if (err < INFINITY && err <= within && d < off) { off = d; best_L = L; best_h = h; }
        }
    }
    if (!best_L) {
      if (c.kv_heads)
        return bad(diag, "--params: no shape that --tp %u, --pp %u and --kv-heads %u can run (--pp must divide the layers, "
                   "--tp the heads and the ffn, --kv-heads the heads): change --kv-heads, --tp or --pp",
                   tp, pp, c.kv_heads);
      return bad(diag, "--params: no shape that --tp %u and --pp %u can split (--pp must divide the layers, --tp the heads and the ffn)",
                 tp, pp);
    }
    /* Past either end of what the search reaches (by more than names round),
     * the closest shape is not the model asked for: say so, not build it. */
    if (best_err > 0.06 * (double)c.params && (c.params > r.hi || c.params < r.lo)) {
      int above = c.params > r.hi;
      char want[32], got[32], with[64] = "";
      if (c.layers) snprintf(with, sizeof with, " with --layers %u", c.layers);
      else if (c.hidden) snprintf(with, sizeof with, " with --hidden %u", c.hidden);
      return bad(diag,
                 "--params %s: %s than the %s model --params reaches%s, %s (%u layer%s, hidden %u, vocab %u); "
                 "give --layers and --hidden%s instead for %s model",
                 count_text((double)c.params, want), above ? "more" : "less", above ? "largest" : "smallest", with,
                 count_text(above ? r.hi : r.lo, got), above ? r.hi_L : r.lo_L,
                 (above ? r.hi_L : r.lo_L) == 1 ? "" : "s", above ? r.hi_h : r.lo_h, c.vocab,
                 above ? "" : " (and a smaller --vocab)", above ? "a larger" : "a smaller");
    }
    /* Inside the reach, in a gap between shapes (10M: 1 layer x 128 is 6.6M,
     * x 256 is 13.7M): the closest is not the model asked for either. */
    if (shape_error(&c, best_L, best_h) > 0.06 * (double)c.params) { /* the widths' pick, if they were tried */
      char want[32], got[32];
      double has = shape_params(&c, best_L, best_h);
      return bad(diag,
                 "--params %s: no shape within 6%% of it; the nearest --params reaches is %s (%u layer%s, hidden %u, "
                 "vocab %u): give --layers and --hidden instead for this model",
                 count_text((double)c.params, want), count_text(has, got), best_L, best_L == 1 ? "" : "s", best_h,
                 c.vocab);
    }
    c.layers = best_L;
    c.hidden = best_h;
    if (!c.heads) c.heads = best_h / 128;
    c.params = 0; /* the shape says it now */
  }
  if (c.layers == 0 || c.layers > 10000) return bad(diag, "--layers %u: expected 1..10000", c.layers);
  if (c.hidden == 0 || c.hidden > LIMIT_DIM) return bad(diag, "--hidden %u: expected 1..%u", c.hidden, LIMIT_DIM);
  int heads_derived = c.heads == 0;
  if (heads_derived) c.heads = c.hidden >= 128 ? c.hidden / 128 : 1;
  if (c.hidden % c.heads) {
    if (heads_derived)
      return bad(diag, "--hidden %u: the default heads (hidden/128 = %u) do not divide it; give --heads", c.hidden,
                 c.heads);
    return bad(diag, "--heads %u does not divide --hidden %u", c.heads, c.hidden);
  }
  if (c.kv_heads == 0) c.kv_heads = c.heads;
  if (c.kv_heads > c.heads || c.heads % c.kv_heads) {
    if (heads_derived) /* the user gave no heads: say where the count came from */
      return bad(diag, "--kv-heads %u does not divide the default heads of --hidden %u (hidden/128 = %u); "
                 "give --heads or --kv-heads", c.kv_heads, c.hidden, c.heads);
    return bad(diag, "--kv-heads %u does not divide --heads %u", c.kv_heads, c.heads);
  }
  if (c.ffn == 0) c.ffn = default_ffn(c.arch, c.hidden);
  if (c.ffn > 16 * LIMIT_DIM) return bad(diag, "--ffn %u: too large", c.ffn);
  if (c.vocab > 16 * LIMIT_DIM) return bad(diag, "--vocab %u: too large", c.vocab);
  if (c.dropout < 0) c.dropout = c.arch == HBM_ARCH_GPT ? 1 : 0;
  if (c.dp == 0 || c.dp > 1000000) return bad(diag, "--dp %u: expected 1..1000000", c.dp);
  if (c.heads % c.tp) return bad(diag, "--tp %u does not divide --heads %u", c.tp, c.heads);
  if (c.kv_heads % c.tp) return bad(diag, "--tp %u does not divide --kv-heads %u", c.tp, c.kv_heads);
  if (c.ffn % c.tp) return bad(diag, "--tp %u does not divide --ffn %u", c.tp, c.ffn);
  if (c.layers % c.pp) return bad(diag, "--pp %u does not divide --layers %u", c.pp, c.layers);
  if (c.pp_stage >= c.pp) return bad(diag, "--stage %u: expected 0..%u (--pp %u)", c.pp_stage, c.pp - 1, c.pp);
  /* Megatron pads the vocabulary to a multiple of 128 x tp. */
  c.vocab = (uint32_t)(cdiv(c.vocab, 128ull * c.tp) * 128 * c.tp);
  if (c.sequence_parallel < 0) c.sequence_parallel = c.tp > 1;
  if (c.sequence_parallel && c.tp == 1) c.sequence_parallel = 0;
  if (c.zero < 0 || c.zero > 3) return bad(diag, "--zero %d: expected 0, 1, 2 or 3", c.zero);
  if (c.micro_batch == 0 || c.micro_batch > 65536)
    return bad(diag, "--micro-batch %u: expected 1..65536", c.micro_batch);
  if (c.grad_accum == 0 || c.grad_accum > 65536)
    return bad(diag, "--grad-accum %u: expected 1..65536", c.grad_accum);
  if (c.seq_align == 0 || c.seq_align > LIMIT_SEQ) return bad(diag, "--seq-align %u: expected 1..%u", c.seq_align, LIMIT_SEQ);
  if (c.seq_kind == HBM_SEQ_LIST) {
    if (c.nseq_list <= 0 || c.nseq_list > HBM_GEN_SEQ_LIST_MAX)
      return bad(diag, "--seq: expected 1..%d lengths in the list", HBM_GEN_SEQ_LIST_MAX);
    c.seq_min = UINT32_MAX;
    c.seq_max = 0;
    for (int i = 0; i < c.nseq_list; i++) {
      if (c.seq_list[i] == 0 || c.seq_list[i] > LIMIT_SEQ)
        return bad(diag, "--seq: length %u: expected 1..%u", c.seq_list[i], LIMIT_SEQ);
      if (c.seq_list[i] < c.seq_min) c.seq_min = c.seq_list[i];
      if (c.seq_list[i] > c.seq_max) c.seq_max = c.seq_list[i];
    }
  } else if (c.seq_kind == HBM_SEQ_FIXED) {
    if (c.seq_max == 0 || c.seq_max > LIMIT_SEQ) return bad(diag, "--seq %u: expected 1..%u", c.seq_max, LIMIT_SEQ);
    c.seq_min = c.seq_max;
  } else if (c.seq_kind == HBM_SEQ_UNIFORM) {
    if (c.seq_min == 0 || c.seq_max > LIMIT_SEQ || c.seq_min > c.seq_max)
      return bad(diag, "--seq %u:%u: expected MIN:MAX with 1 <= MIN <= MAX <= %u", c.seq_min, c.seq_max, LIMIT_SEQ);
    /* lengths are drawn among the multiples of seq_align in the range; a range
     * of one length is that length, aligned or not */
    if (c.seq_min < c.seq_max && cdiv(c.seq_min, c.seq_align) > c.seq_max / c.seq_align)
      return bad(diag, "--seq %u:%u holds no multiple of --seq-align %u: widen the range or give a smaller --seq-align",
                 c.seq_min, c.seq_max, c.seq_align);
  } else {
    return bad(diag, "--seq: unknown distribution");
  }
  if ((uint64_t)c.seq_max * c.micro_batch > (1ull << 24))
    return bad(diag, "--seq %u x --micro-batch %u: more than 16M tokens per micro-batch", c.seq_max, c.micro_batch);
  /* A chunk longer than the stage is the whole stage: say so, whatever K past
   * it was given (96 and 97 on a stage of 24 layers are the same run). */
  if (c.checkpoint_every > c.layers / c.pp) c.checkpoint_every = c.layers / c.pp;
  if (c.bucket_bytes < 4096 || c.bucket_bytes > (1ull << 44))
    return bad(diag, "--bucket %llu bytes: expected 4KiB..16TiB", (unsigned long long)c.bucket_bytes);
  if (!(c.tflops > 0 && c.tflops < 1e6))
    return bad(diag, "--tflops %g: expected a number of TFLOP/s above 0 and below 1000000", c.tflops);
  if (!(c.comm_gbps > 0 && c.comm_gbps < 1e6))
    return bad(diag, "--comm-bw %g: expected a number of GB/s above 0 and below 1000000", c.comm_gbps);
  if (c.steps == 0 || c.steps > 1000000) return bad(diag, "--steps %u: expected 1..1000000", c.steps);
  if (c.capacity == 0) return bad(diag, "--capacity: expected a positive size");
  /* ZeRO-Offload runs on top of stage 2 (or 3): each micro-batch's BF16 gradients
   * are reduced and streamed to the host as partitions, which stage 1 does not do.
   * Stage 0 is the default, so it means "not given" here; the CLI refuses a
   * --zero 0 the user gave. */
  if (c.offload && c.zero == 1)
    return bad(diag, "--zero 1 with --offload: ZeRO-Offload runs on ZeRO stage 2 or 3; give --zero 2 or 3, or no --offload");
  if (c.offload && c.zero == 0) c.zero = 2;
  if ((rc = check_largest(&c, diag))) return rc;
  *cfg = c;
  return HBM_OK;
}

/* Sequence length of one micro-batch: a hash of (seed, step, micro-batch), so any
 * micro-batch's length can be computed on its own (the estimate uses this too). */
static uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint32_t hbm_gen_llm_seq_longest(const hbm_gen_llm_config *c) {
  if (c->seq_kind != HBM_SEQ_UNIFORM || c->seq_min == c->seq_max) return c->seq_max;
  return c->seq_max / c->seq_align * c->seq_align; /* resolve refuses a range without a multiple */
}

/* A uniform range's lengths: the multiples lo..hi of --seq-align (in units of
 * it); 0 where it holds none (MIN == MAX off the alignment). */
static int uniform_multiples(const hbm_gen_llm_config *c, uint64_t *lo, uint64_t *hi) {
  *lo = cdiv(c->seq_min, c->seq_align);
  *hi = c->seq_max / c->seq_align;
  return *hi >= *lo;
}

uint32_t hbm_gen_llm_seq(const hbm_gen_llm_config *c, uint64_t step, uint32_t micro) {
  if (c->seq_kind == HBM_SEQ_FIXED) return c->seq_max;
  uint64_t r = mix64(c->seed * 0x100000001B3ull ^ mix64(step * 65537 + micro));
  if (c->seq_kind == HBM_SEQ_LIST) return c->seq_list[r % (uint64_t)c->nseq_list];
  uint64_t lo, hi;
  if (!uniform_multiples(c, &lo, &hi)) return c->seq_max; /* MIN == MAX (resolve refuses other ranges without a multiple) */
  return (uint32_t)((lo + r % (hi - lo + 1)) * c->seq_align);
}

/* Whether every micro-batch of every step has the same length. */
static int seq_constant(const hbm_gen_llm_config *c) {
  if (c->seq_kind == HBM_SEQ_FIXED) return 1;
  if (c->seq_kind == HBM_SEQ_LIST) {
    for (int i = 1; i < c->nseq_list; i++)
      if (c->seq_list[i] != c->seq_list[0]) return 0;
    return 1;
  }
  uint64_t lo, hi;
  return !uniform_multiples(c, &lo, &hi) || hi == lo;
}

/* ==== the device's share of the model ========================================== */

/* Parameter tensors of one transformer layer, in forward order. */
enum {
  T_LN1W, T_LN1B, T_QKVW, T_QKVB, T_PROJW, T_PROJB,
  T_LN2W, T_LN2B, T_FC1W, T_FC1B, T_FC2W, T_FC2B, NT_LAYER
};
/* The order in which bwd_layer() produces a layer's weight gradients: the
 * order they fill gradient buckets, which the estimate follows too. */
static const int wgrad_order[NT_LAYER] = {T_FC2W, T_FC2B, T_FC1W, T_FC1B, T_LN2W, T_LN2B,
                                          T_PROJW, T_PROJB, T_QKVW, T_QKVB, T_LN1W, T_LN1B};
/* Unit tensors outside the layers. */
enum { X_EMB, X_FNORMW, X_FNORMB, X_HEAD, NX };

typedef struct shape {
  uint64_t h, hkv, f, a, V, tp, tsp, b, L, Ls;
  uint64_t k;          /* checkpoint chunk (0: none) */
  uint64_t nchunks;
  int first, last;     /* this stage holds the embedding / the head */
  int tied;
  int dropout, eager, llama;
  uint64_t layer_numel[NT_LAYER]; /* on this device (after TP) */
  uint64_t x_numel[NX];           /* 0 when not on this device */
  uint64_t layer_params;          /* sum of layer_numel */
  uint64_t device_params;         /* all tensors on this device */
  uint64_t total_params;
} shape;

static void shape_init(const hbm_gen_llm_config *c, shape *s) {
  memset(s, 0, sizeof *s);
  s->h = c->hidden;
  s->a = c->heads;
  s->hkv = (uint64_t)c->hidden / c->heads * c->kv_heads;
  s->f = c->ffn;
  s->V = c->vocab;
  s->tp = c->tp;
  s->tsp = c->sequence_parallel ? c->tp : 1;
  s->b = c->micro_batch;
  s->L = c->layers;
  s->Ls = c->layers / c->pp;
  s->k = c->checkpoint_every ? (c->checkpoint_every < s->Ls ? c->checkpoint_every : s->Ls) : 0;
  s->nchunks = s->k ? cdiv(s->Ls, s->k) : 0;
  s->first = c->pp_stage == 0;
  s->last = c->pp_stage == c->pp - 1;
  s->llama = c->arch == HBM_ARCH_LLAMA;
  s->tied = !s->llama;
  s->dropout = c->dropout > 0;
  s->eager = c->attention == HBM_ATTN_EAGER;
  uint64_t h = s->h, t = s->tp, f = s->f, qkv = h + 2 * s->hkv;
  uint64_t *n = s->layer_numel;
  n[T_LN1W] = h;
  n[T_QKVW] = h * qkv / t;
  n[T_PROJW] = h * h / t;
  n[T_LN2W] = h;
  if (s->llama) {
    n[T_FC1W] = 2 * h * f / t; /* gate and up */
    n[T_FC2W] = f * h / t;
  } else {
    n[T_LN1B] = h;
    n[T_QKVB] = qkv / t;
    n[T_PROJB] = h;
    n[T_LN2B] = h;
    n[T_FC1W] = h * f / t;
    n[T_FC1B] = f / t;
    n[T_FC2W] = f * h / t;
    n[T_FC2B] = h;
  }
  for (int i = 0; i < NT_LAYER; i++) s->layer_params += n[i];
  if (s->first) s->x_numel[X_EMB] = s->V * h / t;
  if (s->last) {
    s->x_numel[X_FNORMW] = h;
    if (!s->llama) s->x_numel[X_FNORMB] = h;
    /* Untied head; a tied head on a later stage keeps its own copy of the embedding. */
    if (!s->tied || !s->first) s->x_numel[X_HEAD] = s->V * h / t;
  }
  s->device_params = s->Ls * s->layer_params;
  for (int i = 0; i < NX; i++) s->device_params += s->x_numel[i];
  s->total_params = model_params(c->arch, s->L, h, s->hkv, f, s->V);
}

/* Persistent bytes per parameter tensor of `numel` elements on this device. */
typedef struct static_bytes { uint64_t param, grad, master, optim; } static_bytes;

static static_bytes tensor_static(const hbm_gen_llm_config *c, uint64_t numel) {
  static_bytes r = {0, 0, 0, 0};
  uint64_t shard = cdiv(numel, c->dp);
  r.param = 2 * (c->zero >= 3 ? shard : numel);
  if (c->offload) return r;
  r.grad = 4 * (c->zero >= 2 ? shard : numel);
  r.master = 4 * (c->zero >= 1 ? shard : numel);
  r.optim = 8 * (c->zero >= 1 ? shard : numel);
  return r;
}

/* ==== activation sizes for a micro-batch of n = s*b tokens (docs/workload.md 3) ==== */

typedef struct act_sizes {
  uint64_t hs;      /* a hidden-size tensor in the sequence-parallel region: 2nh/tsp */
  uint64_t hfull;   /* the same, gathered: 2nh */
  uint64_t mask_h;  /* dropout mask on a hidden tensor: nh/tsp */
  uint64_t qkv;     /* 2n(h + 2 hkv)/t */
  uint64_t ctx;     /* attention output: 2nh/t */
  uint64_t lse;     /* flash: log-sum-exp, FP32: 4 n a/t */
  uint64_t score;   /* eager: one a*s*s tensor in BF16 per micro-batch: 2 (a/t) s^2 b */
  uint64_t mask_s;  /* eager: its dropout mask: (a/t) s^2 b */
  uint64_t ffn;     /* 2nf/t */
  uint64_t logits;  /* 2nV/t */
  uint64_t layer;   /* everything one layer keeps (with its input) */
  uint64_t head;    /* everything the head keeps */
} act_sizes;

static void act_init(const shape *S, uint64_t seq, act_sizes *z) {
  uint64_t n = seq * S->b, h = S->h, t = S->tp;
  z->hs = cdiv(2 * n * h, S->tsp);
  z->hfull = 2 * n * h;
  z->mask_h = S->dropout ? cdiv(n * h, S->tsp) : 0;
  z->qkv = 2 * n * (h + 2 * S->hkv) / t;
  z->ctx = 2 * n * h / t;
  z->lse = S->eager ? 0 : 4 * n * (S->a / t);
  z->score = S->eager ? 2 * (S->a / t) * seq * seq * S->b : 0;
  z->mask_s = S->eager && S->dropout ? (S->a / t) * seq * seq * S->b : 0;
  z->ffn = 2 * n * S->f / t;
  z->logits = 2 * n * S->V / t;
  /* x_in, ln1, qkv, [probs, mask, dropped], ctx, lse, mask1, x_mid, ln2, fc1 (gate+up), act, mask2 */
  z->layer = z->hs * 4 + z->qkv + z->ctx + z->lse + z->mask_h * 2 +
             (S->eager ? z->score + (S->dropout ? z->mask_s + z->score : 0) : 0) +
             z->ffn * (S->llama ? 3 : 2);
  /* x_last, final norm output, FP32 softmax kept for the cross-entropy backward */
  z->head = S->last ? z->hs * 2 + 2 * z->logits : 0;
}

/* ==== the generator ============================================================ */

typedef struct layer_stash {
  uint32_t x_in, ln1, qkv, probs, amask, adrop, ctx, lse, mask1, x_mid, ln2, fc1, up, act, mask2;
} layer_stash;

typedef struct pending {
  double end;
  uint32_t buf;
  int free_on_complete;
} pending;

typedef struct gen {
  const hbm_gen_llm_config *c;
  shape S;
  hbm_trace *t;
  int err;
  /* ids */
  uint32_t *free_ids;
  uint32_t nfree, free_cap, next_id;
  /* time model */
  double clock, comm_free;
  double flops_rate, bytes_rate;
  pending *q;
  uint32_t qhead, qlen, qcap;
  /* gradients */
  uint32_t *pending_grad; /* per tensor: a BF16 .grad waiting for more contributions or its bucket */
  uint32_t *held;         /* BF16 grads waiting in the current bucket (ZeRO-2/3) */
  uint32_t nheld, held_cap;
  uint64_t bucket_fill;
  int reducing;
  /* ZeRO-3 gathered units: 0..Ls-1 layers, Ls embedding, Ls+1 head and final norm */
  uint32_t *gathered;
  double *gathered_end;
  /* activations */
  layer_stash *stash;     /* [slots][Ls] without checkpointing, [k] with */
  uint32_t *ckpt;         /* [slots][nchunks] */
  uint32_t *head_stash;   /* [slots][3] */
  uint32_t slots;
  uint64_t step;
} gen;

#define NO HBM_NO_ID

static uint32_t new_id(gen *g) {
  if (g->nfree) return g->free_ids[--g->nfree];
  return g->next_id++;
}

static uint32_t A(gen *g, uint64_t size, hbm_tag tag) {
  if (size == 0) return NO;
  uint32_t id = new_id(g);
  int rc = hbm_trace_alloc(g->t, id, size, tag, 0);
  if (rc && !g->err) g->err = rc;
  return id;
}

static uint32_t A1(gen *g, uint64_t size, hbm_tag tag) { /* on the communication stream */
  if (size == 0) return NO;
  uint32_t id = new_id(g);
  int rc = hbm_trace_alloc(g->t, id, size, tag, 1);
  if (rc && !g->err) g->err = rc;
  return id;
}

static void F(gen *g, uint32_t id) {
  if (id == NO) return;
  int rc = hbm_trace_free_id(g->t, id);
  if (rc && !g->err) g->err = rc;
  if (g->nfree == g->free_cap) {
    uint32_t cap = g->free_cap ? g->free_cap * 2 : 1024;
    uint32_t *p = realloc(g->free_ids, cap * sizeof *p);
    if (!p) { g->err = HBM_EHOSTMEM; return; }
    g->free_ids = p;
    g->free_cap = cap;
  }
  g->free_ids[g->nfree++] = id;
}

/* ---- time model --------------------------------------------------------------- */

static void drain(gen *g) {
  while (g->qlen && g->q[g->qhead].end <= g->clock) {
    pending *p = &g->q[g->qhead];
    if (p->free_on_complete) F(g, p->buf);
    g->qhead = (g->qhead + 1) % g->qcap;
    g->qlen--;
  }
}

static void compute(gen *g, double flops) {
  g->clock += flops / g->flops_rate;
  drain(g);
}

/* A collective (or host copy) of `bytes` on the communication stream; `factor`
 * is bytes on the wire per byte of buffer (ring AllReduce 2(n-1)/n, ReduceScatter
 * and AllGather (n-1)/n, a host copy 1). Returns its completion time. */
static double collective(gen *g, uint64_t bytes, double factor, uint32_t buf, int free_on_complete) {
  double start = g->clock > g->comm_free ? g->clock : g->comm_free;
  double end = start + 20e-6 + factor * (double)bytes / g->bytes_rate;
  g->comm_free = end;
  if (g->qlen == g->qcap) {
    uint32_t cap = g->qcap ? g->qcap * 2 : 64;
    pending *q = malloc(cap * sizeof *q);
    if (!q) { g->err = HBM_EHOSTMEM; return end; }
    for (uint32_t i = 0; i < g->qlen; i++) q[i] = g->q[(g->qhead + i) % g->qcap];
    free(g->q);
    g->q = q;
    g->qcap = cap;
    g->qhead = 0;
  }
  g->q[(g->qhead + g->qlen) % g->qcap] = (pending){end, buf, free_on_complete};
  g->qlen++;
  return end;
}

static void wait_all(gen *g) {
  if (g->comm_free > g->clock) g->clock = g->comm_free;
  drain(g);
}

static double ring_factor(const hbm_gen_llm_config *c, int allreduce) {
  double n = (double)c->dp;
  return (allreduce ? 2.0 : 1.0) * (n - 1) / n;
}

/* ---- gradients and buckets ------------------------------------------------------ */

static void bucket_launch(gen *g) {
  const hbm_gen_llm_config *c = g->c;
  if (g->bucket_fill == 0) return;
  uint32_t buf = A1(g, g->bucket_fill, HBM_TAG_COMM);
  for (uint32_t i = 0; i < g->nheld; i++) F(g, g->held[i]); /* copied into the bucket */
  g->nheld = 0;
  double factor = c->offload ? 1.0 : ring_factor(c, c->zero == 0);
  collective(g, g->bucket_fill, factor, buf, 1);
  g->bucket_fill = 0;
}

static void bucket_add(gen *g, uint64_t bytes, uint32_t hold) {
  if (hold != NO) {
    if (g->nheld == g->held_cap) {
      uint32_t cap = g->held_cap ? g->held_cap * 2 : 64;
      uint32_t *p = realloc(g->held, cap * sizeof *p);
      if (!p) { g->err = HBM_EHOSTMEM; return; }
      g->held = p;
      g->held_cap = cap;
    }
    g->held[g->nheld++] = hold;
  }
  g->bucket_fill += bytes;
  if (g->bucket_fill >= g->c->bucket_bytes) bucket_launch(g);
}

/* A weight gradient of tensor `tid` is produced (BF16, as autograd does). With
 * `last` it has all its contributions: ZeRO-0/1 add it into the FP32 accumulation
 * buffer (and, in the reducing micro-batch, count it into the bucket being filled);
 * ZeRO-2/3 and offload keep it until its bucket is reduced. */
static void wgrad(gen *g, uint32_t tid, uint64_t numel, int last) {
  if (numel == 0) return;
  const hbm_gen_llm_config *c = g->c;
  if (g->pending_grad[tid] == NO) g->pending_grad[tid] = A(g, 2 * numel, HBM_TAG_GRAD);
  if (!last) return;
  uint32_t id = g->pending_grad[tid];
  g->pending_grad[tid] = NO;
  int sharded = c->zero >= 2 || c->offload;
  int comm = c->offload || c->dp > 1;
  if (sharded && comm) {
    bucket_add(g, 2 * numel, id);
  } else {
    F(g, id);
    if (g->reducing && comm) bucket_add(g, 4 * numel, NO);
  }
}

static uint32_t layer_tid(const gen *g, uint64_t l, int t) { return (uint32_t)(NX + l * NT_LAYER + t); }

static void layer_wgrad(gen *g, uint64_t l, int t) {
  wgrad(g, layer_tid(g, l, t), g->S.layer_numel[t], 1);
}

/* ---- ZeRO-3: gather a unit's parameters before use, prefetching the next ---- */

static uint64_t unit_param_bytes(const shape *S, uint64_t u) {
  if (u < S->Ls) return 2 * S->layer_params;
  if (u == S->Ls) return 2 * S->x_numel[X_EMB];
  return 2 * (S->x_numel[X_HEAD] + S->x_numel[X_FNORMW] + S->x_numel[X_FNORMB] +
              (S->tied && !S->x_numel[X_HEAD] ? S->x_numel[X_EMB] : 0));
}

static void z3_launch(gen *g, int64_t u) {
  if (u < 0 || g->gathered[u] != NO) return;
  uint64_t bytes = unit_param_bytes(&g->S, (uint64_t)u);
  if (!bytes) return;
  g->gathered[u] = A1(g, bytes, HBM_TAG_COMM);
  g->gathered_end[u] = collective(g, bytes, ring_factor(g->c, 0), g->gathered[u], 0);
}

static void z3_gather(gen *g, int64_t u, int64_t next) {
  if (g->c->zero < 3 || g->c->dp == 1) return;
  z3_launch(g, u);
  z3_launch(g, next);
  if (g->gathered[u] != NO && g->gathered_end[u] > g->clock) {
    g->clock = g->gathered_end[u];
    drain(g);
  }
}

static void z3_release(gen *g, int64_t u) {
  if (g->c->zero < 3 || g->c->dp == 1) return;
  F(g, g->gathered[u]);
  g->gathered[u] = NO;
}

/* ---- one transformer layer ---------------------------------------------------- */

/* Keeps `id` for backward (store) or frees it now that forward is done with it. */
static inline void keep(gen *g, int store, uint32_t *slot, uint32_t id) {
  if (store) *slot = id;
  else F(g, id);
}

/* FLOPs of one micro-batch's attention core (the scores and their product
 * with V) on this device, the time model's: forward 2·n·s·h/t (causal: half of
 * the 4·n·s·h of QK^T and PV); backward twice that when eager, as every
 * matrix product, and 2.5 times with FlashAttention-2, which makes five
 * products to the forward's two, the scores recomputed among them (Dao 2023,
 * Sec. 4.1). The generator and the estimate both take it from here. */
static double attention_core_flops(const shape *S, uint64_t seq, int backward) {
  double r = (backward ? 4.0 : 2.0) * (double)(seq * S->b) / (double)S->tp; /* as the passes' */
  double times = backward && !S->eager ? 1.25 : 1.0;
  return times * r * (double)seq * (double)S->h;
}

double hbm_gen_llm_attention_flops(const hbm_gen_llm_config *cfg, uint64_t seq, int backward) {
  shape S;
  shape_init(cfg, &S);
  return attention_core_flops(&S, seq, backward);
}

/* Forward of layer l. `x_in` is the layer input; with store the layer's stash
 * keeps every tensor backward needs (Korthikanti et al. 2022, Sec. 4.1); without,
 * tensors are freed as soon as forward is done with them and x_in is freed too
 * unless `keep_input` (a checkpoint). Returns the layer output. */
static uint32_t fwd_layer(gen *g, uint64_t l, const act_sizes *z, uint64_t seq, uint32_t x_in,
                          int store, int keep_input, layer_stash *st) {
  const shape *S = &g->S;
  uint64_t n = seq * S->b, h = S->h, t = S->tp;
  double r = 2.0 * (double)n / (double)t;
  layer_stash dummy;
  if (!st) st = &dummy;
  memset(st, 0xff, sizeof *st);
  st->x_in = x_in;

  /* attention block */
  uint32_t ln1 = A(g, z->hs, HBM_TAG_ACT);
  uint32_t ag = t > 1 && S->tsp > 1 ? A(g, z->hfull, HBM_TAG_COMM) : NO;
  uint32_t qkv = A(g, z->qkv, HBM_TAG_ACT);
  compute(g, r * (double)h * (double)(h + 2 * S->hkv));
  F(g, ag);
  keep(g, store, &st->ln1, ln1);
  uint32_t ctx;
  if (S->eager) {
    uint32_t scores = A(g, z->score, HBM_TAG_TEMP);
    uint32_t probs = A(g, z->score, HBM_TAG_ACT);
    F(g, scores);
    uint32_t amask = S->dropout ? A(g, z->mask_s, HBM_TAG_ACT) : NO;
    uint32_t adrop = S->dropout ? A(g, z->score, HBM_TAG_ACT) : NO;
    ctx = A(g, z->ctx, HBM_TAG_ACT);
    compute(g, attention_core_flops(S, seq, 0));
    keep(g, store, &st->probs, probs);
    keep(g, store, &st->amask, amask);
    keep(g, store, &st->adrop, adrop);
  } else {
    ctx = A(g, z->ctx, HBM_TAG_ACT);
    uint32_t lse = A(g, z->lse, HBM_TAG_ACT);
    compute(g, attention_core_flops(S, seq, 0));
    keep(g, store, &st->lse, lse);
  }
  keep(g, store, &st->qkv, qkv);
  uint32_t out;
  if (t > 1) { /* row-parallel projection: partial sums, then reduce(-scatter) */
    uint32_t partial = A(g, z->hfull, HBM_TAG_TEMP);
    compute(g, r * (double)h * (double)h);
    if (S->tsp > 1) {
      out = A(g, z->hs, HBM_TAG_ACT);
      F(g, partial);
    } else {
      out = partial;
    }
  } else {
    out = A(g, z->hs, HBM_TAG_ACT);
    compute(g, r * (double)h * (double)h);
  }
  keep(g, store, &st->ctx, ctx);
  uint32_t mask1 = S->dropout ? A(g, z->mask_h, HBM_TAG_ACT) : NO;
  uint32_t x_mid = A(g, z->hs, HBM_TAG_ACT); /* residual: x_in + dropout(out) */
  F(g, out);
  keep(g, store, &st->mask1, mask1);
  if (!store && !keep_input) F(g, x_in);

  /* MLP block */
  uint32_t ln2 = A(g, z->hs, HBM_TAG_ACT);
  ag = t > 1 && S->tsp > 1 ? A(g, z->hfull, HBM_TAG_COMM) : NO;
  uint32_t fc1 = A(g, z->ffn, HBM_TAG_ACT), up = NO, act;
  if (S->llama) up = A(g, z->ffn, HBM_TAG_ACT);
  compute(g, r * (double)h * (double)S->f * (S->llama ? 2 : 1));
  F(g, ag);
  keep(g, store, &st->ln2, ln2);
  if (S->llama) { /* act = silu(gate) * up */
    uint32_t silu = A(g, z->ffn, HBM_TAG_TEMP);
    act = A(g, z->ffn, HBM_TAG_ACT);
    F(g, silu);
    keep(g, store, &st->up, up);
  } else {
    act = A(g, z->ffn, HBM_TAG_ACT);
  }
  keep(g, store, &st->fc1, fc1);
  if (t > 1) {
    uint32_t partial = A(g, z->hfull, HBM_TAG_TEMP);
    compute(g, r * (double)h * (double)S->f);
    if (S->tsp > 1) {
      out = A(g, z->hs, HBM_TAG_ACT);
      F(g, partial);
    } else {
      out = partial;
    }
  } else {
    out = A(g, z->hs, HBM_TAG_ACT);
    compute(g, r * (double)h * (double)S->f);
  }
  keep(g, store, &st->act, act);
  uint32_t mask2 = S->dropout ? A(g, z->mask_h, HBM_TAG_ACT) : NO;
  uint32_t x_out = A(g, z->hs, HBM_TAG_ACT);
  F(g, out);
  keep(g, store, &st->mask2, mask2);
  keep(g, store, &st->x_mid, x_mid);
  (void)l;
  return x_out;
}

/* A hidden-size gradient out of a column-parallel layer's input: partial sums
 * over the full sequence, then reduce-scatter (or all-reduce in place). */
static uint32_t dgrad_to_hidden(gen *g, const act_sizes *z) {
  const shape *S = &g->S;
  if (S->tp > 1 && S->tsp > 1) {
    uint32_t partial = A(g, z->hfull, HBM_TAG_TEMP);
    uint32_t d = A(g, z->hs, HBM_TAG_TEMP);
    F(g, partial);
    return d;
  }
  return A(g, z->hs, HBM_TAG_TEMP);
}

/* Backward of layer l with its stash; consumes dy (gradient of the output) and
 * returns the gradient of the input. */
static uint32_t bwd_layer(gen *g, uint64_t l, const act_sizes *z, uint64_t seq, layer_stash *st,
                          uint32_t dy) {
  const shape *S = &g->S;
  uint64_t n = seq * S->b, h = S->h, t = S->tp;
  double r = 4.0 * (double)n / (double)t; /* backward: twice the forward FLOPs */
  int gather = t > 1 && S->tsp > 1;

  /* MLP */
  uint32_t dd = S->dropout ? A(g, z->hs, HBM_TAG_TEMP) : NO;
  uint32_t ag = gather ? A(g, z->hfull, HBM_TAG_COMM) : NO;
  uint32_t d_act = A(g, z->ffn, HBM_TAG_TEMP);
  compute(g, r * (double)h * (double)S->f);
  layer_wgrad(g, l, T_FC2W);
  layer_wgrad(g, l, T_FC2B);
  F(g, ag);
  F(g, dd);
  F(g, st->act);
  uint32_t d_fc1 = A(g, z->ffn * (S->llama ? 2 : 1), HBM_TAG_TEMP);
  F(g, d_act);
  F(g, st->fc1);
  F(g, st->up);
  ag = gather ? A(g, z->hfull, HBM_TAG_COMM) : NO;
  compute(g, r * (double)h * (double)S->f * (S->llama ? 2 : 1));
  layer_wgrad(g, l, T_FC1W);
  layer_wgrad(g, l, T_FC1B);
  F(g, ag);
  uint32_t d_ln2 = dgrad_to_hidden(g, z);
  F(g, d_fc1);
  F(g, st->ln2);
  uint32_t d_mid = A(g, z->hs, HBM_TAG_TEMP); /* LayerNorm backward + residual */
  layer_wgrad(g, l, T_LN2W);
  layer_wgrad(g, l, T_LN2B);
  F(g, d_ln2);
  F(g, st->x_mid);
  F(g, st->mask2);
  F(g, dy);

  /* attention */
  dd = S->dropout ? A(g, z->hs, HBM_TAG_TEMP) : NO;
  ag = gather ? A(g, z->hfull, HBM_TAG_COMM) : NO;
  uint32_t d_ctx = A(g, z->ctx, HBM_TAG_TEMP);
  compute(g, r * (double)h * (double)h);
  layer_wgrad(g, l, T_PROJW);
  layer_wgrad(g, l, T_PROJB);
  F(g, ag);
  F(g, dd);
  uint32_t dqkv = A(g, z->qkv, HBM_TAG_TEMP);
  if (S->eager) {
    uint32_t d_probs = A(g, z->score, HBM_TAG_TEMP);
    if (S->dropout) {
      uint32_t d_sm = A(g, z->score, HBM_TAG_TEMP);
      F(g, d_probs);
      d_probs = d_sm;
      F(g, st->adrop);
      F(g, st->amask);
    }
    uint32_t d_scores = A(g, z->score, HBM_TAG_TEMP);
    F(g, d_probs);
    F(g, st->probs);
    compute(g, attention_core_flops(S, seq, 1));
    F(g, d_scores);
  } else {
    /* FlashAttention-2 backward: an FP32 accumulator for dQ. */
    uint32_t dq_acc = A(g, 2 * z->ctx, HBM_TAG_TEMP);
    compute(g, attention_core_flops(S, seq, 1));
    F(g, dq_acc);
    F(g, st->lse);
  }
  F(g, st->ctx);
  F(g, d_ctx);
  F(g, st->qkv);
  ag = gather ? A(g, z->hfull, HBM_TAG_COMM) : NO;
  compute(g, r * (double)h * (double)(h + 2 * S->hkv));
  layer_wgrad(g, l, T_QKVW);
  layer_wgrad(g, l, T_QKVB);
  F(g, ag);
  uint32_t d_ln1 = dgrad_to_hidden(g, z);
  F(g, dqkv);
  F(g, st->ln1);
  uint32_t d_in = A(g, z->hs, HBM_TAG_TEMP);
  layer_wgrad(g, l, T_LN1W);
  layer_wgrad(g, l, T_LN1B);
  F(g, d_ln1);
  F(g, d_mid);
  F(g, st->mask1);
  F(g, st->x_in);
  return d_in;
}

/* ---- embedding and head ------------------------------------------------------ */

static uint32_t embed_fwd(gen *g, const act_sizes *z) {
  const shape *S = &g->S;
  z3_gather(g, (int64_t)S->Ls, 0);
  uint32_t x;
  if (S->tp > 1) { /* vocab-parallel lookup: partial rows, then reduce(-scatter) */
    uint32_t partial = A(g, z->hfull, HBM_TAG_TEMP);
    if (S->tsp > 1) {
      x = A(g, z->hs, HBM_TAG_ACT);
      F(g, partial);
    } else {
      x = partial;
    }
  } else {
    x = A(g, z->hs, HBM_TAG_ACT);
  }
  z3_release(g, (int64_t)S->Ls);
  return x;
}

static void embed_bwd(gen *g, const act_sizes *z, uint32_t dx) {
  const shape *S = &g->S;
  uint32_t ag = S->tp > 1 && S->tsp > 1 ? A(g, z->hfull, HBM_TAG_COMM) : NO;
  wgrad(g, X_EMB, S->x_numel[X_EMB], 1);
  F(g, ag);
  F(g, dx);
}

static void head_fwd(gen *g, const act_sizes *z, uint64_t seq, uint32_t x_last, uint32_t *hs) {
  const shape *S = &g->S;
  z3_gather(g, (int64_t)S->Ls + 1, -1);
  uint32_t norm = A(g, z->hs, HBM_TAG_ACT);
  uint32_t ag = S->tp > 1 && S->tsp > 1 ? A(g, z->hfull, HBM_TAG_COMM) : NO;
  uint32_t logits = A(g, z->logits, HBM_TAG_TEMP);
  compute(g, 2.0 * (double)(seq * S->b) * (double)S->h * (double)S->V / (double)S->tp);
  F(g, ag);
  uint32_t softmax = A(g, 2 * z->logits, HBM_TAG_ACT); /* FP32, kept for the backward */
  F(g, logits);
  uint32_t loss = A(g, 4 * seq * S->b, HBM_TAG_TEMP);
  F(g, loss);
  z3_release(g, (int64_t)S->Ls + 1);
  hs[0] = x_last;
  hs[1] = norm;
  hs[2] = softmax;
}

static uint32_t head_bwd(gen *g, const act_sizes *z, uint64_t seq, uint32_t *hs) {
  const shape *S = &g->S;
  /* prefetch the unit the backward uses next: the last layer, or with
   * checkpointing the first of the last chunk, which is recomputed first */
  int64_t next = S->Ls == 0 ? -1 : S->k ? (int64_t)((S->nchunks - 1) * S->k) : (int64_t)S->Ls - 1;
  z3_gather(g, (int64_t)S->Ls + 1, next);
  uint32_t d_logits = A(g, z->logits, HBM_TAG_TEMP);
  F(g, hs[2]);
  uint32_t ag = S->tp > 1 && S->tsp > 1 ? A(g, z->hfull, HBM_TAG_COMM) : NO;
  compute(g, 4.0 * (double)(seq * S->b) * (double)S->h * (double)S->V / (double)S->tp);
  if (S->x_numel[X_HEAD]) wgrad(g, X_HEAD, S->x_numel[X_HEAD], 1);
  else wgrad(g, X_EMB, S->x_numel[X_EMB], 0); /* tied, same device: first contribution */
  F(g, ag);
  uint32_t d_norm = dgrad_to_hidden(g, z);
  F(g, d_logits);
  F(g, hs[1]);
  uint32_t dy = A(g, z->hs, HBM_TAG_TEMP);
  wgrad(g, X_FNORMW, S->x_numel[X_FNORMW], 1);
  wgrad(g, X_FNORMB, S->x_numel[X_FNORMB], 1);
  F(g, d_norm);
  F(g, hs[0]);
  z3_release(g, (int64_t)S->Ls + 1);
  return dy;
}

/* ---- micro-batches ------------------------------------------------------------ */

static void forward_mb(gen *g, uint32_t slot, uint64_t seq) {
  const shape *S = &g->S;
  act_sizes z;
  act_init(S, seq, &z);
  uint32_t x = S->first ? embed_fwd(g, &z) : A(g, z.hs, HBM_TAG_ACT); /* received from stage-1 */
  for (uint64_t l = 0; l < S->Ls; l++) {
    int64_t next = l + 1 < S->Ls ? (int64_t)l + 1 : (S->last ? (int64_t)S->Ls + 1 : -1);
    z3_gather(g, (int64_t)l, next);
    if (S->k) {
      int chunk_start = l % S->k == 0;
      if (chunk_start) g->ckpt[slot * S->nchunks + l / S->k] = x;
      x = fwd_layer(g, l, &z, seq, x, 0, chunk_start, NULL);
    } else {
      x = fwd_layer(g, l, &z, seq, x, 1, 1, &g->stash[slot * S->Ls + l]);
    }
    z3_release(g, (int64_t)l);
  }
  if (S->last) head_fwd(g, &z, seq, x, &g->head_stash[slot * 3]);
  else F(g, x); /* sent to the next stage */
}

static void backward_mb(gen *g, uint32_t slot, uint64_t seq) {
  const shape *S = &g->S;
  act_sizes z;
  act_init(S, seq, &z);
  uint32_t dy = S->last ? head_bwd(g, &z, seq, &g->head_stash[slot * 3])
                        : A(g, z.hs, HBM_TAG_COMM); /* received from the next stage */
  if (!S->k) {
    for (uint64_t l = S->Ls; l-- > 0;) {
      z3_gather(g, (int64_t)l, l > 0 ? (int64_t)l - 1 : -1);
      dy = bwd_layer(g, l, &z, seq, &g->stash[slot * S->Ls + l], dy);
      z3_release(g, (int64_t)l);
    }
  } else {
    for (uint64_t c = S->nchunks; c-- > 0;) {
      uint64_t c0 = c * S->k, c1 = c0 + S->k < S->Ls ? c0 + S->k : S->Ls;
      uint32_t x = g->ckpt[slot * S->nchunks + c];
      for (uint64_t l = c0; l < c1; l++) { /* recompute the chunk, keeping everything */
        z3_gather(g, (int64_t)l, l + 1 < c1 ? (int64_t)l + 1 : (int64_t)c1 - 1);
        x = fwd_layer(g, l, &z, seq, x, 1, 1, &g->stash[l - c0]);
        if (l + 1 < c1) z3_release(g, (int64_t)l);
      }
      uint32_t recomputed_out = x; /* alive until the chunk's backward returns */
      for (uint64_t l = c1; l-- > c0;) {
        /* the chunk's first layer prefetches the first of the chunk before,
         * which the backward recomputes next (DeepSpeed prefetches along the
         * module order it recorded, recomputes included) */
        int64_t next = l > c0 ? (int64_t)l - 1 : c > 0 ? (int64_t)((c - 1) * S->k) : -1;
        z3_gather(g, (int64_t)l, next);
        dy = bwd_layer(g, l, &z, seq, &g->stash[l - c0], dy);
        z3_release(g, (int64_t)l);
      }
      F(g, recomputed_out);
    }
  }
  if (S->first) embed_bwd(g, &z, dy);
  else F(g, dy); /* sent to the previous stage */
  /* ZeRO-2/3 and offload reduce in every micro-batch; the engine's epilogue at the
   * end of each backward (DeepSpeed's independent_gradient_partition_epilogue)
   * reduces the partly filled bucket and synchronizes the reduction stream. So
   * no bucket of this micro-batch is still in flight when the next one runs: a
   * backward that outpaces its reductions waits for them here, as the run does. */
  const hbm_gen_llm_config *c = g->c;
  if ((c->zero >= 2 || c->offload) && (c->offload || c->dp > 1)) {
    bucket_launch(g);
    wait_all(g);
  }
}

/* ---- optimizer ---------------------------------------------------------------- */

/* Elements of a tensor this device's optimizer updates: from ZeRO stage 1 on,
 * its shard. */
static uint64_t optimizer_elems(const hbm_gen_llm_config *c, uint64_t numel) {
  return c->zero >= 1 ? cdiv(numel, c->dp) : numel;
}

/* ZeRO-1/2 all-gather the updated BF16 shards back after the step (ZeRO-3
 * gathers its weights when they are used; offload updates on the host). */
static int gathers_updated_weights(const hbm_gen_llm_config *c) {
  return (c->zero == 1 || c->zero == 2) && c->dp > 1 && !c->offload;
}

static void optimizer_tensor(gen *g, uint64_t numel) {
  const hbm_gen_llm_config *c = g->c;
  if (!numel || c->offload) return;
  uint64_t n = optimizer_elems(c, numel);
  if (g->step == 1) { /* torch.optim.Adam creates its state at the first step */
    A(g, 4 * n, HBM_TAG_OPTIM);
    A(g, 4 * n, HBM_TAG_OPTIM);
  }
  if (!c->fused_optimizer) { /* unfused: FP32 copy of the gradient, then the denominator */
    uint32_t t1 = A(g, 4 * n, HBM_TAG_TEMP);
    uint32_t t2 = A(g, 4 * n, HBM_TAG_TEMP);
    F(g, t2);
    F(g, t1);
  }
}

/* The tensors in the order the optimizer steps them: the embedding and the
 * final norm, each layer's, then the head (the estimate walks the same order). */
_Static_assert(X_HEAD == NX - 1, "the head is the last of the embedding-side tensors");
static uint64_t optimizer_order_count(const shape *S) { return X_HEAD + S->Ls * NT_LAYER + 1; }
static uint64_t optimizer_order_numel(const shape *S, uint64_t i) {
  if (i < X_HEAD) return S->x_numel[i];
  i -= X_HEAD;
  return i < S->Ls * NT_LAYER ? S->layer_numel[i % NT_LAYER] : S->x_numel[X_HEAD];
}

static void optimizer_step(gen *g) {
  const hbm_gen_llm_config *c = g->c;
  const shape *S = &g->S;
  /* gradient clipping: one FP32 norm per tensor, per group */
  uint32_t norms = A(g, 4 * (NT_LAYER * S->Ls + NX), HBM_TAG_TEMP);
  F(g, norms);
  for (uint64_t i = 0; i < optimizer_order_count(S); i++) optimizer_tensor(g, optimizer_order_numel(S, i));
  if (gathers_updated_weights(c)) { /* a bucket at a time */
    uint64_t left = 2 * S->device_params;
    while (left) {
      uint64_t b = left < c->bucket_bytes ? left : c->bucket_bytes;
      uint32_t buf = A1(g, b, HBM_TAG_COMM);
      collective(g, b, ring_factor(c, 0), buf, 1);
      wait_all(g);
      left -= b;
    }
  }
}

/* ---- setup and the run ------------------------------------------------------- */

static void setup_tensor(gen *g, uint64_t numel, int what) {
  if (!numel) return;
  static_bytes s = tensor_static(g->c, numel);
  uint64_t bytes = what == 0 ? s.param : what == 1 ? s.grad : s.master;
  A(g, bytes, what == 1 ? HBM_TAG_GRAD : HBM_TAG_PARAM);
}

static void setup(gen *g) {
  const shape *S = &g->S;
  /* model construction (BF16 weights), then the FP32 gradient buffers (Megatron's
   * DDP wrapper / DeepSpeed's partitions), then the optimizer's FP32 master copy */
  for (int what = 0; what < 3; what++) {
    setup_tensor(g, S->x_numel[X_EMB], what);
    for (uint64_t l = 0; l < S->Ls; l++)
      for (int t = 0; t < NT_LAYER; t++) setup_tensor(g, S->layer_numel[t], what);
    setup_tensor(g, S->x_numel[X_FNORMW], what);
    setup_tensor(g, S->x_numel[X_FNORMB], what);
    setup_tensor(g, S->x_numel[X_HEAD], what);
  }
}

static void run_step(gen *g, uint64_t step) {
  const hbm_gen_llm_config *c = g->c;
  g->step = step;
  int rc = hbm_trace_step(g->t, step);
  if (rc && !g->err) g->err = rc;
  uint32_t m = c->grad_accum;
  uint32_t warm = c->pp - c->pp_stage - 1;
  if (warm > m) warm = m;
  uint32_t nf = 0, nb = 0;
  int sharded = c->zero >= 2 || c->offload;
#define FWD() do { uint32_t j = nf++; forward_mb(g, j % g->slots, hbm_gen_llm_seq(c, step, j)); } while (0)
#define BWD() do { uint32_t j = nb++; g->reducing = sharded || j == m - 1;                   \
                   backward_mb(g, j % g->slots, hbm_gen_llm_seq(c, step, j)); } while (0)
  for (uint32_t i = 0; i < warm; i++) FWD();
  for (uint32_t i = 0; i < m - warm; i++) { FWD(); BWD(); }
  for (uint32_t i = 0; i < warm; i++) BWD();
#undef FWD
#undef BWD
  bucket_launch(g); /* the last, partly filled bucket */
  wait_all(g);
  optimizer_step(g);
}

int hbm_gen_llm_describe(const hbm_gen_llm_config *cfg, char *buf, size_t len) {
  hbm_gen_llm_config resolved = *cfg;
  const hbm_gen_llm_config *c = cfg;
  if (hbm_gen_llm_resolve(&resolved, NULL) == HBM_OK) c = &resolved;
  char seq[64], bucket[32], ckpt[40] = "no checkpointing";
  if (c->checkpoint_every) snprintf(ckpt, sizeof ckpt, "checkpoint every %u", c->checkpoint_every);
  if (c->seq_kind == HBM_SEQ_FIXED) snprintf(seq, sizeof seq, "%u", c->seq_max);
  else if (c->seq_kind == HBM_SEQ_UNIFORM) snprintf(seq, sizeof seq, "%u..%u", c->seq_min, c->seq_max);
  else snprintf(seq, sizeof seq, "%d lengths in %u..%u", c->nseq_list, c->seq_min, c->seq_max);
  hbm_size_format(c->bucket_bytes, bucket, sizeof bucket); /* "%.3g GB" wrote 1e+03 GB and 4.1e-06 GB */
  shape S;
  shape_init(c, &S);
  return snprintf(buf, len,
                  "%s%s%s %.1f%s (%u layer%s, hidden %u, %u head%s/%u kv, ffn %u, vocab %u), %s "
                  "attention, seq %s x micro-batch %u x %u, tp %u pp %u (stage %u) dp %u, "
                  "zero %d%s, %s, buckets %s, %u step%s, seed %llu",
                  c->preset[0] ? c->preset : "", c->preset[0] ? ": " : "",
                  c->arch == HBM_ARCH_LLAMA ? "llama" : "gpt", /* a model under 1B in millions: "0.0B" says nothing */
                  (double)S.total_params / (S.total_params < 1000000000 ? 1e6 : S.total_params < 1000000000000 ? 1e9 : 1e12),
                  S.total_params < 1000000000 ? "M" : S.total_params < 1000000000000 ? "B" : "T",
                  c->layers, c->layers == 1 ? "" : "s", c->hidden, c->heads, c->heads == 1 ? "" : "s",
                  c->kv_heads, c->ffn, c->vocab,
                  c->attention == HBM_ATTN_EAGER ? "eager" : "flash", seq, c->micro_batch,
                  c->grad_accum, c->tp, c->pp, c->pp_stage, c->dp, c->zero,
                  c->offload ? " + offload" : "", ckpt, bucket, c->steps,
                  c->steps == 1 ? "" : "s", (unsigned long long)c->seed);
}

static void gen_release(gen *g) {
  free(g->free_ids);
  free(g->q);
  free(g->pending_grad);
  free(g->held);
  free(g->gathered);
  free(g->gathered_end);
  free(g->stash);
  free(g->ckpt);
  free(g->head_stash);
}

int hbm_gen_llm_check_capacity(const hbm_gen_llm_config *cfg, const hbm_gen_llm_estimate *est,
                               hbm_diag *diag) {
  if (est->static_bytes <= cfg->capacity) return HBM_OK;
  char need[32], cap[32];
  return bad(diag,
             "weights, gradients and optimizer state need %s per device, more than --capacity %s: "
             "split the model further (--tp, --pp, --zero with --dp), use --offload, or a larger device",
             hbm_size_format(est->static_bytes, need, sizeof need), hbm_size_format(cfg->capacity, cap, sizeof cap));
}

int hbm_gen_llm(const hbm_gen_llm_config *cfg, hbm_trace **out, hbm_diag *diag) {
  hbm_gen_llm_config c = *cfg;
  int rc = hbm_gen_llm_resolve(&c, diag);
  if (rc) return rc;
  hbm_gen_llm_estimate est;
  if ((rc = hbm_gen_llm_estimate_peak(&c, &est, diag))) return rc;
  if ((rc = hbm_gen_llm_check_capacity(&c, &est, diag))) return rc;
  gen g;
  memset(&g, 0, sizeof g);
  g.c = &c;
  shape_init(&c, &g.S);
  const shape *S = &g.S;
  g.flops_rate = c.tflops * 1e12;
  g.bytes_rate = c.comm_gbps * 1e9;
  uint32_t warm = c.pp - c.pp_stage - 1;
  if (warm > c.grad_accum) warm = c.grad_accum;
  g.slots = warm + 1;
  uint64_t ntensors = NX + S->Ls * NT_LAYER;
  g.pending_grad = malloc(ntensors * sizeof *g.pending_grad);
  g.gathered = malloc((S->Ls + 2) * sizeof *g.gathered);
  g.gathered_end = calloc(S->Ls + 2, sizeof *g.gathered_end);
  g.stash = calloc(S->k ? S->k : g.slots * S->Ls, sizeof *g.stash);
  g.ckpt = calloc(S->k ? g.slots * S->nchunks : 1, sizeof *g.ckpt);
  g.head_stash = calloc(g.slots * 3, sizeof *g.head_stash);
  char name[512];
  hbm_gen_llm_describe(&c, name, sizeof name);
  if (!g.pending_grad || !g.gathered || !g.gathered_end || !g.stash || !g.ckpt || !g.head_stash ||
      hbm_trace_new(name, &g.t) != HBM_OK) {
    gen_release(&g);
    return HBM_EHOSTMEM;
  }
  for (uint64_t i = 0; i < ntensors; i++) g.pending_grad[i] = NO;
  for (uint64_t i = 0; i < S->Ls + 2; i++) g.gathered[i] = NO;
  g.t->capacity = c.capacity;
  /* one allocation for the whole event array when the size is known */
  uint64_t want = est.events_per_step * c.steps + 64 * ntensors + 1024;
  if (want < (1ull << 31)) {
    hbm_event *ev = malloc(want * sizeof *ev);
    if (ev) {
      g.t->events = ev;
      g.t->events_cap = want;
    }
  }

  setup(&g);
  for (uint64_t step = 1; step <= c.steps && !g.err; step++) {
    run_step(&g, step);
    if (c.on_progress) c.on_progress(step, c.steps, c.progress_arg);
  }
  hbm_trace_reserve_ids(g.t, g.next_id);
  rc = g.err;
  gen_release(&g);
  if (rc) {
    hbm_trace_free(g.t);
    return rc;
  }
  *out = g.t;
  return HBM_OK;
}

int hbm_gen_llm_count_events(const hbm_gen_llm_config *cfg, uint64_t *first, uint64_t *later,
                             hbm_diag *diag) {
  hbm_gen_llm_config c = *cfg;
  c.steps = 2; /* every step after the first has as many events as the second */
  hbm_trace *t = NULL;
  int rc = hbm_gen_llm(&c, &t, diag);
  if (rc) return rc;
  uint64_t second = t->nevents;
  for (uint64_t i = 0; i < t->nevents; i++)
    if (t->events[i].kind == HBM_EV_STEP && t->events[i].size == 2) {
      second = i;
      break;
    }
  *first = second;
  *later = t->nevents - second;
  hbm_trace_free(t);
  return HBM_OK;
}

/* ==== the closed-form estimate (docs/workload.md 5) ================================
 * Peak = static state + what the in-flight micro-batches keep + the working set of
 * the layer being computed + gradient buffers and collectives in flight. Each term
 * is a formula in the tensor sizes of act_init(); the schedule (1F1B) and the time
 * model decide only which terms meet. No events are generated here. */

static uint64_t max2(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* A moment of a layer's forward or backward (below). */
typedef struct layer_moment {
  double flops;
  uint64_t live;
  int grads;
} layer_moment;

enum { NLAYER_MOMENTS = 12 }; /* the most either walk below makes: an eager forward's 11 */

/* One layer's forward keeping everything (a chunk's recompute), as the
 * moments fwd_layer() passes through: the compute since the moment before and
 * what is live then beside what the layers below keep, counting its input. */
static uint32_t layer_fwd_moments(const shape *S, const act_sizes *z, uint64_t seq, layer_moment *m) {
  int tpar = S->tp > 1, g = tpar && S->tsp > 1;
  uint64_t hs = z->hs, hf = z->hfull, ffn1 = z->ffn * (S->llama ? 2 : 1);
  uint64_t out = tpar ? (g ? hs : hf) : hs; /* what survives of a projection's partial sums */
  uint64_t eager_kept = S->eager ? z->score + (S->dropout ? z->mask_s + z->score : 0) : 0;
  double r = 2.0 * (double)(seq * S->b) / (double)S->tp, h = (double)S->h;
  uint32_t k = 0;
#define MOMENT(f, l) (m[k].flops = (f), m[k].live = (l), m[k].grads = 0, k++)
  MOMENT(0, hs + hs + hf * g + z->qkv);                                  /* x_in, ln1, qkv */
  uint64_t att = hs + hs + z->qkv + eager_kept + z->ctx + z->lse;        /* and the core's */
  if (S->eager) {
    MOMENT(r * h * (double)(S->h + 2 * S->hkv), hs + hs + z->qkv + 2 * z->score); /* scores, probs */
    MOMENT(0, att);
  } else {
    MOMENT(r * h * (double)(S->h + 2 * S->hkv), att);
  }
  MOMENT(attention_core_flops(S, seq, 0), att + (tpar ? hf : hs));      /* projection */
  MOMENT(r * h * h, att + (tpar ? hf : hs) + (g ? hs : 0));              /* scattered */
  MOMENT(0, att + out + z->mask_h + hs);                                 /* x_mid */
  uint64_t mid = att + z->mask_h + hs;
  MOMENT(0, mid + hs + hf * g + ffn1);                                   /* ln2, fc1 */
  uint64_t mlp = mid + hs + ffn1;
  MOMENT(r * h * (double)S->f * (S->llama ? 2 : 1), mlp + z->ffn * (S->llama ? 2 : 1)); /* act */
  MOMENT(0, mlp + z->ffn + (tpar ? hf : hs));                            /* fc2 */
  MOMENT(r * h * (double)S->f, mlp + z->ffn + (tpar ? hf : hs) + (g ? hs : 0));
  MOMENT(0, mlp + z->ffn + z->mask_h + out + hs);                        /* x_out */
#undef MOMENT
  return k;
}

/* Live bytes of one layer's forward at its worst point, keeping everything
 * (store) or freeing as it goes (checkpointed), counting its input. */
static uint64_t layer_fwd_peak(const shape *S, const act_sizes *z, int store) {
  int tpar = S->tp > 1, g = tpar && S->tsp > 1;
  uint64_t hs = z->hs, hf = z->hfull, ffn1 = z->ffn * (S->llama ? 2 : 1);
  uint64_t proj = tpar ? hf + (g ? hs : 0) : hs;       /* partial sums + scattered output */
  uint64_t out = tpar ? (g ? hs : hf) : hs;            /* what survives of it */
  uint64_t eager_kept = S->eager ? z->score + (S->dropout ? z->mask_s + z->score : 0) : 0;
  if (store) {
    layer_moment m[NLAYER_MOMENTS];
    uint32_t n = layer_fwd_moments(S, z, 0, m); /* its bytes only: no compute */
    uint64_t p = 0;
    for (uint32_t i = 0; i < n; i++) p = max2(p, m[i].live);
    return p;
  }
  uint64_t p = hs + hs + hf * g + z->qkv;
  p = max2(p, hs + z->qkv + z->ctx + z->lse + eager_kept);
  if (S->eager) p = max2(p, hs + z->qkv + 2 * z->score);
  p = max2(p, hs + z->ctx + proj);
  p = max2(p, hs + out + z->mask_h + hs);
  p = max2(p, hs + hs + hf * g + ffn1);
  p = max2(p, hs + ffn1 + z->ffn * (S->llama ? 2 : 1));
  p = max2(p, hs + z->ffn + proj);
  p = max2(p, hs + out + z->mask_h + hs);
  return p;
}

/* One layer's backward as the moments bwd_layer() passes through, in its order:
 * what is live at each beside what the layers below keep (the layer's stash,
 * the incoming gradient or its successor, the temporaries), then the compute
 * that follows it (`flops`), then the weight gradients made after that compute
 * (`grads`: the next ones in wgrad_order), one at a time beside those bytes. */
static uint32_t layer_bwd_moments(const shape *S, const act_sizes *z, uint64_t seq, layer_moment *m) {
  int tpar = S->tp > 1, g = tpar && S->tsp > 1;
  uint64_t hs = z->hs, hf = z->hfull, A = z->layer, dd = S->dropout ? hs : 0;
  uint64_t ffn1 = z->ffn * (S->llama ? 2 : 1);
  uint64_t mlp_kept = z->ffn + ffn1 /* act + fc1 (gate, up) */;
  uint64_t att = A - mlp_kept - 2 * hs - z->mask_h; /* x_in ln1 qkv ctx lse (probs) mask1 */
  uint64_t eager_kept = S->eager ? z->score + (S->dropout ? z->mask_s + z->score : 0) : 0;
  uint64_t pre = att - eager_kept - z->lse - z->ctx - z->qkv; /* x_in ln1 mask1 */
  uint64_t core = S->eager ? 2 * z->score : 2 * z->ctx; /* d(probs) and d(scores), or dQ in FP32 */
  double r = 4.0 * (double)(seq * S->b) / (double)S->tp, h = (double)S->h;
  double core_flops = attention_core_flops(S, seq, 1);
  uint32_t k = 0;
#define MOMENT(f, l, ng) (m[k].flops = (f), m[k].live = (l), m[k].grads = (ng), k++)
  /* MLP, with dy (hs) */
  MOMENT(r * h * (double)S->f, A + hs + dd + hf * g + z->ffn, 2);          /* d(act); fc2 */
  MOMENT(0, A + hs + ffn1, 0);                                              /* d(fc1) beside it */
  MOMENT(r * h * (double)S->f * (S->llama ? 2 : 1), A - mlp_kept + hs + ffn1 + hf * g, 2); /* fc1 */
  MOMENT(0, A - mlp_kept + hs + ffn1 + hf * g + hs, 0);                   /* d(ln2) */
  MOMENT(0, A - mlp_kept + 2 * hs, 2);              /* ln2 wgrad: ln2, d(fc1) gone; d(ln2), d(mid) */
  /* attention: dy gone, d(mid) (hs) stays */
  MOMENT(r * h * h, att + hs + dd + hf * g + z->ctx, 2);                     /* d(ctx); proj */
  MOMENT(core_flops, att + hs + z->ctx + z->qkv + core, 0);                 /* d(qkv); the core */
  MOMENT(r * h * (double)(S->h + 2 * S->hkv), pre + hs + z->qkv + hf * g, 2); /* qkv */
  MOMENT(0, pre + hs + z->qkv + hf * g + hs, 0);                            /* d(ln1) */
  MOMENT(0, pre + 2 * hs, 2);                          /* ln1 wgrad: ln1, d(qkv) gone; d(ln1), d(in) */
#undef MOMENT
  return k;
}

/* Gradient buckets of one reducing backward, as the time model runs them.
 * Buckets complete in launch order (one stream): those before first_live are
 * done. The arrays grow as buckets launch and are kept from one backward to the
 * next (bsim_start); a reduction has at most one bucket per tensor. */
typedef struct bucket_sim {
  const hbm_gen_llm_config *c;
  uint64_t fill, elem;
  uint64_t *sizes;
  double *ends;
  uint32_t n, cap, first_live;
  double comm_free, factor, rate;
  int active;
  int hold;            /* ZeRO-2/3, offload: the BF16 gradients wait in `fill` */
  int nomem;           /* an array could not grow */
  uint64_t launch_max; /* most in flight at a launch since backward_peak last looked */
} bucket_sim;

/* Empties b for a new reduction, keeping its arrays. */
static void bsim_start(bucket_sim *b, const hbm_gen_llm_config *c) {
  uint64_t *sizes = b->sizes;
  double *ends = b->ends;
  uint32_t cap = b->cap;
  int nomem = b->nomem;
  memset(b, 0, sizeof *b);
  b->sizes = sizes;
  b->ends = ends;
  b->cap = cap;
  b->nomem = nomem;
  b->c = c;
}

static void bsim_free(bucket_sim *b) {
  free(b->sizes);
  free(b->ends);
}

static uint64_t bsim_live(bucket_sim *b, double now);

/* A collective of `bytes` on the communication stream, in launch order, as
 * collective() runs it; returns its completion time. */
static double bsim_collective(bucket_sim *b, uint64_t bytes, double factor, double now) {
  double start = now > b->comm_free ? now : b->comm_free;
  double end = start + 20e-6 + factor * (double)bytes / b->rate;
  b->comm_free = end;
  return end;
}

/* A bucket's buffer is allocated while the gradients it copies are still held
 * (bucket_launch), on top of the buckets still in flight. */
static void bsim_launch(bucket_sim *b, double now) {
  if (!b->fill) return;
  uint64_t at = bsim_live(b, now) + b->fill;
  if (at > b->launch_max) b->launch_max = at;
  double end = bsim_collective(b, b->fill, b->factor, now);
  if (b->n == b->cap) {
    uint32_t cap = b->cap ? 2 * b->cap : 256;
    uint64_t *sizes = realloc(b->sizes, cap * sizeof *sizes);
    if (sizes) b->sizes = sizes;
    double *ends = sizes ? realloc(b->ends, cap * sizeof *ends) : NULL;
    if (ends) b->ends = ends;
    if (!sizes || !ends) {
      b->nomem = 1;
      b->fill = 0;
      return;
    }
    b->cap = cap;
  }
  b->sizes[b->n] = b->fill;
  b->ends[b->n] = end;
  b->n++;
  b->fill = 0;
}

static void bsim_add(bucket_sim *b, uint64_t numel, double now) {
  if (!b->active || !numel) return;
  b->fill += b->elem * numel;
  if (b->fill >= b->c->bucket_bytes) bsim_launch(b, now);
}

/* Bytes of buckets launched and not yet complete at `now`, plus (ZeRO-2/3)
 * the BF16 gradients waiting to fill the next bucket. */
static uint64_t bsim_live(bucket_sim *b, double now) {
  uint64_t live = b->hold ? b->fill : 0;
  while (b->first_live < b->n && b->ends[b->first_live] <= now) b->first_live++;
  for (uint32_t i = b->first_live; i < b->n; i++) live += b->sizes[i];
  return live;
}

/* ZeRO-3's gathered units (docs/workload.md 4): a layer's BF16 weights, the
 * embedding's and the head's with the final norm; all 0 where nothing is gathered. */
typedef struct z3_units {
  uint64_t layer, emb, head;
} z3_units;

static z3_units z3_units_of(const hbm_gen_llm_config *c, const shape *S) {
  z3_units u = {0, 0, 0};
  if (c->zero < 3 || c->dp == 1) return u;
  u.layer = S->Ls ? unit_param_bytes(S, 0) : 0;
  u.emb = S->first ? unit_param_bytes(S, S->Ls) : 0;
  u.head = S->last ? unit_param_bytes(S, S->Ls + 1) : 0;
  return u;
}

/* Peak of one micro-batch's backward beyond the static state and the other
 * micro-batches: at every layer, what it keeps, its working set, and the
 * gradient buffers in flight. */
static uint64_t backward_peak(const hbm_gen_llm_config *c, const shape *S, const z3_units *u,
                              uint64_t seq, int reducing, bucket_sim *b, uint64_t *comm_at_peak,
                              uint64_t *units_at_peak) {
  act_sizes z;
  act_init(S, seq, &z);
  int sharded = c->zero >= 2 || c->offload;
  int comm = c->offload || c->dp > 1;
  bsim_start(b, c);
  b->elem = sharded ? 2 : 4;
  b->active = comm && reducing;
  b->hold = sharded && comm;
  b->factor = c->offload ? 1.0 : (c->zero == 0 ? 2.0 : 1.0) * ((double)c->dp - 1) / (double)c->dp;
  b->rate = c->comm_gbps * 1e9;
  double rate = c->tflops * 1e12, now = 0;
  uint64_t peak = 0, peak_comm = 0, peak_units = 0;
  uint64_t units = 0; /* ZeRO-3's gathered units, beside every `act` below */
  uint64_t tied = S->tied && S->first && S->last ? 2 * S->x_numel[X_EMB] : 0; /* .grad held */
#define POINT(act)                                                     \
  do {                                                                 \
    uint64_t cm_ = bsim_live(b, now);                                  \
    uint64_t v_ = (act) + units + cm_;                                 \
    if (v_ > peak) { peak = v_; peak_comm = cm_; peak_units = units; } \
  } while (0)
  /* A weight gradient of `numel` made beside `act`: it is live beside the
   * buckets in flight, then joins the bucket being filled (ZeRO-0/1 free it
   * and count its FP32 copy); a bucket it fills is allocated beside `act`. */
#define GRAD(numel, act)                                               \
  do {                                                                 \
    if (!(numel)) break;                                               \
    POINT((act) + 2 * (numel));                                        \
    bsim_add(b, (numel), now);                                         \
    uint64_t v_ = (act) + units + b->launch_max;                       \
    if (b->launch_max && v_ > peak) {                                  \
      peak = v_;                                                       \
      peak_comm = b->launch_max;                                       \
      peak_units = units;                                              \
    }                                                                  \
    b->launch_max = 0;                                                 \
  } while (0)
  /* ZeRO-3's gathers (z3_gather()): a unit in use and the next, prefetched, on
   * the communication stream between the buckets; compute waits for the unit
   * it uses. Units are numbered as the generator's: layers, embedding, head. */
  struct { int64_t unit; double end; } gathered[3];
  int ngathered = 0;
  double gfactor = ((double)c->dp - 1) / (double)c->dp;
#define LAUNCH(unit_, bytes_)                                                   \
  do {                                                                          \
    int64_t w_ = (unit_);                                                       \
    int have_ = 0;                                                              \
    for (int i_ = 0; i_ < ngathered; i_++) have_ |= gathered[i_].unit == w_;    \
    if (w_ >= 0 && !have_ && ngathered < 3) {                                   \
      gathered[ngathered].unit = w_;                                            \
      gathered[ngathered++].end = bsim_collective(b, (bytes_), gfactor, now);   \
    }                                                                           \
  } while (0)
#define GATHER(unit_, bytes_, next_)                                            \
  do {                                                                          \
    if (!u->layer && !u->head) break;                                           \
    LAUNCH((unit_), (bytes_));                                                  \
    LAUNCH((next_), u->layer);                                                  \
    for (int i_ = 0; i_ < ngathered; i_++)                                      \
      if (gathered[i_].unit == (int64_t)(unit_) && gathered[i_].end > now) now = gathered[i_].end; \
  } while (0)
#define RELEASE(unit_)                                                          \
  do {                                                                          \
    for (int i_ = 0; i_ < ngathered; i_++)                                      \
      if (gathered[i_].unit == (int64_t)(unit_)) gathered[i_--] = gathered[--ngathered]; \
  } while (0)
  int g = S->tp > 1 && S->tsp > 1;
  uint64_t ck = S->k ? S->nchunks * z.hs : S->Ls * z.layer;
  if (S->last) { /* head_bwd(), beside x_last (hs) and the final norm's output (hs) */
    /* the first layer the backward uses: the last, or the first of the last chunk */
    GATHER((int64_t)S->Ls + 1, u->head, S->Ls ? (int64_t)(S->k ? (S->nchunks - 1) * S->k : S->Ls - 1) : -1);
    units = u->head + u->layer;
    POINT(ck + z.head + z.logits); /* d(logits) beside the FP32 softmax */
    uint64_t at = ck + 2 * z.hs + z.logits + (g ? z.hfull : 0); /* softmax gone */
    now += 4.0 * (double)(seq * S->b) * (double)S->h * (double)S->V / (double)S->tp / rate;
    if (S->x_numel[X_HEAD]) GRAD(S->x_numel[X_HEAD], at);
    else POINT(at + tied); /* tied: the embedding's gradient, held until embed_bwd() */
    POINT(ck + 3 * z.hs + z.logits + (g ? z.hfull : 0) + tied); /* d(norm) */
    GRAD(S->x_numel[X_FNORMW], ck + 3 * z.hs + tied);           /* x_last, d(norm), dy */
    GRAD(S->x_numel[X_FNORMB], ck + 3 * z.hs + tied);
    RELEASE((int64_t)S->Ls + 1);
  }
  layer_moment mo[NLAYER_MOMENTS], fmo[NLAYER_MOMENTS];
  uint32_t nmo = layer_bwd_moments(S, &z, seq, mo);
  uint32_t nfmo = layer_fwd_moments(S, &z, seq, fmo);
  for (uint64_t l = S->Ls; l-- > 0;) {
    uint64_t below; /* what the layers below keep while this one's backward runs */
    int64_t next;   /* the layer it prefetches */
    if (S->k) {
      uint64_t ch = l / S->k, c0 = ch * S->k, c1 = c0 + S->k < S->Ls ? c0 + S->k : S->Ls;
      if (l == c1 - 1) { /* recompute the chunk first, keeping everything */
        for (uint64_t r = c0; r < c1; r++) {
          GATHER((int64_t)r, u->layer, (int64_t)(r + 1 < c1 ? r + 1 : c1 - 1));
          units = (r + 1 < c1 ? 2 : 1) * u->layer; /* the last alone, kept for its backward */
          for (uint32_t i = 0; i < nfmo; i++) {
            now += fmo[i].flops / rate;
            POINT(ch * z.hs + (r - c0) * z.layer + z.hs /* dy */ + fmo[i].live + tied);
          }
          if (r + 1 < c1) RELEASE((int64_t)r);
        }
      }
      below = ch * z.hs + (l - c0) * z.layer + z.hs /* recomputed output */;
      next = l > c0 ? (int64_t)l - 1 : ch > 0 ? (int64_t)((ch - 1) * S->k) : -1;
    } else {
      below = l * z.layer;
      next = (int64_t)l - 1;
    }
    GATHER((int64_t)l, u->layer, next);
    units = l > 0 ? 2 * u->layer : u->layer; /* and the next it uses, prefetched */
    const int *t = wgrad_order;
    for (uint32_t i = 0; i < nmo; i++) {
      POINT(below + mo[i].live + tied);
      now += mo[i].flops / rate;
      for (int j = 0; j < mo[i].grads; j++, t++) GRAD(S->layer_numel[*t], below + mo[i].live + tied);
    }
    RELEASE((int64_t)l);
  }
  /* embed_bwd(): dx, and sequence parallel its gathered copy; a tied embedding's
   * gradient is the one held since the head. It gathers nothing. */
  units = 0;
  GRAD(S->x_numel[X_EMB], z.hs + (S->first && g ? z.hfull : 0));
  /* the epilogue's launch of the partly filled bucket, dx (or the stage's dy) gone */
  bsim_launch(b, now);
  if (b->launch_max > peak) {
    peak = b->launch_max;
    peak_comm = b->launch_max;
    peak_units = 0;
  }
  b->launch_max = 0;
#undef POINT
#undef GRAD
#undef LAUNCH
#undef GATHER
#undef RELEASE
  if (comm_at_peak) *comm_at_peak = peak_comm;
  if (units_at_peak) *units_at_peak = peak_units;
  return peak;
}

/* What a micro-batch keeps between its forward and backward, and its forward
 * peak beside the ZeRO-3 units gathered then (*fwd_units). Each layer holds its
 * own units and the next one's, prefetched: the last layer the head's, the head
 * its own, the embedding the first layer's. */
static void forward_terms(const shape *S, const z3_units *u, uint64_t seq, uint64_t *kept,
                          uint64_t *fwd, uint64_t *fwd_units) {
  act_sizes z;
  act_init(S, seq, &z);
  uint64_t head_fwd = S->last ? z.head + z.logits : 0;
  uint64_t emb = S->first && S->tp > 1 && S->tsp > 1 ? z.hfull + z.hs : z.hs;
  uint64_t best = 0, best_units = 0;
#define AT(live, units)                                                           \
  do {                                                                            \
    uint64_t a_ = (live), u_ = (units);                                           \
    if (a_ + u_ > best + best_units) { best = a_; best_units = u_; }              \
  } while (0)
  /* live at layer l's worst point: what the layers before keep, then its own */
  uint64_t last, before_last = 0, own = layer_fwd_peak(S, &z, S->k ? 0 : 1);
  if (S->k) {
    uint64_t ck = S->nchunks * z.hs;
    *kept = ck + z.head;
    last = ck - z.hs + own;
    if (S->Ls >= 2) before_last = ((S->Ls - 2) / S->k) * z.hs + own;
    AT(ck + head_fwd, u->head);
  } else {
    uint64_t all = S->Ls * z.layer;
    *kept = all + z.head;
    last = all - z.layer + own;
    if (S->Ls >= 2) before_last = all - 2 * z.layer + own;
    AT(all + head_fwd, u->head);
  }
  if (S->Ls) AT(last, u->layer + u->head);
  if (S->Ls >= 2) AT(before_last, 2 * u->layer);
  AT(emb, S->first ? u->emb + u->layer : 0); /* a later stage receives its input ungathered */
#undef AT
  *fwd = best;
  *fwd_units = best_units;
}

int hbm_gen_llm_estimate_peak(const hbm_gen_llm_config *cfg, hbm_gen_llm_estimate *est,
                              hbm_diag *diag) {
  hbm_gen_llm_config c = *cfg;
  int rc = hbm_gen_llm_resolve(&c, diag);
  if (rc) return rc;
  shape S;
  shape_init(&c, &S);
  memset(est, 0, sizeof *est);
  est->params_total = S.total_params;
  est->params_device = S.device_params;
  uint64_t max_numel = 0;
  for (int x = 0; x < NX; x++) {
    static_bytes b = tensor_static(&c, S.x_numel[x]);
    est->param_bytes += b.param;
    est->grad_bytes += b.grad;
    est->master_bytes += b.master;
    est->optim_bytes += b.optim;
    max_numel = max2(max_numel, S.x_numel[x]);
  }
  for (int t = 0; t < NT_LAYER; t++) {
    static_bytes b = tensor_static(&c, S.layer_numel[t]);
    est->param_bytes += S.Ls * b.param;
    est->grad_bytes += S.Ls * b.grad;
    est->master_bytes += S.Ls * b.master;
    est->optim_bytes += S.Ls * b.optim;
    max_numel = max2(max_numel, S.layer_numel[t]);
  }
  est->static_bytes = est->param_bytes + est->grad_bytes + est->master_bytes + est->optim_bytes;
  est->params_resident = est->param_bytes / 2; /* BF16 */
  act_sizes zmax;
  uint32_t longest = hbm_gen_llm_seq_longest(&c);
  act_init(&S, longest, &zmax);
  est->act_layer_bytes = zmax.layer;

  int sharded = c.zero >= 2 || c.offload;
  int comm = c.offload || c.dp > 1;
  bucket_sim b;
  memset(&b, 0, sizeof b);
  if (comm) { /* the buckets of one reduction, tensor by tensor in the generator's order */
    bsim_start(&b, &c);
    b.elem = sharded ? 2 : 4;
    b.active = 1;
    b.factor = 1;
    b.rate = 1e9;
    bsim_add(&b, S.x_numel[X_HEAD], 0);
    bsim_add(&b, S.x_numel[X_FNORMW], 0);
    bsim_add(&b, S.x_numel[X_FNORMB], 0);
    for (uint64_t l = 0; l < S.Ls; l++)
      for (int t = 0; t < NT_LAYER; t++) bsim_add(&b, S.layer_numel[wgrad_order[t]], 0);
    bsim_add(&b, S.x_numel[X_EMB], 0);
    bsim_launch(&b, 0);
    est->nbuckets = b.n;
    for (uint32_t i = 0; i < b.n; i++) est->bucket_max_bytes = max2(est->bucket_max_bytes, b.sizes[i]);
  }
  z3_units units = z3_units_of(&c, &S);

  /* Optimizer: two FP32 temporaries of the largest tensor (unfused), and the
   * BF16 parameter all-gather of ZeRO-1/2, a bucket at a time. */
  uint64_t upd = optimizer_elems(&c, max_numel);
  uint64_t opt = c.offload ? 0 : (c.fused_optimizer ? 0 : 8 * upd), gather = 0;
  if (gathers_updated_weights(&c))
    gather = c.bucket_bytes < 2 * S.device_params ? c.bucket_bytes : 2 * S.device_params;
  opt = max2(opt, gather);
  uint64_t static_all = est->static_bytes;
  uint64_t static_first = static_all - est->optim_bytes; /* m, v appear in step 1's optimizer */
  uint64_t opt_peak = static_all + opt, opt_tr = opt, opt_static = static_all;
  const char *opt_what = !opt ? "" : opt == gather ? "the updated weights' all-gather bucket" : "Adam's FP32 temporaries";
  if (c.steps == 1 && !c.offload) {
    /* A run of one step has only step 1's optimizer, which creates m and v a
     * tensor at a time, in optimizer_step's order, each beside its own
     * temporaries: its worst point is not all of m and v beside the largest
     * tensor's temporaries. (Later steps have them all, and that bound.) */
    uint64_t made = 0, top = 0, top_tr = 0;
    for (uint64_t i = 0; i < optimizer_order_count(&S); i++) {
      uint64_t n = optimizer_elems(&c, optimizer_order_numel(&S, i));
      uint64_t temps = c.fused_optimizer ? 0 : 8 * n;
      made += 8 * n;
      if (made + temps > top) { top = made + temps; top_tr = temps; }
    }
    opt_peak = static_first + top;
    opt_tr = top_tr;
    opt_static = opt_peak - top_tr; /* with the m and v made so far */
    opt_what = top_tr ? "Adam's FP32 temporaries" : "";
    if (static_all + gather > opt_peak) { /* ZeRO-1/2's gather, after all of them */
      opt_peak = static_all + gather;
      opt_tr = gather;
      opt_static = static_all;
      opt_what = "the updated weights' all-gather bucket";
    }
  }

  /* Walk the 1F1B schedule of each step with this seed's sequence lengths. */
  uint32_t m = c.grad_accum, warm = c.pp - c.pp_stage - 1;
  if (warm > m) warm = m;
  uint64_t best = opt_peak, at_max = best;
  const char *phase = "optimizer", *best_what = opt_what;
  uint64_t best_act = 0, best_tr = opt_tr, best_comm = 0, best_static = opt_static;
  uint64_t *kept = malloc((size_t)m * sizeof *kept);
  if (!kept) {
    bsim_free(&b);
    return HBM_EHOSTMEM;
  }
  for (int pass = 0; pass < 2; pass++) { /* pass 0: this seed; pass 1: every micro-batch at its longest */
    /* With one length throughout, every step after the second walks as the
     * second does (step 1 alone lacks m and v): two are exact, where a run of
     * a million steps would take hours to walk. */
    uint64_t steps = pass ? 1 : seq_constant(&c) && c.steps > 2 ? 2 : c.steps;
    uint64_t top = 0;
    for (uint64_t step = 1; step <= steps; step++) {
      /* m, v are created in step 1's optimizer, after its micro-batches: these
       * run without them in any run; with every sequence at its longest (pass 1)
       * the step stands for the later steps, which have them, where there are any */
      uint64_t st = step == 1 && (!pass || c.steps == 1) ? static_first : static_all;
      uint64_t sum = 0; /* kept by the micro-batches in flight */
      uint32_t nf = 0, nb = 0;
      for (uint32_t op = 0; op < 2 * m; op++) {
        int is_fwd;
        if (op < warm) is_fwd = 1;
        else if (op < warm + 2 * (m - warm)) is_fwd = ((op - warm) % 2) == 0;
        else is_fwd = 0;
        uint32_t j = is_fwd ? nf++ : nb++;
        uint64_t seq = pass ? longest : hbm_gen_llm_seq(&c, step, j);
        uint64_t v, act, cm = 0, gathered = 0;
        if (is_fwd) {
          uint64_t f;
          forward_terms(&S, &units, seq, &kept[j], &f, &gathered);
          act = sum + f;
          sum += kept[j];
        } else {
          sum -= kept[j];
          int reducing = sharded || j == m - 1;
          act = sum + backward_peak(&c, &S, &units, seq, reducing, &b, &cm, &gathered);
          act -= cm + gathered;
        }
        v = st + act + cm + gathered;
        if (v > top) top = v;
        if (!pass && v > best) {
          best = v;
          phase = is_fwd ? "forward" : (cm ? "backward with gradient reduction" : "backward");
          best_act = act;
          best_tr = gathered;
          best_what = gathered ? "ZeRO-3's gathered weights" : "";
          best_static = st;
          best_comm = cm;
        }
      }
    }
    if (pass) at_max = max2(at_max, top);
  }
  free(kept);
  int nomem = b.nomem;
  bsim_free(&b);
  if (nomem) return HBM_EHOSTMEM;
  est->peak = best;
  est->at_seq_max = at_max;
  est->peak_phase = phase;
  est->act_peak_bytes = best_act;
  est->transient_bytes = best_tr;
  est->transient_what = best_what;
  est->static_at_peak_bytes = best_static;
  est->comm_bytes = best_comm;
  uint64_t per_layer = S.k ? 150 : 100;
  est->events_per_step = (uint64_t)m * S.Ls * per_layer + 8 * NT_LAYER * S.Ls + 64 + 4 * est->nbuckets;
  return HBM_OK;
}
