"""The loop around evaluations: the search and the LLM's rounds on one problem and the honest
selection of a best, the GPU lanes that run problems side by side, the whole job from a trigger
to a results folder, and what it writes.
"""
