"""What the bot and its workers share across the process boundary: the result channel.

Imported on both sides, so it depends on nothing else of the bot.
"""
