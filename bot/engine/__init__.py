"""The engine: the bot's side of an evaluation, in the bot's own process.

Its rooms, each importing only those below it (an import contract in pyproject.toml): loop (the
search and LLM rounds, selection, the whole job), evaluation (one problem's contenders verified
and timed), timing (the parent's clock), verification (what "correct" means), and at the bottom
workers (the parent's handles on its sandboxed workers) and workspace (problems, candidates,
changes, the device). Stage 1: it holds the secret seed and the reference outputs; candidate code
never runs here. Stage 2 (bot.github) never imports it.
"""
