"""One problem's evaluation: its options, the pool of workers that runs every contender, each
shape verified and timed, the cache of conclusive results, and what runs only under a simulator.
"""
