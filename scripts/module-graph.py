#!/usr/bin/env python3
"""Prints the import graph between the top-level modules of a crate's src/ and fails on a cycle.

    scripts/module-graph.py [--report] [SRC]

SRC defaults to crates/ruststream-kinesis/src. Each line is `module -> what it imports`, one
module per top-level file or folder (`src/shard.rs`, `src/coordinator/`); lib.rs and what only
tests compile (`tests/` folders, `tests.rs`, `simulation.rs`, the fakes, `test_store.rs`) are
left out, and so are `#[cfg(test)]` modules and imports, since a test may import from anywhere. An import is a `crate::` path, a
`crate::{..}` group, or `super::` from a folder's `mod.rs`; a name lib.rs re-exports counts as
an import of the module that defines it. With a cycle among the modules the script prints each
one and exits 1, unless `--report` is given; scripts/test.sh runs it without.
"""

import re
import sys
from pathlib import Path

TEST_ONLY = {"tests.rs", "fake_kinesis.rs", "fake_stream.rs", "test_store.rs"}
TEST_ONLY_FOLDERS = {"simulation"}


def module_of(src: Path, path: Path) -> str | None:
    rel = path.relative_to(src)
    if rel.parts == ("lib.rs",):
        return None
    if "tests" in rel.parts[:-1] or rel.name in TEST_ONLY or rel.parts[0] in TEST_ONLY_FOLDERS:
        return None
    return rel.parts[0].removesuffix(".rs")


def reexports(lib: str) -> dict[str, str]:
    """The names lib.rs re-exports (`pub use module::{A, B}`), by name: their modules."""
    names: dict[str, str] = {}
    for match in re.finditer(r"pub(?:\(crate\))?\s+use\s+(\w+)(?:::\w+)*::(\{[^}]*\}|\w+)\s*;", lib):
        module, items = match.group(1), match.group(2)
        for name in re.findall(r"\b(\w+)\b", items.strip("{}")):
            names.setdefault(name, module)
    return names


def group_heads(text: str, start: int) -> list[str]:
    """The first identifier of each path in the `{..}` group that opens at `start`."""
    depth, item, heads = 0, "", []
    for ch in text[start:]:
        if ch == "{":
            depth += 1
            if depth == 1:
                continue
        elif ch == "}":
            depth -= 1
            if depth == 0:
                break
        if depth == 1 and ch == ",":
            heads.append(item)
            item = ""
        elif depth >= 1:
            item += ch
    heads.append(item)
    return [m.group(0) for h in heads if (m := re.match(r"\w+", h.strip()))]


def imports(text: str, folder_root: bool) -> set[str]:
    found: set[str] = set()
    # Comments may name paths that are not imports, and tests may import from anywhere: a
    # `#[cfg(test)] mod ..` block runs to the end of its file, by this crate's convention, and a
    # `#[cfg(test)]` import is one statement.
    code = re.sub(r"//[^\n]*", "", text)
    block = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", code)
    if block:
        code = code[: block.start()]
    code = re.sub(r"#\[cfg\(test\)\]\s*use[^;]*;", "", code)
    for match in re.finditer(r"\bcrate::(\w+|\{)", code):
        if match.group(1) == "{":
            found.update(group_heads(code, match.end() - 1))
        else:
            found.add(match.group(1))
    if folder_root:
        for match in re.finditer(r"\bsuper::(\w+|\{)", code):
            if match.group(1) == "{":
                found.update(group_heads(code, match.end() - 1))
            else:
                found.add(match.group(1))
    return found


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
    names = reexports((src / "lib.rs").read_text())
    modules = {module_of(src, p) for p in src.rglob("*.rs")} - {None}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for path in sorted(src.rglob("*.rs")):
        module = module_of(src, path)
        if module is None:
            continue
        folder_root = path.name == "mod.rs" and path.parent != src
        for name in imports(path.read_text(), folder_root):
            target = name if name in modules else names.get(name)
            if target and target != module and target in modules:
                graph[module].add(target)
    for module in sorted(graph):
        print(f"{module} -> {', '.join(sorted(graph[module])) or '-'}")
    found = cycles(graph)
    for component in found:
        print(f"cycle: {' <-> '.join(component)}")
    if found and not report_only:
        return 1
    if not found:
        print("no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
