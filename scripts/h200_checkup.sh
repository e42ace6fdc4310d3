#!/usr/bin/env bash
# Issue #16's proof on the 2-card H200 machine (device kind nvidia-h200-x2), in about 3 minutes:
#   1. `gpu-triage baseline` on 1 card and then 2 (DDP, real NCCL), 20 s timed each, with a recording beside it;
#   2. `gpu-triage loader` on a real JPEG-decoding dataset generated here (2000 JPEGs in /tmp, PIL decode +
#      torchvision RandomResizedCrop/flip/normalize per sample), num_workers 0,2,4,8,16.
# Run from the repo root with $OUT set: `bash scripts/h200_checkup.sh` (it sources scripts/h200_env.sh unless
# that already ran in this shell). Results: $OUT/checkup/{baseline.json,baseline.parquet*,loader.json,...}
# and the whole log in $OUT/log.txt.
[[ ":${PYTHONPATH:-}:" == *":/tmp/site:"* ]] || . scripts/h200_env.sh
set -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never NVLink multicast
R=$OUT/checkup
DATA=/tmp/checkup-jpegs
mkdir -p "$R" "$DATA"
now() { date -u +%Y-%m-%dT%H:%M:%S+00:00; }
{ nvidia-smi -L; nvidia-smi topo -m; nproc; free -g
  python3 -c "import torch, torchvision, PIL; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'torchvision', torchvision.__version__, 'PIL', PIL.__version__)"
} > "$R/machine.txt" 2>&1
cat "$R/machine.txt"

echo "== 1 baseline: 1 card then 2 (NCCL), small MLP, 20 s each $(now)"
timeout -k 10 170 python3 -m gpu_triage baseline --gpus 2 --seconds 20 --model-size small --json \
  --record "$R/baseline.parquet" --interval 1 > "$R/baseline.json"
echo "baseline exit status $? (0 ok, 1 scaling under 50 %, 2 error, 130 interrupted)"
python3 -m gpu_triage diagnose "$R/baseline.parquet" > "$R/baseline-diagnose.txt" 2>&1
python3 - "$R/baseline.json" <<'PY'
import json, sys
from gpu_triage.checkup.baseline import BaselineReport, render
d = json.load(open(sys.argv[1]))
r = BaselineReport(d["device"], d["gpus"], d["model_size"], d["amp"], d["seconds"], runs=d["runs"], recording=d["recording"])
print(render(r))
PY

echo "== 2 loader: a real JPEG-decoding Dataset, workers 0,2,4,8,16 $(now)"
cat > "$DATA/jpegds.py" <<'PY'
"""2000 JPEGs (photo-like noise + gradients, 500x375, quality 90) decoded and augmented per sample, the way an
ImageNet-style training reads them."""
import os
from multiprocessing import Pool

import numpy as np
from PIL import Image
from torch.utils.data import Dataset
from torchvision import transforms

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "img")
N = 2000


def _make(i):
    rng = np.random.default_rng(i)
    y, x = np.mgrid[0:375, 0:500]
    base = np.stack([(x * (i % 7 + 1)) % 256, (y * (i % 5 + 1)) % 256, ((x + y) * 3) % 256], -1)
    img = np.clip(base + rng.normal(0, 40, base.shape), 0, 255).astype(np.uint8)
    Image.fromarray(img).save(os.path.join(ROOT, f"{i:05d}.jpg"), quality=90)


def generate():
    os.makedirs(ROOT, exist_ok=True)
    with Pool(min(16, os.cpu_count() or 1)) as pool:
        pool.map(_make, range(N))


class Jpegs(Dataset):
    def __init__(self):
        self.files = sorted(os.path.join(ROOT, f) for f in os.listdir(ROOT) if f.endswith(".jpg"))
        self.tf = transforms.Compose([
            transforms.RandomResizedCrop(224),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ])

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with Image.open(self.files[i]) as im:
            return self.tf(im.convert("RGB")), i % 1000


def make_dataset():
    return Jpegs()


if __name__ == "__main__":
    generate()
PY
( cd "$DATA" && time python3 jpegds.py ) && ls "$DATA/img" | wc -l && du -sh "$DATA/img"
# one intra-op thread per process, as torchrun-launched jobs run: otherwise ToTensor/Normalize spread over cores
OMP_NUM_THREADS=1 timeout -k 10 150 python3 -m gpu_triage loader "$DATA/jpegds.py:make_dataset" \
  --workers 0,2,4,8,16 --batch-size 32 --batches 40 --json > "$R/loader.json"
echo "loader exit status $?"
OMP_NUM_THREADS=1 timeout -k 10 100 python3 -m gpu_triage loader "$DATA/jpegds.py:make_dataset" \
  --workers 0,4,16 --batch-size 32 --batches 30 --pin-memory on > "$R/loader-pinned.txt"
echo "loader (pin_memory on) exit status $?"; cat "$R/loader-pinned.txt"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d['recommendation'])); [print(r['num_workers'], round(r['samples_per_s'] or 0), round(r['cpu_percent'] or 0), r['peak_rss_bytes']) for r in d['results']]" "$R/loader.json"
echo "== done $(now)"; ls -la "$R"
