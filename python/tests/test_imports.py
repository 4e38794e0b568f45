"""The package's modules import one another in one direction, and only public names.

Read from the source (every import statement, inside functions and ``TYPE_CHECKING``
blocks too), so an import moved into a function to dodge a circle still counts.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set, Tuple

import saker

PACKAGE = Path(saker.__file__).parent


def imports() -> Dict[str, List[Tuple[str, List[str]]]]:
    """module -> [(imported module of the package, names imported from it)]."""
    found: Dict[str, List[Tuple[str, List[str]]]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        module = path.stem
        edges = found.setdefault(module, [])
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    target = node.module or ""
                elif node.level == 0 and (node.module or "").split(".")[0] == "saker":
                    target = (node.module or "").partition(".")[2]
                else:
                    continue
                names = [alias.name for alias in node.names]
                if not target:  # `from . import serialize`
                    edges.extend((name, []) for name in names)
                else:
                    edges.append((target, names))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[0] == "saker":
                        edges.append((parts[1] if len(parts) > 1 else "__init__", []))
    return found


def test_the_modules_import_one_another_without_a_circle() -> None:
    graph = {module: {target for target, _ in edges} for module, edges in imports().items()}
    assert {"client", "transport", "futures", "results", "errors"} <= set(graph)
    done: Set[str] = set()

    def visit(module: str, path: List[str]) -> None:
        if module in path:
            raise AssertionError("import circle: " + " -> ".join(path[path.index(module):] + [module]))
        if module in done:
            return
        for target in sorted(graph.get(module, ())):
            visit(target, path + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


def test_no_module_imports_a_private_name_of_another() -> None:
    private = [
        f"{module} imports {name} from {target}"
        for module, edges in imports().items()
        for target, names in edges
        for name in names
        if name.startswith("_")
    ]
    assert not private, private


def test_the_transport_knows_nothing_of_requests_or_futures() -> None:
    # The seam: client.Connection drives a transport; a transport never calls back
    # into the bookkeeping, so it imports none of it.
    assert {target for target, _ in imports()["transport"]} == {"errors"}
