#!/usr/bin/env python3
"""docs/ARCHITECTURE.md against the tree: every folder under src/ and tools/ has a row in the folder table, and
every folder of src/ is in the layer table and includes (outside its tests) only folders of lower layers.
Exit 1 with what differs; run by scripts/style.sh.

    ./scripts/check_architecture.py
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ARCHITECTURE.md"
TEST_FILE = re.compile(r"_(unittest|benchmark|fuzzer)\.cc$")
INCLUDE = re.compile(r'^#include "([a-z_]+)/', re.M)


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


def includes_of(folder):
    found = set()
    for path in sorted((ROOT / "src" / folder).iterdir()):
        if path.suffix in (".h", ".cc") and not TEST_FILE.search(path.name):
            found |= set(INCLUDE.findall(path.read_text(encoding="utf-8")))
    return found - {folder, "lens"}


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
    return out


def main():
    found = problems()
    for line in found:
        print(f"check_architecture: {line}", file=sys.stderr)
    if not found:
        print("check_architecture: docs/ARCHITECTURE.md matches the tree")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
