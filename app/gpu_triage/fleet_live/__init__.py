"""The fleet, live: the data side of ``gpu-triage fleet`` (without its screen), scraping many hosts' exporters or
a Prometheus now. Its other half, the stored history analysed after the fact, is :mod:`gpu_triage.fleet_history`.

* :mod:`.samples` is pure: what a scrape or a Prometheus answer becomes (samples, grouped by host).
* :mod:`.model` is pure: the metric names it reads (one table), one row per host (verdict, cards busy,
  samples/s, owner, each card) and the order that puts what needs a human first.
* :mod:`.client` is the network: the Prometheus HTTP API or a pool of exporters' ``/metrics``, fetched
  with bounded bodies and timeouts in worker threads (:mod:`.fetch` one bounded GET), published as one
  immutable snapshot; :mod:`.render` the cells, a host's detail lines and the ``--json`` document.

The screen is ``ui/fleet_app.py``; ``commands/fleet.py`` runs it or prints one snapshot. No Textual here.
"""

from gpu_triage.diagnosis.vocab import SEVERITY

# The order of the rows, said in `gpu-triage fleet --help` and implemented by model.sort_key; the bottlenecks'
# order is vocab.SEVERITY's, read from it so a new bottleneck is said here without an edit.
SORT_ORDER_HELP = (
    "Rows needing a human come first, worst first: a GPU fault (a dead driver, a lost or missing card), then "
    "hosts down (up == 0, a failed scrape, a target that never answered) and stale (no new tick), then hosts "
    f"with a bottleneck by severity ({', '.join(SEVERITY[1:-1])}: vocab.SEVERITY, docs/diagnosis.md), more of "
    "the host's cards first, then higher confidence; then the rest by lowest mean GPU-Util (n/a first); ties by "
    "host name."
)
KEYS_HELP = (
    "Enter opens a host's detail (each card's utilisation, memory, power), Esc goes back, Home/End go to the "
    "first/last host, / filters (host, state, bottleneck, pattern, owner), s cycles the order (severity, host "
    "name, lowest GPU-Util, most GPU-hours lost: the GPU-H LOST column), r refreshes now, q quits."
)
EXIT_HELP = "--once/--json exit 1 when the source failed, 3 when a host is down, stale or has a GPU fault."
