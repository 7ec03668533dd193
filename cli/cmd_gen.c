/* hbm gen llm: writes the allocation trace of one device through
 * mixed-precision transformer training, derived from the model's shapes
 * (src/trace/gen_llm.c, docs/workload.md). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "report/json.h"
#include "trace/gen_llm.h"
#include "trace/trace.h"

static void usage(FILE *out) {
  hbm_gen_llm_config d;
  hbm_gen_llm_defaults(&d);
  char bucket[32], cap[32];
  fprintf(out,
          "usage: hbm gen llm [options] -o TRACE\n"
          "       hbm gen llm --preset NAME [options] --estimate\n"
          "\n"
          "Writes the allocation trace (hbm text trace v1) of one device through\n"
          "mixed-precision transformer training: BF16 weights and activations, FP32\n"
          "master weights and gradient accumulation, Adam m and v. Every tensor's size\n"
          "follows from the shapes (docs/workload.md); sequence lengths are drawn per\n"
          "micro-batch from --seed. The device is one tensor-parallel rank of pipeline\n"
          "stage --stage.\n"
          "\n"
          "model (give --params, or the shape):\n"
          "  --preset NAME           start from a preset, then apply the other options\n"
          "  --list-presets          list the presets and exit; with --json an object with\n"
          "                          presets: [{name, summary}]\n"
          "  --params N              total parameters: 1.3B, 70e9 (derives layers/hidden/heads)\n"
          "  --arch gpt|llama        gpt: LayerNorm, biases, GELU, tied embeddings; llama: RMSNorm,\n"
          "                          SwiGLU, grouped-query attention, untied head (default: gpt)\n"
          "  --layers N              transformer layers (default: %u)\n"
          "  --hidden N              hidden size (default: %u)\n"
          "  --heads N               attention heads (default: hidden/128)\n"
          "  --kv-heads N            key/value heads (default: heads; a preset's, unless it has\n"
          "                          as many as heads: then it follows the heads)\n"
          "  --ffn N                 MLP size (default: 4 x hidden; llama: 8/3 x hidden, to 256)\n"
          "  --vocab N               vocabulary, padded to 128 x tp (default: 50304; llama 32000)\n"
          "  --attention flash|eager flash keeps Q,K,V,O and the log-sum-exp; eager keeps the\n"
          "                          softmax (and dropout) of heads x seq^2 (default: flash)\n"
          "  --dropout on|off        keep dropout masks (default: on for gpt, off for llama)\n"
          "data:\n"
          "  --seq N|MIN:MAX|A,B,..  tokens per sequence: fixed, uniform range, or a list to\n"
          "                          choose from, per micro-batch (default: %u)\n"
          "  --seq-align N           uniform lengths are multiples of N; MIN:MAX must hold one\n"
          "                          (default: %u)\n"
          "  --micro-batch N         sequences per micro-batch (default: %u)\n"
          "  --grad-accum N          micro-batches per optimizer step (default: %u)\n"
          "parallelism:\n"
          "  --dp N                  data-parallel size (default: %u)\n"
          "  --tp N                  tensor-parallel size (default: %u)\n"
          "  --pp N                  pipeline stages, 1F1B schedule (default: %u)\n"
          "  --stage N               which pipeline stage this device is (default: 0)\n"
          "  --sequence-parallel on|off   (default: on when tp > 1)\n"
          "  --zero 0|1|2|3          0: all-reduce gradients; 1: shard optimizer state;\n"
          "                          2: + gradients; 3: + weights (default: %d)\n"
          "  --offload               optimizer state and FP32 gradients on the host (ZeRO-Offload,\n"
          "                          on ZeRO stage 2 or 3: --zero 2 unless --zero 3 is given)\n"
          "  --no-offload            keep them on the device (undoes a preset's --offload)\n"
          "memory:\n"
          "  --checkpoint-every K    keep only every K-th layer's input, recompute in backward\n"
          "                          (default: %u = keep everything)\n"
          "  --bucket SIZE           gradient bucket for AllReduce/ReduceScatter/AllGather\n"
          "                          (default: %s)\n"
          "  --optimizer fused|unfused   unfused Adam makes two FP32 temporaries per tensor\n"
          "                          (default: unfused)\n"
          "timing (lifetimes of communication buffers):\n"
          "  --tflops X              effective compute, TFLOP/s (default: %g)\n"
          "  --comm-bw X             bus bandwidth of gradient collectives, GB/s (default: %g)\n"
          "run:\n"
          "  --steps N               optimizer steps (default: %u)\n"
          "  --seed N                sequence-length draws (default: %llu)\n"
          "  --capacity SIZE         device capacity written into the trace, in whole 2 MiB granules\n"
          "                          (80GB is 79,997,960,192 B; default: %s)\n"
          "output:\n"
          "  -o, --output TRACE      where to write the trace (atomically)\n"
          "  --estimate              print the closed-form memory estimate instead of a trace\n"
          "                          (not with -o)\n"
          "  --json                  the summary as JSON; with --estimate: workload, capacity,\n"
          "                          params_total, params_device, params_resident, param_bytes,\n"
          "                          master_bytes, grad_bytes, optim_bytes, static_bytes,\n"
          "                          act_layer_bytes, nbuckets, bucket_max_bytes, peak_estimate,\n"
          "                          peak_at_seq_max, peak_phase, fits, and the peak's parts, which\n"
          "                          add up to peak_estimate: static_at_peak_bytes, act_peak_bytes,\n"
          "                          comm_bytes, transient_bytes (what transient names)\n"
          "  -h, --help              this text\n"
          "\n"
          "exit: 0 written, 1 could not generate or write TRACE (or standard output),\n"
          "2 bad options\n",
          d.layers, d.hidden, d.seq_max, d.seq_align, d.micro_batch, d.grad_accum, d.dp, d.tp,
          d.pp, d.zero, d.checkpoint_every, hbm_size_format(d.bucket_bytes, bucket, sizeof bucket),
          d.tflops, d.comm_gbps, d.steps, (unsigned long long)d.seed,
          hbm_size_format(d.capacity, cap, sizeof cap));
}

static void list_presets(FILE *out) {
  int n;
  const hbm_gen_llm_preset_info *p = hbm_gen_llm_presets(&n);
  for (int i = 0; i < n; i++) fprintf(out, "%-14s %s\n", p[i].name, p[i].summary);
}

static int print_presets(int json) {
  int n;
  const hbm_gen_llm_preset_info *p = hbm_gen_llm_presets(&n);
  if (!json) {
    list_presets(stdout);
    return CLI_OK;
  }
  hbm_json j;
  hbm_json_init(&j);
  hbm_json_object_begin(&j);
  hbm_json_key(&j, "presets");
  hbm_json_array_begin(&j);
  for (int i = 0; i < n; i++) {
    hbm_json_object_begin(&j);
    hbm_json_kv_string(&j, "name", p[i].name);
    hbm_json_kv_string(&j, "summary", p[i].summary);
    hbm_json_object_end(&j);
  }
  hbm_json_array_end(&j);
  hbm_json_object_end(&j);
  return cli_print_json("gen llm", &j);
}

static int parse_u32(const char *opt, const char *text, uint32_t min, uint32_t max, uint32_t *out) {
  uint64_t v;
  if (!cli_parse_count(opt, text, min, max, &v)) return 0;
  *out = (uint32_t)v;
  return 1;
}

static int parse_onoff(const char *opt, const char *text, int *out) {
  if (!strcmp(text, "on") || !strcmp(text, "1") || !strcmp(text, "yes")) *out = 1;
  else if (!strcmp(text, "off") || !strcmp(text, "0") || !strcmp(text, "no")) *out = 0;
  else {
    cli_error("%s: expected on or off, got '%s'", opt, text);
    return 0;
  }
  return 1;
}

/* A rate above 0 and below 1e6 (the generator's bound) in `unit`. */
static int parse_positive(const char *opt, const char *unit, const char *text, double *out) {
  char *end;
  double v = strtod(text, &end);
  if (end == text || (*end && strcmp(end, unit)) || !(v > 0) || !(v < 1e6)) { /* "40GB/s" reads too */
    cli_error("%s: expected a number of %s above 0 and below 1000000, got '%s'", opt, unit, text);
    return 0;
  }
  *out = v;
  return 1;
}

