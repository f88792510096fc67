"""The analyst: an LLM that writes a report on a run with tools over its data, every
sentence cited and verified, its whole trace kept (docs/analyst.md)."""
