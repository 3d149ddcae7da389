# What every study script here begins with, sourced as its first command:
#   . "$(dirname "$0")/../study_env.sh"
# strict mode; HERE, the study's own folder; the repository root as the working
# directory; and the commands the study runs, PSGD and PYTHON (set either to use
# another install).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$HERE/../.."
PSGD="${PSGD:-psgd}"
PYTHON="${PYTHON:-python3}"