static int parse_seq(const char *text, hbm_gen_llm_config *c) {
  const char *colon = strchr(text, ':'), *comma = strchr(text, ',');
  char buf[32];
  if (colon && !comma) {
    size_t len = (size_t)(colon - text);
    if (len >= sizeof buf) goto fail;
    memcpy(buf, text, len);
    buf[len] = 0;
    uint32_t lo, hi;
    if (!parse_u32("--seq", buf, 1, 1u << 20, &lo) || !parse_u32("--seq", colon + 1, 1, 1u << 20, &hi))
      return 0;
    if (lo > hi) {
      cli_error("--seq %s: MIN is larger than MAX", text);
      return 0;
    }
    c->seq_kind = HBM_SEQ_UNIFORM;
    c->seq_min = lo;
    c->seq_max = hi;
    return 1;
  }
  if (comma && !colon) {
    c->seq_kind = HBM_SEQ_LIST;
    c->nseq_list = 0;
    const char *p = text;
    while (*p) {
      const char *e = strchr(p, ',');
      size_t len = e ? (size_t)(e - p) : strlen(p);
      /* an empty length anywhere, last too ("1,2,"), is a typo, not a list of two */
      if (len == 0 || len >= sizeof buf || c->nseq_list == HBM_GEN_SEQ_LIST_MAX || (e && !e[1])) goto fail;
      memcpy(buf, p, len);
      buf[len] = 0;
      if (!parse_u32("--seq", buf, 1, 1u << 20, &c->seq_list[c->nseq_list])) return 0;
      c->nseq_list++;
      p = e ? e + 1 : p + len;
    }
    return 1;
  }
  if (!colon && !comma) {
    c->seq_kind = HBM_SEQ_FIXED;
    return parse_u32("--seq", text, 1, 1u << 20, &c->seq_max);
  }
fail:
  cli_error("--seq: expected N, MIN:MAX or a list A,B,C (at most %d), got '%s'",
            HBM_GEN_SEQ_LIST_MAX, text);
  return 0;
}

