"""The command line, the one entry point of the bot: the `bot` group and its commands (main), the
commands run on a repository (repo) and stage 1 of the Action (stage_one), the options and the
`Settings` they become (options), the engine's option objects built from those settings
(engine_options), and what a command shows while and after it works (output, progress_view).
"""
