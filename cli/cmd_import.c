/* hbm import: a PyTorch memory snapshot as an hbm text trace. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "report/json.h"
#include "trace/pickle.h"
#include "trace/snapshot.h"
#include "trace/trace.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: hbm import SNAPSHOT.pickle -o TRACE [options]\n"
          "\n"
          "Reads a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot, no Python\n"
          "needed) and writes the allocation trace of one device as an hbm text trace:\n"
          "allocations with the address PyTorch gave them (@ADDR), completed frees,\n"
          "streams, segment allocations and releases, step boundaries (after each\n"
          "Optimizer.step annotation), the allocator settings (conf), and the allocator\n"
          "state when recording began (init-seg / init-blk). docs/snapshot-import.md\n"
          "describes how that state is reconstructed.\n"
          "\n"
          "options:\n"
          "  -o, --output TRACE   where to write (required; written atomically, never over the input)\n"
          "  --device N           which device of a multi-device snapshot (default: the first\n"
          "                       with trace entries, else the first with segments); also\n"
          "                       --snapshot-device N, as in replay\n"
          "  -q, --quiet          no summary (text or JSON)\n"
          "  --json               the summary as JSON: input, output, device, alloc_events, refused, frees,\n"
          "                       segment_allocs, segment_frees, steps, init_segments,\n"
          "                       init_segment_bytes, init_live_blocks, peak_live, private_pool_segments,\n"
          "                       private_pool_bytes, conf\n"
          "  -h, --help           this text\n"
          "\n"
          "exit: 0 written, 1 could not write TRACE (or standard output), 2 bad input or\n"
          "usage (TRACE the same file as the input included)\n");
}


int cmd_import(int argc, char **argv) {
  static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                       {"device", required_argument, 0, 'd'}, {"snapshot-device", required_argument, 0, 'D'},
                                       {"quiet", no_argument, 0, 'q'},
                                       {"json", no_argument, 0, 'j'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  const char *output = NULL;
  int quiet = 0, json = 0, c;
  hbm_snapshot_options so = {.device = -1};
  optind = 1;
  opterr = 0; /* cli_option_error says what is wrong */
  cli_seen seen = {0};
  while ((c = cli_getopt(argc, argv, ":o:qh", opts, NULL, &seen)) != -1) {
    switch (c) {
      case 'o':
        if (!(output = cli_output_path("-o", optarg))) return CLI_BAD_INPUT;
        break;
      case 'd':
      case 'D':
        if (!cli_parse_snapshot_device(c == 'd' ? "--device" : "--snapshot-device", optarg, &so.device)) return CLI_BAD_INPUT;
        break;
      case 'q': quiet = 1; break;
      case 'j': json = 1; break;
      case 'h': usage(stdout); return CLI_OK;
      default: return cli_option_error("import", argv, c);
    }
  }
  if (!output) {
    cli_error("import: -o TRACE is required");
    usage(stderr);
    return CLI_BAD_INPUT;
  }
  const char *path = cli_one_input("import", "SNAPSHOT.pickle", argc, argv, usage);
  if (!path) return CLI_BAD_INPUT;
  char *data;
  size_t len;
  int rc = cli_read_input(path, &data, &len);
  if (rc != CLI_OK) return rc;
  if ((rc = cli_check_output(output, &path, 1)) != CLI_OK) {
    free(data);
    return rc;
  }
  hbm_diag diag = {0};
  const char *wrapped = hbm_pickle_wrapped((const uint8_t *)data, len);
  if (wrapped) {
    free(data);
    cli_error("%s: byte 0: %s", path, wrapped);
    return CLI_BAD_INPUT;
  }
  if (!hbm_pickle_sniff((const uint8_t *)data, len)) {
    free(data);
    cli_error("%s: byte 0: not a pickle of protocol 2 to 5 (a PyTorch snapshot starts with the PROTO opcode, 0x80); "
              "an hbm text trace needs no import", path);
    return CLI_BAD_INPUT;
  }
  hbm_trace *t = NULL;
  rc = hbm_snapshot_import((const uint8_t *)data, len, path, &so, &t, &diag);
  free(data);
  if (rc != HBM_OK) {
    cli_diag(&diag, rc, path);
    return cli_exit_code(rc);
  }
  hbm_trace_set_source(t, path); /* so the writer refuses to overwrite it */
  memset(&diag, 0, sizeof diag);
  rc = hbm_trace_save(t, output, &diag);
  if (rc != HBM_OK) {
    hbm_trace_free(t);
    return cli_write_failed(&diag, rc, output);
  }
  cli_summary_after_output(output);
  cli_note_private_pools(path, t);
  int code = CLI_OK;
  if (!quiet) {
    uint64_t allocs = 0, refused = 0, frees = 0, segs = 0, segfrees = 0, steps = 0, live = 0, init_bytes = 0;
    for (uint64_t i = 0; i < t->nevents; i++) {
      const hbm_event *e = &t->events[i];
      if (e->kind == HBM_EV_ALLOC && (e->flags & HBM_EV_REFUSED)) { /* with the free that follows it */
        refused++;
        if (i + 1 < t->nevents && t->events[i + 1].kind == HBM_EV_FREE && t->events[i + 1].id == e->id) i++;
        continue;
      }
      switch (e->kind) {
        case HBM_EV_ALLOC: allocs++; break;
        case HBM_EV_FREE: frees++; break;
        case HBM_EV_SEG_ALLOC: segs++; break;
        case HBM_EV_SEG_FREE: segfrees++; break;
        case HBM_EV_STEP: steps++; break;
        default: break;
      }
    }
    for (uint32_t i = 0; i < t->ninit_blocks; i++) live += t->init_blocks[i].id != HBM_NO_ID;
    for (uint32_t i = 0; i < t->ninit_segments; i++) init_bytes += t->init_segments[i].size;
    if (json) {
      hbm_json j;
      hbm_json_init(&j);
      hbm_json_object_begin(&j);
      hbm_json_kv_string(&j, "input", path);
      hbm_json_kv_string(&j, "output", output);
      hbm_json_kv_u64(&j, "device", (uint64_t)t->snapshot_device);
      hbm_json_kv_u64(&j, "alloc_events", allocs + refused); /* requests, refused ones too, as replay counts */
      hbm_json_kv_u64(&j, "refused", refused);
      hbm_json_kv_u64(&j, "frees", frees);
      hbm_json_kv_u64(&j, "segment_allocs", segs);
      hbm_json_kv_u64(&j, "segment_frees", segfrees);
      hbm_json_kv_u64(&j, "steps", steps);
      hbm_json_kv_u64(&j, "init_segments", t->ninit_segments);
      hbm_json_kv_u64(&j, "init_segment_bytes", init_bytes);
      hbm_json_kv_u64(&j, "init_live_blocks", live);
      hbm_json_kv_u64(&j, "peak_live", hbm_trace_peak_live(t));
      uint64_t private_bytes;
      hbm_json_kv_u64(&j, "private_pool_segments", hbm_trace_private_pools(t, &private_bytes));
      hbm_json_kv_u64(&j, "private_pool_bytes", private_bytes);
      hbm_json_kv_string(&j, "conf", t->conf ? t->conf : "");
      hbm_json_object_end(&j);
      code = cli_print_json("import", &j);
      hbm_trace_free(t);
      return code;
    }
    char a[32], b[32];
    char refusals[96] = "";
    if (refused)
      snprintf(refusals, sizeof refusals, ", %llu request%s PyTorch refused (out of memory)", (unsigned long long)refused,
               refused == 1 ? "" : "s");
    printf("%s (device %d) -> %s: %llu allocation%s%s, %llu free%s, %llu segment allocation%s, %llu release%s, %llu step%s\n",
           path, (int)t->snapshot_device, output, (unsigned long long)allocs, allocs == 1 ? "" : "s", refusals,
           (unsigned long long)frees,
           frees == 1 ? "" : "s", (unsigned long long)segs, segs == 1 ? "" : "s", (unsigned long long)segfrees,
           segfrees == 1 ? "" : "s", (unsigned long long)steps, steps == 1 ? "" : "s");
    printf("starting state: %u segment%s (%s), %llu block%s alive; peak live %s; conf '%s'\n",
           t->ninit_segments, t->ninit_segments == 1 ? "" : "s", cli_size(init_bytes, a), (unsigned long long)live,
           live == 1 ? "" : "s",
           cli_size(hbm_trace_peak_live(t), b), t->conf ? t->conf : "");
  }
  hbm_trace_free(t);
  return code;
}
