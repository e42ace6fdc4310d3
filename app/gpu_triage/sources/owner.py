"""Whose job a GPU process is: its Slurm job, Kubernetes pod, container and user, from procfs.

Two sources, trusted differently:

- ``/proc/PID/cgroup`` is written by the kernel from where the job's manager placed the process
  (slurmstepd, the kubelet and its runtime, dockerd): a process cannot move itself out of its job's
  cgroup without the manager's rights, so what it says is believed. Both layouts are read: cgroup v1
  (``ID:CONTROLLERS:PATH`` per hierarchy) and v2 (one ``0::PATH`` line); with the systemd cgroup driver the
  same facts are in unit names (``kubepods-burstable-pod<UID>.slice``, ``docker-<ID>.scope``). The layouts
  recognised are kept as real files in tests/data/cgroup/ (their README says where each comes from).
- ``/proc/PID/environ`` is what the process was started with, and where readable (our own user's
  processes, or all of them as root) it adds what the cgroup does not hold: the pod's *name* and
  namespace (``POD_NAME`` / ``POD_NAMESPACE``, the downward-API variables a pod spec sets by convention,
  else ``HOSTNAME``, which the kubelet sets to the pod's name unless the spec overrides it) and the Slurm
  job id where the cgroup plugin is not in use (``SLURM_JOB_ID``, or the older ``SLURM_JOBID``). The
  environment is self-declared, so it only fills gaps: a cgroup fact is never replaced by one.

Everything here is hostile input (another user's process names its own variables): reads are bounded,
every value must match the shape of what it claims to be (a job id is digits, a pod name a DNS label, a
container id 64 hex digits) and anything else is dropped, never shown. Owners are cached per
(pid, start time): a pid reused by a new process is asked again.
"""

from __future__ import annotations

import logging
import os
import re
from collections import OrderedDict
from dataclasses import dataclass

log = logging.getLogger(__name__)

CGROUP_READ_MAX = 64 * 1024  # a v1 file has a dozen lines; a deeper tree is no owner we can name
ENVIRON_READ_MAX = 256 * 1024  # ARG_MAX-sized environments exist; past this we stop reading, not fail
CACHE_MAX = 4096  # owners remembered; a runaway fork tree must not grow this without bound

_HEX64 = re.compile(r"[0-9a-f]{64}")
# docker-<ID>.scope (systemd driver), cri-containerd-<ID>.scope, crio-<ID>.scope, libpod-<ID>.scope (podman)
_SCOPE = re.compile(r"(docker|cri-containerd|crio|libpod)-([0-9a-f]{64})\.scope")
_RUNTIME = {"docker": "docker", "cri-containerd": "containerd", "crio": "cri-o", "libpod": "podman"}
# a pod's uid: a UUID (the API server's), or 32 hex digits (a static pod's, a hash of its manifest); the
# systemd driver writes the UUID's dashes as underscores (systemd's unit-name escaping)
_POD = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})(?:\.slice)?"
)
_SLURM_JOB = re.compile(r"job_([0-9]{1,20})")
_JOB_ID = re.compile(r"[0-9]{1,20}")
# Kubernetes object names: DNS-1123 subdomain (pods) and label (namespaces), at most 253 / 63 characters
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

ENV_KEYS = frozenset(
    {"SLURM_JOB_ID", "SLURM_JOBID", "POD_NAME", "POD_NAMESPACE", "HOSTNAME", "KUBERNETES_SERVICE_HOST"}
)


@dataclass(frozen=True, slots=True)
class CgroupFacts:
    """What a process's cgroup file says. ``container`` is ``RUNTIME://ID`` as Kubernetes writes a
    container's id in its status (``containerd://…``), or the bare id where the path does not say which
    runtime made it (the cgroupfs driver)."""

    slurm_job: str | None = None
    pod_uid: str | None = None
    container: str | None = None


