"""The engine: the bot's side of an evaluation, in the bot's own process.

Loads problems, asks the proposers for candidates, starts workers through bot.sandbox, judges
what they send (verify), times them with its own clock (timing, trials) and runs the loop and
the sweep (optimize, pipeline). Stage 1: it holds the secret seed and the reference outputs;
candidate code never runs here. Stage 2 (bot.github) never imports it.
"""
