"""The parent's side of its sandboxed workers: the client that sends requests with timeouts and
watches memory, how a worker's failure reads, the GPU lock between timing and everything else,
and the parent's clock of the phases a problem's wall time goes to.
"""
