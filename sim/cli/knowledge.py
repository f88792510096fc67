"""`shoal init BRIEF` and `shoal graph …`: graph memory from the command line
(docs/graph.md)."""

from __future__ import annotations

import argparse
import fcntl
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from shoal.cli.console import console, print_whole
from shoal.core.errors import InputError, ProviderDown

ROUND_MAX = 2**31 - 1  # rounds are int32 in the graph's tables
SEED_LIMIT = 2**63  # seeds are int64 (config.yaml's `seed`)


def add_parsers(sub) -> None:
    """The `init` and `graph` commands."""
    p = sub.add_parser("init", help="read a brief (a document) into a knowledge graph and "
                                    "write a runnable scenario folder")
    p.add_argument("brief", help="the brief: text, Markdown or PDF, or a MiroShark preset "
                                 "template (JSON with a seed_document)")
    p.add_argument("--agents", type=int, help="population size (default: the preset's, or "
                                              "200)")
    p.add_argument("--out", help="scenario folder (default: ./<brief name>)")
    p.add_argument("--seed", type=int, default=0, help="seed of personas, stances, follows")
    p.add_argument("--rounds", type=int, help="rounds in config.yaml (default: the "
                                              "preset's; else from the time span the brief "
                                              "states, or 24)")
    p.add_argument("--force", action="store_true", help="write into a non-empty --out")
    p.add_argument("--language", metavar="TAG",
                   help="the agents' language, a BCP 47 tag such as zh or de (default: the "
                        "brief's: Chinese or Japanese when it is written in them, else en)")
    _extractor_flags(p)
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("graph", help="the knowledge graph of a run or a scenario")
    gsub = p.add_subparsers(dest="graph_command", required=True, metavar="ACTION")
    q = gsub.add_parser("add", help="read documents into a scenario folder's graph")
    q.add_argument("documents", nargs="+", help="text, Markdown or PDF files")
    q.add_argument("--into", required=True, metavar="FOLDER",
                   help="the scenario folder (one with a graph/, as `shoal init` makes)")
    q.add_argument("--new", action="store_true", help="start a new scenario graph in FOLDER "
                   "(which must not exist, or be empty)")
    _extractor_flags(q)
    q.set_defaults(func=cmd_graph_add)
    for name, help_ in (("relations", "the facts (visible ones; --withdrawn: all)"),
                        ("entities", "the entities and how many facts each is in"),
                        ("episodes", "the texts the graph was read from"),
                        ("communities", "the newest generation of communities (by --as-of)"),
                        ("search", "facts matching a query (BM25 + neighbourhood)"),
                        ("neighbourhood", "the facts around one entity"),
                        ("history", "a relation, its withdrawal, its endpoints' others")):
        q = gsub.add_parser(name, help=help_)
        q.add_argument("path", help="a run directory or a scenario folder")
        if name in ("search", "neighbourhood", "history"):
            q.add_argument("what", help={"search": "the query", "neighbourhood": "an "
                                         "entity's name", "history": "a relation id"}[name])
        q.add_argument("--as-of", type=int, help="as the graph was at the end of this round")
        q.add_argument("--limit", type=int, default=20, help="rows to show (default 20)")
        if name == "relations":
            q.add_argument("--withdrawn", action="store_true",
                           help="include withdrawn relations, with when and why")
        q.set_defaults(func=cmd_graph_show, action=name)


def _extractor_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--llm", metavar="URL", help="extract with this OpenAI-compatible "
                   "endpoint (`loopback`: Shoal's own test server) instead of offline")
    p.add_argument("--model", default="shoal-loopback", help="the model, with --llm")
    p.add_argument("--api-key-env", help="name of the variable holding the key, with --llm")


