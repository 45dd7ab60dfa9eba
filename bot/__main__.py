"""`python -m bot` is the `bot` console script (used on machines without an install)."""

from bot.cli.main import main

if __name__ == "__main__":
    main()
