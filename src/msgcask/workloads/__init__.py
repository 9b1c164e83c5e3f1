"""The standard workloads of msgcask, their runner and their reports.

One module per concept:

- ``config``: the parameters of a run (defaults as in the workload spec).
- ``payload``: message bodies (fixed size or the size mix) that carry their index.
- ``subjects``: adapters with one small interface, for msgcask and each peer.
- ``recorder``: latency samples and their percentiles, whole run and per window.
- ``sampler``: a thread that samples disk, live bytes, RSS and compaction counters.
- ``definitions``: the workloads themselves (producer and consumer threads).
- ``crash``: reopen time after a kill -9 of a child process.
- ``runner``: runs a workload against msgcask and the peers and builds the result.
- ``result``: the result document and its JSON Schema (``result.schema.json``).
- ``plots``: PNG plots (matplotlib, Agg).
- ``report``: the plain-text summary table.

Nothing here imports matplotlib or a peer package at import time.
"""

from msgcask.workloads.config import WORKLOAD_NAMES, RunConfig

__all__ = ["WORKLOAD_NAMES", "RunConfig"]
