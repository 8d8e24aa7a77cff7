"""The modules of `ovl_tf` import each other one way: no module imports, even inside a function,
a module that imports it back (directly or through others), and `_library`, the bottom, imports
none of them."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ovl_tf"


def sibling_imports(path: Path) -> set:
    """The `ovl_tf` modules that the module at `path` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:  # `from . import _pfor`
                found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ovl_tf."):
            found.add(node.module.split(".")[1])
    return found


def test_the_modules_import_each_other_one_way():
    graph = {p.stem: sibling_imports(p) for p in PACKAGE.glob("_*.py")}
    assert graph["_library"] == set(), graph["_library"]
    # Depth-first search for a cycle.
    state = {}

    def visit(module, path):
        if state.get(module) == "done":
            return
        assert state.get(module) != "open", f"an import cycle: {' -> '.join(path + [module])}"
        state[module] = "open"
        for m in sorted(graph.get(module, ())):
            visit(m, path + [module])
        state[module] = "done"

    for module in sorted(graph):
        visit(module, [])
