/* hbm: command-line front end. Each command is a thin layer over libhbm. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const cli_command commands[] = {
    {"replay", "replay a trace or PyTorch snapshot through allocator policies", cmd_replay},
    {"bench", "benchmarks, side by side in one run (alloc, ...)", cmd_bench},
    {"gen", "generate a workload trace from a model's shapes (gen llm)", cmd_gen},
    {"demo", "the docs/design.md story end to end: generate, replay every policy, report.html", cmd_demo},
    {"import", "convert a PyTorch memory snapshot to an hbm trace", cmd_import},
    {"fidelity", "compare the PyTorch caching model with what a snapshot recorded", cmd_fidelity},
    {"mincap", "smallest capacity at which each policy completes a trace", cmd_mincap},
    {"plan", "plan a static-planning problem (MiniMalloc CSV) with zoned's step planner", cmd_plan},
};
static const int ncommands = (int)(sizeof commands / sizeof commands[0]);

static void usage(FILE *out) {
  fprintf(out,
          "hbm %s: keeps accelerator memory usable through long training runs\n\n"
          "usage: hbm COMMAND [options]   (hbm COMMAND --help, or hbm help COMMAND, for its options)\n\n"
          "commands:\n",
          hbm_version());
  for (int i = 0; i < ncommands; i++) fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(out,
          "\nexit codes: 0 success (a replay whose requests fail included: that is its finding),\n"
          "1 a failed check, a run that could not complete or an output not written,\n"
          "2 bad input or usage\n"
          "policies: %s\n",
          hbm_policy_names());
}

int main(int argc, char **argv) {
  hbm_set_error_handler(cli_library_error, NULL); /* whatever the command */
  cli_catch_sigpipe();
  if (argc < 2) {
    cli_error("expected a COMMAND");
    usage(stderr);
    return CLI_BAD_INPUT;
  }
  if (!strcmp(argv[1], "help") && argc > 2) { /* hbm help CMD [SUB]: CMD [SUB] --help */
    for (int i = 0; i < ncommands; i++)
      if (!strcmp(argv[2], commands[i].name)) {
        char *sub[8];
        int n = 0;
        for (int k = 2; k < argc && n < 6; k++) sub[n++] = argv[k];
        sub[n++] = "--help";
        sub[n] = NULL;
        return cli_finish_stdout(commands[i].run(n, sub));
      }
    cli_error("help: unknown command '%s' (try: hbm --help)", argv[2]);
    return CLI_BAD_INPUT;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return cli_finish_stdout(CLI_OK);
  }
  if (!strcmp(argv[1], "--version")) {
    printf("hbm %s\n", hbm_version());
    return cli_finish_stdout(CLI_OK);
  }
  for (int i = 0; i < ncommands; i++)
    if (!strcmp(argv[1], commands[i].name)) return cli_finish_stdout(commands[i].run(argc - 1, argv + 1));
  cli_error("unknown command '%s' (try: hbm --help)", argv[1]);
  return CLI_BAD_INPUT;
}
