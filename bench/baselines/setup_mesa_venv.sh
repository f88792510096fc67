#!/usr/bin/env bash
# Create (idempotently) the Python >= 3.12 venv that the Mesa baseline runs in.
#
# Mesa 3.5 needs Python >= 3.12, so it gets a venv of its own instead of the project's.
# `import mesa` also needs networkx, which mesa does not declare as a dependency (it is only
# in its "all"/"dev" extras), so we install it explicitly. The venv lives at bench/.venv-mesa
# and carries its own `.gitignore` ("*"), so git never sees it.
#
# Usage: bench/baselines/setup_mesa_venv.sh   (override the interpreter with PYTHON312=...)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
venv="$here/../.venv-mesa"

find_python() {
  if [ -n "${PYTHON312:-}" ]; then echo "$PYTHON312"; return; fi
  for cand in python3.13 python3.12 /root/.pyenv/versions/3.12*/bin/python3 \
              "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
    if command -v "$cand" >/dev/null 2>&1 \
       && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      echo "$cand"; return
    fi
  done
  echo "setup_mesa_venv.sh: no Python >= 3.12 found (set PYTHON312=/path/to/python)" >&2
  exit 1
}

if [ ! -x "$venv/bin/python" ]; then
  "$(find_python)" -m venv "$venv"
fi
echo '*' > "$venv/.gitignore"

# Already installed? Then there is nothing to do (no network needed on re-runs).
if ! "$venv/bin/python" -c 'import mesa, numpy, networkx' 2>/dev/null; then
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet 'mesa>=3.5,<4' numpy networkx
fi
"$venv/bin/python" -c 'import mesa, numpy, sys; print("mesa", mesa.__version__, "numpy", numpy.__version__, "python", sys.version.split()[0])'