enum {
  O_PRESET = 1000, O_LIST, O_PARAMS, O_ARCH, O_LAYERS, O_HIDDEN, O_HEADS, O_KV, O_FFN, O_VOCAB,
  O_ATTN, O_DROPOUT, O_SEQ, O_ALIGN, O_MB, O_GA, O_DP, O_TP, O_PP, O_STAGE, O_SP, O_ZERO,
  O_OFFLOAD, O_NO_OFFLOAD, O_CKPT, O_BUCKET, O_OPTIM, O_TFLOPS, O_COMMBW, O_STEPS, O_SEED, O_CAP, O_EST,
  O_JSON
};

/* A parameter count as people say it: 6.74B, 24.6M under a billion, 1310
 * under a hundred thousand, 26.39T from a trillion (as the --params
 * messages and the workload's name say). */
static const char *params_text(uint64_t n, char buf[32]) {
  if (n < 100000) snprintf(buf, 32, "%llu", (unsigned long long)n); /* "0.0M" would say none */
  else if (n < 1000000000) snprintf(buf, 32, "%.1fM", (double)n / 1e6);
  else if (n < 1000000000000) snprintf(buf, 32, "%.2fB", (double)n / 1e9);
  else snprintf(buf, 32, "%.2fT", (double)n / 1e12);
  return buf;
}

