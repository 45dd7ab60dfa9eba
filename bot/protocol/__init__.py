"""What the bot and its workers share across the process boundary: the result channel and
the typed messages it carries (channel.py; messages.py and batches.py, built from typed.py),
the worker's side of one exchange (dispatch.py), and what both sides compute alike: the digests
and fingerprints a call commits to, and the rows an output's error is scaled by (measures.py).

Imported on both sides, so it depends on nothing else of the bot.
"""
