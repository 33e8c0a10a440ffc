#!/usr/bin/env python3
"""Every test the project's text cites exists.

The docs (docs/upstream-differences.md above all: each difference from
upstream names its test) and the code's comments cite tests by name. A
renamed or removed test leaves such a citation pointing at nothing; this
check finds it.

Cited as:
  - a GoogleTest test, `Suite.Name`, a prefix `Suite.Name*`, or a whole
    suite `Suite.*`, both parts CamelCase. In Markdown (in backticks) the
    suite must exist and so must the test; in code comments, where CamelCase
    pairs mean other things too, only citations of existing suites are
    checked;
  - a test added by CMake, `area.name` in backticks in Markdown (area one of
    those the suite's tests are named under: model, cli, hpc, ...), unless
    it is a key of config/default_config.yml (`telemetry.address`).

Every row of docs/upstream-differences.md's tables cites at least one test
in its last column (each difference from upstream is recorded with a test).

Known tests: the TEST/TEST_F/TEST_P macros under tests/, and the names
`ctest -N` lists in the build directory (--build-dir), which hold the tests
CMake adds itself; without --build-dir, `area.name` citations are not
checked.

  check_cited_tests.py --root DIR [--build-dir DIR [--ctest CTEST]] [--extra FILE...]

Exit 0 when every citation resolves, 1 with one line per citation that
does not (file:line: what), 2 on bad arguments.
"""
import argparse
import pathlib
import re
import subprocess
import sys

GTEST_MACRO = re.compile(r"^\s*TEST(?:_F|_P)?\(\s*(\w+)\s*,\s*(\w+)\s*\)", re.M)
CAMEL = r"[A-Z][A-Za-z0-9_]*[a-z][A-Za-z0-9_]*"  # CamelCase, lowercase somewhere: not ERA5 or SHUFFLE
SUITE = r"[A-Z][A-Za-z0-9]+"
GTEST_IN_MARKDOWN = re.compile(r"`(" + SUITE + r")\.(" + CAMEL + r"\*?|\*)`")
GTEST_IN_CODE = re.compile(r"\b(" + SUITE + r")\.(" + CAMEL + r"\*?|\*)")
CTEST_IN_MARKDOWN = re.compile(r"`([a-z]+)\.([a-z0-9_]+(?:\.[a-z0-9_]+)*)`")
FILE_SUFFIXES = {"md", "yml", "yaml", "json", "jsonl", "sh", "py", "cpp", "h", "txt", "png", "log", "safetensors",
                 "chkpt", "zarr", "npy", "tmpl", "conf", "in", "cmake"}
CODE_GLOBS = ["src/**/*.cpp", "src/**/*.h", "include/**/*.h", "bench/**/*.cpp", "bench/**/*.h", "tests/**/*.cpp",
              "tests/**/*.h"]
MARKDOWN_GLOBS = ["*.md", "docs/**/*.md", "hpc/**/*.md", "monitoring/**/*.md", "deploy/**/*.md", "config/**/*.md"]


def known_tests(root, build_dir, ctest):
    gtests, ctests = set(), set()
    for f in sorted(root.glob("tests/**/*.cpp")):
        for m in GTEST_MACRO.finditer(f.read_text(errors="replace")):
            gtests.add(f"{m.group(1)}.{m.group(2)}")
    if build_dir:
        try:
            out = subprocess.run([ctest, "-N"], cwd=build_dir, capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"check_cited_tests: '{ctest} -N' in {build_dir} failed: {e}", file=sys.stderr)
            sys.exit(2)
        for m in re.finditer(r"Test +#\d+: (\S+)", out):
            name = m.group(1)
            (ctests if re.match(r"[a-z]", name) else gtests).add(name.split("/")[-2] if "/" in name else name)
    return gtests, ctests


