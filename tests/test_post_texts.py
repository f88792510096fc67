"""Post texts in checkpoints and the `posts` table (shoal.core.posts, shoal.core.state):
encoded once a round through Arrow, the same bytes `str.encode` gives, and the round's
`posts` rows reuse the checkpoint's encoding only for exactly the posts it took."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from shoal.core.posts import NewPosts, PostKind, PostStore
from shoal.core.state import column_buffers, decode_texts, encode_texts, text_column

TEXTS = ["plain", "", "é ü — 😀", "a\x00b", "x" * 1000]


def _append(store: PostStore, texts: list[str], round_: int) -> np.ndarray:
    n = len(texts)
    return store.append(NewPosts(
        platform=np.zeros(n, np.int8), author=np.arange(n, dtype=np.int32),
        kind=np.full(n, PostKind.POST, np.int8), parent=np.full(n, -1, np.int64),
        stance=np.zeros((n, 1)), text=list(texts)), round_)


def test_texts_encode_to_their_utf8_bytes_and_back():
    blob, ends = encode_texts(TEXTS)
    assert blob.tobytes() == b"".join(t.encode("utf-8") for t in TEXTS)
    assert ends.tolist() == np.cumsum([len(t.encode("utf-8")) for t in TEXTS]).tolist()
    assert decode_texts(blob, ends) == TEXTS
    assert decode_texts(*encode_texts([])) == []


def test_buffers_of_a_slice_of_a_column_are_the_slice_s():
    column = text_column(TEXTS)
    blob, ends = column_buffers(column.slice(2, 2))
    assert decode_texts(blob, ends) == TEXTS[2:4]


def test_the_posts_rows_reuse_the_checkpoint_s_texts_only_for_its_posts():
    store = PostStore(n_topics=1, n_platforms=1)
    _append(store, ["old one", "old two"], 1)
    store.take_changes()
    ids = _append(store, TEXTS, 2)
    taken = store.take_changes()
    assert decode_texts(taken.arrays["text_blob"], taken.arrays["text_ends"]) == TEXTS
    column = store.text_column(ids)
    assert column is store._taken_texts[1]  # the same column, not encoded again
    assert column.to_pylist() == TEXTS
    # other ids: encoded now, right
    assert store.text_column(ids[1:3]).to_pylist() == TEXTS[1:3]
    assert store.text_column(np.array([0, 3, 1])).to_pylist() == ["old one", TEXTS[1],
                                                                  "old two"]
    assert store.text_column(np.empty(0, np.int64)).to_pylist() == []
    # a store given another state forgets the encoding it took
    other = PostStore(n_topics=1, n_platforms=1)
    _append(other, ["a", "b", "c", "d", "e", "f", "g"], 1)
    store.set_state(other.get_state())
    assert store.text_column(ids).to_pylist() == ["c", "d", "e", "f", "g"]
    assert pa.types.is_large_string(store.text_column(ids).type)
