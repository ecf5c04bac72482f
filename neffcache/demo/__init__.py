"""The demo: a tiny locally built Flux2Klein pipeline, precompiled, restored as a fresh
instance would, and measured (``neffcache demo``).

Use case:

    run_demo(DemoRequest) -> DemoResult    compile once, boot a fresh instance warm, compare
                                           cold and restored first calls (exit 1 if anything
                                           compiled after restore)

Importing this package imports nothing heavy: torch and diffusers are imported only in the
worker processes and when the tiny pipeline is built.
"""

from neffcache.demo.runner import DemoCell, DemoRequest, DemoResult, run_demo

__all__ = ["DemoCell", "DemoRequest", "DemoResult", "run_demo"]
