#!/usr/bin/env bash
# The common start of every session on the real H200 machine, sourced by scripts/h200_session*.sh (one copy,
# so the sessions cannot drift apart). That machine has no network: the wheels in .whl/ (carried) are
# installed into /tmp/site without touching its Python, put on PYTHONPATH with our app/, every later line of
# output goes both to the terminal and to $OUT/log.txt, and the log starts with what machine this is.
# Run the session from the repo root; $OUT is the results folder the device tool provides.
set -u
: "${OUT:?OUT must name the folder for the results}"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/app
exec > >(tee "$OUT/log.txt") 2>&1
echo "== machine"; nvidia-smi -L; nproc
