#!/usr/bin/env python3
# ci/check_arrows.py - the module layering of flexcheck, checked on every include line.
#
#   python3 ci/check_arrows.py            check the tree this script belongs to (a `make test` step)
#   python3 ci/check_arrows.py --graph    also print the module arrows with their include counts
#   python3 ci/check_arrows.py --root DIR check another tree (the tests use temporary ones)
#
# Arrows allowed (a module may include only those below it):
#   base <- masks <- ref, gpu, reports <- judge <- diag <- fixtures <- check (the file-checking
#   layer: what `check` does), ci (the gate) <- api (the public C API, include/flexcheck.h:
#   libflexcheck.so) <- cli
# Reference and kernels never include each other; verdicts (reports) never include their
# producers; the diagnosis (diag) reads verdicts and recomputes references but never runs a
# kernel (no gpu); the file-checking layer (check) and the gate (ci) stand side by side and never
# include each other (what both need lives below them, in judge/ and diag/); nothing includes cli. tests/ may include anything; nothing else includes tests/.
#
# What it does, on every tracked .c .h .cu .cuh .cc file (`git ls-files` when DIR is the top of
# a git checkout, else a walk of DIR that skips hidden folders, build/, build-*/ and virtualenvs):
#   - parses each `#include "..."` line, inside #if blocks too; lines in comments and in
#     `#if 0` blocks are not includes. A quoted name resolves as the compiler would with -I. only:
#     first beside the including file, then from the root; one that resolves to no file is an
#     error. `#include <name>` counts only when name is one of the CUDA toolkit stand-ins under
#     gpu/emu/include/ (the emu build's -I): that is an arrow into gpu; other <...> are system's.
#   - builds the file include graph and reports every cycle (a strongly connected component of
#     more than one file, or a file including itself);
#   - maps each file to its module (its top folder; .ci/ is ignored) and reports every arrow the
#     table below forbids, one line each: FILE:LINE: includes B/x.h: A may not include B (allowed: ...);
#   - reports module-level cycles (none can pass the table, but they are checked on their own).
# Exit status: 0 clean, 1 anything found, 2 usage error. Python 3 standard library only.

import argparse
import os
import re
import subprocess
import sys

SOURCE_EXTS = (".c", ".h", ".cu", ".cuh", ".cc")

# Which modules each module may include (its own always allowed). None: anything.
ALLOWED = {
    "base": [],
    "masks": ["base"],
    "ref": ["base", "masks"],
    "gpu": ["base", "masks"],
    "reports": ["base", "masks"],
    "judge": ["base", "masks", "ref", "gpu", "reports"],
    "diag": ["base", "masks", "ref", "reports", "judge"],
    "fixtures": ["base", "masks", "ref", "gpu", "reports", "judge", "diag"],
    "check": ["base", "masks", "ref", "gpu", "reports", "judge", "diag", "fixtures"],
    "ci": ["base", "masks", "ref", "gpu", "reports", "judge", "diag", "fixtures"],
    "include": [],  # the public header (include/flexcheck.h): system headers only
    "api": ["base", "masks", "ref", "gpu", "reports", "judge", "diag", "fixtures", "check", "ci",
            "include"],
    "cli": ["base", "masks", "ref", "gpu", "reports", "judge", "diag", "fixtures", "check", "ci",
            "include", "api"],
    "tests": None,
}
# cli/ is a shell: a command parses, isolates and prints, and its work is library code below it
# (check/ for check and repro, ci/ for gate and export), so that the shared library and Python
# can do the same. A command file may therefore not reach the layers that do the work; only the
# benchmarks (cli/bench_*.c), which time those layers' own calls, may.
CLI_WORK = ("ref", "judge", "diag")
IGNORED_TOP = {".ci"}
# The CUDA toolkit stand-ins, included as <cuda_runtime.h> (the emu build adds -Igpu/emu/include).
SYSTEM_STANDINS = "gpu/emu/include"

INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?:"([^"\n]*)"|<([^>\n]*)>)', re.M)
COND_RE = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b(.*)$")


