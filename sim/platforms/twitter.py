"""The microblog: posts, reposts, quotes and replies in a timeline; likes; follows."""

from __future__ import annotations

from shoal.config.platforms import PlatformConfig
from shoal.core.posts import PostKind
from shoal.core.vocabulary import ActionType as A
from shoal.platforms.spec import PlatformSpec, register


class TwitterConfig(PlatformConfig):
    """The microblog's settings (defaults: a chronological feed of followed accounts)."""


TWITTER = register(PlatformSpec(
    name="twitter", code=0, label="Twitter",
    actions=(A.POST, A.REPOST, A.QUOTE, A.REPLY, A.LIKE, A.FOLLOW, A.UNFOLLOW, A.DO_NOTHING),
    engagements=(A.LIKE, A.REPOST, A.QUOTE, A.REPLY, A.FOLLOW, A.UNFOLLOW),
    feed_kinds=(PostKind.POST, PostKind.REPOST, PostKind.QUOTE, PostKind.REPLY),
    action_help=("post (write a new post)", "repost (share a post from your feed)",
                 "quote (share a post with your own comment)", "reply (answer a post)",
                 "like (like a post)", "follow (follow its author)",
                 "unfollow (stop following its author)", "do_nothing"),
    enabled_by_default=True,
), TwitterConfig)
