"""Where each provider's calls go: its `base_urls`, with `loopback` standing for Shoal's
own loopback server, started here for whoever needs it (a run, an interview) and stopped
with it. Callers ask `Endpoints` for a provider's URLs and never special-case the
loopback server themselves."""

from __future__ import annotations

from shoal.config.llm import LLMConfig, ProviderConfig

LOOPBACK = "loopback"


class Endpoints:
    """The resolved base URLs of a set of providers; loopback servers are started on first
    use (one per provider, with that provider's faults) and stopped by `stop`."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self._servers: dict[str, object] = {}

    def urls(self, provider: ProviderConfig) -> list[str]:
        """The provider's base URLs, `loopback` replaced by a running server's URL."""
        if LOOPBACK not in provider.base_urls:
            return list(provider.base_urls)
        server = self._servers.get(provider.name)
        if server is None:
            from shoal.llm.server import Faults, LoopbackProcess

            server = LoopbackProcess(self.seed, Faults(**provider.loopback.model_dump()))
            self._servers[provider.name] = server
        return [server.url if u == LOOPBACK else u for u in provider.base_urls]

    @property
    def started(self) -> list[str]:
        """The providers whose loopback server was started here (and still runs)."""
        return list(self._servers)

    def all(self, llm: LLMConfig | None) -> dict[str, list[str]]:
        """Every provider's URLs, by provider name."""
        return {p.name: self.urls(p) for p in (llm.providers if llm else [])}

    def stop(self) -> None:
        """Stop the loopback servers started here."""
        for server in self._servers.values():
            server.stop()
        self._servers.clear()
