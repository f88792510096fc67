"""The notebook API: a run's trajectory as pandas DataFrames, its metrics and plots.

    from shoal import open_run, open_runs
    run = open_run("runs/<run_id>")      # or a run id under runs/
    run.beliefs                          # round, agent, topic, position, confidence
    run.polarization()                   # per round and topic
    both = open_runs([parent, fork])     # the same frames, with a `run` column

Frames are read on first use and cached. They are lineage-aware (`shoal.lineage.read_table`):
a fork's frames hold its parent's rows up to the fork round, then its own. A run that is
still being written is read from its live Parquet mirror (`output.live_parquet: true`)
without touching the writer's lock; its frames are a consistent snapshot: the last round
of `rounds` is read first (`run.last_round`) and every other frame is cut at that round.
`run.refresh()` drops the cache and takes a new snapshot.

Enum columns (platform, kind, action, status, cause, op, ...) are plain strings, the same dtype
as the other text columns, so frames of different runs concatenate and compare without
categorical surprises. JSON columns (interventions.spec and effect, context.trimmed,
llm_calls.section_tokens) are parsed into Python objects. Column reference: docs/analysis.md.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pandas as pd
from matplotlib.figure import Figure

from shoal.analysis import metrics
from shoal.core.errors import InputError
from shoal.store.lineage import (
    ForkInfo,
    LiveRun,
    MissingTableError,
    Segment,
    lineage,
    read_table,
    run_status,
)
from shoal.store.run_dir import RunDir, open_run_dir
from shoal.store.schema import KIND_ENUM, schema, typed_frame
from shoal.store.tables import TABLES, TableSpec, file_tables
from shoal.store.traces import read_tables  # (declares the interviews and analyses tables)

if TYPE_CHECKING:  # (imported where used: reading a run loads no graph reader)
    from shoal.analysis.fidelity import Fidelity
    from shoal.store.knowledge import GraphReader

# The tables shown as frames (`run.beliefs`, ...), as their declarations say.
FRAMES = tuple(s.name for s in TABLES if s.frame)
METRICS = ("belief_stats", "polarization", "group_distance", "echo_chambers",
           "like_minded_share", "cascades", "cascade_growth", "herd_effect", "engagement",
           "engagement_gini")
JSON_COLUMNS = {"interventions": ("spec", "effect"), "context": ("trimmed",),
                "llm_calls": ("section_tokens",)}


@cache
def _schema_frames(platforms: tuple[str, ...]) -> dict[str, pd.DataFrame]:
    """An empty, typed frame of every table declared so far (no plug-in is loaded), those
    created on demand (analyses, interviews) included. Text columns (VARCHAR, ENUM, JSON
    that is not parsed) have the text dtype a frame with rows has: DuckDB gives `object`
    for them when there are no rows."""
    con = duckdb.connect()
    try:
        con.execute(schema(platforms, known=True))
        for spec in TABLES:
            if spec.created == "on_demand":
                con.execute(spec.ddl(platforms))
        return {name: typed_frame(con.sql(f"SELECT * FROM {name} LIMIT 0"),
                                  JSON_COLUMNS.get(name, ())) for name in file_tables(con)}
    finally:
        con.close()


def _empty(table: str, platforms: tuple[str, ...], file_tables: Iterable[str] = ()
           ) -> pd.DataFrame:
    """A typed frame with no rows for a table a run's file does not have (e.g. `llm_calls`
    in runs made before the engine logged LLM calls, `interviews` of a run never asked):
    the current schema's columns. An unknown name is an InputError listing the tables
    there are (`file_tables`: the run's own)."""
    frames = _schema_frames(platforms)
    if table not in frames:
        if table == "post_stats":
            raise InputError("post_stats is a view of the store, not a table: run.posts has "
                             "its counts (up, down, shares, replies) through the lineage")
        known = sorted({*frames, *file_tables})
        raise InputError(f"unknown table {table!r}; tables: {', '.join(known)}")
    return frames[table].copy()


def _plain(df: pd.DataFrame, table: str, platforms: tuple[str, ...] = ()) -> pd.DataFrame:
    """Enum categoricals to plain strings; JSON text to Python objects; a frame without
    rows gets the text dtype of the schema's text columns (DuckDB gives them `object`)."""
    for col in df.columns:
        if isinstance(df[col].dtype, pd.CategoricalDtype):
            df[col] = df[col].astype(metrics.TEXT)
    for col in JSON_COLUMNS.get(table, ()):
        if col in df.columns:
            df[col] = df[col].map(lambda v: json.loads(v) if isinstance(v, str) else v)
    if df.empty and platforms and table in (frames := _schema_frames(platforms)):
        typed = frames[table]
        df = df.astype({c: typed[c].dtype for c in df.columns
                        if c in typed.columns and typed[c].dtype == metrics.TEXT})
    return df


class Frames:
    """The frames `Run` and `Runs` generate from the table declarations (set below; named
    here for readers and type checkers)."""

    agents: pd.DataFrame
    actions: pd.DataFrame
    exposures: pd.DataFrame
    beliefs: pd.DataFrame
    trust: pd.DataFrame
    follows: pd.DataFrame
    memory: pd.DataFrame
    context: pd.DataFrame
    interventions: pd.DataFrame
    llm_calls: pd.DataFrame


class Run(ForkInfo, Frames):
    """One run's trajectory as DataFrames (see the module docstring): a run directory, a
    run id under runs/, or a `Simulation` (one held in memory is read from its in-memory
    database). Every table declared as a frame is a property of its name (generated
    below from the declarations: `run.beliefs` is `run.table("beliefs")`)."""

    def __init__(self, path: str | Path | RunDir | LiveRun | Any):
        reader = getattr(path, "reader", None)
        if callable(reader):  # a Simulation: its directory, or its in-memory database
            path = reader()
        self.live: LiveRun | None = path if isinstance(path, LiveRun) else None
        self.dir: RunDir | None = None
        if not isinstance(path, LiveRun):  # (`live` is None)
            self.dir = open_run_dir(path.root if isinstance(path, RunDir) else path)
        self._cache: dict[str, Any] = {}

    def __repr__(self) -> str:
        total = self.meta.get("rounds", "?")
        try:
            rounds = f"rounds 0..{self.last_round} of {total}"
        except InputError as exc:  # (a run being written without a live mirror)
            return (f"<Run {self.run_id}: {self.status}, {self.meta.get('rounds_done', '?')} "
                    f"of {total} rounds done (run.json); {exc}>")
        return f"<Run {self.run_id}: {self.status}, {rounds}, {len(self.topics)} topics>"

    # ------------------------------------------------------------- identity

    @property
    def run_id(self) -> str:
        """The run's id (its folder name)."""
        return self.live.run_id if self.live else self._run_dir.run_id

    @property
    def path(self) -> Path | None:
        """The run directory (None for a simulation held in memory)."""
        return self.live.path if self.live else self._run_dir.root

    @property
    def meta(self) -> dict[str, Any]:
        """run.json (status, rounds done, lineage), read afresh each time."""
        return self.live.meta() if self.live else self._run_dir.read_meta()

    @property
    def status(self) -> str:
        """created, running, resumed, finished, stopped, interrupted or damaged (see
        `shoal runs`, docs/forks.md)."""
        if self.live:  # a simulation: its directory says whether it is still written
            path = self.live.path
            if path is None:  # (held in memory)
                return str(self.meta.get("status", "?"))
            return run_status(RunDir(path), self.meta)
        return run_status(self._run_dir, self.meta)

    @property
    def config(self) -> dict[str, Any]:
        """The run's resolved config (its config.yaml) as a dict."""
        if self.live:
            return self._cached("config", self.live.config)
        return self._cached("config", self._run_dir.read_config)

    @property
    def _run_dir(self) -> RunDir:
        """The run directory of a run not read live (`__init__` sets `dir` or `live`)."""
        assert self.dir is not None  # `dir` is set whenever `live` is None
        return self.dir

    @property
    def topics(self) -> list[str]:
        """The topic names, in the config's order."""
        return [t["name"] for t in self.config.get("topics", [])]

    @property
    def lineage(self) -> pd.DataFrame:
        """The runs making up this run's history, root first, this run last: run_id, path,
        last_round (its rounds used, up to; NA: all) and n_posts (its posts used, ids
        below; NA: all)."""
        def read() -> pd.DataFrame:
            segments = ([*self.live.ancestors, None] if self.live
                        else lineage(self._run_dir.root))
            rows = [{"run_id": _segment_dir(s).run_id, "path": str(_segment_dir(s).root),
                     "last_round": s.last_round, "n_posts": s.n_posts} if s is not None
                    else {"run_id": self.run_id, "path": self.path and str(self.path),
                          "last_round": None, "n_posts": None} for s in segments]
            df = pd.DataFrame(rows, columns=["run_id", "path", "last_round", "n_posts"])
            return df.astype({"last_round": "Int64", "n_posts": "Int64"})
        return self._cached("lineage", read)

    @property
    def fork_rounds(self) -> list[int]:
        """Every round where this run's history passes to a fork, root first."""
        return [int(r) for r in self.lineage["last_round"].dropna()]

    @property
    def last_round(self) -> int:
        """The last complete round of the snapshot the frames show (0: only the initial
        state). Pinned at first use; `refresh()` takes it again."""
        if "last_round" not in self._cache:
            rounds = self._read("rounds")
            self._cache["rounds"] = rounds
            self._cache["last_round"] = int(rounds["round"].max()) if len(rounds) else 0
        return self._cache["last_round"]

    def refresh(self) -> Run:
        """Forget every cached frame (to see the new rounds of a running run)."""
        self._cache.clear()
        return self

    # ------------------------------------------------------------- frames

    def table(self, name: str) -> pd.DataFrame:
        """A store table as stored (lineage-aware, cut at `last_round`, enums as strings):
        any of shoal.store.TABLES, e.g. `post_stances`, `topics`, `run`. A table the run's
        file does not have (older runs) is an empty frame with the schema's columns."""
        return self._cached(f"table:{name}", lambda: self._snapshot(name))

    @property
    def prices(self) -> pd.DataFrame:
        """Every market outcome's price per round (round, market, outcome, price, volume,
        n_trades); empty for a run without markets. `trades`, `positions`, `markets`,
        `forecasts`, `payouts`, `market_bridge` and `market_books` via `table()`."""
        return self.table("prices")

    @property
    def trades(self) -> pd.DataFrame:
        """Every applied trade: round, market, agent, side, outcome, cash, shares, prices
        before and after, source."""
        return self.table("trades")

    def graph(self) -> GraphReader:
        """The run's graph memory (`shoal.store.knowledge.GraphReader`, through the lineage):
        `.relations(as_of=None, include_withdrawn=False)`, `.entities()`, `.episodes()`,
        `.communities()`, `.neighbourhood(name)`, `.history(relation_id)`, all DataFrames.
        Withdrawn relations are left out unless asked for (docs/graph.md)."""
        from shoal.store.knowledge import GRAPH_TABLES, GraphReader

        return self._cached("graph", lambda: GraphReader(
            {name: self.table(name) for name in GRAPH_TABLES}))

    def graph_relations(self, as_of: int | None = None, include_withdrawn: bool = False
                        ) -> pd.DataFrame:
        """The graph's relations visible at the end of round `as_of` (default: now)."""
        return self.graph().relations(_round_arg("as_of", as_of), include_withdrawn)

    def graph_entities(self, as_of: int | None = None) -> pd.DataFrame:
        """The graph's entities, with how many visible relations each is in."""
        return self.graph().entities(_round_arg("as_of", as_of))

    def graph_episodes(self) -> pd.DataFrame:
        """The texts the graph was read from, verbatim, with their sources."""
        return self.graph().episodes()

    def graph_communities(self) -> pd.DataFrame:
        """The newest generation of the graph's communities."""
        return self.graph().communities()

    def market_resolutions(self) -> pd.DataFrame:
        """Resolved markets: market, round, outcome, rule_value, paid."""
        from shoal.analysis.markets import resolutions

        return resolutions(self.table("payouts"))

    def market_scores(self) -> pd.DataFrame:
        """Brier and log score per (market, agent) of resolved markets; agent −1 is the
        market's own forecast, its prices at the close (sim/analysis/markets.py)."""
        from shoal.analysis.markets import scores

        return scores(self.table("forecasts"), self.table("payouts"))

    # ------------------------------------------------- surveys

    @property
    def survey_responses(self) -> pd.DataFrame:
        """Every survey answer: round, survey, wave, agent, item, kind, value (Likert
        category, number, or index of the choice), choice, text, abstained, source
        (docs/surveys.md)."""
        return self.table("survey_responses")

    def survey_scales(self) -> pd.DataFrame:
        """Per survey, scale and wave: respondents, mean and sd of the scale score,
        Cronbach's alpha (`shoal.surveys.scores.scale_summary`)."""
        from shoal.surveys.scores import scale_summary

        return scale_summary(self.survey_responses, self.config.get("surveys") or [])

    def survey_scores(self) -> pd.DataFrame:
        """Each respondent's scale scores per wave (reverse-coded items, listwise)."""
        from shoal.surveys.scores import scale_scores

        return scale_scores(self.survey_responses, self.config.get("surveys") or [])

    def survey_abstention(self) -> pd.DataFrame:
        """Per survey, wave and item: asked, abstained and the rate."""
        from shoal.surveys.scores import abstention

        return abstention(self.survey_responses)

    def survey_change(self) -> pd.DataFrame:
        """Within-respondent change of each scale score between consecutive waves."""
        from shoal.surveys.scores import wave_change

        return wave_change(self.survey_responses, self.config.get("surveys") or [])

    # ------------------------------------------------- what was asked of the run

    @property
    def analyses(self) -> pd.DataFrame:
        """The analyst's reports of this run (`shoal analyse`), oldest first: question,
        model, status, claims and unverified claims, cost (read afresh each time)."""
        from shoal.analysis.analyses import analyses

        return analyses(self._own_db())

    def analysis(self, analysis_id: str | None = None) -> dict[str, pd.DataFrame]:
        """One analysis (default: the latest) as DataFrames: `analysis_runs`,
        `analysis_sections`, `analysis_steps` (every step, with its full tool `result`),
        `analysis_claims` (sentence, citations, verdict, evidence)."""
        from shoal.analysis.analyses import analysis_frames

        return analysis_frames(self._own_db(), analysis_id)

    @property
    def interviews(self) -> pd.DataFrame:
        """Every interview answer kept for this run (`shoal interview`): batch, round,
        agent, question, answer, status, context hash, tokens, cost (read afresh)."""
        return read_tables(self._own_db(), ["interviews"])["interviews"]

    def _own_db(self) -> Path:
        """The run's own trajectory file (analyses and interviews are not inherited)."""
        if self.dir is None:
            raise InputError("a simulation held in memory keeps no analyses or interviews")
        return self.dir.db

    def prefix_reuse(self) -> pd.DataFrame:
        """Per round, the share of the LLM agents' prompt tokens equal to the start of
        their previous prompt (Shoal's measure, `rounds.prefix_reuse`) next to the share
        the server said it served from its prefix cache (`cached_tokens` of the requests
        that reported it; NaN where none did)."""
        calls = self._read("llm_calls", "agent IS NOT NULL")
        ours = self.rounds.set_index("round").get("prefix_reuse")
        if calls.empty:
            return pd.DataFrame({"round": pd.Series(dtype="int64"),
                                 "shoal": pd.Series(dtype=float),
                                 "server": pd.Series(dtype=float)})
        told = calls[calls["cached_tokens"].notna()]
        server = (told.groupby("round")["cached_tokens"].sum()
                  / told.groupby("round")["prompt_tokens"].sum())
        out = pd.DataFrame({"shoal": ours, "server": server}).rename_axis("round")
        return out.loc[sorted(set(calls["round"]))].reset_index()

    @property
    def rounds(self) -> pd.DataFrame:
        """One row per completed round: counts and timings (docs/store.md)."""
        self.last_round  # noqa: B018  (reads and pins `rounds`)
        return self._cache["rounds"]

    @property
    def posts(self) -> pd.DataFrame:
        """One row per post (posts, replies, reposts, quotes, comments, events) with the
        counts of the `post_stats` view, computed on this snapshot: up and down (seeded
        votes included), shares (reposts and quotes of it), replies; and one column
        `stance_<topic>` per topic (NaN where the post does not address it)."""
        return self._cached("posts", self._posts)

    @property
    def _platforms(self) -> tuple[str, ...]:
        return tuple(self._cached("platforms", lambda: list(self.config.get("platforms")
                                                            or {})))

    def _cached(self, key: str, read: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = read()
        return self._cache[key]

    def _read(self, table: str, where: str | None = None) -> pd.DataFrame:
        """A table through the lineage; an empty typed frame if the run has no such table."""
        try:
            df = (self.live.read(table, where) if self.live
                  else read_table(self._run_dir.root, table, where))
        except MissingTableError as exc:  # added to the store after this run was made
            df = _empty(table, self._platforms, exc.tables)
        except duckdb.CatalogException:
            df = _empty(table, self._platforms)
        return _plain(df, table, self._platforms)

    def _columns(self, table: str) -> list[str]:
        """A table's columns: as this process declares it, else as the run's file does (a
        plug-in's table, read without the plug-in)."""
        frames = _schema_frames(self._platforms)
        if table in frames:
            return list(frames[table].columns)
        return list(self._cached(f"columns:{table}", lambda: self._read(table, "false")).columns)

    def _snapshot(self, table: str) -> pd.DataFrame:
        """A table cut at `last_round` (rows of later rounds of a running run dropped)."""
        if table == "rounds":
            return self.rounds
        last = self.last_round
        spec = TABLES.get(table)  # (a post's round is its `round`; its key is its id)
        key = spec.round_key if spec is not None and spec.round_key else "round"
        where = f"{key} <= {last}" if key in self._columns(table) else None
        df = self._read(table, where)
        if table == "posts":
            df = df[~df["post_id"].isin(self._injected_after(last))].reset_index(drop=True)
        elif table == "post_stances":
            df = df[df["post_id"].isin(self.table("posts")["post_id"])]
            df = df.reset_index(drop=True)
        return df

    def _injected_after(self, last: int) -> list[int]:
        """Posts injected by interventions of rounds after `last` (they are stamped with
        the round before theirs, so `round <= last` alone would let them in)."""
        later = self._read("interventions", f"round > {last}")
        return [int(i) for effect in later["effect"] if isinstance(effect, dict)
                for i in _as_list(effect.get("post_ids"))]

    def _posts(self) -> pd.DataFrame:
        """posts + post_stats counts + per-topic stance columns."""
        posts = self.table("posts")
        actions = self.actions
        ok = actions[actions["status"] == "ok"]

        def count(kinds: tuple[str, ...]) -> pd.Series:
            hits = ok[ok["action"].isin(kinds)]
            return posts["post_id"].map(hits.groupby("target_post").size()).fillna(0)

        shared = posts[posts["kind"].isin(metrics.SHARE_KINDS)].groupby("parent_id").size()
        out = posts.assign(
            up=posts["seed_up"] + count(metrics.UP_ACTIONS).astype("int64"),
            down=posts["seed_down"] + count(metrics.DOWN_ACTIONS).astype("int64"),
            shares=posts["post_id"].map(shared).fillna(0).astype("int64"),
            replies=count(metrics.REPLY_ACTIONS).astype("int64"))
        stances = self.table("post_stances").pivot(index="post_id", columns="topic",
                                                   values="stance")
        for topic in dict.fromkeys([*self.topics, *stances.columns]):
            column = stances[topic] if topic in stances.columns else pd.Series(dtype=float)
            out[f"stance_{topic}"] = out["post_id"].map(column).astype(float)
        return out

    # ------------------------------------------------------------- metrics

    def belief_stats(self) -> pd.DataFrame:
        """Per round and topic: n, mean, var, sd of positions (`metrics.belief_stats`)."""
        return metrics.belief_stats(self.beliefs)

    def polarization(self, alpha: float = 1.6, bins: int = 5) -> pd.DataFrame:
        """Per round and topic: sd, bimodality coefficient, Esteban–Ray, distance between
        the means of those against and for (`metrics.polarization`)."""
        if not isinstance(bins, int) or isinstance(bins, bool) or bins < 1:
            raise InputError(f"bins={bins!r}: the number of bins, a whole number >= 1")
        if not isinstance(alpha, numbers.Real) or isinstance(alpha, bool) or alpha < 0:
            raise InputError(f"alpha={alpha!r}: Esteban–Ray's sensitivity, a number >= 0 "
                             "(1.6 at most for their axioms)")
        return metrics.polarization(self.beliefs, alpha=alpha, bins=bins)

    def group_distance(self, groups: str | Any | None = None) -> pd.DataFrame:
        """Distance between two groups' mean positions per round and topic; `groups`:
        None (by sign), an `agents` column such as `group_name` (exactly two values), or a
        mapping agent → label (`metrics.group_mean_distance`)."""
        beliefs = self.beliefs
        if isinstance(groups, str) and groups not in beliefs.columns:
            agents = self.agents
            if groups not in agents.columns:
                raise InputError(f"groups={groups!r}: not a column of agents; columns: "
                                 f"{', '.join(agents.columns)}")
            labels = agents.set_index("agent_id")[groups]
            values = sorted(map(str, labels.dropna().unique()))
            if len(values) != 2:
                raise InputError(f"groups={groups!r}: the column has {len(values)} values "
                                 f"({', '.join(values)}); give a column with exactly two, "
                                 "or a mapping agent → one of two labels")
            groups = labels[labels.notna()]
            beliefs = beliefs[beliefs["agent"].isin(groups.index)]
        return metrics.group_mean_distance(beliefs, groups)

    def echo_chambers(self, rounds: int | Iterable[int] | None = None,
                      platform: str | None = None) -> pd.DataFrame:
        """Follower–followee stance correlation per round and topic
        (`metrics.follower_followee_correlation`)."""
        platforms = list(self.config["platforms"])
        if platform is not None and platform not in platforms:
            raise InputError(f"platform={platform!r}: not a platform of this run; "
                             f"platforms: {', '.join(platforms)}")
        if rounds is not None:
            rounds = _rounds_arg(rounds, self.last_round)
        return metrics.follower_followee_correlation(self.beliefs, self.follows, rounds,
                                                     platform)

    def like_minded_share(self, threshold: float | None = None,
                          by: str | Sequence[str] = ("round", "topic")) -> pd.DataFrame:
        """Share of exposures whose author is like-minded (`metrics.like_minded_share`);
        `by`: any of round, agent, topic, platform (one name or several)."""
        keys = (by,) if isinstance(by, str) else tuple(by)
        if not keys or not set(keys) <= set(LIKE_MINDED_BY):
            raise InputError(f"by={by!r}: group by any of {', '.join(LIKE_MINDED_BY)}")
        return metrics.like_minded_share(self.exposures, self.posts, self.beliefs,
                                         threshold=threshold, by=keys)

    def cascades(self, kinds: str | Iterable[str] | None = None,
                 min_size: int = 1) -> pd.DataFrame:
        """Per root post: size, users, depth, max breadth, structural virality
        (`metrics.cascades`); `kinds`: the post kinds kept below the roots (one or
        several), e.g. "repost"."""
        return metrics.cascades(self.posts, kinds=_kinds_arg(kinds), min_size=min_size)

    def cascade_growth(self, top: int = 5, roots: Iterable[int] | None = None,
                       kinds: str | Iterable[str] | None = None) -> pd.DataFrame:
        """Cascade size per round for the `top` largest cascades (or `roots`)."""
        if not isinstance(top, numbers.Integral) or isinstance(top, bool) or top < 0:
            raise InputError(f"top={top!r}: how many of the largest cascades, a whole "
                             "number >= 0")
        return metrics.cascade_growth(self.posts, roots=roots, top=int(top),
                                      kinds=_kinds_arg(kinds))

    def treated_posts(self) -> list[int]:
        """Ids of the posts injected by interventions (`post`, `posts` kinds)."""
        iv = self.interventions
        return [int(i) for kind, effect in zip(iv["kind"], iv["effect"], strict=True)
                if kind in ("post", "posts") and isinstance(effect, dict)
                for i in _as_list(effect.get("post_ids"))]

    def herd_effect(self, post_ids: Iterable[int] | None = None,
                    confidence: float = 0.95) -> pd.DataFrame:
        """Final score by initial-vote arm (`metrics.herd_effect`) of `post_ids`, default
        the posts injected by interventions (empty if there are none)."""
        if not isinstance(confidence, numbers.Real) or not 0 < confidence < 1:
            raise InputError(f"confidence={confidence!r}: the interval's level, a number "
                             "between 0 and 1 (e.g. 0.95)")
        ids = self.treated_posts() if post_ids is None else list(post_ids)
        return metrics.herd_effect(self.posts, post_ids=ids, confidence=confidence)

    def engagement(self) -> pd.DataFrame:
        """Engagement received per agent, every agent included
        (`metrics.engagement_received`)."""
        return metrics.engagement_received(self.posts, self.agents["agent_id"])

    def engagement_gini(self) -> float:
        """Gini coefficient of the engagement received per agent (`metrics.gini`)."""
        return metrics.gini(self.engagement()["engagement"])

    def fidelity(self) -> Fidelity | None:
        """How faithfully the LLM agents played their part: their posts' stances against
        their beliefs and their persona's side, repeated and degenerate text, refusals and
        fallbacks, per run (the attributes), per round (`.by_round`), per agent
        (`.by_agent`) and per post (`.flagged`); None for a run without LLM turns
        (`shoal.analysis.fidelity`, docs/llm.md#fidelity)."""
        from shoal.analysis.fidelity import fidelity

        return self._cached("fidelity", lambda: fidelity(self))

    # ------------------------------------------------------------- plots

    def plot_beliefs(self, path: str | Path | None = None, bins: int = 40) -> Figure:
        """Belief distribution over rounds, one heatmap per topic (`plots`)."""
        from shoal.analysis import plots

        return plots.belief_distribution(self.beliefs, bins=bins, path=path,
                                         title=self.run_id)

    def plot_polarization(self, path: str | Path | None = None) -> Figure:
        """Polarization measures over rounds, one line per topic (`plots`)."""
        from shoal.analysis import plots

        return plots.polarization_over_time(self.polarization(), path=path,
                                            title=self.run_id)

    def plot_cascades(self, top: int = 5, path: str | Path | None = None) -> Figure:
        """Growth of the `top` largest cascades over rounds (`plots`)."""
        from shoal.analysis import plots

        return plots.cascade_growth(self.cascade_growth(top=top), path=path,
                                    title=self.run_id)


def _segment_dir(segment: Segment) -> RunDir:
    """The run directory of a lineage segment (the run a `LiveRun` writes is no segment of
    its `ancestors`, so each of them has one)."""
    assert segment.dir is not None  # only a LiveRun's own segment has none
    return segment.dir


def _as_list(value: Any) -> list[Any]:
    """post_ids of an effect: a list, or a mapping platform → id (events)."""
    if value is None:
        return []
    if isinstance(value, dict):
        return list(value.values())
    return list(value)


class Runs(Frames):
    """Several runs read together: every frame is the runs' frames concatenated, with a
    `run` column first (the run's label: its id unless labels were given). Metrics compute
    per run. Index by position or label to get one `Run`."""

    # Generated below from FRAMES and METRICS: each frame property concatenates the runs'
    # frames; each metric method concatenates the runs' results.
    rounds: pd.DataFrame
    posts: pd.DataFrame
    belief_stats: Callable[..., pd.DataFrame]
    polarization: Callable[..., pd.DataFrame]
    group_distance: Callable[..., pd.DataFrame]
    echo_chambers: Callable[..., pd.DataFrame]
    like_minded_share: Callable[..., pd.DataFrame]
    cascades: Callable[..., pd.DataFrame]
    cascade_growth: Callable[..., pd.DataFrame]
    herd_effect: Callable[..., pd.DataFrame]
    engagement: Callable[..., pd.DataFrame]
    engagement_gini: Callable[..., pd.Series]

    def __init__(self, runs: Sequence[Run], labels: Sequence[str] | None = None):
        self.runs = list(runs)
        self.labels = [r.run_id for r in self.runs] if labels is None else list(labels)
        if len(self.labels) != len(self.runs):
            raise InputError(f"{len(self.labels)} labels for {len(self.runs)} runs")
        if len(set(self.labels)) != len(self.labels):
            raise InputError("runs must have distinct labels (pass labels=[...])")

    def __repr__(self) -> str:
        return f"<Runs {', '.join(self.labels)}>"

    def __len__(self) -> int:
        return len(self.runs)

    def __iter__(self) -> Iterator[Run]:
        return iter(self.runs)

    def __getitem__(self, key: int | str) -> Run:
        if isinstance(key, str) and key not in self.labels:
            raise KeyError(f"no run labelled {key!r}; labels: {', '.join(self.labels)}")
        if isinstance(key, int) and not -len(self.runs) <= key < len(self.runs):
            raise IndexError(f"run {key}: there are {len(self.runs)} runs (0.."
                             f"{len(self.runs) - 1})")
        return self.runs[key if isinstance(key, int) else self.labels.index(key)]

    @property
    def run_ids(self) -> list[str]:
        """The runs' ids, in order."""
        return [r.run_id for r in self.runs]

    @property
    def config(self) -> dict[str, dict[str, Any]]:
        """Each run's resolved config, by label."""
        return {label: r.config for label, r in zip(self.labels, self.runs, strict=True)}

    @property
    def topics(self) -> list[str]:
        """The topics of all runs, in order of first appearance."""
        return list(dict.fromkeys(t for r in self.runs for t in r.topics))

    @property
    def lineage(self) -> pd.DataFrame:
        """Each run's lineage (`Run.lineage`) with a run column."""
        return self._concat(lambda r: r.lineage)

    def refresh(self) -> Runs:
        """Forget every run's cached frames."""
        for r in self.runs:
            r.refresh()
        return self

    def table(self, name: str) -> pd.DataFrame:
        """`Run.table` of every run, concatenated, with a run column."""
        return self._concat(lambda r: r.table(name))

    def _concat(self, get: Callable[[Run], pd.DataFrame]) -> pd.DataFrame:
        """`get` of every run, concatenated, with the run's label as a first column."""
        return _with_run(self.labels, [get(r) for r in self.runs])

    def _each(self, method: str, *args: Any, **kwargs: Any) -> pd.DataFrame | pd.Series:
        """A Run method per run: frames concatenated with a run column, numbers as a
        Series by label."""
        values = [getattr(r, method)(*args, **kwargs) for r in self.runs]
        if all(isinstance(v, pd.DataFrame) for v in values):
            return _with_run(self.labels, values)
        return pd.Series(values, index=pd.Index(self.labels, name="run"), name=method)

    def fidelity(self) -> pd.DataFrame:
        """`Run.fidelity` of every run as one row of numbers (`Fidelity.summary`), with a
        run column first; a run without LLM turns has no row."""
        rows = [{"run": label, **f.summary()} for label, r in zip(self.labels, self.runs,
                                                                  strict=True)
                if (f := r.fidelity()) is not None]
        out = pd.DataFrame(rows) if rows else pd.DataFrame(columns=["run"])
        reasons = [c for c in out.columns if c.startswith("fallback_") and c != "fallback_rate"]
        return out.fillna({c: 0.0 for c in reasons})  # a reason a run never fell back for

    # ------------------------------------------------------------- plots

    def plot_comparison(self, path: str | Path | None = None,
                        topics: Sequence[str] | None = None) -> Figure:
        """Per topic, each run's mean ± sd over rounds; dashed lines at fork rounds."""
        from shoal.analysis import plots

        forks = {label: r.fork_rounds for label, r in zip(self.labels, self.runs,
                                                          strict=True)}
        return plots.compare_runs(self.beliefs, fork_rounds=forks, topics=topics, path=path)


def _with_run(labels: Sequence[str], frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Frames concatenated, each with its label in a first `run` column."""
    labelled = [f.assign(run=label)[["run", *[c for c in f.columns if c != "run"]]]
                for label, f in zip(labels, frames, strict=True)]
    return pd.concat(labelled, ignore_index=True)


def _frame_property(name: str) -> property:
    def get(self: Runs) -> pd.DataFrame:
        return self._concat(lambda r: getattr(r, name))
    get.__doc__ = f"Every run's `{name}`, concatenated, with a run column first."
    return property(get)


def _metric_method(name: str) -> Callable[..., Any]:
    def method(self: Runs, *args: Any, **kwargs: Any) -> pd.DataFrame | pd.Series:
        return self._each(name, *args, **kwargs)
    method.__name__ = name
    method.__doc__ = (f"`Run.{name}` of every run: frames concatenated with a run column, "
                      "numbers as a Series by run.")
    return method


def _table_property(spec: TableSpec) -> property:
    def get(self: Run) -> pd.DataFrame:
        return self.table(spec.name)
    get.__doc__ = spec.doc
    return property(get)


for _spec in TABLES:
    if _spec.frame and _spec.name not in vars(Run):  # (`rounds`, `posts`: computed)
        setattr(Run, _spec.name, _table_property(_spec))
for _name in FRAMES:
    setattr(Runs, _name, _frame_property(_name))
for _name in METRICS:
    setattr(Runs, _name, _metric_method(_name))


LIKE_MINDED_BY = ("round", "agent", "topic", "platform")


def _kinds_arg(kinds: str | Iterable[str] | None) -> list[str] | None:
    """Post kinds to keep in a cascade (None: all), checked: one kind or several."""
    if kinds is None:
        return None
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    unknown = [k for k in kinds if k not in KIND_ENUM]
    if unknown:
        raise InputError(f"kinds={kinds!r}: {', '.join(map(repr, unknown))} is not a post "
                         f"kind; kinds: {', '.join(KIND_ENUM)}")
    return kinds


def _rounds_arg(rounds: int | Iterable[int], last: int) -> list[int]:
    """Rounds of the run's history (one or several), checked against 0..`last`."""
    given: list[Any] = list(rounds) if isinstance(rounds, Iterable) else [rounds]
    bad = [r for r in given if not isinstance(r, numbers.Integral) or isinstance(r, bool)
           or not 0 <= int(r) <= last]
    if bad:
        raise InputError(f"rounds={rounds!r}: {', '.join(map(repr, bad))} is not a round of "
                         f"this run; it has rounds 0..{last}")
    return [int(r) for r in given]


def _round_arg(name: str, value: int | None) -> int | None:
    """A round argument (None: now), checked: a whole number >= 0."""
    if value is None:
        return None
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0:
        raise InputError(f"{name}={value!r}: a round, a whole number >= 0")
    return int(value)
