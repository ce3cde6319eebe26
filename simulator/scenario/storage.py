"""The ``cluster.storage`` section: where checkpoints are written and read from."""

from __future__ import annotations

from simulator.scenario.fields import Frozen
from simulator.units import Bandwidth


class StorageConfig(Frozen):
    """Where checkpoints go: the shared file system's sustained aggregate bandwidth and what
    one node reaches (B/s). A job of ``n`` nodes writes at ``min(write_bandwidth,
    n x node_write_bandwidth)``; reads likewise.

    Defaults: 2 TB/s sustained (7 TB/s peak) is Llama 3's Tectonic (Llama 3 paper,
    arXiv:2407.21783, sec. 3.3.1); a node's 4 GB/s write and 8 GB/s read are the "better"
    single-node figures of NVIDIA's DGX SuperPOD H100 reference architecture (RA-11333-001,
    table 6).
    """

    write_bandwidth: Bandwidth = 2e12
    """Sustained aggregate write bandwidth of the shared file system (B/s)."""
    read_bandwidth: Bandwidth | None = None
    """Sustained aggregate read bandwidth (B/s); default: the write bandwidth."""
    node_write_bandwidth: Bandwidth = 4e9
    """What one node writes at most (B/s)."""
    node_read_bandwidth: Bandwidth = 8e9
    """What one node reads at most (B/s)."""

    def write_Bps(self, nodes: int) -> float:
        """Bytes per second a job of ``nodes`` nodes writes."""
        return min(self.write_bandwidth, nodes * self.node_write_bandwidth)

    def read_Bps(self, nodes: int) -> float:
        """Bytes per second a job of ``nodes`` nodes reads (a checkpoint load)."""
        aggregate = self.read_bandwidth or self.write_bandwidth
        return min(aggregate, nodes * self.node_read_bandwidth)
