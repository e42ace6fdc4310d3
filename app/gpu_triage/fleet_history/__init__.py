"""The fleet's stored history, analysed: what a dataset of recordings says after the fact (``diagnose DIR
--summary``: :mod:`.summary`, each file's share in :mod:`.perfile`, whose time it was in :mod:`.owners`, what one
file says in :mod:`.onefile`; ``compare`` of two datasets: :mod:`.compare`).

Its other half is :mod:`gpu_triage.fleet_live`, the live scrape of many hosts' exporters (``gpu-triage fleet``).
The dataset itself, written by ``record -o DIR/`` and ``export --record DIR`` and kept by ``compact``, is
:mod:`gpu_triage.storage`. See docs/recording.md, "A fleet's history as one dataset"."""
