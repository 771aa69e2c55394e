"""Commands of the dispatch engine: one worker run at a time, providers, keys, the runners' CLIs,
the simulator, confinement and housekeeping. Job commands live one level up."""
