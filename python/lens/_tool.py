"""The console script `lens` of an installed wheel: runs the lens command the wheel holds (lens report, convert,
ctl, hang; docs/TOOLS.md), replacing this process, so that its exit status and signals are the command's own."""

import os
import sys

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "lens")


def main():
    if not os.access(PROGRAM, os.X_OK):
        sys.stderr.write(f"lens: this installation of the Python package has no lens command ({PROGRAM}); a wheel "
                         "holds it, and so does `pip install .` from a checkout with the tool's libraries "
                         "(./scripts/setup-deps.sh)\n")
        return 2
    os.execv(PROGRAM, ["lens", *sys.argv[1:]])
    return 2  # not reached: execv replaces the process or raises


if __name__ == "__main__":
    sys.exit(main())
