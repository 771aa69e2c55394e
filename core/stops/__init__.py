"""What stops work and how the operator answers: problems, replies, holds, budgets, quota, model
policy and the automatic-retry rules.

Depends one way, bottom first: `replies` and `fingerprint` (stdlib only) → `problems` (open, answer,
consume) → `budgets` → `holds`; `quota` → `availability`, `policy`. `rules` is pure decisions over
a verdict, a gate result or a review. Nothing here imports the supervisor.
"""
