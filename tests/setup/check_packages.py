#!/usr/bin/env python3
"""Checks that every file a build read comes from a Debian package that scripts/setup-deps.sh installs.

A machine that happens to have more installed cannot fool it: it takes what the build actually read (the headers
in ninja's dependency log, the libraries on the link lines and those the built programs load, the programs CMake
found), maps each file to the package that owns it in dpkg's database (what `dpkg -S` reads), and fails naming
every package that is neither named in setup-deps.sh nor pulled in by the Depends:/Pre-Depends: closure of the
named ones (never Recommends:, which --no-install-recommends leaves out) and of the base system (Essential: yes
and Priority: required). The closure is taken over the installed packages' own control data, so it needs no
apt lists and answers for exactly the versions that were built against.

usage: check_packages.py BUILD_DIR SOURCE_DIR [--drop PACKAGE]...
  --drop PACKAGE   check as if setup-deps.sh did not name PACKAGE (the check's own test: it must then fail)
Exit status: 0 all covered, 1 packages missing (named on stdout), 2 the check could not run.
"""
import argparse
import glob
import os
import re
import subprocess
import sys


def run(args, **kwargs):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kwargs).stdout


def listed_packages(source_dir):
    return run([os.path.join(source_dir, "scripts/setup-deps.sh"), "--list"]).split()


def headers_read(build_dir):
    """Every file in ninja's dependency log: the headers each object was compiled from."""
    return {line.strip() for line in run(["ninja", "-C", build_dir, "-t", "deps"]).splitlines()
            if line.startswith((" ", "\t")) and line.strip()}


LIBRARY = re.compile(r"\.(a|so)(\.[0-9.]+)?$")


def libraries_linked(build_dir):
    """Absolute library paths on the link lines, and what the built programs and libraries load (ldd)."""
    found = set()
    for command in run(["ninja", "-C", build_dir, "-t", "commands"]).splitlines():
        found.update(t for t in command.split() if t.startswith("/") and LIBRARY.search(t))
    for path in built_elf_files(build_dir):
        try:
            found.update(re.findall(r"=> (/\S+)", run(["ldd", path])))
        except subprocess.CalledProcessError:
            pass  # a static archive or an object ldd cannot read
    return found


def built_elf_files(build_dir):
    for root, _, files in os.walk(build_dir):
        for name in files:
            path = os.path.join(root, name)
            if os.path.islink(path) or not (os.access(path, os.X_OK) or ".so" in name):
                continue
            with open(path, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    yield path


def programs_found(build_dir):
    """The programs CMake found and cached (compilers, binutils, node, prometheus, openssl, ...)."""
    found = set()
    with open(os.path.join(build_dir, "CMakeCache.txt")) as cache:
        for line in cache:
            match = re.match(r"[A-Za-z0-9_]+:FILEPATH=(/.+)$", line.strip())
            if match and os.path.isfile(match.group(1)):
                found.add(match.group(1))
    return found


def dpkg_owners():
    """path -> package, from the same file lists that `dpkg -S` reads."""
    owners = {}
    for listing in glob.glob("/var/lib/dpkg/info/*.list"):
        package = os.path.basename(listing)[:-len(".list")].split(":")[0]
        with open(listing, errors="replace") as f:
            for path in f:
                owners.setdefault(path.rstrip("\n"), package)
    return owners


MERGED = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def owner_of(path, owners):
    """The owning package of a path as read, else of where it leads (merged /usr and symlinks)."""
    candidates = [os.path.normpath(path), os.path.realpath(path)]
    for p in list(candidates):
        if p.startswith("/usr/") and p[4:].startswith(MERGED):
            candidates.append(p[4:])
        elif p.startswith(MERGED):
            candidates.append("/usr" + p)
    for p in candidates:
        if p in owners:
            return owners[p]
    return None


def installed_packages():
    fields = "${Package}\t${Status}\t${Essential}\t${Priority}\t${Pre-Depends}, ${Depends}\t${Provides}\n"
    installed, base, providers = {}, set(), {}
    for line in run(["dpkg-query", "-W", "-f=" + fields]).splitlines():
        name, status, essential, priority, depends, provides = line.split("\t")
        if not status.endswith(" installed"):
            continue
        installed[name] = depends
        if essential == "yes" or priority == "required":
            base.add(name)
        for virtual in provides.split(","):
            if virtual.strip():
                providers.setdefault(bare_name(virtual), set()).add(name)
    return installed, base, providers


def bare_name(relation):
    return relation.strip().split()[0].split(":")[0]


def depends_closure(roots, installed, providers):
    """Every installed package reached from roots through Pre-Depends and Depends (first satisfied alternative)."""
    seen, todo = set(), [r for r in roots if r in installed]
    while todo:
        package = todo.pop()
        if package in seen:
            continue
        seen.add(package)
        for group in installed[package].split(","):
            for alternative in filter(None, (a.strip() for a in group.split("|"))):
                name = bare_name(alternative)
                satisfied = ({name} if name in installed else set()) | providers.get(name, set())
                if satisfied:
                    todo.extend(satisfied)
                    break
    return seen


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("build_dir")
    parser.add_argument("source_dir")
    parser.add_argument("--drop", action="append", default=[])
    args = parser.parse_args()
    build_dir, source_dir = (os.path.realpath(d) for d in (args.build_dir, args.source_dir))

    listed = [p for p in listed_packages(source_dir) if p not in args.drop]
    read = {"headers": headers_read(build_dir), "libraries": libraries_linked(build_dir),
            "programs": programs_found(build_dir)}
    if not read["headers"]:
        print(f"setup check: ninja's dependency log in {build_dir} is empty: build first", file=sys.stderr)
        return 2

    owners = dpkg_owners()
    installed, base, providers = installed_packages()
    closure = depends_closure(set(listed) | base, installed, providers)

    needed, unowned = {}, []
    for kind, paths in read.items():
        for path in sorted(paths):
            real = os.path.realpath(path)
            if real.startswith((build_dir + "/", source_dir + "/")):
                continue
            package = owner_of(path, owners)
            if package is None:
                unowned.append(f"{path} (among the {kind})")
            else:
                needed.setdefault(package, []).append(path)

    missing = sorted(p for p in needed if p not in closure)
    counts = ", ".join(f"{len(paths)} {kind}" for kind, paths in read.items())
    print(f"setup check: the build read {counts} from {len(needed)} Debian packages; setup-deps.sh names "
          f"{len(listed)}, whose Depends closure with the base system is {len(closure)} packages")
    for package in missing:
        examples = needed[package]
        more = f" and {len(examples) - 2} more" if len(examples) > 2 else ""
        print(f"MISSING from scripts/setup-deps.sh: {package} (owns {', '.join(examples[:2])}{more})")
    for item in unowned:
        print(f"NOT FROM A DEBIAN PACKAGE: {item}")
    if missing or unowned:
        return 1
    print("setup check: every package the build used is installed by scripts/setup-deps.sh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
