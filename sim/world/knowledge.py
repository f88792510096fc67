"""The run's graph memory at round 0: the scenario's graph (its documents, read by
`shoal init` or `shoal graph add`), the documents the config lists, and the topics as
entities (docs/graph.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shoal.config import Config
from shoal.core.errors import InputError
from shoal.core.registry import EXTRACTORS
from shoal.core.state import State

# The graph modules are imported by the functions that use them: a run without graph
# memory (most runs) does not pay for compiling the extractor's patterns.


def topic_names(cfg: Config) -> Any:
    """How the config's topics appear in text (a `TopicNames`)."""
    from shoal.memory.knowledge.ingest import TopicNames

    return TopicNames([t.name for t in cfg.topics], [t.label or t.name for t in cfg.topics],
                      [list(t.keywords) for t in cfg.topics])


def make_extractor(cfg: Config, outputs: dict[str, str] | None = None) -> Any:
    """The extractor `memory.graph.extractor` names, asking in the output modes the run
    resolved (`outputs`, of its `output: auto` providers)."""
    extractor = EXTRACTORS.create(cfg.memory.graph.extractor, cfg.llm)
    use_outputs(extractor, outputs or {})
    return extractor


def use_outputs(extractor: Any, outputs: dict[str, str]) -> None:
    """Have an extractor that asks a chat model (one with `outputs`: the LLM extractor)
    ask in the modes the run resolved, as its agents do: a model found to have no tool
    calls is asked for JSON."""
    if hasattr(extractor, "outputs"):
        extractor.outputs = dict(outputs)


def empty_graph_memory(cfg: Config, outputs: dict[str, str] | None = None) -> Any:
    """The run's `GraphMemory`, with no rows (None when the config has none); `outputs`:
    the run's resolved output modes (its extractor asks in them)."""
    if not cfg.memory.graph.enabled:
        return None
    from shoal.memory.knowledge.memory import GraphMemory

    return GraphMemory(topic_names(cfg), make_extractor(cfg, outputs), seed=cfg.seed)


def build_graph_memory(cfg: Config, outputs: dict[str, str] | None = None) -> Any:
    """Round 0: the scenario's graph, then the config's documents (read by an extractor
    asking in the run's resolved output modes, `outputs`), then the topics."""
    memory = empty_graph_memory(cfg, outputs)
    if memory is None:
        return None
    from shoal.memory.context import one_line
    from shoal.memory.knowledge.ingest import ingest_document

    g = cfg.memory.graph
    if g.scenario is not None:
        memory.graph.replay([State(tables=scenario_tables(g.scenario))])
        memory.graph.mark_new()
    for doc in g.documents:  # (a file's name is its facts' source name: one line of text)
        ingest_document(memory.graph, one_line(Path(doc).name), read_document(doc),
                        memory.extractor, memory.topics)
    memory.topics.entities(memory.graph)
    return memory


def scenario_tables(folder: str) -> dict:
    """The `graph/` tables of a scenario folder, as Arrow tables."""
    root = Path(folder)
    if not (root / "graph").is_dir():
        raise InputError(f"memory.graph.scenario: {folder}: no graph/ folder (make one with "
                         "`shoal init BRIEF` or `shoal graph add DOC --into FOLDER`)")
    from shoal.memory.knowledge.model import TABLES
    from shoal.store.knowledge import GraphReader

    reader = GraphReader.of_scenario(root)
    return {name: reader.arrow(name) for name in TABLES}


# The most text one document may hold: extraction keeps every sentence, chunk and
# mention of a document in memory at once (about 50 bytes per byte of text: a 47 MB file
# took 2.2 GB), so a larger one is refused before it is read, to be split into parts.
MAX_DOCUMENT_BYTES = 16 * 2**20


def read_document(path: str | Path) -> str:
    """A document's text: plain text or Markdown as it is, PDF through pypdf (page texts
    joined by blank lines). InputError naming the file when it cannot be read, or when
    its text is over `MAX_DOCUMENT_BYTES`."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: a folder, not a document (text, Markdown or PDF)")
    if not path.is_file():
        if path.is_symlink():
            raise InputError(f"{path}: a symbolic link that leads to no file (its target "
                             "is missing, or the links loop)")
        raise InputError(f"{path}: no such document" if not path.exists() else
                         f"{path}: not a regular file, so not a document (text, Markdown "
                         "or PDF)")
    text = _read_text(path)
    if len(text.encode("utf-8", "surrogatepass")) > MAX_DOCUMENT_BYTES:
        raise _too_large(path, "its text")
    return text


def _too_large(path: Path, what: str) -> InputError:
    return InputError(f"{path}: {what} is over {MAX_DOCUMENT_BYTES // 2**20} MB, more than "
                      "one document may hold (its extraction would need some 50 times "
                      "that in memory); split it into several documents and give each")


def _read_text(path: Path) -> str:
    """The text of the regular file `path`, by its kind."""
    if path.suffix.lower() != ".pdf" and path.stat().st_size > MAX_DOCUMENT_BYTES:
        raise _too_large(path, "the file")  # (not read at all)
    if path.suffix.lower() == ".pdf":
        try:
            from pypdf import PdfReader
            from pypdf.errors import LimitReachedError, PyPdfError
        except ImportError as exc:  # pragma: no cover - a declared dependency
            raise InputError(f"{path}: reading PDF needs pypdf ({exc})") from exc
        try:
            pages = [page.extract_text() or "" for page in PdfReader(str(path)).pages]
        except LimitReachedError as exc:  # a compression bomb, or a file built like one
            raise InputError(f"{path}: a PDF beyond pypdf's safety limits, not read "
                             f"({exc})") from None
        except (PyPdfError, OSError, ValueError, KeyError, TypeError, AttributeError,
                IndexError, RecursionError, UnicodeError) as exc:
            # A malformed file makes pypdf raise any of these: each means it cannot be read.
            raise InputError(f"{path}: not a readable PDF: {type(exc).__name__}: "
                             f"{exc}") from None
        return "\n\n".join(p.strip() for p in pages if p.strip())
    try:  # (a byte order mark some editors write is not the document's text)
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8, "
                         "or give a PDF") from None
    except OSError as exc:  # no permission to read it, say
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if "\x00" in text:  # (UTF-8 all the same: a binary file that happens to decode)
        raise InputError(f"{path}: not a text file (it holds NUL bytes); give a text, "
                         "Markdown or PDF document")
    return text