static int print_estimate(const hbm_gen_llm_config *c, const hbm_gen_llm_estimate *e, int json) {
  char a[32], b[32], d[32], f[32], g[32], h[32], k[32], l[32], m[32], n[32], p[32];
  if (json) {
    hbm_json j;
    hbm_json_init(&j);
    hbm_json_object_begin(&j);
    char desc[512];
    hbm_gen_llm_describe(c, desc, sizeof desc);
    hbm_json_kv_string(&j, "workload", desc);
    hbm_json_kv_u64(&j, "capacity", c->capacity);
    hbm_json_kv_u64(&j, "params_total", e->params_total);
    hbm_json_kv_u64(&j, "params_device", e->params_device);
    hbm_json_kv_u64(&j, "params_resident", e->params_resident);
    hbm_json_kv_u64(&j, "param_bytes", e->param_bytes);
    hbm_json_kv_u64(&j, "master_bytes", e->master_bytes);
    hbm_json_kv_u64(&j, "grad_bytes", e->grad_bytes);
    hbm_json_kv_u64(&j, "optim_bytes", e->optim_bytes);
    hbm_json_kv_u64(&j, "static_bytes", e->static_bytes);
    hbm_json_kv_u64(&j, "act_layer_bytes", e->act_layer_bytes);
    hbm_json_kv_u64(&j, "static_at_peak_bytes", e->static_at_peak_bytes);
    hbm_json_kv_u64(&j, "act_peak_bytes", e->act_peak_bytes);
    hbm_json_kv_u64(&j, "comm_bytes", e->comm_bytes);
    hbm_json_kv_u64(&j, "transient_bytes", e->transient_bytes);
    hbm_json_kv_string(&j, "transient", e->transient_what);
    hbm_json_kv_u64(&j, "nbuckets", e->nbuckets);
    hbm_json_kv_u64(&j, "bucket_max_bytes", e->bucket_max_bytes);
    hbm_json_kv_u64(&j, "peak_estimate", e->peak);
    hbm_json_kv_u64(&j, "peak_at_seq_max", e->at_seq_max);
    hbm_json_kv_string(&j, "peak_phase", e->peak_phase);
    hbm_json_key(&j, "fits");
    hbm_json_bool(&j, e->peak <= c->capacity);
    hbm_json_object_end(&j);
    return cli_print_json("gen llm", &j);
  }
  char pt[32], pd[32], pr[32], desc[512];
  /* the shape first: --params picks layers and width, and this says which */
  hbm_gen_llm_describe(c, desc, sizeof desc);
  printf("workload       %s\n", desc);
  if (e->params_resident < e->params_device) /* ZeRO-3: only a shard stays; layers are gathered to compute */
    printf("parameters     %s in the model, %s computed on this device, %s of them held at rest "
           "(its ZeRO-3 shard, 1/%u; each layer's are gathered for use)\n",
           params_text(e->params_total, pt), params_text(e->params_device, pd), params_text(e->params_resident, pr), c->dp);
  else
    printf("parameters     %s in the model, %s on this device\n", params_text(e->params_total, pt),
           params_text(e->params_device, pd));
  printf("static         %s = BF16 weights %s + FP32 master %s + FP32 grads %s + Adam m,v %s\n",
         hbm_size_format(e->static_bytes, a, 32), hbm_size_format(e->param_bytes, b, 32),
         hbm_size_format(e->master_bytes, d, 32), hbm_size_format(e->grad_bytes, f, 32),
         hbm_size_format(e->optim_bytes, g, 32));
  printf("activations    %s per layer at seq %u; %s at the peak\n",
         hbm_size_format(e->act_layer_bytes, h, 32), hbm_gen_llm_seq_longest(c), hbm_size_format(e->act_peak_bytes, k, 32));
  printf("buckets        %llu per reduction, largest %s; %s in flight at the peak\n",
         (unsigned long long)e->nbuckets, hbm_size_format(e->bucket_max_bytes, l, 32),
         hbm_size_format(e->comm_bytes, m, 32));
  printf("peak live      %s estimated (%s), %s with every sequence at %u; capacity %s\n",
         hbm_size_format(e->peak, n, 32), e->peak_phase, hbm_size_format(e->at_seq_max, p, 32), hbm_gen_llm_seq_longest(c),
         hbm_size_format(c->capacity, a, 32));
  /* its parts, which add up to it (the nonzero ones) */
  printf("made of        %s static", hbm_size_format(e->static_at_peak_bytes, a, 32));
  if (e->act_peak_bytes) printf(", %s activations and temporaries", hbm_size_format(e->act_peak_bytes, a, 32));
  if (e->comm_bytes) printf(", %s gradient buckets", hbm_size_format(e->comm_bytes, a, 32));
  if (e->transient_bytes) printf(", %s %s", hbm_size_format(e->transient_bytes, a, 32), e->transient_what);
  printf("\n");
  /* The static state over the capacity is refused before this (as generating
   * refuses it); the peak over it is a result: say which way it goes. */
  if (e->peak > c->capacity)
    printf("fits           no: the estimated peak is %s over the capacity, before any allocator's overhead\n",
           hbm_size_format(e->peak - c->capacity, b, 32));
  else
    printf("fits           yes, %s to spare before any allocator's overhead%s\n",
           hbm_size_format(c->capacity - e->peak, b, 32),
           e->at_seq_max > c->capacity ? " (not with every sequence at its longest)" : "");
  return CLI_OK;
}