def strip_comments(text):
    """text with every comment replaced by spaces (newlines kept, so line numbers hold).
    String and character literals are kept; an unterminated one ends at its line's end."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            if j < 0:
                j = n
            # a backslash-newline continues a // comment
            while j < n and j > i and text[j - 1] == "\\":
                k = text.find("\n", j + 1)
                j = n if k < 0 else k
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):
            # a ' right after a letter or digit is taken for a C++14 digit separator (1'000),
            # not a literal; prefixed literals (L'x') then pass as plain text, which is harmless
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n) if j < n and text[j] == c else j
            out.append(text[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def dead_lines(lines):
    """The 1-based numbers of lines inside `#if 0` blocks (up to their #else, #elif or #endif)."""
    dead = set()
    stack = []  # per open conditional: True while its current branch is an `#if 0` one
    for no, line in enumerate(lines, 1):
        m = COND_RE.match(line)
        if m:
            kw, rest = m.group(1), m.group(2).strip()
            if kw in ("if", "ifdef", "ifndef"):
                stack.append(kw == "if" and rest == "0")
            elif kw in ("elif", "else"):
                if stack:
                    stack[-1] = False
            elif kw == "endif":
                if stack:
                    stack.pop()
            continue
        if any(stack):
            dead.add(no)
    return dead


def list_files(root):
    """Repo-relative paths of the tree's files (all kinds) and whether git listed them."""
    try:
        top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, check=False)
        if top.returncode == 0 and os.path.realpath(top.stdout.strip()) == os.path.realpath(root):
            ls = subprocess.run(["git", "-C", root, "ls-files", "-z"],
                                capture_output=True, text=True, check=True)
            files = [p for p in ls.stdout.split("\0") if p]
            return [p for p in files if os.path.isfile(os.path.join(root, p))], True
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        keep = []
        for d in sorted(dirnames):
            if d.startswith("."):
                continue
            if rel == "." and (d == "build" or d.startswith("build-")):
                continue
            if os.path.exists(os.path.join(dirpath, d, "pyvenv.cfg")):
                continue
            keep.append(d)
        dirnames[:] = keep
        for f in filenames:
            files.append(os.path.normpath(os.path.join(rel, f)).replace(os.sep, "/"))
    return sorted(files), False


def module_of(path):
    return path.split("/", 1)[0] if "/" in path else ""


def is_ignored(path):
    return module_of(path) in IGNORED_TOP


class Include:
    def __init__(self, src, line, text, target, system):
        self.src, self.line, self.text, self.target, self.system = src, line, text, target, system


def scan(root, files):
    """Every include line of the source files: (includes, unresolved errors)."""
    known = set(files)
    includes, errors = [], []
    for src in files:
        if not src.endswith(SOURCE_EXTS) or is_ignored(src):
            continue
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as f:
            text = f.read()
        stripped = strip_comments(text)
        dead = dead_lines(stripped.split("\n"))
        for m in INCLUDE_RE.finditer(stripped):
            line = stripped.count("\n", 0, m.start()) + 1
            if line in dead:
                continue
            quoted, angled = m.group(1), m.group(2)
            if angled is not None:
                cand = SYSTEM_STANDINS + "/" + angled.strip()
                if os.path.normpath(cand).replace(os.sep, "/") in known:
                    includes.append(Include(src, line, "<%s>" % angled, cand, True))
                continue
            tried = []
            for base in (os.path.dirname(src), ""):
                cand = os.path.normpath(os.path.join(base, quoted)).replace(os.sep, "/")
                if cand.startswith("../") or cand == ".." or os.path.isabs(quoted):
                    continue
                if cand not in tried:
                    tried.append(cand)
            target = next((c for c in tried if c in known), None)
            if target is None:
                why = "resolves to no file"
                if any(os.path.isfile(os.path.join(root, c)) for c in tried):
                    why = "resolves to a file git does not track"
                errors.append('%s:%d: includes "%s": %s (tried %s)'
                              % (src, line, quoted, why, ", ".join(tried) or "nothing inside the root"))
                continue
            includes.append(Include(src, line, '"%s"' % quoted, target, False))
    return includes, errors


