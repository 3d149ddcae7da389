#!/usr/bin/env bash
# CI: the package a user installs is the one tested. Builds the sdist and, from it, the wheel;
# installs the wheel (not editable) into a fresh virtualenv outside the checkout; then, from a
# directory outside the checkout, runs what a new user runs first. Any non-zero exit fails CI.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
configs="$repo/configs"

step() { echo "== install check: $*" >&2; }

step "build the sdist and the wheel (the wheel from the sdist)"
python3 -m venv "$work/build-env"
"$work/build-env/bin/pip" install -q 'build>=1.0,<2'
"$work/build-env/bin/python" -m build -q --outdir "$work/dist" "$repo" >/dev/null
ls "$work"/dist/psgd-*.tar.gz >/dev/null
wheel="$(ls "$work"/dist/psgd-*.whl)"

step "install $(basename "$wheel") into a fresh virtualenv"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q torch==2.13.0 "${wheel}[bench]"
export PATH="$work/venv/bin:$PATH"
mkdir "$work/user" && cd "$work/user"
installed="$(python -c 'import psgd, os; print(os.path.dirname(psgd.__file__))')"
case "$installed" in
  "$work/venv/"*) ;;
  *) echo "install check: psgd was imported from $installed, not from the installed wheel" >&2; exit 1 ;;
esac

step "psgd --version"
psgd --version
step "the quickstart (shortened)"
psgd launch "$configs/quickstart.yaml" --out real --quiet --set train.steps_per_worker=100
step "a small run on the virtual cluster"
psgd launch "$configs/quickstart.yaml" --on sim --out sim --quiet --set cluster.workers=16 \
    --set train.steps_per_worker=50
step "psgd replay of the real run"
psgd replay real
step "a short staleness tune on the virtual cluster"
psgd tune staleness "$configs/quickstart.yaml" --on sim --bounds 0,4 --seeds 2 --min-seeds 1 --out tune \
    --set train.steps_per_worker=300 --target-accuracy 0.8
step "psgd doctor"
psgd doctor
step "passed"
