"""What "correct" means, judged in the parent: the correctness trials on fresh secret-seeded
inputs, outputs compared by the rule each is held to (the tolerance policy), and the check list
from observations to a verdict.
"""
