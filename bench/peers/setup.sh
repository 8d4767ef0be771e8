#!/usr/bin/env bash
# Create (or reuse) the peer virtualenv bench/.venv-peers with deltalake and pypaimon.
# The peers live apart from the project venv because pypaimon pins pyarrow<20.
# Usage: bash bench/peers/setup.sh        (prints the venv's python path on the last line)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$(dirname "$here")/.venv-peers"
python_bin="${PEERS_PYTHON:-python3}"
requirements=("pypaimon==2.1.0" "pypaimon-rust==0.4.0" "deltalake==1.6.6" "numpy" "pandas<3")
stamp="$venv/.requirements"

if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "${requirements[*]}" ]] \
   && "$venv/bin/python" -c "import deltalake, pypaimon, numpy, pyarrow" 2>/dev/null; then
  echo "reusing $venv" >&2
else
  echo "creating $venv with ${requirements[*]} (a few hundred MB of wheels)" >&2
  "$python_bin" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
  "$python_bin" "$here/../../scripts/progress.py" "$venv/bin/python" -m pip install --progress-bar raw \
    "${requirements[@]}" >&2
  echo "${requirements[*]}" > "$stamp"
fi
echo "$venv/bin/python"
