"""No import loops inside the package: the layers contract (pyproject.toml) orders the
packages; this checks the modules within each, which a layers contract cannot see."""

import grimp
import networkx as nx


def test_no_module_imports_itself_through_others():
    graph = grimp.build_graph("simulator")
    edges = nx.DiGraph()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            edges.add_edge(module, imported)
    loops = [c for c in nx.simple_cycles(edges) if len(c) > 1]
    assert loops == []