int cmd_gen(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    FILE *out = argc < 2 ? stderr : stdout;
    if (argc < 2) cli_error("gen: expected a generator (llm)");
    fprintf(out, "usage: hbm gen llm [options] -o TRACE   (hbm gen llm --help)\n\n"
                 "generators:\n  llm        mixed-precision transformer training, from its shapes\n");
    return argc < 2 ? CLI_BAD_INPUT : CLI_OK;
  }
  if (strcmp(argv[1], "llm")) {
    cli_error("gen: unknown generator '%s' (try: hbm gen llm --help)", argv[1]);
    return CLI_BAD_INPUT;
  }
  argc--;
  argv++;
  static const struct option opts[] = {
      {"preset", required_argument, 0, O_PRESET}, {"list-presets", no_argument, 0, O_LIST},
      {"params", required_argument, 0, O_PARAMS}, {"arch", required_argument, 0, O_ARCH},
      {"layers", required_argument, 0, O_LAYERS}, {"hidden", required_argument, 0, O_HIDDEN},
      {"heads", required_argument, 0, O_HEADS}, {"kv-heads", required_argument, 0, O_KV},
      {"ffn", required_argument, 0, O_FFN}, {"vocab", required_argument, 0, O_VOCAB},
      {"attention", required_argument, 0, O_ATTN}, {"dropout", required_argument, 0, O_DROPOUT},
      {"seq", required_argument, 0, O_SEQ}, {"seq-align", required_argument, 0, O_ALIGN},
      {"micro-batch", required_argument, 0, O_MB}, {"grad-accum", required_argument, 0, O_GA},
      {"dp", required_argument, 0, O_DP}, {"tp", required_argument, 0, O_TP},
      {"pp", required_argument, 0, O_PP}, {"stage", required_argument, 0, O_STAGE},
      {"sequence-parallel", required_argument, 0, O_SP}, {"zero", required_argument, 0, O_ZERO},
      {"offload", no_argument, 0, O_OFFLOAD}, {"no-offload", no_argument, 0, O_NO_OFFLOAD},
      {"checkpoint-every", required_argument, 0, O_CKPT},
      {"bucket", required_argument, 0, O_BUCKET}, {"optimizer", required_argument, 0, O_OPTIM},
      {"tflops", required_argument, 0, O_TFLOPS}, {"comm-bw", required_argument, 0, O_COMMBW},
      {"steps", required_argument, 0, O_STEPS}, {"seed", required_argument, 0, O_SEED},
      {"capacity", required_argument, 0, O_CAP}, {"estimate", no_argument, 0, O_EST},
      {"json", no_argument, 0, O_JSON}, {"output", required_argument, 0, 'o'},
      {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  hbm_gen_llm_config c;
  hbm_gen_llm_defaults(&c);
  /* The preset first, wherever it is on the line, so other options refine it.
   * getopt_long itself finds it, so it is spelt as the main pass reads it
   * (--pre X, --preset=X) and a value that looks like it (--seed --preset) is
   * not it; the main pass reports bad options and a preset given twice. */
  optind = 0; /* glibc and musl start afresh */
  opterr = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, ":o:h", opts, NULL)) != -1) {
    /* (not the next option as a value: cli_getopt says --preset needs one) */
    if (opt != O_PRESET || !strncmp(optarg, "--", 2)) continue;
    if (hbm_gen_llm_preset(optarg, &c) != HBM_OK) {
      cli_error("--preset: unknown preset '%s'; known:", optarg);
      list_presets(stderr);
      return CLI_BAD_INPUT;
    }
  }
  const char *output = NULL;
  int estimate = 0, json = 0, list = 0, ok = 1;
  uint64_t v;
  uint32_t u;
  /* which shape options the user gave: the others are derived from them,
   * whatever the order on the line */
  int layers_given = 0, hidden_given = 0, heads_given = 0, kv_given = 0, ffn_given = 0;
  int zero_given = 0, offload_given = 0, no_offload_given = 0;
  /* a preset with as many kv heads as heads (MHA) stays MHA when the heads change */
  int preset_mha = c.preset[0] && c.kv_heads == c.heads;
  optind = 0;
  opterr = 0;
  cli_seen seen = {0};
  while (ok && (opt = cli_getopt(argc, argv, ":o:h", opts, NULL, &seen)) != -1) {
    switch (opt) {
      case O_PRESET: break;
      case O_LIST: list = 1; break;
      case O_PARAMS:
        /* only the sign and form here: which counts a shape reaches, resolve says */
        if (hbm_count_parse(optarg, &c.params) != HBM_OK || c.params == 0) {
          cli_error("--params: expected a positive parameter count like 1.3B or 70e9, got '%s'", optarg);
          ok = 0;
        }
        break;
      case O_ARCH:
        if (!strcmp(optarg, "gpt")) c.arch = HBM_ARCH_GPT;
        else if (!strcmp(optarg, "llama")) c.arch = HBM_ARCH_LLAMA;
        else { cli_error("--arch: expected gpt or llama, got '%s'", optarg); ok = 0; }
        break;
      case O_LAYERS: ok = parse_u32("--layers", optarg, 1, 10000, &c.layers); layers_given = 1; break;
      case O_HIDDEN: ok = parse_u32("--hidden", optarg, 1, 1u << 20, &c.hidden); hidden_given = 1; break;
      case O_HEADS: ok = parse_u32("--heads", optarg, 1, 1u << 20, &c.heads); heads_given = 1; break;
      case O_KV: ok = parse_u32("--kv-heads", optarg, 1, 1u << 20, &c.kv_heads); kv_given = 1; break;
      case O_FFN: ok = parse_u32("--ffn", optarg, 1, 1u << 24, &c.ffn); ffn_given = 1; break;
      case O_VOCAB: ok = parse_u32("--vocab", optarg, 1, 1u << 24, &c.vocab); break;
      case O_ATTN:
        if (!strcmp(optarg, "flash")) c.attention = HBM_ATTN_FLASH;
        else if (!strcmp(optarg, "eager")) c.attention = HBM_ATTN_EAGER;
        else { cli_error("--attention: expected flash or eager, got '%s'", optarg); ok = 0; }
        break;
      case O_DROPOUT: ok = parse_onoff("--dropout", optarg, &c.dropout); break;
      case O_SEQ: ok = parse_seq(optarg, &c); break;
      case O_ALIGN: ok = parse_u32("--seq-align", optarg, 1, 1u << 20, &c.seq_align); break;
      case O_MB: ok = parse_u32("--micro-batch", optarg, 1, 65536, &c.micro_batch); break;
      case O_GA: ok = parse_u32("--grad-accum", optarg, 1, 65536, &c.grad_accum); break;
      case O_DP: ok = parse_u32("--dp", optarg, 1, 1000000, &c.dp); break;
      case O_TP: ok = parse_u32("--tp", optarg, 1, 1024, &c.tp); break;
      case O_PP: ok = parse_u32("--pp", optarg, 1, 1024, &c.pp); break;
      case O_STAGE: ok = parse_u32("--stage", optarg, 0, 1023, &c.pp_stage); break;
      case O_SP: ok = parse_onoff("--sequence-parallel", optarg, &c.sequence_parallel); break;
      case O_ZERO:
        ok = parse_u32("--zero", optarg, 0, 3, &u);
        if (ok) c.zero = (int)u;
        zero_given = 1;
        break;
      case O_OFFLOAD: c.offload = 1; offload_given = 1; break;
      case O_NO_OFFLOAD: c.offload = 0; no_offload_given = 1; break;
      case O_CKPT: ok = parse_u32("--checkpoint-every", optarg, 0, 10000, &c.checkpoint_every); break;
      case O_BUCKET:
        ok = cli_parse_size("--bucket", optarg, &c.bucket_bytes);
        if (ok && (c.bucket_bytes < 4096 || c.bucket_bytes > (1ull << 44))) { /* the generator's range */
          cli_error("--bucket: expected a size from 4KiB to 16TiB, got '%s'", optarg);
          ok = 0;
        }
        break;
      case O_OPTIM:
        if (!strcmp(optarg, "fused")) c.fused_optimizer = 1;
        else if (!strcmp(optarg, "unfused")) c.fused_optimizer = 0;
        else { cli_error("--optimizer: expected fused or unfused, got '%s'", optarg); ok = 0; }
        break;
      case O_TFLOPS: ok = parse_positive("--tflops", "TFLOP/s", optarg, &c.tflops); break;
      case O_COMMBW: ok = parse_positive("--comm-bw", "GB/s", optarg, &c.comm_gbps); break;
      case O_STEPS: ok = parse_u32("--steps", optarg, 1, 1000000, &c.steps); break;
      case O_SEED:
        ok = cli_parse_count("--seed", optarg, 0, UINT64_MAX, &v);
        if (ok) c.seed = v;
        break;
      case O_CAP: ok = cli_parse_capacity("--capacity", optarg, &c.capacity); break;
      case O_EST: estimate = 1; break;
      case O_JSON: json = 1; break;
      case 'o':
        if (!(output = cli_output_path("-o", optarg))) return CLI_BAD_INPUT;
        break;
      case 'h': usage(stdout); return CLI_OK;
      default: return cli_option_error("gen llm", argv, opt);
    }
  }
  if (!ok) return CLI_BAD_INPUT;
  if (optind < argc) {
    cli_error("unexpected argument '%s' (try: hbm gen llm --help)", argv[optind]);
    return CLI_BAD_INPUT;
  }
  if (list && output) { /* it would exit 0 having written nothing, as --estimate -o */
    cli_error("--list-presets prints the presets and writes no trace: drop -o %s, or --list-presets to write it",
              output);
    return CLI_BAD_INPUT;
  }
  if (list && estimate) {
    cli_error("--list-presets and --estimate: give one (--estimate --preset NAME for a preset's estimate)");
    return CLI_BAD_INPUT;
  }
  if (list) return print_presets(json);
  if (estimate && output) { /* it would exit 0 having written nothing */
    cli_error("--estimate prints the closed form and writes no trace: drop -o %s, or --estimate to write it", output);
    return CLI_BAD_INPUT;
  }
  if (offload_given && no_offload_given) { /* which would win is a guess */
    cli_error("--offload and --no-offload: give one");
    return CLI_BAD_INPUT;
  }
  if (c.offload && zero_given && c.zero < 2) { /* the library reads 0 as "not given" */
    cli_error("--zero %d with %s: ZeRO-Offload runs on ZeRO stage 2 or 3; give --zero 2 or 3, or %s", c.zero,
              offload_given ? "--offload" : "the preset's offload",
              offload_given ? "no --offload" : "--no-offload");
    return CLI_BAD_INPUT;
  }
  if (c.params && layers_given && hidden_given) {
    cli_error("--params conflicts with --layers and --hidden: give the count or the shape");
    return CLI_BAD_INPUT;
  }
  /* What the user did not give follows from what they did (resolve derives
   * zeros): --params solves for the layers and hidden size it is not given,
   * and heads and ffn follow a hidden size given or solved, not the
   * defaults' or a preset's for another width. */
  if (c.params) {
    if (!layers_given) c.layers = 0;
    if (!hidden_given) c.hidden = 0;
  }
  if (c.params || hidden_given) {
    if (!heads_given) c.heads = 0;
    if (!ffn_given) c.ffn = 0;
  }
  if (preset_mha && !kv_given) c.kv_heads = 0; /* follows the heads, given or derived */
  hbm_diag diag;
  memset(&diag, 0, sizeof diag);
  int rc = hbm_gen_llm_resolve(&c, &diag);
  if (rc != HBM_OK) {
    cli_error("%s", diag.message[0] ? diag.message : hbm_strerror(rc));
    return CLI_BAD_INPUT;
  }
  if (!estimate) { /* before the closed form, which walks every step */
    if (!output) {
      cli_error("gen llm: -o TRACE is required (or --estimate)");
      return CLI_BAD_INPUT;
    }
    if ((rc = cli_check_output(output, NULL, 0)) != CLI_OK) return rc;
    /* the events, then their text, are held in memory before the file is written */
    if ((rc = cli_check_trace_memory("gen llm", &c, sizeof(hbm_event) + 32)) != CLI_OK) return rc;
  }
  hbm_gen_llm_estimate est;
  if ((rc = hbm_gen_llm_estimate_peak(&c, &est, &diag)) != HBM_OK) {
    cli_error("%s", diag.message[0] ? diag.message : hbm_strerror(rc));
    return CLI_BAD_INPUT;
  }
  if (estimate) { /* what generating would refuse, the estimate refuses too */
    if ((rc = hbm_gen_llm_check_capacity(&c, &est, &diag)) != HBM_OK) {
      cli_error("%s", diag.message);
      return CLI_BAD_INPUT;
    }
    return print_estimate(&c, &est, json);
  }
  hbm_trace *t = NULL;
  c.on_progress = json ? NULL : cli_progress_fn;
  c.progress_arg = "generating";
  rc = hbm_gen_llm(&c, &t, &diag);
  cli_progress_end();
  if (rc != HBM_OK) {
    if (rc == HBM_EINVAL && diag.message[0]) cli_error("%s", diag.message);
    else cli_error("cannot generate: %s", hbm_strerror(rc));
    return cli_exit_code(rc);
  }
  uint64_t events = hbm_trace_event_count(t), peak = hbm_trace_peak_live(t);
  rc = hbm_trace_save(t, output, &diag);
  if (rc != HBM_OK) {
    hbm_trace_free(t);
    return cli_write_failed(&diag, rc, output);
  }
  cli_summary_after_output(output);
  char a[32], b[32], d[32];
  int code = CLI_OK;
  if (json) {
    hbm_json j;
    hbm_json_init(&j);
    hbm_json_object_begin(&j);
    hbm_json_kv_string(&j, "output", output);
    hbm_json_kv_string(&j, "workload", hbm_trace_name(t));
    hbm_json_kv_u64(&j, "events", events);
    hbm_json_kv_u64(&j, "capacity", c.capacity);
    hbm_json_kv_u64(&j, "peak_live", peak);
    hbm_json_kv_u64(&j, "peak_estimate", est.peak);
    hbm_json_kv_string(&j, "peak_phase", est.peak_phase);
    hbm_json_kv_u64(&j, "static_bytes", est.static_bytes);
    hbm_json_object_end(&j);
    code = cli_print_json("gen llm", &j);
  } else {
    printf("%s\n", hbm_trace_name(t));
    printf("wrote %s: %llu event%s, peak live %s (closed form %s, %s), capacity %s\n", output,
           (unsigned long long)events, events == 1 ? "" : "s", hbm_size_format(peak, a, sizeof a),
           hbm_size_format(est.peak, b, sizeof b), est.peak_phase,
           hbm_size_format(c.capacity, d, sizeof d));
  }
  hbm_trace_free(t);
  return code;
}
