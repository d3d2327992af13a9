#!/usr/bin/env python3
"""The guard of bench/'s layering (issue 42): fails on any import cycle
among the modules of a directory (default: this one, bench/*.py).

    python3 bench/check_imports.py [DIR]

Reads every `DIR/*.py` with `ast` (nothing is imported or run), takes each
`import x`, `import x.y` and `from x import …` anywhere in a file (inside
functions too: an import deferred to a call still closes a loop) whose `x`
is another module of DIR as an edge, and finds the strongly connected
components of that graph. Any component of more than one module, or a
module importing itself, is a cycle: they are printed, one a line with
the edges that close it, and the exit status is 1. Shared code lives in
common.py, which imports none of the runners, so imports go one way.
Run by the bench crate's test `import_cycles` (`cargo test --workspace`).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path


def graph_of(directory: Path) -> dict[str, set[str]]:
    """Module name → the modules of `directory` it imports."""
    files = sorted(directory.glob("*.py"))
    modules = {f.stem for f in files}
    graph: dict[str, set[str]] = {}
    for f in files:
        tree = ast.parse(f.read_text(), filename=str(f))
        targets: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            targets.update(n.split(".")[0] for n in names if n.split(".")[0] in modules)
        graph[f.stem] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components (Tarjan) of more than one module,
    and the modules that import themselves, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1 or v in graph.get(v, ()):
                out.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def main(argv: list[str]) -> int:
    directory = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent
    graph = graph_of(directory)
    found = cycles(graph)
    if not found:
        print(f"check_imports: {len(graph)} modules of {directory}, no import cycle")
        return 0
    print(f"check_imports: import cycles among {directory}/*.py (move what they share into a module "
          "that imports neither, e.g. common.py):")
    for scc in found:
        edges = ", ".join(f"{a} -> {b}" for a in scc for b in sorted(graph[a]) if b in scc)
        print(f"  {' '.join(scc)}: {edges}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
