"""The GPUs wait on kernel launches: many tiny kernels the host issues one by one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_triage.diagnosis.facts import Fact
from gpu_triage.diagnosis.mechanisms.base import SM_KNOWN, WAITS, Advice, Cause, Rule, gbs, ge, pct
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements


def launch_advice() -> list[str]:
    return ["capture the step in CUDA graphs (torch.cuda.graphs / torch.compile(mode='reduce-overhead'))",
            "torch.compile to fuse the many small kernels into few large ones",
            "larger batches so each kernel does more work per launch"]


class LaunchOverhead(Rule):
    name, bottleneck, needs = Mechanism.LAUNCH_OVERHEAD, Bottleneck.LAUNCH_OVERHEAD, (WAITS, SM_KNOWN)

    def detect(self, m: Measurements) -> Cause | None:
        th, hf = m.th, m.hf
        if not (ge(hf.gpu_mean, th.stall_util_pct) and hf.sm_mean < th.sm_idle_pct):
            return None
        return self.cause(th.conf_launch, m.base + [
            Fact(f"GPU-Util {pct(hf.gpu_mean)} with SM activity {hf.sm_mean:.1f} %: many tiny kernels, the GPU "
                 "waits on kernel launches", "sm_active_mean_pct", hf.sm_mean),
            Fact(f"no input pressure: CPU {pct(hf.cpu_busy)}, disks {pct(hf.disk_busy)}, iowait {pct(hf.iowait)}, "
                 f"PCIe host-to-device {gbs(hf.h2d_bytes_per_s)}", "cpu_busy_pct", hf.cpu_busy),
        ])

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        return launch_advice(), []
