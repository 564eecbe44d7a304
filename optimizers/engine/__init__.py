"""The alternation engine: WhaleOptimizer, its schedules, budget, checkpointed state, methods and
reports, and the run configuration (`RunSettings`, presets, `auto`) every entry point resolves to."""
