"""Notifications: what others did to an agent since its last turn, grouped, then dropped."""

from __future__ import annotations

from shoal.memory.notifications import Notice, Notifications


def test_grouped_per_post_and_dropped_once_seen():
    n = Notifications(minutes_per_round=60)
    for who in ("ana", "bo", "cy", "di", "ed"):
        n.record(7, Notice(3, "twitter", "like", who, 12, "My post"))
    n.record(7, Notice(3, "twitter", "reply", "bo", 12, "I disagree", reply=40))
    n.record(7, Notice(4, "twitter", "follow", "fi", None, ""))
    n.record(7, Notice(4, "reddit", "upvote", "gu", 13, "Other post"))
    lines = [ln.text for ln in n.lines(7, "twitter", 5)]
    assert lines == [
        '- @bo replied to your post 12 (2h ago): "I disagree"',
        '- @ed, @di, @cy and 2 others liked your post 12: "My post"',
        "- new follower: @fi",
    ]
    assert [ln.text for ln in n.lines(7, "reddit", 5)] == [
        '- @gu upvoted your post 13: "Other post"']
    assert n.lines(7, "twitter", 4)[-1].text.startswith("- @ed, @di")  # round 4 not yet due
    n.seen(7, "twitter", 4)  # a turn in round 4 showed what happened before round 4
    assert [ln.text for ln in n.lines(7, "twitter", 5)] == ["- new follower: @fi"]
    restored = Notifications()
    restored.set_state(n.get_state())
    assert [ln.text for ln in restored.lines(7, "reddit", 5)] == [
        ln.text for ln in n.lines(7, "reddit", 5)]
