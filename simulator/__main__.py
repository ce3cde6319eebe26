"""``python -m simulator`` is ``trainsim``."""

from simulator.cli import main

main()
