"""Caches that survive a trainer's restart: `compile_caches.py` Warp's and Kit's compile caches (per job or per
image); `sizes.py` their sizes, walked on a background thread at most once a minute.
"""
