"""The staged run's helpers: what :mod:`simulator.api` wires together, one job per module
(topology facts and placement, the steady-state policy, stragglers, the memory report, side
tools of the command line, pools). :mod:`simulator.api` re-exports what users call."""
