#!/usr/bin/env bash
# The herd-effect experiment end to end: one base run, forked at round 10 into three arms
# (one initial upvote / no vote / one downvote on the same 40 posts), each arm replicated
# with 5 seeds for the rounds after the fork (arms of a replicate share the seed), then the
# mean final score of the treated posts per arm with a 95% interval over replicates.
# Usage: configs/herd_effect/run.sh [OUTPUT_FOLDER]   (about a minute)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-runs/herd_effect}"
shoal="${SHOAL:-shoal}"
mkdir -p "$out"
base=$("$shoal" run "$here/../herd_effect.yaml" --out "$out" --quiet 2>&1 >/dev/null \
       | sed -n 's/^run \([^ ]*\) → .*/\1/p')
for seed in 1 2 3 4 5; do
  for arm in up control down; do
    "$shoal" fork "$out/$base" --round 10 --seed "$seed" --intervene "$here/$arm.yaml" \
      --name "herd-$arm-s$seed" --quiet >/dev/null 2>&1
  done
done
python3 - "$out" <<'PY'
import glob, sys
import duckdb, numpy as np
out = sys.argv[1]
treated = """SELECT s.up - s.down AS score FROM post_stats s WHERE s.post_id IN
             (SELECT unnest(from_json(effect->'$.post_ids', '["BIGINT"]')) FROM interventions)"""
print(f"{'arm':8} {'mean final score':>17} {'95% CI':>8}   per replicate")
for arm in ("up", "control", "down"):
    means = []
    for seed in range(1, 6):
        (db,) = glob.glob(f"{out}/herd-{arm}-s{seed}-*/trajectory.duckdb")
        con = duckdb.connect(db, read_only=True)
        means.append(con.sql(treated).df().score.mean())
        con.close()
    m = np.array(means)
    half = 2.776 * m.std(ddof=1) / np.sqrt(len(m))  # t(0.975, 4 df)
    print(f"{arm:8} {m.mean():17.2f} {half:8.2f}   {np.round(m, 2).tolist()}")
PY