def _extractor(args: argparse.Namespace):
    """The offline extractor, or an LLM one for --llm that stops at a first call that
    fails (InputError naming the flag when --llm, --model or --api-key-env is not valid)."""
    from shoal.memory.knowledge.extract import OfflineExtractor

    if not args.llm:
        return OfflineExtractor()
    from pydantic import ValidationError

    from shoal.config.llm import ProviderConfig
    from shoal.config.loading import validation_problems
    from shoal.core.errors import ConfigError
    from shoal.memory.knowledge.llm_extractor import LLMExtractor

    data = {"name": "extractor", "base_urls": [args.llm], "model": args.model,
            "api_key_env": args.api_key_env, "temperature": 0.0, "max_tokens": 1500}
    try:
        provider = ProviderConfig(**data)
    except ValidationError as exc:
        flags = {("base_urls",): "--llm", ("model",): "--model",
                 ("api_key_env",): "--api-key-env"}
        # (the flag names the field: the provider's own field path would only confuse)
        problems = [re.sub(r"^(--[a-z-]+): [\w.]+: ", r"\1: ", p)
                    for p in validation_problems(exc, data, overrides=flags)]
        raise ConfigError(problems) from None
    return LLMExtractor(provider, stop_when_down=True)


@contextmanager
def _extracting(args: argparse.Namespace) -> Iterator:
    """The extractor of --llm (or the offline one) for the block, closed after it. An LLM
    endpoint whose first call fails stops the command before it writes anything: exit 2
    when the endpoint cannot be used as given (nothing listening, a refused key, a wrong
    model), 3 when trying later may do (a timeout, a rate limit, a server error). When
    some calls failed, a warning says how many and why."""
    from shoal.memory.knowledge.llm_extractor import ExtractorDown

    extractor = _extractor(args)
    try:
        yield extractor
    except ExtractorDown as exc:
        said = (f"--llm {args.llm}: "
                + ("no answer" if exc.status in ("unreachable", "timeout") else
                   "no usable answer") + f" ({exc.error}); nothing written")
        if exc.transient:
            raise ProviderDown(f"{said}; try again later") from None
        raise InputError(f"{said}. Is a server running there, and are this its base URL "
                         "(…/v1), model and key? (`shoal llm-check URL` probes one)"
                         ) from None
    finally:
        close = getattr(extractor, "close", None)
        if close is not None:
            close()
    report = getattr(extractor, "report", None)
    if report is not None:
        line = escape(f"extraction: {report()}")
        console.print(f"[yellow]warning[/]: {line}" if extractor.lost else line,
                      highlight=False)


def cmd_init(args: argparse.Namespace) -> int:
    """`shoal init BRIEF [--agents N] [--out DIR] [--seed S] [--llm URL]`."""
    from shoal.runs.scenario_init import (
        MAX_AGENTS,
        MAX_ROUNDS,
        InitOptions,
        init_scenario,
        read_brief,
    )

    brief = read_brief(Path(args.brief))  # checked before any call is made
    # (A flag given as 0 is given: `is not None`, never `or`.)
    agents, where = ((args.agents, "--agents") if args.agents is not None else
                     (brief.agents, "the preset's estimated_agents") if brief.agents else
                     (200, ""))
    rounds, said = ((args.rounds, "--rounds") if args.rounds is not None else
                    (brief.rounds, "the preset's estimated_rounds"))
    if not 2 <= agents <= MAX_AGENTS:
        raise InputError(f"{where} {agents}: a scenario needs 2 to {MAX_AGENTS:,} agents")
    if rounds is not None and not 1 <= rounds <= MAX_ROUNDS:
        raise InputError(f"{said} {rounds}: a scenario needs 1 to {MAX_ROUNDS:,} rounds")
    if args.seed < 0:  # (the config's `seed` takes the same range)
        raise InputError(f"--seed {args.seed}: must be >= 0")
    if args.seed >= SEED_LIMIT:
        raise InputError(f"--seed {args.seed}: must be < 2**63")
    language = None
    if args.language is not None:
        from shoal.core.language import check

        try:
            language = check(args.language)
        except ValueError as exc:
            raise InputError(f"--language: {exc}") from None
    with _extracting(args) as extractor:
        folder = init_scenario(args.brief, args.out, extractor,
                               InitOptions(agents=agents, seed=args.seed, rounds=rounds,
                                           language=language),
                               force=args.force)
    if (folder / "graph" / "llm_calls.parquet").exists():
        console.print(f"extraction's LLM calls: {folder / 'graph' / 'llm_calls.parquet'}",
                      markup=False, highlight=False)
    console.print(f"scenario → {folder}  (what came from which facts: "
                  f"{folder / 'SCENARIO.md'}); next: shoal run {folder / 'config.yaml'}",
                  markup=False, highlight=False)
    return 0


