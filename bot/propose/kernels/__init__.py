"""Replacement kernels for the search's catalogue: candidate code, kept here as files so that
linters and tests read them, and put into candidates as text (bot/propose/paths.py). The bot's
own process never imports them; replace.py comes first in a candidate, then the kernels."""
