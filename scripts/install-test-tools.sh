#!/usr/bin/env bash
# The tools the end-to-end tests start, installed from the Debian packages where missing
# (idempotent; needs root, or sudo): headless Chromium (tests/test_html_report.py opens
# report.html in it) and a single-node SLURM with munge (tests/test_slurm.py starts one:
# tests/slurm.py). README's test command and .ci/run both call this script.
set -euo pipefail
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO=sudo; else SUDO=; fi
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v slurmctld >/dev/null || missing+=(slurmctld slurmd slurm-client munge)
if [ ${#missing[@]} -gt 0 ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