@contextmanager
def _scenario_lock(folder: Path) -> Iterator[None]:
    """Held while `graph add` reads and rewrites a scenario's graph: a second one at once
    is refused (it would write its graph over the first's, losing that addition). The
    kernel lets go of it if the process dies."""
    if not folder.is_dir():
        yield
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(f"--into {folder}: another `shoal graph add` is writing this "
                             "scenario's graph; run this one when it has finished") from None
        yield
    finally:
        os.close(fd)


def cmd_graph_add(args: argparse.Namespace) -> int:
    """`shoal graph add DOC... --into FOLDER`: documents into a scenario's graph."""
    with _scenario_lock(Path(args.into)):
        return _graph_add(args)


def _graph_add(args: argparse.Namespace) -> int:
    from shoal.memory.context import one_line
    from shoal.memory.knowledge.communities import detect
    from shoal.memory.knowledge.ingest import ingest_document
    from shoal.memory.knowledge.memory import stamp
    from shoal.memory.knowledge.model import TABLES, KnowledgeGraph
    from shoal.store.knowledge import (
        GRAPH_TABLES,
        SCENARIO_DIR,
        GraphReader,
        read_scenario_file,
        settle_scenario_graph,
        write_scenario_graph,
    )
    from shoal.world.knowledge import read_document

    folder = Path(args.into)
    if args.new and folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise InputError(f"--into {folder}: --new starts a scenario graph in a new or empty "
                         "folder, and this one " + ("is a file" if not folder.is_dir() else
                                                    "is not empty"))
    if folder.is_dir():
        settle_scenario_graph(folder)  # (a write a kill stopped: finished or undone)
    if not args.new and not (folder / SCENARIO_DIR).is_dir():
        # A typo must not become a new folder: a new graph is asked for by name.
        raise InputError(f"--into {folder}: not a scenario folder (no {SCENARIO_DIR}/ "
                         "there); make one with `shoal init BRIEF --out FOLDER`, or add "
                         "--new to start an empty graph there")
    graph = KnowledgeGraph()
    generation = 0
    if (folder / SCENARIO_DIR).is_dir():
        reader = GraphReader.of_scenario(folder)
        graph = KnowledgeGraph.from_tables({n: reader.arrow(n) for n in TABLES})
        communities = reader.arrow("graph_communities")
        generation = max(communities.column("generation").to_pylist() or [0])
        old = {n: reader.arrow(n) for n in GRAPH_TABLES if n not in TABLES}  # communities
    else:
        old = {}
    # All read first (nothing is written if one cannot be); a file's name is a source
    # name of the graph's facts, so it is made one line of text. Earlier LLM calls are
    # kept before this extraction's (read only when there are calls to add to them).
    texts = [(one_line(Path(d).name), read_document(d)) for d in args.documents]
    earlier = folder / SCENARIO_DIR / "llm_calls.parquet"
    kept = read_scenario_file(earlier).to_pylist() if args.llm and earlier.exists() else []
    with _extracting(args) as extractor:
        for name, text in texts:
            added = ingest_document(graph, name, text, extractor)
            console.print(f"{escape(name)}: {added['episodes']} episodes, {added['entities']} "
                          f"new entities, {added['relations']} relations", highlight=False)
        calls = getattr(extractor, "calls", None)
        rows = calls.drain(0) if calls is not None else []
    found = detect(graph, generation + 1, 0)
    tables = {n: stamp(t, 0) for n, t in graph.tables().items()}
    for n, t in found.tables().items():
        import pyarrow as pa

        new = stamp(t, 0)
        tables[n] = pa.concat_tables([old[n], new]) if n in old and len(old[n]) else new
    write_scenario_graph(folder, tables)
    if rows:  # the extraction's LLM calls, after any earlier ones
        from shoal.runs.scenario_init import write_calls

        write_calls(folder, kept + rows)
    console.print(f"graph → {folder / SCENARIO_DIR} ({graph.n_entities} entities, "
                  f"{graph.n_relations} relations, generation {generation + 1} of "
                  "communities)", markup=False, highlight=False)
    return 0


