#!/usr/bin/env bash
# Installs what oslens needs on a fresh Debian machine, idempotently: Debian packages,
# the Rust toolchain check, and the Python virtual environment in .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(build-essential gfortran pkg-config linux-perf uftrace chromium procps util-linux mount libbpf1 sysbench stress-ng zsh man-db)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages: ${missing[*]}; run 'sudo make setup' or install them" >&2
    exit 1
  fi
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] || { echo "setup: Rust (cargo >= 1.80) is required: install it with rustup" >&2; exit 1; }
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if ! cmp -s requirements.lock .venv/.requirements.lock 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check -r requirements.lock
  cp requirements.lock .venv/.requirements.lock
fi
if ! cmp -s requirements-notebook.lock .venv/notebook-extra/.requirements.lock 2>/dev/null; then
  rm -rf .venv/notebook-extra
  .venv/bin/pip install -q --disable-pip-version-check --no-deps --target .venv/notebook-extra -r requirements-notebook.lock
  cp requirements-notebook.lock .venv/notebook-extra/.requirements.lock
fi
