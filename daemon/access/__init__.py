"""Many people on one server (issue 32): who the caller is, what they may do to whose job, and what a user who is no
admin may ask for. docs/security.md."""
