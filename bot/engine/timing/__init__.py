"""Timing on the parent's own clock: contenders interleaved batch by batch, each batch's inputs
staged and its calls checked from outside, the harness's own cost measured and taken out, time a
worker hides counted back in, and futile contenders dropped early.
"""
