#!/usr/bin/env python3
"""Prints the import graph between a crate's modules, folder by folder, and fails on a cycle or
on a pure module (a state machine, or a data type it uses) that imports one that does I/O.

    scripts/module-graph.py [--report] [SRC]

SRC defaults to crates/ruststream-kinesis/src. The first block is the crate's top level: one
line `module -> what it imports` per top-level file or folder (`src/shard.rs`, `src/live/`).
Then each folder whose children import each other gets a block of its own (`live/:` with
`coordinator`, `reader`, `subscription`), at any depth. An import is a `crate::`, `super::` or
`self::` path, groups included (`crate::{a, b::{c, d}}`); a name a folder's mod.rs (lib.rs at the
root) re-exports counts as an import of the child that defines it. What only tests compile is
left out (`tests/` folders, `tests.rs`, the simulation, the test doubles (`doubles/`), and
`#[cfg(test)]` modules and imports), since a test may import from anywhere. With a cycle at any
level the script prints it and exits 1, unless `--report` is given; scripts/test.sh runs it
without.
"""

import re
import sys
from pathlib import Path

TEST_ONLY = {"tests.rs"}
TEST_ONLY_FOLDERS = {"simulation", "doubles"}


def is_test_only(rel: Path) -> bool:
    return (
        "tests" in rel.parts[:-1]
        or rel.name in TEST_ONLY
        or rel.parts[0] in TEST_ONLY_FOLDERS
        or rel.parts[0].removesuffix(".rs") in TEST_ONLY_FOLDERS
    )


def module_path(rel: Path) -> list[str]:
    """The module a file defines, as a path from the crate's root."""
    parts = list(rel.parts[:-1])
    if rel.name not in ("mod.rs", "lib.rs"):
        parts.append(rel.name.removesuffix(".rs"))
    return parts


TOKEN = re.compile(r"\w+|::|[{},*]")


def use_tree(tokens: list[str], at: int) -> tuple[list[list[str]], int]:
    """The paths of the use tree that starts at `tokens[at]`, and where it ends."""
    prefix: list[str] = []
    while at < len(tokens):
        tok = tokens[at]
        if tok == "{":
            paths: list[list[str]] = []
            at += 1
            while at < len(tokens) and tokens[at] != "}":
                if tokens[at] == ",":
                    at += 1
                    continue
                inner, at = use_tree(tokens, at)
                paths.extend(prefix + p for p in inner)
            return paths, at + 1
        if tok == "*":
            return [prefix], at + 1
        if re.fullmatch(r"\w+", tok):
            if tok != "self":
                prefix.append(tok)
            at += 1
            if at < len(tokens) and tokens[at] == "::":
                at += 1
                continue
            return [prefix], at
        return [prefix], at
    return [prefix], at


def test_free(text: str) -> str:
    """`text` less its comments and what only tests compile."""
    # Comments may name paths that are not imports, and tests may import from anywhere: a
    # `#[cfg(test)] mod ..` block runs to the end of its file, by this crate's convention, and a
    # `#[cfg(test)]` import is one statement.
    code = re.sub(r"//[^\n]*", "", text)
    block = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", code)
    if block:
        code = code[: block.start()]
    return re.sub(r"#\[cfg\(test\)\]\s*use[^;]*;", "", code)


def paths(code: str, module: list[str], is_mod_rs: bool) -> list[list[str]]:
    """Every path `code` names from the crate's root: `crate::`, `super::` and `self::` paths,
    resolved from `module` (the file's module path; `is_mod_rs`: the file is its folder's)."""
    tokens = TOKEN.findall(code)
    found: list[list[str]] = []
    for at, tok in enumerate(tokens):
        if tok not in ("crate", "super", "self") or at + 1 >= len(tokens) or tokens[at + 1] != "::":
            continue
        if at > 0 and tokens[at - 1] == "::":
            continue  # inside a longer path, e.g. `super::super::x`: its head counts
        base: list[str]
        if tok == "crate":
            base = []
        elif tok == "self":
            base = list(module)
        else:
            base = list(module[:-1])
        at += 2
        while tok == "super" and at + 1 < len(tokens) and tokens[at] == "super" and tokens[at + 1] == "::":
            base = base[:-1]
            at += 2
        tree, _ = use_tree(tokens, at)
        found.extend(base + p for p in tree)
    return found


