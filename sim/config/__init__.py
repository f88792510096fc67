"""The run configuration (docs/config.md): the `Config` model and how it is read.

    from shoal.config import load_config, parse_config
    cfg = load_config("configs/quickstart.yaml", ["population.size=500"])
"""

from shoal.config.loading import (
    apply_overrides,
    config_hash,
    load_config,
    parse_config,
    resolve_paths,
    resolved_dict,
    upgrade_saved,
    validation_problems,
)
from shoal.config.model import BeliefRule, Config, MemoryConfig, TopicSpec
from shoal.config.selector import Selector
from shoal.core.errors import ConfigError

__all__ = ["BeliefRule", "Config", "ConfigError", "MemoryConfig", "Selector", "TopicSpec",
           "apply_overrides", "config_hash", "load_config", "parse_config",
           "resolve_paths", "resolved_dict", "upgrade_saved", "validation_problems"]
