"""What happens to entries after publish: verify, retire, gc, copy between stores, bundles.

Modules: ``entry_select`` which entries · ``bundle`` the bundle format · ``verify`` and
``verify_local`` integrity of a store and of a restored tree · ``retire`` by policy · ``gc``
unreferenced blobs · ``copy`` between stores · ``bundle_store`` and ``bundle_write``.
"""
