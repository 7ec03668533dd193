/* cli.h: shared pieces of the hbm command-line tool, a thin layer over the
 * library. Exit codes (docs/design.md §4): 0 success, 1 a failed check, 2 bad input
 * or usage. Each command lives in cli/cmd_<name>.c (or bench/ for benchmarks). */
#ifndef HBM_CLI_H
#define HBM_CLI_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#include "hbm.h"

enum { CLI_OK = 0, CLI_FAILED = 1, CLI_BAD_INPUT = 2 };

typedef struct cli_command {
  const char *name;
  const char *summary;
  int (*run)(int argc, char **argv); /* argv[0] is the command name */
} cli_command;

/* Commands (one per file). */
int cmd_replay(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_gen(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_fidelity(int argc, char **argv);
int cmd_mincap(int argc, char **argv);
int cmd_plan(int argc, char **argv);

/* The library's error handler in hbm: what it reports (double free, bad
 * policy settings, failed checks) reaches the user as "hbm: <message>". */
void cli_library_error(int err, const char *message, void *arg);
/* Prints "hbm: <message>" to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* After getopt_long returned `c`, '?' or ':' (an optstring that starts with
 * ':', and opterr = 0, so getopt itself says nothing): says "hbm: COMMAND:
 * unknown option 'X'" or "hbm: COMMAND: X needs a value", each with "(try: hbm
 * COMMAND --help)", and returns CLI_BAD_INPUT; after CLI_OPT_TWICE it returns
 * CLI_BAD_INPUT alone (cli_getopt said why). */
int cli_option_error(const char *command, char *const argv[], int c);

/* The options with a value a command has seen (cli_getopt's memory), and
 * the command's name where its messages start with it ("bench sweep"), or NULL. */
typedef struct cli_seen {
  const char *command;
  int n;
  struct {
    int c; /* the option's entry in the option table */
    const char *value;
  } one[64];
} cli_seen;
#define CLI_OPT_TWICE (-2)
/* getopt_long, refusing an option with a value given a second time ("--policy
 * given twice ('caching', then 'zoned'): give it once", after "COMMAND: " where
 * seen->command is set), as which one was meant is a guess: it says so and
 * returns CLI_OPT_TWICE. `repeatable` lists
 * the long names that may come more than once (e.g. "alloc-conf"), or NULL;
 * flags without a value may repeat. A value that is a separate argument
 * starting with "--" is the next option: ':' (needs a value) is returned, as
 * getopt does for a value missing at the end; --opt=--x still gives one.
 * `seen` starts zeroed, its command set where messages name it. */
int cli_getopt(int argc, char *const argv[], const char *optstring, const struct option *opts,
               const char *repeatable, cli_seen *seen);
/* Prints a diag as "hbm: file:line: message" (or file: byte N:) to stderr. An
 * empty diag falls back to `path` and to hbm_strerror(err), so a failure is
 * never printed without words. */
void cli_diag(const hbm_diag *diag, int err, const char *path);
/* Maps a library error to an exit code: bad input (EPARSE/EINVAL/EIO/
 * EUNSUPPORTED) -> 2; others, out of host memory (EHOSTMEM) among them -> 1:
 * the input may be fine, the machine could not hold it. */
int cli_exit_code(int err);
/* A policy's run in a comparison (replay, mincap) failed with err: says so,
 * and returns 1 where the comparison stops (bad input, the trace's or the
 * settings' fault, which every policy would meet: *exit_code 2), 0 where the
 * other policies still run (a comparison loses one row, not all: 1). */
int cli_policy_failed(const char *command, const char *path, const char *policy, int err, int *exit_code);
/* Says why an output file could not be written (the diag, else "PATH: cannot
 * write: ...") and returns the exit code: refusing the path (EINVAL, e.g. an
 * input file) -> 2; failing to write it (EIO: cannot create, a full disk,
 * cannot replace) is no fault of the input -> 1. */
int cli_write_failed(const hbm_diag *diag, int err, const char *path);
/* Parses a size argument; on error prints "hbm: <what>: ..." and returns 0. */
int cli_parse_size(const char *what, const char *text, uint64_t *out);
/* A device's capacity: a size from 2 MiB (one page at the default granule)
 * to 1 PiB, the most a trace or device takes, rounded down to whole 2 MiB
 * granules (what the device gives); on error prints why, returns 0. */
int cli_parse_capacity(const char *what, const char *text, uint64_t *out);
/* Says "hbm: <opt>: unknown preset '<name>' (known: A, B, C; hbm gen llm
 * --list-presets describes them)", `opt` naming the option as the command's
 * messages do ("bench gen: --preset"). */
void cli_unknown_preset(const char *opt, const char *name);
/* A count min..max for option `opt`, as hbm_count_parse reads it ("20",
 * "7B", "16Mi", "1e6"); on error prints "hbm: <opt>: expected a whole number
 * MIN..MAX, got '<text>'" and returns 0. */
int cli_parse_count(const char *opt, const char *text, uint64_t min, uint64_t max, uint64_t *out);
/* The device of a multi-device snapshot, 0..1024, for option `opt`
 * (--snapshot-device, or import's and fidelity's --device) into *device,
 * which is -1 until given; a second one is refused. On error prints why and
 * returns 0. */
int cli_parse_snapshot_device(const char *opt, const char *text, int *device);
/* Host memory this process can still take, in bytes: MemAvailable from
 * /proc/meminfo (else physical pages x page size), lowered to what a cgroup
 * memory limit leaves; 0 when none of these can be read. */
uint64_t cli_host_memory(void);
/* Before work that holds about `need` bytes of host memory: CLI_OK, or
 * CLI_BAD_INPUT after saying "hbm: WHAT needs about X of host memory, more
 * than the Y available; REMEDY" (refused up front, not left to the OOM killer). */
int cli_check_host_memory(const char *what, uint64_t need, const char *remedy);
/* Before generating cfg's trace into memory, `bytes_per_event` host bytes per
 * event: CLI_OK, or CLI_BAD_INPUT after saying what the steps need, what is
 * available and how many steps fit. `command` names the command ("demo"). A
 * configuration the generator refuses passes: the run says why. */
struct hbm_gen_llm_config;
int cli_check_trace_memory(const char *command, const struct hbm_gen_llm_config *cfg, uint64_t bytes_per_event);
/* 1 if stderr is a terminal (progress bars only then). */
int cli_is_tty(void);
/* Progress bar on stderr (only when a terminal): label, done/total. */
void cli_progress(const char *label, uint64_t done, uint64_t total);
void cli_progress_end(void);
/* cli_progress as an hbm_progress_fn: the label is its argument. */
void cli_progress_fn(uint64_t done, uint64_t total, void *label);
/* Prints a finished JSON report on stdout and releases it. Returns CLI_OK,
 * or CLI_FAILED after saying so when formatting ran out of host memory (the
 * report would be cut short). `command` names the command in the message. */
struct hbm_json;
int cli_print_json(const char *command, struct hbm_json *j);
/* Writes "oom": the replay's first failure (event, step, request, free_total,
 * largest_free, fragmentation, cause), or null: one shape in every report. */
void cli_json_oom(struct hbm_json *j, const hbm_replay_result *r);
/* Writes "efficiency": peak live / peak reserved, or null where the run reserved
 * nothing (the text's "-": hbm_report_efficiency_text). */
void cli_json_efficiency(struct hbm_json *j, const hbm_replay_result *r);
/* Opens one policy's object in a report's "policies": policy, alloc_conf (the
 * policy's --conf, or null) and error (null, or the error that stopped the
 * policy). Returns 1 when there was an error: the object is then closed, with
 * no figures, and the caller goes on to the next policy. */
int cli_json_policy_begin(struct hbm_json *j, const char *policy, const char *conf, int error);
/* A reader that stops early (| head) makes writes fail with EPIPE instead of
 * ending the process by SIGPIPE; cli_finish_stdout then says so once. */
void cli_catch_sigpipe(void);
/* At exit: CLI_FAILED after saying why if stdout could not be written
 * (a full disk, a closed pipe), else `code`. */
int cli_finish_stdout(int code);
/* Writes text to path atomically (temp + rename); refuses paths in `inputs`
 * (exit 2). Returns the exit code: CLI_FAILED when the file could not be
 * written, after saying why. */
int cli_write_output(const char *path, const char *text, size_t len, const char *const *inputs,
                     int ninputs);
/* Before any work: refuses an output path that names an input (exit 2) or a
 * directory (exit 1, "cannot write: Is a directory"), as writing it would. */
int cli_check_output(const char *path, const char *const *inputs, int ninputs);
/* An output path option's value (-o, --html): `arg`, or NULL after saying
 * "hbm: OPT: expected a file path, got an empty one" (exit 2 then), checked
 * before any work is done. */
const char *cli_output_path(const char *opt, const char *arg);
/* Once OUTPUT is written: where it was standard output itself (-o /dev/stdout,
 * /dev/fd/1, the pipe stdout is), what the command prints after (its summary,
 * text or JSON) goes to standard error, so a reader of the output gets it alone. */
void cli_summary_after_output(const char *output);
/* Splits "a,b,c" (or "all": every policy this build knows) into names.
 * Returns the count; 0 for an empty (",a", "a,", "a,,b"), unknown or repeated
 * name, or more than `max`, after saying what --policy expects. */
int cli_split_policies(const char *list, char names[][32], int max);
/* The one input file of `command` (argv[optind]), or NULL after saying what
 * was expected (`what`: e.g. "TRACE or SNAPSHOT file") and printing usage. */
const char *cli_one_input(const char *command, const char *what, int argc, char **argv,
                          void (*usage)(FILE *));
/* --alloc-conf values, repeatable: "SETTINGS" for every policy, or
 * "POLICY=SETTINGS" for that policy only (e.g. zoned=moves:on beside
 * caching=expandable_segments:True, or caching and zoned in one run with
 * settings only zoned knows). */
typedef struct cli_confs {
  const char *all;
  int n;
  struct { char policy[32]; const char *conf; } one[16];
} cli_confs;
/* Adds one --alloc-conf value; on error prints why and returns 0. */
int cli_conf_add(cli_confs *c, const char *arg);
/* The settings for `policy`: its own, else the common ones, else NULL. */
const char *cli_conf_for(const cli_confs *c, const char *policy);
/* Under a table's row: the settings a policy ran with, where it was given
 * any (the JSON's alloc_conf), so its figures do not read as the defaults'. */
void cli_print_settings(const char *conf);
/* Reads a whole input file (at most 16 GiB): CLI_OK, else the exit code
 * after printing the diagnostic. *data is malloc'd and NUL-terminated. */
int cli_read_input(const char *path, char **data, size_t *len);
/* Loads a trace or snapshot (of snapshot device `device`; -1: the first with
 * trace entries); on error prints the diagnostic (file, line or byte offset)
 * and returns the exit code, else CLI_OK. */
int cli_load_trace(const char *path, int device, hbm_trace **out);
/* On stderr, where a snapshot had private memory pools: what a replay of it
 * cannot follow (hbm_trace_private_pools). */
void cli_note_private_pools(const char *path, const hbm_trace *t);
/* Before any work: refuses POLICY=SETTINGS for a policy not in `names` and
 * common settings that every policy in `names` replaces with its own, and
 * creates each policy with its settings over the device (`device`, or a sim
 * device where the trace will name the capacity), so that a bad device or
 * setting is said once, in one line, before the first replay: CLI_OK, else
 * the exit code.
 * `caps`, if not NULL, receives the capabilities of the device it opened. */
int cli_check_policies(const char *device, char names[][32], int n, const cli_confs *confs,
                       hbm_device_caps *caps);
/* Human size. */
const char *cli_size(uint64_t bytes, char buf[32]);
/* A fragmentation ratio with `decimals` places; "inf" for the API's 1e9
 * (memory free, but no block of it usable). */
const char *cli_frag(double ratio, int decimals, char buf[32]);

#endif
