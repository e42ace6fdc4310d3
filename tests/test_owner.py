"""Owner attribution: the real cgroup layouts of Docker, Kubernetes and Slurm (tests/data/cgroup/), the
environment filling only what the cgroup lacks, hostile values dropped, the cache keyed by start time,
and a real second user whose environment we may not read."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_triage.sources.owner import (
    CACHE_MAX,
    ENVIRON_READ_MAX,
    CgroupFacts,
    OwnerReader,
    owner_from,
    parse_cgroup,
    parse_environ,
)

DATA = Path(__file__).parent / "data" / "cgroup"

CASES = {
    "docker-v1-cgroupfs": CgroupFacts(
        container="docker://4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970"
    ),
    "docker-v1-systemd": CgroupFacts(
        container="docker://9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d"
    ),
    "docker-v2-systemd": CgroupFacts(
        container="docker://9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d"
    ),
    "docker-v2-cgroupfs": CgroupFacts(
        container="docker://4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970"
    ),
    "k8s-v1-cgroupfs": CgroupFacts(
        pod_uid="74c13223-5a00-11e9-b385-42010a80018d",
        container="34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376",
    ),
    "k8s-v1-systemd-crio": CgroupFacts(
        pod_uid="fbc202d3-da21-11e8-ab5e-42010a80014b",
        container="cri-o://0a1b22ec1361a97c3511db37a4bae932d41b22264e5b97611748f8b662312574",
    ),
    "k8s-v2-systemd-containerd": CgroupFacts(
        pod_uid="0e886e9a-3879-45f9-b44d-86ef9df03224",
        container="containerd://244a65edefdffe31685c42317c9054e71dc1193048cf9459e2a4dd35cbc1dba4",
    ),
    "k8s-v2-cgroupfs": CgroupFacts(
        pod_uid="0e886e9a-3879-45f9-b44d-86ef9df03224",
        container="244a65edefdffe31685c42317c9054e71dc1193048cf9459e2a4dd35cbc1dba4",
    ),
    "slurm-v1": CgroupFacts(slurm_job="280678"),
    "slurm-v2": CgroupFacts(slurm_job="1392969"),
    "user-v2": CgroupFacts(),
}


def test_every_kept_layout_is_tested() -> None:
    assert {p.name for p in DATA.iterdir() if p.name != "README.md"} == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_cgroup_layouts(name: str) -> None:
    assert parse_cgroup((DATA / name).read_text()) == CASES[name]


def test_a_job_dir_outside_slurm_and_a_pod_outside_kubepods_are_not_owners() -> None:
    text = "0::/user.slice/user-1000.slice/job_12/pod74c13223-5a00-11e9-b385-42010a80018d\n"
    assert parse_cgroup(text) == CgroupFacts()


@pytest.mark.parametrize(
    "path",
    [
        # systemd delegates user@UID.service's subtree to the user: any name can be made there
        "/user.slice/user-1000.slice/user@1000.service/slurm/uid_0/job_4242/step_0",
        "/user.slice/user-1000.slice/user@1000.service/system.slice/slurmstepd.scope/job_4242",
        "/user.slice/user-1000.slice/user@1000.service/kubepods/burstable/pod0e886e9a-3879-45f9-b44d-86ef9df03224",
        "/user.slice/user-1000.slice/user@1000.service/app.slice/kubepods-pod0e886e9a_3879_45f9_b44d_86ef9df03224.slice",
    ],
)
def test_a_users_own_delegated_cgroups_cannot_claim_a_job_or_a_pod(path: str) -> None:
    assert parse_cgroup(f"0::{path}\n") == CgroupFacts()


def test_seen_from_inside_a_container_a_pods_path_starts_above_our_namespace() -> None:
    """An exporter in a pod with its own cgroup namespace sees another pod's processes as ../../podUID/ID:
    the kubelet's tree above the pod is hidden, and the path is still the kubelet's, not a user's."""
    cid = "244a65edefdffe31685c42317c9054e71dc1193048cf9459e2a4dd35cbc1dba4"
    pod = "kubepods-burstable-pod0e886e9a_3879_45f9_b44d_86ef9df03224.slice"
    facts = parse_cgroup(f"0::/../../{pod}/cri-containerd-{cid}.scope\n")
    assert facts == CgroupFacts(pod_uid="0e886e9a-3879-45f9-b44d-86ef9df03224", container=f"containerd://{cid}")
    assert parse_cgroup(f"0::/../pod0e886e9a-3879-45f9-b44d-86ef9df03224/{cid}\n").pod_uid is not None
    assert parse_cgroup("0::/../user.slice/kubepods/pod" + "b" * 32 + "\n").pod_uid is None


def test_cri_o_conmon_scope_is_not_the_container() -> None:
    cid = "a" * 64
    text = f"0::/kubepods.slice/kubepods-pod{'b' * 32}.slice/crio-conmon-{cid}.scope\n"
    assert parse_cgroup(text) == CgroupFacts(pod_uid="b" * 32)


def _env(**values: str) -> bytes:
    return b"\0".join(f"{k}={v}".encode() for k, v in values.items()) + b"\0"


def test_environment_names_the_pod_and_fills_the_slurm_job() -> None:
    pod = CgroupFacts(pod_uid="0e886e9a-3879-45f9-b44d-86ef9df03224", container="containerd://" + "c" * 64)
    env = parse_environ(_env(POD_NAME="train-7f9c-0", POD_NAMESPACE="ml", PATH="/usr/bin"))
    owner = owner_from(pod, env, "alice")
    assert (owner.pod_name, owner.pod_namespace, owner.user) == ("train-7f9c-0", "ml", "alice")
    # without the downward-API variables, HOSTNAME is the pod's name inside Kubernetes
    env = parse_environ(_env(HOSTNAME="train-7f9c-0", KUBERNETES_SERVICE_HOST="10.0.0.1"))
    assert owner_from(pod, env, None).pod_name == "train-7f9c-0"
    # HOSTNAME alone (a docker container, a login shell) is no pod name
    assert owner_from(pod, parse_environ(_env(HOSTNAME="box")), None).pod_name is None
    # no pod in the cgroup: no pod name, whatever the environment claims
    assert owner_from(CgroupFacts(), parse_environ(_env(POD_NAME="x")), None).pod_name is None
    assert owner_from(CgroupFacts(), parse_environ(_env(SLURM_JOBID="77")), None).slurm_job == "77"


