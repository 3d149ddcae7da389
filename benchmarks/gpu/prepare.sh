#!/usr/bin/env bash
# Run HERE (a machine that reaches PyPI), in the checkout the device tool sends, before a device
# session: puts into benchmarks/gpu/wheels (ignored by git, sent with `carry`) psgd's own wheel
# and the wheels of the dependencies the lent machine's image lacks, for its Python 3.12 on
# x86-64 Linux, then prints the `carry` value for the device `run` call.
#
#   bash benchmarks/gpu/prepare.sh
#
# The image already holds torch (CUDA), numpy, scipy, scikit-learn, PyYAML, tqdm, msgpack,
# cloudpickle, matplotlib and requests (the device tool's KINDS.md lists its packages); it
# lacks pyzmq, crc32c and mnist1d. Their versions follow pyproject.toml's bounds.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
WHEELS=benchmarks/gpu/wheels
MISSING=(pyzmq crc32c mnist1d)
if [ -n "${PSGD_PYTHON:-}" ]; then PY=$PSGD_PYTHON
elif [ -x "$ROOT/.venv/bin/python" ]; then PY=$ROOT/.venv/bin/python
else PY=python3; fi

rm -rf "$WHEELS"
mkdir -p "$WHEELS"
mapfile -t SPECS < <("$PY" benchmarks/gpu/checks.py deps "${MISSING[@]}")
PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64; do
  PLATFORMS+=(--platform "$p")
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]}" -d "$WHEELS" "${SPECS[@]}"
"$PY" -m pip wheel -q --no-deps -w "$WHEELS" .
rm -rf build  # setuptools' scratch folder
"$PY" benchmarks/gpu/checks.py source-hash >"$WHEELS/SOURCE"

echo "wheels for the device (${SPECS[*]}, psgd):"
ls -l "$WHEELS"/*.whl | awk '{printf "  %8.1f KiB  %s\n", $5 / 1024, $NF}'
du -sh "$WHEELS" | awk '{print "  total " $1}'
echo 'carry: ["benchmarks/gpu/wheels"]'
