"""The alternation engine: WhaleOptimizer, its configuration (`WhaleConfig`, presets, `auto`),
schedules, budget, checkpointed state, methods and reports."""
