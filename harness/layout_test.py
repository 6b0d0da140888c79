#!/usr/bin/env python3
"""layout_test.py: the harness's rooms keep their order and their headers keep to their files:
no file of a room includes a header of a room above it (case < io < check < store < cli), no two
harness files include each other in a loop, and every function a header declares is defined in
the .c file of the same name (or one the room's build generates). Not a style checker, and not the build (CMake's libraries link
bottom-up as well).

usage: layout_test.py SOURCE_DIR     (exit 0 pass, 1 fail)
"""

import os
import re
import sys

ROOMS = ["case", "io", "check", "store", "cli"]
INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)
# a prototype at file scope: a return type, a name, a parameter list, then ';'
PROTO = re.compile(r"^(?!typedef|static|#|extern\s+\")[A-Za-z_][\w \t\*]*?\b([a-z_][a-z0-9_]*)\s*\("
                   r"[^;{}]*\)\s*(?:__attribute__\(\([^;]*\)\))?\s*;", re.M)


def harness_files(root):
    files = {}
    for room in ROOMS:
        d = os.path.join(root, "harness", room)
        for name in sorted(os.listdir(d)):
            if name.endswith((".c", ".h")):
                files[name] = (room, os.path.join(d, name))
    return files


def strip_comments(text):
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


def main():
    root = sys.argv[1]
    files = harness_files(root)
    problems = []
    includes = {}
    for name, (room, path) in files.items():
        with open(path) as f:
            text = f.read()
        includes[name] = [h for h in INCLUDE.findall(text) if h in files]
        for h in includes[name]:
            other = files[h][0]
            if ROOMS.index(other) > ROOMS.index(room):
                problems.append(f"harness/{room}/{name} includes {h} of the room above it, "
                                f"harness/{other}/")
    # loops between modules: X.c including Y.h while Y.c includes X.h
    for name in includes:
        if not name.endswith(".c"):
            continue
        base = name[:-2]
        for h in includes[name]:
            other = h[:-2] + ".c"
            if h[:-2] != base and other in includes and base + ".h" in includes[other]:
                if base < h[:-2]:
                    problems.append(f"{name} and {other} include each other's headers (a loop)")
    # each header declares only what its own .c defines
    for name, (room, path) in files.items():
        if not name.endswith(".h"):
            continue
        c = name[:-2] + ".c"
        with open(path) as f:
            decls = set(PROTO.findall(strip_comments(f.read())))
        if not decls:
            continue
        with open(os.path.join(root, "harness", room, "CMakeLists.txt")) as f:
            generated = "${CMAKE_CURRENT_BINARY_DIR}/" + c in f.read()
        if c not in files and generated:
            continue  # the build writes c (its definitions are checked by the compiler)
        if c not in files:
            problems.append(f"harness/{room}/{name} declares {', '.join(sorted(decls))} but "
                            f"there is no {c}")
            continue
        with open(files[c][1]) as f:
            body = strip_comments(f.read())
        for fn in sorted(decls):
            if not re.search(r"^[A-Za-z_][\w \t\*]*\b" + fn + r"\s*\([^;]*\)\s*\{", body, re.M):
                problems.append(f"harness/{room}/{name} declares {fn}, which {c} does not define")
    for p in problems:
        print("FAIL:", p)
    print(f"{len(files)} files in {len(ROOMS)} rooms: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