def cmd_graph_show(args: argparse.Namespace) -> int:
    """`shoal graph relations|entities|episodes|communities|search|neighbourhood|history`."""
    from shoal.store.knowledge import SCENARIO_DIR
    from shoal.store.lineage import graph_reader

    path = Path(args.path)
    if not path.exists():
        raise InputError(f"{path}: no such run directory or scenario folder")
    if path.is_dir() and not any((path / f).exists() for f in (
            SCENARIO_DIR, "run.json", "trajectory.duckdb")):
        raise InputError(f"{path}: neither a run directory nor a scenario folder (no "
                         f"{SCENARIO_DIR}/, run.json or trajectory.duckdb there)")
    if args.as_of is not None and not 0 <= args.as_of <= ROUND_MAX:
        raise InputError(f"--as-of {args.as_of}: a round, 0 to {ROUND_MAX:,}")
    if args.limit < 1:
        raise InputError(f"--limit {args.limit}: rows to show, at least 1")
    reader = graph_reader(path)
    a = args.action
    if a == "relations":
        frame = reader.relations(args.as_of, include_withdrawn=args.withdrawn)
        cols = ["relation_id", "subject", "predicate", "object", "kind", "source_id",
                "valid_from"] + (["invalid_at", "reason"] if args.withdrawn else [])
    elif a == "entities":
        frame, cols = reader.entities(args.as_of), ["entity_id", "name", "type", "relations"]
    elif a == "episodes":
        frame = reader.episodes(args.as_of)
        cols = ["episode_id", "kind", "source", "span_start", "span_end", "agent", "text"]
    elif a == "communities":
        frame = reader.communities(as_of=args.as_of)
        cols = ["generation", "community", "size", "summary"]
    elif a == "neighbourhood":
        frame = reader.neighbourhood(args.what, args.as_of)
        cols = ["relation_id", "subject", "predicate", "object", "kind", "source_id"]
    elif a == "history":
        try:
            rid = int(args.what)
        except ValueError:
            raise InputError(f"history: {args.what!r} is not a relation id") from None
        frame = reader.history(rid)
        if not len(frame):
            raise InputError(f"history: {path} has no relation {rid} (`shoal graph "
                             f"relations {path} --withdrawn` lists them)")
        cols = ["relation_id", "subject", "predicate", "object", "valid_from", "invalid_at",
                "reason"]
    else:
        frame, cols = _search(reader, args.what, args.as_of, args.limit), [
            "score", "relation_id", "subject", "predicate", "object", "kind", "source_id"]
    _print(frame, cols, args.limit, f"{a} ({len(frame)} rows)")
    return 0


def _search(reader, query: str, as_of: int | None, k: int):
    """BM25 over the graph rebuilt in memory (the same validity rule as every reader)."""
    from shoal.memory.knowledge.model import TABLES
    from shoal.memory.knowledge.retrieval import search_tables

    return search_tables({n: reader.arrow(n) for n in TABLES}, query, k, as_of)


def _missing(value) -> bool:
    import pandas as pd

    return value is None or (not isinstance(value, list | tuple) and bool(pd.isna(value)))


def _print(frame, cols: list[str], limit: int, title: str) -> None:
    table = Table(title=title, title_justify="left", box=None, padding=(0, 1))
    for c in cols:
        table.add_column(c, overflow="fold")
    for row in frame[cols].head(limit).itertuples(index=False):
        table.add_row(*(escape("" if _missing(v) else str(v))[:300] for v in row))
    print_whole(table)
