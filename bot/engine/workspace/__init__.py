"""What the bot works on, read without running it: problem files, candidate files, the
problems a change touches, and the device a job runs on with its memory shared between problems.
"""
