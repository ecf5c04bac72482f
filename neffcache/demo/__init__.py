"""``neffcache demo``: ``run_demo(DemoRequest) -> DemoResult``; imports nothing heavy."""

from neffcache.demo.runner import DemoCell, DemoRequest, DemoResult, run_demo

__all__ = ["DemoCell", "DemoRequest", "DemoResult", "run_demo"]
