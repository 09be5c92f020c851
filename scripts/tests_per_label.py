#!/usr/bin/env python3
"""Prints how many tests of a ctest run ran per label, and fails if a promised label ran none.

usage: tests_per_label.py BUILD_DIR JUNIT_XML TITLE LABEL...
  The labels given are the ones the configuration promised (see <build>/lens_promised_labels.txt); a test that
  was skipped (GTEST_SKIP) did not run. Prints one line, then 'TITLE: N passed, N failed, N skipped'.
Exit status: 0 every promised label ran at least one test, 1 one did not.
"""
import collections
import json
import subprocess
import sys
import xml.etree.ElementTree as ElementTree


def labels_by_test(build_dir):
    listing = json.loads(subprocess.run(["ctest", "--test-dir", build_dir, "--show-only=json-v1"], check=True,
                                        capture_output=True, text=True).stdout)
    labels = {}
    for test in listing["tests"]:
        for prop in test.get("properties", []):
            if prop["name"] == "LABELS":
                labels[test["name"]] = prop["value"]
    return labels


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    build_dir, junit, title, promised = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    labels = labels_by_test(build_dir)
    ran, status_counts = collections.Counter(), collections.Counter()
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        status = case.get("status")
        status_counts[status] += 1
        if status == "run":
            ran.update(labels.get(case.get("name"), ["(no label)"]))
    every_label = sorted(set(promised) | set(ran))
    print(f"{title}: " + ", ".join(f"{label} {ran[label]}" for label in every_label))
    print(f"{title}: {status_counts['run']} passed, {status_counts['fail']} failed, "
          f"{status_counts['notrun'] + status_counts['disabled']} skipped")
    empty = [label for label in promised if ran[label] == 0]
    for label in empty:
        print(f"FAIL: the configuration promised tests labelled '{label}', and none ran")
    return 1 if empty else 0


if __name__ == "__main__":
    sys.exit(main())
