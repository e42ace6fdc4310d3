"""The fleet view's data side: ``gpu-triage fleet`` without its screen.

* :mod:`.text` makes an outside string safe to draw (control characters, escape codes, length).
* :mod:`.samples` is pure: what a scrape or a Prometheus answer becomes (samples, grouped by host).
* :mod:`.model` is pure: the metric names it reads (one table), one row per host (verdict, cards busy,
  samples/s, owner, each card) and the order that puts what needs a human first.
* :mod:`.client` is the network: the Prometheus HTTP API or a pool of exporters' ``/metrics``, fetched
  with bounded bodies and timeouts in worker threads, published as one immutable snapshot.

The screen is ``ui/fleet_app.py``; ``commands/fleet.py`` runs it or prints one snapshot. No Textual here.
"""

# The order of the rows, said in `gpu-triage fleet --help` (kept here so --help imports nothing else) and
# implemented by model.sort_key.
SORT_ORDER_HELP = (
    "Rows needing a human come first: hosts with a bottleneck (the verdict's bottleneck is not 'none'; "
    "highest confidence first), then hosts down or stale (up == 0, a failed scrape, no new tick), then the "
    "rest by lowest mean GPU-Util (n/a first); ties by host name."
)
