"""Issue 32: isaacd asks a pip-installed Isaac Lab's version of the job's own Python (workflows/installed.py) while
planning a launch, in the supervisor (root). A non-admin names that launcher, so it runs as the job's owner, with none
of the supervisor's environment (which may hold the backup's credentials). A real Unix user made here (useradd,
removed after) and a real launcher script that answers with what it runs as."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from isaacd.config.users import user_by_name
from isaacd.workflows import installed

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="needs root and useradd: the test makes a real Unix user")


def test_a_users_launcher_is_probed_as_that_user_without_the_supervisors_environment(monkeypatch):
    name = f"i32p{uuid.uuid4().hex[:8]}"
    d = Path(tempfile.mkdtemp(prefix="isaacd-i32p-", dir="/tmp"))
    subprocess.run(["useradd", "-M", "-d", "/nonexistent", "-s", "/usr/sbin/nologin", "-U", name], check=True,
                   capture_output=True)
    try:
        d.chmod(0o755)
        launcher = d / "python"  # answers the probe with its uid, gid and whether it sees the secret
        launcher.write_text('#!/bin/sh\necho "isaaclab=$(id -u).$(id -g).${AWS_SECRET_ACCESS_KEY:-none}"\n')
        launcher.chmod(0o755)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "supervisor-secret")
        installed.forget()
        user = user_by_name(name)
        assert installed.installed_isaaclab([str(launcher)], name) == f"{user.uid}.{user.gid}.none"
        assert installed.installed_isaaclab([str(launcher)], None) == "0.0.supervisor-secret"  # the host's own job
        with pytest.raises(installed.WorkflowError, match="is no user on this host"):
            installed.installed_isaaclab([str(launcher)], f"{name}x")
    finally:
        installed.forget()
        subprocess.run(["userdel", name], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)