def sccs(nodes, edges):
    """Tarjan's strongly connected components, iteratively; edges: node -> sorted successors."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            v, pi = work.pop()
            if pi == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on.add(v)
            succ = edges.get(v, [])
            recurse = False
            while pi < len(succ):
                w = succ[pi]
                pi += 1
                if w not in index:
                    work.append((v, pi))
                    work.append((w, 0))
                    recurse = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if recurse:
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
    return out


def one_cycle(comp, edges):
    """A closed path through part of a strongly connected component, starting at its first node."""
    members = set(comp)
    start = comp[0]
    # breadth-first from start back to start, inside the component
    prev, frontier, seen = {}, [start], {start}
    while frontier:
        nxt = []
        for v in frontier:
            for w in edges.get(v, []):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in seen:
                    seen.add(w)
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp + [comp[0]]


def cycles(nodes, edges):
    """(component, one closed path through it) for each strongly connected component of more
    than one node; self-loops are reported where the edges are made."""
    return [(comp, one_cycle(comp, edges)) for comp in sccs(sorted(nodes), edges) if len(comp) > 1]


def allowed_text(mod):
    allowed = ALLOWED.get(mod)
    if allowed is None:
        return "anything"
    return ", ".join(allowed) if allowed else "nothing of ours"


def check(root, graph=False, out=sys.stdout):
    files, from_git = list_files(root)
    sources = [p for p in files if p.endswith(SOURCE_EXTS) and not is_ignored(p)]
    includes, errors = scan(root, files)
    problems = list(errors)

    # files: the include graph and its cycles
    fedges, fself = {}, set()
    for inc in includes:
        if inc.target == inc.src:
            fself.add(inc.src)
            problems.append("%s:%d: includes %s: the file includes itself" % (inc.src, inc.line, inc.text))
        else:
            fedges.setdefault(inc.src, set()).add(inc.target)
    fedges = {k: sorted(v) for k, v in fedges.items()}
    nodes = set(sources) | {i.target for i in includes}
    file_cycles = cycles(nodes, fedges)
    for comp, path in file_cycles:
        problems.append("file cycle of %d files (%s): %s" % (len(comp), ", ".join(comp), " -> ".join(path)))
    n_file_cycles = len(file_cycles) + len(fself)

    # modules: the arrows, the table, and module-level cycles
    arrows, within, forbidden = {}, {}, 0
    for inc in includes:
        a, b = module_of(inc.src), module_of(inc.target)
        if a == b and a:
            within[a] = within.get(a, 0) + 1
            continue
        arrows[(a, b)] = arrows.get((a, b), 0) + 1
        unknown = [m for m in (a, b) if m not in ALLOWED]
        if unknown:
            # a new top folder (or a file at the top) has no place in the table yet
            forbidden += 1
            problems.append("%s:%d: includes %s: module %s is not in the layering table"
                            % (inc.src, inc.line, inc.target, unknown[0] or "(top level)"))
        elif ALLOWED[a] is not None and b not in ALLOWED[a]:
            forbidden += 1
            problems.append("%s:%d: includes %s: %s may not include %s (allowed: %s)"
                            % (inc.src, inc.line, inc.target, a, b, allowed_text(a)))
        elif a == "cli" and b in CLI_WORK and not os.path.basename(inc.src).startswith("bench_"):
            forbidden += 1
            problems.append("%s:%d: includes %s: a command may not include %s (its work is "
                            "library code in check/ or ci/; only cli/bench_*.c time %s)"
                            % (inc.src, inc.line, inc.target, b, "/".join(CLI_WORK)))
    medges = {}
    for (a, b) in arrows:
        medges.setdefault(a, set()).add(b)
    medges = {k: sorted(v) for k, v in medges.items()}
    mnodes = {m for ab in arrows for m in ab}
    module_cycles = cycles(mnodes, medges)
    for comp, path in module_cycles:
        problems.append("module cycle of %d modules (%s): %s" % (len(comp), ", ".join(comp), " -> ".join(path)))

    for p in problems:
        print(p, file=out)
    if graph:
        print("module arrows (A -> B: A includes B; include lines of A naming a file of B):", file=out)
        for (a, b), n in sorted(arrows.items()):
            print("  %-8s -> %-8s %4d" % (a, b, n), file=out)
        print("within modules: " + ", ".join("%s %d" % (m, n) for m, n in sorted(within.items())), file=out)
    print("arrows: %d files%s, %d include lines, %d module arrows; %d file cycles, %d module cycles, "
          "%d forbidden, %d unresolved"
          % (len(sources), "" if from_git else " (not a git checkout: walked)", len(includes) + len(errors),
             len(arrows), n_file_cycles, len(module_cycles), forbidden, len(errors)), file=out)
    return 1 if problems else 0


def main(argv):
    ap = argparse.ArgumentParser(description="Check flexcheck's module layering on every include line.")
    ap.add_argument("--root", help="tree to check (default: the one holding this script)")
    ap.add_argument("--graph", action="store_true", help="also print the module arrows with counts")
    args = ap.parse_args(argv)  # exits 2 on a usage error
    root = args.root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(root):
        print("check_arrows.py: --root %s: not a directory" % root, file=sys.stderr)
        return 2
    return check(root, args.graph)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
