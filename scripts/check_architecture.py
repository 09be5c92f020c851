#!/usr/bin/env python3
"""docs/ARCHITECTURE.md against the tree: every folder under src/ and tools/ has a row in the folder table; every
folder of src/ is in the layer table and includes (outside its tests) only folders of lower layers and the public
headers the public header table allows it; and every file of the span path table exists and includes only its own
header and files of rows below its own. Exit 1 with what differs; run by scripts/style.sh.

    ./scripts/check_architecture.py
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ARCHITECTURE.md"
TEST_FILE = re.compile(r"_(unittest|benchmark|fuzzer)\.cc$")
INCLUDE = re.compile(r'^#include "([a-z_]+)/', re.M)
PUBLIC_INCLUDE = re.compile(r'^#include "(lens/[a-z_/]+\.h)"', re.M)
TRACE_INCLUDE = re.compile(r'^#include "trace/([a-z_]+\.h)"', re.M)


def table_rows(text, heading):
    """The rows of the first table after `heading`, as lists of cells."""
    section = text.split(heading, 1)[1]
    rows = []
    for line in section.splitlines():
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            break
    return rows[2:]  # past the header and its rule


def folders_in_table(text):
    return {m for row in table_rows(text, "## Folders") for m in re.findall(r"`([a-z_/]+/)`", row[0])}


def layers(text):
    """Folder -> layer number, from the layer table."""
    out = {}
    for row in table_rows(text, "## The include graph"):
        for folder in re.findall(r"`([a-z_]+)`", row[1]):
            out[folder] = int(row[0])
    return out


def library_files(folder):
    """The .h and .cc files of src/<folder>/, outside its tests."""
    return [path for path in sorted((ROOT / "src" / folder).iterdir())
            if path.suffix in (".h", ".cc") and not TEST_FILE.search(path.name)]


def includes_of(folder):
    found = set()
    for path in library_files(folder):
        found |= set(INCLUDE.findall(path.read_text(encoding="utf-8")))
    return found - {folder, "lens"}


def public_header_problems(text):
    """Folders that include a public header their row of the public header table does not name."""
    out = []
    for row in table_rows(text, "A public header can hide an include"):
        folder = re.findall(r"`([a-z_]+)`", row[0])[0]
        allowed = set(re.findall(r"`(lens/[a-z_/]+\.h)`", row[1]))
        for path in library_files(folder):
            for header in sorted(set(PUBLIC_INCLUDE.findall(path.read_text(encoding="utf-8"))) - allowed):
                out.append(f"src/{folder}/{path.name} includes {header}, which docs/ARCHITECTURE.md's public header "
                           f"table does not allow {folder}/")
    return out


def span_path_rows(text):
    """File of src/trace/ -> its row in the span path table."""
    out = {}
    for row in table_rows(text, "## The span path, file by file"):
        for name in re.findall(r"`([a-z_]+\.(?:h|cc))`", row[1]):
            out[name] = int(row[0])
    return out


def span_path_problems(text):
    rows = span_path_rows(text)
    if not rows:
        return ["docs/ARCHITECTURE.md has no span path table"]
    out = []
    for name, row in sorted(rows.items()):
        path = ROOT / "src" / "trace" / name
        if not path.is_file():
            out.append(f"src/trace/{name}, in the span path table of docs/ARCHITECTURE.md, is not in the tree")
            continue
        for included in TRACE_INCLUDE.findall(path.read_text(encoding="utf-8")):
            own_header = included == path.with_suffix(".h").name
            if included in rows and rows[included] <= row and not own_header:
                out.append(f"src/trace/{name} (row {row}) includes trace/{included} (row {rows[included]}): "
                           "a file of the span path includes only its own header and files of rows below its own")
    return out


def problems():
    text = DOC.read_text(encoding="utf-8")
    listed = folders_in_table(text)
    out = []
    for top in ("src", "tools"):
        for folder in sorted(p for p in (ROOT / top).iterdir() if p.is_dir()):
            name = f"{top}/{folder.name}/"
            if name not in listed:
                out.append(f"{name} has no row in the folder table of docs/ARCHITECTURE.md")
    layer = layers(text)
    for folder in sorted(p.name for p in (ROOT / "src").iterdir() if p.is_dir()):
        if folder not in layer:
            out.append(f"src/{folder}/ is in no layer of docs/ARCHITECTURE.md's include graph table")
            continue
        for other in sorted(includes_of(folder)):
            if other in layer and layer[other] >= layer[folder]:
                out.append(f"src/{folder}/ (layer {layer[folder]}) includes {other}/ (layer {layer[other]}): "
                           "an include runs only to a lower layer")
    return out + public_header_problems(text) + span_path_problems(text)


def main():
    found = problems()
    for line in found:
        print(f"check_architecture: {line}", file=sys.stderr)
    if not found:
        print("check_architecture: docs/ARCHITECTURE.md matches the tree")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
