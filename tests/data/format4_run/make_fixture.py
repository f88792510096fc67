"""Make tests/data/format4_run: a small run stopped after round 3 of 6 (checkpoint format 4)."""
import sys
from pathlib import Path

from shoal.config import load_config
from shoal.run import create_run

out = Path(sys.argv[1])
cfg = load_config("tests/data/format4_run.yaml", [f"output.dir={out}"])
run = create_run(cfg)
driver = run.driver()
for _ in range(3):
    driver.step()
run.writer.flush()
run.dir.write_meta(status="running")
run.close()
print(run.dir.root)
