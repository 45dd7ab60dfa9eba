"""The GitHub edge and stage 2 (`bot publish`, the job holding the write token).

stage_two.py is the entry point; it reads the results artifact as untrusted data (untrusted,
rederive), takes where to publish from the event and the API (identity) and writes through
client.py and branches.py (the follow-up commit, under the rules of ownership.py), the only
modules importing PyGithub. events.py turns an event payload into a
`Trigger`, and actions_env.py reads the variables Actions sets for a step and the event they
point at (stage 1 reads both too).

PyGithub's own top-level package is also named `github`: imports here are absolute, so
`from github import Github` is PyGithub and this package is always `bot.github`.

Stage 2 imports this package, bot.report, bot.core and bot.config: no torch or triton (numpy
only in bootstrap.py, the vectorised re-derivation; it comes with matplotlib), nothing of
bot.engine, bot.harness, bot.sandbox or bot.propose (enforced by the import contracts in
pyproject.toml).
"""
