#!/usr/bin/env python3
"""Header hygiene: a C++ file that names a standard facility includes its header itself (or, for a .cc, its own
header does), so that no file compiles only because something else happened to include it first. The table
holds the facilities whose headers arrive by accident most often. Exit 1 with each file and what it lacks; run
by scripts/style.sh.

    ./scripts/check_includes.py          # check
    ./scripts/check_includes.py --fix    # add the missing includes to each file's block of <...> includes
"""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# A use (regular expression) -> the header that declares it.
FACILITIES = [
    (r"std::chrono::", "chrono"),
    (r"std::atomic\b|std::atomic<|std::memory_order", "atomic"),
    (r"std::(mutex|lock_guard|unique_lock|scoped_lock)\b", "mutex"),
    (r"std::condition_variable\b", "condition_variable"),
    (r"std::thread\b|std::this_thread::", "thread"),
    (r"std::(optional|nullopt)\b", "optional"),
    (r"std::function<", "functional"),
    (r"std::(unique_ptr|make_unique|shared_ptr|make_shared)\b", "memory"),
    (r"std::(vector)<", "vector"),
    (r"std::(map|multimap)<", "map"),
    (r"std::(set)<", "set"),
    (r"std::unordered_map<", "unordered_map"),
    (r"std::array<", "array"),
    (r"std::string_view\b", "string_view"),
]
COMMENT = re.compile(r"//.*?$|/\*.*?\*/", re.S | re.M)
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')
INCLUDE = re.compile(r"^#include <([a-z_]+)>", re.M)
LOCAL_INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)


def tracked_cpp_files():
    out = subprocess.run(["git", "ls-files", "*.h", "*.cc"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / line for line in out.stdout.split()]


def code_of(path):
    return STRING.sub('""', COMMENT.sub("", path.read_text(encoding="utf-8")))


def own_header(path):
    """A .cc file's own header: the first quoted include, when its name is the file's."""
    if path.suffix != ".cc":
        return None
    first = LOCAL_INCLUDE.search(path.read_text(encoding="utf-8"))
    if first is None or pathlib.Path(first.group(1)).stem != path.stem.removesuffix("_unittest"):
        return None
    for base in (path.parent, ROOT / "src", ROOT / "include", ROOT):
        candidate = base / first.group(1)
        if candidate.exists():
            return candidate
    return None


def missing_headers(path):
    """The headers of the table that `path` uses and does not include."""
    text = path.read_text(encoding="utf-8")
    included = set(INCLUDE.findall(text))
    header = own_header(path)
    if header is not None:
        included |= set(INCLUDE.findall(header.read_text(encoding="utf-8")))
    code = code_of(path)
    return sorted({needed for use, needed in FACILITIES if needed not in included and re.search(use, code)})


def add_includes(path, headers):
    """Adds `headers` to the first block of <...> includes (a new block after the first include or #pragma)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    system = [i for i, line in enumerate(lines) if INCLUDE.match(line)]
    new = [f"#include <{h}>" for h in headers]
    if system:
        first = system[0]
        last = first
        while last + 1 < len(lines) and lines[last + 1].startswith("#include <"):
            last += 1
        lines[first:last + 1] = sorted(set(lines[first:last + 1] + new))
    else:
        anchor = next(i for i, line in enumerate(lines) if line.startswith(("#pragma once", "#include")))
        lines[anchor + 1:anchor + 1] = [""] + new
    path.write_text("\n".join(lines), encoding="utf-8")


def problems(fix=False):
    out = []
    for path in tracked_cpp_files():
        missing = missing_headers(path)
        if fix and missing:
            add_includes(path, missing)
            continue
        out += [f"{path.relative_to(ROOT)} uses what <{h}> declares without including it" for h in missing]
    return out


def main():
    found = problems(fix="--fix" in sys.argv[1:])
    for line in found:
        print(f"check_includes: {line}", file=sys.stderr)
    if not found:
        print("check_includes: every file includes what it uses of the table")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
