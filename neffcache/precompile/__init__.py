"""Pre-compile a matrix: warm each cell in a worker process, publish what it compiled as an entry.

Modules, bottom to top (each imports only those before it here; see ARCHITECTURE.md):
``hit_check`` did a warm-up compile? · ``capture`` the files of an entry · ``worker`` the
subprocess · ``launch`` start it · ``packing``, ``intents`` and ``publish`` write an entry into
a store (``intents``: the pending/ notes that keep gc off a publish in progress) ·
``plan`` which cells to warm · ``warm`` first call against restored caches · ``run`` the whole
precompile · ``backfill`` publish what an instance compiled · ``claims`` cells from the index.
"""
