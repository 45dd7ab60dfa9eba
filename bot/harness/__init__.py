"""The harness: everything that runs inside the sandboxed worker process.

Trust rule: every module here runs in the candidate's process, after the candidate's code is
imported, so at run time it is the candidate's. A candidate can rebind anything in it
(`sys.modules["bot.harness.shared"].perf_ns`, `Harness` methods), so nothing the harness
reports is trusted without a check from outside the worker: the parent's own clock around
each timed call (bot.engine.timing.interleaved, bot.engine.timing.hidden), outputs compared with a reference
computed in another process, threads counted by the kernel (bot.engine.workers.client).

It imports only bot.core and bot.protocol besides the standard library, torch, numpy and
triton; never the engine, the sandbox, the GitHub edge or the proposers (enforced by the
import contracts in pyproject.toml). Workers start it as `bot.harness.worker`.
"""