@dataclass(frozen=True, slots=True)
class Owner:
    """A process's owner, each part None where nothing trustworthy says it."""

    user: str | None = None
    slurm_job: str | None = None
    pod_uid: str | None = None
    pod_name: str | None = None
    pod_namespace: str | None = None
    container: str | None = None


def _cgroup_paths(text: str) -> list[str]:
    """The PATH of every line (v1: ``ID:CONTROLLERS:PATH``; v2: ``0::PATH``); the path may hold colons."""
    paths = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[2].startswith("/"):
            paths.append(parts[2])
    return paths


def _anchors(segments: list[str]) -> tuple[list[str], bool, bool]:
    """The path without its leading ``..`` and whether a Slurm job or a pod may be read from it.

    Only where the manager itself makes its tree: Slurm's at the root (``/slurm``, ``/slurm_NODE`` for v1)
    or as slurmstepd's scope in ``system.slice`` (v2); the kubelet's at the root (``/kubepods``,
    ``/kubepods.slice``). systemd delegates a subtree to each user (``user@UID.service``) in which they may
    make any cgroup they like: a ``.../slurm/job_1`` or ``.../kubepods/pod…`` there is theirs, not a job's.
    A path that starts with ``..`` lies outside our own cgroup namespace (we run in a container); the
    kubelet's tree above the pod is then hidden, so the path may start at the pod."""
    relative = bool(segments) and segments[0] == ".."
    while segments and segments[0] == "..":
        segments = segments[1:]
    root = segments[0] if segments else ""
    slurm = root == "slurm" or root.startswith("slurm_") or (
        root == "system.slice" and len(segments) > 1 and segments[1].endswith("slurmstepd.scope")
    )
    pods = root.startswith("kubepods") or (relative and root.startswith("pod"))
    return segments, slurm, pods


def parse_cgroup(text: str) -> CgroupFacts:
    """The owner facts of a ``/proc/PID/cgroup`` file, v1 or v2. Every line is read (on a v1 or hybrid host
    the hierarchies can disagree: a Slurm job in the freezer and cpuset trees, systemd's own in another);
    the first line that names a fact gives it."""
    slurm_job = pod_uid = container = None
    for path in _cgroup_paths(text):
        segments, slurm_tree, pod_tree = _anchors([s for s in path.split("/") if s])
        for i, seg in enumerate(segments):
            if slurm_job is None and slurm_tree and (m := _SLURM_JOB.fullmatch(seg)):
                slurm_job = m.group(1)  # /slurm/uid_N/job_N (v1), /system.slice/slurmstepd.scope/job_N (v2)
            if pod_uid is None and pod_tree and (seg.startswith("pod") or seg.startswith("kubepods")):
                if m := _POD.search(seg):
                    pod_uid = m.group(1).replace("_", "-")
            if container is None:
                if "conmon" in seg:  # cri-o's container monitor has a scope of its own: not the container
                    continue
                if m := _SCOPE.fullmatch(seg):
                    container = f"{_RUNTIME[m.group(1)]}://{m.group(2)}"
                elif _HEX64.fullmatch(seg):
                    parent = segments[i - 1] if i else ""
                    container = f"docker://{seg}" if parent == "docker" else seg  # /docker/ID: cgroupfs driver
    return CgroupFacts(slurm_job=slurm_job, pod_uid=pod_uid, container=container)


def parse_environ(data: bytes) -> dict[str, str]:
    """The few variables of ``ENV_KEYS`` from a NUL-separated environment block, as text; undecodable or
    unprintable values are left out (the block is whatever the process was started with)."""
    out: dict[str, str] = {}
    for entry in data.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if not sep:
            continue
        try:
            name = key.decode("ascii")
        except UnicodeDecodeError:
            continue
        if name not in ENV_KEYS or name in out:
            continue
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if text.isprintable() and len(text) <= 253:
            out[name] = text
    return out


