"""Graph memory: a temporal knowledge graph built from documents and the run's activity
(docs/graph.md)."""
