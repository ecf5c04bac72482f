"""The demo (``neffcache demo``): ``run_demo(DemoRequest) -> DemoResult`` compiles a tiny
Flux2Klein pipeline once, boots a fresh instance warm and compares cold and restored first
calls. Importing it imports nothing heavy (torch only in workers and to build the model).
"""

from neffcache.demo.runner import DemoCell, DemoRequest, DemoResult, run_demo

__all__ = ["DemoCell", "DemoRequest", "DemoResult", "run_demo"]
