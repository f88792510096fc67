"""The platforms agents act on, as specs (shoal.platforms.spec): a platform is its actions,
the kinds of post its feeds show, its labels and its config model. Shoal's own are the
microblog (twitter.py) and the forum (reddit.py); a plug-in registers more."""
