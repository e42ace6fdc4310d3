"""Whose work a host's cards run, as its series name it: an owner from a series' labels, every owner of a host, and
the few of them a table cell shows (the live fleet view's OWNER column)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gpu_triage.fleet_live.samples import Sample
from gpu_triage.safetext import clip

# Labels that name whose work a card runs, on any series that carries them (an owner info metric, the
# GPU processes): the exporter's own `owner` and the parts of one (a container, a Kubernetes pod, a Slurm
# job, a user); `owner_*` labels count too. Prometheus' `job` is the scrape job, never an owner.
OWNER_LABELS: tuple[str, ...] = ("owner", "pod", "k8s_pod", "slurm_job", "container", "user")

def owner_of(labels: Mapping[str, str]) -> str | None:
    """The owner a series names. gpu-triage's exporter labels its process and owner series with
    ``owner_kind`` and ``owner`` (``slurm``/``1392969``, ``pod``/``ml/train-0``): those two give
    ``slurm 1392969``, and ``unknown`` with an empty owner names nobody. Otherwise its ``owner`` label,
    else the first of :data:`OWNER_LABELS` it has, else its ``owner_*`` labels in name order, joined
    (``owner_kind="pod", owner_name="ns/x"`` → ``pod ns/x``)."""
    if "owner_kind" in labels and "owner" in labels:
        kind, owner = labels["owner_kind"], labels["owner"]
        return f"{kind} {owner}" if kind and owner else None
    for label in OWNER_LABELS:
        if labels.get(label):
            return labels[label]
    parts = [labels[k] for k in sorted(labels) if k.startswith("owner_") and labels[k]]
    return " ".join(parts) if parts else None


def owners_of(samples: Iterable[Sample]) -> tuple[str, ...]:
    """Every owner named by the host's series, cleaned, sorted (at most 64 kept)."""
    found: set[str] = set()
    for s in samples:
        owner = owner_of(s.labels)
        if owner:
            found.add(clip(owner, 60))
            if len(found) >= 64:
                break
    return tuple(sorted(found))


def owner_text(owners: Sequence[str]) -> str | None:
    """The owners in a cell: two named, the rest counted."""
    if not owners:
        return None
    if len(owners) <= 2:
        return ", ".join(owners)
    return f"{owners[0]}, {owners[1]} +{len(owners) - 2}"
