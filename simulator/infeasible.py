"""The error of a scenario the simulator cannot lay out, order or run as given: bad input
(exit 2, or an ``infeasible`` row of a sweep), not a bug.

Every refusal of the step layer raises :class:`InfeasibleError`, so that the command line
and the sweep catch it alone; any other exception is a failure of the program (exit 1, with
a request to report it), never passed off as the user's mistake.
"""


class InfeasibleError(ValueError):
    """A scenario the simulator cannot run as given; the message says what to change.

    >>> from simulator.api import load, run, topology_from_file
    >>> half = topology_from_file("topologies/dgx-h100.yaml", overrides=["node.gpus=4"])
    >>> try:
    ...     run(load("scenarios/examples/pipeline-1f1b.yaml"), half)
    ... except InfeasibleError as exc:
    ...     print(exc)
    8 ranks but the topology has 4 devices
    """
