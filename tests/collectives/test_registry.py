"""The algorithm registry says what each algorithm implements, and the functions agree: the
scenario's check, the plan's choice and the engine all read the registry."""

import pytest

from simulator.collectives.algorithms import ALGORITHMS, Locality
from simulator.infeasible import InfeasibleError
from simulator.scenario.schema import ParallelismConfig

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
GROUP = (0, 1, 2, 3)  # a power of two, one host: every algorithm's own needs aside
LOCALITY = Locality(host_of={d: 0 for d in GROUP}, nvls_switch={0: "nvswitch0"}, torus_shape=(2, 2))


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_each_algorithm_implements_what_the_registry_says(name):
    algorithm = ALGORITHMS[name]
    for kind in KINDS:
        try:
            phases = algorithm.phases(kind, GROUP, 1e6, LOCALITY)
        except InfeasibleError as exc:
            assert kind not in algorithm.kinds, (name, kind, exc)
            assert "does not implement" in str(exc)
        else:
            assert kind in algorithm.kinds, (name, kind)
            assert phases  # at least one phase of transfers
    assert 0 < algorithm.efficiency <= 1


def test_the_schema_takes_the_registry_s_names_and_no_other():
    for name in ["auto", *ALGORITHMS]:
        assert ParallelismConfig(collectives={"dp": name}).collectives["dp"] == name
    with pytest.raises(ValueError, match="unknown algorithm 'bogus'; known: auto, ring"):
        ParallelismConfig(collectives={"dp": "bogus"})
