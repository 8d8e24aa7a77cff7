#!/usr/bin/env python3
"""Checks the structural invariants ARCHITECTURE.md states that the compiler does not:

1. No two sibling modules of a crate import each other, directly or through a circle of
   siblings (a module and its children count as one: `a::x` naming `b::y` is `a -> b`).
2. No library source file over 800 lines (test modules, `tests/`, `benches/` and `examples/`
   excepted).
3. README.md at most 400 lines, ARCHITECTURE.md at most 360.

Prints each violation and exits 1 if there is any. Run from anywhere:
`python3 scripts/check-structure.py`.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_SOURCE_LINES = 800
MAX_DOC_LINES = {"README.md": 400, "ARCHITECTURE.md": 360}

PATH_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP_RE = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\}", re.S)


def crates():
    """Every `src/` directory of the workspace (the facade's and each member's)."""
    for manifest in sorted(ROOT.glob("*/Cargo.toml")) + [ROOT / "Cargo.toml"]:
        src = manifest.parent / "src"
        if src.is_dir():
            yield src


def module_path(src: Path, file: Path):
    """`src/a/b.rs` -> ("a", "b"); `src/a/mod.rs` -> ("a",); `src/lib.rs` -> ()."""
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def library_text(text: str) -> str:
    """The text before the first `#[cfg(test)]` (test modules sit at the end of a file), with
    comments removed."""
    text = text.split("#[cfg(test)]", 1)[0]
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def resolve(module, root, rest):
    """The module path a `crate::` / `super::` / `self::` path starts from, then its segments."""
    if root == "crate":
        base = ()
    elif root == "self":
        base = module
    else:
        base = module[:-1]
    segments = [s for s in rest.split("::") if s]
    while segments and segments[0] == "super":
        base = base[:-1]
        segments.pop(0)
    return base + tuple(segments)


def check_cycles(src: Path, problems):
    files = {module_path(src, f): f for f in src.rglob("*.rs")}
    modules = set(files)
    edges = {}  # (parent, a, b): a file naming it, for siblings a -> b under parent
    for module, file in files.items():
        text = library_text(file.read_text())
        targets = []
        for root, rest, group in USE_GROUP_RE.findall(text):
            for item in re.split(r"[,\s]+", group):
                item = item.split(" as ")[0].strip("{} ")
                if item and item != "self":
                    targets.append(resolve(module, root, rest + "::" + item.split("::")[0]))
                else:
                    targets.append(resolve(module, root, rest))
        targets += [resolve(module, root, rest) for root, rest in PATH_RE.findall(text)]
        for target in targets:
            # The longest module the path names.
            while target and target not in modules:
                target = target[:-1]
            # The first place the two paths part: siblings there.
            common = 0
            while common < min(len(module), len(target)) and module[common] == target[common]:
                common += 1
            if common < len(module) and common < len(target):
                parent = module[:common]
                edges.setdefault((parent, module[common], target[common]), file)
    graph = {}
    for parent, a, b in edges:
        graph.setdefault(parent, {}).setdefault(a, set()).add(b)
    for parent, succ in graph.items():
        # Circles among siblings: strongly connected components of more than one module.
        for component in strongly_connected(succ):
            if len(component) > 1:
                names = sorted(component)
                where = "::".join(("crate",) + parent)
                witnesses = sorted(
                    f"{a} -> {b} ({edges[(parent, a, b)].relative_to(ROOT)})"
                    for a in names
                    for b in succ.get(a, ())
                    if b in component
                )
                problems.append(
                    f"{src.parent.name}: modules {', '.join(names)} of {where} import each "
                    f"other: " + "; ".join(witnesses)
                )


def strongly_connected(succ):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    nodes = set(succ) | {b for bs in succ.values() for b in bs}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in succ.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on.discard(w)
                component.add(w)
                if w == v:
                    break
            out.append(component)

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def check_sizes(src: Path, problems):
    for file in sorted(src.rglob("*.rs")):
        if file.name == "tests.rs" or "tests" in file.relative_to(src).parts:
            continue
        lines = library_text(file.read_text()).count("\n")
        if lines > MAX_SOURCE_LINES:
            problems.append(
                f"{file.relative_to(ROOT)}: {lines} lines of library code (at most "
                f"{MAX_SOURCE_LINES}): split it by what its parts hold"
            )


def main():
    problems = []
    for src in crates():
        check_cycles(src, problems)
        check_sizes(src, problems)
    for name, limit in MAX_DOC_LINES.items():
        lines = (ROOT / name).read_text().count("\n")
        if lines > limit:
            problems.append(f"{name}: {lines} lines (at most {limit}): move reference to docs/")
    for p in problems:
        print(p)
    print(f"structure: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
