"""The OS seam: the kernel calls the supervisor makes, behind fakes for the unit tests (tests/os_fakes.py).

`oscalls.py` every kernel call of the process runtime, the process-tree walk and the spare keeper;
`proctree.py` a process and its descendants, from /proc; `exitwatch.py` learns of a trainer's death at once.
"""