def test_the_cgroup_wins_over_what_the_environment_claims() -> None:
    env = parse_environ(_env(SLURM_JOB_ID="1"))
    assert owner_from(CgroupFacts(slurm_job="4242"), env, None).slurm_job == "4242"


@pytest.mark.parametrize(
    "key,value",
    [
        ("SLURM_JOB_ID", "12; rm -rf /"),
        ("SLURM_JOB_ID", "9" * 30),
        ("POD_NAME", "\x1b[31mred"),
        ("POD_NAME", "UPPER"),
        ("POD_NAMESPACE", "a" * 64),
    ],
)
def test_hostile_values_are_dropped(key: str, value: str) -> None:
    pod = CgroupFacts(pod_uid="b" * 32)
    owner = owner_from(pod, parse_environ(_env(**{key: value})), None)
    assert (owner.slurm_job, owner.pod_name, owner.pod_namespace) == (None, None, None)


def test_environ_undecodable_and_binary_entries_are_skipped() -> None:
    raw = b"POD_NAME=\xff\xfe\0\xff=1\0noequals\0POD_NAMESPACE=ml\0"
    assert parse_environ(raw) == {"POD_NAMESPACE": "ml"}


def _fake_proc(root: Path, pid: int, cgroup: str, *, uid: int = 0, environ: bytes | None = None) -> None:
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup").write_text(cgroup)
    (d / "status").write_text(f"Name:\tpython\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    if environ is not None:
        (d / "environ").write_bytes(environ)


def test_reader_builds_the_owner_from_the_files(tmp_path: Path) -> None:
    _fake_proc(tmp_path, 41, (DATA / "slurm-v2").read_text(), uid=0, environ=_env(SLURM_JOB_ID="1"))
    owner = OwnerReader(tmp_path).owner(41, 100.0)
    assert owner is not None
    assert (owner.slurm_job, owner.user) == ("1392969", "root")


def test_reader_caches_per_pid_and_start_time(tmp_path: Path) -> None:
    _fake_proc(tmp_path, 41, (DATA / "slurm-v2").read_text())
    reader = OwnerReader(tmp_path)
    first = reader.owner(41, 100.0)
    _fake_proc(tmp_path, 41, (DATA / "docker-v2-systemd").read_text())  # pid 41 reused by a container
    assert reader.owner(41, 100.0) == first and reader.reads == 1  # the same process: cached
    again = reader.owner(41, 250.0)  # a new process on the same pid
    assert again is not None and again.container is not None and again.slurm_job is None
    assert reader.reads == 2


def test_reader_cache_is_bounded(tmp_path: Path) -> None:
    _fake_proc(tmp_path, 5, "0::/\n")
    reader = OwnerReader(tmp_path)
    for start in range(CACHE_MAX + 10):
        reader.owner(5, float(start))
    assert len(reader._cache) == CACHE_MAX


def test_reader_gone_process_is_none_and_a_huge_environ_is_read_bounded(tmp_path: Path) -> None:
    assert OwnerReader(tmp_path).owner(999, 1.0) is None
    junk = b"X=" + b"y" * (ENVIRON_READ_MAX * 2) + b"\0SLURM_JOB_ID=5\0"
    _fake_proc(tmp_path, 6, "0::/\n", environ=junk)
    owner = OwnerReader(tmp_path).owner(6, 1.0)
    assert owner is not None and owner.slurm_job is None  # past the bound: not read, not a failure


def test_reader_on_this_machine_names_our_user() -> None:
    owner = OwnerReader().owner(os.getpid(), None)
    assert owner is not None
    assert owner.user == pwd.getpwuid(os.getuid()).pw_name


@pytest.fixture
def second_user() -> str:
    if os.geteuid() != 0:
        pytest.skip("needs root to make a second user")
    name = "gtowner"
    subprocess.run(["useradd", "--no-create-home", name], capture_output=True, check=False)
    pwd.getpwnam(name)
    return name


def test_another_users_process_environment_is_not_readable(second_user: str) -> None:
    """A reader running as a second user (a forked child that dropped root) sees our process's cgroup and
    user but not its environment (EACCES from the kernel): no environment facts, and nothing fails."""
    user = pwd.getpwnam(second_user)
    env = {**os.environ, "SLURM_JOB_ID": "31337"}
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        read_fd, write_fd = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe
            try:
                os.setgroups([])
                os.setgid(user.pw_gid)
                os.setuid(user.pw_uid)
                o = OwnerReader().owner(target.pid, None)
                readable = os.access(f"/proc/{target.pid}/environ", os.R_OK)
                line = f"{o.user if o else '-'} {o.slurm_job if o else '-'} {readable}"
                os.write(write_fd, line.encode())
            finally:
                os._exit(0)
        os.close(write_fd)
        os.waitpid(child, 0)
        with os.fdopen(read_fd, "rb") as r:
            seen = r.read().decode().split()
        assert seen == ["root", "None", "False"], seen
        # root, reading the same process, sees the job id it was started with
        mine = OwnerReader().owner(target.pid, None)
        assert mine is not None and mine.slurm_job == "31337"
    finally:
        target.kill()
        target.wait()
