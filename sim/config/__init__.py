"""The run configuration (docs/config.md): the `Config` model and how it is read.

    from sim.config import load_config, parse_config
    cfg = load_config("configs/quickstart.yaml", ["population.size=500"])
"""

from sim.config.loading import (
    apply_overrides,
    config_hash,
    load_config,
    parse_config,
    resolve_paths,
    resolved_dict,
    upgrade_saved,
    validation_problems,
)
from sim.config.model import BeliefRule, Config, MemoryConfig, TopicSpec
from sim.config.selector import Selector
from sim.core.errors import ConfigError

__all__ = ["BeliefRule", "Config", "ConfigError", "MemoryConfig", "Selector", "TopicSpec",
           "apply_overrides", "config_hash", "load_config", "parse_config",
           "resolve_paths", "resolved_dict", "upgrade_saved", "validation_problems"]
