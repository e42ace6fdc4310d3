"""Past one machine: the Prometheus exporter (``gpu-triage export``, ``live --metrics``).

* :mod:`.monitor` keeps the rolling window, the diagnosis engine and the verdict tracker the dashboard
  uses, fed tick by tick, and publishes an immutable :class:`~.monitor.Snapshot` after each tick.
* :mod:`.collector` turns the latest snapshot into metric families at scrape time (a scrape costs a
  walk over one tick, never a diagnosis).
* :mod:`.server` serves ``/metrics`` (and nothing else) over HTTP through ``prometheus_client``.
* :mod:`.run` is the ``gpu-triage export`` daemon.

No Textual here (import-linter contract in pyproject.toml).
"""

DEFAULT_HOST = "127.0.0.1"
# In the exporters' range (9100-9999, which Prometheus' port allocation list has handed out in full),
# clear of the exporters a GPU server already runs: node-exporter 9100, dcgm-exporter 9400,
# nvidia_gpu_exporter 9835. Kept here, not in .server, so `gpu-triage --help` does not import
# prometheus_client.
DEFAULT_PORT = 9839
DEFAULT_LISTEN = f"{DEFAULT_HOST}:{DEFAULT_PORT}"
