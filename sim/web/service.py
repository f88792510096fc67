"""What `shoal serve` and `shoal mcp` can see and do in a folder of runs: the one layer
both the REST API and the MCP tools call, so the two always agree.

Every answer is JSON-able data, aggregated in DuckDB next to the data: a run's pages get
per-round summaries, paged lists and samples, never one row per agent of a large run.
Reads go through the run's history (a fork's early rounds are its parent's) and, while a
run is being written, through its live mirror (`output.live_parquet`), so the writer is
never blocked. Paths: a run is named by its id, a config by a path inside the folder; a
name that leads outside it (`..`, an absolute path, a symbolic link out) is refused, as
is a run whose history lies outside it, and a config (checked, started, or a fork's
`--set` fields and added interventions) that names a file or folder outside it
(shoal.web.paths). A request's numbers out of range are refused naming the field.
Mutations (start, stop, resume, fork, interview, analysis) are refused when the folder is
served read-only.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from shoal.analysis.metrics import esteban_ray_binned
from shoal.config.yaml_text import dump_yaml
from shoal.core.errors import InputError
from shoal.store.checkpoints import CheckpointError
from shoal.store.history_sql import Limits, attach_history, bound_connection, select_rows
from shoal.store.knowledge import relations_sql
from shoal.store.lineage import (
    held_by_writer,
    lineage,
    read_table,
    run_status,
    run_tree,
    runs_folder,
)
from shoal.store.run_dir import RunDir
from shoal.web.jobs import Job, Jobs

SQL_AT_ONCE = 2  # readers' SQL queries run at once; the others wait their turn
MAX_COMPARED = 20  # runs one comparison reads (the page shows a handful)
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
MAX_PAGE = 500  # rows per page of any list
MAX_NODES = 5000  # nodes a network view may ask for
MAX_OFFSET = 2**53  # the furthest a page may start (DuckDB's OFFSET is a BIGINT)
ECHO_READERS = 20_000  # readers the echo share is measured on (a uniform sample above)
LIKES = ("like", "upvote")
REPOSTS = ("repost", "quote")
REPLIES = ("reply", "comment")


# (a rule run asked through a server started without an endpoint: the command line's
# "pass --base-url" means nothing to a browser's user)
NO_ENDPOINT = ("the run has no LLM providers of its own, and this server was started "
               "without one: start it again with `shoal serve DIR --base-url URL --model M` "
               "(or `--base-url loopback` for a dry run)")


class WebError(InputError):
    """A request the server refuses; `status` is its HTTP status."""

    status = 400


class NotFound(WebError):
    status = 404


class Forbidden(WebError):
    status = 403


class Conflict(WebError):
    status = 409


def _reads(method: Callable[..., Any]) -> Callable[..., Any]:
    """A read of one run (its first argument): its queries share one connection."""
    @functools.wraps(method)
    def wrapper(self: Folder, run_id: str, *args: Any, **kwargs: Any) -> Any:
        with self.reading(run_id):
            return method(self, run_id, *args, **kwargs)
    return wrapper


class Folder:
    """A folder of runs as `shoal serve` shows it. `base_url`/`model`: the LLM endpoint
    for interviews and analyses of runs that have none of their own (rule runs)."""

    def __init__(self, root: str | Path, read_only: bool = False,
                 base_url: str | None = None, model: str | None = None):
        root = runs_folder(root, "the folder")
        if base_url is not None and base_url != "loopback" and \
                not re.match(r"^https?://[^/\s]+", base_url):
            raise InputError(f"--base-url {base_url}: expected an http:// or https:// "
                             "address of an OpenAI-compatible endpoint, or 'loopback'")
        self.root = root.resolve()
        self.read_only = read_only
        self.base_url = base_url
        self.model = model
        self.jobs = Jobs(self.root)
        self._local = threading.local()  # the connections of the requests running now
        self._lock = threading.Lock()
        self._sql_slots = threading.BoundedSemaphore(SQL_AT_ONCE)  # readers' own queries
        # (run, its creation, aggregate) -> (last round computed, its rows): `_per_round`
        self._rounds_cache: dict[tuple[str, str, str], tuple[int, list[dict[str, Any]]]] = {}

    # ------------------------------------------------------------ paths and runs

    def shown(self, text: str) -> str:
        """`text` with this folder's own path written relative to it: answers name runs
        and files as a reader of the folder knows them, never where the folder lies."""
        return text.replace(f"{self.root}/", "").replace(str(self.root), ".")

    def _inside(self, path: Path) -> bool:
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError):  # a loop of symbolic links
            return False
        return resolved == self.root or self.root in resolved.parents

    def _link_out(self, folder: Path) -> str | None:
        """The first path under `folder` (relative to it) that is a symbolic link leading
        outside the served folder, or None (links to folders are not followed)."""
        todo = [folder]
        while todo:
            try:
                entries = os.scandir(todo.pop())
            except FileNotFoundError:  # (a writer renamed it meanwhile: a checkpoint's
                continue               # temporary folder, made whole by its rename)
            with entries:
                for entry in entries:
                    if entry.is_symlink():
                        if not self._inside(Path(entry.path)):
                            return str(Path(entry.path).relative_to(folder))
                    elif entry.is_dir():
                        todo.append(Path(entry.path))
        return None

    def file(self, rel: str, what: str = "file") -> Path:
        """A path inside the folder, given relative to it (403 if it leads outside)."""
        if not isinstance(rel, str) or not rel.strip():
            raise WebError(f"the {what} path is empty")
        if Path(rel).is_absolute() or ".." in Path(rel).parts or "\x00" in rel:
            raise Forbidden(f"{rel}: the {what} must be a path inside the served folder, "
                            "without '..'")
        path = self.root / rel
        if not self._inside(path):  # a symbolic link that leads out
            raise Forbidden(f"{rel}: leads outside the served folder")
        return path

    def run_dir(self, run_id: str, links: bool = True) -> RunDir:
        """The run `run_id` of the folder (404 if there is none; 403 if its name or its
        history leads outside the folder, or, unless `links` is false, a symbolic link
        under it does)."""
        if not RUN_ID.match(run_id or ""):
            raise Forbidden(f"{run_id!r}: not a run id (letters, digits, '.', '_', '-')")
        path = self.root / run_id
        if not self._inside(path):
            raise Forbidden(f"{run_id}: leads outside the served folder")
        if not (path / "run.json").is_file():
            raise NotFound(f"no run {run_id} in {self.root.name}")
        link = self._link_out(path) if links else None
        if link is not None:  # (its config, history or checkpoints read from elsewhere)
            raise Forbidden(f"{run_id}: its {link} is a symbolic link that leads outside "
                            "the served folder")
        run_dir = RunDir(path)
        for seg in lineage(path):
            if seg.dir is not None and not self._inside(seg.dir.root):
                raise Forbidden(f"{run_id}: its history runs through "
                                f"{seg.dir.run_id}, outside the served folder")
        return run_dir

    def writable(self) -> None:
        """Refuse a mutation when the folder is served read-only."""
        if self.read_only:
            raise Forbidden("the server is read-only (--read-only): nothing can be started, "
                            "stopped, forked or asked")

    # ------------------------------------------------------------ SQL

    @contextmanager
    def reading(self, run_id: str) -> Iterator[None]:
        """Hold one connection to the run's history while the block runs (one request's
        queries share it). None is kept between requests: a read-only attachment would
        keep another process from resuming or analysing the run."""
        cons = self._local.__dict__.setdefault("cons", {})
        if run_id in cons:
            yield
            return
        run_dir = self.run_dir(run_id)
        con = duckdb.connect()
        try:
            bound_connection(con, memory_mb=2048, threads=4)
            live = attach_history(con, run_dir.root, live=True)
        except InputError as exc:
            con.close()
            raise Conflict(str(exc)) from None
        except duckdb.Error as exc:
            con.close()
            raise Conflict(f"{run_id}: cannot be read now ({str(exc).splitlines()[0]})"
                           ) from None
        cons[run_id] = (con, live)
        committed = self._local.__dict__.setdefault("committed", {})
        try:
            yield
        finally:
            del cons[run_id]
            committed.pop(run_id, None)
            con.close()

    @contextmanager
    def cursor(self, run_id: str) -> Iterator[tuple[duckdb.DuckDBPyConnection, int | None]]:
        """A cursor over the run's history (`hist` views, the live mirror while it runs),
        and the last round a live run's mirror has whole (None: read from its file)."""
        with self.reading(run_id):
            con, live = self._local.cons[run_id]
            cur = con.cursor()
            try:
                cur.execute("USE hist")
                yield cur, live
            finally:
                cur.close()

    def rows(self, run_id: str, sql: str, params: list[Any] | None = None
             ) -> list[dict[str, Any]]:
        """Rows of one of the server's own queries over the run's history."""
        with self.cursor(run_id) as (cur, _):
            try:
                cur.execute(sql, params or [])
            except duckdb.CatalogException as exc:  # a table an older run does not have
                if "does not exist" in str(exc):
                    return []
                raise
            cols = [d[0] for d in cur.description or []]
            return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]

    @_reads
    def sql(self, run_id: str, sql: str, limit: int = 100) -> dict[str, Any]:
        """A reader's own SELECT, through the analyst's read-only guard and limits."""
        limit = _whole("limit", limit, 1, 1000)
        # A few readers' queries at a time: each has its own connection and memory limit
        # (and DuckDB does not count every string against it), so the bound on the
        # process is this many of them, not one.
        with self._sql_slots, self.cursor(run_id) as (cur, _):
            return select_rows(cur, sql, Limits(rows=limit, timeout_s=30)).as_dict()

    # ------------------------------------------------------------ runs

    def runs(self, q: str | None = None, status: str | None = None) -> dict[str, Any]:
        """The lineage tree of the folder's runs, filtered by text and status."""
        out = []
        for e in run_tree(self.root, within=True):
            meta = e.meta
            # (what the listing opens: a link out of the folder is not followed, and a
            # pipe named trajectory.duckdb would block the open, and this thread, for good)
            link = next((f.name for f in (e.dir.config, e.dir.db)
                         if f.is_symlink() and not self._inside(f)), None)
            row = {"run_id": e.dir.run_id, "name": meta.get("name"),
                   "parent_run_id": e.parent_run_id, "fork_round": e.fork_round,
                   "depth": e.depth, "status": e.status, "rounds_done": e.rounds_done,
                   "rounds": meta.get("rounds"),
                   "agents": None if link else _agents(e.dir),
                   "created_at": meta.get("created_at"),
                   "problem": e.problem and self.shown(e.problem),
                   **({"llm_calls": None, "cost_usd": None} if link else _llm_totals(e.dir))}
            if link is not None:
                row["problem"] = (f"its {link} is a symbolic link that leads outside the "
                                  "served folder")
            if not RUN_ID.match(e.dir.run_id):  # listed, but its pages refuse the name
                row["problem"] = ("its folder's name is not a run id (letters, digits, '.', "
                                  "'_', '-'): rename the folder to open it here")
            if q and q.lower() not in f"{row['run_id']} {row['name']}".lower():
                continue
            if status and row["status"] != status:
                continue
            out.append(row)
        return {"runs": out}

    @_reads
    def run(self, run_id: str) -> dict[str, Any]:
        """One run: status, size, history, the interventions that fired."""
        run_dir = self.run_dir(run_id)
        meta, cfg = run_dir.read_meta(), run_dir.read_config()
        latest = run_dir.checkpoints.latest()
        platforms = self._platforms(run_id)
        segs = lineage(run_dir.root)
        tables = {r["table_name"] for r in self.rows(
            run_id, "SELECT table_name FROM duckdb_tables() UNION SELECT view_name "
                    "FROM duckdb_views() WHERE database_name = 'hist'")}
        fired = self.rows(run_id, "SELECT round, idx, kind, spec FROM interventions "
                                  "ORDER BY round, idx") if "interventions" in tables else []
        job = self.jobs.for_run(run_id)
        return {
            "run_id": run_id, "name": meta.get("name"),
            "status": run_status(run_dir, meta),
            "rounds_done": meta.get("rounds_done") if latest is None else latest,
            "rounds": meta.get("rounds"), "agents": _agents(run_dir),
            "topics": [t["name"] for t in cfg.get("topics", [])],
            "platforms": platforms,
            "lineage": [{"run_id": s.dir.run_id if s.dir else run_id,
                         "last_round": s.last_round} for s in segs],
            "parent_run_id": (meta.get("lineage") or {}).get("parent_run_id"),
            "fork_round": (meta.get("lineage") or {}).get("fork_round"),
            "interventions": [{**r, "spec": _json(r["spec"])} for r in fired],
            "markets": "market" in platforms,
            "graph": bool(((cfg.get("memory") or {}).get("graph") or {}).get("enabled")),
            "live": _being_written(run_dir),
            "job": job.as_dict() if job else None,
            "config_yaml": dump_yaml(cfg, sort_keys=False, allow_unicode=True)}

    @_reads
    def series(self, run_id: str) -> dict[str, Any]:
        """Per-round aggregates of a run, each an array aligned with `rounds`."""
        rounds = self.rows(run_id, "SELECT * FROM rounds ORDER BY round")
        if self.rows(run_id, "SELECT min(round) = 0 AS initial FROM beliefs")[0]["initial"] \
                and not (rounds and rounds[0]["round"] == 0):
            rounds.insert(0, {"round": 0})  # the initial state, before any round ran
        index = {r["round"]: i for i, r in enumerate(rounds)}
        n = len(rounds)

        def column(values: dict[int, Any]) -> list[Any]:
            out: list[Any] = [None] * n
            for r, v in values.items():
                if r in index:
                    out[index[r]] = v
            return out

        beliefs: dict[str, dict[str, list[Any]]] = {}
        for r in self._per_round(run_id, "quantiles", f"""
                SELECT topic, round, avg(position) AS mean,
                       quantile_cont(position, {list(QUANTILES)}) AS q
                FROM beliefs WHERE position IS NOT NULL AND round > {{lo}} AND round <= {{hi}}
                GROUP BY ALL ORDER BY topic, round"""):
            t = beliefs.setdefault(r["topic"], {k: [None] * n for k in
                                                ("mean", "q05", "q25", "q50", "q75", "q95")})
            if r["round"] in index:
                i = index[r["round"]]
                t["mean"][i] = r["mean"]
                for name, v in zip(("q05", "q25", "q50", "q75", "q95"), r["q"], strict=True):
                    t[name][i] = v
        bins: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        for r in self._per_round(run_id, "bins", """
                SELECT topic, round, least(greatest(floor((position + 1) / 2 * 5), 0), 4)::INT
                       AS b, count(*) AS n, sum(position) AS s
                FROM beliefs WHERE position IS NOT NULL AND NOT isnan(position)
                  AND round > {lo} AND round <= {hi}
                GROUP BY ALL"""):
            counts, sums = bins.setdefault((r["topic"], r["round"]),
                                           (np.zeros(5), np.zeros(5)))
            counts[r["b"]], sums[r["b"]] = r["n"], r["s"]
        polarization: dict[str, list[Any]] = {t: [None] * n for t in beliefs}
        for (topic, rnd), (counts, sums) in bins.items():
            if rnd in index and topic in polarization:
                polarization[topic][index[rnd]] = esteban_ray_binned(counts, sums)
        echo: dict[str, list[Any]] = {t: [None] * n for t in beliefs}
        # Readers: all, or above ECHO_READERS a uniform sample (by the hash of their id);
        # the exposures first, then the readers' positions, then the authors': each a join
        # on keys, in that order (left to the planner, a live run's mirror, which has no
        # statistics, got a join of every reader with every author).
        agents = self.rows(run_id, "SELECT count(*) AS n FROM agents")[0]["n"]
        every = max(1, -(-agents // ECHO_READERS))
        sample = f"AND hash(e.agent) % {every} = 0" if every > 1 else ""
        for r in self._per_round(run_id, f"echo/{every}", f"""
                WITH seen AS MATERIALIZED (
                    SELECT e.round, e.agent, p.author FROM {self._items(run_id)} e
                    JOIN posts p ON p.post_id = e.post_id
                    WHERE e.round > {{lo}} AND e.round <= {{hi}} AND p.author >= 0 {sample}),
                reader AS MATERIALIZED (
                    SELECT s.round, s.author, b.topic, b.position AS x FROM seen s
                    JOIN beliefs b ON b.round = s.round - 1 AND b.agent = s.agent
                    WHERE b.round >= {{lo}} AND b.round < {{hi}} AND b.position IS NOT NULL)
                SELECT r.topic, r.round,
                       avg(CASE WHEN r.x * b.position > 0 THEN 1.0 ELSE 0.0 END) AS share
                FROM reader r
                JOIN beliefs b ON b.round = r.round - 1 AND b.agent = r.author
                              AND b.topic = r.topic
                WHERE b.round >= {{lo}} AND b.round < {{hi}} AND b.position IS NOT NULL
                GROUP BY ALL"""):
            if r["topic"] in echo and r["round"] in index:
                echo[r["topic"]][index[r["round"]]] = r["share"]
        actions: dict[str, dict[int, int]] = {}
        rejections: dict[str, dict[int, int]] = {}
        for r in self._per_round(run_id, "actions", "SELECT round, action::VARCHAR AS action, "
                                 "status::VARCHAR AS status, count(*) AS n "
                                 "FROM actions WHERE round > {lo} AND round <= {hi} "
                                 "GROUP BY ALL"):
            into = actions.setdefault(r["action"], {}) if r["status"] == "ok" else \
                rejections.setdefault(r["status"], {})
            into[r["round"]] = into.get(r["round"], 0) + r["n"]
        prices: dict[str, dict[int, float]] = {}
        for r in self.rows(run_id, "SELECT round, market, outcome, price FROM prices"):
            prices.setdefault(f"{r['market']}/{r['outcome']}", {})[r["round"]] = r["price"]
        llm = {r["round"]: r for r in self.rows(run_id, """
                SELECT round, count(*) AS calls, count(*) FILTER (WHERE status <> 'ok') AS failed,
                       sum(prompt_tokens) AS prompt_tokens,
                       sum(completion_tokens) AS completion_tokens, sum(cost_usd) AS cost_usd
                FROM llm_calls GROUP BY round""")}
        activity = {k: [r.get(k) for r in rounds] for k in
                    ("n_active", "n_actions", "n_rejected", "n_posts", "n_exposures")}
        return {
            "rounds": [r["round"] for r in rounds],
            "beliefs": beliefs, "polarization": polarization, "echo": echo,
            "echo_readers": "all readers" if every == 1 else
            f"a uniform sample of about {agents // every:,} of the {agents:,} readers "
            "(those whose id hashes to 0 modulo "f"{every})",
            "activity": activity,
            "actions": {k: [v or 0 for v in column(d)] for k, d in sorted(actions.items())},
            "rejections": {k: [v or 0 for v in column(d)]
                           for k, d in sorted(rejections.items())},
            "prices": {k: column(d) for k, d in sorted(prices.items())},
            "llm": {k: [(llm[r][k] if r in llm else 0) or 0 for r in index]
                    for k in ("calls", "failed", "prompt_tokens", "completion_tokens",
                              "cost_usd")},
            "marks": self._marks(run_id)}

    def _per_round(self, run_id: str, name: str, sql: str) -> list[dict[str, Any]]:
        """The rows of a per-round aggregate (`sql` keeps the rounds `> {lo}` and `<= {hi}`).
        A committed round's rows never change (a resume recomputes them exactly), so they
        are kept and each request computes only the rounds it has not seen: a live run's
        page pays for one round per round."""
        upto, created = self._committed(run_id)
        key = (run_id, created, name)
        with self._lock:
            done, kept = self._rounds_cache.get(key, (-1, []))
        if upto <= done:
            return kept
        fresh = self.rows(run_id, sql.format(lo=done, hi=upto))
        rows = kept + fresh
        with self._lock:
            self._rounds_cache[key] = (upto, rows)
            while len(self._rounds_cache) > 64:
                self._rounds_cache.pop(next(iter(self._rounds_cache)))
        return rows

    def _committed(self, run_id: str) -> tuple[int, str]:
        """The run's last round readable now and its creation time (what identifies its
        kept aggregates), asked once per request."""
        with self.reading(run_id):
            held = self._local.committed
            if run_id not in held:
                last = self.rows(run_id, "SELECT coalesce(max(round), 0) AS r FROM rounds"
                                 )[0]["r"]
                held[run_id] = (last, str(self.run_dir(run_id).read_meta().get("created_at")))
            return held[run_id]

    def _last_round(self, run_id: str) -> int:
        """The last round a request may name: the last readable now, or the run's last
        checkpoint where that is later (a live run's page may know it a moment early)."""
        run_dir = self.run_dir(run_id)
        latest = run_dir.checkpoints.latest()
        done = run_dir.read_meta().get("rounds_done") if latest is None else latest
        return max(self._committed(run_id)[0], done if isinstance(done, int) else 0)

    def _marks(self, run_id: str) -> list[dict[str, Any]]:
        """The interventions and fork rounds to mark on a time axis."""
        marks = []
        for r in self.rows(run_id, "SELECT round, idx, kind, spec FROM interventions "
                                   "ORDER BY round, idx"):
            spec = _json(r["spec"])
            name = spec.get("name") if isinstance(spec, dict) else None
            marks.append({"round": r["round"], "kind": "intervention",
                          "label": f"{r['kind']}" + (f" ({name})" if name else "")})
        for seg in lineage(self.run_dir(run_id).root)[:-1]:
            assert seg.dir is not None
            marks.append({"round": seg.last_round, "kind": "fork",
                          "label": f"forked from {seg.dir.run_id}"})
        return marks

    # ------------------------------------------------------------ posts

    def _post_rows(self, run_id: str, where: str, params: list[Any], order: str,
                   limit: int, offset: int, reach: bool = True
                   ) -> tuple[int, list[dict[str, Any]]]:
        """The posts `where` says, a page of them in `order`, with their engagement and
        reach (`reach` false: 0, for a caller that counts it otherwise), and how many
        there are."""
        total = self.rows(run_id, f"SELECT count(*) AS n FROM posts WHERE {where}",
                          params)[0]["n"]
        # (on lists: only those that may hold one of the posts are unnested)
        seen = ("(SELECT agent, unnest(post_id) AS post_id FROM exposures_listed "
                "WHERE list_max(post_id) >= (SELECT min(post_id) FROM ps) "
                "AND list_min(post_id) <= (SELECT max(post_id) FROM ps))"
                if self._listed(run_id) else "exposures")
        if not reach:
            seen = "(SELECT NULL::INTEGER AS agent, NULL::BIGINT AS post_id WHERE false)"
        rows = self.rows(run_id, f"""
            WITH ps AS (SELECT * FROM posts WHERE {where}),
            reach AS (SELECT post_id, count(DISTINCT agent) AS reach FROM {seen}
                      WHERE post_id IN (SELECT post_id FROM ps) GROUP BY post_id),
            eng AS (SELECT target_post AS post_id,
                           count(*) FILTER (WHERE action::VARCHAR IN {LIKES}) AS likes,
                           count(*) FILTER (WHERE action::VARCHAR = 'downvote') AS dislikes,
                           count(*) FILTER (WHERE action::VARCHAR IN {REPOSTS}) AS reposts,
                           count(*) FILTER (WHERE action::VARCHAR IN {REPLIES}) AS replies
                    FROM actions WHERE status::VARCHAR = 'ok'
                      AND target_post IN (SELECT post_id FROM ps) GROUP BY 1),
            st AS (SELECT post_id, map(list(topic), list(stance)) AS stance FROM post_stances
                   WHERE post_id IN (SELECT post_id FROM ps) GROUP BY post_id)
            SELECT ps.post_id, ps.platform::VARCHAR AS platform, ps.round, ps.author,
                   ag.username, ps.kind::VARCHAR AS kind, ps.parent_id, ps.text,
                   coalesce(eng.likes, 0) AS likes, coalesce(eng.dislikes, 0) AS dislikes,
                   coalesce(eng.reposts, 0) AS reposts, coalesce(eng.replies, 0) AS replies,
                   coalesce(reach.reach, 0) AS reach, st.stance
            FROM ps LEFT JOIN reach USING (post_id) LEFT JOIN eng USING (post_id)
                    LEFT JOIN st USING (post_id)
                    LEFT JOIN agents ag ON ag.agent_id = ps.author
            ORDER BY {order} LIMIT {int(limit)} OFFSET {int(offset)}""", params)
        for r in rows:
            r["stance"] = dict(r["stance"]) if r["stance"] else {}
        return total, rows

    def _listed(self, run_id: str) -> bool:
        """Whether the run's history has `exposures_listed`: the feeds as every file of
        it keeps them, one row per feed with its post ids as a list (files written before
        feeds were kept so, and a live run's mirror, keep one row per item: then only the
        view `exposures` is read).

        Why the server reads the lists where it can: `exposures` unnests every list, so a
        query that searches post ids or scans every item pays for 30 M rows built one by
        one (a post's readers: ~30 -> ~270 ms at 30 M items); on the lists the same
        answers cost what they did on a table of rows. Each such query gives exactly the
        rows the view-based one gives (tests/test_web_api.py compares them)."""
        return bool(self.rows(run_id, "SELECT count(*) AS n FROM duckdb_views() WHERE "
                                      "database_name = 'hist' AND view_name = "
                                      "'exposures_listed'")[0]["n"])

    def _items(self, run_id: str) -> str:
        """The feed items shown, as a FROM source with `round`, `platform`, `agent` and
        `post_id` (not `rank`; a NULL `post_id` for an empty slot, which no join on it
        keeps): the lists unnested without their positions where the run has them
        (`_listed`), else `exposures`."""
        return ("(SELECT round, platform, agent, unnest(post_id) AS post_id "
                "FROM exposures_listed)" if self._listed(run_id) else "exposures")

    def _platforms(self, run_id: str) -> list[str]:
        cfg = self.run_dir(run_id).read_config()
        return [p for p, v in (cfg.get("platforms") or {}).items()
                if not isinstance(v, dict) or v.get("enabled", True)]

    @_reads
    def posts(self, run_id: str, round_: int | None = None, limit: int = 20,
              offset: int = 0, platform: str | None = None) -> dict[str, Any]:
        """The posts of a round (default: the last), most seen first."""
        limit, offset = _page(limit, offset)
        last = self._committed(run_id)[0]
        round_ = last if round_ is None else \
            _whole("round", round_, 0, self._last_round(run_id))
        params: list[Any]
        where, params = "round = ?", [round_]
        if platform:
            _one_of("platform", platform, self._platforms(run_id))
            where += " AND platform::VARCHAR = ?"
            params.append(platform)
        total, rows = self._post_rows(run_id, where, params, "reach DESC, ps.post_id",
                                      limit, offset)
        return {"round": round_, "total": total, "posts": rows}

    @_reads
    def post(self, run_id: str, post_id: int) -> dict[str, Any]:
        """One post, who saw it and who engaged with it."""
        # (its reach is the number of its readers, counted once, below)
        _, rows = self._post_rows(run_id, "post_id = ?", [int(post_id)], "ps.post_id", 1, 0,
                                  reach=False)
        if not rows:
            raise NotFound(f"{run_id}: no post {post_id}")
        shown = ("exposures_listed WHERE list_contains(post_id, ?)" if self._listed(run_id)
                 else "exposures WHERE post_id = ?")
        seen = self.rows(run_id, "SELECT count(DISTINCT agent) AS n, (SELECT list(agent) "
                                 f"FROM (SELECT DISTINCT agent FROM {shown} "
                                 f"ORDER BY agent LIMIT 200)) AS first FROM {shown}",
                         [int(post_id)] * 2)[0]
        engaged = self.rows(run_id, "SELECT round, agent, action::VARCHAR AS action FROM "
                                    "actions WHERE target_post = ? AND status::VARCHAR = 'ok' "
                                    "ORDER BY round, agent LIMIT 500", [int(post_id)])
        return {"post": {**rows[0], "reach": seen["n"]},
                "seen_by": {"total": seen["n"], "agents": seen["first"] or []},
                "engaged": engaged}

    # ------------------------------------------------------------ graphs

    @_reads
    def network(self, run_id: str, round_: int | None = None, max_nodes: int = 2000,
                topic: str | None = None, platform: str | None = None) -> dict[str, Any]:
        """The follow graph at the end of a round: every agent, or above `max_nodes` a
        sample (the agents whose hashed id is smallest: uniform, and the same each time),
        with the follows among the shown agents, coloured by stance, sized by reach."""
        # (above MAX_NODES: MAX_NODES, as the rule in the answer says)
        max_nodes = min(_whole("max_nodes", max_nodes, 1), MAX_NODES)
        info = self.run(run_id)
        round_ = (info["rounds_done"] or 0) if round_ is None else \
            _whole("round", round_, 0, self._last_round(run_id))
        if topic:
            _one_of("topic", topic, info["topics"])
        if platform:
            _one_of("platform", platform, info["platforms"])
        topic = topic or (info["topics"][0] if info["topics"] else None)
        platform = platform or (info["platforms"][0] if info["platforms"] else None)
        total = self.rows(run_id, "SELECT count(*) AS n FROM agents")[0]["n"]
        sampled = total > max_nodes
        nodes = self.rows(run_id, f"""
            WITH shown AS (SELECT agent_id, username, group_name FROM agents
                           ORDER BY hash(agent_id), agent_id LIMIT {max_nodes}),
            reach AS (SELECT p.author, count(*) AS reach FROM {self._items(run_id)} e
                      JOIN posts p ON p.post_id = e.post_id
                      WHERE e.round <= ? AND p.author IN (SELECT agent_id FROM shown)
                      GROUP BY p.author),
            stance AS (SELECT agent, position FROM beliefs
                       WHERE topic = ? AND round = (SELECT max(round) FROM beliefs
                                                    WHERE round <= ?)
                         AND agent IN (SELECT agent_id FROM shown))
            SELECT shown.agent_id AS id, username, group_name AS "group",
                   stance.position AS stance, coalesce(reach.reach, 0) AS reach
            FROM shown LEFT JOIN reach ON reach.author = shown.agent_id
                       LEFT JOIN stance ON stance.agent = shown.agent_id
            ORDER BY id""", [int(round_), topic, int(round_)])
        ids = [r["id"] for r in nodes]
        edges = self.rows(run_id, """
            SELECT follower, followee FROM (
                SELECT follower, followee, arg_max(op::VARCHAR, round) AS last_op
                FROM follows
                WHERE round <= ? AND platform::VARCHAR = ?
                  AND list_contains(?, follower) AND list_contains(?, followee)
                GROUP BY ALL)
            WHERE last_op <> 'unfollow' ORDER BY follower, followee""",
            [int(round_), platform, ids, ids]) if ids else []
        # (the whole graph's size at a committed round never changes: counted once)
        last, created = self._committed(run_id)
        key = (run_id, created, f"edges/{platform}/{int(round_)}")
        committed = last >= int(round_)
        with self._lock:
            counted = self._rounds_cache.get(key) if committed else None
        if counted is None:
            n = self.rows(run_id, """
                SELECT count(*) AS n FROM (
                    SELECT follower, followee, arg_max(op::VARCHAR, round) AS last_op
                    FROM follows WHERE round <= ? AND platform::VARCHAR = ? GROUP BY ALL)
                WHERE last_op <> 'unfollow'""", [int(round_), platform])[0]["n"]
            counted = (int(round_), [{"n": n}])
            if committed:
                with self._lock:
                    self._rounds_cache[key] = counted
        total_edges = counted[1][0]["n"]
        rule = (f"all {total:,} agents" if not sampled else
                f"a uniform sample of {max_nodes:,} of the {total:,} agents (those with "
                "the smallest hash of their id: the same sample every time) and the follows "
                "among them")
        return {"round": round_, "platform": platform, "topic": topic,
                "total_nodes": total, "total_edges": total_edges, "sampled": sampled,
                "rule": rule, "nodes": nodes,
                "edges": [[e["follower"], e["followee"]] for e in edges]}

    @_reads
    def knowledge(self, run_id: str, round_: int | None = None, withdrawn: bool = False
                  ) -> dict[str, Any]:
        """The graph memory as of the end of a round: entities and relations, each
        relation with its provenance; withdrawn relations only when asked for."""
        if round_ is not None:
            round_ = _whole("round", round_, 0, self._last_round(run_id))
        rel = self.rows(run_id, relations_sql(round_, withdrawn))
        cond = "" if round_ is None else f"WHERE round <= {int(round_)}"
        ents = self.rows(run_id, f"SELECT entity_id, name, type, summary FROM "
                                 f"graph_entities {cond} ORDER BY entity_id")
        degree: dict[int, int] = {}
        for r in rel:
            for k in ("subject_id", "object_id"):
                degree[r[k]] = degree.get(r[k], 0) + 1
        return {"round": round_,
                "entities": [{**e, "degree": degree.get(e["entity_id"], 0)} for e in ents],
                "relations": [{"relation_id": r["relation_id"], "subject": r["subject_id"],
                               "object": r["object_id"], "subject_name": r["subject"],
                               "object_name": r["object"], "predicate": r["predicate"],
                               "fact": r["fact"], "source_type": r["source_type"],
                               "source_id": r["source_id"], "episode_id": r["episode_id"],
                               "valid_from": r["valid_from"],
                               "withdrawn": r["invalid_at"] is not None,
                               "invalid_at": r["invalid_at"],
                               "invalidated_by": r["invalidated_by"],
                               "reason": r["reason"]} for r in rel]}

    # ------------------------------------------------------------ agents

    @_reads
    def agents(self, run_id: str, q: str | None = None, offset: int = 0, limit: int = 50
               ) -> dict[str, Any]:
        """A page of the run's agents, filtered by name, username or group."""
        limit, offset = _page(limit, offset)
        where, params = "TRUE", []
        if q:
            where = ("(name ILIKE ? OR username ILIKE ? OR group_name ILIKE ? "
                     "OR agent_id::VARCHAR = ?)")
            params = [f"%{q}%"] * 3 + [q.strip()]
        total = self.rows(run_id, f"SELECT count(*) AS n FROM agents WHERE {where}",
                          params)[0]["n"]
        rows = self.rows(run_id, f"""SELECT agent_id, name, username, group_name AS "group",
                                    bio FROM agents WHERE {where} ORDER BY agent_id
                                    LIMIT {limit} OFFSET {offset}""", params)
        return {"total": total, "agents": rows}

    @_reads
    def agent(self, run_id: str, agent: int) -> dict[str, Any]:
        """One agent: profile, belief and trust trajectories, posts, engagement, memory
        and interviews."""
        agent = int(agent)
        prof = self.rows(run_id, "SELECT * FROM agents WHERE agent_id = ?", [agent])
        if not prof:
            raise NotFound(f"{run_id}: no agent {agent}")
        beliefs: dict[str, dict[str, list[Any]]] = {}
        for r in self.rows(run_id, "SELECT topic, round, position, confidence FROM beliefs "
                                   "WHERE agent = ? ORDER BY topic, round", [agent]):
            b = beliefs.setdefault(r["topic"], {"rounds": [], "position": [],
                                                "confidence": []})
            b["rounds"].append(r["round"])
            b["position"].append(r["position"])
            b["confidence"].append(r["confidence"])
        trust = self.rows(run_id, """
            SELECT round, avg(value) FILTER (WHERE truster = ?) AS given_mean,
                   avg(value) FILTER (WHERE trustee = ?) AS received_mean
            FROM trust WHERE truster = ? OR trustee = ? GROUP BY round ORDER BY round""",
            [agent] * 4)
        _, posts = self._post_rows(run_id, "author = ?", [agent], "ps.round, ps.post_id",
                                   MAX_PAGE, 0)
        engaged = self.rows(run_id, """
            SELECT round, platform::VARCHAR AS platform, action::VARCHAR AS action,
                   target_post, target_agent, status::VARCHAR AS status
            FROM actions WHERE agent = ? AND action::VARCHAR NOT IN ('do_nothing', 'post')
            ORDER BY round, slot LIMIT 1000""", [agent])
        memory = self.rows(run_id, "SELECT round, kind, level, text FROM memory "
                                   "WHERE audience = ? ORDER BY round, id LIMIT 500", [agent])
        interviews = []
        with suppress(InputError):  # (a run older than interviews)
            iv = read_table(self.run_dir(run_id).root, "interviews", f"agent = {agent}")
            interviews = [{k: _plain(r[k]) for k in ("round", "question", "answer",
                                                     "status", "batch_id")}
                          for r in iv.to_dict("records")]
        return {"agent": {k: _plain(v) for k, v in prof[0].items()}, "beliefs": beliefs,
                "trust": {"rounds": [r["round"] for r in trust],
                          "given_mean": [r["given_mean"] for r in trust],
                          "received_mean": [r["received_mean"] for r in trust]},
                "posts": posts, "engaged": engaged, "memory": memory,
                "interviews": interviews}

    def context(self, run_id: str, agent: int, round_: int, platform: str | None = None
                ) -> dict[str, Any]:
        """The exact text an agent got in a round (what `shoal inspect` prints)."""
        from shoal.runs.inspect import inspect_agent

        run_dir = self.run_dir(run_id)
        items = inspect_agent(str(run_dir.root), int(agent), int(round_), platform)
        return {"round": int(round_), "agent": int(agent), "contexts": [
            {"platform": i.platform, "acted": i.acted, "run_id": i.run_id,
             "tokens": i.assembled.tokens["total"], "budget": i.budget,
             "system": i.assembled.system, "observation": i.assembled.observation,
             "text": "=== SYSTEM ===\n" + i.assembled.system + "\n=== OBSERVATION ===\n"
                     + i.assembled.observation} for i in items]}

    def interview(self, run_id: str, agent: int, question: str, round_: int | None = None
                  ) -> dict[str, Any]:
        """Ask an agent, as it was at the end of a round, a question; the answer is kept
        in the run's `interviews` table."""
        from shoal.runs.interview import NoProvider, interview_agents

        self.writable()
        run_dir = self.run_dir(run_id)
        self._not_busy(run_id, "interview its agents")
        if _being_written(run_dir):
            raise Conflict(f"{run_id} is being written; interview its agents once it stops")
        try:
            batch = interview_agents(str(run_dir.root), [int(agent)], question, round_,
                                     self.base_url, self.model)
        except NoProvider:
            raise WebError(NO_ENDPOINT) from None
        except duckdb.Error as exc:  # (a process started elsewhere took the file meanwhile)
            if not held_by_writer(exc):
                raise
            raise Conflict(f"{run_id} is being written; interview its agents once it stops"
                           ) from None
        iv = batch.interviews[0]
        return {"answer": iv.answer, "status": iv.status, "error": iv.error,
                "round": batch.round, "batch_id": batch.batch_id, "stored": batch.stored}

    # ------------------------------------------------------------ jobs

    def _not_busy(self, run_id: str, what: str) -> None:
        """Refuse (409) to write to a run that a job of this server still writes: a run,
        resume or analysis holds its file between its commits too, so a second writer
        would fail on the file's lock midway (an analysis with an internal error, an
        interview with its answer lost)."""
        job = self.jobs.for_run(run_id)
        if job is not None:
            raise Conflict(f"{run_id} is being written by this server's {job.kind} job "
                           f"(pid {job.proc.pid}); {what} once it ends")

    def _job(self, kind: str, args: list[str], stdin: str | None = None) -> Job:
        job = self.jobs.start(kind, args, stdin)
        if not job.running and job.proc.returncode not in (0, 130) and job.run_id is None:
            # (a fork's added interventions reach the command on its standard input)
            raise WebError(job.error().replace("stdin: entry", "add: entry"))
        return job

    def stop(self, run_id: str) -> dict[str, Any]:
        """Ask the process writing a run to stop after its running round."""
        self.writable()
        run_dir = self.run_dir(run_id)
        job = self.jobs.for_run(run_id)
        if job is not None:  # started here (maybe still starting): its Ctrl-C
            job.proc.send_signal(signal.SIGINT)
        elif _being_written(run_dir):  # started elsewhere: the file its command looks for
            run_dir.stop_request.write_text("stop after the running round\n")
        else:
            raise Conflict(f"{run_id} is not running")
        return {"ok": True, "message": f"{run_id} stops after its running round "
                                       "(committed and checkpointed)"}

    def resume(self, run_id: str) -> dict[str, Any]:
        """Continue a stopped or interrupted run (`shoal resume`)."""
        self.writable()
        run_dir = self.run_dir(run_id)
        if _being_written(run_dir):
            raise Conflict(f"{run_id} is already running")
        job = self._job("resume", ["resume", str(run_dir.root), "--quiet"])
        return {"run_id": run_id, "job": job.as_dict()}

    def schedule(self, run_id: str, round_: int) -> dict[str, Any]:
        """The interventions a fork at `round_` may drop, move or keep."""
        cfg = self.run_dir(run_id).read_config()
        rounds = cfg.get("rounds")
        round_ = _whole("round", round_, 0, rounds if isinstance(rounds, int) else None)
        pending = []
        for i, e in enumerate(cfg.get("interventions") or []):
            r = e.get("round") if isinstance(e, dict) else None
            if isinstance(r, int) and r > round_:
                pending.append({"index": i, "ref": str(e.get("name") or i),
                                "name": e.get("name"), "round": r, "kind": e.get("kind"),
                                "entry": e})
        return {"round": round_, "pending": pending}

    def fork(self, run_id: str, round_: int, sets: list[str] | None = None,
             seed: int | None = None, drop: list[str] | None = None,
             move: list[dict[str, Any]] | None = None, add: list[Any] | None = None,
             name: str | None = None, run: bool = True) -> dict[str, Any]:
        """Fork a run at a round with a plan: exactly `shoal fork` with the same flags.
        A `--set` field or added intervention naming a path outside the folder is
        refused."""
        self.writable()
        run_dir = self.run_dir(run_id)
        round_ = _whole("round", round_, 0)
        sets = _strings("sets", sets)
        if seed is not None:
            seed = _whole("seed", seed)
        drop = [_ref(f"drop.{i}", ref) for i, ref in enumerate(_list("drop", drop))]
        moves = []
        for i, m in enumerate(_list("move", move)):
            if not isinstance(m, dict) or "ref" not in m or "round" not in m:
                raise WebError(f"move.{i}: each entry needs 'ref' (a name or index) and "
                               "'round'")
            moves.append(f"{_ref(f'move.{i}.ref', m['ref'])}="
                         f"{_whole(f'move.{i}.round', m['round'])}")
        add = _list("add", add)
        if name is not None and (not isinstance(name, str) or not name.isprintable()):
            raise WebError(f"name: must be text on one line, got {_shown(name)}")
        self._confine_fork(sets, add)
        # (`--flag=VALUE`: a value starting with '-' is still the flag's, never a flag)
        args = ["fork", str(run_dir.root), f"--round={round_}", "--quiet"]
        args += [f"--set={item}" for item in sets]
        if seed is not None:
            args.append(f"--seed={seed}")
        args += [f"--drop={ref}" for ref in drop]
        args += [f"--move={m}" for m in moves]
        if name:
            args.append(f"--name={name}")
        if not run:
            args.append("--no-run")
        stdin = None
        if add:
            args += ["--intervene", "-"]
            stdin = json.dumps(add)
        job = self._job("fork", args, stdin)
        return {"run_id": job.run_id, "job": job.as_dict()}

    def _confine_fork(self, sets: list[str], add: list[Any]) -> None:
        """Refuse a fork whose `--set` fields or added interventions name a path outside
        the folder (a fork's relative paths are its command's: the folder's)."""
        from shoal.config import apply_overrides
        from shoal.web.paths import named_paths, outside, refusal

        bad = []
        for item in sets:
            try:
                written = apply_overrides({}, [item])
            except Exception:  # (the command refuses the same item before it opens
                continue  # anything, with the message of `shoal fork`)
            key = item.partition("=")[0].strip()
            bad += [f"--set {key}" + ("" if f == key else f": {f}")
                    for f in outside(named_paths(written), self.root, self.root)]
        for i, entry in enumerate(add):
            bad += [f"add: entry {i}: {f}"
                    for f in outside(named_paths(entry), self.root, self.root)]
        if bad:
            raise WebError(refusal(bad))

    def analyses(self, run_id: str) -> dict[str, Any]:
        """The run's analyses, newest first."""
        run_dir = self.run_dir(run_id)
        rows = []
        with suppress(InputError):
            df = read_table(run_dir.root, "analysis_runs")
            rows = [{k: _plain(r[k]) for k in ("analysis_id", "question", "status",
                                                "created_at", "claims", "unverified")}
                    for r in df.sort_values("created_at", ascending=False).to_dict("records")]
        job = next((j for j in self.jobs.all() if j.kind == "analyse"
                    and j.run_id == run_id and j.running), None)
        return {"analyses": rows, "job": job.as_dict() if job else None}

    def analysis(self, run_id: str, analysis_id: str) -> dict[str, Any]:
        """One analysis: its sections, each claim with its verdict and evidence."""
        from shoal.analysis.runs import Run

        try:
            data = Run(self.run_dir(run_id).root).analysis(analysis_id)
        except InputError as exc:  # (no such analysis: the message lists those there are)
            raise NotFound(f"{run_id}: {exc}") from None
        run_rows = (data["analysis_runs"].to_dict("records") if "analysis_runs" in data
                    else [])
        if not run_rows:
            raise NotFound(f"{run_id}: no analysis {analysis_id}")
        claims = (data["analysis_claims"].to_dict("records") if "analysis_claims" in data
                  else [])
        sections = []
        for s in (data["analysis_sections"].to_dict("records")
                  if "analysis_sections" in data else []):
            sections.append({"section_id": s["section_id"], "title": s["title"],
                             "status": s["status"], "text": s["text"], "claims": [
                                 {"claim": c["claim"], "sentence": c["sentence"],
                                  "verdict": c["verdict"], "detail": _plain(c["detail"]),
                                  "citations": _json(c["citations"]),
                                  "evidence": _json(c["evidence"])}
                                 for c in claims if c["section_id"] == s["section_id"]
                                 and c["attempt"] == s["attempt"]]})
        r = run_rows[0]
        return {"analysis_id": analysis_id, "question": _plain(r["question"]),
                "status": r["status"], "sections": sections}

    def start_analysis(self, run_id: str, question: str | None = None) -> dict[str, Any]:
        """Start `shoal analyse` on a run."""
        self.writable()
        run_dir = self.run_dir(run_id)
        self._not_busy(run_id, "analyse it")
        if _being_written(run_dir):
            raise Conflict(f"{run_id} is being written; analyse it once it stops")
        args = ["analyse", str(run_dir.root)]
        if question is not None and not isinstance(question, str):
            raise WebError("question: must be text")
        if not self.base_url and not _has_providers(run_dir):
            raise WebError(NO_ENDPOINT)
        if question:
            args.append(f"--question={question}")
        if self.base_url:
            args += ["--base-url", self.base_url]
        if self.model:
            args += ["--model", self.model]
        job = self.jobs.start("analyse", args, wait_s=1.0)
        job.run_id = run_id
        return {"job": job.as_dict()}

    def report(self, run_id: str) -> str:
        """The run's self-contained HTML report (as `shoal report` writes it)."""
        from shoal.analysis.report import render_report
        from shoal.analysis.runs import Run

        return render_report(Run(self.run_dir(run_id).root))

    # ------------------------------------------------------------ configs

    def configs(self) -> dict[str, Any]:
        """The YAML configs in the folder (not inside run directories)."""
        found = []
        for path in sorted(self.root.rglob("*.y*ml")):
            rel = path.relative_to(self.root)
            if path.suffix not in (".yaml", ".yml") or len(rel.parts) > 3:
                continue
            if any((self.root / Path(*rel.parts[:i]) / "run.json").is_file()
                   for i in range(1, len(rel.parts))) or not self._inside(path):
                continue
            if any(p.startswith(".") for p in rel.parts):
                continue
            found.append({"path": rel.as_posix()})
        return {"configs": found}

    def check(self, yaml_text: str | None = None, path: str | None = None,
              sets: list[str] | None = None) -> dict[str, Any]:
        """Validate a config as `shoal check` does: ok, or the message naming the field
        path and line. A config naming a file or folder outside the folder is refused
        (400), before anything looks at that path."""
        from shoal.config import resolved_dict
        from shoal.config.loading import locate

        if (yaml_text is None) == (path is None):
            raise WebError("give either 'yaml' (the config's text) or 'path' (a config "
                           "in the folder)")
        if yaml_text is not None and not isinstance(yaml_text, str):
            raise WebError("yaml: must be the config's text")
        sets = _strings("sets", sets)
        with tempfile.TemporaryDirectory(prefix="shoal-check-") as tmp:
            if yaml_text is not None:
                # (its relative paths resolve where `start` keeps it: configs/)
                file, shown = Path(tmp) / "pasted.yaml", "pasted.yaml"
                file.write_text(yaml_text, encoding="utf-8")
                base = self.file("configs", "configs folder")
            else:
                assert path is not None
                file, shown = self.file(path, "config"), path
                base = file.parent
            try:
                cfg = self._load(file, sets, base)
            except WebError as exc:
                raise WebError(str(exc).replace(str(file), shown)) from None
            except InputError as exc:
                message = str(exc).replace(str(file), shown)
                return {"ok": False, "error": message}
            notes = [str(locate(cfg, InputError(n))).replace(str(file), shown)
                     for n in cfg.notes()]
            return {"ok": True, "error": None, "notes": notes,
                    "resolved_yaml": dump_yaml(resolved_dict(cfg), sort_keys=False)}

    def _load(self, file: Path, sets: list[str], base: Path) -> Any:
        """`load_config(file, sets)` with relative paths resolved against `base`, and
        refused (WebError, naming the field) when a field names a path outside the
        folder: checked before the paths are resolved, so a missing outside file is
        refused like an existing one (no "file not found" telling them apart)."""
        from shoal.config import load_config
        from shoal.config.loading import locate
        from shoal.web.paths import config_paths, outside, refusal

        def vet(cfg: Any) -> None:
            # (the job's working folder is the folder: tokenizer and cache_dir paths are
            # relative to it, the file fields to the config's folder)
            out = outside(config_paths(cfg), self.root, base)
            if out:
                raise WebError("; ".join(str(locate(cfg, InputError(refusal([f]))))
                                         for f in out))

        return load_config(file, sets, base=base, vet=vet)

    def start(self, yaml_text: str | None = None, path: str | None = None,
              sets: list[str] | None = None) -> dict[str, Any]:
        """Start a run (`shoal run`) of a config in the folder or of pasted YAML (kept as
        `configs/pasted-N.yaml` in the folder), mirrored live for the pages."""
        self.writable()
        checked = self.check(yaml_text, path, sets)
        if not checked["ok"]:
            raise WebError(checked["error"])
        if yaml_text is not None:
            folder = self.file("configs", "configs folder")
            folder.mkdir(exist_ok=True)
            n = 1 + len(list(folder.glob("pasted-*.yaml")))
            while (folder / f"pasted-{n}.yaml").exists():
                n += 1
            file = folder / f"pasted-{n}.yaml"
            file.write_text(yaml_text, encoding="utf-8")
        else:
            assert path is not None
            file = self.file(path, "config")
        args = ["run", str(file), "--out", str(self.root), "--quiet",
                "--set", "output.live_parquet=true"]
        # (`--set=VALUE`: a value starting with '-' is still the flag's, never a flag)
        args += [f"--set={item}" for item in _strings("sets", sets)]
        job = self._job("run", args)
        return {"run_id": job.run_id, "job": job.as_dict()}

    def compare(self, run_ids: list[str]) -> dict[str, Any]:
        """Per measure, the first round each run leaves the first one and the largest gap,
        with every run's series."""
        if len(run_ids) < 2:
            raise WebError("compare needs two or more runs")
        if len(run_ids) > MAX_COMPARED:  # (each costs a pass over its history)
            raise WebError(f"compare takes at most {MAX_COMPARED} runs, got {len(run_ids)}")
        series = {r: self.series(r) for r in dict.fromkeys(run_ids)}  # (each run once)
        base = run_ids[0]
        out = []
        for other in run_ids[1:]:
            for kind in ("beliefs", "polarization"):
                for topic in series[base][kind]:
                    a = _by_round(series[base], kind, topic)
                    b = _by_round(series[other], kind, topic)
                    common = sorted(set(a) & set(b))
                    gaps = [(r, abs(a[r] - b[r])) for r in common
                            if a[r] is not None and b[r] is not None]
                    differ = [r for r, g in gaps if g > 1e-12]
                    out.append({"run": other, "measure": f"{kind}:{topic}",
                                "first_round": differ[0] if differ else None,
                                "max_abs": max((g for _, g in gaps), default=0.0)})
        return {"runs": run_ids, "base": base, "divergence": out, "series": series}


# ---------------------------------------------------------------- helpers


def _by_round(series: dict[str, Any], kind: str, topic: str) -> dict[int, Any]:
    values = series[kind].get(topic)
    if values is None:
        return {}
    if kind == "beliefs":
        values = values["mean"]
    return dict(zip(series["rounds"], values, strict=True))


def _one_of(what: str, value: str, known: list[str]) -> None:
    if value not in known:
        raise WebError(f"{what} {value!r}: not in this run ({what}s: "
                       f"{', '.join(known) or 'none'})")


def _page(limit: int, offset: int) -> tuple[int, int]:
    """A page's size (above MAX_PAGE: MAX_PAGE) and its offset."""
    return min(_whole("limit", limit, 1), MAX_PAGE), _whole("offset", offset, 0, MAX_OFFSET)


def _whole(what: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    """`value` as a whole number in lo..hi (a WebError naming `what` otherwise)."""
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d{1,19}\s*", value):
        value = int(value)  # (a round typed into a form)
    if isinstance(value, bool) or not isinstance(value, int):
        raise WebError(f"{what}: must be a whole number, got {_shown(value)}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        span = (f"between {lo} and {hi}" if lo is not None and hi is not None
                else f">= {lo}" if lo is not None else f"<= {hi}")
        raise WebError(f"{what}: must be {span}, got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    """A value a request gave, short enough for a message."""
    try:
        text = repr(value)
    except ValueError:  # (an integer of more digits than Python turns into text)
        return "a number too long to show"
    return text if len(text) <= 40 else text[:37] + "..."


def _list(what: str, value: Any) -> list[Any]:
    """A list the request gave (None: empty)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise WebError(f"{what}: must be a list, got {_shown(value)}")
    return value


def _strings(what: str, value: Any) -> list[str]:
    """A list of strings the request gave (None: empty)."""
    items = _list(what, value)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise WebError(f"{what}.{i}: must be text, got {_shown(item)}")
    return items


def _ref(what: str, value: Any) -> str:
    """An intervention named by its name or its index."""
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "" or (
            isinstance(value, str) and (len(value) > 100 or not value.isprintable())):
        raise WebError(f"{what}: must be an intervention's name or index, got "
                       f"{_shown(value)}")
    return str(value)


def _stamp(run_dir: RunDir) -> tuple[int, ...]:
    """What changes when a run gains rows: its file, its live mirror, its run.json."""
    def mtime(p: Path) -> int:
        try:
            return p.stat().st_mtime_ns
        except OSError:
            return 0
    rounds = run_dir.root / "live" / "rounds"
    return (mtime(run_dir.db), mtime(run_dir.meta), mtime(rounds),
            mtime(run_dir.root / "trajectory.duckdb.wal"))


def _has_providers(run_dir: RunDir) -> bool:
    """Whether the run's config names LLM providers (a config that cannot be read counts
    as naming them: the command that reads it then says what is wrong)."""
    from shoal.config import load_config

    try:
        return load_config(run_dir.config).llm is not None
    except InputError:
        return True


def _being_written(run_dir: RunDir) -> bool:
    from shoal.store.lineage import being_written

    return being_written(run_dir)


_totals: dict[Path, tuple[tuple[int, ...], dict[str, Any]]] = {}


def _llm_totals(run_dir: RunDir) -> dict[str, Any]:
    """A run's LLM calls and cost (from its own file; remembered until the file changes;
    unknown while a writer holds it)."""
    stamp = _stamp(run_dir)
    held = _totals.get(run_dir.root)
    if held and held[0] == stamp:
        return held[1]
    totals: dict[str, Any] = {"llm_calls": None, "cost_usd": None}
    if not run_dir.db.is_file():  # (missing, or a pipe: opening one would block)
        return totals
    with suppress(duckdb.Error):
        con = duckdb.connect(str(run_dir.db), read_only=True)
        try:
            n, c = con.execute("SELECT count(*), coalesce(sum(cost_usd), 0) FROM llm_calls"
                               ).fetchone() or (0, 0)
            totals = {"llm_calls": int(n), "cost_usd": float(c)}
        finally:
            con.close()
    _totals[run_dir.root] = (stamp, totals)
    return totals


def _agents(run_dir: RunDir) -> int | None:
    """The population size the run's config asks for; for a population read from a file
    of profiles (no size in the config), the count its newest checkpoint holds."""
    with suppress(InputError):
        pop = run_dir.read_config().get("population") or {}
        size = pop.get("size") if isinstance(pop, dict) else None
        if isinstance(size, int):
            return size
    with suppress(CheckpointError, OSError, ValueError, KeyError, TypeError):
        store = run_dir.checkpoints
        latest = store.latest()
        return None if latest is None else int(store.meta(latest)["counts"]["n_agents"])
    return None


def _json(value: Any) -> Any:
    if isinstance(value, str):
        with suppress(ValueError):
            return json.loads(value)
    return value


def _plain(value: Any) -> Any:
    """A pandas/numpy value as JSON-able data."""
    if value is None:
        return None
    if isinstance(value, float) and np.isnan(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    with suppress(TypeError, ValueError):
        if value != value:  # pandas NA / NaT
            return None
    return value
