#!/usr/bin/env python3
"""mutate.py: do the tests notice a wrong line? (docs/testing.md)

Makes one small change at a time to a source file (a comparison flipped or
loosened, && and || swapped, a "+ 1" or "- 1" dropped), rebuilds the named
tests, runs them, and records whether any failed ("killed") or all passed
("survived"). A survivor is either a change that cannot matter (an equivalent
mutant) or a gap in the tests; docs/testing.md says which were which.

The file is changed in place and put back at the end, also on an error or
Ctrl-C, so run it in a scratch checkout:

  git worktree add /tmp/mut HEAD
  cmake -S /tmp/mut -B /tmp/mut/b -DCMAKE_BUILD_TYPE=RelWithDebInfo \\
      -DCMAKE_C_FLAGS='-Wno-error=parentheses -Wno-error=format-truncation'
  python3 tools/mutate.py --root /tmp/mut --build /tmp/mut/b \\
      --file src/policy/zoned.c --tests test_zoned_lifetime,test_zoned \\
      --count 50 --seed 7 --out /tmp/zoned.jsonl

Lines in functions whose name holds "check" (the invariant checks) are left
alone; --functions limits the changes to the functions named. A test named
NAME.sh is the CLI script tests/cli/NAME.sh, run against the rebuilt hbm;
fuzz_NAME-corpus is the fuzz target fuzz_NAME over fuzz/corpus/NAME.
Each result is one JSON line: [index, line, function, verdict, old,
new]. The tests run with HBM_TEST_SCALE (default 0.3) and HBM_SEED (default
5) and a time limit each; a test past it counts as killed.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys

# pattern, replacement ("" drops the match)
OPERATORS = [
    (r"(?<![<>=!-])<=(?!=)", "<"),
    (r"(?<![<>-])<(?![<=])", "<="),
    (r"(?<![<>=!])>=", ">"),
    (r"(?<![<>-])>(?![>=])", ">="),
    (r"==", "!="),
    (r"!=", "=="),
    (r"&&", "||"),
    (r"\|\|", "&&"),
    (r" \+ 1\b", ""),
    (r" - 1\b", ""),
]
CALLEE = re.compile(r"(\w+)\s*\(")


def candidates(lines):
    """Every (line number, function, old line, new line) the operators make."""
    out, current, head = [], None, []
    for i, line in enumerate(lines):
        # At file scope, the line that opens a brace starts a function where a
        # name and "(" come first: its signature may wrap over several lines
        # (`head`), and its body's lines are changed. Other braces (struct,
        # initializer) start nothing that is changed.
        if current is None:
            if not line.strip().startswith(("/*", "*", "//")):
                head.append(re.sub(r"/\*.*?\*/", "", line))
            if line.rstrip().endswith("{") and head:
                text = " ".join(head)
                m = CALLEE.search(text) if "=" not in text.split("(")[0] else None
                current = m.group(1) if m else ""
                head = []
            elif line.rstrip().endswith((";", "}")) or not line.strip() or line.startswith("#"):
                head = []
        func = current
        if line.startswith("}"):
            current = None
        text = line.strip()
        if not func or "check" in func or text.startswith(("/*", "*", "//", "#")) or '"' in line:
            continue
        for pattern, replacement in OPERATORS:
            for m in re.finditer(pattern, line):
                out.append((i + 1, func, line, line[: m.start()] + replacement + line[m.end():]))
    return out


# A mutant of the trace writer, run as root by a test that writes to
# /dev/stdout, can rename its temporary file over the link itself; every
# later run would then test a broken machine. Checked and put back after
# each test, and said.
STD_LINKS = {"/dev/stdin": "/proc/self/fd/0", "/dev/stdout": "/proc/self/fd/1",
             "/dev/stderr": "/proc/self/fd/2"}


def restore_std_links():
    broken = []
    for path, target in STD_LINKS.items():
        if os.path.islink(path) and os.readlink(path) == target:
            continue
        broken.append(path)
        try:
            if os.path.lexists(path):
                os.unlink(path)
            os.symlink(target, path)
        except OSError as e:
            sys.exit("mutate.py: %s was replaced and cannot be put back (%s): restore it by hand" % (path, e))
    return broken


def run_tests(args, env):
    for test in args.tests:
        if test.endswith(".sh"):  # a CLI script from tests/cli, run against the rebuilt hbm
            cmd = ["sh", os.path.join(args.root, "tests", "cli", test)]
        elif test.endswith("-corpus"):  # a fuzz target over its regression corpus
            target = test[: -len("-corpus")]
            cmd = [os.path.join(args.build, "fuzz", target),
                   os.path.join(args.root, "fuzz", "corpus", target[len("fuzz_"):])]
        else:
            cmd = [os.path.join(args.build, "tests", test)]
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            return "killed by " + test + " (time limit)"
        finally:
            for path in restore_std_links():
                print("mutate.py: the mutant replaced %s; put back" % path, file=sys.stderr)
        if r.returncode:
            return "killed by " + test
    return "survived"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, help="the scratch checkout whose file is changed")
    ap.add_argument("--build", required=True, help="its CMake build directory")
    ap.add_argument("--file", required=True, help="source file, relative to --root")
    ap.add_argument("--tests", required=True,
                    help="test programs, comma-separated, run in this order (NAME.sh: tests/cli/NAME.sh; "
                         "fuzz_NAME-corpus: fuzz_NAME over fuzz/corpus/NAME)")
    ap.add_argument("--count", type=int, default=50, help="changes to try (a seeded sample; 0: all)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True, help="results, one JSON line each (appended)")
    ap.add_argument("--timeout", type=int, default=240, help="seconds per test")
    ap.add_argument("--scale", default="0.3", help="HBM_TEST_SCALE for the tests")
    ap.add_argument("--test-seed", default="5", help="HBM_SEED for the tests")
    ap.add_argument("--only", help="HBM_HOSTMEM_ONLY for test_hostmem_failure")
    ap.add_argument("--functions", help="change only lines in these functions (comma-separated)")
    args = ap.parse_args()
    args.tests = args.tests.split(",")
    # what to rebuild: the test programs and fuzz targets, and the hbm tool where a CLI script runs it
    targets = [t[: -len("-corpus")] if t.endswith("-corpus") else t for t in args.tests if not t.endswith(".sh")]
    if len(targets) < len(args.tests):
        targets.append("hbm")
    path = os.path.join(args.root, args.file)
    with open(path) as f:
        original = f.read()
    lines = original.split("\n")
    cands = candidates(lines)
    if args.functions:
        cands = [c for c in cands if c[1] in args.functions.split(",")]
        if not cands:
            print(f"mutate.py: {args.file}: no possible change in the functions named ({args.functions})",
                  file=sys.stderr)
            sys.exit(2)
    random.seed(args.seed)
    picked = cands if args.count <= 0 or args.count >= len(cands) else random.sample(cands, args.count)
    print(f"{args.file}: {len(cands)} possible changes, trying {len(picked)} (seed {args.seed})", file=sys.stderr)
    build = os.path.abspath(args.build)
    env = dict(os.environ, HBM_ROOT=args.root, HBM_TEST_SCALE=args.scale, HBM_SEED=args.test_seed,
               HBM=os.path.join(build, "hbm"), HBM_BUILD=build)
    if args.only:
        env["HBM_HOSTMEM_ONLY"] = args.only
    tally = {}
    try:
        with open(args.out, "a") as out:
            for k, (number, func, old, new) in enumerate(picked):
                changed = list(lines)
                changed[number - 1] = new
                with open(path, "w") as f:
                    f.write("\n".join(changed))
                b = subprocess.run(["cmake", "--build", args.build, "-j1", "--target"] + targets,
                                   capture_output=True)
                verdict = "does not build" if b.returncode else run_tests(args, env)
                key = verdict.split(" by ")[0]
                tally[key] = tally.get(key, 0) + 1
                out.write(json.dumps([k, number, func, verdict, old.strip(), new.strip()]) + "\n")
                out.flush()
                print(f"  {k + 1}/{len(picked)} line {number} ({func}): {verdict}", file=sys.stderr)
    finally:
        with open(path, "w") as f:
            f.write(original)
        subprocess.run(["cmake", "--build", args.build, "-j1", "--target"] + targets, capture_output=True)
    print(", ".join(f"{n} {v}" for v, n in sorted(tally.items())), file=sys.stderr)


if __name__ == "__main__":
    main()