def config_keys(root):
    """section.key of config/default_config.yml's two-level keys."""
    keys, section = set(), None
    path = root / "config" / "default_config.yml"
    for line in path.read_text().split("\n") if path.exists() else []:
        top = re.match(r"([a-z_0-9]+):", line)
        if top:
            section = top.group(1)
        nested = re.match(r"  ([a-z_0-9]+):", line)
        if nested and section:
            keys.add(f"{section}.{nested.group(1)}")
    return keys


def comment_lines(text):
    """(line number, the line from its // on) of each line with a // comment."""
    for n, line in enumerate(text.split("\n"), 1):
        i = line.find("//")
        if i >= 0:
            yield n, line[i:]


def check_gtest(suite, name, gtests, suites, strict):
    if suite not in suites:
        return f"no test suite {suite}" if strict else None
    if name == "*":
        return None
    if name.endswith("*"):
        prefix = f"{suite}.{name[:-1]}"
        return None if any(t.startswith(prefix) for t in gtests) else f"no test of {suite} starts with {name[:-1]}"
    return None if f"{suite}.{name}" in gtests else f"no test {suite}.{name}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, type=pathlib.Path)
    ap.add_argument("--build-dir", type=pathlib.Path)
    ap.add_argument("--ctest", default="ctest", help="the ctest that lists --build-dir's tests")
    ap.add_argument("--extra", nargs="*", default=[], type=pathlib.Path, help="more Markdown files to check")
    args = ap.parse_args()
    if not (args.root / "tests").is_dir():
        print(f"check_cited_tests: {args.root} has no tests/ folder", file=sys.stderr)
        return 2
    gtests, ctests = known_tests(args.root, args.build_dir, args.ctest)
    suites = {t.split(".")[0] for t in gtests}
    areas = {t.split(".")[0] for t in ctests}
    keys = config_keys(args.root)
    problems, cited = [], 0

    markdown = sorted({p for g in MARKDOWN_GLOBS for p in args.root.glob(g)}) + list(args.extra)
    for f in markdown:
        for n, line in enumerate(f.read_text(errors="replace").split("\n"), 1):
            for m in GTEST_IN_MARKDOWN.finditer(line):
                cited += 1
                why = check_gtest(m.group(1), m.group(2), gtests, suites, strict=True)
                if why:
                    problems.append(f"{f}:{n}: `{m.group(1)}.{m.group(2)}`: {why}")
            if not args.build_dir:
                continue
            for m in CTEST_IN_MARKDOWN.finditer(line):
                area, rest = m.group(1), m.group(2)
                if area not in areas or rest.split(".")[-1] in FILE_SUFFIXES or f"{area}.{rest}" in keys:
                    continue
                cited += 1
                if f"{area}.{rest}" not in ctests:
                    problems.append(f"{f}:{n}: `{area}.{rest}`: ctest -N lists no such test")
    differences = args.root / "docs" / "upstream-differences.md"
    if differences.exists():
        for n, line in enumerate(differences.read_text().split("\n"), 1):
            cells = line.strip().strip("|").split("|")
            if not line.startswith("|") or set(line) <= set("|-: ") or cells[-1].strip() == "test":
                continue
            if not (GTEST_IN_MARKDOWN.search(cells[-1]) or CTEST_IN_MARKDOWN.search(cells[-1])):
                problems.append(f"{differences}:{n}: a difference from upstream without a test in its last column")
    for f in sorted({p for g in CODE_GLOBS for p in args.root.glob(g)}):
        for n, comment in comment_lines(f.read_text(errors="replace")):
            for m in GTEST_IN_CODE.finditer(comment):
                if m.group(1) not in suites:
                    continue
                cited += 1
                why = check_gtest(m.group(1), m.group(2), gtests, suites, strict=False)
                if why:
                    problems.append(f"{f}:{n}: {m.group(1)}.{m.group(2)}: {why}")
    for p in problems:
        print(p)
    print(f"check_cited_tests: {cited} citations of {len(gtests)} GoogleTest and {len(ctests)} CMake tests, "
          f"{len(problems)} unresolved", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