def owner_from(facts: CgroupFacts, env: dict[str, str] | None, user: str | None) -> Owner:
    """One owner from the cgroup facts and, filling only what those lack, the environment."""
    env = env or {}
    slurm_job = facts.slurm_job
    if slurm_job is None:
        claimed = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
        slurm_job = claimed if claimed and _JOB_ID.fullmatch(claimed) else None
    pod_name = pod_namespace = None
    if facts.pod_uid is not None:  # a name only for a process the cgroup puts in a pod
        name = env.get("POD_NAME")
        if name is None and "KUBERNETES_SERVICE_HOST" in env:
            name = env.get("HOSTNAME")
        pod_name = name if name and _DNS_SUBDOMAIN.fullmatch(name) else None
        ns = env.get("POD_NAMESPACE")
        pod_namespace = ns if ns and _DNS_LABEL.fullmatch(ns) else None
    return Owner(
        user=user,
        slurm_job=slurm_job,
        pod_uid=facts.pod_uid,
        pod_name=pod_name,
        pod_namespace=pod_namespace,
        container=facts.container,
    )


def _read_bounded(path: str, limit: int) -> bytes | None:
    """At most ``limit`` bytes of a procfs file; None when it cannot be read (gone, or not ours to read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks: list[bytes] = []
        size = 0
        while size < limit and (chunk := os.read(fd, min(65536, limit - size))):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _real_uid(status: bytes) -> int | None:
    for line in status.splitlines():
        if line.startswith(b"Uid:"):
            fields = line.split()
            try:
                return int(fields[1])
            except (IndexError, ValueError):
                return None
    return None


class OwnerReader:
    """Owners of processes by (pid, start time), read from ``proc_root`` (a fake tree in the tests)."""

    def __init__(self, proc_root: str | os.PathLike[str] = "/proc", *, read_environ: bool = True) -> None:
        self._root = os.fspath(proc_root)
        self._read_environ = read_environ
        self._cache: OrderedDict[tuple[int, float | None], Owner] = OrderedDict()
        self._users: dict[int, str] = {}
        self.reads = 0  # processes actually read (the tests check the cache with it)

    def owner(self, pid: int, start_time: float | None) -> Owner | None:
        """The owner of ``pid`` started at ``start_time``; None when its procfs entry cannot be read at all
        (it exited). Without a start time the pid alone is not trusted across ticks: it is read again."""
        key = (pid, start_time)
        if start_time is not None and (hit := self._cache.get(key)) is not None:
            self._cache.move_to_end(key)
            return hit
        found = self._read(pid)
        if found is not None and start_time is not None:
            self._cache[key] = found
            if len(self._cache) > CACHE_MAX:
                self._cache.popitem(last=False)
        return found

    def _read(self, pid: int) -> Owner | None:
        base = f"{self._root}/{pid}"
        cgroup = _read_bounded(f"{base}/cgroup", CGROUP_READ_MAX)
        status = _read_bounded(f"{base}/status", 16 * 1024)
        if cgroup is None and status is None:
            return None
        self.reads += 1
        facts = parse_cgroup(cgroup.decode("utf-8", "replace")) if cgroup else CgroupFacts()
        env = None
        if self._read_environ:
            raw = _read_bounded(f"{base}/environ", ENVIRON_READ_MAX)  # EACCES for another user's: none
            env = parse_environ(raw) if raw else None
        uid = _real_uid(status) if status else None
        return owner_from(facts, env, self._user(uid))

    def _user(self, uid: int | None) -> str | None:
        if uid is None:
            return None
        name = self._users.get(uid)
        if name is None:
            import pwd  # noqa: PLC0415 - POSIX only, and only once per uid

            try:
                name = pwd.getpwuid(uid).pw_name
            except KeyError:  # no passwd entry (a container's uid): the number is what there is
                name = str(uid)
            if not name.isprintable() or len(name) > 64:
                name = str(uid)
            self._users[uid] = name
        return name
