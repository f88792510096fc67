#!/usr/bin/env bash
# The herd-effect experiment end to end: one base run, forked at round 10 into three arms
# (one initial upvote / no vote / one downvote on the same 40 posts), each arm replicated
# with 5 seeds for the rounds after the fork (arms of a replicate share the seed), then the
# mean final score of the treated posts per arm with a 95% interval over replicates.
# Usage: configs/herd_effect/run.sh [OUTPUT_FOLDER]   (about 40 s on 2 idle cores)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-runs/herd_effect}"
# The shoal command: $SHOAL, else the repository's .venv (the README's install), else PATH.
shoal="${SHOAL:-}"
if [[ -z "$shoal" ]]; then
  if [[ -x "$here/../../.venv/bin/shoal" ]]; then shoal="$here/../../.venv/bin/shoal"
  else shoal="$(command -v shoal || true)"; fi
fi
if [[ -z "$shoal" || ! -x "$shoal" ]]; then
  echo "run.sh: no shoal command found; install Shoal as the README says" \
       "(python3 -m venv .venv && .venv/bin/pip install -e .) or set SHOAL=/path/to/shoal" >&2
  exit 1
fi
python="$(dirname "$shoal")/python"  # the interpreter Shoal (and duckdb) is installed in
[[ -x "$python" ]] || python=python3
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
step() {  # run a shoal command; on failure show its output and stop
  if ! "$shoal" "$@" >"$log" 2>&1; then
    echo "run.sh: failed: shoal $*" >&2; cat "$log" >&2; exit 1
  fi
}
mkdir -p "$out"
echo "base run (3,000 agents, 20 rounds) into $out ..." >&2
step run "$here/../herd_effect.yaml" --out "$out" --quiet
base=$(sed -n 's/^run \([^ ]*\) → .*/\1/p' "$log" | head -n 1)
[[ -n "$base" ]] || { echo "run.sh: could not read the base run's id" >&2; cat "$log" >&2; exit 1; }
forks=()  # "arm seed run_id" of this invocation's forks (an earlier run's stay out)
for seed in 1 2 3 4 5; do
  for arm in up control down; do
    echo "fork: arm $arm, seed $seed" >&2
    step fork "$out/$base" --round 10 --seed "$seed" --intervene "$here/$arm.yaml" \
      --name "herd-$arm-s$seed" --quiet
    id=$(sed -n 's/^fork \([^ ]*\) of .*/\1/p' "$log" | head -n 1)
    [[ -n "$id" ]] || { echo "run.sh: could not read the fork's id" >&2; cat "$log" >&2; exit 1; }
    forks+=("$arm $seed $id")
  done
done
"$python" - "$out" "${forks[@]}" <<'PY'
import sys
import duckdb, numpy as np
out = sys.argv[1]
runs = {(arm, int(seed)): run for arm, seed, run in (f.split() for f in sys.argv[2:])}
treated = """SELECT s.up - s.down AS score FROM post_stats s WHERE s.post_id IN
             (SELECT unnest(from_json(effect->'$.post_ids', '["BIGINT"]')) FROM interventions)"""
print(f"{'arm':8} {'mean final score':>17} {'95% CI':>8}   per replicate")
for arm in ("up", "control", "down"):
    means = []
    for seed in range(1, 6):
        db = f"{out}/{runs[arm, seed]}/trajectory.duckdb"
        con = duckdb.connect(db, read_only=True)
        means.append(con.sql(treated).df().score.mean())
        con.close()
    m = np.array(means)
    half = 2.776 * m.std(ddof=1) / np.sqrt(len(m))  # t(0.975, 4 df)
    print(f"{arm:8} {m.mean():17.2f} {half:8.2f}   {np.round(m, 2).tolist()}")
PY