def reexports_in(text: str) -> dict[str, str]:
    """The names a file re-exports from its own submodules (`pub(crate) use child::{A, B}`)."""
    names: dict[str, str] = {}
    for match in re.finditer(r"pub(?:\(crate\))?\s+use\s+(\w+)((?:::\w+)*)::(\{[^}]*\}|\w+)\s*;", text):
        module, items = match.group(1), match.group(3)
        if module in ("crate", "super", "self"):
            continue
        for name in re.findall(r"\b(\w+)\b", items.strip("{}")):
            names.setdefault(name, module)
    return names


# The pure code (state machines with no I/O and no clock of their own, and the data types they
# share) and the modules that do I/O (call AWS, spawn, sleep, time calls out): no pure module
# imports one, so what the simulation drives is all there is to a decision. A data type both
# sides use lives in a module of its own (`kinesis/shards.rs`).
PURE = (
    "coordinator",
    "shard",
    "commit",
    "lease/rules",
    "lease/state",
    "watermark",
    "settings/position",
    "kinesis/shards",
    "kinesis/iterator",
)
DOES_IO = (
    "broker",
    "live",
    "sdk",
    "publisher",
    "kinesis/api",
    "kinesis/calls",
    "kinesis/fan_out",
    "lease/dynamo",
    "lease/timed",
)


def resolve(path: list[str], folders: dict, reexported: dict) -> list[str]:
    """The module that defines what `path` names: the deepest module on it, a name a folder's
    mod.rs re-exports leading into the child that defines it."""
    module: list[str] = []
    for seg in path:
        here = tuple(module)
        if seg in folders.get(here, ()):
            module.append(seg)
            continue
        child = reexported.get(here, {}).get(seg)
        if child:
            module.append(child)
        break
    return module


def under(module: list[str], prefixes: tuple[str, ...]) -> bool:
    joined = "/".join(module)
    return any(joined == p or joined.startswith(p + "/") for p in prefixes)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--report"]
    report_only = "--report" in sys.argv[1:]
    src = Path(args[0] if args else "crates/ruststream-kinesis/src")
    files = {}
    for path in sorted(src.rglob("*.rs")):
        rel = path.relative_to(src)
        if not is_test_only(rel):
            files[rel] = path.read_text()
    # Each folder's children (its submodules), and the names its mod.rs (lib.rs at the root)
    # re-exports from them.
    folders: dict[tuple[str, ...], set[str]] = {}
    for rel in files:
        module = module_path(rel)
        for depth in range(len(module)):
            folders.setdefault(tuple(module[:depth]), set()).add(module[depth])
    reexported = {
        tuple(module_path(rel)): reexports_in(text)
        for rel, text in files.items()
        if rel.name in ("mod.rs", "lib.rs")
    }
    graphs: dict[tuple[str, ...], dict[str, set[str]]] = {
        folder: {child: set() for child in children} for folder, children in folders.items()
    }
    for rel, text in files.items():
        module = module_path(rel)
        for path in paths(test_free(text), module, rel.name == "mod.rs"):
            for depth in range(min(len(module), len(path))):
                folder = tuple(module[:depth])
                if tuple(path[:depth]) != folder:
                    break
                source = module[depth]
                target = path[depth]
                if target not in folders[folder]:
                    target = reexported.get(folder, {}).get(target)
                if target and target != source:
                    graphs[folder][source].add(target)
    failed = False
    impure = set()
    for rel, text in files.items():
        module = module_path(rel)
        if not under(module, PURE):
            continue
        for path in paths(test_free(text), module, rel.name == "mod.rs"):
            target = resolve(path, folders, reexported)
            if under(target, DOES_IO):
                impure.add(f"{'/'.join(module)} imports {'/'.join(target)}, which does I/O")
    for line in sorted(impure):
        failed = True
        print(f"impure: {line}")
    for folder in sorted(graphs, key=lambda f: (len(f), f)):
        graph = graphs[folder]
        if folder and not any(graph.values()):
            continue
        if folder:
            print(f"\n{'/'.join(folder)}/:")
        for module in sorted(graph):
            print(f"{'  ' if folder else ''}{module} -> {', '.join(sorted(graph[module])) or '-'}")
        for component in cycles(graph):
            failed = True
            where = "/".join(folder) + "/" if folder else ""
            print(f"cycle: {' <-> '.join(where + m for m in component)}")
    if failed and not report_only:
        return 1
    if not failed:
        print("\nno cycle, and the pure modules import no module that does I/O")
    return 0


if __name__ == "__main__":
    sys.exit(main())
